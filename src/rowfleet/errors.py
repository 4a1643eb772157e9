"""The exception family, chosen by what the caller does next.

Driver exceptions (``sqlite3.*``, later ``psycopg.*``) are translated into these at the
storage seam; nothing above it catches a driver's exception. A leaf: imports nothing of rowfleet.
"""

from typing import Any


class RowfleetError(Exception):
    """Something rowfleet could not do; the message says what and what to do next."""


class ConfigError(RowfleetError):
    """A setting, flag or argument is invalid: fix the input and run again."""


class NotFound(RowfleetError):
    """The job (or other row) named does not exist in this project."""


class Conflict(RowfleetError):
    """The row exists but is in a state that does not allow the request."""


class JobFailed(RowfleetError):
    """A job waited for (``rowfleet.wait``) ended failed or cancelled: ``job`` is its row,
    and the message carries its last error."""

    def __init__(self, job: Any) -> None:
        self.job = job
        super().__init__(f"job {job.id} {job.state}: {job.error or 'no error was recorded'}")


class LeaseLost(Conflict):
    """You no longer hold this job: its lease was reclaimed and given a new token."""

    def __init__(self, job_id: int, token: int, detail: str = "", *, message: str = "") -> None:
        self.job_id = job_id
        self.token = token
        message = message or f"you no longer hold job {job_id} (token {token} is stale)"
        super().__init__(f"{message}: {detail}" if detail else message)


class StoreUnavailable(RowfleetError):
    """The database cannot be opened or used for now: wrong path, locked too long, a server away."""


class DatabaseUnreachable(StoreUnavailable):
    """The database server did not answer: down, restarting, or a network fault. Transient."""


class DatabaseBusy(StoreUnavailable):
    """The database stayed locked by other writers past the busy timeout. Transient."""


class DiskFull(StoreUnavailable):
    """The disk that holds the database has no room left: nothing can be written until room
    is made, and then everything can, as before. Transient, like a server away: processes
    wait it out, and a write it refused is tried again without counting against anything."""


class SchemaMissing(StoreUnavailable):
    """The database does not exist yet, or lacks the current schema: run ``rowfleet init``."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message  # the driver's own words: which table is missing


class DatabaseBroken(RowfleetError):
    """The database cannot be used and no wait will change that: read-only, corrupt, not a
    database, its tables dropped, or no permission. Not a ``StoreUnavailable``, so no retry
    loop waits on it: a process that meets it stops (exit 2) until an operator repairs it."""


class MigrationError(RowfleetError):
    """The schema is newer than this rowfleet, or a migration failed and was rolled back."""


class UnknownTask(RowfleetError):
    """No handler is registered under this task name, nor importable as ``module:function``."""


class TaskRefused(UnknownTask):
    """The task names code this process does not trust: neither registered by an ``--app``
    module nor in a module under an ``--allow-module`` prefix. Nothing was imported."""


class TaskWarning(UserWarning):
    """A job was written for a task name that a worker trusting what this process knows
    (its registered tasks, its allowed ``module:function`` prefixes) would refuse: it runs
    only on a worker whose ``--app`` modules register it or whose prefixes allow it."""


class UnknownModel(RowfleetError):
    """No module of this process registered this model id (``@rowfleet.model``)."""


class ModelLoadFailed(RowfleetError):
    """A model's loader raised (the cause is its exception); nothing is held afterwards."""

    def __init__(self, model_id: str, detail: str) -> None:
        self.model_id = model_id
        super().__init__(f"model {model_id!r} failed to load: {detail}")
