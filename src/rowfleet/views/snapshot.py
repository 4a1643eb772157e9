"""The fleet read model: job counts, workers, switches and each project's services at one
moment, as typed values that every front end renders (``rowfleet status``, ``workers`` and
``broker``; the panel and ``/metrics`` render the same values).

``snapshot(store)`` is the one store call: ``store.reads.fleet_rows`` reads every row in one read
transaction, so the counts, workers and switches agree. Everything else here is pure: the
functions from those rows to the typed values take ``now`` and the rows, and apply the
rules where they live (``rowfleet.liveness`` judges silence by each worker's own cadence
and says what a row shows it doing, ``rowfleet.control`` picks the switch in force). A GPU
worker's row carries its advert (``GpuAdvert``, decoded by the store's ``gpu_advert_of``),
which ``rowfleet.gpu.advert.box_of`` turns into the ``routing.Box`` that placement reads:
the engine reads the same boxes through its own narrow store call, never through here.

``models(store, project)`` is the models' read model (``rowfleet models``), one store read
too (``Store.model_rows``): per model its queued, running and unplaceable jobs, the live
workers warm on it, its measured load and the last hour's warm hits and reloads; and the
groups of model jobs (``rowfleet.gpu.placement.Demand``) and GPU workers, as the
orchestrator's sweep reads them (``rowfleet.gpu.placement``).

Counts stay cheap however many jobs are kept: live states (queued, running) are counted
exactly, finished ones only up to a cap (``COUNT_CAP``), past which a count reads
``10,000+`` (``Count.capped``).

Imports the pure rules, ``rowfleet.job``, ``rowfleet.gpu``'s placement rules and the
store's row types (``rowfleet.store.fleet``); takes the store as an argument, and imports
nothing of the command line or the panel.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from rowfleet import control, liveness
from rowfleet.control import Switch
from rowfleet.gpu import routing
from rowfleet.gpu.advert import LIVE_STATES, box_of, boxes_of, model_info_of
from rowfleet.gpu.placement import MODEL_GROUPS, UNPLACEABLE_TEXT, Demand, demand_of, unplaceable_text
from rowfleet.job import decode_column, iso
from rowfleet.liveness import SILENT, STOPPED, actual_state
from rowfleet.names import seconds_of
from rowfleet.store.fleet import GpuAdvert, gpu_advert_of, queues_of

if TYPE_CHECKING:
    from rowfleet.store import Store
    from rowfleet.store.fleet import FleetRows

# Finished jobs are counted up to this many per (project, queue, state): past it a count
# reads "10,000+", so a listing never walks a million completed rows.
COUNT_CAP = 10_000

UNPLACEABLE = "unplaceable"  # the state of a count of queued jobs placeable on no GPU worker


@dataclasses.dataclass(frozen=True)
class Count:
    """How many jobs of a project's queue are in a state; ``capped``: at least ``n``."""

    project: str
    queue: str
    state: str
    n: int
    capped: bool = False

    def text(self) -> str:
        """
        >>> Count("", "q", "completed", 10_000, capped=True).text(), Count("", "q", "queued", 12_345).text()
        ('10,000+', '12345')
        """
        return f"{self.n:,}+" if self.capped else str(self.n)

    def to_dict(self) -> dict[str, Any]:
        """
        >>> Count("", "q", "completed", 3, capped=True).to_dict()
        {'project': '', 'queue': 'q', 'state': 'completed', 'n': 3, 'capped': True}
        """
        data: dict[str, Any] = {"project": self.project, "queue": self.queue, "state": self.state, "n": self.n}
        if self.capped:
            data["capped"] = True
        return data


@dataclasses.dataclass(frozen=True)
class Progress:
    """What a busy worker's job last reported: ``fraction`` (0..1, or a value from plain SQL
    that is no number, as stored), its message, and when (epoch seconds)."""

    fraction: Any
    message: Any
    at: Any

    def to_dict(self) -> dict[str, Any]:
        return {"fraction": self.fraction, "message": self.message, "at": iso(self.at)}


