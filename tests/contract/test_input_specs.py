"""Input nodes with a spec, against a real database: ``Store.submit_input``, which every
answer goes through (the command line, the API, the panel), refuses a value that does not
fit the node's spec with one line and writes nothing, and takes one that fits. Options that
come from an earlier node's result are resolved when the node is reached, and every reader
shows the same list.

``InputSpecContract`` is backend-neutral and runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import sqlite3

from rowfleet import dag
from rowfleet.claim import Claim
from rowfleet.errors import ConfigError, Conflict
from rowfleet.inputs import InvalidAnswer
from rowfleet.job import COMPLETED, Outcome
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase

HOSTILE = '<script>alert(1)</script>'


class InputSpecContract:
    """Subclasses provide ``config()`` naming their database and ``dump()``, every row."""

    def setUp(self):
        super().setUp()
        self.store = self.open_store()

    def start(self, *nodes, args=None):
        return self.store.start_run(dag.parse_workflow({"name": "flow", "nodes": list(nodes)}), args, "")

    def finish_next(self, result):
        """Complete the next due job with ``result``, and drain the outbox."""
        job = self.store.claim(Claim("", "default", "box:1", 60.0))
        self.store.finish(job, Outcome(COMPLETED, result=result))
        self.store.drain("")

    def picking_run(self):
        """A run whose input node ``pick`` offers the tags the task ``fetch`` returned."""
        run_id = self.start({"id": "fetch", "task": "m:fetch"},
                            {"id": "pick", "kind": "input", "prompt": "Which one?", "widget": "choose_one",
                             "options": {"$from": "fetch.tags"}, "depends_on": ["fetch"]},
                            {"id": "use", "task": "m:use", "args": {"tag": {"$from": "pick"}}, "depends_on": ["pick"]})
        self.finish_next({"tags": ["stable", "beta", HOSTILE]})
        return run_id

    def test_options_from_an_earlier_result_are_resolved_and_shown_alike(self):
        run_id = self.picking_run()
        run = self.store.get_run(run_id, "")
        self.assertEqual(run.state, dag.AWAITING_INPUT)
        node = run.node("pick")
        self.assertEqual(node.options, ["stable", "beta", HOSTILE])
        self.assertEqual(node.to_dict()["spec"], {"widget": "choose_one", "options": {"$from": "fetch.tags"}})
        self.assertEqual(self.store.reads.find_run(run_id).node("pick").options, node.options)
        self.assertIsNone(run.node("fetch").options, "a task node offers no options")

    def test_a_mismatch_is_refused_in_one_line_and_writes_nothing(self):
        run_id = self.picking_run()
        before = self.dump()
        for value in ("nightly", None, ["stable"], 1):
            with self.subTest(value=value):
                with self.assertRaises(InvalidAnswer) as caught:
                    self.store.submit_input(run_id, "pick", value, "")
                message = str(caught.exception)
                self.assertTrue(message.startswith(f"node 'pick' of run {run_id} expects one of \"stable\", "
                                                   f"\"beta\""), message)
                self.assertEqual(len(message.splitlines()), 1)
                self.assertIsInstance(caught.exception, ConfigError, "bad input: the command line exits 2")
                self.assertEqual(self.dump(), before, "a refused answer wrote something")

    def test_a_matching_value_completes_the_node_and_the_run_moves_on(self):
        run_id = self.picking_run()
        run = self.store.submit_input(run_id, "pick", HOSTILE, "")
        self.assertEqual(run.state, dag.RUNNING)
        self.assertEqual((run.node("pick").state, run.node("pick").result), (COMPLETED, HOSTILE))
        self.assertEqual(run.node("use").state, dag.QUEUED)
        use = self.store.get_job(run.node("use").jobs[0], "")
        self.assertEqual(use.args, {"tag": HOSTILE})
        with self.assertRaisesRegex(Conflict, "already submitted"):
            self.store.submit_input(run_id, "pick", "beta", "")

    def test_each_widget_takes_what_fits_and_refuses_the_rest(self):
        cases = [  # the spec, a value it takes, one it refuses
            ({"widget": "text", "max_length": 5}, "short", "too long"),
            ({"widget": "number", "min": 0, "max": 10}, 2.5, 11),
            ({"widget": "confirm"}, False, "no"),
            ({"widget": "choose_many", "options": ["a", "b", "c"]}, ["c", "a"], ["a", "d"]),
            ({"widget": "file_path"}, "../data/in.csv", "line\nbreak"),
            ({}, {"any": ["json"]}, None),  # no spec: any JSON value, as before
        ]
        for spec, good, bad in cases:
            with self.subTest(spec=spec):
                run_id = self.start({"id": "ask", "kind": "input", **spec})
                if spec:
                    before = self.dump()
                    with self.assertRaises(InvalidAnswer):
                        self.store.submit_input(run_id, "ask", bad, "")
                    self.assertEqual(self.dump(), before)
                run = self.store.submit_input(run_id, "ask", good, "")
                self.assertEqual((run.state, run.node("ask").result), (dag.COMPLETED, good))

    def test_options_that_do_not_resolve_when_the_run_starts_write_no_run(self):
        before = self.dump()
        with self.assertRaisesRegex(ConfigError, "the run cannot start: node 'pick' failed: unresolvable "
                                                 "reference options '\\$args.tags' must be a list, got \"x\""):
            self.start({"id": "pick", "kind": "input", "widget": "choose_one", "options": {"$from": "$args.tags"}},
                       args={"tags": "x"})
        self.assertEqual(self.dump(), before)

    def test_options_that_do_not_resolve_later_fail_the_node(self):
        run_id = self.start({"id": "fetch", "task": "m:fetch"},
                            {"id": "pick", "kind": "input", "widget": "choose_many",
                             "options": {"$from": "fetch.tags"}, "depends_on": ["fetch"]})
        self.finish_next({"tags": []})
        run = self.store.get_run(run_id, "")
        self.assertEqual((run.state, run.node("pick").state), (dag.FAILED, dag.FAILED))
        self.assertIn("options 'fetch.tags' must list at least one option", run.node("pick").error)


class SQLiteInputSpecTest(InputSpecContract, TempDirTestCase):
    def dump(self):
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            return list(conn.iterdump())


class PostgresInputSpecTest(PostgresDatabaseCase, InputSpecContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""

    def dump(self):
        with self.caller_connection() as conn:
            tables = [row[0] for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
                "AND table_type = 'BASE TABLE' ORDER BY table_name").fetchall()]
            # Table names come from the catalogue, never from a caller: quoted as identifiers.
            return {table: sorted(map(repr, conn.execute(f'SELECT * FROM "{table}"').fetchall())) for table in tables}
