"""Workflows as real OS processes: workers and orchestrators that die (``os._exit``,
``kill -9``), are stopped (SIGTERM), restarted and race one another, driven through the
real command line (``rowfleet run``, ``runs ID --json``, ``submit``, ``worker``,
``orchestrator``).

Owns the process-level workflow contract, written once in ``WorkflowProcessContract`` and
run on SQLite and PostgreSQL. The in-process contract (one worker, one drain at a time)
is test_workflows.py; the crash technique (a driver script that runs the real worker or
orchestrator and exits 137 at a named step) is test_crash_points.py's.

The handlers append ``RUN NODE ATTEMPT`` to effects.log when they run, so "every node ran
exactly once" is counted from a side effect, not read back from the database that is
under test. Invariants checked after every run: the run completed; every task node ran
exactly once and has exactly one job (in ``runs ID --json`` and among all the run's jobs);
every job wrote one ``job_finished`` dispatch event, and every event was processed, none
poisoned, none failed.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import unittest
from typing import Any

from rowfleet.services.orchestrator import RECONCILE_GRACE
from pg_harness import PostgresServerCase
from support import DEADLINE, TempDirTestCase, child_env, wait_until

CRASHED = 137
APP = "wfapp"
# Short settings, so a lapsed lease or a missed wake-up costs a fraction of a second.
WORKER = ("--lease", "1", "--renew", "0.25", "--poll", "0.2", "--heartbeat", "0.5")
ORCHESTRATOR = ("--interval", "0.2", "--poll", "0.2", "--heartbeat", "0.5")
# A worker of another box: one on the dead worker's host would hand its job back as it
# starts (rowfleet.worker.rejoin); these tests are about the lease and the outbox.
ELSEWHERE = ("--host", "another-box")

APP_SOURCE = '''\
import os
import time

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))
GIVE_UP = 120.0  # a handler never outlives a failed test by much


def _effect():
    """The side effect: one O_APPEND write of "RUN NODE ATTEMPT"."""
    job = rowfleet.current_job()
    fd = os.open(os.path.join(HERE, "effects.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job.run_id} {job.node_id} {job.attempts}\\n".encode())
    finally:
        os.close(fd)
    return job


def _mark(name, text):
    """Create a marker file whole: written aside, then renamed into place."""
    path = os.path.join(HERE, name)
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.replace(path + ".tmp", path)


@rowfleet.task(name="wf.step")
def step(value=None):
    """Records its run, then returns ``value``."""
    _effect()
    return value


@rowfleet.task(name="wf.hang_first")
def hang_first(value=None):
    """Records its run; hangs on its first claim (until killed), returns on a later one (a
    lost lease gives the attempt back: the claim's token counts)."""
    job = _effect()
    if job.lease_token == 1:
        _mark(f"started-{job.run_id}-{job.node_id}", str(os.getpid()))
        give_up = time.monotonic() + GIVE_UP
        while time.monotonic() < give_up:
            time.sleep(0.01)
        raise TimeoutError("the test never killed this worker")
    return value
'''

DRIVER_SOURCE = '''\
"""Usage: python wfdriver.py STEP DB [NODE]. Runs the real thing and exits 137 at STEP.

after_finish NODE  a burst worker exits as soon as ``store.finish`` of NODE's job returns:
                   the job's terminal state and its dispatch event are committed, the
                   orchestrator has not drained it, and (finish claims the next job in the
                   same turn) the worker may hold another job it will never run.
drain_commit       one orchestrator sweep exits just before the COMMIT of a drain
                   transaction that enqueued a node's job.
"""
import contextlib
import os
import re
import sys
import threading

from rowfleet import tasks
from rowfleet.config import Config
from rowfleet.services.orchestrator import Orchestrator
from rowfleet.store import open_store
from rowfleet.worker.loop import Worker

STEP, DB = sys.argv[1], sys.argv[2]
NODE = sys.argv[3] if len(sys.argv) > 3 else None
POSTGRES = DB.startswith(("postgres://", "postgresql://"))
HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = Config(db=DB, lease=1.0, renew=0.25, heartbeat=0.5, poll=0.2, interval=0.2)


def crash():
    os._exit(137)


def crash_at_commit_after_job_insert(conn):
    """SQLite: exit when this connection is about to COMMIT a transaction that inserted a job."""
    seen = []

    def trace(sql):
        # A named query may open with comment lines of its own; judge the statement itself.
        sql = "\\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--")).strip()
        if sql.startswith("BEGIN"):
            seen.clear()
        elif re.match(r"INSERT INTO jobs\\b", sql):
            seen.append(sql)
        elif seen and sql.upper() == "COMMIT":
            crash()

    conn.set_trace_callback(trace)


