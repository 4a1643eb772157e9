"""The fleet read model (``rowfleet.views.snapshot``): its pure derivations table-tested, and the
snapshot built on SQLite and PostgreSQL in one consistent store read, with workers in every
actual state, a switch, and counts whose cap is exercised (``SnapshotContract``).

What the command line prints from it (``status``, ``workers``, ``broker``) is tested in
test_cli.py, test_fleet.py and test_readme.py; the cap's text and JSON once more here, on
SQLite, with a real table past the default cap.
"""

from __future__ import annotations

import json
import sqlite3
import unittest
from typing import Any, Callable

from rowfleet import control
from rowfleet.claim import Claim
from rowfleet.control import Switch
from rowfleet.job import COMPLETED, FAILED, JobSpec, Outcome
from rowfleet.views import snapshot
from rowfleet.views.snapshot import Count, Progress, Services, Snapshot, count_of, worker_of
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase
from contract.test_lifecycle import Clock


def worker_row(**columns: Any) -> dict[str, Any]:
    """A workers row as ``fleet_rows`` reads it (a live, serving worker unless told otherwise)."""
    return {"worker_id": "box:1:0", "project": "", "host": "box", "queue": "q", "pid": 1, "state": "serving",
            "current_job": None, "started_at": 50.0, "last_seen": 100.0, "stopped_at": None, "flagged_dead_at": None,
            "exit_code": None, "heartbeat": 10.0, "lease": 600.0, "job_progress": None, "job_progress_message": None,
            "job_progress_at": None, **columns}


