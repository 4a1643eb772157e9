"""Why a job that is not running isn't: the reasons, in words an operator understands, in
the order they matter.

``why_not_running(job, facts, now)`` is pure: from the job's row, the ``Facts`` about the
fleet around it and ``now`` it returns a list of ``Reason`` (a code to test and style by,
and a sentence). A finished job gets one reason, its end; a running one says where it runs
and how its lease stands; a queued one gets every reason that holds it back, in this
order: not due yet, its queue off on every live host, no live worker of its queue, its
model placeable nowhere (or on no live worker of the queue), jobs ahead of it in claim
order (or every worker that could take it busy), its workflow run, a pending cancel; and
when nothing holds it back, that it should be claimed at the next wake-up.

``gather(store, job, now)`` reads those facts through the store's own reads: the fleet's
read model (``rowfleet.views.snapshot``: workers, their liveness and switches), the model's
measured figures and the operators' model rules, the job's run, and ``store.reads.jobs_ahead``.

The texts are plain: a hostile string (a queue written by plain SQL, a switch's reason)
is kept as it is, and the front end that renders a reason escapes it (the panel does).
Times read relative to ``now`` (``relative``).

Imports the pure rules (``control``, ``dag``, ``job``, ``names``, ``routing``) and
``rowfleet.views.snapshot``; takes the store as an argument and never imports it at load time,
nor anything of the command line or the panel.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from rowfleet import control, dag
from rowfleet.control import Switch
from rowfleet.errors import NotFound
from rowfleet.gpu import routing
from rowfleet.job import QUEUED, RUNNING, TERMINAL, raw_text
from rowfleet.names import is_finite_number
from rowfleet.telemetry.readings import gpu_indexes
from rowfleet.views import snapshot
from rowfleet.views.snapshot import GpuAdvert

if TYPE_CHECKING:
    from rowfleet.job import Job
    from rowfleet.store import Store

# The reasons' codes, in the order a queued job's reasons are listed.
FINISHED = "finished"
RUNNING_NOW = "running"
UNKNOWN_STATE = "unknown_state"
UNREADABLE = "unreadable"
NOT_DUE = "not_due"
QUEUE_OFF = "queue_off"
NO_WORKER = "no_worker"
UNPLACEABLE = "unplaceable"
NO_FIT = "no_fit"
LIMITED = "limited"
AHEAD = "ahead"
BUSY = "busy"
RUN_ENDED = "run_ended"
AWAITING_INPUT = "awaiting_input"
UPSTREAM = "waits_upstream"
CANCEL_PENDING = "cancel_pending"
NEXT_WAKE = "next_wake"
CODES = (FINISHED, RUNNING_NOW, UNKNOWN_STATE, UNREADABLE, NOT_DUE, QUEUE_OFF, NO_WORKER, UNPLACEABLE, NO_FIT, LIMITED,
         AHEAD,
         BUSY, RUN_ENDED, AWAITING_INPUT, UPSTREAM, CANCEL_PENDING, NEXT_WAKE)

# What a live worker's heartbeat says it is doing (any other state: it is not live).
LIVE = (control.SERVING, control.DRAINING, control.PARKED)


@dataclasses.dataclass(frozen=True)
class Reason:
    """One reason a job is not running: ``code`` (one of ``CODES``) and the
    sentence an operator reads (plain text, unescaped)."""

    code: str
    text: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "text": self.text}


@dataclasses.dataclass(frozen=True)
class QueueWorker:
    """A worker of the job's (project, queue) as its last heartbeat shows it: what it is
    doing (``state``: serving, draining or parked while it is live; else silent, stopped or
    how it ended, as ``snapshot.actual_state`` says), when it last beat, the off switch in
    force for the job's queue on its host (None: on), whether it runs a job now, and a GPU
    worker's advert (None: a plain worker, which takes any job of its queue)."""

    host: str
    pid: int
    state: str
    last_seen: float | None = None
    switch: Switch | None = None
    busy: bool = False
    gpu: GpuAdvert | None = None

    @property
    def live(self) -> bool:
        return self.state in LIVE


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the diagnosis of a queued job needs besides its row (``gather`` reads it):

    - ``workers``: every worker row of its (project, queue) that the fleet lists, live or not;
    - ``ahead``: due queued jobs a claim takes before it, counted up to a cap
      (``ahead_capped``: more than ``ahead``);
    - ``model``: what the fleet measured of its required model (None: nothing, or no model);
    - ``forbidden_on``: the hosts of its workers where an operator's rule forbids its model;
    - ``limits``: what the flow limits of its queue hold it by now, in words (``rowfleet.flow``);
    - ``host_gpus``: for a job that asks for several GPUs, how many GPUs each sampled host has;
    - a workflow node's: its run's state, its node's state, and the nodes of the run
      awaiting input.
    """

    workers: tuple[QueueWorker, ...] = ()
    ahead: int = 0
    ahead_capped: bool = False
    model: routing.ModelInfo | None = None
    forbidden_on: frozenset[str] = frozenset()
    limits: tuple[str, ...] = ()
    host_gpus: dict[str, int] = dataclasses.field(default_factory=dict)
    run_state: str | None = None
    node_state: str | None = None
    awaiting_input: tuple[str, ...] = ()


# --- the diagnosis (pure) -----------------------------------------------------------------


def why_not_running(job: Any, facts: Facts, now: float) -> list[Reason]:
    """The reasons ``job`` is not running at ``now``, most important first (the module
    docstring gives the order); never empty.

    >>> from types import SimpleNamespace as J
    >>> why_not_running(J(state="completed", finished_at=940.0, error=None), Facts(), 1000.0)
    [Reason(code='finished', text='it finished: completed 1 min ago')]
    >>> queued = J(state="queued", queue="q", project="", run_at=1240.0, attempts=0, max_attempts=5, error=None,
    ...            unreadable=None, unplaceable=None, required_model=None, vram_mb=None, run_id=None,
    ...            node_id=None, cancel_requested_at=None)
    >>> [reason.text for reason in why_not_running(queued, Facts(), 1000.0)]
    ['it is not due yet: it becomes due in 4 min', 'no live worker serves queue q; no worker of it has been seen']
    """
    if job.state in TERMINAL:
        return [_finished(job, now)]
    if job.state == RUNNING:
        return [_running(job, now), *_cancel_pending(job, now)]
    if job.state != QUEUED:
        return [Reason(UNKNOWN_STATE, f"its state {raw_text(job.state)} is none that rowfleet knows, "
                                      f"so no worker claims it")]
    reasons = []
    if job.unreadable:
        reasons.append(Reason(UNREADABLE, f"its row cannot be decoded ({job.unreadable}); a worker that claims it "
                                          f"fails it at once"))
    run_at = _time(job.run_at)
    due = run_at is not None and run_at <= now
    if run_at is not None and not due:
        reasons.append(_not_due(job, run_at, now))
    live = [worker for worker in facts.workers if worker.live]
    on = [worker for worker in live if worker.switch is None]
    if live and not on:
        reasons.append(_queue_off(job, live, now))
    if not live:
        reasons.append(_no_worker(job, facts.workers, now))
    placement = _placement(job, facts, live, now) or _too_few_gpus(job, facts, live)
    if placement is not None:
        reasons.append(placement)
    if due:
        reasons.extend(Reason(LIMITED, f"a limit holds it: {text}") for text in facts.limits)
    takers = [worker for worker in on if can_take(worker, job, facts)]
    if due and facts.ahead:
        reasons.append(_ahead(job, facts))
    elif due and takers and all(worker.busy for worker in takers):
        reasons.append(Reason(BUSY, f"it is next in line, but every worker of {_queue(job)} that can take it "
                                    f"is running another job ({len(takers)} of them)"))
    reasons.extend(_run(job, facts))
    reasons.extend(_cancel_pending(job, now))
    return reasons or [Reason(NEXT_WAKE, "nothing holds it back: it should be claimed at the next wake-up")]


def can_take(worker: QueueWorker, job: Any, facts: Facts) -> bool:
    """Could this worker of the job's queue take the job, whatever it is doing now? A plain
    worker takes any job; a GPU worker only what its lane lets in and, for a model job, a
    model it lists, is not forbidden on its host and whose need its GPU could hold once
    empty (``routing.can_serve``).

    >>> from types import SimpleNamespace as J
    >>> gpu = QueueWorker("box", 7, "serving", gpu=GpuAdvert(("llm",), vram_total_mb=24000, lane="any"))
    >>> big, plain = J(required_model="llm", vram_mb=30000), J(required_model=None, vram_mb=None)
    >>> cpu = QueueWorker("cpu", 8, "serving")
    >>> can_take(gpu, big, Facts()), can_take(gpu, plain, Facts()), can_take(cpu, big, Facts())
    (False, True, True)
    """
    advert = worker.gpu
    gang = _gpus_asked(job) > 1  # only a GPU worker with models lends its host's other GPUs
    if advert is None:
        return not gang
    if job.required_model is None:
        return advert.lane != routing.MODEL
    return advert.lane != routing.PLAIN and worker.host not in facts.forbidden_on and \
        routing.can_serve(_box(worker), job.required_model, routing.vram_need(job.vram_mb, facts.model))


def _gpus_asked(job: Any) -> int:
    """The GPUs a job asks for; 0 for none, or a row's value that is no count (plain SQL)."""
    gpus = getattr(job, "gpus", None)
    return gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0 else 0


