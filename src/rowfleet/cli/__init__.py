"""The ``rowfleet`` command line: parse, call the library, print.

``main(argv=None) -> int``. A user error (bad flag, bad JSON, unknown job, a file that is
not a database) is one line on stderr and a non-zero exit, never a traceback; a bug is a
traceback. The environment is read here and in ``config`` only.

Each module of this package adds one family of commands with ``add_commands(command)``:
``jobs`` (schema and single jobs), ``processes`` (worker, orchestrator), ``workflows``,
``up`` (a whole box), ``fleet`` (switches and the fleet's views), ``models`` (the GPU
fleet's models), ``settings`` (the settings' listing). Each command names, as it is added,
the families of settings it reads (``config.GROUPS``): it takes their flags, and no other
setting's.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Callable, Sequence

import rowfleet
from rowfleet import config as configuration
from rowfleet import exitcodes
from rowfleet.cli.arguments import (Parser, UsageError, add_global_flags, add_setting_flags, config_overrides,
                                    positive_int)
from rowfleet.cli.output import EscapingFormatter, report, say
from rowfleet.errors import ConfigError, RowfleetError

__all__ = ["Parser", "UsageError", "build_parser", "main", "positive_int", "report"]

# The module of this package that adds each command, in the order ``--help`` lists them. A
# command's parser is built from its own module alone (``main``), so that `rowfleet worker`
# imports no panel, view or GPU code it does not run: a worker starts the sooner.
# tests/pure/test_cli_families.py checks this table against what each module adds.
COMMAND_FAMILIES = {
    "jobs": ("init", "enqueue", "wait", "status", "jobs", "job", "retry", "cancel", "prioritize"),
    "processes": ("worker", "sampler", "orchestrator"),
    "up": ("up",),
    "workflows": ("run", "runs", "cancel-run", "restart", "submit", "submissions"),
    "fleet": ("control", "model-control", "gpu-control", "limit", "limits", "workers", "broker"),
    "schedules": ("scheduler", "fire", "schedules"),
    "models": ("models",),
    "hosts": ("hosts",),
    "metrics": ("metrics",),
    "panel": ("panel",),
    "settings": ("settings",),
}
FAMILY_OF = {command: family for family, commands in COMMAND_FAMILIES.items() for command in commands}


def family_module(family: str):
    return importlib.import_module(f"rowfleet.cli.{family}")


def build_parser(families: Sequence[str] = tuple(COMMAND_FAMILIES)) -> Parser:
    """rowfleet's parser with the commands of ``families``; ``commands`` holds each
    command's parser."""
    knobs = Parser(add_help=False)
    add_global_flags(knobs, default=argparse.SUPPRESS)  # accepted after the command too; keeps an earlier value

    parser = Parser(prog="rowfleet", description="A self-healing job fleet on the database you already run.")
    parser.add_argument("--version", action="version", version=f"rowfleet {rowfleet.__version__}")
    add_global_flags(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    reading: dict[str, Sequence[str]] = {}

    def command(name: str, handler: Callable[..., int], help_text: str, *, reads: Sequence[str]) -> Parser:
        """Add command ``name``, which reads the settings of the families ``reads``."""
        sub = commands.add_parser(name, help=help_text, description=help_text, parents=[knobs])
        sub.set_defaults(handler=handler)
        parser.commands[name], reading[name] = sub, reads
        return sub

    for family in families:
        family_module(family).add_commands(command)
    for name, sub in parser.commands.items():  # after the command's own options, in its help too
        add_setting_flags(sub, reading[name])
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed by the parser of the first word that names a command, if one does,
    else (or if that parser refuses it) by the whole parser, whose answer is then the
    answer: both read the global flags alike, so they find the same command."""
    named = next((FAMILY_OF[word] for word in argv if word in FAMILY_OF), None)
    if named is not None:
        try:
            return build_parser((named,)).parse_args(argv)
        except UsageError:
            pass
    return build_parser().parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else list(argv))
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
