"""The ``gpu`` section of rowfleet's benchmark: model routing on a simulated GPU fleet, and
what the claim's routing inputs cost.

The fleet: three boxes (24, 48 and 80 GB) that can each load three models (A: 17 GB, load
15 s, run 8 s; B: 34 GB, 35 s, 15 s; C: 44 GB, 60 s, 25 s), so A fits every box, B and C
the 48 and 80 GB ones. Two seeded workloads: ``bursty`` (bursts of mixed models) and
``skewed`` (a steady overload of one common model with a rare one among it). Each runs
twice on a fresh SQLite file, once per policy:

* ``fifo``: a plain ``Claim`` whose models gate is only what fits the box (no warm model,
  no rank, no starvation, no churn floor): the oldest job the box can hold;
* ``rowfleet``: the ``Claim`` with ``rowfleet.gpu.routing.claim_inputs`` from the fleet view at
  that instant (each box warm, loading or idle; what is queued per model, its oldest wait).

The loop is discrete-event on a virtual clock (``VirtualClock``, handed to the store, so the
claim SQL compares ``run_at`` with simulated time and nothing sleeps): a job is enqueued at
its arrival; a free box asks the real claim for its next job (``Store.claim``, or
``Store.finish(..., claim_next=...)`` when a job ends), pays the model's load time when the
job's model is not its warm one, then the run time, and finishes the job when that time
comes. A box whose claim finds nothing it may take while work it could hold is queued
polls again ``POLL`` seconds later, as an idle worker does. The rows compare the policies:
loads, makespan, warm-hit rate, waits per model (enqueue to claim) and the rare model's
worst wait against its bound (``routing.starve_after(load) + load + run``); the targets
are printed as met or not met, never asserted.

Also the claim's cost with model affinity: ``Store.claim`` with the inputs an 80 GB box warm
on B hands it (a models gate of three, a warm model, a rank) vs the plain claim, taking
turns on one file of queued model jobs.

Imports the harness and rowfleet's public pieces (the store, ``routing``, ``Claim``), never
another section. Its sizes live here (``GPU_SIZES``, ``GPU_QUICK``), picked by ``--quick``.
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3
import statistics
import time
from typing import Callable

from . import harness
from .harness import NOOP, PROJECT, Bench, Row, claim_micros, progress, ratio, short

from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.gpu import routing
from rowfleet.job import COMPLETED, Job, JobSpec, Outcome
from rowfleet.sql.queries import queries
from rowfleet.store import open_store
from rowfleet.store.base import Store
from rowfleet.store.jobs import claim_forms, claim_params

LEGEND = """\
  gpu sim     a simulated fleet on a virtual clock: boxes of 24/48/80 GB; models A (17 GB,
              load 15 s, run 8 s), B (34 GB, 35 s, 15 s), C (44 GB, 60 s, 25 s). Every
              claim is the real claim SQL on a SQLite file whose store reads the virtual
              clock. rowfleet: the Claim with routing.claim_inputs from the fleet view at
              that instant; baseline (FIFO): a Claim gated only by what fits the box. A box
              pays a load when the job's model is not its warm one, then the run ("reloads":
              every load, a box's first included); a box whose claim finds nothing polls
              again 1 s later. bursty: bursts
              of mixed models (A/B/C 50/30/20%); skewed: a steady overload, A common and C
              rare (A/B/C 80/15/5%), arriving faster than the fleet serves. "wait": enqueue
              to claim, per model, mean/worst. warm-hit rate: claims that needed no load /
              model claims. The rare model's bound: starve_after(its load) + a load + a run.
              Seeded: the same numbers on every machine, whatever its speed.
  gpu gangs   one host of 4 GPUs, one worker each, on a virtual clock: 1-GPU jobs (run 10 s)
              and 2-GPU jobs (run 20 s, a third of them) arriving at about 90% of what the
              host serves. Every claim is the real claim SQL with the worker's gpus_free (1 +
              the host's other idle GPUs); a 2-GPU job's worker holds the lowest idle other GPU
              as a gang. rowfleet: a claim takes the first job that fits what is free (a
              2-GPU job waits while others pass it); baseline (in-order): nothing starts
              until the oldest job fits, as a scheduler that keeps order does. "busy share":
              GPU-seconds run / (4 GPUs x makespan).
  gpu claim   Store.claim with the routing inputs of an 80 GB box warm on B (a models gate
              of A, B, C; the warm model; a rank) vs the plain Store.claim (no routing
              input), taking turns on one file of queued model jobs (a third of each model,
              interleaved by arrival), median of the calls."""

MIB_PER_GB = 1024
LEASE = 600.0     # seconds; no simulated job runs near this long
POLL = 1.0        # seconds an idle box waits before it asks again (the idle safety poll)
START = 1_700_000_000.0  # the virtual clock's epoch: any valid time will do
SEED = 20_250_101
QUEUE = "gpu"


@dataclasses.dataclass(frozen=True)
class GpuSizes:
    """How big the section's runs are; ``--quick`` picks ``GPU_QUICK``."""

    bursty_jobs: int = 300
    skewed_jobs: int = 400
    claim_rows: int = 100_000
    gang_jobs: int = 300


