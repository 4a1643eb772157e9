"""SQLite rows of rowfleet's benchmark: the ``enqueue``, ``batch``, ``roundtrip``, ``wake``
and ``claim`` sections, each rowfleet figure beside a bare ``sqlite3`` loop measured in the
same run, with the same pragmas:

* ``enqueue``, one job per transaction: ``rowfleet.enqueue`` vs ``BEGIN IMMEDIATE; INSERT; COMMIT``
  on the yardstick's minimal table (``yardstick.py``), the same on every run;
* ``batch`` enqueue: ``rowfleet.enqueue_many`` vs one ``executemany`` INSERT into the
  yardstick's table, one transaction each;
* ``roundtrip`` (claim -> no-op handler -> complete) with 1, 2 and 4 worker processes
  released together by a barrier, vs as many processes running the bare two-transaction
  loop on the yardstick's table (claim in one ``BEGIN IMMEDIATE``, complete in a second);
  plus each process's share;
* idle ``wake`` latency (an enqueue's commit in another process -> its handler starting) and
  an idle worker's CPU use, idle and while another queue of the file takes ~1,000 commits/s:
  its doorbells vs the same worker forced onto its polling fallback, or onto the WAL watch alone;
* ``claim`` latency with 10k, 100k and 1M queued rows: ``Store.claim`` vs the bare claim
  UPDATE on the yardstick's table, as deep, in a file of its own; and ``Store.claim`` with
  10k due rows behind delayed ones of higher priority vs ``Store.claim`` with none delayed.

Imports the harness (tools/bench/harness.py), the yardstick and rowfleet's public pieces, never another
section. Holds bare ``sqlite3`` connections only to load rowfleet's queues fast, to read back
what workers wrote and to put claimed jobs back; reads rowfleet's SQL only to EXPLAIN its
claim. The baselines' SQL is the yardstick's alone.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import sqlite3
import statistics
import time
from typing import Any, Callable

from . import harness, yardstick
from .harness import NOOP, PROJECT, QUEUE, REQUEUE_CLAIMED, STAMP, Bench, Row, \
    claim_micros, count, medians, paired, percentile, progress, ratio, rounds_note, shares, short

import rowfleet
from rowfleet import tasks
from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.job import JobSpec
from rowfleet.sql.queries import queries
from rowfleet.store.jobs import claim_params
from rowfleet.store.sqlite import SQLiteStore
from rowfleet.worker.loop import Worker

# Fills rowfleet's own schema fast for the rowfleet side of a row (never a baseline: those
# run on the yardstick's table): the columns a queued no-op job needs, the rest defaults.
FAST_INSERT = ("INSERT INTO jobs (project, queue, task, args, priority, run_next, run_at, max_attempts, "
               "created_at, updated_at) VALUES (?, ?, ?, ?, 0, 0, ?, 5, ?, ?)")

STARTUP_ALLOWANCE = 0.3  # seconds a round-trip run may take to make its first claim

LEGEND = """\
  baselines   enqueue, batch, round trip and claim latency run on the bench's own minimal
              table, never rowfleet's schema (tools/bench/yardstick.py: id, state,
              payload, lease, holder, times, result; one partial index on the queued
              rows), in a file of its own with the row's pragmas, the same on every run,
              so they measure the machine, not rowfleet's indexes.
              enqueue: BEGIN IMMEDIATE; INSERT; COMMIT per job, same pragmas.
              batch: one executemany INSERT in one transaction (best of the rounds).
              round trip: as many processes each running the bare two-transaction loop
              (claim UPDATE ... RETURNING in one BEGIN IMMEDIATE, complete in a second).
              Both sides: processes released together by a barrier; jobs completed (by
              finished_at) within a fixed window opening at the first claim, on a queue deep
              enough not to run dry. "first claim" = release to first claim, rowfleet/bare.
              "--prefetch 10": rowfleet's workers claim 10 jobs a statement and finish each
              in its own commit (the batch's last with the next batch's claim); "--batch
              10": the same, the 10 outcomes written in one commit with the next claim.
              idle wake and CPU: rowfleet's worker hears its queue's doorbell and the WAL
              watch. Baselines: the same worker with its inotify push path switched off,
              so it naps 50 ms between data_version checks; or, with another queue busy,
              the same worker with the WAL watch alone (no bells: every commit wakes it).
              Latency = handler start - the enqueuing process's commit returning, both by
              time.time(). "Other queue busy": a child process enqueues one job per
              commit (rowfleet.enqueue, FULL) to a queue the idle worker does not serve.
              claim latency: the bare claim UPDATE ... RETURNING on the yardstick's table
              holding as many queued rows, in its own BEGIN IMMEDIATE transaction.
              rowfleet's Store.claim also orders by priority, checks the due time, writes
              a job event and builds a Job, and commits without waiting for fsync even at
              FULL (a lost claim only runs a job again).
              "Due behind delayed": Store.claim on 10k due jobs plus delayed ones of higher
              priority (rowfleet.enqueue_many with a delay) vs Store.claim on 10k due
              jobs and none delayed, taking turns: what a backlog of delayed jobs costs.
  turns       enqueue and claim rows time rowfleet and the baseline in alternating blocks
              of 25 calls, so both meet the same disk and the same neighbours.
  shares      each worker process's share of the jobs completed in the window (claimed_by
              host:pid), largest first, mean over the rounds."""


# --- rowfleet's files, filled and reset behind its back -------------------------------------


def plain_connect(path: str) -> sqlite3.Connection:
    """A plain connection to a rowfleet file, in WAL mode, for the bench's own housekeeping."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode = WAL")
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
            conn.executemany(FAST_INSERT, ((PROJECT, QUEUE, NOOP, "null", now, now, now) for _ in range(n)))
            conn.execute("COMMIT")
            done += n
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


