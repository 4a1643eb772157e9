"""rowfleet through PgBouncer: transaction pooling (``--pooler transaction``) and session pooling.

Owns what a pooler in front of PostgreSQL changes: in transaction mode a client's
consecutive transactions run on different server connections (the harness keeps the pool
smaller than its clients), so nothing may rely on a session: no prepared statements, no
session settings, no LISTEN (which would hear nothing), no migrations. Real worker
processes, the command line and the Python API (a caller's own transaction included) run
against a throwaway PgBouncer (``pgbouncer_harness``) in front of the harness's server;
the outcome is read in the database and the handlers' own log.

Skipped loudly without pgbouncer (or PostgreSQL); required in CI by
``ROWFLEET_REQUIRE_PGBOUNCER=1``.
"""

from __future__ import annotations

import collections
import os
import statistics
import subprocess
import sys
import unittest
import warnings

import pgbouncer_harness
import rowfleet
from rowfleet import api, exitcodes
from rowfleet.config import Config
from rowfleet.store import open_store
from rowfleet.store.postgres import driver
from support import DEADLINE, TempDirTestCase, child_env, wait_until

APP = "pooledapp"

# Each run appends "job-id attempt pid" to ran.log (O_APPEND, one write per run).
APP_SOURCE = '''\
import os

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))


@rowfleet.task(name="note")
def note():
    job = rowfleet.current_job()
    fd = os.open(os.path.join(HERE, "ran.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job.id} {job.attempts} {os.getpid()}\\n".encode())
    finally:
        os.close(fd)
    return os.getpid()
'''

POLL = 3.0  # the idle safety poll of the wake-up tests: a push must beat it by far


