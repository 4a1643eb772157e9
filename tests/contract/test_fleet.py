"""Operators' switches in the store and at the command line, and what projects sharing one
database keep apart and share, on both backends (fast).

The worker's side (parking, draining, exit 79) is proven with real processes in
test_fleet_processes.py; the pure choice of the switch in force is doctested in
``rowfleet.control``.
"""

from __future__ import annotations

from rowfleet import control, dag
from rowfleet.claim import Claim
from rowfleet.errors import ConfigError
from rowfleet.job import COMPLETED, JobSpec, Outcome
from rowfleet.services.orchestrator import Orchestrator
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase, wait_until


class SwitchContract:
    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()

    def test_no_row_means_on(self):
        self.assertIsNone(self.store.switches_in_force("", "box", ("q",))["q"])

    def test_a_switch_is_one_row_per_project_host_and_queue_rewritten_in_place(self):
        self.store.set_switch("", "box", "q", control.OFF, control.HARD, "ops")
        held = self.store.switches_in_force("", "box", ("q",))["q"]
        self.assertEqual((held.desired, held.policy, held.changed_by), ("off", "hard", "ops"))
        self.store.set_switch("", "box", "q", control.ON, changed_by="ops")
        self.assertIsNone(self.store.switches_in_force("", "box", ("q",))["q"])
        self.assertEqual([(s.queue, s.desired) for s in self.store.reads.switches()], [("q", "on")])

    def test_wildcards_and_off_wins_and_hard_beats_drain(self):
        self.store.set_switch("", "box", "q", control.ON)
        self.store.set_switch("", "box", control.ANY, control.OFF, control.DRAIN, "maintenance")
        self.assertEqual(self.store.switches_in_force("", "box", ("q",))["q"].changed_by, "maintenance",
                         "a box-wide off holds a queue whose own row says on")
        self.assertIsNone(self.store.switches_in_force("", "other-box", ("q",))["q"])
        self.assertIsNone(self.store.switches_in_force("beta", "box", ("q",))["q"], "another project's box is its own")
        self.store.set_switch(control.ANY, control.ANY, "q", control.OFF, control.HARD, "panic")
        self.assertEqual(self.store.switches_in_force("beta", "other-box", ("q",))["q"].policy, "hard")
        self.assertEqual(self.store.switches_in_force("", "box", ("q",))["q"].changed_by, "panic", "hard beats drain")

    def test_every_switch_carries_its_reason_and_is_logged_in_its_transaction(self):
        self.store.set_switch("", "box", "q", control.OFF, control.HARD, "ops", reason="fan <noisy>")
        self.store.set_switch("", "box", control.ANY, control.ON, changed_by="ops")
        self.store.set_switch("", "other", "q", control.OFF, changed_by="ci")
        self.assertEqual(self.store.switches_in_force("", "box", ("q",))["q"].reason, "fan <noisy>")
        log = self.store.reads.switch_log()
        self.assertEqual([(s.host, s.queue, s.desired, s.reason) for s in log],
                         [("other", "q", "off", ""), ("box", "*", "on", ""), ("box", "q", "off", "fan <noisy>")])
        self.assertEqual([s.host for s in self.store.reads.switch_log(host="box")], ["box", "box"])
        self.assertEqual(len(self.store.reads.switch_log(limit=1)), 1)
        with self.assertRaises(ConfigError):
            self.store.set_switch("", "box", "q", control.OFF, reason="x" * 501)
        self.assertEqual(len(self.store.reads.switch_log()), 3, "a refused switch logs nothing")

    def test_projects_keep_separate_switches(self):
        self.store.set_switch("alpha", "box", "q", control.OFF)
        self.assertIsNotNone(self.store.switches_in_force("alpha", "box", ("q",))["q"])
        self.assertIsNone(self.store.switches_in_force("beta", "box", ("q",))["q"])

    def test_bad_switches_are_refused_and_write_nothing(self):
        for args in (("", "box", "q", "maybe"), ("", "box", "q", "off", "gentle"), ("", "", "q", "off"),
                     ("", "box", "", "off"), (None, "box", "q", "off")):
            with self.subTest(args=args), self.assertRaises(ConfigError):
                self.store.set_switch(*args)
        self.assertEqual(self.store.reads.switches(), [])

    def test_workers_lists_old_rows_only_with_all(self):
        from rowfleet.store import open_store

        with open_store(self.config(), clock=lambda: self.store.clock() - 3600) as past:
            past.worker_beat("gone:1:0", "", "gone", "q", 1, None)  # an hour ago, and silent since
        self.store.worker_beat("here:2:0", "", "here", "q", 2, None)
        listed = lambda *flags: {w["host"]: w["actual"] for w in self.cli_json("workers", *flags)["workers"]}
        self.assertEqual(listed(), {"here": "serving"})
        self.assertEqual(listed("--all"), {"gone": "SILENT", "here": "serving"})

    def test_a_burst_worker_switched_off_exits_without_claiming(self):
        self.cli("control", "--queue", "q", "--off", "--host", "box")
        job = self.store.enqueue(JobSpec(task="no.such.task", queue="q"))
        result = self.cli("worker", "--queue", "q", "--host", "box", "--burst")
        self.assertIn("a burst worker exits", result.stderr)
        self.assertEqual(self.store.get_job(job.id, "").state, "queued")

    def test_the_command_line_writes_and_shows_switches(self):
        self.cli("control", "--queue", "q", "--off", "--policy", "hard", "--by", "ops", "--host", "box")
        shown = self.cli_json("workers")
        self.assertEqual([(s["host"], s["queue"], s["desired"], s["policy"], s["changed_by"])
                          for s in shown["switches"]], [("box", "q", "off", "hard", "ops")])
        self.cli("control", "--all-queues", "--off", "--host", "box")
        answer = self.cli_json("control", "--queue", "q", "--on", "--host", "box")
        self.assertEqual([s["queue"] for s in answer["still_off"]], ["*"],
                         "switching a queue on says which wider switch still holds it")


