"""Waiting for a job's end (``Store.wait_for``, ``rowfleet.wait``, ``Job.wait``), on every backend.

The job ends through another connection, from another thread, as another process or host
would end it. The waiters run with a safety poll of a minute: a wait that returns at all
within its timeout was woken by the job's end (a NOTIFY on PostgreSQL, the file watch on
SQLite), not by its poll.
"""

from __future__ import annotations

import threading
import time
import unittest

import rowfleet
from rowfleet.claim import Claim
from rowfleet.errors import JobFailed, NotFound
from rowfleet import api
from rowfleet.job import CANCELLED, COMPLETED, FAILED, QUEUED, JobSpec, Outcome
from rowfleet.store import open_store
from pg_harness import PostgresDatabaseCase
from support import DEADLINE, TempDirTestCase

SLOW_POLL = 60.0  # longer than any wait here: only the push path can end one in time
LATER = 0.3       # seconds before the other connection ends the job


class WaitContract:
    """Every backend must pass these; subclasses provide ``config()`` for their database."""

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store(poll=SLOW_POLL)
        self.other = self.open_store(poll=SLOW_POLL)

    def enqueue(self, **spec) -> int:
        return self.store.enqueue(JobSpec(task="waited.noop", **spec)).id

    def end_later(self, job_id: int, outcome: Outcome | None) -> threading.Thread:
        """End the job from the other store after ``LATER`` seconds: claimed and finished
        with ``outcome``, or cancelled while queued (None)."""
        config = self.config(poll=SLOW_POLL)

        def end() -> None:
            time.sleep(LATER)
            with open_store(config) as other:  # a connection of the thread's own, as another process's
                if outcome is None:
                    other.cancel(job_id, "", "the test cancelled it")
                else:
                    other.finish(other.claim(Claim("", "default", "box:1", 60.0)), outcome)

        thread = threading.Thread(target=end, name="ends-the-job")
        thread.start()
        self.addCleanup(thread.join)
        return thread

    def test_a_wait_returns_the_job_as_it_ended_once_another_connection_finishes_it(self):
        job_id = self.enqueue()
        self.end_later(job_id, Outcome(COMPLETED, result={"answer": 42}))
        ended = self.store.wait_for(job_id, "", timeout=DEADLINE)
        self.assertEqual((ended.state, ended.result), (COMPLETED, {"answer": 42}))
        self.assertEqual(ended.ended_result(), {"answer": 42})

    def test_a_failed_job_raises_job_failed_with_its_error(self):
        job_id = self.enqueue()
        self.end_later(job_id, Outcome(FAILED, error="boom: the disk is on fire"))
        ended = self.store.wait_for(job_id, "", timeout=DEADLINE)
        with self.assertRaises(JobFailed) as raised:
            ended.ended_result()
        self.assertEqual(raised.exception.job.id, job_id)
        self.assertIn("boom: the disk is on fire", str(raised.exception))

    def test_a_job_cancelled_while_queued_ends_the_wait_as_cancelled(self):
        job_id = self.enqueue()
        self.end_later(job_id, None)
        ended = self.store.wait_for(job_id, "", timeout=DEADLINE)
        self.assertEqual(ended.state, CANCELLED)
        with self.assertRaises(JobFailed):
            ended.ended_result()

    def test_a_wait_past_its_timeout_raises_and_leaves_the_job_as_it_was(self):
        job_id = self.enqueue()
        started = time.monotonic()
        with self.assertRaises(TimeoutError) as raised:
            self.store.wait_for(job_id, "", timeout=0.2)
        self.assertGreaterEqual(time.monotonic() - started, 0.2)
        self.assertIn(f"job {job_id} is still queued", str(raised.exception))
        self.assertEqual(self.store.get_job(job_id, "").state, QUEUED)

    def test_a_job_already_ended_returns_at_once_and_an_unknown_one_is_not_found(self):
        job_id = self.enqueue()
        self.other.finish(self.other.claim(Claim("", "default", "box:1", 60.0)), Outcome(COMPLETED, result=7))
        self.assertEqual(self.store.wait_for(job_id, "", timeout=0.01).result, 7)
        with self.assertRaises(NotFound):
            self.store.wait_for(job_id + 1000, "", timeout=0.01)
        with self.assertRaises(NotFound):  # another project's job is not found from this one
            self.store.wait_for(job_id, "elsewhere", timeout=0.01)

    def test_the_python_api_returns_the_result_and_job_wait_does_the_same(self):
        rowfleet.configure(db=self.config().db, poll=SLOW_POLL)
        self.addCleanup(rowfleet.configure)
        self.addCleanup(_close_api_store)
        job_id = self.enqueue()
        self.end_later(job_id, Outcome(COMPLETED, result=[1, 2]))
        self.assertEqual(rowfleet.wait(job_id, timeout=DEADLINE), [1, 2])
        self.assertEqual(rowfleet.get_job(job_id).wait(timeout=DEADLINE), [1, 2])
        for bad in (0, -1.0, float("nan"), "soon"):
            with self.subTest(timeout=bad), self.assertRaises(rowfleet.ConfigError):
                rowfleet.wait(job_id, timeout=bad)


class SQLiteWaitTest(WaitContract, TempDirTestCase):
    pass


class PostgresWaitTest(PostgresDatabaseCase, WaitContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""

    def test_only_a_job_somebody_waits_for_is_marked_to_notify(self):
        waited, alone = self.enqueue(), self.enqueue()
        with self.assertRaises(TimeoutError):
            self.store.wait_for(waited, "", timeout=0.05)
        self.assertEqual((self.store.get_job(waited, "").waited, self.store.get_job(alone, "").waited), (True, False))


def _close_api_store() -> None:
    cached = getattr(api._local, "store", None)
    if cached is not None:
        cached[2].close()
        api._local.store = None


if __name__ == "__main__":
    unittest.main()
