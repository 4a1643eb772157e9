"""Delayed jobs out of the claim's way, on every backend.

A job written to run later (a delay, a ``run_at`` ahead, a retry's backoff) is marked
``delayed``: still queued to every reader, but outside the claim index, so that a claim
never steps over a backlog of jobs that are not due. A claim promotes the fallen-due ones
of its queue (at least once per poll, and whenever it finds nothing else); ``has_due``
sees them. ``DelayedJobsContract`` runs against SQLite and PostgreSQL with a test clock;
``DelayedWorkerContract`` runs a real worker process on the real clock.
"""

from __future__ import annotations

import os
import sqlite3
import unittest

from rowfleet.claim import Claim
from rowfleet.job import CANCELLED, COMPLETED, QUEUED, RUNNING, JobSpec, Outcome
from rowfleet.sql import queries
from rowfleet.store import jobs as job_store
from pg_harness import PostgresDatabaseCase
from support import DEADLINE, TempDirTestCase, wait_until
from contract.test_lifecycle import Clock

HOLDER = "box:7"
TURN = Claim("", "default", HOLDER, 60.0)
YEAR_2100 = 4102444800.0  # a run_at in the future on any machine running these tests

APP = "delayapp"
APP_SOURCE = '''\
import time

import rowfleet


@rowfleet.task(name="stamp")
def stamp():
    return time.time()  # when the handler started
'''