@dataclasses.dataclass(frozen=True)
class Worker:
    """A worker's heartbeat row, with what it means now: ``state`` is what it beat
    (serving, draining, parked), ``actual`` what it is doing (``actual_state``), ``desired``
    what the switch in force (``switch``, None when none holds it) wants, ``age`` seconds
    since its last beat, and its current job's ``progress``. ``heartbeat`` and ``lease`` are
    the worker's own cadence, by which its silence is judged. ``gpu``: a GPU worker's
    advert (None for a worker without one); ``sidecar``: what its sidecar is doing
    (``Sidecar.status``; None for a worker without one). ``queues``: every queue it serves, in
    order (``queue`` is the first); ``serves`` is how a view asks."""

    worker_id: str
    project: str
    host: str
    queue: str
    pid: int
    state: str
    current_job: int | None
    started_at: float
    last_seen: float
    stopped_at: float | None
    flagged_dead_at: float | None
    exit_code: int | None
    heartbeat: float
    lease: float
    actual: str
    desired: str
    switch: Switch | None
    age: float | None
    progress: Progress | None
    gpu: GpuAdvert | None = None
    sidecar: Mapping[str, Any] | None = None
    queues: tuple[str, ...] = ()

    def serves(self, queue: str) -> bool:
        """Whether this worker serves ``queue`` (among others, maybe)."""
        return queue == self.queue or queue in self.queues

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO-8601, the age in seconds (3 decimals)."""
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        for key in ("started_at", "last_seen", "stopped_at", "flagged_dead_at"):
            data[key] = iso(data[key])
        data["switch"] = None if self.switch is None else self.switch.to_dict()
        data["progress"] = None if self.progress is None else self.progress.to_dict()
        data["gpu"] = None if self.gpu is None else self.gpu.to_dict()
        data["queues"] = list(self.queues)
        return data


@dataclasses.dataclass(frozen=True)
class Services:
    """Whether a project is served: its live orchestrators, and the outbox events waiting to
    be drained with the age of the oldest (None when none waits)."""

    project: str
    orchestrators: int
    outbox_waiting: int
    outbox_oldest_age: float | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Project:
    """One project's part of a snapshot: its counts, its workers and its services."""

    name: str
    counts: tuple[Count, ...]
    workers: tuple[Worker, ...]
    services: Services

    def queues(self) -> tuple[str, ...]:
        """The queues its counts name, sorted."""
        return tuple(sorted({count.queue for count in self.counts}))

    def tally(self, queue: str) -> dict[str, Count]:
        """The counts of one queue, by state."""
        return {count.state: count for count in self.counts if count.queue == queue}


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The fleet at one moment (``at``): counts of every project's queues, the listed workers,
    every switch, and each project's services; finished states counted up to ``cap``.
    ``unplaceable``: per queue, the queued jobs flagged as placeable on no GPU worker
    (state ``unplaceable``)."""

    at: float
    cap: int
    counts: tuple[Count, ...]
    workers: tuple[Worker, ...]
    switches: tuple[Switch, ...]
    services: tuple[Services, ...]
    unplaceable: tuple[Count, ...] = ()

    def for_project(self, project: str) -> "Snapshot":
        """The part one project sees: its counts, workers and services, and the switches that
        may hold its workers (its own and those for every project)."""
        return dataclasses.replace(
            self, counts=tuple(c for c in self.counts if c.project == project),
            workers=tuple(w for w in self.workers if w.project == project),
            switches=tuple(s for s in self.switches if s.project in (project, control.ANY)),
            services=tuple(s for s in self.services if s.project == project),
            unplaceable=tuple(c for c in self.unplaceable if c.project == project))

    def projects(self) -> tuple[Project, ...]:
        """Every project that has counts, workers or services, by name."""
        names = {c.project for c in self.counts} | {w.project for w in self.workers} | \
            {s.project for s in self.services}
        served = {s.project: s for s in self.services}
        return tuple(Project(name, tuple(c for c in self.counts if c.project == name),
                             tuple(w for w in self.workers if w.project == name),
                             served.get(name, Services(name, 0, 0, None))) for name in sorted(names))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``projects`` holds each project's services."""
        return {"at": iso(self.at), "count_cap": self.cap, "counts": [c.to_dict() for c in self.counts],
                "projects": [s.to_dict() for s in self.services], "workers": [w.to_dict() for w in self.workers],
                "switches": [s.to_dict() for s in self.switches],
                "unplaceable": [c.to_dict() for c in self.unplaceable]}


