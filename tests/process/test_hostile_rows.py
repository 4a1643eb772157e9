"""Rows that rowfleet cannot decode, written by someone else's plain SQL, on both databases.

Owns the promise that such a row fails its own job, never a process: a real worker fails
the job at once (not retried) with an error naming the column and goes on to the next job
in the same queue, and every listing (``jobs``, ``job ID``, ``status``, each with and
without ``--json``), ``cancel`` and ``retry`` still work and show the problem. A workflow
node's job that cannot be decoded fails its run through the outbox, naming the column.
Counts of attempts no claim of rowfleet's leaves (none allowed, all spent) fail the same
way once claimed; a queued row no claim's due filter can match (a run_at that is no
number) is failed, unclaimed, by the orchestrator's sweep, which also heals a running row
whose lease no sweep could see lapse (none, or no time) or that names no holder:
re-queued, or failed on its last attempt, saying why; ``cancel`` cancels such a row at
once. A ``model_stats`` row whose figures cannot be decoded is shown as unreadable, for
that model alone, by ``models`` and the panel's /models page.

The rows are INSERTed through the driver directly, as any program sharing the database
may. ``HostileRowsContract`` runs on SQLite and PostgreSQL; a value only SQLite can hold
(text in a time column: PostgreSQL's typed columns refuse it) is tested on SQLite only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import time
import unittest
from typing import Any

import rowfleet
from rowfleet import dag, exitcodes
from rowfleet.claim import Claim
from rowfleet.job import CANCELLED, COMPLETED, FAILED, QUEUED, RUNNING, JobSpec
from rowfleet.worker.loop import Worker
from pg_harness import PostgresServerCase
from support import TempDirTestCase

QUEUE = "hostile"
APP = "hostileapp"
APP_SOURCE = '''\
import rowfleet


@rowfleet.task(name="hostile.ok")
def ok(*args, **kwargs):
    return "ran"
'''


@rowfleet.task(name="hostile.ok")
def ok(*args, **kwargs):
    return "ran"


@dataclasses.dataclass(frozen=True)
class Case:
    """A hostile row: the values of its ``jobs`` columns (the rest are a sound job's), the
    detail of an event of it, and what must become of it."""

    columns: dict[str, Any]
    names: str | None  # the column its error or listing must name; None: the row is sound
    becomes: str  # its state once a worker has drained the queue
    detail: str | None = None  # a job_events.detail to append to it
    # No claim's due filter matches it (its run_at is no number): the orchestrator's sweep
    # finds it, and fails it unclaimed, before the worker drains the queue.
    swept: bool = False


CASES = {
    "args_not_json": Case({"args": "{not json"}, "args", FAILED),
    "result_not_json": Case({"result": "[1,"}, "result", FAILED),
    "event_detail_not_json": Case({}, "detail", COMPLETED, detail="not json"),
    "event_detail_not_an_object": Case({}, "detail", COMPLETED, detail="[1, 2]"),
    # A number, so sound, but no date: never due (so never claimed), listed as stored.
    "run_at_out_of_range": Case({"run_at": 1e300}, None, QUEUED),
    "run_at_infinite": Case({"run_at": float("inf")}, None, QUEUED),
    # Counts no attempt of rowfleet's leaves: claimed, and failed unrun, naming the column.
    "max_attempts_zero": Case({"max_attempts": 0}, "max_attempts", FAILED),
    "max_attempts_negative": Case({"max_attempts": -3}, "max_attempts", FAILED),
    "attempts_spent": Case({"attempts": 5, "max_attempts": 5}, "attempts", FAILED),
    "attempts_past_max": Case({"attempts": 9, "max_attempts": 5}, "attempts", FAILED),
    "attempts_negative": Case({"attempts": -4}, "attempts", FAILED),
    # A scheduled job's slot that is no moment is still a number: sound, run, shown as stored.
    "schedule_slot_infinite": Case({"schedule": "nightly", "schedule_slot": float("inf"), "fire_reason": "tick"},
                                   None, COMPLETED),
}
SQLITE_CASES = {  # PostgreSQL's double precision columns cannot hold text
    # Text (and bytes) sort after every number in SQLite: never due, so never claimed.
    "run_at_text": Case({"run_at": "tomorrow"}, "run_at", FAILED, swept=True),
    "run_at_text_run_next": Case({"run_at": "tomorrow", "run_next": 1, "priority": 7}, "run_at", FAILED, swept=True),
    "run_at_text_delayed": Case({"run_at": "tomorrow", "delayed": 1}, "run_at", FAILED, swept=True),
    "run_at_bytes": Case({"run_at": b"\x00\x01"}, "run_at", FAILED, swept=True),
    "created_at_text": Case({"created_at": "yesterday"}, "created_at", FAILED),
    "schedule_slot_text": Case({"schedule": "nightly", "schedule_slot": "noon", "fire_reason": "tick"},
                               "schedule_slot", FAILED),
    "fire_reason_bytes": Case({"schedule": "nightly", "schedule_slot": 60.0, "fire_reason": b"\xff\x00"},
                              "fire_reason", FAILED),
}
POSTGRES_CASES = {  # NaN sorts after every number in PostgreSQL (SQLite stores it as NULL)
    "run_at_nan": Case({"run_at": float("nan")}, "run_at", FAILED, swept=True),
    "run_at_nan_delayed": Case({"run_at": float("nan"), "delayed": 1}, "run_at", FAILED, swept=True),
    "schedule_slot_nan": Case({"schedule": "nightly", "schedule_slot": float("nan"), "fire_reason": "boot"},
                              "schedule_slot", FAILED),
}


@dataclasses.dataclass(frozen=True)
class RunningCase:
    """A running row whose lease no sweep could see lapse, or that names no holder: its
    columns (a held job's otherwise), what one sweep makes of it, and what its error must say."""

    columns: dict[str, Any]
    becomes: str  # after one sweep: queued again (to run), or failed
    says: str


RUNNING_CASES = {
    "no_lease": RunningCase({"lease_expires_at": None}, QUEUED, "no lease"),
    "no_lease_last_attempt": RunningCase({"lease_expires_at": None, "attempts": 5}, FAILED, "no lease"),
    "no_lease_past_max": RunningCase({"lease_expires_at": None, "attempts": 7}, FAILED, "no lease"),
    "no_holder": RunningCase({"claimed_by": None}, QUEUED, "names no worker"),
    "lease_infinite": RunningCase({"lease_expires_at": float("inf")}, QUEUED, "lease is no time"),
}
SQLITE_RUNNING_CASES = {
    "lease_text": RunningCase({"lease_expires_at": "soon"}, QUEUED, "lease is no time"),
    "lease_bytes": RunningCase({"lease_expires_at": b"\x01"}, QUEUED, "lease is no time"),
    "no_lease_counts_text": RunningCase({"lease_expires_at": None, "attempts": "one"}, FAILED, "column attempts"),
}
POSTGRES_RUNNING_CASES = {
    "lease_nan": RunningCase({"lease_expires_at": float("nan")}, QUEUED, "lease is no time"),
}


# model_stats rows: the values of their figures (a sound row's otherwise) and the column the
# listing must name as unreadable.
SQLITE_MODEL_STATS_CASES = {  # SQLite keeps text and bytes in any column
    "load_seconds_text": ({"load_seconds": "fast"}, "load_seconds"),
    "footprint_text": ({"footprint_mb": "big"}, "footprint_mb"),
    "counts_text": ({"loads": "many", "failed_loads": "some", "runs": "lots"}, "loads"),
    "times_text": ({"last_failed_at": "yesterday", "updated_at": "today"}, "updated_at"),
    "run_seconds_text": ({"run_seconds": "slow"}, "run_seconds"),
    "load_seconds_bytes": ({"load_seconds": b"\xff\x00"}, "load_seconds"),
    "footprint_real": ({"footprint_mb": 2.5}, "footprint_mb"),
}
POSTGRES_MODEL_STATS_CASES = {  # double precision holds NaN, which SQLite stores as NULL
    "load_seconds_nan": ({"load_seconds": float("nan")}, "load_seconds"),
    "run_seconds_nan": ({"run_seconds": float("nan")}, "run_seconds"),
    "times_nan": ({"last_failed_at": float("nan"), "updated_at": float("nan")}, "updated_at"),
}


class HostileRowsContract:
    """Subclasses provide ``make_database()`` (a path or URL for ``--db``, kept as
    ``self.db``), ``PARAM`` (the driver's placeholder) and ``execute(sql, params)`` on a
    connection of the application's own."""

    PARAM = "?"

    def setUp(self) -> None:
        super().setUp()
        self.db = self.make_database()
        self.store = self.open_store()
        self.write_module(APP, APP_SOURCE)

    # --- writing rows as another program would -----------------------------------------

    def insert_job(self, **columns: Any) -> int:
        now = time.time()
        row = {"queue": QUEUE, "task": "hostile.ok", "args": "null", "run_at": now - 60, "created_at": now - 60,
               "updated_at": now - 60, **columns}
        marks = ", ".join([self.PARAM] * len(row))  # the test's own column names, never input
        return self.execute(f"INSERT INTO jobs ({', '.join(row)}) VALUES ({marks}) RETURNING id",
                            tuple(row.values()))[0]

    def insert_event(self, job_id: int, detail: str) -> None:
        self.execute(f"INSERT INTO job_events (job_id, at, kind, detail) VALUES ({self.PARAM}, {self.PARAM}, "
                     f"'note', {self.PARAM}) RETURNING id", (job_id, time.time(), detail))

    def insert_model_stats(self, model: str, **columns: Any) -> None:
        row = {"project": "", "model": model, "load_seconds": 12.5, "footprint_mb": 900, "loads": 2,
               "failed_loads": 0, "updated_at": time.time(), "run_seconds": 3.0, "runs": 4, **columns}
        marks = ", ".join([self.PARAM] * len(row))  # the test's own column names, never input
        self.execute(f"INSERT INTO model_stats ({', '.join(row)}) VALUES ({marks}) RETURNING model",
                     tuple(row.values()))

    # --- what must hold ----------------------------------------------------------------

    def check(self, case: Case, *worker_flags: str) -> None:
        bad = self.insert_job(**case.columns)
        if case.detail is not None:
            self.insert_event(bad, case.detail)
        good = self.store.enqueue(JobSpec(task="hostile.ok", queue=QUEUE)).id  # behind the bad row
        if case.swept:
            self.run_cli("orchestrator", "--once")
        self.run_cli("worker", "--queue", QUEUE, "--app", APP, "--burst", *worker_flags)
        self.assertEqual(self.store.get_job(good, "").state, COMPLETED, "the queue must not be wedged")
        job = self.store.get_job(bad, "")
        self.assertEqual(job.state, case.becomes, job.error)
        if case.becomes == FAILED:
            planted = case.columns.get("attempts", 0)
            self.assertEqual(job.attempts, planted if case.swept else planted + 1,
                             "a row that cannot be decoded is not retried")
            self.assertIn(f"column {case.names}", job.error)
            kinds = [event.kind for event in self.store.reads.events(bad)]
            self.assertEqual(kinds[-1:] if case.swept else kinds[-2:], ["failed"] if case.swept else ["claimed", "failed"])
        self.check_listings(bad, case)
        self.check_changes(bad, case)

    def check_listings(self, job_id: int, case: Case) -> None:
        listed = self.run_cli("jobs").stdout
        self.assertRegex(listed, rf"(?m)^{job_id}\s")
        shown = self.run_cli("job", str(job_id)).stdout
        as_json = json.loads(self.run_cli("job", str(job_id), "--json").stdout)
        listed_json = {job["id"]: job for job in json.loads(self.run_cli("jobs", "--json").stdout)}
        self.assertEqual(listed_json[job_id]["state"], case.becomes)
        self.run_cli("status")
        self.run_cli("status", "--json")
        if case.names is not None:  # jobs --json lists no events
            listed_too = (json.dumps(listed_json[job_id]),) if case.detail is None else ()
            for text in (shown, json.dumps(as_json)) + listed_too:
                self.assertIn(f"column {case.names}", text)
        if as_json.get("unreadable"):
            self.assertIn("unreadable: column", shown)
            self.assertIn(f"! job {job_id} is unreadable: column", listed)
        if case.detail is not None:
            notes = [event["detail"] for event in as_json["events"] if event["kind"] == "note"]
            self.assertEqual(notes[0]["raw"], case.detail, "an event's detail is shown as stored")
        if case.columns.get("run_at") == 1e300:
            self.assertEqual(as_json["run_at"], "1e+300")

    def check_changes(self, job_id: int, case: Case) -> None:
        """An operator can still act on the row: cancel a queued one (how it is removed),
        retry a failed one, and is refused, in one line, what its state does not allow."""
        if case.becomes == FAILED:
            self.assert_refused("cancel", str(job_id))
            self.run_cli("retry", str(job_id))
        elif case.becomes == COMPLETED:
            self.assert_refused("cancel", str(job_id))
            return
        self.run_cli("cancel", str(job_id))
        self.assertEqual(self.store.get_job(job_id, "").state, CANCELLED)

    def run_cli(self, *args: str):
        result = self.cli(*args, check=False)
        self.assertNotIn("Traceback", result.stderr, f"rowfleet {' '.join(args)}")
        self.assertEqual(result.returncode, exitcodes.OK, f"rowfleet {' '.join(args)}:\n{result.stderr}")
        return result

    def assert_refused(self, *args: str) -> None:
        result = self.cli(*args, check=False)
        self.assertEqual(result.returncode, exitcodes.REFUSED, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)

    # --- the table, a test per row -------------------------------------------------------

    def test_args_not_json(self):
        self.check(CASES["args_not_json"])

    def test_args_not_json_under_a_supervisor(self):
        self.check(CASES["args_not_json"], "--procs", "1")

    def test_result_not_json(self):
        self.check(CASES["result_not_json"])

    def test_event_detail_not_json(self):
        self.check(CASES["event_detail_not_json"])

    def test_event_detail_not_an_object(self):
        self.check(CASES["event_detail_not_an_object"])

    def test_run_at_out_of_range(self):
        self.check(CASES["run_at_out_of_range"])

    def test_run_at_infinite(self):
        self.check(CASES["run_at_infinite"])

    def test_max_attempts_zero(self):
        self.check(CASES["max_attempts_zero"])

    def test_max_attempts_negative(self):
        self.check(CASES["max_attempts_negative"])

    def test_attempts_spent(self):
        self.check(CASES["attempts_spent"])

    def test_attempts_past_max(self):
        self.check(CASES["attempts_past_max"])

    def test_attempts_negative(self):
        self.check(CASES["attempts_negative"])

    def test_schedule_slot_infinite(self):
        self.check(CASES["schedule_slot_infinite"])

    def insert_running(self, **columns: Any) -> int:
        now = time.time()
        return self.insert_job(**{"state": RUNNING, "attempts": 1, "lease_token": 1, "claimed_by": "ghost:4242",
                                  "lease_expires_at": now + 600, "started_at": now - 30, **columns})

    def check_running(self, case: RunningCase) -> None:
        """One sweep heals the row: queued again (its claim's attempt spent), and then run,
        or failed; with an event and an error saying why, naming no holder it has not got."""
        bad = self.insert_running(**case.columns)
        good = self.store.enqueue(JobSpec(task="hostile.ok", queue=QUEUE)).id
        swept = json.loads(self.run_cli("orchestrator", "--once").stdout)
        self.assertEqual(swept["reclaimed" if case.becomes == QUEUED else "failed"], 1, swept)
        job = self.store.get_job(bad, "")
        self.assertEqual(job.state, case.becomes, job.error)
        self.assertIn(case.says, job.error)
        self.assertNotIn("None", job.error)
        kinds = [event.kind for event in self.store.reads.events(bad)]
        self.assertEqual(kinds[-1], "reclaimed" if case.becomes == QUEUED else "failed")
        again = json.loads(self.run_cli("orchestrator", "--once").stdout)
        self.assertEqual((again["reclaimed"], again["failed"]), (0, 0), "healed once, for good")
        self.run_cli("worker", "--queue", QUEUE, "--app", APP, "--burst")
        self.assertEqual(self.store.get_job(good, "").state, COMPLETED)
        if case.becomes == QUEUED:
            ran = self.store.get_job(bad, "")
            self.assertEqual((ran.state, ran.attempts), (COMPLETED, 2), ran.error)
        listed = {job["id"]: job for job in json.loads(self.run_cli("jobs", "--json").stdout)}
        self.assertIn(bad, listed)
        self.run_cli("job", str(bad))

    def check_cancel_running(self, case: RunningCase) -> None:
        """``cancel`` names no holder the row has not got: with none that could be told to
        stop it, the job is cancelled at once, and says so."""
        bad = self.insert_running(**case.columns)
        said = self.run_cli("cancel", str(bad))
        self.assertEqual(said.stdout, f"job {bad} cancelled\n")
        job = self.store.get_job(bad, "")
        self.assertEqual(job.state, CANCELLED)
        self.assertEqual([event.kind for event in self.store.reads.events(bad)][-1], "cancelled")
        swept = json.loads(self.run_cli("orchestrator", "--once").stdout)
        self.assertEqual((swept["reclaimed"], swept["failed"]), (0, 0))

    def test_running_rows_that_no_sweep_saw_lapse(self):
        for name, case in {**RUNNING_CASES, **self.RUNNING_CASES}.items():
            with self.subTest(case=name):
                self.check_running(case)

    def test_cancelling_a_running_row_that_names_no_live_holder(self):
        for name, case in {**RUNNING_CASES, **self.RUNNING_CASES}.items():
            with self.subTest(case=name):
                self.check_cancel_running(case)

    def test_a_running_row_with_a_live_lease_is_left_to_its_holder(self):
        held = self.insert_running()
        swept = json.loads(self.run_cli("orchestrator", "--once").stdout)
        self.assertEqual((swept["reclaimed"], swept["failed"]), (0, 0))
        self.assertEqual(self.store.get_job(held, "").state, RUNNING)
        said = self.run_cli("cancel", str(held)).stdout
        self.assertEqual(said, f"cancel requested for running job {held} (worker ghost:4242)\n")

    # --- model figures -----------------------------------------------------------------

    def check_model_stats(self, cases: dict[str, tuple[dict[str, Any], str]]) -> None:
        """Each bad row is shown as unreadable, naming its column, by ``models`` (with and
        without ``--json``), the panel's /models page and its JSON twin, and the store's own
        read (a GPU worker's); a sound row beside them is shown as it is."""
        self.insert_model_stats("sound")
        for name, (columns, _) in cases.items():
            self.insert_model_stats(name, **columns)
        listed = self.run_cli("models").stdout
        shown = {view["model"]: view for view in json.loads(self.run_cli("models", "--json").stdout)["models"]}
        self.assertEqual((shown["sound"]["load_seconds"], shown["sound"]["footprint_mb"], shown["sound"]["unreadable"]),
                         (12.5, 900, None))
        stats = {row["model"]: row for row in self.store.model_stats("")}
        self.assertIsNone(stats["sound"]["unreadable"])
        page, page_json = self.panel_get("/models"), json.loads(self.panel_get("/api/models"))
        [project] = [item for item in page_json["projects"] if item["project"] == ""]
        on_page = {view["model"]: view for view in project["models"]}
        for name, (columns, column) in cases.items():
            with self.subTest(case=name):
                self.assertRegex(listed, rf"(?m)^{name}\s")
                [said] = [line for line in listed.splitlines() if line.startswith(f"! model {name} is unreadable: ")]
                self.assertIn(f"column {column} ", said)
                for view in (shown[name], on_page[name]):
                    self.assertIn(f"column {column} ", view["unreadable"])
                self.assertIn(f"column {column} ", stats[name]["unreadable"])
                for figure in columns:  # unknown to every reader that computes with it
                    self.assertIsNone(stats[name][figure], figure)
                self.assertIn(f"column {column} ", page)

    def panel_get(self, path: str) -> str:
        import http.client

        from rowfleet.panel import server
        from support import serve_in_background

        if not hasattr(self, "panel"):
            self.panel = serve_in_background(self, server.make_server(self.config(), "127.0.0.1", 0))
        conn = http.client.HTTPConnection("127.0.0.1", self.panel.server_address[1], timeout=10)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read().decode()
        finally:
            conn.close()
        self.assertEqual(response.status, 200, body)
        self.assertNotIn("Traceback", body)
        return body

    # --- workflow nodes ----------------------------------------------------------------

    def start_run(self, nodes: list[dict[str, Any]]) -> int:
        flow = dag.parse_workflow({"name": "hostile", "nodes": nodes})
        return self.store.start_run(flow, None, "")

    def node_job(self, run_id: int, node_id: str):
        return next(job for job in self.store.reads.list_jobs("", limit=100)
                    if job.run_id == run_id and job.node_id == node_id)

    def test_a_node_job_whose_args_are_not_json_fails_its_run(self):
        run_id = self.start_run([{"id": "a", "task": "hostile.ok", "queue": QUEUE}])
        job = self.node_job(run_id, "a")
        self.execute(f"UPDATE jobs SET args = '{{oops' WHERE id = {self.PARAM} RETURNING id", (job.id,))
        Worker(self.config(), QUEUE, burst=True).run()
        self.assertEqual(self.store.drain(""), {"applied": 1, "failed": 0})
        run = self.store.get_run(run_id, "")
        self.assertEqual(run.state, dag.FAILED)
        self.assertIn("column args", run.node("a").error)

    def test_a_completed_node_whose_result_is_not_json_fails_its_run(self):
        run_id = self.start_run([{"id": "a", "task": "hostile.ok", "queue": QUEUE},
                                 {"id": "b", "task": "hostile.ok", "queue": QUEUE, "depends_on": ["a"],
                                  "args": [{"$from": "a"}]}])
        Worker(self.config(), QUEUE, burst=True).run()
        job = self.node_job(run_id, "a")
        self.assertEqual(job.state, COMPLETED)
        # Spoilt between its completion and the drain of its outbox event.
        self.execute(f"UPDATE jobs SET result = '{{oops' WHERE id = {self.PARAM} RETURNING id", (job.id,))
        self.assertEqual(self.store.drain(""), {"applied": 1, "failed": 0})
        run = self.store.get_run(run_id, "")
        self.assertEqual(run.state, dag.FAILED)
        self.assertIn("column result", run.node("a").error)
        self.assertEqual(run.node("b").state, dag.CANCELLED)


class SQLiteHostileRowsTest(HostileRowsContract, TempDirTestCase):
    def make_database(self) -> str:
        return self.db

    def execute(self, sql: str, params: tuple) -> Any:
        with contextlib.closing(sqlite3.connect(self.db)) as conn, conn:
            return conn.execute(sql, params).fetchone()

    RUNNING_CASES = SQLITE_RUNNING_CASES

    def test_the_sweeps_for_rows_no_lapse_or_claim_finds_seek_and_walk_nothing(self):
        """The orchestrator runs these two every sweep: each finds its rows through the
        indexes (the running jobs of each project; the end of each part of a claim index),
        and never walks the table, nor builds an index or a filter of its own, as the
        planner did when ANALYZE had told it of one project and a long queue."""
        from rowfleet.sql import queries

        for queue in ("a", "b"):
            self.store.enqueue_many(JobSpec(task="hostile.ok", queue=queue), [None] * 3000)
            self.store.enqueue_many(JobSpec(task="hostile.ok", queue=queue, priority=3, delay=3600.0), [None] * 500)
        for _ in range(20):
            self.store.claim(Claim("", "a", "box:1", 60.0))
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            for analyzed in (False, True):
                if analyzed:
                    conn.execute("ANALYZE")
                for name in ("reclaim_unheld", "never_due"):
                    with self.subTest(query=name, analyzed=analyzed):
                        plan = "\n".join(row[3] for row in conn.execute(
                            "EXPLAIN QUERY PLAN " + queries.queries("sqlite")[name], {"now": time.time(), "limit": 100}))
                        # Scans of the recursion's own few rows, and the first entry of a claim index.
                        scans = {line.strip() for line in plan.splitlines() if line.strip().startswith("SCAN ")}
                        self.assertLessEqual(scans, {"SCAN CONSTANT ROW", "SCAN projects", "SCAN claim_parts",
                                                     "SCAN delayed_parts", "SCAN jobs USING INDEX jobs_claim",
                                                     "SCAN jobs USING INDEX jobs_delayed"}, plan)
                        self.assertNotIn("AUTOMATIC", plan)
                        self.assertNotIn("BLOOM", plan)
                        self.assertIn("jobs_state" if name == "reclaim_unheld" else "jobs_claim", plan)

    def test_run_at_text(self):
        self.check(SQLITE_CASES["run_at_text"])

    def test_run_at_text_run_next(self):
        self.check(SQLITE_CASES["run_at_text_run_next"])

    def test_run_at_text_delayed(self):
        self.check(SQLITE_CASES["run_at_text_delayed"])

    def test_run_at_bytes(self):
        self.check(SQLITE_CASES["run_at_bytes"])

    def test_created_at_text(self):
        self.check(SQLITE_CASES["created_at_text"])

    def test_schedule_slot_text(self):
        self.check(SQLITE_CASES["schedule_slot_text"])

    def test_fire_reason_bytes(self):
        self.check(SQLITE_CASES["fire_reason_bytes"])

    def test_model_stats_text_and_bytes(self):
        self.check_model_stats(SQLITE_MODEL_STATS_CASES)


class PostgresHostileRowsTest(PostgresServerCase, HostileRowsContract, TempDirTestCase):
    """The same rows on a throwaway PostgreSQL database: ``self.db`` is its URL."""

    PARAM = "%s"

    def make_database(self) -> str:
        return self.empty_database()

    def execute(self, sql: str, params: tuple) -> Any:
        from rowfleet.store.postgres import driver

        with contextlib.closing(driver().connect(self.db)) as conn, conn:
            return conn.execute(sql, params).fetchone()

    RUNNING_CASES = POSTGRES_RUNNING_CASES

    def test_run_at_nan(self):
        self.check(POSTGRES_CASES["run_at_nan"])

    def test_run_at_nan_delayed(self):
        self.check(POSTGRES_CASES["run_at_nan_delayed"])

    def test_schedule_slot_nan(self):
        self.check(POSTGRES_CASES["schedule_slot_nan"])

    def test_model_stats_nan(self):
        self.check_model_stats(POSTGRES_MODEL_STATS_CASES)


if __name__ == "__main__":
    unittest.main()
