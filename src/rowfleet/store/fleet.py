"""The fleet over named queries: workers' heartbeats (a GPU worker's advert with them) and
how they end, operators' switches per (project, host, queue), GPU leases (one model per
GPU), each model's measured load figures, and the orchestrators' rows. Written once for both dialects as
the fleet part of ``Store``; a silent or exited worker's jobs are handed back by the jobs
part (``_recover_jobs_of``), in the same transaction that flags the worker.

Also the one narrow read the engine asks of the fleet (``gpu_adverts``): a project's GPU
workers as typed values (``GpuWorker``, with its ``GpuAdvert``), judged as every listing
judges them; and a project's models in one consistent read (``model_rows``). The fleet's
rows for the operator's snapshot (``FleetRows``) are read by ``OperatorReads.fleet_rows``
(``store/reads.py``). The decoding of a worker row's advert and queues (``gpu_advert_of``,
``queues_of``) lives here, at the seam, for both.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Iterable, Mapping, Sequence

from rowfleet import control, exitcodes, liveness, names
from rowfleet.control import GpuSwitch, ModelControl, Switch
from rowfleet.errors import ConfigError
from rowfleet.job import by_name, decode_column, encode_json, iso
from rowfleet.store.core import StoreCore, Tx

REASON_MOST = 500  # characters of a switch's reason
# What each column of ``model_stats`` holds, as its rows are decoded (``model_stats_row``).
MODEL_STATS_KINDS = {"project": "text", "model": "text", "load_seconds": "number", "footprint_mb": "integer",
                     "loads": "integer", "failed_loads": "integer", "last_failed_at": "number",
                     "updated_at": "number", "run_seconds": "number", "runs": "integer"}


@dataclasses.dataclass(frozen=True)
class FleetRows:
    """The fleet as stored at one moment (``now``, the database's clock on PostgreSQL):
    job counts per (project, queue, state), each with ``exact`` (false: counted only up to
    the cap, so ``n`` past it means "more"), the listed workers' rows with their current
    job's ``job_progress``, ``job_progress_message`` and ``job_progress_at``, every switch,
    and each project's services (as ``project_services``); ``unplaceable``: the queued jobs
    per (project, queue) flagged as placeable on no GPU worker."""

    now: float
    counts: list[dict[str, Any]]
    workers: list[dict[str, Any]]
    switches: list[Switch]
    services: list[dict[str, Any]]
    unplaceable: list[dict[str, Any]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class ModelRows:
    """One project's models as stored at one moment (``now``): its queued and running model
    jobs in groups (``model_demand``), its listed workers' rows as the operator's snapshot
    reads them (``OperatorReads.fleet_rows``)
    (a GPU worker's advert with them) and every switch, each model's measured figures
    (``model_stats``), and per model the claims since ``since`` with how many were warm
    (``model_claims``; none read when ``since`` is None)."""

    now: float
    since: float | None
    demand: list[dict[str, Any]]
    workers: list[dict[str, Any]]
    switches: list[Switch]
    stats: list[dict[str, Any]]
    claims: list[dict[str, Any]]


class _NotAll(Exception):
    """A gang's lease found one of its GPUs held: the transaction is rolled back."""


@dataclasses.dataclass(frozen=True)
class GpuLease:
    """One row of ``gpu_leases``: which model holds a GPU, until when, with which fence token."""

    host: str
    gpu_index: int
    model: str
    holder: str
    token: int
    acquired_at: float
    expires_at: float

    @classmethod
    def from_row(cls, row: Any) -> "GpuLease":
        stored = by_name(row, "gpu_leases", _GPU_LEASE_COLUMNS)
        return cls(**{name: stored[name] for name in _GPU_LEASE_COLUMNS})


_GPU_LEASE_COLUMNS = frozenset(field.name for field in dataclasses.fields(GpuLease))


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
class GpuWorker:
    """A GPU worker of a project as the engine reads it (``FleetStore.gpu_adverts``): its
    advert (``gpu``), the queues it serves in order, the job it names, what it is doing
    (``actual``, ``liveness.actual_state``) and what the switch in force wants (``desired``),
    both judged at the moment of the read, as every listing judges them."""

    worker_id: str
    project: str
    host: str
    queues: tuple[str, ...]
    current_job: int | None
    actual: str
    desired: str
    gpu: GpuAdvert

    def serves(self, queue: str) -> bool:
        """Whether this worker serves ``queue`` (among others, maybe)."""
        return queue in self.queues


class FleetStore(StoreCore):
    """The fleet part of ``Store``: workers, switches, GPU leases, model figures and orchestrators."""

    # --- workers -------------------------------------------------------------------------

    def worker_beat(self, worker_id: str, project: str, host: str, queue: str, pid: int,
             current_job: int | None, state: str = control.SERVING, *, models: tuple[str, ...] | None = None,
             gpu_index: int | None = None, vram_total_mb: int | None = None, vram_free_mb: int | None = None,
             warm_model: str | None = None, warm_since: float | None = None, loading: str | None = None,
             lane: str | None = None, host_priority: int | None = None,
             sidecar: Mapping[str, Any] | None = None, queues: Sequence[str] | None = None,
             boot_id: str | None = None, pid_started: str | None = None) -> None:
        """Upsert a worker's heartbeat row: the job in hand, serving, draining or parked, and
        the cadence and lease of this store's ``Config`` (the worker's own), by which every
        reader judges whether it went silent. A GPU worker adds its advert: the models it can
        load (stored as a JSON array), its GPU and that GPU's memory, the model warm on it
        and since when, the model it is loading, its lane and its host's priority; each left
        out is stored as NULL, as for a worker without a GPU. A worker that owns a sidecar
        adds what it is doing (``Sidecar.status``, stored as a JSON object), and a worker of
        several queues all of them in order (a JSON array; ``queue`` is the first). ``boot_id``
        and ``pid_started`` (``telemetry.identity``), written by its first beat, tell its
        host's next worker whether it is gone (``hand_back_gone``)."""
        with self.statement() as tx:
            tx.run("worker_beat", worker_id=worker_id, project=project, host=host, queue=queue,
                   pid=pid, current_job=current_job, state=state, heartbeat=self.config.heartbeat,
                   lease=self.config.lease, models=None if models is None else encode_json(list(models)),
                   gpu_index=gpu_index, vram_total_mb=vram_total_mb, vram_free_mb=vram_free_mb,
                   warm_model=warm_model, warm_since=warm_since, loading=loading, lane=lane,
                   host_priority=host_priority, sidecar=None if sidecar is None else encode_json(dict(sidecar)),
                   queues=None if queues is None else encode_json(list(queues)), boot_id=boot_id,
                   pid_started=pid_started)

    def worker_stopped(self, worker_id: str) -> None:
        with self.transaction() as tx:
            tx.run("worker_stopped", worker_id=worker_id)

    def flag_stale_workers(self, known_dead: Callable[[Mapping[str, Any]], bool]) -> list[dict[str, Any]]:
        """Flag workers that missed ``liveness.MISSED_BEATS`` of their own heartbeats as dead.
        A worker ``known_dead`` (by its row: its process is known to be gone) has the jobs it
        holds put back in the queue at once, ahead of fresh work. Any other silent worker may
        merely be cut off from the database and still running them: its jobs wait for their
        leases to lapse (``reclaim_lapsed``), which it stops them before (the lease rule). The
        rows flagged, each with ``jobs``: what was done with its jobs (none when left to lapse),
        and ``known_dead``.

        A frozen worker that wakes up finds its jobs' tokens taken and exits without writing.
        """
        with self.transaction() as tx:
            flagged = [dict(row) for row in tx.all("flag_stale_workers", missed_beats=liveness.MISSED_BEATS)]
            for worker in flagged:
                holder = f"{worker['host']}:{worker['pid']}"
                silent = worker["flagged_dead_at"] - worker["last_seen"]
                lost = f"worker {holder} stopped beating ({silent:.0f}s since its last heartbeat) and is gone"
                worker["known_dead"] = known_dead(worker)
                worker["jobs"] = self._recover_jobs_of(tx, worker, lost, "worker_dead") if worker["known_dead"] else []
            return flagged

    def heartbeat_ages(self) -> tuple[float, list[liveness.Beat]]:
        """The clock the dead-worker sweep judges by (the database's on PostgreSQL) and every
        live worker's heartbeat read by it, for ``liveness.trust_sweep``. A row whose last
        heartbeat or cadence is no number (plain SQL's) is left out: no sweep judges it stale."""
        rows = self.reader().all("heartbeat_ages")
        now = rows[0]["now"]
        return now, [liveness.Beat(row["project"], now - row["last_seen"], row["heartbeat"]) for row in rows
                     if row["project"] is not None and names.is_finite_number(row["last_seen"])
                     and names.is_finite_number(row["heartbeat"])]

    def worker_exited(self, host: str, pid: int, code: int) -> list[dict[str, Any]]:
        """Record how a worker process ended (its supervisor saw the exit code, negative for a
        signal), and hand back at once any job it still held: a child killed by SIGKILL (the
        OOM killer's signal) must not leave its job waiting out the lease. One that ended
        because it could not renew (81, cut off) had its jobs' attempts given back, as their
        lapse would. What was done with each such job."""
        with self.transaction() as tx:
            worker = tx.one("worker_exited", host=host, pid=pid, code=code)
            if worker is None:  # it died before its first heartbeat: it claimed nothing
                return []
            lost = f"worker {host}:{pid} {exitcodes.describe(code)} while running it"
            recovered = self._recover_jobs_of(tx, worker, lost, "worker_exited", lease_lost=code == exitcodes.CUT_OFF)
            return [item for item in recovered if item["action"] != "none"]

    def hand_back_gone(self, host: str, project: str, by: str,
                       gone: Callable[[Mapping[str, Any]], str | None]) -> list[dict[str, Any]]:
        """Hand back at once the running jobs of this host's workers that are certainly gone
        (``gone``: why, from the worker's row, or None while it may be alive), and list those
        workers as dead: what a worker starting on ``host`` does before its first heartbeat
        (``by``: its holder name), so that a box restarted after a crash takes its work back
        without waiting for a sweep. Each re-queue's ``worker_gone`` event names who handed
        the job back and why. What was done with each job, with ``worker`` and ``why``.

        A read first: a host whose workers stopped cleanly (the usual start) costs no write
        transaction, so a box of many workers starting at once does not queue for the lock."""
        if not self.reader().all("host_workers_holding", host=host, project=project):
            return []
        with self.transaction() as tx:
            done = []
            for worker in tx.all("host_workers_holding", host=host, project=project):
                why = gone(worker)
                if why is None:
                    continue
                holder = f"{host}:{worker['pid']}"
                lost = f"worker {holder} is gone ({why}); handed back by worker {by} starting on the same host"
                recovered = self._recover_jobs_of(tx, worker, lost, "worker_gone", reason=lost)
                done += [{**item, "worker": holder, "why": why} for item in recovered if item["action"] != "none"]
                tx.run("worker_gone", worker_id=worker["worker_id"])
            return done

    def flagged_workers(self, host: str) -> set[int]:
        """Pids of this host's workers that the dead-worker sweep flagged and that have not stopped."""
        return {row["pid"] for row in self.reader().all("flagged_workers", host=host)}

    # --- operators' switches -----------------------------------------------------------

    def set_switch(self, project: str, host: str, queue: str, desired: str, policy: str = control.DRAIN,
                   changed_by: str = "", reason: str = "") -> Switch:
        """Write the switch of the workers of (project, host, queue); ``*`` matches all. The
        switch log (``switch_log``) gets the same row in the same transaction."""
        if desired not in (control.ON, control.OFF):
            raise ConfigError(f"a switch is {control.ON!r} or {control.OFF!r}, got {desired!r}")
        if policy not in control.POLICIES:
            raise ConfigError(f"a stop policy is {control.HARD!r} or {control.DRAIN!r}, got {policy!r}")
        project, host, queue = control.check_scope(project, host, queue)
        if not isinstance(reason, str) or len(reason) > REASON_MOST:
            raise ConfigError(f"a switch's reason is text of at most {REASON_MOST} characters")
        with self.transaction() as tx:
            switch = Switch.from_row(tx.one("set_switch", project=project, host=host, queue=queue, desired=desired,
                                            policy=policy, changed_by=changed_by, reason=reason))
            tx.run("log_switch", **dataclasses.asdict(switch))
            return switch

    def record_gpu_health(self, host: str, gpu_index: int, health: str) -> GpuSwitch:
        """The health gate's verdict on GPU ``gpu_index`` of ``host`` ('' when healthy): kept
        as its last verdict; a failing one switches the GPU off, unless it is on by an
        operator's acknowledgement of that very verdict. Never switches a GPU on."""
        with self.transaction(durable=False) as tx:
            return GpuSwitch.from_row(tx.one("record_gpu_health", host=host, gpu_index=gpu_index, health=health,
                                             gate=control.HEALTH_GATE))

    def set_gpu_switch(self, host: str, gpu_index: int, desired: str, changed_by: str = "",
                       reason: str = "") -> GpuSwitch:
        """An operator switches GPU ``gpu_index`` of ``host`` on or off; on acknowledges the
        health gate's verdict in force, so that only a new one switches it off again."""
        if desired not in (control.ON, control.OFF):
            raise ConfigError(f"a switch is {control.ON!r} or {control.OFF!r}, got {desired!r}")
        names.check_name("host", host)
        names.RULES["gpu index"].check("gpu index", gpu_index)
        if not isinstance(reason, str) or len(reason) > REASON_MOST:
            raise ConfigError(f"a switch's reason is text of at most {REASON_MOST} characters")
        with self.transaction() as tx:
            return GpuSwitch.from_row(tx.one("set_gpu_switch", host=host, gpu_index=gpu_index, desired=desired,
                                             reason=reason, changed_by=changed_by))

    def gpu_switch(self, host: str, gpu_index: int) -> GpuSwitch | None:
        """GPU ``gpu_index`` of ``host``'s switch, or None when nothing has judged or switched it."""
        row = self.reader().one("gpu_switch", host=host, gpu_index=gpu_index)
        return None if row is None else GpuSwitch.from_row(row)

    def gpu_switches(self) -> list[GpuSwitch]:
        """Every GPU's switch, by host and index."""
        return [GpuSwitch.from_row(row) for row in self.reader().all("gpu_switches")]

    def switches_in_force(self, project: str, host: str, queues: Iterable[str]) -> dict[str, Switch | None]:
        """For each of ``queues`` (in order), the off switch holding the workers of (project,
        host, queue), or None: one read for all of them."""
        switches = [Switch.from_row(row) for row in self.reader().all("switches_in_force", project=project, host=host)]
        return {queue: control.in_force(switches, project, host, queue) for queue in queues}

    # --- GPU leases: one model per GPU --------------------------------------------------

    def acquire_gpu(self, host: str, gpu_index: int, model: str, holder: str, ttl: float) -> "GpuLease | None":
        """Lease GPU ``gpu_index`` of ``host`` for ``model`` for ``ttl`` seconds: taken when
        free or lapsed (with the next fence token), shared when it is held for the same model
        (same token); None while a live lease holds it for another model."""
        with self.transaction(durable=False) as tx:
            row = tx.one("acquire_gpu", host=host, gpu_index=gpu_index, model=model, holder=holder, ttl=ttl)
        return None if row is None else GpuLease.from_row(row)

    def renew_gpu(self, lease: "GpuLease", holder: str, ttl: float) -> "GpuLease | None":
        """Extend ``lease`` to at least ``ttl`` seconds from now; None when it changed hands
        since (a new token: the GPU is no longer this model's)."""
        with self.statement() as tx:
            row = tx.one("renew_gpu", host=lease.host, gpu_index=lease.gpu_index, model=lease.model,
                         token=lease.token, holder=holder, ttl=ttl)
        return None if row is None else GpuLease.from_row(row)

    def release_gpu(self, lease: "GpuLease", holder: str) -> bool:
        """Let ``lease`` lapse now, if ``holder`` is still its last holder with its token;
        whether it did. (A holder sharing the model that renews later takes it up again.)"""
        with self.transaction(durable=False) as tx:
            return tx.one("release_gpu", host=lease.host, gpu_index=lease.gpu_index, token=lease.token,
                          holder=holder) is not None

    def acquire_gpus(self, host: str, gpu_indexes: Sequence[int], model: str, holder: str,
                     ttl: float) -> "list[GpuLease] | None":
        """Lease every GPU of ``gpu_indexes`` of ``host`` for ``model`` (a gang's: see
        ``rowfleet.gpu.gang``), all of them or none: None, and nothing taken, when a live
        lease holds one for another model."""
        try:
            with self.transaction(durable=False) as tx:
                leases = []
                for index in gpu_indexes:
                    row = tx.one("acquire_gpu", host=host, gpu_index=index, model=model, holder=holder, ttl=ttl)
                    if row is None:
                        raise _NotAll  # rolls back what this transaction took
                    leases.append(GpuLease.from_row(row))
                return leases
        except _NotAll:
            return None

    def host_gpu_leases(self, host: str) -> "dict[int, GpuLease]":
        """The lease rows of ``host``'s GPUs (live or lapsed), by index."""
        return {lease.gpu_index: lease for lease in map(GpuLease.from_row, self.reader().all("host_gpu_leases", host=host))}

    def gpu_lease(self, host: str, gpu_index: int) -> "GpuLease | None":
        """The lease row of one GPU (live or lapsed), or None if it was never leased."""
        row = self.reader().one("gpu_lease", host=host, gpu_index=gpu_index)
        return None if row is None else GpuLease.from_row(row)

    # --- measured model figures --------------------------------------------------------

    def record_model_load(self, project: str, model: str, seconds: float | None, footprint_mb: int | None,
                          ok: bool) -> None:
        """Record one load of ``model``: a good one sets its last load time and footprint,
        a failed one counts as failed and is timed."""
        with self.transaction(durable=False) as tx:
            tx.run("record_model_load", project=project, model=model, seconds=seconds,
                   footprint_mb=footprint_mb, ok=int(bool(ok)))

    def record_model_run(self, project: str, model: str, seconds: float) -> None:
        """Record that a job of ``model`` completed in ``seconds``: the model's moving mean
        run time (``run_seconds``) moves a fifth of the way there."""
        with self.transaction(durable=False) as tx:
            tx.run("record_model_run", project=project, model=model, seconds=float(seconds))

    def model_stats(self, project: str) -> list[dict[str, Any]]:
        """Each model's measured figures in ``project``, by model name (``model_stats_row``)."""
        return [model_stats_row(row) for row in self.reader().all("model_stats", project=project)]

    # --- operators' rules for the models of a box --------------------------------------

    def set_model_control(self, host: str, model: str, action: str, changed_by: str = "") -> ModelControl:
        """Write a rule (pin, forbid) or a request (unload, preload) for the workers of
        ``host`` (``*``: every host) about ``model``."""
        if action not in control.MODEL_ACTIONS:
            raise ConfigError(f"a model control is one of {', '.join(control.MODEL_ACTIONS)}, got {action!r}")
        if host == control.ANY and action not in control.STANDING:
            # A request is carried out once, by the first worker to see it: name its host.
            raise ConfigError(f"{action} is a request to one host's workers: name the host, not '*'")
        with self.transaction() as tx:
            return ModelControl.from_row(tx.one("set_model_control", host=host, model=model, action=action,
                                                changed_by=changed_by))

    def clear_model_control(self, host: str, model: str, action: str) -> bool:
        """Delete a rule or request; whether there was one."""
        with self.transaction() as tx:
            return tx.run("clear_model_control", host=host, model=model, action=action) > 0

    def model_controls(self, host: str | None = None) -> list[ModelControl]:
        """The rules and requests for the workers of ``host`` (its own and the ``*`` ones), or
        every row when ``host`` is None."""
        return [ModelControl.from_row(row) for row in self.reader().all("model_controls", host=host)]

    def model_control_done(self, request: ModelControl) -> bool:
        """Mark a request carried out, unless it was written again since it was read."""
        with self.transaction(durable=False) as tx:
            return tx.run("model_control_done", host=request.host, model=request.model, action=request.action,
                          changed_at=request.changed_at) > 0

    # --- orchestrators -----------------------------------------------------------------

    def orchestrator_beat(self, orchestrator_id: str, project: str, host: str, pid: int) -> None:
        """Upsert an orchestrator's row, with this store's sweep interval (its own cadence)."""
        with self.transaction(durable=False) as tx:
            tx.run("orchestrator_beat", orchestrator_id=orchestrator_id, project=project, host=host, pid=pid,
                   sweep_interval=self.config.interval)

    def orchestrator_stopped(self, orchestrator_id: str) -> None:
        with self.transaction() as tx:
            tx.run("orchestrator_stopped", orchestrator_id=orchestrator_id)

    # --- the GPU fleet and the models, each in one read ------------------------------------

    def gpu_adverts(self, project: str, listed_for: float | None = 0.0) -> tuple[GpuWorker, ...]:
        """The GPU workers of ``project`` (those whose heartbeat carries an advert), listed as
        the operator's snapshot lists workers (``OperatorReads.fleet_rows``): the live ones,
        and any seen in the last ``listed_for`` seconds (0: the live ones only; None: every
        row), judged at one moment with the switches then in force. The engine's one question
        about the fleet: a GPU worker reads the others' adverts for placement."""
        with self._one_read() as tx:
            now = tx.one("fleet_rows")["now"]
            since = 0.0 if listed_for is None else now - listed_for
            rows = [dict(row) for row in tx.all("gpu_adverts", project=project, since=since,
                                                missed_beats=liveness.MISSED_BEATS)]
            switches = [Switch.from_row(row) for row in tx.all("switches")] if rows else []
        return tuple(worker for row in rows if (worker := gpu_worker_of(row, switches, now)) is not None)

    def model_rows(self, project: str, window: float | None, listed_for: float | None, groups: int,
                   cap: int) -> ModelRows:
        """Everything ``rowfleet.views.snapshot.models`` shows of ``project``, in one read
        transaction: ``groups`` groups of model jobs at most, the project's workers listed as
        ``fleet_rows`` lists them, every switch, the model figures, and the claims of the
        last ``window`` seconds (of at most ``cap`` jobs finished in it, and those running;
        none with None)."""
        with self._one_read() as tx:
            now = tx.one("fleet_rows")["now"]
            listed_since = 0.0 if listed_for is None else now - listed_for
            since = None if window is None else now - window
            return ModelRows(
                now=now, since=since,
                demand=[dict(row) for row in tx.all("model_demand", project=project, limit=groups)],
                workers=[dict(row) for row in tx.all("fleet_rows_workers", since=listed_since,
                                                     missed_beats=liveness.MISSED_BEATS)
                         if row["project"] == project],
                switches=[Switch.from_row(row) for row in tx.all("switches")],
                stats=[model_stats_row(row) for row in tx.all("model_stats", project=project)],
                claims=[] if since is None else
                [dict(row) for row in tx.all("model_claims", project=project, since=since, cap=cap)])


def model_stats_row(row: Any) -> dict[str, Any]:
    """A row of ``model_stats`` as its readers take it, whoever wrote it: each column decoded
    (``job.decode_column``); a figure that cannot be (plain SQL's text, a NaN) is None,
    unknown, so that no reader (placement, a view) computes with it, and ``unreadable``
    names it with its value as stored (None for a sound row). A name is kept as stored.

    >>> row = model_stats_row({"project": "", "model": "llm", "load_seconds": "fast", "footprint_mb": 900,
    ...                        "loads": 2, "failed_loads": 0, "last_failed_at": None, "updated_at": 5.0,
    ...                        "run_seconds": float("nan"), "runs": 1})
    >>> row["load_seconds"], row["run_seconds"], row["footprint_mb"]
    (None, None, 900)
    >>> row["unreadable"]
    "column load_seconds is not a number: 'fast'; column run_seconds is not a number: nan"
    """
    values, problems = dict(by_name(row, "model_stats", frozenset(MODEL_STATS_KINDS))), []
    for name, kind in MODEL_STATS_KINDS.items():
        value, problem = decode_column(name, values[name], kind)
        if problem is not None:
            problems.append(problem)
            value = None if kind in ("number", "integer") else value
        values[name] = value
    values["unreadable"] = "; ".join(problems) or None
    return values


def gpu_worker_of(row: Any, switches: Iterable[Switch], now: float) -> GpuWorker | None:
    """A worker row as a ``GpuWorker`` judged at ``now`` under ``switches``, or None for a
    worker without a GPU advert. Its switch is the one a listing shows (``control.holding_worker``)."""
    advert = gpu_advert_of(row)
    if advert is None:
        return None
    queues = queues_of(row)
    held = control.holding_worker(switches, row["project"], row["host"], queues)
    return GpuWorker(worker_id=row["worker_id"], project=row["project"], host=row["host"], queues=queues,
                     current_job=row["current_job"], actual=liveness.actual_state(row, now),
                     desired=control.ON if held is None else control.OFF, gpu=advert)


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