class WatchedTx:
    """A store's transaction that notes when one of ``queries`` ran (and wrote)."""

    def __init__(self, tx, queries):
        self._tx, self._queries, self.wrote = tx, queries, False

    def __getattr__(self, name):
        return getattr(self._tx, name)

    def one(self, query, **params):
        row = self._tx.one(query, **params)
        self.wrote = self.wrote or (query in self._queries and row is not None)
        return row

    def all(self, query, **params):
        rows = self._tx.all(query, **params)
        self.wrote = self.wrote or (query in self._queries and bool(rows))
        return rows

    def run(self, query, **params):
        count = self._tx.run(query, **params)
        self.wrote = self.wrote or (query in self._queries and count > 0)
        return count


def crash_before_commit_of_job_insert(store):
    """PostgreSQL: exit when a transaction of ``store`` that inserted a job is about to
    commit: the INSERT ran on the server, the COMMIT is never sent."""
    transaction = store.transaction

    @contextlib.contextmanager
    def watched(*args, **kwargs):
        with transaction(*args, **kwargs) as tx:
            watching = WatchedTx(tx, {"enqueue", "enqueue_many"})
            yield watching
            if watching.wrote:
                crash()

    store.transaction = watched


class CrashingStore:
    """The real store; exits the process once ``finish`` of NODE's job has returned."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def finish(self, job, *args, **kwargs):
        following = self._store.finish(job, *args, **kwargs)
        if job.node_id == NODE:
            with open(os.path.join(HERE, "crash-holding"), "w") as handle:
                handle.write("" if following is None else str(following.id))
            crash()
        return following


def store_factory(config):
    store = open_store(config)
    if threading.current_thread() is not threading.main_thread():
        return store  # the Keeper's own connection: it renews leases and never crashes
    return CrashingStore(store)


def run_worker():
    tasks.import_apps(["wfapp"], folder=HERE)
    return Worker(CONFIG, "default", burst=True, store_factory=store_factory).run()


def run_drain():
    store = open_store(CONFIG)
    if POSTGRES:
        crash_before_commit_of_job_insert(store)
    else:
        crash_at_commit_after_job_insert(store.conn)
    Orchestrator(store, CONFIG).run_once()
    return 0  # no drain enqueued anything: the crash point was never reached


sys.exit(run_worker() if STEP == "after_finish" else run_drain())
'''


def task(node_id: str, *deps: str, fn: str = "wf.step", value: Any = None, **fields: Any) -> dict[str, Any]:
    """A task node whose handler is called as ``fn(value=VALUE)`` (VALUE may hold references)."""
    data = {"id": node_id, "task": fn, "args": {"value": value}, **fields}
    if deps:
        data["depends_on"] = list(deps)
    return data


def ref(path: str) -> dict[str, str]:
    return {"$from": path}


class WorkflowProcessContract:
    """Process-level workflow tests for any backend. The TestCase mixing this in is a
    ``TempDirTestCase`` that provides ``empty_database()`` and ``await_rollbacks()``."""

    def setUp(self) -> None:
        super().setUp()
        self.db = self.empty_database()
        self.write_module(APP, APP_SOURCE)
        self.driver = self.write_module("wfdriver", DRIVER_SOURCE)
        self.store = self.open_store()  # the schema, and this test's own connection

    def empty_database(self) -> str:
        """What ``--db`` names for this test: a database with no rowfleet schema yet."""
        raise NotImplementedError

    def await_rollbacks(self) -> None:
        """Return once the database has undone whatever a dead process left uncommitted."""
        raise NotImplementedError

    # --- processes -----------------------------------------------------------------------

    def launch(self, *args: str) -> subprocess.Popen:
        return self.launch_logged(args[0], *args)

    def logs(self, processes: list[subprocess.Popen]) -> str:
        return "\n".join(f"--- {' '.join(p.args[4:])} (pid {p.pid}):\n{self.output(p)}" for p in processes)

    def drive(self, *args: str, expect: int = CRASHED) -> None:
        """Run the crash driver; it must exit ``expect`` (137: the crash point was reached)."""
        result = subprocess.run([sys.executable, self.driver, args[0], self.db, *args[1:]], cwd=self.dir,
                                env=child_env(), capture_output=True, text=True, timeout=DEADLINE)
        self.assertEqual(result.returncode, expect,
                         f"driver {args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        self.await_rollbacks()

    # --- runs ----------------------------------------------------------------------------

    def start_run(self, nodes: list[dict[str, Any]], name: str = "flow", args: Any = None) -> int:
        """``rowfleet run FILE --app wfapp``: the run's id."""
        path = os.path.join(self.dir, f"{name}.json")
        with open(path, "w") as handle:
            json.dump({"name": name, "nodes": nodes}, handle)
        return int(self.cli("run", path, "--app", APP, "--args", json.dumps(args)).stdout)

    def show(self, run_id: int) -> dict[str, Any]:
        """``rowfleet runs ID --json``."""
        return json.loads(self.cli("runs", str(run_id), "--json").stdout)

    def state(self, run_id: int) -> str:
        return self.store.get_run(run_id, "").state

    def wait_for_run(self, run_id: int, state: str = "completed", processes: list = ()) -> dict[str, Any]:
        """Wait until the run reaches ``state`` (failing at once if it ends otherwise); the
        run as ``runs ID --json`` shows it."""
        final = ("completed", "failed", "cancelled", state)
        try:
            reached = wait_until(lambda: (now := self.state(run_id)) in final and now,
                                 message=f"run {run_id} to be {state}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it is {self.state(run_id)}:\n{self.show(run_id)}\n"
                                 f"{self.logs(list(processes))}") from None
        shown = self.show(run_id)
        self.assertEqual(reached, state, f"run {run_id}: {shown['error']}\n{self.logs(list(processes))}")
        return shown

    def effects(self) -> collections.Counter:
        """How many times each (run, node) ran its handler."""
        try:
            with open(os.path.join(self.dir, "effects.log")) as handle:
                return collections.Counter((int(run), node) for run, node, _ in map(str.split, handle))
        except FileNotFoundError:
            return collections.Counter()

    def effect_attempts(self, run_id: int, node_id: str) -> list[int]:
        with open(os.path.join(self.dir, "effects.log")) as handle:
            return [int(attempt) for run, node, attempt in map(str.split, handle)
                    if (int(run), node) == (run_id, node_id)]

    def jobs_of(self, run_id: int) -> list:
        """Every job of the run, of every node generation."""
        return sorted((job for job in self.store.reads.list_jobs("", limit=1_000_000) if job.run_id == run_id),
                      key=lambda job: job.id)

    def assert_ran_once(self, run_id: int, shown: dict[str, Any], attempts: dict[str, int] | None = None) -> None:
        """The invariants of a completed run whose nodes each ran once: one side effect per
        task node, one job per task node (in ``runs --json`` and among all the run's jobs,
        every generation), one ``job_finished`` event per job, every event processed."""
        self.assertEqual(shown["state"], "completed", shown)
        task_nodes = [n["id"] for n in shown["nodes"] if n["kind"] == "task"]
        effects = self.effects()
        ran = {node: effects[(run_id, node)] for node in task_nodes}
        self.assertEqual(ran, dict.fromkeys(task_nodes, 1), "side effects per node (exactly once each)")
        self.assertEqual([key for key in effects if key[0] == run_id and key[1] not in task_nodes], [])
        for node in shown["nodes"]:
            with self.subTest(run=run_id, node=node["id"]):
                self.assertEqual(node["state"], "completed")
                self.assertEqual(len(node["jobs"]), int(node["kind"] == "task"), "jobs of the current generation")
                if attempts is not None and node["kind"] == "task":
                    self.assertEqual(node["attempts"], attempts.get(node["id"], 1))
        jobs = self.jobs_of(run_id)
        per_node = collections.Counter(job.node_id for job in jobs)
        self.assertEqual(dict(per_node), dict.fromkeys(task_nodes, 1), "jobs per node, every generation "
                                                                      "(more than one: enqueued twice)")
        self.assertEqual({job.state for job in jobs}, {"completed"})
        self.assertEqual(sorted(job.id for job in jobs), sorted(j for n in shown["nodes"] for j in n["jobs"]))
        self.assert_events_processed(run_id, jobs)

    def assert_events_processed(self, run_id: int, jobs: list) -> list[dict[str, Any]]:
        events = self.store.reads.dispatch_events(run_id)
        finished = collections.Counter(e["job_id"] for e in events if e["kind"] == "job_finished")
        self.assertEqual(dict(finished), {job.id: 1 for job in jobs}, "job_finished events per job")
        self.assertEqual([e for e in events if e["kind"] != "job_finished"], [], "events other than job_finished")
        for event in events:
            with self.subTest(event=event["id"]):
                self.assertIsNotNone(event["processed_at"], f"event not processed: {event}")
                self.assertIsNone(event["poisoned_at"], f"event poisoned: {event}")
                self.assertEqual((event["attempts"], event["last_error"]), (0, None), "a drain of it failed")
        return events

    # --- 1. a worker dies between its terminal commit and the drain ------------------------

    def test_worker_killed_after_the_terminal_commit_before_the_drain(self):
        run_id = self.start_run([task("a", value="A"), task("b", value="B"),
                                 task("c", "a", "b", value=[ref("a"), ref("b")]),
                                 task("d", "c", value=ref("c"))])
        self.drive("after_finish", "a")

        # a's terminal state and its dispatch event are committed, nothing drained them; the
        # same turn claimed b for the worker that died.
        jobs = {job.node_id: job for job in self.jobs_of(run_id)}
        self.assertEqual(sorted(jobs), ["a", "b"], "only the first nodes have jobs")
        self.assertEqual((jobs["a"].state, jobs["a"].result), ("completed", "A"))
        self.assertEqual(self.marker("crash-holding"), str(jobs["b"].id), "the job claimed with the finish")
        self.assertEqual((jobs["b"].state, jobs["b"].attempts), ("running", 1))
        events = self.store.reads.dispatch_events(run_id)
        self.assertEqual([(e["kind"], e["node_id"], e["job_id"], e["processed_at"]) for e in events],
                         [("job_finished", "a", jobs["a"].id, None)], "the outbox after the crash")
        self.assertEqual(self.effects(), collections.Counter({(run_id, "a"): 1}))

        processes = [self.launch("worker", "--app", APP, *WORKER, *ELSEWHERE),
                     self.launch("orchestrator", *ORCHESTRATOR)]
        shown = self.wait_for_run(run_id, processes=processes)
        self.stop_all(*processes)
        self.assertEqual(shown["nodes"][3]["result"], ["A", "B"])
        # b was claimed by the dead worker and never ran there: reclaimed once its lease
        # lapsed (the attempt given back), then run once.
        self.assert_ran_once(run_id, shown, attempts={"b": 1})
        kinds = [event.kind for event in self.store.reads.events(jobs["b"].id)]
        self.assertEqual(kinds, ["claimed", "reclaimed", "claimed", "completed"])
        self.assertEqual(self.store.get_job(jobs["b"].id, "").lease_token, 2)
        self.assertEqual(self.effect_attempts(run_id, "b"), [1], "b ran in the worker that died")

    # --- 2. an orchestrator dies before the COMMIT of a drain ------------------------------

    def test_orchestrator_killed_before_the_commit_of_a_drain_that_enqueued(self):
        run_id = self.start_run([task("a"), task("b", "a"), task("c", "a"), task("d", "b", "c")])
        self.cli("worker", "--app", APP, "--burst", *WORKER)
        [event] = self.store.reads.dispatch_events(run_id)
        self.assertEqual((event["node_id"], event["processed_at"]), ("a", None))

        self.drive("drain_commit")
        # The drain that enqueued b and c was rolled back whole: no jobs, the event pending,
        # and not counted as a failed drain.
        self.assertEqual([job.node_id for job in self.jobs_of(run_id)], ["a"], "a rolled-back enqueue landed")
        [after] = self.store.reads.dispatch_events(run_id)
        self.assertEqual(after, event, "the event changed, though its drain never committed")
        shown = self.show(run_id)
        self.assertEqual({n["id"]: n["state"] for n in shown["nodes"]}["b"], "pending")

        applied, rounds = 0, 0
        while self.state(run_id) == "running":
            rounds += 1
            self.assertLess(rounds, 10, f"run {run_id} does not move on: {self.show(run_id)}")
            swept = json.loads(self.cli("orchestrator", "--once", *ORCHESTRATOR).stdout)
            self.assertEqual((swept["dispatch_failures"], swept["reconciled_runs"]), (0, 0), swept)
            applied += swept["dispatched"]
            self.cli("worker", "--app", APP, "--burst", *WORKER)
        shown = self.wait_for_run(run_id)
        self.assert_ran_once(run_id, shown, attempts={})
        events = self.store.reads.dispatch_events(run_id)
        self.assertEqual(applied, len(events), "dispatch events applied, summed over every sweep")
        self.assertEqual(len(events), 4)

    # --- 3. two orchestrators drain at once --------------------------------------------------

    def test_two_orchestrators_and_two_workers_over_wide_fan_outs(self):
        width, runs = 20, 5
        parallel = [f"p{i:02d}" for i in range(width)]
        nodes = [task("start", value="go"), *(task(p, "start", value=i) for i, p in enumerate(parallel)),
                 task("join", *parallel, value=[ref(p) for p in parallel])]
        run_ids = [self.start_run(nodes, name="wide") for _ in range(runs)]
        # Leases long enough that a busy machine never lets one lapse: a lapse would run a
        # node twice for its own reasons, and this test is about the drain.
        worker = ("--lease", "10", "--renew", "0.5", "--poll", "0.2", "--heartbeat", "0.5")
        processes = [self.launch("orchestrator", *ORCHESTRATOR) for _ in range(2)]
        processes.append(self.launch("worker", "--app", APP, "--procs", "2", *worker))
        for run_id in run_ids:
            shown = self.wait_for_run(run_id, processes=processes)
            self.assertEqual(shown["nodes"][-1]["result"], list(range(width)))
        self.stop_all(*processes)
        for process in processes:
            self.assertNotIn("Traceback", self.output(process))
            self.assertNotIn(" ERROR ", self.output(process))
        for run_id in run_ids:
            self.assert_ran_once(run_id, self.show(run_id), attempts={})
        self.assertEqual(len(self.effects()), runs * (width + 2))

    # --- 4. an input node across restarts ----------------------------------------------------

    def test_input_node_survives_a_restart_of_every_process_and_takes_one_answer(self):
        run_id = self.start_run([task("draft", value="text"),
                                 {"id": "approve", "kind": "input", "prompt": "Publish?", "depends_on": ["draft"]},
                                 task("publish", "approve", value=ref("approve.ok"))])
        first = [self.launch("worker", "--app", APP, "--procs", "2", *WORKER),
                 self.launch("orchestrator", *ORCHESTRATOR)]
        shown = self.wait_for_run(run_id, "awaiting_input", processes=first)
        self.assertEqual({n["id"]: n["state"] for n in shown["nodes"]},
                         {"draft": "completed", "approve": "awaiting_input", "publish": "pending"})
        self.stop_all(*first)

        # Fresh processes; the worker comes after the answers, so the second answer meets a
        # run still running (publish queued), and a third one a completed run.
        second = [self.launch("orchestrator", *ORCHESTRATOR)]
        # Parked past the grace after which a run with nothing live is walked again: a run
        # waiting for input is not stranded, so no sweep gives it an event.
        events = self.store.reads.dispatch_events(run_id)
        parked = self.store.get_run(run_id, "").updated_at
        wait_until(lambda: self.store.clock() > parked + RECONCILE_GRACE + 0.1, message="the grace to pass")
        swept = json.loads(self.cli("orchestrator", "--once", *ORCHESTRATOR).stdout)
        self.assertEqual(swept["reconciled_runs"], 0, swept)
        self.assertEqual(self.store.reads.dispatch_events(run_id), events, "a parked run was given an event")
        self.assertEqual(self.state(run_id), "awaiting_input")
        answered = self.cli("submit", str(run_id), "approve", "--value", '{"ok": true}')
        self.assertEqual(answered.stdout.strip(), f"run {run_id}: approve answered; the run is running")
        self.assert_refused_answer(run_id, "a value was already submitted")
        second.append(self.launch("worker", "--app", APP, *WORKER))
        shown = self.wait_for_run(run_id, processes=second)
        self.assertEqual(shown["nodes"][1]["result"], {"ok": True})
        self.assertEqual(shown["nodes"][2]["result"], True)
        self.assert_refused_answer(run_id, "completed")
        self.stop_all(*second)
        self.assert_ran_once(run_id, shown, attempts={})

    def assert_refused_answer(self, run_id: int, why: str) -> None:
        """``submit`` again: exit 1, one line on stderr, and nothing changed."""
        before = self.show(run_id), self.jobs_of(run_id), self.store.reads.dispatch_events(run_id)
        again = self.cli("submit", str(run_id), "approve", "--value", '{"ok": false}', check=False)
        self.assertEqual(again.returncode, 1, again)
        self.assertEqual(again.stdout, "")
        self.assertEqual(len(again.stderr.strip().splitlines()), 1, again.stderr)
        self.assertRegex(again.stderr, r"^rowfleet: ")
        self.assertIn(why, again.stderr)
        after = self.show(run_id), self.jobs_of(run_id), self.store.reads.dispatch_events(run_id)
        self.assertEqual(after, before, "a refused answer changed something")

    # --- 5. kill -9 mid-node -----------------------------------------------------------------

    def test_worker_killed_mid_node_is_reclaimed_and_another_worker_finishes_the_run(self):
        run_id = self.start_run([task("a", value=1), task("slow", "a", fn="wf.hang_first", value=2),
                                 task("c", "slow", value=[ref("a"), ref("slow")])])
        orchestrator = self.launch("orchestrator", *ORCHESTRATOR)
        doomed = self.launch("worker", "--app", APP, *WORKER)
        pid = int(wait_until(lambda: self.marker(f"started-{run_id}-slow"), message="the slow node to start"))
        self.assertEqual(pid, doomed.pid)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(DEADLINE)
        self.assertEqual(doomed.returncode, -signal.SIGKILL)

        rescuer = self.launch("worker", "--app", APP, *WORKER, *ELSEWHERE)
        shown = self.wait_for_run(run_id, processes=[orchestrator, rescuer])
        self.stop_all(orchestrator, rescuer)
        self.assertEqual(shown["nodes"][2]["result"], [1, 2])
        nodes = {n["id"]: n for n in shown["nodes"]}
        # Its 1 s lease lapses before three 0.5 s heartbeats are missed: reclaimed, the attempt given back.
        self.assertEqual({node: n["attempts"] for node, n in nodes.items()}, {"a": 1, "slow": 1, "c": 1})
        [slow] = [job for job in self.jobs_of(run_id) if job.node_id == "slow"]
        self.assertEqual(nodes["slow"]["jobs"], [slow.id])
        self.assertTrue(slow.claimed_by.endswith(f":{rescuer.pid}"), slow.claimed_by)
        self.assertEqual([e.kind for e in self.store.reads.events(slow.id)], ["claimed", "reclaimed", "claimed", "completed"])
        self.assertEqual((self.effect_attempts(run_id, "slow"), slow.lease_token), ([1, 1], 2))
        self.assertEqual(self.effects(), collections.Counter({(run_id, "a"): 1, (run_id, "slow"): 2, (run_id, "c"): 1}))
        jobs = self.jobs_of(run_id)
        self.assertEqual([job.node_id for job in jobs], ["a", "slow", "c"], "a node enqueued twice")
        self.assert_events_processed(run_id, jobs)


class SQLiteWorkflowProcessTest(WorkflowProcessContract, TempDirTestCase):
    def empty_database(self) -> str:
        return self.db  # the file in this test's folder, created when the store first opens

    def await_rollbacks(self) -> None:
        pass  # a dead process's locks went with it, and an uncommitted WAL tail is never read


class PostgresWorkflowProcessTest(PostgresServerCase, WorkflowProcessContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database: ``self.db`` is its URL."""


if __name__ == "__main__":
    unittest.main()
