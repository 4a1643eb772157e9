"""``rowfleet settings``: every setting, with its flag, its environment variable, its
default, the commands that read it and its help, under the headings of the families of
processes that read them (``config.GROUPS``), or as JSON with ``--json``.

Nothing in it is written twice: the settings are ``config.SETTINGS``, and the commands
that read each are those whose parsers take its flag (``arguments.settings_of`` over the
whole command line, built here in the command, not at import).
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any, Callable

from rowfleet import config as configuration
from rowfleet import exitcodes
from rowfleet.cli.arguments import Parser, settings_of
from rowfleet.cli.output import print_json

# Where the settings outside the families go: rowfleet's own flags first, the flags a few
# commands add for themselves last.
HEADINGS = {configuration.GLOBAL: "rowfleet's own settings (before or after any command)",
            **configuration.GROUPS,
            configuration.OWN: "settings of a few commands' own flags"}
EVERY_COMMAND = "every command"
WIDTH = 100


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("settings", cmd_settings, "every setting: its flag, environment variable and default, the "
                  "commands that read it and what it does", reads=())
    sub.add_argument("--json", action="store_true")


def listing() -> list[dict[str, Any]]:
    """Every setting as ``rowfleet settings --json`` prints it, in the order of its
    headings (``HEADINGS``), then of ``config.SETTINGS``; ``commands`` are those whose
    parsers take its flag."""
    from rowfleet.cli import build_parser  # here: only this command needs every family's parser

    commands = build_parser().commands
    readers: dict[str, list[str]] = {setting.name: [] for setting in configuration.SETTINGS}
    for name, sub in commands.items():
        for setting in settings_of(sub):
            readers[setting.name].append(name)
    order = list(HEADINGS)
    return [{"name": setting.name, "group": setting.group, "flag": setting.flag, "env": setting.env,
             "default": setting.default_text(), "repeatable": setting.kind.repeated,
             "commands": readers[setting.name], "help": setting.help}
            for setting in sorted(configuration.SETTINGS, key=lambda setting: order.index(setting.group))]


def listing_text(rows: list[dict[str, Any]]) -> str:
    """The listing for people: under each heading, a setting's flag, variable and default,
    its help, and the commands that read it ("every command" where every command that
    takes a setting takes it).

    >>> rows = [{"group": "database", "flag": "--busy-timeout", "env": "ROWFLEET_BUSY_TIMEOUT", "default": "30s",
    ...          "repeatable": False, "commands": ["status", "worker"], "help": "the SQLite write-lock wait"},
    ...         {"group": "worker", "flag": "--lease", "env": "ROWFLEET_LEASE", "default": "30s",
    ...          "repeatable": False, "commands": ["worker"], "help": "a claimed job's lease"}]
    >>> print(listing_text(rows))
    database settings
      --busy-timeout  ROWFLEET_BUSY_TIMEOUT  default 30s
          the SQLite write-lock wait
          read by: every command
    <BLANKLINE>
    worker settings
      --lease  ROWFLEET_LEASE  default 30s
          a claimed job's lease
          read by: worker
    """
    takers = {command for row in rows if row["group"] != configuration.GLOBAL for command in row["commands"]}
    lines: list[str] = []
    for group, heading in HEADINGS.items():
        members = [row for row in rows if row["group"] == group]
        if not members:
            continue
        lines += ["", heading] if lines else [heading]
        for row in members:
            flag, env = row["flag"], row["env"]
            if row["repeatable"]:
                flag, env = f"{flag} (repeatable)", f"{env} (comma list)"
            readers = EVERY_COMMAND if takers <= set(row["commands"]) else ", ".join(row["commands"])
            lines.append(f"  {flag}  {env}  default {row['default']}")
            lines += textwrap.wrap(row["help"], WIDTH, initial_indent="      ", subsequent_indent="      ")
            lines += textwrap.wrap(f"read by: {readers}", WIDTH, initial_indent="      ",
                                   subsequent_indent="        ")
    return "\n".join(lines)


def cmd_settings(args: argparse.Namespace, config: configuration.Config) -> int:
    rows = listing()
    if args.json:
        print_json(rows)
    else:
        print(listing_text(rows))
    return exitcodes.OK