def snapshot(store: "Store", *, cap: int = COUNT_CAP, listed_for: float | None = liveness.LISTED_FOR) -> Snapshot:
    """The fleet now, from one store read: workers seen in the last ``listed_for`` seconds
    and every live one (every row with None); finished jobs counted up to ``cap``."""
    return snapshot_of(store.reads.fleet_rows(cap, listed_for), cap)


def workers_now(store: "Store", listed_for: float | None = liveness.LISTED_FOR) -> tuple[float, tuple[Worker, ...]]:
    """The database's clock and the workers ``snapshot`` lists, without its counts: for a
    reader that shows what runs where."""
    rows = store.reads.fleet_rows(0, listed_for, workers_only=True)
    switches = tuple(rows.switches)
    return rows.now, tuple(worker_of(row, switches, rows.now) for row in rows.workers)


def snapshot_of(rows: "FleetRows", cap: int) -> Snapshot:
    """The typed snapshot of what ``store.reads.fleet_rows`` read."""
    switches = tuple(rows.switches)
    return Snapshot(at=rows.now, cap=cap, counts=tuple(count_of(row, cap) for row in rows.counts),
                    workers=tuple(worker_of(row, switches, rows.now) for row in rows.workers),
                    switches=switches, services=tuple(services_of(row, rows.now) for row in rows.services),
                    unplaceable=tuple(Count(row["project"], row["queue"], UNPLACEABLE, row["n"])
                                      for row in rows.unplaceable))


def count_of(row: Any, cap: int) -> Count:
    """A counts row as a ``Count``: one counted only up to the cap (not ``exact``) that found
    more than ``cap`` jobs reads as ``cap``, capped.

    >>> count_of({"project": "", "queue": "q", "state": "completed", "exact": 0, "n": 4}, 3)
    Count(project='', queue='q', state='completed', n=3, capped=True)
    >>> count_of({"project": "", "queue": "q", "state": "queued", "exact": 1, "n": 4}, 3).capped
    False
    """
    over = not row["exact"] and row["n"] > cap
    return Count(row["project"], row["queue"], row["state"], cap if over else row["n"], over)


def worker_of(row: Any, switches: Iterable[Switch], now: float) -> Worker:
    """A worker's row (with its job's ``job_progress*`` columns) as a ``Worker`` at ``now``;
    a worker of several queues is held as ``control.holding`` says."""
    held = control.holding_worker(switches, row["project"], row["host"], queues_of(row))
    last_seen = seconds_of(row["last_seen"])
    return Worker(
        worker_id=row["worker_id"], project=row["project"], host=row["host"], queue=row["queue"], pid=row["pid"],
        state=row["state"], current_job=row["current_job"], started_at=row["started_at"],
        last_seen=row["last_seen"], stopped_at=row["stopped_at"], flagged_dead_at=row["flagged_dead_at"],
        exit_code=row["exit_code"], heartbeat=row["heartbeat"], lease=row["lease"],
        actual=actual_state(row, now), desired=control.ON if held is None else control.OFF, switch=held,
        age=None if last_seen is None else round(now - last_seen, 3), progress=progress_of(row),
        gpu=gpu_advert_of(row), sidecar=sidecar_of(row), queues=queues_of(row))


