"""Flow control (``rowfleet.flow``, ``Store.set_limit``, a ``limited`` claim) on every backend:
concurrency per queue and per key, rates per queue and per key, fair share by key, limits
spanning every project, and rows that plain SQL made unusable. The races of processes and
kill -9 of a holder are in the process tests."""

from __future__ import annotations

import json
import unittest

from rowfleet import flow
from rowfleet.claim import Claim
from rowfleet.errors import ConfigError
from rowfleet.job import COMPLETED, JobSpec, Outcome
from pg_harness import PostgresDatabaseCase, rows_read
from support import TempDirTestCase


def claim(queue: str = "api", project: str = "", holder: str = "box:1", **fields) -> Claim:
    return Claim(project, queue, holder, 60.0, limited=True, **fields)


class FlowContract:
    """Every backend must pass these; subclasses provide ``config()`` for their database."""

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()

    def enqueue(self, key=None, queue="api", project="", **spec):
        return self.store.enqueue(JobSpec(task="flow.noop", queue=queue, project=project, concurrency_key=key, **spec))

    def take_all(self, request: Claim) -> list:
        taken = []
        while (job := self.store.claim(request)) is not None:
            taken.append(job)
            self.assertLess(len(taken), 1000)
        return taken

    def test_a_queue_limit_holds_running_jobs_and_a_finish_frees_a_slot(self):
        self.store.set_limit("", "api", concurrency=2)
        for _ in range(5):
            self.enqueue()
        taken = self.take_all(claim())
        self.assertEqual(len(taken), 2)
        self.assertFalse(self.store.has_due(claim()), "has_due saw work in a queue at its limit")
        self.assertEqual([hold.text for hold in self.store.flow_holds("", "api", None)],
                         ["queue api at its limit 2 of 2"])
        after = self.store.finish(taken[0], Outcome(COMPLETED), claim_next=claim())
        self.assertIsNotNone(after, "the finish that freed a slot did not claim the next job")
        self.assertIsNone(self.store.claim(claim()))
        self.assertEqual({job.attempts for job in taken}, {1})  # nothing was claimed and handed back

    def test_a_per_key_limit_passes_over_a_saturated_keys_backlog(self):
        self.store.set_limit("", "api", per_key=1)
        for _ in range(5):
            self.enqueue("customer:42")
        plain = self.enqueue(None)  # a job without a key, within the claim's look into claim order
        for _ in range(40):  # more than that look, all ahead of the other key
            self.enqueue("customer:42")
        other = self.enqueue("customer:7")
        taken = self.take_all(claim())
        self.assertEqual(sorted(job.concurrency_key or "" for job in taken), ["", "customer:42", "customer:7"])
        self.assertIn(other.id, [job.id for job in taken])
        self.assertIn(plain.id, [job.id for job in taken])
        self.assertEqual([hold.text for hold in self.store.flow_holds("", "api", "customer:42")],
                         ["customer:42 at its limit 1 of 1"])

    def test_a_rate_limits_starts_per_window_and_says_when_the_next_start_may_come(self):
        clock = FakeClock(1000.0)
        store = self.store = self.open_store(clock=clock)
        store.set_limit("", "api", rate=flow.Rate(2, 1.0))
        for _ in range(6):
            self.enqueue()
        self.assertEqual(len(self.take_all_from(store)), 2)  # N may go at once
        held = store.flow_holds("", "api", None)
        self.assertEqual([hold.text for hold in held], ["rate 2/s on queue api: next start in 1.0 s"])
        self.assertFalse(store.has_due(claim()))
        clock.now += 0.5
        self.assertEqual(len(self.take_all_from(store)), 0, "a start before the oldest left the window")
        clock.now += 0.5
        self.assertEqual(len(self.take_all_from(store)), 2)
        clock.now += 10.0  # a long idle empties the window: N again, never more
        self.assertEqual(len(self.take_all_from(store)), 2)

    def test_no_window_of_a_rate_ever_holds_more_than_its_count(self):
        clock = FakeClock(1000.0)
        store = self.store = self.open_store(clock=clock)
        store.set_limit("", "api", rate=flow.Rate(3, 1.0))
        for _ in range(40):
            self.enqueue()
        starts = []
        for _ in range(60):
            starts += [clock.now] * len(self.take_all_from(store))
            clock.now += 0.13
        self.assertGreaterEqual(len(starts), 20)
        for at in starts:
            self.assertLessEqual(sum(1 for other in starts if at <= other < at + 1.0), 3, f"window from {at}")

    def take_all_from(self, store) -> list:
        taken = []
        while (job := store.claim(claim())) is not None:
            taken.append(job)
        return taken

    def test_a_key_rate_holds_one_key_and_not_the_others(self):
        clock = FakeClock(1000.0)
        store = self.store = self.open_store(clock=clock)
        store.set_limit("", "api", key_rate=flow.Rate(1, 60.0))
        for key in ("a", "a", "b", "b"):
            self.enqueue(key)
        self.assertEqual(sorted(job.concurrency_key for job in self.take_all_from(store)), ["a", "b"])
        self.assertEqual([hold.text for hold in store.flow_holds("", "api", "a")],
                         ["rate 1/60s for a on queue api: next start in 60.0 s"])

    def test_fair_share_takes_the_key_that_started_least_recently(self):
        self.store.set_limit("", "api", fair=True)
        for _ in range(20):
            self.enqueue("big")
        for key in ("small-1", "small-2"):
            self.enqueue(key)
        order = []
        for _ in range(5):
            job = self.store.claim(claim())
            order.append(job.concurrency_key)
            self.store.finish(job, Outcome(COMPLETED))
        self.assertEqual(sorted(order[:3]), ["big", "small-1", "small-2"], order)
        self.assertEqual(order[3:], ["big", "big"])

    def test_priority_and_run_next_still_come_before_fair_share(self):
        self.store.set_limit("", "api", fair=True)
        self.enqueue("vip")
        self.store.finish(self.store.claim(claim()), Outcome(COMPLETED))  # vip started last: fair share puts it after
        self.enqueue("new")
        urgent = self.enqueue("vip", run_next=True)
        sooner = self.enqueue("vip", priority=-1)
        self.assertEqual([self.store.claim(claim()).id for _ in range(2)], [urgent.id, sooner.id])
        self.assertEqual(self.store.claim(claim()).concurrency_key, "new")

    def test_an_every_project_limit_counts_every_projects_jobs(self):
        self.store.set_limit(flow.ANY, "gpu", concurrency=2)
        for project in ("a", "b", "c"):
            self.enqueue(queue="gpu", project=project)
        taken = [self.store.claim(claim("gpu", project)) for project in ("a", "b", "c")]
        self.assertEqual([job is not None for job in taken], [True, True, False])
        self.assertIn("of every project", self.store.flow_holds("c", "gpu", None)[0].text)
        listed = {(use.limit.project, use.limit.queue): use for use in self.store.limits()}
        self.assertEqual(listed[(flow.ANY, "gpu")].running, 2)

    def test_changing_and_clearing_a_limit(self):
        self.assertEqual(self.store.set_limit("", "api", concurrency=4).rules(), ["at most 4 running"])
        both = self.store.set_limit("", "api", rate=flow.Rate(10, 1.0), by="ops")
        self.assertEqual((both.rules(), both.updated_by), (["at most 4 running", "rate 10/s"], "ops"))
        self.assertEqual(self.store.limited_queues(""), frozenset({"api"}))
        self.assertIsNone(self.store.set_limit("", "api", clear=True))
        self.assertEqual(self.store.limited_queues(""), frozenset())
        for _ in range(3):
            self.enqueue()
        self.assertEqual(len(self.take_all(claim())), 3)  # a claim marked limited with no rows left is plain

    def test_a_limit_row_plain_sql_broke_is_ignored_and_the_queue_runs(self):
        self.store.set_limit("", "api", concurrency=1)
        with self.store.transaction() as tx:
            tx.script("UPDATE flow_limits SET concurrency = -3, rate_count = 5 WHERE queue = 'api';")
        for _ in range(3):
            self.enqueue()
        with self.assertLogs("rowfleet.flow", "ERROR") as said:
            self.assertEqual(len(self.take_all(claim())), 3)
        self.assertIn("is unusable", said.output[0])
        self.assertEqual(self.store.limits(), [])
        self.assertEqual(self.store.set_limit("", "api", concurrency=2).rules(), ["at most 2 running"])

    def test_a_window_plain_sql_made_unreadable_reads_as_empty(self):
        self.store.set_limit("", "api", rate=flow.Rate(1, 3600.0))
        for _ in range(3):
            self.enqueue()
        self.assertEqual(len(self.take_all(claim())), 1)
        with self.store.transaction() as tx:
            tx.script("UPDATE flow_keys SET starts = '{not json', ready_at = NULL;")
        self.assertEqual(len(self.take_all(claim())), 1)  # read as empty, then written whole again
        self.assertEqual(len(self.take_all(claim())), 0)

    def test_a_key_plain_sql_wrote_as_a_number_fails_that_job_and_the_queue_runs_on(self):
        self.store.set_limit("", "api", per_key=1, key_rate=flow.Rate(5, 1.0), fair=True)
        odd = self.enqueue("a")
        self.enqueue("a")
        self.enqueue("b")
        with self.store.transaction() as tx:
            tx.script(f"UPDATE jobs SET concurrency_key = 42 WHERE id = {odd.id};")
        taken = self.take_all(claim())
        self.assertEqual(len(taken), 3, "a held key or a bad one wedged the queue")
        first = next(job for job in taken if job.id == odd.id)
        if first.unreadable is not None:  # SQLite keeps the number; PostgreSQL's text column made it '42'
            self.assertIn("concurrency_key", first.unreadable)

    def test_bad_limits_and_keys_are_refused_before_anything_is_written(self):
        for rules in ({"concurrency": 0}, {"per_key": -1}, {"nosuch": 1}):
            with self.subTest(rules), self.assertRaises(ConfigError):
                self.store.set_limit("", "api", **rules)
        for text in ("10", "0/1", "5/0", "a/b", "5/-1"):
            with self.subTest(text), self.assertRaises(ConfigError):
                flow.Rate.parse("--rate", text)
        with self.assertRaises(ConfigError):
            self.enqueue("")
        self.assertEqual(self.store.limits(), [])

    def test_on_a_gpu_worker_routing_picks_the_kind_and_fair_share_the_key_within_it(self):
        self.store.set_limit("", "gpu", fair=True)
        for _ in range(6):
            self.enqueue("big", queue="gpu", model="llm")
        late = [self.enqueue(key, queue="gpu", model="llm") for key in ("small-1", "small-2")]
        other = self.enqueue("never", queue="gpu", model="sd")  # a key never started, of a model not warm here
        routed = claim("gpu", models=("llm", "sd"), warm_model="llm")
        order = []
        for _ in range(4):
            job = self.store.claim(routed)
            order.append((job.concurrency_key, job.required_model))
            self.store.finish(job, Outcome(COMPLETED))
        self.assertEqual(order[0], ("big", "llm"))  # no key has started yet: claim order
        self.assertEqual(sorted(order[1:3]), [("small-1", "llm"), ("small-2", "llm")], order)
        self.assertEqual(order[3], ("big", "llm"), "fair share took another model than the warm one routing chose")
        self.assertEqual(self.store.get_job(other.id, "").state, "queued")
        self.assertTrue(all(self.store.get_job(job.id, "").state == "completed" for job in late))

    def test_a_routed_claim_keeps_to_per_key_and_queue_limits(self):
        self.store.set_limit("", "gpu", per_key=1, concurrency=3)
        for key in ("a", "a", "b", "b", "c"):
            self.enqueue(key, queue="gpu", model="llm")
        routed = claim("gpu", models=("llm",), warm_model="llm")
        taken = self.take_all(routed)
        self.assertEqual(sorted(job.concurrency_key for job in taken), ["a", "b", "c"])


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class SQLiteFlowTest(FlowContract, TempDirTestCase):
    pass


