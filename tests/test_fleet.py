"""Operators' switches in the store and at the command line, on both backends (fast).

The worker's side (parking, draining, exit 79) is proven with real processes in
test_fleet_processes.py; the pure choice of the switch in force is doctested in
``rowfleet.control``.
"""

from __future__ import annotations

from rowfleet import control
from rowfleet.control import Switch
from rowfleet.errors import ConfigError
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase


class SwitchContract:
    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()

    def test_no_row_means_on(self):
        self.assertIsNone(self.store.switch_in_force("", "box", "q"))

    def test_a_switch_is_one_row_per_project_host_and_queue_rewritten_in_place(self):
        self.store.set_switch("", "box", "q", control.OFF, control.HARD, "ops")
        held = self.store.switch_in_force("", "box", "q")
        self.assertEqual((held.desired, held.policy, held.changed_by), ("off", "hard", "ops"))
        self.store.set_switch("", "box", "q", control.ON, changed_by="ops")
        self.assertIsNone(self.store.switch_in_force("", "box", "q"))
        self.assertEqual([(s.queue, s.desired) for s in self.store.switches()], [("q", "on")])

    def test_wildcards_and_off_wins_and_hard_beats_drain(self):
        self.store.set_switch("", "box", "q", control.ON)
        self.store.set_switch("", "box", control.ANY, control.OFF, control.DRAIN, "maintenance")
        self.assertEqual(self.store.switch_in_force("", "box", "q").changed_by, "maintenance",
                         "a box-wide off holds a queue whose own row says on")
        self.assertIsNone(self.store.switch_in_force("", "other-box", "q"))
        self.assertIsNone(self.store.switch_in_force("beta", "box", "q"), "another project's box is its own")
        self.store.set_switch(control.ANY, control.ANY, "q", control.OFF, control.HARD, "panic")
        self.assertEqual(self.store.switch_in_force("beta", "other-box", "q").policy, "hard")
        self.assertEqual(self.store.switch_in_force("", "box", "q").changed_by, "panic", "hard beats drain")

    def test_projects_keep_separate_switches(self):
        self.store.set_switch("alpha", "box", "q", control.OFF)
        self.assertIsNotNone(self.store.switch_in_force("alpha", "box", "q"))
        self.assertIsNone(self.store.switch_in_force("beta", "box", "q"))

    def test_bad_switches_are_refused_and_write_nothing(self):
        for args in (("", "box", "q", "maybe"), ("", "box", "q", "off", "gentle"), ("", "", "q", "off"),
                     ("", "box", "", "off"), (None, "box", "q", "off")):
            with self.subTest(args=args), self.assertRaises(ConfigError):
                self.store.set_switch(*args)
        self.assertEqual(self.store.switches(), [])

    def test_the_command_line_writes_and_shows_switches(self):
        self.cli("control", "--queue", "q", "--off", "--policy", "hard", "--by", "ops", "--host", "box")
        shown = self.cli_json("workers")
        self.assertEqual([(s["host"], s["queue"], s["desired"], s["policy"], s["changed_by"])
                          for s in shown["switches"]], [("box", "q", "off", "hard", "ops")])
        self.cli("control", "--all-queues", "--off", "--host", "box")
        answer = self.cli_json("control", "--queue", "q", "--on", "--host", "box")
        self.assertEqual([s["queue"] for s in answer["still_off"]], ["*"],
                         "switching a queue on says which wider switch still holds it")

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
        self.assertEqual(self.store.switches(), [])


class SQLiteSwitchTest(SwitchContract, TempDirTestCase):
    pass


class PostgresSwitchTest(SwitchContract, PostgresDatabaseCase, TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.db = self.url  # the command line's --db