def sidecar_of(row: Any) -> dict[str, Any] | None:
    """A worker row's sidecar state, or None: a value that is no JSON object (a row written
    by plain SQL) reads as None.

    >>> sidecar_of({"sidecar": '{"state": "stuck_vram", "holders": [4242]}'})["holders"], sidecar_of({"sidecar": "[1"})
    ([4242], None)
    """
    stored = row.get("sidecar")
    try:
        value = json.loads(stored) if isinstance(stored, str) else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def progress_of(row: Any) -> Progress | None:
    """What the worker's current job last reported, or None (no job, or no report yet). The
    job's columns are decoded as every listing decodes them: a bad value is shown as stored.

    >>> progress_of({"job_progress": 0.5, "job_progress_message": "half", "job_progress_at": 7.0})
    Progress(fraction=0.5, message='half', at=7.0)
    >>> progress_of({"job_progress": None, "job_progress_message": None, "job_progress_at": None}) is None
    True
    """
    if row["job_progress_at"] is None:
        return None
    return Progress(*(decode_column(name, row[f"job_{name}"])[0]
                      for name in ("progress", "progress_message", "progress_at")))


def services_of(row: Any, now: float) -> Services:
    """A ``project_services`` row as ``Services`` at ``now``.

    >>> services_of({"project": "a", "orchestrators": 1, "outbox_waiting": 2, "outbox_oldest": 90.0}, 100.0)
    Services(project='a', orchestrators=1, outbox_waiting=2, outbox_oldest_age=10.0)
    """
    oldest = row["outbox_oldest"]
    return Services(row["project"], row["orchestrators"], row["outbox_waiting"],
                    None if oldest is None else round(now - oldest, 3))


# --- models: what each model's jobs wait for, and where it is warm ------------------------

# Seconds back that ``models`` counts claims (warm hits, reloads) over.
MODEL_WINDOW = 3600.0


@dataclasses.dataclass(frozen=True)
class Holder:
    """A live GPU worker that holds a model: warm on it since ``since``, or ``loading`` it."""

    worker_id: str
    host: str
    gpu_index: int | None
    since: float | None
    loading: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "since": iso(self.since)}


@dataclasses.dataclass(frozen=True)
class ModelView:
    """One model of a project: its jobs queued and running, the queued ones flagged
    unplaceable by reason (most first), the live workers holding it and how many list it,
    its measured load (``model_stats``: last load's seconds and footprint, loads and failed
    loads in all), and the claims of its jobs in the window with how many were warm."""

    model: str
    queued: int = 0
    running: int = 0
    unplaceable: tuple[tuple[str, int], ...] = ()
    holders: tuple[Holder, ...] = ()
    listed_by: int = 0
    load_seconds: float | None = None
    footprint_mb: int | None = None
    run_seconds: float | None = None  # the moving mean of its completed jobs' run times
    loads: int = 0
    failed_loads: int = 0
    claims: int = 0
    warm_claims: int = 0
    # What in its model_stats row could not be decoded (that figure is unknown, None), as
    # ``Store.model_stats`` says; None for a sound row.
    unreadable: str | None = None

    @property
    def warm_hit_rate(self) -> float | None:
        """Warm claims over the window's claims; None when none was claimed.

        >>> ModelView("llm", claims=4, warm_claims=3).warm_hit_rate, ModelView("llm").warm_hit_rate
        (0.75, None)
        """
        return None if not self.claims else self.warm_claims / self.claims

    @property
    def reloads(self) -> int:
        """Claims in the window that found the model cold, each paying a load.

        >>> ModelView("llm", claims=4, warm_claims=3).reloads
        1
        """
        return self.claims - self.warm_claims

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["unplaceable"] = dict(self.unplaceable)
        data["holders"] = [holder.to_dict() for holder in self.holders]
        data["warm_hit_rate"] = None if self.warm_hit_rate is None else round(self.warm_hit_rate, 4)
        data["reloads"] = self.reloads
        return data


