"""``rowfleet up``: a whole box under one supervisor, in one command.

What a box runs, each role a supervised child with the restart policy workers have: the
orchestrator (unless ``--no-orchestrator``: the second and later boxes of a PostgreSQL
fleet leave it to the first), ``N`` workers per ``--queue Q[:N]``, the scheduler when there
are schedules (``--schedule FILE`` or ``@rowfleet.periodic`` in an ``--app`` module), the
host's telemetry sampler (unless ``--no-sampler``) and the panel with ``--panel``.
``--check`` prints that plan, and why each role starts or not, and starts nothing.

A stop (SIGTERM, or Ctrl-C) goes in stages, each once the one before has exited: the
scheduler (no new slots), the workers (each finishes its job in hand), the orchestrator
(which dispatched the workflow steps their results made due), then the sampler and the
panel, so the operator watches the drain to its end. The panel's socket is bound before any
child starts: a taken port is one line and exit 2, not a child dying again and again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import threading
from functools import partial
from typing import Any, Callable, Sequence

from rowfleet import config as configuration
from rowfleet import exitcodes, names
from rowfleet.cli.arguments import Parser, allow_module_flag, app_flag, metrics_token_flag, sample_path_flag, trusted
from rowfleet.cli.arguments import with_sample_paths
from rowfleet.cli.output import table
from rowfleet.cli.panel import DEFAULT_BIND, DEFAULT_PORT, TOKEN_ENV, allow_host_flag, port_number, with_allowed_hosts
from rowfleet.cli.processes import (gpu_flags, gpu_settings_of, on_stop_signals, run_orchestrator, run_worker,
                                    sampler_child, supervise)
from rowfleet.cli.schedules import run_scheduler, vetted_schedules
from rowfleet.errors import ConfigError, DatabaseUnreachable, DiskFull
from rowfleet.schedule import Schedule
from rowfleet.services.supervisor import Child
from rowfleet.store import open_store, sqlite_path

log = logging.getLogger("rowfleet.up")

# Stop stages: what feeds work stops first, what watches the drain last.
SCHEDULER_STAGE, WORKER_STAGE, ORCHESTRATOR_STAGE, WATCHER_STAGE = range(4)
PROCS = names.RULES["procs"]  # the workers of a queue, and of the box: one process each
FATAL = frozenset({exitcodes.USAGE})  # bad configuration: restarting cannot help, so up stops


@dataclasses.dataclass(frozen=True)
class PanelAsk:
    """The panel ``--panel`` asked for, its flags checked."""

    bind: str
    port: int
    token: str | None
    read_only: bool

    @property
    def shown(self) -> str:
        """Where it serves, as the plan shows it."""
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return f"http://{host}:{self.port}/" + (" (a free port)" if self.port == 0 else "") + (
            " (read-only)" if self.read_only else "")


@dataclasses.dataclass(frozen=True)
class Role:
    """One line of the plan: ``count`` children of ``name`` doing ``what``, or, with
    ``count`` 0, a role left out and why."""

    name: str
    count: int
    what: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("up", cmd_up, "run this box's whole share of the fleet under one supervisor: orchestrator, "
                  "workers, scheduler, telemetry sampler and, with --panel, the panel")
    sub.add_argument("--queue", action="append", default=None, metavar="Q[:N]",
                     help="N worker processes for queue Q (N default 1; repeatable; default: default:1)")
    app_flag(sub, "import this module: its @rowfleet.task handlers, models and @rowfleet.periodic "
                  "schedules register (repeatable)")
    allow_module_flag(sub)
    sub.add_argument("--gpu", action="store_true",
                     help="the workers' jobs use a GPU: watch them with the GPU health watchdog (exit 78)")
    sub.add_argument("--schedule", action="append", default=[], metavar="FILE",
                     help="a JSON file of schedules for the scheduler (repeatable)")
    sub.add_argument("--no-orchestrator", action="store_true",
                     help="run no orchestrator: for the second and later boxes of a PostgreSQL fleet")
    sub.add_argument("--no-sampler", action="store_true", help="run no telemetry sampler for this host")
    sample_path_flag(sub)
    panel = sub.add_argument_group("the panel")
    panel.add_argument("--panel", action="store_true", help="serve the operator panel too")
    panel.add_argument("--bind", default=None, metavar="ADDRESS",
                       help=f"with --panel: the address (default {DEFAULT_BIND}; any other needs a token)")
    panel.add_argument("--port", type=port_number, default=None,
                       help=f"with --panel: the port (default {DEFAULT_PORT}; 0: any free one)")
    metrics_token_flag(panel, "panel_token")
    allow_host_flag(panel)
    panel.add_argument("--read-only", action="store_true", help="with --panel: show everything, change nothing")
    sub.add_argument("--check", action="store_true", help="print what would start and why, start nothing")
    sub.add_argument("--json", action="store_true", help="with --check: the plan as JSON")
    gpu_flags(sub)


def queue_counts(specs: Sequence[str]) -> list[tuple[str, int]]:
    """``--queue Q[:N]`` values as (queue, workers), in the order given; N and the workers
    of all the queues together by the procs rule (as ``worker --procs``).

    >>> queue_counts(["default", "gpu:2"])
    [('default', 1), ('gpu', 2)]
    >>> queue_counts(["gpu:0"])
    Traceback (most recent call last):
    ...
    rowfleet.errors.ConfigError: --queue 'gpu:0': N must be a whole number from 1 to 256, in ASCII digits
    >>> queue_counts(["a", "a:2"])
    Traceback (most recent call last):
    ...
    rowfleet.errors.ConfigError: --queue 'a' is given twice: give it once, with its number of workers
    >>> queue_counts(["a:200", "b:100"])
    Traceback (most recent call last):
    ...
    rowfleet.errors.ConfigError: --queue: 300 worker processes in all; a box runs 1 to 256
    """
    counts: dict[str, int] = {}
    for spec in specs:
        queue, _, count = spec.rpartition(":") if ":" in spec else (spec, "", "1")
        try:
            workers = PROCS.parse("N", count)
        except ConfigError:
            raise ConfigError(f"--queue {names.shown(spec)}: N must be {PROCS.requirement}") from None
        names.RULES["queue"].check("--queue", queue)
        if queue in counts:
            raise ConfigError(f"--queue {names.shown(queue)} is given twice: give it once, with its number of workers")
        counts[queue] = workers
    total = sum(counts.values())
    if total > names.MOST_PROCS:
        raise ConfigError(f"--queue: {total} worker processes in all; a box runs 1 to {names.MOST_PROCS}")
    return list(counts.items())


def box_plan(queues: Sequence[tuple[str, int]], *, orchestrator: bool, schedules: Sequence[str], sampler: bool,
             panel_url: str | None, gpu: str | None, sqlite: bool) -> list[Role]:
    """What ``up`` starts, one ``Role`` per line; roles left out have count 0 and say why.

    >>> for role in box_plan([("default", 2)], orchestrator=True, schedules=[], sampler=True, panel_url=None,
    ...                      gpu=None, sqlite=True):
    ...     print(role.name, role.count, role.what)
    orchestrator 1 migrates the schema, reclaims lapsed leases, dispatches workflow steps, prunes old jobs
    worker 2 queue default
    sampler 1 this host's telemetry (CPU, memory, disks, network, temperatures, GPUs)
    scheduler 0 no schedules: give --schedule FILE, or an --app module with @rowfleet.periodic functions
    panel 0 not asked for: add --panel
    """
    plan: list[Role] = []
    left_out: list[Role] = []
    if orchestrator:
        plan.append(Role("orchestrator", 1, "migrates the schema, reclaims lapsed leases, dispatches workflow "
                                            "steps, prunes old jobs"))
    else:
        left_out.append(Role("orchestrator", 0, "--no-orchestrator: " + (
            "on SQLite nothing else reclaims a lapsed lease or dispatches a workflow step" if sqlite else
            "another box's orchestrator reclaims leases and dispatches workflow steps")))
    plan += [Role("worker", count, f"queue {queue}" + (f", {gpu}" if gpu else "")) for queue, count in queues]
    if schedules:
        plan.append(Role("scheduler", 1, f"{len(schedules)} schedule(s): {', '.join(schedules)}"))
    else:
        left_out.append(Role("scheduler", 0, "no schedules: give --schedule FILE, or an --app module with "
                                             "@rowfleet.periodic functions"))
    if sampler:
        plan.append(Role("sampler", 1, "this host's telemetry (CPU, memory, disks, network, temperatures, GPUs)"))
    else:
        left_out.append(Role("sampler", 0, "--no-sampler: this host records no telemetry"))
    if panel_url:
        plan.append(Role("panel", 1, f"the operator panel at {panel_url}"))
    else:
        left_out.append(Role("panel", 0, "not asked for: add --panel"))
    return plan + left_out


def render_plan(plan: Sequence[Role], config: configuration.Config) -> str:
    """The plan as ``--check`` prints it."""
    started = [[role.name, role.count, role.what] for role in plan if role.count]
    left_out = [[role.name, role.what] for role in plan if not role.count]
    path = sqlite_path(config.db)
    database = os.path.abspath(path) if path else configuration.redact_url(config.db)
    lines = [f"rowfleet up would start on host {config.host} (database {database}, "
             f"project {json.dumps(config.project)}):", table(["role", "procs", "what"], started)]
    if left_out:
        lines += ["", "left out:", table(["role", "why"], left_out)]
    lines += ["", "on SIGTERM or Ctrl-C it stops the scheduler, then the workers (each finishes its job), "
                  "then the orchestrator, then the sampler and the panel"]
    return "\n".join(lines)


def cmd_up(args: argparse.Namespace, config: configuration.Config) -> int:
    if args.json and not args.check:
        raise ConfigError("--json goes with --check: a running box logs, it prints no JSON")
    config = with_allowed_hosts(trusted(config, args), args)
    queues = queue_counts(args.queue or ["default"])
    schedules = vetted_schedules(args.schedule, args.app, config.allow_modules)  # imports the --app modules
    gpu = gpu_settings_of(args)
    panel = _panel_request(args, config)
    plan = box_plan(queues, orchestrator=not args.no_orchestrator, schedules=[s.name for s in schedules],
                    sampler=not args.no_sampler, panel_url=panel.shown if panel else None,
                    sqlite=sqlite_path(config.db) is not None,
                    gpu=("GPU watchdog" + (f", models {', '.join(gpu.models)}" if gpu else "")) if args.gpu else None)
    if args.check:
        print(json.dumps([role.to_dict() for role in plan], indent=2) if args.json else render_plan(plan, config))
        return exitcodes.OK
    watchers = [sampler_child(with_sample_paths(config, args), stop_stage=WATCHER_STAGE)] if not args.no_sampler else []
    if panel:
        watchers.append(_panel_child(config, panel, args.schedule))  # binds: a taken port stops us here
    if not args.no_orchestrator:
        _migrate_if_answering(config)
    workers = [Child("worker", partial(run_worker, config, (queue,), gpu=args.gpu, gpu_settings=gpu), FATAL,
                     stop_stage=WORKER_STAGE) for queue, count in queues for _ in range(count)]
    return supervise(config, _feeders(config, schedules, orchestrator=not args.no_orchestrator) + workers + watchers)


def _feeders(config: configuration.Config, schedules: list[Schedule], *, orchestrator: bool) -> list[Child]:
    """The children that make work due: the scheduler (stopped first) and the orchestrator
    (stopped after the workers, so the steps their last results made due are dispatched)."""
    children = [Child("scheduler", partial(run_scheduler, config, schedules), FATAL, reports_exits=False,
                      stop_stage=SCHEDULER_STAGE)] if schedules else []
    if orchestrator:
        children.append(Child("orchestrator", partial(run_orchestrator, config), FATAL, reports_exits=False,
                              stop_stage=ORCHESTRATOR_STAGE))
    return children


def _migrate_if_answering(config: configuration.Config) -> None:
    """Make or upgrade the schema before any child starts, so that a fresh box's workers
    find it at once; a server that does not answer yet, or a disk with no room, is left to the
    orchestrator child, which waits for it. The connection is closed before the first fork."""
    try:
        with open_store(config, create=True) as store:
            store.migrate()
    except DatabaseUnreachable as exc:
        log.warning("the database does not answer yet (%s): the orchestrator will migrate it once it does", exc)
    except DiskFull as exc:
        log.warning("%s: the orchestrator will migrate it once there is room", exc)


def _panel_request(args: argparse.Namespace, config: configuration.Config) -> PanelAsk | None:
    """The panel asked for, checked (a token beyond loopback); None without ``--panel``."""
    from rowfleet.services import webserver
    from rowfleet.panel import server

    given = [flag for flag, value in (("--bind", args.bind), ("--port", args.port), ("--token", args.token),
                                      ("--read-only", args.read_only or None), ("--allow-host", args.allowed_hosts))
             if value is not None]
    if not args.panel:
        if given:
            raise ConfigError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --panel")
        return None
    bind = DEFAULT_BIND if args.bind is None else args.bind
    token = server.check_bind(bind, webserver.chosen_token(args.token, TOKEN_ENV, config.panel_token))
    return PanelAsk(bind, DEFAULT_PORT if args.port is None else args.port, token, args.read_only)


def _panel_child(config: configuration.Config, panel: PanelAsk, schedule_files: Sequence[str]) -> Child:
    """The panel as a child, its socket bound here, before any fork."""
    from rowfleet.panel import server
    from rowfleet.panel.pages import schedules

    schedules.SCHEDULE_FILES = tuple(schedule_files)  # read per request: a bad file is one line on the page
    made = server.make_server(config, panel.bind, panel.port, panel.token, read_only=panel.read_only)

    def serve() -> int:
        stop = threading.Event()
        on_stop_signals(lambda *_: stop.set())
        server.serve_made(made, stop, lambda url: print(f"panel at {url}", flush=True))
        return exitcodes.OK

    return Child("panel", serve, FATAL, reports_exits=False, stop_stage=WATCHER_STAGE)
