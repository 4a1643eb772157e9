"""The PostgreSQL dialect: connections, transactions, error translation, LISTEN wake-ups.

psycopg 3 is imported lazily, inside functions only, so importing rowfleet or using
SQLite never loads it; selecting Postgres without it installed is one clear error.
Time comes from the database (``rowfleet_now(...)`` in the SQL), so hosts with skewed
clocks agree on leases and delays. A connection lost to a restart or a failover is
dropped and made again on next use; a read is asked again at once on the new connection,
a write's caller sees ``StoreUnavailable`` once and backs off.
"""

from __future__ import annotations

import contextlib
import logging
import math
import select
import time
from typing import Any, Callable, Iterator, Sequence

from rowfleet.claim import Claim
from rowfleet.config import Config, redact_url
from rowfleet.control import ANY
from rowfleet.errors import (ConfigError, DatabaseBroken, DatabaseUnreachable, DiskFull, MigrationError, RowfleetError,
                             LeaseLost, SchemaMissing, StoreUnavailable)
from rowfleet.job import TERMINAL, Job, Outcome
from rowfleet.sql.queries import latest_version, queries
from rowfleet.store.base import Store
from rowfleet.store.core import Tx, savepoint, schema_gone_unless_new
from rowfleet.store.jobs import claim_forms, claim_params, outcome_detail, refused_if_stale
from rowfleet.store.wake import SelfPipe, Sleeper

log = logging.getLogger("rowfleet.store")

# The session settings among ``connection_bounds``: sent once per connection with
# ``session_bounds``, as a pooler refuses them as startup options; the rest are libpq's.
SESSION_BOUNDS = ("statement_timeout", "idle_in_transaction_session_timeout")
# Floors under the bounds, so that short test settings do not cut healthy work short: libpq
# reads a connect_timeout under 2 s as 2 s, and the engine's longest statements (a prune
# batch, a sweep of a large queue, the panel's counts) take seconds on a loaded server.
MIN_CONNECT_TIMEOUT = 2
MIN_TCP_USER_TIMEOUT = 1.0
MIN_STATEMENT_TIMEOUT = 30.0
MIN_IDLE_IN_TRANSACTION = 10.0
KEEPALIVE_PROBES = 3


def connection_bounds(config: Config) -> dict[str, int]:
    """How long anything on one PostgreSQL connection may take to fail, from ``config``'s
    lease, renew and heartbeat: libpq's connection parameters (seconds, but
    ``tcp_user_timeout`` in ms) and the session's timeouts (ms, ``SESSION_BOUNDS``).

    - ``tcp_user_timeout`` = renew (at least 1 s): data sent and not acknowledged for that
      long ends the connection. Keepalives probe only an idle socket; a statement in flight
      on a dead path (a renewal, a sweep, a finish) would otherwise wait out TCP's
      retransmissions, about 15 minutes. So a renewal on a dead path fails within one renew
      period and the keeper tries again on a fresh connection before the lease runs out.
    - ``connect_timeout`` = renew (at least 2 s, libpq's floor): each host of a multi-host
      URL gets that long, so a reconnect moves on from a vanished primary to the promoted
      standby within a renew period per dead host.
    - keepalives: idle = heartbeat, interval = heartbeat / 3, 3 probes: an idle connection
      (a LISTEN waiter, a keeper between beats) on a dead path is dropped within about two
      heartbeats, and made again through the multi-host list.
    - ``statement_timeout`` = lease (at least 30 s): a statement still running after a lease
      has lost its point, as the lease it guards has lapsed and the job may be handed on;
      ended, its process asks again. Migrations lift it for their own transaction.
    - ``idle_in_transaction_session_timeout`` = lease (at least 10 s): a second net. The engine
      never leaves a transaction idle; a session whose client was cut off between two
      statements would hold its row locks (which sweeps skip) until the server's keepalives
      gave up, two hours by default; it is ended by the time the lease it guards lapses.

    >>> from rowfleet.config import Config
    >>> connection_bounds(Config(lease=30.0, renew=10.0, heartbeat=10.0))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'connect_timeout': 10, 'keepalives': 1, 'keepalives_idle': 10, 'keepalives_interval': 4,
     'keepalives_count': 3, 'tcp_user_timeout': 10000, 'statement_timeout': 30000,
     'idle_in_transaction_session_timeout': 30000}
    >>> bounds = connection_bounds(Config(lease=1.0, renew=0.3, heartbeat=0.5))
    >>> bounds["connect_timeout"], bounds["tcp_user_timeout"], bounds["statement_timeout"]
    (2, 1000, 30000)
    """
    renew, lease, heartbeat = config.renew, config.lease, config.heartbeat
    return {
        "connect_timeout": max(MIN_CONNECT_TIMEOUT, math.ceil(renew)),
        "keepalives": 1,
        "keepalives_idle": max(1, math.ceil(heartbeat)),
        "keepalives_interval": max(1, math.ceil(heartbeat / KEEPALIVE_PROBES)),
        "keepalives_count": KEEPALIVE_PROBES,
        "tcp_user_timeout": _ms(max(MIN_TCP_USER_TIMEOUT, renew)),
        "statement_timeout": _ms(max(MIN_STATEMENT_TIMEOUT, lease)),
        "idle_in_transaction_session_timeout": _ms(max(MIN_IDLE_IN_TRANSACTION, lease)),
    }


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def transaction_pooled(config: Config | None) -> bool:
    """Whether ``--db`` goes through a pooler in transaction mode (``--pooler transaction``):
    each transaction may run on another server connection, so nothing may outlive one (a
    prepared statement, a session setting, a LISTEN). Session mode is the server's own.

    >>> transaction_pooled(Config(pooler="transaction")), transaction_pooled(Config(pooler="session"))
    (True, False)
    """
    return config is not None and config.pooler == "transaction"


