"""The PostgreSQL side of the chaos tool: reading a storm's database with psycopg, and a
throwaway server of its own (``--postgres``) that it can restart with ``-m immediate``.

The server comes from the test suite's harness (``tests/pg_harness.py``: initdb into a temp
folder, a free loopback port, stopped at exit even if we die), so there is one way to run a
private server in this repository. psycopg is imported inside functions, as
tools/check_deps.py allows in files named for PostgreSQL. Imports nothing from rowfleet.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent.parent.parent / "tests"


class Unreachable(Exception):
    """The storm's server does not answer; the message names it (without a password)."""


def query(url: str, sql: str) -> list[dict[str, Any]]:
    import psycopg
    from psycopg.rows import dict_row

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10, row_factory=dict_row) as conn:
            return list(conn.execute(sql).fetchall())
    except psycopg.OperationalError as exc:
        raise Unreachable(f"cannot read the storm's PostgreSQL database: {str(exc).splitlines()[0]}") from None


class LocalServer:
    """A private server for one storm: ``url`` is a fresh ``*_test`` database on it."""

    def __init__(self) -> None:
        if str(TESTS) not in sys.path:
            sys.path.insert(0, str(TESTS))
        import pg_harness

        try:
            self.server = pg_harness.start_local()
        except pg_harness.Unavailable as exc:
            raise RuntimeError(f"cannot start a PostgreSQL server for --postgres: {exc}") from None
        self.url = self.server.create_database("chaos")

    def restart_immediately(self) -> None:
        """``pg_ctl restart -m immediate``: every backend dies without a checkpoint, as in a
        crash, and the server replays its WAL before it accepts connections again."""
        self.server.restart(mode="immediate")

    def stop(self) -> None:
        self.server.stop()


class CommandRestart:
    """A restart the user's own command performs (``--pg-restart-cmd``) on their server."""

    def __init__(self, command: str) -> None:
        self.command = command

    def restart_immediately(self) -> None:
        done = subprocess.run(self.command, shell=True, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"--pg-restart-cmd exited {done.returncode}: {done.stderr.strip()[-300:]}")
