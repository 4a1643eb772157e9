"""The watchdogs as real OS processes: every exit code of the 75-79 band, end to end.

Owns the process-level liveness contract: a worker whose job runs past its budget (75),
stalls after reporting progress (76), loses its row to another holder (77) or sits on an
idle GPU (78) ends its own process with that code and leaves the job as the one trip
policy says (re-queued with a watchdog retry spent, or failed once they are used up); a
busy GPU or moving memory only makes a stall *suspected*; a worker frozen with SIGSTOP is
flagged dead, its job handed back at once (if a heartbeat named it; else its lease
lapses), and it exits 77 without writing when it wakes; a supervisor SIGKILLs a frozen
child the sweep flagged, and backs off from a crash loop without spinning. On PostgreSQL,
one worker row left locked by a frozen heartbeat must not stop the sweep.

Every test runs the real command line (``worker``, ``orchestrator``, ``enqueue``, ``run``,
``job --json``) in child processes, with the fake nvidia-smi of tests/fixtures/bin passed
by ``--nvidia-smi`` (``FAKE_NVIDIA_SMI`` in the child's environment), and checks exit
codes, the database and the logs. Written once in ``WatchdogContract`` and run on SQLite
and PostgreSQL. Handlers wait at a gate file the test opens once it has seen what it
waits for, so nothing depends on how fast this machine is.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import time
import unittest
from typing import Any, Callable

from rowfleet.claim import Claim
from rowfleet.job import JobSpec
from pg_harness import PostgresServerCase
from support import DEADLINE, ROOT, TempDirTestCase, child_env, proc_stat, process_alive, wait_until

APP = "dogapp"
FAKE_SMI = os.path.join(ROOT, "tests", "fixtures", "bin", "nvidia-smi")
# Short watchdog settings: a stall is suspected 1 s after the last beat and confirmed by
# three readings 0.2 s apart; a GPU job's first window is 1.5 s, read every 0.2 s.
STALL = ("--stall-window", "1", "--stall-samples", "3", "--stall-spacing", "0.2")
GPU = ("--gpu", "--gpu-first-window", "1.5", "--gpu-sample", "0.2")
MIB = 2 ** 20

APP_SOURCE = '''\
import os
import time

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))
GIVE_UP = 120.0  # a handler never outlives a failed test by much


def _mark(name, text):
    """Create a marker file whole: written aside, then renamed into place."""
    path = os.path.join(HERE, name)
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.replace(path + ".tmp", path)


def _started():
    job = rowfleet.current_job()
    _mark(f"started-{job.id}-{job.lease_token}", str(os.getpid()))  # each claim raises the token
    return job


def _gate_open(job):
    return os.path.exists(os.path.join(HERE, f"go-{job.id}"))


def _wait_for_gate(job, step=None):
    give_up = time.monotonic() + GIVE_UP
    while not _gate_open(job):
        if time.monotonic() > give_up:
            raise TimeoutError("the test never opened this handler's gate")
        if step is not None:
            step()
        time.sleep(0.005)


@rowfleet.task(name="dog.sleep")
def sleep():
    """Beats never; waits at its gate (a budget or GPU watchdog may stop it first)."""
    _wait_for_gate(_started())
    return "woke"


@rowfleet.task(name="dog.beat_then_sleep")
def beat_then_sleep():
    """One progress beat, then nothing (no beat, no memory moved) until its gate opens."""
    rowfleet.progress(0.25, "loaded the model")
    _wait_for_gate(_started())
    return "woke"


@rowfleet.task(name="dog.beat_then_churn")
def beat_then_churn():
    """One progress beat, then, for every GPU reading the watchdog takes (a line in
    samples.log, written by the nvidia-smi wrapper), 64 MiB more held: memory moves between
    any two readings, though the GPU is idle and no beat comes. Until its gate opens."""
    rowfleet.progress(0.5, "loading weights")
    job = _started()
    blocks, seen = [], [_samples()]

    def churn():
        now = _samples()
        if now != seen[0]:
            seen[0] = now
            if len(blocks) >= 6:
                blocks.clear()  # a drop of 384 MiB moves memory too
            else:
                blocks.append(b"\\x01" * (64 << 20))  # written, so resident

    _wait_for_gate(job, churn)
    return len(blocks)


def _samples():
    try:
        return os.stat(os.path.join(HERE, "samples.log")).st_size
    except FileNotFoundError:
        return 0


@rowfleet.task(name="dog.hang_first")
def hang_first():
    """Waits at its gate on its first claim (a frozen or killed worker never gets past it);
    returns at once on any later one (a lost lease gives the attempt back: the claim counts)."""
    job = _started()
    if job.lease_token == 1:
        _wait_for_gate(job)
        return "first attempt"
    return "recovered"


@rowfleet.task(name="dog.note")
def note():
    return os.getpid()
'''

# Imported by a supervising parent before it forks: every child it forks dies at once.
CRASH_APP = "crashapp"
CRASH_SOURCE = '''\
import os

os.register_at_fork(after_in_child=lambda: os._exit(3))
'''

# An nvidia-smi that notes the time of each call in samples.log, then is the fake one.
WRAPPER_SOURCE = '''\
#!{python}
import os, sys, time
fd = os.open({log!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, ("%.6f\\n" % time.time()).encode())
os.close(fd)
os.execv({python!r}, [{python!r}, {fake!r}] + sys.argv[1:])
'''


class WatchdogContract:
    """Process-level watchdog tests for any backend. The TestCase mixing this in is a
    ``TempDirTestCase`` that provides ``empty_database()``, ``steal(job_id)`` and
    ``in_transaction()``."""

    def setUp(self) -> None:
        super().setUp()
        self.db = self.empty_database()
        self.write_module(APP, APP_SOURCE)
        self.store = self.open_store()  # the schema, and this test's own connection
        self._processes: list[subprocess.Popen] = []

    def empty_database(self) -> str:
        """What ``--db`` names for this test: a database with no rowfleet schema yet."""
        raise NotImplementedError

    def steal(self, job_id: int) -> None:
        """Take job ``job_id``'s row from its holder as another claim would: a new token."""
        raise NotImplementedError

    def in_transaction(self) -> bool:
        """Whether some other process holds a transaction open in the database now."""
        raise NotImplementedError

    def holding_the_job_row(self, job_id: int) -> contextlib.AbstractContextManager[float]:
        """A transaction of the test's that keeps every write to job ``job_id`` waiting while
        it is open (a renewal among them), yielding the job's lease expiry as the transaction
        reads it: no renewal can move it until the transaction ends."""
        raise NotImplementedError

    # --- processes -----------------------------------------------------------------------

    def launch(self, *args: str, smi: str = "idle") -> subprocess.Popen:
        """Start ``rowfleet --db self.db ARGS`` in its own process group, output to a file,
        with ``FAKE_NVIDIA_SMI=smi``; the whole group is killed at cleanup."""
        process = self.launch_logged(args[0], *args, env=child_env(FAKE_NVIDIA_SMI=smi))
        self._processes.append(process)
        return process

    def worker(self, *flags: str, smi: str = "idle", nvidia_smi: str = FAKE_SMI) -> subprocess.Popen:
        return self.launch("worker", "--app", APP, "--poll", "0.2", "--nvidia-smi", nvidia_smi, *flags, smi=smi)

    def logs(self) -> str:
        """Every process this test started, with its log, and what the database is doing."""
        shown = [f"--- {' '.join(p.args[4:6])} (pid {p.pid}, exit {p.poll()}):\n{self.output(p)}"
                 for p in self._processes]
        return "\n".join(shown + [self.database_activity()])

    def database_activity(self) -> str:
        """What the database's other sessions are doing (for a failure's message)."""
        return ""

    def assert_exits(self, process: subprocess.Popen, code: int, timeout: float = DEADLINE) -> None:
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.fail(f"{process.args[4:]} still running after {timeout:.0f}s:\n{self.logs()}")
        self.assertEqual(process.returncode, code,
                         f"{process.args[4:]} exited {process.returncode}, not {code}:\n{self.logs()}")

    def stop(self, *processes: subprocess.Popen) -> None:
        """SIGTERM each; each must exit 0."""
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            self.assert_exits(process, 0)

    def wait_alive(self, process: subprocess.Popen, condition: Callable[[], Any], message: str,
                   timeout: float = DEADLINE) -> Any:
        """Wait for ``condition`` while ``process`` runs; fail at once if it exits first."""
        def check() -> Any:
            value = condition()
            if not value and process.poll() is not None:
                raise AssertionError(f"{process.args[4:]} exited {process.returncode} while waiting for "
                                     f"{message}:\n{self.logs()}")
            return value
        try:
            return wait_until(check, timeout=timeout, message=message)
        except AssertionError as exc:
            if process.poll() is not None:
                raise
            raise AssertionError(f"{exc}\n{self.logs()}") from None

    def wrapper(self) -> str:
        """An nvidia-smi that records each call's time in samples.log, then runs the fake."""
        path = os.path.join(self.dir, "nvidia-smi-counting")
        with open(path, "w") as handle:
            handle.write(WRAPPER_SOURCE.format(python=sys.executable, fake=FAKE_SMI,
                                               log=os.path.join(self.dir, "samples.log")))
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return path

    def samples(self) -> list[float]:
        """When the watchdog ran nvidia-smi (through ``wrapper()``)."""
        text = self.marker("samples.log") or ""
        return [float(line) for line in text.split()]

    # --- jobs ----------------------------------------------------------------------------

    def enqueue(self, task: str, **spec: Any) -> int:
        return self.store.enqueue(JobSpec(task=task, **spec)).id

    def job(self, job_id: int):
        return self.store.get_job(job_id, "")

    def events(self, job_id: int) -> list:
        return self.store.reads.events(job_id)

    def kinds(self, job_id: int) -> list[str]:
        return [event.kind for event in self.events(job_id)]

    def event(self, job_id: int, kind: str):
        [found] = [event for event in self.events(job_id) if event.kind == kind]
        return found

    def wait_for_state(self, job_id: int, state: str) -> Any:
        try:
            return wait_until(lambda: (job := self.job(job_id)).state == state and job,
                              message=f"job {job_id} to be {state}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it is {self.job(job_id)}\n{self.kinds(job_id)}\n{self.logs()}") from None

    def started(self, job_id: int, attempt: int = 1, process: subprocess.Popen | None = None) -> int:
        """The pid of the process running the job's ``attempt``-th claim, once its handler began."""
        name = f"started-{job_id}-{attempt}"
        if process is None:
            return int(wait_until(lambda: self.marker(name), message=f"attempt {attempt} of job {job_id} to start"))
        return int(self.wait_alive(process, lambda: self.marker(name), f"attempt {attempt} of job {job_id} to start"))

    def open_gate(self, job_id: int) -> None:
        open(os.path.join(self.dir, f"go-{job_id}"), "w").close()

    def freeze(self, pid: int) -> None:
        """SIGSTOP ``pid`` between two of its transactions.

        A process frozen inside one keeps its locks (SQLite's write lock; on PostgreSQL the
        rows it changed), and every writer would queue behind it: a different fault from the
        one under test. So when a transaction is left open, let it run on and freeze again.
        """
        for _ in range(50):
            os.kill(pid, signal.SIGSTOP)
            wait_until(lambda: (proc_stat(pid) or ["T"])[0] in ("T", "t", "Z", "X"), message=f"{pid} to stop")
            time.sleep(0.1)  # a statement already with the server finishes
            if not self.in_transaction():
                self.addCleanup(_continue_pid, pid)
                return
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)
        self.fail(f"could not freeze {pid} outside a transaction")

    def beat_names(self, pid: int, job_id: int, process: subprocess.Popen) -> dict[str, Any]:
        """Wait until worker ``pid``'s heartbeat names job ``job_id``, after its claim."""
        started = self.job(job_id).started_at
        return self.wait_alive(process, lambda: (row := self.worker_row(pid)) and row["current_job"] == job_id
                               and row["last_seen"] >= started and row, f"a heartbeat of {pid} naming job {job_id}")

    def worker_row(self, pid: int) -> dict[str, Any] | None:
        rows = [w for w in self.store.reads.workers(since=0) if w["pid"] == pid]
        return max(rows, key=lambda w: w["started_at"]) if rows else None

    def assert_trip(self, job_id: int, code: int, watchdog: str, attempt: int = 1, retries: int = 1) -> Any:
        """The job's (last) ``watchdog_trip`` event says what tripped and what it saw."""
        trips = [event for event in self.events(job_id) if event.kind == "watchdog_trip"]
        self.assertTrue(trips, f"no watchdog_trip event: {self.kinds(job_id)}")
        trip = trips[-1]
        detail = trip.detail
        self.assertEqual((detail["code"], detail["watchdog"], detail["attempt"], detail["watchdog_retries"]),
                         (code, watchdog, attempt, retries), detail)
        self.assertIsInstance(detail["readings"], list)
        self.assertTrue(detail["reason"], detail)
        return trip

    # --- 75: the wall-clock budget -------------------------------------------------------

    def test_75_a_job_past_its_timeout_ends_the_worker_and_is_requeued_with_a_watchdog_retry_spent(self):
        job_id = int(self.cli("enqueue", "dog.sleep", "--timeout", "1").stdout)
        self.assertEqual(self.job(job_id).timeout, 1.0)
        worker = self.worker()
        self.assertEqual(self.started(job_id, process=worker), worker.pid)
        self.assert_exits(worker, 75)

        job = self.job(job_id)
        self.assertEqual((job.state, job.attempts, job.watchdog_retries), ("queued", 1, 1))
        self.assertIn("watchdog budget (exit 75, wall-clock budget exceeded)", job.error)
        self.assertEqual(self.kinds(job_id), ["claimed", "watchdog_trip", "retried"])
        trip = self.assert_trip(job_id, 75, "budget")
        claimed = self.event(job_id, "claimed")
        self.assertGreaterEqual(trip.at - claimed.at, 1.0 - 0.05, "tripped before the job's 1 s timeout")
        self.assertEqual(trip.detail["readings"], [], "the budget watchdog takes no readings")
        retried = self.event(job_id, "retried")
        self.assertEqual((retried.detail["token"], retried.detail["attempt"]), (1, 1))
        self.assertIn("watchdog budget", retried.detail["error"])
        self.assertGreater(job.run_at, trip.at, "re-queued with no backoff")
        self.assertIn("watchdog budget trips (exit 75", self.output(worker))
        self.assertIsNone(self.marker(f"go-{job_id}"))  # the handler never returned: the process died

    def test_75_with_no_watchdog_retries_the_first_trip_fails_the_job(self):
        job_id = self.enqueue("dog.sleep")
        worker = self.worker("--budget", "1", "--watchdog-retries", "0")
        self.started(job_id, process=worker)
        self.assert_exits(worker, 75)
        job = self.job(job_id)
        self.assertEqual((job.state, job.attempts, job.watchdog_retries), ("failed", 1, 1))
        self.assertIn("watchdog budget (exit 75", job.error)
        self.assertIn("watchdog retries used up (0 of 0)", job.error)
        self.assertEqual(self.kinds(job_id), ["claimed", "watchdog_trip", "failed"])
        self.assert_trip(job_id, 75, "budget")
        self.assertIn("watchdog budget", self.event(job_id, "failed").detail["error"])

    def test_75_a_workflow_node_failed_by_a_watchdog_fails_its_run_through_the_outbox(self):
        path = os.path.join(self.dir, "flow.json")
        with open(path, "w") as handle:
            handle.write('{"name": "guarded", "nodes": [{"id": "slow", "task": "dog.sleep", "timeout": 1},'
                         ' {"id": "after", "task": "dog.note", "depends_on": ["slow"]}]}')
        run_id = int(self.cli("run", path, "--app", APP).stdout)
        worker = self.worker("--watchdog-retries", "0")
        self.assert_exits(worker, 75)
        [slow] = [job for job in self.store.reads.list_jobs("", limit=100) if job.run_id == run_id]
        self.assertEqual((slow.node_id, slow.state, slow.timeout), ("slow", "failed", 1.0))
        self.assertEqual(self.store.get_run(run_id, "").state, "running", "failed before any drain")
        [event] = self.store.reads.dispatch_events(run_id)
        self.assertEqual((event["kind"], event["job_id"], event["processed_at"]), ("job_finished", slow.id, None))

        orchestrator = self.launch("orchestrator", "--interval", "0.2")
        run = wait_until(lambda: (run := self.store.get_run(run_id, "")).state != "running" and run,
                         message=f"run {run_id} to end")
        self.stop(orchestrator)
        self.assertEqual(run.state, "failed", run)
        self.assertEqual(run.node("slow").state, "failed")
        self.assertIn("watchdog budget", run.node("slow").error)
        self.assertNotEqual(run.node("after").state, "completed")
        self.assertEqual([job.node_id for job in self.store.reads.list_jobs("", limit=100) if job.run_id == run_id],
                         ["slow"], "a node after the failed one got a job")

    # --- 76: a confirmed stall -----------------------------------------------------------

    def test_76_a_job_that_beat_then_went_quiet_on_an_idle_gpu_is_stopped_with_its_readings(self):
        job_id = self.enqueue("dog.beat_then_sleep")
        worker = self.worker(*STALL, smi="idle")
        self.started(job_id, process=worker)
        self.assert_exits(worker, 76)

        job = self.job(job_id)
        self.assertEqual((job.state, job.attempts, job.watchdog_retries), ("queued", 1, 1))
        self.assertIn("watchdog stall (exit 76, stalled: no progress, confirmed)", job.error)
        self.assertEqual(self.kinds(job_id), ["claimed", "watchdog_trip", "retried"])
        trip = self.assert_trip(job_id, 76, "stall")
        readings = trip.detail["readings"]
        self.assertEqual(len(readings), 3, readings)
        self.assertEqual([r["gpu_percent"] for r in readings], [0, 0, 0], "the fake idle GPU")
        self.assertTrue(all(r["memory_mib"] for r in readings), readings)
        gaps = [b["at"] - a["at"] for a, b in zip(readings, readings[1:])]
        self.assertTrue(all(gap >= 0.2 - 0.01 for gap in gaps), f"readings not 0.2 s apart: {gaps}")
        self.assertIsNotNone(job.progress_at, "the beat never reached the row")
        self.assertGreaterEqual(trip.at - job.progress_at, 1.0, "tripped within the stall window of the beat")
        self.assertIn("watchdog stall trips (exit 76", self.output(worker))

    def test_76_on_a_busy_gpu_a_stall_is_only_suspected_and_the_job_completes(self):
        job_id = self.enqueue("dog.beat_then_sleep")
        worker = self.worker(*STALL, "--burst", smi="busy")
        self.started(job_id, process=worker)
        suspected = self.wait_alive(worker, lambda: "stall_suspected" in self.kinds(job_id),
                                    "a stall_suspected event")
        self.assertTrue(suspected)
        shown = self.cli_json("job", str(job_id))  # the beat, as an operator sees it
        self.assertEqual((shown["state"], shown["progress"], shown["progress_message"]),
                         ("running", 0.25, "loaded the model"))
        self.assertIsNotNone(shown["progress_at"])
        self.assertEqual(shown["watchdog_retries"], 0)
        # One suspicion per stall window: a slow machine may see a second before this read.
        events = [e for e in shown["events"] if e["kind"] == "stall_suspected"]
        self.assertTrue(events)
        for event in events:
            self.assertEqual({r["gpu_percent"] for r in event["detail"]["readings"]}, {100}, event)
            self.assertEqual(len(event["detail"]["readings"]), 3, event)

        self.open_gate(job_id)
        self.assert_exits(worker, 0)
        job = self.job(job_id)
        self.assertEqual((job.state, job.result, job.watchdog_retries), ("completed", "woke", 0))
        kinds = self.kinds(job_id)
        self.assertNotIn("watchdog_trip", kinds)
        self.assertEqual((kinds[0], kinds[-1]), ("claimed", "completed"))
        self.assertEqual(set(kinds[1:-1]), {"stall_suspected"}, kinds)
        self.assertIn("but the GPU or memory is busy; watching on", self.output(worker))

    def test_76_with_memory_moving_a_stall_is_only_suspected_and_the_job_completes(self):
        job_id = self.enqueue("dog.beat_then_churn")
        worker = self.worker(*STALL, "--memory-delta-mb", "16", "--burst", smi="idle", nvidia_smi=self.wrapper())
        self.started(job_id, process=worker)
        self.wait_alive(worker, lambda: "stall_suspected" in self.kinds(job_id), "a stall_suspected event")
        readings = self.event(job_id, "stall_suspected").detail["readings"]
        self.assertEqual(len(readings), 3, readings)
        self.assertEqual({r["gpu_percent"] for r in readings}, {0}, "the GPU was idle: memory alone kept it")
        memory = [r["memory_mib"] for r in readings]
        self.assertGreaterEqual(max(memory) - min(memory), 16, f"memory did not move: {memory}")

        self.open_gate(job_id)
        self.assert_exits(worker, 0)
        job = self.job(job_id)
        self.assertEqual((job.state, job.watchdog_retries), ("completed", 0))
        self.assertNotIn("watchdog_trip", self.kinds(job_id))

    # --- 77: the row taken from under a running job ----------------------------------------

    def test_77_a_worker_whose_row_was_taken_exits_at_its_next_renewal_and_writes_nothing(self):
        job_id = self.enqueue("dog.sleep")
        worker = self.worker("--lease", "30", "--renew", "0.2")
        self.started(job_id, process=worker)
        held = self.job(job_id)
        self.assertEqual((held.state, held.lease_token), ("running", 1))
        self.steal(job_id)
        stolen, events = self.job(job_id), self.events(job_id)
        self.assertEqual((stolen.state, stolen.lease_token), ("running", 2))
        taken = time.monotonic()
        self.assert_exits(worker, 77)
        self.assertLess(time.monotonic() - taken, 10.0)
        self.assertEqual(self.job(job_id), stolen, "the worker wrote to a row it no longer holds")
        self.assertEqual(self.events(job_id), events, "the worker wrote an event for a row it no longer holds")
        self.assertIn("given to another worker", self.output(worker))

    # --- 78: an idle GPU -------------------------------------------------------------------

    def test_78_a_gpu_job_on_an_idle_gpu_is_stopped_after_the_first_window(self):
        job_id = self.enqueue("dog.sleep")
        worker = self.worker(*GPU, smi="idle")
        self.started(job_id, process=worker)
        self.assert_exits(worker, 78)
        job = self.job(job_id)
        self.assertEqual((job.state, job.attempts, job.watchdog_retries), ("queued", 1, 1))
        self.assertIn("watchdog gpu (exit 78, GPU idle and memory static past the window)", job.error)
        self.assertEqual(self.kinds(job_id), ["claimed", "watchdog_trip", "retried"])
        trip = self.assert_trip(job_id, 78, "gpu")
        readings = trip.detail["readings"]
        self.assertGreaterEqual(len(readings), 2, readings)
        self.assertEqual({r["gpu_percent"] for r in readings}, {0})
        self.assertGreaterEqual(trip.at - self.event(job_id, "claimed").at, 1.5 - 0.05,
                                "tripped before the first window had passed")

    def test_78_a_gpu_job_on_a_busy_gpu_runs_past_the_window_and_completes(self):
        job_id = self.enqueue("dog.sleep")
        worker = self.worker(*GPU, "--burst", smi="busy", nvidia_smi=self.wrapper())
        self.started(job_id, process=worker)
        # Readings spanning the window and a second more: an idle verdict would have ended it.
        self.wait_alive(worker, lambda: len(s := self.samples()) > 2 and s[-1] - s[0] >= 2.5,
                        "GPU readings spanning 2.5 s")
        self.assertEqual(self.job(job_id).state, "running")
        self.open_gate(job_id)
        self.assert_exits(worker, 0)
        job = self.job(job_id)
        self.assertEqual((job.state, job.result, job.watchdog_retries), ("completed", "woke", 0))
        self.assertEqual(self.kinds(job_id), ["claimed", "completed"])

    # --- the retry cap -------------------------------------------------------------------

    def test_the_second_trip_past_the_retry_cap_fails_the_job_and_the_supervisor_records_each_75(self):
        job_id = self.enqueue("dog.sleep")
        parent = self.worker("--procs", "1", "--budget", "1", "--watchdog-retries", "1", "--backoff-base", "0.1",
                             "--restart-delay", "0.1", "--heartbeat", "0.5")
        first = self.started(job_id, 1, process=parent)
        second = self.started(job_id, 2, process=parent)
        self.assertNotEqual(first, second, "the second attempt ran in the child that tripped")
        job = self.wait_for_state(job_id, "failed")
        self.assertEqual((job.attempts, job.watchdog_retries), (2, 2))
        self.assertIn("watchdog budget (exit 75", job.error)
        self.assertIn("watchdog retries used up (1 of 1)", job.error)
        self.assertEqual(self.kinds(job_id), ["claimed", "watchdog_trip", "retried", "claimed", "watchdog_trip",
                                              "failed"])
        self.assert_trip(job_id, 75, "budget", attempt=2, retries=2)
        for pid in (first, second):
            row = self.wait_alive(parent, lambda: (row := self.worker_row(pid)) and row["exit_code"] is not None
                                  and row, f"the exit of child {pid} recorded")
            self.assertEqual(row["exit_code"], 75, row)
            self.assertIsNotNone(row["stopped_at"])
            self.assertIn(f"worker child {pid} exited 75 (wall-clock budget exceeded)", self.output(parent))
        self.stop(parent)

    # --- frozen workers ------------------------------------------------------------------

    def test_a_frozen_worker_is_flagged_dead_and_its_job_runs_elsewhere_once_its_lease_lapsed(self):
        # Its process is still there: silent, not known dead. It may be cut off and running
        # the job, so only the lapse of the lease may hand the job on.
        job_id = self.enqueue("dog.hang_first")
        frozen = self.worker("--lease", "4", "--renew", "0.3", "--heartbeat", "0.3")
        self.assertEqual(self.started(job_id, process=frozen), frozen.pid)
        self.beat_names(frozen.pid, job_id, frozen)
        self.freeze(frozen.pid)
        held = self.job(job_id)
        orchestrator = self.launch("orchestrator", "--interval", "0.2", "--heartbeat", "0.3")
        self.wait_alive(orchestrator, lambda: self.worker_row(frozen.pid)["flagged_dead_at"],
                        "the sweep to flag the frozen worker")
        # The sweep logs the flag after its commit: the row may be seen before the line is written.
        self.wait_alive(orchestrator, lambda: "missed its heartbeats; flagged dead" in self.output(orchestrator),
                        "the orchestrator to say it flagged the frozen worker")
        self.assertEqual(self.kinds(job_id), ["claimed"], "handed back before its lease lapsed")
        rescuer = self.worker("--lease", "4", "--renew", "0.3", "--heartbeat", "0.3")

        job = self.wait_for_state(job_id, "completed")
        self.assertEqual((job.attempts, job.lease_token, job.result), (1, 2, "recovered"), "the attempt given back")
        self.assertTrue(job.claimed_by.endswith(f":{rescuer.pid}"), job.claimed_by)
        self.assertEqual(self.kinds(job_id), ["claimed", "reclaimed", "claimed", "completed"])
        reclaimed = self.event(job_id, "reclaimed")
        self.assertEqual((reclaimed.detail["token"], reclaimed.detail["holder"]), (1, held.claimed_by))
        self.assertGreaterEqual(reclaimed.at, held.lease_expires_at, "handed on before its lease lapsed")

        settled, events = self.job(job_id), self.events(job_id)
        os.kill(frozen.pid, signal.SIGCONT)
        # Woken, it finds its lease gone: its keeper's renewal is refused (77), or its
        # watchdog sees the lease ran out first (81). Either way it writes nothing.
        frozen.wait(DEADLINE)
        self.assertIn(frozen.returncode, (77, 81), self.logs())
        self.assertEqual(self.job(job_id), settled, "the woken worker wrote to the job")
        self.assertEqual(self.events(job_id), events, "the woken worker wrote an event")
        self.stop(orchestrator, rescuer)

    # --- the lease rule ------------------------------------------------------------------

    def test_a_worker_that_cannot_renew_stops_its_job_before_the_lease_lapses_and_exits_81(self):
        job_id = self.enqueue("dog.hang_first")
        cut_off = self.worker("--lease", "3", "--renew", "0.3", "--heartbeat", "0.3")
        self.started(job_id, process=cut_off)
        with self.holding_the_job_row(job_id) as lease_expires_at:
            try:
                cut_off.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                self.fail(f"the worker still runs a job it cannot renew:\n{self.logs()}")
            gone_at = time.time()
            self.assertLess(gone_at, lease_expires_at, "the holder outlived its lease")
            self.assertEqual(cut_off.returncode, 81, self.logs())
        self.assertIn("watchdog lease trips (exit 81, cut off: its job's lease could not be renewed in time)",
                      self.output(cut_off))
        self.assertIn("could not record it before its lease ran out", self.output(cut_off))
        # An orchestrator of another box: it cannot see that the process is gone, so only
        # the lapse hands the job on, as it would be for a box cut off from the database.
        # The rescuer too: one of the cut-off worker's host would hand the job back as it starts.
        orchestrator = self.launch("orchestrator", "--interval", "0.2", "--host", "elsewhere")
        rescuer = self.worker("--lease", "3", "--renew", "0.3", "--host", "elsewhere")
        job = self.wait_for_state(job_id, "completed")
        self.assertEqual((job.result, job.attempts, job.lease_token, job.watchdog_retries), ("recovered", 1, 2, 1),
                         "a lost lease spends a watchdog retry, not an attempt")
        self.assertEqual(self.kinds(job_id), ["claimed", "reclaimed", "claimed", "completed"])
        self.assertGreaterEqual(self.event(job_id, "reclaimed").at, lease_expires_at)
        self.stop(orchestrator, rescuer)

    def test_a_worker_killed_right_after_a_claim_has_that_job_handed_back_at_once(self):
        """A silent worker whose process is gone from the sweep's host is known dead: every
        job it claimed in its lifetime goes back at once, including one claimed after its
        last heartbeat (the heartbeat does not name it yet): the worker's row is older than
        the claim, and no newer worker holds that host:pid."""
        dead = self.worker("--lease", "30", "--renew", "0.3", "--heartbeat", "2")
        first = self.wait_alive(dead, lambda: self.worker_row(dead.pid), "the worker's first heartbeat")
        self.wait_alive(dead, lambda: self.worker_row(dead.pid)["last_seen"] > first["last_seen"],
                        "the keeper's first heartbeat")
        job_id = self.enqueue("dog.hang_first")  # claimed at once; the next beat is 2 s away
        self.started(job_id, process=dead)
        dead.kill()
        dead.wait()
        held, row = self.job(job_id), self.worker_row(dead.pid)
        self.assertLess(row["last_seen"], held.started_at, "the test's premise: a claim after the last heartbeat")
        self.assertIsNone(row["current_job"])

        orchestrator = self.launch("orchestrator", "--interval", "0.2", "--heartbeat", "0.3")
        self.wait_alive(orchestrator, lambda: self.worker_row(dead.pid)["flagged_dead_at"],
                        "the sweep to flag the dead worker")
        # The flag and the hand-back are one transaction: it is back already, long before its lease lapses.
        self.assertEqual(self.kinds(job_id), ["claimed", "worker_dead"])
        self.assertEqual(self.job(job_id).state, "queued")
        self.assertLess(self.event(job_id, "worker_dead").at, held.lease_expires_at - 20)

        rescuer = self.worker("--lease", "30", "--renew", "0.3", "--heartbeat", "0.3")
        job = self.wait_for_state(job_id, "completed")
        self.assertEqual((job.attempts, job.lease_token, job.result), (2, 2, "recovered"))
        self.assertTrue(job.claimed_by.endswith(f":{rescuer.pid}"), job.claimed_by)
        self.assertEqual(self.kinds(job_id), ["claimed", "worker_dead", "claimed", "completed"])
        self.stop(orchestrator, rescuer)

    def test_the_supervisor_sigkills_a_frozen_child_the_sweep_flagged_and_a_fresh_child_serves(self):
        job_id = self.enqueue("dog.hang_first")
        parent = self.worker("--procs", "1", "--lease", "60", "--renew", "0.3", "--heartbeat", "0.3",
                             "--restart-delay", "0.1", "--no-sampler")  # its worker child only
        child = self.started(job_id, process=parent)
        self.assertEqual(_children(parent.pid), {child})
        self.beat_names(child, job_id, parent)
        self.freeze(child)
        orchestrator = self.launch("orchestrator", "--interval", "0.2", "--heartbeat", "0.3")

        killed = f"worker child {child} was flagged dead (no heartbeat); killing it (SIGKILL)"
        self.wait_alive(parent, lambda: killed in self.output(parent), "the supervisor to kill the frozen child")
        fresh = self.started(job_id, 2, process=parent)
        self.assertNotEqual(fresh, child)
        job = self.wait_for_state(job_id, "completed")
        self.assertEqual((job.attempts, job.result), (2, "recovered"))
        self.assertTrue(job.claimed_by.endswith(f":{fresh}"), job.claimed_by)
        # The supervisor saw its child die: the job went back at once, not at the lease's lapse.
        self.assertEqual(self.kinds(job_id), ["claimed", "worker_exited", "claimed", "completed"])
        self.assertFalse(process_alive(child), "the frozen child is still there")
        self.assertIn(f"worker child {child} killed by SIGKILL", self.output(parent))
        row = self.wait_alive(parent, lambda: (row := self.worker_row(child)) and row["exit_code"] is not None
                              and row, "the killed child's exit recorded")
        self.assertIn(row["exit_code"], (-signal.SIGKILL, 128 + signal.SIGKILL), row)

        note = self.enqueue("dog.note")
        done = self.wait_for_state(note, "completed")
        self.assertEqual(done.result, fresh, "the fresh child did not serve")
        self.assertEqual(_children(parent.pid), {fresh})
        self.stop(parent, orchestrator)

    # --- a crash loop --------------------------------------------------------------------

    def test_a_crash_loop_backs_off_counts_quick_exits_and_does_not_spin(self):
        self.write_module(CRASH_APP, CRASH_SOURCE)
        parent = self.launch("worker", "--app", CRASH_APP, "--procs", "1", "--restart-delay", "0.01",
                             "--restart-delay-max", "0.2")
        exits = re.compile(r"worker child \d+ exited 3 \(exit code 3\) after [\d.]+s(?:; (\d+) quick "
                           r"exits in a row)?; restarting in ([\d.]+)s")
        self.wait_alive(parent, lambda: exits.search(self.output(parent)), "the first child to die")
        wall, cpu = time.monotonic(), _cpu_seconds(parent.pid)
        found = self.wait_alive(parent, lambda: len(found := exits.findall(self.output(parent))) >= 22 and found,
                                "22 quick exits")
        wall, cpu = time.monotonic() - wall, _cpu_seconds(parent.pid) - cpu
        self.assertLess(cpu, 0.2 * wall, f"the supervisor spun: {cpu:.2f}s of CPU in {wall:.2f}s")

        counts = [int(n or 1) for n, _ in found]
        self.assertEqual(counts, list(range(1, len(counts) + 1)), "quick exits in a row, counted")
        delays = [float(delay) for _, delay in found]
        self.assertEqual(delays, sorted(delays), f"the restart delay shrank: {delays}")
        self.assertLessEqual(delays[0], 0.05, delays)
        self.assertEqual(delays[-1], 0.2, delays)
        self.assertEqual(max(delays), 0.2, f"past --restart-delay-max: {delays}")
        self.stop(parent)
        self.assertEqual(_children(parent.pid), set())


