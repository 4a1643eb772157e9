"""Operators' rules for the models of a box, as ``model_controls`` rows: pin and forbid
stand until cleared, unload and preload are requests a worker carries out once. Written
once in ``ModelControlContract`` and run on SQLite and PostgreSQL; the command line once.
"""

from __future__ import annotations

import dataclasses
import unittest

from rowfleet import control
from rowfleet.control import FORBID, PIN, PRELOAD, UNLOAD, model_rules
from rowfleet.errors import ConfigError
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase


class ModelControlContract:
    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()

    def test_rules_for_a_host_are_its_own_rows_and_the_every_host_ones(self):
        self.store.set_model_control("box", "llm", PIN, changed_by="ops")
        self.store.set_model_control("*", "huge", FORBID)
        self.store.set_model_control("other", "tiny", FORBID)
        self.store.set_model_control("box", "vision", PRELOAD)
        rules = model_rules(self.store.model_controls("box"), "box")
        self.assertEqual((rules.pinned, rules.forbidden, rules.preload),
                         (frozenset({"llm"}), frozenset({"huge"}), ("vision",)))
        self.assertEqual({(row.host, row.model) for row in self.store.model_controls()},
                         {("box", "llm"), ("*", "huge"), ("other", "tiny"), ("box", "vision")})
        self.assertEqual([row.changed_by for row in self.store.model_controls("box") if row.model == "llm"], ["ops"])

    def test_a_request_is_done_once_and_pending_again_when_written_again(self):
        request = self.store.set_model_control("box", "llm", UNLOAD)
        self.assertEqual(model_rules(self.store.model_controls("box"), "box").unload, frozenset({"llm"}))
        self.assertTrue(self.store.model_control_done(request))
        self.assertFalse(self.store.model_control_done(request), "done twice")
        self.assertEqual(model_rules(self.store.model_controls("box"), "box").unload, frozenset())
        again = self.store.set_model_control("box", "llm", UNLOAD)
        self.assertIsNone(again.done_at)
        self.assertEqual(model_rules(self.store.model_controls("box"), "box").unload, frozenset({"llm"}))

    def test_a_request_written_again_after_it_was_read_is_not_marked_done_by_the_old_reading(self):
        newer = self.store.set_model_control("box", "llm", PRELOAD)
        old = dataclasses.replace(newer, changed_at=newer.changed_at - 1.0)  # as read before the rewrite
        self.assertFalse(self.store.model_control_done(old))
        self.assertTrue(self.store.model_control_done(newer))

    def test_clearing_a_rule_deletes_it_and_says_whether_there_was_one(self):
        self.store.set_model_control("box", "llm", PIN)
        self.assertTrue(self.store.clear_model_control("box", "llm", PIN))
        self.assertFalse(self.store.clear_model_control("box", "llm", PIN))
        self.assertEqual(self.store.model_controls("box"), [])

    def test_a_request_to_every_host_is_refused(self):
        for action in (UNLOAD, PRELOAD):
            with self.subTest(action=action), self.assertRaisesRegex(ConfigError, "name the host"):
                self.store.set_model_control("*", "llm", action)
        self.assertEqual(self.store.model_controls(), [])

    def test_an_unknown_action_is_refused_and_writes_nothing(self):
        with self.assertRaisesRegex(ConfigError, "pin, forbid, unload, preload"):
            self.store.set_model_control("box", "llm", "evict")
        self.assertEqual(self.store.model_controls(), [])


class SQLiteModelControlTest(ModelControlContract, TempDirTestCase):
    def test_the_command_line_writes_lists_and_clears_rules(self):
        self.cli("model-control", "pin", "llama3-8b:q4", "--host", "box1", "--by", "ops")
        self.cli("model-control", "preload", "vision", "--host", "box1")
        self.cli("model-control", "forbid", "huge", "--all-hosts")
        listed = self.cli_json("model-control", "list", "--host", "box1")["model_controls"]
        self.assertEqual({(row["host"], row["model"], row["action"]) for row in listed},
                         {("box1", "llama3-8b:q4", PIN), ("box1", "vision", PRELOAD), ("*", "huge", FORBID)})
        self.assertEqual([row["changed_by"] for row in listed if row["action"] == PIN], ["ops"])
        text = self.cli("model-control", "list", "--host", "box1").stdout
        self.assertIn("pending", text)
        cleared = self.cli_json("model-control", "pin", "llama3-8b:q4", "--host", "box1", "--clear")
        self.assertTrue(cleared["cleared"])
        self.assertEqual(sorted(row.model for row in self.store.model_controls("box1")), ["huge", "vision"])

    def test_rows_written_by_plain_sql_with_text_times_still_read_and_apply(self):
        import sqlite3

        self.store.set_model_control("box", "first", PRELOAD)
        with sqlite3.connect(self.db) as conn:
            conn.execute("INSERT INTO model_controls (host, model, action, changed_at) "
                         "VALUES ('box', 'second', 'preload', 'yesterday')")
            conn.execute("INSERT INTO model_controls (host, model, action, changed_at, done_at) "
                         "VALUES ('box', 'third', 'unload', 1.0, 'soon')")
        rules = model_rules(self.store.model_controls("box"), "box")
        self.assertEqual((rules.preload, rules.unload), (("second", "first"), frozenset()))

    def test_bad_command_lines_are_one_line_and_write_nothing(self):
        for args in (("model-control", "pin"), ("model-control", "pin", "two words"),
                     ("model-control", "evict", "llm"), ("model-control", "list", "llm"),
                     ("model-control", "pin", "llm", "--host", "*"),
                     ("model-control", "unload", "llm", "--all-hosts")):
            with self.subTest(args=args):
                result = self.cli(*args, check=False)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(self.store.model_controls(), [])


class PostgresModelControlTest(ModelControlContract, PostgresDatabaseCase, TempDirTestCase):
    pass


class ModelRulesTest(unittest.TestCase):
    def test_forbidden_wins_over_pinned_and_preload(self):
        rows = [control.ModelControl("box", "m", PIN), control.ModelControl("box", "m", FORBID),
                control.ModelControl("box", "m", PRELOAD)]
        rules = model_rules(rows, "box")
        self.assertEqual((rules.pinned, rules.forbidden, rules.preload), (frozenset(), frozenset({"m"}), ()))

    def test_done_requests_and_other_hosts_do_not_apply(self):
        rows = [control.ModelControl("box", "a", UNLOAD, done_at=3.0), control.ModelControl("elsewhere", "b", PIN)]
        self.assertEqual(model_rules(rows, "box"), control.ModelRules())
