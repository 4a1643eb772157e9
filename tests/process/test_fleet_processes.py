"""Operators' switches and shared databases, as real OS processes on both backends.

Owns the fleet contract: an operator's hard switch hands the job in hand back (ahead of
fresh work, no attempt spent) and ends the worker with 79, and its supervisor brings it
back parked; a drain switch lets the job finish, then parks; escalating drain to hard
stops the job; switching on resumes the same process; a box-wide switch parks every
queue of its host; a worker started while off never claims. Three projects sharing one
database never see each other's jobs, and switching one off leaves the others serving.

Every test drives the real command line (``worker``, ``control``, ``enqueue``,
``broker``) in child processes and checks the database. Handlers wait at a gate file the
test opens once it has seen what it waits for. Written once in ``FleetContract``; run on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any, Callable

from pg_harness import PostgresServerCase
from support import DEADLINE, TempDirTestCase, wait_until

APP = "fleetops"
HOST, OTHER_HOST = "box-a", "box-b"
QUEUE = "q"
# Workers read their switch every 0.2 s and beat every 0.3 s, so waits stay short.
FAST = ("--poll", "0.2", "--heartbeat", "0.3")

APP_SOURCE = '''\
import os
import time

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))


def _mark(name, text):
    path = os.path.join(HERE, name)
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.replace(path + ".tmp", path)


@rowfleet.task(name="fleet.hold")
def hold():
    """Marks that it started, then waits at its gate."""
    job = rowfleet.current_job()
    _mark(f"started-{job.id}-{job.attempts}", str(os.getpid()))
    give_up = time.monotonic() + 120
    while not os.path.exists(os.path.join(HERE, f"go-{job.id}")):
        if time.monotonic() > give_up:
            raise TimeoutError("the test never opened this handler's gate")
        time.sleep(0.005)
    return os.getpid()


@rowfleet.task(name="fleet.note")
def note():
    """Records which project's worker ran which job: one line, one write."""
    job = rowfleet.current_job()
    fd = os.open(os.path.join(HERE, "ran.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{job.project} {job.id} {os.getpid()}\\n".encode())
    os.close(fd)
    return os.getpid()
'''


def _resume(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


class FleetContract:
    """The TestCase mixing this in is a ``TempDirTestCase`` with ``empty_database()``."""

    def setUp(self) -> None:
        super().setUp()
        self.db = self.empty_database()
        self.write_module(APP, APP_SOURCE)
        self.store = self.open_store()
        self._processes: list[subprocess.Popen] = []

    def empty_database(self) -> str:
        raise NotImplementedError

    # --- helpers -------------------------------------------------------------------------

    def worker(self, *flags: str, host: str = HOST, queue: str = QUEUE, project: str = "") -> subprocess.Popen:
        process = self.launch_logged("worker", "worker", "--app", APP, "--queue", queue, "--host", host,
                                     "--project", project, *FAST, *flags)
        self._processes.append(process)
        return process

    def control(self, *args: str, host: str = HOST) -> None:
        self.cli("control", "--host", host, "--by", "test", *args)

    def enqueue(self, task: str, project: str = "", queue: str = QUEUE) -> int:
        return int(self.cli("enqueue", task, "--queue", queue, "--project", project).stdout)

    def job(self, job_id: int, project: str = ""):
        return self.store.get_job(job_id, project)

    def workers(self, host: str = HOST, project: str | None = None) -> list[dict[str, Any]]:
        return [w for w in self.store.reads.workers(since=0) if w["host"] == host
                and (project is None or w["project"] == project)]

    def row_of(self, pid: int) -> dict[str, Any] | None:
        rows = [w for w in self.store.reads.workers(since=0) if w["pid"] == pid]
        return max(rows, key=lambda w: w["started_at"]) if rows else None

    def started(self, job_id: int, attempt: int = 1) -> int:
        """Wait until attempt ``attempt`` of job ``job_id`` has started; the pid running it."""
        return int(self.wait(lambda: self.marker(f"started-{job_id}-{attempt}"),
                             f"attempt {attempt} of job {job_id} to start"))

    def open_gate(self, job_id: int) -> None:
        with open(os.path.join(self.dir, f"go-{job_id}"), "w"):
            pass

    def wait(self, condition: Callable[[], Any], message: str, timeout: float = DEADLINE) -> Any:
        try:
            return wait_until(condition, timeout=timeout, message=message)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None

    def wait_state(self, pid: int, state: str, timeout: float = DEADLINE) -> dict[str, Any]:
        return self.wait(lambda: (row := self.row_of(pid)) and row["state"] == state and row,
                         f"worker {pid} to be {state}", timeout)

    def wait_beats(self, pid: int, beats: int = 3) -> None:
        """Let worker ``pid`` beat ``beats`` more times: it has looked at its switch and the
        queue several times over, without the test sleeping for a guessed while."""
        for _ in range(beats):
            seen = self.row_of(pid)["last_seen"]
            self.wait(lambda: self.row_of(pid)["last_seen"] > seen, f"worker {pid} to beat again")

    def wait_completed(self, job_id: int, project: str = ""):
        return self.wait(lambda: (job := self.job(job_id, project)).state == "completed" and job,
                         f"job {job_id} to complete")

    def child_pid(self, parent: subprocess.Popen, other_than: int | None = None) -> int:
        """The pid of the worker a supervising parent runs (not ``other_than``)."""
        def child() -> int | None:
            rows = [w for w in self.workers() if w["pid"] not in (parent.pid, other_than) and w["stopped_at"] is None]
            return rows[-1]["pid"] if rows else None
        return self.wait(child, "the supervisor's worker child to beat")

    def logs(self) -> str:
        return "\n".join(f"--- {' '.join(p.args[4:12])} (pid {p.pid}, exit {p.poll()}):\n{self.output(p)}"
                         for p in self._processes)

    # --- the switch --------------------------------------------------------------------

    def test_hard_off_hands_the_job_back_exits_79_and_the_restarted_worker_parks_until_on(self):
        parent = self.worker("--procs", "1")
        held = self.enqueue("fleet.hold")
        first = self.started(held)
        fresh = self.enqueue("fleet.note")  # enqueued after: the handed-back job goes before it

        self.control("--queue", QUEUE, "--off", "--policy", "hard")
        self.wait(lambda: (self.row_of(first) or {}).get("exit_code") == 79, "the worker to exit 79")
        job = self.job(held)
        self.assertEqual((job.state, job.attempts, job.watchdog_retries), ("queued", 0, 0),
                         "an operator stop hands the job back without spending an attempt or a retry")
        events = self.store.reads.events(held)
        kinds = [event.kind for event in events]
        self.assertEqual(kinds[-1], "operator_stop", kinds)
        self.assertNotIn("watchdog_trip", kinds, "an operator's stop is not a watchdog fault")
        self.assertEqual((events[-1].detail["code"], events[-1].detail["watchdog"]), (79, "operator"))
        self.assertIsNone(job.claimed_by, "a handed-back job has no holder; the events keep it")

        second = self.child_pid(parent, other_than=first)
        self.wait_state(second, "parked")
        self.wait_beats(second)
        self.assertEqual((self.job(held).state, self.job(fresh).state), ("queued", "queued"),
                         "a parked worker claimed a job")

        self.open_gate(held)
        other = self.worker(host=OTHER_HOST)
        done, later = self.wait_completed(held), self.wait_completed(fresh)
        self.assertTrue(done.claimed_by.startswith(f"{OTHER_HOST}:"), done.claimed_by)
        self.assertLess(done.started_at, later.started_at, "the handed-back job went ahead of fresh work")
        self.assertEqual(done.attempts, 1)
        self.stop_all(other)

        resumed = self.enqueue("fleet.note")
        self.control("--queue", QUEUE, "--on")
        self.assertEqual(self.wait_completed(resumed).claimed_by, f"{HOST}:{second}",
                         "switched on, the parked process resumes in place")
        self.wait_state(second, "serving")
        self.stop_all(parent)

    def test_drain_finishes_the_job_then_parks_and_on_resumes_the_same_process(self):
        worker = self.worker()
        held = self.enqueue("fleet.hold")
        pid = self.started(held)
        waiting = self.enqueue("fleet.note")

        self.control("--queue", QUEUE, "--off")  # drain is the default policy
        self.wait_state(pid, "draining")
        self.open_gate(held)
        self.assertEqual(self.wait_completed(held).result, pid, "drain lets the job in hand finish")
        self.wait_state(pid, "parked")
        self.wait_beats(pid)
        self.assertEqual(self.job(waiting).state, "queued", "a drained worker claimed more work")

        self.control("--queue", QUEUE, "--on")
        self.assertEqual(self.wait_completed(waiting).result, pid)
        self.assertIsNone(worker.poll(), "switching on resumes in place, without a restart")
        self.stop_all(worker)

    def test_escalating_drain_to_hard_stops_the_job_in_hand(self):
        worker = self.worker()
        held = self.enqueue("fleet.hold")
        pid = self.started(held)
        self.control("--queue", QUEUE, "--off")
        self.wait_state(pid, "draining")
        self.control("--queue", QUEUE, "--off", "--policy", "hard")
        self.assertEqual(worker.wait(DEADLINE), 79, self.logs())
        job = self.job(held)
        self.assertEqual((job.state, job.attempts), ("queued", 0))

    def test_a_box_wide_switch_parks_every_queue_of_its_host(self):
        first, second = self.worker(queue="q1"), self.worker(queue="q2")
        elsewhere = self.worker(host=OTHER_HOST, queue="q1")
        pids = [self.child_or_self(p) for p in (first, second)]
        self.control("--all-queues", "--off")
        for pid in pids:
            self.wait_state(pid, "parked")
        on_q1, on_q2 = self.enqueue("fleet.note", queue="q1"), self.enqueue("fleet.note", queue="q2")
        self.assertTrue(self.wait_completed(on_q1).claimed_by.startswith(f"{OTHER_HOST}:"))
        self.wait_beats(pids[1])
        self.assertEqual(self.job(on_q2).state, "queued", "a worker of a box switched off claimed a job")
        self.control("--all-queues", "--on")
        self.assertEqual(self.wait_completed(on_q2).result, pids[1])
        self.stop_all(first, second, elsewhere)

    def test_a_worker_started_while_off_never_claims(self):
        self.control("--queue", QUEUE, "--off", "--policy", "hard")
        waiting = self.enqueue("fleet.note")
        worker = self.worker("--procs", "1")
        pid = self.child_pid(worker)
        self.wait_state(pid, "parked")
        self.wait_beats(pid)
        self.assertEqual(self.job(waiting).state, "queued")
        self.assertEqual([e.kind for e in self.store.reads.events(waiting)], [], "a worker started while off claimed")
        self.assertEqual(self.row_of(pid)["exit_code"], None, "a fresh worker parks instead of exiting 79")
        self.control("--queue", QUEUE, "--on")
        self.assertEqual(self.wait_completed(waiting).result, pid)
        self.stop_all(worker)

    def test_a_worker_started_while_off_logs_that_it_starts_parked_and_serves_only_once_on(self):
        self.control("--queue", QUEUE, "--off", "--reason", "maintenance")
        worker = self.worker("--log-level", "INFO")
        self.wait_state(worker.pid, "parked")
        log = self.output(worker)
        self.assertIn(f"starts parked: switched off (drain) by test for queue {QUEUE} of host {HOST}", log)
        self.assertIn("(maintenance)", log, "it says why")
        self.assertNotIn("serving", log, "a parked worker said it serves")
        self.control("--queue", QUEUE, "--on")
        self.wait_state(worker.pid, "serving")
        said = self.wait(lambda: "switched on: serving queue" in (log := self.output(worker)) and log,
                         "the worker to say it serves")
        self.assertLess(said.index("starts parked"), said.index(f"switched on: serving queue '{QUEUE}'"))
        self.assertNotIn("serving again", said, "it never served before")
        self.stop_all(worker)

    def test_a_worker_started_while_on_logs_that_it_serves(self):
        worker = self.worker("--log-level", "INFO")
        said = self.wait(lambda: "serving queue" in (log := self.output(worker)) and log, "the worker to serve")
        self.assertIn(f"serving queue '{QUEUE}' of project ''", said)
        self.assertNotIn("parked", said)
        self.stop_all(worker)

    def child_or_self(self, process: subprocess.Popen) -> int:
        self.wait(lambda: self.row_of(process.pid), f"worker {process.pid} to beat")
        return process.pid

    # --- projects sharing one database -------------------------------------------------

    def test_three_projects_share_one_database_and_one_switched_off_leaves_the_others_serving(self):
        projects = ("alpha", "beta", "gamma")
        workers = {name: [self.worker(project=name), self.worker(project=name)] for name in projects}
        jobs = {name: [self.enqueue("fleet.note", project=name) for _ in range(15)] for name in projects}
        for name in projects:
            for job_id in jobs[name]:
                self.wait_completed(job_id, name)
        pids = {name: {p.pid for p in workers[name]} for name in projects}
        ran = self.ran()
        for name in projects:
            self.assertEqual(sorted(job_id for project, job_id, _ in ran if project == name), sorted(jobs[name]),
                             f"each of {name}'s jobs ran once")
            self.assertLessEqual({pid for project, _, pid in ran if project == name}, pids[name],
                                 f"a worker of another project ran one of {name}'s jobs")
            self.assertEqual({w["pid"] for w in self.workers(project=name)}, pids[name],
                             "each project's workers keep their own heartbeat rows")

        self.cli("control", "--project", "alpha", "--queue", QUEUE, "--off", "--host", HOST)
        for pid in pids["alpha"]:
            self.wait_state(pid, "parked")
        later = {name: self.enqueue("fleet.note", project=name) for name in projects}
        for name in ("beta", "gamma"):
            self.wait_completed(later[name], name)
        for pid in pids["alpha"]:
            self.wait_beats(pid)
        self.assertEqual(self.job(later["alpha"], "alpha").state, "queued")

        broker = self.cli_json("broker")["projects"]
        self.assertEqual(sorted(broker), list(projects))
        self.assertEqual(broker["alpha"]["queues"][QUEUE]["queued"], 1)
        self.assertEqual(broker["beta"]["queues"][QUEUE]["completed"], 16)
        self.assertEqual({w["actual"] for w in broker["alpha"]["workers"]}, {"parked"})
        self.assertEqual({w["desired"] for w in broker["alpha"]["workers"]}, {"off"})
        self.assertEqual({w["actual"] for w in broker["gamma"]["workers"]}, {"serving"})
        self.stop_all(*(p for group in workers.values() for p in group))

    def ran(self) -> list[tuple[str, int, int]]:
        with open(os.path.join(self.dir, "ran.log")) as handle:
            return [(project, int(job_id), int(pid)) for project, job_id, pid in
                    (line.split() for line in handle)]


    # --- liveness: what the fleet says of a worker is what is so -------------------------

    def test_a_worker_beating_slower_than_the_sweeper_is_not_declared_dead(self):
        worker = self.worker("--heartbeat", "2")  # its own cadence: stale only after 6 s
        held = self.enqueue("fleet.hold")
        self.started(held)
        # An orchestrator three beats of whose own (0.3 s) pass in under a second.
        sweeper = self.launch_logged("orchestrator", "orchestrator", "--heartbeat", "0.3", "--interval", "0.2")
        self._processes.append(sweeper)
        self.wait_beats(worker.pid, beats=2)  # the sweeper swept many times meanwhile
        served = {p["project"]: p for p in self.cli_json("status")["projects"]}
        self.assertEqual(served[""]["orchestrators"], 1, served)
        job = self.job(held)
        self.assertEqual((job.state, job.lease_token), ("running", 1), "a live worker's job was handed on")
        self.assertIsNone(self.row_of(worker.pid)["flagged_dead_at"], "a live worker was flagged dead")
        self.open_gate(held)
        self.assertEqual(self.wait_completed(held).attempts, 1)

    def test_a_supervised_child_killed_by_sigkill_hands_its_job_back_at_once(self):
        self.worker("--procs", "1")  # the default 600 s lease: only the hand-back can be this quick
        held = self.enqueue("fleet.hold")
        first = self.started(held)
        os.kill(first, signal.SIGKILL)
        second = self.started(held, attempt=2)
        self.assertNotEqual(first, second)
        lost = [event for event in self.store.reads.events(held) if event.kind == "worker_exited"]
        self.assertEqual(lost[0].detail["holder"], f"{HOST}:{first}", lost)
        self.assertIn("killed by SIGKILL", self.job(held).error or "")
        listed = {w["pid"]: w for w in self.cli_json("workers")["workers"]}
        self.assertEqual(listed[first]["actual"], "killed by SIGKILL")
        self.open_gate(held)
        self.wait_completed(held)

    def test_a_frozen_worker_shows_silent_where_no_orchestrator_runs(self):
        worker = self.worker()
        held = self.enqueue("fleet.hold")
        self.started(held)
        os.kill(worker.pid, signal.SIGSTOP)  # readers are not held up, whatever it was writing
        self.addCleanup(_resume, worker.pid)
        # No orchestrator flags it: the listing judges the row by the worker's own cadence.
        actual = lambda: {w["pid"]: w["actual"] for w in self.cli_json("workers")["workers"]}.get(worker.pid)
        self.wait(lambda: actual() == "SILENT", "the frozen worker to show as SILENT")
        self.assertIsNone(self.row_of(worker.pid)["flagged_dead_at"])
        os.kill(worker.pid, signal.SIGCONT)
        self.wait(lambda: actual() == "serving", "the thawed worker to beat and serve again")
        self.open_gate(held)
        self.wait_completed(held)


class SQLiteFleetTest(FleetContract, TempDirTestCase):
    def empty_database(self) -> str:
        return self.db


class PostgresFleetTest(PostgresServerCase, FleetContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database: ``self.db`` is its URL."""

    def test_a_switch_reaches_an_idle_worker_by_notify_not_by_the_poll(self):
        """With the safety poll at 60 s, only the trigger's NOTIFY can park the worker in time."""
        worker = self.launch_logged("worker", "worker", "--app", APP, "--queue", QUEUE, "--host", HOST,
                                    "--poll", "60", "--heartbeat", "0.3")
        self._processes.append(worker)
        self.wait(lambda: self.row_of(worker.pid), "the worker to beat")
        self.control("--queue", QUEUE, "--off")
        self.wait_state(worker.pid, "parked", timeout=20)
        self.control("--queue", QUEUE, "--on")
        self.wait_state(worker.pid, "serving", timeout=20)
        self.stop_all(worker)
