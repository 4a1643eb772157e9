"""The hosts' read model: each host's telemetry at a glance, and one host's series, as
typed values that every front end renders (``rowfleet hosts``; the panel may render the
same values).

``hosts(store)`` reads each host's newest detail sample, the fleet's workers and switches
(for the queues each host serves and the switch in force on each, the jobs running on each
host and on each of its GPUs, the models warm there, and the database's clock), the running
jobs (for their task names), and per host the last hour's rows
for its GPUs' throttle seconds: its minute rows, and the detail rows of the minutes not
folded into them yet (``RecentRows``; a folded minute's row is what its detail rows add up
to, read at a thirtieth of the cost; a front end may keep one between its reads). ``host_series(store, host, since_seconds)``
reads one host's rows of a window, from the detail tier when the window fits what that
tier keeps (``Config.sample_detail_keep``), else from the minute tier.

Everything between the reads and the values is pure and takes ``now``: a sample's
readings may have been written by anyone's plain SQL, so a reading that is not what it
should be (no number, no list of names) reads as unknown, never as an exception. The
reading names are those of ``rowfleet.telemetry.readings``, whose ``throttle_seconds``,
``gpu_indexes`` and ``slowdowns`` say what the rows mean; a sample's silence is judged
by ``rowfleet.liveness`` against the sampler's own interval.

Imports the pure rules, ``rowfleet.views.snapshot`` and the store's telemetry part (its row
type and tier names); takes the store as an argument, and imports nothing of a driver,
the command line or the panel.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from rowfleet import control, liveness, names
from rowfleet.control import GpuSwitch, Switch
from rowfleet.errors import NotFound
from rowfleet.job import iso
from rowfleet.names import is_finite_number
from rowfleet.store.telemetry import DETAIL, MINUTE, HostSample
from rowfleet.telemetry.readings import gpu_indexes, slowdowns, throttle_seconds
from rowfleet.views.snapshot import Worker, snapshot_of

if TYPE_CHECKING:
    from rowfleet.store import Store
    from rowfleet.store.reads import EndedJob

THROTTLE_WINDOW = 3600.0  # seconds back that a GPU's throttle seconds are added up over
MINUTE_SPAN = 60.0        # a minute row covers [at, at + 60)
# The cadence a sample is judged by when it says no interval (a sampler's first row, or a
# row from plain SQL): stale after liveness.MISSED_BEATS of these, 30 s.
UNKNOWN_INTERVAL = 10.0
# A worker in one of these states holds its current job; a silent, stopped or ended one
# no longer shows what runs.
LIVE_STATES = (control.SERVING, control.DRAINING, control.PARKED)


@dataclasses.dataclass(frozen=True)
class GpuJob:
    """A job running on a GPU: its id, and its task (None when it was no longer running
    when the running jobs were read)."""

    job_id: int
    task: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class GpuView:
    """One GPU of a host's newest sample: utilisation (%), VRAM used and total (MiB),
    temperature (°C), power draw and limit (W), SM clock (MHz), the clock-event reasons
    slowing it now, the seconds it was held back per reason over the last hour, and its
    highest SM clock (MHz). A reading not known (or not a number) is None. From the
    heartbeats of the live workers on it: the models warm on it and the jobs they run
    (``with_workers``); its VRAM, when the sample says none, as their adverts say."""

    index: int
    name: str | None
    util: float | None
    vram_used_mib: float | None
    vram_total_mib: float | None
    temp: float | None
    power_w: float | None
    power_limit_w: float | None
    sm_mhz: float | None
    slowdowns: tuple[str, ...] = ()
    throttle_seconds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    max_sm_mhz: float | None = None
    models: tuple[str, ...] = ()
    jobs: tuple[GpuJob, ...] = ()
    switch: GpuSwitch | None = None  # its switch and the health gate's last verdict, if it has one

    @property
    def off(self) -> bool:
        """Switched off for new claims (by an operator, or by the health gate)."""
        return self.switch is not None and self.switch.off

    def throttled(self) -> float:
        """Seconds held back over the last hour, every reason added up.

        >>> GpuView(0, None, None, None, None, None, None, None, None, (), {"sw_power_cap": 2.5, "hw_slowdown": 1.0}).throttled()
        3.5
        """
        return round(sum(self.throttle_seconds.values()), 3)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["slowdowns"], data["throttle_seconds"] = list(self.slowdowns), dict(self.throttle_seconds)
        data["models"], data["jobs"] = list(self.models), [job.to_dict() for job in self.jobs]
        data["switch"] = None if self.switch is None else self.switch.to_dict()
        return data


@dataclasses.dataclass(frozen=True)
class HostJob:
    """A job running on a host: its id, queue and project, the worker's pid, and the model
    warm on that worker (None for a worker without one)."""

    job_id: int
    queue: str
    project: str
    pid: int
    model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class HostQueue:
    """A queue that workers on a host serve, in a project, with the off switch in force on
    it (``control.in_force``; None: it serves)."""

    project: str
    queue: str
    switch: Switch | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"project": self.project, "queue": self.queue,
                "switch": None if self.switch is None else self.switch.to_dict()}


@dataclasses.dataclass(frozen=True)
class HostView:
    """A host at a glance, from its newest detail sample (taken at ``at``, ``age`` seconds
    before the view's moment): CPU busy %, 1-minute load, RAM used and total (bytes), the
    hottest sensor (°C), its GPUs, the jobs its workers are running and the queues they
    serve (those of the workers listed, ``liveness.LISTED_FOR``). ``stale``: the
    sample is older than ``liveness.MISSED_BEATS`` times its interval (30 s when it says
    none); ``error``: its readings did not decode (every reading is then unknown);
    ``gpu_error``: why the sampler could not read the GPUs, as the sample says."""

    host: str
    at: float
    age: float
    stale: bool
    cpu_busy: float | None
    load1: float | None
    ram_used: float | None
    ram_total: float | None
    hottest: float | None
    gpus: tuple[GpuView, ...] = ()
    jobs: tuple[HostJob, ...] = ()
    error: str | None = None
    gpu_error: str | None = None
    queues: tuple[HostQueue, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``at`` as ISO-8601, ``age`` in seconds."""
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        data["at"] = iso(self.at)
        data["gpus"], data["jobs"] = [gpu.to_dict() for gpu in self.gpus], [job.to_dict() for job in self.jobs]
        data["queues"] = [queue.to_dict() for queue in self.queues]
        return data


@dataclasses.dataclass(frozen=True)
class HostSeries:
    """One host's rows of ``tier`` from ``since`` to ``until`` (epoch seconds), oldest
    first, each ``{"at": epoch seconds, "readings": {...}}`` (and ``"error"`` when its
    readings did not decode)."""

    host: str
    tier: str
    since: float
    until: float
    rows: tuple[Mapping[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "tier": self.tier, "since": self.since, "until": self.until,
                "rows": [dict(row) for row in self.rows]}


# --- the reads ----------------------------------------------------------------------------


def hosts(store: "Store", now: float | None = None) -> list[HostView]:
    """Every host that has a detail sample, by host, at ``now`` (default: the database's
    clock, as the snapshot reads it)."""
    return [view for view, _, _ in hosts_with_rows(store, now)]


def hosts_with_rows(store: "Store", now: float | None = None, only: str | None = None,
                    kept: "RecentRows | None" = None, running: "Iterable[EndedJob] | None" = None
                    ) -> list[tuple[HostView, list[HostSample], list[HostSample]]]:
    """``hosts`` (or the one named ``only``), each with the rows of the last hour it was
    read from (``RecentRows``), for a front end that draws them too and need not read
    them twice; through ``kept`` (a front end's, between its reads) when given. The jobs'
    tasks are those of ``running`` (``store.reads.jobs_running()``, read here when not given:
    a front end that reads them anyway hands them over)."""
    latest = [sample for sample in store.reads.latest_host_samples() if only is None or sample.host == only]
    fleet = snapshot_of(store.reads.fleet_rows(0, liveness.LISTED_FOR, workers_only=True), 0)
    now = fleet.at if now is None else now
    tasks = {job.id: job.task for job in (store.reads.jobs_running() if running is None else running)}
    since = now - THROTTLE_WINDOW
    rows = (kept or RecentRows()).read(store, [sample.host for sample in latest], since, now)
    gpu_switches = store.gpu_switches()
    found = []
    for sample in latest:
        minute, detail = rows[sample.host]
        view = host_view(sample, throttle_seconds(hour_rows(detail, minute)), fleet.workers, now,
                         switches=fleet.switches, tasks=tasks, gpu_switches=gpu_switches)
        found.append((view, minute, detail))
    return found


REREAD = 60.0   # seconds kept rows serve before they are read whole again
OVERLAP = 10.0  # seconds before the newest row held that a read between asks for again
TOGETHER = 300.0  # seconds apart that hosts' floors may lie and their rows still be read in one statement


class KeptRows:
    """One tier's rows of some hosts, each from its own floor on, kept between reads: a
    read asks only for the rows from the newest one held (less ``OVERLAP``, for a row
    whose transaction committed after a newer one's), of every host in one statement, and
    every ``REREAD`` seconds it reads each host's rows whole again (a row that plain SQL
    wrote in the past, rewrote or deleted shows by then). A row held keeps its place over
    the same row read again, so that what is drawn from it stays the same. Shared by a
    server's requests; one read at a time."""

    def __init__(self, tier: str) -> None:
        self.tier = tier
        self.lock = threading.Lock()
        self.rows: dict[str, list[HostSample]] = {}
        self.read_at = -math.inf

    def read(self, store: "Store", floors: Mapping[str, float], now: float) -> dict[str, list[HostSample]]:
        """Each host of ``floors``: its rows from its floor on, oldest first."""
        with self.lock:
            if now - self.read_at >= REREAD or not now >= self.read_at or any(h not in self.rows for h in floors):
                self.rows = self._whole(store, floors)
                self.read_at = now
            else:
                self._add(store, floors, now)
            self.rows = {host: [row for row in self.rows[host] if row.at >= floor] for host, floor in floors.items()}
            return {host: list(rows) for host, rows in self.rows.items()}

    def _whole(self, store: "Store", floors: Mapping[str, float]) -> dict[str, list[HostSample]]:
        """Each host's rows from its floor on, read whole: in one statement for the hosts
        whose floors lie within ``TOGETHER`` seconds of the newest floor (nearly always
        all of them), one statement a host for the others."""
        newest = max(floors.values(), default=0.0)
        together = {host: floor for host, floor in floors.items() if floor >= newest - TOGETHER}
        if len(together) < 2:
            together = {}
        rows: dict[str, list[HostSample]] = {host: [] for host in together}
        for row in store.reads.samples_since(self.tier, min(together.values())) if together else ():
            if row.host in together and row.at >= together[row.host]:
                rows[row.host].append(row)
        for host, floor in floors.items():
            if host not in together:
                rows[host] = store.host_samples(host, self.tier, floor)
        return rows

    def _add(self, store: "Store", floors: Mapping[str, float], now: float) -> None:
        newest = max((rows[-1].at for rows in self.rows.values() if rows), default=min(floors.values(), default=0.0))
        since = min(newest, now) - OVERLAP  # a row from plain SQL dated in the future holds nothing back
        if len(floors) == 1:  # one host: its own rows, by the primary key
            fresh = {host: store.host_samples(host, self.tier, since) for host in floors}
        else:
            fresh = {}
            for row in store.reads.samples_since(self.tier, since):
                fresh.setdefault(row.host, []).append(row)
        for host, rows in fresh.items():
            if host in self.rows and rows:
                held = {row.at: row for row in self.rows[host]}
                added = [row for row in rows if row.at not in held]
                if added:
                    self.rows[host] = sorted([*self.rows[host], *added], key=lambda row: row.at)


class RecentRows:
    """Each host's rows since a time at the least cost: its minute rows, and only the
    detail rows after the newest of them (the minutes not folded yet). A minute is folded
    once every sample of it is in, so the two together cover the window; a detail row is
    some thirty times the work of a minute row, and an hour holds 1,800 of them. Kept
    between reads (``KeptRows``): a front end refreshing every few seconds reads only what
    its hosts' samplers wrote since."""

    def __init__(self) -> None:
        self.minute, self.detail = KeptRows(MINUTE), KeptRows(DETAIL)

    def read(self, store: "Store", hosts: Iterable[str], since: float, now: float
             ) -> dict[str, tuple[list[HostSample], list[HostSample]]]:
        minute = self.minute.read(store, {host: since for host in hosts}, now)
        floors = {host: max(since, rows[-1].at + MINUTE_SPAN) if rows else since for host, rows in minute.items()}
        detail = self.detail.read(store, floors, now)
        return {host: (minute[host], detail[host]) for host in minute}


def host_series(store: "Store", host: str, since_seconds: float, tier: str | None = None,
                now: float | None = None) -> HostSeries:
    """``host``'s rows of the last ``since_seconds`` up to ``now`` (default: the database's
    clock), from ``tier`` (default: ``series_tier``). A host with no row in either tier is
    ``NotFound``; a known host with none in the window is an empty series."""
    since_seconds = names.check_seconds("since_seconds", since_seconds)
    now = store.clock() if now is None else now
    tier = series_tier(since_seconds, store.config.sample_detail_keep) if tier is None else tier
    since = now - since_seconds
    samples = store.host_samples(host, tier, since)
    if not samples and not _sampled(store, host):
        raise NotFound(f"no samples of host {host!r}: `rowfleet hosts` lists the hosts that have sampled")
    return series_of(host, tier, since, now, samples)


def _sampled(store: "Store", host: str) -> bool:
    return any(sample.host == host for sample in store.reads.latest_host_samples()) or \
        any(row["host"] == host for row in store.reads.sampled_hosts(MINUTE))


# --- pure: rows to views --------------------------------------------------------------------


def host_view(sample: HostSample, throttle: Mapping[str, Mapping[str, float]], workers: Iterable[Worker],
              now: float, switches: Iterable[Switch] = (), tasks: Mapping[int, str] | None = None,
              gpu_switches: Iterable[GpuSwitch] = ()) -> HostView:
    """The view of a host's newest sample at ``now``, with its GPUs' throttle seconds
    (``telemetry.readings.throttle_seconds`` of the last hour's rows), the jobs that
    ``workers`` on the host are running, what they hold on each GPU (``with_workers``: the
    jobs' task names from ``tasks``, by job id), and the queues they serve with the switch
    of ``switches`` in force on each; each GPU with its switch of ``gpu_switches``.

    >>> view = host_view(HostSample("box", "detail", 100.0, {"cpu.busy": 37.5, "load.1": "x", "interval": 2.0,
    ...                                                      "gpu.0.util": 87, "gpu.0.reasons": ["sw_power_cap"]}),
    ...                  {"0": {"sw_power_cap": 12.0}}, [], now=103.0)
    >>> view.cpu_busy, view.load1, view.age, view.stale, view.gpus[0].util, view.gpus[0].slowdowns, view.gpus[0].throttled()
    (37.5, None, 3.0, False, 87, ('sw_power_cap',), 12.0)
    >>> host_view(HostSample("box", "detail", 100.0, {}, "readings are not valid JSON"), {}, [], now=200.0).stale
    True
    """
    readings = sample.readings if sample.error is None else {}
    gpu_error = readings.get("gpu.error")
    on_host = [worker for worker in workers if worker.host == sample.host]
    return HostView(
        host=sample.host, at=sample.at, age=round(now - sample.at, 3), stale=is_stale(sample.at, readings, now),
        cpu_busy=reading(readings, "cpu.busy"), load1=reading(readings, "load.1"),
        ram_used=reading(readings, "mem.used"), ram_total=reading(readings, "mem.total"),
        hottest=reading(readings, "temp.hottest"),
        gpus=with_switches(with_workers(gpu_views(readings, throttle), on_host, tasks), sample.host, gpu_switches),
        jobs=running_jobs(on_host, sample.host), error=sample.error,
        gpu_error=gpu_error if isinstance(gpu_error, str) else None, queues=served_queues(on_host, switches))


def gpu_views(readings: Mapping[str, Any], throttle: Mapping[str, Mapping[str, float]]) -> tuple[GpuView, ...]:
    """The GPUs a sample has readings of, by index; an index that is no whole number
    (plain SQL) is left out, and so is a throttle figure that is no positive number.

    >>> [(g.index, g.name, g.temp, g.throttle_seconds) for g in gpu_views(
    ...     {"gpu.1.temp": 61, "gpu.0.name": "H100", "gpu.x.util": 5, "gpu.0.temp": "hot"}, {"1": {"hw_slowdown": 4.0}})]
    [(0, 'H100', None, {}), (1, None, 61, {'hw_slowdown': 4.0})]
    """
    views = []
    for index in gpu_indexes(readings):
        if not (index.isascii() and index.isdigit()):
            continue

        def get(name: str) -> float | None:
            return reading(readings, f"gpu.{index}.{name}")

        name = readings.get(f"gpu.{index}.name")
        reasons = readings.get(f"gpu.{index}.reasons")
        held = throttle.get(index)
        views.append(GpuView(
            index=int(index), name=name if isinstance(name, str) else None, util=get("util"),
            vram_used_mib=get("vram_used_mib"), vram_total_mib=get("vram_total_mib"), temp=get("temp"),
            power_w=get("power_w"), power_limit_w=get("power_limit_w"), sm_mhz=get("sm_mhz"),
            max_sm_mhz=get("max_sm_mhz"),
            slowdowns=tuple(slowdowns([r for r in reasons if isinstance(r, str)] if isinstance(reasons, list) else None)),
            throttle_seconds={reason: float(seconds) for reason, seconds in held.items()
                              if is_finite_number(seconds) and seconds > 0} if isinstance(held, Mapping) else {}))
    return tuple(views)


def running_jobs(workers: Iterable[Worker], host: str) -> tuple[HostJob, ...]:
    """The jobs that live workers on ``host`` hold, by job id: a silent, stopped or ended
    worker's last job is not shown as running."""
    jobs = [HostJob(job_id=w.current_job, queue=w.queue, project=w.project, pid=w.pid,
                    model=w.gpu.warm_model if w.gpu is not None else None)
            for w in workers if w.host == host and w.current_job is not None and w.actual in LIVE_STATES]
    return tuple(sorted(jobs, key=lambda job: job.job_id))


def with_workers(gpus: Sequence[GpuView], workers: Iterable[Worker], tasks: Mapping[int, str] | None = None
                 ) -> tuple[GpuView, ...]:
    """``gpus`` with what the live workers on their host hold on each (their adverts' GPU):
    the models warm on it, the jobs they run (with their task from ``tasks``, by job id),
    and its VRAM as their adverts say when the sample says none; a GPU that workers
    advertise but the sample has no reading of (a host whose sampler cannot read its GPUs)
    joins with that alone.

    >>> from rowfleet.store.fleet import GpuAdvert
    >>> one = Worker("w", "", "box", "gpu", 11, "serving", 7, 0.0, 99.0, None, None, None, 10.0, 60.0, "serving",
    ...              "on", None, 1.0, None)
    >>> on = lambda index, model: dataclasses.replace(one, gpu=GpuAdvert(("llm",), index, 81920, 1920, model))
    >>> gpu = GpuView(0, "H100", 5, None, None, None, None, None, 345)
    >>> [(g.index, g.models, g.vram_used_mib, g.vram_total_mib, g.jobs)
    ...  for g in with_workers([gpu], [on(0, "llm"), dataclasses.replace(on(1, None), current_job=None)], {7: "train"})]
    [(0, ('llm',), 80000, 81920, (GpuJob(job_id=7, task='train'),)), (1, (), 80000, 81920, ())]
    """
    live = [worker for worker in workers if worker.actual in LIVE_STATES and _gpu_of(worker) is not None]
    by_index = {gpu.index: gpu for gpu in gpus}
    for index in {_gpu_of(worker) for worker in live} - set(by_index):
        by_index[index] = GpuView(index, None, None, None, None, None, None, None, None)
    return tuple(_held_on(gpu, [worker for worker in live if _gpu_of(worker) == index], tasks or {})
                 for index, gpu in sorted(by_index.items()))


def with_switches(gpus: Sequence[GpuView], host: str, switches: Iterable[GpuSwitch]) -> tuple[GpuView, ...]:
    """``gpus`` (of ``host``) each with its switch among ``switches``; a GPU with a switch
    but no reading (one that nvidia-smi no longer lists) joins with its switch alone.

    >>> from rowfleet.control import GpuSwitch
    >>> gpu = GpuView(0, "H100", 5, None, None, None, None, None, 345)
    >>> [(g.index, g.off) for g in with_switches([gpu], "box", [GpuSwitch("box", 1, "off"), GpuSwitch("other", 0, "off")])]
    [(0, False), (1, True)]
    """
    mine = {switch.gpu_index: switch for switch in switches  # a plain-SQL row's index may be no number
            if switch.host == host and isinstance(switch.gpu_index, int) and not isinstance(switch.gpu_index, bool)}
    by_index = {gpu.index: gpu for gpu in gpus}
    for index in set(mine) - set(by_index):
        by_index[index] = GpuView(index, None, None, None, None, None, None, None, None)
    return tuple(dataclasses.replace(gpu, switch=mine.get(index)) for index, gpu in sorted(by_index.items()))


def _held_on(gpu: GpuView, crew: Sequence[Worker], tasks: Mapping[int, str]) -> GpuView:
    """``gpu`` with what ``crew`` (the live workers on it) hold there."""
    if not crew:
        return gpu
    adverts = [worker.gpu for worker in crew if worker.gpu is not None]
    jobs = tuple(GpuJob(job, tasks.get(job)) for job in sorted({w.current_job for w in crew} - {None}))
    held = dataclasses.replace(gpu, models=tuple(sorted({a.warm_model for a in adverts if a.warm_model})), jobs=jobs)
    if gpu.vram_used_mib is not None or gpu.vram_total_mib is not None:
        return held  # the sampler's reading, of the whole GPU, over the workers' own adverts
    total = next((a.vram_total_mb for a in adverts if a.vram_total_mb is not None), None)
    free = next((a.vram_free_mb for a in adverts if a.vram_free_mb is not None), None)
    return dataclasses.replace(held, vram_total_mib=total,
                               vram_used_mib=None if total is None or free is None else total - free)


def served_queues(workers: Iterable[Worker], switches: Iterable[Switch]) -> tuple[HostQueue, ...]:
    """The (project, queue) pairs that ``workers`` (of one host, any state: those a listing
    shows) serve, by project and queue, each with the off switch in force on it.

    >>> one = Worker("w", "", "box", "gpu", 11, "serving", None, 0.0, 99.0, None, None, None, 10.0, 60.0, "serving",
    ...              "on", None, 1.0, None)
    >>> crew = [dataclasses.replace(one, queues=("gpu", "cpu")), dataclasses.replace(one, project="b")]
    >>> off = Switch("", "box", "*", control.OFF, control.HARD)
    >>> [(q.project, q.queue, q.switch and q.switch.policy) for q in served_queues(crew, [off])]
    [('', 'cpu', 'hard'), ('', 'gpu', 'hard'), ('b', 'gpu', None)]
    """
    switches = list(switches)
    pairs = sorted({(w.project, w.host, queue) for w in workers for queue in (w.queues or (w.queue,))})
    return tuple(HostQueue(project, queue, control.in_force(switches, project, host, queue))
                 for project, host, queue in pairs)


def _gpu_of(worker: Worker) -> int | None:
    """The GPU a worker's advert names, None for none (or an index no GPU has: plain SQL)."""
    index = worker.gpu.gpu_index if worker.gpu is not None else None
    return index if index is not None and index >= 0 else None


def is_stale(at: float, readings: Mapping[str, Any], now: float) -> bool:
    """Whether a sample taken at ``at`` is older, at ``now``, than its sampler's cadence
    allows: ``liveness.MISSED_BEATS`` times its ``interval``, 30 s when it says none.

    >>> is_stale(100.0, {"interval": 2.0}, 105.0), is_stale(100.0, {"interval": 2.0}, 107.0)
    (False, True)
    >>> is_stale(100.0, {"interval": "2"}, 125.0), is_stale(100.0, {}, 131.0)
    (False, True)
    """
    interval = reading(readings, "interval")
    return liveness.silent(at, interval if interval is not None and interval > 0 else UNKNOWN_INTERVAL, now)


def reading(readings: Mapping[str, Any], name: str) -> float | None:
    """A numeric reading, or None when it is missing or no finite number (plain SQL).

    >>> reading({"cpu.busy": 5}, "cpu.busy"), reading({"cpu.busy": True}, "cpu.busy"), reading({}, "load.1")
    (5, None, None)
    """
    value = readings.get(name)
    return value if is_finite_number(value) else None


def hour_rows(detail: Sequence[HostSample], minute: Sequence[HostSample]) -> list[Mapping[str, Any]]:
    """The readings to add a window's counters up over: every detail row, and the minute
    rows that end before the first detail row (so that no second counts twice); an
    integer too large for a float (plain SQL) is left out.

    >>> rows = hour_rows([HostSample("b", "detail", 200.0, {"n": "d"})],
    ...                  [HostSample("b", "minute", 60.0, {"n": "m1"}), HostSample("b", "minute", 180.0, {"n": "m2"})])
    >>> [row["n"] for row in rows]
    ['m1', 'd']
    """
    first = detail[0].at if detail else math.inf
    rows = [row for row in minute if row.at + MINUTE_SPAN <= first] + list(detail)
    return [row.readings for row in rows]


def series_tier(since_seconds: float, detail_keep: float) -> str:
    """The tier a window of ``since_seconds`` reads: detail when it fits what the detail
    tier keeps, else minute.

    >>> series_tier(3600.0, 3600.0), series_tier(3601.0, 3600.0)
    ('detail', 'minute')
    """
    return DETAIL if since_seconds <= detail_keep else MINUTE


def series_of(host: str, tier: str, since: float, until: float, samples: Iterable[HostSample]) -> HostSeries:
    """A host's series from its rows.

    >>> series_of("b", "detail", 0.0, 10.0, [HostSample("b", "detail", 5.0, {"cpu.busy": 1}),
    ...                                      HostSample("b", "detail", 6.0, {}, "readings are not JSON text")]).rows
    ({'at': 5.0, 'readings': {'cpu.busy': 1}}, {'at': 6.0, 'readings': {}, 'error': 'readings are not JSON text'})
    """
    rows = tuple({"at": s.at, "readings": s.readings, **({} if s.error is None else {"error": s.error})}
                 for s in samples)
    return HostSeries(host=host, tier=tier, since=since, until=until, rows=rows)
