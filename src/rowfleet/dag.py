"""Workflows: a DAG of nodes, its JSON form, and the walk that decides what runs next.

Pure: no I/O, no database, no clock. ``parse_workflow`` validates a definition (a dict, as
read from JSON) before anything is written; ``advance`` takes a definition, the state of
every node and the run's arguments, and returns what to do next; ``fold`` turns the jobs
of an active node into that node's state; ``restart_nodes`` picks what a restart re-runs;
``input_options`` resolves an input node's options (its spec is ``rowfleet.inputs``').
The store persists what these decide, under a lock on the run.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Iterable, Mapping

from rowfleet import inputs, names
from rowfleet.errors import ConfigError
from rowfleet.names import same_json  # JSON equality is decided in names, for skip_if and input options alike

# Node states, as stored per run. ``queued`` means the node's job(s) exist and are not all
# finished; the job rows say whether one is running.
PENDING = "pending"
QUEUED = "queued"
AWAITING_INPUT = "awaiting_input"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
SKIPPED = "skipped"
NODE_STATES = (PENDING, QUEUED, AWAITING_INPUT, COMPLETED, FAILED, CANCELLED, SKIPPED)
DONE = (COMPLETED, SKIPPED)  # a dependency in one of these unblocks its dependents

# Run states.
RUNNING = "running"
RUN_STATES = (RUNNING, AWAITING_INPUT, COMPLETED, FAILED, CANCELLED)
RUN_TERMINAL = (COMPLETED, FAILED, CANCELLED)

TASK, INPUT = "task", "input"
REFERENCE = "$from"
RUN_ARGS, ITEM = "$args", "$item"  # reference roots that are not nodes
MAX_MAP_ITEMS = 10_000
CONDITIONS = ("equals", "not_equals", "in", "empty")

_INDEX = re.compile(r"-?[0-9]+")
_WORKFLOW_FIELDS = frozenset({"name", "nodes", "description"})
_NODE_FIELDS = frozenset({"id", "kind", "task", "queue", "args", "depends_on", "max_attempts", "priority",
                          "skip_if", "map", "timeout", "model", "vram_mb", "gpus"})
_INPUT_FIELDS = frozenset({"id", "kind", "prompt", "depends_on", "skip_if", *inputs.FIELDS})


class DefinitionError(ConfigError):
    """A workflow definition is invalid; the message names the node and the problem."""


class UnresolvedReference(ValueError):
    """A ``$from`` reference does not resolve against the results at hand."""


@dataclasses.dataclass(frozen=True)
class Condition:
    """``skip_if``: skip the node when the referenced value passes ``op`` against ``value``."""

    ref: str
    op: str
    value: Any

    def holds(self, actual: Any) -> bool:
        """
        >>> Condition("a", "equals", 0).holds(0), Condition("a", "in", [1, 2]).holds(3)
        (True, False)
        >>> Condition("a", "empty", True).holds([]), Condition("a", "empty", False).holds([])
        (True, False)
        """
        if self.op == "equals":
            return same_json(actual, self.value)
        if self.op == "not_equals":
            return not same_json(actual, self.value)
        if self.op == "in":
            return any(same_json(actual, option) for option in self.value)
        return (actual in (None, "", [], {})) == self.value

    def to_dict(self) -> dict[str, Any]:
        return {REFERENCE: self.ref, self.op: self.value}


@dataclasses.dataclass(frozen=True)
class Node:
    id: str
    kind: str = TASK
    task: str | None = None
    queue: str = "default"
    args: Any = None
    depends_on: tuple[str, ...] = ()
    max_attempts: int = 3
    priority: int = 0
    skip_if: Condition | None = None
    map: str | None = None  # a reference path to an upstream list: one job per item (args default: the item)
    timeout: float | None = None
    model: str | None = None
    prompt: str | None = None
    vram_mb: int | None = None  # GPU memory its jobs need (MiB), when it says or its model's registration does
    gpus: int | None = None  # GPUs of one host its jobs need, when it says or its task's registration does
    input_spec: inputs.InputSpec | None = None  # an input node's widget, options and bounds; None: any JSON

    def to_dict(self) -> dict[str, Any]:
        """The node in the JSON format, with defaults left out."""
        data: dict[str, Any] = {"id": self.id}
        if self.kind == INPUT:
            data["kind"] = INPUT
            if self.prompt is not None:
                data["prompt"] = self.prompt
            if self.input_spec is not None:
                data.update(self.input_spec.to_dict())
        else:
            data.update(task=self.task, queue=self.queue)
            if self.args is not None:
                data["args"] = self.args
            data["max_attempts"] = self.max_attempts
            for name in ("priority", "timeout", "model", "vram_mb", "gpus"):
                if getattr(self, name):
                    data[name] = getattr(self, name)
            if self.map is not None:
                data["map"] = {REFERENCE: self.map}
        if self.depends_on:
            data["depends_on"] = list(self.depends_on)
        if self.skip_if is not None:
            data["skip_if"] = self.skip_if.to_dict()
        return data


@dataclasses.dataclass(frozen=True)
class Workflow:
    name: str
    nodes: tuple[Node, ...]  # in topological order: every node after its dependencies
    description: str = ""

    def node(self, node_id: str) -> Node:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def descendants(self, roots: Iterable[str]) -> set[str]:
        """Every node downstream of ``roots`` (the roots not included unless downstream)."""
        found: set[str] = set()
        frontier = set(roots)
        for node in self.nodes:  # topological order: a node's dependencies come first
            if frontier.intersection(node.depends_on) or found.intersection(node.depends_on):
                found.add(node.id)
        return found

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "nodes": [node.to_dict() for node in self.nodes]}
        if self.description:
            data["description"] = self.description
        return data


# --- parsing and validation ------------------------------------------------------------


def parse_workflow(data: Any, *, default_queue: str = "default") -> Workflow:
    """Validate a definition (as read from JSON) and build the ``Workflow``.

    Raises ``DefinitionError`` naming the node for duplicate ids, unknown dependencies,
    cycles, unknown fields, bad values and references that do not name an upstream node.

    >>> flow = parse_workflow({"name": "d", "nodes": [
    ...     {"id": "b", "task": "m:b", "args": {"x": {"$from": "a.items"}}, "depends_on": ["a"]},
    ...     {"id": "a", "task": "m:a"}]})
    >>> [node.id for node in flow.nodes]
    ['a', 'b']
    >>> parse_workflow({"name": "d", "nodes": [{"id": "a", "task": "m:a", "depends_on": ["a"]}]})
    Traceback (most recent call last):
    rowfleet.dag.DefinitionError: node 'a': depends on itself
    """
    if not isinstance(data, dict):
        raise DefinitionError(f"a workflow must be a JSON object, got {_kind(data)}")
    _no_unknown(data, _WORKFLOW_FIELDS, "workflow")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise DefinitionError("a workflow needs a non-empty \"name\"")
    _checked("workflow name", "workflow", "name", name)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise DefinitionError(f"workflow {name!r}: \"description\" must be a string")
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise DefinitionError(f"workflow {name!r} needs a non-empty list of \"nodes\"")
    nodes: dict[str, Node] = {}
    for index, raw in enumerate(raw_nodes):
        node = _parse_node(raw, index, default_queue)
        if node.id in nodes:
            raise DefinitionError(f"node {node.id!r}: the id is used twice")
        nodes[node.id] = node
    for node in nodes.values():
        for dependency in node.depends_on:
            if dependency not in nodes:
                raise DefinitionError(f"node {node.id!r}: depends on unknown node {dependency!r}")
    _checked("args", f"workflow {name!r}", "nodes", raw_nodes)  # args or skip_if too deep, or NaN
    ordered = _topological(nodes)
    flow = Workflow(name.strip(), tuple(ordered), description)
    ancestors = _ancestors(flow)
    for node in flow.nodes:
        _check_references(node, ancestors[node.id])
    return flow


def _parse_node(raw: Any, index: int, default_queue: str) -> Node:
    if not isinstance(raw, dict):
        raise DefinitionError(f"node #{index + 1}: must be a JSON object, got {_kind(raw)}")
    node_id = raw.get("id")
    _checked("node id", f"node #{index + 1}", "id", node_id)
    where = f"node {node_id!r}"
    kind = raw.get("kind", TASK)
    if kind not in (TASK, INPUT):
        raise DefinitionError(f"{where}: \"kind\" must be \"task\" or \"input\", got {kind!r}")
    _no_unknown(raw, _INPUT_FIELDS if kind == INPUT else _NODE_FIELDS, where)
    depends_on = raw.get("depends_on", [])
    if not isinstance(depends_on, list) or not all(isinstance(d, str) for d in depends_on):
        raise DefinitionError(f"{where}: \"depends_on\" must be a list of node ids")
    if node_id in depends_on:
        raise DefinitionError(f"{where}: depends on itself")
    if len(set(depends_on)) != len(depends_on):
        raise DefinitionError(f"{where}: \"depends_on\" lists a node twice")
    skip_if = _parse_condition(raw["skip_if"], where) if "skip_if" in raw else None
    if kind == INPUT:
        prompt = raw.get("prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise DefinitionError(f"{where}: \"prompt\" must be a string")
        return Node(node_id, INPUT, depends_on=tuple(depends_on), skip_if=skip_if, prompt=prompt,
                    queue="", max_attempts=1, input_spec=_parse_input_spec(raw, where))
    task = raw.get("task")
    try:
        names.RULES["task"].check("task", task)
    except ConfigError:
        raise DefinitionError(f"{where}: \"task\" must be a task name (module:function), got "
                              f"{names.shown(task)}") from None
    queue = _checked("queue", where, "queue", raw.get("queue", default_queue))
    max_attempts = _checked("max attempts", where, "max_attempts", raw.get("max_attempts", 3))
    priority = _checked("priority", where, "priority", raw.get("priority", 0))
    timeout = raw.get("timeout")
    if timeout is not None:
        _checked("seconds", where, "timeout", timeout)
    model = raw.get("model")
    if model is not None:
        _checked("model", where, "model", model)
    vram_mb = raw.get("vram_mb")
    if vram_mb is not None:
        _checked("vram mb", where, "vram_mb", vram_mb)
    gpus = raw.get("gpus")
    if gpus is not None:
        _checked("gpus", where, "gpus", gpus)
    mapped = _list_reference(raw["map"], where, "map") if "map" in raw else None
    return Node(node_id, TASK, task, queue, raw.get("args"), tuple(depends_on), max_attempts, priority,
                skip_if, mapped, None if timeout is None else float(timeout), model, vram_mb=vram_mb, gpus=gpus)


def _parse_condition(raw: Any, where: str) -> Condition:
    ops = [op for op in CONDITIONS if isinstance(raw, dict) and op in raw]
    if not isinstance(raw, dict) or set(raw) != {REFERENCE, *ops} or len(ops) != 1:
        raise DefinitionError(f"{where}: \"skip_if\" must be {{\"$from\": PATH, OP: VALUE}} with one OP of "
                              f"{', '.join(CONDITIONS)}")
    ref, op = raw[REFERENCE], ops[0]
    _check_path(ref, where, "skip_if")
    if op == "in" and not isinstance(raw[op], list):
        raise DefinitionError(f"{where}: \"skip_if\" with \"in\" needs a list")
    if op == "empty" and not isinstance(raw[op], bool):
        raise DefinitionError(f"{where}: \"skip_if\" with \"empty\" needs true or false")
    return Condition(ref, op, raw[op])


def _list_reference(raw: Any, where: str, field: str) -> str:
    """The path of a reference to an upstream list (a map's items, an input's options)."""
    if not isinstance(raw, dict) or set(raw) != {REFERENCE}:
        raise DefinitionError(f"{where}: \"{field}\" must be {{\"$from\": PATH}} naming an upstream list")
    _check_path(raw[REFERENCE], where, field)
    return raw[REFERENCE]


def _parse_input_spec(raw: dict[str, Any], where: str) -> inputs.InputSpec | None:
    """An input node's spec (``rowfleet.inputs``), its options' reference checked here, as
    every reference of a workflow is."""
    try:
        spec = inputs.parse_spec(raw, where)
    except inputs.SpecError as exc:
        raise DefinitionError(str(exc)) from None
    if spec is not None and spec.refers:
        _list_reference(spec.options, where, "options")
    return spec


def _check_path(path: Any, where: str, field: str) -> None:
    if not isinstance(path, str) or not path or any(not part for part in path.split(".")):
        raise DefinitionError(f"{where}: {field}: a reference must be \"NODE\" or \"NODE.key.0\", got {path!r}")


def _topological(nodes: dict[str, Node]) -> list[Node]:
    """Nodes with every dependency first, keeping the file's order among equals; a cycle
    is a ``DefinitionError`` that spells the cycle out. Iterative: chains may be long."""
    ordered: list[Node] = []
    placed: set[str] = set()
    for root in nodes:
        path: list[str] = []  # the chain being descended, each waiting for its dependencies
        stack: list[tuple[str, bool]] = [(root, False)]
        while stack:
            node_id, dependencies_done = stack.pop()
            if dependencies_done:
                path.pop()
                placed.add(node_id)
                ordered.append(nodes[node_id])
                continue
            if node_id in placed:
                continue
            if node_id in path:
                cycle = path[path.index(node_id):] + [node_id]
                raise DefinitionError(f"node {node_id!r}: the dependencies form a cycle: {' -> '.join(cycle)}")
            path.append(node_id)
            stack.append((node_id, True))
            stack.extend((dependency, False) for dependency in reversed(nodes[node_id].depends_on))
    return ordered


def _ancestors(flow: Workflow) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for node in flow.nodes:
        found[node.id] = set(node.depends_on).union(*(found[d] for d in node.depends_on))
    return found


def _check_references(node: Node, ancestors: set[str]) -> None:
    where = f"node {node.id!r}"
    paths = [("args", path) for path in references(node.args, where)]
    if node.skip_if is not None:
        paths.append(("skip_if", node.skip_if.ref))
    if node.map is not None:
        paths.append(("map", node.map))
    if node.input_spec is not None and node.input_spec.refers:
        paths.append(("options", node.input_spec.options[REFERENCE]))
    for field, path in paths:
        root = path.split(".")[0]
        if root == ITEM and (field != "args" or node.map is None):
            raise DefinitionError(f"{where}: {field} refers to \"$item\", which only a map node's args may")
        if root in (RUN_ARGS, ITEM):
            continue
        if root not in ancestors:
            raise DefinitionError(f"{where}: {field} refers to {root!r}, which is not upstream of it "
                                  f"(list it in depends_on)")


def references(value: Any, where: str = "args") -> list[str]:
    """Every reference path inside ``value``, depth first.

    >>> references({"a": {"$from": "x.items"}, "b": [1, {"$from": "$item"}]})
    ['x.items', '$item']
    """
    if isinstance(value, dict):
        if REFERENCE in value:
            if len(value) != 1:
                raise DefinitionError(f"{where}: a reference is {{\"$from\": PATH}} with no other keys")
            _check_path(value[REFERENCE], where, "args")
            return [value[REFERENCE]]
        return [path for item in value.values() for path in references(item, where)]
    if isinstance(value, list):
        return [path for item in value for path in references(item, where)]
    return []


def _no_unknown(data: dict[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise DefinitionError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")


def _checked(rule: str, where: str, field: str, value: Any) -> Any:
    """``value`` as the rule of ``names.RULES[rule]`` allows it, or a ``DefinitionError``
    naming the node and field."""
    try:
        return names.RULES[rule].check(f"{where}: \"{field}\"", value)
    except names.InvalidValue as exc:
        raise DefinitionError(str(exc)) from None


def _kind(value: Any) -> str:
    """How JSON would name a value's type, for messages.

    >>> _kind(None), _kind(True), _kind(1.5), _kind([])
    ('null', 'a boolean', 'a number', 'a list')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), type(value).__name__)