GPU_SIZES = GpuSizes()
GPU_QUICK = GpuSizes(bursty_jobs=60, skewed_jobs=80, claim_rows=10_000, gang_jobs=60)


@dataclasses.dataclass(frozen=True)
class Model:
    id: str
    vram_gb: int
    load: float   # seconds to load it on a box
    run: float    # seconds one job of it runs

    @property
    def vram_mb(self) -> int:
        return self.vram_gb * MIB_PER_GB


MODELS = {m.id: m for m in (Model("A", 17, 15.0, 8.0), Model("B", 34, 35.0, 15.0), Model("C", 44, 60.0, 25.0))}
BOXES = (("box-24", 24), ("box-48", 48), ("box-80", 80))  # worker id, GB of GPU memory
INFOS = {m.id: routing.ModelInfo(m.id, vram_mb=m.vram_mb, load_seconds=m.load) for m in MODELS.values()}

BURST = 30          # jobs per burst ...
BURST_EVERY = 120.0  # ... one burst starting every this many seconds ...
BURST_SPREAD = 5.0  # ... its jobs arriving within this many seconds
BURSTY_MIX = {"A": 0.5, "B": 0.3, "C": 0.2}
SKEWED_GAP = 2.2    # mean seconds between arrivals: ~0.45 jobs/s, the fleet serves ~0.3 when warm
SKEWED_MIX = {"A": 0.80, "B": 0.15, "C": 0.05}
RARE = "C"

# Targets for this version (printed as met / not met, never asserted).
RELOADS_SHARE = 0.10   # bursty: rowfleet's loads <= this share of FIFO's
MAKESPAN_SHARE = 0.55  # bursty: rowfleet's makespan <= this share of FIFO's
WARM_HITS = 0.90       # warm-hit rate at least this
CLAIM_RATIO = 1.10     # the claim with routing inputs / the plain claim, below this


