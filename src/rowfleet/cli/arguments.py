"""How the command line is read: argparse types that refuse bad values in one line, every
``Config`` knob as a flag, and the global flags."""

from __future__ import annotations

import argparse
import json
from functools import partial
from typing import Any, Callable

from rowfleet import names
from rowfleet import tasks
from rowfleet.config import Config
from rowfleet.errors import ConfigError


class UsageError(Exception):
    """argparse found the command line malformed."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and an exception, not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def number(convert: Callable[[str], Any], what: str, check: Callable[[str, Any], Any]) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text, then let a ``names`` check decide whether
    the value is allowed (its requirement becomes argparse's one-line error)."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:  # also int()'s refusal of more than 4300 digits
            raise argparse.ArgumentTypeError(f"invalid {convert.__name__} value: {names.shown(text)} "
                                             f"(expected {what})") from None
        try:
            return check("value", value)
        except names.InvalidValue as exc:
            raise argparse.ArgumentTypeError(f"expected {exc.requirement}, got {names.shown(text)}") from None

    return parse


positive_float = number(float, "a number of seconds", names.check_seconds)
non_negative_float = number(float, "a number of seconds", partial(names.check_seconds, zero=True))
positive_int = number(int, "a whole number", partial(names.check_int, least=1))
non_negative_int = number(int, "a whole number", partial(names.check_int, least=0))
int64 = number(int, "a whole number", names.check_int)  # ids, priorities: what both databases hold
positive_number = number(float, "a number", partial(names.check_number, positive=True))


# Every Config knob as a flag; None means "not given", so the environment and defaults apply.
KNOBS: tuple[tuple[str, Callable[[str], Any], str], ...] = (
    ("--lease", positive_float, "seconds a claimed job's lease lasts (default 600)"),
    ("--renew", positive_float, "seconds between lease renewals (default 10)"),
    ("--heartbeat", positive_float, "seconds between worker heartbeats (default 10)"),
    ("--poll", positive_float, "safety poll of an idle worker, seconds (default 1)"),
    ("--interval", positive_float, "seconds between orchestrator sweeps (default 5)"),
    ("--backoff-base", positive_float, "first retry delay, seconds, doubling per attempt (default 2)"),
    ("--backoff-max", positive_float, "longest retry delay, seconds (default 3600)"),
    ("--retention", positive_float, "seconds finished jobs are kept before pruning (default 7 days)"),
    ("--synchronous", str.upper, "SQLite durability: FULL (default) or NORMAL"),
    ("--busy-timeout", positive_float, "seconds to wait for the SQLite write lock (default 30)"),
    ("--host", str, "this machine's label in holders and heartbeats (default: hostname)"),
    ("--budget", positive_float, "wall clock a job may run unless it or its task sets one (default 3600)"),
    ("--stall-window", positive_float, "seconds without a progress beat before a stall is suspected (default 300)"),
    ("--stall-samples", positive_int, "readings that confirm a stall (default 3)"),
    ("--stall-spacing", positive_float, "seconds between those readings (default 1)"),
    ("--idle-gpu", positive_number, "GPU utilisation %% under which a GPU is idle (default 5)"),
    ("--memory-delta-mb", positive_number, "memory moving less than this (MiB) is static (default 5120)"),
    ("--gpu-first-window", positive_float, "GPU jobs: idle window before the first beat (default 1200)"),
    ("--gpu-window", positive_float, "GPU jobs: idle window after the first beat (default 300)"),
    ("--gpu-sample", positive_float, "GPU jobs: seconds between GPU readings (default 10)"),
    ("--watchdog-retries", non_negative_int, "watchdog trips a job may take before it fails (default 3)"),
    ("--nvidia-smi", str, "the nvidia-smi command for GPU readings (default nvidia-smi)"),
    ("--restart-delay", positive_float, "supervisor: first wait before restarting a dead child (default 0.5)"),
    ("--restart-delay-max", positive_float, "supervisor: longest wait, doubling from the first (default 30)"),
    ("--cancel-grace", positive_float, "seconds a cancelled running job's handler has to stop before its "
                                       "worker process is ended (default 30)"),
)


GLOBALS: tuple[tuple[str, str], ...] = (
    ("--db", "database: a SQLite path or sqlite:///PATH (default ./rowfleet.db, or ROWFLEET_DB)"),
    ("--project", "project tag (default '', or ROWFLEET_PROJECT)"),
    ("--log-level", "DEBUG, INFO (default), WARNING or ERROR (or ROWFLEET_LOG_LEVEL)"),
)



def knob_names() -> list[str]:
    return [flag[2:].replace("-", "_") for flag, _, _ in KNOBS]



def allow_module_flag(sub: argparse.ArgumentParser) -> None:
    """``--allow-module PREFIX``: whose ``module:function`` names a worker runs (see ``trusted``)."""
    sub.add_argument("--allow-module", action="append", default=None, metavar="PREFIX",
                     help="also run module:function tasks of this module and its submodules (repeatable; "
                          "default ROWFLEET_ALLOW_MODULES, a comma list; the --app modules always are)")


def trusted(config: Config, args: argparse.Namespace) -> Config:
    """``config`` with the prefixes this command trusts: ``--allow-module`` (else the
    environment's), joined by the ``--app`` modules."""
    explicit = args.allow_module if args.allow_module else config.allow_modules
    return config.replace(allow_modules=tasks.trusted_modules(explicit, args.app))


def json_flag(flag: str, text: str) -> Any:
    """A flag's JSON value, with every guard of ``names.parse_json`` (depth, huge integers,
    NaN and Infinity): a refusal is one ``ConfigError`` line naming the flag."""
    try:
        return names.parse_json(flag, text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag} is not valid JSON: {exc}") from None
