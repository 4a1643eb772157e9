"""The ``wait`` section: how soon ``rowfleet.wait`` returns once the job it waits for commits.

A real worker process (``rowfleet worker``, idle, its safety poll 30 s) runs each job; this
process enqueues one job at a time and waits for it with ``Store.wait_for``. The latency is
the moment the wait returned minus the job's ``finished_at`` (both this machine's clock: the
worker stamps it in the transaction that commits the outcome, so the figure includes that
commit). The baseline is the same wait with its push path switched off, looking every 50 ms
(what a client polling the row would do). On PostgreSQL the push path is a NOTIFY sent for
jobs a waiter marked, on SQLite the file watch.

Imports the harness and rowfleet's public pieces, never another section.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from . import harness
from .harness import NOOP, PROJECT, QUEUE, TASK_MODULE, Bench, Row, percentile, progress, ratio

from rowfleet.config import Config
from rowfleet.job import JobSpec
from rowfleet.store import open_store
from rowfleet.store.wake import Sleeper

POLLING = 0.05  # the baseline's look at the row, every this many seconds
LEGEND = """\
  wait        rowfleet.wait's return after the job's commit: a real `rowfleet worker` (idle,
              poll 30 s) runs each job, enqueued one at a time; latency = the wait's
              return minus the job's finished_at, stamped by the worker in the commit that
              writes its outcome. Baseline: the same wait with no push path, looking at
              the row every 50 ms. Target: p50 <= 10 ms on both databases."""


def run(bench: Bench) -> None:
    samples = max(20, bench.sizes.polling_samples // 2)
    progress(f"wait: {samples} jobs waited for on SQLite, pushed and polling")
    _rows(bench, "sqlite", bench.lab.database("wait"), "FULL", samples)
    server = harness.pg_server(bench, "wait", "pg wait() after the job's commit")
    if server is None:
        return
    try:
        url = server.create_database("rowfleet_bench_wait")
        with open_store(Config(db=url, project=PROJECT), create=True) as store:
            store.migrate()
        settings = dict(server.psql(url, "SELECT name, setting FROM pg_settings WHERE name IN "
                                         "('fsync', 'synchronous_commit')"))
        progress(f"wait: {samples} jobs waited for on PostgreSQL, pushed and polling")
        _rows(bench, "pg", url, harness.durability(settings), samples)
        server.drop_database(url)
    finally:
        server.stop()


def _rows(bench: Bench, name: str, db: str, durability: str, samples: int) -> None:
    worker = subprocess.Popen([sys.executable, "-m", "rowfleet", "--db", db, "worker", "--app", TASK_MODULE,
                               "--queue", QUEUE, "--poll", "30"],
                              env=dict(os.environ, PYTHONPATH=os.pathsep.join((str(harness.SRC), bench.lab.task_dir))),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with open_store(Config(db=db, project=PROJECT, poll=30.0)) as pushed, \
                open_store(Config(db=db, project=PROJECT, poll=POLLING)) as polling:
            polling.job_waiter = lambda job_id, project: Sleeper()  # no push path: its poll alone
            _latencies(pushed, 3)  # the worker up and warm before anything is timed
            ours, theirs = _latencies(pushed, samples), _latencies(polling, samples)
    finally:
        worker.terminate()
        worker.wait(30)
    prefix = "" if name == "sqlite" else "pg "
    for label, q in (("p50", 0.50), ("p95", 0.95)):
        a, b = percentile(ours, q) * 1000, percentile(theirs, q) * 1000
        bench.add(Row(f"{prefix}wait() after the job's commit, {label} (ms)", durability, f"{a:.2f}", f"{b:.2f}",
                      ratio(a, b), f"{len(ours)} jobs, one at a time; baseline: the row read every 50 ms"))


def _latencies(store: Any, samples: int) -> list[float]:
    """Seconds from each job's commit to the wait's return, one job at a time."""
    found = []
    for _ in range(samples):
        job = store.enqueue(JobSpec(task=NOOP, project=PROJECT, queue=QUEUE))
        ended = store.wait_for(job.id, PROJECT, timeout=60.0)
        found.append(max(0.0, time.time() - ended.finished_at))
    return found

