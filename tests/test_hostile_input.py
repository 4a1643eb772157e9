"""Hostile input at every entry point: one line, exit 2, nothing stored.

Each bad value goes through the real command line (a subprocess, argv as bytes where the
bytes are not UTF-8), through workflow and schedule files, and through the Python API;
``names`` (the one module that decides what a name or a number may be) is tested
table-driven and by its examples. A database whose schema text is not UTF-8 is refused
by every command, ``init`` included, without a byte of the file changing.
"""

from __future__ import annotations

import doctest
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import unittest

from rowfleet import names
from rowfleet.errors import ConfigError
from pg_harness import PostgresServerCase
from support import TempDirTestCase, child_env

SLOW = True  # real command-line and worker processes on both databases

INT64_MAX = 2 ** 63 - 1
DEEP = "[" * 1000 + "]" * 1000  # json.loads itself gives up (RecursionError)
HUGE = "1" * 5000  # more digits than int() converts


def load_tests(loader, tests, pattern):
    tests.addTests(doctest.DocTestSuite(names))
    return tests


def digest(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


class HostileCase(TempDirTestCase):
    """A fresh, initialised database and a check that a refused command changed nothing.
    A SQLite file here; ``PostgresHostile`` swaps in a PostgreSQL database and its dump."""

    def setUp(self):
        super().setUp()
        self.db = self.database()
        self.run_cli(b"init")

    def database(self) -> str:
        return self.db

    def run_cli(self, *args: bytes | str, db: bytes | str | None = None, env=None) -> subprocess.CompletedProcess:
        """``python -m rowfleet --db DB ARGS`` with argv as bytes, so non-UTF-8 bytes reach it."""
        argv = [os.fsencode(sys.executable), b"-m", b"rowfleet", b"--db", os.fsencode(db or self.db)]
        argv += [os.fsencode(arg) if isinstance(arg, str) else arg for arg in args]
        return subprocess.run(argv, cwd=self.dir, env=env or child_env(), capture_output=True, timeout=60)

    def dump(self) -> list[str]:
        """The whole database as SQL text, and the files in the folder."""
        with sqlite3.connect(self.db) as conn:
            lines = list(conn.iterdump())
        conn.close()
        return lines + sorted(os.listdir(self.dir))

    def assert_refused(self, *args: bytes | str, says: str, code: int = 2, db=None, env=None) -> str:
        before = self.dump()
        result = self.run_cli(*args, db=db, env=env)
        stderr = result.stderr.decode("utf-8", "replace")
        self.assertEqual(result.returncode, code, stderr)
        lines = stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, f"expected one line on stderr, got:\n{stderr}")
        self.assertNotIn("Traceback", stderr + result.stdout.decode("utf-8", "replace"))
        self.assertIn(says, lines[0])
        self.assertEqual(self.dump(), before, "a refused command changed the database")
        return lines[0]

    def write_json(self, name: str, text: str) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path


