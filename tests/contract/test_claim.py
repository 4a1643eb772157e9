"""The claim contract: what a claim, a finish that claims the next job, and a plain claim
write, compared across backends event by event.

A claim and a completion write no event rows: the job's row holds its current attempt
(``store.reads.events`` gives its claim and completion from there), and each dialect's
``jobs_attempt_history`` trigger writes an attempt's events once something writes over it.
PostgreSQL finishes and claims in one statement (``job_finish_and_claim``), SQLite in one
transaction. ``ClaimContract`` holds one expected list of events that both backends must
give, so the two cannot drift apart. Also runs the doctests of ``rowfleet.claim`` and
``rowfleet.store.jobs``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import unittest

from rowfleet.claim import Claim
from rowfleet.job import COMPLETED, FAILED, QUEUED, RUNNING, JobSpec, Outcome
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase
from contract.test_lifecycle import Clock

HOLDER = "box:7"
TURN = Claim("", "default", HOLDER, 60.0)


class ClaimContract:
    """Every backend must pass these. Subclasses provide ``config()`` naming their database."""

    # (job, seconds after the start, kind, detail) for each event, job by job: one literal
    # for every backend. The times are the test clock's, so every value here is exact.
    EXPECTED = [
        ("first", 0.0, "claimed", {"token": 1, "holder": HOLDER, "attempt": 1}),
        ("first", 0.0, "completed", {"token": 1, "attempt": 1}),
        ("second", 0.0, "claimed", {"token": 1, "holder": HOLDER, "attempt": 1}),
        ("second", 0.0, "retried", {"token": 1, "attempt": 1, "error": "try again", "delay": 5.0}),
        ("second", 5.0, "claimed", {"token": 2, "holder": HOLDER, "attempt": 2}),
        ("second", 5.0, "failed", {"token": 2, "attempt": 2, "error": "bad"}),
        ("third", 0.0, "claimed", {"token": 1, "holder": HOLDER, "attempt": 1}),
        ("third", 5.0, "completed", {"token": 1, "attempt": 1}),
    ]

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.store = self.open_store(clock=self.clock)

    def enqueue(self) -> int:
        return self.store.enqueue(JobSpec(task="claim.noop", args={})).id

    def turns(self) -> dict[str, int]:
        """A worker's turns: claim, finish-and-claim (terminal, then a retry), claim while
        nothing is due and once it is, finish-and-claim with nothing left, a plain finish."""
        ids = {"first": self.enqueue(), "second": self.enqueue(), "third": self.enqueue()}
        first = self.store.claim(TURN)
        second = self.store.finish(first, Outcome(COMPLETED, result=1, event="completed"), claim_next=TURN)
        third = self.store.finish(second, Outcome(QUEUED, error="try again", delay=5.0, event="retried"),
                                  claim_next=TURN)
        self.assertEqual([first.id, second.id, third.id], [ids["first"], ids["second"], ids["third"]])
        self.assertFalse(self.store.has_due(TURN))
        self.assertIsNone(self.store.claim(TURN), "a retry was claimed before its delay")
        self.clock.advance(5.0)
        self.assertTrue(self.store.has_due(TURN))
        again = self.store.claim(TURN)
        self.assertEqual((again.id, again.state, again.attempts), (ids["second"], RUNNING, 2))
        self.assertIsNone(self.store.finish(again, Outcome(FAILED, error="bad", event="failed"), claim_next=TURN))
        self.assertIsNone(self.store.finish(third, Outcome(COMPLETED, result=3, event="completed")))
        return ids

    def test_claims_and_finishes_write_the_expected_event_rows(self):
        start = self.clock.now
        ids = self.turns()
        written = [(name, event.at - start, event.kind, event.detail)
                   for name, job_id in ids.items() for event in self.store.reads.events(job_id)]
        self.assertEqual([(kind, sorted(detail)) for _, _, kind, detail in written],
                         [(kind, sorted(detail)) for _, _, kind, detail in self.EXPECTED])
        self.assertEqual(written, self.EXPECTED)

    def test_the_happy_path_writes_no_event_row_and_every_attempt_stays_in_the_history(self):
        ids = [self.enqueue() for _ in range(3)]
        job = self.store.claim(TURN)
        for _ in range(2):
            job = self.store.finish(job, Outcome(COMPLETED, result=None), claim_next=TURN)
        self.assertEqual([self.rows(job_id) for job_id in ids], [[], [], []], "a claim or a completion wrote a row")
        self.assertEqual([self.kinds(job_id) for job_id in ids],
                         [["claimed", "completed"], ["claimed", "completed"], ["claimed"]])
        # A database from before this version logged the claim as it happened: that row is
        # the claim's event, and no second one is written when the attempt is written over.
        self.store.record_event(job.id, "claimed", token=job.lease_token, holder=job.claimed_by, attempt=1)
        self.store.finish(job, Outcome(QUEUED, error="again", delay=0.0, event="retried"))
        self.clock.advance(1.0)
        again = self.store.claim(TURN)
        self.store.hand_back(again, "not this GPU")  # the attempt given back: its claim is logged
        self.clock.advance(1.0)
        last = self.store.claim(TURN)
        self.store.finish(last, Outcome(COMPLETED, result=None))
        self.assertEqual(self.rows(job.id), ["claimed", "retried", "claimed", "handed_back"])
        self.assertEqual(self.kinds(job.id), ["claimed", "retried", "claimed", "handed_back", "claimed", "completed"])
        self.assertEqual([(e.detail["token"], e.detail["attempt"]) for e in self.store.reads.events(job.id)
                          if e.kind == "claimed"], [(1, 1), (2, 2), (3, 2)])

    def rows(self, job_id: int) -> list[str]:
        """The kinds of a job's rows of ``job_events``, as stored."""
        return [row["kind"] for row in self.store.reader().all("events", job_id=job_id)]

    def kinds(self, job_id: int) -> list[str]:
        return [event.kind for event in self.store.reads.events(job_id)]

    def test_the_claimed_event_says_the_claimed_jobs_token_holder_and_attempt(self):
        # Made from the row while the attempt is on it, and by the database's trigger once a
        # retry writes it over: both must say the same of the claim.
        self.enqueue()
        self.enqueue()
        first = self.store.claim(TURN)
        second = self.store.finish(first, Outcome(COMPLETED, result=None, event="completed"), claim_next=TURN)
        self.store.finish(second, Outcome(QUEUED, error="again", delay=0.0))
        self.clock.advance(1.0)
        third = self.store.claim(TURN)
        self.assertEqual(third.id, second.id)
        for job in (first, second, third):
            with self.subTest(job=job.id, token=job.lease_token):
                claimed = [event.detail for event in self.store.reads.events(job.id) if event.kind == "claimed"
                           and event.detail["token"] == job.lease_token]
                self.assertEqual(claimed, [{"token": job.lease_token, "holder": job.claimed_by,
                                            "attempt": job.attempts}])

    def test_a_job_keeps_the_host_it_ran_on_when_requeued_and_when_it_ends(self):
        job_id = self.enqueue()
        self.assertIsNone(self.store.get_job(job_id, "").host, "a job no worker claimed ran nowhere")
        claimed = self.store.claim(TURN)
        self.assertEqual(claimed.host, "box")
        self.store.finish(claimed, Outcome(QUEUED, error="again", delay=0.0, event="retried"))
        requeued = self.store.get_job(job_id, "")
        self.assertEqual((requeued.state, requeued.claimed_by, requeued.host), (QUEUED, None, "box"))
        other = self.store.claim(Claim("", "default", "gpu-box-2:99", 60.0))
        self.store.finish(other, Outcome(COMPLETED, result=None, event="completed"))
        self.assertEqual(self.store.get_job(job_id, "").host, "gpu-box-2", "the host of its last claim")

    def test_a_claim_of_another_queue_or_project_finds_nothing(self):
        self.enqueue()
        for other in (Claim("", "gpu", HOLDER, 60.0), Claim("beta", "default", HOLDER, 60.0)):
            with self.subTest(claim=other):
                self.assertFalse(self.store.has_due(other))
                self.assertIsNone(self.store.claim(other))
        self.assertTrue(self.store.has_due(TURN))