# --- references ------------------------------------------------------------------------


def lookup(path: str, roots: Mapping[str, Any]) -> Any:
    """The value ``path`` names: its first part is a key of ``roots`` (a node id, ``$args``
    or ``$item``), the rest keys or list indexes into it.

    >>> lookup("fetch.items.1", {"fetch": {"items": ["a", "b"]}})
    'b'
    >>> lookup("fetch.count", {"fetch": [1]})
    Traceback (most recent call last):
    rowfleet.dag.UnresolvedReference: "fetch.count": "count" is not an index into a list of 1
    """
    parts = path.split(".")
    if parts[0] not in roots:
        raise UnresolvedReference(f"{path!r}: {parts[0]!r} has no result")
    value = roots[parts[0]]
    for part in parts[1:]:
        if isinstance(value, dict):
            if part not in value:
                raise UnresolvedReference(f'"{path}": no key "{part}" (keys: {", ".join(sorted(map(str, value))) or "none"})')
            value = value[part]
        elif isinstance(value, list):
            if not _INDEX.fullmatch(part) or not -len(value) <= int(part) < len(value):
                raise UnresolvedReference(f'"{path}": "{part}" is not an index into a list of {len(value)}')
            value = value[int(part)]
        else:
            raise UnresolvedReference(f'"{path}": cannot take "{part}" of {_kind(value)}')
    return value