def claim_plan(path: str) -> str:
    """Which index SQLite's plan for rowfleet's own claim query searches."""
    conn = sqlite3.connect(path)
    try:
        params = {**claim_params(Claim(PROJECT, QUEUE, "x", 600.0)), "now": time.time()}
        details = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + queries("sqlite")["claim"], params)]
    finally:
        conn.close()
    if any("jobs_claim" in detail for detail in details):
        return "plan: jobs_claim index"
    return "plan: " + "; ".join(details)


# --- child processes (module level: spawned children import this file) ------------------


def roundtrip_worker(path: str, synchronous: str, task_dir: str, barrier: Any, how: str = "") -> None:
    """One rowfleet worker (burst mode), released with the others by ``barrier``, taking its
    jobs as ``how`` says (``harness.CLAIMING``)."""
    harness.import_tasks(task_dir)
    worker = Worker(Config(db=path, project=PROJECT, synchronous=synchronous), QUEUE, burst=True,
                    **harness.CLAIMING[how])
    barrier.wait()
    worker.run()


def roundtrip_bare(path: str, synchronous: str, task_dir: str, barrier: Any) -> None:
    """The bare two-transaction loop on the yardstick's table (``yardstick.drain``), running
    the same no-op handler."""
    harness.import_tasks(task_dir)
    handler = tasks.resolve(NOOP)
    conn = yardstick.connect(path, synchronous)
    barrier.wait()
    yardstick.drain(conn, handler)
    conn.close()


# --- 1. one job per transaction ------------------------------------------------------------


def enqueue(bench: Bench) -> None:
    s = bench.sizes
    for sync in ("FULL", "NORMAL"):
        ours, bare = [], []
        for round_no in range(s.rounds):
            progress(f"enqueue, one job per transaction, {sync}, round {round_no + 1} of {s.rounds}: "
                     f"rowfleet and bare taking turns")
            a, b = _single_round(bench, sync)
            ours.append(a)
            bare.append(b)
        a, b = statistics.median(ours), statistics.median(bare)
        bench.add(Row("enqueue, 1 job/transaction (jobs/s)", sync, count(a), count(b), ratio(a, b),
                      f"{rounds_note(s.rounds)}, each up to {s.enqueue_jobs:,} jobs or {s.enqueue_seconds:g} s"))


