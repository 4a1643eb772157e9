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

    def test_an_input_spec_is_shown_and_each_answer_is_checked(self):
        path = self.write_flow({"name": "sizes", "nodes": [
            {"id": "one", "task": "flow.double", "args": {"n": {"$from": "$args.n"}}},
            {"id": "pick", "kind": "input", "prompt": "Which <b>size</b>?", "widget": "choose_one",
             "options": {"$from": "$args.sizes"}, "depends_on": ["one"]},
            {"id": "sure", "kind": "input", "prompt": "Sure?", "widget": "confirm", "depends_on": ["pick"]},
            {"id": "many", "kind": "input", "widget": "choose_many", "options": ["a", "b", "c"],
             "depends_on": ["sure"]},
            {"id": "count", "kind": "input", "widget": "number", "min": 1, "max": 3, "default": 2,
             "depends_on": ["many"]}]})
        sizes = ["small", "large", "x\x1b[2J"]
        run_id = self.cli("run", path, "--app", "flowapp", "--args", json.dumps({"n": 1, "sizes": sizes})).stdout.strip()
        self.settle()
        shown = self.cli("runs", run_id).stdout
        self.assertIn("input pick (choose_one): Which <b>size</b>?\n  options:\n    - small\n    - large\n"
                      "    - x\\x1b[2J\n", shown, "each option on a line, a control character escaped")
        self.assertIn(f"answer: rowfleet submit {run_id} pick --value VALUE", shown)
        pick = {node["id"]: node for node in self.cli_json("runs", run_id)["nodes"]}["pick"]
        self.assertEqual((pick["spec"], pick["options"]),
                         ({"widget": "choose_one", "options": {"$from": "$args.sizes"}}, sizes))
        line = self.assert_refused("submit", run_id, "pick", "--value", "medium", says="expects one of")
        self.assertIn(f"node 'pick' of run {run_id} expects one of \"small\", \"large\"", line)
        self.cli("submit", run_id, "pick", "--value", "large")
        self.assert_refused("submit", run_id, "sure", "--value", "maybe", says="expects true or false (yes or no)")
        self.cli("submit", run_id, "sure", "--value", "Yes")
        self.assert_refused("submit", run_id, "many", "--value", "a, d", says="a list of distinct options")
        self.cli("submit", run_id, "many", "--value", "c, a")
        shown = self.cli("runs", run_id).stdout
        self.assertIn("input count (number): no prompt\n  expects a number from 1 to 3\n  default: 2\n", shown)
        self.assert_refused("submit", run_id, "count", "--value", "4", says="expects a number from 1 to 3; got 4")
        self.assert_refused("submit", run_id, "count", "--value", "two", says="got \"two\"")
        self.cli("submit", run_id, "count", "--value", "3")
        run = self.cli_json("runs", run_id)
        self.assertEqual(run["state"], "completed")
        self.assertEqual([node["result"] for node in run["nodes"][1:]], ["large", True, ["c", "a"], 3])

    def test_a_bad_input_spec_is_one_line_and_writes_no_run(self):
        cases = [
            ({"widget": "radio"}, "node 'ask': \"widget\" must be one of text, number, confirm"),
            ({"widget": "choose_one", "options": []}, "node 'ask': \"options\" must list at least one option"),
            ({"widget": "number", "min": 3, "max": 1}, "node 'ask': \"min\" (3) is above \"max\" (1)"),
        ]
        for spec, says in cases:
            with self.subTest(spec=spec):
                path = self.write_flow({"name": "f", "nodes": [{"id": "ask", "kind": "input", **spec}]})
                self.assert_refused("run", path, says=says)
        self.assert_refused("run", self.write_flow({"name": "f", "nodes": [
            {"id": "ask", "kind": "input", "widget": "choose_one", "options": {"$from": "$args.tags"}}]}),
            "--args", '{"tags": 3}', says="the run cannot start: node 'ask' failed: unresolvable reference options")
        self.assert_no_runs()

    def test_a_queued_answer_is_listed_pending_and_applied_by_the_orchestrator(self):
        run_id = self.cli("run", "doubler", "--app", "flowapp", "--args", '{"n": 1}').stdout.strip()
        self.settle()
        queued = self.cli("submit", run_id, "check", "--value", '{"keep": false}', "--queued", "--by", "ops")
        [pending] = self.cli_json("submissions")
        self.assertEqual((pending["id"], pending["state"], pending["submitted_by"], pending["value"]),
                         (int(queued.stdout), "pending", "ops", {"keep": False}))
        self.assertEqual(self.cli_json("runs", run_id)["state"], "awaiting_input", "--queued applied the answer")
        self.assertEqual(json.loads(self.cli("orchestrator", "--once").stdout)["submissions_applied"], 1)
        self.assertEqual(self.cli_json("runs", run_id)["state"], "completed")
        # A queued answer is judged when applied: this one fails then, in one line, and changes nothing.
        late = self.cli_json("submit", run_id, "check", "--value", "1", "--queued")
        self.assertEqual((late["state"], late["run_id"], late["node_id"]), ("pending", int(run_id), "check"))
        self.assertEqual(json.loads(self.cli("orchestrator", "--once").stdout)["submissions_failed"], 1)
        listed = self.cli_json("submissions", "--run", run_id)
        self.assertEqual([(s["id"], s["state"]) for s in listed],
                         [(late["id"], "failed"), (pending["id"], "processed")])
        self.assertIn("a value was already submitted", listed[0]["error"])
        self.assertEqual([s["id"] for s in self.cli_json("submissions", "--state", "failed")], [late["id"]])
        self.assertIn(f"node 'check' of run {run_id} is completed", self.cli("submissions").stdout)
        self.assertEqual(self.cli_json("runs", run_id)["nodes"][-1]["result"], {"keep": False})
        before = self.cli_json("submissions")
        self.assert_refused("submit", run_id, "check", "--value", "1", "--queued", "--by", "x" * 500, says="--by")
        self.assert_refused("submit", run_id, "no such node", "--value", "1", "--queued", says="node")
        self.assertEqual(self.cli_json("submissions"), before, "a refused --queued wrote a row")

    def test_a_direct_answer_is_recorded_as_a_processed_submission_by_its_user(self):
        run_id = self.cli("run", "doubler", "--app", "flowapp", "--args", '{"n": 1}').stdout.strip()
        self.settle()
        self.cli("submit", run_id, "check", "--value", "true", "--by", "reviewer")
        [row] = self.cli_json("submissions", "--run", run_id)
        self.assertEqual((row["state"], row["submitted_by"], row["value"], row["error"]),
                         ("processed", "reviewer", True, None))


if __name__ == "__main__":
    unittest.main()
