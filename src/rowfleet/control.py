"""Operators' switches for workers: which switch holds a worker, and what it does about it. Pure.

A switch is a ``worker_controls`` row: (project, host, queue) -> desired ``on`` or ``off``,
with a stop policy, who asked and when. No row means on. ``*`` in a column matches every
project, host or queue, so ``(project, host, *)`` is a box-wide switch.

Off wins: a worker serves only while no switch that applies to it says off, so a box
turned off for maintenance stays off even where an older per-queue row says on. Among
the off switches that apply, ``hard`` beats ``drain`` (the operator escalated), then the
newest. The worker acts on that one switch (``next_step``):

* ``drain``: finish the job in hand, then park (claim nothing until turned on);
* ``hard``: hand the job in hand back to the queue (ahead of fresh work, no attempt
  spent) and exit 79 so the process's memory and VRAM are freed; its supervisor starts
  it again and the fresh process parks. A fresh process that has run nothing parks at
  once instead of exiting, so hard off cannot become a restart loop.

What a switch may name is ``check_scope``: a project, host and queue by the rules of
``rowfleet.names`` (the project may be empty: the default one), each or ``*``. Every
entry point writes a switch through ``Store.set_switch``, which asks it, so the panel's
form is refused what the command line is refused.

Imports only ``rowfleet.job.by_name``, the one way a row is read by column name, and
``rowfleet.names``, what a name may be.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

from rowfleet import names
from rowfleet.job import by_name

ON, OFF = "on", "off"
HARD, DRAIN = "hard", "drain"
POLICIES = (DRAIN, HARD)
ANY = "*"  # in a switch's project, host or queue: all of them

# What a worker is doing about its switch, as its heartbeat row shows it.
SERVING, DRAINING, PARKED = "serving", "draining", "parked"

# What the worker does next (next_step).
SERVE, FINISH_THEN_PARK, PARK, STOP = "serve", "finish then park", "park", "stop"


@dataclasses.dataclass(frozen=True)
class Switch:
    project: str
    host: str
    queue: str
    desired: str
    policy: str = DRAIN
    changed_by: str = ""
    changed_at: float = 0.0
    reason: str = ""  # why its writer switched it, free text

    @classmethod
    def from_row(cls, row: Any, table: str = "worker_controls") -> "Switch":
        """Build from a row of ``worker_controls`` (or of ``table``: the switch log's rows
        are switches too), by column name (see ``by_name``).

        >>> Switch.from_row({"queue": "gpu", "host": "box", "project": "", "desired": OFF, "policy": HARD,
        ...                  "changed_by": "ops", "changed_at": 1.0, "reason": ""}).scope()
        "queue gpu of host box in project ''"
        """
        stored = by_name(row, table, _SWITCH_COLUMNS)
        return cls(**{name: stored[name] for name in _SWITCH_COLUMNS})

    def applies_to(self, project: str, host: str, queue: str) -> bool:
        """
        >>> Switch("*", "box", "*", OFF).applies_to("alpha", "box", "gpu")
        True
        >>> Switch("alpha", "box", "gpu", OFF).applies_to("beta", "box", "gpu")
        False
        """
        return all(mine in (ANY, theirs) for mine, theirs in
                   ((self.project, project), (self.host, host), (self.queue, queue)))

    def scope(self) -> str:
        """How the switch reads in messages.

        >>> Switch("", "box", "*", OFF).scope()
        "every queue of host box in project ''"
        """
        queue = "every queue" if self.queue == ANY else f"queue {self.queue}"
        host = "every host" if self.host == ANY else f"host {self.host}"
        project = "every project" if self.project == ANY else f"project {self.project!r}"
        return f"{queue} of {host} in {project}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_SWITCH_COLUMNS = frozenset(field.name for field in dataclasses.fields(Switch))

HEALTH_GATE = "health gate"  # who the GPU health gate's switches say changed them


@dataclasses.dataclass(frozen=True)
class GpuSwitch:
    """One GPU of a host, switched on or off (a row of ``gpu_switches``): by an operator, or
    off by the health gate, whose last verdict it keeps (``health``: '' when healthy, else
    why not; ``cleared``: the verdict an operator acknowledged by switching it on)."""

    host: str
    gpu_index: int
    desired: str
    reason: str = ""
    changed_by: str = ""
    changed_at: float = 0.0
    health: str = ""
    health_at: float | None = None
    cleared: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> "GpuSwitch":
        stored = by_name(row, "gpu_switches", _GPU_SWITCH_COLUMNS)
        return cls(**{name: stored[name] for name in _GPU_SWITCH_COLUMNS})

    @property
    def off(self) -> bool:
        return self.desired != ON  # the table allows 'on' and 'off' only

    def holding(self) -> Switch:
        """What holds a worker of this GPU while it is off: a drain switch of its host (the
        job in hand finishes; nothing new is claimed), saying which GPU and why.

        >>> GpuSwitch("box", 1, OFF, "uncorrectable ECC errors: 2", HEALTH_GATE).holding().reason
        'GPU 1 of box: uncorrectable ECC errors: 2'
        """
        return Switch(ANY, self.host, ANY, OFF, DRAIN, self.changed_by, self.changed_at,
                      f"GPU {self.gpu_index} of {self.host}: {self.reason or 'switched off'}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_GPU_SWITCH_COLUMNS = frozenset(field.name for field in dataclasses.fields(GpuSwitch))


def check_scope(project: Any, host: Any, queue: Any) -> tuple[str, str, str]:
    """The (project, host, queue) a switch names, each a name as ``names.check_name``
    allows it (the project may be empty, the default project's name) or ``*`` for every
    one; else ``names.InvalidValue`` naming the field.

    >>> check_scope("", "box", "gpu"), check_scope("*", "*", "*")
    (('', 'box', 'gpu'), ('*', '*', '*'))
    >>> check_scope("two words", "box", "gpu")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: project must be a non-empty word, got 'two words'
    >>> check_scope("", "", "gpu")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: host must be a non-empty word, got ''
    """
    return _name_or_any("project", project), _name_or_any("host", host), _name_or_any("queue", queue)


def _name_or_any(field: str, value: Any) -> str:
    return value if value == ANY else names.RULES[field].check(field, value)


def in_force(switches: Iterable[Switch], project: str, host: str, queue: str) -> Switch | None:
    """The off switch that holds the workers of (project, host, queue), or None: they serve.

    >>> rows = [Switch("", "box", "gpu", ON, changed_at=3), Switch("", "box", "*", OFF, DRAIN, changed_at=1),
    ...         Switch("*", "*", "gpu", OFF, HARD, changed_at=2)]
    >>> in_force(rows, "", "box", "gpu").policy, in_force(rows, "", "box", "cpu").policy
    ('hard', 'drain')
    >>> in_force(rows, "", "other", "cpu") is None
    True
    """
    holding = [s for s in switches if s.desired == OFF and s.applies_to(project, host, queue)]
    if not holding:
        return None
    return max(holding, key=lambda s: (s.policy == HARD, s.changed_at))


def holding(per_queue: Mapping[str, Switch | None], job_queue: str | None = None) -> Switch | None:
    """The switch that holds a worker of several queues (``per_queue``: each queue's switch
    in force, in the worker's order), holding a job of ``job_queue`` or none. While one of
    its queues serves, none holds it (it claims from the queues that serve), unless the job
    in hand is on a queue switched off hard: that switch stops it. With every queue off, the
    first drain switch holds it (it parks), else the first hard one. For one queue this is
    that queue's switch.

    >>> hard, drain = Switch("", "box", "a", OFF, HARD), Switch("", "box", "b", OFF, DRAIN)
    >>> holding({"a": hard, "b": None}), holding({"a": hard, "b": None}, job_queue="a") is hard
    (None, True)
    >>> holding({"a": hard, "b": drain}) is drain, holding({"a": hard}) is hard, holding({"a": None})
    (True, True, None)
    """
    if job_queue is not None and (switch := per_queue.get(job_queue)) is not None and switch.policy == HARD:
        return switch
    off = [switch for switch in per_queue.values() if switch is not None]
    if len(off) < len(per_queue) or not off:
        return None
    return next((switch for switch in off if switch.policy != HARD), off[0])


def holding_worker(switches: Iterable[Switch], project: str, host: str, queues: Iterable[str]) -> Switch | None:
    """The switch that holds a worker of (project, host) serving ``queues`` (in its order),
    as a listing judges it (no job in hand: ``holding``), or None: it serves.

    >>> rows = [Switch("", "box", "a", OFF, HARD), Switch("", "box", "b", OFF, DRAIN)]
    >>> holding_worker(rows, "", "box", ["a"]).policy, holding_worker(rows, "", "box", ["a", "c"])
    ('hard', None)
    """
    switches = list(switches)
    return holding({queue: in_force(switches, project, host, queue) for queue in queues})


def next_step(switch: Switch | None, holding_job: bool, has_run_jobs: bool) -> str:
    """What a worker does under ``switch`` (the one ``in_force``), holding a job or not,
    having run jobs since it started or not.

    >>> hard, drain = Switch("", "box", "q", OFF, HARD), Switch("", "box", "q", OFF, DRAIN)
    >>> next_step(None, True, True), next_step(drain, True, True), next_step(drain, False, True)
    ('serve', 'finish then park', 'park')
    >>> next_step(hard, True, False), next_step(hard, False, True), next_step(hard, False, False)
    ('stop', 'stop', 'park')
    """
    if switch is None:
        return SERVE
    if switch.policy == HARD and (holding_job or has_run_jobs):
        return STOP
    return FINISH_THEN_PARK if holding_job else PARK


# --- operators' rules for the models of a box ---------------------------------------------
# A ``model_controls`` row: (host, model, action). ``pin`` keeps the model warm on the host
# (never unloaded for idleness or churn) and ``forbid`` keeps it off the host (its workers
# do not claim its jobs); both stand until cleared. ``unload`` and ``preload`` are requests
# a worker of the host carries out once, then marks done. ``*`` as host: every host.
PIN, FORBID, UNLOAD, PRELOAD = "pin", "forbid", "unload", "preload"
MODEL_ACTIONS = (PIN, FORBID, UNLOAD, PRELOAD)
STANDING = (PIN, FORBID)


@dataclasses.dataclass(frozen=True)
class ModelControl:
    host: str
    model: str
    action: str
    changed_by: str = ""
    changed_at: float = 0.0
    done_at: float | None = None  # a request's: when a worker carried it out

    @classmethod
    def from_row(cls, row: Any) -> "ModelControl":
        """Build from a row of ``model_controls``, by column name.

        >>> ModelControl.from_row({"action": PIN, "model": "m", "host": "box", "changed_by": "ops",
        ...                        "changed_at": 1.0, "done_at": None}).pending
        True
        """
        stored = by_name(row, "model_controls", _MODEL_CONTROL_COLUMNS)
        values = {name: stored[name] for name in _MODEL_CONTROL_COLUMNS}
        # A row from plain SQL may hold any value where a time belongs (SQLite keeps what it is
        # given): read as the oldest time, so rules still sort and apply, never raise.
        values["changed_at"] = _time_or(values["changed_at"], 0.0)
        if values["done_at"] is not None:
            values["done_at"] = _time_or(values["done_at"], 0.0)
        return cls(**values)

    @property
    def pending(self) -> bool:
        """A standing rule always holds; a request holds until a worker has carried it out."""
        return self.action in STANDING or self.done_at is None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_MODEL_CONTROL_COLUMNS = frozenset(field.name for field in dataclasses.fields(ModelControl))


def _time_or(value: Any, default: float) -> float:
    """A stored time as a float, or ``default`` when it is no number.

    >>> _time_or(5, 0.0), _time_or("yesterday", 0.0), _time_or(True, 0.0)
    (5.0, 0.0, 0.0)
    """
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


@dataclasses.dataclass(frozen=True)
class ModelRules:
    """What the operators' model rows say to the workers of one host."""

    pinned: frozenset[str] = frozenset()
    forbidden: frozenset[str] = frozenset()
    unload: frozenset[str] = frozenset()     # requests not yet carried out
    preload: tuple[str, ...] = ()            # oldest request first


def model_rules(controls: Iterable[ModelControl], host: str) -> ModelRules:
    """The rules for ``host`` (its own rows and the ``*`` ones). A model both pinned and
    forbidden is forbidden: keeping a model off a box is the stricter wish.

    >>> rows = [ModelControl("box", "a", PIN), ModelControl("*", "a", FORBID), ModelControl("box", "b", PIN),
    ...         ModelControl("box", "c", PRELOAD, changed_at=2), ModelControl("box", "d", PRELOAD, changed_at=1),
    ...         ModelControl("box", "e", UNLOAD, done_at=5.0), ModelControl("other", "f", FORBID)]
    >>> rules = model_rules(rows, "box")
    >>> sorted(rules.pinned), sorted(rules.forbidden), sorted(rules.unload), rules.preload
    (['b'], ['a'], [], ('d', 'c'))
    """
    mine = [row for row in controls if row.host in (ANY, host) and row.pending]
    forbidden = frozenset(row.model for row in mine if row.action == FORBID)

    def allowed(action: str) -> list[ModelControl]:
        return [row for row in mine if row.action == action and row.model not in forbidden]

    preloads = sorted(allowed(PRELOAD), key=lambda row: row.changed_at)
    return ModelRules(pinned=frozenset(row.model for row in allowed(PIN)), forbidden=forbidden,
                      unload=frozenset(row.model for row in mine if row.action == UNLOAD),
                      preload=tuple(dict.fromkeys(row.model for row in preloads)))
