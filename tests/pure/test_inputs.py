"""Table-driven tests of ``rowfleet.inputs``: an input node's spec as a workflow file gives
it (through ``dag.parse_workflow``, which every loader calls), the check every answer goes
through, and how typed text is read; and the walk resolving options from earlier results.

Pure: no database and no processes. The module's docstring examples run in test_doctests.
"""

from __future__ import annotations

import unittest
from typing import Any

from rowfleet import dag, inputs
from rowfleet.dag import AWAITING_INPUT, COMPLETED, FAILED, DefinitionError, NodeState, SetState, advance, parse_workflow
from rowfleet.errors import ConfigError
from rowfleet.inputs import (CHOOSE_MANY, CHOOSE_ONE, CONFIRM, FILE_PATH, NUMBER, TEXT, InputSpec, InvalidAnswer,
                             check, read_text)


def flow_with(**spec: Any) -> dag.Workflow:
    """A workflow whose input node ``q`` (after task ``a``) carries ``spec``."""
    return parse_workflow({"name": "f", "nodes": [
        {"id": "a", "task": "m:a"}, {"id": "b", "task": "m:b"},
        {"id": "q", "kind": "input", "prompt": "Pick?", "depends_on": ["a"], **spec}]})


class SpecTest(unittest.TestCase):
    def test_specs_that_parse(self):
        cases = [  # the node's spec fields -> the InputSpec
            ({}, None),
            ({"widget": "text"}, InputSpec(TEXT)),
            ({"widget": "text", "max_length": 20, "default": "hi"}, InputSpec(TEXT, max_length=20, default="hi")),
            ({"widget": "number", "min": 1, "max": 2.5, "default": 2}, InputSpec(NUMBER, minimum=1, maximum=2.5,
                                                                                 default=2)),
            ({"widget": "number", "min": -3}, InputSpec(NUMBER, minimum=-3)),
            ({"widget": "confirm", "default": False}, InputSpec(CONFIRM, default=False)),
            ({"widget": "choose_one", "options": ["a", 2, {"k": 1}], "default": 2},
             InputSpec(CHOOSE_ONE, options=["a", 2, {"k": 1}], default=2)),
            ({"widget": "choose_one", "options": {"$from": "a.tags"}}, InputSpec(CHOOSE_ONE, {"$from": "a.tags"})),
            ({"widget": "choose_many", "options": ["x", "y"], "default": ["y"]},
             InputSpec(CHOOSE_MANY, options=["x", "y"], default=["y"])),
            ({"widget": "choose_many", "options": {"$from": "$args.choices"}},
             InputSpec(CHOOSE_MANY, {"$from": "$args.choices"})),
            ({"widget": "file_path", "default": "data/in.csv"}, InputSpec(FILE_PATH, default="data/in.csv")),
        ]
        for fields, expected in cases:
            with self.subTest(fields=fields):
                node = flow_with(**fields).node("q")
                self.assertEqual(node.input_spec, expected)
                self.assertEqual(parse_workflow(flow_with(**fields).to_dict()).node("q"), node, "round trip")

    def test_bad_specs_are_one_line_naming_the_node(self):
        cases = [  # the node's spec fields -> a fragment of the DefinitionError
            ({"widget": "radio"}, "node 'q': \"widget\" must be one of text, number, confirm, choose_one, "
                                  "choose_many, file_path, got \"radio\""),
            ({"options": ["a"]}, "node 'q': \"options\" needs a \"widget\""),
            ({"widget": "text", "options": ["a"]}, "node 'q': a text input takes no \"options\" (it takes: "
                                                   "max_length, default)"),
            ({"widget": "confirm", "min": 1}, "a confirm input takes no \"min\""),
            ({"widget": "number", "max_length": 3}, "a number input takes no \"max_length\""),
            ({"widget": "choose_one"}, "a choose_one input needs \"options\": a list, or {\"$from\": PATH}"),
            ({"widget": "choose_one", "options": "a,b"}, "needs \"options\": a list"),
            ({"widget": "choose_one", "options": []}, "\"options\" must list at least one option"),
            ({"widget": "choose_many", "options": ["a", "a"]}, "\"options\" lists \"a\" twice"),
            ({"widget": "choose_one", "options": list(range(inputs.MOST_OPTIONS + 1))},
             f"at most {inputs.MOST_OPTIONS} are allowed"),
            ({"widget": "choose_one", "options": {"$from": "b.tags"}}, "options refers to 'b', which is not upstream"),
            ({"widget": "choose_one", "options": {"$from": "a", "x": 1}}, "\"options\" must be {\"$from\": PATH}"),
            ({"widget": "choose_one", "options": {"$from": "a..b"}}, "options: a reference must be"),
            ({"widget": "number", "min": "1"}, "\"min\" must be a finite number, got \"1\""),
            ({"widget": "number", "max": True}, "\"max\" must be a finite number"),
            ({"widget": "number", "min": 5, "max": 1}, "\"min\" (5) is above \"max\" (1)"),
            ({"widget": "text", "max_length": 0}, "\"max_length\" must be a whole number from 1"),
            ({"widget": "text", "max_length": 2.0}, "\"max_length\" must be a whole number"),
            ({"widget": "text", "max_length": 2, "default": "abc"}, "node 'q': \"default\" expects text of at most 2"),
            ({"widget": "number", "max": 3, "default": 4}, "\"default\" expects a number of at most 3; got 4"),
            ({"widget": "confirm", "default": "yes"}, "\"default\" expects true or false"),
            ({"widget": "choose_one", "options": ["a"], "default": "b"}, "\"default\" expects one of \"a\"; got \"b\""),
            ({"widget": "choose_many", "options": {"$from": "a"}, "default": "x"}, "\"default\" expects a list"),
            ({"widget": "file_path", "default": ""}, "\"default\" expects a file path"),
        ]
        for fields, fragment in cases:
            with self.subTest(fields=fields):
                with self.assertRaises(DefinitionError) as caught:
                    flow_with(**fields)
                message = str(caught.exception)
                self.assertIn(fragment, message)
                self.assertEqual(len(message.splitlines()), 1, message)
                self.assertTrue(message.startswith("node 'q'"), message)

    def test_errors_are_config_errors(self):
        self.assertTrue(issubclass(InvalidAnswer, ConfigError))
        self.assertTrue(issubclass(inputs.SpecError, ConfigError))