def resolve(value: Any, roots: Mapping[str, Any]) -> Any:
    """``value`` with every ``{"$from": PATH}`` replaced by what it names.

    >>> resolve({"n": {"$from": "a.0"}, "k": [{"$from": "$args.k"}]}, {"a": [7], "$args": {"k": 1}})
    {'n': 7, 'k': [1]}
    """
    if isinstance(value, dict):
        if REFERENCE in value:
            return lookup(value[REFERENCE], roots)
        return {key: resolve(item, roots) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve(item, roots) for item in value]
    return value


# --- the walk --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NodeState:
    state: str = PENDING
    result: Any = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class Enqueue:
    """Create the node's job: one with ``args``, or, for a map node, one per item of ``items``."""

    node: str
    args: Any = None
    items: tuple[Any, ...] | None = None


@dataclasses.dataclass(frozen=True)
class SetState:
    """Record a node's state without a job: skipped, awaiting input, completed (an empty
    map), or failed (a reference that does not resolve)."""

    node: str
    state: str
    result: Any = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class Step:
    """What one walk decided: node actions in order, then the run's next state."""

    actions: tuple[Enqueue | SetState, ...]
    run_state: str
    error: str | None = None


def advance(flow: Workflow, states: Mapping[str, NodeState], run_args: Any = None) -> Step:
    """Decide what happens next in a run.

    A node becomes eligible when every dependency is completed or skipped. Eligible nodes
    are skipped (``skip_if`` holds), parked (input nodes), completed at once (a map over an
    empty list) or enqueued with their references resolved; a skip or an empty map
    unblocks dependents in the same walk. A failed or cancelled node fails the run, as
    does a reference that does not resolve (that node fails, naming the reference).

    >>> flow = parse_workflow({"name": "f", "nodes": [{"id": "a", "task": "m:a"},
    ...                        {"id": "b", "task": "m:b", "depends_on": ["a"]}]})
    >>> advance(flow, {}).actions
    (Enqueue(node='a', args=None, items=None),)
    >>> advance(flow, {"a": NodeState(COMPLETED, 1), "b": NodeState(COMPLETED, 2)}).run_state
    'completed'
    """
    current = {node.id: states.get(node.id, NodeState()) for node in flow.nodes}
    broken = _first_broken(flow, current)
    if broken is not None:
        return Step((), FAILED, broken)
    actions: list[Enqueue | SetState] = []
    for node in flow.nodes:
        if current[node.id].state != PENDING or not all(current[d].state in DONE for d in node.depends_on):
            continue
        action = _start(node, current, run_args)
        actions.append(action)
        current[node.id] = NodeState(QUEUED) if isinstance(action, Enqueue) else \
            NodeState(action.state, action.result, action.error)
        if isinstance(action, SetState) and action.state == FAILED:
            return Step((action,), FAILED, f"node {node.id!r} failed: {action.error}")
    return Step(tuple(actions), *_run_state(flow, current))


