"""Hostile input at every entry point: one line, exit 2, nothing stored.

The cases are tables, one per entry point, and a new flag, variable, field or file value
joins by adding a row:

* ``FLAGS``: the command line, each row an option of a command (argv as bytes where the
  bytes are not UTF-8). ``FlagCoverageTest`` walks the parser ``rowfleet.cli`` builds and
  fails for any option of any command that has no row here and is not in ``EXEMPT``.
* ``ENVIRONMENT``: the ``ROWFLEET_*`` variables, one row at least per setting
  (``EnvironmentTest`` checks that too).
* ``WORKFLOW_AND_SCHEDULE_VALUES``: the fields of workflow and schedule files.
* ``API``: the Python API's calls.
* ``FIELDS``: the table of fields itself (``names.RULES``), a row at least per field.
* Rows planted by plain SQL whose names and free text hold control characters: what the
  listings print for people holds none raw (``ControlCharacterContract``).

A flag refused by argparse is checked in this process through the real parser (nothing
can have run); any other row runs the real command line in a subprocess against a real
database, SQLite and PostgreSQL alike, whose content must not change. A database whose
schema text is not UTF-8 is refused by every command, ``init`` included, untouched.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import unittest
import warnings
from typing import Any, NamedTuple

from rowfleet import cli, config, names, tasks
from rowfleet.cli import arguments
from rowfleet.errors import ConfigError
from rowfleet.services import supervisor
from pg_harness import PostgresServerCase
from support import TempDirTestCase, child_env

INT64_MAX = 2 ** 63 - 1
DEEP = "[" * 1000 + "]" * 1000  # json.loads itself gives up (RecursionError)
HUGE = "1" * 5000  # more digits than int() converts
ARABIC_THREE = "\u0663"  # int() reads it as 3
SHARED = "*"  # a row's command for the settings' options: each reads alike on every command that takes it


def digest(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


# --- the command line ------------------------------------------------------------------


class Flag(NamedTuple):
    """A hostile command line: ``option`` is what it attacks (``--queue``, or a positional
    argument's name such as ``id``), ``argv`` the whole command line after ``--db DB``, and
    ``says`` a fragment of the one line it must be refused with."""

    option: str
    argv: tuple[str | bytes, ...]
    says: str
    code: int = 2


def flag(option: str, *argv: str | bytes, says: str, code: int = 2) -> Flag:
    return Flag(option, argv, says, code)


# A later check that stops a row which would otherwise start something heavy (a thousand
# forks) if its value were ever accepted: the row then fails on the wrong line instead.
NO_SIDECAR = ("--sidecar-idle", "5")

FLAGS: list[Flag] = [
    # Every command's settings and rowfleet's own flags, by their rules.
    flag("--db", b"status", b"--db", b"x.db\xff", says="db must be valid UTF-8"),
    flag("--project", b"--project", b"p\xff", b"enqueue", b"m:f", says="project must be valid UTF-8"),
    flag("--project", "status", "--project", "a b", says="project must be a non-empty word"),
    flag("--log-level", "status", "--log-level", "loud", says="--log-level must be DEBUG, INFO, WARNING or ERROR"),
    # A setting's row goes to a command that reads it; a worker's with --burst, the
    # orchestrator's with --once, so that a value let through would not start a long run.
    flag("--host", b"worker", b"--host", b"h\xff", b"--burst", says="host must be valid UTF-8"),
    flag("--lease", "worker", "--lease", "1e400", "--burst", says="argument --lease"),
    flag("--lease", "worker", "--lease", " 30", "--burst", says="argument --lease: invalid float value: ' 30'"),
    flag("--renew", "worker", "--renew", "700", "--burst", says="renew (700s) must be shorter than lease (30s)"),
    flag("--heartbeat", "worker", "--heartbeat", "0", "--burst",
         says="argument --heartbeat: expected a positive number"),
    flag("--poll", "wait", "1", "--poll", "1e-6",
         says="argument --poll: expected a number of seconds of at least 0.05"),
    flag("--poll", "worker", "--poll", "0.01", "--burst", says="argument --poll"),
    flag("--interval", "orchestrator", "--once", "--interval", "nan", says="argument --interval"),
    flag("--backoff-base", "worker", "--backoff-base", "-1", "--burst", says="argument --backoff-base"),
    flag("--backoff-max", "worker", "--backoff-max", "inf", "--burst", says="argument --backoff-max"),
    flag("--retention", "orchestrator", "--once", "--retention", "1e12", says="at most 3155760000 (100 years)"),
    flag("--synchronous", "status", "--synchronous", "OFF", says="synchronous must be FULL or NORMAL"),
    flag("--pooler", "status", "--pooler", "bogus", says="pooler must be none, session or transaction, got 'bogus'"),
    flag("--listen-url", "status", "--listen-url", "x.db", says="listen_url must be a postgresql:// URL"),
    flag("--busy-timeout", "enqueue", "m:f", "--busy-timeout", "inf", says="argument --busy-timeout"),
    flag("--budget", "worker", "--budget", "0", "--burst", says="argument --budget"),
    flag("--stall-window", "worker", "--stall-window", "inf", "--burst", says="argument --stall-window"),
    flag("--stall-samples", "worker", "--stall-samples", "0", "--burst", says="argument --stall-samples"),
    flag("--stall-samples", "worker", "--stall-samples", str(2 ** 31), "--burst",
         says="argument --stall-samples: expected an integer of at least 1 and at most 2147483647"),
    flag("--stall-spacing", "worker", "--stall-spacing", "nan", "--burst", says="argument --stall-spacing"),
    flag("--idle-gpu", "worker", "--idle-gpu", "nan", "--burst", says="argument --idle-gpu"),
    flag("--memory-delta-mb", "worker", "--memory-delta-mb", "0", "--burst", says="argument --memory-delta-mb"),
    flag("--gpu-first-window", "worker", "--gpu-first-window", "-5", "--burst", says="argument --gpu-first-window"),
    flag("--gpu-window", "worker", "--gpu-window", "inf", "--burst", says="argument --gpu-window"),
    flag("--gpu-sample", "worker", "--gpu-sample", "0", "--burst", says="argument --gpu-sample"),
    flag("--watchdog-retries", "orchestrator", "--once", "--watchdog-retries", "-1",
         says="argument --watchdog-retries"),
    flag("--watchdog-retries", "worker", "--watchdog-retries", ARABIC_THREE, "--burst",
         says="argument --watchdog-retries: invalid int value"),
    flag("--nvidia-smi", "worker", "--nvidia-smi", " ", "--burst", says="nvidia_smi must name a command"),
    flag("--restart-delay", "worker", "--restart-delay", "0", "--burst", says="argument --restart-delay"),
    flag("--restart-delay-max", "worker", "--restart-delay-max", "inf", "--burst", says="argument --restart-delay-max"),
    flag("--cancel-grace", "worker", "--cancel-grace", "nan", "--burst", says="argument --cancel-grace"),
    flag("--sample-every", "sampler", "--once", "--sample-every", "0", says="argument --sample-every"),
    flag("--sample-detail-keep", "hosts", "--sample-detail-keep", "inf", says="argument --sample-detail-keep"),
    flag("--sample-minute-keep", "orchestrator", "--once", "--sample-minute-keep", "-1",
         says="argument --sample-minute-keep"),

    # enqueue
    flag("task", b"enqueue", b"m:\xff", says="task name must be valid UTF-8"),
    flag("task", "enqueue", "two words", says="task name must be a non-empty word"),
    flag("--app", "enqueue", "m:f", "--app", "", says="argument --app: expected a module name"),
    flag("--allow-module", "enqueue", "m:f", "--allow-module", "", says="argument --allow-module: expected a module"),
    flag("--args", "enqueue", "m:f", "--args", DEEP, says="--args must be JSON nested at most 100 deep"),
    flag("--args", "enqueue", "m:f", "--args", "[" * 150 + "]" * 150, says="--args must be JSON nested at most 100"),
    flag("--args", "enqueue", "m:f", "--args", HUGE, says="--args holds an integer of more than 4300 digits"),
    flag("--args", "enqueue", "m:f", "--args", "[NaN]", says="--args must be JSON with finite numbers"),
    flag("--args", "enqueue", "m:f", "--args", '{"x": -Infinity}', says="--args must be JSON with finite numbers"),
    flag("--args", "enqueue", "m:f", "--args", "[1e999]", says="--args must be JSON with finite numbers"),
    flag("--queue", "enqueue", "m:f", "--queue", "*", says="argument --queue: expected a name other than '*'"),
    flag("--queue", b"enqueue", b"m:f", b"--queue", b"q\xff", says="argument --queue: expected valid UTF-8"),
    flag("--priority", "enqueue", "m:f", "--priority", str(INT64_MAX + 1),
         says="argument --priority: expected an integer from"),
    flag("--priority", "enqueue", "m:f", "--priority", str(-INT64_MAX - 2), says="argument --priority"),
    flag("--priority", "enqueue", "m:f", "--priority", HUGE, says="argument --priority: invalid int value: '1111"),
    flag("--priority", "enqueue", "m:f", "--priority", " 3", says="argument --priority: invalid int value: ' 3'"),
    flag("--delay", "enqueue", "m:f", "--delay", "inf", says="argument --delay: expected a non-negative number"),
    flag("--delay", "enqueue", "m:f", "--delay", "1e12", says="at most 3155760000 (100 years)"),
    flag("--delay", "enqueue", "m:f", "--delay", "nan", says="argument --delay"),
    flag("--key", b"enqueue", b"m:f", b"--key", b"k\xff", says="argument --key: expected valid UTF-8"),
    flag("--max-attempts", "enqueue", "m:f", "--max-attempts", str(2 ** 31),
         says="argument --max-attempts: expected an integer of at least 1 and at most 2147483647"),
    flag("--timeout", "enqueue", "m:f", "--timeout", "inf", says="argument --timeout"),
    flag("--model", "enqueue", "m:f", "--model", "two words", says="model must be a non-empty word"),
    flag("--model", "enqueue", "json:dumps", "--app", "json", "--model", "ghost",
         says="model 'ghost' is not registered by the --app modules"),
    flag("--vram-mb", "enqueue", "m:f", "--vram-mb", "0", says="argument --vram-mb"),
    flag("--vram-mb", "enqueue", "m:f", "--vram-mb", ARABIC_THREE, says="argument --vram-mb: invalid int value"),
    flag("--gpus", "enqueue", "m:f", "--gpus", "0", says="argument --gpus: expected an integer of at least 1"),
    flag("--gpus", "enqueue", "m:f", "--gpus", "65", says="argument --gpus: expected an integer of at least 1"),
    flag("--unique", "enqueue", "m:f", "--unique", "always", says="argument --unique: invalid choice"),
    flag("--debounce", "enqueue", "m:f", "--debounce", "-1", says="argument --debounce"),
    flag("--debounce", "enqueue", "m:f", "--debounce", "inf", says="argument --debounce"),
    flag("--concurrency-key", b"enqueue", b"m:f", b"--concurrency-key", b"k\xff", says="argument --concurrency-key"),
    flag("--concurrency-key", "enqueue", "m:f", "--concurrency-key", "", says="argument --concurrency-key"),
    flag("queue", "limit", "two words", "--concurrency", "2", says="argument queue"),
    flag("queue", "limit", "api", says="limit needs a rule to set"),
    flag("--concurrency", "limit", "api", "--concurrency", "0", says="argument --concurrency"),
    flag("--concurrency", "limit", "api", "--concurrency", HUGE, says="argument --concurrency"),
    flag("--per-key", "limit", "api", "--per-key", "-1", says="argument --per-key"),
    flag("--rate", "limit", "api", "--rate", "10", says="--rate must be N/SECONDS"),
    flag("--rate", "limit", "api", "--rate", "10/0", says="argument --rate"),
    flag("--rate", "limit", "api", "--rate", "20000/1", says="a rate's count must be a whole number from 1 to 10,000"),
    flag("--per-key-rate", "limit", "api", "--per-key-rate", "1/nan", says="argument --per-key-rate"),
    flag("--by", b"limit", b"api", b"--concurrency", b"1", b"--by", b"x\xff", says="argument --by"),
    flag("--wait", "enqueue", "m:f", "--wait", "--json", says="--wait prints the job's result and --json the job"),
    flag("--wait-timeout", "enqueue", "m:f", "--wait-timeout", "5", says="--wait-timeout needs --wait"),
    flag("--wait-timeout", "enqueue", "m:f", "--wait", "--wait-timeout", "nan", says="argument --wait-timeout"),

    # wait
    flag("id", "wait", str(INT64_MAX + 1), says="argument id: expected an integer from"),
    flag("--timeout", "wait", "1", "--timeout", "0", says="argument --timeout"),

    # jobs, job, retry, cancel, prioritize
    flag("--state", "jobs", "--state", "bogus", says="argument --state: invalid choice"),
    flag("--queue", "jobs", "--queue", "a b", says="argument --queue: expected a non-empty word"),
    flag("--limit", "jobs", "--limit", str(INT64_MAX + 1), says="argument --limit"),
    flag("--limit", "jobs", "--limit", "0", says="argument --limit"),
    flag("id", "job", str(INT64_MAX + 1), says="argument id: expected an integer from"),
    flag("id", "job", " 3", says="argument id: invalid int value: ' 3'"),
    flag("id", "job", ARABIC_THREE, says="argument id: invalid int value"),
    flag("id", "retry", "3 ", says="argument id: invalid int value"),
    flag("id", "cancel", str(INT64_MAX + 1), says="argument id"),
    flag("--wait", "cancel", "1", "--wait", "inf", says="argument --wait"),
    flag("id", "prioritize", "+3", says="argument id: invalid int value"),

    # worker
    flag("--queue", "worker", "--queue", "*", "--burst", says="argument --queue: expected a name other than '*'"),
    flag("--queue", b"worker", b"--queue", b"q\xff", b"--burst", says="argument --queue: expected valid UTF-8"),
    flag("--app", "worker", "--app", "", "--burst", says="argument --app: expected a module name"),
    flag("--allow-module", "worker", "--allow-module", "", "--burst", says="argument --allow-module"),
    flag("--procs", "worker", "--procs", "100000", "--burst", *NO_SIDECAR,
         says="argument --procs: expected an integer of at least 1 and at most 256"),
    flag("--procs", "worker", "--procs", str(INT64_MAX), "--burst", *NO_SIDECAR, says="argument --procs"),
    flag("--procs", "worker", "--procs", "0", "--burst", says="argument --procs"),
    flag("--prefetch", "worker", "--prefetch", "100000", "--burst", says="argument --prefetch: expected an integer of at least 1 and at most 1000"),
    flag("--prefetch", "worker", "--prefetch", "0", "--burst", says="argument --prefetch"),
    flag("--batch", "worker", "--batch", "100000", "--burst", says="argument --batch: expected an integer of at least 1 and at most 1000"),
    flag("--batch", "worker", "--batch", "2", "--sidecar", "x", "--burst",
         says="--prefetch and --batch are for many short jobs"),
    flag("--sample-path", "worker", "--sample-path", "", "--burst", says="argument --sample-path"),
    flag("--models", "worker", "--gpu", "--models", "a b", "--burst", says="--models must be a non-empty word"),
    flag("--vram-mb", "worker", "--vram-mb", str(2 ** 31), "--burst", says="argument --vram-mb"),
    flag("--gpu-index", "worker", "--gpu-index", "-1", "--burst", says="argument --gpu-index"),
    flag("--lane", "worker", "--lane", "bogus", "--burst", says="argument --lane: expected one of any, model, plain"),
    flag("--host-priority", "worker", "--host-priority", str(2 ** 31), "--burst", says="argument --host-priority"),
    flag("--idle-unload", "worker", "--idle-unload", "0", "--burst", says="argument --idle-unload"),
    flag("--sidecar", "worker", "--sidecar", "", "--burst", says="--sidecar needs a command"),
    flag("--sidecar-health", "worker", "--sidecar", "x", "--sidecar-health", "nope", "--burst",
         says="--sidecar-health must be an http:// or https:// URL"),
    flag("--sidecar-idle", "worker", "--sidecar", "x", "--sidecar-idle", "nan", "--burst",
         says="argument --sidecar-idle"),

    # sampler, orchestrator
    flag("--every", "sampler", "--every", "0", "--once", says="argument --every"),
    flag("--sample-path", "sampler", "--sample-path", "", "--once", says="argument --sample-path"),
    flag("--fail-unplaceable-after", "orchestrator", "--fail-unplaceable-after", "inf", "--once",
         says="argument --fail-unplaceable-after"),

    # up (--check: it starts nothing even if a value were let through)
    flag("--queue", "up", "--queue", f"q:{ARABIC_THREE}", "--check", says="N must be a whole number from 1 to 256"),
    flag("--queue", "up", "--queue", "q:100000", "--check", says="N must be a whole number from 1 to 256"),
    flag("--queue", "up", "--queue", "a:200", "--queue", "b:100", "--check", says="300 worker processes in all"),
    flag("--queue", "up", "--queue", "*:2", "--check", says="--queue must be a name other than '*'"),
    flag("--queue", "up", "--queue", "gpu:1:gpu,models=a\x1b[2J", "--check",
         says="--models must be a name without control characters"),
    flag("--queue", "up", "--queue", "gpu:1:nvlink", "--check", says="unknown option 'nvlink'"),
    flag("--app", "up", "--app", "", "--check", says="argument --app: expected a module name"),
    flag("--allow-module", "up", "--allow-module", "1x", "--check", says="argument --allow-module"),
    flag("--schedule", "up", "--schedule", "missing.json", "--check", says="cannot read it"),
    flag("--sample-path", "up", "--sample-path", "", "--check", says="argument --sample-path"),
    flag("--bind", "up", "--panel", "--bind", "0.0.0.0", "--check", says="needs a token"),
    flag("--port", "up", "--panel", "--port", "70000", "--check", says="argument --port"),
    flag("--token", "up", "--panel", "--token", "a b", "--check", says="--token must be letters, digits"),
    flag("--allow-host", "up", "--panel", "--allow-host", "a b", "--check", says="allowed_hosts must be a non-empty"),
    flag("--models", "up", "--gpu", "--models", "a b", "--check", says="--models must be a non-empty word"),
    flag("--vram-mb", "up", "--vram-mb", "0", "--check", says="argument --vram-mb"),
    flag("--gpu-index", "up", "--gpu-index", " 1", "--check", says="argument --gpu-index: invalid int value"),
    flag("--lane", "up", "--lane", "gpu", "--check", says="argument --lane: expected one of any, model, plain"),
    flag("--host-priority", "up", "--host-priority", str(-2 ** 31), "--check", says="argument --host-priority"),
    flag("--idle-unload", "up", "--idle-unload", "-1", "--check", says="argument --idle-unload"),

    # workflows
    flag("workflow", "run", "missing.json", says="is neither a workflow file nor a workflow registered"),
    flag("--args", "run", "missing.json", "--args", "[NaN]", says="--args must be JSON with finite numbers"),
    flag("--app", "run", "missing.json", "--app", "", says="--app must be a module name"),
    flag("--allow-module", "run", "missing.json", "--allow-module", "", says="argument --allow-module"),
    flag("id", "runs", str(INT64_MAX + 1), says="argument id"),
    flag("id", "runs", ARABIC_THREE, says="argument id: invalid int value"),
    flag("--state", "runs", "--state", "bogus", says="argument --state: invalid choice"),
    flag("--limit", "runs", "--limit", "0", says="argument --limit"),
    flag("id", "cancel-run", " 1", says="argument id: invalid int value"),
    flag("id", "restart", ARABIC_THREE, says="argument id: invalid int value"),
    flag("id", "submit", "1_0", "ask", "--value", "1", says="argument id: invalid int value"),
    flag("--value", "submit", "1", "ask", "--value", "NaN", says="--value must be JSON with finite numbers"),
    flag("--value", "submit", "1", "ask", "--value", DEEP, says="--value must be JSON nested"),
    flag("--by", b"submit", b"1", b"ask", b"--value", b"1", b"--by", b"me\xff", says="argument --by: expected valid"),
    flag("--run", "submissions", "--run", "x", says="argument --run"),
    flag("--run", "submissions", "--run", str(INT64_MAX + 1), says="argument --run"),
    flag("--state", "submissions", "--state", "bogus", says="argument --state: invalid choice"),
    flag("--limit", "submissions", "--limit", "0", says="argument --limit"),

    # switches
    flag("--queue", "control", "--queue", "*", "--off", says="argument --queue: expected a name other than '*'"),
    flag("--queue", b"control", b"--queue", b"q\xff", b"--off", says="argument --queue: expected valid UTF-8"),
    flag("--policy", "control", "--queue", "q", "--off", "--policy", "soft", says="argument --policy: invalid choice"),
    flag("--by", "control", "--queue", "q", "--off", "--by", "b" * 256, says="argument --by: expected at most 255"),
    flag("--by", b"control", b"--queue", b"q", b"--off", b"--by", b"me\xff", says="argument --by: expected valid"),
    flag("--reason", "control", "--queue", "q", "--off", "--reason", "r" * 4097,
         says="argument --reason: expected at most 4096 characters"),
    flag("--reason", b"control", b"--queue", b"q", b"--off", b"--reason", b"why\xff", says="argument --reason"),
    flag("action", "model-control", "load", "m", says="argument action: invalid choice"),
    flag("model", "model-control", "pin", "a b", says="argument model: expected a non-empty word"),
    flag("--by", "model-control", "pin", "m", "--by", "b" * 256, says="argument --by: expected at most 255"),
    flag("action", "gpu-control", "reset", "0", says="argument action: invalid choice"),
    flag("gpu", "gpu-control", "off", "-1", says="argument INDEX: expected an integer of at least 0"),
    flag("gpu", "gpu-control", "off", ARABIC_THREE, says="argument INDEX: invalid int value"),
    flag("--reason", "gpu-control", "off", "0", "--reason", "r" * 4097,
         says="argument --reason: expected at most 4096 characters"),
    flag("--by", b"gpu-control", b"off", b"0", b"--by", b"me\xff", says="argument --by: expected valid"),

    # schedules
    flag("--schedule", "scheduler", "--schedule", "missing.json", "--once", says="cannot read it"),
    flag("--app", "scheduler", "--app", "", "--once", says="--app must be a module name"),
    flag("--allow-module", "scheduler", "--allow-module", "os.", "--once", says="argument --allow-module"),
    flag("--limit", "schedules", "--limit", ARABIC_THREE, says="argument --limit: invalid int value"),
    flag("name", "fire", "two words", says="argument NAME: expected a non-empty word"),
    flag("name", b"fire", b"tick\xff", says="argument NAME: expected valid"),
    flag("name", "fire", "nowhere", says="no schedule is named 'nowhere': give the --schedule FILE"),
    flag("--schedule", "fire", "tick", "--schedule", "missing.json", says="cannot read it"),
    flag("--app", "fire", "tick", "--app", "", says="--app must be a module name"),
    flag("--allow-module", "fire", "tick", "--allow-module", "os.", says="argument --allow-module"),
    flag("--by", "fire", "tick", "--by", "b" * 256, says="argument --by: expected at most 255"),

    # hosts
    flag("target", "hosts", "a b", says="argument HOST: expected a non-empty word"),
    flag("--since", "hosts", "h", "--since", "1x", says="--since must be a duration such as 90s"),
    flag("--tier", "hosts", "h", "--tier", "hour", says="argument --tier: invalid choice"),

    # metrics and the panel ('a b' binds nowhere: were a value let through, the server would not start)
    flag("--bind", "metrics", "--bind", "a b", "--port", "0", says="cannot serve metrics on 'a b'"),
    flag("--port", "metrics", "--port", "70000", says="argument --port"),
    flag("--port", "metrics", "--port", " 80", says="argument --port: invalid int value"),
    flag("--token", "metrics", "--token", "a b", "--bind", "a b", says="--token must be letters, digits"),
    flag("--allow-host", "metrics", "--allow-host", "box:80", "--bind", "a b", says="is not a host name"),
    flag("--bind", "panel", "--bind", "", "--port", "0", says="needs a token"),
    flag("--port", "panel", "--port", "-1", says="argument --port"),
    flag("--token", "panel", "--token", "a b", "--bind", "a b", says="--token must be letters, digits"),
    flag("--app", "panel", "--app", "", "--bind", "a b", says="--app must be a module name"),
    flag("--allow-host", "panel", "--allow-host", "*", "--bind", "a b", says="allowed_hosts must be a name other"),
]

# Options no hostile value can reach, each with why. Options that take no value (--json,
# --burst, --on and every other switch) are left out by the walk itself.
EXEMPT = {
    # Read per request by the panel, which shows a bad file as one line on its page.
    ("panel", "--schedule"): "the panel's own tests",
    # Looked up among the run's own nodes once the run is found: an unknown node is refused
    # in one line (exit 1), whatever its text.
    ("submit", "node"): "the store's submit tests",
}


@functools.cache
def the_parser() -> argparse.ArgumentParser:
    return cli.build_parser()


def parse_refusal(argv: tuple[str | bytes, ...]) -> str | None:
    """argparse's one line for ``argv`` (through the real parser), or None where argparse
    takes it and the command decides."""
    try:
        the_parser().parse_args([os.fsdecode(arg) for arg in ("--db", "x.db", *argv)])
    except arguments.UsageError as exc:
        return str(exc)
    return None


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public way to walk a parser
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("rowfleet's parser has no commands")


class FlagCoverageTest(unittest.TestCase):
    """A flag joins the table by a row: the walk of the real parser finds every option."""

    def setUp(self):
        self.commands = subcommands(cli.build_parser())
        settings = {setting.flag for setting in config.SETTINGS if setting.scope != config.OWN}
        self.options = {name: {self.name_of(action): self.name_of(action) in settings for action in sub._actions
                               if action.dest != "help"} for name, sub in self.commands.items()}
        self.takes_a_value = {(name, self.name_of(action)) for name, sub in self.commands.items()
                              for action in sub._actions if action.nargs != 0}

    @staticmethod
    def name_of(action: argparse.Action) -> str:
        return action.option_strings[0] if action.option_strings else action.dest

    def key(self, row: Flag) -> tuple[str, str]:
        command = next(os.fsdecode(arg) for arg in row.argv if os.fsdecode(arg) in self.commands)
        self.assertIn(row.option, self.options[command], f"{command} has no option {row.option}: a stale row")
        return (SHARED if self.options[command][row.option] else command), row.option

    def test_every_option_of_every_command_has_a_row_or_an_exemption(self):
        covered = {self.key(row) for row in FLAGS}
        missing = []
        for command, options in self.options.items():
            for option, shared in options.items():
                key = (SHARED if shared else command, option)
                if (command, option) in self.takes_a_value and key not in covered and key not in EXEMPT:
                    missing.append(f"{command} {option}" if not shared else option)
        self.assertEqual(sorted(set(missing)), [], "give each a hostile row in FLAGS (or, with why, a place in "
                                                   "EXEMPT)")

    def test_each_row_names_its_option_on_its_command_line(self):
        for row in FLAGS:
            with self.subTest(row=row.argv[:4]):
                if row.option.startswith("--"):
                    self.assertIn(row.option, [os.fsdecode(arg) for arg in row.argv])
                self.key(row)

    def test_exemptions_name_real_options_that_take_values(self):
        for command, option in EXEMPT:
            self.assertIn((command, option), self.takes_a_value)


class HostileCase(TempDirTestCase):
    """A fresh, initialised database and a check that a refused command changed nothing.
    A SQLite file here; ``PostgresHostile`` swaps in a PostgreSQL database and its dump."""

    def setUp(self):
        super().setUp()
        self.db = self.database()
        self.run_cli(b"init")

    def database(self) -> str:
        return self.db

    def run_cli(self, *args: bytes | str, db: bytes | str | None = None, env=None) -> subprocess.CompletedProcess:
        """``python -m rowfleet --db DB ARGS`` with argv as bytes, so non-UTF-8 bytes reach it."""
        argv = [os.fsencode(sys.executable), b"-m", b"rowfleet"]
        if not any(os.fsencode(arg) == b"--db" for arg in args):
            argv += [b"--db", os.fsencode(db or self.db)]
        argv += [os.fsencode(arg) if isinstance(arg, str) else arg for arg in args]
        return subprocess.run(argv, cwd=self.dir, env=env or child_env(), capture_output=True, timeout=60)

    def dump(self) -> list[str]:
        """The whole database as SQL text, and the files in the folder."""
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            lines = list(conn.iterdump())
        return lines + sorted(os.listdir(self.dir))

    def assert_refused(self, *args: bytes | str, says: str, code: int = 2, db=None, env=None) -> str:
        before = self.dump()
        line = self.assert_one_line(self.run_cli(*args, db=db, env=env), says, code)
        self.assertEqual(self.dump(), before, "a refused command changed the database")
        return line

    def assert_one_line(self, result: subprocess.CompletedProcess, says: str, code: int = 2) -> str:
        stderr = result.stderr.decode("utf-8", "replace")
        self.assertEqual(result.returncode, code, stderr)
        lines = stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, f"expected one line on stderr, got:\n{stderr}")
        self.assertNotIn("Traceback", stderr + result.stdout.decode("utf-8", "replace"))
        self.assertIn(says, lines[0])
        return lines[0]

    def write_json(self, name: str, text: str) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path


class CommandLineContract:
    """Hostile command lines, refused alike whichever database stores the jobs."""

    def test_flags(self):
        refusals = [parse_refusal(row.argv) for row in FLAGS]
        before = self.dump()
        # The rows argparse takes are refused by their commands: run those for real, a few at once.
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            ran = {index: pool.submit(self.run_cli, *row.argv) for index, row in enumerate(FLAGS)
                   if refusals[index] is None}
        for index, row in enumerate(FLAGS):
            with self.subTest(argv=[arg[:40] for arg in row.argv]):
                if index in ran:
                    self.assert_one_line(ran[index].result(), row.says, row.code)
                else:
                    self.assertEqual(row.code, 2)
                    self.assertIn(row.says, refusals[index])
                    self.assertNotIn("\n", refusals[index])
        self.assertEqual(self.dump(), before, "a refused command changed the database")

    def test_environment_through_the_command_line(self):
        cases = [  # variable, value -> fragment
            ("ROWFLEET_BUSY_TIMEOUT", "inf", "busy_timeout must be a positive number of seconds, at most"),
            ("ROWFLEET_STALL_SAMPLES", HUGE, "ROWFLEET_STALL_SAMPLES must be a whole number, got '1111"),
            ("ROWFLEET_POLL", "0.001", "poll must be a number of seconds of at least 0.05"),
            ("ROWFLEET_PROJECT", "*", "project must be a name other than '*'"),
        ]
        for name, value, says in cases:
            with self.subTest(name=name):
                self.assert_refused("enqueue", "m:f", env=child_env(**{name: value}), says=says)

    def test_the_largest_and_smallest_priorities_are_stored(self):
        for priority in (INT64_MAX, -INT64_MAX - 1):
            result = self.run_cli("enqueue", "m:f", "--priority", str(priority), "--json")
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(json.loads(result.stdout)["priority"], priority)
        listed = self.run_cli("jobs", "--json")
        self.assertEqual(sorted(job["priority"] for job in json.loads(listed.stdout)), [-INT64_MAX - 1, INT64_MAX])


class CommandLineTest(CommandLineContract, HostileCase):
    pass


class PostgresHostile(PostgresServerCase):
    """A fresh PostgreSQL database in place of the file, dumped table by table."""

    def database(self) -> str:
        return self.empty_database()

    def dump(self) -> list[str]:
        from rowfleet.store.postgres import driver

        with contextlib.closing(driver().connect(self.db)) as conn:
            tables = [row[0] for row in conn.execute("SELECT table_name FROM information_schema.tables WHERE "
                                                     "table_schema = 'public' ORDER BY table_name")]
            # Table names from the catalogue, quoted: the test's own SQL, never a caller's text.
            return [f"{table}: {row!r}" for table in tables
                    for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY 1')]


class PostgresCommandLineTest(PostgresHostile, CommandLineContract, HostileCase):
    pass


# --- the environment -------------------------------------------------------------------

ENVIRONMENT = [  # setting, its variable's value -> a fragment of the one message
    ("db", "x.db\udcff", "db must be valid UTF-8"),
    ("db", " ", "db must be a non-empty path or URL"),
    ("project", "*", "project must be a name other than '*'"),
    ("project", "a\x1b[2J", "project must be a name without control characters"),
    ("host", "a b", "host must be a non-empty word"),
    ("lease", "nan", "lease must be a positive number of seconds"),
    ("lease", " 30", "ROWFLEET_LEASE must be a number of seconds, got ' 30'"),
    ("renew", "700", "renew (700s) must be shorter than lease (30s)"),
    ("heartbeat", "0", "heartbeat must be a positive number of seconds"),
    ("poll", "1e-6", "poll must be a number of seconds of at least 0.05"),
    ("interval", "inf", "interval must be a positive number of seconds, at most"),
    ("backoff_base", "-1", "backoff_base must be a positive number"),
    ("backoff_max", "1e12", "backoff_max must be a positive number of seconds, at most 3155760000"),
    ("retention", "nan", "retention must be a positive number"),
    ("synchronous", "OFF", "synchronous must be FULL or NORMAL"),
    ("pooler", "bogus", "pooler must be none, session or transaction, got 'bogus'"),
    ("listen_url", "x.db", "listen_url must be a postgresql:// URL straight to the server, got 'x.db'"),
    ("busy_timeout", "inf", "busy_timeout must be a positive number of seconds, at most"),
    ("budget", "0", "budget must be a positive number"),
    ("stall_window", "-1", "stall_window must be a positive number"),
    ("stall_samples", HUGE, "ROWFLEET_STALL_SAMPLES must be a whole number, got '1111"),
    ("stall_samples", ARABIC_THREE, "ROWFLEET_STALL_SAMPLES must be a whole number"),
    ("stall_spacing", "nan", "stall_spacing must be a positive number"),
    ("idle_gpu", "0", "idle_gpu must be a positive finite number"),
    ("memory_delta_mb", "inf", "memory_delta_mb must be a positive finite number"),
    ("gpu_first_window", "0", "gpu_first_window must be a positive number"),
    ("gpu_window", "nan", "gpu_window must be a positive number"),
    ("gpu_sample", "-1", "gpu_sample must be a positive number"),
    ("watchdog_retries", str(2 ** 63), "watchdog_retries must be an integer of at least 0 and"),
    ("nvidia_smi", " ", "nvidia_smi must name a command"),
    ("restart_delay", "0", "restart_delay must be a positive number"),
    ("restart_delay_max", "inf", "restart_delay_max must be a positive number of seconds, at most"),
    ("cancel_grace", "-1", "cancel_grace must be a positive number"),
    ("sample_every", "0", "sample_every must be a positive number"),
    ("sample_detail_keep", "1e12", "sample_detail_keep must be a positive number of seconds, at most"),
    ("sample_minute_keep", "nan", "sample_minute_keep must be a positive number"),
    ("sample_paths", "/data,\udcff", "sample_paths must be valid UTF-8"),
    ("metrics_token", "t\udcff", "metrics_token must be valid UTF-8"),
    ("panel_token", "t\udcff", "panel_token must be valid UTF-8"),
    ("allow_modules", "app,1x", "allow_modules must be a module name"),
    ("allow_modules", "a..b", "allow_modules must be a module name"),
    ("allowed_hosts", "box:8465", "is not a host name"),
]
ENVIRONMENT_EXEMPT = {
    # Read by the command line itself, before Config: test_settings refuses a bad one by name.
    "log_level",
}


class EnvironmentTest(unittest.TestCase):
    """The environment as ``main`` reads it (``config.from_env``): each bad value one
    ``ConfigError`` naming the setting or its variable. (A few go through a real process
    too: ``CommandLineContract.test_environment_through_the_command_line``.)"""

    def test_bad_values(self):
        for name, value, says in ENVIRONMENT:
            with self.subTest(name=name, value=value[:20]), self.assertRaises(ConfigError) as caught:
                config.from_env({config.SETTING[name].env: value})
            message = str(caught.exception)
            self.assertIn(says, message)
            self.assertNotIn("\n", message)

    def test_every_setting_has_a_row(self):
        covered = {name for name, _, _ in ENVIRONMENT}
        self.assertEqual(ENVIRONMENT_EXEMPT & covered, set())
        self.assertEqual({setting.name for setting in config.SETTINGS} - covered - ENVIRONMENT_EXEMPT, set(),
                         "give each setting a hostile row in ENVIRONMENT")


# --- workflow and schedule files -------------------------------------------------------


def _workflow(**node: object) -> str:
    return json.dumps({"name": "w", "nodes": [{"id": "a", "task": "m:f", **node}]})


def _schedules(**entry: object) -> str:
    return json.dumps([{"name": "s", "task": "m:f", "every": 60, **entry}])


WORKFLOW_AND_SCHEDULE_VALUES = [  # JSON text of a node's or schedule's field -> (field, fragment)
    ("priority", str(INT64_MAX + 1), "priority"),
    ("max_attempts", str(INT64_MAX + 1), "max_attempts"),
    ("timeout", "1e300", "timeout"),
    ("timeout", "1e999", "finite numbers"),
    ("timeout", "NaN", "finite numbers"),
    ("args", DEEP, "nested at most 100 deep"),
    ("args", '{"x": ' + "[" * 200 + "]" * 200 + "}", "nested at most 100 deep"),
    ("args", HUGE, "more than 4300 digits"),
    ("args", "[Infinity]", "finite numbers"),
    ("queue", '"*"', "queue"),
    ("queue", '"q\\udcff"', "queue"),
    ("queue", '"q\\u001b[2J"', "queue"),
    ("task", '"m:\\udcff"', "task"),
]
SCHEDULE_VALUES = WORKFLOW_AND_SCHEDULE_VALUES + [
    ("every", "1e300", "every"),
    ("every", "NaN", "finite numbers"),
    ("name", '"s\\udcff"', "name"),
    ("hours", "[1e999, 3]", "finite numbers"),
]


class FileTest(HostileCase):
    """Workflow and schedule files: every bad value is one line naming the field."""

    def _with(self, render, field: str, raw: str) -> str:
        placeholder = "__RAW__"
        return render(**{field: placeholder}).replace(f'"{placeholder}"', raw)

    def test_workflow_files(self):
        for field, raw, says in WORKFLOW_AND_SCHEDULE_VALUES:
            with self.subTest(field=field, raw=raw[:30]):
                path = self.write_json("flow.json", self._with(_workflow, field, raw))
                self.assert_refused("run", path, "--no-task-check", says=says)
        path = self.write_json("flow.json", json.dumps({"name": "w\udcff", "nodes": [{"id": "a", "task": "m:f"}]}))
        self.assert_refused("run", path, "--no-task-check", says="name")

    def test_schedule_files(self):
        for field, raw, says in SCHEDULE_VALUES:
            with self.subTest(field=field, raw=raw[:30]):
                path = self.write_json("schedules.json", self._with(_schedules, field, raw))
                self.assert_refused("scheduler", "--schedule", path, "--once", says=says)


class CorruptSchemaTest(HostileCase):
    """The driver raises UnicodeDecodeError, not sqlite3.Error, when the schema's text is not UTF-8."""

    def corrupt(self) -> None:
        conn = sqlite3.connect(self.db, isolation_level=None)
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_master SET name = CAST(x'6fff' AS TEXT), "
                     "sql = CAST(x'ff' || CAST(sql AS BLOB) AS TEXT) WHERE name = 'orchestrators'")
        conn.close()

    def test_every_command_refuses_it_untouched(self):
        self.corrupt()
        before = {name: digest(os.path.join(self.dir, name)) for name in os.listdir(self.dir)}
        for argv in (["init"], ["status"], ["enqueue", "m:f"], ["jobs"]):
            with self.subTest(argv=argv):
                result = self.run_cli(*argv)
                stderr = result.stderr.decode()
                self.assertEqual(result.returncode, 2, stderr)
                self.assertEqual(len(stderr.strip().splitlines()), 1, stderr)
                self.assertIn("the database file is corrupt", stderr)
                self.assertNotIn("Traceback", stderr)
        after = {name: digest(os.path.join(self.dir, name)) for name in os.listdir(self.dir)}
        self.assertEqual(after, before)


