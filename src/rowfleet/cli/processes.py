"""The long-running processes: worker (optionally supervised) and orchestrator."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from typing import Any, Callable

from functools import partial

from rowfleet import config as configuration
from rowfleet import exitcodes, models, tasks
from rowfleet.cli.arguments import Parser, allow_module_flag, app_flag, positive_float, trusted
from rowfleet.cli.arguments import sample_path_flag, typed, with_sample_paths
from rowfleet.cli.output import print_json, report
from rowfleet.errors import ConfigError, Conflict, DatabaseUnreachable, DiskFull, RowfleetError, StoreUnavailable
from rowfleet.gpu import routing
from rowfleet.gpu.gpu_worker import GpuSettings, model_list
from rowfleet.gpu.sidecar import SidecarSpec
from rowfleet.services.orchestrator import Orchestrator
from rowfleet.services.supervisor import Child, Supervisor, workers
from rowfleet.store import Store, open_store
from rowfleet.store import waiting
from rowfleet.worker.loop import Worker, check_prefetch

log = logging.getLogger("rowfleet.orchestrator")

# The flags that make a GPU worker route its claims; each needs --gpu and a model to load.
ROUTING_FLAGS = ("models", "vram_mb", "gpu_index", "lane", "host_priority", "idle_unload")


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("worker", cmd_worker, "claim and run jobs of one queue, or of several in order")
    sub.add_argument("--queue", action="append", default=None, metavar="QUEUE", type=typed("queue"),
                     help="the queue to serve (default: default); repeat it to serve several in order: "
                          "the first with a due job wins")
    app_flag(sub, "import this module so its @rowfleet.task handlers register (repeatable)")
    allow_module_flag(sub)
    sub.add_argument("--procs", type=typed("procs"), default=None,
                     help="worker processes under a supervising parent that restarts them (1 for one "
                          "supervised worker; without it the worker runs in this process)")
    sub.add_argument("--gpu", action="store_true",
                     help="its jobs use a GPU: watch them with the GPU health watchdog (exit 78)")
    sub.add_argument("--burst", action="store_true", help="drain what is due, then exit")
    sub.add_argument("--prefetch", type=typed("prefetch"), default=1, metavar="N",
                     help="claim up to N due jobs at once and run them one at a time (default 1); for many "
                          "short jobs, not for GPU or long ones (see the README)")
    sub.add_argument("--no-sampler", action="store_true",
                     help="with --procs: run no telemetry sampler for this host (by default the supervisor "
                          "runs one, which stands by while another sampler of the host writes)")
    sample_path_flag(sub)
    gpu_flags(sub)
    side = sub.add_argument_group("an inference server the worker owns")
    side.add_argument("--sidecar", metavar="CMD", help="start CMD (in its own process group) before a job, "
                                                      "e.g. 'vllm serve MODEL --port 8000'")
    side.add_argument("--sidecar-health", metavar="URL", help="wait until URL answers 2xx before the job runs")
    side.add_argument("--sidecar-idle", type=positive_float, default=None, metavar="SECONDS",
                      help="stop the sidecar after this long without a job (default: keep it while the worker lives)")

    sub = command("sampler", cmd_sampler, "record this host's telemetry (CPU, memory, disks, network, "
                  "temperatures, power, GPUs) in the database, for a box without a supervised worker")
    sub.add_argument("--every", type=positive_float, default=None, metavar="SECONDS",
                     help="seconds between readings (the --sample-every setting; default 2)")
    sub.add_argument("--once", action="store_true",
                     help="take two readings --every apart, write the second, print its readings, exit")
    sample_path_flag(sub)

    sub = command("orchestrator", cmd_orchestrator, "migrate, then reclaim lapsed leases, flag "
                  "silent workers and prune old jobs on a timer")
    sub.add_argument("--once", action="store_true", help="one sweep, print what it did, exit")
    sub.add_argument("--fail-unplaceable-after", type=positive_float, default=None, metavar="SECONDS",
                     help="fail a queued model job that no GPU worker could hold for longer than SECONDS, "
                          "naming the reason (default: never; it stays queued, flagged)")


def gpu_flags(sub: Parser) -> None:
    """A GPU worker's routing flags (``ROUTING_FLAGS``), read by ``gpu_settings_of``."""
    gpu = sub.add_argument_group("GPU workers (with --gpu: claims routed by model)")
    gpu.add_argument("--models", metavar="A,B", default=None,
                     help="the models this worker may load (default: every model the --app modules register)")
    gpu.add_argument("--vram-mb", type=typed("vram mb"), default=None, help="GPU memory to claim by, MiB (default: nvidia-smi's total)")
    gpu.add_argument("--gpu-index", type=typed("gpu index"), default=None, help="which GPU of the host (default 0)")
    gpu.add_argument("--lane", choices=routing.LANES, default=None,
                     help="any (default), model (only jobs that need a model) or plain (only jobs that need none)")
    gpu.add_argument("--host-priority", type=typed("host priority"), default=None,
                     help="negative: an overflow box, which takes the newest work first (default 0)")
    gpu.add_argument("--idle-unload", type=positive_float, default=None, metavar="SECONDS",
                     help="unload the warm model after this long without a job (default: never)")


