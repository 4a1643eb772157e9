"""The SQLite dialect: connections, transactions, error translation, wake-ups.

Every connection is made by ``connect()``: autocommit mode (``isolation_level=None``) so
that we issue ``BEGIN IMMEDIATE`` ourselves for every transaction that may write (a plain
BEGIN that later writes fails at once instead of waiting for the lock), WAL, a busy
timeout, and ``synchronous`` as configured (FULL by default: a commit survives power loss).
``sqlite3`` exceptions are translated here and nowhere else.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import random
import sqlite3
import time
from typing import Any, Callable, Iterator

from rowfleet.config import Config
from rowfleet.errors import (ConfigError, DatabaseBroken, DatabaseBusy, DiskFull, RowfleetError, SchemaMissing,
                             StoreUnavailable)
from rowfleet.sql.queries import migrations
from rowfleet.store.base import Store
from rowfleet.store.clock import LONGEST_HOLD, HeldClock, for_database
from rowfleet.store.core import Tx, savepoint, schema_gone_unless_new
from rowfleet.store.wake import FileWaiter, Sleeper, Waiter, bell_path, ring


# Tries for the write lock back off from LOCK_RETRY_FIRST, doubling up to LOCK_RETRY_MOST, each
# wait jittered down to half: a lone claimer (an idle worker woken for its job) finds the gap
# between a busy neighbour's commits at once, while processes that keep meeting each other
# spread out instead of waking every fraction of a millisecond to take the CPU from the
# holder (on two cores, four busy workers lost a third of their throughput to that). Unlike
# SQLite's own busy handler (up to 100 ms a try), the spacing stays short enough that no
# process is shut out for long.
LOCK_RETRY_FIRST = 0.0002  # seconds
LOCK_RETRY_MOST = 0.005


def lock_retry_wait(tries: int, draw: Callable[[float, float], float] = random.uniform) -> float:
    """Seconds to wait after the ``tries``-th failed try for the write lock.

    >>> [round(lock_retry_wait(n, lambda low, high: high), 4) for n in (1, 2, 3, 7, 8, 30)]
    [0.0002, 0.0004, 0.0008, 0.005, 0.005, 0.005]
    """
    return min(LOCK_RETRY_MOST, LOCK_RETRY_FIRST * 2 ** min(tries - 1, 16)) * draw(0.5, 1.0)


def connect(path: str, config: Config, *, create: bool = False) -> sqlite3.Connection:
    """Open ``path`` the one way rowfleet does. Without ``create`` a missing file is an error,
    so a mistyped ``--db`` never leaves an empty database behind."""
    if not create and not os.path.exists(path):
        raise SchemaMissing(f"no database at {path!r}: run `rowfleet init` (or the orchestrator) first")
    mode = "rwc" if create else "rw"
    uri = "file:" + _uri_path(path) + f"?mode={mode}"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=config.busy_timeout,
                               check_same_thread=True)
    except sqlite3.Error as exc:
        raise _unopened(exc, path, f"cannot open database {path!r}: {exc}") from None
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode").fetchone()  # a file that is no database says so here
        # Fixed fragments only: Config validated the value to FULL or NORMAL.
        conn.execute("PRAGMA synchronous = " + ("FULL" if config.synchronous == "FULL" else "NORMAL"))
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise _unopened(exc, path, f"{path!r} is not a usable SQLite database: {exc}") from None
    except UnicodeError as exc:
        conn.close()
        raise unreadable(exc, f" ({path!r})") from None
    return conn


def _unopened(exc: sqlite3.Error, path: str, message: str) -> RowfleetError:
    """Why ``path`` could not be opened: for good (``DatabaseBroken``, saying ``message``), for
    want of room on its disk (``DiskFull``), or for now (``StoreUnavailable``)."""
    if permanent(exc):
        return DatabaseBroken(message)
    if no_room(_code(exc)):
        return DiskFull(f"cannot open database {path!r}: {NO_ROOM} ({exc}); make room on it")
    return StoreUnavailable(message)


def use_wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode (it stays so), unless it is already: the first change
    rowfleet makes to a file, made before its first write, so that opening a database it
    then refuses (``StoreCore.refuse_unusable``) leaves the file as it was."""
    try:
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
    except sqlite3.Error as exc:
        raise translate(exc, " switching to WAL") from None


