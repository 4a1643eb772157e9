"""Rows of workflow runs and schedules that rowfleet cannot decode, written by someone
else's plain SQL, on both databases; and the panel's answer form given values JSON cannot
hold.

Owns the promise that such a row is shown as unreadable and stops nothing but itself:
``runs``, ``runs N``, ``submit`` and ``cancel-run`` (each with and without ``--json``), the
panel's run pages and the orchestrator's drain all answer; the run can still be cancelled,
and answered where its rows still let it be walked; a drain fails a run it cannot walk,
naming the column, rather than retrying it or dying. A schedule whose ``last_slot`` cannot be
read is skipped with one warning while the scheduler fires the others.

The rows are written through the driver directly, as any program sharing the database
may: each case is a row of ``RUN_CASES`` or ``SCHEDULE_CASES`` (a value only SQLite can
hold, text in a number column, in the SQLite-only tables), so a new kind of bad row joins
by adding a row. HTTP requests are sent on raw sockets, as an attacker would send them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import json
import re
import signal
import socket
import sqlite3
import time
import unittest
from typing import Any
from urllib.parse import urlencode

import rowfleet
from rowfleet import dag, exitcodes
from rowfleet.panel import server
from rowfleet.worker.loop import Worker
from pg_harness import PostgresServerCase
from support import TempDirTestCase, serve_in_background, wait_until

QUEUE = "hostile-runs"
TASK = "hostile_runs.ok"
APP = "hostilerunsapp"
APP_SOURCE = f'''\
import rowfleet


@rowfleet.task(name="{TASK}")
def ok(*args, **kwargs):
    return "ran"
'''


@rowfleet.task(name=TASK)
def ok(*args, **kwargs):
    return "ran"


# A task node, an input node, and a node after both that reads their results: once "a" has
# run, the run awaits the answer to "ask".
FLOW = {"name": "hostile-runs", "nodes": [
    {"id": "a", "task": TASK, "queue": QUEUE},
    {"id": "ask", "kind": "input", "prompt": "go on?"},
    {"id": "b", "task": TASK, "queue": QUEUE, "depends_on": ["a", "ask"], "args": [{"$from": "a"}, {"$from": "ask"}]},
]}


@dataclasses.dataclass(frozen=True)
class RunCase:
    """A run spoilt by ``sql`` (``{run}`` stands for the run's id, a number the test made):
    every view of it names ``names``; ``walkable`` says whether the run can still be walked
    (answered, and moved on by a drain) or, its own rows unreadable, only cancelled (an
    answer is refused, nothing written, and a drain fails it naming ``names``)."""

    sql: tuple[str, ...]
    names: str
    walkable: bool = False
    healed_by_cancel: bool = False  # the cancel rewrites the spoilt column (then views name nothing)


RUN_CASES = {
    "args_not_json": RunCase(("UPDATE runs SET args = '{oops' WHERE id = {run}",), "column args"),
    "definition_not_json": RunCase(("UPDATE runs SET definition = '{oops' WHERE id = {run}",), "column definition"),
    "definition_not_a_workflow": RunCase(
        ("""UPDATE runs SET definition = '{"name": "x", "nodes": 3}' WHERE id = {run}""",), "column definition"),
    "node_result_not_json": RunCase(
        ("UPDATE run_nodes SET result = '[1,' WHERE run_id = {run} AND node_id = 'a'",), "column result"),
    "node_row_missing": RunCase(("DELETE FROM run_nodes WHERE run_id = {run} AND node_id = 'b'",),
                                "no row for node 'b'"),
    "job_of_a_node_the_run_lacks": RunCase(
        ("INSERT INTO jobs (queue, task, args, run_at, created_at, updated_at, run_id, node_id, node_generation) "
         "VALUES ('nobody-serves', 'x:y', 'null', 0, 0, 0, {run}, 'ghost', 0)",), "node 'ghost'", walkable=True),
}
SQLITE_RUN_CASES = {  # values PostgreSQL's typed columns refuse, or an infinity as SQLite writes it
    "args_not_utf8": RunCase(("UPDATE runs SET args = x'ff7b' WHERE id = {run}",), "column args"),
    "created_at_text": RunCase(("UPDATE runs SET created_at = 'yesterday' WHERE id = {run}",), "column created_at"),
    "created_at_infinite": RunCase(("UPDATE runs SET created_at = 9e999 WHERE id = {run}",), "column created_at"),
    "node_items_text": RunCase(
        ("UPDATE run_nodes SET items = 'many' WHERE run_id = {run} AND node_id = 'a'",), "column items"),
}
POSTGRES_RUN_CASES = {  # SQLite stores NaN as NULL, and writes an infinity another way
    "updated_at_nan": RunCase(("UPDATE runs SET updated_at = 'NaN' WHERE id = {run}",), "column updated_at",
                              healed_by_cancel=True),
    "created_at_infinite": RunCase(("UPDATE runs SET created_at = 'Infinity' WHERE id = {run}",),
                                   "column created_at"),
}

# A schedules row's last_slot that no slot can be compared with, as each database writes it (a
# schedule_slots row of that schedule holds it as its slot and its time of firing too).
SQLITE_SCHEDULE_CASES = {"last_slot_infinite": "9e999", "last_slot_text": "'soon'", "last_slot_blob": "x'ff'"}
POSTGRES_SCHEDULE_CASES = {"last_slot_infinite": "'Infinity'", "last_slot_nan": "'NaN'"}


def raw_http(port: int, method: str, path: str, fields: dict[str, str] | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, str]:
    """One request on a socket of its own, as bytes on the wire; the status and the body."""
    body = urlencode(fields).encode() if fields is not None else b""
    head = {"Host": f"127.0.0.1:{port}", "Connection": "close", **(headers or {})}
    if fields is not None:
        head |= {"Content-Type": "application/x-www-form-urlencoded", "Content-Length": str(len(body))}
    request = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(request.encode() + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    answer = b"".join(chunks)
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2].decode("utf-8", errors="replace")


def error_line(page: str) -> str:
    found = re.search(r'<p class="error">(.*?)</p>', page, re.S)
    assert found, page[:500]
    return html.unescape(found.group(1))


class HostileRunRowsContract:
    """Subclasses provide ``make_database()`` (a path or URL for ``--db``), ``PARAM`` and
    ``execute(sql, params)``/``query(sql, params)`` on a connection of the application's own,
    and the cases their database can hold."""

    PARAM = "?"
    RUN_CASES: dict[str, RunCase] = {}
    SCHEDULE_CASES: dict[str, str] = {}

    def setUp(self) -> None:
        super().setUp()
        self.db = self.make_database()
        self.store = self.open_store()
        self.write_module(APP, APP_SOURCE)

    # --- runs -------------------------------------------------------------------------

    def awaiting_runs(self, count: int) -> list[int]:
        """``count`` runs of ``FLOW`` whose "a" has run: each awaits its answer."""
        flow = dag.parse_workflow(FLOW)
        runs = [self.store.start_run(flow, {"n": 1}, "") for _ in range(count)]
        Worker(self.config(), QUEUE, burst=True).run()
        self.store.drain("")
        for run_id in runs:
            self.assertEqual(self.store.get_run(run_id, "").state, dag.AWAITING_INPUT)
        return runs

    def spoil(self, case: RunCase, run_id: int) -> None:
        for statement in case.sql:
            self.execute(statement.replace("{run}", str(int(run_id))), ())

    def test_every_hostile_run_row(self):
        cases = {**RUN_CASES, **self.RUN_CASES}
        runs = iter(self.awaiting_runs(2 * len(cases)))
        planted = {name: (next(runs), next(runs)) for name in cases}  # one to act on, one to drain
        for name, case in cases.items():
            for run_id in planted[name]:
                self.spoil(case, run_id)
            now = time.time()
            self.execute(f"INSERT INTO dispatch_events (project, run_id, kind, created_at) "
                         f"VALUES ('', {self.PARAM}, 'reconcile', {self.PARAM})", (planted[name][1], now))
        panel = serve_in_background(self, server.make_server(self.config(), "127.0.0.1", 0))
        port = panel.server_address[1]
        listed, listed_json = self.run_cli("runs", "--limit", "500").stdout, self.run_cli("runs", "--json").stdout
        for path in ("/runs", "/api/runs"):
            status, page = raw_http(port, "GET", path)
            self.assertEqual(status, 200, page[:500])
        drained = self.run_cli("orchestrator", "--once").stdout
        self.assertEqual(json.loads(drained)["dispatched"], len(cases), drained)
        for name, case in cases.items():
            with self.subTest(case=name):
                acted, drained_run = planted[name]
                self.check_listed(run_id=acted, listed=listed, listed_json=listed_json)
                for text in (self.run_cli("runs", str(acted)).stdout,
                             self.run_cli("runs", str(acted), "--json").stdout):
                    self.assertIn(case.names, text)
                self.check_pages(case, acted, port)
                self.check_answer(case, acted)
                self.check_drained(case, drained_run)
                self.check_cancel(case, acted)
                self.check_pages(case, acted, port, cancelled=True)

    def check_listed(self, run_id: int, listed: str, listed_json: str) -> None:
        shown = {job["id"]: job for job in json.loads(listed_json)}
        self.assertIn(run_id, shown)
        self.assertRegex(listed, rf"(?m)^{run_id}\s")
        if shown[run_id].get("unreadable"):
            self.assertIn(f"! run {run_id} is unreadable: ", listed)

    def check_pages(self, case: RunCase, run_id: int, port: int, cancelled: bool = False) -> None:
        status, page = raw_http(port, "GET", f"/runs/{run_id}")
        self.assertEqual(status, 200, page[:500])
        status, twin = raw_http(port, "GET", f"/api/runs/{run_id}")
        self.assertEqual(status, 200, twin[:500])
        if cancelled and case.healed_by_cancel:
            self.assertIsNone(json.loads(twin)["unreadable"])
        else:
            self.assertIn(html.escape(case.names), page)
            self.assertIn(case.names, json.loads(twin)["unreadable"])

    def check_answer(self, case: RunCase, run_id: int) -> None:
        if case.walkable:
            answered = json.loads(self.run_cli("submit", str(run_id), "ask", "--value", "1", "--json").stdout)
            self.assertEqual(answered["state"], dag.RUNNING)
            self.assertEqual(self.node_state(run_id, "ask"), dag.COMPLETED)
            self.assertEqual(self.node_state(run_id, "b"), dag.QUEUED)
            self.assert_refused("submit", str(run_id), "ask", "--value", "2")  # answered already
            return
        for json_flag in ((), ("--json",)):
            self.assert_refused("submit", str(run_id), "ask", "--value", "1", *json_flag)
        self.assertEqual(self.node_state(run_id, "ask"), dag.AWAITING_INPUT, "a refused answer writes nothing")

    def check_drained(self, case: RunCase, run_id: int) -> None:
        state, error = self.query(f"SELECT state, error FROM runs WHERE id = {self.PARAM}", (run_id,))
        if case.walkable:
            self.assertEqual(state, dag.AWAITING_INPUT)
        else:
            self.assertEqual(state, dag.FAILED, "a drain fails a run it cannot walk")
            self.assertIn(case.names, error)
        attempts, last_error = self.query(f"SELECT attempts, last_error FROM dispatch_events WHERE run_id = "
                                          f"{self.PARAM}", (run_id,))
        self.assertEqual((attempts, last_error), (0, None), "the event was applied, not retried")

    def check_cancel(self, case: RunCase, run_id: int) -> None:
        self.assertEqual(self.run_cli("cancel-run", str(run_id)).stdout.strip(), f"run {run_id} cancelled")
        again = json.loads(self.run_cli("cancel-run", str(run_id), "--json").stdout)
        self.assertEqual(again["state"], dag.CANCELLED)
        if not case.healed_by_cancel:
            self.assertIn(case.names, again["unreadable"])
        self.assertEqual(self.query(f"SELECT state FROM runs WHERE id = {self.PARAM}", (run_id,))[0], dag.CANCELLED)

    def node_state(self, run_id: int, node_id: str) -> str | None:
        row = self.query(f"SELECT state FROM run_nodes WHERE run_id = {self.PARAM} AND node_id = {self.PARAM}",
                         (run_id, node_id))
        return None if row is None else row[0]

    # --- the panel's answer form ------------------------------------------------------

    def test_the_answer_form_refuses_what_json_cannot_hold_in_one_line(self):
        run_id = self.awaiting_runs(1)[0]
        panel = serve_in_background(self, server.make_server(self.config(), "127.0.0.1", 0))
        port = panel.server_address[1]
        for value in ("NaN", "1e999", "[-Infinity]", "[" * 990 + "]" * 990, "{bad"):
            for path in (f"/runs/{run_id}/answer", f"/api/runs/{run_id}/answer"):
                with self.subTest(value=value[:12], path=path):
                    status, page = raw_http(port, "POST", path, {"csrf": panel.csrf, "node": "ask", "value": value},
                                            {"Sec-Fetch-Site": "same-origin"})
                    self.assertEqual(status, 400, page[:300])
                    line = json.loads(page)["error"] if path.startswith("/api") else error_line(page)
                    self.assertEqual(len(line.splitlines()), 1, line)
                    self.assertIn("answer" if value == "{bad" else "value", line)
                    self.assertEqual(self.node_state(run_id, "ask"), dag.AWAITING_INPUT)
        status, page = raw_http(port, "POST", f"/runs/{run_id}/answer",
                                {"csrf": panel.csrf, "node": "ask", "value": '{"go": [1.5]}'},
                                {"Sec-Fetch-Site": "same-origin"})
        self.assertEqual(status, 303, page[:300])
        self.assertEqual(self.node_state(run_id, "ask"), dag.COMPLETED)

    # --- schedules --------------------------------------------------------------------

    def test_a_schedule_whose_last_slot_is_unreadable_is_skipped_and_the_others_fire(self):
        for name, value in self.SCHEDULE_CASES.items():
            with self.subTest(case=name):
                self.execute("DELETE FROM schedules", ())
                self.execute("DELETE FROM schedule_slots", ())
                self.execute(f"INSERT INTO schedules (project, name, last_slot, updated_at) "
                             f"VALUES ('', 'broken', {value}, 0)", ())
                self.execute(f"INSERT INTO schedule_slots (project, name, slot, job_id, fired_at, fired_by) "
                             f"VALUES ('', 'broken', {value}, NULL, {value}, 'plain SQL')", ())
                self.check_schedules(name)

    def check_schedules(self, case: str) -> None:
        path = f"{self.dir}/schedules-{case}.json"
        with open(path, "w") as handle:
            json.dump([{"name": "broken", "task": TASK, "every": 1}, {"name": "fine", "task": TASK, "every": 1}],
                      handle)
        once = self.cli("scheduler", "--schedule", path, "--app", APP, "--once", "--json", check=False)
        self.assertEqual(once.returncode, exitcodes.OK, once.stderr)
        self.assertNotIn("Traceback", once.stderr)
        self.assertEqual([fired["name"] for fired in json.loads(once.stdout)], ["fine"])
        self.assertEqual(self.warnings(once.stderr), 1, once.stderr)
        for flag in ((), ("--json",)):
            shown = self.run_cli("schedules", *flag).stdout
            self.assertIn("column last_slot", shown)
        panel = serve_in_background(self, server.make_server(self.config(), "127.0.0.1", 0))
        status, page = raw_http(panel.server_address[1], "GET", "/schedules")
        self.assertEqual(status, 200, page[:500])
        self.assertIn("column last_slot", page)
        # A running scheduler keeps firing the others, and says so once, not at every tick.
        process = self.launch_logged(f"scheduler-{case}", "scheduler", "--schedule", path, "--app", APP)
        fired_before = self.fired("fine")
        wait_until(lambda: self.fired("fine") >= fired_before + 2 or process.poll() is not None,
                   message="two more slots of 'fine'")
        self.assertIsNone(process.poll(), self.output(process))
        process.send_signal(signal.SIGTERM)
        self.assertEqual(process.wait(30), 0, self.output(process))
        log = self.output(process)
        self.assertNotIn("Traceback", log)
        self.assertEqual(self.warnings(log), 1, log)
        self.assertEqual(self.fired("broken"), 1, "only the slot plain SQL wrote")

    def warnings(self, text: str) -> int:
        return sum(1 for line in text.splitlines() if "broken" in line and "column last_slot" in line)

    def fired(self, name: str) -> int:
        return self.query(f"SELECT count(*) FROM schedule_slots WHERE name = {self.PARAM}", (name,))[0]

    # --- helpers ----------------------------------------------------------------------

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


class SQLiteHostileRunRowsTest(HostileRunRowsContract, TempDirTestCase):
    RUN_CASES = SQLITE_RUN_CASES
    SCHEDULE_CASES = SQLITE_SCHEDULE_CASES

    def make_database(self) -> str:
        return self.db

    def execute(self, sql: str, params: tuple) -> None:
        with contextlib.closing(sqlite3.connect(self.db)) as conn, conn:
            conn.execute(sql, params)

    def query(self, sql: str, params: tuple) -> Any:
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            return conn.execute(sql, params).fetchone()


class PostgresHostileRunRowsTest(PostgresServerCase, HostileRunRowsContract, TempDirTestCase):
    """The same rows on a throwaway PostgreSQL database: ``self.db`` is its URL."""

    PARAM = "%s"
    RUN_CASES = POSTGRES_RUN_CASES
    SCHEDULE_CASES = POSTGRES_SCHEDULE_CASES

    def make_database(self) -> str:
        return self.empty_database()

    def execute(self, sql: str, params: tuple) -> None:
        from rowfleet.store.postgres import driver

        with contextlib.closing(driver().connect(self.db)) as conn, conn:
            conn.execute(sql, params)

    def query(self, sql: str, params: tuple) -> Any:
        from rowfleet.store.postgres import driver

        with contextlib.closing(driver().connect(self.db)) as conn, conn:
            return conn.execute(sql, params).fetchone()


if __name__ == "__main__":
    unittest.main()
