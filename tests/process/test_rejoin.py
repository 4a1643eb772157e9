"""A box restarted after a crash takes its own dead work back, with no orchestrator, on
SQLite and PostgreSQL, with real processes and kill -9.

A worker (``worker``, ``worker --procs 2``, ``up``, a prefetching ``worker``) holds a long
job; its whole process group is killed with SIGKILL; the same command started again on the
same ``--host`` hands the job back before its first heartbeat (``rowfleet.worker.rejoin``)
and runs it (every job a prefetching worker held, started or not): no sweep
could have, for no orchestrator runs (``up``'s own beats only every 10 s, and the job's lease
is 600 s). The job's ``worker_gone`` event names the worker that handed it back. A holder
that is merely frozen (SIGSTOP: its process is there, started when it did) keeps its job.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import unittest

from pg_harness import PostgresServerCase
from support import TempDirTestCase, kill_group, wait_until

TASKS = """\
import time

import rowfleet


@rowfleet.task
def long(runs):
    with open(runs, "a") as handle:  # one line per run: the test counts them
        handle.write("run\\n")
    with open(runs) as handle:
        first = handle.read().count("run") == 1
    if first:
        time.sleep(600)  # killed in here
    return "finished"
"""
HOST = ("--host", "box")
# A heartbeat of 10 s: no sweep of up's own orchestrator can find the killed worker silent in
# the time the test takes; leases of 600 s: none lapses.
SLOW_SWEEP = ("--poll", "0.2", "--heartbeat", "10", "--lease", "600", "--log-level", "INFO")


class RejoinContract:
    """The TestCase mixing this in is a ``TempDirTestCase`` with ``empty_database()``."""

    def setUp(self) -> None:
        super().setUp()
        self.db = self.empty_database()
        self.write_module("rejoin_tasks", TASKS)
        self.runs = os.path.join(self.dir, "runs")
        self.cli("init")

    def start(self, label: str, *command: str):
        return self.launch_logged(label, *command, *HOST, "--app", "rejoin_tasks", *SLOW_SWEEP)

    def holding(self, *command: str):
        """``command`` started, holding the long job: the process and the job's id."""
        process = self.start("first", *command)
        job = self.cli("enqueue", "rejoin_tasks:long", "--app", "rejoin_tasks",
                       "--args", json.dumps({"runs": self.runs})).stdout.strip()
        wait_until(lambda: self.marker("runs") is not None or process.poll() is not None, message="the job in hand")
        self.assertIsNone(process.poll(), self.output(process))
        return process, job

    def assert_taken_back(self, *command: str) -> None:
        first, job = self.holding(*command)
        holder = self.cli_json("job", job)["claimed_by"]
        kill_group(first)
        started = time.monotonic()
        second = self.start("second", *command)
        wait_until(lambda: self.cli_json("job", job)["claimed_by"] != holder or second.poll() is not None,
                   message="the job handed back")
        taken_back = time.monotonic() - started
        wait_until(lambda: self.cli_json("job", job)["state"] == "completed" or second.poll() is not None,
                   message="the job run again")
        shown = self.cli_json("job", job)
        log = self.output(second)
        self.assertEqual((shown["state"], shown["result"]), ("completed", "finished"), log)
        self.assertEqual(self.marker("runs").count("run"), 2, "killed once, run once more")
        gone = [event for event in shown["events"] if event["kind"] == "worker_gone"]
        self.assertEqual(len(gone), 1, shown["events"])
        self.assertRegex(gone[0]["detail"]["reason"],
                         rf"worker {holder} is gone \(its process is gone\); handed back by worker box:\d+ starting")
        self.assertFalse([event for event in shown["events"] if event["kind"] in ("worker_dead", "reclaimed")])
        self.assertIn(f"its worker {holder} is gone", log)
        self.assertNotIn("Traceback", log)
        print(f"\n*** {' '.join(command)}: handed back {taken_back:.2f}s after the restart began "
              f"(process start included) ***", file=sys.stderr)

    def test_a_restarted_worker_takes_back_its_dead_predecessors_job(self):
        self.assert_taken_back("worker")

    def test_a_restarted_procs_group_takes_back_its_dead_predecessors_job(self):
        self.assert_taken_back("worker", "--procs", "2")

    def test_a_restarted_box_takes_back_its_dead_predecessors_job(self):
        self.assert_taken_back("up", "--queue", "default:2")

    def test_every_job_a_prefetching_worker_held_is_handed_back(self):
        # Three jobs before the worker starts, so that its first claim takes them all: the
        # first runs (and hangs), the two behind it are held unstarted. They share its file,
        # so only the very first run hangs.
        ids = [self.cli("enqueue", "rejoin_tasks:long", "--app", "rejoin_tasks",
                        "--args", json.dumps({"runs": self.runs})).stdout.strip() for _ in range(3)]
        first = self.start("first", "worker", "--prefetch", "3")
        wait_until(lambda: all(self.cli_json("job", job_id)["state"] == "running" for job_id in ids)
                   or first.poll() is not None, message="the worker to hold all three")
        kill_group(first)
        second = self.start("second", "worker", "--prefetch", "3")
        for job_id in ids:
            wait_until(lambda: self.cli_json("job", job_id)["state"] == "completed" or second.poll() is not None,
                       message=f"job {job_id} run again")
            kinds = [event["kind"] for event in self.cli_json("job", job_id)["events"]]
            self.assertEqual(kinds, ["claimed", "worker_gone", "claimed", "completed"], self.output(second))
        self.assertEqual(self.marker("runs").count("run"), 4, "the first killed once; each run once after")

    def test_a_frozen_holder_keeps_its_job(self):
        first, job = self.holding("worker")
        holder = self.cli_json("job", job)["claimed_by"]
        os.kill(first.pid, signal.SIGSTOP)
        self.addCleanup(os.kill, first.pid, signal.SIGCONT)
        second = self.start("second", "worker")
        wait_until(lambda: "serving" in self.output(second) or second.poll() is not None, message="a second worker")
        self.assertIsNone(second.poll(), self.output(second))
        shown = self.cli_json("job", job)
        self.assertEqual((shown["state"], shown["claimed_by"]), ("running", holder), self.output(second))
        self.assertEqual(self.marker("runs").count("run"), 1)


class SQLiteRejoinTest(RejoinContract, TempDirTestCase):
    def empty_database(self) -> str:
        return self.db


class PostgresRejoinTest(PostgresServerCase, RejoinContract, TempDirTestCase):
    """The same on a throwaway PostgreSQL database: ``self.db`` is its URL."""


if __name__ == "__main__":
    unittest.main()
