"""Reading a storm's database directly, past rowfleet: the evidence must not come from the
code under test. Owns the few SELECTs the chaos tool runs and the choice of driver.

SQLite is read with the stdlib ``sqlite3`` (read-only, so the checker cannot disturb the
fleet); a ``postgresql://`` URL goes to ``postgres.py``, which imports psycopg lazily.
Imports nothing from rowfleet.
"""

from __future__ import annotations

import sqlite3
from typing import Any

JOBS = ("SELECT id, state, lease_token, result, run_id, node_id, node_item, node_generation "
        "FROM jobs ORDER BY id")
COMPLETIONS = "SELECT job_id FROM job_events WHERE kind = 'completed'"
RUNS = "SELECT id, state FROM runs ORDER BY id"
WORKERS = "SELECT pid, host, exit_code, stopped_at FROM workers ORDER BY started_at"
STANDALONE_IDS = "SELECT id FROM jobs WHERE run_id IS NULL ORDER BY id"
UNFINISHED_JOBS = "SELECT count(*) AS n FROM jobs WHERE state NOT IN ('completed', 'failed', 'cancelled')"
UNFINISHED_RUNS = "SELECT count(*) AS n FROM runs WHERE state NOT IN ('completed', 'failed', 'cancelled')"


def is_postgres(db: str) -> bool:
    """
    >>> is_postgres("postgresql://u@h/db"), is_postgres("/tmp/jobs.db")
    (True, False)
    """
    return db.startswith(("postgresql://", "postgres://"))


def query(db: str, sql: str) -> list[dict[str, Any]]:
    """The rows of ``sql`` on ``db`` (a SQLite path or a PostgreSQL URL), as dicts."""
    if is_postgres(db):
        from .postgres import query as pg_query  # psycopg only when asked

        return pg_query(db, sql)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute(sql)]
    finally:
        conn.close()


def unfinished(db: str) -> int:
    """Jobs and runs not yet in a terminal state."""
    return query(db, UNFINISHED_JOBS)[0]["n"] + query(db, UNFINISHED_RUNS)[0]["n"]
