"""The ``cpu`` section: the CPU one job costs, and where rowfleet's goes.

At synchronous=NORMAL a commit does not wait for the disk, so a loop's speed is its CPU.
Each side drains the same number of no-op jobs in a process of its own, from the same
start: rowfleet's real worker loop (``Worker(burst=True)``, its keeper and watchdog threads
included; once as it comes, once with ``batch``), and the yardstick's bare two-transaction
loop (``yardstick.drain``). The CPU is the process's own (user + system, every thread),
read with ``getrusage`` around the drain alone, so that neither side is charged for
importing or opening its database.

A second run of rowfleet's worker under ``cProfile`` splits its main thread's time into
areas by where the code lives (the SQLite library's calls, the store's Python, job rows,
the worker loop, logging, threads and locks, the rest); each area's share of the profiled
time is applied to the unprofiled CPU per job, so the rows add up to the main thread's
part of the first row. The profiler slows Python code more than C calls: the shares lean
towards Python.

Imports the harness and rowfleet's public pieces, never another section.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import resource
import time
from typing import Any

from . import harness, yardstick
from .harness import NOOP, PROJECT, QUEUE, Bench, Row, progress, ratio

from rowfleet import tasks
from rowfleet.config import Config
from rowfleet.job import JobSpec
from rowfleet.store import open_store
from rowfleet.worker.loop import Worker

BATCH = 10
LEGEND = """\
  cpu         CPU per job at synchronous=NORMAL (user + system, every thread of the
              process, the drain alone): rowfleet's `Worker(burst=True)` (its keeper
              and watchdog threads included), and with `batch=10`, against the
              yardstick's bare loop, each draining the same no-op jobs in its own
              process. "profile: ..." rows split the worker's main thread by where its
              time goes (cProfile's shares, applied to the unprofiled CPU per job)."""
# Where a profiled function lives, by the first of these its file or name contains.
AREAS = (
    ("sqlite3.", "SQLite: statements, commits, fetches"),
    ("/rowfleet/store/", "store: the Python around each statement"),
    ("/rowfleet/sql/", "store: the Python around each statement"),
    ("/rowfleet/job.py", "job rows: decode, outcome, encode"),
    ("/rowfleet/worker/", "worker loop, keeper and watchdog hand-offs"),
    ("/rowfleet/", "rest of rowfleet"),
    ("logging", "logging"),
    ("threading", "threads and locks"),
    ("lock", "threads and locks"),
    ("json", "JSON"),
)
OTHER = "the rest (standard library, the handler)"


def run(bench: Bench) -> None:
    jobs = bench.sizes.walpages_jobs * 10
    progress(f"cpu: the bare loop, {jobs:,} jobs")
    bare = _in_child(bench, "bare", jobs)
    plain_cpu = 0.0
    for label, batch in (("worker", 1), (f"worker, batch={BATCH}", BATCH)):
        progress(f"cpu: rowfleet's {label}, {jobs:,} jobs")
        ours = _in_child(bench, "worker", jobs, batch)
        plain_cpu = plain_cpu or ours["cpu"]
        bench.add(Row(f"cpu per job, {label} (us)", "NORMAL", f"{ours['cpu']:.0f}", f"{bare['cpu']:.0f}",
                      ratio(ours["cpu"], bare["cpu"]), f"{jobs:,} jobs a side; wall {ours['wall']:.0f}/"
                      f"{bare['wall']:.0f} us per job; the bare loop is the yardstick's, one process"))
    progress(f"cpu: rowfleet's worker under cProfile, {jobs:,} jobs")
    areas = _in_child(bench, "profile", jobs)["areas"]
    total = sum(areas.values()) or 1.0
    for area, seconds in sorted(areas.items(), key=lambda item: -item[1]):
        share = seconds / total
        bench.add(Row(f"profile: {area} (us/job)", "NORMAL", f"{share * plain_cpu:.0f}", "-", "-",
                      f"{share * 100:.0f}% of the worker's main thread under cProfile"))


def _in_child(bench: Bench, side: str, jobs: int, batch: int = 1) -> dict[str, Any]:
    """Run ``side`` on a fresh database of ``jobs`` queued jobs in a spawned process."""
    if side == "bare":
        path = os.path.join(bench.lab.folder("cpu-bare"), "bare.db")
        yardstick.load(path, jobs)
    else:
        path = bench.lab.database(f"cpu-{side}")
        with open_store(Config(db=path, project=PROJECT)) as store:
            store.enqueue_many(JobSpec(task=NOOP, project=PROJECT, queue=QUEUE), [None] * jobs)
    receive, send = bench.mp.Pipe(duplex=False)
    child = bench.mp.Process(target=drain_child, args=(side, path, bench.lab.task_dir, batch, send),
                             name=f"bench-cpu-{side}")
    child.start()
    send.close()
    try:
        found = receive.recv()
    except EOFError:
        raise RuntimeError(f"the cpu section's {side} child died before it reported") from None
    finally:
        child.join(60)
    found["cpu"], found["wall"] = found["cpu"] / jobs * 1e6, found["wall"] / jobs * 1e6
    return found


# --- the child process (module level: a spawned child imports this file) -------------------


def drain_child(side: str, path: str, task_dir: str, batch: int, report: Any) -> None:
    harness.import_tasks(task_dir)
    profiler = cProfile.Profile() if side == "profile" else None
    if side == "bare":
        handler = tasks.resolve(NOOP)
        conn = yardstick.connect(path, "NORMAL")
        drain = lambda: yardstick.drain(conn, handler)  # noqa: E731 - the one call timed
    else:
        worker = Worker(Config(db=path, project=PROJECT, synchronous="NORMAL"), QUEUE, burst=True, batch=batch)
        drain = worker.run
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if profiler is not None:
        profiler.runcall(drain)
    else:
        drain()
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report.send({"cpu": cpu, "wall": wall, "areas": _areas(profiler) if profiler is not None else {}})
    report.close()


def _areas(profiler: cProfile.Profile) -> dict[str, float]:
    """The profiled main thread's own time (seconds), summed by ``AREAS``."""
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (calls, primitive, own, cumulative, callers)
    areas: dict[str, float] = {}
    for (filename, _, name), (_, _, own, _, _) in stats.items():
        where = f"{filename} {name}"
        area = next((label for needle, label in AREAS if needle in where), OTHER)
        areas[area] = areas.get(area, 0.0) + own
    return areas
