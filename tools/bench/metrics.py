"""The ``metrics`` section of rowfleet's benchmark: what one Prometheus scrape of ``/metrics``
costs (``rowfleet.services.exporter.scrape``: the fleet's snapshot, the finished jobs' tallies, the
oldest queued job per queue, each host's newest sample, and the text) on a SQLite file
holding a million jobs, nearly all finished, as a long-running deployment keeps them until
they are pruned.

Two rows, each against the snapshot read alone (``rowfleet.views.snapshot.snapshot``, what a
scrape must read anyway) on the same open store, taking turns: after the orchestrator's
fold has counted every finished job into the tallies, and with 10,000 more finished jobs
not yet folded, which each scrape then reads and counts itself. The table holds
``max(--claim-rows)`` jobs (1M by default, 100k with ``--quick``) written by one
``INSERT ... SELECT`` over a recursive CTE in one transaction, with 20 tasks in 4 queues,
a third of them needing one of 4 models, run times spread over the histogram's buckets;
8 GPU workers beat and 8 hosts have a sample.
"""

from __future__ import annotations

import sqlite3
import statistics
import time

from . import harness
from .harness import Bench, Row, progress, ratio, short

from rowfleet.config import Config
from rowfleet.services.exporter import scrape as scrape_once
from rowfleet.store.sqlite import SQLiteStore
from rowfleet.views.snapshot import snapshot

LEGEND = """\
  metrics     rowfleet: rowfleet.services.exporter.scrape(store), the store work and text of one /metrics
              scrape (the snapshot; the tallies plus the finished jobs not yet folded into
              them; the oldest queued job per queue; each host's newest sample), on an open
              store. Baseline: rowfleet.views.snapshot.snapshot(store) alone, which a scrape reads
              first. Both take turns, median of the calls. The table: ~99% finished jobs
              (completed, 1 in 100 failed), 1% queued, 20 tasks in 4 queues, a third needing
              a model; "folded": after a fold of every finished job; "+10k": 10,000 more
              finished jobs not yet folded, which each scrape counts itself."""

WORKERS = 8
HOSTS = 8
LATE = 10_000    # finished jobs left for the scrape to count
CALLS = 30       # per side, at most ...
SECONDS = 10.0   # ... and for at most this long

# Jobs :first..:last: the newest 1% of the whole table queued (when :queued), one in a
# hundred of the rest failed, the others completed, run times from 0 to ~36 s.
LOAD = """
WITH RECURSIVE n(i) AS (SELECT :first UNION ALL SELECT i + 1 FROM n WHERE i < :last)
INSERT INTO jobs (project, queue, task, state, run_at, created_at, updated_at, started_at, finished_at,
                  required_model, warm_claim)
SELECT '', 'queue-' || (i % 4), 'bench_tasks:task' || (i % 20),
       CASE WHEN :queued AND i > :last - :last / 100 THEN 'queued' WHEN i % 100 = 7 THEN 'failed'
            ELSE 'completed' END,
       :now, :now, :now,
       CASE WHEN :queued AND i > :last - :last / 100 THEN NULL ELSE :now END,
       CASE WHEN :queued AND i > :last - :last / 100 THEN NULL ELSE :now + (i % 97) * 0.37 END,
       CASE WHEN i % 3 = 0 THEN 'model-' || (i % 4) END,
       CASE WHEN i % 3 = 0 AND i % 5 != 0 THEN 1 ELSE 0 END
FROM n
"""


def scrape(bench: Bench) -> None:
    rows = max(bench.sizes.claim_rows)
    path = bench.lab.database(f"metrics-{rows}")
    progress(f"metrics: loading {rows:,} jobs")
    start = time.perf_counter()
    load(path, 1, rows, queued=True)
    store = SQLiteStore(path, Config(db=path, project=harness.PROJECT))
    try:
        fleet(store)
        loaded = time.perf_counter() - start
        progress(f"metrics: folding {rows:,} finished jobs into the tallies")
        start = time.perf_counter()
        folded = store.fold_tallies()
        fold = time.perf_counter() - start
        size = len(scrape_once(store).encode())
        ours, bare = measure(store, "folded")
        bench.add(Row(f"metrics scrape at {short(rows)} jobs, folded (ms)", "-", f"{ours:.1f}", f"{bare:.1f}",
                      ratio(ours, bare), f"{size / 1024:.0f} KiB of text; fold of {folded:,} jobs took "
                                         f"{fold:.1f} s; loaded in {loaded:.1f} s"))
        load(path, rows + 1, rows + LATE, queued=False)
        ours, bare = measure(store, f"{LATE:,} not yet folded")
        bench.add(Row(f"metrics scrape at {short(rows)} jobs, +{short(LATE)} unfolded (ms)", "-", f"{ours:.1f}",
                      f"{bare:.1f}", ratio(ours, bare), "each scrape reads and counts the unfolded jobs"))
    finally:
        store.close()


def measure(store: SQLiteStore, label: str) -> tuple[float, float]:
    """Median milliseconds of a scrape and of the snapshot alone, taking turns."""
    progress(f"metrics: scrape and snapshot taking turns ({label})")
    ours, bare = harness.paired(lambda: scrape_once(store), lambda: snapshot(store), CALLS, SECONDS, least=5,
                                warmup=2, block=5)
    return statistics.median(ours) * 1e3, statistics.median(bare) * 1e3


def load(path: str, first: int, last: int, queued: bool) -> None:
    """Jobs ``first``..``last`` in one statement and one transaction, without fsync while
    loading (nothing here must survive a crash); the first load (``queued``, on a file no
    store holds open yet) also leaves the WAL for the load and goes back afterwards."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if queued:
            conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(LOAD, {"first": first, "last": last, "queued": queued, "now": time.time() - 120})
        conn.execute("COMMIT")
        if queued:
            conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


def fleet(store: SQLiteStore) -> None:
    """``WORKERS`` GPU workers beating, each warm on a model, and a sample of each of ``HOSTS``."""
    for n in range(WORKERS):
        store.worker_beat(f"gpu-{n % HOSTS}:{n}:0", harness.PROJECT, f"gpu-{n % HOSTS}", f"queue-{n % 4}", n, None,
                          models=tuple(f"model-{m}" for m in range(4)), gpu_index=n // HOSTS, vram_total_mb=81559,
                          warm_model=f"model-{n % 4}", warm_since=time.time())
    for n in range(HOSTS):
        host = f"gpu-{n}"
        if not store.acquire_sampler(host, f"{host}:bench", 600.0):
            raise RuntimeError(f"the metrics benchmark could not take {host}'s sampler lease")
        readings = {"cpu.busy": 12.5, "load.1": 1.5, "mem.used": 2 ** 34, "mem.total": 2 ** 36, "temp.hottest": 61.0,
                    "net.eth0.rx_bps": 1e6, "net.eth0.tx_bps": 2e5, "disk./.used": 2 ** 38, "disk./.total": 2 ** 40}
        for gpu in range(8):
            readings.update({f"gpu.{gpu}.util": 87.0, f"gpu.{gpu}.vram_used_mib": 70000, f"gpu.{gpu}.temp": 66.0,
                             f"gpu.{gpu}.vram_total_mib": 81559, f"gpu.{gpu}.power_w": 612.0,
                             f"gpu.{gpu}.power_limit_w": 700.0, f"gpu.{gpu}.sm_mhz": 1980.0,
                             f"gpu.{gpu}.throttle_s.sw_power_cap": 0.5})
        store.record_host_sample(host, f"{host}:bench", 600.0, readings)
