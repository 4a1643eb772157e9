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

from rowfleet.claim import Claim
from rowfleet.job import FAILED, JobSpec, Outcome
from rowfleet.sql import queries
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
            jobs = [(job, store.reads.events(job.id)) for job in store.reads.list_jobs("", limit=10_000)]
            runs = [store.get_run(run.id, "") for run in store.reads.list_runs("", limit=10_000)]
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

    def test_output_cut_short_by_its_reader_ends_quietly(self):
        for _ in range(3):
            self.cli("enqueue", "mod:fn", "--args", json.dumps({"pad": "x" * 30_000}))
        reader_gone = subprocess.Popen([sys.executable, "-m", "rowfleet", "--db", self.db, "jobs", "--json"],
                                       cwd=self.dir, env=child_env(), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE)
        reader_gone.stdout.read(10)  # the first bytes, as `| head -c 10` would, then leave
        reader_gone.stdout.close()
        stderr = reader_gone.communicate(timeout=60)[1].decode()
        self.assertEqual((reader_gone.returncode, stderr), (141, ""))

    def test_status_shows_what_a_busy_workers_job_last_reported(self):
        store = self.open_store(migrate=False)
        job_id = int(self.cli("enqueue", "mod:fn").stdout)
        store.worker_beat("box:7:0", "", "box", "default", 7, None)
        job = store.claim(Claim("", "default", "box:7", 600.0))
        store.worker_beat("box:7:0", "", "box", "default", 7, job_id)
        store.progress(job, 0.5, "half way")
        [worker] = self.cli_json("status")["workers"]
        self.assertEqual((worker["current_job"], worker["progress"]["fraction"], worker["progress"]["message"]),
                         (job_id, 0.5, "half way"))
        self.assertIn("50% half way", self.cli("status").stdout)

    def test_status_shows_the_project_named_and_every_project_otherwise(self):
        store = self.open_store(migrate=False)
        for project in ("a", "b", ""):
            self.cli("--project", project, "enqueue", "mod:fn", "--queue", f"q{project}")
            store.worker_beat(f"box:{project}:0", project, "box", f"q{project}", 7, None)
        for args, env, heading, shown in (
                ((), None, "every project (--project NAME shows one)", ["''", "a", "b"]),
                (("--project", "a"), None, "project 'a'", ["a"]),
                (("--project", ""), None, "project '' (the default)", ["''"]),
                ((), child_env(ROWFLEET_PROJECT="b"), "project 'b'", ["b"])):
            with self.subTest(args=args, env=env is not None):
                lines = self.cli(*args, "status", env=env).stdout.splitlines()
                self.assertEqual(lines[0], heading)
                counts = lines[lines.index("project  queue  state   jobs") + 1:]
                self.assertEqual([line.split()[0] for line in counts[:counts.index("")]], shown)
                workers = lines[[i for i, line in enumerate(lines) if line.startswith("project  host")][0]:]
                self.assertEqual(workers[0].split()[-1], "actual", "as `rowfleet workers` names the column")
                self.assertEqual([line.split()[0] for line in workers[1:]], shown)
                as_json = json.loads(self.cli(*args, "status", "--json", env=env).stdout)
                self.assertEqual(sorted({c["project"] for c in as_json["counts"]} | {w["project"] for w in
                                                                                     as_json["workers"]}),
                                 sorted(name.strip("'") for name in shown))
                self.assertEqual(as_json["project"], None if heading.startswith("every") else shown[0].strip("'"))

    def test_job_lines_up_its_longest_label_and_event_kind(self):
        store = self.open_store(migrate=False)
        job_id = store.enqueue(JobSpec(task="mod:fn", model="llm")).id
        job = store.claim(Claim("", "default", "box:7", 600.0))
        store.watchdog_trip(job, {"why": "hung"}, Outcome(FAILED, error="hung"), spent=1, refund=0)
        lines = self.cli("job", str(job_id)).stdout.splitlines()
        events = lines.index(next(line for line in lines if line.strip() == "events:"))
        fields = lines[:events + 1]
        self.assertTrue(any(line.lstrip().startswith("watchdog_retries: 1") for line in fields), fields)
        self.assertTrue(any(line.lstrip().startswith("required_model: llm") for line in fields), fields)
        self.assertEqual({line.index(":") for line in fields}, {len("watchdog_retries")}, "one label column")
        kinds = [line.split()[1] for line in lines[events + 1:]]
        self.assertIn("watchdog_trip", kinds)
        details = {line.index("{") for line in lines[events + 1:]}
        self.assertEqual(len(details), 1, "every event's detail starts in one column:\n" + "\n".join(lines))

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


if __name__ == "__main__":
    unittest.main()
