"""Why a job is not running: the pure diagnosis table-driven (each reason, their order,
hostile strings kept as plain text), and ``gather`` with ``store.reads.jobs_ahead`` on SQLite
and PostgreSQL against real worker rows and switches written through the store. Also runs
the doctests of ``rowfleet.views.diagnosis``.
"""

from __future__ import annotations

import dataclasses
import unittest

from rowfleet import control, dag
from rowfleet.claim import Claim
from rowfleet.control import Switch
from rowfleet.gpu.routing import ModelInfo
from rowfleet.job import Job, JobSpec
from rowfleet.views import diagnosis
from rowfleet.views.diagnosis import Facts, QueueWorker, Reason, relative, why_not_running
from rowfleet.views.snapshot import GpuAdvert
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase
from contract.test_lifecycle import Clock

NOW = 1_800_000_000.0


def job(**changes) -> Job:
    """A queued job of queue q, due a minute ago, with ``changes``."""
    base = dict(id=7, project="", queue="q", task="t", args=None, state="queued", priority=0, run_next=False,
                run_at=NOW - 60, attempts=0, max_attempts=5, idempotency_key=None, lease_token=0, claimed_by=None,
                lease_expires_at=None, result=None, error=None, traceback=None, created_at=NOW - 60,
                updated_at=NOW - 60, started_at=None, finished_at=None)
    return Job(**{**base, **changes})


def worker(host="box", state=control.SERVING, **changes) -> QueueWorker:
    return QueueWorker(host, changes.pop("pid", 42), state, changes.pop("last_seen", NOW - 1), **changes)


def gpu(*models, vram=24000, lane="any") -> GpuAdvert:
    return GpuAdvert(models, gpu_index=0, vram_total_mb=vram, lane=lane)


OFF_DRAIN = Switch("", "box", "q", control.OFF, control.DRAIN, "ops", NOW - 120)
OFF_HARD = Switch("*", "*", "q", control.OFF, control.HARD, "", NOW - 7200)
SERVING = Facts(workers=(worker(),))


