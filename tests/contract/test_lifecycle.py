"""The job-lifecycle contract, against a real database through the Store seam.

``LifecycleContract`` is backend-neutral: a backend's TestCase supplies ``make_store(clock)``.
Time is moved with a fake clock instead of sleeping.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import unittest

import rowfleet
from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.errors import ConfigError, Conflict, LeaseLost, NotFound, SchemaMissing
from rowfleet.sql import queries
from rowfleet.store.jobs import claim_params
from rowfleet.job import CANCELLED, COMPLETED, FAILED, QUEUED, RUNNING, Cancel, JobSpec, Outcome, Retry, \
    decide_outcome
from rowfleet.worker.loop import Worker
from pg_harness import PostgresDatabaseCase, rows_read
from support import TempDirTestCase

HOLDER = "testhost:1"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@rowfleet.task(name="lifecycle.add")
def add(a, b):
    return a + b


@rowfleet.task(name="lifecycle.fail")
def fail():
    raise ValueError("always fails")


@rowfleet.task(name="lifecycle.cancel")
def cancel_me():
    raise Cancel("not wanted any more")


@rowfleet.task(name="lifecycle.retry_later")
def retry_later():
    raise Retry(delay=30)


@rowfleet.task(name="lifecycle.unserialisable")
def unserialisable():
    return {1, 2}


@rowfleet.task(name="lifecycle.whoami")
def whoami(*args):
    job = rowfleet.current_job()
    return {"id": job.id, "args": list(args)}


class LifecycleContract:
    """Every backend must pass these. Subclasses provide ``config()`` naming their database
    and ``caller_connection()``, a driver connection of the application's own. A store from
    ``make_store`` is closed at cleanup when ``owned``, else by whoever takes it."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.store = self.make_store(self.clock)

    def make_store(self, clock, owned=True):
        from rowfleet.store import open_store

        store = open_store(self.config(), create=True, clock=clock)
        if owned:
            self.addCleanup(store.close)
        store.migrate()
        return store

    def enqueue(self, task: str = "lifecycle.add", args=None, **options):
        return self.store.enqueue(JobSpec(task=task, args=args if args is not None else {"a": 1, "b": 2},
                                          **options))

    def claim(self, queue: str = "default", project: str = "", lease: float = 60.0):
        return self.store.claim(Claim(project, queue, HOLDER, lease))

    def kinds(self, job_id: int) -> list[str]:
        return [event.kind for event in self.store.reads.events(job_id)]

    # --- enqueue -----------------------------------------------------------------------

    def test_enqueue_defaults(self):
        job = self.enqueue()
        self.assertEqual((job.state, job.queue, job.project, job.priority, job.run_next, job.attempts,
                          job.max_attempts, job.args), (QUEUED, "default", "", 0, False, 0, 5, {"a": 1, "b": 2}))
        self.assertEqual(job.run_at, self.clock.now)
        self.assertEqual(self.store.get_job(job.id, "").id, job.id)

    def test_idempotency_key_returns_the_existing_job(self):
        first = self.enqueue(key="order-7")
        second = self.enqueue(args={"a": 5, "b": 5}, key="order-7")
        self.assertEqual(first.id, second.id)
        self.assertEqual(second.args, {"a": 1, "b": 2})
        self.assertEqual(len(self.store.reads.list_jobs("")), 1)
        other_project = self.enqueue(key="order-7", project="beta")
        self.assertNotEqual(other_project.id, first.id)

    def test_enqueue_many(self):
        spec = JobSpec(task="lifecycle.add", queue="bulk", priority=3)
        self.assertEqual(self.store.enqueue_many(spec, ({"a": i, "b": 0} for i in range(250))), 250)
        listed = self.store.reads.list_jobs("", limit=1000)
        self.assertEqual(len(listed), 250)
        self.assertEqual({(job.queue, job.priority) for job in listed}, {("bulk", 3)})
        self.assertEqual(sorted(job.args["a"] for job in listed), list(range(250)))
        with self.assertRaises(ConfigError):  # one bad item: nothing is written
            self.store.enqueue_many(spec, [{"a": 1, "b": 1}, {"a": {1, 2}}])
        with self.assertRaises(ConfigError):
            self.store.enqueue_many(JobSpec(task="lifecycle.add", key="k"), [{}])
        self.assertEqual(len(self.store.reads.list_jobs("", limit=1000)), 250)

    # --- a prefetching worker's batch ------------------------------------------------------

    def test_a_batch_claim_takes_up_to_its_limit_in_claim_order_each_with_its_token(self):
        ids = [self.enqueue(args={"a": i, "b": 0}).id for i in range(5)]
        urgent = self.enqueue(run_next=True).id
        other = self.enqueue(queue="elsewhere").id
        taken = self.store.claim_batch(Claim("", "default", HOLDER, 60.0), 4)
        self.assertEqual([job.id for job in taken], [urgent, *ids[:3]])
        self.assertEqual({(job.state, job.attempts, job.lease_token, job.claimed_by) for job in taken},
                         {(RUNNING, 1, 1, HOLDER)})
        rest = self.store.claim_batch(Claim("", "default", HOLDER, 60.0), 4)
        self.assertEqual([job.id for job in rest], ids[3:])
        self.assertEqual(self.store.claim_batch(Claim("", "default", HOLDER, 60.0), 4), [])
        self.assertEqual(self.store.get_job(other, "").state, QUEUED)
        with self.assertRaises(ValueError):
            self.store.claim_batch(Claim("", "default", HOLDER, 60.0, models=("llm",)), 4)

    def test_a_prefetching_finish_hands_back_the_unstarted_and_claims_the_next_batch_in_one_go(self):
        ids = [self.enqueue(args={"a": i, "b": 0}).id for i in range(6)]
        first, *unstarted = self.store.claim_batch(Claim("", "default", HOLDER, 60.0), 3)
        self.store.finish_prefetched(first, Outcome(COMPLETED, result=3), hand_back=unstarted, reason="stopping")
        for job in unstarted:
            back = self.store.get_job(job.id, "")
            self.assertEqual((back.state, back.attempts, back.claimed_by), (QUEUED, 0, None))
            self.assertIn("handed_back", self.kinds(job.id))
        self.assertEqual(self.store.get_job(first.id, "").state, COMPLETED)
        second, *_ = self.store.claim_batch(Claim("", "default", HOLDER, 60.0), 1)
        following = self.store.finish_prefetched(second, Outcome(COMPLETED), claim_next=Claim("", "default", HOLDER, 60.0),
                                                 limit=10)
        self.assertEqual(sorted(job.id for job in following), sorted(set(ids) - {first.id, second.id}))
        with self.assertRaises(LeaseLost):  # a holder whose job has ended writes nothing, hands nothing back
            self.store.finish_prefetched(second, Outcome(FAILED, error="late"), hand_back=following, reason="late")
        self.assertEqual({self.store.get_job(job.id, "").state for job in following}, {RUNNING})

    def test_a_batched_finish_writes_every_outcome_in_one_commit_and_refuses_only_a_stale_one(self):
        ids = [self.enqueue(args={"a": i, "b": 0}).id for i in range(7)]
        first, stale, third, fourth = self.store.claim_batch(Claim("", "default", HOLDER, 60.0), 4)
        self.store.hand_back(stale, "the test takes it away")
        again = self.store.claim(Claim("", "default", "someone-else", 60.0))
        self.assertEqual((again.id, again.lease_token), (stale.id, 2))
        batch = self.store.finish_batch(
            [(first, Outcome(COMPLETED, result=1)), (stale, Outcome(COMPLETED, result="zombie")),
             (third, Outcome(FAILED, error="boom")), (fourth, Outcome(QUEUED, error="again", delay=60.0, event="retried"))],
            claim_next=Claim("", "default", HOLDER, 60.0), limit=10)
        self.assertEqual([lost.job_id for lost in batch.lost], [stale.id])
        self.assertEqual([(job.id, job.state) for job in batch.claimed], [(job_id, RUNNING) for job_id in ids[4:]])
        written = {job_id: self.store.get_job(job_id, "") for job_id in ids[:4]}
        self.assertEqual((written[first.id].state, written[first.id].result), (COMPLETED, 1))
        self.assertEqual((written[third.id].state, written[third.id].error), (FAILED, "boom"))
        self.assertIn("failed", self.kinds(third.id))
        self.assertEqual((written[fourth.id].state, written[fourth.id].error), (QUEUED, "again"))
        self.assertIn("retried", self.kinds(fourth.id))
        self.assertEqual((written[stale.id].state, written[stale.id].lease_token, written[stale.id].claimed_by),
                         (RUNNING, 2, "someone-else"), "a stale holder's outcome was written")
        self.assertEqual(self.store.finish_batch([]).claimed, [])

    # --- claim order -------------------------------------------------------------------

    def test_claim_order_run_next_then_priority_then_creation(self):
        late = self.enqueue(priority=5)
        first_zero = self.enqueue(priority=0)
        second_zero = self.enqueue(priority=0)
        negative = self.enqueue(priority=-3)
        urgent = self.enqueue(priority=9, run_next=True)
        order = [self.claim().id for _ in range(5)]
        self.assertEqual(order, [urgent.id, negative.id, first_zero.id, second_zero.id, late.id])
        self.assertIsNone(self.claim())

    def test_claim_is_scoped_to_project_and_queue(self):
        self.enqueue(queue="gpu")
        self.enqueue(project="beta")
        self.assertIsNone(self.claim())
        self.assertIsNotNone(self.claim(queue="gpu"))
        self.assertIsNotNone(self.claim(project="beta"))

    def test_delay_holds_a_job_until_due(self):
        job = self.enqueue(delay=10)
        self.assertFalse(self.store.has_due(Claim("", "default", HOLDER, 60.0)))
        self.assertIsNone(self.claim())
        self.clock.advance(10)
        self.assertTrue(self.store.has_due(Claim("", "default", HOLDER, 60.0)))
        self.assertEqual(self.claim().id, job.id)

    def test_within_a_priority_jobs_run_in_due_order(self):
        delayed = self.enqueue(delay=10)
        self.clock.advance(1)
        fresh = self.enqueue()
        self.clock.advance(20)
        self.assertEqual([self.claim().id, self.claim().id], [fresh.id, delayed.id])

    def test_claim_stamps_holder_token_and_lease(self):
        self.enqueue()
        job = self.claim(lease=60)
        self.assertEqual((job.state, job.claimed_by, job.lease_token, job.attempts), (RUNNING, HOLDER, 1, 1))
        self.assertEqual(job.lease_expires_at, self.clock.now + 60)
        self.assertEqual(self.kinds(job.id), ["claimed"])

    # --- finish ------------------------------------------------------------------------

    def test_complete_stores_the_result(self):
        self.enqueue()
        job = self.claim()
        self.store.finish(job, Outcome(COMPLETED, result={"sum": 3}, event="completed"))
        done = self.store.get_job(job.id, "")
        self.assertEqual((done.state, done.result), (COMPLETED, {"sum": 3}))
        self.assertEqual(done.finished_at, self.clock.now)
        self.assertEqual(self.kinds(job.id), ["claimed", "completed"])

    def test_finish_claims_the_next_job_in_the_same_transaction(self):
        self.enqueue()
        second = self.enqueue()
        job = self.claim()
        following = self.store.finish(job, Outcome(COMPLETED, event="completed"),
                                      claim_next=Claim("", "default", HOLDER, 60.0))
        self.assertEqual((following.id, following.state), (second.id, RUNNING))

    def test_a_stale_finish_claims_nothing_and_a_repeat_claims_on(self):
        self.enqueue()
        stale = self.claim(lease=10)
        self.clock.advance(11)
        self.store.reclaim_lapsed()
        fresh = self.claim(lease=10)
        waiting = self.enqueue()
        with self.assertRaises(LeaseLost):
            self.store.finish(stale, Outcome(COMPLETED, result=1, event="completed"),
                              claim_next=Claim("", "default", HOLDER, 60.0))
        self.assertEqual(self.store.get_job(waiting.id, "").state, QUEUED)
        done = Outcome(COMPLETED, result=2, event="completed")
        self.store.finish(fresh, done)
        following = self.store.finish(fresh, done, claim_next=Claim("", "default", HOLDER, 60.0))
        self.assertEqual((following.id, following.state), (waiting.id, RUNNING))
        self.assertEqual(self.kinds(fresh.id).count("completed"), 1)

    def test_terminal_transitions_are_idempotent(self):
        self.enqueue()
        job = self.claim()
        outcome = Outcome(COMPLETED, result=1, event="completed")
        self.store.finish(job, outcome)
        self.store.finish(job, outcome)  # the same holder again: no error, nothing new
        self.assertEqual(self.kinds(job.id), ["claimed", "completed"])
        with self.assertRaises(LeaseLost):
            self.store.finish(job, Outcome(FAILED, error="late", event="failed"))

    def test_a_reclaim_as_of_a_moment_takes_only_the_leases_lapsed_by_then(self):
        # A sweep judges its moment, then reclaims: a clock step between the two must not make
        # a lease that was live at the judged moment read lapsed.
        self.enqueue()
        judged = self.clock()
        held = self.claim(lease=10)
        self.clock.advance(600)  # the step
        self.assertEqual(self.store.reclaim_lapsed(as_of=judged), [])
        self.assertEqual(self.store.get_job(held.id, "").state, "running")
        self.assertEqual([r["action"] for r in self.store.reclaim_lapsed(as_of=judged + 11)], ["reclaimed"])

    # --- fencing -----------------------------------------------------------------------

    def test_a_stale_holder_is_fenced_off(self):
        self.enqueue()
        stale = self.claim(lease=10)
        self.clock.advance(11)
        self.assertEqual([r["action"] for r in self.store.reclaim_lapsed()], ["reclaimed"])
        fresh = self.claim(lease=10)
        # A new token; the attempt the lost lease counted was given back.
        self.assertEqual((fresh.id, fresh.lease_token, fresh.attempts), (stale.id, 2, 1))
        before = self.store.get_job(stale.id, "")
        for attempt in (lambda: self.store.finish(stale, Outcome(COMPLETED, result="stale", event="completed")),
                        lambda: self.store.finish(stale, Outcome(FAILED, error="x", event="failed")),
                        lambda: self.store.finish(stale, Outcome(QUEUED, error="x", delay=1, event="retried")),
                        lambda: self.store.renew(stale, 10)):
            with self.assertRaises(LeaseLost) as caught:
                attempt()
            self.assertIn("you no longer hold job", str(caught.exception))
        self.assertEqual(self.store.get_job(stale.id, ""), before)
        self.store.finish(fresh, Outcome(COMPLETED, result="fresh", event="completed"))
        self.assertEqual(self.store.get_job(stale.id, "").result, "fresh")

    def test_renew_extends_the_lease(self):
        self.enqueue()
        job = self.claim(lease=10)
        self.clock.advance(8)
        self.assertEqual(self.store.renew(job, 10).lease_expires_at, self.clock.now + 10)
        self.clock.advance(8)
        self.assertEqual(self.store.reclaim_lapsed(), [])

    # --- reclaim -----------------------------------------------------------------------

    def test_reclaimed_job_runs_ahead_of_fresh_work(self):
        self.enqueue()
        lapsed = self.claim(lease=5)
        fresh = self.enqueue()
        self.clock.advance(6)
        self.store.reclaim_lapsed()
        self.assertEqual(self.claim().id, lapsed.id)
        self.assertEqual(self.claim().id, fresh.id)
        self.assertEqual(self.kinds(lapsed.id), ["claimed", "reclaimed", "claimed"])

    def test_a_lapse_gives_the_attempt_back_and_spends_a_watchdog_retry(self):
        # From the database a holder cut off and a box that died look the same: neither is
        # the job's fault, so even its last attempt runs again.
        self.enqueue(max_attempts=1)
        job = self.claim(lease=5)
        self.clock.advance(6)
        self.assertEqual([r["action"] for r in self.store.reclaim_lapsed()], ["reclaimed"])
        requeued = self.store.get_job(job.id, "")
        self.assertEqual((requeued.state, requeued.attempts, requeued.watchdog_retries), (QUEUED, 0, 1))
        self.assertIn("lease lapsed", requeued.error)

    def test_a_job_whose_holders_keep_losing_their_leases_fails_once_the_watchdog_retries_are_spent(self):
        self.enqueue(max_attempts=1)
        for _ in range(Config().watchdog_retries):
            self.claim(lease=5)
            self.clock.advance(6)
            self.assertEqual([r["action"] for r in self.store.reclaim_lapsed()], ["reclaimed"])
        job = self.claim(lease=5)
        self.clock.advance(6)
        self.assertEqual([r["action"] for r in self.store.reclaim_lapsed()], ["failed"])
        failed = self.store.get_job(job.id, "")
        self.assertEqual(failed.state, FAILED)
        self.assertIn("lease lapsed", failed.error)
        self.assertIn("watchdog retries used up", failed.error)

    # --- retries, cancel, revive -------------------------------------------------------

    def test_failures_retry_with_backoff_then_fail(self):
        self.enqueue(task="lifecycle.fail", args={}, max_attempts=3)
        delays = []
        for attempt in (1, 2):
            job = self.claim()
            outcome = decide_outcome(job, raised=ValueError("boom"), backoff_base=4.0, backoff_max=100.0)
            self.store.finish(job, outcome)
            requeued = self.store.get_job(job.id, "")
            self.assertEqual((requeued.state, requeued.error), (QUEUED, "ValueError: boom"))
            delays.append(requeued.run_at - self.clock.now)
            self.assertIsNone(self.claim(), "a retry must wait for its backoff")
            self.clock.advance(delays[-1])
        self.assertTrue(2.0 <= delays[0] < 4.0 and 4.0 <= delays[1] < 8.0, delays)
        job = self.claim()
        try:
            raise ValueError("boom")
        except ValueError as exc:
            self.store.finish(job, decide_outcome(job, raised=exc))
        failed = self.store.get_job(job.id, "")
        self.assertEqual((failed.state, failed.attempts), (FAILED, 3))
        self.assertIn("Traceback", failed.traceback)
        self.assertEqual(self.kinds(job.id), ["claimed", "retried", "claimed", "retried", "claimed", "failed"])

    def test_cancel(self):
        job = self.enqueue()
        self.assertEqual(self.store.cancel(job.id, "").state, CANCELLED)
        self.assertEqual(self.store.cancel(job.id, "").state, CANCELLED)  # again: a no-op
        self.assertIsNone(self.claim())
        running = self.enqueue()
        self.claim()
        asked = self.store.cancel(running.id, "")  # a running job's worker is asked to stop it
        self.assertEqual((asked.state, asked.cancel_reason), (RUNNING, "cancelled by an operator"))
        done = self.enqueue()
        self.store.finish(self.claim(), Outcome(COMPLETED, result=3))
        with self.assertRaises(Conflict):
            self.store.cancel(done.id, "")
        with self.assertRaises(NotFound):
            self.store.cancel(9999, "")
        with self.assertRaises(NotFound):
            self.store.cancel(job.id, "another-project")

    def test_retry_revives_a_failed_job(self):
        self.enqueue(max_attempts=1)
        job = self.claim()
        self.store.finish(job, Outcome(FAILED, error="bad", event="failed"))
        revived = self.store.retry(job.id, "")
        self.assertEqual((revived.state, revived.max_attempts, revived.error), (QUEUED, 2, None))
        self.assertEqual(self.claim().id, job.id)
        with self.assertRaises(Conflict):
            self.store.retry(job.id, "")

    # --- housekeeping ------------------------------------------------------------------

    def test_prune_removes_old_finished_jobs_only(self):
        self.enqueue()
        done = self.claim()
        self.store.finish(done, Outcome(COMPLETED, event="completed"))
        waiting = self.enqueue()
        self.clock.advance(100)
        self.assertEqual(self.store.prune(retention=50), 1)
        with self.assertRaises(NotFound):
            self.store.get_job(done.id, "")
        self.assertEqual(self.store.reads.events(done.id), [])
        self.assertEqual(self.store.get_job(waiting.id, "").state, QUEUED)

    def test_stale_workers_are_flagged_and_a_beat_clears_it(self):
        self.store.worker_beat("w1", "", "host", "default", 1, None)  # the store's config: a beat every 10 s
        self.clock.advance(31)
        self.assertEqual([w["worker_id"] for w in self.store.flag_stale_workers(known_dead=lambda worker: True)], ["w1"])
        self.assertEqual(self.store.flag_stale_workers(known_dead=lambda worker: True), [])
        self.store.worker_beat("w1", "", "host", "default", 1, None)
        self.assertIsNone(self.store.reads.workers(since=0)[0]["flagged_dead_at"])

    def test_staleness_is_judged_by_the_workers_own_heartbeat_not_the_sweepers(self):
        from rowfleet.store import open_store

        worker_store = open_store(self.config().replace(heartbeat=40), clock=self.clock)
        self.addCleanup(worker_store.close)
        self.enqueue()
        job = self.claim()
        worker_store.worker_beat("w40", "", "host", "default", 4242, job.id)
        self.clock.advance(31)  # past 3 beats of the sweeper's 10 s, inside 3 of the worker's 40 s
        self.assertEqual(self.store.flag_stale_workers(known_dead=lambda worker: True), [])
        self.assertEqual(self.store.get_job(job.id, "").state, RUNNING)
        row = self.store.reads.workers(since=0)[0]
        self.assertEqual((row["heartbeat"], row["lease"]), (40.0, 30.0))
        self.clock.advance(90)  # 121 s: past 3 of its own beats
        self.assertEqual([w["worker_id"] for w in self.store.flag_stale_workers(known_dead=lambda worker: True)], ["w40"])

    def test_project_services_count_live_orchestrators_and_waiting_outbox_events(self):
        self.enqueue()
        self.store.orchestrator_beat("o1", "", "box", 1)  # sweeping every 5 s (the default)
        conn = self.caller_connection()
        self.addCleanup(conn.close)
        conn.execute("INSERT INTO dispatch_events (project, run_id, kind, created_at) VALUES ('', 1, 'x', 100)")
        conn.commit()
        self.clock.advance(14)
        (served,) = self.store.reads.project_services()
        self.assertEqual((served["orchestrators"], served["outbox_waiting"], served["outbox_oldest"]), (1, 1, 100))
        self.clock.advance(2)  # past three of its sweeps: no longer live
        self.assertEqual(self.store.reads.project_services()[0]["orchestrators"], 0)
        self.store.orchestrator_beat("o1", "", "box", 1)
        self.store.orchestrator_stopped("o1")
        self.assertEqual(self.store.reads.project_services()[0]["orchestrators"], 0)

    def test_a_stopped_worker_leaves_the_listing_after_a_while_and_a_live_slow_one_stays(self):
        from rowfleet.liveness import LISTED_FOR
        from rowfleet.store import open_store

        slow = open_store(self.config().replace(heartbeat=400, renew=5), clock=self.clock)
        self.addCleanup(slow.close)
        self.store.worker_beat("gone", "", "box", "default", 1, None)
        self.store.worker_stopped("gone")
        slow.worker_beat("slow", "", "box", "default", 2, None)
        self.clock.advance(LISTED_FOR + 1)
        listed = lambda: [w["worker_id"] for w in self.store.reads.workers(since=self.clock.now - LISTED_FOR)]
        self.assertEqual(listed(), ["slow"])
        self.assertEqual(sorted(w["worker_id"] for w in self.store.reads.workers(since=0)), ["gone", "slow"])

    def test_finishing_a_job_twice_differently_says_it_is_already_finished(self):
        self.enqueue()
        job = self.claim()
        self.store.finish(job, Outcome(COMPLETED, event="completed"))
        with self.assertRaises(LeaseLost) as caught:
            self.store.finish(job, Outcome(FAILED, error="late", event="failed"))
        self.assertIn(f"job {job.id} is already completed", str(caught.exception))

    def test_an_exited_workers_job_is_handed_back_at_once(self):
        self.enqueue()
        self.store.worker_beat("w1", "", "box", "default", 4242, None)
        job = self.store.claim(Claim("", "default", "box:4242", 600.0))
        self.assertEqual(self.store.worker_exited("box", 4242, -9)[0]["action"], "reclaimed")
        back = self.store.get_job(job.id, "")
        self.assertEqual((back.state, back.claimed_by), (QUEUED, None))
        self.assertIn("killed by SIGKILL", back.error)
        lost = [event for event in self.store.reads.events(job.id) if event.kind == "worker_exited"]
        self.assertEqual(lost[0].detail["holder"], "box:4242")  # the holder stays in the events
        row = self.store.reads.workers(since=0)[0]
        self.assertEqual((row["exit_code"], row["current_job"]), (-9, None))
        self.assertEqual(self.store.worker_exited("box", 4242, -9), [])  # nothing left to hand back
        self.assertEqual((back.attempts, back.watchdog_retries), (1, 0), "a kill may be the job's doing")

    def test_a_starting_worker_hands_back_the_jobs_of_its_hosts_gone_workers(self):
        first, second = self.enqueue(), self.enqueue()
        self.store.worker_beat("box:4242:1", "", "box", "default", 4242, None, boot_id="b1", pid_started="100")
        self.store.worker_beat("box:5151:1", "", "box", "default", 5151, None, boot_id="b1", pid_started="200")
        self.store.worker_beat("far:4242:1", "", "far", "default", 4242, None, boot_id="b9", pid_started="100")
        gone = self.store.claim(Claim("", "default", "box:4242", 600.0))
        alive = self.store.claim(Claim("", "default", "box:5151", 600.0))
        asked = []

        def judge(worker):
            asked.append((worker["worker_id"], worker["boot_id"], worker["pid_started"]))
            return "its process is gone" if worker["pid"] == 4242 else None

        done = self.store.hand_back_gone("box", "", "box:7000", judge)
        self.assertEqual([(item["id"], item["action"], item["worker"]) for item in done],
                         [(gone.id, "reclaimed", "box:4242")])
        self.assertEqual(sorted(asked), [("box:4242:1", "b1", "100"), ("box:5151:1", "b1", "200")],
                         "only this host's workers that hold jobs, with what they recorded")
        back = self.store.get_job(gone.id, "")
        self.assertEqual((back.state, back.claimed_by, back.attempts), (QUEUED, None, 1))
        event = [event for event in self.store.reads.events(gone.id) if event.kind == "worker_gone"][0]
        self.assertIn("handed back by worker box:7000 starting on the same host", event.detail["reason"])
        self.assertIn("its process is gone", event.detail["reason"])
        self.assertEqual(self.store.get_job(alive.id, "").state, RUNNING, "a live holder keeps its job")
        flagged = {row["worker_id"]: row["flagged_dead_at"] for row in self.store.reads.workers(since=0)}
        self.assertIsNotNone(flagged["box:4242:1"])
        self.assertIsNone(flagged["box:5151:1"])
        self.assertEqual(self.store.hand_back_gone("box", "", "box:7000", judge), [], "nothing left")
        self.assertEqual({first.id, second.id}, {gone.id, alive.id})

    def test_a_queue_may_put_jobs_lost_with_their_worker_in_the_front_band(self):
        lost = self.enqueue()
        self.store.worker_beat("box:4242:1", "", "box", "default", 4242, None)
        self.assertEqual(self.store.claim(Claim("", "default", "box:4242", 600.0)).id, lost.id)
        urgent = self.enqueue(priority=-5)
        self.store.set_limit("", "default", "op", lost_first=True)
        self.assertEqual(self.store.limited_queues(""), frozenset(), "the choice holds no claim")
        self.store.worker_exited("box", 4242, -9)
        self.assertTrue(self.store.get_job(lost.id, "").run_next)
        self.assertEqual(self.claim().id, lost.id, "ahead of a job of better priority")
        self.assertEqual(self.claim().id, urgent.id)

    def test_by_default_a_lost_job_keeps_its_place(self):
        lost = self.enqueue()
        self.claim(lease=5)
        urgent = self.enqueue(priority=-5)
        self.store.set_limit("*", "default", "op", lost_first=True)
        self.store.set_limit("*", "default", "op", lost_first=False)
        self.clock.advance(6)
        self.store.reclaim_lapsed()
        self.assertFalse(self.store.get_job(lost.id, "").run_next)
        self.assertEqual(self.claim().id, urgent.id)
        self.assertEqual(self.claim(lease=5).id, lost.id)
        self.enqueue(priority=-5)
        self.store.set_limit("*", "default", "op", lost_first=True)  # every project's row counts too
        self.clock.advance(6)
        self.assertEqual([item["id"] for item in self.store.reclaim_lapsed()], [lost.id])
        self.assertEqual(self.claim().id, lost.id)

    def test_a_worker_that_exited_cut_off_has_its_jobs_attempt_given_back(self):
        self.enqueue()
        self.store.worker_beat("w1", "", "box", "default", 4242, None)
        job = self.store.claim(Claim("", "default", "box:4242", 600.0))
        self.assertEqual(self.store.worker_exited("box", 4242, 81)[0]["action"], "reclaimed")
        back = self.store.get_job(job.id, "")
        self.assertEqual((back.state, back.attempts, back.watchdog_retries), (QUEUED, 0, 1))
        self.assertIn("exited 81 (cut off: its job's lease could not be renewed in time)", back.error)

    def test_transactional_enqueue_commits_or_rolls_back_with_the_caller(self):
        conn = self.caller_connection()  # the application's own connection, in a transaction
        self.addCleanup(conn.close)
        conn.execute("CREATE TABLE orders (id integer PRIMARY KEY, item text)")
        conn.commit()
        conn.execute("INSERT INTO orders (id, item) VALUES (1, 'lost')")
        self.store.enqueue(JobSpec(task="lifecycle.add", args={"a": 1, "b": 1}), conn=conn)
        conn.rollback()
        self.assertEqual(conn.execute("SELECT count(*) FROM orders").fetchone()[0], 0)
        self.assertEqual(self.store.reads.list_jobs(""), [])
        conn.execute("INSERT INTO orders (id, item) VALUES (2, 'kept')")
        job = self.store.enqueue(JobSpec(task="lifecycle.add", args={"a": 1, "b": 1}), conn=conn)
        self.assertEqual(self.store.reads.list_jobs(""), [], "not visible before the caller commits")
        conn.commit()
        self.assertEqual(conn.execute("SELECT count(*) FROM orders").fetchone()[0], 1)
        self.assertEqual(self.store.get_job(job.id, "").state, QUEUED)

    # --- the worker, in this process -----------------------------------------------------

    def run_worker_burst(self, **settings):
        config = self.store.config.replace(**settings)
        Worker(config, "default", burst=True,
               store_factory=lambda c: self.make_store(self.clock, owned=False)).run()

    def test_worker_runs_handlers_and_stores_results(self):
        added = self.enqueue(args={"a": 2, "b": 3})
        positional = self.enqueue(task="lifecycle.whoami", args=[1, "x"])
        self.run_worker_burst()
        self.assertEqual(self.store.get_job(added.id, "").result, 5)
        self.assertEqual(self.store.get_job(positional.id, "").result, {"id": positional.id, "args": [1, "x"]})

    def test_worker_outcomes_for_control_signals_and_bad_tasks(self):
        cancelled = self.enqueue(task="lifecycle.cancel", args={})
        retried = self.enqueue(task="lifecycle.retry_later", args={})
        unknown = self.enqueue(task="no_such_module_xyz:fn", args={})
        unserialisable = self.enqueue(task="lifecycle.unserialisable", args={}, max_attempts=1)
        self.run_worker_burst(allow_modules=("no_such_module_xyz",))  # allowed, so looked for, and missing
        self.assertEqual(self.store.get_job(cancelled.id, "").error, "not wanted any more")
        self.assertEqual(self.store.get_job(cancelled.id, "").state, CANCELLED)
        job = self.store.get_job(retried.id, "")
        self.assertEqual(job.state, QUEUED)
        self.assertEqual(job.run_at, self.clock.now + 30)
        job = self.store.get_job(unknown.id, "")
        self.assertEqual((job.state, job.attempts), (FAILED, 1), "an unknown task must not retry")
        self.assertIn("unknown task", job.error)
        job = self.store.get_job(unserialisable.id, "")
        self.assertEqual(job.state, FAILED)
        self.assertIn("not JSON-serialisable", job.error)