class SQLiteWatchdogTest(WatchdogContract, TempDirTestCase):
    def empty_database(self) -> str:
        return self.db  # the file in this test's folder, created when the store first opens

    def steal(self, job_id: int) -> None:
        with contextlib.closing(sqlite3.connect(self.db, timeout=DEADLINE, isolation_level=None)) as conn:
            conn.execute("UPDATE jobs SET lease_token = lease_token + 1, claimed_by = 'thief:1' WHERE id = ?",
                         (job_id,))

    def in_transaction(self) -> bool:
        # Only a writer's transaction matters: WAL readers block no one.
        with contextlib.closing(sqlite3.connect(self.db, timeout=0, isolation_level=None)) as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    return True
                raise
            conn.execute("ROLLBACK")
            return False

    @contextlib.contextmanager
    def holding_the_job_row(self, job_id: int):
        with contextlib.closing(sqlite3.connect(self.db, timeout=DEADLINE, isolation_level=None)) as conn:
            conn.execute("BEGIN IMMEDIATE")  # the write lock: every writer waits behind it
            try:
                yield conn.execute("SELECT lease_expires_at FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]
            finally:
                conn.execute("ROLLBACK")


class PostgresWatchdogTest(PostgresServerCase, WatchdogContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database: ``self.db`` is its URL."""

    def database_activity(self) -> str:
        rows = self.pg.psql(self.db, "SELECT pid, client_port, state, wait_event_type, wait_event, "
                                     "pg_blocking_pids(pid), now() - xact_start, left(query, 120) "
                                     "FROM pg_stat_activity WHERE datname = current_database() "
                                     "AND pid <> pg_backend_pid()")
        return "--- pg_stat_activity:\n" + "\n".join(map(str, rows))

    def steal(self, job_id: int) -> None:
        self.pg.psql(self.db, "UPDATE jobs SET lease_token = lease_token + 1, claimed_by = 'thief:1' WHERE id = %s",
                     (job_id,))

    @contextlib.contextmanager
    def holding_the_job_row(self, job_id: int):
        from rowfleet.store.postgres import connect

        with contextlib.closing(connect(self.db, autocommit=False)) as conn:
            try:
                row = conn.execute("SELECT lease_expires_at FROM jobs WHERE id = %s FOR UPDATE", (job_id,)).fetchone()
                yield row["lease_expires_at"]
            finally:
                conn.rollback()

    def test_a_worker_row_locked_by_a_frozen_heartbeat_does_not_wedge_the_sweep(self):
        """PostgreSQL: a keeper frozen between its heartbeat's UPDATE and the COMMIT (a hang
        holding the GIL can catch it there) keeps its worker row locked. The sweep must pass
        that row by, as it passes locked jobs by (SKIP LOCKED), and still recover the jobs
        of every other silent worker."""
        from rowfleet.store import open_store
        from rowfleet.store.postgres import connect

        job_id = self.enqueue("dog.note")
        ghosts = open_store(self.config(heartbeat=0.3))  # workers beating every 0.3 s: stale in 0.9 s
        self.addCleanup(ghosts.close)
        ghosts.worker_beat("ghost:1:0", "", "ghost", "default", 1, None)  # the frozen one
        ghosts.worker_beat("ghost:2:0", "", "ghost", "default", 2, None)  # silent, about to hold the job
        # A worker of another host: its job waits for its lease, which lapses before the sweep.
        self.assertIsNotNone(self.store.claim(Claim("", "default", "ghost:2", 0.5)))
        beaten = self.store.clock()
        wait_until(lambda: self.store.clock() > beaten + 1.0, message="both heartbeats to go stale")
        with contextlib.closing(connect(self.db, autocommit=False)) as frozen:
            frozen.execute("UPDATE workers SET last_seen = last_seen WHERE worker_id = 'ghost:1:0'")
            sweep = self.spawn("orchestrator", "--once")  # its own cadence does not matter
            try:
                swept, errors = sweep.communicate(timeout=10.0)
            except subprocess.TimeoutExpired:
                swept = None  # still blocked: see what it waits for, then let it go
                activity = self.database_activity()
            frozen.rollback()
        if swept is None:
            self.fail(f"`orchestrator --once` still sweeping after 10s, blocked by one locked worker row; job "
                      f"{job_id} of silent worker ghost:2 was left {self.job(job_id).state}, events "
                      f"{self.kinds(job_id)}\n{activity}")
        self.assertEqual(sweep.returncode, 0, errors)
        self.assertIn('"flagged_workers": 1', swept)
        self.assertEqual(self.kinds(job_id), ["claimed", "reclaimed"])

    def in_transaction(self) -> bool:
        return self.pg.open_transactions(self.db) > 0


# --- processes, seen through /proc --------------------------------------------------------


def _continue_pid(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def _children(parent: int) -> set[int]:
    """Live (not zombie) children of ``parent``."""
    listed = {int(entry) for entry in os.listdir("/proc")
              if entry.isdigit() and (proc_stat(int(entry)) or [None, None])[1] == str(parent)}
    return {pid for pid in listed if process_alive(pid)}


def _cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` itself has used, from /proc/PID/stat."""
    fields = proc_stat(pid)
    if fields is None:
        raise AssertionError(f"process {pid} is gone")
    # utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class IdleWatchdogTest(TempDirTestCase):
    """A watchdog with no job held sleeps until it is handed one, rather than ticking."""

    def test_it_sleeps_without_a_timeout_until_handed_a_job_then_ticks(self):
        from rowfleet.worker import watchdog as module

        watchdog = module.Watchdog(self.config(), lambda config: None, exit=lambda code: None)
        timeouts: list[float | None] = []
        real_wait = watchdog._nudge.wait

        def wait(timeout: float | None = None) -> bool:
            timeouts.append(timeout)
            return real_wait(timeout)

        watchdog._nudge.wait = wait  # type: ignore[method-assign]
        watchdog.start()
        self.addCleanup(watchdog.stop)
        wait_until(lambda: timeouts, message="the watchdog's first wait")
        self.assertEqual(timeouts, [None], "an idle watchdog woke on a timer")
        store = self.open_store()
        store.enqueue(JobSpec("note", project="default"))
        watchdog.watch(store.claim(Claim("default", "default", "test:1", 30.0)))
        wait_until(lambda: module.TICK in timeouts, message="the watchdog to tick once it holds a job")
        watchdog.release()


if __name__ == "__main__":
    unittest.main()
