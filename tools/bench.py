"""Benchmark rowfleet against bare SQLite loops: the one command behind ``python make.py bench``.

Owns the benchmark table. Every number comes from one run on fresh SQLite files in a
temporary folder (removed afterwards), each rowfleet figure beside a baseline measured in
the same run, on the same schema, with the same pragmas:

* enqueue, one job per transaction: ``rowfleet.enqueue`` vs ``BEGIN IMMEDIATE; INSERT; COMMIT``;
* batch enqueue: ``rowfleet.enqueue_many`` vs one ``executemany`` INSERT, one transaction each;
* round trip (claim -> no-op handler -> complete) with 1, 2 and 4 worker processes released
  together by a barrier, vs as many processes running the bare two-transaction loop (claim
  in one ``BEGIN IMMEDIATE``, complete in a second); plus each process's share of the jobs;
* idle wake latency (an enqueue's commit in another process -> its handler starting) and an
  idle worker's CPU use: the push path vs the same worker forced onto its polling fallback;
* claim latency with 10k, 100k and 1M queued rows: ``Store.claim`` vs the bare claim UPDATE;
* ``dag``: workflow nodes/s through a wide fan-out (root -> N nodes -> fan-in, and a map
  over N items) run by two worker processes and an orchestrator process, vs N + 2 plain
  jobs drained by two such workers; the fan-out again on a throwaway PostgreSQL server
  (tools/bench_dag.py);
* ``postgres``: round trips, idle wake and claim latency on a throwaway PostgreSQL server, vs
  bare psycopg loops (tools/bench_pg.py, the only tool that imports psycopg; without psycopg
  or a server it prints one row saying why).

Measurements are bounded by time as well as by count, so a slow disk (an fsync costs 70 us
here when the machine is quiet, 4 ms when it is loaded) stretches nothing past its budget;
the footer records the fsync cost and the load average at the start and the end, because
every FULL row pays that fsync. Progress goes to stderr; the table and its legend to stdout.
It never asserts a target: it only measures.

Usage: ``python tools/bench.py [--quick] [--only SECTIONS] [--claim-rows N,N] [--dir PARENT]``;
exit 0 when every section ran. Stdlib only. Puts ``<repo>/src`` on ``sys.path`` itself, and
holds bare ``sqlite3`` connections only for the baselines and to read back what workers wrote.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import multiprocessing
import os
import random
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

import rowfleet  # noqa: E402  (needs the sys.path line above)
from rowfleet import tasks  # noqa: E402
from rowfleet.claim import Claim  # noqa: E402
from rowfleet.cli import Parser, UsageError, positive_int  # noqa: E402
from rowfleet.config import Config  # noqa: E402
from rowfleet.queries import queries  # noqa: E402
from rowfleet.store.sqlite import SQLiteStore  # noqa: E402
from rowfleet.worker import Worker  # noqa: E402

SECTIONS = ("enqueue", "batch", "roundtrip", "wake", "claim", "dag", "postgres")
QUEUE = "bench"
PROJECT = ""
TASK_MODULE = "rowfleet_bench_tasks"
NOOP = f"{TASK_MODULE}:noop"
STAMP = f"{TASK_MODULE}:stamp"
NUMBERS = f"{TASK_MODULE}:numbers"
EACH = f"{TASK_MODULE}:each"
TASK_SOURCE = textwrap.dedent('''\
    """Handlers for rowfleet's benchmark (written by tools/bench.py)."""
    import time

    import rowfleet


    @rowfleet.task
    def noop():
        return None


    @rowfleet.task
    def stamp():
        return time.time()  # when the handler started: the wake benchmark reads it back


    @rowfleet.task
    def numbers(n):
        return list(range(n))  # the list a workflow's map node fans out over


    @rowfleet.task
    def each(item):
        return None  # a no-op that takes one map item
