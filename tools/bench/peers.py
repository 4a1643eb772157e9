"""The ``peers`` section (``python make.py bench --peers``): rowfleet's real ``worker``
command beside a peer's real consumer, the same jobs, durability and file system, taking
turns.

On SQLite the peer is Huey (its ``huey_consumer`` on ``SqliteHuey`` with ``fsync=True``:
SQLite in WAL mode at synchronous=FULL, as rowfleet's default); on PostgreSQL it is
pgqueuer (``pgqueuer.run``, what its ``pgq run`` calls, over a psycopg connection), on the
throwaway server of the harness (``pg_server``) when there is one. The peers are installed
once into a venv under the cache folder (``$XDG_CACHE_HOME/rowfleet-bench/peers-venv``, else
``~/.cache/...``; pgqueuer and psycopg only when the PostgreSQL row runs) and run only there,
from small scripts this section writes into the bench's temporary folder: nothing of
rowfleet imports a peer, and the bench never imports psycopg here (the counts on
PostgreSQL come from a child in the venv). Without network the install fails, and the
section says so in one row.

Rows: jobs/s with 1 and 4 consumer processes on SQLite (``rowfleet worker``, with ``--procs
4 --no-sampler`` for 4, vs ``huey_consumer -w N -k process``), the seconds from a process's
start to its first finished job, and jobs/s with 1 and 4 processes on PostgreSQL (``rowfleet
worker``, ``--procs 4 --no-sampler`` for 4, vs as many pgqueuer processes); each jobs/s row
also with ``worker --batch 10`` (ten outcomes and the next ten claims a commit). Each side's
count is read from
outside, from its own database, every few milliseconds: the window opens at the first
finished job and closes when all are done, so neither side is charged for its start in
the jobs/s rows.

Imports the harness and rowfleet's public pieces, never another section.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

from . import harness
from .harness import NOOP, PROJECT, QUEUE, TASK_MODULE, Bench, Row, count, progress, ratio, rounds_note

import rowfleet
from rowfleet.config import Config
from rowfleet.store import open_store

HUEY = ("huey",)                            # what the SQLite rows install into the venv ...
PGQUEUER = ("pgqueuer", "psycopg[binary]")  # ... and what the PostgreSQL row adds
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
PGQ_APP = '''\
"""pgqueuer's side of rowfleet's bench (written by tools/bench/peers.py): one consumer
process, as `pgq run bench_pgq_app:factory` starts it."""
import asyncio
import contextlib
import os

import pgqueuer
import psycopg


@contextlib.asynccontextmanager
async def factory():
    async with await psycopg.AsyncConnection.connect(os.environ["BENCH_PGQ_DSN"], autocommit=True) as conn:
        queuer = pgqueuer.PgQueuer.from_psycopg_connection(conn)

        @queuer.entrypoint("noop")
        async def noop(job):
            return None

        yield queuer


if __name__ == "__main__":
    asyncio.run(pgqueuer.run(factory))
'''
PGQ_LOAD = '''\
"""Installs pgqueuer's schema (durable: every table logged, its default) and queues N no-op jobs."""
import asyncio
import os
import sys

import psycopg
from pgqueuer import Queries


async def main(jobs):
    async with await psycopg.AsyncConnection.connect(os.environ["BENCH_PGQ_DSN"], autocommit=True) as conn:
        queries = Queries.from_psycopg_connection(conn)
        await queries.install()
        await queries.enqueue(["noop"] * jobs, [None] * jobs, [0] * jobs)


asyncio.run(main(int(sys.argv[1])))
'''
# Answers each line on stdin with how many jobs the side named in argv[2] has finished.
PG_COUNTER = '''\
"""Counts finished jobs on PostgreSQL for rowfleet's bench (written by tools/bench/peers.py)."""
import sys

import psycopg

FINISHED = {
    "rowfleet": "SELECT count(*) FROM jobs WHERE state = 'completed'",
    "pgqueuer": "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
}
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    for _ in sys.stdin:
        print(conn.execute(FINISHED[sys.argv[2]]).fetchone()[0], flush=True)
