"""The ``walpages`` section of rowfleet's benchmark: how many pages one job of a busy
worker writes to SQLite's write-ahead log, and to which table or index each page belongs.

A busy worker finishes a job and claims the next in one transaction (``Store.finish`` with
``claim_next``, as ``rowfleet worker`` does while its queue has work). Each side runs that
loop over ``Sizes.walpages_jobs`` due no-op jobs on a fresh database of rowfleet's schema, with the WAL
emptied first (``PRAGMA wal_checkpoint(TRUNCATE)``) and the writer's automatic checkpoint
turned off for the run, so that every page it writes stays in the log to be counted (the
one change made to rowfleet's own connection). Then the log is read as SQLite wrote it: a
32-byte header, and frames of a 24-byte header (the page's number, and for a commit's last
frame the database's size) and the page; a frame is the run's while its salts are the
header's. Each page number is named by the ``dbstat`` table (the b-tree that holds the page
once the run is over; a page in no b-tree is the file's header or a free page).

* rowfleet: ``Store.finish(job, completed, claim_next)`` then, per job, a commit;
* baseline, one commit per job: ``BEGIN IMMEDIATE``; the complete UPDATE; the claim UPDATE
  ... RETURNING; ``COMMIT``, on the same schema (its indexes and triggers), nothing else;
* the bare two-transaction loop (claim in one ``BEGIN IMMEDIATE``, complete in a second),
  in the note, with rowfleet's pages per table beside it.

Imports the harness and rowfleet's public pieces, never another section.
"""

from __future__ import annotations

import collections
import sqlite3
import struct
import time
from typing import Any, Callable

from .harness import NOOP, PROJECT, QUEUE, Bench, Row, progress, ratio

from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.job import COMPLETED, JobSpec, Outcome
from rowfleet.store.sqlite import SQLiteStore

TARGET = 5.0       # pages per job a busy worker should write at most
HOLDER = "bench:1"
WAL_HEADER = struct.Struct(">IIIIIIII")   # magic, version, page size, checkpoint, salt 1, salt 2, checksums
FRAME_HEADER = struct.Struct(">IIIIII")   # page number, database size (commit frames), salt 1, salt 2, checksums

# The baseline's claim and complete on rowfleet's own schema: unlike the yardstick's rows
# (tools/bench/yardstick.py), this section counts which of rowfleet's tables and indexes
# each page belongs to, so its baseline writes the same ones with the smallest SQL that
# does the same work.
BARE_CLAIM = """
UPDATE jobs
SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
    claimed_by = :holder, lease_expires_at = :now + 600, started_at = :now, updated_at = :now
WHERE id = (SELECT id FROM jobs
            WHERE state = 'queued' AND delayed = 0 AND project = :project AND queue = :queue AND run_at <= :now
            ORDER BY run_next DESC, priority, run_at, id
            LIMIT 1)
RETURNING id, lease_token, task, args
"""
BARE_COMPLETE = """
UPDATE jobs SET state = 'completed', result = :result, lease_expires_at = NULL,
    finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
"""

LEGEND = """\
  walpages    pages written to the WAL per job by a busy worker (finish a job and claim the
              next in one transaction, as rowfleet worker does while its queue has work),
              over 1,000 due no-op jobs (200 with --quick) on a fresh database of rowfleet's
              schema: the log emptied first and the writer's automatic checkpoint off, then
              the log's frames read back and each page named by dbstat (the table or index
              holding it). baseline: BEGIN IMMEDIATE; the bare complete UPDATE; the bare claim
              UPDATE ... RETURNING; COMMIT, per job, same schema. The note gives each side's
              pages per table or index, and the bare two-transaction loop's total. Lower is
              better; the target is at most 5 pages a job."""



def run(bench: Bench) -> None:
    jobs = bench.sizes.walpages_jobs
    try:
        sqlite3.connect(":memory:").execute("SELECT count(*) FROM dbstat").fetchone()
    except sqlite3.Error as exc:
        bench.add(Row("sqlite WAL pages per job (busy worker)", "-", "-", "-", "-",
                      f"not measured: this SQLite has no dbstat table to name the pages ({exc})"))
        return
    progress(f"walpages: {jobs} jobs a side")
    ours = pages_per_job(bench, "walpages-rowfleet", jobs, rowfleet_loop)
    one_commit = pages_per_job(bench, "walpages-bare-one", jobs, bare_one_commit_loop)
    two_commits = pages_per_job(bench, "walpages-bare-two", jobs, bare_two_commit_loop)
    total, bare = sum(ours.values()), sum(one_commit.values())
    verdict = "met" if total <= TARGET else f"missed by {total - TARGET:.1f}"
    bench.add(Row("sqlite WAL pages per job: busy worker (pages)", "FULL", f"{total:.1f}", f"{bare:.1f}",
                  ratio(total, bare),
                  f"finish + next claim, one commit a job; target <= {TARGET:g}: {verdict}. rowfleet: "
                  f"{breakdown(ours)}. bare one-commit loop: {breakdown(one_commit)}. bare two-transaction "
                  f"loop: {sum(two_commits.values()):.1f} ({breakdown(two_commits)}); {jobs} jobs a side"))