class CommandLineContract:
    """Hostile command lines, refused alike whichever database stores the jobs."""

    def test_bad_flags_and_arguments(self):
        cases = [  # argv -> a fragment of the one line
            (["enqueue", "m:f", "--priority", str(INT64_MAX + 1)], "argument --priority: expected an integer from"),
            (["enqueue", "m:f", "--priority", str(-INT64_MAX - 2)], "argument --priority"),
            (["enqueue", "m:f", "--priority", HUGE], "argument --priority: invalid int value: '1111"),
            (["job", str(INT64_MAX + 1)], "argument id: expected an integer from"),
            (["cancel", str(INT64_MAX + 1)], "argument id"),
            (["runs", str(INT64_MAX + 1)], "argument id"),
            (["jobs", "--limit", str(INT64_MAX + 1)], "argument --limit"),
            (["enqueue", "m:f", "--args", DEEP], "--args must be JSON nested at most 100 deep"),
            (["enqueue", "m:f", "--args", "[" * 150 + "]" * 150], "--args must be JSON nested at most 100 deep"),
            (["enqueue", "m:f", "--args", HUGE], "--args holds an integer of more than 4300 digits"),
            (["enqueue", "m:f", "--args", "[NaN]"], "--args must be JSON with finite numbers"),
            (["enqueue", "m:f", "--args", '{"x": -Infinity}'], "--args must be JSON with finite numbers"),
            (["enqueue", "m:f", "--args", "[1e999]"], "--args must be JSON with finite numbers"),
            (["submit", "1", "ask", "--value", "NaN"], "--value must be JSON with finite numbers"),
            (["submit", "1", "ask", "--value", DEEP], "--value must be JSON nested"),
            (["enqueue", "m:f", "--delay", "inf"], "argument --delay: expected a non-negative number of seconds"),
            (["enqueue", "m:f", "--delay", "1e12"], "at most 3155760000 (100 years)"),
            (["enqueue", "m:f", "--delay", "nan"], "argument --delay"),
            (["enqueue", "m:f", "--timeout", "inf"], "argument --timeout"),
            (["enqueue", "m:f", "--max-attempts", str(2 ** 31)], "max_attempts must be an integer of at least 1 and"),
            (["enqueue", "m:f", "--busy-timeout", "inf"], "argument --busy-timeout"),
            (["enqueue", "m:f", "--lease", "1e400"], "argument --lease"),
            (["enqueue", "m:f", "--idle-gpu", "nan"], "argument --idle-gpu"),
            (["enqueue", "m:f", "--queue", "*"], "queue must be a name other than '*'"),
            (["worker", "--queue", "*", "--burst"], "--queue must be a name other than '*'"),
        ]
        for argv, says in cases:
            with self.subTest(argv=[arg[:40] for arg in argv]):
                self.assert_refused(*argv, says=says)

    def test_bytes_that_are_not_utf8(self):
        cases = [  # argv (bytes) -> the field the line names
            ([b"enqueue", b"m:\xff"], "task name must be valid UTF-8"),
            ([b"enqueue", b"m:f", b"--queue", b"q\xff"], "queue must be valid UTF-8"),
            ([b"--project", b"p\xff", b"enqueue", b"m:f"], "project must be valid UTF-8"),
            ([b"enqueue", b"m:f", b"--key", b"k\xff"], "idempotency key must be valid UTF-8"),
            ([b"enqueue", b"m:f", b"--host", b"h\xff"], "host must be valid UTF-8"),
            ([b"worker", b"--queue", b"q\xff", b"--burst"], "--queue must be valid UTF-8"),
            ([b"control", b"--queue", b"q\xff", b"--off"], "--queue must be valid UTF-8"),
        ]
        for argv, says in cases:
            with self.subTest(argv=argv):
                self.assert_refused(*argv, says=says)

    def test_bad_environment(self):
        cases = [  # variable, value -> fragment
            ("ROWFLEET_BUSY_TIMEOUT", "inf", "busy_timeout must be a positive number of seconds, at most"),
            ("ROWFLEET_LEASE", "nan", "lease must be a positive number of seconds"),
            ("ROWFLEET_STALL_SAMPLES", HUGE, "ROWFLEET_STALL_SAMPLES must be a whole number, got '1111"),
            ("ROWFLEET_WATCHDOG_RETRIES", str(2 ** 63), "watchdog_retries must be an integer of at least 0 and"),
            ("ROWFLEET_PROJECT", "*", "project must be a name other than '*'"),
        ]
        for name, value, says in cases:
            with self.subTest(name=name):
                self.assert_refused("enqueue", "m:f", env=child_env(**{name: value}), says=says)

    def test_the_largest_and_smallest_priorities_are_stored(self):
        for priority in (INT64_MAX, -INT64_MAX - 1):
            result = self.run_cli("enqueue", "m:f", "--priority", str(priority), "--json")
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(json.loads(result.stdout)["priority"], priority)
        listed = self.run_cli("jobs", "--json")
        self.assertEqual(sorted(job["priority"] for job in json.loads(listed.stdout)), [-INT64_MAX - 1, INT64_MAX])


class CommandLineTest(CommandLineContract, HostileCase):
    def test_a_database_path_that_is_not_utf8(self):
        self.assert_refused(b"status", db=os.fsencode(self.db) + b"\xff", says="db must be valid UTF-8")