class CheckTest(unittest.TestCase):
    OPTIONS = ["red", 2, {"k": [1]}, True]

    def test_answers(self):
        cases = [  # spec, value, accepted?
            (InputSpec(TEXT), "anything <b>", True),
            (InputSpec(TEXT), "", True),
            (InputSpec(TEXT), 3, False),
            (InputSpec(TEXT), None, False),
            (InputSpec(TEXT), "nul\x00", False),
            (InputSpec(TEXT), "caf\udcc3", False),
            (InputSpec(TEXT, max_length=3), "abc", True),
            (InputSpec(TEXT, max_length=3), "abcd", False),
            (InputSpec(NUMBER), 0, True),
            (InputSpec(NUMBER), -2.5, True),
            (InputSpec(NUMBER), True, False),
            (InputSpec(NUMBER), "3", False),
            (InputSpec(NUMBER), float("nan"), False),
            (InputSpec(NUMBER), float("inf"), False),
            (InputSpec(NUMBER, minimum=1, maximum=3), 1, True),
            (InputSpec(NUMBER, minimum=1, maximum=3), 3.0, True),
            (InputSpec(NUMBER, minimum=1, maximum=3), 0.99, False),
            (InputSpec(NUMBER, minimum=1, maximum=3), 4, False),
            (InputSpec(CONFIRM), True, True),
            (InputSpec(CONFIRM), False, True),
            (InputSpec(CONFIRM), 1, False),
            (InputSpec(CONFIRM), "yes", False),
            (InputSpec(CHOOSE_ONE, self.OPTIONS), "red", True),
            (InputSpec(CHOOSE_ONE, self.OPTIONS), 2.0, True),
            (InputSpec(CHOOSE_ONE, self.OPTIONS), {"k": [1]}, True),
            (InputSpec(CHOOSE_ONE, self.OPTIONS), True, True),
            (InputSpec(CHOOSE_ONE, self.OPTIONS), 1, False),  # true is not 1, as JSON sees it
            (InputSpec(CHOOSE_ONE, self.OPTIONS), "2", False),
            (InputSpec(CHOOSE_ONE, self.OPTIONS), ["red"], False),
            (InputSpec(CHOOSE_ONE, self.OPTIONS), None, False),
            (InputSpec(CHOOSE_MANY, self.OPTIONS), ["red", 2], True),
            (InputSpec(CHOOSE_MANY, self.OPTIONS), [], True),
            (InputSpec(CHOOSE_MANY, self.OPTIONS), ["red", "red"], False),
            (InputSpec(CHOOSE_MANY, self.OPTIONS), ["red", "blue"], False),
            (InputSpec(CHOOSE_MANY, self.OPTIONS), "red", False),
            (InputSpec(FILE_PATH), "/data/in.csv", True),
            (InputSpec(FILE_PATH), "relative/out dir/ünï.txt", True),
            (InputSpec(FILE_PATH), "", False),
            (InputSpec(FILE_PATH), "a\nb", False),
            (InputSpec(FILE_PATH), "a\x1b[2J", False),
            (InputSpec(FILE_PATH), "x" * (inputs.MOST_PATH + 1), False),
            (InputSpec(FILE_PATH), ["/a"], False),
        ]
        for spec, value, accepted in cases:
            with self.subTest(spec=spec, value=value):
                if accepted:
                    self.assertIs(check(spec, value), value)
                else:
                    with self.assertRaises(InvalidAnswer) as caught:
                        check(spec, value, where="node 'q'")
                    self.assertTrue(str(caught.exception).startswith("node 'q' expects "), caught.exception)
                    self.assertEqual(len(str(caught.exception).splitlines()), 1)

    def test_resolved_options_are_what_a_reference_is_checked_against(self):
        spec = InputSpec(CHOOSE_ONE, {"$from": "a.tags"})
        self.assertEqual(check(spec, "x", ["x", "y"]), "x")
        with self.assertRaisesRegex(InvalidAnswer, r'expects one of "x", "y"; got "z"'):
            check(spec, "z", ["x", "y"])

    def test_a_long_list_of_options_is_cut_short_in_the_message(self):
        options = [f"option {n}" for n in range(50)]
        with self.assertRaises(InvalidAnswer) as caught:
            check(InputSpec(CHOOSE_ONE, options), "nope")
        self.assertIn("… (50 in all)", str(caught.exception))
        self.assertLess(len(str(caught.exception)), 400)