# --- the Python API --------------------------------------------------------------------


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def api_rows(rowfleet: Any) -> list[tuple[Any, str]]:
    """The API's hostile calls (``rowfleet`` configured on a fresh database) -> a fragment
    of the message."""
    return [
        (lambda: rowfleet.enqueue("m:f", run_at="x"), "run_at must be a time in UNIX epoch seconds"),
        (lambda: rowfleet.enqueue("m:f", run_at=float("nan")), "run_at"),
        (lambda: rowfleet.enqueue("m:f", run_at=1e20), "run_at"),
        (lambda: rowfleet.enqueue("m:f", queue="*"), "queue must be a name other than '*'"),
        (lambda: rowfleet.enqueue("m:f", queue="q\x1b[2J\x07"), "queue must be a name without control characters"),
        (lambda: rowfleet.enqueue("m:f", priority=2 ** 63), "priority must be an integer from"),
        (lambda: rowfleet.enqueue("m:f", delay=float("inf")), "delay must be a non-negative number"),
        (lambda: rowfleet.enqueue("m:f", delay=1e12), "at most 3155760000"),
        (lambda: rowfleet.enqueue("m:f", timeout=float("nan")), "timeout"),
        (lambda: rowfleet.enqueue("m:f", key="k\x00"), "without NUL"),
        (lambda: rowfleet.enqueue("m:\udcff"), "task name must be valid UTF-8"),
        (lambda: rowfleet.enqueue("m:f", project="p q"), "project must be a non-empty word"),
        (lambda: rowfleet.enqueue("m:f", _nested(150)), "nested at most 100 deep"),
        (lambda: rowfleet.enqueue_many("m:f", [1, _nested(150)]), "nested at most 100 deep"),
        (lambda: rowfleet.get_job(2 ** 63), "job id"),
        (lambda: rowfleet.submit(1, "ask", float("nan")), "value must be JSON with finite numbers"),
        (lambda: rowfleet.submit(1, "a b", 1), "node must be letters"),
        (lambda: rowfleet.start_run("w", float("inf")), "finite numbers"),
        (lambda: rowfleet.configure(poll=1e-6), "poll must be a number of seconds of at least 0.05"),
        (lambda: supervisor.workers(100_000, lambda: 0), "procs must be an integer of at least 1 and at most 256"),
        (lambda: tasks.import_apps([""]), "--app must be a module name"),
    ]


