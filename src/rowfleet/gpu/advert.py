"""What a GPU worker's advert means to placement: the worker as a ``routing.Box``, the
boxes of a queue, and a model's measured figures as a ``routing.ModelInfo``. Pure.

The engine reads adverts through one narrow store call (``Store.gpu_adverts``, typed
``GpuWorker`` values); the operator's read model (``rowfleet.views.snapshot``) judges its
listed workers by the same functions, so a box is the same box whoever asks.

Imports the pure rules, ``rowfleet.gpu.routing`` and the store's row types; never a view.
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol

from rowfleet import control, names
from rowfleet.gpu import routing
from rowfleet.store.fleet import GpuAdvert

# The states in which a worker beats and may hold its GPU: placement counts it live.
LIVE_STATES = (control.SERVING, control.DRAINING, control.PARKED)


class Advertiser(Protocol):
    """A worker as placement reads it: a store's ``GpuWorker``, or a listing's worker."""

    worker_id: str
    host: str
    current_job: int | None
    actual: str
    desired: str
    gpu: GpuAdvert | None

    def serves(self, queue: str) -> bool: ...


def box_of(worker: Advertiser) -> routing.Box | None:
    """The worker as placement sees it (``routing.Box``), or None for a worker without a GPU
    advert: live while it beats (serving, draining or parked), serving only when it serves
    and no switch holds it off, busy while it names a job."""
    advert = worker.gpu
    if advert is None:
        return None
    return routing.Box(
        worker_id=worker.worker_id, host=worker.host, gpu_index=advert.gpu_index or 0,
        live=worker.actual in LIVE_STATES,
        serving=worker.actual == control.SERVING and worker.desired == control.ON, models=advert.models,
        vram_total_mb=advert.vram_total_mb or 0, vram_free_mb=advert.vram_free_mb, warm_model=advert.warm_model,
        warm_since=advert.warm_since, loading=advert.loading, host_priority=advert.host_priority or 0,
        busy=worker.current_job is not None)


def boxes_of(workers: Iterable[Advertiser], queues: Iterable[str], *, besides: str | None = None) -> tuple[routing.Box, ...]:
    """The GPU workers that serve any of ``queues`` as boxes, live or not, in their order;
    the worker ``besides`` names (a worker asking about the others) left out."""
    queues = tuple(queues)
    return tuple(box for worker in workers
                 if worker.worker_id != besides and any(worker.serves(queue) for queue in queues)
                 and (box := box_of(worker)) is not None)


def model_info_of(row: Any, now: float) -> routing.ModelInfo:
    """A ``model_stats`` row as ``routing.ModelInfo`` at ``now``. The figures keep no
    history of single loads, so failed loads count as recent only while the model's last
    load failed (``last_failed_at`` is its last update) within ``routing.FAILURE_WINDOW``;
    a good load since, or a failure long ago, counts none.

    >>> row = {"model": "llm", "load_seconds": 12.0, "footprint_mb": 9000, "failed_loads": 3,
    ...        "last_failed_at": 1000.0, "updated_at": 1000.0}
    >>> model_info_of(row, 1100.0).failed_loads, model_info_of(row, 1000.0 + 901).failed_loads
    (3, 0)
    >>> model_info_of({**row, "updated_at": 1050.0}, 1100.0).failed_loads
    0
    """
    failed = row["failed_loads"]
    last_failed, updated = names.seconds_of(row["last_failed_at"]), names.seconds_of(row["updated_at"])
    recent = last_failed is not None and updated is not None and last_failed >= updated \
        and now - last_failed <= routing.FAILURE_WINDOW
    footprint = row["footprint_mb"]
    return routing.ModelInfo(
        row["model"], footprint_mb=footprint if isinstance(footprint, int) and not isinstance(footprint, bool) else None,
        load_seconds=names.seconds_of(row["load_seconds"]),
        failed_loads=failed if recent and isinstance(failed, int) else 0)