class SQLiteLifecycleTest(LifecycleContract, TempDirTestCase):
    def caller_connection(self):
        return sqlite3.connect(self.db)

    def test_a_lapsed_job_whose_counts_are_no_numbers_fails_alone_and_the_sweep_goes_on(self):
        bad = self.enqueue()
        good = self.enqueue()
        self.claim(lease=10)
        self.claim(lease=10)
        with sqlite3.connect(self.db) as conn:  # as any program's plain SQL could leave it
            conn.execute("UPDATE jobs SET max_attempts = 'x' WHERE id = ?", (bad.id,))
        conn.close()
        self.clock.advance(11)
        actions = {item["id"]: item["action"] for item in self.store.reclaim_lapsed()}
        self.assertEqual(actions, {bad.id: FAILED, good.id: "reclaimed"})
        self.assertIn("column max_attempts is not an integer: 'x'", self.store.get_job(bad.id, "").error)

    def test_a_busy_workers_turns_leave_the_busy_timeout_alone_and_reads_wait(self):
        # The write lock is taken by BEGIN's own short retries (busy timeout 0); statements
        # inside a write transaction never wait. So a busy worker's turns set the timeout
        # once, not twice a turn, and a read sets the configured one back before it runs.
        for _ in range(4):
            self.enqueue()
        claim = Claim("", "default", "box:1", 60.0)
        job = self.store.claim(claim)
        pragmas: list[str] = []
        self.store.conn.set_trace_callback(lambda sql: pragmas.append(sql) if "busy_timeout" in sql else None)
        self.addCleanup(self.store.conn.set_trace_callback, None)
        for _ in range(3):
            job = self.store.finish(job, Outcome(COMPLETED), claim_next=claim)
        self.assertEqual(pragmas, [], "no busy_timeout statement in a busy worker's turns")
        self.store.reads.counts()  # a read
        self.assertEqual(pragmas, [f"PRAGMA busy_timeout = {int(self.store.config.busy_timeout * 1000)}"])
        self.assertEqual(self.store.conn.execute("PRAGMA busy_timeout").fetchone()[0],
                         int(self.store.config.busy_timeout * 1000), "reads wait as configured")
        self.store.finish(job, Outcome(COMPLETED))
        self.assertEqual(pragmas[-1], "PRAGMA busy_timeout = 0", "the next BEGIN retries on its own")

    def test_schema_is_required_and_migration_is_idempotent(self):
        from rowfleet.store import open_store

        fresh = os.path.join(self.dir, "fresh.db")
        store = open_store(self.config().replace(db=fresh), create=True)
        self.addCleanup(store.close)
        with self.assertRaises(SchemaMissing):
            store.require_schema()
        latest = queries.latest_version("sqlite")
        self.assertGreaterEqual(latest, 2)
        self.assertEqual(store.migrate(), latest)
        self.assertEqual(store.migrate(), latest)
        self.assertEqual(store.require_schema(), latest)