def driver() -> Any:
    """The psycopg module, or the one-line answer for a machine without it."""
    try:
        import psycopg
    except ImportError:
        raise ConfigError("postgres support needs psycopg: pip install 'rowfleet[postgres]'") from None
    return psycopg


def connect(url: str, config: Config | None = None, *, autocommit: bool = True, direct: bool = False) -> Any:
    """A connection to ``url`` bounded by ``connection_bounds(config)`` (the defaults' without
    a config). A bound the URL names itself (``?tcp_user_timeout=5000``, or ``-c
    statement_timeout=...`` in its ``options``) is the operator's choice and kept; every
    other part of the URL, a multi-host list and ``target_session_attrs`` included, is
    handed to libpq as written.

    Through a transaction pooler (``transaction_pooled``, unless ``direct``: the URL reaches
    the server itself) psycopg prepares no statement, and the session's timeouts are left
    to each transaction of the store's own (``transaction_bounds``): set on the session,
    they would stay on a server connection that other clients' transactions then use."""
    psycopg = driver()
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import dict_row

    try:
        named = conninfo_to_dict(url)
    except psycopg.Error as exc:  # as psycopg.connect would have answered
        raise DatabaseUnreachable(f"cannot connect to {redact_url(url)}: {_first_line(exc)}") from None
    bounds = connection_bounds(config if config is not None else Config())
    options = (named.get("options") or "").replace("-", "_")  # "--statement-timeout=5s" too
    params = {name: value for name, value in bounds.items() if name not in named and name not in SESSION_BOUNDS}
    session = {name: f"{bounds[name]}ms" for name in SESSION_BOUNDS if name not in options}
    params.update(writable_session(named))
    params.update(last_writable_first(named, _last_writable.get(url)))
    pooled = transaction_pooled(config) and not direct
    if pooled:
        params["prepare_threshold"] = None
    try:
        conn = psycopg.connect(url, autocommit=autocommit, row_factory=dict_row, **params)
    except psycopg.Error as exc:
        raise DatabaseUnreachable(f"cannot connect to {redact_url(url)}: {_first_line(exc)}") from None
    if "," in str(named.get("host") or ""):
        _last_writable[url] = (conn.info.host, str(conn.info.port))
    if pooled:
        return conn
    try:
        conn.execute(queries("postgres")["session_bounds"], {name: session.get(name) for name in SESSION_BOUNDS})
        if not autocommit:
            conn.commit()
    except psycopg.Error as exc:
        conn.close()
        raise translate(exc, " setting the session's timeouts") from None
    return conn