class ApiTest(TempDirTestCase):
    def setUp(self):
        super().setUp()
        import rowfleet

        self.rowfleet = rowfleet
        previous = config._current
        self.addCleanup(setattr, config, "_current", previous)
        self.addCleanup(_close_api_store)
        rowfleet.configure(db=self.db)
        rowfleet.init()
        # The rows enqueue a task of no module here on purpose: its warning is not what they test.
        catcher = warnings.catch_warnings()
        catcher.__enter__()
        self.addCleanup(catcher.__exit__, None, None, None)
        warnings.simplefilter("ignore", rowfleet.TaskWarning)

    def test_bad_arguments_raise_config_error_and_store_nothing(self):
        for call, says in api_rows(self.rowfleet):
            with self.subTest(says=says), self.assertRaises(ConfigError) as caught:
                call()
            self.assertIn(says, str(caught.exception))
            self.assertNotIn("\n", str(caught.exception))
        self.assertEqual(self.rowfleet.api.default_store().reads.list_jobs(""), [])


def _close_api_store() -> None:
    from rowfleet import api

    cached = getattr(api._local, "store", None)
    if cached is not None:
        cached[2].close()
        del api._local.store


# --- the table of fields ---------------------------------------------------------------

FIELDS = [  # field of names.RULES, a value (text where its kind is a number) -> accepted?
    ("queue", "gpu-large", True), ("queue", "*", False), ("queue", "a b", False), ("queue", "q\x1b[2J", False),
    ("queue", "q\x9b", False), ("queue", "x" * 256, False),
    ("project", "", True), ("project", "*", False), ("project", "p\x7f", False),
    ("host", "box-1", True), ("host", "", False), ("host", "h\x07", False),
    ("task", "m:f", True), ("task", "m:\udcff", False),
    ("model", "llama3-8b:q4", True), ("model", "two words", False),
    ("node id", "load_2", True), ("node id", "2load", False),
    ("module", "pkg.tasks", True), ("module", "", False), ("module", "1x", False), ("module", "a..b", False),
    ("module", "pkg:f", False),
    ("key", "order 42", True), ("key", "", False), ("key", "k\x00", False),
    ("by", "", True), ("by", "b" * 255, True), ("by", "b" * 256, False), ("by", "b\udcff", False),
    ("reason", "", True), ("reason", "why\nnot", True), ("reason", "r" * 4097, False),
    ("path", "/data", True), ("path", "", False),
    ("duration", "1h30m", True), ("duration", "1x", False), ("duration", "0h", False),
    ("args", {"a": [1]}, True), ("args", [float("nan")], False), ("args", _nested(101), False),
    ("job id", "3", True), ("job id", "-1", True), ("job id", " 3", False), ("job id", ARABIC_THREE, False),
    ("job id", str(2 ** 63), False), ("job id", HUGE, False),
    ("run id", "3", True), ("run id", "1_0", False), ("run id", "+3", False),
    ("priority", str(-2 ** 63), True), ("priority", str(2 ** 63), False),
    ("limit", "1", True), ("limit", "0", False),
    ("max attempts", "1", True), ("max attempts", str(2 ** 31), False),
    ("count", "1", True), ("count", "0", False),
    ("count or zero", "0", True), ("count or zero", "-1", False),
    ("procs", "256", True), ("procs", "257", False), ("procs", "0", False), ("procs", str(INT64_MAX), False),
    ("schedule name", "nightly-refresh", True), ("schedule name", "two words", False), ("schedule name", "*", False),
    ("workflow name", "nightly digest", True), ("workflow name", "x" * 256, False), ("workflow name", "", False),
    ("prefetch", "1000", True), ("prefetch", "1001", False), ("prefetch", "0", False),
    ("vram mb", "1", True), ("vram mb", "0", False),
    ("gpu index", "0", True), ("gpu index", "-1", False),
    ("gpus", "1", True), ("gpus", "64", True), ("gpus", "0", False), ("gpus", "65", False),
    ("host priority", str(-(2 ** 31 - 1)), True), ("host priority", str(2 ** 31), False),
    ("port", "0", True), ("port", "65535", True), ("port", "65536", False),
    ("seconds", "1.5", True), ("seconds", "0", False), ("seconds", "inf", False), ("seconds", " 1", False),
    ("seconds", "1_0", False), ("seconds", "\u0661", False),
    ("delay", "0", True), ("delay", "-1", False),
    ("poll", "0.05", True), ("poll", "0.049", False), ("poll", "1e-6", False),
    ("positive number", "5", True), ("positive number", "nan", False),
    ("run at", "0", True), ("run at", "1e20", False),
]


