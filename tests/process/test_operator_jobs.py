"""An operator's levers on single jobs, on SQLite and PostgreSQL.

- ``rowfleet cancel JOB`` on a running job asks its worker, through the row, to stop it:
  a handler that checks ``rowfleet.cancel_requested()`` returns and the job ends
  cancelled; one that does not is ended by its worker's watchdog after ``cancel_grace``,
  which writes the cancel first. Both with a real worker process.
- ``rowfleet prioritize JOB`` makes a queued job run next.
- A running job of a run that has ended, once recovered (lease lapsed, silent worker, a
  watchdog trip), ends cancelled, and every message says so.
- ``rowfleet runs ID`` shows a node whose jobs finished before the drain applied them.

Store-level cases move a clock by hand; process cases wait on conditions with deadlines.
"""

from __future__ import annotations

import logging
import os
import unittest

from rowfleet import dag, exitcodes
from rowfleet.claim import Claim
from rowfleet.errors import Conflict, NotFound
from rowfleet.job import CANCELLED, COMPLETED, QUEUED, RUNNING, JobSpec, Outcome
from rowfleet.worker.watchdog import Watchdog
from pg_harness import PostgresServerCase
from support import DEADLINE, TempDirTestCase, wait_until

from contract.test_lifecycle import Clock

HOLDER = "testhost:1"
APP = "opjobs"
APP_SOURCE = '''\
import time

import rowfleet


@rowfleet.task(name="opjobs.polite")
def polite(marker):
    """Runs until asked to stop, then returns."""
    with open(marker, "w") as handle:
        handle.write("started")
    while not rowfleet.cancel_requested():
        time.sleep(0.02)
    return "stopped when asked"


@rowfleet.task(name="opjobs.stubborn")
def stubborn(marker):
    """Never stops by itself."""
    with open(marker, "w") as handle:
        handle.write("started")
    while True:
        time.sleep(0.05)
'''
FLOW = dag.parse_workflow({"name": "ops", "nodes": [{"id": "a", "task": "opjobs.a"},
                                                    {"id": "b", "task": "opjobs.b", "depends_on": ["a"]}]})