def cmd_worker(args: argparse.Namespace, config: configuration.Config) -> int:
    config = trusted(config, args)
    tasks.import_apps(args.app)
    queues = tuple(dict.fromkeys(args.queue or ["default"]))  # each a name, '*' too refused: no queue to serve
    gpu_settings = gpu_settings_of(args)
    sidecar = _sidecar(args)
    check_prefetch(args.prefetch, routed=gpu_settings is not None, sidecar=sidecar is not None)  # before a fork
    one_worker = partial(run_worker, config, queues, burst=args.burst, gpu=args.gpu, gpu_settings=gpu_settings,
                         sidecar=sidecar, prefetch=args.prefetch)
    if args.procs is None:
        return one_worker()
    refuse_broken_database(config)  # one line now, not one per child and its supervisor's notes
    children = workers(args.procs, one_worker, fatal_codes=frozenset({exitcodes.USAGE}))
    if not args.no_sampler:
        children.append(sampler_child(with_sample_paths(config, args)))
    return supervise(config, children)


def refuse_broken_database(config: configuration.Config) -> None:
    """Raise ``DatabaseBroken`` where no wait can help (another program's database, say)
    before any child is forked; a database that is only not there yet, or on a disk with no
    room (a ``StoreUnavailable``), is left to the children, which wait for it."""
    try:
        with open_store(config):
            pass  # opening it is the check
    except StoreUnavailable:
        pass


def run_worker(config: configuration.Config, queues: tuple[str, ...], **options: Any) -> int:
    """One worker in this process until it is stopped (or drained, with ``burst``)."""
    worker = Worker(config, queues, **options)
    on_stop_signals(lambda *_: worker.request_stop())
    try:
        return worker.run()
    except RowfleetError as exc:  # in a forked child main() is not there to catch it
        return report(exc)


def sampler_child(config: configuration.Config, stop_stage: int = 0) -> Child:
    """The host's telemetry sampler as a supervised child: it serves the workers, so it
    stops once they are done."""
    return Child("sampler", partial(_sampler_child, config), reports_exits=False, auxiliary=True,
                 stop_stage=stop_stage)


def supervise(config: configuration.Config, children: list[Child]) -> int:
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
    on_stop_signals(supervisor.request_stop)
    return supervisor.run()


def _sampler_child(config: configuration.Config) -> int:
    from rowfleet.services import sampler  # here: its parsers would slow every other command's start

    signal = sampler.StopSignal()
    on_stop_signals(signal)
    try:
        return sampler.sample_host(config, signal, holder=sampler.holder_name(config.host, os.getppid()))
    except RowfleetError as exc:  # a database no wait repairs: one line; the workers' own exit stops the box
        logging.getLogger("rowfleet.sampler").error("host sampling stopped: %s", exc)
        return exitcodes.USAGE


def cmd_sampler(args: argparse.Namespace, config: configuration.Config) -> int:
    from rowfleet.services import sampler  # here: its parsers would slow every other command's start

    config = with_sample_paths(config, args)
    if args.every is not None:
        config = config.replace(sample_every=args.every)
    if args.once:
        return _sample_once(config)
    signal = sampler.StopSignal()
    on_stop_signals(signal)
    return sampler.sample_host(config, signal)


