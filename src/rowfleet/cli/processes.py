"""The long-running processes' commands: worker (optionally supervised), sampler and
orchestrator. Each parses its flags and calls ``rowfleet.services.runner``, which runs the
process."""

from __future__ import annotations

import argparse
import time
from functools import partial
from typing import Callable

from rowfleet import config as configuration
from rowfleet import exitcodes, tasks
from rowfleet.cli.arguments import Parser, allow_module_flag, app_flag, gpu_flags, gpu_settings_of, positive_float
from rowfleet.cli.arguments import sample_path_flag, trusted, typed, with_sample_paths
from rowfleet.cli.output import print_json
from rowfleet.errors import ConfigError, Conflict
from rowfleet.gpu.sidecar import SidecarSpec
from rowfleet.services import runner
from rowfleet.services.supervisor import workers
from rowfleet.store import open_store
from rowfleet.worker.loop import check_prefetch


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("worker", cmd_worker, "claim and run jobs of one queue, or of several in order",
                  reads=("database", "connection", "worker", "watchdog", "supervisor", "sampler"))
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
    sub.add_argument("--batch", type=typed("prefetch"), default=1, metavar="N",
                     help="claim up to N due jobs at once and write their outcomes together, in one commit "
                          "with the next claim (default 1: a commit per job); an outcome waits about 10 ms at most")
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
                  "temperatures, power, GPUs) in the database, for a box without a supervised worker",
                  reads=("database", "connection", "sampler"))
    sub.add_argument("--every", type=positive_float, default=None, metavar="SECONDS",
                     help="seconds between readings (the --sample-every setting; default 2)")
    sub.add_argument("--once", action="store_true",
                     help="take two readings --every apart, write the second, print its readings, exit")
    sample_path_flag(sub)

    sub = command("orchestrator", cmd_orchestrator, "migrate, then reclaim lapsed leases, flag "
                  "silent workers and prune old jobs on a timer", reads=("database", "connection", "orchestrator"))
    sub.add_argument("--once", action="store_true", help="one sweep, print what it did, exit")
    sub.add_argument("--fail-unplaceable-after", type=positive_float, default=None, metavar="SECONDS",
                     help="fail a queued model job that no GPU worker could hold for longer than SECONDS, "
                          "naming the reason (default: never; it stays queued, flagged)")


def cmd_worker(args: argparse.Namespace, config: configuration.Config) -> int:
    config = trusted(config, args)
    tasks.import_apps(args.app)
    queues = tuple(dict.fromkeys(args.queue or ["default"]))  # each a name, '*' too refused: no queue to serve
    gpu_settings = gpu_settings_of(args)
    sidecar = _sidecar(args)
    check_prefetch(max(args.prefetch, args.batch), routed=gpu_settings is not None,
                   sidecar=sidecar is not None)  # before a fork
    one_worker = partial(runner.run_worker, config, queues, burst=args.burst, gpu=args.gpu, gpu_settings=gpu_settings,
                         sidecar=sidecar, prefetch=args.prefetch, batch=args.batch)
    if args.procs is None:
        return one_worker()
    runner.refuse_broken_database(config)  # one line now, not one per child and its supervisor's notes
    children = workers(args.procs, one_worker, fatal_codes=runner.FATAL)
    if not args.no_sampler:
        children.append(runner.sampler_child(with_sample_paths(config, args)))
    return runner.supervise(config, children)


def cmd_sampler(args: argparse.Namespace, config: configuration.Config) -> int:
    config = with_sample_paths(config, args)
    if args.every is not None:
        config = config.replace(sample_every=args.every)
    if args.once:
        return _sample_once(config)
    return runner.run_sampler(config)


def _sample_once(config: configuration.Config) -> int:
    """Two readings ``sample_every`` apart (the first is the base of the rates); the second
    written and printed."""
    from rowfleet.services import sampler  # here: its parsers would slow every other command's start

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


def _sidecar(args: argparse.Namespace) -> SidecarSpec | None:
    if args.sidecar is None:
        if args.sidecar_health is not None or args.sidecar_idle is not None:
            raise ConfigError("--sidecar-health and --sidecar-idle need --sidecar CMD")
        return None
    return SidecarSpec(args.sidecar, health_url=args.sidecar_health, idle_ttl=args.sidecar_idle)


def cmd_orchestrator(args: argparse.Namespace, config: configuration.Config) -> int:
    if args.once:  # a one-shot command reports a database it cannot reach
        with open_store(config, create=True) as store:
            version = store.migrate()
            from rowfleet.services.orchestrator import Orchestrator  # here: a worker's start skips it

            sweeps = Orchestrator(store, config, args.fail_unplaceable_after)
            print_json({"schema_version": version, **sweeps.run_once_settled().to_dict()})
        return exitcodes.OK
    return runner.run_orchestrator(config, args.fail_unplaceable_after)