def _too_few_gpus(job: Any, facts: Facts, live: Sequence[QueueWorker]) -> Reason | None:
    """Why a job that asks for several GPUs of one host fits no host of its queue's GPU
    workers: none runs, or none's host has that many (as its sampler counts them).

    >>> from types import SimpleNamespace as J
    >>> gpu = QueueWorker("box", 7, "serving", gpu=GpuAdvert(("llm",), vram_total_mb=24000, lane="any"))
    >>> _too_few_gpus(J(gpus=4, queue="q", project=""), Facts(host_gpus={"box": 2}), [gpu]).text
    'it needs 4 GPUs of one host; the most a host of the GPU workers of queue q has is 2 (box)'
    >>> _too_few_gpus(J(gpus=2, queue="q", project=""), Facts(host_gpus={"box": 2}), [gpu]) is None
    True
    """
    need = _gpus_asked(job)
    if need < 2 or not live:
        return None
    hosts = sorted({worker.host for worker in live if worker.gpu is not None})
    if not hosts:
        return Reason(NO_FIT, f"it needs {need} GPUs of one host, and no live worker of {_queue(job)} is a GPU "
                              f"worker with models, the kind that lends its host's other GPUs")
    most, host = max((facts.host_gpus.get(host, 1), raw_text(host)) for host in hosts)
    if most >= need:
        return None
    return Reason(NO_FIT, f"it needs {need} GPUs of one host; the most a host of the GPU workers of {_queue(job)} "
                          f"has is {most} ({host})")