''')

# The baselines: the smallest SQL that does the same work on rowfleet's own schema.
BARE_INSERT = ("INSERT INTO jobs (project, queue, task, args, priority, run_next, run_at, max_attempts, "
               "created_at, updated_at) VALUES (?, ?, ?, ?, 0, 0, ?, 5, ?, ?)")
BARE_CLAIM = """
UPDATE jobs
SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
    claimed_by = :holder, lease_expires_at = :now + 600, started_at = :now, updated_at = :now
WHERE id = (SELECT id FROM jobs
            WHERE state = 'queued' AND project = :project AND queue = :queue AND run_at <= :now
            ORDER BY run_next DESC, priority, run_at, id
            LIMIT 1)
RETURNING id, lease_token, task, args
"""
BARE_COMPLETE = """
UPDATE jobs SET state = 'completed', result = :result, lease_expires_at = NULL,
    finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
"""
REQUEUE_CLAIMED = """
UPDATE jobs SET state = 'queued', attempts = 0, claimed_by = NULL, lease_expires_at = NULL,
    started_at = NULL
WHERE state = 'running'
"""


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much work each section does; ``--quick`` shrinks everything."""

    enqueue_jobs: int = 3000          # per measurement, at most ...
    enqueue_seconds: float = 1.0      # ... and for at most this long
    rounds: int = 3                   # alternating bare/rowfleet rounds; the median counts
    batch_jobs: int = 100_000
    roundtrip_jobs: int = 40_000      # queued before each run; a run should not drain them
    roundtrip_window: float = 2.0     # seconds each round-trip run is timed over
    roundtrip_rounds: int = 3
    worker_counts: tuple[int, ...] = (1, 2, 4)
    wake_samples: int = 200
    polling_samples: int = 100
    idle_seconds: float = 3.0
    claim_rows: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    claims: int = 2000                # per measurement, at most ...
    claim_seconds: float = 2.0        # ... and for at most this long (100 claims at least)
    claim_warmup: int = 50            # claims not counted, on each fresh connection
    delayed_rows: int = 100_000       # not-yet-due jobs sorting ahead of 10k due ones
    # postgres also uses worker_counts, roundtrip_rounds, wake_samples, claim_rows, claims,
    # claim_seconds and claim_warmup
    pg_roundtrip_jobs: int = 20_000   # queued in the template each round-trip run copies
    pg_roundtrip_window: float = 1.0  # seconds each round-trip run is timed over
    pg_load_batch: int = 100_000      # jobs per enqueue_many call when filling the claim queue
    dag_nodes: int = 1000             # N: root -> N nodes -> fan-in, and a map over N items
    dag_rounds: int = 3               # alternating rounds, the median counts
    pg_dag_nodes: int = 1000          # N of the fan-out on PostgreSQL (0: not measured)


STARTUP_ALLOWANCE = 0.3  # seconds a round-trip run may take to make its first claim

QUICK = Sizes(enqueue_jobs=300, enqueue_seconds=0.3, rounds=1, batch_jobs=10_000, roundtrip_jobs=10_000,
              roundtrip_window=0.5, roundtrip_rounds=1, wake_samples=40, polling_samples=20,
              idle_seconds=1.0, claim_rows=(10_000, 100_000), claims=300, claim_seconds=0.5,
              delayed_rows=10_000, pg_roundtrip_jobs=10_000, pg_roundtrip_window=0.5,
              dag_nodes=100, dag_rounds=1, pg_dag_nodes=0)


@dataclasses.dataclass
class Row:
    benchmark: str
    durability: str
    rowfleet: str
    baseline: str
    ratio: str
    note: str = ""


# --- small helpers -----------------------------------------------------------------------


def progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def count(value: float) -> str:
    return f"{value:,.0f}"


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs > 0 else "-"


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile.

    >>> percentile([1, 2, 3, 4], 0.5), percentile(list(range(1, 101)), 0.99)
    (2, 99)
    """
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(round(fraction * len(ordered), 9))))
    return ordered[rank - 1]


def shares(rounds: list[list[float]]) -> str:
    """Per-process shares in percent (each round sorted largest first), averaged over rounds.

    >>> shares([[60.0, 40.0], [50.0, 50.0]])
    '55/45'
    """
    return "/".join(f"{statistics.mean(column):.0f}" for column in zip(*rounds))


def _rounds(n: int) -> str:
    return f"median of {n} rounds" if n > 1 else "1 round"


def short(rows: int) -> str:
    """A row count as the table names it.

    >>> short(10_000), short(1_000_000), short(2500)
    ('10k', '1M', '2500')
    """
    if rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}M"
    if rows % 1000 == 0:
        return f"{rows // 1000}k"
    return str(rows)


def paired(ours: Callable[[], Any], bare: Callable[[], Any], most: int, seconds: float, *,
           least: int = 100, warmup: int = 20, block: int = 25) -> tuple[list[float], list[float]]:
    """Seconds per call of ``ours`` and of ``bare``, the two taking turns in blocks of
    ``block`` calls so that both meet the same machine (a neighbour's load, a slow fsync).

    Stops after ``most`` calls each, or once ``seconds`` have passed and each has ``least``.
    """
    for _ in range(warmup):
        bare()
        ours()
    took: tuple[list[float], list[float]] = ([], [])
    deadline = time.perf_counter() + seconds
    clock = time.perf_counter
    while len(took[0]) < most and (len(took[0]) < least or clock() < deadline):
        for op, into in ((bare, took[1]), (ours, took[0])):
            for _ in range(min(block, most - len(into))):
                start = clock()
                op()
                into.append(clock() - start)
    return took


def bare_connect(path: str, synchronous: str) -> sqlite3.Connection:
    """A bare connection with the pragmas rowfleet's ``connect()`` sets."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = " + ("FULL" if synchronous == "FULL" else "NORMAL"))
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def load_queued(path: str, rows: int, chunk: int = 250_000) -> None:
    """Fill ``jobs`` with ``rows`` due, queued no-op jobs, fast: a rollback journal without
    fsync while loading (nothing here must survive a crash), back to WAL afterwards."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA cache_size = -262144")
        now = time.time() - 1.0
        done = 0
        while done < rows:
            n = min(chunk, rows - done)
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(BARE_INSERT, ((PROJECT, QUEUE, NOOP, "null", now, now, now) for _ in range(n)))
            conn.execute("COMMIT")
            done += n
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


def claim_plan(path: str) -> str:
    """Which index SQLite's plan for rowfleet's own claim query searches."""
    conn = sqlite3.connect(path)
    try:
        params = {"now": time.time(), "project": PROJECT, "queue": QUEUE, "holder": "x", "lease": 600.0}
        details = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + queries("sqlite")["job_claim"], params)]
    finally:
        conn.close()
    if any("jobs_claim" in detail for detail in details):
        return "plan: jobs_claim index"
    return "plan: " + "; ".join(details)


def fsync_micros(folder: str, seconds: float = 0.5) -> float:
    """Median microseconds of ``fsync`` after a 4 KB write in ``folder`` (what a FULL commit waits on)."""
    path = os.path.join(folder, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    took = []
    try:
        deadline = time.perf_counter() + seconds
        while len(took) < 200 and (len(took) < 10 or time.perf_counter() < deadline):
            os.pwrite(fd, b"\0" * 4096, 4096 * (len(took) % 16))
            start = time.perf_counter()
            os.fsync(fd)
            took.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(took) * 1e6


def revision() -> str:
    """The checkout's commit, marked when the working tree has changes; '' without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("+changes in src" if dirty else "")


class Lab:
    """The temporary folder: one subfolder per database, so no benchmark's writes wake
    another's worker. Holds the no-op task module the workers import."""

    def __init__(self, parent: str | None) -> None:
        self.root = tempfile.mkdtemp(prefix="rowfleet-bench-", dir=parent)
        self._n = 0
        self.task_dir = os.path.join(self.root, "app")
        os.mkdir(self.task_dir)
        with open(os.path.join(self.task_dir, TASK_MODULE + ".py"), "w", encoding="utf-8") as f:
            f.write(TASK_SOURCE)

    def folder(self, label: str) -> str:
        self._n += 1
        folder = os.path.join(self.root, f"{self._n:03d}-{label}")
        os.mkdir(folder)
        return folder

    def database(self, label: str, template: str | None = None) -> str:
        """A fresh database in its own folder: a copy of ``template``, or newly migrated."""
        path = os.path.join(self.folder(label), "jobs.db")
        if template is not None:
            shutil.copyfile(template, path)
            return path
        with SQLiteStore(path, Config(db=path, project=PROJECT), create=True) as store:
            store.migrate()
        return path

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# --- child processes (module level: spawned children import this file) ------------------


def _import_tasks(task_dir: str) -> None:
    tasks.import_apps([TASK_MODULE], task_dir)


def roundtrip_worker(path: str, synchronous: str, task_dir: str, barrier: Any) -> None:
    """One rowfleet worker (burst mode), released with the others by ``barrier``."""
    _import_tasks(task_dir)
    worker = Worker(Config(db=path, project=PROJECT, synchronous=synchronous), QUEUE, burst=True)
    barrier.wait()
    worker.run()


def roundtrip_bare(path: str, synchronous: str, task_dir: str, barrier: Any) -> None:
    """The bare two-transaction loop: claim in one transaction, complete in a second."""
    _import_tasks(task_dir)
    handlers: dict[str, Callable[..., Any]] = {}
    conn = bare_connect(path, synchronous)
    claim = {"holder": f"bare:{os.getpid()}", "project": PROJECT, "queue": QUEUE}
    barrier.wait()
    while True:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(BARE_CLAIM, {"now": time.time(), **claim}).fetchall()
        conn.execute("COMMIT")
        if not rows:
            break
        job_id, token, task, args = rows[0]
        handler = handlers.get(task) or handlers.setdefault(task, tasks.resolve(task))
        result = handler() if args == "null" else handler(args)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(BARE_COMPLETE, {"now": time.time(), "id": job_id, "token": token,
                                     "result": "null" if result is None else repr(result)})
        conn.execute("COMMIT")
    conn.close()


def idle_worker(path: str, task_dir: str, polling: bool, control: Any) -> None:
    """A long-running worker (safety poll 1 s) that answers ``control`` (``answer_cpu_requests``).
    With ``polling`` the push path is switched off, as on a system without inotify."""
    _import_tasks(task_dir)
    if polling:
        from rowfleet import wake

        if not hasattr(wake, "_watch"):
            raise RuntimeError("rowfleet.wake._watch is gone: update the bench's polling switch")
        wake._watch = lambda folder: None
    worker = Worker(Config(db=path, project=PROJECT, poll=1.0), QUEUE)
    answer_cpu_requests(control, worker.request_stop)
    worker.run()


def answer_cpu_requests(control: Any, stop: Callable[[], None]) -> None:
    """A thread that answers ``control``: "cpu" with this process's CPU seconds so far
    (getrusage counts microseconds; /proc counts 10 ms ticks), anything else, or the pipe
    closing, with ``stop()``."""
    def answer() -> None:
        while True:
            try:
                request = control.recv()
            except EOFError:
                request = "stop"
            if request != "cpu":
                stop()
                return
            usage = resource.getrusage(resource.RUSAGE_SELF)
            control.send(usage.ru_utime + usage.ru_stime)

    threading.Thread(target=answer, name="bench-control", daemon=True).start()


# --- the sections ------------------------------------------------------------------------


class Bench:
    def __init__(self, lab: Lab, sizes: Sizes) -> None:
        self.lab = lab
        self.sizes = sizes
        self.mp = multiprocessing.get_context("spawn")
        self.rows: list[Row] = []

    def add(self, row: Row) -> None:
        self.rows.append(row)

    # 1. one job per transaction

    def enqueue_single(self) -> None:
        s = self.sizes
        for sync in ("FULL", "NORMAL"):
            ours, bare = [], []
            for round_no in range(s.rounds):
                progress(f"enqueue, one job per transaction, {sync}, round {round_no + 1} of {s.rounds}: "
                         f"rowfleet and bare taking turns")
                a, b = self._single_round(sync)
                ours.append(a)
                bare.append(b)
            a, b = statistics.median(ours), statistics.median(bare)
            self.add(Row("enqueue, 1 job/transaction (jobs/s)", sync, count(a), count(b), ratio(a, b),
                         f"{_rounds(s.rounds)}, each up to {s.enqueue_jobs:,} jobs or {s.enqueue_seconds:g} s"))

    def _single_round(self, sync: str) -> tuple[float, float]:
        """Jobs/s of rowfleet.enqueue and of the bare loop, each on its own fresh database."""
        conn = bare_connect(self.lab.database(f"bare-insert-{sync.lower()}"), sync)
        rowfleet.configure(db=self.lab.database(f"enqueue-{sync.lower()}"), project=PROJECT, synchronous=sync)

        def bare() -> None:
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(BARE_INSERT, (PROJECT, QUEUE, NOOP, "null", now, now, now))
            conn.execute("COMMIT")

        try:
            ours, theirs = paired(lambda: rowfleet.enqueue(NOOP, queue=QUEUE), bare, self.sizes.enqueue_jobs,
                                  self.sizes.enqueue_seconds)
        finally:
            conn.close()
        return len(ours) / sum(ours), len(theirs) / sum(theirs)

    # 2. many jobs in one transaction

    def enqueue_batch(self) -> None:
        n, sync = self.sizes.batch_jobs, "FULL"
        ours, bare = [], []
        for round_no in range(min(2, self.sizes.rounds)):
            progress(f"batch enqueue: {n:,} jobs in one transaction, round {round_no + 1}")
            conn = bare_connect(self.lab.database("bare-batch"), sync)
            try:
                start = time.perf_counter()
                now = time.time()
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(BARE_INSERT, ((PROJECT, QUEUE, NOOP, str(i), now, now, now) for i in range(n)))
                conn.execute("COMMIT")
                bare.append(n / (time.perf_counter() - start))
            finally:
                conn.close()
            rowfleet.configure(db=self.lab.database("batch"), project=PROJECT, synchronous=sync)
            rowfleet.enqueue_many(NOOP, [], queue=QUEUE)  # opens the API's connection outside the timing
            start = time.perf_counter()
            written = rowfleet.enqueue_many(NOOP, range(n), queue=QUEUE)
            ours.append(n / (time.perf_counter() - start))
            if written != n:
                raise RuntimeError(f"enqueue_many wrote {written} of {n} jobs")
        a, b = max(ours), max(bare)
        self.add(Row("batch enqueue, 1 transaction (jobs/s)", sync, count(a), count(b), ratio(a, b),
                     f"{n:,} jobs with an int argument; best of {len(ours)}"))

    # 3 and 4. round trips with worker processes

    def roundtrip(self) -> None:
        s = self.sizes
        template = self.lab.database("roundtrip-template")
        load_queued(template, s.roundtrip_jobs)
        cases = [("FULL", k) for k in s.worker_counts]
        cases += [("NORMAL", k) for k in s.worker_counts if k in (1, max(s.worker_counts))]
        for sync, procs in cases:
            ours, bare, our_shares, bare_shares, problems = [], [], [], [], set()
            our_start, bare_start = [], []
            for round_no in range(s.roundtrip_rounds):
                progress(f"round trip, {procs} process(es), {sync}, round {round_no + 1} of {s.roundtrip_rounds}: "
                         f"bare loop, then rowfleet, {s.roundtrip_window:g} s each")
                for target, rates, split, starts in ((roundtrip_bare, bare, bare_shares, bare_start),
                                                     (roundtrip_worker, ours, our_shares, our_start)):
                    rate, split_now, started, problem = self._run_workers(target, template, procs, sync)
                    rates.append(rate)
                    split.append(split_now)
                    starts.append(started)
                    if problem:
                        problems.add(problem)
            a, b = statistics.median(ours), statistics.median(bare)
            notes = [f"{_rounds(s.roundtrip_rounds)} of {s.roundtrip_window:g} s; first claim "
                     f"{statistics.median(our_start) * 1000:.0f}/{statistics.median(bare_start) * 1000:.0f} ms "
                     f"after the start"]
            if procs > 1:
                notes.append(f"shares {shares(our_shares)}% (bare {shares(bare_shares)}%)")
            notes += sorted(problems)
            label = f"round trip, {procs} worker proc{'s' if procs > 1 else ''} (jobs/s)"
            self.add(Row(label, sync, count(a), count(b), ratio(a, b), "; ".join(notes)))

    def _run_workers(self, target: Callable[..., None], template: str, procs: int, sync: str
                     ) -> tuple[float, list[float], float, str]:
        """Start ``procs`` processes of ``target`` on a copy of ``template``, release them
        together, and count the jobs completed in the window that opens with the first claim
        (so neither side is charged for opening its database).

        Returns (jobs/s, each process's share in percent, largest first, seconds from the
        release to the first claim, a problem or '')."""
        kind = "bare" if target is roundtrip_bare else "rowfleet"
        window = self.sizes.roundtrip_window
        path = self.lab.database(f"roundtrip-{kind}-{procs}-{sync.lower()}", template)
        barrier = self.mp.Barrier(procs + 1)
        children = [self.mp.Process(target=target, args=(path, sync, self.lab.task_dir, barrier),
                                    name=f"bench-{kind}-{i}") for i in range(procs)]
        for child in children:
            child.start()
        try:
            await_start_line(barrier, children, kind)
            start = time.time()
            barrier.wait()
            time.sleep(window + STARTUP_ALLOWANCE)
            stopped = time.time() - 0.05  # commits begun before this had time to land
        finally:
            for child in children:
                child.terminate()  # jobs in hand are abandoned: this database is thrown away
            for child in children:
                child.join(30)
        conn = sqlite3.connect(path)
        try:
            first = conn.execute("SELECT min(started_at) FROM jobs").fetchone()[0] or start
            end = first + window
            done, last = conn.execute("SELECT count(*), max(finished_at) FROM jobs "
                                      "WHERE state = 'completed' AND finished_at <= ?", (end,)).fetchone()
            queued = conn.execute("SELECT count(*) FROM jobs WHERE state = 'queued'").fetchone()[0]
            per_holder = [n for (n,) in conn.execute(
                "SELECT count(*) FROM jobs WHERE state = 'completed' AND finished_at <= ? "
                "GROUP BY claimed_by ORDER BY 1 DESC", (end,))]
        finally:
            conn.close()
        problem = ""
        elapsed = window
        if end > stopped:
            problem = f"{kind}: the first claim came {first - start:.2f} s after the start; the window was cut short"
            elapsed = max(1e-6, stopped - first)
        if queued == 0:  # drained early: the window would undercount
            problem = "the queue ran dry: raise --jobs"
            elapsed = max(1e-6, (last or end) - start)
        if done == 0:
            problem = f"{kind}: no job completed in the window"
        split = [100.0 * n / max(1, done) for n in per_holder] + [0.0] * (procs - len(per_holder))
        return done / elapsed, split, first - start, problem

    # 5. idle wake latency and idle CPU

    def wake(self) -> None:
        s = self.sizes
        progress(f"idle wake: {s.wake_samples} enqueues, one at a time, to an idle worker (inotify push path)")
        push, push_cpu = self._wake_samples(s.wake_samples, polling=False)
        progress(f"idle wake: {s.polling_samples} enqueues to an idle worker forced onto its polling fallback")
        poll, poll_cpu = self._wake_samples(s.polling_samples, polling=True)
        for label, q in (("p50", 0.50), ("p99", 0.99)):
            a, b = percentile(push, q) * 1000, percentile(poll, q) * 1000
            self.add(Row(f"idle wake latency {label} (ms)", "FULL", f"{a:.2f}", f"{b:.2f}", ratio(a, b),
                         f"push vs polling fallback; {len(push)}/{len(poll)} samples"))
        self.add(Row("idle worker CPU (% of a core)", "FULL", f"{push_cpu[0]:.2f}", f"{poll_cpu[0]:.2f}",
                     ratio(push_cpu[0], poll_cpu[0]) if poll_cpu[0] else "-",
                     f"push vs polling fallback; {s.idle_seconds:g} s with nothing to do"))
        self.add(Row("idle worker CPU, other queue busy (%)", "FULL", f"{push_cpu[1]:.2f}", f"{poll_cpu[1]:.2f}",
                     ratio(push_cpu[1], poll_cpu[1]) if poll_cpu[1] else "-",
                     f"{s.idle_seconds:g} s of ~{push_cpu[2]:.0f}/{poll_cpu[2]:.0f} enqueues/s to another queue "
                     f"of the same database"))

    def _wake_samples(self, samples: int, polling: bool) -> tuple[list[float], tuple[float, float, float]]:
        """Seconds from each enqueue's commit to its handler's start; and the worker's CPU
        use (% of one core) while idle, then while another queue takes ~100 enqueues/s
        (with the enqueue rate reached)."""
        path = self.lab.database("wake-poll" if polling else "wake-push")
        control, child_end = self.mp.Pipe()
        child = self.mp.Process(target=idle_worker, args=(path, self.lab.task_dir, polling, child_end),
                                name="bench-idle-worker")
        child.start()
        child_end.close()
        reader = sqlite3.connect(path, isolation_level=None)
        rowfleet.configure(db=path, project=PROJECT, synchronous="FULL")
        try:
            self._wait(lambda: reader.execute("SELECT count(*) FROM workers").fetchone()[0] > 0,
                       "the idle worker's first heartbeat", child)
            time.sleep(0.3)  # let it settle into its wait
            rng = random.Random(7)
            committed: dict[int, float] = {}
            warmup = 3
            for i in range(warmup + samples):
                job_id = rowfleet.enqueue(STAMP, queue=QUEUE).id
                at = time.time()  # the commit has returned: the job is visible to everyone
                if i >= warmup:
                    committed[job_id] = at
                self._wait(lambda: reader.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)
                                                  ).fetchone()[0] == "completed", f"job {job_id}", child)
                time.sleep(rng.uniform(0.020, 0.050))
            latencies = [float(result) - committed[job_id] for job_id, result
                         in reader.execute("SELECT id, result FROM jobs WHERE state = 'completed'")
                         if job_id in committed]
            time.sleep(1.2)  # past the last job's settle window and one safety poll

            def cpu_while(activity: Callable[[float], int]) -> tuple[float, float]:
                control.send("cpu")
                before, t0 = control.recv(), time.monotonic()
                done = activity(t0 + self.sizes.idle_seconds)
                control.send("cpu")
                used, elapsed = control.recv() - before, time.monotonic() - t0
                return 100.0 * used / elapsed, done / elapsed

            def nothing(until: float) -> int:
                time.sleep(max(0.0, until - time.monotonic()))
                return 0

            def other_queue(until: float) -> int:
                n = 0
                while time.monotonic() < until:
                    rowfleet.enqueue(NOOP, queue="other")
                    n += 1
                    time.sleep(0.01)
                return n

            idle, _ = cpu_while(nothing)
            busy_elsewhere, rate = cpu_while(other_queue)
            cpu = (idle, busy_elsewhere, rate)
        finally:
            reader.close()
            stop_child(control, child)
        return latencies, cpu

    @staticmethod
    def _wait(condition: Callable[[], bool], what: str, child: Any, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if not child.is_alive():
                raise RuntimeError(f"the worker process exited (code {child.exitcode}) while waiting for {what}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(0.002)

    # 6. claim latency against the queue's depth

    def claim(self) -> None:
        medians: dict[tuple[str, int], tuple[float, float]] = {}
        depths = self.sizes.claim_rows
        for rows in depths:
            path = self.lab.database(f"claim-{rows}")
            progress(f"claim latency: loading {rows:,} queued rows")
            start = time.perf_counter()
            load_queued(path, rows)
            loaded = time.perf_counter() - start
            plan = claim_plan(path)
            for sync in ("FULL", "NORMAL"):
                progress(f"claim latency: {rows:,} queued rows, {sync}: rowfleet and bare taking turns")
                ours, bare, samples = self._claims(path, sync)
                medians[(sync, rows)] = (ours, bare)
                notes = [f"median of {samples:,}", plan]
                if rows == depths[-1] and len(depths) > 1:
                    o0, b0 = medians[(sync, depths[0])]
                    notes.append(f"{short(rows)}/{short(depths[0])}: rowfleet {ours / o0:.2f}x, bare {bare / b0:.2f}x")
                if sync == "FULL":
                    notes.append(f"loaded in {loaded:.1f} s")
                self.add(Row(f"claim latency, {short(rows)} queued (us)", sync, f"{ours:.0f}", f"{bare:.0f}",
                             ratio(ours, bare), "; ".join(notes)))
        self._claim_behind_delayed(medians.get(("NORMAL", 10_000)))

    def _claim_behind_delayed(self, plain: tuple[float, float] | None) -> None:
        """Claim latency when not-yet-due jobs sort ahead of the due ones (a delayed batch of
        higher priority, retries waiting out their backoff): the claim index is ordered by
        priority, so the claim walks past every such row to reach a due one."""
        due, delayed = 10_000, self.sizes.delayed_rows
        path = self.lab.database("claim-delayed")
        progress(f"claim latency: {due:,} due rows behind {delayed:,} delayed ones of higher priority")
        load_queued(path, due)
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            later = time.time() + 3600
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(BARE_INSERT.replace("VALUES (?, ?, ?, ?, 0,", "VALUES (?, ?, ?, ?, -1,"),
                             ((PROJECT, QUEUE, NOOP, "null", later, later, later) for _ in range(delayed)))
            conn.execute("COMMIT")
        finally:
            conn.close()
        ours, bare, samples = self._claims(path, "NORMAL", least=20, warmup=3)
        note = f"median of {samples:,}; the same claim SQL on both sides"
        if plain:
            note += f"; {ours / plain[0]:.0f}x rowfleet's claim with 10k queued and none delayed"
        self.add(Row(f"claim latency, 10k due behind {short(delayed)} delayed (us)", "NORMAL", f"{ours:.0f}",
                     f"{bare:.0f}", ratio(ours, bare), note))

    def _claims(self, path: str, sync: str, *, least: int = 100, warmup: int | None = None
                ) -> tuple[float, float, int]:
        """Median microseconds per claim of ``Store.claim`` and of the bare claim, taking
        turns on the same file, and how many each timed. The claimed jobs are put back."""
        s = self.sizes
        conn = bare_connect(path, sync)
        params = {"holder": "bare", "project": PROJECT, "queue": QUEUE}
        store = SQLiteStore(path, Config(db=path, project=PROJECT, synchronous=sync))
        holder = f"bench:{os.getpid()}"

        def bare() -> None:
            conn.execute("BEGIN IMMEDIATE")
            rows = conn.execute(BARE_CLAIM, {"now": time.time(), **params}).fetchall()
            conn.execute("COMMIT")
            if not rows:
                raise RuntimeError("the claim benchmark ran out of queued jobs")

        def ours() -> None:
            if store.claim(Claim(PROJECT, QUEUE, holder, 600.0)) is None:
                raise RuntimeError("the claim benchmark ran out of queued jobs")

        try:
            mine, theirs = paired(ours, bare, s.claims, s.claim_seconds, least=least,
                                  warmup=s.claim_warmup if warmup is None else warmup)
        finally:
            store.close()
            conn.close()
        self._requeue(path)
        return statistics.median(mine) * 1e6, statistics.median(theirs) * 1e6, min(len(mine), len(theirs))

    @staticmethod
    def _requeue(path: str) -> None:
        """Put the claimed jobs back, so every measurement sees the same queue depth."""
        conn = bare_connect(path, "NORMAL")
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(REQUEUE_CLAIMED)
            conn.execute("DELETE FROM job_events")
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()

    # 7. workflows: DAG nodes/s through a wide fan-out (tools/bench_dag.py)

    def dag(self) -> None:
        sys.modules.setdefault("bench", sys.modules[__name__])  # as in postgres(), below
        import bench_dag

        bench_dag.DagBench(self).run()

    # 8. PostgreSQL: round trips, idle wake, claim latency (tools/bench_pg.py)

    def postgres(self) -> None:
        # Here, not at the top: bench_pg imports this file's helpers as ``bench``, and this
        # file runs as __main__, so register it under that name rather than load it twice.
        sys.modules.setdefault("bench", sys.modules[__name__])
        import bench_pg

        bench_pg.PostgresBench(self).run()


# --- output ------------------------------------------------------------------------------

HEADERS = ("benchmark", "durability", "rowfleet", "baseline", "ratio", "note")
RIGHT = {"rowfleet", "baseline", "ratio"}

LEGEND = """\
legend:
  durability  PRAGMA synchronous of every connection in the row. FULL (rowfleet's default)
              waits for an fsync of the WAL on each commit; NORMAL does not (a power cut
              may lose the last commits, never corrupt the file).
  ratio       rowfleet / baseline: above 1 is better for jobs/s, below 1 for latency and CPU.
  baselines   enqueue: BEGIN IMMEDIATE; INSERT; COMMIT per job, same schema and pragmas.
              batch: one executemany INSERT in one transaction (best of the rounds).
              round trip: as many processes each running the bare two-transaction loop
              (claim UPDATE ... RETURNING in one BEGIN IMMEDIATE, complete in a second).
              Both sides: processes released together by a barrier; jobs completed (by
              finished_at) within a fixed window opening at the first claim, on a queue deep
              enough not to run dry. "first claim" = release to first claim, rowfleet/bare.
              idle wake and CPU: the same worker with its inotify push path switched off, so
              it naps 50 ms between data_version checks. Latency = handler start - the
              enqueuing process's commit returning, both by time.time(). "Other queue busy":
              this process enqueues ~100 jobs/s to a queue the idle worker does not serve.
              claim latency: the bare claim UPDATE in its own BEGIN IMMEDIATE transaction.
              rowfleet's Store.claim also writes a job event and builds a Job, and commits
              without waiting for fsync even at FULL (a lost claim only runs a job again).
              "Due behind delayed": 10k due jobs plus not-yet-due ones of higher priority.
  turns       enqueue and claim rows time rowfleet and the baseline in alternating blocks
              of 25 calls, so both meet the same disk and the same neighbours.
  shares      each worker process's share of the jobs completed in the window (claimed_by
              host:pid), largest first, mean over the rounds.
  dag rows    workflow throughput, each measurement on a fresh database with two worker
              processes and one orchestrator process (default settings: 1 s poll, 5 s
              sweeps), all idle before the clock starts at Store.start_run; it stops at the
              run's finished_at. Fan-out: root -> N no-op nodes -> fan-in; map: the root
              returns N items -> a map node, one job per item -> fan-in. nodes/s = (N + 2)
              / seconds. Baseline: N + 2 plain no-op jobs enqueued in one transaction and
              drained by two such workers with no orchestrator (jobs/s); "s" is the time of
              each, rowfleet/baseline. "Orchestrator CPU us/node": its user+system CPU until
              every dispatch event of the run was drained, per node; "outbox empty" = how
              long after the run ended that was (an event drained after the end finds the
              run ended, but each drain still reads the whole run). "Workers' CPU us/job":
              rowfleet/baseline. "Root's event drained after": from the root job's finish
              to the drain that enqueues the fan-out; about 1 s means the orchestrator
              missed the wake-up and waited for its poll. pg dag: the same fan-out on the
              pg rows' server, N = Sizes.pg_dag_nodes (not with --quick).
  pg rows     one throwaway PostgreSQL server (tests/pg_harness.py, or ROWFLEET_TEST_PG),
              over TCP (127.0.0.1 for the harness's own). Their durability is read from the
              server: "pg fsync=off" means fsync, full_page_writes and synchronous_commit
              are off (the harness's test settings), so no commit waits for a disk: these
              rows measure round trips and CPU, not what a durable server pays. Baselines
              run on psycopg autocommit connections, one transaction per statement. Round
              trip: claim UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1)
              RETURNING, then the complete UPDATE; a busy rowfleet worker finishes a job
              and claims the next in one statement. With the most processes a third loop,
              the "ceiling of one job per claim", runs that turn as one minimal statement
              with no events: how far a claim of one job can beat the baseline here. Each
              run copies one template database;
              its window opens once every process has claimed a job ("all claiming" =
              release to the last first claim, rowfleet/bare: a rowfleet worker imports
              psycopg, ~0.15 s here, and opens three connections after the release; the
              bare loop does both before it). Idle wake: a worker (poll 1 s) on LISTEN,
              jobs enqueued 20-50 ms apart; the baseline is a bare LISTEN connection in a
              third process stamping each NOTIFY as it arrives (the floor, about zero: no
              ratio). Claim latency: Store.claim vs the bare claim UPDATE, on a queue
              filled by rowfleet.enqueue_many (100k jobs per call), then VACUUM ANALYZE.
              "CPU us/job": user+system CPU (/proc) over the window of the worker processes
              and of their server backends, per job completed, rowfleet/bare: on 2 cores
              the round trips are CPU-bound, so this says where the time goes.
  Every number is from this one run on this machine; rerun to see the noise. The footer's
  fsync time is what each FULL commit waits for."""


def render(rows: list[Row]) -> str:
    table = [HEADERS] + [dataclasses.astuple(r) for r in rows]
    widths = [max(len(str(line[i])) for line in table) for i in range(len(HEADERS))]
    out = []
    for n, line in enumerate(table):
        cells = [str(v).rjust(w) if HEADERS[i] in RIGHT else str(v).ljust(w)
                 for i, (v, w) in enumerate(zip(line, widths))]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


# --- command line ------------------------------------------------------------------------


def parse_rows(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part.strip().replace("_", "")) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated row counts, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive row counts, got {text!r}")
    return values


def stop_child(control: Any, child: Any) -> None:
    """Ask a benchmark child to stop over its pipe; kill it if it has not gone in 15 s."""
    try:
        control.send("stop")
    except OSError:
        pass  # the child is gone already
    control.close()
    child.join(15)
    if child.is_alive():
        child.kill()
        child.join()


def await_start_line(barrier: Any, children: list[Any], kind: str) -> None:
    """Wait until every child waits at the barrier, so that our own arrival is the release."""
    deadline = time.monotonic() + 60
    while barrier.n_waiting < len(children):
        if time.monotonic() > deadline or any(c.exitcode is not None for c in children):
            raise RuntimeError(f"{kind} worker processes did not reach the start line")
        time.sleep(0.005)


def parse_sections(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    return chosen


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="bench", description="Benchmark rowfleet against bare SQLite "
                                     "loops on temporary files; prints one table. Asserts nothing.")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes and no 1M-row claim test: a sanity run of well under a minute")
    parser.add_argument("--only", type=parse_sections, default=SECTIONS, metavar="SECTIONS",
                        help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})")
    parser.add_argument("--claim-rows", type=parse_rows, metavar="N,N,...",
                        help="queue depths for the claim latency (default 10000,100000,1000000)")
    parser.add_argument("--rounds", type=positive_int, metavar="N",
                        help="rounds per comparison (default 3; the dag section's: 1)")
    parser.add_argument("--jobs", type=positive_int, metavar="N",
                        help="jobs queued before each round-trip run (default 40000)")
    parser.add_argument("--samples", type=positive_int, metavar="N", help="wake-latency samples (default 200)")
    parser.add_argument("--dir", metavar="PARENT", help="make the temporary folder here (default: the "
                        "system's); its filesystem decides what an fsync costs")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:  # one line, as the rowfleet command line answers
        print(exc, file=sys.stderr)
        return 2
    sizes = QUICK if args.quick else Sizes()
    changes: dict[str, Any] = {}
    if args.claim_rows:
        changes["claim_rows"] = args.claim_rows
    if args.rounds:
        changes.update(rounds=args.rounds, roundtrip_rounds=args.rounds, dag_rounds=args.rounds)
    if args.jobs:
        changes["roundtrip_jobs"] = args.jobs
    if args.samples:
        changes["wake_samples"] = args.samples
    sizes = dataclasses.replace(sizes, **changes)
    lab = Lab(args.dir)
    bench = Bench(lab, sizes)
    steps = {"enqueue": bench.enqueue_single, "batch": bench.enqueue_batch, "roundtrip": bench.roundtrip,
             "wake": bench.wake, "claim": bench.claim, "dag": bench.dag, "postgres": bench.postgres}
    started = time.monotonic()
    load_before, fsync_before = os.getloadavg()[0], fsync_micros(lab.root)
    progress(f"working in {lab.root}; fsync {fsync_before:,.0f} us, load average {load_before:.2f}")
    failed = []
    try:
        for name in SECTIONS:
            if name not in args.only:
                continue
            try:
                steps[name]()
            except (RuntimeError, rowfleet.RowfleetError, sqlite3.Error, OSError) as exc:
                progress(f"{name} failed: {exc}")
                failed.append(name)
                bench.add(Row(name, "-", "-", "-", "-", f"FAILED: {exc}"))
        load_after, fsync_after = os.getloadavg()[0], fsync_micros(lab.root)
    except KeyboardInterrupt:
        progress("interrupted: printing what was measured")
        failed.append("interrupted")
        load_after, fsync_after = os.getloadavg()[0], float("nan")
    finally:
        lab.remove()
    print(render(bench.rows))
    print()
    print(LEGEND)
    print()
    where = f"rowfleet {rowfleet.__version__}" + (f" at {revision()}" if revision() else "")
    print(f"{where}; SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"{'--quick; ' if args.quick else ''}{time.monotonic() - started:.0f} s in all.")
    print(f"fsync of 4 KB in the temp folder: median {fsync_before:,.0f} us before, {fsync_after:,.0f} us after; "
          f"load average {load_before:.2f} before, {load_after:.2f} after.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
