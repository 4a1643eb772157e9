"""What a job is: its states, its row as a dataclass, and what a handler's run decides.

Pure: no I/O, no database. The store turns rows into ``Job``; the worker turns a handler's
return or exception into an ``Outcome`` with ``decide_outcome``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import random
import traceback as tb
from typing import Any, Callable

from rowfleet.errors import ConfigError, UnknownTask

QUEUED = "queued"
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
STATES = (QUEUED, RUNNING, COMPLETED, FAILED, CANCELLED)
TERMINAL = (COMPLETED, FAILED, CANCELLED)


class Retry(Exception):
    """Raised by a handler to run the job again after ``delay`` seconds.

    Not an error: it spends the attempt it ran in, and once attempts run out the job fails.
    """

    def __init__(self, delay: float = 0.0, reason: str = "") -> None:
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
            raise ValueError(f"Retry delay must be a non-negative number of seconds, got {delay!r}")
        self.delay = float(delay)
        self.reason = reason
        super().__init__(reason or f"retry in {delay:g}s")


class Cancel(Exception):
    """Raised by a handler to stop the job for good, without retries: it ends ``cancelled``."""

    def __init__(self, reason: str = "cancelled by its handler") -> None:
        self.reason = reason
        super().__init__(reason)


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What an enqueue asks for, validated before anything is written."""

    task: str
    args: Any = None
    queue: str = "default"
    project: str = ""
    priority: int = 0
    run_next: bool = False
    delay: float = 0.0
    run_at: float | None = None
    key: str | None = None
    max_attempts: int = 5
    timeout: float | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.task, str) or not self.task.strip() or any(c.isspace() for c in self.task):
            raise ConfigError(f"task name must be a non-empty word without spaces, got {self.task!r}")
        if not isinstance(self.queue, str) or not self.queue or any(c.isspace() for c in self.queue):
            raise ConfigError(f"queue must be a non-empty word without spaces, got {self.queue!r}")
        if not _is_int(self.priority):
            raise ConfigError(f"priority must be an integer, got {self.priority!r}")
        if not _is_int(self.max_attempts) or self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be an integer of at least 1, got {self.max_attempts!r}")
        if isinstance(self.delay, bool) or not isinstance(self.delay, (int, float)) or self.delay < 0:
            raise ConfigError(f"delay must be a non-negative number of seconds, got {self.delay!r}")
        if self.key is not None and (not isinstance(self.key, str) or not self.key):
            raise ConfigError("an idempotency key must be a non-empty string")
        if self.timeout is not None and (isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float))
                                         or self.timeout <= 0):
            raise ConfigError(f"timeout must be a positive number of seconds, got {self.timeout!r}")
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ConfigError("a required model must be a non-empty string")
        try:
            object.__setattr__(self, "_args_json", encode_json(self.args))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"args must be JSON-serialisable: {exc}") from None

    def args_json(self) -> str:
        return self._args_json  # encoded once, when the spec was validated


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode_json(value: Any) -> str:
    """Compact JSON; NaN and infinities are refused (they are not JSON)."""
    return _ENCODER.encode(value)