class DerivationTest(unittest.TestCase):
    def test_counts_over_the_cap_read_as_the_cap_and_live_ones_stay_exact(self):
        for exact, n, cap, shown, capped in ((0, 4, 3, 3, True), (0, 3, 3, 3, False), (0, 0, 3, 0, False),
                                             (1, 40, 3, 40, False), (True, 4, 3, 4, False), (False, 4, 3, 3, True)):
            with self.subTest(exact=exact, n=n, cap=cap):
                count = count_of({"project": "p", "queue": "q", "state": "s", "exact": exact, "n": n}, cap)
                self.assertEqual((count.n, count.capped), (shown, capped))

    def test_a_count_reads_as_text_and_json(self):
        for count, text, as_json in (
                (Count("", "q", "completed", 10_000, True), "10,000+",
                 {"project": "", "queue": "q", "state": "completed", "n": 10_000, "capped": True}),
                (Count("a", "q", "queued", 12_345), "12345", {"project": "a", "queue": "q", "state": "queued",
                                                              "n": 12_345})):
            with self.subTest(count=count):
                self.assertEqual((count.text(), count.to_dict()), (text, as_json))

    def test_actual_state(self):
        now = 120.0
        for columns, expected in (({}, "serving"), ({"state": "parked"}, "parked"), ({"state": "draining"}, "draining"),
                                  ({"last_seen": 89.0}, "SILENT"),  # 31 s: past 3 of its 10 s beats
                                  ({"last_seen": 89.0, "heartbeat": 40.0}, "serving"),  # judged by its own
                                  ({"flagged_dead_at": 119.0}, "SILENT"), ({"stopped_at": 110.0}, "stopped"),
                                  ({"stopped_at": 110.0, "exit_code": -9}, "killed by SIGKILL"),
                                  ({"exit_code": 79}, "exited 79 (stopped by an operator)"),
                                  ({"last_seen": "yesterday"}, "SILENT"), ({"heartbeat": None}, "SILENT")):
            with self.subTest(columns=columns):
                self.assertEqual(snapshot.actual_state(worker_row(**columns), now), expected)

    def test_a_worker_is_wanted_by_the_switch_in_force(self):
        drain = Switch("", "box", "*", control.OFF, control.DRAIN, "maintenance", 1.0)
        hard = Switch("*", "*", "q", control.OFF, control.HARD, "panic", 2.0)
        on = Switch("", "box", "q", control.ON, changed_at=3.0)
        for switches, row, desired, held in (((), {}, "on", None), ((on,), {}, "on", None),
                                             ((on, drain), {}, "off", drain), ((drain, hard), {}, "off", hard),
                                             ((drain,), {"host": "other"}, "on", None),
                                             ((drain,), {"project": "beta"}, "on", None)):
            with self.subTest(switches=switches, row=row):
                worker = worker_of(worker_row(**row), switches, 120.0)
                self.assertEqual((worker.desired, worker.switch), (desired, held))

    def test_a_worker_row_becomes_a_typed_value_and_json(self):
        row = worker_row(current_job=7, job_progress=0.5, job_progress_message="half", job_progress_at=110.0)
        worker = worker_of(row, (), 120.25)
        self.assertEqual((worker.age, worker.actual, worker.progress), (20.25, "serving", Progress(0.5, "half", 110.0)))
        as_json = worker.to_dict()
        self.assertEqual((as_json["last_seen"], as_json["age"], as_json["switch"], as_json["desired"]),
                         ("1970-01-01T00:01:40.000Z", 20.25, None, "on"))
        self.assertEqual(as_json["progress"], {"fraction": 0.5, "message": "half", "at": "1970-01-01T00:01:50.000Z"})
        self.assertEqual(json.loads(json.dumps(as_json)), as_json)

    def test_progress_from_plain_sql_is_shown_as_stored(self):
        for columns, expected in (({}, None), ({"job_progress_at": 5.0}, Progress(None, None, 5.0)),
                                  ({"job_progress": "most", "job_progress_at": 5.0}, Progress("most", None, 5.0)),
                                  ({"job_progress_message": 42, "job_progress_at": "noon"},
                                   Progress(None, "42", "noon"))):
            with self.subTest(columns=columns):
                self.assertEqual(snapshot.progress_of(worker_row(**columns)), expected)
        self.assertIsNone(worker_of(worker_row(last_seen="soon"), (), 1.0).age, "no number, no age")

    def test_services_age_their_oldest_waiting_event(self):
        for oldest, age in ((None, None), (90.0, 10.0), (99.9996, 0.0)):
            with self.subTest(oldest=oldest):
                row = {"project": "a", "orchestrators": 0, "outbox_waiting": 1, "outbox_oldest": oldest}
                self.assertEqual(snapshot.services_of(row, 100.0), Services("a", 0, 1, age))

    def test_a_project_sees_its_own_part(self):
        worker = lambda project: worker_of(worker_row(project=project, worker_id=project), (), 100.0)
        whole = Snapshot(at=100.0, cap=3, counts=(Count("a", "q", "queued", 1), Count("b", "q", "queued", 2)),
                         workers=(worker("a"), worker("c")),
                         switches=(Switch("a", "box", "q", "off"), Switch("*", "box", "q", "off"),
                                   Switch("b", "box", "q", "off")),
                         services=(Services("b", 1, 0, None),))
        mine = whole.for_project("a")
        self.assertEqual(([c.project for c in mine.counts], [w.project for w in mine.workers],
                          [s.project for s in mine.switches], mine.services), (["a"], ["a"], ["a", "*"], ()))
        projects = whole.projects()
        self.assertEqual([p.name for p in projects], ["a", "b", "c"])
        self.assertEqual((projects[0].services, projects[1].services.orchestrators), (Services("a", 0, 0, None), 1))
        self.assertEqual((projects[1].queues(), projects[1].tally("q")), (("q",), {"queued": Count("b", "q", "queued", 2)}))


class Recording:
    """A store's reader, recording the statements run through it; ``after`` maps a statement
    name to what to do once it has run (another process's commit, a failure)."""

    def __init__(self, tx: Any, names: list[str], after: dict[str, Callable[[], None]]) -> None:
        self.tx, self.names, self.after = tx, names, after
        self.now = tx.now

    def _call(self, method: str, query: str, params: dict[str, Any]) -> Any:
        result = getattr(self.tx, method)(query, **params)
        self.names.append(query)
        if query in self.after:
            self.after[query]()
        return result

    def one(self, query: str, **params: Any) -> Any:
        return self._call("one", query, params)

    def all(self, query: str, **params: Any) -> Any:
        return self._call("all", query, params)

    def run(self, query: str, **params: Any) -> Any:
        return self._call("run", query, params)


