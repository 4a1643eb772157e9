"""What a worker will run: tasks its --app modules register, and module:function names under
its allowed prefixes; any other name fails its job, unretried, with nothing imported or run,
however the row was written (a workflow file, plain SQL). On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import sqlite3
import unittest
import warnings

import rowfleet
from pg_harness import PostgresDatabaseCase
from rowfleet import tasks
from rowfleet.errors import TaskRefused, UnknownTask
from support import LibraryOnEmptyDatabase, TempDirTestCase

APP = """\
import rowfleet

@rowfleet.task(name="app.double")
def double(n):
    return 2 * n
"""

HELPERS = """\
import os
from os import system  # an allowed module's imports are not its tasks

def add(a, b):
    return a + b

def touch(name):
    open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name), "w").close()
"""


class AllowedTest(unittest.TestCase):
    def test_a_prefix_admits_its_module_and_submodules_only(self):
        cases = [("pkg:f", ("pkg",), True), ("pkg.sub.deep:f", ("pkg",), True), ("pkgx:f", ("pkg",), False),
                 ("pkg:f", ("pkg.sub",), False), ("pkg.sub:f", ("pkg.sub",), True), ("os:system", (), False),
                 ("pkg", ("pkg",), False), ("pkg:", ("pkg",), False), (".pkg:f", ("pkg",), False),
                 ("pkg:Cls.method", ("pkg",), True)]
        for name, prefixes, expected in cases:
            with self.subTest(name=name, prefixes=prefixes):
                self.assertEqual(tasks.allowed(name, prefixes), expected)

    def test_a_refused_name_is_never_imported(self):
        name = "rowfleet_never_imported_here:fn"
        with self.assertRaisesRegex(TaskRefused, "nothing imported"):
            tasks.resolve(name, ())
        self.assertNotIn("rowfleet_never_imported_here", __import__("sys").modules)


class TrustContract:
    """The same answers on every backend."""

    def setUp(self):
        super().setUp()
        self.write_module("app", APP)
        self.write_module("helpers", HELPERS)

    def plain_sql_job(self, task: str, args) -> None:
        """A job row as anyone with database access could write it, without rowfleet."""
        self.execute(self.insert_job, (task, json.dumps(args)))

    def worker(self, *flags: str):
        return self.cli("worker", "--burst", *flags)

    def jobs(self):
        return {job["task"]: job for job in self.cli_json("jobs")}

    def assert_refused_unrun(self, job) -> None:
        self.assertEqual((job["state"], job["attempts"]), ("failed", 1), job)  # failed, not retried
        self.assertIn("refused", job["error"])

    def test_os_system_from_a_workflow_file_or_plain_sql_is_refused_and_never_runs(self):
        flow = os.path.join(self.dir, "flow.json")
        with open(flow, "w") as handle:
            json.dump({"name": "evil", "nodes": [{"id": "a", "task": "os:system", "args": ["touch PWNED"]}]},
                      handle)
        self.cli("run", flow, "--no-task-check")
        self.cli("orchestrator", "--once")
        self.plain_sql_job("os:system", ["touch PWNED2"])
        self.plain_sql_job("helpers:system", ["touch PWNED3"])  # os.system reached through an allowed module
        self.worker("--app", "app", "--allow-module", "helpers")
        jobs = self.cli_json("jobs")
        self.assertEqual(sorted(job["task"] for job in jobs), ["helpers:system", "os:system", "os:system"])
        for job in jobs:
            self.assert_refused_unrun(job)
        for marker in ("PWNED", "PWNED2", "PWNED3"):
            self.assertFalse(os.path.exists(os.path.join(self.dir, marker)), marker)

    def test_registered_tasks_and_allowed_prefixes_run(self):
        self.cli("enqueue", "app.double", "--app", "app", "--args", '{"n": 4}')
        self.plain_sql_job("helpers:touch", ["ALLOWED"])
        self.plain_sql_job("app:double", [5])  # an --app module's functions are allowed by name too
        self.worker("--app", "app")
        jobs = self.jobs()
        self.assertEqual((jobs["app.double"]["state"], jobs["app.double"]["result"]), ("completed", 8))
        self.assertEqual((jobs["app:double"]["state"], jobs["app:double"]["result"]), ("completed", 10))
        self.assert_refused_unrun(jobs["helpers:touch"])
        self.assertFalse(os.path.exists(os.path.join(self.dir, "ALLOWED")))
        self.execute("DELETE FROM jobs")
        self.plain_sql_job("helpers:touch", ["ALLOWED"])
        self.worker("--allow-module", "helpers")
        self.assertEqual(self.jobs()["helpers:touch"]["state"], "completed")
        self.assertTrue(os.path.exists(os.path.join(self.dir, "ALLOWED")))

    def test_enqueue_warns_of_an_untrusted_name_and_refuses_it_with_app(self):
        result = self.cli("enqueue", "os:system", "--args", '["touch PWNED"]')
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertIn("warning: task 'os:system' is not trusted", lines[0])
        self.assertEqual(len(self.cli_json("jobs")), 1, "a warning still writes the job")
        self.assertEqual(self.cli("enqueue", "helpers:add", "--allow-module", "helpers").stderr, "")
        for args in (["os:system", "--app", "app"], ["app.nope", "--app", "app"],
                     ["helpers:system", "--app", "app", "--allow-module", "helpers"]):
            with self.subTest(args=args):
                result = self.cli("enqueue", *args, check=False)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertEqual(len(self.cli_json("jobs")), 2, "a refused enqueue writes nothing")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "PWNED")))

    def test_run_warns_of_an_untrusted_name_and_refuses_it_with_app(self):
        flow = os.path.join(self.dir, "flow.json")
        with open(flow, "w") as handle:
            json.dump({"name": "f", "nodes": [{"id": "a", "task": "os:system"}]}, handle)
        result = self.cli("run", flow, "--app", "app", check=False)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("node 'a'", result.stderr)
        self.assertEqual(self.cli_json("runs"), [])
        result = self.cli("run", flow)
        self.assertIn("warning: task 'os:system' is not trusted", result.stderr)

    def test_the_environment_sets_the_allowed_prefixes(self):
        from support import child_env

        self.plain_sql_job("helpers:add", [1, 2])
        self.cli("worker", "--burst", env=child_env(ROWFLEET_ALLOW_MODULES="other,helpers"))
        self.assertEqual(self.jobs()["helpers:add"]["result"], 3)


@rowfleet.task(name="trust.registered_here")
def registered_here():
    return None


class LibraryTrustTest(LibraryOnEmptyDatabase, TempDirTestCase):
    """``rowfleet.enqueue`` gives the answers of ``rowfleet enqueue``: a warning (the job
    written) where the command line warns without ``--app``, and with ``strict`` the refusal
    (nothing written) it gives with ``--app``. The rule is the backend's no business: SQLite."""

    def empty_database(self) -> str:
        return self.db

    def setUp(self):
        super().setUp()
        self.write_module("app", APP)

    def test_a_name_no_worker_would_trust_is_written_with_the_warning_the_command_line_gives(self):
        for name in ("os:system", "app.nope"):
            with self.subTest(name=name):
                with self.assertWarns(rowfleet.TaskWarning) as caught:
                    job = rowfleet.enqueue(name)
                self.assertEqual(caught.filename, __file__, "the warning names the caller's line")
                said = self.cli("enqueue", name).stderr.strip()
                self.assertEqual(said, f"rowfleet: warning: {str(caught.warning).split(' (strict=True')[0]}")
                self.assertEqual(self.row(job.id).task, name, "a warning still writes the job")
                with self.assertWarns(rowfleet.TaskWarning):
                    self.assertEqual(rowfleet.enqueue_many(name, [1, 2]), 2)

    def test_a_name_registered_here_or_under_an_allowed_prefix_is_not_warned_of(self):
        rowfleet.configure(db=self.db, allow_modules=("json",))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for task in (registered_here, "trust.registered_here", "json:dumps"):
                rowfleet.enqueue(task)
                rowfleet.enqueue(task, strict=True)
        self.assertEqual(len(self.store.reads.list_jobs("")), 6)

    def test_strict_refuses_what_the_command_line_refuses_with_app_and_writes_nothing(self):
        for name, kind in (("os:system", TaskRefused), ("app.nope", UnknownTask), ("json:dumps", TaskRefused)):
            with self.subTest(name=name):
                with self.assertRaises(kind) as caught:
                    rowfleet.enqueue(name, strict=True)
                with self.assertRaises(kind):
                    rowfleet.enqueue_many(name, [1], strict=True)
                said = self.cli("enqueue", name, "--app", "app", check=False)
                self.assertEqual(said.returncode, 2, said.stderr)
                self.assertEqual(said.stderr.strip(), f"rowfleet: error: {caught.exception}")
        self.assertEqual(self.store.reads.list_jobs(""), [])


class SQLiteTrustTest(TrustContract, TempDirTestCase):
    insert_job = "INSERT INTO jobs (queue, task, args, run_at, created_at, updated_at) VALUES ('default', ?, ?, 0, 0, 0)"

    def setUp(self):
        super().setUp()
        self.cli("init")

    def execute(self, sql, params=()):
        with sqlite3.connect(self.db) as conn:
            conn.execute(sql, params)
        conn.close()


class PostgresTrustTest(PostgresDatabaseCase, TrustContract, TempDirTestCase):
    insert_job = ("INSERT INTO jobs (queue, task, args, run_at, created_at, updated_at) "
                  "VALUES ('default', %s, %s, 0, 0, 0)")

    def setUp(self):
        super().setUp()
        self.db = self.url
        self.cli("init")

    def execute(self, sql, params=()):
        with self.caller_connection() as conn:
            conn.execute(sql, params)


if __name__ == "__main__":
    unittest.main()