def _single_round(bench: Bench, sync: str) -> tuple[float, float]:
    """Jobs/s of rowfleet.enqueue and of the bare loop, each on its own fresh database."""
    conn = yardstick.connect(os.path.join(bench.lab.folder(f"bare-insert-{sync.lower()}"), "bare.db"), sync)
    harness.configure_api(bench.lab.database(f"enqueue-{sync.lower()}"), synchronous=sync)
    try:
        ours, theirs = paired(lambda: rowfleet.enqueue(NOOP, queue=QUEUE), lambda: yardstick.enqueue_one(conn),
                              bench.sizes.enqueue_jobs,
                              bench.sizes.enqueue_seconds)
    finally:
        conn.close()
    return len(ours) / sum(ours), len(theirs) / sum(theirs)


# --- 2. many jobs in one transaction -------------------------------------------------------


def batch(bench: Bench) -> None:
    n, sync = bench.sizes.batch_jobs, "FULL"
    ours, bare = [], []
    for round_no in range(min(2, bench.sizes.rounds)):
        progress(f"batch enqueue: {n:,} jobs in one transaction, round {round_no + 1}")
        conn = yardstick.connect(os.path.join(bench.lab.folder("bare-batch"), "bare.db"), sync)
        try:
            start = time.perf_counter()
            yardstick.enqueue_batch(conn, (str(i) for i in range(n)))
            bare.append(n / (time.perf_counter() - start))
        finally:
            conn.close()
        harness.configure_api(bench.lab.database("batch"), synchronous=sync)
        rowfleet.enqueue_many(NOOP, [], queue=QUEUE)  # opens the API's connection outside the timing
        start = time.perf_counter()
        written = rowfleet.enqueue_many(NOOP, range(n), queue=QUEUE)
        ours.append(n / (time.perf_counter() - start))
        if written != n:
            raise RuntimeError(f"enqueue_many wrote {written} of {n} jobs")
    a, b = max(ours), max(bare)
    bench.add(Row("batch enqueue, 1 transaction (jobs/s)", sync, count(a), count(b), ratio(a, b),
                  f"{n:,} jobs with an int argument; best of {len(ours)}"))


# --- 3 and 4. round trips with worker processes --------------------------------------------


def roundtrip(bench: Bench) -> None:
    s = bench.sizes
    template = bench.lab.database("roundtrip-template")
    load_queued(template, s.roundtrip_jobs)
    bare_template = os.path.join(bench.lab.folder("roundtrip-bare-template"), "bare.db")
    yardstick.load(bare_template, s.roundtrip_jobs)
    cases = [("FULL", k, "") for k in s.worker_counts]
    cases += [("NORMAL", k, "") for k in s.worker_counts if k in (1, max(s.worker_counts))]
    cases += [("FULL", k, "--prefetch") for k in (1, max(s.worker_counts))]
    cases += [("FULL", k, "--batch") for k in (1, max(s.worker_counts))]
    cases += [("NORMAL", 1, "--batch")]
    for sync, procs, how in cases:
        ours, bare, our_shares, bare_shares, problems = [], [], [], [], set()
        our_start, bare_start = [], []
        worker = functools.partial(roundtrip_worker, how=how)  # a spawned child unpickles it
        for round_no in range(s.roundtrip_rounds):
            progress(f"round trip, {procs} process(es), {sync}, {how or 'one job a claim'}, round {round_no + 1} of "
                     f"{s.roundtrip_rounds}: bare loop, then rowfleet, {s.roundtrip_window:g} s each")
            for target, rates, split, starts in ((roundtrip_bare, bare, bare_shares, bare_start),
                                                 (worker, ours, our_shares, our_start)):
                rate, split_now, started, problem = _run_workers(
                    bench, target, bare_template if target is roundtrip_bare else template, procs, sync)
                rates.append(rate)
                split.append(split_now)
                starts.append(started)
                if problem:
                    problems.add(problem)
        a, b = statistics.median(ours), statistics.median(bare)
        notes = [f"{rounds_note(s.roundtrip_rounds)} of {s.roundtrip_window:g} s; first claim "
                 f"{statistics.median(our_start) * 1000:.0f}/{statistics.median(bare_start) * 1000:.0f} ms "
                 f"after the start"]
        if procs > 1:
            notes.append(f"shares {shares(our_shares)}% (bare {shares(bare_shares)}%)")
        notes += sorted(problems)
        label = f"round trip, {procs} worker proc{'s' if procs > 1 else ''}" \
                + (f", {how} {harness.PREFETCH}" if how else "") + " (jobs/s)"
        bench.add(Row(label, sync, count(a), count(b), ratio(a, b), "; ".join(notes)))