class FieldsTest(unittest.TestCase):
    """``names.RULES``: each field's rule, by its rows, and a row at least for every field."""

    def test_each_field(self):
        for field, value, accepted in FIELDS:
            rule = names.RULES[field]
            with self.subTest(field=field, value=names.shown(value)):
                if accepted:
                    rule.parse(field, value)
                else:
                    with self.assertRaises(names.InvalidValue) as caught:
                        rule.parse(field, value)
                    self.assertTrue(str(caught.exception).startswith(f"{field} must be "), caught.exception)

    def test_every_field_has_an_accepted_and_a_refused_row(self):
        for field in names.RULES:
            with self.subTest(field=field):
                self.assertEqual({accepted for name, _, accepted in FIELDS if name == field}, {True, False})

    def test_each_rule_is_filed_under_its_field(self):
        for field, rule in names.RULES.items():
            self.assertEqual(rule.field, field)
            self.assertIn(rule.kind, (names.INT, names.FLOAT, names.TEXT))
            self.assertTrue(rule.requirement)

    def test_the_flags_and_settings_share_the_rules_bounds(self):
        """The bounds are written once: the procs cap and the poll floor are the rules'."""
        commands = subcommands(cli.build_parser())
        procs = next(action for action in commands["worker"]._actions if action.dest == "procs")
        for text, accepted in ((str(names.MOST_PROCS), True), (str(names.MOST_PROCS + 1), False)):
            with self.subTest(procs=text):
                if accepted:
                    self.assertEqual(procs.type(text), names.MOST_PROCS)
                else:
                    with self.assertRaises(argparse.ArgumentTypeError):
                        procs.type(text)
        self.assertEqual(config.Config(poll=names.LEAST_POLL).poll, names.LEAST_POLL)
        with self.assertRaises(ConfigError):
            config.Config(poll=names.LEAST_POLL / 2)