def _box(worker: QueueWorker) -> routing.Box:
    advert = worker.gpu
    return routing.Box(f"{worker.host}:{worker.pid}", host=worker.host, models=advert.models,
                       vram_total_mb=advert.vram_total_mb or 0)


def _finished(job: Any, now: float) -> Reason:
    error = _first_line(job.error) if job.state != "completed" else None
    return Reason(FINISHED, f"it finished: {job.state} {relative(job.finished_at, now)}"
                            + (f" ({error})" if error else ""))


def _running(job: Any, now: float) -> Reason:
    holder = raw_text(job.claimed_by) if job.claimed_by is not None else ""
    host, sep, pid = holder.rpartition(":")
    where = f"on {host} (pid {pid})" if sep and host else f"on {holder}" if holder else "(its holder is not recorded)"
    text = f"it is running {where}"
    if _time(job.started_at) is not None:
        text += f", started {relative(job.started_at, now)}"
    expires = _time(job.lease_expires_at)
    if expires is not None and expires >= now:
        text += f"; its lease runs out {relative(expires, now)}"
    elif expires is not None:
        text += f"; its lease ran out {relative(expires, now)}, so the orchestrator hands it back to the queue"
    return Reason(RUNNING_NOW, text)


def _not_due(job: Any, run_at: float, now: float) -> Reason:
    text = f"it is not due yet: it becomes due {relative(run_at, now)}"
    if is_finite_number(job.attempts) and job.attempts > 0:
        error = _first_line(job.error)
        text += (f" (the backoff after attempt {job.attempts} of {raw_text(job.max_attempts)}"
                 + (f", which ended: {error})" if error else ")"))
    return Reason(NOT_DUE, text)


def _queue_off(job: Any, live: Sequence[QueueWorker], now: float) -> Reason:
    hosts = ", ".join(sorted({raw_text(worker.host) for worker in live}))  # a host from plain SQL may be no text
    switches = _unique(worker.switch for worker in live if worker.switch is not None)
    return Reason(QUEUE_OFF, f"its {_queue(job)} is off on every live host that serves it ({hosts}): "
                             + "; ".join(switch_text(switch, now) for switch in switches))


def switch_text(switch: Switch, now: float) -> str:
    """An off switch as the diagnosis names it: where it holds, its policy, who set it and
    when, and why when its writer said.

    >>> switch_text(Switch("", "box", "gpu", control.OFF, control.HARD, "ops", 880.0), 1000.0)
    "queue gpu of host box in project '' was switched off (hard) by ops 2 min ago"
    """
    text = (f"{switch.scope()} was switched off ({switch.policy}) by {switch.changed_by or 'an unnamed operator'} "
            f"{relative(switch.changed_at, now)}")
    why = switch.reason
    return f"{text}: {why}" if why else text


