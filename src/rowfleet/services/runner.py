"""The process frame and a box's plan: how a long-running process runs until it is
stopped, and which supervised children one box runs, stopped in which order.

The frame: stop signals (``on_stop_signals``; ``stop_on_signals`` gives a ``StopEvent``,
which a signal handler may set without a hang), waiting for the database before the work
starts (``migrated_store`` for the orchestrator, the only process that migrates;
``schema_store`` for the others), a fatal error as one line and exit 2 even in a forked
child (``run_until_stopped``), and a supervisor that records its workers' exits in the
database and kills the workers the dead-worker sweep flagged (``supervise``). Each process
has its ``run_*`` function here: worker, orchestrator, scheduler, the host's sampler.

The plan: a ``Box`` says what one box runs (workers per queue, each queue's ``Workers``
their own kind: plain, or GPU workers with their models; the orchestrator, the
scheduler when there are schedules, the sampler); ``box_plan`` says it in ``Role`` lines,
and why a role is left out; ``box_children`` makes its supervised children, each in its
stop stage; ``run_box`` runs them. From Python, with no command line::

    runner.run_box(runner.Box(config, queues=[("default", 2)]))
    runner.run_box(runner.Box(config, queues=[("cpu", 2), runner.Workers("gpu", 1, gpu=True)]))

A stop (SIGTERM, or Ctrl-C) goes in stages, each once the one before has exited: the
scheduler (no new slots), the workers (each finishes its job in hand), the orchestrator
(which dispatches the workflow steps their results made due), then the watchers (the
sampler, and a panel a caller adds), so an operator watches the drain to its end. A second
stop signal, or SIGQUIT, is a cold stop: every child at once, each worker handing its job
back unfinished (no attempt spent) and exiting 0.

Must not import the surface (``rowfleet.cli``, ``rowfleet.panel``, ``rowfleet.api``): a
panel is a ``Child`` its caller makes and hands to ``run_box`` as a watcher.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rowfleet import exitcodes, names
from rowfleet.config import Config
from rowfleet.errors import ConfigError, DatabaseUnreachable, DiskFull, RowfleetError, StoreUnavailable
from rowfleet.services.supervisor import Child, Supervisor
from rowfleet.store import Store, open_store, sqlite_path
from rowfleet.store import waiting
from rowfleet.store.wake import StopEvent
from rowfleet.terminal import report
from rowfleet.worker.loop import Worker

if TYPE_CHECKING:
    from rowfleet.gpu.gpu_worker import GpuSettings
    from rowfleet.schedule import Schedule

# Stop stages: what feeds work stops first, what watches the drain last.
SCHEDULER_STAGE, WORKER_STAGE, ORCHESTRATOR_STAGE, WATCHER_STAGE = range(4)
FATAL = frozenset({exitcodes.USAGE})  # bad configuration: restarting cannot help, so the box stops
PROCS = names.RULES["procs"]  # the workers of a queue, and of the box: one process each


# --- the process frame ------------------------------------------------------------------


def on_stop_signals(handler: Callable[..., Any], cold: Callable[..., Any] | None = None) -> None:
    """``handler`` for SIGTERM, and for SIGINT unless this process was started ignoring it
    (a supervisor's child, as under ``worker --procs`` or ``rowfleet up``, or a shell's
    background job): Ctrl-C is then someone else's to pass on. ``cold``, where given, for
    SIGQUIT (Ctrl-\\) on the same terms: a stop at once."""
    signal.signal(signal.SIGTERM, handler)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, handler)
    if cold is not None and signal.getsignal(signal.SIGQUIT) is not signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, cold)


def stop_on_signals() -> StopEvent:
    """A ``StopEvent`` that the stop signals (see ``on_stop_signals``) set."""
    stop = StopEvent()
    on_stop_signals(lambda *_: stop.set())
    return stop


def run_until_stopped(ready_store: Callable[[threading.Event], Store | None],
                      body: Callable[[Store, threading.Event], None]) -> int:
    """A long-running process's frame: stop signals set ``stop``; ``ready_store(stop)``
    waits for the database (None: stopped first), then ``body`` runs on it until ``stop``.
    The exit code; a database no wait repairs is one line and exit 2, here too, since in a
    forked child no command line is there to catch it."""
    stop = stop_on_signals()
    try:
        store = ready_store(stop)
        if store is None:
            return exitcodes.OK
        with store:
            body(store, stop)
    except RowfleetError as exc:
        return report(exc)
    return exitcodes.OK


def migrated_store(config: Config, stop: threading.Event) -> Store | None:
    """The orchestrator's store, its schema migrated. A server that does not answer yet (down,
    restarting) or a disk with no room is waited for, as workers wait, until ``stop``; None if
    stopped first."""
    return waiting.open_when_ready(lambda: open_store(config, create=True), stop, config.poll,
                                   logging.getLogger("rowfleet.orchestrator"), ready=lambda store: store.migrate(),
                                   transient=(DatabaseUnreachable, DiskFull))


def schema_store(config: Config, stop: threading.Event) -> Store | None:
    """A store whose schema is there, waited for until ``stop`` (None if stopped first): the
    orchestrator makes it; every other process only waits for it."""
    return waiting.open_when_ready(lambda: open_store(config), stop, config.poll,
                                   logging.getLogger("rowfleet.scheduler"),
                                   ready=lambda opened: opened.require_schema())


def migrate_if_answering(config: Config) -> None:
    """Make or upgrade the schema before any child starts, so that a fresh box's workers
    find it at once; a server that does not answer yet, or a disk with no room, is left to the
    orchestrator child, which waits for it. The connection is closed before the first fork."""
    log = logging.getLogger("rowfleet.up")
    try:
        with open_store(config, create=True) as store:
            store.migrate()
    except DatabaseUnreachable as exc:
        log.warning("the database does not answer yet (%s): the orchestrator will migrate it once it does", exc)
    except DiskFull as exc:
        log.warning("%s: the orchestrator will migrate it once there is room", exc)


def refuse_broken_database(config: Config) -> None:
    """Raise ``DatabaseBroken`` where no wait can help (another program's database, say)
    before any child is forked; a database that is only not there yet, or on a disk with no
    room (a ``StoreUnavailable``), is left to the children, which wait for it."""
    try:
        with open_store(config):
            pass  # opening it is the check
    except StoreUnavailable:
        pass


# --- the processes ------------------------------------------------------------------------


def run_worker(config: Config, queues: tuple[str, ...], **options: Any) -> int:
    """One worker in this process until it is stopped (or drained, with ``burst``);
    ``options`` are ``Worker``'s."""
    worker = Worker(config, queues, **options)
    on_stop_signals(lambda signum, _frame: worker.request_stop(signal.Signals(signum).name),
                    cold=lambda signum, _frame: worker.request_cold_stop(signal.Signals(signum).name))
    try:
        return worker.run()
    except RowfleetError as exc:  # in a forked child no command line is there to catch it
        return report(exc)


def run_orchestrator(config: Config, fail_unplaceable_after: float | None = None) -> int:
    """The orchestrator in this process until it is stopped: the schema migrated first (a
    server that does not answer yet is waited for), then its sweeps on their timers."""
    return run_until_stopped(partial(migrated_store, config),
                             lambda store, stop: _orchestrator(store, config, fail_unplaceable_after).run(stop))


def _orchestrator(store: Store, config: Config, fail_unplaceable_after: float | None) -> Any:
    # Imported here, as the scheduler below: a worker's process starts without them.
    from rowfleet.services.orchestrator import Orchestrator

    return Orchestrator(store, config, fail_unplaceable_after)


def _scheduler(config: Config, schedules: Sequence["Schedule"], store: Store) -> Any:
    from rowfleet.services.scheduler import Scheduler

    return Scheduler(config, schedules, store)


def run_scheduler(config: Config, schedules: Sequence[Schedule]) -> int:
    """The scheduler in this process until it is stopped; like the other long-running
    processes it waits for the database and its schema first."""
    return run_until_stopped(partial(schema_store, config),
                             lambda store, stop: _scheduler(config, schedules, store).run(stop))


def run_sampler(config: Config, holder: str | None = None) -> int:
    """The host's telemetry sampler in this process until it is stopped; ``holder`` names
    it in the host's sampling lease (default: this process)."""
    from rowfleet.services import sampler  # here: its parsers would slow every other command's start

    stop = sampler.StopSignal()
    on_stop_signals(stop)
    stop.install()
    return sampler.sample_host(config, stop, holder=holder)


def sampler_child(config: Config, stop_stage: int = 0) -> Child:
    """The host's telemetry sampler as a supervised child: it serves the workers, so it
    stops once they are done."""
    return Child("sampler", partial(_sampler_main, config), reports_exits=False, auxiliary=True,
                 stop_stage=stop_stage)


def _sampler_main(config: Config) -> int:
    from rowfleet.services import sampler

    try:
        return run_sampler(config, holder=sampler.holder_name(config.host, os.getppid()))
    except RowfleetError as exc:  # a database no wait repairs: one line; the workers' own exit stops the box
        logging.getLogger("rowfleet.sampler").error("host sampling stopped: %s", exc)
        return exitcodes.USAGE


def supervise(config: Config, children: list[Child]) -> int:
    """Run ``children`` under one supervisor until they are done or it is stopped: worker
    exits are recorded (and their jobs handed back at once), workers the dead-worker sweep
    flagged are killed, and a stop signal stops the children in their stages."""
    def record_exit(pid: int, code: int) -> None:
        with open_store(config) as store:  # opened and closed here: no connection may cross a fork
            for item in store.worker_exited(config.host, pid, code):
                logging.getLogger("rowfleet.supervisor").warning(
                    "job %d of worker child %d: %s at once", item["id"], pid, item["action"])

    def flagged() -> set[int]:
        with open_store(config) as store:
            return store.flagged_workers(config.host)

    supervisor = Supervisor(children, on_exit=record_exit, flagged=flagged, check_every=config.heartbeat,
                            first_delay=config.restart_delay, max_delay=config.restart_delay_max)
    on_stop_signals(supervisor.request_stop, cold=supervisor.request_stop)
    return supervisor.run()


# --- a box's plan ---------------------------------------------------------------------------


def check_queues(queues: Sequence[tuple[str, int]], what: str = "queues") -> tuple[tuple[str, int], ...]:
    """``queues`` as (queue, workers) pairs, each queue a name given once, each count and
    the box's total by the procs rule (as ``worker --procs``); ``what`` names them in a
    refusal.

    >>> check_queues([("default", 1), ("gpu", 2)])
    (('default', 1), ('gpu', 2))
    >>> check_queues([("a", 1), ("a", 2)], "--queue")
    Traceback (most recent call last):
    ...
    rowfleet.errors.ConfigError: --queue 'a' is given twice: give it once, with its number of workers
    >>> check_queues([("a", 200), ("b", 100)], "--queue")
    Traceback (most recent call last):
    ...
    rowfleet.errors.ConfigError: --queue: 300 worker processes in all; a box runs 1 to 256
    """
    checked: dict[str, int] = {}
    for queue, count in queues:
        names.RULES["queue"].check(what, queue)
        PROCS.check(f"{what} {names.shown(queue)}: workers", count)
        if queue in checked:
            raise ConfigError(f"{what} {names.shown(queue)} is given twice: give it once, with its number of workers")
        checked[queue] = count
    total = sum(checked.values())
    if not 1 <= total <= names.MOST_PROCS:
        raise ConfigError(f"{what}: {total} worker processes in all; a box runs 1 to {names.MOST_PROCS}")
    return tuple(checked.items())


@dataclasses.dataclass(frozen=True)
class Workers:
    """The ``count`` worker processes of one ``queue``: ``gpu`` watches their jobs with the
    GPU health watchdog, ``gpu_settings`` routes their claims by model (None: plain claims);
    ``gpu_indexes`` spreads them over those GPUs of the host, in turn (none: all on the
    settings' GPU)."""

    queue: str
    count: int = 1
    gpu: bool = False
    gpu_settings: GpuSettings | None = None
    gpu_indexes: tuple[int, ...] = ()

    def gpu_text(self) -> str | None:
        """Their GPU part of the plan, in words; None for plain workers."""
        if not self.gpu:
            return None
        models = self.gpu_settings.models if self.gpu_settings else ()
        spread = f", GPUs {', '.join(map(str, self.gpu_indexes))}" if len(self.gpu_indexes) > 1 else ""
        return "GPU watchdog" + (f", models {', '.join(models)}" if models else "") + spread

    def settings_of(self, worker: int) -> GpuSettings | None:
        """The GPU settings of its ``worker``-th process: on the next GPU of ``gpu_indexes``."""
        if self.gpu_settings is None or not self.gpu_indexes:
            return self.gpu_settings
        return dataclasses.replace(self.gpu_settings, gpu_index=self.gpu_indexes[worker % len(self.gpu_indexes)])


@dataclasses.dataclass(frozen=True)
class Box:
    """What one box runs under one supervisor: workers per queue (``queues``: a (queue,
    count) pair, or a ``Workers`` of its own kind), the orchestrator (leave it out on the
    second and later boxes of a PostgreSQL fleet), the scheduler when there are
    ``schedules``, the host's telemetry ``sampler``. ``gpu`` and ``gpu_settings`` are the
    kind of the workers a pair gives (a ``Workers`` keeps its own). Checked when built;
    ``queues`` then holds a ``Workers`` per queue."""

    config: Config
    queues: Sequence[tuple[str, int] | Workers] = (("default", 1),)
    schedules: Sequence[Schedule] = ()
    orchestrator: bool = True
    sampler: bool = True
    gpu: bool = False
    gpu_settings: GpuSettings | None = None

    def __post_init__(self) -> None:
        given = [line if isinstance(line, Workers) else Workers(*line, gpu=self.gpu, gpu_settings=self.gpu_settings)
                 for line in self.queues]
        check_queues([(line.queue, line.count) for line in given])
        object.__setattr__(self, "queues", tuple(given))
        object.__setattr__(self, "schedules", tuple(self.schedules))


@dataclasses.dataclass(frozen=True)
class Role:
    """One line of the plan: ``count`` children of ``name`` doing ``what``, or, with
    ``count`` 0, a role left out and why."""

    name: str
    count: int
    what: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def box_plan(box: Box, panel_url: str | None = None) -> list[Role]:
    """What ``box`` starts, one ``Role`` per line; roles left out have count 0 and say why.
    ``panel_url``: where a panel the caller adds serves (None: no panel).

    >>> for role in box_plan(Box(Config(db="jobs.db"), queues=[("default", 2)])):
    ...     print(role.name, role.count, role.what)
    orchestrator 1 migrates the schema, reclaims lapsed leases, dispatches workflow steps, prunes old jobs
    worker 2 queue default
    sampler 1 this host's telemetry (CPU, memory, disks, network, temperatures, GPUs)
    scheduler 0 no schedules: give --schedule FILE, or an --app module with @rowfleet.periodic functions
    panel 0 not asked for: add --panel
    """
    plan: list[Role] = []
    left_out: list[Role] = []
    if box.orchestrator:
        plan.append(Role("orchestrator", 1, "migrates the schema, reclaims lapsed leases, dispatches workflow "
                                            "steps, prunes old jobs"))
    else:
        left_out.append(Role("orchestrator", 0, "--no-orchestrator: " + (
            "on SQLite nothing else reclaims a lapsed lease or dispatches a workflow step"
            if sqlite_path(box.config.db) is not None else
            "another box's orchestrator reclaims leases and dispatches workflow steps")))
    plan += [Role("worker", line.count, f"queue {line.queue}" + (f", {gpu}" if (gpu := line.gpu_text()) else ""))
             for line in box.queues]
    if box.schedules:
        shown = [schedule.name for schedule in box.schedules]
        plan.append(Role("scheduler", 1, f"{len(shown)} schedule(s): {', '.join(shown)}"))
    else:
        left_out.append(Role("scheduler", 0, "no schedules: give --schedule FILE, or an --app module with "
                                             "@rowfleet.periodic functions"))
    if box.sampler:
        plan.append(Role("sampler", 1, "this host's telemetry (CPU, memory, disks, network, temperatures, GPUs)"))
    else:
        left_out.append(Role("sampler", 0, "--no-sampler: this host records no telemetry"))
    if panel_url:
        plan.append(Role("panel", 1, f"the operator panel at {panel_url}"))
    else:
        left_out.append(Role("panel", 0, "not asked for: add --panel"))
    return plan + left_out


def box_children(box: Box, watchers: Sequence[Child] = ()) -> list[Child]:
    """The supervised children of ``box``, each in its stop stage: the feeders (the
    scheduler, stopped first; the orchestrator, stopped after the workers, so the steps
    their last results made due are dispatched), the workers, then the sampler and the
    ``watchers`` (a panel), stopped last."""
    config = box.config
    children = [Child("scheduler", partial(run_scheduler, config, box.schedules), FATAL, reports_exits=False,
                      stop_stage=SCHEDULER_STAGE)] if box.schedules else []
    if box.orchestrator:
        children.append(Child("orchestrator", partial(run_orchestrator, config), FATAL, reports_exits=False,
                              stop_stage=ORCHESTRATOR_STAGE))
    children += [Child("worker", partial(run_worker, config, (line.queue,), gpu=line.gpu,
                                         gpu_settings=line.settings_of(worker)),
                       FATAL, stop_stage=WORKER_STAGE, cold_signal=signal.SIGQUIT)
                 for line in box.queues for worker in range(line.count)]
    if box.sampler:
        children.append(sampler_child(config, stop_stage=WATCHER_STAGE))
    return children + [dataclasses.replace(watcher, stop_stage=WATCHER_STAGE) for watcher in watchers]


def run_box(box: Box, watchers: Sequence[Child] = ()) -> int:
    """Run ``box`` (and its ``watchers``) in this process's children until they are done or
    a stop signal has stopped them in their stages; the supervisor's exit code. With the
    orchestrator, the schema is made or upgraded first, if the database answers."""
    if box.orchestrator:
        migrate_if_answering(box.config)
    return supervise(box.config, box_children(box, watchers))
