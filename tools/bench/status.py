"""The ``status`` section of rowfleet's benchmark: what ``rowfleet status --json`` costs on a
SQLite file holding a million jobs, nearly all of them finished, as a long-running
deployment keeps them until they are pruned.

Measures the command's store work in-process (``rowfleet.views.snapshot.snapshot``: one read
transaction of counts, workers with their jobs' progress, switches and services) against a
bare ``SELECT state, count(*) FROM jobs GROUP BY state`` on the same file, taking turns;
the note adds the wall time of the whole command (``python -m rowfleet status --json`` in a
fresh process) and what the counts query status ran before the snapshot (a ``GROUP BY``
over every job) costs on the same file. The table holds ``max(--claim-rows)`` jobs (1M by
default, 100k with ``--quick``), written by one ``INSERT ... SELECT`` over a recursive CTE.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

from . import harness
from .harness import Bench, Row, progress, ratio, short

from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.store.sqlite import SQLiteStore
from rowfleet.views.snapshot import snapshot

LEGEND = """\
  status      rowfleet: rowfleet.views.snapshot.snapshot(store), the store work of `status --json`
              (one read transaction: counts, each finished state counted up to 10,000, live
              ones exactly; workers joined to their jobs' progress; switches; services), on
              an open store. Baseline: a bare SELECT state, count(*) FROM jobs GROUP BY state
              on the same file. Both take turns, median of the calls. The table: ~98% completed,
              1% failed, 1% queued and 8 running jobs held by 8 beating workers, in 2 queues.
              "CLI" is the whole `python -m rowfleet status --json` process, median of 3."""

QUEUES = ("default", "gpu")
WORKERS = 8
CALLS = 30       # per side, at most ...
SECONDS = 10.0   # ... and for at most this long
CLI_RUNS = 3

# Jobs 1..N: the newest 1% queued, one in a hundred of the rest failed, the others completed.
LOAD = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :rows)
INSERT INTO jobs (project, queue, task, state, run_at, created_at, updated_at, started_at, finished_at)
SELECT '', CASE WHEN i % 4 = 0 THEN 'gpu' ELSE 'default' END, :task,
       CASE WHEN i > :rows - :rows / 100 THEN 'queued' WHEN i % 100 = 7 THEN 'failed' ELSE 'completed' END,
       :now, :now, :now, CASE WHEN i > :rows - :rows / 100 THEN NULL ELSE :now END,
       CASE WHEN i > :rows - :rows / 100 THEN NULL ELSE :now END
FROM n
"""
BARE_COUNTS = "SELECT state, count(*) FROM jobs GROUP BY state"
OLD_COUNTS = "SELECT project, queue, state, count(*) AS n FROM jobs GROUP BY project, queue, state"


def run(bench: Bench) -> None:
    rows = max(bench.sizes.claim_rows)
    path = bench.lab.database(f"status-{rows}")
    progress(f"status: loading {rows:,} jobs")
    start = time.perf_counter()
    load(path, rows)
    store = SQLiteStore(path, Config(db=path, project=harness.PROJECT))
    try:
        busy(store)
        loaded = time.perf_counter() - start
        progress(f"status: snapshot and bare GROUP BY taking turns on {rows:,} jobs")
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            ours, bare = harness.paired(lambda: snapshot(store), lambda: conn.execute(BARE_COUNTS).fetchall(),
                                        CALLS, SECONDS, least=5, warmup=2, block=5)
            old = timed(lambda: conn.execute(OLD_COUNTS).fetchall(), 5)
        finally:
            conn.close()
        capped = sum(count.capped for count in snapshot(store).counts)
    finally:
        store.close()
    progress("status: the whole command")
    cli = statistics.median(command_seconds(path) for _ in range(CLI_RUNS))
    a, b = statistics.median(ours) * 1e3, statistics.median(bare) * 1e3
    note = (f"median of {len(ours)}; {capped} counts capped; CLI {cli * 1e3:,.0f} ms; the GROUP BY over "
            f"every job that status ran before: {old * 1e3:,.0f} ms; loaded in {loaded:.1f} s")
    bench.add(Row(f"`status --json` at {short(rows)} jobs (ms)", "-", f"{a:.1f}", f"{b:.1f}", ratio(a, b), note))


def load(path: str, rows: int) -> None:
    """``rows`` jobs in one statement, without fsync while loading (nothing here must survive
    a crash), back to WAL afterwards."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(LOAD, {"rows": rows, "task": harness.NOOP, "now": time.time() - 60})
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


def busy(store: SQLiteStore) -> None:
    """``WORKERS`` workers beating, each holding a running job that reported progress."""
    for n in range(WORKERS):
        queue = QUEUES[n % len(QUEUES)]
        job = store.claim(Claim(harness.PROJECT, queue, f"bench:{n}", 600.0))
        if job is None:
            raise RuntimeError(f"the status benchmark found no queued job in {queue}")
        store.progress(job, n / WORKERS, f"step {n}")
        store.worker_beat(f"bench:{n}:0", harness.PROJECT, "bench", queue, n, job.id)


def timed(call: Callable[[], Any], times: int) -> float:
    """Median seconds of ``times`` calls."""
    took = []
    for _ in range(times):
        start = time.perf_counter()
        call()
        took.append(time.perf_counter() - start)
    return statistics.median(took)


def command_seconds(path: str) -> float:
    """Wall seconds of one ``python -m rowfleet status --json`` process on ``path``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(harness.SRC), os.environ.get("PYTHONPATH", ""))
                                                        if p)}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "rowfleet", "--db", path, "status", "--json"],
                            capture_output=True, text=True, env=env, timeout=120)
    took = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"rowfleet status --json exited {result.returncode}: {result.stderr.strip()[-200:]}")
    return took
