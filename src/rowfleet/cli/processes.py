"""The long-running processes: worker (optionally supervised) and orchestrator."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any, Callable

from rowfleet import config as configuration
from rowfleet import exitcodes, names, tasks, waiting
from rowfleet.cli.arguments import Parser, allow_module_flag, positive_int, trusted
from rowfleet.cli.output import print_json, report
from rowfleet.errors import ConfigError, DatabaseUnreachable, RowfleetError
from rowfleet.orchestrator import Orchestrator
from rowfleet.store import Store, open_store
from rowfleet.supervisor import Supervisor
from rowfleet.worker import Worker

log = logging.getLogger("rowfleet.orchestrator")


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("worker", cmd_worker, "claim and run jobs of one queue")
    sub.add_argument("--queue", default="default")
    sub.add_argument("--app", action="append", default=[], metavar="MODULE",
                     help="import this module so its @rowfleet.task handlers register (repeatable)")
    allow_module_flag(sub)
    sub.add_argument("--procs", type=positive_int, default=None,
                     help="worker processes under a supervising parent that restarts them (1 for one "
                          "supervised worker; without it the worker runs in this process)")
    sub.add_argument("--gpu", action="store_true",
                     help="its jobs use a GPU: watch them with the GPU health watchdog (exit 78)")
    sub.add_argument("--burst", action="store_true", help="drain what is due, then exit")

    sub = command("orchestrator", cmd_orchestrator, "migrate, then reclaim lapsed leases, flag "
                  "silent workers and prune old jobs on a timer")
    sub.add_argument("--once", action="store_true", help="one sweep, print what it did, exit")


def cmd_worker(args: argparse.Namespace, config: configuration.Config) -> int:
    config = trusted(config, args)
    tasks.import_apps(args.app)
    names.check_name("--queue", args.queue)  # '*' too: a switch's wildcard names no queue to serve

    def one_worker() -> int:
        worker = Worker(config, args.queue, burst=args.burst, gpu=args.gpu)
        on_stop_signals(lambda *_: worker.request_stop())
        try:
            return worker.run()
        except RowfleetError as exc:  # in a forked child main() is not there to catch it
            return report(exc)

    if args.procs is None:
        return one_worker()

    def record_exit(pid: int, code: int) -> None:
        with open_store(config) as store:  # opened and closed here: no connection may cross a fork
            for item in store.worker_exited(config.host, pid, code):
                logging.getLogger("rowfleet.supervisor").warning(
                    "job %d of worker child %d: %s at once", item["id"], pid, item["action"])

    def flagged() -> set[int]:
        with open_store(config) as store:
            return store.flagged_workers(config.host)

    supervisor = Supervisor(args.procs, one_worker, fatal_codes={exitcodes.USAGE}, on_exit=record_exit,
                            flagged=flagged, check_every=config.heartbeat, first_delay=config.restart_delay,
                            max_delay=config.restart_delay_max)
    on_stop_signals(supervisor.request_stop)
    return supervisor.run()


def cmd_orchestrator(args: argparse.Namespace, config: configuration.Config) -> int:
    if args.once:  # a one-shot command reports a database it cannot reach
        with open_store(config, create=True) as store:
            version = store.migrate()
            print_json({"schema_version": version, **Orchestrator(store, config).run_once().to_dict()})
        return exitcodes.OK
    stop = threading.Event()
    on_stop_signals(lambda *_: stop.set())
    store = _migrated_store(config, stop)
    if store is None:
        return exitcodes.OK
    with store:
        Orchestrator(store, config).run(stop)
    return exitcodes.OK


def _migrated_store(config: configuration.Config, stop: threading.Event) -> Store | None:
    """The orchestrator's store, its schema migrated. A server that does not answer yet (down,
    restarting) is waited for, as workers wait, until ``stop``; None if stopped first."""
    return waiting.open_when_ready(lambda: open_store(config, create=True), stop, config.poll, log,
                                   ready=lambda store: store.migrate(), transient=(DatabaseUnreachable,))



def on_stop_signals(handler: Callable[..., Any]) -> None:
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
