"""What the orchestrator's sweep decides placement on, read in one store call: a project's
queued and running model jobs in groups (``Demand``), its GPU workers as boxes, and each
model's measured figures; and the words an operator reads for each reason a job is
unplaceable. ``placement(store, project)`` is the read; the rest is pure.

The operator's models view (``rowfleet.views.snapshot.models``) shows the same groups and
boxes, built by the same functions. Imports the pure rules, ``rowfleet.gpu`` and the store's
row types; takes the store as an argument; never a view.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from rowfleet import liveness
from rowfleet.gpu import advert, routing
from rowfleet.store.fleet import GpuWorker, gpu_worker_of

if TYPE_CHECKING:
    from rowfleet.store import Store
    from rowfleet.store.fleet import ModelRows

# Groups of model jobs (queue, model, job size, state, reason) one read takes, at most.
MODEL_GROUPS = 1000


@dataclasses.dataclass(frozen=True)
class Demand:
    """One group of a project's model jobs in one state (``model_demand``): ``n`` jobs of
    ``queue`` needing ``model`` with the same own ``vram_mb``, all flagged ``unplaceable``
    (None: placeable), the oldest created at ``oldest``, unplaceable since ``unplaceable_since``."""

    queue: str
    model: str
    vram_mb: int | None
    state: str
    unplaceable: str | None
    n: int
    oldest: float | None = None
    unplaceable_since: float | None = None


def demand_of(row: Any) -> Demand:
    """A ``model_demand`` row as ``Demand``."""
    return Demand(**{field.name: row[field.name] for field in dataclasses.fields(Demand)})


@dataclasses.dataclass(frozen=True)
class Placement:
    """A project's placement at one moment (``at``): the groups of model jobs (``demand``,
    ``capped`` when the read stopped at its limit), its listed GPU workers and each model's
    figures (``info``)."""

    at: float
    demand: tuple[Demand, ...]
    workers: tuple[GpuWorker, ...]
    info: dict[str, routing.ModelInfo]
    capped: bool = False

    def boxes(self, queue: str) -> tuple[routing.Box, ...]:
        """The GPU workers of ``queue`` as placement sees them, live or not."""
        return advert.boxes_of(self.workers, (queue,))


def placement(store: "Store", project: str, *, groups: int = MODEL_GROUPS,
              listed_for: float | None = liveness.LISTED_FOR) -> Placement:
    """``project``'s placement now, from one store read (``Store.model_rows``, no claims
    read): ``groups`` groups of model jobs at most, and the GPU workers seen in the last
    ``listed_for`` seconds and every live one."""
    return placement_of(store.model_rows(project, None, listed_for, groups, 0), groups)


def placement_of(rows: "ModelRows", groups: int) -> Placement:
    """The typed ``Placement`` of what ``Store.model_rows`` read."""
    switches = tuple(rows.switches)
    workers = tuple(worker for row in rows.workers if (worker := gpu_worker_of(row, switches, rows.now)) is not None)
    demand = tuple(demand_of(row) for row in rows.demand)
    return Placement(rows.now, demand, workers, {row["model"]: advert.model_info_of(row, rows.now) for row in rows.stats},
                     capped=len(demand) >= groups)


# What each reason of routing.Unplaceable tells an operator to look at.
UNPLACEABLE_TEXT = {
    routing.Unplaceable.MODEL_UNKNOWN.value: "no GPU worker of its queue lists its model",
    routing.Unplaceable.NO_BOX_BIG_ENOUGH.value: "it needs more GPU memory than any worker listing its model has",
    routing.Unplaceable.LOAD_FAILING.value: "loads of its model keep failing",
    routing.Unplaceable.FITTING_BOXES_OFF.value: "every GPU worker that could run it is off, draining or dead",
}


def unplaceable_text(reason: str) -> str:
    """A reason as the front ends show it: the reason, and what it means.

    >>> unplaceable_text("load_failing"), unplaceable_text("odd")
    ('load_failing (loads of its model keep failing)', 'odd')
    """
    meaning = UNPLACEABLE_TEXT.get(reason)
    return reason if meaning is None else f"{reason} ({meaning})"
