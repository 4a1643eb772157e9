"""The ``rowfleet`` command line: parse, call the library, print.

``main(argv=None) -> int``. A user error (bad flag, bad JSON, unknown job, a file that is
not a database) is one line on stderr and a non-zero exit, never a traceback; a bug is a
traceback. The environment is read here and in ``config`` only.

Each module of this package adds one family of commands with ``add_commands(command)``:
``jobs`` (schema and single jobs), ``processes`` (worker, orchestrator), ``workflows``,
``up`` (a whole box), ``fleet`` (switches and the fleet's views), ``models`` (the GPU
fleet's models).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Callable, Sequence

import rowfleet
from rowfleet import config as configuration
from rowfleet import exitcodes
from rowfleet.cli import fleet, hosts, jobs, metrics, models, panel, processes, schedules, up, workflows
from rowfleet.cli.arguments import (Parser, UsageError, add_global_flags, add_setting_flags, config_overrides,
                                    positive_int)
from rowfleet.cli.output import EscapingFormatter, report, say
from rowfleet.errors import ConfigError, RowfleetError

__all__ = ["Parser", "UsageError", "build_parser", "main", "positive_int", "report"]

COMMAND_FAMILIES = (jobs, processes, up, workflows, fleet, schedules, models, hosts, metrics, panel)


def build_parser() -> Parser:
    knobs = Parser(add_help=False)
    add_global_flags(knobs, default=argparse.SUPPRESS)  # accepted after the command too; keeps an earlier value
    add_setting_flags(knobs)

    parser = Parser(prog="rowfleet", description="A self-healing job fleet on the database you already run.")
    parser.add_argument("--version", action="version", version=f"rowfleet {rowfleet.__version__}")
    add_global_flags(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    def command(name: str, handler: Callable[..., int], help_text: str) -> Parser:
        sub = commands.add_parser(name, help=help_text, description=help_text, parents=[knobs])
        sub.set_defaults(handler=handler)
        return sub

    for family in COMMAND_FAMILIES:
        family.add_commands(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        say(exc, file=sys.stderr)
        return exitcodes.USAGE
    if args.command is None:
        build_parser().print_help()
        return exitcodes.USAGE
    try:
        _setup_logging(args.log_level)
        config = configuration.from_env(os.environ, **config_overrides(args))
        return args.handler(args, config)
    except RowfleetError as exc:
        return report(exc)
    except KeyboardInterrupt:
        return exitcodes.INTERRUPTED
    except BrokenPipeError:  # `rowfleet jobs | head`: the reader left; end as quietly as `cat` would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail
        return exitcodes.BROKEN_PIPE



def _setup_logging(level_name: str | None) -> None:
    setting = configuration.SETTING["log_level"]
    name = level_name or os.environ.get(setting.env) or setting.default
    level = logging.getLevelName(name.upper())
    if not isinstance(level, int):
        given = setting.flag if level_name else setting.env
        raise ConfigError(f"{given} must be DEBUG, INFO, WARNING or ERROR, got {name!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(EscapingFormatter("%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])



if __name__ == "__main__":
    sys.exit(main())
