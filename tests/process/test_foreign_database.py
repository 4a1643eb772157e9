"""A database that is not rowfleet's: another program's tables under the names rowfleet needs.

Owns the promise that no wait repairs such a database, so nothing waits on it: every
command (``init`` included, and the worker with and without ``--burst``) ends at once with
one line on stderr naming the database and what is wrong with it, exit 2, and leaves the
file as it found it, byte for byte. A database rowfleet has never touched that holds only
tables of other names is no such database: rowfleet shares it (``init`` makes its schema
beside them).

The foreign tables are made through the driver directly, as the other program would.
``ForeignDatabaseContract`` runs on SQLite (a file) and PostgreSQL (a database's schema).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import subprocess
import sys
import time
import unittest
from typing import Any

from rowfleet import exitcodes
from pg_harness import PostgresServerCase
from support import TempDirTestCase, child_env

# Every command must end this soon on such a database: no wait, not even one poll.
PROMPT = 15.0
COMMANDS = (("init",), ("jobs",), ("status",), ("enqueue", "some.task"), ("worker", "--burst"), ("worker",),
            ("orchestrator", "--once"), ("orchestrator",), ("models",))


class ForeignDatabaseContract:
    """Subclasses provide ``make_database()`` (what ``--db`` names, kept as ``self.db``),
    ``execute(sql)`` on a connection of the other program's own, and ``fingerprint()``:
    what must not change (the file's bytes; the schema's tables and rows)."""

    FOREIGN_JOBS = "CREATE TABLE jobs (id INTEGER PRIMARY KEY, title TEXT NOT NULL, done INTEGER)"

    def setUp(self) -> None:
        super().setUp()
        self.db = self.make_database()

    def run_command(self, *args: str) -> subprocess.CompletedProcess:
        started = time.monotonic()
        try:
            result = subprocess.run([sys.executable, "-m", "rowfleet", "--db", self.db, *args], cwd=self.dir,
                                    env=child_env(), capture_output=True, text=True, timeout=PROMPT,
                                    stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            self.fail(f"rowfleet {' '.join(args)} still running after {PROMPT:.0f}s: it waits on a database "
                      f"no wait repairs")
        self.assertLess(time.monotonic() - started, PROMPT)
        return result

    def assert_refused(self, args: tuple[str, ...], *said: str) -> None:
        before = self.fingerprint()
        result = self.run_command(*args)
        shown = " ".join(args)
        self.assertEqual(result.returncode, exitcodes.USAGE, f"rowfleet {shown}:\n{result.stderr}")
        self.assertNotIn("Traceback", result.stderr + result.stdout, f"rowfleet {shown}")
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, f"rowfleet {shown}:\n{result.stderr}")
        self.assertIn("is not a rowfleet database", lines[0])
        self.assertIn(self.shown_db(), lines[0])
        for text in said:
            self.assertIn(text, lines[0])
        self.assertEqual(self.fingerprint(), before, f"rowfleet {shown} changed the database")

    def shown_db(self) -> str:
        return self.db

    # --- the cases -----------------------------------------------------------------------

    def test_a_jobs_table_of_another_program_ends_every_command_at_once(self):
        self.execute(self.FOREIGN_JOBS)
        self.execute("INSERT INTO jobs (title, done) VALUES ('buy milk', 0)")
        for args in COMMANDS:
            with self.subTest(command=args):
                self.assert_refused(args, "it has a table jobs of its own")

    def test_a_supervised_worker_ends_at_once_too(self):
        # Refused before a child is forked: one line, not one per child and the supervisor's notes.
        self.execute(self.FOREIGN_JOBS)
        self.assert_refused(("worker", "--procs", "2"), "it has a table jobs of its own")

    def test_a_schema_migrations_table_of_another_framework_is_no_rowfleet_schema(self):
        # A web framework's bookkeeping under the same name: versions as text, no other column.
        self.execute("CREATE TABLE schema_migrations (version VARCHAR(20) PRIMARY KEY)")
        self.execute("INSERT INTO schema_migrations (version) VALUES ('20240101120000')")
        for args in (("init",), ("jobs",), ("worker", "--burst")):
            with self.subTest(command=args):
                self.assert_refused(args, "schema_migrations")

    def test_a_rowfleet_schema_whose_jobs_table_another_program_replaced_is_refused(self):
        self.run_command("init")
        self.execute("DROP TABLE jobs")
        self.execute(self.FOREIGN_JOBS)
        for args in (("init",), ("jobs",), ("worker", "--burst"), ("orchestrator", "--once")):
            with self.subTest(command=args):
                self.assert_refused(args, "its table jobs lacks", "project")

    def test_tables_of_other_names_are_shared_not_refused(self):
        self.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        made = self.run_command("init")
        self.assertEqual(made.returncode, exitcodes.OK, made.stderr)
        listed = self.run_command("jobs")
        self.assertEqual((listed.returncode, listed.stderr), (exitcodes.OK, ""))


class SQLiteForeignDatabaseTest(ForeignDatabaseContract, TempDirTestCase):
    def make_database(self) -> str:
        return os.path.join(self.dir, "app.db")

    def execute(self, sql: str) -> None:
        with contextlib.closing(sqlite3.connect(self.db)) as conn, conn:
            conn.execute(sql)

    def fingerprint(self) -> Any:
        """The file's bytes, and which files lie beside it (no journal left behind)."""
        if not os.path.exists(self.db):
            return None
        with open(self.db, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest(), sorted(os.listdir(self.dir))

    def test_a_file_that_was_never_a_database_is_refused_too(self):
        with open(self.db, "w") as handle:
            handle.write("name,title\nmilk,buy\n" * 200)
        for args in (("init",), ("worker", "--burst"), ("worker",)):
            with self.subTest(command=args):
                before = self.fingerprint()
                result = self.run_command(*args)
                self.assertEqual(result.returncode, exitcodes.USAGE, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertIn("not a database", result.stderr)
                self.assertEqual(self.fingerprint(), before)


class PostgresForeignDatabaseTest(PostgresServerCase, ForeignDatabaseContract, TempDirTestCase):
    """The same on a throwaway PostgreSQL database: the foreign tables are in its schema."""

    FOREIGN_JOBS = "CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, title TEXT NOT NULL, done INTEGER)"

    def make_database(self) -> str:
        return self.empty_database()

    def shown_db(self) -> str:
        from rowfleet.config import redact_url

        return redact_url(self.db)

    def execute(self, sql: str) -> None:
        self.pg.psql(self.db, sql)

    def fingerprint(self) -> Any:
        """Every table of the schema with its columns, and the foreign jobs' rows."""
        columns = self.pg.psql(self.db, "SELECT table_name::text, column_name::text FROM information_schema.columns "
                                        "WHERE table_schema = current_schema() ORDER BY 1, 2")
        tables = {table for table, _ in columns}
        rows = self.pg.psql(self.db, "SELECT * FROM jobs ORDER BY 1") if "jobs" in tables else None
        return columns, rows


if __name__ == "__main__":
    unittest.main()