def _sample_once(config: configuration.Config) -> int:
    """Two readings ``sample_every`` apart (the first is the base of the rates); the second
    written and printed."""
    from rowfleet.services import sampler

    with open_store(config) as store:
        store.require_schema()
        host = sampler.Sampler(store, config, paths=sampler.disk_paths(config))
        try:
            host.run_once()
            time.sleep(config.sample_every)
            turn = host.run_once()
        finally:
            host.close()
        if turn.standby:
            raise Conflict(f"another sampler of host {config.host!r} is writing its samples; this one wrote nothing")
        print_json({"host": config.host, "at": turn.at, "readings": host.last_readings})
    return exitcodes.OK


def gpu_settings_of(args: argparse.Namespace) -> GpuSettings | None:
    """A GPU worker's settings: ``--gpu`` and at least one model to load (``--models``, else
    those the ``--app`` modules register); None for a worker that routes nothing (it claims
    as before). A routing flag without them is a usage error."""
    given = [f"--{name.replace('_', '-')}" for name in ROUTING_FLAGS if getattr(args, name) is not None]
    if not args.gpu:
        if given:
            raise ConfigError(f"{', '.join(given)} {_need(given)} --gpu: they route a GPU worker's claims")
        return None
    chosen = model_list(args.models, [model.id for model in models.registered_models()])
    if not chosen:
        if given:
            raise ConfigError(f"{', '.join(given)} {_need(given)} models to load: register them with @rowfleet.model "
                              f"in an --app module")
        return None
    return GpuSettings(chosen, gpu_index=args.gpu_index or 0, vram_mb=args.vram_mb, lane=args.lane or routing.ANY,
                       host_priority=args.host_priority or 0, idle_unload=args.idle_unload)


def _sidecar(args: argparse.Namespace) -> SidecarSpec | None:
    if args.sidecar is None:
        if args.sidecar_health is not None or args.sidecar_idle is not None:
            raise ConfigError("--sidecar-health and --sidecar-idle need --sidecar CMD")
        return None
    return SidecarSpec(args.sidecar, health_url=args.sidecar_health, idle_ttl=args.sidecar_idle)


def _need(flags: list[str]) -> str:
    return "needs" if len(flags) == 1 else "need"


def cmd_orchestrator(args: argparse.Namespace, config: configuration.Config) -> int:
    if args.once:  # a one-shot command reports a database it cannot reach
        with open_store(config, create=True) as store:
            version = store.migrate()
            sweeps = Orchestrator(store, config, args.fail_unplaceable_after)
            print_json({"schema_version": version, **sweeps.run_once_settled().to_dict()})
        return exitcodes.OK
    return run_orchestrator(config, args.fail_unplaceable_after)


def run_orchestrator(config: configuration.Config, fail_unplaceable_after: float | None = None) -> int:
    """The orchestrator in this process until it is stopped: the schema migrated first (a
    server that does not answer yet is waited for), then its sweeps on their timers."""
    return run_until_stopped(lambda stop: _migrated_store(config, stop),
                             lambda store, stop: Orchestrator(store, config, fail_unplaceable_after).run(stop))


def run_until_stopped(ready_store: Callable[[threading.Event], Store | None],
                      body: Callable[[Store, threading.Event], None]) -> int:
    """A long-running process's frame: stop signals set ``stop``; ``ready_store(stop)``
    waits for the database (None: stopped first), then ``body`` runs on it until ``stop``.
    The exit code; a database no wait repairs is one line and exit 2, here too, since in a
    forked child main() is not there to catch it."""
    stop = threading.Event()
    on_stop_signals(lambda *_: stop.set())
    try:
        store = ready_store(stop)
        if store is None:
            return exitcodes.OK
        with store:
            body(store, stop)
    except RowfleetError as exc:
        return report(exc)
    return exitcodes.OK


def _migrated_store(config: configuration.Config, stop: threading.Event) -> Store | None:
    """The orchestrator's store, its schema migrated. A server that does not answer yet (down,
    restarting) or a disk with no room is waited for, as workers wait, until ``stop``; None if
    stopped first."""
    return waiting.open_when_ready(lambda: open_store(config, create=True), stop, config.poll, log,
                                   ready=lambda store: store.migrate(), transient=(DatabaseUnreachable, DiskFull))



def on_stop_signals(handler: Callable[..., Any]) -> None:
    """``handler`` for SIGTERM, and for SIGINT unless this process was started ignoring it
    (a child of a staged supervisor, as under ``rowfleet up``, or a shell's background job):
    Ctrl-C is then someone else's to pass on."""
    signal.signal(signal.SIGTERM, handler)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, handler)