class ReadTextTest(unittest.TestCase):
    def test_text_as_typed(self):
        options = ["red", "2", 2, "true", "a,b"]
        cases = [  # spec, text -> the value
            (InputSpec(TEXT), '"quoted"', '"quoted"'),
            (InputSpec(TEXT), "42", "42"),
            (InputSpec(FILE_PATH), " ./x ", " ./x "),
            (InputSpec(NUMBER), "42", 42),
            (InputSpec(NUMBER), "-0.5", -0.5),
            (InputSpec(NUMBER), "4x", "4x"),
            (InputSpec(NUMBER), "true", "true"),
            (InputSpec(NUMBER), "NaN", "NaN"),
            (InputSpec(CONFIRM), "YES", True),
            (InputSpec(CONFIRM), "no", False),
            (InputSpec(CONFIRM), "true", True),
            (InputSpec(CONFIRM), "False ", False),
            (InputSpec(CONFIRM), "maybe", "maybe"),
            (InputSpec(CHOOSE_ONE, options), "red", "red"),
            (InputSpec(CHOOSE_ONE, options), '"red"', "red"),
            (InputSpec(CHOOSE_ONE, options), "2", 2),  # JSON first, where both are offered
            (InputSpec(CHOOSE_ONE, options), '"2"', "2"),
            (InputSpec(CHOOSE_ONE, options), "true", "true"),  # the text, where only the text is offered
            (InputSpec(CHOOSE_ONE, options), "blue", "blue"),
            (InputSpec(CHOOSE_ONE, options), "[1]", [1]),
            (InputSpec(CHOOSE_MANY, options), "red, 2", ["red", 2]),
            (InputSpec(CHOOSE_MANY, options), '["a,b", "2"]', ["a,b", "2"]),
            (InputSpec(CHOOSE_MANY, options), "", []),
            (InputSpec(CHOOSE_MANY, options), "[bad", "[bad"),
        ]
        for spec, text, expected in cases:
            with self.subTest(widget=spec.widget, text=text):
                self.assertEqual(read_text(spec, text), expected)
                self.assertEqual(type(read_text(spec, text)), type(expected))

    def test_resolved_options_are_used_for_a_reference(self):
        spec = InputSpec(CHOOSE_ONE, {"$from": "a"})
        self.assertEqual(read_text(spec, "2", ["2"]), "2")
        self.assertEqual(read_text(spec, "2"), 2, "unresolved: read as JSON, for the check to judge")


class WalkTest(unittest.TestCase):
    """Options from an earlier result are resolved when the node is reached."""

    def walk(self, result: Any, **spec: Any):
        return advance(flow_with(**spec), {"a": NodeState(COMPLETED, result), "b": NodeState(COMPLETED)})

    def test_a_reference_that_names_options_parks_the_node(self):
        step = self.walk({"tags": ["x", "y"]}, widget="choose_one", options={"$from": "a.tags"})
        self.assertIn(SetState("q", AWAITING_INPUT), step.actions)
        self.assertEqual(dag.input_options(flow_with(widget="choose_one", options={"$from": "a.tags"}).node("q"),
                                           {"a": {"tags": ["x", "y"]}}), ["x", "y"])

    def test_options_that_do_not_resolve_fail_the_node_once(self):
        cases = [
            ({"tags": 3}, "unresolvable reference options 'a.tags' must be a list, got 3"),
            ({"tags": []}, "options 'a.tags' must list at least one option"),
            ({"tags": ["x", "x"]}, "options 'a.tags' lists \"x\" twice"),
            ({}, 'unresolvable reference "a.tags": no key "tags"'),
        ]
        for result, fragment in cases:
            with self.subTest(result=result):
                step = self.walk(result, widget="choose_many", options={"$from": "a.tags"})
                self.assertEqual(step.run_state, FAILED)
                failed = [action for action in step.actions if isinstance(action, SetState) and action.node == "q"]
                self.assertEqual(len(failed), 1)
                self.assertEqual(failed[0].state, FAILED)
                self.assertIn(fragment, failed[0].error)

    def test_literal_options_need_no_results(self):
        node = flow_with(widget="choose_one", options=["x"]).node("q")
        self.assertEqual(dag.input_options(node, {}), ["x"])
        self.assertIsNone(dag.input_options(flow_with(widget="text").node("q"), {}))
        self.assertIsNone(dag.input_options(flow_with().node("q"), {}))


if __name__ == "__main__":
    unittest.main()