class VirtualClock:
    """The simulation's time, read by the store as its clock (``store.clock()``)."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def pick(rng: random.Random, mix: dict[str, float]) -> str:
    return rng.choices(list(mix), weights=list(mix.values()))[0]


def bursty(jobs: int, rng: random.Random) -> list[tuple[float, str]]:
    """(arrival second, model) for ``jobs`` jobs in bursts of ``BURST`` mixed models."""
    arrivals = [((n // BURST) * BURST_EVERY + rng.uniform(0.0, BURST_SPREAD), pick(rng, BURSTY_MIX))
                for n in range(jobs)]
    return sorted(arrivals)


def skewed(jobs: int, rng: random.Random) -> list[tuple[float, str]]:
    """(arrival second, model) for ``jobs`` jobs arriving steadily (Poisson), A common, C rare."""
    arrivals, at = [], 0.0
    for _ in range(jobs):
        at += rng.expovariate(1.0 / SKEWED_GAP)
        arrivals.append((at, pick(rng, SKEWED_MIX)))
    return arrivals


WORKLOADS: dict[str, Callable[[int, random.Random], list[tuple[float, str]]]] = {"bursty": bursty,
                                                                                 "skewed": skewed}


@dataclasses.dataclass
class SimBox:
    """One simulated GPU worker: its model (warm once ``warm_since`` has passed, loading
    until then) and the job it runs until ``ends``."""

    worker_id: str
    total_mb: int
    model: str | None = None
    warm_since: float | None = None
    job: Job | None = None
    ends: float = 0.0
    wakes: float | None = None  # idle: when it asks again

    def view(self, now: float) -> routing.Box:
        """The box as its heartbeat would show it at ``now``."""
        loading = self.job is not None and self.warm_since is not None and now < self.warm_since
        held = MODELS[self.model].vram_mb if self.model is not None else 0
        return routing.Box(self.worker_id, models=tuple(MODELS), vram_total_mb=self.total_mb,
                           vram_free_mb=self.total_mb - held, warm_model=None if loading else self.model,
                           warm_since=None if loading else self.warm_since,
                           loading=self.model if loading else None, busy=self.job is not None)


@dataclasses.dataclass
class Result:
    """What one policy did with one workload."""

    loads: int = 0
    claims: int = 0
    makespan: float = 0.0
    waits: dict[str, list[float]] = dataclasses.field(default_factory=lambda: {m: [] for m in MODELS})

    @property
    def warm_hits(self) -> float:
        return (self.claims - self.loads) / self.claims if self.claims else 0.0


class Simulation:
    """One workload under one policy, on its own SQLite file (``run`` returns the ``Result``)."""

    def __init__(self, path: str, policy: str, arrivals: list[tuple[float, str]]) -> None:
        self.clock = VirtualClock()
        self.store = open_store(Config(db=path, project=PROJECT, synchronous="NORMAL"), create=True,
                                clock=self.clock)
        self.policy = policy
        self.arrivals = arrivals
        self.boxes = [SimBox(worker_id, gb * MIB_PER_GB) for worker_id, gb in BOXES]
        self.queued: dict[str, dict[int, float]] = {m: {} for m in MODELS}  # model -> job id -> arrival
        self.result = Result()

    def run(self) -> Result:
        try:
            self.store.migrate()
            self._loop()
        finally:
            self.store.close()
        return self.result

    def _loop(self) -> None:
        pending = list(self.arrivals)
        limit = START + 100 * (max(at for at, _ in pending) + 1000.0)  # far past any sane makespan
        while pending or any(box.job for box in self.boxes) or self._any_queued():
            times = [box.ends for box in self.boxes if box.job is not None]
            times += [box.wakes for box in self.boxes if box.job is None and box.wakes is not None]
            if pending:
                times.append(START + pending[0][0])
            now = min(times, default=None)
            if now is None or now > limit:
                raise RuntimeError(f"the {self.policy} simulation stalled with "
                                   f"{sum(map(len, self.queued.values()))} jobs queued")
            self.clock.now = now
            while pending and START + pending[0][0] <= now:
                self._enqueue(*pending.pop(0))
            for box in self.boxes:
                if box.job is not None and box.ends <= now:
                    self._finish(box)
            for box in self.boxes:
                if box.job is None:
                    box.wakes = None
                    if self._may_take(box):
                        self._take(box, self.store.claim(self._claim(box)))
        self.result.makespan = self.clock.now - START

    def _any_queued(self) -> bool:
        return any(self.queued.values())

    def _may_take(self, box: SimBox) -> bool:
        """Is a job queued that the box could hold (else it need not ask)?"""
        fits = routing.capable(box.view(self.clock.now), INFOS)
        return any(self.queued[model] for model in fits)

    def _enqueue(self, at: float, model: str) -> None:
        job = self.store.enqueue(JobSpec(task=NOOP, queue=QUEUE, project=PROJECT, model=model,
                                         vram_mb=MODELS[model].vram_mb))
        self.queued[model][job.id] = START + at

    def _claim(self, box: SimBox) -> Claim:
        now = self.clock.now
        me = box.view(now)
        if self.policy == "fifo":
            return Claim(PROJECT, QUEUE, box.worker_id, LEASE, models=routing.capable(me, INFOS))
        views = [other.view(now) for other in self.boxes]
        inputs = routing.claim_inputs(me, views, INFOS, self._backlogs(now), now)
        return Claim(PROJECT, QUEUE, box.worker_id, LEASE, **inputs.fields())

    def _backlogs(self, now: float) -> dict[str, routing.Backlog]:
        return {model: routing.Backlog(model, len(jobs), now - next(iter(jobs.values())), MODELS[model].run)
                for model, jobs in self.queued.items() if jobs}

    def _finish(self, box: SimBox) -> None:
        """End the box's job at its time, claiming its next one in the same write."""
        job, box.job = box.job, None
        claim = self._claim(box) if self._may_take(box) else None
        self._take(box, self.store.finish(job, Outcome(COMPLETED), claim_next=claim))

    def _take(self, box: SimBox, job: Job | None) -> None:
        """Start the job the box claimed (paying a load when its model is not the box's),
        or, with none, wait for the next event or the poll."""
        now = self.clock.now
        if job is None:
            box.wakes = now + POLL if self._may_take(box) else None
            return
        model = MODELS[job.required_model]
        arrival = self.queued[model.id].pop(job.id)
        self.result.claims += 1
        self.result.waits[model.id].append(now - arrival)
        if box.model != model.id:
            self.result.loads += 1
            box.model, box.warm_since = model.id, now + model.load
        box.job, box.wakes = job, None
        box.ends = max(now, box.warm_since or now) + model.run