def _run_workers(bench: Bench, target: Callable[..., None], template: str, procs: int, sync: str
                 ) -> tuple[float, list[float], float, str]:
    """Start ``procs`` processes of ``target`` on a copy of ``template``, release them
    together, and count the jobs completed in the window that opens with the first claim
    (so neither side is charged for opening its database).

    Returns (jobs/s, each process's share in percent, largest first, seconds from the
    release to the first claim, a problem or '')."""
    kind = "bare" if target is roundtrip_bare else "rowfleet"
    window = bench.sizes.roundtrip_window
    path = bench.lab.database(f"roundtrip-{kind}-{procs}-{sync.lower()}", template)
    barrier = bench.mp.Barrier(procs + 1)
    children = [bench.mp.Process(target=target, args=(path, sync, bench.lab.task_dir, barrier),
                                 name=f"bench-{kind}-{i}") for i in range(procs)]
    for child in children:
        child.start()
    try:
        harness.await_start_line(barrier, children, kind)
        start = time.time()
        barrier.wait()
        time.sleep(window + STARTUP_ALLOWANCE)
        stopped = time.time() - 0.05  # commits begun before this had time to land
    finally:
        for child in children:
            child.terminate()  # jobs in hand are abandoned: this database is thrown away
        for child in children:
            child.join(30)
    table = "bare_jobs" if kind == "bare" else "jobs"  # a fixed name of ours, never input
    conn = sqlite3.connect(path)
    try:
        first = conn.execute(f"SELECT min(started_at) FROM {table}").fetchone()[0] or start
        end = first + window
        done, last = conn.execute(f"SELECT count(*), max(finished_at) FROM {table} "
                                  "WHERE state = 'completed' AND finished_at <= ?", (end,)).fetchone()
        queued = conn.execute(f"SELECT count(*) FROM {table} WHERE state = 'queued'").fetchone()[0]
        per_holder = [n for (n,) in conn.execute(
            f"SELECT count(*) FROM {table} WHERE state = 'completed' AND finished_at <= ? "
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


# --- 5. idle wake latency and idle CPU -----------------------------------------------------


def wake(bench: Bench) -> None:
    s = bench.sizes
    storm = f"another queue of the same file at ~{s.storm_rate:,.0f} commits/s"
    progress(f"idle wake: {s.wake_samples} enqueues, one at a time, to an idle worker (bells and WAL watch), "
             f"then {s.wake_samples} more while {storm}")
    bells = _wake_samples(bench, "bells", s.wake_samples)
    progress(f"idle wake: the same with the WAL watch alone (no bells), {s.polling_samples} enqueues each")
    wal = _wake_samples(bench, "wal", s.polling_samples)
    progress(f"idle wake: {s.polling_samples} enqueues to an idle worker forced onto its polling fallback")
    poll = _wake_samples(bench, "polling", s.polling_samples, storm=False)
    for label, q in (("p50", 0.50), ("p99", 0.99)):
        a, b = percentile(bells.quiet, q) * 1000, percentile(poll.quiet, q) * 1000
        bench.add(Row(f"idle wake latency {label} (ms)", "FULL", f"{a:.2f}", f"{b:.2f}", ratio(a, b),
                      f"bells vs polling fallback; {len(bells.quiet)}/{len(poll.quiet)} samples"))
    for label, q in (("p50", 0.50), ("p99", 0.99)):
        a, b = percentile(bells.stormy, q) * 1000, percentile(wal.stormy, q) * 1000
        bench.add(Row(f"idle wake latency {label}, other queue busy (ms)", "FULL", f"{a:.2f}", f"{b:.2f}",
                      ratio(a, b), f"bells vs WAL watch alone; {len(bells.stormy)}/{len(wal.stormy)} samples "
                                   f"while {_rates(bells, wal)}"))
    bench.add(Row("idle worker CPU (% of a core)", "FULL", f"{bells.idle_cpu:.2f}", f"{poll.idle_cpu:.2f}",
                  ratio(bells.idle_cpu, poll.idle_cpu) if poll.idle_cpu else "-",
                  f"bells vs polling fallback; {s.idle_seconds:g} s with nothing to do"))
    bench.add(Row("idle worker CPU, other queue busy (%)", "FULL", f"{bells.storm_cpu:.2f}", f"{wal.storm_cpu:.2f}",
                  ratio(bells.storm_cpu, wal.storm_cpu) if wal.storm_cpu else "-",
                  f"bells vs WAL watch alone; {s.idle_seconds:g} s while {_rates(bells, wal)}"))


@dataclasses.dataclass
class Wakes:
    """One idle worker's figures: seconds from each enqueue's commit to its handler's start,
    with nothing else happening and while another queue takes a storm of commits; its CPU
    (% of one core) idle and during the storm; the storm's rate reached."""

    quiet: list[float]
    stormy: list[float]
    idle_cpu: float
    storm_cpu: float
    storm_rate: float


def _rates(*wakes: Wakes) -> str:
    return "another queue of the same file took " + "/".join(f"{w.storm_rate:,.0f}" for w in wakes) + " commits/s"


def _wake_samples(bench: Bench, watch: str, samples: int, storm: bool = True) -> Wakes:
    """An idle worker hearing of work as ``watch`` says (``harness.WATCHES``), timed idle,
    then (``storm``) while a child process enqueues to another queue at ``storm_rate``."""
    path = bench.lab.database(f"wake-{watch}")
    control, child_end = bench.mp.Pipe()
    child = bench.mp.Process(target=harness.idle_worker, args=(path, bench.lab.task_dir, watch, child_end),
                             name="bench-idle-worker")
    child.start()
    child_end.close()
    reader = sqlite3.connect(path, isolation_level=None)
    harness.configure_api(path, synchronous="FULL")
    try:
        harness.wait_for(lambda: reader.execute("SELECT count(*) FROM workers").fetchone()[0] > 0,
                         "the idle worker's first heartbeat", child)
        time.sleep(0.3)  # let it settle into its wait
        quiet = _timed_wakes(reader, child, samples)
        time.sleep(1.2)  # past the last job's settle window and one safety poll
        idle_cpu = _cpu_over(control, bench.sizes.idle_seconds)
        if not storm:
            return Wakes(quiet, [], idle_cpu, 0.0, 0.0)
        storm_control, storm_end = bench.mp.Pipe()
        storm_child = bench.mp.Process(target=harness.storm, args=(path, bench.sizes.storm_rate, storm_end),
                                       name="bench-storm")
        storm_child.start()
        storm_end.close()
        try:
            time.sleep(0.3)  # the storm up to its rate
            storm_cpu = _cpu_over(control, bench.sizes.idle_seconds)
            stormy = _timed_wakes(reader, child, samples)
        finally:
            storm_control.send("stop")
            made, seconds = storm_control.recv()
            harness.stop_child(storm_control, storm_child)
        return Wakes(quiet, stormy, idle_cpu, storm_cpu, made / seconds)
    finally:
        reader.close()
        harness.stop_child(control, child)


def _timed_wakes(reader: sqlite3.Connection, child: Any, samples: int) -> list[float]:
    """Enqueue ``samples`` jobs (after 3 not counted) one at a time, each once the last has
    completed and 20-50 ms have passed; seconds from each commit returning to its handler's
    start (both by time.time())."""
    rng = random.Random(7)
    committed: dict[int, float] = {}
    warmup = 3
    for i in range(warmup + samples):
        job_id = rowfleet.enqueue(STAMP, queue=QUEUE).id
        at = time.time()  # the commit has returned: the job is visible to everyone
        if i >= warmup:
            committed[job_id] = at
        harness.wait_for(lambda: reader.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)
                                                ).fetchone()[0] == "completed", f"job {job_id}", child)
        time.sleep(rng.uniform(0.020, 0.050))
    rows = reader.execute("SELECT id, result FROM jobs WHERE state = 'completed' AND queue = ?", (QUEUE,))
    return [float(result) - committed[job_id] for job_id, result in rows if job_id in committed]


