"""The README's quickstart and the docs site's workflow and operations examples, executed
exactly as written, so they cannot rot. Slow: each runs the real command line several times
over."""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import subprocess
import sys
import unittest

from pg_harness import PostgresDatabaseCase
from support import DEADLINE, ROOT, TempDirTestCase, child_env

WORKFLOWS_PAGE = os.path.join("web", "workflows.html")
OPERATIONS_PAGE = os.path.join("web", "operations.html")


def quickstart_block(marker: str, section: str = "quickstart", source: str = "README.md") -> str:
    """The block that follows ``<!-- SECTION:MARKER -->`` in ``source``: a fenced block of the
    README, or a page's ``<pre><code>``, unescaped to the text a reader copies."""
    with open(os.path.join(ROOT, source), encoding="utf-8") as handle:
        text = handle.read()
    if source.endswith(".html"):
        match = re.search(rf"<!-- {section}:{marker} -->\s*<pre[^>]*><code>(.*?)</code></pre>", text, re.S)
        block = None if match is None else html.unescape(match.group(1)) + "\n"
    else:
        match = re.search(rf"<!-- {section}:{marker} -->\s*```\w*\n(.*?)```", text, re.S)
        block = None if match is None else match.group(1)
    if block is None:
        raise AssertionError(f"{source} has no {section}:{marker} block")
    return block


def operations_block(marker: str) -> str:
    return quickstart_block(marker, "operations", OPERATIONS_PAGE)


def run_commands(commands: str, cwd: str, **env: str) -> subprocess.CompletedProcess:
    """Run README commands in bash, as written, with ``rowfleet`` meaning this checkout's;
    the first that fails ends the script."""
    script = 'rowfleet() { "$PYTHON" -m rowfleet "$@"; }\nset -e\n' + commands
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=DEADLINE,
                          env=child_env(PYTHON=sys.executable, **env))


class ReadmeQuickstartTest(TempDirTestCase):
    def test_the_first_commands_are_demo_and_test(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
            commands = re.findall(r"^python make\.py \S+", handle.read(), re.M)
        self.assertEqual(commands[:2], ["python make.py demo", "python make.py test"])

    def test_cli_quickstart(self):
        result = run_commands(quickstart_block("cli") + "\nrowfleet job 1 --json > job.json\n", self.dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(self.dir, "job.json")) as handle:
            job = json.load(handle)
        self.assertEqual((job["state"], job["result"]), ("completed", "welcomed user 42"))
        self.assertIn("completed", result.stdout)

    def test_workflow_quickstart(self):
        result = run_commands(quickstart_block("workflow", source=WORKFLOWS_PAGE) + "\nrowfleet runs 1 --json > run.json\n", self.dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(self.dir, "run.json")) as handle:
            run = json.load(handle)
        self.assertEqual(run["state"], "completed")
        nodes = {node["id"]: node for node in run["nodes"]}
        self.assertEqual(nodes["summarise"]["result"], [f"LOCAL STORY {n}" for n in range(3)])
        self.assertEqual(nodes["publish"]["result"], "LOCAL STORY 0 | LOCAL STORY 1 | LOCAL STORY 2")
        self.assertIn("completed", result.stdout)

    def test_python_quickstart(self):
        path = self.write_module("quickstart", quickstart_block("python"))
        result = subprocess.run([sys.executable, path], cwd=self.dir, capture_output=True, text=True,
                                timeout=DEADLINE, env=child_env())
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip().splitlines()[-1], "receipt for order 1")


class ReadmeOperationsContract:
    """The operations page's switch examples, run as written: the commands, and the plain SQL an
    application would send, each read back through the store."""

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()

    def execute(self, sql: str) -> None:
        raise NotImplementedError

    def test_plain_sql_switches_a_queue_off_and_on(self):
        self.execute(operations_block(self.dialect))
        held = self.store.switches_in_force("", "gpu-box-1", ("gpu",))["gpu"]
        self.assertEqual((held.desired, held.policy, held.changed_by), ("off", "hard", "billing-app"))
        self.assertGreater(held.changed_at, 1.7e9, "changed_at defaults to now")
        self.execute(operations_block(self.dialect))  # again: the upsert rewrites the row in place
        self.assertEqual(len(self.store.reads.switches()), 1)
        self.execute(operations_block("on"))
        self.assertIsNone(self.store.switches_in_force("", "gpu-box-1", ("gpu",))["gpu"])

    def test_moving_a_deployment_to_a_named_project_takes_its_queued_rows_along(self):
        from rowfleet.job import JobSpec

        queued = self.store.enqueue(JobSpec(task="app:work"))
        self.store.set_switch("", "gpu-box-1", "gpu", "off")
        for statement in operations_block("move-project").split(";\n"):
            if statement.strip():
                self.execute(statement)
        self.assertEqual(self.store.get_job(queued.id, "billing").state, "queued")
        self.assertEqual(self.store.reads.list_jobs(""), [])
        self.assertIsNotNone(self.store.switches_in_force("billing", "gpu-box-1", ("gpu",))["gpu"])


