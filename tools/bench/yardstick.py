"""The bench's fixed yardstick: a minimal job table of its own, the same on every run.

The enqueue, batch, round-trip and claim rows time rowfleet beside a bare loop. Run on
rowfleet's own schema, that loop would pay for every index and trigger the product adds, so
the baseline would grow heavier with the product and a ratio of 1.00x would say nothing.
Here it runs on ``bare_jobs``: the columns a queue needs (a state, a payload, a lease, a
result, and the holder and times the bench reads back to count a window and each process's
share) and one partial index on the claimable rows. Its own file (SQLite) or database
(PostgreSQL), with the settings of the row it stands beside.

The SQL is written once per dialect, under the same names in ``SQLITE`` and ``POSTGRES``
and with the same parameters (tests/pure/test_bench_yardstick.py holds them to one set;
``load`` makes many rows in one statement, so a deep queue costs no round trips); ``turn``
(finish the job in hand and claim the next in one statement) is PostgreSQL's alone, as
SQLite has no UPDATE inside a WITH. The functions take a connection made by the caller:
``sqlite3`` here, psycopg (autocommit) in the postgres section, so this module imports
neither psycopg nor rowfleet; the sections import it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any, Callable, Iterable

SQLITE: dict[str, Any] = {
    "schema": (
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
    ),
    "insert": "INSERT INTO bare_jobs (payload) VALUES (:payload)",
    "load": """
        WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :rows)
        INSERT INTO bare_jobs (payload) SELECT :payload FROM n""",
    "claim": """
        UPDATE bare_jobs SET state = 'running', claimed_by = :holder, lease_expires_at = :now + 600,
            started_at = :now
        WHERE id = (SELECT id FROM bare_jobs WHERE state = 'queued' ORDER BY id LIMIT 1)
        RETURNING id, payload""",
    "complete": """
        UPDATE bare_jobs SET state = 'completed', result = :result, lease_expires_at = NULL, finished_at = :now
        WHERE id = :id AND state = 'running'""",
    "requeue": """
        UPDATE bare_jobs SET state = 'queued', claimed_by = NULL, lease_expires_at = NULL, started_at = NULL
        WHERE state = 'running'""",
}

POSTGRES: dict[str, Any] = {
    "schema": (
        """CREATE TABLE IF NOT EXISTS bare_jobs (
            id               bigserial PRIMARY KEY,
            state            text NOT NULL DEFAULT 'queued',
            payload          text,
            lease_expires_at double precision,
            claimed_by       text,
            started_at       double precision,
            finished_at      double precision,
            result           text
        )""",
        "CREATE INDEX IF NOT EXISTS bare_queued ON bare_jobs (id) WHERE state = 'queued'",
    ),
    "insert": "INSERT INTO bare_jobs (payload) VALUES (%(payload)s)",
    "load": "INSERT INTO bare_jobs (payload) SELECT %(payload)s FROM generate_series(1, %(rows)s)",
    "claim": """
        UPDATE bare_jobs SET state = 'running', claimed_by = %(holder)s, lease_expires_at = %(now)s + 600,
            started_at = %(now)s
        WHERE id = (SELECT id FROM bare_jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING id, payload""",
    "complete": """
        UPDATE bare_jobs SET state = 'completed', result = %(result)s, lease_expires_at = NULL,
            finished_at = %(now)s
        WHERE id = %(id)s AND state = 'running'""",
    "requeue": """
        UPDATE bare_jobs SET state = 'queued', claimed_by = NULL, lease_expires_at = NULL, started_at = NULL
        WHERE state = 'running'""",
    # The ceiling of one job per claim: a busy worker's finish and next claim in one
    # statement. No queue anyone should run (no events, no lease token); it shows how far
    # the two-transaction loop can be beaten here without claiming several jobs at once.
    "turn": """
        WITH finished AS (
            UPDATE bare_jobs SET state = 'completed', result = 'null', lease_expires_at = NULL,
                finished_at = %(now)s
            WHERE id = %(id)s AND state = 'running'
        )
        UPDATE bare_jobs SET state = 'running', claimed_by = %(holder)s, lease_expires_at = %(now)s + 600,
            started_at = %(now)s
        WHERE id = (SELECT id FROM bare_jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING id, payload""",
}

TABLE = "bare_jobs"  # what the sections read back finished jobs from (a fixed name, never input)


def result_text(result: Any) -> str:
    """What the bare loops store as a job's result (rowfleet stores JSON; the no-op's is null).

    >>> result_text(None), result_text(3)
    ('null', '3')
    """
    return "null" if result is None else repr(result)


# --- SQLite --------------------------------------------------------------------------------


def connect(path: str, synchronous: str) -> sqlite3.Connection:
    """A connection to the yardstick's file, made if missing, in WAL mode at ``synchronous``
    (``FULL`` or ``NORMAL``, as the row says), with no transaction left open by the driver."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = " + ("FULL" if synchronous == "FULL" else "NORMAL"))
    for statement in SQLITE["schema"]:
        conn.execute(statement)
    return conn