class PostgresHostile(PostgresServerCase):
    """A fresh PostgreSQL database in place of the file, dumped table by table."""

    def database(self) -> str:
        return self.empty_database()

    def dump(self) -> list[str]:
        tables = [row[0] for row in self.pg.psql(self.db, "SELECT table_name FROM information_schema.tables "
                                                          "WHERE table_schema = 'public' ORDER BY table_name")]
        # Table names from the catalogue, quoted: the test's own SQL, never a caller's text.
        return [f"{table}: {row!r}" for table in tables
                for row in self.pg.psql(self.db, f'SELECT * FROM "{table}" ORDER BY 1')]


class PostgresCommandLineTest(PostgresHostile, CommandLineContract, HostileCase):
    pass


def _workflow(**node: object) -> str:
    return json.dumps({"name": "w", "nodes": [{"id": "a", "task": "m:f", **node}]})


def _schedules(**entry: object) -> str:
    return json.dumps([{"name": "s", "task": "m:f", "every": 60, **entry}])


class FileTest(HostileCase):
    """Workflow and schedule files: every bad value is one line naming the field."""

    BAD_VALUES = [  # JSON text of a node's or schedule's field -> (field, fragment)
        ("priority", str(INT64_MAX + 1), "priority"),
        ("max_attempts", str(INT64_MAX + 1), "max_attempts"),
        ("timeout", "1e300", "timeout"),
        ("timeout", "1e999", "finite numbers"),
        ("timeout", "NaN", "finite numbers"),
        ("args", DEEP, "nested at most 100 deep"),
        ("args", '{"x": ' + "[" * 200 + "]" * 200 + "}", "nested at most 100 deep"),
        ("args", HUGE, "more than 4300 digits"),
        ("args", "[Infinity]", "finite numbers"),
        ("queue", '"*"', "queue"),
        ("queue", '"q\\udcff"', "queue"),
        ("task", '"m:\\udcff"', "task"),
    ]

    def _with(self, render, field: str, raw: str) -> str:
        placeholder = "__RAW__"
        return render(**{field: placeholder}).replace(f'"{placeholder}"', raw)

    def test_workflow_files(self):
        for field, raw, says in self.BAD_VALUES:
            with self.subTest(field=field, raw=raw[:30]):
                path = self.write_json("flow.json", self._with(_workflow, field, raw))
                self.assert_refused("run", path, "--no-task-check", says=says)
        path = self.write_json("flow.json", json.dumps({"name": "w\udcff", "nodes": [{"id": "a", "task": "m:f"}]}))
        self.assert_refused("run", path, "--no-task-check", says="name")

    def test_schedule_files(self):
        cases = self.BAD_VALUES + [
            ("every", "1e300", "every"),
            ("every", "NaN", "finite numbers"),
            ("name", '"s\\udcff"', "name"),
            ("hours", "[1e999, 3]", "finite numbers"),
        ]
        for field, raw, says in cases:
            with self.subTest(field=field, raw=raw[:30]):
                path = self.write_json("schedules.json", self._with(_schedules, field, raw))
                self.assert_refused("scheduler", "--schedule", path, "--once", says=says)


class CorruptSchemaTest(HostileCase):
    """The driver raises UnicodeDecodeError, not sqlite3.Error, when the schema's text is not UTF-8."""

    def corrupt(self) -> None:
        conn = sqlite3.connect(self.db, isolation_level=None)
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_master SET name = CAST(x'6fff' AS TEXT), "
                     "sql = CAST(x'ff' || CAST(sql AS BLOB) AS TEXT) WHERE name = 'orchestrators'")
        conn.close()

    def test_every_command_refuses_it_untouched(self):
        self.corrupt()
        before = {name: digest(os.path.join(self.dir, name)) for name in os.listdir(self.dir)}
        for argv in (["init"], ["status"], ["enqueue", "m:f"], ["jobs"]):
            with self.subTest(argv=argv):
                result = self.run_cli(*argv)
                stderr = result.stderr.decode()
                self.assertEqual(result.returncode, 2, stderr)
                self.assertEqual(len(stderr.strip().splitlines()), 1, stderr)
                self.assertIn("the database file is corrupt", stderr)
                self.assertNotIn("Traceback", stderr)
        after = {name: digest(os.path.join(self.dir, name)) for name in os.listdir(self.dir)}
        self.assertEqual(after, before)


