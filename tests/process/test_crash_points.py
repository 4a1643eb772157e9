"""A crash-point sweep: a child process dies (``os._exit(137)``) at each named step of a job's
life, then recovery runs and the invariants are checked.

Owns the crash-consistency contract, written once in ``CrashPointContract`` and run on
SQLite and PostgreSQL. The child is a small driver script that runs the real ``Worker``
(or one real orchestrator sweep, or an application's own transaction) with the crash
injected by wrapping the real thing: a store wrapper that exits around ``claim``/``finish``,
a handler that exits, or, inside a transaction, an exit just before the ``COMMIT`` of a
given write: on SQLite a ``sqlite3`` trace callback on the store's own connection sees
the ``COMMIT`` coming; on PostgreSQL the store's ``transaction()`` is wrapped, so the
guarded UPDATE has run on the server (its row came back) when the process exits, and
the server rolls the open transaction back as the connection drops. A busy worker's
finish on PostgreSQL is one statement with no client-side inside, so there the worker is
killed while the server runs it (see ``PostgresCrashPointTest.crash_inside_finish``).
Recovery is the real command line: ``orchestrator --once`` until the orphan is
re-queued, then ``worker --burst``.

Invariants after recovery: no job lost (every job completed), none left running, exactly
one terminal event per job, one ``claimed`` event per attempt, the handler's side effects
at least once (twice exactly where the crash fell between effect and commit), and an
enqueue in the caller's transaction all-or-nothing with the caller's own row.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import unittest
from typing import NamedTuple

from rowfleet.claim import Claim
from rowfleet.job import JobSpec
from pg_harness import PostgresServerCase
from support import DEADLINE, TempDirTestCase, child_env, wait_until

CRASHED = 137
LEASE = ("--lease", "1", "--renew", "0.25", "--poll", "0.2")

APP_SOURCE = '''\
import os
import time

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))


@rowfleet.task(name="effect")
def effect(n):
    """Appends "job-id attempt" to effects.log (the side effect), then returns ``n``."""
    job = rowfleet.current_job()
    if os.environ.get("CRASH_STEP") == "mid_handler":
        os._exit(137)
    fd = os.open(os.path.join(HERE, "effects.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job.id} {job.attempts}\\n".encode())
    finally:
        os.close(fd)
    if os.environ.get("CRASH_STEP") == "in_finish_statement":
        _wait_for("go")  # the test takes its lock before this job's finish is sent
    return n


def _wait_for(name):
    give_up = time.monotonic() + 120.0
    while not os.path.exists(os.path.join(HERE, name)):
        if time.monotonic() > give_up:
            raise TimeoutError("the test never released this handler")
        time.sleep(0.005)
'''

DRIVER_SOURCE = '''\
"""Usage: python crashdriver.py STEP DB. Runs the real thing and exits 137 at STEP."""
import contextlib
import os
import re
import sqlite3
import sys
import threading
import time

import rowfleet
from rowfleet import tasks
from rowfleet.config import Config
from rowfleet.services.orchestrator import Orchestrator
from rowfleet.store import open_store
from rowfleet.worker.loop import Worker

STEP, DB = sys.argv[1], sys.argv[2]
POSTGRES = DB.startswith(("postgres://", "postgresql://"))
HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = Config(db=DB, lease=1.0, renew=0.25, heartbeat=0.5, poll=0.2, interval=0.2)


def crash():
    os._exit(137)


def claiming(sql):
    return sql.startswith("UPDATE jobs") and re.search(r"SET state = 'running'", sql)


def completing(sql):
    return sql.startswith("UPDATE jobs") and re.search(r"SET state = 'completed'", sql)


def reclaiming(sql):
    return (sql.startswith("UPDATE jobs") and re.search(r"SET state = 'queued'", sql)
            and "lease_expires_at <" in sql)


def crash_at_commit_after(conn, write):
    """Exit when this connection is about to COMMIT a transaction that made ``write``."""
    seen = []

    def trace(sql):
        # A named query may open with comment lines of its own; judge the statement itself.
        sql = "\\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--")).strip()
        if sql.startswith("BEGIN"):
            seen.clear()
        elif write(sql):
            seen.append(sql)
        elif seen and sql.upper() == "COMMIT":
            crash()

    conn.set_trace_callback(trace)


class WatchedTx:
    """A store's transaction that notes when the named query changed a row."""

    def __init__(self, tx, query):
        self._tx, self._query, self.wrote = tx, query, False

    def __getattr__(self, name):
        return getattr(self._tx, name)

    def one(self, query, **params):
        row = self._tx.one(query, **params)
        if query == self._query and row is not None:
            self.wrote = True
        return row