class PostgresLifecycleTest(PostgresDatabaseCase, LifecycleContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""

    def test_a_batch_claim_reads_the_rows_it_takes_not_the_backlog_before_statistics(self):
        # A backlog enqueued at once, before autovacuum has analyzed the table (kept off here
        # so that it cannot): a batch claim that repeated the claim's conditions on its outer
        # UPDATE walked every queued row of the queue through jobs_state (55 ms a claim).
        self.pg.psql(self.url, "ALTER TABLE jobs SET (autovacuum_enabled = false)")
        self.store.enqueue_many(JobSpec(task="t"), [None] * 3000)
        params = {**claim_params(Claim("", "default", HOLDER, 60.0)), "limit": 10, "now": self.clock.now}
        with contextlib.closing(self.caller_connection()) as conn:
            [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries.queries("postgres")["claim_batch"],
                                    params).fetchall()
            conn.rollback()
        self.assertEqual(plan[0]["Plan"]["Actual Rows"], 10)
        self.assertLessEqual(rows_read(plan[0]["Plan"]), 100, json.dumps(plan, indent=1))

    def test_reaches_the_same_logical_schema_as_sqlite(self):
        from rowfleet.store import open_store

        sqlite_store = open_store(self.config().replace(db=os.path.join(self.dir, "twin.db")), create=True)
        self.addCleanup(sqlite_store.close)
        sqlite_store.migrate()
        sqlite_tables = {name: [row[1] for row in sqlite_store.conn.execute(f"PRAGMA table_info({name})")]
                         for (name,) in sqlite_store.conn.execute(
                             "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        sqlite_indexes = {name for (name,) in sqlite_store.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%'")}
        rows = self.pg.psql(self.url, "SELECT table_name, column_name FROM information_schema.columns "
                                      "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position")
        pg_tables: dict = {}
        for row in rows:
            table, column = (row["table_name"], row["column_name"]) if isinstance(row, dict) else row
            pg_tables.setdefault(table, []).append(column)
        pg_indexes = {row["indexname"] if isinstance(row, dict) else row[0] for row in self.pg.psql(
            self.url, "SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND indexname NOT LIKE '%_pkey'")}
        self.assertEqual(pg_tables, sqlite_tables)
        self.assertEqual(pg_indexes, sqlite_indexes)


if __name__ == "__main__":
    unittest.main()