class OperatorJobsContract:
    """Subclasses provide ``empty_database()``: what ``--db`` names for the test."""

    def setUp(self) -> None:
        super().setUp()
        self.db = self.empty_database()
        self.clock = Clock()
        self.store = self.clocked_store()

    def clocked_store(self, owned: bool = True):
        """A store on the test's clock; closed at cleanup when ``owned``, else by its taker."""
        from rowfleet.store import open_store

        store = open_store(self.config(), create=True, clock=self.clock)
        if owned:
            self.addCleanup(store.close)
            store.migrate()
        return store

    def enqueue(self, task: str = "opjobs.a", **spec) -> int:
        return self.store.enqueue(JobSpec(task=task, **spec)).id

    def claim(self, holder: str = HOLDER, lease: float = 60.0):
        return self.store.claim(Claim("", "default", holder, lease))

    def kinds(self, job_id: int, store=None) -> list[str]:
        return [event.kind for event in (store or self.store).reads.events(job_id)]

    def node_job_of_cancelled_run(self, holder: str = HOLDER, lease: float = 60.0):
        """A run's first node's job, running, and then the run cancelled; (run id, job)."""
        run_id = self.store.start_run(FLOW, None, "")
        job = self.claim(holder, lease)
        self.store.cancel_run(run_id, "")
        return run_id, job

    # --- a lost job of a cancelled run ---------------------------------------------------

    def test_a_lapsed_job_of_a_cancelled_run_ends_cancelled_saying_so(self):
        run_id, job = self.node_job_of_cancelled_run()
        self.clock.advance(61)
        [item] = self.store.reclaim_lapsed()
        self.assertEqual(item["action"], CANCELLED)
        ended = self.store.get_job(job.id, "")
        self.assertEqual(ended.state, CANCELLED)
        self.assertEqual(ended.error, f"run {run_id} cancelled; not retried after: worker {HOLDER} was lost "
                                      f"(lease lapsed)")
        self.assertEqual(self.kinds(job.id)[-1], "cancelled")
        self.assertEqual(self.store.drain(""), {"applied": 1, "failed": 0}, "its outcome goes through the outbox")
        self.assertEqual(self.store.get_run(run_id, "").node("a").state, dag.CANCELLED)

    def test_a_silent_workers_job_of_a_cancelled_run_ends_cancelled_saying_so(self):
        self.store.worker_beat("box:4242:0", "", "box", "default", 4242, None)
        run_id, job = self.node_job_of_cancelled_run(holder="box:4242", lease=600.0)
        self.clock.advance(31)  # three missed 10 s heartbeats
        [worker] = self.store.flag_stale_workers(known_dead=lambda worker: True)
        self.assertEqual([item["action"] for item in worker["jobs"]], [CANCELLED])
        ended = self.store.get_job(job.id, "")
        self.assertEqual(ended.state, CANCELLED)
        self.assertTrue(ended.error.startswith(f"run {run_id} cancelled; not retried after: worker box:4242 "
                                               f"stopped beating"), ended.error)

    def test_a_lost_job_whose_cancel_was_requested_ends_cancelled_not_requeued(self):
        job_id = self.enqueue()
        self.claim()
        self.store.cancel(job_id, "", reason="cancelled by ops")
        self.clock.advance(61)
        self.assertEqual([item["action"] for item in self.store.reclaim_lapsed()], [CANCELLED])
        ended = self.store.get_job(job_id, "")
        self.assertEqual((ended.state, ended.error),
                         (CANCELLED, f"cancelled by ops; not retried after: worker {HOLDER} was lost (lease lapsed)"))
        revived = self.store.retry(job_id, "")  # a fresh start: its next worker must not cancel it again
        self.assertEqual((revived.state, revived.cancel_requested_at, revived.cancel_reason), (QUEUED, None, None))

    def watchdog_trips(self, job, **stop):
        """Run a real watchdog on ``job`` until it trips (budget, or ``operator_stop``); the
        exit code it asked for and its log lines."""
        codes: list[int] = []
        config = self.config(budget=0.01) if not stop else self.config()
        dog = Watchdog(config, lambda _: self.clocked_store(owned=False), exit=codes.append)
        with self.assertLogs("rowfleet.watchdog", logging.ERROR) as logs:
            dog.start()
            try:
                if stop:
                    dog.operator_stop(stop["reason"])
                dog.watch(job)
                wait_until(lambda: codes, message="the watchdog to trip")
            finally:
                dog.stop()
        return codes, logs.output

    def test_a_watchdog_trip_on_a_node_of_a_cancelled_run_logs_the_state_written(self):
        run_id, job = self.node_job_of_cancelled_run()
        codes, lines = self.watchdog_trips(job)
        self.assertEqual(codes, [exitcodes.BUDGET])
        ended = self.store.get_job(job.id, "")
        self.assertEqual(ended.state, CANCELLED)
        self.assertTrue(ended.error.startswith(f"run {run_id} cancelled; not retried after: watchdog budget"))
        self.assertTrue(lines[0].endswith("; the job is cancelled"), lines)

    def test_an_operator_stop_of_a_node_of_a_cancelled_run_cancels_it(self):
        run_id, job = self.node_job_of_cancelled_run()
        codes, lines = self.watchdog_trips(job, reason="switched off (hard) by ops")
        self.assertEqual(codes, [exitcodes.OPERATOR_STOP])
        self.assertEqual(self.store.get_job(job.id, "").state, CANCELLED, "a node of an ended run was re-queued")
        self.assertIsNone(self.claim())
        self.assertTrue(lines[0].endswith("; the job is cancelled"), lines)

    # --- a node finished, not yet drained ------------------------------------------------

    def test_runs_shows_a_node_whose_job_finished_before_the_drain(self):
        run_id = self.store.start_run(FLOW, None, "")
        self.store.finish(self.claim(), Outcome(COMPLETED, result=7))
        node = self.store.get_run(run_id, "").node("a")
        self.assertEqual((node.state, node.unapplied), (QUEUED, COMPLETED))
        shown = self.cli("runs", str(run_id)).stdout
        self.assertRegex(shown, r"(?m)^a\s+completed, not yet applied\s")
        self.assertEqual(self.cli_json("runs", str(run_id))["nodes"][0]["unapplied"], COMPLETED)
        self.store.drain("")
        node = self.store.get_run(run_id, "").node("a")
        self.assertEqual((node.state, node.unapplied), (dag.COMPLETED, None))
        self.assertRegex(self.cli("runs", str(run_id)).stdout, r"(?m)^a\s+completed\s+1\s+7\s*$")

    # --- prioritize ----------------------------------------------------------------------

    def test_prioritize_makes_a_queued_job_run_next(self):
        first = self.enqueue(priority=0)
        later = self.enqueue(priority=5)
        self.assertEqual(self.cli("prioritize", str(later)).stdout, f"job {later} runs next\n")
        self.assertTrue(self.store.get_job(later, "").run_next)
        self.assertTrue(self.store.prioritize(later, "").run_next, "again: a no-op")
        self.assertEqual(self.kinds(later).count("prioritized"), 1)
        self.assertEqual(self.claim().id, later)
        refused = self.cli("prioritize", str(later), check=False)
        self.assertEqual(refused.returncode, exitcodes.REFUSED)
        self.assertEqual(refused.stderr, f"rowfleet: job {later} is running; only a queued job can be made to "
                                         f"run next\n")
        self.assertEqual(self.store.get_job(later, "").state, RUNNING)
        self.assertFalse(self.store.get_job(first, "").run_next)
        with self.assertRaises(NotFound):
            self.store.prioritize(first, "another-project")
        self.store.finish(self.claim(), Outcome(COMPLETED, result=None))
        with self.assertRaises(Conflict):
            self.store.prioritize(first, "")

    # --- cancel a running job ------------------------------------------------------------

    def test_cancelling_a_running_job_asks_its_worker_through_the_row(self):
        job_id = self.enqueue()
        job = self.claim()
        asked = self.store.cancel(job_id, "", reason="cancelled by ops")
        self.assertEqual((asked.state, asked.cancel_requested_at, asked.cancel_reason),
                         (RUNNING, self.clock.now, "cancelled by ops"))
        self.clock.advance(1)
        self.assertEqual(self.store.cancel(job_id, "").cancel_requested_at, self.clock.now - 1, "again: a no-op")
        self.assertEqual(self.kinds(job_id), ["claimed", "cancel_requested"])
        renewal = self.store.renew(job, 60.0)
        self.assertEqual((renewal.cancel_requested_at, renewal.cancel_reason), (self.clock.now - 1, "cancelled by ops"))

    def worker(self, *flags: str):
        self.write_module(APP, APP_SOURCE)
        return self.launch_logged("worker", "worker", "--app", APP, "--renew", "0.2", "--poll", "0.1", *flags)

    def running(self, task: str, worker) -> tuple[int, object]:
        """Enqueue ``task`` (with the real clock), and wait for its handler to start; (job id, store)."""
        store = self.open_store(migrate=False)
        job_id = store.enqueue(JobSpec(task=task, args={"marker": os.path.join(self.dir, "started")})).id
        wait_until(lambda: self.marker("started") or worker.poll() is not None, message="the handler to start")
        self.assertIsNone(worker.poll(), self.output(worker))
        return job_id, store

    def test_a_running_job_whose_handler_stops_when_asked_ends_cancelled(self):
        worker = self.worker("--cancel-grace", "60")
        job_id, store = self.running("opjobs.polite", worker)
        holder = store.get_job(job_id, "").claimed_by
        said = self.cli("cancel", str(job_id)).stdout
        self.assertEqual(said, f"cancel requested for running job {job_id} (worker {holder})\n")
        ended = wait_until(lambda: (job := store.get_job(job_id, "")).state != RUNNING and job,
                           message="the job to end")
        self.assertEqual((ended.state, ended.result), (CANCELLED, None), self.output(worker))
        self.assertIn("cancelled by an operator", ended.error)
        self.assertEqual(self.kinds(job_id, store)[-2:], ["cancel_requested", "cancelled"])
        self.assertIsNone(worker.poll(), "the worker goes on serving")
        self.stop_all(worker)

    def test_a_running_job_whose_handler_ignores_the_cancel_is_ended_after_the_grace(self):
        worker = self.worker("--cancel-grace", "0.5")
        job_id, store = self.running("opjobs.stubborn", worker)
        said = self.cli("cancel", str(job_id), "--wait", str(DEADLINE)).stdout
        self.assertEqual(said, f"job {job_id} cancelled\n", self.output(worker))
        worker.wait(DEADLINE)
        self.assertEqual(worker.returncode, exitcodes.CANCELLED, self.output(worker))
        ended = store.get_job(job_id, "")
        self.assertEqual(ended.state, CANCELLED)
        self.assertIn("its handler did not stop within 0.5s", ended.error)
        events = store.reads.events(job_id)
        self.assertEqual([event.kind for event in events][-3:], ["cancel_requested", "watchdog_trip", "cancelled"])
        self.assertEqual(events[-2].detail["code"], exitcodes.CANCELLED)


class SQLiteOperatorJobsTest(OperatorJobsContract, TempDirTestCase):
    def empty_database(self) -> str:
        return self.db

    def test_the_api_prioritizes_and_cancels(self):
        import rowfleet

        rowfleet.configure(db=self.db)
        self.addCleanup(rowfleet.configure)
        queued, running = self.enqueue(), self.enqueue()
        self.store.prioritize(running, "")
        self.claim()
        self.assertTrue(rowfleet.prioritize(queued).run_next)
        self.assertEqual(rowfleet.cancel(running, reason="no longer wanted").cancel_reason, "no longer wanted")
        self.assertEqual(rowfleet.cancel(queued).state, CANCELLED)


class PostgresOperatorJobsTest(PostgresServerCase, OperatorJobsContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database: ``self.db`` is its URL."""


if __name__ == "__main__":
    unittest.main()