class ApiTest(TempDirTestCase):
    def setUp(self):
        super().setUp()
        import rowfleet
        from rowfleet import config

        self.rowfleet = rowfleet
        previous = config._current
        self.addCleanup(setattr, config, "_current", previous)
        self.addCleanup(_close_api_store)
        rowfleet.configure(db=self.db)
        rowfleet.init()

    def test_bad_arguments_raise_config_error_and_store_nothing(self):
        rowfleet = self.rowfleet
        cases = [  # a call -> a fragment of the message
            (lambda: rowfleet.enqueue("m:f", run_at="x"), "run_at must be a time in UNIX epoch seconds"),
            (lambda: rowfleet.enqueue("m:f", run_at=float("nan")), "run_at"),
            (lambda: rowfleet.enqueue("m:f", run_at=1e20), "run_at"),
            (lambda: rowfleet.enqueue("m:f", queue="*"), "queue must be a name other than '*'"),
            (lambda: rowfleet.enqueue("m:f", priority=2 ** 63), "priority must be an integer from"),
            (lambda: rowfleet.enqueue("m:f", delay=float("inf")), "delay must be a non-negative number"),
            (lambda: rowfleet.enqueue("m:f", delay=1e12), "at most 3155760000"),
            (lambda: rowfleet.enqueue("m:f", timeout=float("nan")), "timeout"),
            (lambda: rowfleet.enqueue("m:f", key="k\x00"), "without NUL"),
            (lambda: rowfleet.enqueue("m:\udcff"), "task name must be valid UTF-8"),
            (lambda: rowfleet.enqueue("m:f", project="p q"), "project must be a non-empty word"),
            (lambda: rowfleet.enqueue("m:f", _nested(150)), "nested at most 100 deep"),
            (lambda: rowfleet.enqueue_many("m:f", [1, _nested(150)]), "nested at most 100 deep"),
            (lambda: rowfleet.get_job(2 ** 63), "job id"),
            (lambda: rowfleet.submit(1, "ask", float("nan")), "value must be JSON with finite numbers"),
            (lambda: rowfleet.submit(1, "a b", 1), "node must be letters"),
            (lambda: rowfleet.start_run("w", float("inf")), "finite numbers"),
        ]
        for call, says in cases:
            with self.subTest(says=says), self.assertRaises(ConfigError) as caught:
                call()
            self.assertIn(says, str(caught.exception))
            self.assertNotIn("\n", str(caught.exception))
        self.assertEqual(rowfleet.api.default_store().list_jobs(""), [])


def _close_api_store() -> None:
    from rowfleet import api

    cached = getattr(api._local, "store", None)
    if cached is not None:
        cached[2].close()
        del api._local.store


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


