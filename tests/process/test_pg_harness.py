"""Tests of tests/pg_harness.py, the throwaway PostgreSQL server the suite runs against.

Owns the harness's promises: fresh ``*_test`` databases that answer queries, refusal of
every other name, restarts that break old connections, drops, and a server that dies
with its test process. Without PostgreSQL the server tests skip (fail under
``ROWFLEET_REQUIRE_PG=1``); the skip/fail logic itself is tested without a server.
psycopg is imported only inside test methods; nothing from rowfleet is imported.
"""

from __future__ import annotations

import doctest
import io
import os
import signal
import subprocess
import sys
import unittest
from unittest import mock

import pg_harness
from pg_harness import PostgresRequired, Unavailable, UnsafeDatabase, require_pg
from support import DEADLINE, child_env, wait_until

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def psycopg_or_skip():
    try:
        import psycopg
    except ImportError:
        raise unittest.SkipTest("psycopg is not installed") from None
    return psycopg


class WithoutServerTests(unittest.TestCase):
    """What the harness decides before (or instead of) talking to a server."""

    def test_doc_examples(self):
        failed, _ = doctest.testmod(pg_harness)
        self.assertEqual(failed, 0)

    def test_only_names_ending_in_test_are_accepted(self):
        self.assertEqual(pg_harness.check_test_database("jobs_test"), "jobs_test")
        for name in ("", "postgres", "jobs", "jobs_test_old", "jobs_TEST", "test"):
            with self.subTest(name=name), self.assertRaises(UnsafeDatabase):
                pg_harness.check_test_database(name)

    def test_missing_binaries_are_a_reason_not_a_crash(self):
        with self.assertRaises(Unavailable) as caught:
            pg_harness.find_binaries(path="", patterns=())
        self.assertIn("initdb", str(caught.exception))

    def test_external_url_must_name_a_test_database(self):
        psycopg_or_skip()
        for url in ("postgresql://ci@127.0.0.1:1/jobs",
                    "postgresql://ci@127.0.0.1:1/jobs_test?dbname=jobs",
                    "host=127.0.0.1 port=1 dbname=jobs"):
            with self.subTest(url=url), self.assertRaises(UnsafeDatabase):
                pg_harness.connect_external(url)

    def unavailable(self, **env):
        """Patch the harness into 'no PostgreSQL here'; return the captured real stderr."""
        stderr = io.StringIO()
        for patch in (
            mock.patch.object(pg_harness, "server", return_value=None),
            mock.patch.object(pg_harness, "_reason", "no binaries here"),
            mock.patch.object(pg_harness, "_skip_announced", False),
            mock.patch.object(sys, "__stderr__", stderr),
            mock.patch.dict(os.environ, env),
        ):
            patch.start()
            self.addCleanup(patch.stop)
        return stderr

    def test_unavailable_skips_and_says_so_once(self):
        stderr = self.unavailable(ROWFLEET_REQUIRE_PG="")
        for _ in range(2):
            with self.assertRaises(unittest.SkipTest) as caught:
                require_pg()
            self.assertEqual(str(caught.exception), "no binaries here")
        self.assertEqual(stderr.getvalue(), "*** PostgreSQL tests SKIPPED: no binaries here ***\n")

    def test_unavailable_fails_when_required(self):
        stderr = self.unavailable(ROWFLEET_REQUIRE_PG="1")
        with self.assertRaises(PostgresRequired) as caught:
            require_pg()
        self.assertEqual(
            str(caught.exception),
            "PostgreSQL required by ROWFLEET_REQUIRE_PG=1 but unavailable: no binaries here",
        )
        self.assertIsInstance(caught.exception, AssertionError)  # a failure, not a skip
        self.assertEqual(stderr.getvalue(), "")


