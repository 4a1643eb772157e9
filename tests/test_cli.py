"""The command line as a user meets it: real subprocesses, real files.

Bad input must give one clear line on stderr, a non-zero exit, no traceback, and leave
stored state exactly as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import unittest

from rowfleet import queries
from support import TempDirTestCase, child_env


def digest(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


class CliTestCase(TempDirTestCase):
    """A fresh database, initialised, and a check that a refused command changed nothing."""

    def setUp(self):
        super().setUp()
        self.cli("init")

    def assert_refused(self, *args: str, code: int = 2, says: str = "", env=None):
        """The command fails with one line on stderr and changes nothing in the database."""
        before = self.stored()
        result = self.cli(*args, check=False, env=env)
        self.assertEqual(result.returncode, code, result.stderr)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, f"expected one line on stderr, got:\n{result.stderr}")
        self.assertNotIn("Traceback", result.stderr)
        self.assertIn(says, lines[0])
        self.assertEqual(self.stored(), before)
        return lines[0]

    def stored(self):
        """Every job (with its events) and every run (with its nodes), read in this process."""
        from rowfleet.store import open_store

        with open_store(self.config()) as store:
            jobs = [(job, store.events(job.id)) for job in store.list_jobs("", limit=10_000)]
            runs = [store.get_run(run.id, "") for run in store.list_runs("", limit=10_000)]
        return jobs, runs


class CommandLineTest(CliTestCase):

    def test_version_and_help(self):
        self.assertRegex(self.cli("--version").stdout, r"^rowfleet \d+\.\d+\.\d+")
        self.assertIn("enqueue", self.cli("--help").stdout)
        latest = str(queries.latest_version("sqlite"))
        self.assertEqual(self.cli("init").stdout.strip(), latest, "init is idempotent and prints the version")

    def test_enqueue_then_job_json(self):
        job_id = self.cli("enqueue", "mod:fn", "--args", '{"x": 1}', "--queue", "q", "--priority", "-2",
                          "--max-attempts", "3").stdout.strip()
        job = self.cli_json("job", job_id)
        for key in ("id", "task", "queue", "project", "state", "attempts", "args", "result", "error",
                    "priority", "max_attempts", "claimed_by", "created_at", "events"):
            self.assertIn(key, job)
        self.assertEqual((job["id"], job["task"], job["queue"], job["state"], job["priority"], job["args"]),
                         (int(job_id), "mod:fn", "q", "queued", -2, {"x": 1}))

    def test_idempotent_enqueue_via_cli(self):
        first = self.cli("enqueue", "mod:fn", "--key", "k1").stdout
        second = self.cli("enqueue", "mod:fn", "--key", "k1", "--args", "[1]").stdout
        self.assertEqual(first, second)
        self.assertEqual(len(self.cli_json("jobs")), 1)

    def test_projects_are_separate(self):
        job_id = self.cli("--project", "alpha", "enqueue", "mod:fn").stdout.strip()
        self.assertEqual(len(self.cli_json("jobs", "--project", "alpha")), 1)
        self.assertEqual(self.cli_json("jobs"), [])
        self.assert_refused("job", job_id, code=1, says="no job")

    def test_bad_json_args(self):
        self.assert_refused("enqueue", "mod:fn", "--args", "{not json", says="--args is not valid JSON")

    def test_bad_flags(self):
        self.assert_refused("enqueue", "mod:fn", "--priority", "high", says="invalid int value")
        self.assert_refused("enqueue", "mod:fn", "--delay", "-1", says="non-negative")
        self.assert_refused("enqueue", "mod:fn", "--max-attempts", "0", says="at least 1")
        self.assert_refused("enqueue", "two words", says="task name")
        self.assert_refused("jobs", "--state", "bogus", says="invalid choice")
        self.assert_refused("job", "seven", says="invalid int value")
        self.assert_refused("frobnicate", says="invalid choice")
        self.assert_refused("worker", "--lease", "0", says="positive")
        self.assert_refused("worker", "--lease", "5", "--renew", "10", says="renew")
        self.assert_refused("worker", "--app", "no_such_app_module", says="cannot import app module")

    def test_bad_environment(self):
        self.assert_refused("jobs", env=child_env(ROWFLEET_LEASE="soon"), says="ROWFLEET_LEASE must be a number")
        self.assert_refused("jobs", env=child_env(ROWFLEET_SYNCHRONOUS="OFF"), says="synchronous")

    def test_unknown_job_and_refused_transitions(self):
        self.assert_refused("job", "999", code=1, says="no job 999")
        self.assert_refused("cancel", "999", code=1, says="no job 999")
        job_id = self.cli("enqueue", "mod:fn").stdout.strip()
        self.assert_refused("retry", job_id, code=1, says="only failed or cancelled")
        self.assertEqual(self.cli("cancel", job_id).stdout.strip(), f"job {job_id} cancelled")
        self.assertEqual(self.cli_json("retry", job_id)["state"], "queued")

    def test_a_file_that_is_not_sqlite_is_refused_untouched(self):
        bogus = os.path.join(self.dir, "notes.txt")
        with open(bogus, "w") as handle:
            handle.write("these are my notes, not a database\n" * 100)
        before = digest(bogus)
        for args in (["init"], ["enqueue", "mod:fn"], ["status"], ["jobs"], ["worker", "--burst"]):
            result = self._run_on(bogus, *args)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn("not a usable SQLite database", result.stderr)
            self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(digest(bogus), before)
        self.assertEqual([name for name in os.listdir(self.dir) if name.startswith("notes")], ["notes.txt"])

    def test_a_missing_database_is_not_created_by_readers(self):
        missing = os.path.join(self.dir, "typo.db")
        for args in (["status"], ["jobs"], ["enqueue", "mod:fn"], ["job", "1"]):
            result = self._run_on(missing, *args)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn("no database at", result.stderr)
        self.assertFalse(os.path.exists(missing))

    def test_sqlite_url_and_environment_select_the_database(self):
        job_id = self.cli("enqueue", "mod:fn").stdout.strip()
        result = self._run_on(f"sqlite:///{self.db}", "job", job_id, "--json")
        self.assertEqual(json.loads(result.stdout)["id"], int(job_id))

    def test_status_json(self):
        self.cli("enqueue", "mod:fn", "--queue", "a")
        status = self.cli_json("status")
        self.assertEqual(status["counts"], [{"project": "", "queue": "a", "state": "queued", "n": 1}])
        self.assertEqual(status["workers"], [])

    def test_status_shows_what_a_busy_workers_job_last_reported(self):
        store = self.open_store(migrate=False)
        job_id = int(self.cli("enqueue", "mod:fn").stdout)
        store.beat("box:7:0", "", "box", "default", 7, None)
        job = store.claim("", "default", "box:7", 600.0)
        store.beat("box:7:0", "", "box", "default", 7, job_id)
        store.progress(job, 0.5, "half way")
        [worker] = self.cli_json("status")["workers"]
        self.assertEqual((worker["current_job"], worker["progress"]["fraction"], worker["progress"]["message"]),
                         (job_id, 0.5, "half way"))
        self.assertIn("50% half way", self.cli("status").stdout)

    def test_sqlite_use_never_imports_psycopg(self):
        code = ("import sys, rowfleet; rowfleet.configure(db=sys.argv[1]); rowfleet.enqueue('m:f');"
                "rowfleet.get_job(1); print('psycopg' in sys.modules)")
        result = subprocess.run([sys.executable, "-c", code, self.db], cwd=self.dir, env=child_env(),
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.stdout.strip(), "False", result.stderr)

    def test_postgres_without_psycopg_is_one_clear_line(self):
        code = ("import sys; sys.modules['psycopg'] = None; from rowfleet.cli import main;"
                "sys.exit(main(['--db', 'postgresql://nobody@127.0.0.1:1/none_test', 'status']))")
        result = subprocess.run([sys.executable, "-c", code], cwd=self.dir, env=child_env(),
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stderr.strip(),
                         "rowfleet: error: postgres support needs psycopg: pip install 'rowfleet[postgres]'")

    def _run_on(self, db: str, *args: str):
        return subprocess.run([sys.executable, "-m", "rowfleet", "--db", db, *args], cwd=self.dir,
                              env=child_env(), capture_output=True, text=True, timeout=60)



WORKFLOW_APP = """\
import rowfleet