class ReasonTest(unittest.TestCase):
    # (name, the job's changes, facts, [(code, text)...]): the whole answer, so a reason
    # that appears where it should not fails too.
    CASES = [
        ("completed", dict(state="completed", finished_at=NOW - 90), Facts(),
         [("finished", "it finished: completed 1 min ago")]),
        ("failed, with the first line of its error", dict(state="failed", finished_at=NOW - 7300,
                                                          error="ValueError: boom\nTraceback (most recent...)"),
         SERVING, [("finished", "it finished: failed 2 h ago (ValueError: boom)")]),
        ("cancelled, no time recorded", dict(state="cancelled", error="by ops"), Facts(),
         [("finished", "it finished: cancelled at a time not recorded (by ops)")]),
        ("running", dict(state="running", claimed_by="box:42", started_at=NOW - 125, lease_expires_at=NOW + 480),
         Facts(), [("running", "it is running on box (pid 42), started 2 min ago; its lease runs out in 8 min")]),
        ("running past its lease", dict(state="running", claimed_by="box:42", started_at=NOW - 700,
                                        lease_expires_at=NOW - 5), Facts(),
         [("running", "it is running on box (pid 42), started 11 min ago; its lease ran out 5 s ago, so the "
                      "orchestrator hands it back to the queue")]),
        ("running, a cancel pending", dict(state="running", claimed_by="box:42", cancel_requested_at=NOW - 3,
                                           cancel_reason="wrong args"), Facts(),
         [("running", "it is running on box (pid 42)"),
          ("cancel_pending", "a cancel was asked for 3 s ago (wrong args) and is pending: its worker stops it "
                             "when it next renews the lease")]),
        ("running, no holder recorded", dict(state="running"), Facts(),
         [("running", "it is running (its holder is not recorded)")]),
        ("delayed", dict(run_at=NOW + 240), SERVING, [("not_due", "it is not due yet: it becomes due in 4 min")]),
        ("backing off", dict(run_at=NOW + 30, attempts=2, error="ValueError: boom"), SERVING,
         [("not_due", "it is not due yet: it becomes due in 30 s (the backoff after attempt 2 of 5, which ended: "
                      "ValueError: boom)")]),
        ("its queue off on every live host",
         {}, Facts(workers=(worker("box", control.DRAINING, switch=OFF_DRAIN), worker("b2", control.PARKED, pid=5,
                                                                                     switch=OFF_HARD))),
         [("queue_off", "its queue q is off on every live host that serves it (b2, box): queue q of host box in "
                        "project '' was switched off (drain) by ops 2 min ago; queue q of every host in every "
                        "project was switched off (hard) by an unnamed operator 2 h ago")]),
        ("off on one host, on on another", {}, Facts(workers=(worker("box", switch=OFF_DRAIN), worker("b2"))),
         [("next_wake", "nothing holds it back: it should be claimed at the next wake-up")]),
        ("an off switch on a dead worker holds nothing", {},
         Facts(workers=(worker("old", "SILENT", switch=OFF_DRAIN), worker("b2"))),
         [("next_wake", "nothing holds it back: it should be claimed at the next wake-up")]),
        ("no live worker, one seen before", dict(project="alpha"),
         Facts(workers=(worker("old", "stopped", pid=3, last_seen=NOW - 7300),
                        worker("older", "killed by SIGKILL", pid=2, last_seen=NOW - 90000))),
         [("no_worker", "no live worker serves queue q of project alpha; the last one seen was old (pid 3) 2 h ago, "
                        "now stopped")]),
        ("no worker ever", {}, Facts(),
         [("no_worker", "no live worker serves queue q; no worker of it has been seen")]),
        ("flagged unplaceable", dict(required_model="llm", unplaceable="no_box_big_enough",
                                     unplaceable_at=NOW - 300), SERVING,
         [("unplaceable", "its model llm is unplaceable: no_box_big_enough (it needs more GPU memory than any "
                          "worker listing its model has), since 5 min ago")]),
        ("no live GPU worker lists its model", dict(required_model="llm"),
         Facts(workers=(worker(gpu=gpu("sd")),)), [("no_fit", "no live GPU worker of queue q lists its model llm")]),
        ("no GPU worker with enough memory", dict(required_model="llm", vram_mb=30000),
         Facts(workers=(worker(gpu=gpu("llm")), worker("b2", gpu=gpu("llm", vram=16000)))),
         [("no_fit", "no GPU worker has enough VRAM for it: it needs 30000 MiB, and the biggest live GPU worker of "
                     "queue q that lists llm has 24000 MiB")]),
        ("its need measured, not written on the job", dict(required_model="llm"),
         Facts(workers=(worker(gpu=gpu("llm")),), model=ModelInfo("llm", footprint_mb=40000)),
         [("no_fit", "no GPU worker has enough VRAM for it: it needs 40000 MiB, and the biggest live GPU worker of "
                     "queue q that lists llm has 24000 MiB")]),
        ("forbidden on every host that lists it", dict(required_model="llm"),
         Facts(workers=(worker(gpu=gpu("llm")),), forbidden_on=frozenset({"box"})),
         [("no_fit", "an operator's rule forbids its model llm on every host whose workers of queue q list it "
                     "(box)")]),
        ("GPU workers of the plain lane", dict(required_model="llm"),
         Facts(workers=(worker(gpu=gpu("llm", lane="plain")),)),
         [("no_fit", "the live GPU workers of queue q that list its model llm take plain jobs only (lane plain)")]),
        ("a plain job on the model lane", {}, Facts(workers=(worker(gpu=gpu("llm", lane="model")),)),
         [("no_fit", "every live worker of queue q takes model jobs only (lane model), and it needs no model")]),
        ("a plain worker takes a model job", dict(required_model="llm", vram_mb=90000),
         Facts(workers=(worker(gpu=gpu("sd")), worker("cpu"))),
         [("next_wake", "nothing holds it back: it should be claimed at the next wake-up")]),
        ("jobs ahead", {}, Facts(workers=(worker(),), ahead=3),
         [("ahead", "3 jobs are ahead of it in queue q, in claim order (run-next first, then priority, then due "
                    "time)")]),
        ("one job ahead", {}, Facts(workers=(worker(),), ahead=1),
         [("ahead", "1 job is ahead of it in queue q, in claim order (run-next first, then priority, then due "
                    "time)")]),
        ("more jobs ahead than counted", {}, Facts(workers=(worker(),), ahead=10_000, ahead_capped=True),
         [("ahead", "10,000+ jobs are ahead of it in queue q, in claim order (run-next first, then priority, then "
                    "due time)")]),
        ("a limit holds it", {}, Facts(workers=(worker(),), limits=("customer:42 at its limit 4 of 4",)),
         [("limited", "a limit holds it: customer:42 at its limit 4 of 4")]),
        ("every worker that can take it busy", dict(required_model="llm"),
         Facts(workers=(worker(busy=True, gpu=gpu("llm")), worker("b2", gpu=gpu("sd")))),
         [("busy", "it is next in line, but every worker of queue q that can take it is running another job "
                   "(1 of them)")]),
        ("its run has ended", dict(run_id=4, node_id="a"), Facts(workers=(worker(),), run_state=dag.CANCELLED),
         [("run_ended", "its run 4 has ended (cancelled)")]),
        ("its run awaits input upstream", dict(run_id=4, node_id="b"),
         Facts(workers=(worker(),), run_state=dag.AWAITING_INPUT, node_state=dag.PENDING, awaiting_input=("ask",)),
         [("awaiting_input", "its run 4 is awaiting input at node ask: answer it so that the run goes on")]),
        ("its node waits on upstream nodes", dict(run_id=4, node_id="b"),
         Facts(workers=(worker(),), run_state=dag.RUNNING, node_state=dag.PENDING),
         [("waits_upstream", "its node b of run 4 waits on upstream nodes")]),
        ("input awaited on another branch holds nothing", dict(run_id=4, node_id="b"),
         Facts(workers=(worker(),), run_state=dag.AWAITING_INPUT, node_state=dag.QUEUED, awaiting_input=("ask",)),
         [("next_wake", "nothing holds it back: it should be claimed at the next wake-up")]),
        ("a cancel pending on a queued job", dict(cancel_requested_at=NOW - 61), SERVING,
         [("cancel_pending", "a cancel was asked for 1 min ago and is pending: the worker that claims it stops it "
                             "at once")]),
        ("nothing holds it", {}, SERVING,
         [("next_wake", "nothing holds it back: it should be claimed at the next wake-up")]),
        ("a state rowfleet does not know", dict(state="paused"), SERVING,
         [("unknown_state", "its state paused is none that rowfleet knows, so no worker claims it")]),
        ("a row plain SQL broke", dict(run_at="tomorrow", unreadable="column run_at is not a number: 'tomorrow'"),
         SERVING, [("unreadable", "its row cannot be decoded (column run_at is not a number: 'tomorrow'); a worker "
                                  "that claims it fails it at once")]),
    ]

    def test_each_reason(self):
        for name, changes, facts, expected in self.CASES:
            with self.subTest(name):
                reasons = why_not_running(job(**changes), facts, NOW)
                self.assertEqual([r.code for r in reasons], [code for code, _ in expected])
                self.assertEqual([r.text for r in reasons], [text for _, text in expected])

    def test_every_code_is_exercised(self):
        tried = {code for *_, expected in self.CASES for code, _ in expected}
        self.assertEqual(set(diagnosis.CODES) - tried, set())

    def test_reasons_come_in_the_order_they_matter(self):
        everything = Facts(workers=(worker(switch=OFF_DRAIN, gpu=gpu("llm")),), ahead=2, run_state=dag.RUNNING,
                           node_state=dag.PENDING)
        held = job(required_model="llm", unplaceable="load_failing", run_id=4, node_id="b",
                   cancel_requested_at=NOW - 5, unreadable="column args is not valid JSON (x)")
        self.assertEqual([r.code for r in why_not_running(held, everything, NOW)],
                         ["unreadable", "queue_off", "unplaceable", "ahead", "waits_upstream", "cancel_pending"])
        later = dataclasses.replace(held, run_at=NOW + 60)  # not due: jobs ahead now say nothing of it
        self.assertEqual([r.code for r in why_not_running(later, everything, NOW)],
                         ["unreadable", "not_due", "queue_off", "unplaceable", "waits_upstream", "cancel_pending"])
        gone = dataclasses.replace(everything, workers=(worker("b2", "SILENT", last_seen=NOW - 50),))
        self.assertEqual([r.code for r in why_not_running(later, gone, NOW)],
                         ["unreadable", "not_due", "no_worker", "unplaceable", "waits_upstream", "cancel_pending"])

    def test_a_finished_or_running_job_gets_no_diagnosis(self):
        everything = Facts(workers=(worker(switch=OFF_DRAIN),), ahead=2, run_state=dag.CANCELLED)
        for state in ("completed", "failed", "cancelled"):
            with self.subTest(state):
                self.assertEqual([r.code for r in why_not_running(job(state=state, finished_at=NOW), everything, NOW)],
                                 ["finished"])
        self.assertEqual([r.code for r in why_not_running(job(state="running"), everything, NOW)], ["running"])

    def test_hostile_strings_stay_plain_text(self):
        script, markup = "<script>alert(1)</script>", "</td><img src=x onerror=alert('&')>"
        switch = Switch("", f"b{script}", f"q{script}", control.OFF, control.DRAIN, f"ops & {markup}", NOW - 5)
        if "reason" in {field.name for field in dataclasses.fields(Switch)}:
            switch = dataclasses.replace(switch, reason=markup)
        facts = Facts(workers=(worker(f"b{script}", switch=switch),))
        held = job(queue=f"q{script}", project=markup, cancel_requested_at=NOW - 5, cancel_reason=markup,
                   required_model=markup, unplaceable=markup)
        texts = [r.text for r in why_not_running(held, facts, NOW)]
        joined = "\n".join(texts)
        for raw in (script, markup, f"ops & {markup}"):
            self.assertIn(raw, joined)
        self.assertNotIn("&lt;", joined)
        self.assertNotIn("&amp;", joined)
        failed = why_not_running(job(state="failed", error=f"{markup}\nsecond line", finished_at=NOW), Facts(), NOW)
        self.assertEqual(failed, [Reason("finished", f"it finished: failed now ({markup})")])
        gone = Facts(workers=(QueueWorker(script, 1, "stopped", NOW - 5),))
        self.assertIn(f"the last one seen was {script} (pid 1) 5 s ago", why_not_running(job(), gone, NOW)[0].text)

    def test_values_plain_sql_left_undecoded_never_raise(self):
        for changes in (dict(run_at="tomorrow"), dict(run_at=float("inf")), dict(attempts="two", run_at=NOW + 5),
                        dict(state="running", claimed_by=b"\xffbox", lease_expires_at="soon", started_at=[1]),
                        dict(state="failed", finished_at="yesterday", error=b"\xff")):
            with self.subTest(changes):
                reasons = why_not_running(job(**changes), Facts(workers=(worker(last_seen="x"),)), NOW)
                self.assertTrue(reasons and all(isinstance(r.text, str) for r in reasons))
        numbered = Facts(workers=(QueueWorker(5, 1, control.SERVING, NOW, switch=OFF_DRAIN), worker(switch=OFF_DRAIN)))
        self.assertIn("every live host that serves it (5, box)", why_not_running(job(), numbered, NOW)[0].text)

    def test_relative_times(self):
        for at, text in ((NOW, "now"), (NOW + 0.9, "now"), (NOW - 1, "1 s ago"), (NOW + 59, "in 59 s"),
                         (NOW + 60, "in 1 min"), (NOW - 3599, "59 min ago"), (NOW + 3600, "in 1 h"),
                         (NOW - 86400 * 3, "3 d ago"), (None, "at a time not recorded"),
                         ("soon", "at soon (not a time)"), (True, "at True (not a time)"),
                         (float("nan"), "at nan (not a time)"), (NOW + 1e12, "in over 100 years")):
            with self.subTest(at=at):
                self.assertEqual(relative(at, NOW), text)


