"""The store's declared core: what every part of ``Store`` builds on, and what a dialect provides.

``StoreCore`` holds the configuration, the clock and the dialect's named queries, declares
the transaction interface a dialect implements (``transaction()``, a write transaction that
takes the write lock up front; ``reader()``, reads outside a transaction;
``caller_transaction(conn)``, statements on a caller's own connection inside a savepoint;
the waiters; ``close()``), owns the schema (migrate, version checks), and declares the few
steps one part of the store asks of another, so that each part (``jobs``, ``runs``,
``schedules``, ``fleet``) reads as a whole and says what it relies on.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Mapping, Set
from typing import Any, Callable, Iterable, Iterator

from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.errors import DatabaseBroken, MigrationError, RowfleetError, SchemaMissing
from rowfleet.job import EVENT_COLUMNS, JOB_COLUMNS, Job, JobSpec
from rowfleet.sql.queries import latest_version, migrations, queries
from rowfleet.store.wake import Waiter


class Tx(abc.ABC):
    """Named statements inside one transaction (or one autocommit read).

    ``now`` is read once when the transaction starts and passed to every statement as
    ``:now``, so every row it writes agrees.
    """

    now: float

    @abc.abstractmethod
    def one(self, query: str, **params: Any) -> Any | None:
        """Run a named query; its first row (mapping-like) or None."""

    @abc.abstractmethod
    def all(self, query: str, **params: Any) -> list[Any]:
        """Run a named query; every row."""

    @abc.abstractmethod
    def run(self, query: str, **params: Any) -> int:
        """Run a named statement that returns no rows; how many rows it changed."""

    @abc.abstractmethod
    def script(self, sql: str) -> None:
        """Run a multi-statement script (a migration) inside this transaction."""


class StoreCore(abc.ABC):
    """One database connection, its configuration and its dialect's named queries. Not
    thread-safe: each thread opens its own store."""

    dialect: str = ""
    # Whether a store may be handed from one thread to another between uses (never used by
    # two at once): a server keeps such stores open for the next request instead of
    # connecting for each. SQLite's connections stay in the thread that opened them.
    passes_between_threads: bool = False

    def __init__(self, config: Config, clock: Callable[[], float]) -> None:
        self.config = config
        self.clock = clock
        self.sql = queries(self.dialect)

    # --- what a dialect provides -------------------------------------------------------

    @abc.abstractmethod
    def transaction(self, durable: bool = True) -> contextlib.AbstractContextManager[Tx]:
        """A write transaction, holding the write lock from its first statement.

        ``durable=False`` lets the commit skip waiting for the disk. Only for writes whose
        loss in a power cut is harmless: a lost claim runs the job again (at-least-once
        either way), a lost renewal or heartbeat is renewed or beaten again.
        """

    def statement(self) -> contextlib.AbstractContextManager[Tx]:
        """One write statement, atomic on its own: a renewal, a heartbeat. Here a transaction
        of its own, not durable (a lost one is written again); a networked dialect runs it in
        autocommit, so that no row lock is held across round trips."""
        return self.transaction(durable=False)

    @abc.abstractmethod
    def reader(self) -> Tx:
        """Statements that only read, each seeing the latest committed state."""

    @abc.abstractmethod
    def caller_transaction(self, conn: Any) -> contextlib.AbstractContextManager[Tx]:
        """Statements on the caller's own connection, which the caller commits or rolls back.

        A connection is borrowed, never trusted to roll back for us: inside the caller's open
        transaction the statements run in a ``savepoint``, so a failure undoes them and leaves
        the caller's own work committable; with none open they are a transaction of their own
        (committed at once where the connection autocommits, else left for the caller's commit).
        """

    def hold_clock(self) -> None:
        """Once the database is known usable (``open_store``): a dialect whose clock is the box's
        (SQLite) raises it to the newest time written, so that a step back of the box's clock
        stops nothing. PostgreSQL's is the server's: nothing to do."""

    def _queued_into(self, tx: Tx, queue: str) -> None:
        """``tx`` inserted jobs into ``queue``: a dialect whose idle workers wait on doorbells
        (SQLite) rings the queue's after the commit. PostgreSQL's trigger sends a NOTIFY."""

    @contextlib.contextmanager
    def _one_read(self) -> Iterator[Tx]:
        """Reader statements inside one read transaction (a snapshot of one moment, taking
        no write lock), ended whether they succeed or not."""
        tx = self.reader()
        tx.run("fleet_rows_begin")
        try:
            yield tx
        except BaseException:
            with contextlib.suppress(RowfleetError):  # the error to raise is the first one
                tx.run("fleet_rows_end")
            raise
        tx.run("fleet_rows_end")

    def _writing(self, conn: Any = None) -> contextlib.AbstractContextManager[Tx]:
        """A write transaction: on the caller's ``conn`` when given, else one of our own."""
        return self.transaction() if conn is None else self.caller_transaction(conn)

    @abc.abstractmethod
    def waiter(self, queues: str | tuple[str, ...]) -> Waiter:
        """A way for an idle worker of ``queues`` (one, or several) to sleep until there may
        be work for it."""

    @abc.abstractmethod
    def control_waiter(self, host: str) -> Waiter:
        """A way for a worker of ``host`` to sleep until its switch may have changed."""

    @abc.abstractmethod
    def dispatch_waiter(self, project: str) -> Waiter:
        """A way for an orchestrator to sleep until a dispatch event of ``project`` may exist."""

    @abc.abstractmethod
    def job_waiter(self, job_id: int, project: str) -> Waiter:
        """A way to sleep until job ``job_id`` may have ended (``rowfleet.wait``): made
        before the caller's first look at the row, so that an end in between still wakes it."""

    @abc.abstractmethod
    def changed(self) -> bool:
        """True when another connection has committed since the last call (cheap)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> "StoreCore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what one part of the store asks of another ------------------------------------

    @abc.abstractmethod
    def _flow_take(self, tx: Tx, claim: Claim) -> Job | None:
        """A limited claim (the flow part's): the jobs part runs it for a ``limited`` claim."""

    @abc.abstractmethod
    def _flow_due(self, tx: Tx, claim: Claim) -> bool:
        """``has_due`` for a limited claim (the flow part's)."""

    @abc.abstractmethod
    def _plain_take(self, tx: Tx, claim: Claim, held_keys: list[str] | None) -> Job | None:
        """The claim by its own forms (the jobs part's), passing over ``held_keys``' jobs."""

    @abc.abstractmethod
    def _plain_due(self, tx: Tx, claim: Claim, held_keys: list[str] | None) -> bool:
        """``has_due`` by the claim's own forms (the jobs part's)."""

    @abc.abstractmethod
    def local_clock(self) -> float:
        """This host's clock (the jobs part's)."""

    @abc.abstractmethod
    def _enqueue(self, tx: Tx, spec: JobSpec, placement: dict[str, Any] | None = None) -> Job:
        """jobs: insert one job in ``tx`` (a workflow node's, or a fired schedule's, when
        ``placement`` names it)."""

    @abc.abstractmethod
    def _enqueue_many(self, tx: Tx, spec: JobSpec, args_list: Iterable[Any],
                     placement: dict[str, Any] | None = None) -> int:
        """jobs: insert one job per item in ``tx``; how many."""

    @abc.abstractmethod
    def _get_job(self, tx: Tx, job_id: int, project: str) -> Job:
        """jobs: read one job in ``tx`` (``NotFound`` when there is none)."""

    @abc.abstractmethod
    def _recover_jobs_of(self, tx: Tx, worker: Any, lost: str, kind: str,
                         lease_lost: bool = False, reason: str | None = None) -> list[dict[str, Any]]:
        """jobs: hand back (or end) the running jobs a lost worker claimed; what was done."""

    @abc.abstractmethod
    def _dispatch(self, tx: Tx, job: Job) -> None:
        """runs: tell the outbox that a workflow node's job reached a terminal state."""

    @abc.abstractmethod
    def _run_ended(self, tx: Tx, run_id: int) -> str | None:
        """runs: how the run ended (its state), or None while it goes on."""

    @abc.abstractmethod
    def _record_answer(self, tx: Tx, project: str, run_id: int, node_id: str, encoded: str, by: str,
                       held: Any) -> None:
        """submissions: the row of an answer ``tx`` applied (a fresh one, or the claimed
        submission ``held``, marked processed)."""

    # --- schema ------------------------------------------------------------------------

    # Where a message about a database that is not rowfleet's sends the operator instead.
    elsewhere = "another database"

    def refuse_unusable(self) -> int:
        """The recorded schema version, once the database is known to be one this rowfleet
        may use: ``DatabaseBroken`` when it is not rowfleet's (``foreign_schema``), which no
        wait repairs, and ``MigrationError`` when its schema is newer than this rowfleet.
        Every store is checked once, when it is opened (``open_store``), before any command
        reads or writes with it, so that a refused database is left as it was found."""
        self.refuse_foreign()
        return self.refuse_newer_schema()

    def refuse_foreign(self) -> None:
        """``DatabaseBroken`` when the database holds another program's tables under the
        names rowfleet's schema needs (``foreign_schema``), read from its tables' columns
        and the version its ``schema_migrations`` records, if that table is rowfleet's."""
        tx = self.reader()
        found = _schema_columns(tx)
        problem = foreign_bookkeeping(found)
        if problem is None and found:
            version = recorded_version(tx) if MIGRATIONS_TABLE in found else 0
            # Columns and version are read one statement apart: a migration that commits in
            # between (another process's init) would pair the old columns with the new
            # version. Columns unchanged after the version's read say it was theirs.
            for _ in range(SCHEMA_READS):
                again = _schema_columns(tx)
                if again == found:
                    break
                found = again
                version = recorded_version(tx) if MIGRATIONS_TABLE in found else 0
            problem = foreign_schema(found, version, expected_tables(version, latest_version(self.dialect)))
        if problem is not None:
            raise DatabaseBroken(f"the database {self.config.db_shown!r} is not a rowfleet database: {problem}; "
                                 f"point --db at {self.elsewhere}")

    def schema_version(self) -> int:
        """The schema version the database records (0: none yet)."""
        return recorded_version(self.reader())

    def refuse_newer_schema(self) -> int:
        """The recorded schema version, or ``MigrationError`` when it is newer than this
        rowfleet: an older rowfleet's writes could break a newer schema, so every store is
        checked once, when it is opened (``open_store``), before any command writes."""
        version = self.schema_version()
        target = latest_version(self.dialect)
        if version > target:
            raise MigrationError(_newer(version, target))
        return version

    def migrate(self) -> int:
        """Apply every pending migration, each with its bookkeeping row in one transaction;
        then the schema must be whole (``DatabaseBroken`` if its tables were dropped).

        Safe to run from two processes at once: the version is re-read under the write lock.
        """
        target = latest_version(self.dialect)
        for migration in migrations(self.dialect):
            with self.transaction() as tx:
                tx.script(self.sql["migrations_table"])
                current = tx.one("schema_version")["version"]
                if current > target:
                    raise MigrationError(_newer(current, target))
                if current >= migration.version:
                    continue
                tx.script(migration.sql)
                tx.run("migration_record", version=migration.version, name=migration.name)
        return self.require_schema()

    def require_schema(self) -> int:
        """The schema version; ``SchemaMissing`` when it is absent or out of date (wait, or
        run init), ``MigrationError`` when newer, ``DatabaseBroken`` when its tables are gone."""
        version = self.refuse_newer_schema()
        target = latest_version(self.dialect)
        if version < target:
            raise SchemaMissing(f"the database {self.config.db_shown!r} has schema version {version}, "
                                f"rowfleet needs {target}: run `rowfleet init` (or start the orchestrator)")
        try:
            self.reader().one("schema_tables")
        except SchemaMissing as exc:
            raise schema_gone(version, exc) from None
        return version


@contextlib.contextmanager
def savepoint(tx: Tx) -> Iterator[Tx]:
    """``tx``'s statements in a savepoint of the transaction open on its connection: released
    when they succeed, rolled back to on any error, so the transaction's earlier work stays
    as it was (and, on PostgreSQL, committable after a failed statement)."""
    tx.run("savepoint_begin")
    try:
        yield tx
    except BaseException:
        # An error that ended the whole transaction (a lost connection) took the savepoint
        # with it: the error to raise is the first one.
        with contextlib.suppress(RowfleetError):
            tx.run("savepoint_rollback")
            tx.run("savepoint_release")
        raise
    tx.run("savepoint_release")


MIGRATIONS_TABLE = "schema_migrations"
SCHEMA_READS = 20  # reads of a schema that a migration changes meanwhile, at most (one per migration)
# The columns of rowfleet's own bookkeeping table (``migrations_table``): a table of that name
# without them is another program's (web frameworks keep one of the same name).
MIGRATIONS_COLUMNS = frozenset({"version", "name", "applied_at"})


def foreign_bookkeeping(found: Mapping[str, Set[str]]) -> str | None:
    """Why the ``schema_migrations`` table among ``found`` (table -> its column names) is
    another program's, or None (it is rowfleet's, or there is none).

    >>> foreign_bookkeeping({"schema_migrations": {"version"}})
    'it has a table schema_migrations of its own (with no column applied_at, name)'
    >>> foreign_bookkeeping({"schema_migrations": {"version", "name", "applied_at"}}), foreign_bookkeeping({})
    (None, None)
    """
    columns = found.get(MIGRATIONS_TABLE)
    if columns is None or columns >= MIGRATIONS_COLUMNS:
        return None
    return f"it has a table {MIGRATIONS_TABLE} of its own (with no column {', '.join(sorted(MIGRATIONS_COLUMNS - columns))})"


def foreign_schema(found: Mapping[str, Set[str]], version: Any, ours: Mapping[str, Set[str]]) -> str | None:
    """Why a database is not rowfleet's, or None: ``found`` is its tables, each with its
    column names; ``version`` the schema version its ``schema_migrations`` records (0 when
    it records none); ``ours`` rowfleet's tables at that version, each with the columns it
    must have. Recording no version, it may hold tables of any other name (rowfleet shares an
    application's database), but a table of one of rowfleet's names is another program's,
    which ``init`` cannot make its own. Recording one, each of those tables must have its
    columns. Pure: the store reads what it decides on.

    >>> ours = {"jobs": {"id", "queue"}, "workers": {"id"}}
    >>> foreign_schema({}, 0, ours), foreign_schema({"users": {"id"}}, 0, ours)
    (None, None)
    >>> foreign_schema({"jobs": {"id", "title"}, "users": {"id"}}, 0, ours)
    'it has a table jobs of its own'
    >>> foreign_schema({"jobs": {"id"}, "workers": {"pid"}}, 0, ours)
    'it has tables jobs, workers of its own'
    >>> foreign_schema({"jobs": {"id", "title"}}, 16, ours)
    'its table jobs lacks column queue of rowfleet schema version 16'
    >>> foreign_schema({"jobs": {"id", "queue", "extra"}}, 16, ours) is None
    True
    >>> foreign_schema({"schema_migrations": {"version"}}, "20240101120000", ours)
    "its table schema_migrations records version '20240101120000', which is no rowfleet schema version"
    """
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        return (f"its table {MIGRATIONS_TABLE} records version {version!r}, which is no rowfleet schema "
                f"version")
    if version == 0:
        taken = sorted(set(found) & set(ours))
        if not taken:
            return None
        return f"it has {'a table' if len(taken) == 1 else 'tables'} {', '.join(taken)} of its own"
    for table in sorted(set(found) & set(ours)):
        missing = sorted(set(ours[table]) - set(found[table]))
        if missing:
            return (f"its table {table} lacks column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                    f"of rowfleet schema version {version}")
    return None


def expected_tables(version: Any, latest: int) -> Mapping[str, Set[str]]:
    """rowfleet's tables at schema ``version`` with the columns ``foreign_schema`` holds
    each to: recording none, every table its migrations make (by name, from the migrated
    schema); at the current version, the tables the engine's rows are read from, with the
    columns of their row types (``Job``, ``Event``: a test ties each to its table on both
    databases); at an older one, none (the migration to come makes them whole)."""
    if version == 0:
        from rowfleet.store.sqlite import migrated_tables  # the schema a memory database reaches

        return migrated_tables()
    if version == latest:
        return {"jobs": JOB_COLUMNS, "job_events": EVENT_COLUMNS}
    return {}


def _schema_columns(tx: Tx) -> dict[str, set[str]]:
    """Each table of the database with its column names."""
    found: dict[str, set[str]] = {}
    for row in tx.all("schema_columns"):
        found.setdefault(row["table_name"], set()).add(row["column_name"])
    return found


def recorded_version(tx: Tx) -> int:
    """The schema version the database records (0: none yet)."""
    if not tx.one("migrations_exists")["n"]:
        return 0
    return tx.one("schema_version")["version"]


def schema_gone(version: int, missing: SchemaMissing) -> DatabaseBroken:
    return DatabaseBroken(f"the database records rowfleet schema version {version}, but {missing.detail}: its "
                          f"tables were dropped; restore it from a backup, or move it aside and run `rowfleet init`")


def schema_gone_unless_new(missing: SchemaMissing, tx: Tx, dialect: str) -> RowfleetError:
    """What a missing table means: a schema not made yet (``SchemaMissing``: wait, or run
    init), unless the database (read with ``tx``) records the current version, so its tables
    existed and were dropped since: ``DatabaseBroken``, which no wait repairs."""
    try:
        version = recorded_version(tx)
    except RowfleetError:  # the version cannot be read either: say what we know
        return missing
    return schema_gone(version, missing) if version >= latest_version(dialect) else missing


def _newer(version: int, target: int) -> str:
    return f"the database schema is version {version}, newer than this rowfleet knows ({target}): upgrade rowfleet"