def _cpu_over(control: Any, seconds: float) -> float:
    """The idle worker's CPU use over the next ``seconds``, % of one core."""
    control.send("cpu")
    before, t0 = control.recv(), time.monotonic()
    time.sleep(seconds)
    control.send("cpu")
    used, elapsed = control.recv() - before, time.monotonic() - t0
    return 100.0 * used / elapsed


# --- 6. claim latency against the queue's depth --------------------------------------------


def claim(bench: Bench) -> None:
    medians: dict[tuple[str, int], tuple[float, float]] = {}
    depths = bench.sizes.claim_rows
    for rows in depths:
        path = bench.lab.database(f"claim-{rows}")
        bare_path = os.path.join(bench.lab.folder(f"claim-bare-{rows}"), "bare.db")
        progress(f"claim latency: loading {rows:,} queued rows, and as many into the yardstick's table")
        start = time.perf_counter()
        load_queued(path, rows)
        loaded = time.perf_counter() - start
        yardstick.load(bare_path, rows)
        plan = claim_plan(path)
        for sync in ("FULL", "NORMAL"):
            progress(f"claim latency: {rows:,} queued rows, {sync}: rowfleet and bare taking turns")
            ours, bare, samples = _claims(bench, path, bare_path, sync)
            medians[(sync, rows)] = (ours, bare)
            notes = [f"median of {samples:,}", plan]
            if rows == depths[-1] and len(depths) > 1:
                o0, b0 = medians[(sync, depths[0])]
                notes.append(f"{short(rows)}/{short(depths[0])}: rowfleet {ours / o0:.2f}x, bare {bare / b0:.2f}x")
            if sync == "FULL":
                notes.append(f"loaded in {loaded:.1f} s")
            bench.add(Row(f"claim latency, {short(rows)} queued (us)", sync, f"{ours:.0f}", f"{bare:.0f}",
                          ratio(ours, bare), "; ".join(notes)))
    _claim_behind_delayed(bench)