class SharedBrokerContract:
    """Two projects, alpha and beta, on one database: alpha's orchestrator is the only one up."""

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()
        self.alpha = Orchestrator(self.store, self.config(project="alpha", retention=0.05))

    def past(self, moment: float) -> None:
        wait_until(lambda: self.store.clock() > moment, message="the database clock to pass a moment")

    def test_any_projects_orchestrator_reclaims_lapsed_leases(self):
        job = self.store.enqueue(JobSpec(task="t", project="beta"))
        claimed = self.store.claim(Claim("beta", "default", "gone:1", lease=0.05))
        self.past(claimed.lease_expires_at)
        with self.assertLogs("rowfleet.orchestrator", "WARNING"):
            self.assertEqual(self.alpha.run_once().reclaimed, 1)
        self.assertEqual(self.store.get_job(job.id, "beta").state, "queued")

    def test_any_projects_orchestrator_prunes(self):
        job = self.store.enqueue(JobSpec(task="t", project="beta"))
        claimed = self.store.claim(Claim("beta", "default", "box:1", lease=60))
        self.store.finish(claimed, Outcome(COMPLETED, result=None))
        self.past(self.store.get_job(job.id, "beta").finished_at + 0.05)
        self.assertEqual(self.alpha.run_once().pruned, 1)

    def test_outbox_drains_are_project_scoped(self):
        flow = dag.parse_workflow({"name": "one", "nodes": [{"id": "a", "task": "t"}, {"id": "b", "task": "t",
                                                                                     "depends_on": ["a"]}]})
        run_id = self.store.start_run(flow, None, "beta")
        node = self.store.claim(Claim("beta", "default", "box:1", lease=60))
        self.store.finish(node, Outcome(COMPLETED, result=1))
        self.assertEqual(self.alpha.drain()["applied"], 0, "alpha's orchestrator moved beta's run on")
        self.assertEqual(self.store.drain("beta")["applied"], 1)
        self.assertEqual({n.id: n.state for n in self.store.get_run(run_id, "beta").nodes},
                         {"a": "completed", "b": "queued"})


class SQLiteSwitchTest(SwitchContract, TempDirTestCase):
    # Refused before any database is opened: once is enough, on the default backend.
    def test_bad_command_lines_are_one_line_and_write_nothing(self):
        for args in (("control", "--queue", "q"), ("control", "--off"), ("control", "--queue", "*", "--off"),
                     ("control", "--queue", "q", "--off", "--policy", "gentle"),
                     ("control", "--queue", "q", "--on", "--off"), ("--project", "*", "control", "--queue", "q", "--off"),
                     ("control", "--queue", "q", "--off", "--host", "*")):
            with self.subTest(args=args):
                result = self.cli(*args, check=False)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(self.store.reads.switches(), [])


class SQLiteSharedBrokerTest(SharedBrokerContract, TempDirTestCase):
    pass


class PostgresSharedBrokerTest(SharedBrokerContract, PostgresDatabaseCase, TempDirTestCase):
    pass


class PostgresSwitchTest(SwitchContract, PostgresDatabaseCase, TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.db = self.url  # the command line's --db