def enqueue_note(queue: str, **options):
    """A job of ``note`` through the API: only the workers' app registers it, so the warning
    that says so (``rowfleet.TaskWarning``) is expected and silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rowfleet.TaskWarning)
        return rowfleet.enqueue("note", queue=queue, **options)


class PoolerSettings(TempDirTestCase):
    def test_sqlite_refuses_a_pooler_and_a_listen_url(self):
        for flags in (("--pooler", "session"), ("--listen-url", "postgresql://db/fleet")):
            with self.subTest(flags=flags):
                done = self.cli("init", *flags, check=False)
                self.assertEqual(done.returncode, exitcodes.USAGE)
                self.assertIn("for a PostgreSQL database", done.stderr)
                self.assertFalse(os.path.exists(self.db))


class PooledCase(TempDirTestCase):
    """A database on the harness's server (``self.direct``) and the same database through a
    PgBouncer in ``MODE`` (``self.pooled``)."""

    MODE = "transaction"

    def setUp(self) -> None:
        import pg_harness

        self.pg = pg_harness.require_pg(self)
        super().setUp()
        self.bouncer = pgbouncer_harness.start(self, self.pg, self.MODE)
        self.direct = self.pg.create_database()
        self.addCleanup(self.pg.drop_database, self.direct)
        self.pooled = self.bouncer.url(self.direct)
        self.write_module(APP, APP_SOURCE)

    def rowfleet(self, db: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rowfleet", "--db", db, *args], cwd=self.dir,
                              env=env or child_env(), capture_output=True, text=True, timeout=DEADLINE)

    def init_directly(self) -> None:
        done = self.rowfleet(self.direct, "init")
        self.assertEqual(done.returncode, 0, done.stderr)

    def worker(self, name: str, *args: str) -> subprocess.Popen:
        process = self.launch_logged(name, "worker", "--app", APP, "--host", name, "--pooler", self.MODE, *args,
                                     db=self.pooled, env=child_env(PGAPPNAME=name))
        process.name = name
        return process

    def use_api(self, **settings: object) -> None:
        """The module-level API on the pooled database until the test ends."""
        rowfleet.configure(db=self.pooled, pooler=self.MODE, **settings)
        self.addCleanup(self._close_api_store)

    @staticmethod
    def _close_api_store() -> None:
        cached = getattr(api._local, "store", None)
        if cached is not None:
            cached[2].close()
            api._local.store = None

    def caller_connection(self):
        """The application's own connection through the pooler: psycopg must not prepare
        statements there either (``prepare_threshold=None``)."""
        conn = driver().connect(self.pooled, prepare_threshold=None)
        self.addCleanup(conn.close)
        conn.execute("CREATE TABLE IF NOT EXISTS orders (item text)")
        conn.commit()
        return conn

    def store(self):
        store = open_store(Config(db=self.direct))
        self.addCleanup(store.close)
        return store

    def runs(self) -> dict[int, list[int]]:
        """Each job's handler runs, as the pids that ran it."""
        found: dict[int, list[int]] = collections.defaultdict(list)
        for line in (self.marker("ran.log") or "").splitlines():
            job_id, _attempt, pid = map(int, line.split())
            found[job_id].append(pid)
        return found

    def enqueue_through_the_pooler(self, queue: str, plain: int, committed: int, rolled_back: int) -> set[int]:
        """Jobs enqueued with the API through the pooler: ``plain`` on rowfleet's own
        connection, ``committed`` and ``rolled_back`` in a caller's transactions beside an
        order of its own. The ids that must run."""
        ids = {enqueue_note(queue).id for _ in range(plain)}
        conn = self.caller_connection()
        for index in range(committed + rolled_back):
            conn.execute("INSERT INTO orders (item) VALUES (%s)", [f"order-{index}"])
            job = enqueue_note(queue, conn=conn)
            if index < committed:
                conn.commit()
                ids.add(job.id)
            else:
                conn.rollback()
        items = {row[0] for row in conn.execute("SELECT item FROM orders").fetchall()}
        conn.commit()
        self.assertEqual(items, {f"order-{index}" for index in range(committed)})
        return ids

    def assert_ran_exactly_once(self, ids: set[int], processes: list[subprocess.Popen]) -> None:
        store = self.store()
        jobs = {job.id: job for job in store.reads.list_jobs("", limit=10_000)}
        self.assertEqual(set(jobs), ids, "a rolled-back enqueue left a job, or a committed one is missing")
        runs = self.runs()
        for job_id in sorted(ids):
            with self.subTest(job=job_id):
                self.assertEqual(jobs[job_id].state, "completed")
                self.assertEqual(len(runs[job_id]), 1, f"handler runs: {runs[job_id]}")
                self.assertEqual(jobs[job_id].attempts, 1)
        for process in processes:
            self.assertNotIn(" ERROR ", self.output(process), f"{process.name}'s log")

    def await_exit(self, process: subprocess.Popen) -> None:
        try:
            process.wait(DEADLINE * 2)
        except subprocess.TimeoutExpired:
            self.fail(f"{process.name} still running:\n{self.output(process)}\n--- pgbouncer ---\n"
                      f"{self.bouncer.log_tail()}")
        self.assertEqual(process.returncode, 0, f"{process.name} exited {process.returncode}:\n"
                                                f"{self.output(process)}")

    def await_idle(self, name: str) -> None:
        """Until worker ``name`` has beaten and its first claim found nothing."""
        wait_until(lambda: self.pg.psql(self.direct, "SELECT count(*) FROM workers WHERE host = %s "
                                                     "AND current_job IS NULL AND stopped_at IS NULL",
                                        (name,))[0][0], message=f"{name}'s heartbeat")

    def latencies(self, queue: str, rounds: int) -> list[float]:
        """Seconds from each enqueue's commit to its claim (the database's clock both), one
        job at a time, each enqueued once the worker is idle again."""
        store, found = self.store(), []
        for _ in range(rounds):
            job_id = enqueue_note(queue).id
            done = wait_until(lambda: (job := store.get_job(job_id, "")).state == "completed" and job,
                              timeout=POLL * 4, message=f"job {job_id} to complete")
            found.append(done.started_at - done.created_at)
        return found