@functools.lru_cache(maxsize=1)
def migrated_tables() -> dict[str, frozenset[str]]:
    """Every table rowfleet's migrations make, with its columns: the schema a memory
    database reaches (the same names on every dialect). Made once per process, and only
    when a database that records no schema holds tables (whose names it is checked against).

    >>> tables = migrated_tables()
    >>> "queue" in tables["jobs"], "schema_migrations" in tables
    (True, False)
    """
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        conn.execute("BEGIN")
        for migration in migrations("sqlite"):
            for statement in split_script(migration.sql):
                conn.execute(statement)
        names = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                                "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")]
        return {name: frozenset(row[1] for row in conn.execute("SELECT * FROM pragma_table_info(?)", (name,)))
                for name in names}
    finally:
        conn.close()


def _uri_path(path: str) -> str:
    from urllib.parse import quote

    return quote(os.path.abspath(path))


# Primary result codes (``sqlite_errorcode & 0xff``) that no wait repairs: a file that is
# read-only to this process, corrupt or not a database at all, or access refused. (Not
# CANTOPEN: a journal file caught mid-delete can raise it once.)
PERMANENT = {3: "permission denied", 8: "read-only", 11: "corrupt", 23: "access refused", 26: "not a database"}


# Result codes that say the disk has no room: SQLITE_FULL (a page or the journal could not be
# written), and SQLITE_IOERR_SHMSIZE (the WAL index, the -shm file that opening a database in
# WAL mode makes, could not grow: how a full disk answers before any write). Room made, the
# same statements succeed: a full disk is waited out, never taken for a broken database.
SQLITE_FULL = 13
SQLITE_IOERR_SHMSIZE = 10 | (19 << 8)
NO_ROOM = "the disk holding the database is full"


def no_room(code: int) -> bool:
    """Whether a result code (extended, as ``sqlite_errorcode`` gives it) says the disk is full.

    >>> no_room(SQLITE_FULL), no_room(SQLITE_IOERR_SHMSIZE), no_room(4874)
    (True, True, True)
    >>> no_room(10), no_room(778), no_room(11), no_room(5), no_room(0)  # other I/O, corrupt, busy
    (False, False, False, False, False)
    """
    return code & 0xFF == SQLITE_FULL or code == SQLITE_IOERR_SHMSIZE


def _code(exc: sqlite3.Error) -> int:
    return getattr(exc, "sqlite_errorcode", None) or 0


def translate(exc: sqlite3.Error, what: str = "") -> RowfleetError:
    """Turn a driver exception into the rowfleet error that tells the caller what to do."""
    text = str(exc)
    if "no such table" in text:
        return SchemaMissing(f"the database has no rowfleet schema ({text}): run `rowfleet init`", detail=text)
    if permanent(exc):
        return DatabaseBroken(f"the database cannot be used{what}: {text} ({PERMANENT[permanent(exc)]}): "
                              f"an operator must repair it, as no wait will")
    if no_room(_code(exc)):
        return DiskFull(f"database error{what}: {NO_ROOM} ({text}); make room on it")
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        return DatabaseBusy(f"the database stayed locked past the busy timeout{what}: {text}")
    return StoreUnavailable(f"database error{what}: {text}")


def unreadable(exc: UnicodeError, what: str = "") -> RowfleetError:
    """The driver could not convert text, which it raises as a Unicode error rather than a
    ``sqlite3.Error``: bytes in the file that are not UTF-8 (a corrupt schema, whose error
    message cannot even be decoded) or a value with non-UTF-8 text on its way in."""
    if isinstance(exc, UnicodeDecodeError):
        return DatabaseBroken(f"the database file is corrupt{what}: it holds text that is not UTF-8 "
                                f"({exc.reason} at byte {exc.start})")
    return ConfigError(f"a value is not valid UTF-8 text{what}: {exc.reason}")