def _no_worker(job: Any, workers: Iterable[QueueWorker], now: float) -> Reason:
    seen = [worker for worker in workers if _time(worker.last_seen) is not None]
    last = max(seen, key=lambda worker: worker.last_seen, default=None)
    if last is None:
        tail = "no worker of it has been seen"
    else:
        tail = f"the last one seen was {last.host} (pid {last.pid}) {relative(last.last_seen, now)}, now {last.state}"
    return Reason(NO_WORKER, f"no live worker serves {_queue(job)}; {tail}")


def _placement(job: Any, facts: Facts, live: Sequence[QueueWorker], now: float) -> Reason | None:
    """Why no worker could place the job: the orchestrator's flag when it set one, else
    whether any live worker of its queue could take it (``can_take``)."""
    model = job.required_model
    if job.unplaceable is not None:
        what = f"its model {model}" if model is not None else "it"
        return Reason(UNPLACEABLE, f"{what} is unplaceable: {snapshot.unplaceable_text(job.unplaceable)}"
                                   + (f", since {relative(job.unplaceable_at, now)}"
                                      if _time(getattr(job, "unplaceable_at", None)) is not None else ""))
    if not live or any(can_take(worker, job, facts) for worker in live):
        return None
    queue = _queue(job)
    if model is None:
        return Reason(NO_FIT, f"every live worker of {queue} takes model jobs only (lane model), and it needs "
                              f"no model")
    listing = [worker for worker in live if model in worker.gpu.models]
    if not listing:
        return Reason(NO_FIT, f"no live GPU worker of {queue} lists its model {model}")
    laned = [worker for worker in listing if worker.gpu.lane != routing.PLAIN]
    if not laned:
        return Reason(NO_FIT, f"the live GPU workers of {queue} that list its model {model} take plain jobs only "
                              f"(lane plain)")
    allowed = [worker for worker in laned if worker.host not in facts.forbidden_on]
    if not allowed:
        hosts = ", ".join(sorted({raw_text(worker.host) for worker in laned}))
        return Reason(NO_FIT, f"an operator's rule forbids its model {model} on every host whose workers of "
                              f"{queue} list it ({hosts})")
    need = routing.vram_need(job.vram_mb, facts.model)
    biggest = max(worker.gpu.vram_total_mb or 0 for worker in allowed)
    return Reason(NO_FIT, f"no GPU worker has enough VRAM for it: it needs {need} MiB, and the biggest live GPU "
                          f"worker of {queue} that lists {model} has {biggest} MiB")


def _ahead(job: Any, facts: Facts) -> Reason:
    n = facts.ahead
    count = f"{n:,}+" if facts.ahead_capped else f"{n:,}"
    many = facts.ahead_capped or n != 1
    return Reason(AHEAD, f"{count} job{'s' if many else ''} {'are' if many else 'is'} ahead of it in {_queue(job)}, "
                         f"in claim order (run-next first, then priority, then due time)")


def _run(job: Any, facts: Facts) -> list[Reason]:
    if job.run_id is None:
        return []
    if facts.run_state in dag.RUN_TERMINAL:
        return [Reason(RUN_ENDED, f"its run {job.run_id} has ended ({facts.run_state})")]
    if facts.node_state != dag.PENDING:  # its node is under way: nothing of the run holds the job
        return []
    if facts.awaiting_input:
        return [Reason(AWAITING_INPUT, f"its run {job.run_id} is awaiting input at node "
                                       f"{', '.join(facts.awaiting_input)}: answer it so that the run goes on")]
    return [Reason(UPSTREAM, f"its node {job.node_id} of run {job.run_id} waits on upstream nodes")]


def _cancel_pending(job: Any, now: float) -> list[Reason]:
    if job.cancel_requested_at is None:
        return []
    why = getattr(job, "cancel_reason", None)
    stops = "its worker stops it when it next renews the lease" if job.state == RUNNING else \
        "the worker that claims it stops it at once"
    return [Reason(CANCEL_PENDING, f"a cancel was asked for {relative(job.cancel_requested_at, now)}"
                                   + (f" ({raw_text(why)})" if why else "") + f" and is pending: {stops}")]


def _queue(job: Any) -> str:
    """The job's queue as the reasons name it (with its project, when it has one)."""
    return f"queue {raw_text(job.queue)}" + (f" of project {raw_text(job.project)}" if job.project else "")


