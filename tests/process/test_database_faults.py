"""A database that no wait repairs ends a process with one line and exit 2, on SQLite and
PostgreSQL: read-only, malformed, its tables dropped; and a schema newer than this
rowfleet stops every command before it writes. Real files, a real server, real processes.

How a database is made read-only, for real, when the tests run as root (who writes any
file whatever its mode): the file is chmod 0444 and the worker is started without
CAP_DAC_OVERRIDE (dropped from its capability bounding set with ``prctl`` before exec), so
the kernel refuses it write access and SQLite opens the file read-only, answering every
write with SQLITE_READONLY ("attempt to write a readonly database"). As any other user the
chmod alone does it. On PostgreSQL, ``ALTER DATABASE ... SET default_transaction_read_only``.
"""

from __future__ import annotations

import ctypes
import json
import os
import sqlite3
import stat
import subprocess
import sys
import unittest

from pg_harness import PostgresDatabaseCase
from support import DEADLINE, TempDirTestCase, child_env, kill_group, wait_until

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE = 1
MODES = ([], ["--burst"], ["--procs", "1"])  # a worker, a burst worker, a supervised one


def _without_dac_override() -> None:
    """In the child, before exec: give up root's power to write a file whatever its mode."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE)")


class FaultContract:
    """What every backend must do with a database that cannot be used."""

    preexec = None  # run in a started process before exec (SQLite read-only: drop a capability)

    # --- helpers -------------------------------------------------------------------------

    def start(self, *args: str):
        """``rowfleet --db DB ARGS`` in its own process group, its output in a log file."""
        log_path = os.path.join(self.dir, f"process-{len(os.listdir(self.dir))}.log")
        with open(log_path, "w") as log:
            process = subprocess.Popen([sys.executable, "-m", "rowfleet", "--db", self.db, *args], cwd=self.dir,
                                       env=child_env(), stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=self.preexec)
        process.log_path = log_path
        self.addCleanup(kill_group, process)
        return process

    def assert_ends_with_one_line(self, process, says: str) -> None:
        """The process exits 2 by itself, in time, naming the fault once and never retrying."""
        try:
            process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            self.fail(f"{process.args[4:]} still running after {DEADLINE:.0f}s:\n{self.read(process)}")
        output = self.read(process)
        self.assertEqual(process.returncode, 2, output)
        errors = [line for line in output.splitlines() if "rowfleet: error:" in line]
        self.assertEqual(len(errors), 1, output)
        self.assertIn(says, errors[0])
        self.assertNotIn("retrying", output)
        self.assertNotIn("Traceback", output)

    def read(self, process) -> str:
        with open(process.log_path) as log:
            return log.read()

    def assert_workers_stop(self, says: str) -> None:
        for mode in MODES:
            with self.subTest(mode=mode):
                self.assert_ends_with_one_line(self.start("worker", "--poll", "0.2", *mode), says)

    def stored(self):
        """Every job and run row, read with plain SQL (a store refuses a newer schema)."""
        return self.execute("SELECT * FROM jobs ORDER BY id"), self.execute("SELECT * FROM runs ORDER BY id")

    # --- the faults ----------------------------------------------------------------------

    def test_a_read_only_database_stops_workers(self):
        self.cli("enqueue", "somewhere:fn")
        self.make_read_only()
        self.assert_workers_stop(self.read_only_says)

    def test_dropped_tables_stop_workers_the_orchestrator_and_init(self):
        self.cli("enqueue", "somewhere:fn")
        self.execute("DROP TABLE job_events")
        self.execute("DROP TABLE jobs CASCADE" if self.cascade else "DROP TABLE jobs")
        says = "its tables were dropped"
        self.assert_workers_stop(says)
        self.assert_ends_with_one_line(self.start("orchestrator", "--poll", "0.2"), says)
        result = self.cli("init", check=False)
        self.assertEqual((result.returncode, result.stdout), (2, ""), result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertIn(says, result.stderr)

    def test_a_table_dropped_under_a_running_worker_stops_it(self):
        worker = self.start("worker", "--poll", "0.2")
        wait_until(lambda: self.execute("SELECT 1 FROM workers"), message="the worker's first heartbeat")
        self.execute("DROP TABLE job_events")
        self.execute("DROP TABLE jobs CASCADE" if self.cascade else "DROP TABLE jobs")
        self.assert_ends_with_one_line(worker, "its tables were dropped")

    # --- a newer schema ------------------------------------------------------------------

    def test_every_command_refuses_a_newer_schema_and_writes_nothing(self):
        job_id = self.cli("enqueue", "somewhere:fn").stdout.strip()
        flow = os.path.join(self.dir, "flow.json")
        with open(flow, "w") as handle:
            json.dump({"name": "f", "nodes": [{"id": "a", "task": "somewhere:fn"}]}, handle)
        self.execute(self.insert_version, (99, "from the future", 0.0))
        before = self.stored()
        for command in (["enqueue", "somewhere:fn"], ["run", flow, "--no-task-check"], ["cancel", job_id],
                        ["retry", job_id], ["status"], ["worker", "--burst"], ["init"], ["orchestrator", "--once"]):
            with self.subTest(command=command[0]):
                result = self.cli(*command, check=False)
                self.assertEqual(result.returncode, 2, result.stderr)
                lines = result.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, result.stderr)
                self.assertIn("newer than this rowfleet knows", lines[0])
        self.assertEqual(self.stored(), before)


class SQLiteFaultTest(FaultContract, TempDirTestCase):
    read_only_says = "readonly database"
    insert_version = "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"
    cascade = False

    def setUp(self):
        super().setUp()
        self.cli("init")

    def execute(self, sql, params=()):
        with sqlite3.connect(self.db) as conn:
            rows = conn.execute(sql, params).fetchall()
        conn.close()
        return rows

    def make_read_only(self):
        os.chmod(self.db, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        if os.geteuid() == 0:
            self.preexec = _without_dac_override

    def test_a_malformed_database_stops_workers(self):
        self.cli("enqueue", "somewhere:fn")
        size = os.path.getsize(self.db)
        with open(self.db, "r+b") as handle:  # the header stays: SQLite opens it, then finds garbage
            handle.seek(4096)
            handle.write(b"\xa5" * (size - 4096))
        self.assert_workers_stop("malformed")

    def test_a_file_that_is_not_a_database_stops_workers(self):
        with open(self.db, "wb") as handle:
            handle.write(b"these are my notes, not a database\n" * 200)
        self.assert_workers_stop("not a usable SQLite database")


class PostgresFaultTest(PostgresDatabaseCase, FaultContract, TempDirTestCase):
    read_only_says = "read-only transaction"
    insert_version = "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)"
    cascade = True

    def setUp(self):
        super().setUp()  # a database (self.url) and a folder; the commands name the URL
        self.db = self.url
        self.cli("init")

    def execute(self, sql, params=()):
        with self.caller_connection() as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def make_read_only(self):
        [(name,)] = self.execute("SELECT current_database()")
        conn = self.caller_connection()
        conn.autocommit = True
        with conn:  # a fixed statement and the harness's own database name, quoted as an identifier
            conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')


if __name__ == "__main__":
    unittest.main()
