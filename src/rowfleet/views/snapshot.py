"""The fleet read model: job counts, workers, switches and each project's services at one
moment, as typed values that every front end renders (``rowfleet status``, ``workers`` and
``broker``; the panel and ``/metrics`` render the same values).

``snapshot(store)`` is the one store call: ``Store.fleet_rows`` reads every row in one read
transaction, so the counts, workers and switches agree. Everything else here is pure: the
functions from those rows to the typed values take ``now`` and the rows, and apply the
rules where they live (``rowfleet.liveness`` judges silence by each worker's own cadence,
``rowfleet.control`` picks the switch in force, ``rowfleet.exitcodes`` says how a process
ended). A GPU worker's row carries its advert (``GpuAdvert``), which ``box_of`` turns into
the ``rowfleet.gpu.routing.Box`` that placement reads.

``models(store, project)`` is the models' read model (``rowfleet models``), one store read
too (``Store.model_rows``): per model its queued, running and unplaceable jobs, the live
workers warm on it, its measured load and the last hour's warm hits and reloads; and the
groups of model jobs and GPU workers that the orchestrator's sweep decides placement on.

Counts stay cheap however many jobs are kept: live states (queued, running) are counted
exactly, finished ones only up to a cap (``COUNT_CAP``), past which a count reads
``10,000+`` (``Count.capped``).

Imports the pure rules and ``rowfleet.job``; takes the store as an argument and never
imports it at load time, nor anything of the command line or the panel.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from rowfleet import control, exitcodes, liveness
from rowfleet.control import Switch
from rowfleet.gpu import routing
from rowfleet.job import decode_column, iso

if TYPE_CHECKING:
    from rowfleet.store import Store
    from rowfleet.store.fleet import FleetRows

# Finished jobs are counted up to this many per (project, queue, state): past it a count
# reads "10,000+", so a listing never walks a million completed rows.
COUNT_CAP = 10_000

# How a worker's row reads when it is no longer doing what it last beat.
SILENT = "SILENT"    # flagged dead by the sweep, or past its own staleness
STOPPED = "stopped"  # stopped cleanly; a process whose supervisor saw its exit reads as that exit
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
class GpuAdvert:
    """What a GPU worker's heartbeat advertises (the GPU keywords of ``Store.worker_beat``):
    the models it can load, its GPU and that GPU's memory (MiB), the model warm on it and
    since when, the one it is loading, its lane and its host's priority."""

    models: tuple[str, ...]
    gpu_index: int | None = None
    vram_total_mb: int | None = None
    vram_free_mb: int | None = None
    warm_model: str | None = None
    warm_since: float | None = None
    loading: str | None = None
    lane: str | None = None
    host_priority: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["models"], data["warm_since"] = list(self.models), iso(self.warm_since)
        return data


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
    return snapshot_of(store.fleet_rows(cap, listed_for), cap)


def workers_now(store: "Store", listed_for: float | None = liveness.LISTED_FOR) -> tuple[float, tuple[Worker, ...]]:
    """The database's clock and the workers ``snapshot`` lists, without its counts: for a
    reader that shows what runs where."""
    rows = store.fleet_rows(0, listed_for, workers_only=True)
    switches = tuple(rows.switches)
    return rows.now, tuple(worker_of(row, switches, rows.now) for row in rows.workers)


def snapshot_of(rows: "FleetRows", cap: int) -> Snapshot:
    """The typed snapshot of what ``Store.fleet_rows`` read."""
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
    switches, queues = list(switches), queues_of(row)
    held = control.holding({queue: control.in_force(switches, row["project"], row["host"], queue) for queue in queues})
    last_seen = seconds_of(row["last_seen"])
    return Worker(
        worker_id=row["worker_id"], project=row["project"], host=row["host"], queue=row["queue"], pid=row["pid"],
        state=row["state"], current_job=row["current_job"], started_at=row["started_at"],
        last_seen=row["last_seen"], stopped_at=row["stopped_at"], flagged_dead_at=row["flagged_dead_at"],
        exit_code=row["exit_code"], heartbeat=row["heartbeat"], lease=row["lease"],
        actual=actual_state(row, now), desired=control.ON if held is None else control.OFF, switch=held,
        age=None if last_seen is None else round(now - last_seen, 3), progress=progress_of(row),
        gpu=gpu_advert_of(row), sidecar=sidecar_of(row), queues=queues_of(row))


def queues_of(row: Any) -> tuple[str, ...]:
    """Every queue a worker row serves, in order: its ``queues`` array, or its one ``queue``
    (a value that is no array of names, as plain SQL may write, reads as that one).

    >>> queues_of({"queue": "gpu", "queues": '["gpu", "cpu"]'}), queues_of({"queue": "gpu", "queues": "7"})
    (('gpu', 'cpu'), ('gpu',))
    """
    stored = row.get("queues")
    try:
        value = json.loads(stored) if isinstance(stored, str) else None
    except ValueError:
        value = None
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return tuple(value)
    return (row["queue"],)


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