def writable_session(named: dict[str, Any]) -> dict[str, str]:
    """What to add to a URL (read by libpq into ``named``) so that a multi-host one reaches
    a server that takes writes: ``target_session_attrs=read-write`` where it names none.
    libpq would otherwise take the first host that answers; after a failover that may be a
    hot standby, where every process's first write (a heartbeat, a claim) is refused as
    read-only. Every rowfleet process writes, so the choice is made for the operator; a URL
    that names one keeps it.

    >>> writable_session({"host": "db1,db2", "dbname": "jobs"})
    {'target_session_attrs': 'read-write'}
    >>> writable_session({"host": "db1,db2", "target_session_attrs": "primary"})
    {}
    >>> writable_session({"host": "db1"})
    {}
    """
    hosts = [host for host in str(named.get("host") or named.get("hostaddr") or "").split(",") if host]
    if len(hosts) > 1 and "target_session_attrs" not in named:
        return {"target_session_attrs": "read-write"}
    return {}


# Each multi-host URL's host (and port) that last gave this process a session, tried first
# the next time (``last_writable_first``).
_last_writable: dict[str, tuple[str, str]] = {}


def last_writable_first(named: dict[str, Any], last: tuple[str, str] | None) -> dict[str, str]:
    """The ``host`` and ``port`` of a multi-host URL (read by libpq into ``named``) reordered
    so that ``last``, the (host, port) that last accepted a read-write session, comes
    first; {} to leave the URL as written. libpq tries the hosts in order, and a vanished
    primary first in the list costs every new connection its connect or TCP timeout
    (seconds each: a scrape of ``/metrics`` opens one per request) for as long as it is
    gone. Only where the server decides (``target_session_attrs`` read-write or primary,
    which rowfleet asks for by default): any other host that now takes writes is still
    found, as libpq moves on from one that does not.

    >>> last_writable_first({"host": "db1,db2", "port": "5432,5433"}, ("db2", "5433"))
    {'host': 'db2,db1', 'port': '5433,5432'}
    >>> last_writable_first({"host": "db1,db2", "port": "5432"}, ("db2", "5432"))
    {'host': 'db2,db1', 'port': '5432,5432'}
    >>> last_writable_first({"host": "db1,db2", "target_session_attrs": "any"}, ("db2", "5432"))
    {}
    """
    if last is None or named.get("target_session_attrs", "read-write") not in ("read-write", "primary") \
            or named.get("hostaddr") or named.get("load_balance_hosts"):
        return {}
    hosts = str(named.get("host") or "").split(",")
    ports = str(named.get("port") or "5432").split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports
    if len(hosts) < 2 or len(ports) != len(hosts) or last not in (pairs := list(zip(hosts, ports))):
        return {}
    pairs.remove(last)
    pairs.insert(0, last)
    return {"host": ",".join(host for host, _ in pairs), "port": ",".join(port for _, port in pairs)}


