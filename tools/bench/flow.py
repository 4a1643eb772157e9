"""The ``flow`` section: what flow limits cost and how well they hold, with real workers.

Every row runs real `rowfleet worker` processes (a supervisor of 4, or two boxes of 2 each)
on a fresh database, timed from outside by reading the jobs' own rows:

- per-key limit: jobs over 10,000 keys, ``--per-key 1``, drained by 4 processes; baseline:
  the same jobs in the same queue without a limit (target: ratio >= 0.8);
- rate: ``--rate R/1`` on a queue with more jobs than the window needs, 4 processes as two
  hosts (``--host``); the starts per second over the window after the first second (the
  window's first burst left out) against R (target: within 5%), and the most starts in any
  one-second window against R (no burst above it);
- fairness: one key with a backlog queued first, nine keys with 100 jobs each after it,
  ``--fair``; the seconds until the nine keys' jobs are all done against the same nine alone
  (target: at most 2x), and the jobs/s meanwhile against the same backlog with no limit
  (target: >= 0.8x).

On SQLite, and on PostgreSQL where a throwaway server starts. Imports the harness and
rowfleet's public pieces, never another section.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from typing import Any, Callable

from . import harness
from .harness import NOOP, PROJECT, QUEUE, TASK_MODULE, Bench, Row, progress, ratio

import rowfleet
from rowfleet import flow
from rowfleet.config import Config
from rowfleet.store import open_store

KEYS = 10_000
RATE = 100  # starts per second the rate row allows
SMALL_KEYS, SMALL_JOBS = 9, 100
POLL = 0.02  # seconds between reads of the jobs' rows
LIMIT = 300.0  # seconds a run may take
LEGEND = """\
  flow        flow limits with real `rowfleet worker` processes, timed from the jobs' rows.
              per-key: jobs over 10,000 keys, --per-key 1, 4 procs; baseline: no limit
              (target >= 0.8). rate: --rate 100/1, 4 procs as 2 hosts; starts/s after the
              first second against 100 (target within 5%), and the most starts in any 1 s
              window against the window (100). fairness: one key's backlog queued before
              nine keys of 100 jobs, --fair: seconds until the nine are done against the
              nine alone (target <= 2x); the fleet's jobs/s over a window from 1 s after
              the first start, against the same backlog with no limit (target >= 0.8)."""


def run(bench: Bench) -> None:
    sizes = {"keyed": bench.sizes.flow_keyed_jobs, "window": bench.sizes.flow_rate_window,
             "backlog": bench.sizes.flow_backlog, "fair_window": bench.sizes.flow_fair_window}
    _rows(bench, "", lambda label: bench.lab.database(f"flow-{label}"), "FULL", sizes)
    server = harness.pg_server(bench, "flow", "pg flow limits")
    if server is None:
        return
    try:
        def database(label: str) -> str:
            url = server.create_database(f"rowfleet_bench_flow_{label}")
            with open_store(Config(db=url, project=PROJECT), create=True) as store:
                store.migrate()
            return url

        settings = dict(server.psql(database("settings"), "SELECT name, setting FROM pg_settings WHERE name IN "
                                                          "('fsync', 'synchronous_commit')"))
        _rows(bench, "pg ", database, harness.durability(settings), sizes)
    finally:
        server.stop()


def _rows(bench: Bench, prefix: str, database: Callable[[str], str], durability: str, sizes: dict) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(harness.SRC), bench.lab.task_dir)))
    folder = bench.lab.folder(f"{prefix.strip() or 'sqlite'}-flow")
    jobs = sizes["keyed"]
    progress(f"flow: {prefix}{jobs} jobs over {KEYS} keys, per-key limit and none")
    limited = _drain(database("keyed"), env, folder, jobs, keys=KEYS, limit={"per_key": 1})
    bare = _drain(database("plain"), env, folder, jobs, keys=KEYS, limit=None)
    bench.add(Row(f"{prefix}per-key limit, {KEYS:,} keys, 4 procs (jobs/s)", durability, f"{limited:,.0f}",
                  f"{bare:,.0f}", ratio(limited, bare), f"{jobs:,} jobs, --per-key 1; baseline: no limit"))

    window = sizes["window"]
    progress(f"flow: {prefix}rate {RATE}/s over {window:.0f} s, 4 procs as 2 hosts")
    per_second, most = _rate(database("rate"), env, folder, window)
    bench.add(Row(f"{prefix}rate limit {RATE}/1 s, 4 procs on 2 hosts (starts/s)", durability, f"{per_second:.1f}",
                  f"{RATE}", ratio(per_second, RATE), f"over {window:.0f} s after the first; the most in any 1 s "
                                                       f"window: {most} (window {RATE})"))

    backlog = sizes["backlog"]
    progress(f"flow: {prefix}fair share, a backlog of {backlog} before {SMALL_KEYS}x{SMALL_JOBS}")
    window = sizes["fair_window"]
    alone = _fair(database("alone"), env, folder, 0, window, fair=True)
    shared = _fair(database("fair"), env, folder, backlog, window, fair=True)
    unfair = _fair(database("unfair"), env, folder, backlog, window, fair=False)
    bench.add(Row(f"{prefix}fair share: nine keys done behind a backlog (s)", durability, f"{shared[0]:.2f}",
                  f"{alone[0]:.2f}", ratio(shared[0], alone[0]),
                  f"{SMALL_KEYS}x{SMALL_JOBS} jobs queued after {backlog:,} of one key, --fair; "
                  "baseline: the nine alone"))
    bench.add(Row(f"{prefix}fair share: jobs/s with a backlog of one key", durability, f"{shared[1]:,.0f}",
                  f"{unfair[1]:,.0f}", ratio(shared[1], unfair[1]),
                  f"over {window:g} s from 1 s after the first start; baseline: the same backlog with no limit"))


def _drain(db: str, env: dict, folder: str, jobs: int, *, keys: int, limit: dict | None) -> float:
    """Jobs/s of 4 processes draining ``jobs`` jobs spread over ``keys`` keys."""
    with open_store(Config(db=db, project=PROJECT)) as store:
        if limit is not None:
            store.set_limit(PROJECT, QUEUE, "bench", **limit)
    _enqueue(db, [(f"k{n % keys}", 1) for n in range(jobs)])
    with _workers(db, env, folder, [["--procs", "4"]]):
        began, done = _until(db, lambda count: count >= jobs)
    return jobs / max(done - began, 1e-6)


def _rate(db: str, env: dict, folder: str, window: float) -> tuple[float, int]:
    """Starts per second after the first second of a rate-limited queue, and the most
    starts in any one-second window."""
    with open_store(Config(db=db, project=PROJECT)) as store:
        store.set_limit(PROJECT, QUEUE, "bench", rate=flow.Rate(RATE, 1.0))
    _enqueue(db, [(None, int(RATE * (window + 2) * 1.2))])
    hosts = [["--host", "bench-a", "--procs", "2"], ["--host", "bench-b", "--procs", "2"]]
    with _workers(db, env, folder, hosts):
        _until(db, lambda count: count >= RATE * (window + 1.5))
    starts = sorted(_started(db))
    first = starts[0]
    counted = [at for at in starts if first + 1.0 <= at < first + 1.0 + window]
    most, low = 0, 0
    for high, at in enumerate(starts):
        while starts[low] <= at - 1.0:
            low += 1
        most = max(most, high - low + 1)
    return len(counted) / window, most


def _fair(db: str, env: dict, folder: str, backlog: int, window: float, *, fair: bool) -> tuple[float, float]:
    """Seconds until the nine small keys' jobs are all done, and the jobs/s of the fleet
    over ``window`` seconds from one second after the first start (the same span on both
    sides, in the steady state: the processes' starts left out)."""
    if fair:
        with open_store(Config(db=db, project=PROJECT)) as store:
            store.set_limit(PROJECT, QUEUE, "bench", fair=True)
    _enqueue(db, [("big", backlog)] if backlog else [])
    _enqueue(db, [(f"small-{n}", SMALL_JOBS) for n in range(SMALL_KEYS)])
    small = SMALL_KEYS * SMALL_JOBS
    with _workers(db, env, folder, [["--procs", "4"]]):
        began, done = _until(db, lambda count: count >= small, small_only=True)
        if not backlog:
            return done - began, 0.0
        opened = began + 1.0
        time.sleep(max(0.0, opened + window - time.time()) + 0.2)  # one box: the rows' clock is this one
        finished = _finished_between(db, opened, opened + window)
    return done - began, finished / window


def _enqueue(db: str, batches: list[tuple[str | None, int]]) -> None:
    """Enqueue each (key, count) batch, all in one transaction of a connection of our own."""
    harness.configure_api(db)
    with contextlib.closing(_connect(db)) as conn:
        for key, count in batches:
            if count:
                rowfleet.enqueue_many(NOOP, [None] * count, queue=QUEUE, concurrency_key=key, conn=conn)
        conn.commit()


def _connect(db: str) -> Any:
    """A connection of our own to the bench's throwaway database (a transaction opens at the
    first statement, as for any caller's connection)."""
    if "://" not in db:
        return sqlite3.connect(db, timeout=30.0)
    from rowfleet.store.postgres import connect

    return connect(db, autocommit=False)


@contextlib.contextmanager
def _workers(db: str, env: dict, folder: str, flags: list[list[str]]):
    children = []
    with open(os.path.join(folder, "workers.log"), "a", encoding="utf-8") as log:
        try:
            for extra in flags:
                children.append(subprocess.Popen(
                    [sys.executable, "-m", "rowfleet", "--db", db, "worker", "--app", TASK_MODULE, "--queue", QUEUE,
                     "--no-sampler", *extra], env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True))
            yield children
        finally:
            for child in children:
                harness.stop_group(child)


def _until(db: str, enough: Callable[[int], bool], small_only: bool = False) -> tuple[float, float]:
    """Wait until ``enough(completed)``; (the first start, the last finish) as the rows say."""
    give_up = time.monotonic() + LIMIT
    with contextlib.closing(_connect(db)) as conn:
        while not enough(_read(conn, COMPLETED + (SMALL if small_only else ""))[0][0]):
            if time.monotonic() > give_up:
                raise RuntimeError(f"the workers did not finish in {LIMIT:.0f} s")
            time.sleep(POLL)
        where = "WHERE state = 'completed'" + (SMALL if small_only else "")
        (first, last), = _read(conn, f"SELECT min(started_at), max(finished_at) FROM jobs {where}")
        if small_only:  # from the first start of any job: the nine waited behind the backlog from then
            (first,), = _read(conn, "SELECT min(started_at) FROM jobs WHERE started_at IS NOT NULL")
    return first, last


def _read(conn: Any, sql: str, params: tuple = ()) -> list[tuple]:
    """The rows of a fixed query of this module, read afresh (the transaction ended after)."""
    try:
        cursor = conn.execute(sql, params) if params else conn.execute(sql)  # without: a % is no placeholder
        return [tuple(row.values()) if isinstance(row, dict) else tuple(row) for row in cursor.fetchall()]
    finally:
        conn.rollback()


COMPLETED = "SELECT count(*) FROM jobs WHERE state = 'completed'"
SMALL = " AND concurrency_key LIKE 'small-%'"


def _finished_between(db: str, start: float, end: float) -> int:
    mark = "?" if "://" not in db else "%s"  # each driver's placeholder
    with contextlib.closing(_connect(db)) as conn:
        return _read(conn, f"SELECT count(*) FROM jobs WHERE finished_at >= {mark} AND finished_at < {mark}",
                     (start, end))[0][0]


def _started(db: str) -> list[float]:
    with contextlib.closing(_connect(db)) as conn:
        return [row[0] for row in _read(conn, "SELECT started_at FROM jobs WHERE started_at IS NOT NULL")]

