"""The ``metrics`` command: serve ``/metrics`` for Prometheus (``rowfleet.services.exporter``), or
print one scrape and exit (``--once``).

The bearer token comes from ``--token`` or, better (a flag shows in ``ps``), the
``metrics_token`` setting (``ROWFLEET_METRICS_TOKEN``). It answers requests that name it
as localhost or an IP address, and the names ``--allow-host`` (``ROWFLEET_ALLOWED_HOSTS``)
adds: a Prometheus that scrapes the box by a DNS name needs that name allowed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from rowfleet import config as configuration
from rowfleet import exitcodes
from rowfleet.cli.arguments import Parser, allow_host_flag, metrics_token_flag, port_number, with_allowed_hosts
from rowfleet.services.runner import stop_on_signals
from rowfleet.store import open_store

TOKEN_ENV = configuration.SETTING["metrics_token"].env

# This machine only, unless told otherwise; 9464 is no other exporter's default port.
DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 9464


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("metrics", cmd_metrics, "serve the fleet's metrics for Prometheus at /metrics, or print them once",
                  reads=("database", "connection"))
    sub.add_argument("--bind", default=DEFAULT_BIND, metavar="ADDRESS",
                     help=f"the address to listen on (default {DEFAULT_BIND}: this machine only)")
    sub.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                     help=f"the port to listen on (default {DEFAULT_PORT}; 0: any free one)")
    metrics_token_flag(sub)
    allow_host_flag(sub)
    sub.add_argument("--once", action="store_true", help="print one scrape to stdout and exit")


def cmd_metrics(args: argparse.Namespace, config: configuration.Config) -> int:
    # Here, not at the top: the HTTP server's modules would slow every other command's start.
    from rowfleet.services import exporter, webserver

    if args.once:
        with open_store(config) as store:
            store.require_schema()
            sys.stdout.write(exporter.scrape(store))
        return exitcodes.OK
    token = webserver.chosen_token(args.token, TOKEN_ENV, config.metrics_token)
    config = with_allowed_hosts(config, args)
    stop = stop_on_signals()
    exporter.serve(config, args.bind, args.port, stop, token=token,
                   listening=lambda url: print(f"serving metrics on {url}", flush=True))
    return exitcodes.OK