class NamesTest(unittest.TestCase):
    def test_names(self):
        cases = [  # check, value, options -> accepted?
            (names.check_name, "gpu-large", {}, True),
            (names.check_name, "módulo:função", {}, True),
            (names.check_name, "", {}, False),
            (names.check_name, "", {"empty": True}, True),
            (names.check_name, "a b", {}, False),
            (names.check_name, "a\tb", {}, False),
            (names.check_name, "*", {}, False),
            (names.check_name, "q\udcff", {}, False),
            (names.check_name, "q\x00", {}, False),
            (names.check_name, "x" * 255, {}, True),
            (names.check_name, "x" * 256, {}, False),
            (names.check_name, 5, {}, False),
            (names.check_name, None, {"empty": True}, False),
            (names.check_text, "order 42", {}, True),
            (names.check_text, "", {}, False),
            (names.check_text, "", {"empty": True}, True),
            (names.check_text, "k\udcff", {}, False),
            (names.check_text, "k\x00", {}, False),
            (names.check_text, "x" * 4097, {}, False),
            (names.check_node_id, "load_2", {}, True),
            (names.check_node_id, "2load", {}, False),
            (names.check_node_id, "a\n", {}, False),
        ]
        self._table(cases)

    def test_numbers(self):
        inf, nan = float("inf"), float("nan")
        cases = [
            (names.check_int, INT64_MAX, {}, True),
            (names.check_int, -INT64_MAX - 1, {}, True),
            (names.check_int, INT64_MAX + 1, {}, False),
            (names.check_int, -INT64_MAX - 2, {}, False),
            (names.check_int, 10 ** 5000, {}, False),
            (names.check_int, True, {}, False),
            (names.check_int, 1.0, {}, False),
            (names.check_int, "1", {}, False),
            (names.check_int, 0, {"least": 1}, False),
            (names.check_int, 2 ** 31, {"least": 1, "most": names.INT32_MAX}, False),
            (names.check_seconds, 0, {}, False),
            (names.check_seconds, 0, {"zero": True}, True),
            (names.check_seconds, -1, {"zero": True}, False),
            (names.check_seconds, names.MAX_SECONDS, {}, True),
            (names.check_seconds, names.MAX_SECONDS * 1.01, {}, False),
            (names.check_seconds, 1e12, {}, False),
            (names.check_seconds, inf, {}, False),
            (names.check_seconds, nan, {}, False),
            (names.check_seconds, False, {"zero": True}, False),
            (names.check_epoch, 0, {}, True),
            (names.check_epoch, names.EPOCH_MIN, {}, True),
            (names.check_epoch, names.EPOCH_MAX, {}, True),
            (names.check_epoch, names.EPOCH_MAX + 1, {}, False),
            (names.check_epoch, nan, {}, False),
            (names.check_epoch, "x", {}, False),
            (names.check_number, 5, {"positive": True}, True),
            (names.check_number, 0, {"positive": True}, False),
            (names.check_number, -inf, {}, False),
        ]
        self._table(cases)

    def test_every_accepted_bound_fits_datetime_and_the_databases(self):
        import datetime

        utc = datetime.timezone.utc
        for epoch in (names.EPOCH_MIN, names.EPOCH_MAX):
            datetime.datetime.fromtimestamp(epoch, tz=utc)
        now = datetime.datetime(2100, 1, 1, tzinfo=utc).timestamp()
        datetime.datetime.fromtimestamp(now + names.MAX_SECONDS, tz=utc)
        with sqlite3.connect(":memory:") as conn:
            self.assertEqual(conn.execute("SELECT ?, ?", (names.INT64_MAX, names.INT64_MIN)).fetchone(),
                             (names.INT64_MAX, names.INT64_MIN))
        conn.close()

    def test_json(self):
        cases = [  # text -> accepted?
            ('{"a": [1, 2.5, "x", null, true]}', True),
            ("[" * 100 + "]" * 100, True),
            ("[" * 101 + "]" * 101, False),
            (DEEP, False),
            ("1" * 4300, True),
            (HUGE, False),
            ("NaN", False),
            ("[-Infinity]", False),
            ("1e999", False),
            ('"\\udcff"', True),  # text inside args is stored escaped; names are checked apart
        ]
        for text, accepted in cases:
            with self.subTest(text=text[:30]):
                if accepted:
                    names.parse_json("--args", text)
                else:
                    with self.assertRaises(ConfigError) as caught:
                        names.parse_json("--args", text)
                    self.assertTrue(str(caught.exception).startswith("--args "), caught.exception)
        with self.assertRaises(json.JSONDecodeError):
            names.parse_json("--args", "{not json")

    def test_messages_name_the_field_and_stay_short(self):
        with self.assertRaises(names.InvalidValue) as caught:
            names.check_int("priority", 10 ** 5000)
        message = str(caught.exception)
        self.assertTrue(message.startswith("priority must be an integer from"), message)
        self.assertLess(len(message), 200)

    def _table(self, cases):
        for check, value, options, accepted in cases:
            with self.subTest(check=check.__name__, value=names.shown(value), options=options):
                if accepted:
                    check("field", value, **options)
                else:
                    with self.assertRaises(ConfigError) as caught:
                        check("field", value, **options)
                    self.assertTrue(str(caught.exception).startswith("field "), caught.exception)


if __name__ == "__main__":
    unittest.main()
