"""GPU placement in the store: the claim's routing inputs (rowfleet.claim), the GPU lease
(one model per GPU), model figures and a GPU worker's advert, on SQLite and PostgreSQL.

``GpuClaimContract`` runs on both databases. Jobs are enqueued oldest first with the test
clock moved between them, so that due order is exact.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import unittest

from rowfleet.claim import Claim
from rowfleet.job import COMPLETED, JobSpec, Outcome
from rowfleet.sql import queries
from rowfleet.store.jobs import claim_forms, claim_params
from pg_harness import PostgresDatabaseCase
from support import DEADLINE, TempDirTestCase
from contract.test_lifecycle import Clock

HOLDER = "box:7"


def gpu(**routing) -> Claim:
    return Claim("", "gpu", HOLDER, 60.0, **routing)


class GpuClaimContract:
    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.store = self.open_store(clock=self.clock)

    def job(self, model=None, priority=0, vram_mb=None, run_next=False) -> int:
        self.clock.advance(1.0)
        return self.store.enqueue(JobSpec("gpu.task", queue="gpu", model=model, priority=priority,
                                          vram_mb=vram_mb, run_next=run_next)).id

    def claimed(self, claim: Claim) -> int | None:
        self.assertEqual(self.store.has_due(claim), True, f"has_due said no for {claim}")
        job = self.store.claim(claim)
        return None if job is None else job.id

    def test_a_warm_worker_takes_its_model_first_even_newer_and_at_a_worse_priority(self):
        older = self.job("m2", priority=0)
        newer = self.job("m1", priority=5)
        self.assertEqual(self.claimed(gpu(models=("m1", "m2"), warm_model="m1")), newer)
        self.assertEqual(self.claimed(gpu(models=("m1", "m2"), warm_model="m1")), older)

    def test_a_cold_worker_claims_by_run_next_then_priority_then_due(self):
        late = self.job("m1", priority=1)
        first = self.job("m2", priority=0)
        second = self.job(None, priority=0)
        urgent = self.job("m2", priority=9, run_next=True)
        cold = gpu(models=("m1", "m2"))
        self.assertEqual([self.claimed(cold) for _ in range(4)], [urgent, first, second, late])

    def test_the_warm_first_form_gives_way_to_the_whole_rule(self):
        cold = self.job("m2")
        self.job("m9", run_next=True)  # run-next, of a model the worker does not list
        warm = self.job("m1", priority=5)
        claim = gpu(models=("m1", "m2"), warm_model="m1")
        self.assertEqual(claim_forms("claim", claim), ("claim[warm]", "claim[routed]"))
        # A run-next job in the queue turns the first form off; the whole rule still finds warm work first.
        self.assertEqual(self.claimed(claim), warm)
        # No warm work left: the whole rule's cold pick, in a claim and in a finish-and-claim.
        self.assertEqual(self.claimed(claim), cold)
        again = self.job("m2")
        held = self.store.claim(gpu(models=("m1",)))
        self.assertIsNone(held, "only m9's run-next job and m2's are queued")
        warm = self.job("m1")
        held = self.store.claim(claim)
        self.assertEqual(held.id, warm)
        following = self.store.finish(held, Outcome(COMPLETED, result=None, event="completed"), claim_next=claim)
        self.assertEqual((following.id, following.warm_claim), (again, False))

    def test_a_worker_never_claims_a_model_it_does_not_list(self):
        self.job("m3")
        self.assertFalse(self.store.has_due(gpu(models=("m1",))))
        self.assertIsNone(self.store.claim(gpu(models=("m1",))))
        self.assertTrue(self.store.has_due(gpu(models=("m3",))))

    def test_run_next_cold_beats_warm_and_starved_beats_warm(self):
        warm = self.job("m1")
        urgent = self.job("m2", run_next=True)
        self.assertEqual(self.claimed(gpu(models=("m1", "m2"), warm_model="m1")), urgent)
        starving = self.job("m3")
        self.assertEqual(self.claimed(gpu(models=("m1", "m3"), warm_model="m1", starved=("m3",))), starving)
        self.assertEqual(self.claimed(gpu(models=("m1", "m3"), warm_model="m1")), warm)

    def test_rank_orders_cold_picks(self):
        m1 = self.job("m1")
        m2 = self.job("m2")
        plain = self.job(None)
        self.assertEqual([self.claimed(gpu(models=("m1", "m2"), rank=("m2", "m1"))) for _ in range(3)],
                         [m2, m1, plain])

    def test_only_warm_takes_the_warm_model_plain_jobs_and_starved_models(self):
        cold = self.job("m2")
        starving = self.job("m3")
        plain = self.job(None)
        warm = self.job("m1")
        floor = gpu(models=("m1", "m2", "m3"), warm_model="m1", only_warm=True, starved=("m3",))
        self.assertEqual([self.claimed(floor) for _ in range(3)], [starving, warm, plain])
        self.assertFalse(self.store.has_due(floor))
        self.assertIsNone(self.store.claim(floor))
        self.assertEqual(self.claimed(gpu(models=("m2",))), cold)

    def test_lanes_split_model_jobs_from_plain_ones(self):
        plain = self.job(None)
        model = self.job("m1")
        for claim in (gpu(models=("m1",), lane="model"), gpu(models=("m9", "m1"), lane="model")):
            with self.subTest(claim=claim):
                self.assertEqual(self.claimed(claim), model)
                self.assertFalse(self.store.has_due(claim))
                self.assertIsNone(self.store.claim(claim))
                model = self.job("m1")
        for claim in (gpu(models=("m1",), lane="plain"), gpu(models=(), lane="plain")):
            with self.subTest(claim=claim):
                self.assertEqual(self.claimed(claim), plain)
                plain = self.job(None)

    def test_a_job_too_big_for_the_free_memory_is_left(self):
        big = self.job("m1", vram_mb=20_000)
        unknown = self.job("m1")
        small = self.job("m1", vram_mb=8_000)
        for claim in (gpu(models=("m1",), vram_free_mb=10_000), gpu(models=("m9", "m1"), vram_free_mb=10_000)):
            with self.subTest(claim=claim):
                self.assertEqual([self.claimed(claim), self.claimed(claim)], [unknown, small])
                self.assertFalse(self.store.has_due(claim))
                unknown, small = self.job("m1"), self.job("m1", vram_mb=8_000)
        self.assertEqual(self.claimed(gpu(models=("m1",), vram_free_mb=20_000)), big)

    def test_newest_first_takes_the_newest_due_job_within_run_next_and_priority(self):
        better = self.job("m1", priority=-1)
        old, new = self.job("m1"), self.job("m1")
        plain_old, plain_new = self.job(None, priority=3), self.job(None, priority=3)
        for claim in (gpu(models=("m1",), newest_first=True), gpu(models=("m9", "m1"), newest_first=True)):
            with self.subTest(claim=claim):
                self.assertEqual([self.claimed(claim) for _ in range(5)], [better, new, old, plain_new, plain_old])
                better, old, new = self.job("m1", priority=-1), self.job("m1"), self.job("m1")
                plain_old, plain_new = self.job(None, priority=3), self.job(None, priority=3)

    def test_a_gpu_locked_to_another_model_takes_only_that_model_and_plain_jobs(self):
        self.job("m2")
        locked = self.job("m1")
        plain = self.job(None)
        claim = gpu(models=("m1", "m2"), warm_model="m2", gpu_locked_to="m1")
        self.assertEqual([self.claimed(claim), self.claimed(claim)], [locked, plain])
        self.assertFalse(self.store.has_due(claim))

    def test_warm_claim_is_recorded(self):
        cold, warm = self.job("m2"), self.job("m1")
        plain = self.job(None)
        claim = gpu(models=("m1", "m2"), warm_model="m1")
        taken = [self.store.claim(claim) for _ in range(3)]
        self.assertEqual([(job.id, job.warm_claim) for job in taken], [(warm, True), (cold, False), (plain, False)])
        self.assertTrue(self.store.get_job(warm, "").warm_claim)

    def test_no_models_is_the_plain_claim_as_before(self):
        ids = [self.job("m1", priority=2), self.job(None, priority=1), self.job("m9", run_next=True), self.job(None)]
        plain = gpu()
        self.assertEqual((claim_params(plain)["gate"], claim_forms("claim", plain)), (None, ("claim",)))
        for routing in ({"lane": "model"}, {"vram_free_mb": 100}, {"newest_first": True}):
            with self.subTest(routing=routing), self.assertRaisesRegex(ValueError, "needs models"):
                gpu(**routing)  # every routing input needs a gate: a claim without one is the plain claim
        self.assertEqual([self.claimed(plain) for _ in range(4)], [ids[2], ids[3], ids[1], ids[0]])

    def test_finish_and_claim_uses_the_same_rules(self):
        first = self.job(None)
        cold, warm = self.job("m2"), self.job("m1")
        claim = gpu(models=("m1", "m2"), warm_model="m1")
        held = self.store.claim(claim)
        self.assertEqual(held.id, warm)
        following = self.store.finish(held, Outcome(COMPLETED, result=None, event="completed"), claim_next=claim)
        self.assertEqual((following.id, following.warm_claim), (first, False))
        following = self.store.finish(following, Outcome(COMPLETED, result=None, event="completed"),
                                      claim_next=gpu(models=("m1",)))
        self.assertIsNone(following, "m2 was claimed by a worker that does not list it")

    def test_has_due_agrees_with_the_claim_for_every_case(self):
        claims = [gpu(), gpu(models=()), gpu(models=("m1",)), gpu(models=("m2",), lane="model"),
                  gpu(models=("m1", "m2"), lane="plain"), gpu(models=("m1", "m2"), warm_model="m1", only_warm=True),
                  gpu(models=("m2",), vram_free_mb=100), gpu(models=("m1", "m2"), gpu_locked_to="m1"),
                  gpu(models=("m1", "m2", "m3"), lane="model"), gpu(models=("m1", "m2"), vram_free_mb=100),
                  gpu(models=("m3",), newest_first=True), gpu(models=("m1", "m2"), newest_first=True, lane="plain")]
        layouts = {"empty": [], "plain": [(None, None)], "m2 big": [("m2", 500)], "m1": [("m1", None)],
                   "m2 small and plain big": [("m2", 50), (None, 500)]}
        for name, layout in layouts.items():
            for claim in claims:
                with self.subTest(layout=name, claim=claim):
                    for model, vram in layout:
                        self.job(model, vram_mb=vram)
                    due = self.store.has_due(claim)
                    job = self.store.claim(claim)
                    self.assertEqual(due, job is not None)
                    self.clear()

    def clear(self) -> None:
        for job in self.store.reads.list_jobs("", state="queued", queue="gpu", limit=1000):
            self.store.cancel(job.id, "")
        for job in self.store.reads.list_jobs("", state="running", queue="gpu", limit=1000):
            self.store.finish(job, Outcome(COMPLETED, result=None, event="completed"))

    def test_a_delayed_job_counts_for_has_due_only_if_the_claim_may_take_it(self):
        self.store.enqueue(JobSpec("gpu.task", queue="gpu", model="m3", delay=5.0))
        self.clock.advance(6.0)
        self.assertFalse(self.store.has_due(gpu(models=("m1",))))
        self.assertTrue(self.store.has_due(gpu(models=("m3",))))
        self.assertIsNotNone(self.store.claim(gpu(models=("m3",))))

    # --- the GPU lease ------------------------------------------------------------------

    def second_store(self):
        from rowfleet.store import open_store

        other = open_store(self.config(), clock=self.clock)
        self.addCleanup(other.close)
        return other

    def test_one_model_per_gpu_shared_by_its_holders_across_two_stores(self):
        other = self.second_store()
        first = self.store.acquire_gpu("box", 0, "m1", "box:1", 30.0)
        self.assertEqual((first.model, first.holder, first.token), ("m1", "box:1", 1))
        shared = other.acquire_gpu("box", 0, "m1", "box:2", 30.0)
        self.assertEqual((shared.model, shared.token), ("m1", 1))
        self.assertIsNone(other.acquire_gpu("box", 0, "m2", "box:3", 30.0), "another model took a live lease")
        self.assertEqual(self.store.acquire_gpu("box", 1, "m2", "box:3", 30.0).token, 1, "GPUs are leased apart")
        self.clock.advance(31.0)
        taken = other.acquire_gpu("box", 0, "m2", "box:3", 30.0)
        self.assertEqual((taken.model, taken.holder, taken.token), ("m2", "box:3", 2))
        self.assertIsNone(self.store.renew_gpu(first, "box:1", 30.0), "a stale lease was renewed")
        renewed = other.renew_gpu(taken, "box:3", 60.0)
        self.assertEqual((renewed.token, renewed.expires_at), (2, taken.expires_at + 30.0))
        self.assertTrue(other.release_gpu(renewed, "box:3"))
        self.assertEqual(self.store.acquire_gpu("box", 0, "m1", "box:1", 30.0).token, 3, "a token was reused")
        self.assertEqual(self.store.gpu_lease("box", 0).model, "m1")
        self.assertIsNone(self.store.gpu_lease("box", 7))

    def test_model_stats_upsert(self):
        self.store.record_model_load("", "m1", 12.5, 9000, ok=True)
        self.store.record_model_load("", "m1", None, None, ok=False)
        self.store.record_model_load("", "m1", 10.0, 9100, ok=True)
        self.store.record_model_load("other", "m1", 1.0, 1, ok=True)
        stats, = self.store.model_stats("")
        self.assertEqual({key: stats[key] for key in ("model", "load_seconds", "footprint_mb", "loads", "failed_loads")},
                         {"model": "m1", "load_seconds": 10.0, "footprint_mb": 9100, "loads": 2, "failed_loads": 1})
        self.assertIsNotNone(stats["last_failed_at"])
        self.assertEqual((stats["run_seconds"], stats["runs"]), (None, 0))

    def test_model_runs_keep_a_moving_mean(self):
        self.store.record_model_load("", "m1", 12.5, 9000, ok=True)
        self.store.record_model_run("", "m1", 10.0)
        self.store.record_model_run("", "m1", 20.0)  # a fifth of the way: 12
        self.store.record_model_run("", "m2", 3.0)  # a model never loaded here (another box loaded it)
        stats = {row["model"]: row for row in self.store.model_stats("")}
        self.assertEqual({model: (round(row["run_seconds"], 6), row["runs"]) for model, row in stats.items()},
                         {"m1": (12.0, 2), "m2": (3.0, 1)})
        self.assertEqual((stats["m1"]["loads"], stats["m1"]["load_seconds"]), (1, 12.5), "the load figures stay")

    def test_worker_beat_with_and_without_the_gpu_advert(self):
        self.store.worker_beat("box:1:0", "", "box", "gpu", 1, None)
        self.store.worker_beat("box:2:0", "", "box", "gpu", 2, None, models=("m1", "m2"), gpu_index=0,
                               vram_total_mb=81920, vram_free_mb=4096, warm_model="m1", warm_since=5.0,
                               loading=None, lane="model", host_priority=3)
        rows = {row["pid"]: row for row in self.store.reads.workers(since=0.0)}
        self.assertEqual([rows[1][key] for key in ("models", "gpu_index", "warm_model", "lane")], [None] * 4)
        self.assertEqual([rows[2][key] for key in ("models", "gpu_index", "vram_free_mb", "warm_model", "lane",
                                                   "host_priority")],
                         ['["m1","m2"]', 0, 4096, "m1", "model", 3])
        self.store.worker_beat("box:2:0", "", "box", "gpu", 2, None)
        self.assertIsNone({row["pid"]: row for row in self.store.reads.workers(since=0.0)}[2]["models"])


class SQLiteGpuClaimTest(GpuClaimContract, TempDirTestCase):
    def plan(self, claim: Claim, form: int = -1) -> str:
        """The plan of one of the claim's forms (the last, which decides the whole rule, unless told)."""
        conn = sqlite3.connect(self.db)
        self.addCleanup(conn.close)
        conn.execute("ANALYZE")
        params = {**claim_params(claim), "now": self.clock.now}
        return "\n".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + queries.queries("sqlite")[
            claim_forms("claim", claim)[form]], params))

    def test_the_claim_probes_indexes_and_sorts_only_the_few_it_found(self):
        for model in (None, "m1", "m2", "m3"):
            self.store.enqueue_many(JobSpec("gpu.task", queue="gpu", model=model), [None] * 200)
        routed = self.plan(gpu(models=("m1", "m2"), warm_model="m1", rank=("m2",)))
        self.assertIn("jobs_model (project=? AND queue=? AND required_model=?", routed)
        self.assertNotRegex(routed, r"SCAN (jobs|c)\b", "a claim read the whole table")
        self.assertNotIn("AUTOMATIC", routed)
        # The one temp b-tree sorts the outer few (one per kind of job), each found by its rowid.
        self.assertEqual(routed.count("USE TEMP B-TREE"), 1)
        self.assertIn("SEARCH best USING INTEGER PRIMARY KEY", routed)
        # A warm box's first form: a look at jobs_claim's first entry and one probe of its model.
        warm = self.plan(gpu(models=("m1", "m2"), warm_model="m1", rank=("m2",)), form=0)
        self.assertIn("jobs_model (project=? AND queue=? AND required_model=?", warm)
        self.assertIn("jobs_claim", warm)
        self.assertNotIn("TEMP B-TREE", warm)
        # A plain claim is one walk of jobs_claim, with no sort at all.
        plain = self.plan(gpu())
        self.assertIn("jobs_claim", plain)
        self.assertNotIn("TEMP B-TREE", plain)

    def test_two_processes_share_one_model_and_refuse_another(self):
        self.store.migrate()
        source = ("import sys; from rowfleet.config import Config; from rowfleet.store import open_store\n"
                  "store = open_store(Config(db=sys.argv[1]))\n"
                  "lease = store.acquire_gpu('box', 0, sys.argv[2], sys.argv[3], 300.0)\n"
                  "print('none' if lease is None else f'{lease.model}:{lease.token}')")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), "src"]))}

        def acquire(model: str, holder: str) -> str:
            done = subprocess.run([sys.executable, "-c", source, self.db, model, holder], capture_output=True,
                                  text=True, timeout=DEADLINE, env=env, check=True)
            return done.stdout.strip()

        self.assertEqual(acquire("m1", "box:1"), "m1:1")
        self.assertEqual(acquire("m1", "box:2"), "m1:1")
        self.assertEqual(acquire("m2", "box:3"), "none")


class PostgresGpuClaimTest(PostgresDatabaseCase, GpuClaimContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""


if __name__ == "__main__":
    unittest.main()
