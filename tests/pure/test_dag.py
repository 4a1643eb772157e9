"""Table-driven tests of ``rowfleet.dag``: parsing, references, the walk, folding, restarts.

Pure: no database and no processes. The module's docstring examples run in test_pure.
"""

from __future__ import annotations

import unittest
from typing import Any

from rowfleet.dag import (AWAITING_INPUT, CANCELLED, COMPLETED, FAILED, INPUT, MAX_MAP_ITEMS, PENDING, QUEUED,
                          RUNNING, SKIPPED, TASK, Condition, DefinitionError, Enqueue, JobView, Node, NodeState,
                          SetState, Step, UnresolvedReference, Workflow, advance, fold, lookup, parse_workflow,
                          references, resolve, restart_nodes)
from rowfleet.errors import ConfigError

# --- building definitions --------------------------------------------------------------


def task(node_id: str, *deps: str, **fields: Any) -> dict[str, Any]:
    """A task node's JSON form; ``task`` defaults to ``m:<id>``."""
    node: dict[str, Any] = {"id": node_id, "task": f"m:{node_id}", **fields}
    if deps:
        node["depends_on"] = list(deps)
    return node


def ask(node_id: str, *deps: str, **fields: Any) -> dict[str, Any]:
    """An input node's JSON form."""
    node: dict[str, Any] = {"id": node_id, "kind": INPUT, **fields}
    if deps:
        node["depends_on"] = list(deps)
    return node


def definition(*nodes: dict[str, Any], name: str = "f") -> dict[str, Any]:
    return {"name": name, "nodes": list(nodes)}


def flow(*nodes: dict[str, Any]) -> Workflow:
    return parse_workflow(definition(*nodes))


def ref(path: str) -> dict[str, str]:
    return {"$from": path}


# --- describing runs -------------------------------------------------------------------


def states(**given: Any) -> dict[str, NodeState]:
    """``a=COMPLETED`` or ``a=(COMPLETED, result)`` or ``a=(FAILED, None, "boom")``."""
    return {node_id: NodeState(*value) if isinstance(value, tuple) else NodeState(value)
            for node_id, value in given.items()}


def actions(step: Step) -> list[tuple[Any, ...]]:
    """A step's actions, comparable in a table: SetState errors are checked separately."""
    return [("enqueue", a.node, a.args, a.items) if isinstance(a, Enqueue) else ("set", a.node, a.state, a.result)
            for a in step.actions]