class PostgresFlowTest(PostgresDatabaseCase, FlowContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""

    def test_the_keyed_pick_reads_a_row_per_key_not_the_held_keys_backlog_before_statistics(self):
        # A backlog enqueued at once, before autovacuum has analyzed the table (kept off so
        # that it cannot): a pick that joined its best jobs back to jobs hashed every row.
        import contextlib

        from rowfleet.sql import queries

        self.pg.psql(self.url, "ALTER TABLE jobs SET (autovacuum_enabled = false)")
        self.store.enqueue_many(JobSpec(task="flow.noop", queue="api", concurrency_key="big"), [None] * 3000)
        for key in ("k1", "k2"):
            self.enqueue(key)
        params = {"project": "", "queue": "api", "now": None, "gpus_free": None, "held": '["big"]', "fair": 1,
                  "limit": flow.UNKEYED_LOOKAHEAD}
        with contextlib.closing(self.caller_connection()) as conn:
            [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries.queries("postgres")["flow_pick"],
                                    params).fetchall()
            conn.rollback()
        self.assertEqual(plan[0]["Plan"]["Actual Rows"], 1)
        self.assertLessEqual(rows_read(plan[0]["Plan"]), 100, json.dumps(plan, indent=1))


if __name__ == "__main__":
    unittest.main()


class SQLiteFlowPlanTest(TempDirTestCase):
    """A held key's backlog is never walked: the keyed pick probes jobs_flow key by key, so
    its work grows with the keys, not with the held key's jobs (EXPLAIN, then counted in
    SQLite's own VM steps)."""

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()
        self.store.set_limit("", "api", per_key=1, fair=True)

    def pick(self, held: list[str]) -> tuple[int | None, int]:
        """The keyed pick's job and how many SQLite VM steps it took (in thousands)."""
        import sqlite3
        import time

        from rowfleet.sql import queries

        conn = sqlite3.connect(self.db)
        self.addCleanup(conn.close)
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        conn.set_progress_handler(count, 1000)
        params = {"project": "", "queue": "api", "now": time.time(), "gpus_free": None, "held": json.dumps(held), "fair": 1,
                  "limit": flow.UNKEYED_LOOKAHEAD}
        row = conn.execute(queries.queries("sqlite")["flow_pick"], params).fetchone()
        return (None if row is None else row[0]), steps[0]

    def backlog(self, jobs: int) -> None:
        self.store.enqueue_many(JobSpec(task="flow.noop", queue="api", concurrency_key="big"), [None] * jobs)

    def test_the_pick_probes_the_key_index_and_scans_no_table(self):
        import sqlite3
        import time

        from rowfleet.sql import queries

        self.backlog(2000)
        for key in ("k1", "k2"):
            self.store.enqueue(JobSpec(task="flow.noop", queue="api", concurrency_key=key))
        conn = sqlite3.connect(self.db)
        self.addCleanup(conn.close)
        conn.execute("ANALYZE")
        params = {"project": "", "queue": "api", "now": time.time(), "gpus_free": None, "held": '["big"]', "fair": 1, "limit": 256}
        plan = "\n".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + queries.queries("sqlite")["flow_pick"],
                                                          params))
        self.assertIn("jobs_flow (project=? AND queue=? AND concurrency_key=?", plan)
        self.assertIn("jobs_flow (project=? AND queue=? AND concurrency_key>?", plan)
        self.assertNotRegex(plan, r"SCAN jobs\b(?! USING)", "a keyed pick read the whole table")

    def test_a_held_keys_backlog_costs_the_pick_nothing(self):
        self.store.enqueue(JobSpec(task="flow.noop", queue="api", concurrency_key="small"))
        self.backlog(500)
        small, few = self.pick(["big"])
        self.backlog(50_000)
        again, many = self.pick(["big"])
        self.assertEqual(small, again)
        self.assertIsNotNone(small)
        self.assertLessEqual(many, few + 2, f"the pick took {few}k VM steps over 500 held jobs, {many}k over 50,500")
