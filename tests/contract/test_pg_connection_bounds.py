"""Every PostgreSQL connection fails within a known time, and the keeper's writes hold no lock.

Owns ``connection_bounds`` (table-driven, and its doctests): which libpq parameters and
session timeouts each connection the store opens gets, from the lease, renew and heartbeat
settings. Against the harness's server: the store's connection and a LISTEN waiter's report
them, a URL that names a bound keeps its own value, a multi-host URL still reaches the live
host, and a renewal and a heartbeat are each one statement in a transaction of its own
(autocommit), so no row lock is held across round trips.
"""

from __future__ import annotations

import unittest
import urllib.parse

from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.job import JobSpec
from rowfleet.store import open_store
from rowfleet.store.postgres import SESSION_BOUNDS, connect, connection_bounds, driver
from pg_harness import PostgresDatabaseCase, free_port


class ConnectionBoundsTable(unittest.TestCase):
    # (lease, renew, heartbeat) -> the bounds they give.
    ROWS = (
        ((600.0, 10.0, 10.0), {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 10,
                               "keepalives_interval": 4, "keepalives_count": 3, "tcp_user_timeout": 10000,
                               "statement_timeout": 600000, "idle_in_transaction_session_timeout": 600000}),
        ((15.0, 5.0, 2.0), {"connect_timeout": 5, "keepalives": 1, "keepalives_idle": 2,
                            "keepalives_interval": 1, "keepalives_count": 3, "tcp_user_timeout": 5000,
                            "statement_timeout": 30000, "idle_in_transaction_session_timeout": 15000}),
        # Short test settings: libpq's 2 s connect floor, 1 s of TCP, 30 s and 10 s floors.
        ((1.0, 0.3, 0.5), {"connect_timeout": 2, "keepalives": 1, "keepalives_idle": 1,
                           "keepalives_interval": 1, "keepalives_count": 3, "tcp_user_timeout": 1000,
                           "statement_timeout": 30000, "idle_in_transaction_session_timeout": 10000}),
        ((90.0, 7.5, 30.0), {"connect_timeout": 8, "keepalives": 1, "keepalives_idle": 30,
                             "keepalives_interval": 10, "keepalives_count": 3, "tcp_user_timeout": 7500,
                             "statement_timeout": 90000, "idle_in_transaction_session_timeout": 90000}),
    )

    def test_each_row(self) -> None:
        for (lease, renew, heartbeat), expected in self.ROWS:
            with self.subTest(lease=lease, renew=renew, heartbeat=heartbeat):
                self.assertEqual(connection_bounds(Config(lease=lease, renew=renew, heartbeat=heartbeat)), expected)

    def test_a_statement_on_a_dead_path_fails_within_a_renew_period(self) -> None:
        for lease, renew in ((600.0, 10.0), (30.0, 10.0), (15.0, 5.0), (4.0, 1.0)):
            with self.subTest(lease=lease, renew=renew):
                bounds = connection_bounds(Config(lease=lease, renew=renew))
                self.assertLessEqual(bounds["tcp_user_timeout"], renew * 1000)
                self.assertLess(bounds["tcp_user_timeout"] + bounds["connect_timeout"] * 1000, lease * 1000)


