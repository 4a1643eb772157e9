"""The GPU side of a worker process: its warm model, its GPU's lease, what its heartbeat
advertises, and the routing inputs it hands each claim.

A worker started with ``--gpu`` and models to load (``GpuSettings``) holds a ``GpuBox``:

* ``resident``: the process's ``models.Resident`` (the worker installs it), whose memory
  reader asks ``nvidia-smi --query-gpu`` for the used memory of the worker's GPU, so a
  load's footprint is measured; a missing or failing nvidia-smi reads as unknown (None).
* ``claim_fields(store)``: the claim's routing fields, ``routing.claim_inputs`` over a fleet
  view read at most once per heartbeat interval: the other live GPU workers of its project
  and queues as their heartbeat rows show them (``Store.gpu_adverts``, as boxes by
  ``rowfleet.gpu.advert``), what is queued per model
  (``Store.model_backlog``) and each model's measured figures (``Store.model_stats``, with
  the registered size); and its own box from its own state (warm model and since when,
  the model loading, free GPU memory). Plus ``gpu_locked_to`` once the GPU was found
  leased to another model.
* ``place(store, job)``: before a model job runs, the GPU's lease for its model (one model
  per GPU); a job that asks for ``gpus=N`` also takes N-1 other free GPUs of the host, lent
  to it (``rowfleet.gpu.gang``), all or none, named in ``CUDA_VISIBLE_DEVICES`` until it ends.
  A GPU lent to another worker's job hands back whatever was claimed on it. While another holder leases it for another model the job is handed back,
  which is no fault (no attempt nor retry spent), and the claims that follow take only
  that model's jobs (and plain ones) until its lease is gone, as re-read once per
  heartbeat interval.
* ``load(store, job)``: the job's model, loaded through ``resident`` before the handler
  runs (so ``rowfleet.model()`` returns it), each load recorded (``record_model_load``).
* ``renew(store)`` (the keeper, with the job's lease: the same cadence and length) keeps
  the GPU's lease while a model is held; it is released when the model is unloaded (a
  swap, an idle unload past ``idle_unload`` seconds, ``routing.should_unload``) and when
  the worker stops. ``advert()`` is what every heartbeat carries.

Main-thread calls and the keeper's (``advert``, ``renew``) share the lease and the memory
reading under locks; a renewal and a release of the lease never interleave. Writes no SQL:
everything goes through the store. Must not import ``rowfleet.worker.loop``,
``rowfleet.worker.keeper`` or any view (``rowfleet.views``): the operator's read models.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from rowfleet import control, models, names
from rowfleet.config import Config
from rowfleet.errors import ConfigError, ModelLoadFailed, RowfleetError
from rowfleet.gpu import gang, routing
from rowfleet.gpu.advert import boxes_of, model_info_of
from rowfleet.job import Job
from rowfleet.telemetry import gpu

if TYPE_CHECKING:
    from rowfleet.store import Store
    from rowfleet.store.fleet import GpuLease

log = logging.getLogger("rowfleet.worker")

# A GPU whose memory cannot be read (and no --vram-mb) claims as if every model fits: a
# load that does not fit fails and is counted, rather than the worker refusing all work.
UNKNOWN_TOTAL_MB = names.INT32_MAX


@dataclasses.dataclass(frozen=True)
class GpuSettings:
    """How a GPU worker was started: the models it may load, its GPU, the GPU memory it
    claims by (None: nvidia-smi's total), its lane, its host's priority (negative: an
    overflow box) and how long it keeps a model idle (None: for ever)."""

    models: tuple[str, ...]
    gpu_index: int = 0
    vram_mb: int | None = None
    lane: str = routing.ANY
    host_priority: int = 0
    idle_unload: float | None = None


def model_list(text: str | None, registered: Sequence[str]) -> tuple[str, ...]:
    """The models a worker may load: ``--models a,b`` (each registered by an ``--app``
    module), or every registered one when not given.

    >>> model_list("b, a", ["a", "b", "c"]), model_list(None, ["a", "b"])
    (('b', 'a'), ('a', 'b'))
    >>> model_list("a,x", ["a"])
    Traceback (most recent call last):
    rowfleet.errors.ConfigError: --models names 'x', which no --app module registers: register it with @rowfleet.model('x')
    """
    if text is None:
        return tuple(registered)
    chosen = tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))
    if not chosen:
        raise ConfigError("--models needs at least one model id, as in --models llm,vision")
    for model_id in chosen:
        names.check_name("--models", model_id)
        if model_id not in registered:
            raise ConfigError(f"--models names {model_id!r}, which no --app module registers: "
                              f"register it with @rowfleet.model({model_id!r})")
    return chosen


def vram_figures(reading: gpu.GpuReading | None, vram_mb: int | None) -> tuple[int | None, int | None]:
    """A GPU's total and free memory (MiB): the total is ``vram_mb`` when given, else what
    nvidia-smi reports; free is the total less what is used (0 at least), None when either
    is unknown.

    >>> r = gpu.GpuReading(0, None, None, 50, 30000, 81559)
    >>> vram_figures(r, None), vram_figures(r, 40000), vram_figures(r, 24000), vram_figures(None, 24000)
    ((81559, 51559), (40000, 10000), (24000, 0), (24000, None))
    """
    total = vram_mb if vram_mb is not None else (reading.memory_total_mib if reading else None)
    used = reading.memory_used_mib if reading else None
    return total, (None if total is None or used is None else max(0, total - used))


def model_info(model_id: str, registered_mb: int | None, stats: Mapping[str, Any] | None,
               now: float) -> routing.ModelInfo:
    """What placement knows of a model: its registered size and its ``model_stats`` row, read
    as every reader reads it (``rowfleet.gpu.advert.model_info_of``: which failed loads
    count as recent).

    >>> row = {"model": "llm", "load_seconds": 12.5, "footprint_mb": 9000, "failed_loads": 3,
    ...        "last_failed_at": 1000.0, "updated_at": 1000.0}
    >>> model_info("llm", 16000, row, 1100.0)
    ModelInfo(id='llm', vram_mb=16000, footprint_mb=9000, load_seconds=12.5, failed_loads=3)
    >>> model_info("llm", None, row, 5000.0).failed_loads, model_info("llm", None, None, 0.0).load_seconds
    (0, None)
    """
    if stats is None:
        return routing.ModelInfo(model_id, registered_mb)
    return dataclasses.replace(model_info_of(stats, now), vram_mb=registered_mb)


def gpu_lock(lease: "GpuLease | None", own: "GpuLease | None", now: float) -> str | None:
    """The model a GPU is locked to for a worker holding ``own`` (None: no lease): the
    leased model while a live lease that is not the worker's holds it, else None."""
    if lease is None or lease.expires_at <= now or (own is not None and own.token == lease.token):
        return None
    return lease.model


class GpuMemory:
    """The memory of one GPU as ``nvidia-smi --query-gpu`` reads it, re-read only when the
    last reading is older than asked for. Never raises: a failed run reads as unknown."""

    def __init__(self, command: str, gpu_index: int, timeout: float, *,
                 sample: Callable[..., gpu.GpuSample] = gpu.sample_gpus,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.command, self.gpu_index, self.timeout = command, gpu_index, timeout
        self._sample, self._clock = sample, clock
        self._lock = threading.Lock()
        self._readings: tuple[gpu.GpuReading, ...] = ()
        self._read_at: float | None = None

    def reading(self, max_age: float = 0.0) -> gpu.GpuReading | None:
        """This GPU's reading, at most ``max_age`` seconds old (0: read now)."""
        return next((r for r in self.readings(max_age) if r.index == self.gpu_index), None)

    def readings(self, max_age: float = 0.0) -> tuple[gpu.GpuReading, ...]:
        """Every GPU of the host, as one run read them, at most ``max_age`` seconds ago."""
        with self._lock:
            if self._read_at is None or self._clock() - self._read_at >= max_age:
                self._readings = tuple(self._sample(command=self.command, timeout=self.timeout).readings)
                self._read_at = self._clock()
            return self._readings

    def processes(self) -> list[tuple[int, int | None]]:
        """(pid, MiB) of the processes holding memory on this GPU (``--query-compute-apps``,
        matched by the GPU's uuid; every GPU's when the uuid is unknown); empty when unknown."""
        reading = self.reading(max_age=float("inf"))
        uuid = reading.uuid if reading is not None else None
        sample = gpu.sample_gpu_processes(command=self.command, timeout=self.timeout)
        return [(p.pid, p.used_memory_mib) for p in sample.processes if uuid is None or p.gpu_uuid == uuid]

    def used_mb(self) -> int | None:
        """Memory used on this GPU now (MiB), or None: a ``Resident``'s memory reader."""
        reading = self.reading()
        return None if reading is None else reading.memory_used_mib


@dataclasses.dataclass(frozen=True)
class FleetView:
    """What a GPU worker read of its fleet: the other GPU workers of its project and queue,
    what is queued per model, and each model's figures."""

    boxes: tuple[routing.Box, ...] = ()
    backlogs: Mapping[str, routing.Backlog] = dataclasses.field(default_factory=dict)
    models: Mapping[str, routing.ModelInfo] = dataclasses.field(default_factory=dict)
    rules: control.ModelRules = control.ModelRules()  # the operators' model_controls for this host
    requests: tuple[control.ModelControl, ...] = ()   # their pending unload and preload rows
    leases: Mapping[int, "GpuLease"] = dataclasses.field(default_factory=dict)  # its host's GPU leases, by index
    gpus_off: frozenset[int] = frozenset()  # its host's GPUs that a switch holds off


class GpuBox:
    """One GPU worker's own state and placement (see the module docstring)."""

    def __init__(self, config: Config, settings: GpuSettings, *, worker_id: str, holder: str,
                 queues: str | Sequence[str],
                 memory: GpuMemory | None = None) -> None:
        self.config, self.settings = config, settings
        self.worker_id, self.holder = worker_id, holder
        self.queues = (queues,) if isinstance(queues, str) else tuple(queues)  # every queue it serves
        self.memory = memory or GpuMemory(config.nvidia_smi, settings.gpu_index,
                                          timeout=max(1.0, min(gpu.DEFAULT_TIMEOUT, config.heartbeat / 2)))
        self.resident = models.Resident(memory_used_mb=self.memory.used_mb)
        self._lock = threading.Lock()
        self._lease: "GpuLease | None" = None  # the GPU's lease, held while a model is
        self._view: FleetView | None = None
        self._view_at = 0.0
        self._rules = control.ModelRules()  # the operators' rules as last read (kept while the view is re-read)
        self._locked_to: str | None = None  # the model another holder leases the GPU for
        self._lock_read_at = 0.0
        self._idle_since = time.monotonic()  # since the last job ended (or the start)
        self._load_spent = 0.0  # seconds the job in hand spent loading its model
        self._gang: list["GpuLease"] = []  # the other GPUs lent to the job in hand (gpus=N)
        self._visible_before: str | None = None  # CUDA_VISIBLE_DEVICES before the job in hand set it

    # --- what the claim and the heartbeat show -----------------------------------------

    def box(self) -> routing.Box:
        """This worker as placement sees it, from its own state (memory at most one
        heartbeat interval old)."""
        total, free = vram_figures(self.memory.reading(self.config.heartbeat), self.settings.vram_mb)
        held = self.resident.held()
        return routing.Box(self.worker_id, self.config.host, self.settings.gpu_index, models=self.models(),
                           vram_total_mb=UNKNOWN_TOTAL_MB if total is None else total, vram_free_mb=free,
                           warm_model=held.model_id if held else None, warm_since=held.since if held else None,
                           loading=self.resident.loading, host_priority=self.settings.host_priority)

    def models(self) -> tuple[str, ...]:
        """The models this worker may load: its list less those an operator forbade on its host."""
        return tuple(model for model in self.settings.models if model not in self._rules.forbidden)

    def claim_fields(self, store: "Store") -> dict[str, Any]:
        """The routing fields of the next ``Claim``."""
        view, me = self._fleet(store), self.box()
        now = store.local_clock()
        inputs = routing.claim_inputs(me, (me, *view.boxes), self._known_models(view), view.backlogs, now,
                                      self.settings.lane)
        fields = {**inputs.fields(), "gpu_locked_to": self._lock_now(store),
                  "gpus_free": 1 + len(gang.free_others(self.settings.gpu_index, self._host_gpus(view.leases,
                                                                                                view.gpus_off, now)))}
        lent = view.leases.get(self.settings.gpu_index)
        if lent is not None and gang.is_lent(lent.model) and lent.holder != self.holder and lent.expires_at > now:
            fields.update(gpu_locked_to=lent.model, lane=routing.MODEL)  # lent to a gang: claim nothing
        return fields

    def _host_gpus(self, leases: Mapping[int, "GpuLease"], off: frozenset[int], now: float,
                   max_age: float | None = None) -> list[gang.HostGpu]:
        """The host's GPUs as a gang sees them: nvidia-smi's (memory at most ``max_age``
        seconds old; default one heartbeat interval), ``off`` those switched off, leased
        those another holder's live lease holds."""
        readings = self.memory.readings(self.config.heartbeat if max_age is None else max_age)
        free = {r.index: vram_figures(r, None)[1] for r in readings if isinstance(r.index, int)}
        held = [index for index, lease in leases.items() if lease.expires_at > now and lease.holder != self.holder]
        return gang.host_gpus(free, off, held)

    def _known_models(self, view: FleetView) -> Mapping[str, routing.ModelInfo]:
        """The view's model figures, with what this worker measured loading its warm model
        where the view has none yet (its record may not be written, or not read back, yet):
        the churn floor of a model just loaded must not rest on a guess."""
        held = self.resident.held()
        known = view.models.get(held.model_id) if held is not None else None
        if known is None or known.load_seconds is not None or held.load_seconds is None:
            return view.models
        return {**view.models, held.model_id: dataclasses.replace(known, load_seconds=held.load_seconds)}

    def advert(self) -> dict[str, Any]:
        """The GPU keywords of ``Store.worker_beat``: what this worker's heartbeat shows."""
        total, free = vram_figures(self.memory.reading(self.config.heartbeat), self.settings.vram_mb)
        held = self.resident.held()
        return {"models": self.models(), "gpu_index": self.settings.gpu_index, "vram_total_mb": total,
                "vram_free_mb": free, "warm_model": held.model_id if held else None, "warm_since": held.since if held else None,
                "loading": self.resident.loading, "lane": self.settings.lane,
                "host_priority": self.settings.host_priority}

    def _fleet(self, store: "Store") -> FleetView:
        if self._view is None or time.monotonic() - self._view_at >= self.config.heartbeat:
            try:
                self._view = self._read_fleet(store)
                self._rules = self._view.rules
            except RowfleetError as exc:  # claim on the last view: a claim must not fail for a view
                log.warning("could not read the fleet for placement (using the last view): %s", exc)
                self._view = self._view or FleetView()
            self._view_at = time.monotonic()
        return self._view

    def _read_fleet(self, store: "Store") -> FleetView:
        project = self.config.project
        boxes = boxes_of(store.gpu_adverts(project), self.queues, besides=self.worker_id)
        stats = {row["model"]: row for row in store.model_stats(project)}
        backlogs = self._backlogs(store, stats)
        controls = store.model_controls(self.config.host)
        requests = tuple(row for row in controls if row.action in (control.UNLOAD, control.PRELOAD) and row.pending)
        now = store.local_clock()
        infos = {}
        for model_id in self.settings.models:
            registered = models.registered(model_id)
            infos[model_id] = model_info(model_id, registered.vram_mb if registered else None, stats.get(model_id), now)
        leases = store.host_gpu_leases(self.config.host)
        off = frozenset(s.gpu_index for s in store.gpu_switches() if s.host == self.config.host and s.off)
        return FleetView(boxes, backlogs, infos, control.model_rules(controls, self.config.host), requests, leases, off)

    def _backlogs(self, store: "Store", stats: Mapping[str, Any]) -> dict[str, routing.Backlog]:
        """What is queued per model across this worker's queues (counts added, the oldest
        wait kept), with each model's measured mean run time."""
        found: dict[str, tuple[int, float]] = {}
        for queue in self.queues:
            for row in store.model_backlog(self.config.project, queue):
                queued, waited = found.get(row["model"], (0, 0.0))
                found[row["model"]] = (queued + row["queued"], max(waited, row["oldest_wait"] or 0.0))
        # The figure may come from a row written by plain SQL: a value that is no number is unknown.
        return {model: routing.Backlog(model, queued, waited,
                                       names.seconds_of(stats.get(model, {}).get("run_seconds")))
                for model, (queued, waited) in found.items()}

    def _lock_now(self, store: "Store") -> str | None:
        """``gpu_locked_to``: the model another holder leases the GPU for, once a refusal
        told us so, re-read once per heartbeat interval until that lease is gone."""
        if self._locked_to is not None and time.monotonic() - self._lock_read_at >= self.config.heartbeat:
            try:
                self._read_lock(store)
            except RowfleetError as exc:  # keep the lock until a read says it is gone
                log.warning("could not read the GPU's lease: %s", exc)
                self._lock_read_at = time.monotonic()
        return self._locked_to

    def _read_lock(self, store: "Store") -> "GpuLease | None":
        lease = store.gpu_lease(self.config.host, self.settings.gpu_index)
        with self._lock:
            own = self._lease
        self._locked_to, self._lock_read_at = gpu_lock(lease, own, store.local_clock()), time.monotonic()
        return lease

    # --- a model job ---------------------------------------------------------------------

    def place(self, store: "Store", job: Job) -> bool:
        """Lease the GPU for the job's model (a job that needs none needs no lease), and for
        a job of ``gpus=N`` the gang's other GPUs; False when another model holds the GPU,
        it is lent to another job, or the host has too few free for the gang: then the job
        was handed back."""
        lent = self._lent_away(store)
        if lent is not None:
            return self._refuse(store, job, lent)
        model = job.required_model
        if model is not None and not self._lease_for(store, model):
            return self._refuse_leased(store, job, model)
        if (job.gpus or 1) > 1:
            return self._take_gang(store, job)
        if job.gpus is not None:
            self._show_devices((self.settings.gpu_index,))
        return True

    def _lent_away(self, store: "Store") -> str | None:
        """Why this worker's GPU may run nothing now: another worker's job holds it in its
        gang (read afresh on a host of several GPUs, the only kind where that can be)."""
        if len(self.memory.readings(self.config.heartbeat)) < 2:
            return None
        lease = store.gpu_lease(self.config.host, self.settings.gpu_index)
        if lease is None or not gang.is_lent(lease.model) or lease.holder == self.holder \
                or lease.expires_at <= store.local_clock():
            return None
        self._locked_to, self._lock_read_at = lease.model, time.monotonic()
        return f"GPU {self.settings.gpu_index} of {self.config.host or 'this host'} is one of the {lease.model}"

    def _take_gang(self, store: "Store", job: Job) -> bool:
        """Lend the other GPUs of ``job``'s gang to it (the worker's own too, for a job of no
        model, whose own lease is then the gang's), all or none, and name them for it."""
        if job.required_model is None and self.resident.held() is not None:
            self.unload(store)  # its own GPU joins the gang: one model per GPU, and none for a plain gang
        view = self._fleet(store)
        leases = store.host_gpu_leases(self.config.host)
        gpus = self._host_gpus(leases, view.gpus_off, store.local_clock(), max_age=0.0)
        chosen = gang.gang(self.settings.gpu_index, gpus, job.gpus or 1, job.vram_mb)
        if chosen is None:
            return self._refuse(store, job, gang.shortfall(self.settings.gpu_index, gpus, job.gpus or 1, job.vram_mb,
                                                           self.config.host or "this host"))
        lent = chosen[1:] if job.required_model is not None else chosen
        taken = store.acquire_gpus(self.config.host, lent, gang.lent_to(job.id), self.holder, self.config.lease)
        if taken is None:
            return self._refuse(store, job, f"another holder leased one of GPUs {gang.visible_devices(lent)} of "
                                            f"{self.config.host or 'this host'} first")
        with self._lock:
            self._gang = taken
        self._show_devices(chosen)
        return True

    def _show_devices(self, indexes: Sequence[int]) -> None:
        """Name the job's GPUs in ``CUDA_VISIBLE_DEVICES`` until it ends (``job_done``): the
        environment of this process, which the handler and what it starts read."""
        if self._visible_before is None:
            self._visible_before = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        os.environ["CUDA_VISIBLE_DEVICES"] = gang.visible_devices(indexes)

    def _refuse(self, store: "Store", job: Job, reason: str) -> bool:
        if store.hand_back(job, reason):
            log.warning("job %d: %s; handed back", job.id, reason)
        return False

    def _refuse_leased(self, store: "Store", job: Job, model: str) -> bool:
        current = store.gpu_lease(self.config.host, self.settings.gpu_index)
        held_by = f"{current.holder} for model {current.model!r}" if current is not None else "another holder"
        reason = f"GPU {self.settings.gpu_index} of {self.config.host or 'this host'} is leased by {held_by}"
        if store.hand_back(job, reason):
            log.warning("job %d needs model %r: %s; handed back", job.id, model, reason)
        warm = self.resident.held()
        if warm is not None and warm.model_id != self._locked_to:
            self.resident.unload()  # its memory is another model's now: one model per GPU
        return False

    def _lease_for(self, store: "Store", model: str) -> bool:
        """Take the GPU's lease for ``model`` (letting go of this worker's lease of another
        model first); False when another holder leases it for another model, which the
        claims that follow then respect (``gpu_locked_to``)."""
        with self._lock:
            own = self._lease
        if own is not None and own.model != model:
            self._release(store)  # a swap: the GPU is free for the new model only once let go
        lease = store.acquire_gpu(self.config.host, self.settings.gpu_index, model, self.holder, self.config.lease)
        if lease is not None:
            with self._lock:
                self._lease = lease
            self._locked_to = None
            return True
        with self._lock:
            self._lease = None  # whatever this worker held of the GPU, it holds no more
        self._read_lock(store)
        return False

    def load(self, store: "Store", job: Job) -> bool:
        """Load the job's model unless it is warm; whether a load ran. A failed load is
        recorded and raised (``ModelLoadFailed``): it fails the attempt as a handler would."""
        model = job.required_model
        held = self.resident.held()
        if model is None or (held is not None and held.model_id == model):
            return False
        started = time.monotonic()
        try:
            self.load_model(store, model)
        finally:
            self._load_spent = time.monotonic() - started  # not the job's run time (job_done)
        return True

    def load_model(self, store: "Store", model: str) -> None:
        """Load ``model`` through the resident (unloading any other), and record the load."""
        started = time.monotonic()
        try:
            self.resident.get(model)
        except ModelLoadFailed:
            self._record_load(store, model, time.monotonic() - started, None, False)
            raise
        held = self.resident.held()
        self._record_load(store, model, held.load_seconds, held.footprint_mb, True)
        self._view = None  # the next claim reads the figures this load measured

    def _record_load(self, store: "Store", model: str, seconds: float | None, footprint: int | None,
                     ok: bool) -> None:
        try:
            store.record_model_load(self.config.project, model, seconds, footprint, ok)
        except RowfleetError as exc:  # a figure lost is no reason to lose the job
            log.warning("could not record the load of model %r: %s", model, exc)

    def job_done(self, store: "Store", job: Job, seconds: float, completed: bool) -> None:
        """The job in hand ended after ``seconds`` (its model's load included): the idle
        clock starts, and a completed model job's run time, less the load, is recorded for
        preloading to weigh (``Store.record_model_run``)."""
        self._idle_since = time.monotonic()
        loading, self._load_spent = self._load_spent, 0.0
        self._end_gang(store)
        if not completed or job.required_model is None:
            return
        try:
            store.record_model_run(self.config.project, job.required_model, max(0.0, seconds - loading))
        except RowfleetError as exc:  # a figure lost is no reason to fail anything
            log.warning("could not record the run time of model %r: %s", job.required_model, exc)

    def _end_gang(self, store: "Store") -> None:
        """Let the gang's other GPUs go and put ``CUDA_VISIBLE_DEVICES`` back as it was."""
        with self._lock:
            lent, self._gang = self._gang, []
        for lease in lent:
            try:
                store.release_gpu(lease, self.holder)
            except RowfleetError as exc:  # it lapses by itself within a lease
                log.warning("could not release the lease of GPU %d: %s", lease.gpu_index, exc)
        if self._visible_before is not None:
            if self._visible_before:
                os.environ["CUDA_VISIBLE_DEVICES"] = self._visible_before
            else:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            self._visible_before = None

    # --- idle unload, renewal, stop ------------------------------------------------------

    def unload_in(self) -> float | None:
        """Seconds until an idle worker unloads its warm model (0: due), or None: never."""
        if self.settings.idle_unload is None or self.resident.held() is None:
            return None
        return max(0.0, self._idle_since + self.settings.idle_unload - time.monotonic())

    def unload_if_idle(self, store: "Store") -> bool:
        """Unload the warm model once idle for ``idle_unload`` seconds (never a pinned one),
        or at once when an operator forbade it here or asked for its unload; whether it did."""
        held = self.resident.held()
        if held is None or self.resident.loading is not None:
            return False
        view = self._fleet(store)
        asked = [row for row in view.requests if row.action == control.UNLOAD and row.model == held.model_id]
        if held.model_id in view.rules.forbidden or asked:
            why = "an operator asked for its unload" if asked else "an operator forbade it on this host"
        else:
            me = routing.Box(self.worker_id, warm_model=held.model_id)
            if not routing.should_unload(me, time.monotonic() - self._idle_since, self.settings.idle_unload,
                                         pinned=view.rules.pinned):
                return False
            why = f"idle for {self.settings.idle_unload:g}s"
        log.info("worker %s: unloading model %r: %s", self.holder, held.model_id, why)
        self.unload(store)
        self._done(store, asked)
        return True

    def preload_if_idle(self, store: "Store") -> bool:
        """While idle, load a model ahead of its jobs: the oldest preload an operator asked
        for here, else the one ``routing.preload_choice`` picks for a backlog no box holds;
        whether it loaded one. A GPU leased to another model is left alone."""
        if self.resident.loading is not None:
            return False
        view, held = self._fleet(store), self.resident.held()
        mine = self.models()
        asked = [row for row in view.requests if row.action == control.PRELOAD and row.model in mine]
        if asked:
            model = asked[0].model
        else:
            model = routing.preload_choice(self.box(), view.backlogs, view.boxes, view.models, store.local_clock())
        if model is None or (held is not None and held.model_id == model):
            self._done(store, [row for row in asked if held is not None and row.model == held.model_id])
            return False
        if not self._lease_for(store, model):
            return False
        log.info("worker %s: preloading model %r (%s)", self.holder, model,
                 "an operator asked" if asked else "its queued work outweighs its load")
        try:
            self.load_model(store, model)
        except ModelLoadFailed as exc:
            log.warning("preload of model %r failed: %s", model, exc)
            self._release(store)
            return False
        self._done(store, [row for row in asked if row.model == model])
        self._idle_since = time.monotonic()  # a preloaded model gets its idle time in full
        return True

    def _done(self, store: "Store", requests: Sequence[control.ModelControl]) -> None:
        """Mark operators' requests carried out; the next fleet read no longer shows them."""
        for request in requests:
            try:
                store.model_control_done(request)
            except RowfleetError as exc:  # carried out again next time: unloading twice is harmless
                log.warning("could not mark the %s of model %r done: %s", request.action, request.model, exc)
        if requests:
            self._view = None

    def unload(self, store: "Store") -> None:
        """Unload the held model and let the GPU's lease go."""
        try:
            self.resident.unload()
        finally:
            self._release(store)

    def renew(self, store: "Store") -> None:
        """Extend the GPU's lease by one job lease (the keeper's, with the job's renewal);
        a lease that changed hands is dropped. Never raises."""
        # Under the lock for the whole renewal: a release between reading the lease and
        # renewing it would be undone, and the GPU left locked to a model nobody holds.
        with self._lock:
            self._renew_gang(store)
            lease = self._lease
            if lease is None:
                return
            try:
                renewed = store.renew_gpu(lease, self.holder, self.config.lease)
            except RowfleetError as exc:
                log.warning("GPU lease renewal failed (will retry): %s", exc)
                return
            self._lease = renewed
        if renewed is None:
            log.warning("worker %s: the lease of GPU %d for model %r changed hands", self.holder,
                        lease.gpu_index, lease.model)

    def _renew_gang(self, store: "Store") -> None:
        """Extend the leases of the gang's other GPUs (under ``_lock``, as ``renew``); one
        that changed hands is dropped: the job's own lease decides whether it runs on."""
        kept = []
        for lease in self._gang:
            try:
                renewed = store.renew_gpu(lease, self.holder, self.config.lease)
            except RowfleetError as exc:
                log.warning("GPU lease renewal failed (will retry): %s", exc)
                renewed = lease
            if renewed is None:
                log.warning("worker %s: the lease of GPU %d lent to its job changed hands", self.holder,
                            lease.gpu_index)
            else:
                kept.append(renewed)
        self._gang = kept

    def _release(self, store: "Store") -> None:
        with self._lock:  # never while a renewal is in flight (see renew)
            lease, self._lease = self._lease, None
            if lease is None:
                return
            try:
                store.release_gpu(lease, self.holder)
            except RowfleetError as exc:  # it lapses by itself within a lease
                log.warning("could not release the lease of GPU %d: %s", lease.gpu_index, exc)

    def close(self, store: "Store") -> None:
        """The worker stops: unload its model and let the GPU go."""
        try:
            self.unload(store)
        except Exception as exc:  # a model's own unload failing must not keep the worker from stopping
            log.warning("unloading model at stop failed: %s", exc)