def _unique(items: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


def _first_line(text: Any) -> str | None:
    """An error's first line, cut at 200 characters: a reason is one sentence.

    >>> _first_line("ValueError: x\\nTraceback ..."), _first_line(None)
    ('ValueError: x', None)
    """
    lines = raw_text(text).strip().splitlines() if text else []
    if not lines:
        return None
    return lines[0] if len(lines[0]) <= 200 else lines[0][:199] + "…"


def _time(value: Any) -> float | None:
    return float(value) if is_finite_number(value) else None


_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def relative(at: Any, now: float) -> str:
    """A time as a phrase relative to ``now``, in its largest whole unit; a value that is no
    time (plain SQL may store anything) as stored.

    >>> relative(1240.0, 1000.0), relative(997.0, 1000.0), relative(1000.4, 1000.0), relative(8300.0, 1000.0)
    ('in 4 min', '3 s ago', 'now', 'in 2 h')
    >>> relative(None, 1000.0), relative("soon", 1000.0), relative(1e300, 0.0)
    ('at a time not recorded', 'at soon (not a time)', 'in over 100 years')
    """
    if at is None:
        return "at a time not recorded"
    seconds = _time(at)
    if seconds is None:
        return f"at {raw_text(at)} (not a time)"
    delta = seconds - now
    size = abs(delta)
    if size < 1:
        return "now"
    if size > 100 * 365.25 * 86400:
        phrase = "over 100 years"
    else:
        unit, step = next((unit, step) for unit, step in _UNITS if size >= step)
        phrase = f"{int(size // step)} {unit}"
    return f"in {phrase}" if delta > 0 else f"{phrase} ago"


# --- the facts (one read through the store) ------------------------------------------------


def gather(store: "Store", job: "Job", now: float) -> Facts:
    """The ``Facts`` ``why_not_running`` needs about ``job``, read through the store: every
    worker row of its (project, queue) with the switch in force for the queue on its host
    (from the fleet's read model, ``snapshot.snapshot``), the jobs ahead of it
    (``store.reads.jobs_ahead``), its model's measured figures and the hosts that forbid it, and a
    workflow node's run. A job that is not queued needs none of it: ``Facts()``."""
    if job.state != QUEUED:
        return Facts()
    fleet = snapshot.snapshot(store, listed_for=None)
    workers = tuple(
        QueueWorker(worker.host, worker.pid, worker.actual, _time(worker.last_seen),
                    control.in_force(fleet.switches, job.project, worker.host, job.queue),
                    worker.current_job is not None, worker.gpu)
        for worker in fleet.workers if worker.project == job.project and worker.serves(job.queue))
    ahead, capped = store.reads.jobs_ahead(job, cap=snapshot.COUNT_CAP)
    holds = store.flow_holds(job.project, job.queue, job.concurrency_key if isinstance(job.concurrency_key, str) else None)
    facts = Facts(workers=workers, ahead=ahead, ahead_capped=capped, limits=tuple(hold.text for hold in holds))
    if job.required_model is not None:
        facts = dataclasses.replace(facts, **_model_facts(store, job, workers, now))
    if _gpus_asked(job) > 1:
        facts = dataclasses.replace(facts, host_gpus=_host_gpus(store, workers))
    if job.run_id is not None:
        facts = dataclasses.replace(facts, **_run_facts(store, job))
    return facts


def _host_gpus(store: "Store", workers: Iterable[QueueWorker]) -> dict[str, int]:
    """How many GPUs each host has: its sampler's count, or more where its GPU workers'
    adverts name a higher index (a host sampled by no sampler)."""
    found = {sample.host: len(gpu_indexes(sample.readings)) for sample in store.reads.latest_host_samples()}
    for worker in workers:
        index = worker.gpu.gpu_index if worker.gpu is not None else None
        if isinstance(index, int) and not isinstance(index, bool):
            found[worker.host] = max(found.get(worker.host, 0), index + 1)
    return found


def _model_facts(store: "Store", job: "Job", workers: Iterable[QueueWorker], now: float) -> dict[str, Any]:
    model = job.required_model
    row = next((row for row in store.model_stats(job.project) if row["model"] == model), None)
    controls = store.model_controls()
    forbidden = frozenset(host for host in {worker.host for worker in workers}
                          if model in control.model_rules(controls, host).forbidden)
    return {"model": None if row is None else snapshot.model_info_of(row, now), "forbidden_on": forbidden}


def _run_facts(store: "Store", job: "Job") -> dict[str, Any]:
    try:
        run = store.get_run(job.run_id, job.project)
    except NotFound:  # pruned, or a row from plain SQL naming no run
        return {}
    node = next((node for node in run.nodes if node.id == job.node_id), None)
    return {"run_state": run.state, "node_state": None if node is None else node.state,
            "awaiting_input": tuple(node.id for node in run.nodes if node.state == dag.AWAITING_INPUT)}
