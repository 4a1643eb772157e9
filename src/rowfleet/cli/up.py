"""``rowfleet up``: a whole box under one supervisor, in one command.

What a box runs, each role a supervised child with the restart policy workers have: the
orchestrator (unless ``--no-orchestrator``: the second and later boxes of a PostgreSQL
fleet leave it to the first), ``N`` workers per ``--queue Q[:N[:OPTIONS]]`` (OPTIONS: that
queue's workers' own kind, ``gpu,models=a+b``; without them, the box-wide ``--gpu`` and
routing flags), the scheduler when there
are schedules (``--schedule FILE`` or ``@rowfleet.periodic`` in an ``--app`` module), the
host's telemetry sampler (unless ``--no-sampler``) and the panel with ``--panel``.
``--check`` prints that plan, and why each role starts or not, and starts nothing.

The box itself is ``rowfleet.services.runner``'s: this command reads the flags into a
``runner.Box``, prints ``runner.box_plan`` with ``--check``, and otherwise hands the box to
``runner.run_box`` with the panel as a watcher, which stops in the last stage, after the
workers' drain (see the runner for the stop stages). The panel's socket is bound before any
child starts: a taken port is one line and exit 2, not a child dying again and again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import Callable, Sequence

from rowfleet import config as configuration
from rowfleet import exitcodes, names
from rowfleet.cli.arguments import (PANEL_BIND, PANEL_PORT, PANEL_TOKEN_ENV, ROUTING_FLAGS, Parser, allow_host_flag,
                                    allow_module_flag, app_flag, gpu_flags, gpu_settings_of, metrics_token_flag,
                                    port_number, routing_options, sample_path_flag, trusted, vetted_schedules,
                                    with_allowed_hosts, with_sample_paths)
from rowfleet.cli.output import table
from rowfleet.errors import ConfigError
from rowfleet.services import runner
from rowfleet.services.runner import Box, Role, Workers
from rowfleet.services.supervisor import Child
from rowfleet.store import sqlite_path


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


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("up", cmd_up, "run this box's whole share of the fleet under one supervisor: orchestrator, "
                  "workers, scheduler, telemetry sampler and, with --panel, the panel",
                  reads=("database", "connection", "worker", "watchdog", "supervisor", "sampler", "orchestrator",
                         "scheduler", "telemetry", "panel"))
    sub.add_argument("--queue", action="append", default=None, metavar="Q[:N[:OPTIONS]]",
                     help="N worker processes for queue Q (N default 1; repeatable; default: default:1); OPTIONS "
                          "give that queue's workers their own kind, as gpu,models=a+b,vram-mb=20000 (gpu and the "
                          "routing flags below, + between models); without OPTIONS a queue's workers take the "
                          "box-wide --gpu and routing flags")
    app_flag(sub, "import this module: its @rowfleet.task handlers, models and @rowfleet.periodic "
                  "schedules register (repeatable)")
    allow_module_flag(sub)
    sub.add_argument("--gpu", action="store_true",
                     help="the workers' jobs use a GPU: watch them with the GPU health watchdog (exit 78); for "
                          "every queue that gives no OPTIONS of its own")
    sub.add_argument("--schedule", action="append", default=[], metavar="FILE",
                     help="a JSON file of schedules for the scheduler (repeatable)")
    sub.add_argument("--no-orchestrator", action="store_true",
                     help="run no orchestrator: for the second and later boxes of a PostgreSQL fleet")
    sub.add_argument("--no-sampler", action="store_true", help="run no telemetry sampler for this host")
    sample_path_flag(sub)
    panel = sub.add_argument_group("the panel")
    panel.add_argument("--panel", action="store_true", help="serve the operator panel too")
    panel.add_argument("--bind", default=None, metavar="ADDRESS",
                       help=f"with --panel: the address (default {PANEL_BIND}; any other needs a token)")
    panel.add_argument("--port", type=port_number, default=None,
                       help=f"with --panel: the port (default {PANEL_PORT}; 0: any free one)")
    metrics_token_flag(panel, "panel_token")
    allow_host_flag(panel)
    panel.add_argument("--read-only", action="store_true", help="with --panel: show everything, change nothing")
    sub.add_argument("--check", action="store_true", help="print what would start and why, start nothing")
    sub.add_argument("--json", action="store_true", help="with --check: the plan as JSON")
    gpu_flags(sub)


def queue_counts(specs: Sequence[str]) -> list[tuple[str, int, str | None]]:
    """``--queue Q[:N[:OPTIONS]]`` values as (queue, workers, options or None), in the order
    given; N and the workers of all the queues together by the procs rule
    (``runner.check_queues``). A queue name may hold ``:``: the last part is N, or, when it
    is not a number and a number comes before it, the options.

    >>> queue_counts(["default", "gpu:2", "llm:1:gpu,models=a+b"])
    [('default', 1, None), ('gpu', 2, None), ('llm', 1, 'gpu,models=a+b')]
    >>> queue_counts(["gpu:0"])
    Traceback (most recent call last):
    ...
    rowfleet.errors.ConfigError: --queue 'gpu:0': N must be a whole number from 1 to 256, in ASCII digits
    >>> queue_counts(["a", "a:2"])
    Traceback (most recent call last):
    ...
    rowfleet.errors.ConfigError: --queue 'a' is given twice: give it once, with its number of workers
    """
    lines = []
    for spec in specs:
        queue, count, options = _queue_parts(spec)
        try:
            lines.append((queue, runner.PROCS.parse("N", count), options))
        except ConfigError:
            raise ConfigError(f"--queue {names.shown(spec)}: N must be {runner.PROCS.requirement}") from None
    runner.check_queues([(queue, count) for queue, count, _ in lines], "--queue")
    return lines


def _queue_parts(spec: str) -> tuple[str, str, str | None]:
    if ":" not in spec:
        return spec, "1", None
    head, _, last = spec.rpartition(":")
    if last.isascii() and last.isdigit() or ":" not in head:
        return head, last, None
    queue, _, count = head.rpartition(":")
    return queue, count, last


def queue_workers(specs: Sequence[str], args: argparse.Namespace) -> list[Workers]:
    """Each ``--queue``'s workers: their own kind where it gives OPTIONS, else the box-wide
    ``--gpu`` and routing flags'. Every queue's is checked here, before any child starts."""
    box_wide = None
    lines = []
    for queue, count, options in queue_counts(specs):
        if options is None:
            box_wide = box_wide or (args.gpu, gpu_settings_of(args))
            lines.append(Workers(queue, count, *box_wide))
            continue
        try:
            kind = routing_options(options)
            lines.append(Workers(queue, count, kind.gpu, gpu_settings_of(kind), kind.gpu_indexes))
        except ConfigError as exc:
            raise ConfigError(f"--queue {names.shown(f'{queue}:{count}:{options}')}: {exc}") from None
    unused = [f"--{name.replace('_', '-')}" for name in ("gpu", *ROUTING_FLAGS) if getattr(args, name)]
    if box_wide is None and unused:
        raise ConfigError(f"{', '.join(unused)}: every --queue gives its own OPTIONS, so no worker would take "
                          f"{'it' if len(unused) == 1 else 'them'}: put {'it' if len(unused) == 1 else 'them'} "
                          f"in a queue's OPTIONS")
    return lines


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
                  "then the orchestrator, then the sampler and the panel; a second one (or SIGQUIT) stops "
                  "them all at once, each worker handing its job back unfinished"]
    return "\n".join(lines)


def cmd_up(args: argparse.Namespace, config: configuration.Config) -> int:
    if args.json and not args.check:
        raise ConfigError("--json goes with --check: a running box logs, it prints no JSON")
    config = with_sample_paths(with_allowed_hosts(trusted(config, args), args), args)
    queue_counts(args.queue or ["default"])  # before the --app modules are imported: a typo costs nothing
    schedules = vetted_schedules(args.schedule, args.app, config.allow_modules)  # imports the --app modules
    box = Box(config, queue_workers(args.queue or ["default"], args), schedules,
              orchestrator=not args.no_orchestrator, sampler=not args.no_sampler)
    panel = _panel_request(args, config)
    plan = runner.box_plan(box, panel_url=panel.shown if panel else None)
    if args.check:
        print(json.dumps([role.to_dict() for role in plan], indent=2) if args.json else render_plan(plan, config))
        return exitcodes.OK
    watchers = [_panel_child(config, panel, args.schedule)] if panel else []  # binds: a taken port stops us here
    return runner.run_box(box, watchers)


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
    bind = PANEL_BIND if args.bind is None else args.bind
    token = server.check_bind(bind, webserver.chosen_token(args.token, PANEL_TOKEN_ENV, config.panel_token))
    return PanelAsk(bind, PANEL_PORT if args.port is None else args.port, token, args.read_only)


def _panel_child(config: configuration.Config, panel: PanelAsk, schedule_files: Sequence[str]) -> Child:
    """The panel as a child, its socket bound here, before any fork."""
    from rowfleet.panel import server
    from rowfleet.panel.pages import schedules

    schedules.SCHEDULE_FILES = tuple(schedule_files)  # read per request: a bad file is one line on the page
    made = server.make_server(config, panel.bind, panel.port, panel.token, read_only=panel.read_only)

    def serve() -> int:
        server.serve_made(made, runner.stop_on_signals(), lambda url: print(f"panel at {url}", flush=True))
        return exitcodes.OK

    return Child("panel", serve, runner.FATAL, reports_exits=False, stop_stage=runner.WATCHER_STAGE)