# --- rows ----------------------------------------------------------------------------------


def met(ok: bool) -> str:
    return "met" if ok else "not met"


def wait_text(waits: list[float]) -> str:
    return f"{statistics.mean(waits):.0f}/{max(waits):.0f}" if waits else "-"


def rare_bound() -> float:
    rare = MODELS[RARE]
    return routing.starve_after(rare.load) + rare.load + rare.run


def simulate(bench: Bench, sizes: GpuSizes) -> None:
    for name, workload in WORKLOADS.items():
        jobs = sizes.bursty_jobs if name == "bursty" else sizes.skewed_jobs
        arrivals = workload(jobs, random.Random(f"{SEED}-{name}"))
        results = {}
        for policy in ("rowfleet", "fifo"):
            progress(f"gpu: {name}, {jobs} jobs, {policy} policy on a virtual clock")
            started = time.perf_counter()
            results[policy] = Simulation(bench.lab.database(f"gpu-{name}-{policy}"), policy, arrivals).run()
            progress(f"gpu: {name}, {policy}: {time.perf_counter() - started:.1f} s of wall time")
        add_rows(bench, name, jobs, results["rowfleet"], results["fifo"])


def add_rows(bench: Bench, name: str, jobs: int, ours: Result, fifo: Result) -> None:
    """One workload's rows, each with its target's verdict where this version sets one."""
    label = f"gpu {name}"
    seeded = f"{jobs} jobs, seeded"
    reload_note = seeded
    span_note = f"{seeded}; last job finished, virtual seconds from the first arrival"
    if name == "bursty":
        reload_note += f"; target <= {RELOADS_SHARE:.0%} of FIFO's: {met(ours.loads <= RELOADS_SHARE * fifo.loads)}"
        span_note += f"; target <= {MAKESPAN_SHARE}x FIFO: {met(ours.makespan <= MAKESPAN_SHARE * fifo.makespan)}"
    bench.add(Row(f"{label}: reloads", "-", f"{ours.loads}", f"{fifo.loads}", ratio(ours.loads, fifo.loads),
                  reload_note))
    bench.add(Row(f"{label}: makespan (s)", "-", f"{ours.makespan:,.0f}", f"{fifo.makespan:,.0f}",
                  ratio(ours.makespan, fifo.makespan), span_note))
    bench.add(Row(f"{label}: warm-hit rate (%)", "-", f"{100 * ours.warm_hits:.1f}", f"{100 * fifo.warm_hits:.1f}",
                  ratio(ours.warm_hits, fifo.warm_hits),
                  f"{ours.claims} model claims each; target >= {WARM_HITS:.0%}: {met(ours.warm_hits >= WARM_HITS)}"))
    for model in MODELS:
        a, b = ours.waits[model], fifo.waits[model]
        bench.add(Row(f"{label}: wait {model}, mean/worst (s)", "-", wait_text(a), wait_text(b),
                      ratio(statistics.mean(a), statistics.mean(b)) if a and b else "-",
                      f"{len(a)} jobs of {model}; enqueue to claim; ratio of the means"))
    if name == "skewed":
        rare, bound = ours.waits[RARE], rare_bound()
        worst = max(rare, default=0.0)
        bench.add(Row(f"{label}: rare {RARE}'s worst wait (s)", "-", f"{worst:,.0f}",
                      f"{max(fifo.waits[RARE], default=0.0):,.0f}", ratio(worst, max(fifo.waits[RARE], default=0.0)),
                      f"bound starve_after({MODELS[RARE].load:g}) + load + run = {bound:.0f} s: "
                      f"{met(worst <= bound)}"))


# --- the claim's cost with model affinity -------------------------------------------------