def _claim_behind_delayed(bench: Bench) -> None:
    """Claim latency when delayed jobs sort ahead of the due ones (a delayed batch of higher
    priority, retries waiting out their backoff), against rowfleet's own claim with none
    delayed: delayed jobs stay out of the claim index, so the two should be alike."""
    due, delayed = 10_000, bench.sizes.delayed_rows
    progress(f"claim latency: {due:,} due rows behind {delayed:,} delayed ones of higher priority")
    behind, alone = bench.lab.database("claim-delayed"), bench.lab.database("claim-none-delayed")
    for path in (behind, alone):
        load_queued(path, due)
    with SQLiteStore(behind, Config(db=behind, project=PROJECT)) as store:
        store.enqueue_many(JobSpec(task=NOOP, queue=QUEUE, project=PROJECT, priority=-1, delay=3600.0),
                           [None] * delayed)
    s = bench.sizes
    stores = [SQLiteStore(path, Config(db=path, project=PROJECT, synchronous="NORMAL")) for path in (behind, alone)]
    claim = Claim(PROJECT, QUEUE, f"bench:{os.getpid()}", 600.0)
    try:
        ours, base, calls = claim_micros((stores[0], claim), (stores[1], claim), s)
    finally:
        for store in stores:
            store.close()
    for path in (behind, alone):
        _requeue(path)
    note = (f"median of {calls:,}; baseline: rowfleet's claim with 10k queued and none "
            f"delayed; {claim_plan(behind)}")
    bench.add(Row(f"claim latency, 10k due behind {short(delayed)} delayed (us)", "NORMAL", f"{ours:.0f}",
                  f"{base:.0f}", ratio(ours, base), note))


def _claims(bench: Bench, path: str, bare_path: str, sync: str, *, least: int = 100,
            warmup: int | None = None) -> tuple[float, float, int]:
    """Median microseconds per claim of ``Store.claim`` on ``path`` and of the yardstick's
    claim on ``bare_path``, taking turns, and how many each timed. The claimed jobs are put
    back on both."""
    s = bench.sizes
    conn = yardstick.connect(bare_path, sync)
    store = SQLiteStore(path, Config(db=path, project=PROJECT, synchronous=sync))
    holder = f"bench:{os.getpid()}"

    def bare() -> None:
        if yardstick.claim_one(conn, "bare") is None:
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
    _requeue(path)
    yardstick.requeue(bare_path)
    return medians(mine, theirs)


def _requeue(path: str) -> None:
    """Put the claimed jobs back, so every measurement sees the same queue depth."""
    conn = plain_connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(REQUEUE_CLAIMED)
        conn.execute("DELETE FROM job_events")
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