def translate(exc: Exception, what: str = "") -> RowfleetError:
    """Turn a psycopg exception into the rowfleet error that tells the caller what to do."""
    psycopg = driver()
    if isinstance(exc, psycopg.errors.UndefinedTable) or isinstance(exc, psycopg.errors.UndefinedFunction):
        return SchemaMissing(f"the database has no rowfleet schema ({_first_line(exc)}): run `rowfleet init`",
                             detail=_first_line(exc))
    # No wait repairs these: a database or role set read-only, privileges withheld, data
    # corrupt. (A server shutting down or in recovery is an OperationalError: transient.)
    if isinstance(exc, (psycopg.errors.ReadOnlySqlTransaction, psycopg.errors.InsufficientPrivilege,
                        psycopg.errors.DataCorrupted, psycopg.errors.IndexCorrupted)):
        return DatabaseBroken(f"the database cannot be used{what}: {_first_line(exc)}: an operator must "
                              f"repair it, as no wait will")
    if isinstance(exc, psycopg.errors.DiskFull):  # weather, as on SQLite: waited out, counted against nothing
        return DiskFull(f"the database's disk is full{what}: {_first_line(exc)}; make room on the server")
    if isinstance(exc, psycopg.OperationalError):  # the connection or the server, not the statement
        return DatabaseUnreachable(f"database unreachable{what}: {_first_line(exc)}")
    return StoreUnavailable(f"database error{what}: {_first_line(exc)}")


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class PostgresTx(Tx):
    def __init__(self, cursor: Any, sql: dict[str, str], now: float | None) -> None:
        self.cursor = cursor
        self.sql = sql
        self.now = now  # None: the SQL reads the database's clock

    def _execute(self, query: str, params: dict[str, Any]) -> Any:
        psycopg = driver()
        try:
            params["now"] = self.now  # params is the caller's fresh **kwargs dict
            return self.cursor.execute(self.sql[query], params)
        except psycopg.Error as exc:
            raise translate(exc, f" in {query}") from exc

    # ``rownumber`` is None when a statement returned no rows; ``description`` would say the
    # same but builds a Column object per column on every call.
    def one(self, query: str, **params: Any) -> Any | None:
        cursor = self._execute(query, params)
        return cursor.fetchone() if cursor.rownumber is not None else None

    def all(self, query: str, **params: Any) -> list[Any]:
        cursor = self._execute(query, params)
        return cursor.fetchall() if cursor.rownumber is not None else []

    def run(self, query: str, **params: Any) -> int:
        return self._execute(query, params).rowcount

    def script(self, sql: str) -> None:
        psycopg = driver()
        try:
            self.cursor.execute(self.sql["migration_unbounded"])
            self.cursor.execute(sql)  # no parameters: several statements may run in one go
        except psycopg.Error as exc:
            raise translate(exc, " in a migration") from exc


