"""SQLite's doorbells: which commits ring which bell, and what wakes a ``FileWaiter``.

A bell is a file beside the database whose times rowfleet's store touches after a commit
that queued jobs (``rowfleet.store.wake``). The store's side is read from the bell's mtime, which
the test sets to 0 first; the waiter's side waits on real inotify events, each with a short
timeout that a broken waiter runs out.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import unittest

from support import TempDirTestCase

from rowfleet.claim import Claim
from rowfleet.job import JobSpec
from rowfleet.store import wake

BRIEF = 0.05  # seconds a waiter that should stay asleep is given to wake wrongly
LONG = 5.0    # seconds a waiter that should wake is given (it returns as soon as it does)


class StoreRingsTest(TempDirTestCase):
    """What a commit through rowfleet's SQLite store rings."""

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()

    def bell(self, kind: str, name: str) -> str:
        path = wake.bell_path(self.db, kind, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w"):
            pass
        os.utime(path, (0, 0))
        return path

    def rung(self, path: str) -> bool:
        return os.stat(path).st_mtime > 0

    def test_an_enqueue_rings_its_queues_bell_and_no_other(self):
        mine, other = self.bell("queue", "a"), self.bell("queue", "b")
        self.store.enqueue(JobSpec("note", queue="a"))
        self.assertTrue(self.rung(mine))
        self.assertFalse(self.rung(other))

    def test_a_batch_rings_once_for_all_its_jobs(self):
        bell = self.bell("queue", "a")
        self.assertEqual(self.store.enqueue_many(JobSpec("note", queue="a"), range(50)), 50)
        self.assertTrue(self.rung(bell))

    def test_a_rolled_back_enqueue_rings_nothing_and_the_next_commit_rings_only_its_own(self):
        rolled_back, kept = self.bell("queue", "a"), self.bell("queue", "b")
        with self.assertRaises(RuntimeError), self.store.transaction() as tx:
            self.store._enqueue(tx, JobSpec("note", queue="a"))
            raise RuntimeError("the work around it failed")
        self.store.enqueue(JobSpec("note", queue="b"))
        self.assertFalse(self.rung(rolled_back), "a bell rang for a job that was never committed")
        self.assertTrue(self.rung(kept))

    def test_a_claim_and_a_completion_ring_nothing_and_a_retry_rings(self):
        job = self.store.enqueue(JobSpec("note", project="default", queue="a", max_attempts=3))
        bell = self.bell("queue", "a")
        claimed = self.store.claim(Claim("default", "a", "test:1", 30.0))
        self.assertEqual(claimed.id, job.id)
        self.assertFalse(self.rung(bell), "a claim rang its queue's bell")
        from rowfleet.job import Outcome

        self.store.finish(claimed, Outcome("queued", error="again", delay=0.0, event="retried"), None)
        self.assertTrue(self.rung(bell), "a retry did not ring its queue's bell")
        os.utime(bell, (0, 0))
        self.store.finish(self.store.claim(Claim("default", "a", "test:1", 30.0)), Outcome("completed"), None)
        self.assertFalse(self.rung(bell), "a completion rang its queue's bell")

    def test_a_finished_workflow_node_rings_the_orchestrators_bell(self):
        from rowfleet import dag
        from rowfleet.job import Outcome

        bell, other = self.bell("dispatch", "default"), self.bell("dispatch", "elsewhere")
        flow = dag.parse_workflow({"name": "one", "nodes": [{"id": "a", "task": "note"}]})
        self.store.start_run(flow, None, "default")
        self.assertFalse(self.rung(bell), "starting a run rang the orchestrator: its first nodes are enqueued")
        self.store.finish(self.store.claim(Claim("default", "default", "test:1", 30.0)), Outcome("completed"))
        self.assertTrue(self.rung(bell), "a node's outcome did not ring the orchestrator")
        self.assertFalse(self.rung(other))

    def test_a_store_that_made_the_schema_rings_for_a_retry(self):
        from rowfleet.job import Outcome

        os.remove(self.db)
        fresh = self.open_store()  # made the schema on its own connection: its trigger came after
        fresh.enqueue(JobSpec("note", project="default", queue="a", max_attempts=3))
        bell = self.bell("queue", "a")
        fresh.finish(fresh.claim(Claim("default", "a", "test:1", 30.0)),
                     Outcome("queued", error="again", delay=0.0, event="retried"))
        self.assertTrue(self.rung(bell))

    def test_an_enqueue_in_the_callers_transaction_rings_nothing_even_at_our_next_commit(self):
        bell, other = self.bell("queue", "a"), self.bell("queue", "b")
        with contextlib.closing(sqlite3.connect(self.db, isolation_level=None)) as conn:
            conn.execute("BEGIN IMMEDIATE")
            self.store.enqueue(JobSpec("note", queue="a"), conn=conn)
            conn.execute("COMMIT")
        self.store.enqueue(JobSpec("note", queue="b"))
        self.assertTrue(self.rung(other))
        self.assertFalse(self.rung(bell), "a bell rang for another connection's enqueue (the WAL watch hears it)")

    def test_plain_sql_rings_nothing(self):
        bell = self.bell("queue", "a")
        with contextlib.closing(sqlite3.connect(self.db, isolation_level=None)) as conn:
            conn.execute("INSERT INTO jobs (project, queue, task, args, run_at, created_at, updated_at) "
                         "VALUES ('default', 'a', 'note', 'null', 0, 0, 0)")
        self.assertFalse(self.rung(bell), "the bell's trigger reached another program's connection")


@unittest.skipIf(wake._libc() is None, "SKIPPED LOUDLY: inotify is not available on this machine")
class FileWaiterTest(TempDirTestCase):
    """What wakes a waiter: its bells at once; the WAL once per quiet spell."""

    def setUp(self) -> None:
        super().setUp()
        self.open_store()
        with contextlib.closing(sqlite3.connect(self.db, isolation_level=None)) as conn:
            conn.execute("CREATE TABLE elsewhere (n)")
        self.now = 0.0
        self.bell = wake.bell_path(self.db, "queue", "a")

    def waiter(self, bells: tuple[str, ...] | None = None, quiet: float = 0.1) -> wake.FileWaiter:
        waiter = wake.FileWaiter(self.db, 1.0, (self.bell,) if bells is None else bells, quiet=quiet,
                                 clock=lambda: self.now)
        self.addCleanup(waiter.close)
        waiter.drain()
        return waiter

    def woke(self, waiter: wake.FileWaiter, seconds: float) -> bool:
        """Whether ``waiter`` woke within ``seconds``: a wait also ends on an event for some
        other file of the folder (the -shm), and the worker then waits again, as here."""
        give_up = time.monotonic() + seconds
        while (left := give_up - time.monotonic()) > 0:
            if waiter.wait(left):
                return True
        return False

    def commit_elsewhere(self) -> None:
        """A commit by another program (plain SQL): it writes the WAL and rings no bell."""
        with contextlib.closing(sqlite3.connect(self.db, isolation_level=None)) as conn:
            conn.execute("INSERT INTO elsewhere VALUES (1)")

    def test_its_bell_wakes_it_and_another_queues_does_not(self):
        waiter = self.waiter()
        wake.ring([wake.bell_path(self.db, "queue", "b")])
        self.assertFalse(self.woke(waiter, BRIEF), "another queue's bell woke it")
        wake.ring([self.bell])
        self.assertTrue(self.woke(waiter, LONG))

    def test_the_wal_wakes_it_once_then_is_quiet_until_the_spell_ends_while_bells_still_ring(self):
        waiter = self.waiter()
        self.commit_elsewhere()
        self.assertTrue(self.woke(waiter, LONG), "a plain-SQL commit did not wake it")
        self.commit_elsewhere()
        self.assertFalse(self.woke(waiter, BRIEF), "the WAL woke it inside its quiet spell")
        wake.ring([self.bell])
        self.assertTrue(self.woke(waiter, LONG), "its bell did not wake it inside the quiet spell")
        self.now += 0.11
        self.assertTrue(self.woke(waiter, LONG), "the commit made in the quiet spell was not heard after it")
        # That wake-up began another spell: a storm costs one look per spell.
        self.commit_elsewhere()
        self.assertFalse(self.woke(waiter, BRIEF), "a storm's commit woke it inside the spell that followed")
        self.now += 0.11
        self.assertTrue(self.woke(waiter, LONG))

    def test_what_was_written_before_a_drain_does_not_end_a_spell_as_a_wake_up(self):
        waiter = self.waiter()
        self.commit_elsewhere()
        self.assertTrue(self.woke(waiter, LONG))
        self.commit_elsewhere()  # as the worker's own commits while it ran a job
        waiter.drain()
        self.now += 0.11
        self.assertFalse(self.woke(waiter, BRIEF), "a commit from before the drain woke it at the spell's end")

    def test_a_spell_with_nothing_written_ends_with_the_wal_watched_again(self):
        waiter = self.waiter()
        self.commit_elsewhere()
        self.assertTrue(self.woke(waiter, LONG))
        self.now += 0.11
        self.assertFalse(self.woke(waiter, BRIEF), "a spell in which nothing was written woke it")
        self.commit_elsewhere()
        self.assertTrue(self.woke(waiter, LONG), "after a quiet spell, a commit did not wake it at once")

    def test_without_bells_every_commit_wakes_it(self):
        waiter = self.waiter(bells=())
        for _ in range(2):
            self.commit_elsewhere()
            self.assertTrue(self.woke(waiter, LONG))

    def test_a_bells_only_waiter_sleeps_through_commits_and_wakes_for_its_bell(self):
        waiter = wake.FileWaiter(self.db, 1.0, (self.bell,), bells_only=True)
        self.addCleanup(waiter.close)
        self.commit_elsewhere()
        self.assertFalse(self.woke(waiter, BRIEF), "a commit woke a waiter of bells alone")
        self.assertEqual(waiter.settle_window, 0.0, "a bell rings after its commit: nothing to settle")
        wake.ring([self.bell])
        self.assertTrue(self.woke(waiter, LONG))

    def test_a_bells_only_waiter_without_its_bell_watches_the_wal(self):
        waiter = wake.FileWaiter(self.db, 1.0, (os.path.join("/proc", "rowfleet-no-such-folder", "b"),),
                                 bells_only=True)
        self.addCleanup(waiter.close)
        self.commit_elsewhere()
        self.assertTrue(self.woke(waiter, LONG), "with no bell, a bells-only waiter must fall back to the WAL")

    def test_a_bell_removed_under_it_is_made_again_and_heard(self):
        waiter = self.waiter()
        os.remove(self.bell)
        self.assertTrue(self.woke(waiter, LONG), "the removal did not wake it")
        self.assertTrue(os.path.exists(self.bell), "the bell was not made again")
        waiter.drain()
        wake.ring([self.bell])
        self.assertTrue(self.woke(waiter, LONG), "the bell made again is not watched")

    def test_a_folder_it_cannot_write_leaves_it_woken_by_every_commit(self):
        if os.geteuid() == 0:
            bells = (os.path.join("/proc", "rowfleet-no-such-folder", "queue-a"),)  # not even root makes it
        else:
            locked = os.path.join(self.dir, "locked")
            os.mkdir(locked, 0o500)
            bells = (os.path.join(locked, "bells", "queue-a"),)
        waiter = self.waiter(bells=bells)
        for _ in range(2):
            self.commit_elsewhere()
            self.assertTrue(self.woke(waiter, LONG), "with no bell to hear, the WAL watch was quieted")


if __name__ == "__main__":
    unittest.main()