@dataclasses.dataclass(frozen=True)
class Models:
    """A project's models at one moment (``at``), claims counted over the last ``window``
    seconds (None: not read): a view per model, and what placement decides on, the groups
    of model jobs (``demand``, ``capped`` when the read stopped at its limit), the listed
    workers and each model's figures as ``routing.ModelInfo`` (``info``)."""

    at: float
    window: float | None
    models: tuple[ModelView, ...]
    demand: tuple[Demand, ...]
    workers: tuple[Worker, ...]
    info: dict[str, routing.ModelInfo]
    capped: bool = False

    def boxes(self, queue: str) -> tuple[routing.Box, ...]:
        """The GPU workers of ``queue`` as placement sees them, live or not."""
        return boxes_of(self.workers, (queue,))

    def to_dict(self) -> dict[str, Any]:
        return {"at": iso(self.at), "window": self.window, "capped": self.capped,
                "models": [view.to_dict() for view in self.models]}


def models(store: "Store", project: str, *, window: float | None = MODEL_WINDOW, groups: int = MODEL_GROUPS,
           cap: int = COUNT_CAP, listed_for: float | None = liveness.LISTED_FOR) -> Models:
    """``project``'s models now, from one store read: ``groups`` groups of model jobs at
    most, claims of the last ``window`` seconds (of ``cap`` finished jobs at most; None:
    none read)."""
    return models_of(store.model_rows(project, window, listed_for, groups, cap), window, groups)


def models_of(rows: Any, window: float | None, groups: int) -> Models:
    """The typed ``Models`` of what ``Store.model_rows`` read."""
    switches = tuple(rows.switches)
    demand = tuple(demand_of(row) for row in rows.demand)
    workers = tuple(worker_of(row, switches, rows.now) for row in rows.workers)
    stats = {row["model"]: row for row in rows.stats}
    claims = {row["model"]: row for row in rows.claims}
    info = {model: model_info_of(row, rows.now) for model, row in stats.items()}
    adverts = [w for w in workers if w.gpu is not None and w.actual in LIVE_STATES]
    names = {d.model for d in demand} | set(stats) | set(claims) | \
        {m for w in adverts for m in (w.gpu.warm_model, w.gpu.loading, *w.gpu.models) if m is not None}
    views = tuple(_model_view(name, demand, adverts, stats.get(name), claims.get(name)) for name in sorted(names))
    return Models(rows.now, window, views, demand, workers, info, capped=len(demand) >= groups)


def _model_view(model: str, demand: Iterable[Demand], live: Iterable[Worker], stats: Any, claims: Any) -> ModelView:
    mine = [d for d in demand if d.model == model]
    reasons: dict[str, int] = {}
    for group in mine:
        if group.state == "queued" and group.unplaceable is not None:
            reasons[group.unplaceable] = reasons.get(group.unplaceable, 0) + group.n
    live = list(live)
    holders = tuple(Holder(w.worker_id, w.host, w.gpu.gpu_index, None if w.gpu.loading == model else
                           w.gpu.warm_since, loading=w.gpu.loading == model)
                    for w in live if model in (w.gpu.warm_model, w.gpu.loading))
    stats = stats or {}
    return ModelView(
        model, queued=sum(d.n for d in mine if d.state == "queued"), running=sum(d.n for d in mine if d.state == "running"),
        unplaceable=tuple(sorted(reasons.items(), key=lambda item: (-item[1], item[0]))), holders=holders,
        listed_by=sum(1 for w in live if model in w.gpu.models), load_seconds=stats.get("load_seconds"),
        footprint_mb=stats.get("footprint_mb"), run_seconds=seconds_of(stats.get("run_seconds")),
        loads=stats.get("loads") or 0,
        failed_loads=stats.get("failed_loads") or 0, claims=(claims or {}).get("claims") or 0,
        warm_claims=(claims or {}).get("warm") or 0, unreadable=stats.get("unreadable"))
