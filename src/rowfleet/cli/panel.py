"""The ``panel`` command: serve the operator panel (``rowfleet.panel``) until stopped.

It binds 127.0.0.1 by default. Any other address needs a token, from ``--token`` or,
better (a flag shows in ``ps``), the ``panel_token`` setting (``ROWFLEET_PANEL_TOKEN``);
without one it refuses to start. ``--read-only`` serves every page and no change. It
answers requests that name it as localhost or an IP address; ``--allow-host NAME`` (the
``allowed_hosts`` setting, ``ROWFLEET_ALLOWED_HOSTS``) lets in another name, as a reverse
proxy or a DNS name for the box sends it (see ``rowfleet.services.webserver``). ``rowfleet metrics``
and ``rowfleet up --panel`` take the same flag (``allow_host_flag``).
"""

from __future__ import annotations

import argparse
import threading
from functools import partial
from typing import Any, Callable

from rowfleet import config as configuration
from rowfleet import exitcodes, names
from rowfleet.cli.arguments import Parser, metrics_token_flag, number
from rowfleet.cli.processes import on_stop_signals

TOKEN_ENV = configuration.SETTING["panel_token"].env
ALLOWED_HOSTS = configuration.SETTING["allowed_hosts"]

DEFAULT_BIND = "127.0.0.1"  # this machine only, unless told otherwise
DEFAULT_PORT = 8465

port_number = number(int, "a port number", partial(names.check_int, least=0, most=65535))


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("panel", cmd_panel, "serve the operator panel (the Flight Deck) in a browser")
    sub.add_argument("--bind", default=DEFAULT_BIND, metavar="ADDRESS",
                     help=f"the address to listen on (default {DEFAULT_BIND}: this machine only; any other "
                          f"needs a token)")
    sub.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                     help=f"the port to listen on (default {DEFAULT_PORT}; 0: any free one)")
    metrics_token_flag(sub, "panel_token")
    allow_host_flag(sub)
    sub.add_argument("--read-only", action="store_true", help="show everything, change nothing")
    sub.add_argument("--schedule", action="append", default=[], metavar="FILE",
                     help="the scheduler's schedule file, so Schedules shows when each fires next (repeatable)")
    sub.add_argument("--app", action="append", default=[], metavar="MODULE",
                     help="import this module, so its @rowfleet.periodic schedules show too (repeatable)")


def allow_host_flag(sub: Any) -> None:
    """``--allow-host NAME`` (repeatable): a host name the server answers to besides
    localhost and IP addresses (the ``allowed_hosts`` setting)."""
    sub.add_argument(ALLOWED_HOSTS.flag, action="append", default=None, metavar="NAME", dest="allowed_hosts",
                     help=f"{ALLOWED_HOSTS.help} (repeatable; {ALLOWED_HOSTS.env} is a comma list; "
                          f"default {ALLOWED_HOSTS.default_text()})")


def with_allowed_hosts(config: configuration.Config, args: argparse.Namespace) -> configuration.Config:
    """``config`` with the ``--allow-host`` names given (checked), else the environment's."""
    return config.replace(allowed_hosts=tuple(args.allowed_hosts)) if args.allowed_hosts else config


def cmd_panel(args: argparse.Namespace, config: configuration.Config) -> int:
    # Here, not at the top: the HTTP server's modules would slow every other command's start.
    from rowfleet import tasks
    from rowfleet.services import webserver
    from rowfleet.panel import server
    from rowfleet.panel.pages import schedules

    tasks.import_apps(args.app)
    schedules.SCHEDULE_FILES = tuple(args.schedule)  # read per request: a bad file is one line on the page

    token = webserver.chosen_token(args.token, TOKEN_ENV, config.panel_token)
    config = with_allowed_hosts(config, args)
    stop = threading.Event()
    on_stop_signals(lambda *_: stop.set())
    server.serve(config, args.bind, args.port, stop, token=token, read_only=args.read_only,
                 listening=lambda url: print(f"panel at {url}" + (" (read-only)" if args.read_only else ""),
                                             flush=True))
    return exitcodes.OK