def _first_broken(flow: Workflow, current: Mapping[str, NodeState]) -> str | None:
    for node in flow.nodes:
        state = current[node.id]
        if state.state in (FAILED, CANCELLED):
            return f"node {node.id!r} {state.state}: {state.error or 'no reason given'}"
    return None


def results(states: Mapping[str, NodeState], run_args: Any) -> dict[str, Any]:
    """What references resolve against: the result of every completed or skipped node (a
    skipped one's is None), and the run's arguments under ``$args``.

    >>> results({"a": NodeState(COMPLETED, 1), "b": NodeState(QUEUED)}, {"k": 2})
    {'a': 1, '$args': {'k': 2}}
    """
    roots = {node_id: state.result for node_id, state in states.items() if state.state in DONE}
    roots[RUN_ARGS] = run_args
    return roots


def input_options(node: Node, roots: Mapping[str, Any]) -> list[Any] | None:
    """The options an input node offers, as ``roots`` (``results``) resolve them; None for
    a node whose spec offers none. ``UnresolvedReference`` when its reference does not name
    a list of options (``inputs.options_problem``).

    Where they are kept: nowhere but in the results they come from. The walk resolves them
    when the node is reached (a bad list fails the node there, as a bad arg reference does),
    and every reader (the run's view, ``submit_input``) resolves them again from the stored
    results. Those cannot change while the node waits: its upstream nodes have completed or
    been skipped, and a restart resets only failed and cancelled nodes and what follows
    them; so every reader shows the same list, with no column to keep in step.

    >>> flow = parse_workflow({"name": "f", "nodes": [{"id": "a", "task": "m:a"}, {"id": "q", "kind": "input",
    ...     "widget": "choose_one", "options": {"$from": "a.tags"}, "depends_on": ["a"]}]})
    >>> input_options(flow.node("q"), {"a": {"tags": ["x", "y"]}})
    ['x', 'y']
    """
    spec = node.input_spec
    if spec is None or spec.options is None:
        return None
    if not spec.refers:
        return spec.options
    path = spec.options[REFERENCE]
    options = lookup(path, roots)
    problem = inputs.options_problem(options)
    if problem:
        raise UnresolvedReference(f"options {path!r} {problem}")
    return options