class ServerTests(unittest.TestCase):
    """The shared server: databases, refusals, restarts, drops."""

    @classmethod
    def setUpClass(cls):
        cls.pg = require_pg()

    def setUp(self):
        self.psycopg = psycopg_or_skip()

    def create(self, prefix="rowfleet"):
        url = self.pg.create_database(prefix)
        self.addCleanup(self.pg.drop_database, url)
        return url

    def connect(self, url):
        conn = self.psycopg.connect(url, autocommit=True, connect_timeout=10)
        self.addCleanup(conn.close)
        return conn

    def test_fresh_databases_answer_and_are_separate(self):
        first, second = self.create(), self.create("other")
        self.assertNotEqual(first, second)
        for url, prefix in ((first, "rowfleet_"), (second, "other_")):
            name = pg_harness.database_of(url)
            self.assertTrue(name.startswith(prefix) and name.endswith("_test"), name)
            if not self.pg.external:
                self.assertRegex(url, r"^postgresql://postgres@127\.0\.0\.1:\d+/\w+_test$")
            conn = self.connect(url)
            self.assertEqual(conn.execute("SELECT 1").fetchone(), (1,))
            self.assertEqual(conn.execute("SELECT current_database()").fetchone(), (name,))
        self.connect(first).execute("CREATE TABLE only_here (x int)")
        self.assertEqual(
            self.pg.psql(second, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'"),
            [(0,)],
        )

    def test_other_names_are_refused_before_touching_the_server(self):
        admin = self.pg.admin_url()
        for call in (
            lambda: self.pg.url("postgres"),
            lambda: self.pg.url("rowfleet_test_backup"),
            lambda: self.pg.drop_database(pg_harness.with_database(admin, "postgres")),
            lambda: self.pg.psql(pg_harness.with_database(admin, "postgres"), "SELECT 1"),
        ):
            with self.assertRaises(UnsafeDatabase):
                call()
        with self.assertRaises(ValueError):
            self.pg.create_database("Bad-Prefix; DROP")
        self.assertEqual(
            self.pg.psql(self.create(), "SELECT count(*) FROM pg_database WHERE datname = 'postgres'"),
            [(1,)],
        )

    def test_psql_runs_several_statements_and_returns_the_last_rows(self):
        url = self.create()
        self.assertEqual(self.pg.psql(url, "CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)"), [])
        self.assertEqual(self.pg.psql(url, "SELECT x FROM t ORDER BY x"), [(1,), (2,)])
        self.assertEqual(self.pg.psql(url, "SELECT x FROM t WHERE x > %s", (1,)), [(2,)])

    def test_restart_breaks_old_connections_and_accepts_new_ones(self):
        url = self.create()
        before = self.connect(url)
        started = before.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
        self.pg.restart()
        with self.assertRaises(self.psycopg.OperationalError):
            before.execute("SELECT 1")
        after = self.connect(url)
        self.assertGreater(after.execute("SELECT pg_postmaster_start_time()").fetchone()[0], started)

    def test_drop_removes_the_database_even_while_connected(self):
        url = self.pg.create_database()
        held = self.connect(url)
        held.execute("SELECT 1")
        self.pg.drop_database(url)
        with self.assertRaises(self.psycopg.OperationalError):
            self.connect(url)
        name = pg_harness.database_of(url)
        self.assertEqual(
            self.pg.psql(self.create(), "SELECT count(*) FROM pg_database WHERE datname = %s", (name,)),
            [(0,)],
        )


class LocalLifecycleTests(unittest.TestCase):
    """A private local server: stop() and the death of its test process both remove it."""

    def setUp(self):
        require_pg(self)
        self.psycopg = psycopg_or_skip()

    def start_private(self):
        try:
            found = pg_harness.start_local()
        except Unavailable as exc:
            self.skipTest(f"no local server can start here: {exc}")
        self.addCleanup(found.stop)
        return found

    def refuses_connections(self, url):
        try:
            self.psycopg.connect(url, connect_timeout=5).close()
        except self.psycopg.OperationalError:
            return True
        return False

    def test_stop_shuts_the_server_down_and_deletes_its_files(self):
        private = self.start_private()
        url = private.create_database()
        self.assertTrue(os.path.isdir(private.directory))
        private.stop()
        self.assertFalse(os.path.exists(private.directory))
        self.assertTrue(self.refuses_connections(url))

    def test_server_dies_with_a_killed_test_process(self):
        code = (
            "import os, signal, pg_harness\n"
            "found = pg_harness.start_local()\n"
            "print(found.create_database(), found.directory, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n"  # no atexit: only the watchdog can clean up
        )
        child = subprocess.run([sys.executable, "-c", code], cwd=TESTS, env=child_env(),
                               capture_output=True, text=True, timeout=DEADLINE * 2)
        self.assertEqual(child.returncode, -signal.SIGKILL, child.stderr)
        url, directory = child.stdout.split()
        wait_until(lambda: not os.path.exists(directory), message=f"{directory} to be removed")
        self.assertTrue(self.refuses_connections(url))


if __name__ == "__main__":
    unittest.main()