'''
SCRIPTS = {"bench_huey_app.py": HUEY_APP, "bench_pgq_app.py": PGQ_APP, "bench_pgq_load.py": PGQ_LOAD,
           "bench_pg_counter.py": PG_COUNTER}
POLL = 0.005     # seconds between counts of finished jobs in a SQLite file ...
PG_POLL = 0.02   # ... and on PostgreSQL, where each count is a query a backend runs on our 2 cores
PG_PROCS = (1, 4)  # consumer processes of the PostgreSQL rows
BATCH = 10  # the batched rows' `worker --batch`: as many jobs a commit as pgqueuer takes a dequeue
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
              leases, fences and keeps every attempt. "--batch 10": the same worker
              writing ten outcomes, with the next ten claims, in one commit. "pg ...
              pgqueuer": the same with 1 and 4 processes vs as many pgqueuer processes, each
              pgqueuer.run() (what `pgq run` calls) over one psycopg connection with its
              defaults (a batch of 10 jobs per dequeue, completions logged in batches;
              its durable schema), on the harness's throwaway server (its durability in
              the column), counted every 20 ms; a finished pgqueuer job is deleted and
              logged. The peers run from a venv under the cache folder; versions in the
              note."""


def run(bench: Bench) -> None:
    if not bench.peers:
        progress("peers: not asked for (--peers)")
        return
    python, why = peer_python(HUEY)
    if python is None:
        bench.add(Row("peers", "-", "-", "-", "-", f"skipped: {why}"))
        return
    app_dir = bench.lab.folder("peers-app")
    for name, text in SCRIPTS.items():
        with open(os.path.join(app_dir, name), "w", encoding="utf-8") as handle:
            handle.write(text)
    _huey_rows(bench, python, app_dir)
    _pgqueuer_rows(bench, app_dir)


def _huey_rows(bench: Bench, python: str, app_dir: str) -> None:
    version = f"huey {peer_version(python, 'huey')}"
    jobs, rounds = peer_jobs(bench), bench.sizes.roundtrip_rounds
    for procs in (1, 4):
        theirs, ours, batched = in_turns(
            rounds, f"peers, {procs} process(es): Huey, then rowfleet, then rowfleet --batch {BATCH}, "
                    f"{jobs:,} jobs each",
            lambda: _huey(bench, python, app_dir, procs, jobs), lambda: _rowfleet(bench, procs, jobs),
            lambda: _rowfleet(bench, procs, jobs, BATCH))
        b = median_rate(theirs)
        plural = "s" if procs > 1 else ""
        for label, runs in ((f"real worker vs Huey consumer, {procs} proc{plural} (jobs/s)", ours),
                            (f"real worker --batch {BATCH} vs Huey, {procs} proc{plural} (jobs/s)", batched)):
            a = median_rate(runs)
            bench.add(Row(label, "FULL", count(a), count(b), ratio(a, b),
                          f"{rounds_note(rounds)} of {jobs:,} jobs; {version}"))
        if procs == 1:
            a, b = median_start(ours), median_start(theirs)
            bench.add(Row("process start -> first job (s)", "FULL", f"{a:.2f}", f"{b:.2f}", ratio(a, b),
                          f"{rounds_note(rounds)}; `rowfleet worker` vs `huey_consumer`, 1 process; {version}"))


def _pgqueuer_rows(bench: Bench, app_dir: str) -> None:
    python, why = peer_python(HUEY + PGQUEUER)
    if python is None:
        bench.add(Row("pg real worker vs pgqueuer", "-", "-", "-", "-", f"skipped: {why}"))
        return
    server = harness.pg_server(bench, "peers", "pg real worker vs pgqueuer")
    if server is None:
        return
    try:
        durability = harness.durability(_server_settings(server))
        jobs, rounds = peer_jobs(bench), bench.sizes.roundtrip_rounds
        sides = {}
        for procs in PG_PROCS:
            sides[procs] = in_turns(
                rounds, f"peers, PostgreSQL, {procs} process(es): pgqueuer, then rowfleet, then rowfleet --batch "
                        f"{BATCH}, {jobs:,} jobs each",
                lambda: _pgqueuer(bench, server, python, app_dir, jobs, procs),
                lambda: _rowfleet_pg(bench, server, python, app_dir, jobs, procs),
                lambda: _rowfleet_pg(bench, server, python, app_dir, jobs, procs, BATCH))
    finally:
        server.stop()
    versions = ", ".join(f"{name} {peer_version(python, name)}" for name in ("pgqueuer", "psycopg"))
    for procs, (theirs, ours, batched) in sides.items():
        b = median_rate(theirs)
        plural = "s" if procs > 1 else ""
        for label, runs, how in ((f"pg real worker vs pgqueuer, {procs} proc{plural} (jobs/s)", ours,
                                  "rowfleet claims one"),
                                 (f"pg real worker --batch {BATCH} vs pgqueuer, {procs} proc{plural} (jobs/s)", batched,
                                  f"rowfleet claims {BATCH} and commits their outcomes together")):
            a = median_rate(runs)
            bench.add(Row(label, durability, count(a), count(b), ratio(a, b),
                          f"{rounds_note(rounds)} of {jobs:,} jobs; start -> first job {median_start(runs):.2f}/"
                          f"{median_start(theirs):.2f} s; pgqueuer dequeues 10 jobs at a time, {how}; {versions}"))


def peer_jobs(bench: Bench) -> int:
    """Jobs each side drains in a peers run: enough for a window of seconds, not minutes."""
    return max(2_000, bench.sizes.roundtrip_jobs // 8)


def in_turns(rounds: int, what: str, *sides: Callable[[], tuple[float, float]]) -> list[list[tuple[float, float]]]:
    """``rounds`` runs of each side, in the order given in every round (the peer first): for
    each side a list of (jobs/s, seconds from the start to the first job)."""
    runs: list[list[tuple[float, float]]] = [[] for _ in sides]
    for round_no in range(rounds):
        progress(f"{what}, round {round_no + 1} of {rounds}")
        for side, run_side in zip(runs, sides):
            side.append(run_side())
    return runs


def median_rate(runs: list[tuple[float, float]]) -> float:
    return statistics.median(rate for rate, _ in runs)


def median_start(runs: list[tuple[float, float]]) -> float:
    return statistics.median(started for _, started in runs)


def peer_python(requirements: tuple[str, ...]) -> tuple[str | None, str]:
    """The venv's python, made and given ``requirements`` on first use; (None, why) if the
    install failed."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    venv = os.path.join(cache, "rowfleet-bench", "peers-venv")
    python = os.path.join(venv, "bin", "python")
    missing = [req for req in requirements if not os.path.exists(python) or not peer_version(python, req)]
    if not missing:
        return python, ""
    progress(f"peers: installing {', '.join(missing)} into {venv}")
    try:
        if not os.path.exists(python):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True, timeout=300)
        subprocess.run([python, "-m", "pip", "install", "--quiet", *missing], check=True, capture_output=True,
                       timeout=600)
    except (subprocess.SubprocessError, OSError) as exc:
        return None, f"pip could not install {' '.join(missing)} into {venv} (no network?): {type(exc).__name__}"
    return python, ""


def peer_version(python: str, requirement: str) -> str:
    """The installed version of ``requirement`` (extras ignored) in the venv; '' if absent."""
    name = requirement.split("[")[0]
    probe = subprocess.run([python, "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
                           capture_output=True, text=True, timeout=60)
    return probe.stdout.strip()


# --- the sides --------------------------------------------------------------------------


def _huey(bench: Bench, python: str, app_dir: str, procs: int, jobs: int) -> tuple[float, float]:
    folder = bench.lab.folder(f"huey-{procs}")
    path = os.path.join(folder, "huey.db")
    env = dict(os.environ, BENCH_HUEY_DB=path, PYTHONPATH=app_dir)
    subprocess.run([python, "-c", HUEY_LOAD, str(jobs)], env=dict(env, BENCH_HUEY_FSYNC="0"), check=True,
                   timeout=DRAIN_LIMIT)
    consumer = [os.path.join(os.path.dirname(python), "huey_consumer"), "bench_huey_app.huey", "-w", str(procs),
                "-k", "process", "-n"]
    return _timed([consumer], env, folder, jobs, lambda: _count(path, "SELECT count(*) FROM kv"))


def _rowfleet(bench: Bench, procs: int, jobs: int, batch: int = 1) -> tuple[float, float]:
    path = bench.lab.database(f"peers-rowfleet-{procs}-{batch}")
    harness.configure_api(path)
    rowfleet.enqueue_many(NOOP, [None] * jobs, queue=QUEUE)
    return _timed([_worker_command(path, procs, batch)], _worker_env(bench), os.path.dirname(path), jobs,
                  lambda: _count(path, "SELECT count(*) FROM jobs WHERE state = 'completed'"))


def _pgqueuer(bench: Bench, server: Any, python: str, app_dir: str, jobs: int, procs: int) -> tuple[float, float]:
    url = server.create_database("rowfleet_bench_pgqueuer")
    try:
        env = dict(os.environ, BENCH_PGQ_DSN=url, PYTHONPATH=app_dir)
        subprocess.run([python, os.path.join(app_dir, "bench_pgq_load.py"), str(jobs)], env=env, check=True,
                       capture_output=True, timeout=DRAIN_LIMIT)
        consumers = [[python, os.path.join(app_dir, "bench_pgq_app.py")]] * procs
        with contextlib.closing(PgCounter(python, app_dir, url, "pgqueuer")) as finished:
            return _timed(consumers, env, bench.lab.folder("pgqueuer"), jobs, finished, PG_POLL)
    finally:
        server.drop_database(url)


def _rowfleet_pg(bench: Bench, server: Any, python: str, app_dir: str, jobs: int, procs: int,
                 batch: int = 1) -> tuple[float, float]:
    url = server.create_database("rowfleet_bench_peer")
    try:
        with open_store(Config(db=url, project=PROJECT), create=True) as store:
            store.migrate()
        harness.configure_api(url)
        rowfleet.enqueue_many(NOOP, [None] * jobs, queue=QUEUE)
        with contextlib.closing(PgCounter(python, app_dir, url, "rowfleet")) as finished:
            return _timed([_worker_command(url, procs, batch)], _worker_env(bench), bench.lab.folder("rowfleet-pg"),
                          jobs, finished, PG_POLL)
    finally:
        server.drop_database(url)


def _worker_command(db: str, procs: int, batch: int = 1) -> list[str]:
    worker = [sys.executable, "-m", "rowfleet", "--db", db, "worker", "--app", TASK_MODULE, "--queue", QUEUE]
    if batch > 1:
        worker += ["--batch", str(batch)]
    if procs > 1:  # a supervisor and its workers, as Huey's consumer runs its own; no telemetry sampler
        worker += ["--procs", str(procs), "--no-sampler"]
    return worker


def _worker_env(bench: Bench) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join((str(harness.SRC), bench.lab.task_dir)))


def _server_settings(server: Any) -> dict[str, str]:
    """The throwaway server's durability settings, read from a database made for the question."""
    url = server.create_database("rowfleet_bench_settings")
    try:
        return dict(server.psql(url, "SELECT name, setting FROM pg_settings WHERE name IN "
                                     "('fsync', 'synchronous_commit', 'full_page_writes')"))
    finally:
        server.drop_database(url)


# --- timing from outside -----------------------------------------------------------------


class PgCounter:
    """How many jobs a side has finished on PostgreSQL, asked of a child in the venv (where
    psycopg lives) over one connection: a line in, a count out. Answers once before it is
    handed over, so that its connecting is not charged to the first job."""

    def __init__(self, python: str, app_dir: str, url: str, side: str) -> None:
        self.child = subprocess.Popen([python, os.path.join(app_dir, "bench_pg_counter.py"), url, side],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self()

    def __call__(self) -> int:
        self.child.stdin.write("\n")
        self.child.stdin.flush()
        answer = self.child.stdout.readline()
        if not answer:
            raise RuntimeError(f"the PostgreSQL counter exited (code {self.child.wait(10)})")
        return int(answer)

    def close(self) -> None:
        self.child.stdin.close()
        try:
            self.child.wait(10)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()


def _timed(commands: list[list[str]], env: dict[str, str], folder: str, jobs: int,
           finished: Callable[[], int], poll: float = POLL) -> tuple[float, float]:
    """Start ``commands`` (each its own process group, their output to a log in ``folder``),
    count what they finished every ``poll`` seconds until all ``jobs`` are; (jobs/s from the
    first to the last, seconds from the start to the first)."""
    children: list[subprocess.Popen] = []
    with open(os.path.join(folder, "consumer.log"), "w", encoding="utf-8") as log:
        began = time.monotonic()
        try:
            for argv in commands:
                children.append(subprocess.Popen(argv, env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                                                 start_new_session=True))
            first_at, first_count, done = None, 0, 0
            while done < jobs:
                if time.monotonic() - began > DRAIN_LIMIT or any(c.poll() is not None for c in children):
                    raise RuntimeError(f"{os.path.basename(commands[0][-1])} finished {done} of {jobs} jobs "
                                       f"(see {folder}/consumer.log)")
                time.sleep(poll)
                done = finished()
                if first_at is None and done:
                    first_at, first_count = time.monotonic(), done
            ended = time.monotonic()
        finally:
            for child in children:
                harness.stop_group(child)
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