class TransactionPooling(PooledCase):
    MODE = "transaction"

    def test_jobs_through_a_transaction_pooler_run_exactly_once(self):
        self.init_directly()
        self.use_api()
        ids = self.enqueue_through_the_pooler("pooled", plain=30, committed=6, rolled_back=6)
        workers = [self.worker(f"pooled-{index}", "--queue", "pooled", "--burst") for index in range(3)]
        for process in workers:
            self.await_exit(process)
        self.assert_ran_exactly_once(ids, workers)
        self.assertEqual(self.shown_through_the_pooler("statement_timeout"), "0",
                         "a session setting of rowfleet's stayed on a server connection the pool shares")

    def test_the_bounds_go_with_each_transaction_of_the_stores_own(self):
        self.init_directly()
        store = open_store(Config(db=self.pooled, pooler="transaction", lease=45.0, renew=5.0))
        self.addCleanup(store.close)
        with store.transaction() as tx:
            tx.cursor.execute("SELECT current_setting('statement_timeout') AS statement, "
                              "current_setting('idle_in_transaction_session_timeout') AS idle")
            self.assertEqual(tx.cursor.fetchone(), {"statement": "45s", "idle": "45s"})
        self.assertEqual(self.shown_through_the_pooler("statement_timeout"), "0")
        self.assertIsNone(store._connection().prepare_threshold)

    def shown_through_the_pooler(self, setting: str) -> str:
        """``SHOW setting`` on a plain connection of another client through the pooler."""
        with driver().connect(self.pooled, autocommit=True, prepare_threshold=None) as conn:
            return conn.execute(f"SHOW {setting}").fetchone()[0]  # the test's fixed names only

    def test_wake_ups_go_through_the_listen_url_else_the_safety_poll(self):
        self.init_directly()
        self.use_api()
        pushed = self.worker("listener", "--queue", "pushed", "--poll", str(POLL), "--listen-url", self.direct)
        polled = self.worker("poller", "--queue", "polled", "--poll", str(POLL))
        for name in ("listener", "poller"):
            self.await_idle(name)
        listening = ("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'listener' "
                     "AND query = 'LISTEN rowfleet_jobs;'")
        wait_until(lambda: self.pg.psql(self.direct, listening)[0][0],
                   message="the listener's LISTEN straight to the server")
        fast = self.latencies("pushed", 3)
        slow = self.latencies("polled", 3)
        print(f"\n  wake-up through {self.MODE} pooling: --listen-url {['%.3f' % s for s in fast]} s, "
              f"safety poll ({POLL:g} s) {['%.3f' % s for s in slow]} s (median {statistics.median(slow):.2f})",
              file=sys.__stderr__, flush=True)
        self.assertLess(max(fast), POLL / 2, "the listener waited for its safety poll: no NOTIFY reached it")
        self.assertLess(max(slow), POLL + 2.0, "the poller missed its safety poll")
        for process in (pushed, polled):
            process.terminate()
            self.await_exit(process)

    def test_migrations_through_a_transaction_pooler_are_refused(self):
        for args, env in ((("init", "--pooler", "transaction"), None),
                          (("init",), child_env(ROWFLEET_POOLER="transaction")),
                          (("orchestrator", "--once", "--pooler", "transaction"), None)):
            with self.subTest(args=args):
                done = self.rowfleet(self.pooled, *args, env=env)
                self.assertEqual(done.returncode, exitcodes.USAGE, done.stderr)
                lines = done.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, done.stderr)
                self.assertIn("transaction", lines[0])
                self.assertIn("straight to the server", lines[0])
        self.assertEqual(self.pg.psql(self.direct, "SELECT count(*) FROM information_schema.tables "
                                                   "WHERE table_schema = 'public'")[0][0], 0, "it migrated anyway")
        self.init_directly()
        done = self.rowfleet(self.pooled, "init", "--pooler", "transaction")  # nothing left to migrate
        self.assertEqual((done.returncode, done.stderr), (0, ""))


class SessionPooling(PooledCase):
    MODE = "session"

    def test_a_session_pooler_migrates_runs_and_wakes_as_the_server_does(self):
        done = self.rowfleet(self.pooled, "init", "--pooler", "session")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.use_api()
        ids = self.enqueue_through_the_pooler("pooled", plain=10, committed=2, rolled_back=2)
        workers = [self.worker(f"session-{index}", "--queue", "pooled", "--burst") for index in range(2)]
        for process in workers:
            self.await_exit(process)
        self.assert_ran_exactly_once(ids, workers)
        listener = self.worker("session-listener", "--queue", "pushed", "--poll", str(POLL))
        self.await_idle("session-listener")
        self.assertLess(max(self.latencies("pushed", 2)), POLL / 2, "LISTEN through a session pooler heard nothing")
        listener.terminate()
        self.await_exit(listener)


if __name__ == "__main__":
    unittest.main()
