"""The ``peers`` section (``python make.py bench --peers``): rowfleet's real ``worker``
command beside a peer's real consumer, the same jobs, durability and file system, taking
turns.

The peer is Huey (its ``huey_consumer`` on ``SqliteHuey`` with ``fsync=True``: SQLite in WAL
mode at synchronous=FULL, as rowfleet's default). It is installed once into a throwaway
venv under the cache folder (``$XDG_CACHE_HOME/rowfleet-bench/peers-venv``, else
``~/.cache/...``) and runs only there, from a small app module this section writes into
the bench's temporary folder: nothing of rowfleet imports a peer. Without network the
install fails, and the section says so in one row.

Rows: jobs/s with 1 and 4 consumer processes (``rowfleet worker``, with ``--procs 4
--no-sampler`` for 4, vs ``huey_consumer -w N -k process``), and the seconds from a process's start to its first finished job. Each
side's count is read from outside, from its own SQLite file, every 5 ms: the window opens at
the first finished job and closes when all are done, so neither side is charged for its
start in the jobs/s rows.

Imports the harness and rowfleet's public pieces, never another section.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from typing import Callable

from . import harness
from .harness import NOOP, PROJECT, QUEUE, TASK_MODULE, Bench, Row, count, progress, ratio, rounds_note

import rowfleet

PEER = "huey"
HUEY_APP = '''\
"""Huey's side of rowfleet's bench (written by tools/bench/peers.py)."""
import os

from huey import SqliteHuey

huey = SqliteHuey(filename=os.environ["BENCH_HUEY_DB"], fsync=os.environ.get("BENCH_HUEY_FSYNC", "1") == "1")


@huey.task()
def noop():
    return True  # a result row, as rowfleet stores every job's result
'''
HUEY_LOAD = "import sys, bench_huey_app as app\nfor _ in range(int(sys.argv[1])):\n    app.noop()\n"
POLL = 0.005  # seconds between counts of finished jobs
DRAIN_LIMIT = 120.0  # seconds a side may take to finish its jobs

LEGEND = """\
  peers       --peers: rowfleet's real `rowfleet worker` (1 process; with 4, `--procs 4
              --no-sampler`: a supervisor and 4 workers; synchronous=FULL and INFO
              logging, its defaults) vs Huey's real `huey_consumer -w N -k process` on
              SqliteHuey(fsync=True) (WAL, synchronous=FULL; its default logging), the
              same number of jobs each, in one temp folder, taking turns. A no-op task that
              returns a value, so both store a result. Counted from outside every 5 ms:
              jobs/s over the window from the first finished job to the last; "start ->
              first job" = process start to its first finished job. Huey deletes a task
              when it takes it (at most once: a killed consumer loses it); rowfleet
              leases, fences and keeps every attempt. Huey runs from a venv under the
              cache folder; its version is in the note."""


def run(bench: Bench) -> None:
    if not bench.peers:
        progress("peers: not asked for (--peers)")
        return
    python, why = peer_python()
    if python is None:
        bench.add(Row("peers", "-", "-", "-", "-", f"skipped: {why}"))
        return
    version = peer_version(python)
    app_dir = bench.lab.folder("peers-app")
    with open(os.path.join(app_dir, "bench_huey_app.py"), "w", encoding="utf-8") as handle:
        handle.write(HUEY_APP)
    jobs = max(2_000, bench.sizes.roundtrip_jobs // 8)
    rounds = bench.sizes.roundtrip_rounds
    for procs in (1, 4):
        ours, theirs, our_starts, their_starts = [], [], [], []
        for round_no in range(rounds):
            progress(f"peers, {procs} process(es), round {round_no + 1} of {rounds}: Huey, then rowfleet, "
                     f"{jobs:,} jobs each")
            rate, started = _huey(bench, python, app_dir, procs, jobs)
            theirs.append(rate)
            their_starts.append(started)
            rate, started = _rowfleet(bench, procs, jobs)
            ours.append(rate)
            our_starts.append(started)
        a, b = statistics.median(ours), statistics.median(theirs)
        bench.add(Row(f"real worker vs Huey consumer, {procs} proc{'s' if procs > 1 else ''} (jobs/s)", "FULL",
                      count(a), count(b), ratio(a, b), f"{rounds_note(rounds)} of {jobs:,} jobs; huey {version}"))
        if procs == 1:
            a, b = statistics.median(our_starts), statistics.median(their_starts)
            bench.add(Row("process start -> first job (s)", "FULL", f"{a:.2f}", f"{b:.2f}", ratio(a, b),
                          f"{rounds_note(rounds)}; `rowfleet worker` vs `huey_consumer`, 1 process; huey {version}"))


def peer_python() -> tuple[str | None, str]:
    """The venv's python, made and filled on first use; (None, why) if the install failed."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    venv = os.path.join(cache, "rowfleet-bench", "peers-venv")
    python = os.path.join(venv, "bin", "python")
    if os.path.exists(os.path.join(venv, "bin", "huey_consumer")):
        return python, ""
    progress(f"peers: installing {PEER} into {venv}")
    try:
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True, timeout=300)
        subprocess.run([python, "-m", "pip", "install", "--quiet", PEER], check=True, capture_output=True,
                       timeout=600)
    except (subprocess.SubprocessError, OSError) as exc:
        return None, f"pip could not install {PEER} into {venv} (no network?): {type(exc).__name__}"
    return python, ""


def peer_version(python: str) -> str:
    probe = subprocess.run([python, "-c", f"import importlib.metadata as m; print(m.version({PEER!r}))"],
                           capture_output=True, text=True, timeout=60)
    return probe.stdout.strip() or "?"


def _huey(bench: Bench, python: str, app_dir: str, procs: int, jobs: int) -> tuple[float, float]:
    folder = bench.lab.folder(f"huey-{procs}")
    path = os.path.join(folder, "huey.db")
    env = dict(os.environ, BENCH_HUEY_DB=path, PYTHONPATH=app_dir)
    subprocess.run([python, "-c", HUEY_LOAD, str(jobs)], env=dict(env, BENCH_HUEY_FSYNC="0"), check=True,
                   timeout=DRAIN_LIMIT)
    consumer = [os.path.join(os.path.dirname(python), "huey_consumer"), "bench_huey_app.huey", "-w", str(procs),
                "-k", "process", "-n"]
    return _timed(consumer, env, folder, jobs, lambda: _count(path, "SELECT count(*) FROM kv"))


def _rowfleet(bench: Bench, procs: int, jobs: int) -> tuple[float, float]:
    path = bench.lab.database(f"peers-rowfleet-{procs}")
    rowfleet.configure(db=path, project=PROJECT)
    rowfleet.enqueue_many(NOOP, [None] * jobs, queue=QUEUE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(harness.SRC), bench.lab.task_dir)))
    worker = [sys.executable, "-m", "rowfleet", "--db", path, "worker", "--app", TASK_MODULE, "--queue", QUEUE]
    if procs > 1:  # a supervisor and its workers, as Huey's consumer runs its own; no telemetry sampler
        worker += ["--procs", str(procs), "--no-sampler"]
    return _timed(worker, env, os.path.dirname(path), jobs,
                  lambda: _count(path, "SELECT count(*) FROM jobs WHERE state = 'completed'"))


def _timed(argv: list[str], env: dict[str, str], folder: str, jobs: int,
           finished: Callable[[], int]) -> tuple[float, float]:
    """Start ``argv`` (its own process group, its output to a log in ``folder``), count what
    it finished until all ``jobs`` are; (jobs/s from the first to the last, seconds from the
    start to the first)."""
    with open(os.path.join(folder, "consumer.log"), "w", encoding="utf-8") as log:
        began = time.monotonic()
        child = subprocess.Popen(argv, env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            first_at, first_count, done = None, 0, 0
            while done < jobs:
                if time.monotonic() - began > DRAIN_LIMIT or child.poll() is not None:
                    raise RuntimeError(f"{os.path.basename(argv[0])} finished {done} of {jobs} jobs "
                                       f"(see {folder}/consumer.log)")
                time.sleep(POLL)
                done = finished()
                if first_at is None and done:
                    first_at, first_count = time.monotonic(), done
            ended = time.monotonic()
        finally:
            _stop(child)
    return (done - first_count) / max(1e-6, ended - first_at), first_at - began


def _count(path: str, query: str) -> int:
    """A count read from ``path`` by a fixed query of this module; 0 while the table is not
    there yet."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        try:
            return conn.execute(query).fetchone()[0]
        finally:
            conn.close()
    except sqlite3.OperationalError:
        return 0


def _stop(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(10)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(10)
