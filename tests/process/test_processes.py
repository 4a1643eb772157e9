"""The fleet as real OS processes on a real database: drains, kill -9, SIGTERM, restarts, wake-ups.

Owns the process-level contract: what holds when rowfleet runs as separate workers,
supervisors and orchestrators that die, are stopped and race one another. Every test
runs the real command line in child processes and checks the outcome in the database;
the tests are written once in ``ProcessContract`` (which gets its database from
``self.db``) so that every backend runs them. Imports rowfleet only to set up and
inspect the database, never to run the fleet in this process.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import unittest
import urllib.parse

from rowfleet.claim import Claim
from rowfleet.errors import LeaseLost, StoreUnavailable
from rowfleet.job import Job, JobSpec, Outcome
from rowfleet.store import open_store
from support import DEADLINE, TempDirTestCase, child_env, proc_stat, process_alive, wait_until

APP = "fleetapp"
# A rescuing worker of another box, for the tests of the lease: one of the dead worker's host
# would hand its jobs back as it starts (rowfleet.worker.rejoin, tests/process/test_rejoin.py).
ELSEWHERE = ("--host", "another-box")

# Handlers the workers import with ``--app fleetapp``. Each one leaves evidence in files
# next to the module: what ran (O_APPEND lines, one write each) and markers that a run began.
APP_SOURCE = '''\
import os
import signal
import time

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))
GIVE_UP = 120.0  # a handler never outlives a failed test by much


def _append(name, line):
    fd = os.open(os.path.join(HERE, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _mark(name, text):
    """Create a marker file whole: written aside, then renamed into place."""
    path = os.path.join(HERE, name)
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.replace(path + ".tmp", path)


def _wait(condition):
    give_up = time.monotonic() + GIVE_UP
    while not condition():
        if time.monotonic() > give_up:
            raise TimeoutError("the test never released this handler")
        time.sleep(0.005)


@rowfleet.task(name="record")
def record():
    """Waits for the gate file, then appends its job id to ran.log."""
    _wait(lambda: os.path.exists(os.path.join(HERE, "go")))
    _append("ran.log", f"{rowfleet.current_job().id}\\n")


@rowfleet.task(name="note")
def note():
    _append("ran.log", f"{rowfleet.current_job().id}\\n")
    return os.getpid()


@rowfleet.task(name="hang_first")
def hang_first():
    """Hangs on its first claim (until killed); returns on any later one (its lease token
    counts the claims: a lost lease gives the attempt back)."""
    job = rowfleet.current_job()
    _append("attempts.log", f"{job.id} {job.attempts} {os.getpid()}\\n")
    if job.lease_token == 1:
        _mark(f"started-{job.id}", str(os.getpid()))
        _wait(lambda: False)
    return "recovered"


@rowfleet.task(name="answer")
def answer(n=41):
    return {"answer": n + 1, "pid": os.getpid()}


@rowfleet.task(name="boom")
def boom():
    raise RuntimeError("boom: the disk is on fire")


@rowfleet.task(name="die_first")
def die_first():
    """Kills its own process (SIGKILL) on its first claim; returns on any later one."""
    if rowfleet.current_job().lease_token == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return "recovered"


@rowfleet.task(name="until_term")
def until_term():
    """Runs until its process has handled SIGTERM, then finishes normally.

    Chains the worker's own SIGTERM handler, so it returns only after the worker was
    asked to stop: the stop request is certain to have landed while the job ran.
    """
    worker_handler = signal.getsignal(signal.SIGTERM)
    if not callable(worker_handler):
        raise RuntimeError(f"the worker installed no SIGTERM handler ({worker_handler!r})")
    seen = []

    def on_term(signum, frame):
        worker_handler(signum, frame)
        seen.append(signum)

    signal.signal(signal.SIGTERM, on_term)
    _mark(f"started-{rowfleet.current_job().id}", str(os.getpid()))
    _wait(lambda: seen)
    return "finished after SIGTERM"
'''


# A racer for one unique job: it marks itself ready, waits for the gate file, then enqueues.
RACE_UNIQUE = """
import os, sys, time
import rowfleet
db, gate, mode = sys.argv[1:]
rowfleet.configure(db=db)
rowfleet.api.default_store().require_schema()  # connected before the start line: the race is the enqueue's
open(os.path.join(os.path.dirname(gate), f"ready-{os.getpid()}"), "w").close()
while not os.path.exists(gate):
    time.sleep(0.0002)
