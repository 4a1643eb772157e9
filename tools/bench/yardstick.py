"""The bench's fixed yardstick: a minimal job table of its own, the same on every run.

The enqueue, batch and round-trip rows time rowfleet beside a bare ``sqlite3`` loop. Run on
rowfleet's own schema, that loop would pay for every index and trigger the product adds, so
the baseline would grow heavier with the product and a ratio of 1.00x would say nothing.
Here it runs on ``bare_jobs``: the columns a queue needs (a state, a payload, a lease, a
result, and the holder and times the bench reads back to count a window and each process's
share) and one partial index on the claimable rows. Its own file, with the pragmas of the
row it stands beside.

Imports nothing from rowfleet; the sections and the harness import it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any, Callable

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS bare_jobs (
        id               INTEGER PRIMARY KEY,
        state            TEXT NOT NULL DEFAULT 'queued',
        payload          TEXT,
        lease_expires_at REAL,
        claimed_by       TEXT,
        started_at       REAL,
        finished_at      REAL,
        result           TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS bare_queued ON bare_jobs (id) WHERE state = 'queued'",
)
INSERT = "INSERT INTO bare_jobs (payload) VALUES (?)"
CLAIM = """
UPDATE bare_jobs SET state = 'running', claimed_by = :holder, lease_expires_at = :now + 600, started_at = :now
WHERE id = (SELECT id FROM bare_jobs WHERE state = 'queued' ORDER BY id LIMIT 1)
RETURNING id, payload
"""
COMPLETE = """
UPDATE bare_jobs SET state = 'completed', result = :result, lease_expires_at = NULL, finished_at = :now
WHERE id = :id AND state = 'running'
"""


def connect(path: str, synchronous: str) -> sqlite3.Connection:
    """A connection to the yardstick's file, made if missing, in WAL mode at ``synchronous``."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = " + ("FULL" if synchronous == "FULL" else "NORMAL"))
    for statement in SCHEMA:
        conn.execute(statement)
    return conn


def load(path: str, rows: int, payload: str = "null", chunk: int = 250_000) -> None:
    """Fill the yardstick's file with ``rows`` queued jobs, fast (nothing here must survive a
    crash: no journal fsync while loading), back in WAL mode afterwards."""
    conn = connect(path, "NORMAL")
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("PRAGMA synchronous = OFF")
        done = 0
        while done < rows:
            n = min(chunk, rows - done)
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(INSERT, ((payload,) for _ in range(n)))
            conn.execute("COMMIT")
            done += n
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


def enqueue_one(conn: sqlite3.Connection, payload: str = "null") -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(INSERT, (payload,))
    conn.execute("COMMIT")


def enqueue_batch(conn: sqlite3.Connection, payloads: Any) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(INSERT, ((payload,) for payload in payloads))
    conn.execute("COMMIT")


def drain(conn: sqlite3.Connection, handler: Callable[[], Any]) -> None:
    """The bare two-transaction loop until the queue is empty: claim in one ``BEGIN
    IMMEDIATE``, run ``handler``, complete in a second."""
    holder = f"bare:{os.getpid()}"
    while True:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(CLAIM, {"now": time.time(), "holder": holder}).fetchall()
        conn.execute("COMMIT")
        if not rows:
            return
        result = handler()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(COMPLETE, {"now": time.time(), "id": rows[0][0],
                                "result": "null" if result is None else repr(result)})
        conn.execute("COMMIT")
