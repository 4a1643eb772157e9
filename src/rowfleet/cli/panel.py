"""The ``panel`` command: serve the operator panel (``rowfleet.panel``) until stopped.

It binds 127.0.0.1 by default. Any other address needs a token, from ``--token`` or,
better (a flag shows in ``ps``), the ``panel_token`` setting (``ROWFLEET_PANEL_TOKEN``);
without one it refuses to start. ``--read-only`` serves every page and no change. It
answers requests that name it as localhost or an IP address; ``--allow-host NAME`` (the
``allowed_hosts`` setting, ``ROWFLEET_ALLOWED_HOSTS``) lets in another name, as a reverse
proxy or a DNS name for the box sends it (see ``rowfleet.services.webserver``). ``rowfleet metrics``
and ``rowfleet up --panel`` take the same flag (``cli.arguments.allow_host_flag``).
"""

from __future__ import annotations

import argparse
from typing import Callable

from rowfleet import config as configuration
from rowfleet import exitcodes
from rowfleet.cli.arguments import PANEL_BIND, PANEL_PORT, PANEL_TOKEN_ENV, Parser, allow_host_flag, metrics_token_flag
from rowfleet.cli.arguments import port_number, with_allowed_hosts
from rowfleet.services.runner import stop_on_signals


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("panel", cmd_panel, "serve the operator panel (the Flight Deck) in a browser",
                  reads=("database", "connection", "telemetry", "panel"))
    sub.add_argument("--bind", default=PANEL_BIND, metavar="ADDRESS",
                     help=f"the address to listen on (default {PANEL_BIND}: this machine only; any other "
                          f"needs a token)")
    sub.add_argument("--port", type=port_number, default=PANEL_PORT,
                     help=f"the port to listen on (default {PANEL_PORT}; 0: any free one)")
    metrics_token_flag(sub, "panel_token")
    allow_host_flag(sub)
    sub.add_argument("--read-only", action="store_true", help="show everything, change nothing")
    sub.add_argument("--schedule", action="append", default=[], metavar="FILE",
                     help="the scheduler's schedule file, so Schedules shows when each fires next (repeatable)")
    sub.add_argument("--app", action="append", default=[], metavar="MODULE",
                     help="import this module, so its @rowfleet.periodic schedules show too (repeatable)")


def cmd_panel(args: argparse.Namespace, config: configuration.Config) -> int:
    # Here, not at the top: the HTTP server's modules would slow every other command's start.
    from rowfleet import tasks
    from rowfleet.services import webserver
    from rowfleet.panel import server
    from rowfleet.panel.pages import schedules

    tasks.import_apps(args.app)
    schedules.SCHEDULE_FILES = tuple(args.schedule)  # read per request: a bad file is one line on the page

    token = webserver.chosen_token(args.token, PANEL_TOKEN_ENV, config.panel_token)
    config = with_allowed_hosts(config, args)
    stop = stop_on_signals()
    server.serve(config, args.bind, args.port, stop, token=token, read_only=args.read_only,
                 listening=lambda url: print(f"panel at {url}" + (" (read-only)" if args.read_only else ""),
                                             flush=True))
    return exitcodes.OK