print(rowfleet.enqueue("m:f", {"same": True}, unique=mode).id)
"""


class ProcessContract:
    """Process-level tests for any backend. The TestCase mixing this in provides ``self.db``
    (a database with no rowfleet schema yet), ``self.dir``, ``self.config()``,
    ``self.open_store()``, ``self.cli()`` and ``self.write_module()``, as
    ``support.TempDirTestCase`` does."""

    idle_wait = "poll"  # the system call an idle worker's waiter blocks in (see _BLOCKING)

    def setUp(self) -> None:
        super().setUp()
        self.write_module(APP, APP_SOURCE)
        self._store = None

    # --- helpers -------------------------------------------------------------------------

    def store(self):
        """This test's own connection, with the schema in place."""
        if self._store is None:
            self._store = self.open_store()
        return self._store

    def launch(self, *args: str) -> subprocess.Popen:
        return self.launch_logged(args[0], *args)

    def assert_exits(self, process: subprocess.Popen, code: int = 0, timeout: float = DEADLINE) -> None:
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.fail(f"{process.args[4:]} still running after {timeout:.0f}s:\n{self.output(process)}")
        self.assertEqual(process.returncode, code,
                         f"{process.args[4:]} exited {process.returncode}:\n{self.output(process)}")

    def stop(self, process: subprocess.Popen) -> None:
        """SIGTERM; it must exit 0."""
        process.send_signal(signal.SIGTERM)
        self.assert_exits(process, 0)

    def ran(self) -> collections.Counter:
        """How many times each job id was appended to ran.log."""
        text = self.marker("ran.log") or ""
        return collections.Counter(int(line) for line in text.split())

    def job(self, job_id: int):
        return self.store().get_job(job_id, "")

    def kinds(self, job_id: int) -> list[str]:
        return [event.kind for event in self.store().reads.events(job_id)]

    def wait_for_state(self, job_id: int, state: str, timeout: float = DEADLINE):
        return wait_until(lambda: (job := self.job(job_id)).state == state and job, timeout=timeout,
                          message=f"job {job_id} to be {state}")

    def enqueue(self, task: str, count: int = 1) -> list[int]:
        """Enqueue ``count`` jobs of ``task`` in one transaction; their ids."""
        store = self.store()
        known = {job.id for job in store.reads.list_jobs("", limit=1_000_000)}
        store.enqueue_many(JobSpec(task=task), [None] * count)
        ids = sorted(job.id for job in store.reads.list_jobs("", limit=1_000_000) if job.id not in known)
        self.assertEqual(len(ids), count)
        return ids

    def schema_version(self) -> int:
        try:
            with open_store(self.config()) as store:
                return store.schema_version()
        except StoreUnavailable:
            return 0

    def holding_writes(self):
        """A context manager that holds the database's write lock while it is open."""
        raise NotImplementedError("each backend says how to hold its write lock")

    def waits_for_writes(self, pid: int) -> bool:
        """Whether process ``pid`` is blocked behind ``holding_writes`` (True when unknowable)."""
        raise NotImplementedError("each backend says how a process waits for its write lock")

    def assert_no_schema(self) -> None:
        self.assertEqual(self.schema_version(), 0, "a waiting worker must not create the schema")

    def assert_ran_once_each(self, ids: list[int]) -> None:
        ran = self.ran()
        twice = sorted(job_id for job_id, n in ran.items() if n > 1)
        self.assertEqual(twice, [], "jobs whose handler ran more than once")
        self.assertEqual(sorted(ran), sorted(ids), "the handlers that ran are not exactly the jobs enqueued")
        counts = {(c["state"]): c["n"] for c in self.store().reads.counts()}
        self.assertEqual(counts, {"completed": len(ids)})
        for job in self.store().reads.list_jobs("", limit=1_000_000):
            self.assertEqual((job.attempts, job.lease_token), (1, 1), f"job {job.id}")

    def assert_handed_back_with(self, waiting: list[int], done: "Job") -> None:
        """Each job of ``waiting`` queued again, unspent, by a stop's hand-back in the
        transaction that finished ``done``."""
        for job_id in waiting:
            left = self.job(job_id)
            self.assertEqual((left.state, left.attempts, left.claimed_by), ("queued", 0, None), f"job {job_id}")
            [back] = [event for event in self.store().reads.events(job_id) if event.kind == "handed_back"]
            self.assertIn("stopping", back.detail["reason"])
            self.assertEqual(back.at, done.finished_at, "handed back in another transaction than the finish")

    def drain_exactly_once(self, start_workers, jobs: int = 2000, processes: int = 4, batch: int = 1) -> None:
        """``jobs`` jobs, ``processes`` processes racing for them: each job runs once and
        completes.

        The handler waits at a gate until every process holds its first claim (``batch``
        jobs each, one running and the rest prefetched), so the race is real however fast
        one process starts.
        """
        ids = self.enqueue("record", jobs)
        started = start_workers()
        wait_until(lambda: _count(self.store(), "running") == processes * batch,
                   message=f"{processes} workers holding {batch} job(s) each")
        holders = {job.claimed_by for job in self.store().reads.list_jobs("", state="running")}
        self.assertEqual(len(holders), processes)
        open(os.path.join(self.dir, "go"), "w").close()
        for process in started:
            self.assert_exits(process, 0, timeout=2 * DEADLINE)
        self.assert_ran_once_each(ids)

    # --- draining ------------------------------------------------------------------------

    def test_supervised_procs_drain_2000_jobs_each_exactly_once(self):
        self.drain_exactly_once(lambda: [self.launch("worker", "--app", APP, "--procs", "4", "--burst")])

    def test_independent_workers_drain_2000_jobs_each_exactly_once(self):
        self.drain_exactly_once(lambda: [self.launch("worker", "--app", APP, "--burst") for _ in range(4)])

    # --- death and stopping --------------------------------------------------------------

    def test_kill_9_mid_job_is_reclaimed_and_the_dead_holders_token_is_stale(self):
        job_id = self.enqueue("hang_first")[0]
        lease = ("--lease", "2", "--renew", "0.5", "--poll", "0.2")
        first = self.launch("worker", "--app", APP, *lease)
        pid = int(wait_until(lambda: self.marker(f"started-{job_id}"), message="the first attempt to start"))
        self.assertEqual(pid, first.pid)
        held = self.job(job_id)  # the job as the doomed worker holds it
        self.assertEqual((held.state, held.attempts, held.lease_token), ("running", 1, 1))
        wait_until(lambda: self.job(job_id).lease_expires_at > held.lease_expires_at,
                   message="the keeper to renew the lease")

        first.send_signal(signal.SIGKILL)
        self.assert_exits(first, -signal.SIGKILL)
        last_lease = self.job(job_id).lease_expires_at  # nobody renews it any more
        orchestrator = self.launch("orchestrator", "--interval", "0.2")
        second = self.launch("worker", "--app", APP, *ELSEWHERE, *lease)

        done = self.wait_for_state(job_id, "completed")
        self.assertEqual((done.lease_token, done.result), (2, "recovered"))
        self.assertTrue(done.claimed_by.endswith(f":{second.pid}"), done.claimed_by)
        events = self.store().reads.events(job_id)
        # Its 2 s lease lapses before three 10 s heartbeats are missed: reclaimed by the
        # lapse, which gives the attempt back.
        self.assertEqual([e.kind for e in events], ["claimed", "reclaimed", "claimed", "completed"])
        self.assertEqual(done.attempts, 1)
        reclaimed = events[1]
        self.assertEqual(reclaimed.detail["token"], 1)
        self.assertGreater(reclaimed.at, last_lease, "reclaimed before the lease lapsed")

        before, events_before = self.job(job_id), self.store().reads.events(job_id)
        for outcome in (Outcome("completed", result="zombie", event="completed"),
                        Outcome("failed", error="zombie", event="failed"),
                        Outcome("queued", error="zombie", delay=0.0, event="retried")):
            with self.subTest(outcome=outcome.state):
                with self.assertRaises(LeaseLost):
                    self.store().finish(held, outcome)
        with self.assertRaises(LeaseLost):
            self.store().renew(held, 60.0)
        self.assertEqual(self.job(job_id), before)
        self.assertEqual(self.store().reads.events(job_id), events_before)
        self.stop(second)
        self.stop(orchestrator)

    def test_sigterm_finishes_the_job_in_hand_then_exits_without_claiming_more(self):
        running_id, waiting_id = self.enqueue("until_term")[0], self.enqueue("note")[0]
        worker = self.launch("worker", "--app", APP, "--poll", "0.2")
        pid = int(wait_until(lambda: self.marker(f"started-{running_id}"), message="the job to start"))
        self.assertEqual(pid, worker.pid)
        worker.send_signal(signal.SIGTERM)
        self.assert_exits(worker, 0)
        done = self.job(running_id)
        self.assertEqual((done.state, done.result), ("completed", "finished after SIGTERM"))
        left = self.job(waiting_id)
        self.assertEqual((left.state, left.attempts), ("queued", 0))
        self.assertEqual(self.kinds(waiting_id), [])
        self.assertEqual(self.ran(), collections.Counter())
        stopped = [w for w in self.store().reads.workers(since=0) if w["pid"] == worker.pid]
        self.assertEqual(len(stopped), 1)
        self.assertIsNotNone(stopped[0]["stopped_at"], "the worker did not record its stop")

    # --- prefetch (worker --prefetch N) ---------------------------------------------------

    def test_prefetching_workers_drain_600_jobs_each_exactly_once(self):
        # PostgreSQL once took all 600 at once: its pick, run again per row, locked 8 more each time.
        self.drain_exactly_once(lambda: [self.launch("worker", "--app", APP, "--burst", "--prefetch", "8")
                                         for _ in range(2)], jobs=600, processes=2, batch=8)

    def test_kill_9_of_a_prefetching_worker_leaves_its_unstarted_jobs_to_the_sweep_and_each_runs_once(self):
        hung = self.enqueue("hang_first")[0]
        waiting = self.enqueue("note", 4)
        lease = ("--lease", "2", "--renew", "0.5", "--poll", "0.2")
        first = self.launch("worker", "--app", APP, "--prefetch", "5", *lease)
        wait_until(lambda: self.marker(f"started-{hung}"), message="the first job to start")
        held = [self.job(job_id) for job_id in waiting]
        self.assertEqual({(job.state, job.claimed_by) for job in held}, {("running", f"{held[0].host}:{first.pid}")})
        wait_until(lambda: all(self.job(job.id).lease_expires_at > job.lease_expires_at for job in held),
                   message="the keeper to renew the leases of the jobs it has not started")

        first.send_signal(signal.SIGKILL)
        self.assert_exits(first, -signal.SIGKILL)
        orchestrator = self.launch("orchestrator", "--interval", "0.2")
        second = self.launch("worker", "--app", APP, "--prefetch", "5", *ELSEWHERE, *lease)
        for job_id in [hung, *waiting]:
            self.wait_for_state(job_id, "completed")
        self.assertEqual(self.ran(), collections.Counter(waiting), "a job waiting in the dead batch ran twice")
        for job_id in waiting:
            self.assertEqual(self.kinds(job_id), ["claimed", "reclaimed", "claimed", "completed"], f"job {job_id}")
        self.assertEqual(self.job(hung).result, "recovered")
        self.stop(second)
        self.stop(orchestrator)

    def test_a_prefetched_job_cancelled_before_it_starts_ends_cancelled_without_running(self):
        first, cancelled, last = self.enqueue("record", 3)
        worker = self.launch("worker", "--app", APP, "--prefetch", "3", "--burst", "--renew", "0.3")
        wait_until(lambda: self.job(last).state == "running", message="the batch to be claimed")
        self.cli("cancel", str(cancelled))
        self.wait_for_state(cancelled, "cancelled")  # the keeper's renewal heard it and wrote it
        open(os.path.join(self.dir, "go"), "w").close()
        self.assert_exits(worker, 0)
        self.assertEqual(self.ran(), collections.Counter([first, last]))
        self.assertIn("before it started", self.job(cancelled).error)

    def test_sigterm_of_a_prefetching_worker_finishes_its_job_and_hands_back_the_rest_with_it(self):
        running = self.enqueue("until_term")[0]
        waiting = self.enqueue("note", 3)
        worker = self.launch("worker", "--app", APP, "--prefetch", "4", "--poll", "0.2")
        wait_until(lambda: self.marker(f"started-{running}"), message="the job to start")
        self.assertEqual({self.job(job_id).state for job_id in waiting}, {"running"})
        worker.send_signal(signal.SIGTERM)
        self.assert_exits(worker, 0)
        done = self.job(running)
        self.assertEqual((done.state, done.result), ("completed", "finished after SIGTERM"))
        self.assert_handed_back_with(waiting, done)
        self.assertEqual(self.ran(), collections.Counter())

    def test_a_hard_switch_hands_back_a_prefetching_workers_unstarted_jobs_with_its_stop(self):
        running = self.enqueue("hang_first")[0]
        waiting = self.enqueue("note", 3)
        worker = self.launch("worker", "--app", APP, "--prefetch", "4", "--poll", "0.2")
        wait_until(lambda: self.marker(f"started-{running}"), message="the job to start")
        self.cli("control", "--queue", "default", "--off", "--policy", "hard")
        self.assert_exits(worker, 79)
        [stop] = [event for event in self.store().reads.events(running) if event.kind == "operator_stop"]
        self.assertEqual((self.job(running).state, self.job(running).attempts), ("queued", 0))
        for job_id in waiting:
            left = self.job(job_id)
            self.assertEqual((left.state, left.attempts), ("queued", 0), f"job {job_id}")
            [back] = [event for event in self.store().reads.events(job_id) if event.kind == "handed_back"]
            self.assertEqual(back.at, stop.at, "not handed back in the transaction of the stop")
        self.assertEqual(self.ran(), collections.Counter())

    # --- batched completion (worker --batch N) --------------------------------------------

    def test_batching_workers_drain_600_jobs_each_exactly_once(self):
        self.drain_exactly_once(lambda: [self.launch("worker", "--app", APP, "--burst", "--batch", "8")
                                         for _ in range(2)], jobs=600, processes=2, batch=8)

    def test_kill_9_of_a_batching_worker_runs_again_exactly_the_jobs_whose_outcomes_it_had_not_written(self):
        # Notes run in well under a millisecond, then the next job kills the process: the
        # notes' outcomes are still held, unless the completer's window passed meanwhile.
        notes = self.enqueue("note", 4)
        dying = self.enqueue("die_first")[0]
        lease = ("--lease", "2", "--renew", "0.5", "--poll", "0.2")
        first = self.launch("worker", "--app", APP, "--batch", "5", *lease)
        self.assert_exits(first, -signal.SIGKILL)
        unwritten = [job_id for job_id in notes if self.job(job_id).state == "running"]
        self.assertEqual(self.ran(), collections.Counter(notes), "every note ran before the kill")
        orchestrator = self.launch("orchestrator", "--interval", "0.2")
        second = self.launch("worker", "--app", APP, "--batch", "5", *ELSEWHERE, *lease)
        for job_id in [*notes, dying]:
            self.wait_for_state(job_id, "completed")
        self.assertEqual(self.ran(), collections.Counter(notes + unwritten),
                         "not exactly the notes whose outcomes were unwritten ran again")
        for job_id in notes:
            expected = ["claimed", "reclaimed", "claimed", "completed"] if job_id in unwritten else \
                ["claimed", "completed"]
            self.assertEqual(self.kinds(job_id), expected, f"job {job_id}")
        self.assertEqual(self.job(dying).result, "recovered")
        self.stop(second)
        self.stop(orchestrator)

    def test_a_batching_worker_writes_the_outcomes_before_a_long_job_while_it_runs(self):
        notes = self.enqueue("note", 3)
        hung = self.enqueue("hang_first")[0]
        worker = self.launch("worker", "--app", APP, "--batch", "4", "--poll", "0.2")
        wait_until(lambda: self.marker(f"started-{hung}"), message="the long job to start")
        for job_id in notes:  # written by the completer, not held until the long job ends
            self.wait_for_state(job_id, "completed")
        self.assertEqual(self.job(hung).state, "running")
        self.cli("control", "--queue", "default", "--off", "--policy", "hard")
        self.assert_exits(worker, 79)
        self.assertEqual(self.ran(), collections.Counter(notes))

    def test_sigterm_of_a_batching_worker_writes_what_it_holds_and_hands_back_the_rest_in_one_commit(self):
        before = self.enqueue("note")[0]
        running = self.enqueue("until_term")[0]
        waiting = self.enqueue("note", 2)
        worker = self.launch("worker", "--app", APP, "--batch", "4", "--poll", "0.2")
        wait_until(lambda: self.marker(f"started-{running}"), message="the job to start")
        worker.send_signal(signal.SIGTERM)
        self.assert_exits(worker, 0)
        done = self.job(running)
        self.assertEqual((done.state, done.result), ("completed", "finished after SIGTERM"))
        self.assertEqual(self.job(before).state, "completed")
        self.assert_handed_back_with(waiting, done)
        self.assertEqual(self.ran(), collections.Counter([before]))

    # --- waiting for a job (rowfleet wait, enqueue --wait) --------------------------------

    def test_enqueue_wait_prints_the_result_a_worker_process_wrote(self):
        self.store()  # the schema, before either process
        worker = self.launch("worker", "--app", APP, "--poll", "30")  # only the push paths wake anyone
        done = self.cli("enqueue", "answer", "--app", APP, "--args", '{"n": 1}', "--wait", "--wait-timeout",
                        str(DEADLINE))
        self.assertEqual(json.loads(done.stdout), {"answer": 2, "pid": worker.pid})
        self.stop(worker)

    def test_a_wait_hears_each_end_of_a_real_workers_jobs_one_after_another(self):
        # A fast job's claim and finish land within a millisecond: the waiter must not take
        # the claim's wake-up for the end and then sleep through the finish until a poll
        # (30 s here) or the worker's next heartbeat (10 s), far past each wait's 5 s.
        self.store()
        worker = self.launch("worker", "--app", APP, "--poll", "30")
        wait_until(lambda: self.store().reads.workers(since=0), message="the worker idle, its first beat written")
        waiter = self.open_store(migrate=False, poll=30.0)  # a client's store: it never migrated
        for n in range(20):
            job = waiter.enqueue(JobSpec(task="note"))
            self.assertEqual(waiter.wait_for(job.id, "", timeout=5.0).result, worker.pid, f"job {n}")
        self.stop(worker)

    def test_wait_exits_1_with_the_error_of_a_job_that_failed(self):
        job_id = self.store().enqueue(JobSpec(task="boom", max_attempts=1)).id
        worker = self.launch("worker", "--app", APP, "--poll", "30")
        ended = self.cli("wait", str(job_id), "--timeout", str(DEADLINE), check=False)
        self.stop(worker)
        self.assertEqual(ended.returncode, 1, ended.stdout + ended.stderr)
        self.assertEqual(ended.stdout, "")
        [line] = ended.stderr.strip().splitlines()
        self.assertEqual(line, f"rowfleet: job {job_id} failed: RuntimeError: boom: the disk is on fire")

    def test_wait_exits_124_when_the_job_has_not_ended_in_time(self):
        [job_id] = self.enqueue("note")  # no worker runs
        started = time.monotonic()
        waited = self.cli("wait", str(job_id), "--timeout", "0.3", check=False)
        self.assertEqual(waited.returncode, 124, waited.stderr)
        self.assertGreaterEqual(time.monotonic() - started, 0.3)
        self.assertEqual(waited.stdout, "")
        self.assertEqual(waited.stderr.strip().splitlines(), [f"rowfleet: job {job_id} is still queued after 0.3s"])
        self.assertEqual(self.job(job_id).state, "queued")

    # --- unique jobs (enqueue with unique=) ------------------------------------------------

    def test_concurrent_enqueues_of_one_unique_job_write_one_job(self):
        self.store()  # the schema, before the racers
        racers = [subprocess.Popen(
            [sys.executable, "-c", RACE_UNIQUE, self.db, os.path.join(self.dir, "go"), mode],
            cwd=self.dir, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for mode in ("queued", "active") * 4]
        wait_until(lambda: len([name for name in os.listdir(self.dir) if name.startswith("ready-")]) == len(racers),
                   message="every racer at the start line")
        open(os.path.join(self.dir, "go"), "w").close()
        ids = set()
        for racer in racers:
            out, err = racer.communicate(timeout=DEADLINE)
            self.assertEqual(racer.returncode, 0, err)
            ids.add(int(out))
        self.assertEqual(len(ids), 1, f"racers wrote {sorted(ids)}")
        self.assertEqual([job.id for job in self.store().reads.list_jobs("", limit=100)], sorted(ids))

    def test_supervisor_restarts_a_killed_child_and_stops_all_on_sigterm(self):
        hung_id = self.enqueue("hang_first")[0]
        parent = self.launch("worker", "--app", APP, "--procs", "2", "--lease", "2", "--renew", "0.5",
                             "--poll", "0.2", "--heartbeat", "0.5", "--no-sampler")  # worker children only
        victim = int(wait_until(lambda: self.marker(f"started-{hung_id}"), message="a child to take the job"))
        originals = wait_until(lambda: len(kids := _children(parent.pid)) == 2 and kids,
                               message="two worker children")
        self.assertIn(victim, originals)

        os.kill(victim, signal.SIGKILL)
        replacement = wait_until(
            lambda: len(kids := _children(parent.pid)) == 2 and victim not in kids and kids,
            message="the parent to restart the killed child")
        self.assertEqual(len(replacement & originals), 1, "only the killed child should be replaced")
        self.launch("orchestrator", "--interval", "0.2")
        note_ids = self.enqueue("note", 40)
        for job_id in [hung_id, *note_ids]:
            self.wait_for_state(job_id, "completed")
        self.assertEqual(self.job(hung_id).attempts, 2)
        self.assertEqual(self.ran(), collections.Counter(note_ids))
        self.assertEqual(_children(parent.pid), replacement, "a child died or was added while draining")

        self.stop(parent)
        for pid in replacement:
            self.assertFalse(process_alive(pid), f"child {pid} outlived its parent")
        rows = {w["pid"]: w for w in self.store().reads.workers(since=0)}
        for pid in replacement:
            self.assertIsNotNone(rows[pid]["stopped_at"], f"child {pid} did not stop gracefully")

    def test_sigterm_while_the_supervisor_starts_its_children_stops_them_all(self):
        self.store()
        parent = self.launch("worker", "--app", APP, "--procs", "8", "--poll", "0.5")
        wait_until(lambda: _children(parent.pid), interval=0.0, message="the first child")
        parent.send_signal(signal.SIGTERM)  # most likely while the parent is still forking
        self.assert_exits(parent, 0)

    # --- starting up and waiting ---------------------------------------------------------

    def test_worker_started_before_the_schema_waits_then_runs_jobs(self):
        worker = self.launch("worker", "--app", APP, "--poll", "0.2")
        wait_until(lambda: "waiting for the database" in self.output(worker), message="the worker to wait")
        self.assertIsNone(worker.poll(), self.output(worker))
        self.assert_no_schema()
        self.cli("init")
        job_id = self.enqueue("note")[0]
        self.wait_for_state(job_id, "completed")
        self.assertEqual(self.ran(), collections.Counter([job_id]))
        self.stop(worker)

    def test_two_orchestrators_reclaim_each_lapsed_job_exactly_once(self):
        # One queue per job, so the vanished holder below claims each job once and never
        # takes back a job already reclaimed, however slowly its claims go.
        specs = [JobSpec(task="note", queue=f"q{n}") for n in range(150)]  # > one sweep's 100
        for spec in specs:
            self.store().enqueue(spec)
        ids = sorted(job.id for job in self.store().reads.list_jobs("", limit=1000))
        orchestrators = [self.launch("orchestrator", "--interval", "0.2", "--log-level", "INFO")
                         for _ in range(2)]
        for process in orchestrators:
            wait_until(lambda: "sweeping every" in self.output(process),
                       message="both orchestrators sweeping")
        # A frozen clock gives every claim the same deadline, so the leases lapse together.
        frozen = time.time()
        with open_store(self.config(), clock=lambda: frozen) as ghost:
            for spec in specs:
                self.assertIsNotNone(ghost.claim(Claim("", spec.queue, "ghost:1", 1.0)))
        wait_until(lambda: time.time() > frozen + 1.0, message="the leases to lapse")
        # Then the write lock is held until both orchestrators wait behind it, so both
        # sweeps begin after the lapse and meet the same lapsed rows when it is released.
        with self.holding_writes():
            wait_until(lambda: all(self.waits_for_writes(p.pid) for p in orchestrators),
                       message="both orchestrators waiting for the write lock")
        wait_until(lambda: _count(self.store(), "queued") == len(ids), message="every lapsed job re-queued")
        for process in orchestrators:
            self.stop(process)
        for job_id in ids:
            events = self.store().reads.events(job_id)
            self.assertEqual([e.kind for e in events], ["claimed", "reclaimed"], f"job {job_id}")
            self.assertEqual(events[1].detail["token"], 1)
            job = self.job(job_id)
            self.assertEqual((job.state, job.attempts, job.lease_token, job.watchdog_retries), ("queued", 0, 1, 1),
                             "reclaimed once: one attempt given back, one watchdog retry spent")

    def test_idle_worker_wakes_on_an_enqueue_from_another_process(self):
        self.store()
        worker = self.launch("worker", "--app", APP, "--poll", "30")
        for _ in range(2):  # the second round proves the wake-up re-arms after a job
            if _can_see(self.idle_wait):
                wait_until(lambda: _blocked_in(worker.pid, self.idle_wait),
                           message="the idle worker to block in its wait")
            job_id = int(self.cli("enqueue", "note").stdout)
            done = self.wait_for_state(job_id, "completed", timeout=10.0)
            # Far sooner than the 30 s safety poll: the enqueue itself woke the worker.
            self.assertLess(done.started_at - done.created_at, 5.0)
            self.assertTrue(done.claimed_by.endswith(f":{worker.pid}"))
        self.stop(worker)

    def test_a_worker_of_several_queues_takes_the_first_with_work_and_serves_those_switched_on(self):
        store = self.store()
        older = store.enqueue(JobSpec("note", queue="b")).id
        first, second = (store.enqueue(JobSpec("note", queue="a")).id for _ in range(2))
        worker = self.launch("worker", "--app", APP, "--queue", "a", "--queue", "b", "--poll", "30",
                             "--heartbeat", "0.5")
        done = [self.wait_for_state(job_id, "completed") for job_id in (first, second, older)]
        self.assertEqual(sorted(done, key=lambda job: (job.started_at, job.id)), done,
                         "queue a's jobs go first, though b's is older")
        # Idle, it wakes for either queue (on PostgreSQL: a NOTIFY of either).
        woken = self.wait_for_state(store.enqueue(JobSpec("note", queue="b")).id, "completed", timeout=10.0)
        self.assertLess(woken.started_at - woken.created_at, 5.0)
        [row] = self.cli_json("workers")["workers"]
        self.assertEqual((row["queue"], row["queues"], row["desired"]), ("a", ["a", "b"], "on"))
        # Queue a off: it goes on serving b alone, and stays on.
        self.cli("control", "--queue", "a", "--off")
        wait_until(lambda: "queues switched off: a; serving b" in self.output(worker),
                   message="the worker to see queue a switched off")
        left, served = store.enqueue(JobSpec("note", queue="a")).id, store.enqueue(JobSpec("note", queue="b")).id
        self.wait_for_state(served, "completed", timeout=10.0)
        self.assertEqual(self.job(left).state, "queued", "a job of the queue switched off was claimed")
        # Both off: it parks; a back on: it takes the job left.
        self.cli("control", "--queue", "b", "--off")
        wait_until(lambda: self.cli_json("workers")["workers"][0]["state"] == "parked", message="the worker parked")
        self.cli("control", "--queue", "a", "--on")
        self.wait_for_state(left, "completed")
        self.stop(worker)

    def test_delayed_job_is_not_claimed_before_its_run_at(self):
        self.store()
        worker = self.launch("worker", "--app", APP, "--poll", "0.2")
        job_id = int(self.cli("enqueue", "note", "--delay", "1.5").stdout)
        run_at = self.job(job_id).run_at
        while time.time() < run_at - 0.05:  # watch the whole window in which it must wait
            self.assertEqual(self.job(job_id).state, "queued", "claimed before its run_at")
            time.sleep(0.02)
        done = self.wait_for_state(job_id, "completed")
        self.assertGreaterEqual(done.started_at, run_at)
        claimed = [e for e in self.store().reads.events(job_id) if e.kind == "claimed"]
        self.assertEqual(len(claimed), 1)
        self.assertGreaterEqual(claimed[0].at, run_at)
        self.stop(worker)


class SQLiteProcessTest(ProcessContract, TempDirTestCase):
    @contextlib.contextmanager
    def holding_writes(self):
        with contextlib.closing(sqlite3.connect(self.db, isolation_level=None)) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            finally:
                conn.execute("ROLLBACK")

    def waits_for_writes(self, pid: int) -> bool:
        # SQLite's busy handler sleeps between tries; an idle orchestrator waits on a futex.
        return not _can_see("sleep") or _blocked_in(pid, "sleep")

    def assert_no_schema(self) -> None:
        self.assertFalse(os.path.exists(self.db), "a waiting worker must not create the database file")
        super().assert_no_schema()


class PostgresProcessTest(ProcessContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database: ``self.db`` is its URL.

    The database exists from the start, empty: "no schema yet" means no tables.
    """

    idle_wait = "select"  # ListenWaiter blocks in select() on its LISTEN connection

    def setUp(self) -> None:
        import pg_harness

        self.pg = pg_harness.require_pg(self)
        super().setUp()
        self.db = self.pg.create_database()
        self.addCleanup(self.pg.drop_database, self.db)
        self._lock_holder = None

    @contextlib.contextmanager
    def holding_writes(self):
        # Row locks would not hold the orchestrators back: their sweep selects lapsed rows
        # FOR UPDATE SKIP LOCKED and passes locked rows by. A table lock that admits only
        # plain reads (EXCLUSIVE) is waited for by every statement that would lock or change
        # a row, SKIP LOCKED or not; once it goes, the sweeps run at once over the same rows.
        from rowfleet.store.postgres import connect

        with contextlib.closing(connect(self.db, autocommit=False)) as conn:
            conn.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
            self._lock_holder = conn.info.backend_pid
            try:
                yield
            finally:
                self._lock_holder = None
                conn.rollback()

    def waits_for_writes(self, pid: int) -> bool:
        # The server knows its clients by address, not pid: find the backends whose client
        # port is one of this process's TCP sockets, and ask whether our lock blocks one.
        host = urllib.parse.urlsplit(self.db).hostname or ""
        if not host or host.startswith(("/", "%2f")):
            return True  # a unix socket (an external server): not knowable this way
        ports = _tcp_ports(pid)
        rows = self.pg.psql(self.db, "SELECT count(*) FROM pg_stat_activity "
                                     "WHERE client_port = ANY(%s) AND %s = ANY(pg_blocking_pids(pid))",
                            (sorted(ports), self._lock_holder))
        return rows[0][0] > 0

    def assert_no_schema(self) -> None:
        rows = self.pg.psql(
            self.db,
            "SELECT 'table ' || relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace "
            "UNION ALL SELECT 'function ' || proname FROM pg_proc "
            "WHERE pronamespace = current_schema()::regnamespace")
        self.assertEqual(rows, [], "a waiting worker must not create any part of the schema")
        super().assert_no_schema()


# --- processes, seen through /proc --------------------------------------------------------


def _count(store, state: str) -> int:
    return sum(c["n"] for c in store.reads.counts() if c["state"] == state)


def _children(parent: int) -> set[int]:
    """Live (not zombie) children of ``parent``'s main thread."""
    try:
        with open(f"/proc/{parent}/task/{parent}/children") as handle:
            listed = {int(pid) for pid in handle.read().split()}
    except FileNotFoundError:  # a kernel without the children file: scan every process
        listed = {int(entry) for entry in os.listdir("/proc")
                  if entry.isdigit() and (proc_stat(int(entry)) or [None, None])[1] == str(parent)}
    return {pid for pid in listed if process_alive(pid)}


def _tcp_ports(pid: int) -> set[int]:
    """The local ports of the TCP sockets process ``pid`` holds open."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:["):-1])
    except FileNotFoundError:
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/net/{table}") as handle:
            for line in handle.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _current_syscall(tid: int) -> str | None:
    """The number of the system call thread ``tid`` is blocked in, or None when it runs."""
    try:
        with open(f"/proc/{tid}/task/{tid}/syscall") as handle:
            first = handle.read().split()[0]
    except (OSError, IndexError):
        return None
    return first if first.isdigit() else None


# One-thread programs that block in a known way, for ``_syscall_number``.
_BLOCKING = {
    "poll": "import select, sys\npoller = select.poll()\npoller.register(sys.stdin, select.POLLIN)\n"
            "print('ready', flush=True)\npoller.poll(10000)\n",
    "sleep": "import time\nprint('ready', flush=True)\ntime.sleep(10)\n",  # SQLite's busy wait sleeps so
    "select": "import select, sys\nprint('ready', flush=True)\nselect.select([sys.stdin], [], [], 10)\n",
}


@functools.cache
def _syscall_number(kind: str) -> str | None:
    """The number of the system call a ``kind`` of wait blocks in here, found by watching a
    one-thread process block in it (so no table of numbers per architecture is needed)."""
    probe = subprocess.Popen([sys.executable, "-c", _BLOCKING[kind]], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        probe.stdout.readline()  # from here on, the next blocking call is the one we want
        give_up = time.monotonic() + 5.0
        while time.monotonic() < give_up:
            number = _current_syscall(probe.pid)
            if number is not None:
                return number
            time.sleep(0.005)
        return None
    finally:
        probe.kill()
        probe.communicate()


def _can_see(kind: str) -> bool:
    return _syscall_number(kind) is not None


def _blocked_in(pid: int, kind: str) -> bool:
    """Whether the main thread of ``pid`` is blocked in a ``kind`` of wait: an idle worker
    in poll() (SQLite) or select() (PostgreSQL), or a process waiting out SQLite's busy
    timeout in sleep."""
    number = _syscall_number(kind)
    return number is not None and _current_syscall(pid) == number


if __name__ == "__main__":
    unittest.main()