def affinity_claim(warm: str | None = "B") -> Claim:
    """The claim an 80 GB box warm on ``warm`` (long past its churn floor; None: a cold box,
    whose claim takes the routed form's cold pick) hands the store."""
    now = START
    me = routing.Box("box-80", models=tuple(MODELS), vram_total_mb=80 * MIB_PER_GB,
                     vram_free_mb=(46 if warm else 80) * MIB_PER_GB, warm_model=warm,
                     warm_since=None if warm is None else now - 3600.0)
    backlogs = {m: routing.Backlog(m, 1000, 1.0, MODELS[m].run) for m in MODELS}
    inputs = routing.claim_inputs(me, [me], INFOS, backlogs, now)
    return Claim(PROJECT, QUEUE, "bench:affinity", LEASE, **inputs.fields())


def load_model_jobs(store: Store, rows: int) -> None:
    """``rows`` queued jobs, a third of each model, in interleaved batches of 1,000."""
    left = rows
    while left > 0:
        for model in MODELS.values():
            batch = min(1000, left)
            if batch <= 0:
                break
            left -= store.enqueue_many(JobSpec(task=NOOP, queue=QUEUE, project=PROJECT, model=model.id,
                                               vram_mb=model.vram_mb), [None] * batch)


def claim_plan(path: str, claim: Claim) -> str:
    """The indexes SQLite's plan for rowfleet's claim with ``claim`` searches."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("EXPLAIN QUERY PLAN " + queries("sqlite")[claim_forms("claim", claim)[0]],
                            {**claim_params(claim), "now": time.time()}).fetchall()
    finally:
        conn.close()
    used = sorted({index for *_, detail in rows for index in ("jobs_model", "jobs_claim") if index in detail})
    return "plan: " + (", ".join(used) if used else "no index named") + " index"


def claim_latency(bench: Bench, rows: int) -> None:
    path = bench.lab.database(f"gpu-claim-{rows}")
    progress(f"gpu claim latency: loading {rows:,} queued model jobs")
    s = bench.sizes
    with open_store(Config(db=path, project=PROJECT)) as store:
        load_model_jobs(store, rows)
        routed, cold, plain = affinity_claim(), affinity_claim(None), Claim(PROJECT, QUEUE, "bench:plain", LEASE)

        progress(f"gpu claim latency: {rows:,} queued, with routing inputs and plain, taking turns")
        ours, base, calls = claim_micros((store, routed), (store, plain), s)
        progress(f"gpu claim latency: {rows:,} queued, a cold box's claim and plain, taking turns")
        cold_us, cold_base, cold_calls = claim_micros((store, cold), (store, plain), s)
    bench.add(Row(f"claim latency with model affinity, {short(rows)} queued (us)", "FULL", f"{ours:.0f}",
                  f"{base:.0f}", ratio(ours, base),
                  f"median of {calls:,}; a warm box's claim; {claim_plan(path, routed)}; "
                  f"target < {CLAIM_RATIO:.2f}x: {met(ours < CLAIM_RATIO * base)}"))
    bench.add(Row(f"claim latency, cold box's pick, {short(rows)} queued (us)", "FULL", f"{cold_us:.0f}",
                  f"{cold_base:.0f}", ratio(cold_us, cold_base),
                  f"median of {cold_calls:,}; no warm model: the routed form probes every kind and sorts the few"))


# --- jobs of one and two GPUs on one host ------------------------------------------------

HOST_GPUS = 4
GANG_RUN = {1: 10.0, 2: 20.0}  # seconds a job of that many GPUs runs
GANG_SHARE = 1 / 3             # of the jobs, those that need 2 GPUs
GANG_GAP = 5.5                 # mean seconds between arrivals: ~3.6 GPU-seconds a second, 90% of 4 GPUs
GANG_BUSY = 0.75               # target: rowfleet keeps the GPUs at least this busy


def gang_arrivals(jobs: int, rng: random.Random) -> list[tuple[float, int]]:
    """(arrival second, GPUs) for ``jobs`` jobs arriving steadily (Poisson)."""
    arrivals, at = [], 0.0
    for _ in range(jobs):
        at += rng.expovariate(1.0 / GANG_GAP)
        arrivals.append((at, 2 if rng.random() < GANG_SHARE else 1))
    return arrivals


@dataclasses.dataclass
class GangResult:
    makespan: float = 0.0
    gpu_seconds: float = 0.0
    waits: dict[int, list[float]] = dataclasses.field(default_factory=lambda: {1: [], 2: []})

    @property
    def busy(self) -> float:
        return self.gpu_seconds / (HOST_GPUS * self.makespan) if self.makespan else 0.0


class GangSimulation:
    """One host's GPU workers under one policy (``rowfleet`` or ``in-order``), on its own
    SQLite file and a virtual clock: ``held[g]`` is when GPU ``g`` is free again."""

    def __init__(self, path: str, policy: str, arrivals: list[tuple[float, int]]) -> None:
        self.clock = VirtualClock()
        self.store = open_store(Config(db=path, project=PROJECT, synchronous="NORMAL"), create=True,
                                clock=self.clock)
        self.policy, self.arrivals = policy, arrivals
        self.held = [START] * HOST_GPUS
        self.queued: dict[int, tuple[float, int]] = {}  # job id -> (arrival, GPUs), in arrival order
        self.result = GangResult()

    def run(self) -> GangResult:
        try:
            self.store.migrate()
            pending = list(self.arrivals)
            while pending or self.queued:
                events = [at for at in self.held if at > self.clock.now] + ([START + pending[0][0]] if pending else [])
                self.clock.now = min(events) if events else self.clock.now
                while pending and START + pending[0][0] <= self.clock.now:
                    at, gpus = pending.pop(0)
                    job = self.store.enqueue(JobSpec(task=NOOP, queue=QUEUE, project=PROJECT, gpus=gpus))
                    self.queued[job.id] = (START + at, gpus)
                self._start_what_fits()
            self.result.makespan = max(self.held) - START
        finally:
            self.store.close()
        return self.result

    def _idle(self) -> list[int]:
        return [g for g, free_at in enumerate(self.held) if free_at <= self.clock.now]

    def _start_what_fits(self) -> None:
        """Each idle GPU's worker claims, with the host's other idle GPUs as its gpus_free."""
        while (idle := self._idle()) and self.queued:
            if self.policy == "in-order" and next(iter(self.queued.values()))[1] > len(idle):
                return  # the oldest job does not fit: nothing starts before it
            job = self.store.claim(Claim(PROJECT, QUEUE, f"gpu-{idle[0]}", LEASE, gpus_free=len(idle)))
            if job is None:
                return
            arrival, gpus = self.queued.pop(job.id)
            run = GANG_RUN[gpus]
            for g in idle[:gpus]:  # its worker's GPU and the lowest idle others: the gang
                self.held[g] = self.clock.now + run
            self.result.gpu_seconds += gpus * run
            self.result.waits[gpus].append(self.clock.now - arrival)
            self.store.finish(job, Outcome(COMPLETED))  # its end is the GPUs' held time; the row is done now


def gangs(bench: Bench, sizes: GpuSizes) -> None:
    arrivals = gang_arrivals(sizes.gang_jobs, random.Random(f"{SEED}-gangs"))
    results = {}
    for policy in ("rowfleet", "in-order"):
        progress(f"gpu: gangs, {sizes.gang_jobs} jobs of 1 and 2 GPUs, {policy} on a virtual clock")
        results[policy] = GangSimulation(bench.lab.database(f"gpu-gangs-{policy}"), policy, arrivals).run()
    ours, order = results["rowfleet"], results["in-order"]
    seeded = f"{sizes.gang_jobs} jobs, a third of 2 GPUs, on {HOST_GPUS} GPUs, seeded"
    bench.add(Row("gpu gangs: makespan (s)", "-", f"{ours.makespan:,.0f}", f"{order.makespan:,.0f}",
                  ratio(ours.makespan, order.makespan), seeded))
    bench.add(Row("gpu gangs: busy share (%)", "-", f"{100 * ours.busy:.1f}", f"{100 * order.busy:.1f}",
                  ratio(ours.busy, order.busy), f"target >= {GANG_BUSY:.0%}: {met(ours.busy >= GANG_BUSY)}"))
    for gpus in (1, 2):
        a, b = ours.waits[gpus], order.waits[gpus]
        bench.add(Row(f"gpu gangs: wait of {gpus}-GPU jobs, mean/worst (s)", "-", wait_text(a), wait_text(b),
                      ratio(statistics.mean(a), statistics.mean(b)) if a and b else "-",
                      f"{len(a)} jobs; enqueue to claim" + ("; a 2-GPU job waits while 1-GPU jobs pass it: "
                                                            "no reservation (a known limit)" if gpus == 2 else "")))


def run(bench: Bench) -> None:
    sizes = GPU_QUICK if bench.sizes.batch_jobs <= harness.QUICK.batch_jobs else GPU_SIZES
    simulate(bench, sizes)
    gangs(bench, sizes)
    claim_latency(bench, sizes.claim_rows)
