"""Where a GPU fleet's model jobs go: every placement decision, as pure functions. Pure.

A *box* is one GPU worker as its last heartbeat shows it (``Box``); a *model* is what a job
names as its required model, with what the fleet has measured of it (``ModelInfo``); a
*backlog* is what is queued for one model (``Backlog``). From a fleet view of those three,
this module decides:

* ``claim_inputs``: before each claim, what the worker hands the store (a ``ClaimInputs``
  whose fields are the claim's routing fields: splat ``inputs.fields()`` into ``Claim``);
* ``unplaceable_reason``: why a queued model job can run nowhere (the orchestrator flags it);
* ``preload_choice`` / ``preload_plan``: which idle box loads which model ahead of its work;
* ``should_unload``: when a box idle long enough gives its model's memory back;
* ``plan`` over a ``FleetView``: all of them for a whole fleet at one instant, so a bench can
  drive the fleet on a virtual clock (no timers, no threads: time is the ``now`` it passes),
  with ``next_model`` standing for the claim's model order.

The rules, and the choices made where the product rules are silent:

* **Need and fit.** A job needs its own ``vram_mb``, else its model's measured footprint (the
  measured figure replaces the estimate), else the model's registered size, else nothing
  known: it fits anywhere. Placement is by *total* memory (``fits``): a box whose GPU could
  hold the need once empty. The claim's own check against free memory is separate: its input
  ``vram_free_mb`` is the box's free memory *plus* what its warm model holds (footprint, else
  registered size; capped at the total), since switching models evicts the warm one and the
  warm model's own jobs already have it loaded. A box that reports no free figure gives
  ``None``: no free-memory check. A box with no GPU reports a total of 0.
* **Holding.** A box *holds* a model when it is warm on it or loading it. Only boxes that are
  live and serving (not off, draining or dead) hold anything for the fleet; a draining box's
  warm model serves no new job.
* **Starvation, orphan-aware.** A model is starved for box B when its oldest queued job has
  waited longer than ``starve_after`` (3 x its measured load time, clamped to 60..900 s; an
  unmeasured load counts as ``ASSUMED_LOAD_SECONDS``, i.e. the 60 s floor) *and* no other live,
  serving box that can serve it (lists it, enough total memory) holds it. An aging timer alone
  turns into FIFO under a backlog; this bound fires only for work nobody is set up to do.
  B's own warm or loading model is never starved for B (its jobs are B's warm work already),
  and neither is a model whose loads keep failing (evicting warm work to fail again helps no
  one). Starved models are ordered by how far past their bound they are, then by id.
* **Cold pick (``rank``).** The models B may take, most preferred first, by: loads not
  failing; held by no other box (spread the models over the fleet); no *smaller* idle box
  (live, serving, no job, not loading) could take it (keep big boxes for big models); the
  bigger need first (an unknown need counts as 0: it fits anywhere); the id. So of two idle
  boxes the small one takes the small model and the big one the model only it can hold; a
  rank only orders, so a big box still takes small work when nothing else is queued.
* **Churn floor.** A box keeps its warm model at least ``min_resident`` (2 x its load time)
  after loading it: ``only_warm`` is true while the floor holds, unless a model is starved for
  the box (then ``only_warm`` is false and the claim takes starved work first by its order).
  A box that reports a warm model without ``warm_since`` has no floor: a missing figure must
  not pin a model forever.
* **Lanes.** ``any`` (model and plain jobs), ``model`` (model jobs only), ``plain`` (jobs
  without a model only) are checked here and passed through. On the ``plain`` lane nothing
  is starved, ranked or floored, since its jobs load no model.
* **Overflow.** A box whose host has a negative priority is an overflow box: it claims newest
  first (``newest_first``), so the oldest work stays with the primary hosts.
* **Unplaceable.** In order of precedence (the first that holds is the reason):
  ``model_unknown`` (no box in the view lists the model), ``no_box_big_enough`` (the need is
  bigger than every box that lists it, whatever their state: more or bigger hardware is the
  fix), ``load_failing`` (``FAILED_LOADS`` failed loads in the last 15 minutes: turning boxes on
  would fail again), ``fitting_boxes_off`` (boxes that could run it exist, but all are off,
  draining or dead: turn one on). The view is whatever workers the caller lists, live or not.
* **Preload.** An idle box (in service, no job, not loading) with no warm work (no warm model,
  or nothing queued for it) and past its churn floor loads a model ahead of its jobs when the
  model's queued work (queued count x mean run time) exceeds its load time, no box holds it,
  and its loads are not failing. Unknown run time: no preload (the evidence is missing; a
  claim still loads the model when it takes a job). Over a fleet the choice is one plan
  (``preload_plan``): the models with the most queued work first, each to the smallest idle
  box that can serve it, so two boxes reading the same view never load the same model and
  a big box is left for the big model.
* **Idle unload.** A box with a warm model, no job and nothing loading unloads it once idle
  for ``idle_ttl`` seconds, unless the model is pinned; no ``idle_ttl`` means never.

Imports only ``rowfleet.names`` (the lane's check): no store, no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Collection, Iterable, Mapping

from rowfleet.names import InvalidValue

ANY, MODEL, PLAIN = "any", "model", "plain"
LANES = (ANY, MODEL, PLAIN)
STARVE_FACTOR = 3.0  # a model's jobs wait this many of its load times before it is starved ...
STARVE_FLOOR = 60.0  # ... but never less than this many seconds ...
STARVE_CEILING = 900.0  # ... nor more than this
RESIDENT_FACTOR = 2.0  # a loaded model stays at least this many of its load times
ASSUMED_LOAD_SECONDS = 20.0  # a load never measured (so the starvation bound is the floor)
FAILED_LOADS = 3  # failed loads within FAILURE_WINDOW that mark a model's loads as failing
FAILURE_WINDOW = 900.0  # seconds ModelInfo.failed_loads counts back


# Why a queued model job can run on no box (the module docstring gives the precedence);
# each value is its name in lower case, as ``jobs.unplaceable`` stores it.
Unplaceable = enum.StrEnum("Unplaceable", ["MODEL_UNKNOWN", "NO_BOX_BIG_ENOUGH", "LOAD_FAILING", "FITTING_BOXES_OFF"])


@dataclasses.dataclass(frozen=True)
class Box:
    """One GPU worker as its heartbeat shows it."""

    worker_id: str
    host: str = ""
    gpu_index: int = 0
    live: bool = True                 # heartbeating (not flagged dead, not silent)
    serving: bool = True              # taking new work: not off, draining or dead
    models: tuple[str, ...] = ()      # models it can load
    vram_total_mb: int = 0            # the GPU's memory; 0: no GPU
    vram_free_mb: int | None = None   # free now; None: not measured
    warm_model: str | None = None     # loaded and ready
    warm_since: float | None = None   # when the warm model finished loading (epoch seconds)
    loading: str | None = None        # being loaded now
    host_priority: int = 0            # negative: an overflow host
    busy: bool = False                # running a job now


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """What the fleet knows of one model; ``None`` is not known."""

    id: str
    vram_mb: int | None = None        # registered size
    footprint_mb: int | None = None   # measured on a box, replaces the registered size
    load_seconds: float | None = None  # measured load time
    failed_loads: int = 0             # failed loads within the last FAILURE_WINDOW seconds


@dataclasses.dataclass(frozen=True)
class Backlog:
    """What is queued for one model."""

    model: str
    queued: int = 0
    oldest_wait: float = 0.0          # seconds the oldest queued job has waited
    mean_run_seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class ClaimInputs:
    """The claim's routing fields, as one worker should claim now (``claim_inputs``)."""

    models: tuple[str, ...]           # capability gate: model jobs of these only
    lane: str                         # 'any' | 'model' | 'plain'
    warm_model: str | None            # its jobs come before cold ones
    starved: tuple[str, ...]          # these outrank warm work
    rank: tuple[str, ...]             # cold-pick preference, most preferred first
    only_warm: bool                   # churn floor: load no other model
    vram_free_mb: int | None          # free memory for the claim's fit; None: no check
    newest_first: bool                # an overflow box takes the newest work

    def fields(self) -> dict:
        """The fields by name, to splat into ``Claim`` (tuples stay tuples).

        >>> sorted(ClaimInputs((), ANY, None, (), (), False, None, False).fields())[:3]
        ['lane', 'models', 'newest_first']
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


# --- single rules ----------------------------------------------------------------------


def check_lane(lane: object) -> str:
    """A worker's lane: ``any``, ``model`` or ``plain``.

    >>> check_lane("model")
    'model'
    >>> check_lane("gpu")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: lane must be one of 'any', 'model', 'plain', got 'gpu'
    """
    if not isinstance(lane, str) or lane not in LANES:
        raise InvalidValue("lane", "one of 'any', 'model', 'plain'", lane)
    return lane


def vram_need(job_vram_mb: int | None, model: ModelInfo | None) -> int | None:
    """GPU memory a job needs (MiB): its own figure, else its model's measured footprint,
    else the model's registered size; ``None`` when nothing is known (it fits anywhere).

    >>> info = ModelInfo("llm", vram_mb=16000, footprint_mb=14500)
    >>> vram_need(20000, info), vram_need(None, info), vram_need(None, ModelInfo("llm", 16000)), vram_need(None, None)
    (20000, 14500, 16000, None)
    """
    if job_vram_mb is not None:
        return job_vram_mb
    if model is None:
        return None
    return model.footprint_mb if model.footprint_mb is not None else model.vram_mb


def fits(need: int | None, box: Box) -> bool:
    """Could the box's GPU hold ``need`` once empty? An unknown need fits anywhere.

    >>> box = Box("w1", vram_total_mb=24000)
    >>> fits(24000, box), fits(24001, box), fits(None, box), fits(None, Box("cpu"))
    (True, False, True, True)
    """
    return need is None or need <= box.vram_total_mb


def can_serve(box: Box, model: str, need: int | None) -> bool:
    """Does the box list the model and have the memory for it (whatever its state)?

    >>> can_serve(Box("w1", models=("llm",), vram_total_mb=24000), "llm", 30000)
    False
    """
    return model in box.models and fits(need, box)


def starve_after(load_seconds: float | None) -> float:
    """Seconds a model's oldest job may wait before the model counts as starved: 3 x its
    load time, clamped to 60..900 (an unmeasured load: the floor).

    >>> starve_after(10), starve_after(45), starve_after(600), starve_after(None)
    (60.0, 135.0, 900.0, 60.0)
    """
    seconds = ASSUMED_LOAD_SECONDS if load_seconds is None else load_seconds
    return min(STARVE_CEILING, max(STARVE_FLOOR, STARVE_FACTOR * seconds))


def min_resident(load_seconds: float | None) -> float:
    """Seconds a box keeps a model it loaded before it may evict it: 2 x the load time.

    >>> min_resident(45), min_resident(None)
    (90.0, 40.0)
    """
    return RESIDENT_FACTOR * (ASSUMED_LOAD_SECONDS if load_seconds is None else load_seconds)


def load_failing(info: ModelInfo | None) -> bool:
    """Have ``FAILED_LOADS`` loads of the model failed within the last 15 minutes?

    >>> load_failing(ModelInfo("llm", failed_loads=2)), load_failing(ModelInfo("llm", failed_loads=3))
    (False, True)
    """
    return info is not None and info.failed_loads >= FAILED_LOADS


def holds(box: Box, model: str) -> bool:
    """Is the box warm on the model, or loading it?

    >>> holds(Box("w1", loading="llm"), "llm"), holds(Box("w1", warm_model="sd"), "llm")
    (True, False)
    """
    return model in (box.warm_model, box.loading)


def in_service(box: Box) -> bool:
    """Live and serving: a box whose state lets it take new work."""
    return box.live and box.serving


def idle(box: Box) -> bool:
    """In service, running no job and loading nothing.

    >>> idle(Box("w1")), idle(Box("w1", busy=True)), idle(Box("w1", live=False))
    (True, False, False)
    """
    return in_service(box) and not box.busy and box.loading is None


def newest_first(box: Box) -> bool:
    """An overflow box (negative host priority) claims the newest work first.

    >>> newest_first(Box("w1", host_priority=-1)), newest_first(Box("w1"))
    (True, False)
    """
    return box.host_priority < 0


def _info(models: Mapping[str, ModelInfo], model: str) -> ModelInfo:
    return models.get(model) or ModelInfo(model)


def _need(models: Mapping[str, ModelInfo], model: str) -> int | None:
    return vram_need(None, models.get(model))


def _others(box: Box, boxes: Iterable[Box]) -> list[Box]:
    return [other for other in boxes if other.worker_id != box.worker_id]


def held_elsewhere(model: str, box: Box, boxes: Iterable[Box], need: int | None) -> bool:
    """Does another box in service, able to serve the model, hold it (warm or loading)?

    >>> fleet = [Box("w1", warm_model="llm", models=("llm",)), Box("w2", models=("llm",))]
    >>> held_elsewhere("llm", fleet[1], fleet, None), held_elsewhere("llm", fleet[0], fleet, None)
    (True, False)
    """
    return any(in_service(other) and holds(other, model) and can_serve(other, model, need)
               for other in _others(box, boxes))


def _smaller_idle_box_takes(model: str, box: Box, boxes: Iterable[Box], need: int | None) -> bool:
    return any(idle(other) and can_serve(other, model, need) and other.vram_total_mb < box.vram_total_mb
               for other in _others(box, boxes))


# --- one worker's claim ------------------------------------------------------------------


def capable(box: Box, models: Mapping[str, ModelInfo]) -> tuple[str, ...]:
    """The models the box lists whose need fits its GPU: the claim's capability gate.

    >>> capable(Box("w1", models=("big", "small", "new"), vram_total_mb=24000),
    ...         {"big": ModelInfo("big", 40000), "small": ModelInfo("small", 8000)})
    ('small', 'new')
    """
    return tuple(model for model in box.models if fits(_need(models, model), box))


def starved(box: Box, boxes: Iterable[Box], models: Mapping[str, ModelInfo],
            backlogs: Mapping[str, Backlog]) -> tuple[str, ...]:
    """The models starved for this box, most overdue first: the box can serve them, their
    oldest job waited past ``starve_after``, and no other box in service holds them.

    >>> models = {"llm": ModelInfo("llm", load_seconds=30)}
    >>> me = Box("w2", models=("llm",), warm_model="sd")
    >>> starved(me, [me], models, {"llm": Backlog("llm", 4, oldest_wait=91.0)})
    ('llm',)
    >>> holder = Box("w1", models=("llm",), warm_model="llm")
    >>> starved(me, [holder, me], models, {"llm": Backlog("llm", 4, oldest_wait=91.0)})
    ()
    """
    boxes = list(boxes)
    overdue = []
    for model in capable(box, models):
        backlog, info = backlogs.get(model), _info(models, model)
        if backlog is None or backlog.queued <= 0 or holds(box, model) or load_failing(info):
            continue
        bound = starve_after(info.load_seconds)
        if backlog.oldest_wait > bound and not held_elsewhere(model, box, boxes, _need(models, model)):
            overdue.append((bound - backlog.oldest_wait, model))
    return tuple(model for _, model in sorted(overdue))


def rank(box: Box, boxes: Iterable[Box], models: Mapping[str, ModelInfo]) -> tuple[str, ...]:
    """The models the box may cold-pick, most preferred first (the module docstring gives
    the order).

    >>> models = {"big": ModelInfo("big", 60000), "small": ModelInfo("small", 10000)}
    >>> small = Box("s", models=("big", "small"), vram_total_mb=24000)
    >>> large = Box("l", models=("big", "small"), vram_total_mb=80000)
    >>> rank(large, [small, large], models), rank(small, [small, large], models)
    (('big', 'small'), ('small',))
    """
    boxes = list(boxes)

    def preference(model: str) -> tuple:
        need = _need(models, model)
        return (load_failing(models.get(model)), held_elsewhere(model, box, boxes, need),
                _smaller_idle_box_takes(model, box, boxes, need), -(need or 0), model)

    return tuple(sorted(capable(box, models), key=preference))


def churn_floor(box: Box, models: Mapping[str, ModelInfo], now: float) -> bool:
    """Is the box's warm model younger than ``min_resident``, so it must stay?

    >>> box = Box("w1", warm_model="llm", warm_since=1000.0)
    >>> models = {"llm": ModelInfo("llm", load_seconds=30)}
    >>> churn_floor(box, models, 1059.0), churn_floor(box, models, 1060.0), churn_floor(Box("w1"), models, 0)
    (True, False, False)
    """
    if box.warm_model is None or box.warm_since is None:
        return False
    return now - box.warm_since < min_resident(_info(models, box.warm_model).load_seconds)


def claim_vram_free(box: Box, models: Mapping[str, ModelInfo]) -> int | None:
    """Free memory for the claim's fit: the box's free memory plus what its warm model
    holds (evicted by a switch, or already loaded for its own jobs), at most the total.

    >>> box = Box("w1", vram_total_mb=24000, vram_free_mb=6000, warm_model="llm")
    >>> claim_vram_free(box, {"llm": ModelInfo("llm", 16000, footprint_mb=15000)}), claim_vram_free(box, {})
    (21000, 6000)
    >>> claim_vram_free(Box("w1", vram_total_mb=24000), {}) is None
    True
    """
    if box.vram_free_mb is None:
        return None
    held = _need(models, box.warm_model) if box.warm_model is not None else None
    return min(box.vram_total_mb, box.vram_free_mb + (held or 0))


def claim_inputs(box: Box, boxes: Iterable[Box], models: Mapping[str, ModelInfo],
                 backlogs: Mapping[str, Backlog], now: float, lane: str = ANY) -> ClaimInputs:
    """What this box hands its next claim, from the fleet view (``boxes`` may include it).

    >>> models = {"llm": ModelInfo("llm", 16000, load_seconds=30), "sd": ModelInfo("sd", 8000, load_seconds=10)}
    >>> me = Box("w1", models=("llm", "sd"), vram_total_mb=24000, vram_free_mb=2000,
    ...          warm_model="sd", warm_since=990.0)
    >>> inputs = claim_inputs(me, [me], models, {"llm": Backlog("llm", 3, oldest_wait=20.0)}, now=1000.0)
    >>> inputs.rank, inputs.only_warm, inputs.vram_free_mb, inputs.newest_first
    (('llm', 'sd'), True, 10000, False)
    >>> claim_inputs(me, [me], models, {"llm": Backlog("llm", 3, oldest_wait=95.0)}, now=1000.0).starved
    ('llm',)
    """
    lane = check_lane(lane)
    boxes = list(boxes)
    hungry = starved(box, boxes, models, backlogs) if lane != PLAIN else ()
    return ClaimInputs(
        models=capable(box, models),
        lane=lane,
        warm_model=box.warm_model,
        starved=hungry,
        rank=rank(box, boxes, models) if lane != PLAIN else (),
        only_warm=lane != PLAIN and not hungry and churn_floor(box, models, now),
        vram_free_mb=claim_vram_free(box, models),
        newest_first=newest_first(box),
    )


def next_model(inputs: ClaimInputs, queued: Collection[str]) -> str | None:
    """Whose jobs the claim takes first, of the models with work ``queued``: a starved one,
    else the warm one, else (unless ``only_warm``) the first in ``rank``; ``None``: no model
    job (a plain job may still be taken on the ``any`` lane). The store's claim orders
    jobs the same way; a bench uses this in its place.

    >>> inputs = ClaimInputs(("a", "b", "c"), ANY, "b", ("c",), ("a", "b", "c"), False, None, False)
    >>> next_model(inputs, {"a", "b", "c"}), next_model(inputs, {"a", "b"}), next_model(inputs, {"a"})
    ('c', 'b', 'a')
    >>> next_model(dataclasses.replace(inputs, only_warm=True), {"a"}) is None
    True
    """
    if inputs.lane == PLAIN:
        return None
    gate = set(inputs.models)
    for model in inputs.starved:
        if model in queued and model in gate:
            return model
    if inputs.warm_model in queued and inputs.warm_model in gate:
        return inputs.warm_model
    if inputs.only_warm:
        return None
    return next((model for model in inputs.rank if model in queued and model in gate), None)


# --- the fleet ---------------------------------------------------------------------------


def unplaceable_reason(model: str, need: int | None, boxes: Iterable[Box],
                       info: ModelInfo | None) -> Unplaceable | None:
    """Why a queued job of ``model`` needing ``need`` MiB can run nowhere, or ``None`` when
    some box can take it. Precedence: unknown, too big, loads failing, boxes off.

    >>> boxes = [Box("w1", models=("llm",), vram_total_mb=24000, live=False)]
    >>> [unplaceable_reason("llm", n, boxes, None) for n in (30000, 20000)]
    [<Unplaceable.NO_BOX_BIG_ENOUGH: 'no_box_big_enough'>, <Unplaceable.FITTING_BOXES_OFF: 'fitting_boxes_off'>]
    >>> unplaceable_reason("sd", None, boxes, None).value
    'model_unknown'
    """
    listing = [box for box in boxes if model in box.models]
    if not listing:
        return Unplaceable.MODEL_UNKNOWN
    fitting = [box for box in listing if fits(need, box)]
    if not fitting:
        return Unplaceable.NO_BOX_BIG_ENOUGH
    if load_failing(info):
        return Unplaceable.LOAD_FAILING
    if not any(in_service(box) for box in fitting):
        return Unplaceable.FITTING_BOXES_OFF
    return None


def _queued_work(backlog: Backlog) -> float | None:
    if backlog.mean_run_seconds is None:
        return None
    return backlog.queued * backlog.mean_run_seconds


def _may_preload(box: Box, backlogs: Mapping[str, Backlog], models: Mapping[str, ModelInfo], now: float) -> bool:
    warm = backlogs.get(box.warm_model) if box.warm_model is not None else None
    return idle(box) and (warm is None or warm.queued <= 0) and not churn_floor(box, models, now)


def _preload_candidates(boxes: list[Box], backlogs: Mapping[str, Backlog],
                        models: Mapping[str, ModelInfo]) -> list[str]:
    """Models worth loading ahead, the most queued work first (then the oldest wait, the id)."""
    worth = []
    for model, backlog in backlogs.items():
        info, work = _info(models, model), _queued_work(backlog)
        held = any(in_service(box) and holds(box, model) for box in boxes)
        load = ASSUMED_LOAD_SECONDS if info.load_seconds is None else info.load_seconds
        if backlog.queued > 0 and work is not None and work > load and not held and not load_failing(info):
            worth.append((-work, -backlog.oldest_wait, model))
    return [model for _, _, model in sorted(worth)]


def preload_plan(boxes: Iterable[Box], backlogs: Mapping[str, Backlog], models: Mapping[str, ModelInfo],
                 now: float) -> dict[str, str]:
    """Which idle box loads which model ahead of its jobs: ``{worker_id: model}``. Each model
    worth it, the most queued work first, goes to the smallest free box that can serve it.

    >>> models = {"big": ModelInfo("big", 60000, load_seconds=60), "small": ModelInfo("small", 10000, load_seconds=10)}
    >>> boxes = [Box("l", models=("big", "small"), vram_total_mb=80000),
    ...          Box("s", models=("big", "small"), vram_total_mb=24000)]
    >>> backlogs = {"big": Backlog("big", 2, 5.0, 40.0), "small": Backlog("small", 5, 5.0, 30.0)}
    >>> preload_plan(boxes, backlogs, models, now=0.0)
    {'s': 'small', 'l': 'big'}
    """
    boxes = list(boxes)
    free = sorted((box for box in boxes if _may_preload(box, backlogs, models, now)),
                  key=lambda box: (box.vram_total_mb, box.worker_id))
    chosen: dict[str, str] = {}
    for model in _preload_candidates(boxes, backlogs, models):
        need = _need(models, model)
        box = next((box for box in free if box.worker_id not in chosen and can_serve(box, model, need)), None)
        if box is not None:
            chosen[box.worker_id] = model
    return chosen


def preload_choice(box: Box, backlogs: Mapping[str, Backlog], boxes: Iterable[Box],
                   models: Mapping[str, ModelInfo], now: float) -> str | None:
    """The model this box should load ahead of its jobs, or ``None`` (see ``preload_plan``).

    >>> me, models = Box("w1", models=("llm",), vram_total_mb=24000), {"llm": ModelInfo("llm", load_seconds=45)}
    >>> preload_choice(me, {"llm": Backlog("llm", 3, 1.0, 20.0)}, [me], models, 0.0)
    'llm'
    >>> preload_choice(me, {"llm": Backlog("llm", 2, 1.0, 20.0)}, [me], models, 0.0) is None
    True
    """
    boxes = list(boxes)
    if all(other.worker_id != box.worker_id for other in boxes):
        boxes.append(box)
    return preload_plan(boxes, backlogs, models, now).get(box.worker_id)


def should_unload(box: Box, idle_seconds: float, idle_ttl: float | None, pinned: Collection[str] = ()) -> bool:
    """Should the box unload its warm model, idle (no job) for ``idle_seconds``? Only past
    ``idle_ttl`` (``None``: never), and never a pinned model or while loading.

    >>> box = Box("w1", warm_model="llm")
    >>> should_unload(box, 600, 600), should_unload(box, 599, 600), should_unload(box, 600, None)
    (True, False, False)
    >>> should_unload(box, 600, 600, pinned={"llm"}), should_unload(Box("w1"), 600, 600)
    (False, False)
    """
    if box.warm_model is None or box.warm_model in pinned or box.busy or box.loading is not None:
        return False
    return idle_ttl is not None and idle_seconds >= idle_ttl


@dataclasses.dataclass(frozen=True)
class FleetView:
    """The fleet at one instant: what every decision here reads."""

    boxes: tuple[Box, ...]
    models: Mapping[str, ModelInfo] = dataclasses.field(default_factory=dict)
    backlogs: Mapping[str, Backlog] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Every decision for a fleet at one instant (``plan``)."""

    inputs: Mapping[str, ClaimInputs]       # per box in service: its next claim's inputs
    preloads: Mapping[str, str]             # worker_id -> the model it loads ahead
    unplaceable: Mapping[str, Unplaceable]  # per model with queued work that can run nowhere