def crash_before_commit_of(store, query):
    """Exit when a transaction of ``store`` in which ``query`` changed a row is about to
    commit: the UPDATE ran on the server, the COMMIT is never sent."""
    transaction = store.transaction

    @contextlib.contextmanager
    def watched(*args, **kwargs):
        with transaction(*args, **kwargs) as tx:
            watching = WatchedTx(tx, query)
            yield watching
            if watching.wrote:
                crash()

    store.transaction = watched


# The writes a crash may cut off before their COMMIT: as SQLite's trace shows the SQL,
# and by the named query that makes them. (On Postgres a worker's claim and its busy
# finish are single statements, not transactions: the test kills those from outside.)
WRITES = {"claim": (claiming, "claim"), "finish": (completing, "finish"),
          "reclaim": (reclaiming, "job_reclaim")}


def crash_before_commit(store, write):
    traced, query = WRITES[write]
    if POSTGRES:
        crash_before_commit_of(store, query)
    else:
        crash_at_commit_after(store.conn, traced)


class CrashingStore:
    """The real store; exits the process around ``claim`` or ``finish`` at STEP."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def claim(self, *args, **kwargs):
        if STEP == "in_claim_statement":
            wait_for_go()  # the test takes its lock before this claim is sent
        job = self._store.claim(*args, **kwargs)
        if STEP == "after_claim" and job is not None:
            crash()
        return job

    def finish(self, *args, **kwargs):
        if STEP == "before_finish":
            crash()
        following = self._store.finish(*args, **kwargs)
        if STEP == "after_finish":
            crash()
        return following


def wait_for_go():
    give_up = time.monotonic() + 120.0
    while not os.path.exists(os.path.join(HERE, "go")):
        if time.monotonic() > give_up:
            raise TimeoutError("the test never said go")
        time.sleep(0.005)


def store_factory(config):
    store = open_store(config)
    if threading.current_thread() is not threading.main_thread():
        return store  # the Keeper's own connection: it renews leases and never crashes
    if STEP == "in_claim_commit":
        crash_before_commit(store, "claim")
    elif STEP == "in_finish_commit":
        crash_before_commit(store, "finish")
    return CrashingStore(store)


def run_worker():
    os.environ["CRASH_STEP"] = STEP  # read by the handler, in this process only
    tasks.import_apps(["crashapp"], folder=HERE)
    return Worker(CONFIG, "default", burst=True, store_factory=store_factory).run()


def run_reclaim():
    store = open_store(CONFIG)
    crash_before_commit(store, "reclaim")
    Orchestrator(store, CONFIG).run_once()
    return 0


def application_transaction():
    """The application's own connection, in a transaction it will commit itself."""
    if POSTGRES:
        from rowfleet.store.postgres import connect

        return connect(DB, autocommit=False)  # the first statement opens the transaction
    conn = sqlite3.connect(DB, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def run_enqueue(commit):
    """An application's own transaction: a domain row and jobs, committed together or not."""
    rowfleet.configure(db=DB)
    conn = application_transaction()
    conn.execute("INSERT INTO orders (item) VALUES ('widget')")
    rowfleet.enqueue("effect", [1], conn=conn)
    rowfleet.enqueue_many("effect", [[2], [3]], conn=conn)
    if not commit:
        crash()
    conn.commit()
    return 0


if STEP == "in_reclaim_commit":
    sys.exit(run_reclaim())
elif STEP.startswith("enqueue_"):
    sys.exit(run_enqueue(STEP == "enqueue_commit"))
else:
    sys.exit(run_worker())
'''


class Step(NamedTuple):
    """What one crash point leaves behind for three queued jobs, the first one claimed."""

    crashed: list[str]          # the jobs' states right after the crash
    crashed_effects: list[int]  # side effects per job by then
    effects: list[int]          # side effects per job after recovery
    attempts: list[int]         # attempts per job after recovery
    reclaims: list[int]         # `reclaimed` events per job


WORKER_STEPS = {
    "in_claim_commit": Step(["queued", "queued", "queued"], [0, 0, 0], [1, 1, 1], [1, 1, 1], [0, 0, 0]),
    "after_claim": Step(["running", "queued", "queued"], [0, 0, 0], [1, 1, 1], [2, 1, 1], [1, 0, 0]),
    "mid_handler": Step(["running", "queued", "queued"], [0, 0, 0], [1, 1, 1], [2, 1, 1], [1, 0, 0]),
    "before_finish": Step(["running", "queued", "queued"], [1, 0, 0], [2, 1, 1], [2, 1, 1], [1, 0, 0]),
    "in_finish_commit": Step(["running", "queued", "queued"], [1, 0, 0], [2, 1, 1], [2, 1, 1], [1, 0, 0]),
    # finish commits the outcome and the claim of the next job in one transaction
    "after_finish": Step(["completed", "running", "queued"], [1, 0, 0], [1, 1, 1], [1, 2, 1], [0, 1, 0]),
}


class CrashPointContract:
    """The sweep for any backend. The TestCase mixing this in is a ``TempDirTestCase`` and
    provides ``empty_database()``, ``create_orders()``, ``orders()`` and ``await_rollbacks()``."""

    def setUp(self) -> None:
        super().setUp()
        self.db = self.empty_database()
        self.write_module("crashapp", APP_SOURCE)
        self.driver = self.write_module("crashdriver", DRIVER_SOURCE)
        self.store = self.open_store()
        self.create_orders()

    def empty_database(self) -> str:
        """What ``--db`` names for this test: a database with no rowfleet schema yet."""
        raise NotImplementedError

    def create_orders(self) -> None:
        """Create the application's own table ``orders (id, item)``."""
        raise NotImplementedError

    def orders(self) -> int:
        """How many rows ``orders`` has."""
        raise NotImplementedError

    def await_rollbacks(self) -> None:
        """Return once the database has undone whatever the dead child left uncommitted."""
        raise NotImplementedError

    def crash_inside_finish(self) -> None:
        """Kill a worker inside its finish (the outcome and the next claim: one turn), and
        check that the turn was written whole or not at all, then recovered."""
        raise NotImplementedError

    # --- helpers -------------------------------------------------------------------------

    def crash_at(self, step: str, expect: int = CRASHED) -> None:
        """Run the driver to ``step``; it must exit ``expect`` (137: the crash point was reached)."""
        result = subprocess.run([sys.executable, self.driver, step, self.db], cwd=self.dir, env=child_env(),
                                capture_output=True, text=True, timeout=DEADLINE)
        self.assertEqual(result.returncode, expect,
                         f"driver at {step} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        self.await_rollbacks()

    def enqueue_three(self) -> list[int]:
        return [self.store.enqueue(JobSpec(task="effect", args=[n])).id for n in range(3)]

    def states(self, ids: list[int]) -> list[str]:
        return [self.store.get_job(job_id, "").state for job_id in ids]

    def effects(self, ids: list[int]) -> list[int]:
        try:
            with open(os.path.join(self.dir, "effects.log")) as handle:
                ran = collections.Counter(int(line.split()[0]) for line in handle)
        except FileNotFoundError:
            ran = collections.Counter()
        return [ran[job_id] for job_id in ids]

    def sweep(self) -> dict:
        return json.loads(self.cli("orchestrator", "--once", *LEASE).stdout)

    def swept_clean(self) -> bool:
        self.sweep()
        return not self.running()

    def recover(self) -> None:
        """Reclaim until nothing is running (each orphan waits out its lease), then drain."""
        wait_until(self.swept_clean, message="every orphan re-queued")
        self.cli("worker", "--app", "crashapp", "--burst", *LEASE)
        after = self.sweep()
        self.assertEqual((after["reclaimed"], after["failed"]), (0, 0), "a sweep after recovery found work")

    def running(self) -> list[int]:
        return [job.id for job in self.store.reads.list_jobs("", state="running")]

    def assert_recovered(self, ids: list[int], effects: list[int], attempts: list[int],
                         reclaims: list[int]) -> None:
        self.assertEqual(self.states(ids), ["completed"] * len(ids), "a job was lost")
        self.assertEqual(self.running(), [])
        self.assertEqual(self.effects(ids), effects, "side effects per job")
        for job_id, tries, reclaimed in zip(ids, attempts, reclaims):
            job = self.store.get_job(job_id, "")
            kinds = collections.Counter(event.kind for event in self.store.reads.events(job_id))
            with self.subTest(job=job_id):
                self.assertEqual(kinds["completed"] + kinds["failed"], 1, "terminal state written once")
                self.assertEqual(kinds["completed"], 1)
                self.assertEqual(kinds["claimed"], tries, "one claim event per claim")
                self.assertEqual(job.lease_token, tries)
                self.assertEqual(kinds["reclaimed"], reclaimed)
                # Each lost lease gave its attempt back and spent a watchdog retry instead.
                self.assertEqual((job.attempts, job.watchdog_retries), (tries - reclaimed, reclaimed))

    def sweep_step(self, name: str) -> None:
        step = WORKER_STEPS[name]
        ids = self.enqueue_three()
        self.crash_at(name)
        self.assertEqual(self.states(ids), step.crashed, "states right after the crash")
        self.assertEqual(self.effects(ids), step.crashed_effects, "side effects right after the crash")
        for job_id, state in zip(ids, step.crashed):
            kinds = [event.kind for event in self.store.reads.events(job_id)]
            self.assertEqual(kinds.count("completed"), int(state == "completed"),
                             f"job {job_id}: a completion survived the crash, or one was lost")
        self.recover()
        self.assert_recovered(ids, step.effects, step.attempts, step.reclaims)

    # --- the worker's steps --------------------------------------------------------------

    def test_crash_inside_the_claim_writes_all_of_it_or_none(self):
        self.crash_inside_claim()

    def test_crash_after_the_claim_commits(self):
        self.sweep_step("after_claim")

    def test_crash_mid_handler(self):
        self.sweep_step("mid_handler")

    def test_crash_after_the_side_effect_before_finish_runs_the_job_again(self):
        self.sweep_step("before_finish")

    def test_crash_inside_the_finish_writes_the_whole_turn_or_none_of_it(self):
        self.crash_inside_finish()

    def test_crash_after_finish_commits_recovers_the_job_claimed_with_it(self):
        self.sweep_step("after_finish")

    # --- the orchestrator's step ---------------------------------------------------------

    def test_crash_inside_the_reclaim_transaction(self):
        ids = self.enqueue_three()
        orphan = self.store.claim(Claim("", "default", "ghost:1", 0.05))  # a holder that vanished
        self.assertEqual(orphan.id, ids[0])
        wait_until(lambda: time.time() > orphan.lease_expires_at, message="the orphan's lease to lapse")
        self.crash_at("in_reclaim_commit")
        job = self.store.get_job(orphan.id, "")
        self.assertEqual((job.state, job.lease_token), ("running", 1), "the reclaim was not rolled back")
        self.assertNotIn("reclaimed", [event.kind for event in self.store.reads.events(orphan.id)])
        self.recover()
        self.assert_recovered(ids, effects=[1, 1, 1], attempts=[2, 1, 1], reclaims=[1, 0, 0])

    # --- the application's step ----------------------------------------------------------

    def test_enqueue_in_the_callers_transaction_is_all_or_nothing(self):
        self.crash_at("enqueue_crash")
        self.assertEqual(self.orders(), 0, "the order survived a crash before COMMIT")
        self.assertEqual(self.store.reads.list_jobs(""), [], "a job survived a crash before COMMIT")

        self.crash_at("enqueue_commit", expect=0)
        self.assertEqual(self.orders(), 1)
        ids = sorted(job.id for job in self.store.reads.list_jobs(""))
        self.assertEqual(len(ids), 3)
        self.assertEqual(self.states(ids), ["queued"] * 3)
        self.recover()
        self.assert_recovered(ids, effects=[1, 1, 1], attempts=[1, 1, 1], reclaims=[0, 0, 0])


class SQLiteCrashPointTest(CrashPointContract, TempDirTestCase):
    def empty_database(self) -> str:
        return self.db  # the file in this test's folder, created when the store first opens

    def create_orders(self) -> None:
        with contextlib.closing(sqlite3.connect(self.db, isolation_level=None)) as conn:
            conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)")

    def orders(self) -> int:
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            return conn.execute("SELECT count(*) FROM orders").fetchone()[0]

    def await_rollbacks(self) -> None:
        pass  # a dead process's locks went with it, and an uncommitted WAL tail is never read

    def crash_inside_finish(self) -> None:
        # The trace callback exits at the COMMIT of the finish transaction: none of it lands.
        self.sweep_step("in_finish_commit")

    def crash_inside_claim(self) -> None:
        # The trace callback exits at the COMMIT of the claim transaction: none of it lands.
        self.sweep_step("in_claim_commit")


class PostgresCrashPointTest(PostgresServerCase, CrashPointContract, TempDirTestCase):
    """The same sweep on a throwaway PostgreSQL database: ``self.db`` is its URL."""

    def create_orders(self) -> None:
        self.pg.psql(self.db, "CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)")

    def orders(self) -> int:
        return self.pg.psql(self.db, "SELECT count(*) FROM orders")[0][0]

    def crash_inside_finish(self) -> None:
        """A busy worker's finish and next claim are one statement here, in autocommit
        (``job_finish_and_claim``): the client has no moment between the writes and the
        COMMIT to die in. So the worker is killed while that statement runs on the server,
        held there behind a lock on ``job_events`` (which its finish's event would write to,
        and so it waits for the lock even for a completion, which writes no event row). The turn must land whole or not at all;
        a server that does not check on its clients mid-statement (the default) runs it to
        the end and commits it whole, with the next job claimed for the dead worker."""
        from rowfleet.store.postgres import connect

        ids = self.enqueue_three()
        child = subprocess.Popen([sys.executable, self.driver, "in_finish_statement", self.db], cwd=self.dir,
                                 env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(_reap, child)
        wait_until(lambda: self.effects(ids) == [1, 0, 0] or child.poll() is not None,
                   message="the first job's side effect")
        self.assertIsNone(child.poll(), child.communicate()[0] if child.poll() is not None else "")
        with contextlib.closing(connect(self.db, autocommit=False)) as blocker:
            blocker.execute("LOCK TABLE job_events IN EXCLUSIVE MODE")
            blocked = ("SELECT count(*) AS n FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                       (blocker.info.backend_pid,))
            open(os.path.join(self.dir, "go"), "w").close()
            wait_until(lambda: self.pg.psql(self.db, *blocked)[0][0] == 1,
                       message="the finish to wait behind the lock on job_events")
            self.assertEqual(self.states(ids), ["running", "queued", "queued"], "the turn is not waiting")
            child.kill()
            child.communicate(timeout=DEADLINE)
            self.assertEqual(self.pg.psql(self.db, *blocked)[0][0], 1, "the statement died with its client")
            blocker.rollback()
        self.await_rollbacks()
        checks = self.pg.psql(self.db, "SELECT coalesce(current_setting('client_connection_check_interval', "
                                       "true), '0') IN ('0', '0ms')")[0][0]
        whole, none = WORKER_STEPS["after_finish"], WORKER_STEPS["in_finish_commit"]
        states = self.states(ids)
        if checks:  # no check on the client while the statement runs: it lands whole
            self.assertEqual(states, whole.crashed, "the turn did not land whole")
        self.assertIn(states, (whole.crashed, none.crashed), "part of the turn landed")
        step = whole if states == whole.crashed else none
        self.assertEqual([self.kinds(job_id).count("completed") for job_id in ids],
                         [int(state == "completed") for state in states], "an event without its write")
        self.assertEqual([self.kinds(job_id).count("claimed") for job_id in ids],
                         [int(state != "queued") for state in states], "an event without its write")
        self.recover()
        self.assert_recovered(ids, step.effects, step.attempts, step.reclaims)

    def crash_inside_claim(self) -> None:
        """An idle worker's claim is one statement here too (``job_claim``). The worker is
        killed while it runs on the server, held behind a lock on ``jobs`` that lets reads
        through: the claim lands whole or not at all, and its event with it (the claim is on
        the row)."""
        from rowfleet.store.postgres import connect

        ids = self.enqueue_three()
        child = subprocess.Popen([sys.executable, self.driver, "in_claim_statement", self.db], cwd=self.dir,
                                 env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(_reap, child)
        with contextlib.closing(connect(self.db, autocommit=False)) as blocker:
            blocker.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
            blocked = ("SELECT count(*) AS n FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                       (blocker.info.backend_pid,))
            open(os.path.join(self.dir, "go"), "w").close()
            wait_until(lambda: self.pg.psql(self.db, *blocked)[0][0] == 1 or child.poll() is not None,
                       message="the claim to wait behind the lock on jobs")
            self.assertIsNone(child.poll(), child.communicate()[0] if child.poll() is not None else "")
            child.kill()
            child.communicate(timeout=DEADLINE)
            blocker.rollback()
        self.await_rollbacks()
        states = self.states(ids)
        self.assertIn(states, (["running", "queued", "queued"], ["queued", "queued", "queued"]),
                      "part of the claim landed")
        self.assertEqual([self.kinds(job_id).count("claimed") for job_id in ids],
                         [int(state == "running") for state in states], "a claim without its event")
        self.recover()
        landed = states[0] == "running"
        self.assert_recovered(ids, effects=[1, 1, 1], attempts=[2 if landed else 1, 1, 1],
                              reclaims=[int(landed), 0, 0])

    def kinds(self, job_id: int) -> list[str]:
        return [event.kind for event in self.store.reads.events(job_id)]


def _reap(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.communicate(timeout=DEADLINE)


if __name__ == "__main__":
    unittest.main()