@rowfleet.task(name="flow.double")
def double(n):
    return 2 * n

rowfleet.workflow("doubler", [
    {"id": "one", "task": "flow.double", "args": {"n": {"$from": "$args.n"}}},
    {"id": "two", "task": "flow.double", "args": {"n": {"$from": "one"}}, "depends_on": ["one"]},
    {"id": "check", "kind": "input", "prompt": "Keep it?", "depends_on": ["two"]},
])
"""


class WorkflowCommandsTest(CliTestCase):
    """The workflow commands as a user types them; bad input changes nothing."""

    def setUp(self):
        super().setUp()
        self.write_module("flowapp", WORKFLOW_APP)

    def write_flow(self, definition, name="flow.json"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as handle:
            handle.write(definition if isinstance(definition, str) else json.dumps(definition))
        return path

    def settle(self):
        for _ in range(3):
            self.cli("worker", "--app", "flowapp", "--burst")
            self.cli("orchestrator", "--once")

    def assert_no_runs(self):
        self.assertEqual(self.cli_json("runs"), [])

    def test_a_registered_workflow_runs_to_its_input_node_and_is_answered(self):
        run_id = self.cli("run", "doubler", "--app", "flowapp", "--args", '{"n": 5}').stdout.strip()
        self.settle()
        run = self.cli_json("runs", run_id)
        self.assertEqual(set(run), {"id", "project", "name", "state", "args", "error", "created_at",
                                    "updated_at", "finished_at", "nodes"})
        self.assertEqual(run["state"], "awaiting_input")
        for node in run["nodes"]:
            self.assertLessEqual({"id", "state", "attempts", "result", "error"}, set(node))
        self.assertEqual([(n["id"], n["state"], n["result"]) for n in run["nodes"]],
                         [("one", "completed", 10), ("two", "completed", 20), ("check", "awaiting_input", None)])
        self.assertIn("awaiting_input", self.cli("runs").stdout)
        self.assertEqual(self.cli_json("runs", "--state", "awaiting_input")[0]["id"], int(run_id))
        self.cli("submit", run_id, "check", "--value", '{"keep": true}')
        self.assertEqual(self.cli_json("runs", run_id)["state"], "completed")
        self.assert_refused("submit", run_id, "check", "--value", "1", code=1, says="already submitted")

    def test_invalid_definitions_are_refused_naming_the_node(self):
        cases = [
            ({"name": "f", "nodes": [{"id": "a", "task": "flow.double", "depends_on": ["b"]}]}, "node 'a'"),
            ({"name": "f", "nodes": [{"id": "a", "task": "flow.double", "depends_on": ["b"]},
                                     {"id": "b", "task": "flow.double", "depends_on": ["a"]}]}, "cycle"),
            ({"name": "f", "nodes": [{"id": "a", "task": "flow.double"}, {"id": "a", "task": "flow.double"}]},
             "used twice"),
            ({"name": "f", "nodes": [{"id": "a", "task": "no_such_module:fn"}]}, "node 'a': unknown task"),
            ({"name": "f", "nodes": [{"id": "a", "task": "flow.double", "args": {"$from": "b"}},
                                     {"id": "b", "task": "flow.double"}]}, "not upstream"),
            ("{not json", "not valid JSON"),
            ([1, 2], "must be a JSON object"),
        ]
        for definition, says in cases:
            with self.subTest(says=says):
                self.assert_refused("run", self.write_flow(definition), "--app", "flowapp", says=says)
        self.assert_refused("run", "missing.json", says="neither a workflow file")
        self.assert_refused("run", "doubler", "--app", "flowapp", "--args", "{bad", says="--args")
        self.assert_refused("run", "doubler", "--app", "flowapp", says="cannot start: node 'one' failed: "
                            'unresolvable reference "$args.n": cannot take "n" of null')
        self.assert_no_runs()

    def test_refused_run_commands(self):
        run_id = self.cli("run", "doubler", "--app", "flowapp", "--args", '{"n": 1}').stdout.strip()
        self.assert_refused("runs", "999", code=1, says="no run 999")
        self.assert_refused("restart", run_id, code=1, says="only failed or cancelled")
        self.assert_refused("submit", run_id, "check", "--value", "true", code=1, says="not awaiting input")
        self.assert_refused("submit", run_id, "one", "--value", "true", code=1, says="task node")
        self.assert_refused("submit", run_id, "check", "--value", "{bad", says="--value")
        self.assert_refused("submit", run_id, "nope", "--value", "1", code=1, says="no node 'nope'")
        self.assert_refused("runs", "--state", "weird", says="invalid choice")
        self.cli("cancel-run", run_id)
        self.assertEqual(self.cli_json("runs", run_id)["state"], "cancelled")
        self.assertEqual(self.cli_json("jobs", "--state", "queued"), [])

    def test_a_task_check_can_be_skipped_for_a_host_without_the_tasks(self):
        path = self.write_flow({"name": "f", "nodes": [{"id": "a", "task": "gpu_only:fn"}]})
        self.assert_refused("run", path, says="node 'a': unknown task")
        run_id = self.cli("run", path, "--no-task-check").stdout.strip()
        self.assertEqual(self.cli_json("runs", run_id)["nodes"][0]["state"], "queued")

if __name__ == "__main__":
    unittest.main()