def plan(view: FleetView, now: float, lanes: Mapping[str, str] | None = None) -> Plan:
    """Every decision for the fleet at ``now``: a bench's step on a virtual clock. ``lanes``
    gives a box's lane by worker id (default ``any``); a model's need is its model-level one.

    >>> view = FleetView((Box("w1", models=("llm",), vram_total_mb=24000), Box("w2", live=False)),
    ...                  {"llm": ModelInfo("llm", 16000, load_seconds=30), "xl": ModelInfo("xl", 90000)},
    ...                  {"llm": Backlog("llm", 5, 10.0, 60.0), "xl": Backlog("xl", 1, 10.0)})
    >>> result = plan(view, now=0.0)
    >>> sorted(result.inputs), result.preloads, result.unplaceable
    (['w1'], {'w1': 'llm'}, {'xl': <Unplaceable.MODEL_UNKNOWN: 'model_unknown'>})
    """
    lanes = lanes or {}
    inputs = {box.worker_id: claim_inputs(box, view.boxes, view.models, view.backlogs, now,
                                          lanes.get(box.worker_id, ANY))
              for box in view.boxes if in_service(box)}
    reasons = {model: unplaceable_reason(model, _need(view.models, model), view.boxes, view.models.get(model))
               for model, backlog in view.backlogs.items() if backlog.queued > 0}
    return Plan(inputs, preload_plan(view.boxes, view.backlogs, view.models, now),
                {model: reason for model, reason in sorted(reasons.items()) if reason is not None})