class PostgresStore(Store):
    dialect = "postgres"
    passes_between_threads = True  # its reads autocommit: an idle connection holds no snapshot
    # Queries only this dialect has: composite operations SQLite cannot do in one statement.
    own_queries = frozenset({*(f"finish_and_claim{form}" for form in ("", "[routed]", "[newest]", "[warm]")),
                             "finish_terminal", "finish_many",
                             "database_time", "listen_jobs", "listen_dispatch", "listen_control",
                             "listen_done", "mark_waited",
                             "session_bounds", "transaction_bounds", "migration_unbounded"})
    own_fragments = frozenset({"finished_turn"})  # fragments only this dialect's own queries include

    def __init__(self, url: str, config: Config, *, clock: Callable[[], float] | None = None) -> None:
        super().__init__(config, self._database_time)
        self.url = url
        # Production reads the database's clock; tests pass a clock of their own to move time.
        self._test_clock = clock
        # Through a transaction pooler the session's bounds go with each transaction of ours instead.
        bounds = connection_bounds(config)
        self._transaction_bounds = ({name: f"{bounds[name]}ms" for name in SESSION_BOUNDS}
                                    if transaction_pooled(config) else None)
        self._conn: Any = None
        self._connection()

    def _now(self) -> float | None:
        return None if self._test_clock is None else self._test_clock()

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.url, self.config)
        return self._conn

    def _lost(self, exc: Exception) -> bool:
        """Forget a connection that broke, so the next use makes a new one."""
        psycopg = driver()
        if isinstance(exc, psycopg.OperationalError) or (self._conn is not None and self._conn.closed):
            self.close()
            return True
        return False

    @contextlib.contextmanager
    def transaction(self, durable: bool = True) -> Iterator[Tx]:
        # ``durable`` is a SQLite concern (fsync per commit); Postgres commits as configured.
        psycopg = driver()
        conn = self._connection()
        try:
            with conn.transaction(), conn.cursor() as cursor:
                if self._transaction_bounds is not None:
                    cursor.execute(self.sql["transaction_bounds"], self._transaction_bounds)
                yield PostgresTx(cursor, self.sql, self._now())
        except psycopg.Error as exc:
            self._lost(exc)
            raise self._schema_gone(translate(exc)) from exc
        except RowfleetError as exc:
            if exc.__cause__ is not None:
                self._lost(exc.__cause__)
            raise self._schema_gone(exc) from exc.__cause__

    def _schema_gone(self, error: RowfleetError) -> RowfleetError:
        """A missing table, read again outside the failed transaction: made yet, or dropped since?"""
        if isinstance(error, SchemaMissing) and self._conn is not None:
            return schema_gone_unless_new(error, self.reader(), self.dialect)
        return error

    def claim(self, claim: Claim) -> Job | None:
        """As ``Store.claim``, in one statement: on Postgres round trips are the cost. When a
        promotion of fallen-due delayed jobs is due (about once per poll), it and the claim
        share a transaction instead; a claim that finds nothing promotes, and tries again.
        Each form of the claim (``claim_forms``) is tried in turn. A limited claim reads and
        locks its limits first: ``Store``'s, in a transaction."""
        if claim.limited:
            return super().claim(claim)
        row, promoted = self._claiming(claim_forms("claim", claim), claim, **claim_params(claim))
        if row is None:
            return None if promoted else self._claim_after_promotion(claim)
        return Job.from_row(row)

    def _claiming(self, forms: tuple[str, ...], claim: Claim, **params: Any) -> tuple[Any | None, bool]:
        """A one-statement claim (``claim``, ``finish_and_claim``), each of its forms
        in turn until one finds a job: on its own, or after the promotion ``Store`` would run
        first, in one transaction with it. The row of the last form run, and whether it
        promoted."""
        if not self._promotion_due(claim):
            return _first_row(_AutocommitTx(self), forms, params), False
        with self.transaction() as tx:
            self._promote(tx, claim)
            return _first_row(tx, forms, params), True

    def _claim_after_promotion(self, claim: Claim) -> Job | None:
        """Nothing was due in the claim index: promote what has fallen due, and claim once
        more if that moved any job."""
        with self.transaction() as tx:
            row = (_first_row(tx, claim_forms("claim", claim), claim_params(claim)) if self._promote(tx, claim)
                   else None)
        return None if row is None else Job.from_row(row)

    def local_clock(self) -> float:
        # What it is for needs no shared clock: this host's spares the database a round trip.
        return time.time() if self._test_clock is None else self._test_clock()

    def finish(self, job: Job, outcome: Outcome, claim_next: Claim | None = None) -> Job | None:
        """As ``Store.finish``; a terminal outcome followed by a claim is one statement here,
        since on Postgres a busy worker is bound by round trips, not by commits."""
        if outcome.state not in TERMINAL or (claim_next is not None and claim_next.limited):
            return super().finish(job, outcome, claim_next)
        if claim_next is None:
            self._finish_terminal(job, outcome)
            return None
        # The turn's statement claims by the claim's first form; any other is a claim of its own.
        first, *others = claim_forms("finish_and_claim", claim_next)
        row, promoted = self._claiming(
            (first,), claim_next, id=job.id, token=job.lease_token, state=outcome.state,
            result=outcome.result_json, error=outcome.error, traceback=outcome.traceback,
            kind=outcome.event or outcome.state, detail=outcome_detail(job, outcome),
            **claim_params(claim_next))
        if not row["finished"]:  # nothing was written: an idempotent repeat, or a stale holder
            with self.transaction() as tx:
                self._check_already_written(tx, job, outcome)
            return self.claim(claim_next)
        if row["id"] is None and others:
            return self.claim(claim_next)
        if row["id"] is None:
            return None if promoted else self._claim_after_promotion(claim_next)
        return Job.from_row(row)

    def _write_outcomes(self, tx: Tx, done: Sequence[tuple[Job, Outcome]], fenced: bool) -> list[LeaseLost]:
        """As ``Store._write_outcomes``, the terminal outcomes in one statement (``finish_many``):
        on Postgres a batch is bound by round trips, one per outcome otherwise."""
        terminal = [(job, outcome) for job, outcome in done if outcome.state in TERMINAL]
        lost = super()._write_outcomes(tx, [item for item in done if item[1].state not in TERMINAL], fenced)
        if not terminal:
            return lost
        written = {row["id"] for row in tx.all(
            "finish_many", ids=[job.id for job, _ in terminal], tokens=[job.lease_token for job, _ in terminal],
            states=[outcome.state for _, outcome in terminal], results=[outcome.result_json for _, outcome in terminal],
            errors=[outcome.error for _, outcome in terminal], tracebacks=[outcome.traceback for _, outcome in terminal],
            kinds=[outcome.event or outcome.state for _, outcome in terminal],
            details=[outcome_detail(job, outcome) for job, outcome in terminal])}
        for job, outcome in terminal:
            if job.id not in written:  # an idempotent repeat, or a stale holder
                refused_if_stale(lost, fenced, lambda: self._check_already_written(tx, job, outcome))
        return lost

    def _finish_terminal(self, job: Job, outcome: Outcome) -> None:
        """A terminal outcome with no claim after it, in one statement."""
        row = _AutocommitTx(self).one("finish_terminal", id=job.id, token=job.lease_token, state=outcome.state,
                                      result=outcome.result_json, error=outcome.error, traceback=outcome.traceback,
                                      kind=outcome.event or outcome.state, detail=outcome_detail(job, outcome))
        if not row["finished"]:  # nothing was written: an idempotent repeat, or a stale holder
            with self.transaction() as tx:
                self._check_already_written(tx, job, outcome)

    def reader(self) -> Tx:
        return _AutocommitTx(self, reads_only=True)

    @contextlib.contextmanager
    def statement(self) -> Iterator[Tx]:
        """Autocommit: the statement is its own transaction, begun and committed in its one
        round trip, so a cut never leaves a session idle in a transaction holding a row."""
        yield _AutocommitTx(self)

    @contextlib.contextmanager
    def caller_transaction(self, conn: Any) -> Iterator[Tx]:
        psycopg = driver()
        from psycopg.pq import TransactionStatus
        from psycopg.rows import dict_row

        if not isinstance(conn, psycopg.Connection):
            raise TypeError(f"conn must be a psycopg Connection for a Postgres store, got {type(conn).__name__}")
        tx = PostgresTx(conn.cursor(row_factory=dict_row), self.sql, self._now())
        if conn.info.transaction_status != TransactionStatus.IDLE:
            with savepoint(tx):
                yield tx
        elif conn.autocommit:  # nothing of the caller's pending: a transaction of our own
            try:
                with conn.transaction():
                    yield tx
            except psycopg.Error as exc:
                raise translate(exc, " on the caller's connection") from exc
        else:
            # psycopg opens the caller's transaction before our first statement (its own
            # transaction() here would commit at the end, behind the caller): left open for
            # the caller's commit, and rolled back whole on a failure, as all of it is ours.
            try:
                yield tx
            except BaseException:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()
                raise

    def waiter(self, queues: str | tuple[str, ...]) -> "ListenWaiter | Sleeper":
        return self._listener(queues, "listen_jobs")

    def job_waiter(self, job_id: int, project: str) -> "ListenWaiter | Sleeper":
        # Listening first, then the mark: the job's end after the mark notifies us, and an
        # end before it is in the row the caller reads next.
        waiter = self._listener(str(job_id), "listen_done")
        with self.statement() as tx:
            tx.run("mark_waited", id=job_id, project=project)
        return waiter

    def dispatch_waiter(self, project: str) -> "ListenWaiter | Sleeper":
        return self._listener(project, "listen_dispatch")

    def control_waiter(self, host: str) -> "ListenWaiter | Sleeper":
        return self._listener((host, ANY), "listen_control")

    def _listener(self, payload: str | tuple[str, ...], listen: str) -> "ListenWaiter | Sleeper":
        """A LISTEN waiter on ``--listen-url``, else on ``--db`` unless that goes through a
        transaction pooler, where LISTEN hears nothing (its session is nobody's): there the
        caller wakes at its safety poll alone (a ``Sleeper``)."""
        if self.config.listen_url:
            return ListenWaiter(self.config.listen_url, payload, listen=listen, config=self.config)
        if not transaction_pooled(self.config):
            return ListenWaiter(self.url, payload, listen=listen, config=self.config)
        global _told_no_listen
        if not _told_no_listen:
            _told_no_listen = True
            log.info("no LISTEN through a transaction pooler: idle processes look for work every %gs (give "
                     "--listen-url, a URL straight to the server, for wake-ups)", self.config.poll)
        return Sleeper()

    def migrate(self) -> int:
        """As ``StoreCore.migrate``; through a transaction pooler only a schema with nothing to
        migrate passes (a migration holds one session for its DDL, its bookkeeping and its
        own statement timeout), and one behind is a ``MigrationError`` saying where to run it."""
        if not transaction_pooled(self.config):
            return super().migrate()
        version, target = self.refuse_newer_schema(), latest_version(self.dialect)
        if version < target:
            raise MigrationError(f"the schema is version {version} and this rowfleet needs {target}, but migrations do "
                                 f"not run through a pooler in transaction mode (--pooler transaction): run "
                                 f"`rowfleet init` once with --db straight to the server")
        return self.require_schema()

    def changed(self) -> bool:
        return True  # a NOTIFY arrives only after its commit: nothing to second-guess

    def _database_time(self) -> float:
        return self.reader().one("database_time")["now"]

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


