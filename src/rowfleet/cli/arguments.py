"""How the command line is read: argparse types that refuse bad values in one line, every
``Config`` knob as a flag, and the global flags."""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from rowfleet.errors import ConfigError


class UsageError(Exception):
    """argparse found the command line malformed."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and an exception, not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def number(convert: Callable[[str], Any], what: str, accept: Callable[[Any], bool],
           requirement: str) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text, then insist that ``accept`` holds."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {requirement}, got {text!r}")
        return value

    return parse


positive_float = number(float, "a number of seconds", lambda v: v > 0, "a positive number of seconds")
non_negative_float = number(float, "a number of seconds", lambda v: v >= 0,
                            "a non-negative number of seconds")
positive_int = number(int, "a whole number", lambda v: v >= 1, "a whole number of at least 1")
non_negative_int = number(int, "a whole number", lambda v: v >= 0, "a whole number of at least 0")


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
    ("--idle-gpu", positive_float, "GPU utilisation %% under which a GPU is idle (default 5)"),
    ("--memory-delta-mb", positive_float, "memory moving less than this (MiB) is static (default 5120)"),
    ("--gpu-first-window", positive_float, "GPU jobs: idle window before the first beat (default 1200)"),
    ("--gpu-window", positive_float, "GPU jobs: idle window after the first beat (default 300)"),
    ("--gpu-sample", positive_float, "GPU jobs: seconds between GPU readings (default 10)"),
    ("--watchdog-retries", non_negative_int, "watchdog trips a job may take before it fails (default 3)"),
    ("--nvidia-smi", str, "the nvidia-smi command for GPU readings (default nvidia-smi)"),
    ("--restart-delay", positive_float, "supervisor: first wait before restarting a dead child (default 0.5)"),
    ("--restart-delay-max", positive_float, "supervisor: longest wait, doubling from the first (default 30)"),
)


GLOBALS: tuple[tuple[str, str], ...] = (
    ("--db", "database: a SQLite path or sqlite:///PATH (default ./rowfleet.db, or ROWFLEET_DB)"),
    ("--project", "project tag (default '', or ROWFLEET_PROJECT)"),
    ("--log-level", "DEBUG, INFO (default), WARNING or ERROR (or ROWFLEET_LOG_LEVEL)"),
)



def knob_names() -> list[str]:
    return [flag[2:].replace("-", "_") for flag, _, _ in KNOBS]



def json_flag(flag: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag} is not valid JSON: {exc}") from None