class NamesTest(unittest.TestCase):
    """The checks the rules are made of, table-driven."""

    def test_names(self):
        cases = [  # check, value, options -> accepted?
            (names.check_name, "gpu-large", {}, True),
            (names.check_name, "módulo:função", {}, True),
            (names.check_name, "", {}, False),
            (names.check_name, "", {"empty": True}, True),
            (names.check_name, "a b", {}, False),
            (names.check_name, "a\tb", {}, False),
            (names.check_name, "*", {}, False),
            (names.check_name, "q\udcff", {}, False),
            (names.check_name, "q\x00", {}, False),
            (names.check_name, "q\x1b", {}, False),
            (names.check_name, "x" * 255, {}, True),
            (names.check_name, "x" * 256, {}, False),
            (names.check_name, 5, {}, False),
            (names.check_name, None, {"empty": True}, False),
            (names.check_text, "order 42", {}, True),
            (names.check_text, "", {}, False),
            (names.check_text, "", {"empty": True}, True),
            (names.check_text, "k\udcff", {}, False),
            (names.check_text, "k\x00", {}, False),
            (names.check_text, "x" * 4097, {}, False),
            (names.check_node_id, "load_2", {}, True),
            (names.check_node_id, "2load", {}, False),
            (names.check_node_id, "a\n", {}, False),
            (names.check_module, "app", {}, True),
            (names.check_module, "app.", {}, False),
        ]
        self._table(cases)

    def test_numbers(self):
        inf, nan = float("inf"), float("nan")
        cases = [
            (names.check_int, INT64_MAX, {}, True),
            (names.check_int, -INT64_MAX - 1, {}, True),
            (names.check_int, INT64_MAX + 1, {}, False),
            (names.check_int, -INT64_MAX - 2, {}, False),
            (names.check_int, 10 ** 5000, {}, False),
            (names.check_int, True, {}, False),
            (names.check_int, 1.0, {}, False),
            (names.check_int, "1", {}, False),
            (names.check_int, 0, {"least": 1}, False),
            (names.check_int, 2 ** 31, {"least": 1, "most": names.INT32_MAX}, False),
            (names.check_seconds, 0, {}, False),
            (names.check_seconds, 0, {"zero": True}, True),
            (names.check_seconds, -1, {"zero": True}, False),
            (names.check_seconds, names.MAX_SECONDS, {}, True),
            (names.check_seconds, names.MAX_SECONDS * 1.01, {}, False),
            (names.check_seconds, 1e12, {}, False),
            (names.check_seconds, inf, {}, False),
            (names.check_seconds, nan, {}, False),
            (names.check_seconds, False, {"zero": True}, False),
            (names.check_seconds, 0.05, {"least": 0.05}, True),
            (names.check_seconds, 0.01, {"least": 0.05}, False),
            (names.check_epoch, 0, {}, True),
            (names.check_epoch, names.EPOCH_MIN, {}, True),
            (names.check_epoch, names.EPOCH_MAX, {}, True),
            (names.check_epoch, names.EPOCH_MAX + 1, {}, False),
            (names.check_epoch, nan, {}, False),
            (names.check_epoch, "x", {}, False),
            (names.check_number, 5, {"positive": True}, True),
            (names.check_number, 0, {"positive": True}, False),
            (names.check_number, -inf, {}, False),
        ]
        self._table(cases)

    def test_numbers_are_read_from_ascii_text_only(self):
        cases = [  # reader, text -> value, or None for ValueError
            (names.read_int, "42", 42), (names.read_int, "-7", -7), (names.read_int, " 3", None),
            (names.read_int, "3\n", None), (names.read_int, "+3", None), (names.read_int, "1_000", None),
            (names.read_int, ARABIC_THREE, None), (names.read_int, "\uff13", None), (names.read_int, HUGE, None),
            (names.read_float, "1.5", 1.5), (names.read_float, "1e-6", 1e-6), (names.read_float, " 1", None),
            (names.read_float, "1_0", None), (names.read_float, "\u0661.5", None),
        ]
        for read, text, value in cases:
            with self.subTest(read=read.__name__, text=text[:10]):
                if value is None:
                    self.assertRaises(ValueError, read, text)
                else:
                    self.assertEqual(read(text), value)

    def test_every_accepted_bound_fits_datetime_and_the_databases(self):
        import datetime

        utc = datetime.timezone.utc
        for epoch in (names.EPOCH_MIN, names.EPOCH_MAX):
            datetime.datetime.fromtimestamp(epoch, tz=utc)
        now = datetime.datetime(2100, 1, 1, tzinfo=utc).timestamp()
        datetime.datetime.fromtimestamp(now + names.MAX_SECONDS, tz=utc)
        with contextlib.closing(sqlite3.connect(":memory:")) as conn:
            self.assertEqual(conn.execute("SELECT ?, ?", (names.INT64_MAX, names.INT64_MIN)).fetchone(),
                             (names.INT64_MAX, names.INT64_MIN))

    def test_json(self):
        cases = [  # text -> accepted?
            ('{"a": [1, 2.5, "x", null, true]}', True),
            ("[" * 100 + "]" * 100, True),
            ("[" * 101 + "]" * 101, False),
            (DEEP, False),
            ("1" * 4300, True),
            (HUGE, False),
            ("NaN", False),
            ("[-Infinity]", False),
            ("1e999", False),
            ('"\\udcff"', True),  # text inside args is stored escaped; names are checked apart
        ]
        for text, accepted in cases:
            with self.subTest(text=text[:30]):
                if accepted:
                    names.parse_json("--args", text)
                else:
                    with self.assertRaises(ConfigError) as caught:
                        names.parse_json("--args", text)
                    self.assertTrue(str(caught.exception).startswith("--args "), caught.exception)
        with self.assertRaises(json.JSONDecodeError):
            names.parse_json("--args", "{not json")

    def test_messages_name_the_field_and_stay_short(self):
        with self.assertRaises(names.InvalidValue) as caught:
            names.check_int("priority", 10 ** 5000)
        message = str(caught.exception)
        self.assertTrue(message.startswith("priority must be an integer from"), message)
        self.assertLess(len(message), 200)

    def _table(self, cases):
        for check, value, options, accepted in cases:
            with self.subTest(check=check.__name__, value=names.shown(value), options=options):
                if accepted:
                    check("field", value, **options)
                else:
                    with self.assertRaises(ConfigError) as caught:
                        check("field", value, **options)
                    self.assertTrue(str(caught.exception).startswith("field "), caught.exception)


