"""The orchestrator's ``run_once(now)``: its typed summary, as ``orchestrator --once`` prints
it, pruning paced by the ``now`` it is given, and a dead-worker sweep that does not trust one
moment (a step of the clock, a late sweep, every heartbeat stale at once) on both databases.
Time is moved, never waited for: the store's clock and the orchestrator's monotonic one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import subprocess
import sys
import unittest

from rowfleet.claim import Claim
from rowfleet.job import QUEUED, RUNNING, JobSpec
from rowfleet.services.orchestrator import PRUNE_EVERY, Orchestrator, Sweep
from pg_harness import PostgresServerCase
from support import TempDirTestCase
from contract.test_lifecycle import Clock

PRINTED_KEYS = {"schema_version", "reclaimed", "failed", "cancelled", "unreadable_failed", "flagged_workers",
                "reconciled_runs",
                "dispatched", "dispatch_failures", "submissions_applied", "submissions_failed",
                "submissions_reclaimed", "unplaceable", "placeable", "unplaceable_failed", "tallied",
                "samples_pruned", "pruned"}


class CountingPrunes:
    """The real store, counting its prune passes."""

    def __init__(self, store) -> None:
        self._store, self.prunes = store, 0

    def prune(self, retention):
        self.prunes += 1
        return self._store.prune(retention)

    def __getattr__(self, name):
        return getattr(self._store, name)


class RunOnceTest(TempDirTestCase):
    def test_an_idle_sweep_is_all_zeros(self):
        store = self.open_store()
        self.assertEqual(Orchestrator(store, self.config()).run_once(), Sweep())

    def test_pruning_is_paced_by_the_now_it_is_given(self):
        store = CountingPrunes(self.open_store())
        sweeps = Orchestrator(store, self.config())
        for now, prunes in [(1000.0, 1), (1000.0 + PRUNE_EVERY - 1, 1), (1000.0 + PRUNE_EVERY, 2),
                            (1000.0 + PRUNE_EVERY + 1, 2)]:
            sweeps.run_once(now)
            self.assertEqual(store.prunes, prunes, f"at {now}")

    def test_once_prints_the_schema_version_and_the_summary(self):
        printed = json.loads(self.cli("orchestrator", "--once").stdout)
        self.assertEqual(set(printed), PRINTED_KEYS)
        self.assertEqual({key: printed[key] for key in PRINTED_KEYS - {"schema_version"}}, Sweep().to_dict())


HEARTBEAT, INTERVAL = 2.0, 1.0  # a worker is stale 6 s after its last beat
PIDS = (1, 2, 3, 4)


class SilentMomentsContract:
    """Four workers on one box, each holding a job, beating every 2 s; an orchestrator
    sweeping every second. Subclasses provide ``empty_database()``."""

    def setUp(self) -> None:
        super().setUp()
        self.db = self.empty_database()
        self.clock, self.ticks = Clock(), Clock(1000.0)  # the store's (wall) clock, the monotonic one
        self.store = self.open_store(clock=self.clock, heartbeat=HEARTBEAT, interval=INTERVAL)
        self.sweeps = Orchestrator(self.store, self.store.config, monotonic=self.ticks)
        self.jobs = {}
        for pid in PIDS:
            self.store.enqueue(JobSpec(task="moments.hold"))
            # Leases longer than the step: the dead-worker sweep alone could hand a job back.
            self.jobs[pid] = self.store.claim(Claim("", "default", f"box:{pid}", 3600.0))
        self.beat(*PIDS)
        self.assertEqual(self.sweep(0.0), Sweep())

    def beat(self, *pids: int) -> None:
        for pid in pids:
            self.store.worker_beat(f"box:{pid}:0", "", "box", "default", pid, self.jobs[pid].id)

    def sweep(self, seconds: float, *, step: float = 0.0) -> Sweep:
        """Sweep ``seconds`` later by both clocks, the wall clock stepped ``step`` more."""
        self.ticks.advance(seconds)
        self.clock.advance(seconds + step)
        return self.sweeps.run_once()

    def flagged(self) -> set[int]:
        return {w["pid"] for w in self.store.reads.workers(since=0) if w["flagged_dead_at"] is not None}

    def held(self) -> set[int]:
        """The pids whose job still runs under its first claim's token."""
        return {pid for pid, job in self.jobs.items()
                if (held := self.store.get_job(job.id, "")).state == RUNNING and held.lease_token == job.lease_token}

    def test_a_clock_stepped_600s_forward_flags_no_live_worker(self):
        with self.assertLogs("rowfleet.orchestrator", "WARNING") as logged:
            first = self.sweep(INTERVAL, step=600.0)  # every heartbeat is 600 s old at once
        self.assertEqual((first.flagged_workers, first.reclaimed), (0, 0))
        self.assertIn("not flagging silent workers nor reclaiming lapsed leases yet: the clock moved 600.0s",
                      "\n".join(logged.output))
        for _ in range(3):  # one heartbeat later and past it, judged on fresh heartbeats
            self.beat(*PIDS)
            self.assertEqual(self.sweep(INTERVAL), Sweep())
        self.assertEqual(self.flagged(), set())
        self.assertEqual(self.held(), set(PIDS), "a live worker's job was handed back")

    def test_a_clock_stepped_past_every_lease_reclaims_none_while_their_holders_renew(self):
        self.assertEqual(self.sweep(INTERVAL, step=7200.0).reclaimed, 0, "every lease reads lapsed after the step")
        for pid in PIDS:  # the keepers renew with their next beats
            self.store.renew(self.jobs[pid], 3600.0)
        self.beat(*PIDS)
        self.assertEqual(self.sweep(HEARTBEAT), Sweep())
        self.assertEqual(self.held(), set(PIDS), "a live holder's job was re-queued")

    def test_a_worker_that_really_stopped_is_flagged_after_the_hold(self):
        self.assertEqual(self.sweep(INTERVAL, step=600.0).flagged_workers, 0)
        self.beat(1, 2, 3)
        self.assertEqual(self.sweep(INTERVAL).flagged_workers, 0, "flagged within the hold")
        self.beat(1, 2, 3)
        after = self.sweep(INTERVAL)  # one heartbeat after the held sweep
        self.assertEqual((after.flagged_workers, after.reclaimed), (1, 0))
        self.assertEqual(self.flagged(), {4})
        self.assertEqual(self.held(), set(PIDS), "box is not the sweep's host: 4's job waits for its lease")

    def test_every_heartbeat_stale_at_once_holds_one_heartbeat(self):
        for _ in range(6):  # a storage stall: nobody beats for 7 s, while the sweeps come on time
            self.assertEqual(self.sweep(INTERVAL), Sweep())
        with self.assertLogs("rowfleet.orchestrator", "WARNING") as logged:
            self.assertEqual(self.sweep(INTERVAL).flagged_workers, 0)
        self.assertIn("every heartbeat of project '' is stale at once (4 workers)", "\n".join(logged.output))
        self.beat(*PIDS)
        self.assertEqual(self.sweep(HEARTBEAT), Sweep())
        self.assertEqual((self.flagged(), self.held()), (set(), set(PIDS)))

    def test_a_one_shot_sweep_waits_its_hold_out_and_judges(self):
        # orchestrator --once, from cron say: a process's only sweep must still give a verdict.
        self.ticks.advance(7.0)
        self.clock.advance(7.0)  # nobody beats: every heartbeat of the project stale at once
        waited = []

        def sleep(seconds: float) -> None:  # the hold passes by both clocks; 1-3 beat meanwhile
            waited.append(seconds)
            self.ticks.advance(seconds)
            self.clock.advance(seconds)
            self.beat(1, 2, 3)

        fresh = Orchestrator(self.store, self.store.config, monotonic=self.ticks)
        with self.assertLogs("rowfleet.orchestrator", "WARNING"):
            swept = fresh.run_once_settled(sleep)
        self.assertEqual(waited, [HEARTBEAT])
        self.assertEqual((swept.flagged_workers, swept.reclaimed), (1, 0))
        self.assertEqual((self.flagged(), self.held()), ({4}, set(PIDS)))

    def test_a_late_sweep_holds_one_heartbeat(self):
        self.beat(1, 2, 3)  # 4 is silent from here on; the others go on beating
        with self.assertLogs("rowfleet.orchestrator", "WARNING") as logged:
            self.assertEqual(self.sweep(10.0).flagged_workers, 0)  # the orchestrator was held up 10 s
        self.assertIn("this sweep came 10.0s after the last", "\n".join(logged.output))
        self.beat(1, 2, 3)
        self.assertEqual(self.sweep(HEARTBEAT).flagged_workers, 1)
        self.assertEqual(self.flagged(), {4})

    def test_one_stale_worker_among_fresh_ones_is_flagged_at_once(self):
        sweeps = []
        for _ in range(7):  # sweeps on time; 4 stopped beating after the first
            self.beat(1, 2, 3)
            sweeps.append(self.sweep(INTERVAL).flagged_workers)
        self.assertEqual(sweeps, [0, 0, 0, 0, 0, 0, 1], "flagged at the first sweep that saw it stale")
        self.assertEqual((self.flagged(), self.held()), ({4}, set(PIDS)))

    def test_a_silent_worker_of_another_host_keeps_its_job_until_its_lease_lapses(self):
        # It may be cut off from the database and still running the job: only the lapse,
        # which its lease rule stops the job before, may hand the job to another worker.
        for _ in range(7):
            self.beat(1, 2, 3)
            self.sweep(INTERVAL)
        self.assertEqual((self.flagged(), self.held()), ({4}, set(PIDS)))
        for pid in (1, 2, 3):
            self.store.renew(self.jobs[pid], 3600.0)
        self.beat(1, 2, 3)
        self.assertEqual(self.sweep(3600.0 - 7 * INTERVAL - 0.5).reclaimed, 0, "reclaimed before its lease lapsed")
        self.beat(1, 2, 3)
        self.assertEqual(self.sweep(1.0).reclaimed, 1)
        self.assertEqual(self.held(), {1, 2, 3})
        requeued = self.store.get_job(self.jobs[4].id, "")
        self.assertEqual((requeued.state, requeued.attempts, requeued.watchdog_retries), (QUEUED, 0, 1),
                         "a lost lease gives the attempt back and spends a watchdog retry")

    def test_a_silent_worker_whose_process_is_gone_from_this_host_frees_its_job_at_once(self):
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()  # reaped: no process has its pid now (a reuse would only mean waiting for the lease)
        self.store.worker_beat(f"box:{gone.pid}:0", "", "box", "default", gone.pid, None)
        self.store.enqueue(JobSpec(task="moments.hold"))
        orphan = self.store.claim(Claim("", "default", f"box:{gone.pid}", 3600.0))
        here = Orchestrator(self.store, dataclasses.replace(self.store.config, host="box"), monotonic=self.ticks)
        for _ in range(7):
            self.beat(*PIDS)
            self.ticks.advance(INTERVAL)
            self.clock.advance(INTERVAL)
            swept = here.run_once()
        self.assertEqual((swept.flagged_workers, swept.reclaimed), (1, 1))
        self.assertEqual(self.store.get_job(orphan.id, "").state, QUEUED)
        self.assertEqual(self.held(), set(PIDS))

    def test_a_heartbeat_row_that_is_no_number_is_left_out_of_the_judgment(self):
        self.plant_unreadable_beat(4)  # plain SQL's: no sweep could ever judge it stale
        sweeps = []
        for _ in range(7):  # 3 stopped beating after the first sweep; 4's row cannot say
            self.beat(1, 2)
            sweeps.append(self.sweep(INTERVAL).flagged_workers)
        self.assertEqual(sweeps, [0, 0, 0, 0, 0, 0, 1], "flagged at the first sweep that saw it stale")
        self.assertEqual(self.flagged(), {3})


class SQLiteSilentMomentsTest(SilentMomentsContract, TempDirTestCase):
    def empty_database(self) -> str:
        return self.db

    def plant_unreadable_beat(self, pid: int) -> None:
        with contextlib.closing(sqlite3.connect(self.db)) as conn, conn:
            conn.execute("UPDATE workers SET last_seen = 'soon', heartbeat = 'fast' WHERE pid = ?", (pid,))


class PostgresSilentMomentsTest(PostgresServerCase, SilentMomentsContract, TempDirTestCase):
    """The same on a throwaway PostgreSQL database, judged by the test's clock as its own."""

    def plant_unreadable_beat(self, pid: int) -> None:
        from rowfleet.store.postgres import driver

        with contextlib.closing(driver().connect(self.db)) as conn, conn:
            conn.execute("UPDATE workers SET last_seen = 'NaN', heartbeat = 'Infinity' WHERE pid = %s", (pid,))


if __name__ == "__main__":
    unittest.main()
