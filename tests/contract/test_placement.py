"""Seeing the GPU fleet: the orchestrator's sweep flags queued model jobs that no GPU worker
of their queue can hold (each reason of ``routing.Unplaceable``), clears the flag when a
fitting worker appears, writes one event per transition, and with
``fail_unplaceable_after`` fails jobs unplaceable too long; the models' read model
(``snapshot.models``) and the status count, on SQLite and PostgreSQL (``PlacementContract``).
What ``job``, ``jobs``, ``status`` and ``models`` print, and their refusals, on SQLite.

Time is the test's clock, moved by hand; workers are heartbeat rows written with the GPU
advert keywords of ``Store.worker_beat``.
"""

from __future__ import annotations

import json
import unittest

from rowfleet.claim import Claim
from rowfleet.job import COMPLETED, FAILED, QUEUED, JobSpec, Outcome
from rowfleet.services.orchestrator import Orchestrator
from rowfleet.views import snapshot
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase
from contract.test_lifecycle import Clock

LLM = "llm"


class PlacementContract:
    """Every backend must pass these. Subclasses provide ``config()`` naming their database."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.store = self.open_store(clock=self.clock)

    def sweeper(self, after: float | None = None) -> Orchestrator:
        return Orchestrator(self.store, self.config(), fail_unplaceable_after=after)

    def job(self, vram_mb: int | None = None, model: str = LLM, queue: str = "gpu") -> int:
        self.clock.advance(1.0)
        return self.store.enqueue(JobSpec("gpu.task", queue=queue, model=model, vram_mb=vram_mb)).id

    def box(self, worker_id: str = "box:1", vram_total_mb: int = 24_000, models: tuple[str, ...] = (LLM,),
            state: str = "serving", queue: str = "gpu", **advert) -> None:
        self.store.worker_beat(worker_id, "", "box", queue, int(worker_id.split(":")[1]), None, state,
                               models=models, gpu_index=0, vram_total_mb=vram_total_mb, **advert)

    def flags(self, job_id: int) -> tuple[str | None, list[tuple[str, dict]]]:
        """The job's flag and its placement events."""
        job = self.store.get_job(job_id, "")
        return job.unplaceable, [(e.kind, e.detail) for e in self.store.reads.events(job_id)
                                 if e.kind in ("unplaceable", "placeable")]

    def test_each_reason_is_flagged_once_and_cleared_when_a_fitting_worker_appears(self):
        def good_load() -> None:
            self.clock.advance(1)
            self.store.record_model_load("", LLM, 9.0, 8000, ok=True)

        cases = (
            ("model_unknown", lambda: None, None, lambda: self.box("box:1")),
            ("no_box_big_enough", lambda: self.box("box:2", vram_total_mb=16_000), 20_000,
             lambda: self.box("box:3", vram_total_mb=40_000)),
            ("load_failing", lambda: (self.box("box:4"), [self.store.record_model_load("", LLM, None, None, ok=False)
                                                          for _ in range(3)]), None, good_load),
            ("fitting_boxes_off", lambda: self.box("box:5", state="parked"), None, lambda: self.box("box:5")),
        )
        for number, (reason, before, vram_mb, fix) in enumerate(cases):
            with self.subTest(reason=reason):
                for worker in range(1, 2 * number + 1):  # the last cases' workers leave the view
                    self.store.worker_stopped(f"box:{worker}")
                self.clock.advance(700)  # past liveness.LISTED_FOR: out of the listing
                before()
                job = self.job(vram_mb)
                sweep = self.sweeper().run_once()
                self.assertEqual((sweep.unplaceable, sweep.placeable), (1, 0))
                self.assertEqual(self.flags(job), (reason, [("unplaceable", {"reason": reason})]))
                self.assertEqual(self.store.get_job(job, "").unplaceable_at, self.clock.now)
                self.assertEqual(self.sweeper().run_once().unplaceable, 0, "one event per transition")
                fix()
                sweep = self.sweeper().run_once()
                self.assertEqual((sweep.unplaceable, sweep.placeable), (0, 1))
                self.assertEqual(self.flags(job), (None, [("unplaceable", {"reason": reason}),
                                                          ("placeable", {"was": reason})]))
                self.assertIsNone(self.store.get_job(job, "").unplaceable_at)
                self.assertEqual(self.sweeper().run_once().placeable, 0)
                self.store.cancel(job, "")

    def test_a_new_reason_is_one_event_and_keeps_the_start_of_the_stretch(self):
        job = self.job()
        self.sweeper().run_once()
        since = self.store.get_job(job, "").unplaceable_at
        self.clock.advance(5)
        self.box(state="draining")
        self.assertEqual(self.sweeper().run_once().unplaceable, 1)
        self.assertEqual(self.flags(job), ("fitting_boxes_off", [
            ("unplaceable", {"reason": "model_unknown"}),
            ("unplaceable", {"reason": "fitting_boxes_off", "was": "model_unknown"})]))
        self.assertEqual(self.store.get_job(job, "").unplaceable_at, since)

    def test_a_dead_worker_is_an_off_box_and_a_worker_of_another_queue_is_none(self):
        self.box(queue="other")
        job = self.job()
        self.sweeper().run_once()
        self.assertEqual(self.flags(job)[0], "model_unknown")
        self.box("box:3")
        self.clock.advance(31)  # three of its 10 s beats missed: the sweep flags it dead
        self.sweeper().run_once()
        self.assertEqual(self.flags(job)[0], "fitting_boxes_off")

    def test_a_flagged_job_stays_claimable_and_the_next_sweep_clears_it(self):
        job = self.job()
        self.sweeper().run_once()
        taken = self.store.claim(Claim("", "gpu", "box:9", 60.0, models=(LLM,)))
        self.assertEqual((taken.id, taken.unplaceable), (job, "model_unknown"))
        self.assertEqual(self.sweeper().run_once().placeable, 1)
        self.assertEqual(self.flags(job), (None, [("unplaceable", {"reason": "model_unknown"}),
                                                  ("placeable", {"was": "model_unknown"})]))

    def test_a_backlog_is_flagged_from_one_grouped_read_in_one_sweep(self):
        self.store.enqueue_many(JobSpec("gpu.task", queue="gpu", model=LLM), [None] * 40)
        self.store.enqueue_many(JobSpec("gpu.task", queue="gpu", model=LLM, vram_mb=90_000), [None] * 3)
        self.store.enqueue_many(JobSpec("gpu.task", queue="gpu"), [None] * 5)  # no model: not placement's
        self.box(vram_total_mb=80_000)
        groups = self.store.reads.model_demand("")
        self.assertEqual([(g["vram_mb"], g["state"], g["n"]) for g in groups], [(None, QUEUED, 40), (90_000, QUEUED, 3)]
                         if groups[0]["vram_mb"] is None else [(90_000, QUEUED, 3), (None, QUEUED, 40)])
        self.assertEqual(self.sweeper().run_once().unplaceable, 3)
        flagged = [j.unplaceable for j in self.store.reads.list_jobs("", limit=100)]
        self.assertEqual((flagged.count("no_box_big_enough"), flagged.count(None)), (3, 45))

    def test_fail_unplaceable_after_fails_it_naming_the_reason(self):
        job = self.job()
        never = self.job(model="sd")
        self.box(models=("sd",))
        self.sweeper(after=60).run_once()
        self.clock.advance(60)
        self.box(models=("sd",))
        self.assertEqual(self.sweeper(after=60).run_once().unplaceable_failed, 0, "not longer than 60 s yet")
        self.clock.advance(1)
        self.box(models=("sd",))
        self.assertEqual(self.sweeper().run_once().unplaceable_failed, 0, "default: never")
        self.assertEqual(self.sweeper(after=60).run_once().unplaceable_failed, 1)
        failed = self.store.get_job(job, "")
        self.assertEqual(failed.state, FAILED)
        self.assertIn("model_unknown", failed.error)
        self.assertIn("more than 60s", failed.error)
        self.assertEqual([(e.kind, e.detail.get("reason")) for e in self.store.reads.events(job)][-1],
                         (FAILED, "model_unknown"))
        self.assertEqual(self.store.get_job(never, "").state, QUEUED)

    def test_a_failed_workflow_node_tells_its_run(self):
        from rowfleet import dag

        run = self.store.start_run(dag.parse_workflow({"name": "w", "nodes": [
            {"id": "a", "task": "gpu.task", "queue": "gpu", "model": LLM}]}), None, "")
        self.sweeper(after=10).run_once()
        self.clock.advance(11)
        self.assertEqual(self.sweeper(after=10).run_once().unplaceable_failed, 1)
        self.assertEqual(self.store.get_run(run, "").state, FAILED, "the drain in the sweep told the run")

    def test_the_models_view_and_the_status_count(self):
        warm = self.job()
        cold = self.job()
        self.job(model="xl")
        self.store.record_model_load("", LLM, 12.5, 9000, ok=True)
        self.store.record_model_run("", LLM, 4.0)
        for taken_by, model in (("box:1", LLM), ("box:2", None)):
            claim = Claim("", "gpu", taken_by, 60.0, models=(LLM,), warm_model=model)
            self.store.finish(self.store.claim(claim), Outcome(COMPLETED))
        self.box(warm_model=LLM, warm_since=self.clock.now - 30)
        self.box("box:2", loading=LLM)
        self.sweeper().run_once()
        view = {m.model: m for m in snapshot.models(self.store, "").models}
        llm, xl = view[LLM], view["xl"]
        self.assertEqual((llm.queued, llm.running, llm.unplaceable, llm.listed_by), (0, 0, (), 2))
        self.assertEqual([(h.worker_id, h.since, h.loading) for h in llm.holders],
                         [("box:1", self.clock.now - 30, False), ("box:2", None, True)])
        self.assertEqual((llm.load_seconds, llm.footprint_mb, llm.loads, llm.run_seconds), (12.5, 9000, 1, 4.0))
        self.assertEqual((llm.claims, llm.warm_claims, llm.warm_hit_rate, llm.reloads), (2, 1, 0.5, 1))
        self.assertEqual((xl.queued, xl.unplaceable), (1, (("model_unknown", 1),)))
        self.assertEqual(json.loads(json.dumps(snapshot.models(self.store, "").to_dict()))["models"][1]["unplaceable"],
                         {"model_unknown": 1})
        self.clock.advance(3601)
        self.assertEqual(snapshot.models(self.store, "").models[0].claims, 0, "claims of the last hour only")
        self.assertEqual([(c.queue, c.n) for c in snapshot.snapshot(self.store).unplaceable], [("gpu", 1)])
        self.assertEqual({warm, cold} & {j.id for j in self.store.reads.list_jobs("", state=QUEUED)}, set())