def permanent(exc: sqlite3.Error) -> int:
    """The primary result code of an error no wait repairs, else 0."""
    code = _code(exc) & 0xFF
    return code if code in PERMANENT else 0


def split_script(sql: str) -> list[str]:
    """Split a migration script into statements with ``sqlite3.complete_statement``.

    >>> split_script("CREATE TABLE a (x);\\n-- note\\nCREATE INDEX i ON a (x);")
    ['CREATE TABLE a (x);', '-- note\\nCREATE INDEX i ON a (x);']
    """
    statements, pending = [], ""
    for line in sql.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip() and not all(l.strip().startswith("--") or not l.strip() for l in pending.splitlines()):
        raise ValueError(f"incomplete SQL statement at the end of a script: {pending.strip()[:80]!r}")
    return statements


class SQLiteTx(Tx):
    def __init__(self, conn: sqlite3.Connection, sql: dict[str, str], now: float) -> None:
        self.conn = conn
        self.sql = sql
        self.now = now
        self.cursor = conn.cursor()
        self.cursor.row_factory = sqlite3.Row  # also on a caller's connection, whatever its factory

    def _execute(self, name: str, params: dict[str, Any]) -> sqlite3.Cursor:
        params["now"] = self.now  # params is the caller's fresh **kwargs dict
        try:
            return self.cursor.execute(self.sql[name], params)
        except sqlite3.Error as exc:
            raise self._translate(exc, f" in {name}") from None
        except UnicodeError as exc:
            raise unreadable(exc, f" in {name}") from None

    def _translate(self, exc: sqlite3.Error, what: str) -> RowfleetError:
        error = translate(exc, what)
        if isinstance(error, SchemaMissing):  # made yet, or dropped since? The version says.
            return schema_gone_unless_new(error, self, "sqlite")
        return error

    def one(self, query: str, **params: Any) -> Any | None:
        # fetchall, not fetchone: an UPDATE ... RETURNING finishes only when fully stepped.
        rows = self._fetch(query, params)
        return rows[0] if rows else None

    def all(self, query: str, **params: Any) -> list[Any]:
        return self._fetch(query, params)

    def _fetch(self, name: str, params: dict[str, Any]) -> list[Any]:
        cursor = self._execute(name, params)
        try:
            return cursor.fetchall()
        except sqlite3.Error as exc:
            raise translate(exc, f" in {name}") from None
        except UnicodeError as exc:
            raise unreadable(exc, f" in {name}") from None

    def run(self, query: str, **params: Any) -> int:
        return self._execute(query, params).rowcount

    def script(self, sql: str) -> None:
        for statement in split_script(sql):
            try:
                self.conn.execute(statement)
            except sqlite3.Error as exc:
                raise translate(exc, " in a migration") from None
            except UnicodeError as exc:
                raise unreadable(exc, " in a migration") from None


def _autocommits(conn: sqlite3.Connection) -> bool:
    """Whether a caller's connection commits each statement as it runs: ``autocommit=True``
    (Python 3.12 on), or legacy transaction control with ``isolation_level=None``."""
    autocommit = getattr(conn, "autocommit", None)  # True, False, or the legacy marker (-1)
    if isinstance(autocommit, bool):
        return autocommit
    return conn.isolation_level is None


def _on_callers(conn: sqlite3.Connection, statement: str, what: str) -> None:
    """Transaction control on a caller's connection, its driver errors translated."""
    try:
        conn.execute(statement)
    except sqlite3.Error as exc:
        raise translate(exc, what) from None