def enqueue(node_id: str, args: Any = None, items: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
    return ("enqueue", node_id, args, items)


def set_state(node_id: str, state: str, result: Any = None) -> tuple[Any, ...]:
    return ("set", node_id, state, result)


def apply(current: dict[str, NodeState], step: Step) -> dict[str, NodeState]:
    """The node states once the store has persisted ``step``."""
    after = dict(current)
    for action in step.actions:
        after[action.node] = (NodeState(QUEUED) if isinstance(action, Enqueue)
                              else NodeState(action.state, action.result, action.error))
    return after


def drive(workflow: Workflow, run_args: Any = None, results: dict[str, Any] | None = None
          ) -> tuple[Step, list[Enqueue]]:
    """Run a workflow to its end, completing each enqueued node with ``results[node]``, else
    its args (a map node: the list of its items): the last step and every Enqueue, in order."""
    results = results or {}
    current: dict[str, NodeState] = {}
    enqueued: list[Enqueue] = []
    for _ in range(len(workflow.nodes) + 1):
        step = advance(workflow, current, run_args)
        current = apply(current, step)
        news = [a for a in step.actions if isinstance(a, Enqueue)]
        enqueued += news
        if step.run_state != RUNNING:
            return step, enqueued
        for action in news:
            echo = action.args if action.items is None else list(action.items)
            current[action.node] = NodeState(COMPLETED, results.get(action.node, echo))
    raise AssertionError("the walk did not finish")


# --- parsing ---------------------------------------------------------------------------


class ParseValidTest(unittest.TestCase):
    def test_task_node_defaults(self):
        parsed = flow(task("a"))
        self.assertEqual(parsed, Workflow("f", (Node("a", TASK, "m:a", "default", None, (), 3, 0),)))
        self.assertEqual(parsed.node("a").kind, "task")

    def test_every_task_field(self):
        node = flow(task("a"), task("b", "a", queue="q", args={"x": [1]}, max_attempts=1, priority=-4,
                                    timeout=5, model="big", vram_mb=16000)).node("b")
        self.assertEqual((node.queue, node.args, node.max_attempts, node.priority, node.timeout, node.model,
                          node.vram_mb), ("q", {"x": [1]}, 1, -4, 5.0, "big", 16000))
        self.assertEqual(node.to_dict()["vram_mb"], 16000)
        self.assertIsInstance(node.timeout, float)

    def test_default_queue_is_a_parameter(self):
        parsed = parse_workflow(definition(task("a"), task("b", queue="own")), default_queue="fast")
        self.assertEqual([n.queue for n in parsed.nodes], ["fast", "own"])

    def test_name_is_stripped_and_description_allowed(self):
        parsed = parse_workflow({"name": "  nightly ", "description": "d", "nodes": [task("a")]})
        self.assertEqual(parsed.name, "nightly")

    def test_input_node(self):
        node = flow(task("a"), ask("q", "a", prompt="Go?", skip_if={"$from": "a", "equals": 0})).node("q")
        self.assertEqual(node, Node("q", INPUT, depends_on=("a",), skip_if=Condition("a", "equals", 0),
                                    prompt="Go?", queue="", max_attempts=1))

    def test_valid_ids(self):
        for node_id in ("a", "_", "_a", "A9", "a-b_c", "a" * 64):
            with self.subTest(node_id=node_id):
                self.assertEqual(flow(task(node_id)).nodes[0].id, node_id)

    def test_topological_order_keeps_file_order_among_independent_nodes(self):
        cases = [  # file order (id, deps) -> parsed order
            ([("x", ()), ("y", ()), ("z", ())], ["x", "y", "z"]),
            ([("z", ()), ("y", ()), ("x", ())], ["z", "y", "x"]),
            ([("b", ("a",)), ("a", ()), ("c", ())], ["a", "b", "c"]),
            ([("d", ()), ("c", ("b",)), ("b", ("a",)), ("a", ()), ("e", ())], ["d", "a", "b", "c", "e"]),
            ([("j", ("r1", "r2")), ("r2", ()), ("r1", ())], ["r1", "r2", "j"]),
        ]
        for nodes, expected in cases:
            with self.subTest(nodes=nodes):
                parsed = flow(*(task(node_id, *deps) for node_id, deps in nodes))
                self.assertEqual([n.id for n in parsed.nodes], expected)

    def test_a_long_chain_parses(self):
        # Each node depends on the next one in the file: the deepest order to place.
        size = 2_000
        nodes = [task(f"n{i}", f"n{i + 1}") for i in range(size - 1)] + [task(f"n{size - 1}")]
        parsed = flow(*nodes)
        self.assertEqual([n.id for n in parsed.nodes], [f"n{i}" for i in reversed(range(size))])

    def test_references_that_are_allowed(self):
        cases = [
            [task("a"), task("b", "a", args=ref("a"))],
            [task("a"), task("b", "a"), task("c", "b", args={"deep": [ref("a.x.0")]})],  # a grandparent
            [task("a", args=ref("$args")), task("b", args={"k": ref("$args.k.-1")})],
            [task("a", skip_if={"$from": "$args.off", "equals": True})],
            [task("a", map=ref("$args.items"), args=ref("$item"))],
            [task("a"), task("b", "a", map=ref("a.list"), args={"i": ref("$item.k"), "a": ref("a.n")})],
            [task("a"), ask("q", "a", skip_if={"$from": "a.n", "in": [1, 2]})],
        ]
        for nodes in cases:
            with self.subTest(nodes=nodes):
                flow(*nodes)

    def test_skip_if_ops(self):
        cases = [
            ({"$from": "a", "equals": None}, Condition("a", "equals", None)),
            ({"$from": "a.x", "not_equals": {"k": 1}}, Condition("a.x", "not_equals", {"k": 1})),
            ({"$from": "a", "in": []}, Condition("a", "in", [])),
            ({"$from": "a", "empty": False}, Condition("a", "empty", False)),
        ]
        for raw, expected in cases:
            with self.subTest(raw=raw):
                self.assertEqual(flow(task("a"), task("b", "a", skip_if=raw)).node("b").skip_if, expected)


class ParseRejectTest(unittest.TestCase):
    def assertRejected(self, data: Any, fragment: str) -> None:
        with self.assertRaises(DefinitionError) as caught:
            parse_workflow(data)
        self.assertIn(fragment, str(caught.exception))

    def test_top_level(self):
        cases = [
            ([], "a workflow must be a JSON object, got a list"),
            ("f", "a workflow must be a JSON object, got a string"),
            (None, "a workflow must be a JSON object, got null"),
            ({"nodes": [task("a")]}, 'a workflow needs a non-empty "name"'),
            (definition(task("a"), name=""), 'a workflow needs a non-empty "name"'),
            (definition(task("a"), name="  "), 'a workflow needs a non-empty "name"'),
            (definition(task("a"), name=5), 'a workflow needs a non-empty "name"'),
            ({"name": "f"}, "workflow 'f' needs a non-empty list of \"nodes\""),
            (definition(), "workflow 'f' needs a non-empty list of \"nodes\""),
            ({"name": "f", "nodes": {"a": task("a")}}, "workflow 'f' needs a non-empty list of \"nodes\""),
            ({"name": "f", "nodes": [task("a")], "owner": "x"}, "workflow: unknown field 'owner'"),
            (definition(task("a"), 5), "node #2: must be a JSON object, got a number"),
        ]
        for data, fragment in cases:
            with self.subTest(data=data):
                self.assertRejected(data, fragment)

    def test_nodes(self):
        cases = [  # nodes -> the message, naming the node
            ([task("a", dependson=["x"])], "node 'a': unknown field 'dependson'"),
            ([task("a", kind="job")], "node 'a': \"kind\" must be \"task\" or \"input\", got 'job'"),
            ([task("a"), task("a")], "node 'a': the id is used twice"),
            ([task("a"), task("b", "z")], "node 'b': depends on unknown node 'z'"),
            ([task("a", "a")], "node 'a': depends on itself"),
            ([task("a"), task("b", "a", "a")], "node 'b': \"depends_on\" lists a node twice"),
            ([task("a"), task("b", depends_on="a")], "node 'b': \"depends_on\" must be a list of node ids"),
            ([task("a"), task("b", depends_on=[1])], "node 'b': \"depends_on\" must be a list of node ids"),
            ([task("a", "b"), task("b", "a")], "node 'a': the dependencies form a cycle: a -> b -> a"),
            ([task("a", "c"), task("b", "a"), task("c", "b")],
             "node 'a': the dependencies form a cycle: a -> c -> b -> a"),
            ([task("x", "a"), task("a", "b"), task("b", "a")],
             "node 'a': the dependencies form a cycle: a -> b -> a"),
            ([{"id": "a"}], "node 'a': \"task\" must be a task name (module:function), got None"),
            ([task("a", task="m: a")], "node 'a': \"task\" must be a task name (module:function), got 'm: a'"),
            ([task("a", task="")], "node 'a': \"task\" must be a task name"),
            ([task("a", task=5)], "node 'a': \"task\" must be a task name"),
            ([task("a", queue="")], "node 'a': \"queue\" must be a non-empty word, got ''"),
            ([task("a", queue="a b")], "node 'a': \"queue\" must be a non-empty word, got 'a b'"),
            ([task("a", queue=1)], "node 'a': \"queue\" must be a non-empty word, got 1"),
            ([task("a", max_attempts=0)], "node 'a': \"max_attempts\" must be an integer of at least 1, got 0"),
            ([task("a", max_attempts="3")], "node 'a': \"max_attempts\" must be an integer of at least 1, got '3'"),
            ([task("a", max_attempts=True)], "node 'a': \"max_attempts\" must be an integer of at least 1, got True"),
            ([task("a", max_attempts=2.0)], "node 'a': \"max_attempts\" must be an integer of at least 1, got 2.0"),
            ([task("a", priority=1.5)], "node 'a': \"priority\" must be an integer, got 1.5"),
            ([task("a", priority="1")], "node 'a': \"priority\" must be an integer, got '1'"),
            ([task("a", priority=False)], "node 'a': \"priority\" must be an integer, got False"),
            ([task("a", timeout=0)], "node 'a': \"timeout\" must be a positive number of seconds, got 0"),
            ([task("a", timeout=-1)], "node 'a': \"timeout\" must be a positive number of seconds, got -1"),
            ([task("a", timeout=True)], "node 'a': \"timeout\" must be a positive number of seconds, got True"),
            ([task("a", timeout="5")], "node 'a': \"timeout\" must be a positive number of seconds, got '5'"),
            ([task("a", vram_mb=0)], "node 'a': \"vram_mb\" must be an integer of at least 1, got 0"),
            ([task("a", vram_mb="16G")], "node 'a': \"vram_mb\" must be an integer"),
            ([task("a", model="two words")], "node 'a': \"model\""),
            ([task("a", model="")], "node 'a': \"model\" must be a non-empty word"),
            ([task("a", model=3)], "node 'a': \"model\" must be a non-empty word"),
        ]
        for nodes, fragment in cases:
            with self.subTest(nodes=nodes):
                self.assertRejected(definition(*nodes), fragment)

    def test_bad_ids_are_named_by_position(self):
        for node_id in ("1a", "-a", "a b", "a.b", "$a", "", None, 5, "a" * 65, "é"):
            with self.subTest(node_id=node_id):
                self.assertRejected(definition(task("ok"), {"id": node_id, "task": "m:x"}),
                                    f"node #2: \"id\" must be letters, digits, _ or - (starting with a letter "
                                    f"or _, at most 64), got {node_id!r}")
        self.assertRejected(definition(task("ok"), {"task": "m:x"}), "node #2: \"id\" must be")

    def test_id_with_a_trailing_newline_is_rejected(self):
        # ``$`` in a regex also matches just before a final newline.
        self.assertRejected(definition({"id": "a\n", "task": "m:a"}), "node #1: \"id\" must be")

    def test_references(self):
        cases = [
            ([task("a"), task("b", "a"), task("c", "a", args=ref("b.x"))],
             "node 'c': args refers to 'b', which is not upstream of it (list it in depends_on)"),
            ([task("a", args={"x": [ref("b")]}), task("b", "a")],
             "node 'a': args refers to 'b', which is not upstream"),
            ([task("a", args=ref("nobody"))], "node 'a': args refers to 'nobody', which is not upstream"),
            ([task("a", args=ref("a.x"))], "node 'a': args refers to 'a', which is not upstream"),
            ([task("a"), task("b", "a", args={"x": {"$from": "a", "default": 1}})],
             "node 'b': a reference is {\"$from\": PATH} with no other keys"),
            ([task("a"), task("b", "a", args=ref("a..b"))], "node 'b': args: a reference must be \"NODE\" or "
                                                             "\"NODE.key.0\", got 'a..b'"),
            ([task("a"), task("b", "a", args=[ref("")])], "node 'b': args: a reference must be"),
            ([task("a"), task("b", "a", args=ref("a."))], "node 'b': args: a reference must be"),
            ([task("a"), task("b", "a", args=ref(".a"))], "node 'b': args: a reference must be"),
            ([task("a"), task("b", "a", args={"$from": 5})], "node 'b': args: a reference must be"),
            ([task("a"), task("b", "a", args=ref("$item"))],
             "node 'b': args refers to \"$item\", which only a map node's args may"),
            ([task("a"), task("b", "a", map=ref("a"), skip_if={"$from": "$item", "equals": 1})],
             "node 'b': skip_if refers to \"$item\""),
            ([task("a", map=ref("$item.list"))], "node 'a': map refers to \"$item\""),
            ([task("a"), task("b", "a"), task("c", "a", skip_if={"$from": "b", "equals": 1})],
             "node 'c': skip_if refers to 'b', which is not upstream"),
            ([task("a"), task("b", "a"), task("c", "a", map=ref("b.list"))],
             "node 'c': map refers to 'b', which is not upstream"),
        ]
        for nodes, fragment in cases:
            with self.subTest(nodes=nodes):
                self.assertRejected(definition(*nodes), fragment)

    def test_skip_if_shapes(self):
        one_op = ("node 'b': \"skip_if\" must be {\"$from\": PATH, OP: VALUE} with one OP of "
                  "equals, not_equals, in, empty")
        cases = [
            ({"$from": "a"}, one_op),
            ({"$from": "a", "equals": 1, "not_equals": 2}, one_op),
            ({"$from": "a", "matches": "x"}, one_op),
            ({"$from": "a", "equals": 1, "note": "x"}, one_op),
            ({"equals": 1}, one_op),
            ("a.x", one_op),
            ({"$from": "a", "in": "abc"}, "node 'b': \"skip_if\" with \"in\" needs a list"),
            ({"$from": "a", "empty": 1}, "node 'b': \"skip_if\" with \"empty\" needs true or false"),
            ({"$from": "a..b", "equals": 1}, "node 'b': skip_if: a reference must be"),
        ]
        for raw, fragment in cases:
            with self.subTest(skip_if=raw):
                self.assertRejected(definition(task("a"), task("b", "a", skip_if=raw)), fragment)

    def test_map_shapes(self):
        shape = "node 'b': \"map\" must be {\"$from\": PATH} naming an upstream list"
        cases = [
            ("a.items", shape),
            (["a"], shape),
            ({}, shape),
            ({"$from": "a", "limit": 3}, shape),
            ({"$from": ""}, "node 'b': map: a reference must be"),
            ({"$from": "a.items."}, "node 'b': map: a reference must be"),
        ]
        for raw, fragment in cases:
            with self.subTest(map=raw):
                self.assertRejected(definition(task("a"), task("b", "a", map=raw)), fragment)

    def test_input_nodes_take_only_their_fields(self):
        cases = [
            ({"task": "m:q"}, "node 'q': unknown field 'task'"),
            ({"queue": "q"}, "node 'q': unknown field 'queue'"),
            ({"args": {}}, "node 'q': unknown field 'args'"),
            ({"map": ref("a")}, "node 'q': unknown field 'map'"),
            ({"max_attempts": 2}, "node 'q': unknown field 'max_attempts'"),
            ({"timeout": 5}, "node 'q': unknown field 'timeout'"),
            ({"prompt": 5}, "node 'q': \"prompt\" must be a string"),
            ({"skip_if": {"$from": "b", "equals": 1}}, "node 'q': skip_if refers to 'b', which is not upstream"),
        ]
        for fields, fragment in cases:
            with self.subTest(fields=fields):
                self.assertRejected(definition(task("a"), task("b"), ask("q", "a", **fields)), fragment)

    def test_a_task_nodes_prompt_is_not_silently_dropped(self):
        # "prompt" passes the task-node field check, so it must either be kept or refused.
        try:
            node = flow(task("a", prompt="Summarise")).node("a")
        except DefinitionError:
            return
        self.assertEqual((node.prompt, node.to_dict().get("prompt")), ("Summarise", "Summarise"))

    def test_definition_error_is_a_config_error(self):
        self.assertTrue(issubclass(DefinitionError, ConfigError))


class RoundTripTest(unittest.TestCase):
    EVERYTHING = definition(
        task("fetch", queue="io", args={"url": ref("$args.url"), "n": 3}, max_attempts=5, priority=2, timeout=2.5,
             model="small"),
        ask("approve", "fetch", prompt="Proceed?", skip_if={"$from": "$args.auto", "equals": True}),
        task("each", "fetch", "approve", map=ref("fetch.items"), args={"item": ref("$item"), "key": ref("$item.k"),
                                                                      "answer": ref("approve.ok")}),
        task("gate", "each", skip_if={"$from": "each", "empty": True}, args=[ref("each.-1"), 0, None]),
        task("tally", "gate", "fetch", skip_if={"$from": "fetch.n", "in": [0, None]}, args=False),
        task("tail", "tally", skip_if={"$from": "tally", "not_equals": {"ok": True}}),
        ask("done", "tail"),
    )

    def test_parse_of_to_dict_is_the_same_workflow(self):
        parsed = parse_workflow(self.EVERYTHING)
        self.assertEqual(parse_workflow(parsed.to_dict()), parsed)

    def test_to_dict_leaves_defaults_out(self):
        parsed = flow(task("a"), ask("q", "a"))
        self.assertEqual(parsed.to_dict(), {"name": "f", "nodes": [
            {"id": "a", "task": "m:a", "queue": "default", "max_attempts": 3},
            {"id": "q", "kind": "input", "depends_on": ["a"]},
        ]})


# --- references ------------------------------------------------------------------------


class ReferencesTest(unittest.TestCase):
    ROOTS = {"a": {"x": {"y": [10, {"z": "deep"}]}, "list": [1, 2, 3], "s": "text", "n": 7, "none": None},
             "b": [[1, 2], [3, 4]], "$args": {"k": "v"}, "e": {}}

    def test_lookup_finds(self):
        cases = [
            ("a", self.ROOTS["a"]),
            ("a.n", 7),
            ("a.none", None),
            ("a.x.y.0", 10),
            ("a.x.y.1.z", "deep"),
            ("a.x.y.-1.z", "deep"),
            ("a.list.-3", 1),
            ("b.1.0", 3),
            ("b.-1.-1", 4),
            ("$args", {"k": "v"}),
            ("$args.k", "v"),
        ]
        for path, expected in cases:
            with self.subTest(path=path):
                self.assertEqual(lookup(path, self.ROOTS), expected)

    def test_lookup_explains_what_is_missing(self):
        cases = [
            ("c.x", "'c.x': 'c' has no result"),
            ("a.q", '"a.q": no key "q" (keys: list, n, none, s, x)'),
            ("e.q", '"e.q": no key "q" (keys: none)'),
            ("a.list.3", '"a.list.3": "3" is not an index into a list of 3'),
            ("a.list.-4", '"a.list.-4": "-4" is not an index into a list of 3'),
            ("a.list.first", '"a.list.first": "first" is not an index into a list of 3'),
            ("a.list.1.5", '"a.list.1.5": cannot take "5" of a number'),
            ("a.s.0", '"a.s.0": cannot take "0" of a string'),
            ("a.none.x", '"a.none.x": cannot take "x" of null'),
        ]
        for path, message in cases:
            with self.subTest(path=path):
                with self.assertRaises(UnresolvedReference) as caught:
                    lookup(path, self.ROOTS)
                self.assertEqual(str(caught.exception), message)

    def test_lookup_of_a_malformed_index_is_unresolved(self):
        # parse_workflow accepts these paths, so the walk meets them; int() must not raise out of lookup.
        for part in ("--1", "-", "²"):
            with self.subTest(part=part), self.assertRaises(UnresolvedReference):
                lookup(f"a.list.{part}", self.ROOTS)

    def test_resolve(self):
        cases = [
            (None, None),
            (5, 5),
            (ref("a.n"), 7),
            ({"n": ref("a.n"), "k": [ref("$args.k"), {"deep": ref("a.x.y.1")}], "lit": [1, "a.n"]},
             {"n": 7, "k": ["v", {"deep": {"z": "deep"}}], "lit": [1, "a.n"]}),
            ([ref("b.0"), [ref("b.1.1")]], [[1, 2], [4]]),
        ]
        for value, expected in cases:
            with self.subTest(value=value):
                self.assertEqual(resolve(value, self.ROOTS), expected)

    def test_resolve_raises_for_a_nested_miss(self):
        with self.assertRaisesRegex(UnresolvedReference, "a.gone"):
            resolve({"ok": ref("a.n"), "inner": [ref("a.gone")]}, self.ROOTS)

    def test_references(self):
        cases = [
            (None, []),
            ("a.x", []),
            (ref("a"), ["a"]),
            ({"x": [ref("a.0"), {"y": ref("$item.k")}], "z": ref("$args")}, ["a.0", "$item.k", "$args"]),
        ]
        for value, expected in cases:
            with self.subTest(value=value):
                self.assertEqual(references(value), expected)


class ConditionTest(unittest.TestCase):
    def test_holds(self):
        cases = [  # op, value, actual -> holds
            ("equals", 0, 0, True),
            ("equals", 0, 1, False),
            ("equals", None, None, True),
            ("equals", {"a": [1]}, {"a": [1]}, True),
            ("not_equals", "x", "y", True),
            ("not_equals", "x", "x", False),
            ("in", [1, "two"], "two", True),
            ("in", [1, "two"], 3, False),
            ("in", [], None, False),
            ("empty", True, None, True),
            ("empty", True, "", True),
            ("empty", True, [], True),
            ("empty", True, {}, True),
            ("empty", True, 0, False),
            ("empty", True, [None], False),
            ("empty", False, [], False),
            ("empty", False, "x", True),
        ]
        for op, value, actual, expected in cases:
            with self.subTest(op=op, value=value, actual=actual):
                self.assertIs(Condition("a", op, value).holds(actual), expected)


# --- the walk --------------------------------------------------------------------------

DIAMOND = flow(task("a"), task("b", "a", args=ref("a.x")), task("c", "a", args=ref("a.y")),
               task("d", "b", "c", args=[ref("b"), ref("c")]))
SKIPS = flow(task("a"), task("b", "a", skip_if={"$from": "a.n", "equals": 0}), task("c", "b", args=ref("a.n")))
# b may be skipped by the run's args; c then sees b's value as None and skips too.
SKIP_CHAIN = flow(task("a"), task("b", "a", skip_if={"$from": "$args.skip", "equals": True}),
                  task("c", "b", skip_if={"$from": "b", "empty": True}), task("d", "c", args=ref("c")))
ASKING = flow(task("a"), ask("q", "a", prompt="ok?"), task("b", "q", args=ref("q.answer")))
ASK_BESIDE = flow(ask("q"), task("t"), task("j", "q", "t"))
MAPPED = flow(task("a"), task("m", "a", map=ref("a.items"),
                              args={"i": ref("$item"), "k": ref("$item.key"), "c": ref("$args.c")}),
              task("z", "m", args=ref("m")))
MAP_ARGS = flow(task("m", map=ref("$args"), args=ref("$item")))


class AdvanceTest(unittest.TestCase):
    def check(self, workflow: Workflow, current: dict[str, NodeState], expected: list[tuple[Any, ...]],
              run_state: str, run_args: Any = None) -> Step:
        step = advance(workflow, current, run_args)
        self.assertEqual((actions(step), step.run_state), (expected, run_state))
        return step

    def test_table(self):
        items = [{"key": "p"}, {"key": "q"}]
        cases = [  # name, workflow, states, run args -> actions, run state
            ("roots first", DIAMOND, {}, None, [enqueue("a")], RUNNING),
            ("roots in file order", ASK_BESIDE, {}, None, [set_state("q", AWAITING_INPUT), enqueue("t")], RUNNING),
            ("waits on a queued root", DIAMOND, states(a=QUEUED), None, [], RUNNING),
            ("fan out", DIAMOND, states(a=(COMPLETED, {"x": 1, "y": 2})), None, [enqueue("b", 1), enqueue("c", 2)],
             RUNNING),
            ("fan in waits for all", DIAMOND, states(a=COMPLETED, b=COMPLETED, c=QUEUED), None, [], RUNNING),
            ("fan in", DIAMOND, states(a=COMPLETED, b=(COMPLETED, 10), c=(COMPLETED, 20)), None,
             [enqueue("d", [10, 20])], RUNNING),
            ("a skipped dependency unblocks", DIAMOND, states(a=COMPLETED, b=SKIPPED, c=(COMPLETED, 20)), None,
             [enqueue("d", [None, 20])], RUNNING),
            ("all done", DIAMOND, states(a=COMPLETED, b=COMPLETED, c=SKIPPED, d=COMPLETED), None, [], COMPLETED),
            ("skip_if holds", SKIPS, states(a=(COMPLETED, {"n": 0})), None,
             [set_state("b", SKIPPED), enqueue("c", 0)], RUNNING),
            ("skip_if does not hold", SKIPS, states(a=(COMPLETED, {"n": 1})), None, [enqueue("b")], RUNNING),
            ("skip_if on a skipped upstream", SKIP_CHAIN, states(a=COMPLETED), {"skip": True},
             [set_state("b", SKIPPED), set_state("c", SKIPPED), enqueue("d", None)], RUNNING),
            ("skip_if on a completed upstream", SKIP_CHAIN, states(a=COMPLETED, b=(COMPLETED, "r")), None,
             [enqueue("c")], RUNNING),
            ("skipped to the end", SKIP_CHAIN, states(a=COMPLETED, b=SKIPPED, c=SKIPPED, d=SKIPPED), None, [],
             COMPLETED),
            ("input waits", ASKING, states(a=COMPLETED), None, [set_state("q", AWAITING_INPUT)], AWAITING_INPUT),
            ("input still waiting", ASKING, states(a=COMPLETED, q=AWAITING_INPUT), None, [], AWAITING_INPUT),
            ("input while a job runs", ASK_BESIDE, states(q=AWAITING_INPUT, t=QUEUED), None, [], RUNNING),
            ("input answered", ASKING, states(a=COMPLETED, q=(COMPLETED, {"answer": "yes"})), None,
             [enqueue("b", "yes")], RUNNING),
            ("map", MAPPED, states(a=(COMPLETED, {"items": items})), {"c": 9},
             [enqueue("m", items=({"i": {"key": "p"}, "k": "p", "c": 9}, {"i": {"key": "q"}, "k": "q", "c": 9}))],
             RUNNING),
            ("map over nothing", MAPPED, states(a=(COMPLETED, {"items": []})), None,
             [set_state("m", COMPLETED, []), enqueue("z", [])], RUNNING),
            ("fan in over a map", MAPPED, states(a=COMPLETED, m=(COMPLETED, ["r0", "r1"])), None,
             [enqueue("z", ["r0", "r1"])], RUNNING),
            ("map of the run's args", MAP_ARGS, {}, [3, [4], None], [enqueue("m", items=(3, [4], None))], RUNNING),
            ("map at the limit", MAP_ARGS, {}, [0] * MAX_MAP_ITEMS, [enqueue("m", items=(0,) * MAX_MAP_ITEMS)],
             RUNNING),
        ]
        for name, workflow, current, run_args, expected, run_state in cases:
            with self.subTest(name):
                self.check(workflow, current, expected, run_state, run_args)

    def test_skip_records_why(self):
        step = advance(SKIPS, states(a=(COMPLETED, {"n": 0})))
        self.assertEqual(step.actions[0], SetState("b", SKIPPED, error="skip_if held: a.n equals 0"))

    def test_a_node_that_cannot_start_fails_the_run(self):
        cases = [  # name, workflow, states, run args -> failing node, words in its error
            ("missing key", DIAMOND, states(a=(COMPLETED, {"x": 1})), None, "c", ['"a.y"', 'no key "y"']),
            ("null result", DIAMOND, states(a=COMPLETED), None, "b", ['"a.x"', "of null"]),
            ("run args", flow(task("a", args=ref("$args.k"))), {}, {"j": 1}, "a", ['"$args.k"', "keys: j"]),
            ("skip_if path", SKIPS, states(a=(COMPLETED, [])), None, "b", ['"a.n"']),
            ("map of an object", MAPPED, states(a=(COMPLETED, {"items": {"k": 1}})), None, "m",
             ["'a.items'", "an object, not a list"]),
            ("map of a string", MAPPED, states(a=(COMPLETED, {"items": "ab"})), None, "m",
             ["'a.items'", "a string, not a list"]),
            ("map of null", MAPPED, states(a=(COMPLETED, {"items": None})), None, "m", ["null, not a list"]),
            ("map too long", MAP_ARGS, {}, [0] * (MAX_MAP_ITEMS + 1), "m",
             [f"has {MAX_MAP_ITEMS + 1} items; at most {MAX_MAP_ITEMS}"]),
            ("item missing a key", MAPPED, states(a=(COMPLETED, {"items": [{"key": 1}, {}]})), {"c": 0}, "m",
             ['"$item.key"']),
        ]
        for name, workflow, current, run_args, node_id, words in cases:
            with self.subTest(name):
                step = advance(workflow, current, run_args)
                self.assertEqual(actions(step), [set_state(node_id, FAILED)])
                self.assertEqual(step.run_state, FAILED)
                self.assertTrue(step.actions[0].error.startswith("unresolvable reference "), step.actions[0].error)
                self.assertTrue(step.error.startswith(f"node {node_id!r} failed: "), step.error)
                for word in words:
                    self.assertIn(word, step.actions[0].error)
                    self.assertIn(word, step.error)

    def test_a_malformed_index_fails_the_node_not_the_walk(self):
        # parse_workflow accepts "$args.--1"; the walk must turn it into a failed node.
        workflow = flow(task("a", args=ref("$args.--1")))
        step = advance(workflow, {}, [1, 2])
        self.assertEqual((actions(step), step.run_state), ([set_state("a", FAILED)], FAILED))

    def test_a_failed_or_cancelled_node_fails_the_run(self):
        cases = [
            (states(a=(FAILED, None, "boom")), "node 'a' failed: boom"),
            (states(a=COMPLETED, b=(CANCELLED, None, "by hand"), c=QUEUED), "node 'b' cancelled: by hand"),
            (states(a=COMPLETED, b=COMPLETED, c=CANCELLED), "node 'c' cancelled: no reason given"),
            (states(a=COMPLETED, b=FAILED, c=(FAILED, None, "second")), "node 'b' failed: no reason given"),
        ]
        for current, error in cases:
            with self.subTest(error=error):
                self.assertEqual(advance(DIAMOND, current), Step((), FAILED, error))

    def test_nothing_can_run(self):
        # Only an inconsistent set of states strands a pending node.
        step = advance(DIAMOND, states(a="lost"))
        self.assertEqual((step.actions, step.run_state, step.error), ((), FAILED, "no node can run; pending: b, c, d"))

    def test_advancing_again_enqueues_nothing_twice(self):
        cases = [
            (DIAMOND, {}, None),
            (DIAMOND, states(a=(COMPLETED, {"x": 1, "y": 2})), None),
            (SKIPS, states(a=(COMPLETED, {"n": 0})), None),
            (SKIP_CHAIN, states(a=COMPLETED), {"skip": True}),
            (ASKING, states(a=COMPLETED), None),
            (ASK_BESIDE, {}, None),
            (MAPPED, states(a=(COMPLETED, {"items": [{"key": 1}]})), {"c": 0}),
            (MAPPED, states(a=(COMPLETED, {"items": []})), None),
        ]
        for workflow, current, run_args in cases:
            with self.subTest(workflow=workflow.nodes[-1].id, current=current):
                first = advance(workflow, current, run_args)
                self.assertNotEqual(first.actions, ())
                second = advance(workflow, apply(current, first), run_args)
                self.assertEqual((second.actions, second.run_state), ((), first.run_state))

    def test_driving_to_the_end_enqueues_each_node_once(self):
        mapping = flow(task("a"), task("m", "a", map=ref("a.items"), args=ref("$item")), task("z", "m", args=ref("m")))
        cases = [  # workflow, run args, results -> enqueue order, final run state
            (DIAMOND, None, {"a": {"x": 1, "y": 2}}, ["a", "b", "c", "d"], COMPLETED),
            (SKIPS, None, {"a": {"n": 0}}, ["a", "c"], COMPLETED),
            (SKIPS, None, {"a": {"n": 5}}, ["a", "b", "c"], COMPLETED),
            (SKIP_CHAIN, {"skip": True}, {}, ["a", "d"], COMPLETED),
            (SKIP_CHAIN, {"skip": False}, {"b": "r"}, ["a", "b", "c", "d"], COMPLETED),
            (SKIP_CHAIN, {"skip": False}, {}, ["a", "b", "d"], COMPLETED),  # b's null result makes c skip
            (ASKING, None, {}, ["a"], AWAITING_INPUT),
            (mapping, None, {"a": {"items": [1, 2]}}, ["a", "m", "z"], COMPLETED),
            (mapping, None, {"a": {"items": []}}, ["a", "z"], COMPLETED),
            (mapping, None, {"a": {"items": 1}}, ["a"], FAILED),
        ]
        for workflow, run_args, results, order, run_state in cases:
            with self.subTest(order=order, run_args=run_args, results=results):
                last, enqueued = drive(workflow, run_args, results)
                self.assertEqual(([e.node for e in enqueued], last.run_state), (order, run_state))

    def test_fan_in_sees_every_mapped_result(self):
        workflow = flow(task("a", args={"items": [1, 2, 3]}),
                        task("m", "a", map=ref("a.items"), args={"n": ref("$item")}),
                        task("z", "m", args={"all": ref("m"), "last": ref("m.-1.n")}))
        _, enqueued = drive(workflow)
        self.assertEqual(enqueued[-1], Enqueue("z", {"all": [{"n": 1}, {"n": 2}, {"n": 3}], "last": 3}))


# --- from jobs to node state -----------------------------------------------------------

SINGLE = Node("s", task="m:s")
MAP = Node("m", task="m:m", map="a")


class FoldTest(unittest.TestCase):
    def test_table(self):
        cases = [  # name, node, jobs, items -> state
            ("completed", SINGLE, [JobView(None, COMPLETED, {"r": 1})], None, NodeState(COMPLETED, {"r": 1})),
            ("completed with null", SINGLE, [JobView(None, COMPLETED)], None, NodeState(COMPLETED)),
            ("failed", SINGLE, [JobView(None, FAILED, error="boom")], None,
             NodeState(FAILED, error="its job failed: boom")),
            ("cancelled", SINGLE, [JobView(None, CANCELLED)], None,
             NodeState(CANCELLED, error="its job cancelled: no reason given")),
            ("running", SINGLE, [JobView(None, "running")], None, NodeState(QUEUED)),
            ("queued", SINGLE, [JobView(None, QUEUED)], None, NodeState(QUEUED)),
            ("gone", SINGLE, [], None,
             NodeState(FAILED, error="its job is gone (deleted while the node was running)")),
            ("map in order", MAP, [JobView(0, COMPLETED, "A"), JobView(1, COMPLETED, "B")], 2,
             NodeState(COMPLETED, ["A", "B"])),
            ("map out of order", MAP, [JobView(2, COMPLETED, "C"), JobView(0, COMPLETED, "A"),
                                       JobView(1, COMPLETED, "B")], 3, NodeState(COMPLETED, ["A", "B", "C"])),
            ("map missing items", MAP, [JobView(0, COMPLETED, "A"), JobView(2, COMPLETED, "C")], 3,
             NodeState(QUEUED)),
            ("map one still running", MAP, [JobView(1, "running"), JobView(0, COMPLETED, "A")], 2,
             NodeState(QUEUED)),
            ("map one failed", MAP, [JobView(0, COMPLETED, "A"), JobView(1, FAILED, error="bad"),
                                     JobView(2, "running")], 3, NodeState(FAILED, error="item 1 failed: bad")),
            ("map first broken item wins", MAP, [JobView(3, CANCELLED), JobView(1, FAILED, error="x")], 4,
             NodeState(FAILED, error="item 1 failed: x")),
            ("map item 0 cancelled", MAP, [JobView(1, COMPLETED), JobView(0, CANCELLED, error="stop")], 2,
             NodeState(CANCELLED, error="item 0 cancelled: stop")),
            ("map gone", MAP, [], 2, NodeState(FAILED, error="its job is gone (deleted while the node was running)")),
        ]
        for name, node, jobs, items, expected in cases:
            with self.subTest(name):
                self.assertEqual(fold(iter(jobs), items), expected)


# --- restarts --------------------------------------------------------------------------

#   a -> b -> c -> d,  a -> e,  (b, e) -> f
BRANCHED = flow(task("a"), task("b", "a"), task("c", "b"), task("d", "c"), task("e", "a"), task("f", "b", "e"))


class RestartTest(unittest.TestCase):
    def test_table(self):
        cases = [  # states (unlisted: pending) -> reset
            ({}, []),
            (states(a=COMPLETED, b=COMPLETED, c=COMPLETED, d=COMPLETED, e=COMPLETED, f=COMPLETED), []),
            (states(a=FAILED), ["a"]),
            (states(a=COMPLETED, b=FAILED, e=COMPLETED), ["b"]),
            (states(a=COMPLETED, b=FAILED, c=CANCELLED, e=QUEUED), ["b", "c"]),
            (states(a=COMPLETED, b=CANCELLED, c=SKIPPED, d=SKIPPED, e=COMPLETED, f=SKIPPED), ["b", "c", "d", "f"]),
            (states(a=COMPLETED, b=FAILED, c=COMPLETED, d=SKIPPED, e=SKIPPED), ["b", "d"]),
            (states(a=COMPLETED, b=COMPLETED, c=COMPLETED, e=FAILED, f=AWAITING_INPUT), ["e", "f"]),
            (states(a=COMPLETED, b=FAILED, c=PENDING, e=CANCELLED, f=PENDING), ["b", "e"]),
        ]
        for current, expected in cases:
            with self.subTest(current={k: v.state for k, v in current.items()}):
                self.assertEqual(restart_nodes(BRANCHED, current), expected)


class WorkflowTest(unittest.TestCase):
    def test_descendants(self):
        cases = [  # roots -> descendants
            ([], set()),
            (["a"], {"b", "c", "d", "e", "f"}),
            (["b"], {"c", "d", "f"}),
            (["e"], {"f"}),
            (["d"], set()),
            (["c", "e"], {"d", "f"}),
            (["b", "c"], {"c", "d", "f"}),  # a root downstream of another root is included
            (["zz"], set()),
        ]
        for roots, expected in cases:
            with self.subTest(roots=roots):
                self.assertEqual(BRANCHED.descendants(roots), expected)

    def test_node(self):
        self.assertEqual(BRANCHED.node("e").depends_on, ("a",))
        with self.assertRaises(KeyError):
            BRANCHED.node("zz")


if __name__ == "__main__":
    unittest.main()


class DefaultsAndJsonSemanticsTest(unittest.TestCase):
    def test_a_map_node_without_args_passes_each_item_as_its_argument(self):
        walk = advance(flow(task("a"), task("b", "a", map=ref("a"))), states(a=(COMPLETED, ["x", {"k": 1}])))
        self.assertEqual(actions(walk), [("enqueue", "b", None, (["x"], [{"k": 1}]))])

    def test_skip_if_compares_as_json_does(self):
        cases = [({"equals": True}, 1, False), ({"equals": 1}, 1.0, True), ({"in": [0, 1]}, False, False),
                 ({"not_equals": False}, 0, True), ({"equals": [True]}, [True], True)]
        for condition, result, skipped in cases:
            with self.subTest(condition=condition, result=result):
                walk = advance(flow(task("a"), task("b", "a", skip_if={"$from": "a", **condition})),
                               states(a=(COMPLETED, result)))
                skips = [a.node for a in walk.actions if isinstance(a, SetState) and a.state == SKIPPED]
                self.assertEqual(skips, ["b"] if skipped else [])

    def test_description_survives_the_round_trip(self):
        parsed = parse_workflow({"name": "f", "description": "what it does", "nodes": [task("a")]})
        self.assertEqual(parse_workflow(parsed.to_dict()), parsed)
        self.assertEqual(parsed.description, "what it does")

    def test_timeout_must_be_finite(self):
        for timeout in (float("nan"), float("inf")):
            with self.subTest(timeout=timeout), self.assertRaisesRegex(DefinitionError, "node 'a'.*timeout"):
                flow(task("a", timeout=timeout))

