"""Unique-while-active jobs and debounce (``JobSpec.unique``, ``JobSpec.debounce``), on every
backend. A duplicate is a job of the same project, queue, task and args (with a key: the same
key); the enqueue of one returns the job that waits (``"queued"``), or waits or runs
(``"active"``), instead of writing another. The race of concurrent enqueues is in the process
tests."""

from __future__ import annotations

import unittest

from rowfleet.claim import Claim
from rowfleet.errors import ConfigError
from rowfleet.job import COMPLETED, QUEUED, RUNNING, JobSpec, Outcome
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase

CLAIM = Claim("", "default", "box:1", 60.0)


class UniqueContract:
    """Every backend must pass these; subclasses provide ``config()`` for their database."""

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()

    def enqueue(self, args=None, **spec):
        return self.store.enqueue(JobSpec(task="unique.noop", args=args, **spec))

    def count(self) -> int:
        return sum(c["n"] for c in self.store.reads.counts())

    def test_unique_queued_returns_the_waiting_duplicate_and_writes_a_new_job_once_it_runs(self):
        first = self.enqueue({"a": 1, "b": 2}, unique="queued")
        self.assertEqual(self.enqueue({"b": 2, "a": 1}, unique="queued").id, first.id)  # key order is no difference
        self.assertEqual(self.count(), 1)
        self.assertEqual(self.store.claim(CLAIM).id, first.id)
        second = self.enqueue({"a": 1, "b": 2}, unique="queued")
        self.assertNotEqual(second.id, first.id)
        self.assertEqual(self.enqueue({"a": 1, "b": 2}, unique="queued").id, second.id)
        self.assertEqual(self.count(), 2)

    def test_unique_active_returns_a_running_duplicate_until_it_ends(self):
        first = self.enqueue([7], unique="active")
        running = self.store.claim(CLAIM)
        self.assertEqual((running.id, running.state), (first.id, RUNNING))
        self.assertEqual(self.enqueue([7], unique="active").id, first.id)
        self.store.finish(running, Outcome(COMPLETED, result=1))
        after = self.enqueue([7], unique="active")
        self.assertNotEqual(after.id, first.id)
        self.assertEqual(after.state, QUEUED)

    def test_other_args_queues_or_tasks_are_no_duplicates_and_neither_are_plain_enqueues(self):
        base = self.enqueue([1], unique="queued")
        others = [self.enqueue([2], unique="queued"), self.enqueue([1], unique="queued", queue="other"),
                  self.store.enqueue(JobSpec(task="unique.other", args=[1], unique="queued")),
                  self.enqueue([1])]  # not unique: always a job of its own
        self.assertEqual(len({base.id, *(job.id for job in others)}), 5)
        self.assertIsNone(others[-1].unique_key)

    def test_with_a_key_the_key_makes_the_duplicate_and_stops_doing_so_once_the_job_ended(self):
        first = self.enqueue([1], key="order-7", unique="active")
        self.assertEqual(self.enqueue([2], key="order-7", unique="active").id, first.id)  # other args, same key
        self.store.finish(self.store.claim(CLAIM), Outcome(COMPLETED))
        again = self.enqueue([1], key="order-7", unique="active")
        self.assertNotEqual(again.id, first.id)  # an idempotency key would have returned the first for ever
        self.assertIsNone(again.idempotency_key)
        kept = self.enqueue([1], key="order-8")
        self.store.finish(self.store.claim(Claim("", "default", "box:1", 60.0)), Outcome(COMPLETED))
        self.assertEqual(self.enqueue([1], key="order-8").id, kept.id)  # without unique: kept until pruned

    def test_debounce_pushes_the_waiting_jobs_start_with_each_duplicate(self):
        first = self.enqueue([1], debounce=30.0)
        self.assertEqual(first.unique_key, JobSpec("unique.noop", [1], unique="queued").unique_key())
        self.assertGreaterEqual(first.run_at - first.created_at, 29.9)
        self.assertIsNone(self.store.claim(CLAIM), "a debounced job was claimed before its window ended")
        pushed = self.enqueue([1], debounce=60.0)
        self.assertEqual(pushed.id, first.id)
        self.assertGreater(pushed.run_at, first.run_at)
        self.assertEqual(self.enqueue([1], debounce=1.0).run_at, pushed.run_at)  # never pulled earlier
        self.assertEqual(self.count(), 1)

    def test_bad_unique_input_is_refused_before_anything_is_written(self):
        for spec in ({"unique": "always"}, {"unique": ""}, {"debounce": -1.0}, {"debounce": float("nan")}):
            with self.subTest(spec), self.assertRaises(ConfigError):
                self.enqueue([1], **spec)
        with self.assertRaises(ConfigError):
            self.store.enqueue_many(JobSpec(task="unique.noop", unique="queued"), [[1], [2]])
        self.assertEqual(self.count(), 0)


class SQLiteUniqueTest(UniqueContract, TempDirTestCase):
    pass


class PostgresUniqueTest(PostgresDatabaseCase, UniqueContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""


if __name__ == "__main__":
    unittest.main()
