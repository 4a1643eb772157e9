"""The ``fleet`` section of rowfleet's benchmark: what an idle fleet costs the machine.

One orchestrator, eight workers and one scheduler (one hourly schedule) run as the real
command-line processes (``python -m rowfleet ...``) on one SQLite file with nothing to do;
once each has beaten and settled, the CPU time of every thread of every process is summed
over ``fleet_seconds`` from ``/proc/PID/task/TID/schedstat`` (nanoseconds of CPU, where
``/proc/PID/stat`` counts 10 ms ticks). The baseline is the same fleet with the workers'
and orchestrator's doorbells switched off (the WAL watch alone, as before doorbells: every
commit, their own heartbeats included, wakes every one of them).
"""

from __future__ import annotations

import glob
import json
import os
import sqlite3
import subprocess
import sys
import time
from typing import Any

from . import harness
from .harness import Bench, Row, progress, ratio

LEGEND = """\
  fleet       an idle fleet: 1 orchestrator, 8 workers (--queue default) and 1 scheduler (one
              hourly schedule), each `python -m rowfleet ...` with default settings on one
              SQLite file, nothing enqueued. CPU = every thread's time on a CPU
              (/proc/PID/task/*/schedstat) over the window, summed, as % of one core.
              Baseline: the same fleet with the doorbells switched off (WAL watch alone)."""

WORKERS = 8
SETTLE = 2.0  # seconds after every process has beaten before the window opens

# A child that runs the command line with its doorbells switched off (the baseline).
NO_BELLS = ("import sys; from rowfleet import cli; from rowfleet.store import wake; wake._watch_bells = lambda *where: None; "
            "sys.exit(cli.main(sys.argv[1:]))")


def run(bench: Bench) -> None:
    seconds = bench.sizes.fleet_seconds
    progress(f"idle fleet: 1 orchestrator + {WORKERS} workers + 1 scheduler, {seconds:g} s with bells, "
             f"then {seconds:g} s with the WAL watch alone")
    bells = _idle_fleet(bench, bells=True)
    wal = _idle_fleet(bench, bells=False)
    bench.add(Row(f"idle fleet CPU, 1+{WORKERS}+1 processes (% of a core)", "FULL", f"{bells['total']:.2f}",
                  f"{wal['total']:.2f}", ratio(bells["total"], wal["total"]) if wal["total"] else "-",
                  f"bells vs WAL watch alone; {seconds:g} s; orchestrator {bells['orchestrator']:.2f}/"
                  f"{wal['orchestrator']:.2f}, workers {bells['workers']:.2f}/{wal['workers']:.2f}, "
                  f"scheduler {bells['scheduler']:.2f}/{wal['scheduler']:.2f}; target < 1%: "
                  f"{'met' if bells['total'] < 1.0 else 'not met'}"))


def _idle_fleet(bench: Bench, bells: bool) -> dict[str, float]:
    """Start the fleet on a fresh file, wait for it to settle, and measure: % of a core by
    role and in all."""
    path = bench.lab.database("fleet-bells" if bells else "fleet-wal")
    schedule = os.path.join(os.path.dirname(path), "fleet-schedule.json")
    with open(schedule, "w") as out:
        json.dump([{"name": "hourly", "task": harness.NOOP, "cron": "0 * * * *"}], out)
    common = ["--db", path]  # the default project, harness.PROJECT
    roles = {"orchestrator": [["orchestrator", *common]],
             "workers": [["worker", *common, "--app", harness.TASK_MODULE] for _ in range(WORKERS)],
             "scheduler": [["scheduler", *common, "--schedule", schedule, "--app", harness.TASK_MODULE]]}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(harness.SRC), bench.lab.task_dir]))
    started: dict[str, list[subprocess.Popen[bytes]]] = {role: [] for role in roles}
    try:
        for role, commands in roles.items():
            for argv in commands:
                started[role].append(_start(argv, env, bells))
        _wait_for_beats(path, started)
        time.sleep(SETTLE)
        before = {role: [_cpu_ns(p.pid) for p in processes] for role, processes in started.items()}
        t0 = time.monotonic()
        time.sleep(bench.sizes.fleet_seconds)
        elapsed = time.monotonic() - t0
        after = {role: [_cpu_ns(p.pid) for p in processes] for role, processes in started.items()}
    finally:
        for processes in started.values():
            for process in processes:
                process.terminate()
        for processes in started.values():
            for process in processes:
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    share = {role: 100.0 * sum(a - b for a, b in zip(after[role], before[role])) / 1e9 / elapsed
             for role in roles}
    share["total"] = sum(share.values())
    return share


def _start(argv: list[str], env: dict[str, str], bells: bool) -> "subprocess.Popen[bytes]":
    code = ["-m", "rowfleet"] if bells else ["-c", NO_BELLS]
    return subprocess.Popen([sys.executable, *code, *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _wait_for_beats(path: str, started: dict[str, list[Any]]) -> None:
    """Until the file shows every worker's heartbeat and the orchestrator's, or raise."""
    deadline = time.monotonic() + 60.0
    while True:
        for processes in started.values():
            for process in processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a fleet process exited with code {process.returncode}: {process.args}")
        try:
            with sqlite3.connect(path) as conn:
                workers = conn.execute("SELECT count(*) FROM workers WHERE stopped_at IS NULL").fetchone()[0]
                orchestrators = conn.execute("SELECT count(*) FROM orchestrators").fetchone()[0]
            if workers >= WORKERS and orchestrators >= 1:
                return
        except sqlite3.Error:
            pass  # not made yet: the orchestrator makes the schema
        if time.monotonic() > deadline:
            raise RuntimeError("the idle fleet did not come up within 60 s")
        time.sleep(0.1)


def _cpu_ns(pid: int) -> int:
    """Nanoseconds every thread of ``pid`` has run on a CPU so far (threads gone are not
    counted: the idle fleet starts none after it settles)."""
    total = 0
    for stat in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(stat) as source:
                total += int(source.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended between the listing and the read
    return total