class DiagnosisContract:
    """``gather`` and ``store.reads.jobs_ahead`` on a real database: every backend passes these."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock(NOW)
        self.store = self.open_store(clock=self.clock)

    def enqueue(self, **spec) -> Job:
        return self.store.enqueue(JobSpec(task="t", **{"queue": "q", **spec}))

    def diagnose(self, job: Job) -> list[Reason]:
        job = self.store.get_job(job.id, job.project)
        return why_not_running(job, diagnosis.gather(self.store, job, self.clock()), self.clock())

    def test_jobs_ahead_counts_in_claim_order_and_caps(self):
        first, second = self.enqueue(), self.enqueue()
        self.clock.advance(1)
        target = self.enqueue()
        self.clock.advance(1)
        self.enqueue()  # behind it: the same priority, due later
        self.enqueue(priority=-1)  # ahead of it: a better priority, though newer
        self.store.prioritize(self.enqueue().id, "")  # ahead of every priority
        self.enqueue(priority=-5, delay=5)  # ahead once due, while it is still delayed
        self.enqueue(queue="other")  # not of its queue
        self.enqueue(project="beta")  # nor of its project
        self.assertEqual(self.store.reads.jobs_ahead(target), (4, False))
        self.assertEqual(self.store.reads.jobs_ahead(first), (2, False))
        self.assertEqual(self.store.reads.jobs_ahead(second), (3, False))
        self.clock.advance(10)
        self.assertEqual(self.store.reads.jobs_ahead(target), (5, False), "a delayed job fallen due counts")
        self.assertEqual(self.store.reads.jobs_ahead(target, cap=3), (3, True))
        self.assertEqual(self.store.reads.jobs_ahead(target, cap=5), (5, False))

    def test_no_worker_then_one_serving_then_switched_off(self):
        from rowfleet.store import open_store

        with open_store(self.config(), clock=lambda: NOW - 3600) as past:
            past.worker_beat("gone:9:0", "", "gone", "q", 9, None)
        held = self.enqueue()
        self.assertEqual([(r.code, r.text) for r in self.diagnose(held)],
                         [("no_worker", "no live worker serves queue q; the last one seen was gone (pid 9) 1 h ago, "
                                        "now SILENT")])
        self.store.worker_beat("box:1:0", "", "box", "q", 1, None)
        self.assertEqual([r.code for r in self.diagnose(held)], ["next_wake"])
        self.store.worker_beat("b2:2:0", "", "b2", "other", 2, None, queues=("other", "q"))
        self.store.set_switch("", "box", "q", control.OFF, control.DRAIN, "ops")
        self.assertEqual([r.code for r in self.diagnose(held)], ["next_wake"], "b2 serves q too, and is on")
        self.store.set_switch("", "b2", control.ANY, control.OFF, control.HARD, "maintenance")
        reasons = self.diagnose(held)
        self.assertEqual([r.code for r in reasons], ["queue_off"])
        self.assertIn("(b2, box)", reasons[0].text)
        self.assertIn("queue q of host box in project '' was switched off (drain) by ops now", reasons[0].text)
        self.assertIn("every queue of host b2 in project '' was switched off (hard) by maintenance now",
                      reasons[0].text)

    def test_jobs_ahead_and_busy_workers(self):
        self.store.worker_beat("box:1:0", "", "box", "q", 1, 999)  # running another job
        self.enqueue()
        self.clock.advance(1)
        held = self.enqueue()
        self.assertEqual([r.text for r in self.diagnose(held)],
                         ["1 job is ahead of it in queue q, in claim order (run-next first, then priority, then due "
                          "time)"])
        self.store.prioritize(held.id, "")
        self.assertEqual([r.code for r in self.diagnose(held)], ["busy"])

    def test_a_key_at_its_limit_and_a_spent_rate_are_named(self):
        from rowfleet import flow

        self.store.worker_beat("box:1:0", "", "box", "q", 1, None)
        self.store.set_limit("", "q", per_key=1, rate=flow.Rate(1, 60.0))
        self.enqueue(concurrency_key="customer:42")
        held = self.enqueue(concurrency_key="customer:42")
        self.store.claim(Claim("", "q", "box:1", 60.0, limited=True))
        texts = [r.text for r in self.diagnose(held)]
        self.assertIn("a limit holds it: customer:42 at its limit 1 of 1", texts)
        self.assertTrue(any(text.startswith("a limit holds it: rate 1/60s on queue q: next start in") for text in texts),
                        texts)

    def test_model_jobs_against_the_gpu_workers_adverts_and_rules(self):
        self.store.worker_beat("g1:1:0", "", "g1", "gpu", 1, None, models=("llm",), gpu_index=0,
                               vram_total_mb=24000, vram_free_mb=20000, lane="any")
        big = self.enqueue(queue="gpu", model="llm", vram_mb=30000)
        self.assertEqual([r.text for r in self.diagnose(big)],
                         ["no GPU worker has enough VRAM for it: it needs 30000 MiB, and the biggest live GPU worker "
                          "of queue gpu that lists llm has 24000 MiB"])
        fits = self.enqueue(queue="gpu", model="llm")
        self.store.record_model_load("", "llm", 12.0, 20000, ok=True)
        facts = diagnosis.gather(self.store, fits, self.clock())
        self.assertEqual((facts.model.footprint_mb, facts.ahead), (20000, 1))
        self.store.set_model_control("g1", "llm", control.FORBID, "ops")
        self.assertEqual(diagnosis.gather(self.store, fits, self.clock()).forbidden_on, frozenset({"g1"}))
        self.assertEqual([r.code for r in self.diagnose(fits)], ["no_fit", "ahead"])
        other = self.enqueue(queue="gpu", model="sd")
        self.assertIn("no live GPU worker of queue gpu lists its model sd", self.diagnose(other)[0].text)

    def test_a_workflow_nodes_run(self):
        flow = dag.parse_workflow({"name": "w", "nodes": [{"id": "ask", "kind": "input", "prompt": "go?"},
                                                          {"id": "work", "task": "t", "queue": "q"}]})
        run_id = self.store.start_run(flow, None, "")
        node_job = self.store.get_run(run_id, "").node("work").jobs[0]
        node_job = self.store.get_job(node_job, "")
        facts = diagnosis.gather(self.store, node_job, self.clock())
        self.assertEqual((facts.run_state, facts.node_state, facts.awaiting_input),
                         (dag.RUNNING, dag.QUEUED, ("ask",)), "the run still moves: its node work is queued")
        self.assertEqual([r.code for r in self.diagnose(node_job)], ["no_worker"],
                         "input awaited on another branch holds nothing of this node")

    def test_a_job_not_queued_needs_no_facts(self):
        held = self.enqueue()
        self.store.cancel(held.id, "")
        cancelled = self.store.get_job(held.id, "")
        self.assertEqual(diagnosis.gather(self.store, cancelled, self.clock()), Facts())
        self.assertEqual([r.code for r in self.diagnose(cancelled)], ["finished"])


class SQLiteDiagnosisTest(DiagnosisContract, TempDirTestCase):
    pass


class PostgresDiagnosisTest(DiagnosisContract, PostgresDatabaseCase, TempDirTestCase):
    pass


if __name__ == "__main__":
    unittest.main()