class SQLiteReadmeOperationsTest(ReadmeOperationsContract, TempDirTestCase):
    dialect = "sqlite"

    def execute(self, sql: str) -> None:
        import sqlite3

        with contextlib.closing(sqlite3.connect(self.db, isolation_level=None)) as conn:
            conn.execute(sql)

    def test_the_commands(self):
        result = run_commands(operations_block("cli"), self.dir, ROWFLEET_DB=self.db)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("switch: project", result.stdout, "workers lists the switch rows")
        self.assertEqual([(s.host, s.queue, s.desired) for s in self.store.reads.switches()],
                         [("gpu-box-1", "*", "on"), ("gpu-box-1", "gpu", "on")])

    def test_the_readme_commands(self):
        result = run_commands(quickstart_block("cli-summary", "operations"), self.dir, ROWFLEET_DB=self.db)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("switch: project", result.stdout, "workers lists the switch rows")
        self.assertEqual([(s.host, s.queue, s.desired) for s in self.store.reads.switches()], [("gpu-box-1", "gpu", "on")])

    def test_the_broker_view(self):
        self.cli("init")
        result = run_commands(operations_block("broker"), self.dir, ROWFLEET_DB=self.db)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(operations_block("broker-output"), result.stdout)

    def test_periodic_jobs(self):
        self.write_module("app", operations_block("periodic-python"))
        with open(os.path.join(self.dir, "schedules.json"), "w") as handle:
            handle.write(operations_block("periodic-json"))
        for tick in range(2):
            with self.subTest(tick=tick):
                result = run_commands(operations_block("periodic-cli"), self.dir, ROWFLEET_DB=self.db)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("nightly-refresh", result.stdout)
        nightly = [job for job in self.store.reads.list_jobs("") if job.args == {"full": True}]
        self.assertEqual(len(nightly), 1, "at_boot fired the slot once, however many ticks ran")
        self.assertEqual((nightly[0].task, nightly[0].queue), ("app:refresh", "maintenance"), "the task's own queue")


class PostgresReadmeOperationsTest(ReadmeOperationsContract, PostgresDatabaseCase, TempDirTestCase):
    dialect = "postgres"

    def execute(self, sql: str) -> None:
        with contextlib.closing(self.caller_connection()) as conn, conn.transaction():
            conn.execute(sql)


class SubmissionSqlContract:
    """The workflows page's plain-SQL submission, run as written by a program of its own on a
    run whose input node it answers, then applied by one orchestrator sweep."""

    def execute(self, sql: str) -> None:
        raise NotImplementedError

    def test_the_insert_on_the_workflows_page_is_applied(self):
        from rowfleet import dag
        from rowfleet.services.orchestrator import Orchestrator

        store = self.open_store()
        flow = dag.parse_workflow({"name": "approval", "nodes": [
            {"id": "approve", "kind": "input", "prompt": "Publish?"},
            {"id": "publish", "task": "app:publish", "depends_on": ["approve"], "args": {"$from": "approve.ok"}}]})
        run_id = store.start_run(flow, None, "")
        self.assertEqual(run_id, 1, "the block names run 1")
        self.execute(quickstart_block("submission-sql", "workflows", WORKFLOWS_PAGE))
        [pending] = store.reads.list_submissions("")
        self.assertEqual((pending.state, pending.value, pending.submitted_by), ("pending", {"ok": True}, ""))
        self.assertEqual(Orchestrator(store, self.config()).run_once().submissions_applied, 1)
        self.assertEqual(store.reads.get_submission(pending.id, "").state, "processed")
        run = store.get_run(run_id, "")
        self.assertEqual((run.state, run.node("approve").result), ("running", {"ok": True}))


class SQLiteSubmissionSqlTest(SubmissionSqlContract, TempDirTestCase):
    def execute(self, sql: str) -> None:
        import sqlite3

        with contextlib.closing(sqlite3.connect(self.db, isolation_level=None)) as conn:
            conn.execute(sql)


class PostgresSubmissionSqlTest(SubmissionSqlContract, PostgresDatabaseCase, TempDirTestCase):
    def execute(self, sql: str) -> None:
        with contextlib.closing(self.caller_connection()) as conn, conn.transaction():
            conn.execute(sql)


if __name__ == "__main__":
    unittest.main()