class PostgresConnectionBounds(PostgresDatabaseCase, unittest.TestCase):
    SETTINGS = {"lease": 40.0, "renew": 4.0, "heartbeat": 6.0}

    def setUp(self) -> None:
        super().setUp()
        self.store = open_store(self.config(**self.SETTINGS), create=True)
        self.addCleanup(self.store.close)
        self.store.migrate()
        self.bounds = connection_bounds(self.config(**self.SETTINGS))

    def session(self, conn) -> dict[str, int]:
        rows = conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", [list(SESSION_BOUNDS)])
        return {row["name"]: int(row["setting"]) for row in rows.fetchall()}

    def libpq(self, conn) -> dict[str, str]:
        return {name: value for name, value in conn.info.get_parameters().items() if name in self.bounds}

    def expected_libpq(self) -> dict[str, str]:
        return {name: str(value) for name, value in self.bounds.items() if name not in SESSION_BOUNDS}

    def test_the_stores_connection_has_every_bound(self) -> None:
        conn = self.store._connection()
        self.assertEqual(self.libpq(conn), self.expected_libpq())
        self.assertEqual(self.session(conn), {"statement_timeout": 40000,
                                              "idle_in_transaction_session_timeout": 40000})
        self.assertEqual(conn.execute("SHOW statement_timeout").fetchone()["statement_timeout"], "40s")

    def test_a_listen_waiters_connection_has_every_bound(self) -> None:
        waiter = self.store.waiter("default")
        self.addCleanup(waiter.close)
        self.assertEqual(self.libpq(waiter._conn), self.expected_libpq())
        self.assertEqual(self.session(waiter._conn)["idle_in_transaction_session_timeout"], 40000)

    def test_a_bound_the_url_names_is_kept(self) -> None:
        options = urllib.parse.quote("-c statement_timeout=7s")
        url = f"{self.url}?tcp_user_timeout=4321&keepalives_idle=77&options={options}"
        conn = connect(url, self.config(**self.SETTINGS))
        self.addCleanup(conn.close)
        params = self.libpq(conn)
        self.assertEqual((params["tcp_user_timeout"], params["keepalives_idle"]), ("4321", "77"))
        self.assertEqual(params["connect_timeout"], str(self.bounds["connect_timeout"]))
        self.assertEqual(self.session(conn), {"statement_timeout": 7000,
                                              "idle_in_transaction_session_timeout": 40000})

    def test_a_multi_host_url_reaches_the_live_host(self) -> None:
        parts = urllib.parse.urlsplit(self.url)
        dead = f"{parts.hostname}:{free_port()}"
        live = f"{parts.hostname}:{parts.port}"
        user = f"{parts.username}@" if parts.username else ""
        url = urllib.parse.urlunsplit((parts.scheme, f"{user}{dead},{live}", parts.path,
                                       "target_session_attrs=read-write", ""))
        conn = connect(url, self.config(**self.SETTINGS))
        self.addCleanup(conn.close)
        self.assertEqual(conn.info.port, parts.port)
        self.assertEqual(conn.info.get_parameters()["target_session_attrs"], "read-write")
        self.assertEqual(self.libpq(conn), self.expected_libpq())

    # --- the keeper's writes ------------------------------------------------------------

    def after_each_statement(self, lock_sql: str, params: list) -> list[tuple[str, bool]]:
        """From now on, right after each statement of the store's connection returns (before
        its next round trip, a COMMIT included): its session's state, and whether another
        session can lock the row ``lock_sql`` selects at once."""
        conn = self.store._connection()
        backend = conn.info.backend_pid
        observer = connect(self.url)
        self.addCleanup(observer.close)
        seen: list[tuple[str, bool]] = []

        def look() -> None:
            state = observer.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", [backend]).fetchone()
            try:
                with observer.transaction():
                    observer.execute(lock_sql + " FOR UPDATE NOWAIT", params)
                free = True
            except driver().errors.LockNotAvailable:
                free = False
            seen.append((state["state"], free))

        make_cursor = conn.cursor

        class Observed:  # psycopg's cursor takes no new attributes: a proxy stands in for it
            def __init__(self, cursor) -> None:
                self.cursor = cursor

            def execute(self, *args, **kwargs):
                self.cursor.execute(*args, **kwargs)
                look()
                return self

            def __getattr__(self, name):
                return getattr(self.cursor, name)

            def __enter__(self):
                self.cursor.__enter__()
                return self

            def __exit__(self, *exc):
                return self.cursor.__exit__(*exc)

        def cursor(*args, **kwargs):
            return Observed(make_cursor(*args, **kwargs))

        conn.cursor = cursor
        return seen

    def test_a_renewal_holds_no_row_lock_after_its_statement(self) -> None:
        self.store.enqueue(JobSpec(task="bounds.noop", args={}))
        job = self.store.claim(Claim("", "default", "box:1", 40.0))
        seen = self.after_each_statement("SELECT 1 FROM jobs WHERE id = %s", [job.id])
        renewal = self.store.renew(job, 40.0)
        self.assertIsNotNone(renewal.lease_expires_at)
        self.assertEqual(seen, [("idle", True)])  # one statement, committed as it returned

    def test_a_heartbeat_holds_no_row_lock_after_its_statement(self) -> None:
        self.store.worker_beat("w-1", "", "box", "default", 4242, None)
        seen = self.after_each_statement("SELECT 1 FROM workers WHERE worker_id = %s", ["w-1"])
        self.store.worker_beat("w-1", "", "box", "default", 4242, None)
        self.assertEqual(seen, [("idle", True)])

    def test_a_migrations_transaction_alone_has_no_statement_timeout(self) -> None:
        conn = self.store._connection()
        with self.store.transaction() as tx:
            tx.script("SELECT 1")
            self.assertEqual(self.session(conn)["statement_timeout"], 0)
        self.assertEqual(self.session(conn)["statement_timeout"], 40000)

class PostgresErrorTest(unittest.TestCase):
    """PostgreSQL's disk-full error (SQLSTATE 53100) is the same weather as SQLite's."""

    def test_disk_full_is_waited_out_and_other_errors_keep_their_kind(self):
        try:
            import psycopg
        except ImportError:
            self.skipTest("psycopg is not installed")  # the PostgreSQL suites say so loudly
        from rowfleet.errors import DatabaseBroken, DatabaseUnreachable, DiskFull, SchemaMissing
        from rowfleet.store import postgres

        cases = [(psycopg.errors.DiskFull("could not extend file"), DiskFull),
                 (psycopg.errors.ReadOnlySqlTransaction("read-only"), DatabaseBroken),
                 (psycopg.errors.UndefinedTable("no jobs"), SchemaMissing),
                 (psycopg.OperationalError("server closed the connection"), DatabaseUnreachable)]
        for exc, expected in cases:
            with self.subTest(exc=type(exc).__name__):
                self.assertIs(type(postgres.translate(exc, " committing")), expected)


if __name__ == "__main__":
    unittest.main()