def _start(node: Node, current: Mapping[str, NodeState], run_args: Any) -> Enqueue | SetState:
    roots = results(current, run_args)
    try:
        if node.skip_if is not None and node.skip_if.holds(lookup(node.skip_if.ref, roots)):
            return SetState(node.id, SKIPPED, error=f"skip_if held: {_describe(node.skip_if)}")
        if node.kind == INPUT:
            input_options(node, roots)  # known now: a list that does not resolve fails the node at once
            return SetState(node.id, AWAITING_INPUT)
        if node.map is None:
            return Enqueue(node.id, resolve(node.args, roots))
        items = lookup(node.map, roots)
        if not isinstance(items, list):
            raise UnresolvedReference(f"map {node.map!r} is {_kind(items)}, not a list")
        if len(items) > MAX_MAP_ITEMS:
            raise UnresolvedReference(f"map {node.map!r} has {len(items)} items; at most {MAX_MAP_ITEMS} are allowed")
        if not items:
            return SetState(node.id, COMPLETED, result=[])
        if node.args is None:  # no args given: each job gets its item as its one argument
            return Enqueue(node.id, items=tuple([item] for item in items))
        return Enqueue(node.id, items=tuple(resolve(node.args, {**roots, ITEM: item}) for item in items))
    except UnresolvedReference as exc:
        return SetState(node.id, FAILED, error=f"unresolvable reference {exc}")