class SnapshotContract:
    """Every backend must pass these. Subclasses provide ``config()`` naming their database."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.store = self.make_store()

    def make_store(self):
        from rowfleet.store import open_store

        store = open_store(self.config(), create=True, clock=self.clock)
        self.addCleanup(store.close)
        store.migrate()
        return store

    def recorded(self, after: dict[str, Callable[[], None]] | None = None) -> tuple[list[str], list[str]]:
        """Route the store's reads through ``Recording`` and refuse its writes: the statements
        run, and one entry per reader the store opened."""
        names: list[str] = []
        readers: list[str] = []
        real_reader = self.store.reader

        def reader():
            readers.append("reader")
            return Recording(real_reader(), names, after or {})

        def transaction(*args, **kwargs):
            raise AssertionError("a snapshot only reads")

        self.store.reader = reader
        self.store.transaction = transaction
        self.addCleanup(vars(self.store).pop, "reader", None)
        self.addCleanup(vars(self.store).pop, "transaction", None)
        return names, readers

    def finish_jobs(self, queue: str, states: list[str]) -> None:
        for state in states:
            job = self.store.claim(Claim("", queue, "box:9", 60.0))
            self.store.finish(job, Outcome(state, error=None if state == COMPLETED else "no", event=state))

    def test_workers_in_every_actual_state_with_their_switch_and_job(self):
        beat = self.store.worker_beat
        beat("flagged", "", "box", "q", 6, None)
        self.clock.advance(31)  # past 3 of its 10 s beats
        self.assertEqual([w["worker_id"] for w in self.store.flag_stale_workers(known_dead=lambda worker: True)], ["flagged"])
        beat("silent", "", "box", "q", 5, None)
        self.clock.advance(31)  # silent too, but no sweep has flagged it
        self.store.set_switch("", "box", "parkq", control.OFF, control.DRAIN, "ops")
        self.store.enqueue(JobSpec(task="t", queue="q"))
        job = self.store.claim(Claim("", "q", "box:1", 600.0))
        self.store.progress(job, 0.5, "half way")
        beat("serving", "", "box", "q", 1, job.id)
        beat("parked", "", "box", "parkq", 2, None, control.PARKED)
        beat("draining", "", "box", "q", 3, None, control.DRAINING)
        beat("stopped", "", "box", "q", 4, None)
        self.store.worker_stopped("stopped")
        beat("killed", "", "box", "q", 7, None)
        self.store.worker_exited("box", 7, -9)
        self.clock.advance(0.5)

        fleet = snapshot.snapshot(self.store)
        actual = {w.worker_id: w.actual for w in fleet.workers}
        self.assertEqual(actual, {"serving": "serving", "parked": "parked", "draining": "draining",
                                  "silent": "SILENT", "flagged": "SILENT", "stopped": "stopped",
                                  "killed": "killed by SIGKILL"})
        by_id = {w.worker_id: w for w in fleet.workers}
        self.assertEqual((by_id["parked"].desired, by_id["parked"].switch.changed_by), ("off", "ops"))
        self.assertEqual({w.desired for w in fleet.workers if w.worker_id != "parked"}, {"on"})
        serving = by_id["serving"]
        self.assertEqual((serving.current_job, serving.progress.fraction, serving.progress.message, serving.age),
                         (job.id, 0.5, "half way", 0.5))
        self.assertEqual((serving.heartbeat, serving.lease, serving.state), (10.0, 30.0, "serving"))
        self.assertEqual(by_id["silent"].age, 31.5)
        self.assertEqual([(s.queue, s.desired) for s in fleet.switches], [("parkq", "off")])
        self.assertEqual(fleet.at, self.clock.now)
        self.assertEqual(json.loads(json.dumps(fleet.to_dict()))["workers"][0]["worker_id"], "parked")

    def test_listed_for_leaves_old_rows_out_but_keeps_live_slow_ones(self):
        from rowfleet.store import open_store

        slow = open_store(self.config().replace(heartbeat=400, renew=5), clock=self.clock)
        self.addCleanup(slow.close)
        self.store.worker_beat("gone", "", "box", "q", 1, None)
        self.store.worker_stopped("gone")
        slow.worker_beat("slow", "", "box", "q", 2, None)
        self.clock.advance(601)
        self.assertEqual([w.worker_id for w in snapshot.snapshot(self.store, listed_for=600).workers], ["slow"])
        self.assertEqual([w.worker_id for w in snapshot.snapshot(self.store, listed_for=None).workers],
                         ["gone", "slow"])

    def test_finished_counts_stop_at_the_cap_and_live_ones_do_not(self):
        self.store.enqueue_many(JobSpec(task="t", queue="done"), [None] * 8)
        self.finish_jobs("done", [COMPLETED] * 4 + [FAILED] * 3)  # one left queued
        self.store.enqueue_many(JobSpec(task="t", queue="deep"), [None] * 5)
        self.store.enqueue(JobSpec(task="t", queue="elsewhere", project="beta"))
        counts = [(c.project, c.queue, c.state, c.n, c.capped) for c in snapshot.snapshot(self.store, cap=3).counts]
        self.assertEqual(counts, [("", "deep", "queued", 5, False), ("", "done", "completed", 3, True),
                                  ("", "done", "failed", 3, False), ("", "done", "queued", 1, False),
                                  ("beta", "elsewhere", "queued", 1, False)])
        uncapped = [(c.queue, c.state, c.n, c.capped) for c in snapshot.snapshot(self.store).counts]
        self.assertIn(("done", "completed", 4, False), uncapped)

    def test_every_project_with_jobs_or_an_orchestrator_has_its_services(self):
        self.store.enqueue(JobSpec(task="t", project="alpha"))
        self.store.enqueue(JobSpec(task="t", project="gamma"))
        self.store.enqueue(JobSpec(task="t", project="alpha", queue="other"))
        self.store.orchestrator_beat("o1", "beta", "box", 1)
        fleet = snapshot.snapshot(self.store)
        self.assertEqual([(s.project, s.orchestrators) for s in fleet.services],
                         [("alpha", 0), ("beta", 1), ("gamma", 0)])
        self.assertEqual([s["project"] for s in self.store.reads.project_services()], ["alpha", "beta", "gamma"])
        self.assertEqual([p.name for p in fleet.projects()], ["alpha", "beta", "gamma"])

    def test_a_snapshot_is_one_read_of_one_moment(self):
        from rowfleet.store import open_store

        other = open_store(self.config(), clock=self.clock)  # another process's connection
        self.addCleanup(other.close)
        self.store.worker_beat("before", "", "box", "q", 1, None)
        # Committed between two of the snapshot's statements: a consistent read cannot see it.
        names, readers = self.recorded(after={"fleet_rows_counts": lambda: (
            other.worker_beat("during", "", "box", "q", 2, None), other.enqueue(JobSpec(task="t", queue="q")))})
        fleet = snapshot.snapshot(self.store)
        self.assertEqual([w.worker_id for w in fleet.workers], ["before"])
        self.assertEqual(fleet.counts, ())
        self.assertEqual(fleet.services, (), "no jobs yet at that moment, so no project to serve")
        self.assertEqual(readers, ["reader"], "one store read")
        self.assertEqual((names[0], names[-1]), ("fleet_rows_begin", "fleet_rows_end"))
        again = snapshot.snapshot(self.store)
        self.assertEqual([w.worker_id for w in again.workers], ["before", "during"])

    def test_a_failed_read_is_ended_and_the_store_goes_on(self):
        def fail() -> None:
            raise RuntimeError("the read broke")

        self.recorded(after={"fleet_rows_workers": fail})
        with self.assertRaisesRegex(RuntimeError, "the read broke"):
            snapshot.snapshot(self.store)
        for name in ("reader", "transaction"):
            vars(self.store).pop(name)
        self.store.enqueue(JobSpec(task="t", queue="q"))  # a write: no read transaction was left open
        self.assertEqual([c.n for c in snapshot.snapshot(self.store).counts], [1])


class SQLiteSnapshotTest(SnapshotContract, TempDirTestCase):
    def test_the_command_line_shows_a_count_past_the_cap(self):
        self.store.enqueue(JobSpec(task="t", queue="mail"))
        with sqlite3.connect(self.db) as conn:  # as another program's plain SQL could
            conn.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10001) "
                         "INSERT INTO jobs (queue, task, state, run_at, created_at, updated_at, finished_at) "
                         "SELECT 'mail', 't', 'completed', 1.0, 1.0, 1.0, 2.0 FROM n")
        conn.close()
        text = self.cli("status").stdout
        self.assertRegex(text, r"(?m)^''\s+mail\s+completed\s+10,000\+$")
        self.assertRegex(text, r"(?m)^''\s+mail\s+queued\s+1$")
        counts = self.cli_json("status")["counts"]
        self.assertEqual(counts, [{"project": "", "queue": "mail", "state": "completed", "n": 10_000, "capped": True},
                                  {"project": "", "queue": "mail", "state": "queued", "n": 1}])
        broker = self.cli_json("broker")
        self.assertEqual((broker["projects"][""]["queues"]["mail"]["completed"], broker["projects"][""]["capped"]),
                         (10_000, {"mail": ["completed"]}))
        self.assertRegex(self.cli("broker").stdout, r"(?m)^''\s+mail\s+1\s+0\s+0\s+10,000\+\s+0\s+-$")


class PostgresSnapshotTest(SnapshotContract, PostgresDatabaseCase, TempDirTestCase):
    pass


if __name__ == "__main__":
    unittest.main()
