"""Submissions as real OS processes: an answer written by another program's plain SQL while no
orchestrator runs, and an orchestrator killed (``kill -9``) between claiming a submission and
applying it, on SQLite and PostgreSQL, driven through the real command line (``rowfleet
run``, ``worker``, ``orchestrator``, ``submissions``).

Owns the promise that a submission row is applied exactly once whoever wrote it and whatever
dies: the run resumes, the node after the input runs once (counted from a side effect the
handler writes, not read back from the database under test), the submission ends
``processed``; a hostile row beside it fails alone and the orchestrator lives on. The plain
SQL goes through the driver (``sqlite3``, psycopg), never through rowfleet.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import unittest
from typing import Any

from rowfleet.services.orchestrator import SUBMISSION_GRACE
from pg_harness import PostgresServerCase
from support import DEADLINE, TempDirTestCase, child_env, wait_until

KILLED = -signal.SIGKILL
APP = "subapp"
WORKER = ("--lease", "5", "--renew", "0.5", "--poll", "0.2", "--heartbeat", "0.5")
ORCHESTRATOR = ("--interval", "0.2", "--poll", "0.2", "--heartbeat", "0.5")

APP_SOURCE = '''\
import os

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))


@rowfleet.task(name="sub.step")
def step(value=None):
    """Appends "RUN NODE" to effects.log (one O_APPEND write), then returns ``value``."""
    job = rowfleet.current_job()
    fd = os.open(os.path.join(HERE, "effects.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job.run_id} {job.node_id}\\n".encode())
    finally:
        os.close(fd)
    return value
'''

DRIVER_SOURCE = '''\
"""Usage: python subdriver.py DB. One real orchestrator sweep that is killed (SIGKILL, by
itself) once it has claimed the pending submissions, before it applies the first."""
import os
import signal
import sys

from rowfleet.config import Config
from rowfleet.services.orchestrator import Orchestrator
from rowfleet.store import open_store

CONFIG = Config(db=sys.argv[1], interval=0.2, poll=0.2, heartbeat=0.5)
store = open_store(CONFIG)
orchestrator = Orchestrator(store, CONFIG)
with open("holder", "w") as handle:
    handle.write(orchestrator.orchestrator_id)
# The store's own process_submissions claims, then calls apply_submission: the crash point.
store.apply_submission = lambda held, project: os.kill(os.getpid(), signal.SIGKILL)
orchestrator.run_once()
sys.exit(0)  # nothing was claimed: the crash point was never reached
'''

# A task node, an input node after it, and a task node that takes the answer.
FLOW = {"name": "approval", "nodes": [
    {"id": "draft", "task": "sub.step", "args": {"value": "text"}},
    {"id": "approve", "kind": "input", "prompt": "Publish?", "depends_on": ["draft"]},
    {"id": "publish", "task": "sub.step", "depends_on": ["approve"], "args": {"value": {"$from": "approve.ok"}}},
]}


class SubmissionProcessContract:
    """Subclasses (``TempDirTestCase``s) provide ``empty_database()``, ``await_rollbacks()``,
    ``sql(statement, *params)`` (``?`` placeholders, on a connection of the test's own) and
    ``hostile_rows(run_id)``: (run_id, node_id, value) rows only plain SQL writes."""

    def setUp(self) -> None:
        super().setUp()
        self.db = self.empty_database()
        self.write_module(APP, APP_SOURCE)
        self.driver = self.write_module("subdriver", DRIVER_SOURCE)
        self.store = self.open_store()

    def start_awaiting(self) -> tuple[int, subprocess.Popen]:
        """A run parked at its input node, its first node run by a worker left running, and
        no orchestrator any more: the run's id and the worker."""
        path = os.path.join(self.dir, "flow.json")
        with open(path, "w") as handle:
            json.dump(FLOW, handle)
        run_id = int(self.cli("run", path, "--app", APP).stdout)
        worker = self.launch_logged("worker", "worker", "--app", APP, *WORKER)
        orchestrator = self.launch_logged("orchestrator", "orchestrator", *ORCHESTRATOR)
        wait_until(lambda: self.store.get_run(run_id, "").state == "awaiting_input",
                   message=f"run {run_id} to await input")
        self.stop_all(orchestrator)
        return run_id, worker

    def insert(self, run_id: Any, node_id: Any, value: Any) -> int:
        """Another program's INSERT, naming only the columns without a default; the new id."""
        self.sql("INSERT INTO submissions (project, run_id, node_id, value) VALUES ('', ?, ?, ?)",
                 run_id, node_id, value)
        return max(s.id for s in self.store.reads.list_submissions("", limit=1))

    def effects(self) -> collections.Counter:
        try:
            with open(os.path.join(self.dir, "effects.log")) as handle:
                return collections.Counter(tuple(line.split()) for line in handle)
        except FileNotFoundError:
            return collections.Counter()

    def assert_resumed_once(self, run_id: int, submission_id: int, processes: list) -> None:
        try:
            wait_until(lambda: self.store.get_run(run_id, "").state in ("completed", "failed", "cancelled"),
                       message=f"run {run_id} to end")
        except AssertionError:
            raise AssertionError("\n".join(self.output(p) for p in processes)) from None
        run = self.store.get_run(run_id, "")
        self.assertEqual(run.state, "completed", run.error)
        self.assertEqual((run.node("approve").result, run.node("publish").result), ({"ok": True}, True))
        self.assertEqual(self.effects(), collections.Counter({(str(run_id), "draft"): 1, (str(run_id), "publish"): 1}),
                         "each task node ran exactly once")
        self.assertEqual([job.node_id for job in self.store.reads.list_jobs("", limit=100)], ["publish", "draft"],
                         "a node enqueued twice")
        shown = {s["id"]: s for s in json.loads(self.cli("submissions", "--json").stdout)}
        self.assertEqual((shown[submission_id]["state"], shown[submission_id]["error"]), ("processed", None))

    # --- 1. plain SQL while no orchestrator runs ------------------------------------------

    def test_a_plain_sql_answer_waits_for_an_orchestrator_and_resumes_the_run_once(self):
        run_id, worker = self.start_awaiting()
        hostile = [self.insert(*row) for row in self.hostile_rows(run_id)]
        good = self.insert(run_id, "approve", '{"ok": true}')
        self.assertEqual({s.state for s in self.store.reads.list_submissions("")}, {"pending"})
        self.assertEqual(self.store.get_run(run_id, "").state, "awaiting_input", "applied with no orchestrator")

        orchestrator = self.launch_logged("orchestrator", "orchestrator", *ORCHESTRATOR)
        self.assert_resumed_once(run_id, good, [worker, orchestrator])
        for submission_id in hostile:
            with self.subTest(submission=submission_id):
                row = self.store.reads.get_submission(submission_id, "")
                self.assertEqual(row.state, "failed")
                self.assertTrue(row.error, row)
        listed = self.cli("submissions")
        self.assertIn("processed", listed.stdout)
        self.assertIn("failed", listed.stdout)
        self.assertIsNone(orchestrator.poll(), "the orchestrator died of a hostile row")
        self.stop_all(orchestrator, worker)
        self.assertNotIn("Traceback", self.output(orchestrator))

    # --- 2. kill -9 between claim and apply --------------------------------------------------

    def test_an_orchestrator_killed_between_claim_and_apply_leaves_it_to_be_applied_once(self):
        run_id, worker = self.start_awaiting()
        submission_id = self.insert(run_id, "approve", '{"ok": true}')
        result = subprocess.run([sys.executable, self.driver, self.db], cwd=self.dir, env=child_env(),
                                capture_output=True, text=True, timeout=DEADLINE)
        self.assertEqual(result.returncode, KILLED, f"the driver exited {result.returncode}:\n{result.stderr}")
        self.await_rollbacks()
        held = self.store.reads.get_submission(submission_id, "")
        self.assertEqual((held.state, held.processing_by), ("processing", self.marker("holder")))
        self.assertEqual(self.store.get_run(run_id, "").node("approve").state, "awaiting_input")

        # Held by the dead orchestrator past the grace (the time moved by plain SQL, not waited for).
        self.sql("UPDATE submissions SET processing_at = processing_at - ? WHERE id = ?", SUBMISSION_GRACE + 5,
                 submission_id)
        orchestrator = self.launch_logged("orchestrator", "orchestrator", *ORCHESTRATOR)
        self.assert_resumed_once(run_id, submission_id, [worker, orchestrator])
        done = self.store.reads.get_submission(submission_id, "")
        self.assertNotEqual(done.processing_by, self.marker("holder"))
        self.stop_all(orchestrator, worker)
        self.assertIn(f"submission {submission_id}: held past", self.output(orchestrator))


class SQLiteSubmissionProcessTest(SubmissionProcessContract, TempDirTestCase):
    def empty_database(self) -> str:
        return self.db

    def await_rollbacks(self) -> None:
        pass  # a dead process's locks went with it

    def sql(self, statement: str, *params: Any) -> None:
        with contextlib.closing(sqlite3.connect(self.db)) as conn, conn:
            conn.execute(statement, params)

    def hostile_rows(self, run_id: int) -> list:
        return [(run_id, "approve", "{oops"), ("abc", "approve", "true"), (run_id, b"\xff", "true"),
                (run_id, "approve", b"\xff{")]

    def test_a_row_no_column_of_which_reads_is_listed_as_stored(self):
        self.sql("INSERT INTO submissions (project, run_id, node_id, value, created_at, processed_at, error) "
                 "VALUES ('', 'abc', x'ff', x'ff', 'yesterday', 9e999, x'00ff')")
        listed = self.cli("submissions")
        self.assertIn("! submission 1 is unreadable: column run_id is not an integer", listed.stdout)
        self.assertIn("column created_at is not a finite number (a time): 'yesterday'", listed.stdout)
        [row] = json.loads(self.cli("submissions", "--json").stdout)
        self.assertEqual((row["run_id"], row["created_at"], row["state"]), ("abc", "yesterday", "pending"))
        self.assertIn("column value is not valid JSON", row["unreadable"])


class PostgresSubmissionProcessTest(PostgresServerCase, SubmissionProcessContract, TempDirTestCase):
    def sql(self, statement: str, *params: Any) -> None:
        from rowfleet.store.postgres import driver

        with driver().connect(self.db) as conn:
            conn.execute(statement.replace("?", "%s"), params)

    def hostile_rows(self, run_id: int) -> list:
        return [(run_id, "approve", "{oops"), (run_id, "approve", "NaN"), (2 ** 62, "approve", "true")]


if __name__ == "__main__":
    unittest.main()
