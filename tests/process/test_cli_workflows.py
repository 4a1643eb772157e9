"""The workflow commands as a user types them (run, runs, submit, cancel-run, restart):
real subprocesses, a real worker and orchestrator. Slow: each test starts the command line
many times over. Bad input changes nothing.
"""

from __future__ import annotations

import json
import os
import unittest

from process.test_cli import CliTestCase


WORKFLOW_APP = """\
import rowfleet

@rowfleet.task(name="flow.double")
def double(n):
    return 2 * n

rowfleet.workflow("doubler", [
    {"id": "one", "task": "flow.double", "args": {"n": {"$from": "$args.n"}}},
    {"id": "two", "task": "flow.double", "args": {"n": {"$from": "one"}}, "depends_on": ["one"]},
    {"id": "check", "kind": "input", "prompt": "Keep it?", "depends_on": ["two"]},
])
"""


class WorkflowCommandsTest(CliTestCase):
    """The workflow commands as a user types them; bad input changes nothing."""

    def setUp(self):
        super().setUp()
        self.write_module("flowapp", WORKFLOW_APP)

    def write_flow(self, definition, name="flow.json"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as handle:
            handle.write(definition if isinstance(definition, str) else json.dumps(definition))
        return path

    def settle(self):
        for _ in range(3):
            self.cli("worker", "--app", "flowapp", "--burst")
            self.cli("orchestrator", "--once")

    def assert_no_runs(self):
        self.assertEqual(self.cli_json("runs"), [])

    def test_a_registered_workflow_runs_to_its_input_node_and_is_answered(self):
        run_id = self.cli("run", "doubler", "--app", "flowapp", "--args", '{"n": 5}').stdout.strip()
        self.settle()
        run = self.cli_json("runs", run_id)
        self.assertEqual(set(run), {"id", "project", "name", "state", "args", "error", "created_at",
                                    "updated_at", "finished_at", "nodes", "unreadable"})
        self.assertIsNone(run["unreadable"])
        self.assertEqual(run["state"], "awaiting_input")
        for node in run["nodes"]:
            self.assertLessEqual({"id", "state", "attempts", "result", "error"}, set(node))
        self.assertEqual([(n["id"], n["state"], n["result"]) for n in run["nodes"]],
                         [("one", "completed", 10), ("two", "completed", 20), ("check", "awaiting_input", None)])
        self.assertIn("awaiting_input", self.cli("runs").stdout)
        self.assertEqual(self.cli_json("runs", "--state", "awaiting_input")[0]["id"], int(run_id))
        self.cli("submit", run_id, "check", "--value", '{"keep": true}')
        self.assertEqual(self.cli_json("runs", run_id)["state"], "completed")
        self.assert_refused("submit", run_id, "check", "--value", "1", code=1, says="already submitted")

    def test_invalid_definitions_are_refused_naming_the_node(self):
        cases = [
            ({"name": "f", "nodes": [{"id": "a", "task": "flow.double", "depends_on": ["b"]}]}, "node 'a'"),
            ({"name": "f", "nodes": [{"id": "a", "task": "flow.double", "depends_on": ["b"]},
                                     {"id": "b", "task": "flow.double", "depends_on": ["a"]}]}, "cycle"),
            ({"name": "f", "nodes": [{"id": "a", "task": "flow.double"}, {"id": "a", "task": "flow.double"}]},
             "used twice"),
            ({"name": "f", "nodes": [{"id": "a", "task": "no_such_module:fn"}]}, "node 'a': refused, nothing imported"),
            ({"name": "f", "nodes": [{"id": "a", "task": "flow.double", "args": {"$from": "b"}},
                                     {"id": "b", "task": "flow.double"}]}, "not upstream"),
            ("{not json", "not valid JSON"),
            ([1, 2], "must be a JSON object"),
        ]
        for definition, says in cases:
            with self.subTest(says=says):
                self.assert_refused("run", self.write_flow(definition), "--app", "flowapp", says=says)
        self.assert_refused("run", "missing.json", says="neither a workflow file")
        self.assert_refused("run", "doubler", "--app", "flowapp", "--args", "{bad", says="--args")
        self.assert_refused("run", "doubler", "--app", "flowapp", says="cannot start: node 'one' failed: "
                            'unresolvable reference "$args.n": cannot take "n" of null')
        self.assert_no_runs()

    def test_refused_run_commands(self):
        run_id = self.cli("run", "doubler", "--app", "flowapp", "--args", '{"n": 1}').stdout.strip()
        self.assert_refused("runs", "999", code=1, says="no run 999")
        self.assert_refused("restart", run_id, code=1, says="only failed or cancelled")
        self.assert_refused("submit", run_id, "check", "--value", "true", code=1, says="not awaiting input")
        self.assert_refused("submit", run_id, "one", "--value", "true", code=1, says="task node")
        self.assert_refused("submit", run_id, "check", "--value", "{bad", says="--value")
        self.assert_refused("submit", run_id, "nope", "--value", "1", code=1, says="no node 'nope'")
        self.assert_refused("runs", "--state", "weird", says="invalid choice")
        self.cli("cancel-run", run_id)
        self.assertEqual(self.cli_json("runs", run_id)["state"], "cancelled")
        self.assertEqual(self.cli_json("jobs", "--state", "queued"), [])

    def test_a_task_check_can_be_skipped_for_a_host_without_the_tasks(self):
        path = self.write_flow({"name": "f", "nodes": [{"id": "a", "task": "gpu_only:fn"}]})
        self.assert_refused("run", path, "--app", "flowapp", "--allow-module", "gpu_only",
                            says="node 'a': unknown task")
        run_id = self.cli("run", path, "--app", "flowapp", "--allow-module", "gpu_only",
                          "--no-task-check").stdout.strip()
        self.assertEqual(self.cli_json("runs", run_id)["nodes"][0]["state"], "queued")


if __name__ == "__main__":
    unittest.main()
