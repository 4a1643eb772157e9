"""``python make.py chaos``: the checker catches each planted fault, and a short storm passes.

The checker (tools/chaos/check.py) is pure, so most of this is table-driven over a small
hand-made storm's rows and records, each test planting one fault. ``StormTests`` (slow)
runs a short real storm against the built archive and then plants the same faults in
copies of the database and records it left, judged again through ``--recheck``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import unittest

from support import ROOT, child_env

sys.path.insert(0, os.path.join(ROOT, "tools"))

from chaos import check  # noqa: E402 - after the path it needs
from chaos.check import Action, Evidence, Record  # noqa: E402

CHAOS = os.path.join(ROOT, "tools", "chaos.py")
STORM_TIMEOUT = 420  # build (if stale) + seed + a 12 s storm + settling, on a loaded 2-core machine


def completed(job_id: int, token: int, **node: object) -> dict:
    return {"id": job_id, "state": "completed", "lease_token": token, "result": json.dumps({"token": token}),
            "run_id": None, "node_id": None, "node_item": None, "node_generation": None, **node}


def ran(job: int, token: int, pid: int, start: float, end: float | None) -> list[Record]:
    records = [Record(job, token, pid, "start", start)]
    return records + ([Record(job, token, pid, "end", end)] if end is not None else [])


def clean_storm() -> Evidence:
    """A storm that went well: job 2's first holder (pid 10) was killed and the job re-ran on
    pid 11; job 3's holder (pid 12) froze, pid 11 re-ran it, pid 12 woke and finished late
    (refused: the row carries token 2); run 7 ran its three nodes once each."""
    node = {"run_id": 7, "node_generation": 0}
    return Evidence(
        enqueued=[1, 2, 3], run_ids=[7],
        jobs=[completed(1, 1), completed(2, 2), completed(3, 2),
              completed(4, 1, node_id="split", **node), completed(5, 1, node_id="piece", node_item=0, **node),
              completed(6, 1, node_id="join", **node)],
        completions=[], runs=[{"id": 7, "state": "completed"}],
        records=[*ran(1, 1, 10, 1.0, 1.1), *ran(2, 1, 10, 2.0, None), *ran(2, 2, 11, 2.6, 2.7),
                 *ran(3, 1, 12, 3.0, 9.0), *ran(3, 2, 11, 6.0, 6.1), *ran(4, 1, 11, 10.0, 10.1),
                 *ran(5, 1, 11, 10.2, 10.3), *ran(6, 1, 11, 10.4, 10.5)],
        actions=[Action("kill", 2.5, pid=10), Action("freeze", 3.5, pid=12, until=8.5),
                 Action("orchestrator", 4.0, pid=20)])


def job(evidence: Evidence, job_id: int) -> dict:
    return next(row for row in evidence.jobs if row["id"] == job_id)


def delete_completed_row(evidence: Evidence) -> None:
    evidence.jobs.remove(job(evidence, 1))


def mark_queued(evidence: Evidence) -> None:
    job(evidence, 2)["state"] = "queued"


def duplicate_completion(evidence: Evidence) -> None:
    evidence.completions.append({"job_id": 1})


def result_of_another_token(evidence: Evidence) -> None:
    job(evidence, 2)["result"] = json.dumps({"token": 1})


def node_enqueued_twice(evidence: Evidence) -> None:
    evidence.jobs.append({**job(evidence, 5), "id": 99})


def overlap_without_freeze(evidence: Evidence) -> None:
    evidence.records += ran(1, 2, 13, 1.05, 1.2)


def stale_finish_accepted(evidence: Evidence) -> None:
    row = job(evidence, 3)
    row["lease_token"], row["result"] = 1, json.dumps({"token": 1})


def run_unfinished(evidence: Evidence) -> None:
    evidence.runs[0]["state"] = "running"


PLANTED = (  # plant -> the row that must FAIL, and its value
    (delete_completed_row, "jobs lost (not completed)", "1"),
    (mark_queued, "jobs lost (not completed)", "1"),
    (duplicate_completion, "jobs completed twice", "1"),
    (result_of_another_token, "results by a token that did not complete", "1"),
    (node_enqueued_twice, "workflow nodes enqueued twice", "1"),
    (overlap_without_freeze, "overlaps not after a freeze", "1"),
    (stale_finish_accepted, "stale finishes refused (re-run while frozen)", "0/1"),
    (run_unfinished, "runs not completed", "1"),
)


class CheckerTests(unittest.TestCase):
    def test_a_clean_storm_passes_with_its_overlap_explained_by_the_freeze(self):
        report = check.check(clean_storm())
        self.assertFalse(report.failed, check.render(report))
        self.assertEqual(report.row("overlapping executions of one job").value, "1")
        self.assertEqual(report.row("overlaps not after a freeze").verdict, check.OK)
        self.assertEqual(report.row("stale finishes refused (re-run while frozen)").value, "1/1")
        self.assertEqual(report.row("kill to re-run p50 / max").value, "0.10s / 0.10s")
        self.assertTrue(check.render(report).endswith("chaos: PASS (no job lost or completed twice)"))

    def test_each_planted_fault_fails_its_own_row_and_no_other(self):
        for plant, failing, value in PLANTED:
            with self.subTest(plant.__name__):
                evidence = copy.deepcopy(clean_storm())
                plant(evidence)
                report = check.check(evidence)
                self.assertTrue(report.failed)
                self.assertEqual((report.row(failing).value, report.row(failing).verdict), (value, check.FAIL))
                others = [row.check for row in report.rows if row.verdict == check.FAIL and row.check != failing]
                self.assertEqual(others, [], check.render(report))
                self.assertRegex(check.render(report), rf"(?m)^{re.escape(failing)}\s+{re.escape(value)}\s+FAIL")

    def test_a_kill_without_a_later_start_gives_no_latency(self):
        evidence = clean_storm()
        evidence.actions = [a for a in evidence.actions if a.kind != "kill"]
        self.assertEqual(check.check(evidence).row("kill to re-run p50 / max").value, "n/a")

    def test_an_execution_cut_by_a_kill_lasts_until_the_kill(self):
        runs = check.executions(ran(2, 1, 10, 2.0, None), [Action("kill", 2.5, pid=10)])
        self.assertEqual([(r.start, r.end, r.ended) for r in runs], [(2.0, 2.5, False)])

    def test_a_torn_last_record_is_skipped_and_a_torn_middle_one_refused(self):
        good = '{"job": 1, "token": 1, "pid": 5, "event": "start", "at": 1.0}'
        self.assertEqual(check.parse_records(f"{good}\n{good[:20]}"), [Record(1, 1, 5, "start", 1.0)])
        with self.assertRaisesRegex(ValueError, "line 1 is damaged"):
            check.parse_records(f"{good[:20]}\n{good}\n")


def chaos(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, CHAOS, *args], cwd=ROOT, env=child_env(), capture_output=True,
                          text=True, timeout=timeout)


class CommandLineTests(unittest.TestCase):
    SLOW = True  # a process per case: the whole suite runs them
    def test_bad_input_is_one_line_and_exit_2(self):
        cases = (
            (["--jobs", "0"], "--jobs must be at least 1"),
            (["--seconds", "-1"], "--seconds must be more than 0"),
            (["--jobs", "many"], "invalid int value"),
            (["--db", "jobs.db"], "--db must be a postgresql:// URL"),
            (["--pg-restart-cmd", "true"], "--pg-restart-cmd needs --db"),
            (["--recheck", ROOT], "no seed.json there"),
            (["--bogus"], "unrecognized arguments"),
        )
        for argv, message in cases:
            with self.subTest(argv=argv):
                result = chaos(*argv)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertIn(message, result.stderr)
                self.assertNotIn("Traceback", result.stderr)


class StormTests(unittest.TestCase):
    """One short real storm on SQLite, then faults planted in copies of what it left."""

    SLOW = True

    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = tempfile.mkdtemp(prefix="rowfleet-test-chaos-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, ignore_errors=True)
        cls.folder = os.path.join(cls.dir, "storm")
        cls.result = chaos("--jobs", "300", "--runs", "5", "--seconds", "12", "--procs", "3", "--seed", "7",
                           "--settle", "120", "--folder", cls.folder, timeout=STORM_TIMEOUT)

    def value(self, output: str, row: str) -> str:
        found = re.search(rf"(?m)^{re.escape(row)}  +(\S+(?: / \S+)?)", output)
        self.assertIsNotNone(found, f"no row {row!r} in:\n{output}")
        return found.group(1)

    def test_the_storm_passes_with_a_sane_table(self):
        output = self.result.stdout
        self.assertEqual(self.result.returncode, 0, output + self.result.stderr)
        self.assertIn("chaos: PASS", output)
        for row in ("jobs lost (not completed)", "jobs completed twice", "workflow nodes enqueued twice",
                    "results by a token that did not complete", "runs not completed", "overlaps not after a freeze"):
            self.assertEqual(self.value(output, row), "0", row)
        self.assertEqual(self.value(output, "jobs enqueued"), "300")
        self.assertEqual(self.value(output, "workflow runs started"), "5")
        self.assertGreaterEqual(int(self.value(output, "handler executions")), 300 + 5 * 6)
        self.assertGreaterEqual(int(self.value(output, "worker children killed (SIGKILL)")), 5)
        self.assertGreaterEqual(int(self.value(output, "orchestrator kills (kill -9, restarted)")), 1)
        self.assertEqual(self.value(output, "worker freezes past the lease (SIGSTOP)"), "1")
        self.assertEqual(self.value(output, "SIGTERM shutdown"), "clean")
        self.assertRegex(self.value(output, "kill to re-run p50 / max"), r"^\d+\.\d\ds / \d+\.\d\ds$")

    def planted_copy(self, name: str) -> str:
        target = os.path.join(self.dir, name)
        shutil.copytree(self.folder, target)
        return target

    def sql(self, folder: str, statement: str, params: tuple = ()) -> list:
        conn = sqlite3.connect(os.path.join(folder, "jobs.db"), isolation_level=None)
        try:
            return conn.execute(statement, params).fetchall()
        finally:
            conn.close()

    def standalone_job(self, folder: str) -> int:
        return self.sql(folder, "SELECT min(id) FROM jobs WHERE run_id IS NULL AND state = 'completed'")[0][0]

    def plant_in_database(self, folder: str, fault: str) -> None:
        job_id = self.standalone_job(folder)
        statements = {
            "deleted": ["DELETE FROM jobs WHERE id = ?"],
            "queued": ["UPDATE jobs SET state = 'queued' WHERE id = ?"],
            "completed twice": ["INSERT INTO job_events (job_id, at, kind, detail) VALUES (?, 1.0, 'completed', '{}')"],
            "foreign token": ["UPDATE jobs SET result = json_object('token', lease_token + 7) WHERE id = ?"],
        }
        if fault == "node twice":
            node = self.sql(folder, "SELECT min(id) FROM jobs WHERE run_id IS NOT NULL")[0][0]
            self.sql(folder, "CREATE TABLE copied AS SELECT * FROM jobs WHERE id = ?", (node,))
            self.sql(folder, "UPDATE copied SET id = NULL")
            self.sql(folder, "INSERT INTO jobs SELECT * FROM copied")
            return
        for statement in statements[fault]:
            self.sql(folder, statement, (job_id,))

    def plant_overlap(self, folder: str) -> None:
        """A second execution inside one whose holder was never frozen, by a made-up pid."""
        storm = [json.loads(line) for line in open(os.path.join(folder, "storm.jsonl"))]
        frozen = {a["pid"] for a in storm if a["kind"] == "freeze"}
        records = [r for name in os.listdir(os.path.join(folder, "records"))
                   for r in check.parse_records(open(os.path.join(folder, "records", name)).read())]
        ends = {(r.job, r.token, r.pid): r.at for r in records if r.event == "end"}
        host = next(r for r in records if r.event == "start" and r.pid not in frozen and (r.job, r.token, r.pid) in ends
                    and ends[(r.job, r.token, r.pid)] - r.at > 0.002)
        middle = (host.at + ends[(host.job, host.token, host.pid)]) / 2
        lines = [{"job": host.job, "token": host.token + 100, "pid": 4_000_000, "event": e, "at": middle + d}
                 for e, d in (("start", 0.0), ("end", 0.0005))]
        with open(os.path.join(folder, "records", "4000000.jsonl"), "w") as handle:
            handle.write("".join(json.dumps(line) + "\n" for line in lines))

    def test_faults_planted_in_the_storms_leftovers_are_each_caught(self):
        self.assertEqual(self.result.returncode, 0, self.result.stdout + self.result.stderr)
        cases = (("deleted", "jobs lost (not completed)"), ("queued", "jobs lost (not completed)"),
                 ("completed twice", "jobs completed twice"),
                 ("foreign token", "results by a token that did not complete"),
                 ("node twice", "workflow nodes enqueued twice"), ("overlap", "overlaps not after a freeze"))
        for fault, row in cases:
            with self.subTest(fault):
                folder = self.planted_copy(fault.replace(" ", "-"))
                if fault == "overlap":
                    self.plant_overlap(folder)
                else:
                    self.plant_in_database(folder, fault)
                judged = chaos("--recheck", folder)
                self.assertEqual(judged.returncode, 1, judged.stdout + judged.stderr)
                self.assertEqual(self.value(judged.stdout, row), "1", judged.stdout)
                self.assertRegex(judged.stdout, rf"(?m)^{re.escape(row)}\s+1\s+FAIL")
                self.assertIn("chaos: FAIL", judged.stdout)

    def test_the_unplanted_leftovers_judge_clean_again(self):
        judged = chaos("--recheck", self.planted_copy("untouched"))
        self.assertEqual(judged.returncode, 0, judged.stdout + judged.stderr)


if __name__ == "__main__":
    unittest.main()