class SQLiteClaimTest(ClaimContract, TempDirTestCase):
    def test_an_attempt_whose_fields_plain_sql_made_blobs_is_still_written_over(self):
        # SQLite holds whatever plain SQL writes, JSON none of a blob: the sweep that writes
        # over such an attempt (and logs it) must go on all the same, the blob shown as text
        # where rowfleet writes the event and as null where the database's trigger does.
        now = self.clock.now
        with contextlib.closing(sqlite3.connect(self.store.config.db)) as conn, conn:
            job_id = conn.execute(
                "INSERT INTO jobs (project, queue, task, args, state, attempts, max_attempts, lease_token, "
                "claimed_by, started_at, lease_expires_at, run_at, created_at, updated_at) "
                "VALUES ('', 'default', 'claim.noop', '{}', 'running', 1, 5, 1, x'00', ?, ?, ?, ?, ?)",
                (now, now + 1.0, now, now, now)).lastrowid
        self.clock.advance(2.0)
        self.assertEqual([item["action"] for item in self.store.reclaim_lapsed()], ["reclaimed"])
        self.assertEqual([(e.kind, e.detail) for e in self.store.reads.events(job_id)],
                         [("claimed", {"token": 1, "holder": None, "attempt": 1}),
                          ("reclaimed", {"token": 1, "holder": "\x00", "attempt": 1})])


class PostgresClaimTest(PostgresDatabaseCase, ClaimContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""


if __name__ == "__main__":
    unittest.main()