_told_no_listen = False  # the safety-poll fallback is logged once per process


def _first_row(tx: Tx, forms: tuple[str, ...], params: dict[str, Any]) -> Any | None:
    """The row of the first of ``forms`` that returns one, or None."""
    return next((row for query in forms if (row := tx.one(query, **params)) is not None), None)


class _AutocommitTx(PostgresTx):
    """Statements each atomic on their own: reads that see the latest committed state, and
    the one-statement writes (a claim, a busy worker's turn)."""

    def __init__(self, store: PostgresStore, *, reads_only: bool = False) -> None:
        self.store = store
        # A read found its connection broken (a restart, a failover) is asked once more on a
        # new one, so its caller never hears of a connection it had no part in losing. A
        # write is not: whether it committed before the break is unknown.
        self.reads_only = reads_only
        super().__init__(None, store.sql, store._now())

    def _execute(self, query: str, params: dict[str, Any]) -> Any:
        psycopg = driver()
        params["now"] = self.now
        again = self.reads_only
        while True:
            conn = self.store._connection()
            try:
                self.cursor = conn.cursor()
                return self.cursor.execute(self.sql[query], params)
            except psycopg.Error as exc:
                self.store._lost(exc)
                if again and conn.broken:  # broken, not merely ended by a timeout or refused
                    again = False
                    continue
                raise self.store._schema_gone(translate(exc, f" in {query}")) from exc