def gpu_advert_of(row: Any) -> GpuAdvert | None:
    """A worker row's GPU advert, or None for a worker that advertises no models. Decoded
    defensively (a row may come from plain SQL): a value of the wrong kind reads as None.

    >>> gpu_advert_of({"models": '["llm"]', "gpu_index": 0, "vram_total_mb": 24000, "warm_model": "llm"}).models
    ('llm',)
    >>> gpu_advert_of({"models": None}) is None, gpu_advert_of({"models": "[1,"}).models
    (True, ())
    """
    stored = row.get("models")
    if stored is None:
        return None
    try:
        models = json.loads(stored) if isinstance(stored, str) else None
    except ValueError:
        models = None
    models = tuple(item for item in models if isinstance(item, str)) if isinstance(models, list) else ()

    def number(name: str, kind: type) -> Any:
        value = row.get(name)
        return value if isinstance(value, kind) and not isinstance(value, bool) else None

    def text(name: str) -> str | None:
        value = row.get(name)
        return value if isinstance(value, str) else None

    return GpuAdvert(models, number("gpu_index", int), number("vram_total_mb", int), number("vram_free_mb", int),
                     text("warm_model"), number("warm_since", (int, float)), text("loading"), text("lane"),
                     number("host_priority", int))


def box_of(worker: Worker) -> routing.Box | None:
    """The worker as placement sees it (``routing.Box``), or None for a worker without a GPU
    advert: live while it beats (serving, draining or parked), serving only when it serves
    and no switch holds it off, busy while it names a job."""
    advert = worker.gpu
    if advert is None:
        return None
    return routing.Box(
        worker_id=worker.worker_id, host=worker.host, gpu_index=advert.gpu_index or 0,
        live=worker.actual in (control.SERVING, control.DRAINING, control.PARKED),
        serving=worker.actual == control.SERVING and worker.desired == control.ON, models=advert.models,
        vram_total_mb=advert.vram_total_mb or 0, vram_free_mb=advert.vram_free_mb, warm_model=advert.warm_model,
        warm_since=advert.warm_since, loading=advert.loading, host_priority=advert.host_priority or 0,
        busy=worker.current_job is not None)


def actual_state(row: Any, now: float) -> str:
    """What a heartbeat row says a worker is doing: serving, draining, parked, ``SILENT``
    (flagged dead, or past its own staleness even where no orchestrator sweeps), stopped,
    or how it ended. A beat that is no number (plain SQL) shows nothing alive: silent.

    >>> row = {"exit_code": None, "stopped_at": None, "flagged_dead_at": None, "last_seen": 100.0,
    ...        "heartbeat": 10.0, "state": "parked"}
    >>> actual_state(row, 120.0), actual_state(row, 131.0), actual_state({**row, "exit_code": -9}, 120.0)
    ('parked', 'SILENT', 'killed by SIGKILL')
    """
    if row["exit_code"] is not None:
        return exitcodes.describe(row["exit_code"])
    if row["stopped_at"]:
        return STOPPED
    last_seen, heartbeat = seconds_of(row["last_seen"]), seconds_of(row["heartbeat"])
    if row["flagged_dead_at"] or last_seen is None or heartbeat is None or liveness.silent(last_seen, heartbeat, now):
        return SILENT
    return row["state"]


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


def seconds_of(value: Any) -> float | None:
    """A time or a duration as a number, or None when the row holds something else."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# --- models: what each model's jobs wait for, and where it is warm ------------------------

# Seconds back that ``models`` counts claims (warm hits, reloads) over.
MODEL_WINDOW = 3600.0
# Groups of model jobs (queue, model, job size, state, reason) one models read takes, at most.
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
        return tuple(box for box in (box_of(w) for w in self.workers if w.serves(queue)) if box is not None)

    def to_dict(self) -> dict[str, Any]:
        return {"at": iso(self.at), "window": self.window, "capped": self.capped,
                "models": [view.to_dict() for view in self.models]}


def models(store: "Store", project: str, *, window: float | None = MODEL_WINDOW, groups: int = MODEL_GROUPS,
           cap: int = COUNT_CAP, listed_for: float | None = liveness.LISTED_FOR) -> Models:
    """``project``'s models now, from one store read: ``groups`` groups of model jobs at
    most, claims of the last ``window`` seconds (of ``cap`` finished jobs at most; None:
    none read, as the orchestrator's sweep wants)."""
    return models_of(store.model_rows(project, window, listed_for, groups, cap), window, groups)


def models_of(rows: Any, window: float | None, groups: int) -> Models:
    """The typed ``Models`` of what ``Store.model_rows`` read."""
    switches = tuple(rows.switches)
    demand = tuple(Demand(**{field.name: row[field.name] for field in dataclasses.fields(Demand)})
                   for row in rows.demand)
    workers = tuple(worker_of(row, switches, rows.now) for row in rows.workers)
    stats = {row["model"]: row for row in rows.stats}
    claims = {row["model"]: row for row in rows.claims}
    info = {model: model_info_of(row, rows.now) for model, row in stats.items()}
    adverts = [w for w in workers if w.gpu is not None and w.actual in (control.SERVING, control.DRAINING,
                                                                        control.PARKED)]
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
    failed, last_failed, updated = row["failed_loads"], seconds_of(row["last_failed_at"]), seconds_of(row["updated_at"])
    recent = last_failed is not None and updated is not None and last_failed >= updated \
        and now - last_failed <= routing.FAILURE_WINDOW
    footprint = row["footprint_mb"]
    return routing.ModelInfo(
        row["model"], footprint_mb=footprint if isinstance(footprint, int) and not isinstance(footprint, bool) else None,
        load_seconds=seconds_of(row["load_seconds"]),
        failed_loads=failed if recent and isinstance(failed, int) else 0)


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