# --- rows written by plain SQL, as the listings print them -----------------------------

CLEAR_AND_BELL = "\x1b[2J\x07"  # clear the screen, ring the bell
HOSTILE = f"x{CLEAR_AND_BELL}\x9b31m\x7f\u202e"  # and a one-character CSI, DEL, a bidi override
# What a terminal acts on: C0 but the newline and tab a layout may use, DEL, C1, separators, bidi.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class ControlCharacterContract:
    """Names and free text holding control characters, written by someone else's plain SQL,
    reach no terminal raw: every listing for people prints them escaped, and shows them."""

    PARAM = "?"

    def insert(self, table: str, **row: Any) -> None:
        marks = ", ".join([self.PARAM] * len(row))  # the test's own column names, never input
        self.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})", tuple(row.values()))

    def plant(self) -> int:
        now = time.time()
        job = dict(task=f"m:{HOSTILE}", args="null", run_at=now, created_at=now, updated_at=now)
        self.insert("jobs", project="", queue=f"q{HOSTILE}", error=f"boom{HOSTILE}", state="failed", **job)
        self.insert("jobs", project=f"p{HOSTILE}", queue=f"q{HOSTILE}", **job)
        worker = dict(pid=7, started_at=now, last_seen=now)
        self.insert("workers", worker_id=f"w1{HOSTILE}", project="", host=f"h{HOSTILE}", queue=f"q{HOSTILE}", **worker)
        self.insert("workers", worker_id=f"w2{HOSTILE}", project=f"p{HOSTILE}", host="h", queue="q", **worker)
        self.insert("worker_controls", project="", host=f"h{HOSTILE}", queue=f"q{HOSTILE}", desired="off",
                    changed_by=f"by{HOSTILE}", reason=f"why{HOSTILE}")
        [listed] = json.loads(self.cli("jobs", "--json").stdout)
        self.insert("job_events", job_id=listed["id"], at=now, kind=f"note{HOSTILE}", detail='{"m": "\\u001b[2J"}')
        return listed["id"]

    def test_listings_print_control_characters_escaped(self):
        job_id = self.plant()
        for argv in (["jobs"], ["job", str(job_id)], ["workers"], ["workers", "--all-projects"], ["status"],
                     ["broker"]):
            with self.subTest(argv=argv):
                result = self.cli(*argv)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIsNone(RAW_CONTROL.search(result.stdout + result.stderr), result.stdout)
                self.assertIn("x\\x1b[2J\\x07\\x9b31m\\x7f\\u202e", result.stdout, "the value is shown, escaped")

    def test_json_holds_them_as_stored_escaped_by_json(self):
        job_id = self.plant()
        for argv in (["jobs", "--json"], ["job", str(job_id), "--json"]):
            with self.subTest(argv=argv):
                shown = self.cli(*argv).stdout
                self.assertIsNone(RAW_CONTROL.search(shown), shown)
                job = json.loads(shown)
                self.assertEqual((job[0] if isinstance(job, list) else job)["queue"], f"q{HOSTILE}")


class SQLiteControlCharacterTest(ControlCharacterContract, TempDirTestCase):
    def setUp(self):
        super().setUp()
        self.cli("init")

    def execute(self, sql: str, params: tuple) -> None:
        with contextlib.closing(sqlite3.connect(self.db)) as conn, conn:
            conn.execute(sql, params)


class PostgresControlCharacterTest(ControlCharacterContract, PostgresServerCase, TempDirTestCase):
    PARAM = "%s"

    def setUp(self):
        super().setUp()
        self.db = self.empty_database()
        self.cli("init")

    def execute(self, sql: str, params: tuple) -> None:
        from rowfleet.store.postgres import driver

        with contextlib.closing(driver().connect(self.db)) as conn, conn:
            conn.execute(sql, params)


if __name__ == "__main__":
    unittest.main()