class SQLiteStore(Store):
    dialect = "sqlite"
    elsewhere = "another file"
    # The TEMP triggers behind its doorbells (where PostgreSQL has NOTIFY triggers in its
    # schema and LISTEN queries).
    bells = ("bell_requeued", "bell_dispatched", "bell_submitted")
    # Queries only this dialect has: the bells', and the floor of the box's held clock.
    own_queries = frozenset({*bells, "clock_floor"})

    def __init__(self, path: str, config: Config, *, create: bool = False,
                 clock: Callable[[], float] = time.time) -> None:
        # Every time this store writes and compares comes from the box's clock, held so that
        # a step back stops nothing (rowfleet.store.clock); a test's own clock is used as given.
        super().__init__(config, for_database(path) if clock is time.time else clock)
        self.path = path
        self.conn = connect(path, config, create=create)
        # A fixed fragment and an integer of our own Config: never a caller's string.
        self._busy_timeout_pragma = f"PRAGMA busy_timeout = {int(config.busy_timeout * 1000)}"
        self._reads_wait = True  # the connection's busy timeout: the configured one, or 0 (see _begin)
        self._data_version = self._read_data_version()
        # The doorbells a transaction rings after its commit (see rowfleet.store.wake): the queues
        # it put jobs in (noted by the enqueue itself, which knows its queue, so a batch pays
        # nothing per row, and by this connection's TEMP trigger on a requeue), the projects
        # it wrote dispatch events or pending submissions for (TEMP triggers). set.add itself
        # is the SQL function: no Python frame per row.
        self._queued: set[str] = set()
        self._dispatched: set[str] = set()
        self._bells: dict[tuple[str, str], str] = {}
        self._bells_armed = False
        self._wal = False  # whether this store has seen the file in WAL mode (see use_wal)
        self.conn.create_function("rowfleet_queued", 1, self._queued.add)
        self.conn.create_function("rowfleet_dispatched", 1, self._dispatched.add)

    @contextlib.contextmanager
    def transaction(self, durable: bool = True) -> Iterator[Tx]:
        if not self._wal:  # outside any transaction: the journal mode cannot change inside one
            use_wal(self.conn)
            self._wal = True
        relaxed = not durable and self.config.synchronous == "FULL"
        if relaxed:  # in WAL mode NORMAL commits without fsync; the next FULL commit syncs it too
            self.conn.execute("PRAGMA synchronous = NORMAL")
        try:
            self._begin()
            try:
                if not self._bells_armed:
                    self._arm_bells()
                yield SQLiteTx(self.conn, self.sql, self.clock())
            except BaseException:
                self._rollback()
                raise
            self._commit()
            self._ring_bells()
        finally:
            if relaxed:
                self.conn.execute("PRAGMA synchronous = FULL")

    def _begin(self) -> None:
        """Take the write lock, retrying with a short backoff (``lock_retry_wait``).

        SQLite's own busy handler sleeps longer and longer (up to 100 ms a try), so under
        contention the process that just committed wins again and again while the others
        doze: jittered retries of our own, capped at 5 ms, share the lock between workers.
        Only BEGIN waits this way. The statements of a write transaction never wait (in WAL
        mode the write lock is all they need), so the connection's busy timeout stays 0 from
        here until a read asks for the configured one again (``reader``): a busy worker, whose
        every transaction writes, sets it once rather than twice around every BEGIN.
        """
        give_up = time.monotonic() + self.config.busy_timeout
        if self._reads_wait:
            self.conn.execute("PRAGMA busy_timeout = 0")
            self._reads_wait = False
        try:
            for tries in itertools.count(1):
                try:
                    self.conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) and "busy" not in str(exc):
                        raise translate(exc, " taking the write lock") from None
                    if time.monotonic() >= give_up:
                        raise translate(exc, " taking the write lock") from None
                time.sleep(lock_retry_wait(tries))
        except sqlite3.Error as exc:
            raise translate(exc, " taking the write lock") from None
        except UnicodeError as exc:
            raise unreadable(exc, " taking the write lock") from None

    def _arm_bells(self) -> None:
        """Make this connection's TEMP triggers that note which bells to ring, once. A schema
        not made yet has nothing to arm: the next transaction tries again (a migration that
        rebuilt the jobs table would drop them: test_doorbells migrates, then enqueues)."""
        try:
            for name in self.bells:
                self.conn.execute(self.sql[name])
        except sqlite3.OperationalError:
            return
        self._bells_armed = True

    def hold_clock(self) -> None:
        """Raise the box's held clock to the newest time the fleet wrote here that was "now"
        when written (``clock_floor``): a process started after the box's clock stepped back
        agrees with those that held theirs through the step. Read once, as the store opens."""
        if not isinstance(self.clock, HeldClock):
            return
        try:
            row = self.reader().one("clock_floor", ceiling=time.time() + LONGEST_HOLD)
        except SchemaMissing:
            return  # no schema yet: nothing written to hold to
        self.clock.hold_at_least(row["floor"])

    def _queued_into(self, tx: Tx, queue: str) -> None:
        if getattr(tx, "conn", None) is self.conn:  # a caller's own transaction commits after we return
            self._queued.add(queue)

    def _ring_bells(self) -> None:
        """After a commit: ring the bells of what it made due (``rowfleet.store.wake.ring``)."""
        if self._queued or self._dispatched:
            ring([self._bell("queue", queue) for queue in self._queued]
                 + [self._bell("dispatch", project) for project in self._dispatched])
            self._queued.clear()
            self._dispatched.clear()

    def _bell(self, kind: str, name: str) -> str:
        key = (kind, name)
        path = self._bells.get(key)
        if path is None:
            path = self._bells[key] = bell_path(self.path, kind, name)
        return path

    def _commit(self) -> None:
        try:
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise translate(exc, " committing") from None

    def _rollback(self) -> None:
        self._queued.clear()  # nothing it noted was committed
        self._dispatched.clear()
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the transaction is already gone; nothing was committed

    def reader(self) -> Tx:
        if not self._reads_wait:  # a read may meet a lock (WAL recovery, a checkpoint): it waits as configured
            self.conn.execute(self._busy_timeout_pragma)
            self._reads_wait = True
        return SQLiteTx(self.conn, self.sql, self.clock())

    @contextlib.contextmanager
    def caller_transaction(self, conn: Any) -> Iterator[Tx]:
        if not isinstance(conn, sqlite3.Connection):
            raise TypeError(f"conn must be a sqlite3.Connection for a SQLite store, got {type(conn).__name__}")
        tx = SQLiteTx(conn, self.sql, self.clock())
        if conn.in_transaction:
            with savepoint(tx):
                yield tx
            return
        # None open: one of our own, taking the write lock up front. (A savepoint here would
        # open a transaction and commit it at its release, behind a caller who commits.) It
        # commits at once where each of the caller's statements does; under Python's legacy
        # transaction control it is left open, as its implicit BEGIN would be, for the
        # caller's commit() or rollback().
        _on_callers(conn, "BEGIN IMMEDIATE", " taking the write lock")
        try:
            yield tx
            if _autocommits(conn):
                _on_callers(conn, "COMMIT", " committing")
        except BaseException:
            if conn.in_transaction:  # ours alone: nothing of the caller's was pending
                with contextlib.suppress(RowfleetError):
                    _on_callers(conn, "ROLLBACK", " rolling back")
            raise

    def waiter(self, queues: str | tuple[str, ...]) -> Waiter:
        names = (queues,) if isinstance(queues, str) else queues
        return FileWaiter(self.path, self.config.poll, [self._bell("queue", queue) for queue in names])

    def dispatch_waiter(self, project: str) -> Waiter:
        # Dispatch events are written by rowfleet's store alone (a node's outcome, a reconcile),
        # which rings this bell: the WAL would wake an orchestrator only for others' commits.
        return FileWaiter(self.path, self.config.poll, [self._bell("dispatch", project)], bells_only=True)

    def job_waiter(self, job_id: int, project: str) -> Waiter:
        # A job's end is a commit like any other: the file watch wakes the waiter at every
        # commit, and it reads one row by its key (see ``wait_for``).
        return FileWaiter(self.path, self.config.poll)

    def control_waiter(self, host: str) -> Waiter:
        # Every commit to the file would wake a file watcher; a switch is read once per poll.
        return Sleeper()

    def _read_data_version(self) -> int:
        try:
            return self.conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise translate(exc) from None
        except UnicodeError as exc:
            raise unreadable(exc) from None

    def changed(self) -> bool:
        version = self._read_data_version()
        changed, self._data_version = version != self._data_version, version
        return changed

    def close(self) -> None:
        self.conn.close()