def load(path: str, rows: int, payload: str = "null") -> None:
    """Add ``rows`` queued jobs to the yardstick's file, fast (nothing here must survive a
    crash: no journal fsync while loading), back in WAL mode afterwards."""
    conn = connect(path, "NORMAL")
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(SQLITE["load"], {"rows": rows, "payload": payload})
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


def enqueue_one(conn: sqlite3.Connection, payload: str = "null") -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(SQLITE["insert"], {"payload": payload})
    conn.execute("COMMIT")


def enqueue_batch(conn: sqlite3.Connection, payloads: Iterable[str]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(SQLITE["insert"], ({"payload": payload} for payload in payloads))
    conn.execute("COMMIT")


def claim_one(conn: sqlite3.Connection, holder: str) -> tuple[int, str] | None:
    """Claim the oldest queued job in its own ``BEGIN IMMEDIATE`` transaction, with a lease
    of 600 s; (id, payload), or None when nothing is queued."""
    conn.execute("BEGIN IMMEDIATE")
    row = conn.execute(SQLITE["claim"], {"now": time.time(), "holder": holder}).fetchone()
    conn.execute("COMMIT")
    return row


def complete(conn: sqlite3.Connection, job_id: int, result: Any) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(SQLITE["complete"], {"now": time.time(), "id": job_id, "result": result_text(result)})
    conn.execute("COMMIT")


def drain(conn: sqlite3.Connection, handler: Callable[[], Any]) -> None:
    """The bare two-transaction loop until the queue is empty: claim in one ``BEGIN
    IMMEDIATE``, run ``handler``, complete in a second."""
    holder = f"bare:{os.getpid()}"
    while (row := claim_one(conn, holder)) is not None:
        complete(conn, row[0], handler())


def requeue(path: str) -> None:
    """Put the claimed jobs back, so that every measurement sees the same queue depth."""
    conn = connect(path, "NORMAL")
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(SQLITE["requeue"])
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


# --- PostgreSQL (a psycopg connection in autocommit: one transaction per statement) ---------


def pg_create(conn: Any) -> None:
    for statement in POSTGRES["schema"]:
        conn.execute(statement)


def pg_load(conn: Any, rows: int, payload: str = "null") -> None:
    """Add ``rows`` queued jobs in one statement, then VACUUM ANALYZE, as the rowfleet side's
    queue gets before it is timed."""
    conn.execute(POSTGRES["load"], {"payload": payload, "rows": rows})
    conn.execute("VACUUM ANALYZE bare_jobs")


def pg_claim_one(conn: Any, holder: str) -> tuple[int, str] | None:
    return conn.execute(POSTGRES["claim"], {"now": time.time(), "holder": holder}).fetchone()


def pg_complete(conn: Any, job_id: int, result: Any) -> None:
    conn.execute(POSTGRES["complete"], {"now": time.time(), "id": job_id, "result": result_text(result)})


def pg_drain(conn: Any, handler: Callable[[], Any]) -> None:
    """The bare two-transaction loop until the queue is empty: claim (``FOR UPDATE SKIP
    LOCKED``), run ``handler``, complete."""
    holder = f"bare:{os.getpid()}"
    while (row := pg_claim_one(conn, holder)) is not None:
        pg_complete(conn, row[0], handler())


def pg_drain_in_turns(conn: Any, handler: Callable[[], Any]) -> None:
    """``turn`` in a loop until the queue is empty: each statement finishes the job in hand
    and claims the next (the first finishes nothing: no job has id 0)."""
    turn = {"holder": f"floor:{os.getpid()}", "id": 0}
    while (row := conn.execute(POSTGRES["turn"], {**turn, "now": time.time()}).fetchone()) is not None:
        turn["id"] = row[0]
        handler()


def pg_requeue(conn: Any) -> None:
    conn.execute(POSTGRES["requeue"])