class SQLitePlacementTest(PlacementContract, TempDirTestCase):
    def test_the_command_line_shows_it(self):
        job = self.job()
        self.cli("orchestrator", "--once")
        text = self.cli("job", str(job)).stdout
        self.assertRegex(text, r"(?m)^ +unplaceable: model_unknown \(no GPU worker of its queue lists its model\) "
                               r"since \d{4}-")
        self.assertEqual(self.cli_json("job", str(job))["unplaceable"], "model_unknown")
        self.assertIn(f"! job {job} is unplaceable: model_unknown", self.cli("jobs").stdout)
        self.assertEqual(self.cli_json("jobs")[0]["unplaceable"], "model_unknown")
        self.assertRegex(self.cli("status").stdout, r"(?m)^''\s+gpu\s+1$")
        self.assertEqual(self.cli_json("status")["unplaceable"],
                         [{"project": "", "queue": "gpu", "state": "unplaceable", "n": 1}])
        self.assertRegex(self.cli("models").stdout, r"(?m)^llm\s+1\s+0\s+1 model_unknown\s+-")
        self.assertEqual(self.cli_json("models")["models"][0]["unplaceable"], {"model_unknown": 1})

    def test_an_empty_fleet_has_no_models(self):
        self.assertEqual(self.cli("models").stdout, "no models\n")
        self.assertEqual(self.cli_json("models")["models"], [])

    def test_bad_input_is_one_line_and_exit_2(self):
        job = self.job()
        for args in (("orchestrator", "--once", "--fail-unplaceable-after", "soon"),
                     ("orchestrator", "--once", "--fail-unplaceable-after", "-5"),
                     ("orchestrator", "--once", "--fail-unplaceable-after", "0"),
                     ("models", "--window", "5")):
            with self.subTest(args=args):
                result = self.cli(*args, check=False)
                self.assertEqual((result.returncode, result.stdout), (2, ""))
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertIsNone(self.store.get_job(job, "").unplaceable, "nothing was written")


class PostgresPlacementTest(PostgresDatabaseCase, PlacementContract, TempDirTestCase):
    pass


if __name__ == "__main__":
    unittest.main()