class ListenWaiter:
    """Blocks on a dedicated LISTEN connection (a connection busy with queries would miss
    notifications). After a reconnect it reports a change, since a NOTIFY may have been
    sent while it was away."""

    settle_window = 0.0

    def __init__(self, url: str, payload: str | tuple[str, ...], listen: str = "listen_jobs", *,
                 config: Config | None = None) -> None:
        self.url = url
        self.config = config
        # The trigger's payload (a queue, a project for dispatch events, a host for switches,
        # where "*" is every host): only ours wake us.
        self._payloads = {item.encode() for item in ((payload,) if isinstance(payload, str) else payload)}
        self._listen_query = listen
        self._pipe = SelfPipe()
        self._conn: Any = None
        self._listen()

    def _listen(self) -> bool:
        try:
            conn = connect(self.url, self.config, direct=True)  # never a transaction pooler's
            conn.execute(queries("postgres")[self._listen_query])
        except (RowfleetError, driver().Error):
            return False
        self._conn = conn
        return True

    def wait(self, timeout: float) -> bool:
        if self._conn is None:
            if not self._listen():
                self._nap(min(timeout, 1.0))
                return False
            return True  # back after an outage: whatever was sent meanwhile is gone
        readable, _, _ = select.select([self._conn.fileno(), self._pipe], [], [], max(timeout, 0.0))
        if self._pipe in readable:
            self._pipe.clear()
            return False
        return bool(readable) and self._take_notifications()

    def _take_notifications(self) -> bool:
        try:
            self._conn.pgconn.consume_input()
            got = False
            while (note := self._conn.pgconn.notifies()) is not None:
                got = got or note.extra in self._payloads
            return got
        except driver().Error:
            self._drop()
            return True

    def drain(self) -> None:
        if self._conn is not None:
            self._take_notifications()

    def interrupt(self) -> None:
        self._pipe.ring()

    def _nap(self, seconds: float) -> None:
        readable, _, _ = select.select([self._pipe], [], [], max(seconds, 0.0))
        if readable:
            self._pipe.clear()

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # closing a broken connection may complain; it is gone either way
                pass
            self._conn = None

    def close(self) -> None:
        self._drop()
        self._pipe.close()