class DelayedJobsContract:
    """Every backend must pass these. Subclasses provide ``config()``, ``fresh_store()`` (a
    store on a new, empty database), ``plan(query, params)`` (the query plan's text),
    ``index_definition(name)`` and ``run_sql(sql, params)`` (plain SQL, as any program may
    write it; ``params`` a sequence, ``?`` marks)."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.store = self.open_store(clock=self.clock)

    def enqueue(self, **spec) -> int:
        return self.store.enqueue(JobSpec(task="delayed.noop", **spec)).id

    def job(self, job_id: int):
        return self.store.get_job(job_id, "")

    def test_a_delayed_job_is_not_claimed_before_it_is_due_and_is_once_due(self):
        job_id = self.enqueue(delay=10.0)
        at_time = self.enqueue(run_at=self.clock.now + 20.0)
        self.assertEqual([(self.job(j).state, self.job(j).delayed) for j in (job_id, at_time)],
                         [(QUEUED, True), (QUEUED, True)])
        self.assertFalse(self.store.has_due(TURN))
        self.assertIsNone(self.store.claim(TURN))
        self.clock.advance(9.9)
        self.assertFalse(self.store.has_due(TURN))
        self.assertIsNone(self.store.claim(TURN), "claimed before its delay")
        self.clock.advance(0.1)
        self.assertTrue(self.store.has_due(TURN), "a fallen-due delayed job must count as due")
        claimed = self.store.claim(TURN)
        self.assertEqual((claimed.id, claimed.state, claimed.delayed), (job_id, RUNNING, False))
        self.assertFalse(self.store.has_due(TURN))
        self.clock.advance(10.0)
        self.assertEqual(self.store.claim(TURN).id, at_time)

    def test_a_job_due_now_is_not_delayed(self):
        self.assertFalse(self.job(self.enqueue()).delayed)
        self.assertFalse(self.job(self.enqueue(run_at=self.clock.now - 5.0)).delayed)
        self.store.enqueue_many(JobSpec(task="delayed.noop", delay=3.0), [1, 2])
        self.store.enqueue_many(JobSpec(task="delayed.noop"), [3])
        flags = {job.args: job.delayed for job in self.store.reads.list_jobs("") if job.args is not None}
        self.assertEqual(flags, {1: True, 2: True, 3: False})

    def test_a_delayed_better_priority_job_is_taken_before_worse_due_work_once_promoted(self):
        worse = [self.enqueue(priority=5) for _ in range(3)]
        better = self.enqueue(priority=0, delay=5.0)
        held = self.store.claim(TURN)
        self.assertEqual(held.id, worse[0])
        self.clock.advance(5.0)
        self.assertTrue(self.store.has_due(TURN))
        # A busy worker's claims promote at least once per poll, so the fallen-due job goes
        # first (here in a finish that claims the next job, as a busy worker's turn does).
        taken = self.store.finish(held, Outcome(COMPLETED, event="completed"), claim_next=TURN)
        self.assertEqual(taken.id, better)
        self.assertEqual(self.store.claim(TURN).id, worse[1])

    def test_a_claim_walks_only_due_rows_through_the_partial_claim_index(self):
        self.store.enqueue_many(JobSpec(task="delayed.noop", priority=-1, delay=3600.0), [None] * 300)
        due = [self.enqueue(priority=5) for _ in range(20)]
        self.analyze()
        params = {**job_store.claim_params(TURN), "now": self.clock.now, "limit": 1000}
        self.assertIn("jobs_claim", self.plan("claim", params))
        self.assertIn("jobs_delayed", self.plan("promote_due", params))
        has_due = self.plan("has_due", params)
        self.assertIn("jobs_claim", has_due)
        self.assertIn("jobs_delayed", has_due)
        # Delayed rows are not in the claim index at all, and every claim query excludes them.
        self.assertIn("delayed = 0", self.index_definition("jobs_claim"))
        self.assertIn("delayed = 1", self.index_definition("jobs_delayed"))
        self.assertIn("delayed = 0", queries.fragments(self.store.dialect)["claim_candidates"])
        self.assertEqual(self.store.claim(TURN).id, due[0])

    def test_a_retry_with_backoff_is_delayed_and_runs_once_due(self):
        job_id = self.enqueue()
        held = self.store.claim(TURN)
        self.assertIsNone(self.store.finish(held, Outcome(QUEUED, error="later", delay=5.0, event="retried"),
                                            claim_next=TURN))
        self.assertEqual((self.job(job_id).state, self.job(job_id).delayed), (QUEUED, True))
        self.clock.advance(5.0)
        again = self.store.claim(TURN)
        self.assertEqual((again.id, again.attempts, again.delayed), (job_id, 2, False))
        self.store.finish(again, Outcome(QUEUED, error="now", delay=0.0, event="retried"))
        self.assertEqual((self.job(job_id).state, self.job(job_id).delayed), (QUEUED, False))

    def test_reclaim_hand_back_and_revive_queue_the_job_due_now(self):
        lapsed, handed, revived = self.enqueue(), self.enqueue(), self.enqueue(delay=100.0)
        first, second = self.store.claim(TURN), self.store.claim(TURN)
        self.assertEqual((first.id, second.id), (lapsed, handed))
        # Rows marked by plain SQL: a requeue must say "due now" whatever the row held.
        self.run_sql("UPDATE jobs SET delayed = 1 WHERE id IN (?, ?)", (lapsed, handed))
        self.store.watchdog_trip(second, {"reason": "operator"}, Outcome(QUEUED, error="stopped"), spent=0, refund=1)
        self.clock.advance(61.0)
        self.assertEqual([item["id"] for item in self.store.reclaim_lapsed()], [lapsed])
        self.store.cancel(revived, "")
        self.assertEqual(self.store.retry(revived, "").state, QUEUED)
        self.assertEqual([(self.job(j).state, self.job(j).delayed) for j in (lapsed, handed, revived)],
                         [(QUEUED, False)] * 3)

    def test_a_delayed_job_is_queued_to_every_reader(self):
        job_id = self.enqueue(delay=60.0)
        self.assertEqual([job.id for job in self.store.reads.list_jobs("", state=QUEUED)], [job_id])
        self.assertEqual([(c["state"], c["n"]) for c in self.store.reads.counts()], [(QUEUED, 1)])
        self.assertTrue(self.store.prioritize(job_id, "").run_next)
        self.assertIsNone(self.store.claim(TURN), "run-next does not make a delayed job due")
        self.assertEqual(self.store.cancel(job_id, "").state, CANCELLED)

    def test_the_migration_marks_an_existing_future_job_delayed(self):
        store = self.fresh_store()
        dialect = store.dialect
        with store.transaction() as tx:
            tx.script(store.sql["migrations_table"])
            for migration in queries.migrations(dialect)[:5]:
                tx.script(migration.sql)
                tx.run("migration_record", version=migration.version, name=migration.name)
            # Written as version 5 wrote them: a job for later, one due, one running.
            tx.script("INSERT INTO jobs (queue, task, run_at, created_at, updated_at, state) VALUES "
                      f"('default', 'later', {YEAR_2100}, 0, 0, 'queued'), "
                      "('default', 'due', 1000, 0, 0, 'queued'), "
                      f"('default', 'held', {YEAR_2100}, 0, 0, 'running');")
        self.assertEqual(store.migrate(), queries.latest_version(dialect))
        flags = {job.task: job.delayed for job in store.reads.list_jobs("")}
        self.assertEqual(flags, {"later": True, "due": False, "held": False})


class SQLiteDelayedJobsTest(DelayedJobsContract, TempDirTestCase):
    def fresh_store(self):
        from rowfleet.store import open_store

        store = open_store(self.config().replace(db=os.path.join(self.dir, "fresh.db")), create=True)
        self.addCleanup(store.close)
        return store

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.db, isolation_level=None)
        self.addCleanup(conn.close)
        return conn

    def analyze(self) -> None:
        self._connect().execute("ANALYZE")

    def plan(self, query: str, params: dict) -> str:
        sql = queries.queries("sqlite")[query]
        return "\n".join(row[3] for row in self._connect().execute("EXPLAIN QUERY PLAN " + sql, params))

    def index_definition(self, name: str) -> str:
        return self._connect().execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]

    def run_sql(self, sql: str, params: tuple) -> None:
        self._connect().execute(sql, params)


class PostgresDelayedJobsTest(PostgresDatabaseCase, DelayedJobsContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""

    def fresh_store(self):
        from rowfleet.store import open_store

        store = open_store(self.config().replace(db=self.empty_database()), create=True)
        self.addCleanup(store.close)
        return store

    def analyze(self) -> None:
        self.pg.psql(self.url, "ANALYZE jobs")

    def plan(self, query: str, params: dict) -> str:
        # With the scan of the whole (tiny) table ruled out, an index serves the query only
        # if the query's filter implies that partial index's condition.
        with self.caller_connection() as conn:
            conn.execute("SET enable_seqscan = off")
            return "\n".join(row[0] for row in conn.execute("EXPLAIN " + queries.queries("postgres")[query],
                                                            params))

    def index_definition(self, name: str) -> str:
        return self.pg.psql(self.url, "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (name,))[0][0]

    def run_sql(self, sql: str, params: tuple) -> None:
        self.pg.psql(self.url, sql.replace("?", "%s"), params)


class DelayedWorkerContract:
    """A real worker process on the real clock. Subclasses provide ``database()``."""

    def test_a_worker_runs_a_job_enqueued_with_a_delay_once_due(self):
        from rowfleet.store import open_store

        self.write_module(APP, APP_SOURCE)
        store = open_store(self.config(), create=True)
        self.addCleanup(store.close)
        store.migrate()
        worker = self.launch_logged("worker", "worker", "--app", APP, db=self.database())
        job = store.enqueue(JobSpec(task="stamp", delay=1.0))
        self.assertTrue(job.delayed)
        # Idle, the worker learns of the fallen-due job by its safety poll (1 s by default).
        try:
            done = wait_until(lambda: (found := store.get_job(job.id, "")).state == COMPLETED and found,
                              timeout=DEADLINE, message="the delayed job to complete")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the worker said:\n{self.output(worker)}") from None
        self.assertGreaterEqual(done.result, job.run_at, "its handler started before the job was due")
        self.assertFalse(done.delayed)
        self.stop_all(worker)


class SQLiteDelayedWorkerTest(DelayedWorkerContract, TempDirTestCase):
    SLOW = True  # starts a worker process

    def database(self) -> str:
        return self.db


class PostgresDelayedWorkerTest(PostgresDatabaseCase, DelayedWorkerContract, TempDirTestCase):
    def database(self) -> str:
        return self.url


if __name__ == "__main__":
    unittest.main()