def decode_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@dataclasses.dataclass(frozen=True)
class Job:
    """One row of ``jobs``. Times are UNIX epoch seconds."""

    id: int
    project: str
    queue: str
    task: str
    args: Any
    state: str
    priority: int
    run_next: bool
    run_at: float
    attempts: int
    max_attempts: int
    idempotency_key: str | None
    lease_token: int
    claimed_by: str | None
    lease_expires_at: float | None
    result: Any
    error: str | None
    traceback: str | None
    created_at: float
    updated_at: float
    started_at: float | None
    finished_at: float | None
    # A workflow node's job: its run, node, map item and node generation (None otherwise).
    run_id: int | None = None
    node_id: str | None = None
    node_item: int | None = None
    node_generation: int | None = None
    timeout: float | None = None  # seconds of wall clock the job may take
    required_model: str | None = None
    watchdog_retries: int = 0  # times a watchdog stopped it
    progress: float | None = None  # 0..1, as its handler last reported
    progress_message: str | None = None
    progress_at: float | None = None
    cancel_requested_at: float | None = None  # an operator asked its worker to stop it
    cancel_reason: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> "Job":
        """Build from a row of ``jobs``: a dict keyed by column, or a sequence in the
        table's column order (which the fields follow; ``SELECT *`` and ``RETURNING *``
        give it)."""
        values = [row[name] for name in _JOB_FIELDS] if isinstance(row, dict) else list(row)
        values[_ARGS] = decode_json(values[_ARGS])
        values[_RESULT] = decode_json(values[_RESULT])
        values[_RUN_NEXT] = bool(values[_RUN_NEXT])
        return cls(*values)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO-8601 UTC strings."""
        data = dataclasses.asdict(self)
        for name in ("run_at", "lease_expires_at", "created_at", "updated_at", "started_at", "finished_at",
                     "progress_at", "cancel_requested_at"):
            data[name] = iso(data[name])
        return data


_JOB_FIELDS = tuple(field.name for field in dataclasses.fields(Job))
_ARGS, _RESULT, _RUN_NEXT = (_JOB_FIELDS.index(name) for name in ("args", "result", "run_next"))


@dataclasses.dataclass(frozen=True)
class Event:
    id: int
    job_id: int
    at: float
    kind: str
    detail: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "job_id": self.job_id, "at": iso(self.at), "kind": self.kind,
                "detail": self.detail}


def iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What to write when a run ends. ``state`` is the job's next state.

    ``delay`` (seconds from now) is set when the job goes back to ``queued``; the store
    turns it into an absolute ``run_at`` with its own clock, once.
    """

    state: str
    result: Any = None
    error: str | None = None
    traceback: str | None = None
    delay: float = 0.0
    event: str = ""
    result_json: str | None = None

    def __post_init__(self) -> None:
        if self.state == COMPLETED and self.result_json is None:
            object.__setattr__(self, "result_json", encode_json(self.result))


def backoff(attempt: int, base: float, cap: float, rng: Callable[[], float]) -> float:
    """Seconds to wait before attempt ``attempt + 1``: exponential, capped, half jittered.

    ``rng`` returns a float in [0, 1). The delay lies in [d/2, d) where d = min(cap, base * 2**(attempt-1)),
    so retries spread out but never come sooner than half the nominal wait.

    >>> backoff(1, 2.0, 3600.0, lambda: 0.0), backoff(3, 2.0, 3600.0, lambda: 0.0)
    (1.0, 4.0)
    >>> backoff(30, 2.0, 60.0, lambda: 0.5)
    45.0
    """
    nominal = min(cap, base * 2.0 ** min(max(attempt - 1, 0), 62))
    return nominal / 2 + nominal / 2 * rng()


def decide_outcome(job: Job, result: Any = None, raised: BaseException | None = None, *,
                   backoff_base: float = 2.0, backoff_max: float = 3600.0,
                   rng: Callable[[], float] = random.random) -> Outcome:
    """Turn a handler's return value or exception into the job's next state.

    >>> from types import SimpleNamespace as J
    >>> decide_outcome(J(attempts=1, max_attempts=5), result=3).state
    'completed'
    >>> decide_outcome(J(attempts=5, max_attempts=5), raised=ValueError("x")).state
    'failed'
    """
    if raised is None:
        try:
            encoded = encode_json(result)
        except (TypeError, ValueError) as exc:
            return _fail_or_retry(job, f"result is not JSON-serialisable: {exc}", None,
                                  backoff_base, backoff_max, rng, retryable=False)
        return Outcome(COMPLETED, result=result, event="completed", result_json=encoded)
    if isinstance(raised, Cancel):
        return Outcome(CANCELLED, error=raised.reason, event="cancelled")
    if isinstance(raised, Retry):
        if job.attempts >= job.max_attempts:
            return Outcome(FAILED, error=f"retry requested after the last attempt "
                           f"({job.attempts} of {job.max_attempts}): {raised}", event="failed")
        return Outcome(QUEUED, error=str(raised), delay=raised.delay, event="retried")
    text = "".join(tb.format_exception(raised))
    message = f"{type(raised).__name__}: {raised}"
    return _fail_or_retry(job, message, text, backoff_base, backoff_max, rng,
                          retryable=not isinstance(raised, UnknownTask))


def _fail_or_retry(job: Any, error: str, trace: str | None, base: float, cap: float,
                   rng: Callable[[], float], retryable: bool) -> Outcome:
    if retryable and job.attempts < job.max_attempts:
        return Outcome(QUEUED, error=error, traceback=trace, delay=backoff(job.attempts, base, cap, rng),
                       event="retried")
    return Outcome(FAILED, error=error, traceback=trace, event="failed")