def _describe(condition: Condition) -> str:
    return f"{condition.ref} {condition.op} {json.dumps(condition.value)}"


def _run_state(flow: Workflow, current: Mapping[str, NodeState]) -> tuple[str, str | None]:
    states = [current[node.id].state for node in flow.nodes]
    if all(state in DONE for state in states):
        return COMPLETED, None
    if QUEUED in states:
        return RUNNING, None
    if AWAITING_INPUT in states:
        return AWAITING_INPUT, None
    stuck = [node.id for node in flow.nodes if current[node.id].state == PENDING]
    return FAILED, f"no node can run; pending: {', '.join(stuck)}"


# --- from jobs to node state -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class JobView:
    """The part of a node's job that decides the node's state."""

    item: int | None
    state: str
    result: Any = None
    error: str | None = None


def fold(jobs: Iterable[JobView], items: int | None) -> NodeState:
    """The state of a ``queued`` node from its current jobs: completed when all completed
    (a map node's result is the list of its items' results, in item order), failed or
    cancelled as soon as one job is, else still queued. ``items`` is a map node's item
    count, None for a node of one job.

    >>> fold([JobView(1, "completed", "B"), JobView(0, "completed", "A")], 2)
    NodeState(state='completed', result=['A', 'B'], error=None)
    >>> fold([JobView(0, "running")], 2).state
    'queued'
    """
    jobs = sorted(jobs, key=lambda job: job.item or 0)
    for job in jobs:
        if job.state in (FAILED, CANCELLED):
            which = "its job" if job.item is None else f"item {job.item}"
            return NodeState(job.state, error=f"{which} {job.state}: {job.error or 'no reason given'}")
    expected = 1 if items is None else items
    if not jobs:
        return NodeState(FAILED, error="its job is gone (deleted while the node was running)")
    if len(jobs) < expected or any(job.state != COMPLETED for job in jobs):
        return NodeState(QUEUED)
    if items is None:
        return NodeState(COMPLETED, jobs[0].result)
    return NodeState(COMPLETED, [job.result for job in jobs])


def restart_nodes(flow: Workflow, states: Mapping[str, NodeState]) -> list[str]:
    """The nodes a restart resets to pending: every failed or cancelled node and every
    node downstream of one that has not completed. Completed results are kept.

    >>> flow = parse_workflow({"name": "f", "nodes": [{"id": "a", "task": "m:a"},
    ...     {"id": "b", "task": "m:b", "depends_on": ["a"]}, {"id": "c", "task": "m:c", "depends_on": ["b"]}]})
    >>> restart_nodes(flow, {"a": NodeState(COMPLETED), "b": NodeState(FAILED), "c": NodeState(CANCELLED)})
    ['b', 'c']
    """
    broken = {node.id for node in flow.nodes if states.get(node.id, NodeState()).state in (FAILED, CANCELLED)}
    downstream = flow.descendants(broken)
    return [node.id for node in flow.nodes
            if node.id in broken or (node.id in downstream
                                     and states.get(node.id, NodeState()).state not in (COMPLETED, PENDING))]