def breakdown(pages: dict[str, float]) -> str:
    """Pages per job by table or index, most first.

    >>> breakdown({"jobs": 2.0, "jobs_claim": 1.25, "(header)": 1.0})
    'jobs 2.0, jobs_claim 1.2, (header) 1.0'
    """
    return ", ".join(f"{name} {n:.1f}" for name, n in sorted(pages.items(), key=lambda item: -item[1]))


def pages_per_job(bench: Bench, label: str, jobs: int, loop: Callable[[str, int], None]) -> dict[str, float]:
    """Pages per job ``loop`` writes to the WAL finishing ``jobs`` jobs, by b-tree."""
    path = bench.lab.database(label)
    with SQLiteStore(path, Config(db=path, project=PROJECT)) as store:
        store.enqueue_many(JobSpec(task=NOOP, queue=QUEUE), [{} for _ in range(jobs + 1)])
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    loop(path, jobs)
    counted = collections.Counter(name_pages(path, wal_pages(path + "-wal")))
    return {name: n / jobs for name, n in counted.items()}


def wal_pages(path: str) -> list[int]:
    """The page number of every frame of the WAL at ``path`` written since its header."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < WAL_HEADER.size:
        return []
    _, _, page_size, _, salt1, salt2, _, _ = WAL_HEADER.unpack_from(data)
    pages, at = [], WAL_HEADER.size
    while at + FRAME_HEADER.size + page_size <= len(data):
        page, _, one, two, _, _ = FRAME_HEADER.unpack_from(data, at)
        if (one, two) != (salt1, salt2):
            break
        pages.append(page)
        at += FRAME_HEADER.size + page_size
    return pages


def name_pages(path: str, pages: list[int]) -> list[str]:
    """Each page's b-tree, by ``dbstat``; "(header)" for page 1's own part, "(free)" else."""
    with sqlite3.connect(path) as conn:
        owner = dict(conn.execute("SELECT pageno, name FROM dbstat").fetchall())
    return [owner.get(page, "(free)") for page in pages]


# --- the loops -----------------------------------------------------------------------------


def rowfleet_loop(path: str, jobs: int) -> None:
    with SQLiteStore(path, Config(db=path, project=PROJECT)) as store:
        claim = Claim(PROJECT, QUEUE, HOLDER, 600.0)
        job = store.claim(claim)
        store.conn.execute("PRAGMA wal_autocheckpoint = 0")  # every page stays in the log, to be counted
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for _ in range(jobs):
            job = store.finish(job, Outcome(COMPLETED), claim_next=claim)
        _check_done(store.conn, jobs)


def bare_one_commit_loop(path: str, jobs: int) -> None:
    conn = _bare(path)
    row = _bare_claim(conn)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for _ in range(jobs):
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(BARE_COMPLETE, {"id": row[0], "token": row[1], "now": now, "result": "null"})
        row = conn.execute(BARE_CLAIM, _claim_params(now)).fetchone()
        conn.execute("COMMIT")
    _check_done(conn, jobs)
    conn.close()


def bare_two_commit_loop(path: str, jobs: int) -> None:
    conn = _bare(path)
    row = _bare_claim(conn)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for _ in range(jobs):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(BARE_COMPLETE, {"id": row[0], "token": row[1], "now": time.time(), "result": "null"})
        conn.execute("COMMIT")
        row = _bare_claim(conn)
    _check_done(conn, jobs)
    conn.close()


def _bare(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    return conn


def _bare_claim(conn: sqlite3.Connection) -> tuple[Any, ...]:
    conn.execute("BEGIN IMMEDIATE")
    row = conn.execute(BARE_CLAIM, _claim_params(time.time())).fetchone()
    conn.execute("COMMIT")
    return row


def _claim_params(now: float) -> dict[str, object]:
    return {"holder": HOLDER, "now": now, "project": PROJECT, "queue": QUEUE}


def _check_done(conn: sqlite3.Connection, jobs: int) -> None:
    done = conn.execute("SELECT count(*) FROM jobs WHERE state = 'completed'").fetchone()[0]
    if done != jobs:
        raise RuntimeError(f"the WAL pages loop completed {done} jobs, not {jobs}")
