"""Flow limits held by a fleet of real worker processes racing on one database: never more
jobs running than a limit allows, counted from the handlers' own records (not from what
rowfleet says), and a slot held by a worker killed with SIGKILL frees only once its job's
lease is reclaimed. Both databases."""

from __future__ import annotations

import collections
import os
import signal
import unittest

from rowfleet import flow
from rowfleet.job import JobSpec
from support import DEADLINE, TempDirTestCase, wait_until

APP = "flowapp"
# Each handler appends "job key start end pid" to runs.log when it ends (one write, O_APPEND),
# its times from the box's clock, which every worker here shares.
APP_SOURCE = '''\
import os
import time
import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))


def _append(line):
    fd = os.open(os.path.join(HERE, "runs.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@rowfleet.task(name="limited", queue="api")
def limited(hang=False):
    job = rowfleet.current_job()
    start = time.time()
    if hang and job.lease_token == 1:  # its first claim hangs until the worker is killed
        with open(os.path.join(HERE, f"started-{job.id}"), "w") as marker:
            marker.write(str(os.getpid()))
        time.sleep(120)
    time.sleep(0.03)
    _append(f"{job.id} {job.concurrency_key or '-'} {start!r} {time.time()!r} {os.getpid()}\\n")
'''


class FlowProcessContract:
    """Process tests for any backend; the TestCase provides ``self.db`` and the helpers of
    ``support.TempDirTestCase``."""

    def setUp(self) -> None:
        super().setUp()
        self.write_module(APP, APP_SOURCE)
        self._store = None

    @property
    def store(self):
        if self._store is None:
            self._store = self.open_store()
        return self._store

    def runs(self) -> list[tuple[int, str, float, float]]:
        text = self.marker("runs.log") or ""
        return [(int(job), key, float(start), float(end))
                for job, key, start, end, _pid in (line.split() for line in text.splitlines())]

    def enqueue(self, key: str | None, count: int = 1, **args) -> list[int]:
        return [self.store.enqueue(JobSpec(task="limited", queue="api", args=args or None, concurrency_key=key)).id
                for _ in range(count)]

    def test_four_racing_workers_never_run_more_than_the_limits_allow(self):
        self.store.set_limit("", "api", concurrency=3, per_key=1)
        ids = []
        for key in ("a", "b", "c", "d", "e"):
            ids += self.enqueue(key, 12)
        workers = [self.launch_logged("worker", "worker", "--app", APP, "--queue", "api", "--poll", "0.2")
                   for _ in range(4)]
        wait_until(lambda: len(self.runs()) == len(ids), timeout=3 * DEADLINE, message="every job to run")
        self.stop_all(*workers)
        runs = self.runs()
        self.assertEqual(sorted(job for job, *_ in runs), sorted(ids), "each job ran once")
        self.assertLessEqual(most_at_once(runs), 3, "more jobs ran at once than the queue's limit")
        self.assertEqual(most_at_once(runs), 3, "the limit was never reached: the race tested nothing")
        for key in ("a", "b", "c", "d", "e"):
            self.assertEqual(most_at_once([run for run in runs if run[1] == key]), 1, f"key {key}")
        self.assertEqual({job.attempts for job in self.store.reads.list_jobs("", limit=1000)}, {1},
                         "a job was claimed and handed back")

    def test_four_racing_workers_on_two_hosts_keep_a_rate_in_every_window(self):
        self.store.set_limit("", "api", rate=flow.Rate(20, 1.0))
        ids = self.enqueue(None, 70)
        workers = [self.launch_logged("worker", "worker", "--app", APP, "--queue", "api", "--poll", "0.2",
                                      "--host", f"box-{n % 2}") for n in range(4)]
        wait_until(lambda: len(self.runs()) == len(ids), timeout=3 * DEADLINE, message="every job to run")
        self.stop_all(*workers)
        self.assertEqual(sorted(job for job, *_ in self.runs()), sorted(ids), "each job ran once")
        # The claims' times are what the window counts (a handler starts some moment after its
        # claim, later under load, so its own records bound nothing): never more than 20 in
        # any second.
        claimed = sorted(job.started_at for job in self.store.reads.list_jobs("", limit=1000))
        most = max(sum(1 for other in claimed if at <= other < at + 1.0) for at in claimed)
        self.assertLessEqual(most, 20, "more starts in one second than the rate allows")
        self.assertGreaterEqual(most, 18, "the rate was never reached: the race tested nothing")
        self.assertGreaterEqual(claimed[-1] - claimed[0], 2.9, "70 starts at 20 a second took less than 3 s")

    def test_a_slot_held_by_a_killed_worker_frees_when_its_lease_is_reclaimed_not_before(self):
        self.store.set_limit("", "api", concurrency=1)
        [hung] = self.enqueue("a", hang=True)
        [other] = self.enqueue("b")
        lease = ("--lease", "2", "--renew", "0.5", "--poll", "0.2")
        first = self.launch_logged("worker", "worker", "--app", APP, "--queue", "api", *lease)
        wait_until(lambda: self.marker(f"started-{hung}"), message="the hung job to start")
        # Of another box: a worker of the killed one's host would hand its job back as it starts.
        second = self.launch_logged("worker", "worker", "--app", APP, "--queue", "api", "--host", "other-box", *lease)
        first.send_signal(signal.SIGKILL)
        first.wait(DEADLINE)
        orchestrator = self.launch_logged("orchestrator", "orchestrator", "--interval", "0.2")
        wait_until(lambda: len(self.runs()) == 2, message="both jobs to run")
        self.stop_all(second, orchestrator)
        [reclaimed] = [event for event in self.store.reads.events(hung) if event.kind == "reclaimed"]
        [other_run] = [run for run in self.runs() if run[0] == other]
        self.assertGreaterEqual(other_run[2], reclaimed.at - 0.01,
                                "the other job started while the killed worker's job still held the only slot")


def most_at_once(runs: list[tuple[int, str, float, float]]) -> int:
    """The most runs whose [start, end] overlap at one moment (an end before a start at the
    same instant)."""
    moments = sorted([(start, 1) for _, _, start, _ in runs] + [(end, -1) for _, _, _, end in runs],
                     key=lambda moment: (moment[0], moment[1]))
    running = most = 0
    for _, change in moments:
        running += change
        most = max(most, running)
    return most


class SQLiteFlowProcessTest(FlowProcessContract, TempDirTestCase):
    pass


class PostgresFlowProcessTest(FlowProcessContract, TempDirTestCase):
    """The same on a throwaway PostgreSQL database: ``self.db`` is its URL."""

    def setUp(self) -> None:
        import pg_harness

        self.pg = pg_harness.require_pg(self)
        super().setUp()
        self.db = self.pg.create_database()
        self.addCleanup(self.pg.drop_database, self.db)


if __name__ == "__main__":
    unittest.main()
