"""Submissions, the durable queue of answers to input nodes, against a real database.

Owns the promise of ``rowfleet.store.submissions`` on SQLite and PostgreSQL: a pending row
(written by rowfleet, or by another program's plain INSERT naming only project, run_id,
node_id and value) is claimed (``processing``, with its holder and time), applied in the
transaction that marks it ``processed`` (so exactly once: a holder whose claim was reclaimed
and handed on writes nothing), or ``failed`` with a one-line error when the store refuses
the answer or cannot read the row; a bad row fails alone and never stops the rows after
it. A row held past the grace (or whose holding time is no time) goes back to pending. A
direct answer records a processed row in its own transaction; a refused one records none.
An orchestrator applies a pending submission on its wake-up, long before its safety poll.
Plain SQL goes through the driver directly (``caller_connection``), as any program's would.
"""

from __future__ import annotations

import contextlib
import threading
import unittest

from rowfleet import dag
from rowfleet.errors import Conflict
from rowfleet.services.orchestrator import SUBMISSION_GRACE, Orchestrator, Sweep
from rowfleet.store import open_store
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase, wait_until

# An input node, and a task node that takes its answer as its args.
FLOW = dag.parse_workflow({"name": "asks", "nodes": [
    {"id": "ask", "kind": "input", "prompt": "go on?"},
    {"id": "use", "task": "submissions.use", "queue": "subq", "depends_on": ["ask"], "args": {"$from": "ask"}},
]})
HOLDER = "box:123:1"
WAKE_WITHIN = 10.0  # seconds a woken orchestrator is given; its safety poll is far longer
POLL = 120.0


class SubmissionsContract:
    """Subclasses provide ``config()``, ``caller_connection()`` and ``sql(statement, *params)``
    (``?`` placeholders), which runs one statement on a connection of the test's own."""

    def setUp(self):
        super().setUp()
        self.store = self.open_store()
        self.orchestrator = Orchestrator(self.store, self.config())

    # --- helpers -------------------------------------------------------------------------

    def awaiting(self) -> int:
        run_id = self.store.start_run(FLOW, None, "")
        self.assertEqual(self.store.get_run(run_id, "").node("ask").state, dag.AWAITING_INPUT)
        return run_id

    def submission(self, submission_id):
        return self.store.reads.get_submission(submission_id, "")

    def use_jobs(self, run_id):
        return [job for job in self.store.reads.list_jobs("", limit=1000) if job.run_id == run_id]

    def insert_plain(self, run_id, node_id, value, project="") -> int:
        """The INSERT another program would write: only the columns that have no default."""
        self.sql("INSERT INTO submissions (project, run_id, node_id, value) VALUES (?, ?, ?, ?)",
                 project, run_id, node_id, value)
        return max(s.id for s in self.store.reads.list_submissions(project, limit=1))

    # --- the queue, end to end -----------------------------------------------------------

    def test_a_queued_answer_is_applied_once_by_a_sweep(self):
        run_id = self.awaiting()
        submission_id = self.store.enqueue_submission("", run_id, "ask", {"ok": True}, by="ops")
        queued = self.submission(submission_id)
        self.assertEqual((queued.state, queued.submitted_by, queued.run_id, queued.value), ("pending", "ops", run_id,
                                                                                            {"ok": True}))
        self.assertEqual(self.store.get_run(run_id, "").node("ask").state, dag.AWAITING_INPUT, "applied at once")

        swept = self.orchestrator.run_once()
        self.assertEqual((swept.submissions_applied, swept.submissions_failed), (1, 0))
        done = self.submission(submission_id)
        self.assertEqual((done.state, done.error, done.processing_by), ("processed", None,
                                                                         self.orchestrator.orchestrator_id))
        self.assertIsNotNone(done.processed_at)
        run = self.store.get_run(run_id, "")
        self.assertEqual((run.state, run.node("ask").state, run.node("ask").result), ("running", "completed",
                                                                                     {"ok": True}))
        [job] = self.use_jobs(run_id)
        self.assertEqual((job.node_id, job.args), ("use", {"ok": True}))
        self.assertEqual(self.orchestrator.run_once(), Sweep(), "a second sweep found more to do")
        self.assertEqual(len(self.use_jobs(run_id)), 1)

    def test_a_claim_holds_the_oldest_pending_in_a_batch_and_apply_marks_each(self):
        runs = [self.awaiting() for _ in range(3)]
        ids = [self.store.enqueue_submission("", run_id, "ask", n) for n, run_id in enumerate(runs)]
        held = self.store.claim_submissions("", HOLDER, limit=2)
        self.assertEqual([h.id for h in held], ids[:2])
        for submission_id in ids[:2]:
            row = self.submission(submission_id)
            self.assertEqual((row.state, row.processing_by), ("processing", HOLDER))
            self.assertIsNotNone(row.processing_at)
        self.assertEqual(self.submission(ids[2]).state, "pending")
        self.assertEqual(self.store.claim_submissions("", "other:1", limit=5)[0].id, ids[2], "a held one taken twice")
        self.assertEqual(self.store.claim_submissions("", "other:1"), [])
        self.assertEqual([self.store.apply_submission(h, "") for h in held], ["processed", "processed"])
        self.assertEqual([self.store.get_run(run_id, "").node("ask").result for run_id in runs[:2]], [0, 1])
        self.assertEqual(self.store.get_run(runs[2], "").node("ask").state, dag.AWAITING_INPUT)

    def test_answers_the_store_refuses_fail_alone_each_with_its_one_line_error(self):
        open_run, finished, answered = self.awaiting(), self.awaiting(), self.awaiting()
        self.store.cancel_run(finished, "")
        self.store.submit_input(answered, "ask", 1, "")
        other_project = self.store.start_run(FLOW, None, "elsewhere")
        cases = {
            "no such run": (999_999, "ask", "no run 999999"),
            "another project's run": (other_project, "ask", f"no run {other_project}"),
            "no such node": (open_run, "ghost", "has no node 'ghost'"),
            "a task node": (open_run, "use", "is a task node"),
            "a run that ended": (finished, "ask", "it takes no more input"),
            "a node answered already": (answered, "ask", "a value was already submitted"),
        }
        ids = {name: self.store.enqueue_submission("", run_id, node, "x") for name, (run_id, node, _) in cases.items()}
        good = self.store.enqueue_submission("", open_run, "ask", "yes")
        swept = self.orchestrator.run_once()
        self.assertEqual((swept.submissions_applied, swept.submissions_failed), (1, len(cases)))
        for name, (_, _, why) in cases.items():
            with self.subTest(name):
                row = self.submission(ids[name])
                self.assertEqual(row.state, "failed")
                self.assertIn(why, row.error)
                self.assertNotIn("\n", row.error)
                self.assertIsNotNone(row.processed_at)
        self.assertEqual(self.submission(good).state, "processed")
        self.assertEqual(self.store.get_run(open_run, "").node("ask").result, "yes")
        self.assertEqual(self.store.get_run(other_project, "elsewhere").node("ask").state, dag.AWAITING_INPUT)

    def test_a_plain_sql_insert_naming_four_columns_is_applied(self):
        run_id = self.awaiting()
        submission_id = self.insert_plain(run_id, "ask", '{"from": "sql"}')
        row = self.submission(submission_id)
        self.assertEqual((row.state, row.submitted_by, row.error), ("pending", "", None))
        self.assertLess(abs(row.created_at - self.store.clock()), 60, "created_at defaults to now")
        self.assertEqual(self.orchestrator.run_once().submissions_applied, 1)
        self.assertEqual(self.submission(submission_id).state, "processed")
        self.assertEqual(self.store.get_run(run_id, "").node("ask").result, {"from": "sql"})

    def test_hostile_plain_sql_rows_fail_alone_naming_the_column(self):
        run_id = self.awaiting()
        bad = {self.insert_plain(run_id, "ask", value): why for value, why in self.hostile_values().items()}
        bad[self.insert_plain(run_id, "ask", "[1e999]")] = "finite numbers"
        for row_values, why in self.hostile_rows(run_id):
            bad[self.insert_plain(*row_values)] = why
        good = self.insert_plain(run_id, "ask", '"after them"')
        swept = self.orchestrator.run_once()
        self.assertEqual((swept.submissions_applied, swept.submissions_failed), (1, len(bad)))
        for submission_id, why in bad.items():
            with self.subTest(submission=submission_id, why=why):
                row = self.submission(submission_id)
                self.assertEqual(row.state, "failed")
                self.assertIn(why, row.error)
        self.assertEqual(self.submission(good).state, "processed")
        self.assertEqual(self.store.get_run(run_id, "").node("ask").result, "after them")
        self.assertEqual(self.store.reads.list_submissions("", state="pending"), [])
        self.assertEqual(self.store.reads.list_submissions("", state="processing"), [])

    def hostile_values(self) -> dict:
        """Values of the value column no decoder reads, each with what its error names."""
        return {"{oops": "column value is not valid JSON", "NaN": "column value is not valid JSON"}

    def hostile_rows(self, run_id) -> list:
        """Whole rows (run_id, node_id, value) only plain SQL writes, each with what its error names."""
        return [((run_id, "no such node!", "1"), "has no node"), ((2 ** 62, "ask", "1"), "no run")]

    # --- reclaim -------------------------------------------------------------------------

    def test_a_submission_held_past_the_grace_goes_back_and_is_applied_once(self):
        run_id = self.awaiting()
        submission_id = self.store.enqueue_submission("", run_id, "ask", "late")
        [held] = self.store.claim_submissions("", HOLDER)
        self.assertEqual(self.store.reclaim_submissions("", SUBMISSION_GRACE), [], "a fresh claim was taken back")
        # The holder died between its claim and its apply; the grace has passed since.
        self.sql("UPDATE submissions SET processing_at = processing_at - ? WHERE id = ?", SUBMISSION_GRACE + 5,
                 submission_id)
        swept = self.orchestrator.run_once()
        self.assertEqual((swept.submissions_reclaimed, swept.submissions_applied), (1, 1))
        row = self.submission(submission_id)
        self.assertEqual((row.state, row.processing_by), ("processed", self.orchestrator.orchestrator_id))
        # The first holder, were it only slow, writes nothing: neither the answer nor a failure.
        self.assertEqual(self.store.apply_submission(held, ""), "lost")
        self.assertEqual(self.submission(submission_id), row)
        self.assertEqual(len(self.use_jobs(run_id)), 1)

    def test_a_holder_whose_claim_was_handed_on_applies_nothing(self):
        run_id = self.awaiting()
        self.store.enqueue_submission("", run_id, "ask", "first")
        [held] = self.store.claim_submissions("", HOLDER)
        self.sql("UPDATE submissions SET processing_at = processing_at - ? WHERE id = ?", SUBMISSION_GRACE + 5, held.id)
        self.assertEqual([row["id"] for row in self.store.reclaim_submissions("", SUBMISSION_GRACE)], [held.id])
        [again] = self.store.claim_submissions("", "next:1")
        self.assertEqual(self.store.apply_submission(held, ""), "lost")
        self.assertEqual(self.store.get_run(run_id, "").node("ask").state, dag.AWAITING_INPUT, "the lost one applied")
        self.assertEqual(self.store.apply_submission(again, ""), "processed")
        self.assertEqual(self.submission(held.id).processing_by, "next:1")

    def test_a_processing_row_whose_time_is_no_time_goes_back(self):
        run_id = self.awaiting()
        self.sql("INSERT INTO submissions (project, run_id, node_id, value, state) VALUES ('', ?, 'ask', '1', "
                 "'processing')", run_id)
        self.sql("INSERT INTO submissions (project, run_id, node_id, value, state, processing_at) "
                 "VALUES ('', ?, 'ask', '2', 'processing', ?)", run_id, self.store.clock() + 1e6)
        self.assertEqual(len(self.store.reclaim_submissions("", SUBMISSION_GRACE)), 2)
        swept = self.orchestrator.run_once()
        self.assertEqual((swept.submissions_applied, swept.submissions_failed), (1, 1))
        self.assertEqual(self.store.get_run(run_id, "").node("ask").result, 1)

    # --- the direct answer ---------------------------------------------------------------

    def test_a_direct_answer_records_a_processed_submission_and_a_refused_one_none(self):
        run_id = self.awaiting()
        self.store.submit_input(run_id, "ask", [1, 2], "", by="ops")
        [row] = self.store.reads.list_submissions("", run_id=run_id)
        self.assertEqual((row.state, row.submitted_by, row.value, row.node_id), ("processed", "ops", [1, 2], "ask"))
        self.assertIsNotNone(row.processed_at)
        with self.assertRaises(Conflict):
            self.store.submit_input(run_id, "ask", 3, "", by="ops")
        self.assertEqual(self.store.reads.list_submissions("", run_id=run_id), [row])
        self.assertEqual(self.orchestrator.run_once(), Sweep())

    def test_a_queued_submission_may_share_the_callers_transaction(self):
        run_id = self.awaiting()
        conn = self.caller_connection()
        self.addCleanup(conn.close)
        self.store.enqueue_submission("", run_id, "ask", "mine", conn=conn)
        conn.rollback()
        self.assertEqual(self.store.reads.list_submissions(""), [])
        self.store.enqueue_submission("", run_id, "ask", "mine", conn=conn)
        conn.commit()
        self.assertEqual([s.value for s in self.store.reads.list_submissions("")], ["mine"])

    # --- the wake-up ---------------------------------------------------------------------

    def test_an_orchestrator_applies_a_new_submission_on_its_wake_up_not_its_poll(self):
        run_id, later = self.awaiting(), self.awaiting()
        first = self.store.enqueue_submission("", run_id, "ask", 1)
        started, failures = [], []
        config = self.config(poll=POLL, interval=POLL)

        def orchestrate():
            try:
                with open_store(config) as store:
                    started.append(Orchestrator(store, config))
                    started[0].run()
            except BaseException as exc:  # shown by the test, not lost in the thread
                failures.append(exc)

        def stop():
            wait_until(lambda: started or failures, message="the orchestrator to start")
            if started:
                started[0].request_stop()  # interrupts its wait: its poll is long
            thread.join(30)

        thread = threading.Thread(target=orchestrate, name="test-orchestrator")
        thread.start()
        self.addCleanup(stop)
        wait_until(lambda: self.submission(first).state == "processed", message="its first sweep")
        second = self.write_pending(later)
        wait_until(lambda: self.submission(second).state == "processed", timeout=WAKE_WITHIN,
                   message="a submission written after the sweep")
        self.assertEqual(self.store.get_run(later, "").node("ask").result, "woke")
        stop()
        self.assertFalse(thread.is_alive())
        self.assertEqual(failures, [])


class SQLiteSubmissionsTest(SubmissionsContract, TempDirTestCase):
    def caller_connection(self):
        import sqlite3

        return sqlite3.connect(self.db)

    def sql(self, statement, *params):
        with contextlib.closing(self.caller_connection()) as conn, conn:
            conn.execute(statement, params)

    def hostile_values(self):
        return {**super().hostile_values(), b"\xff{": "column value is not valid JSON"}

    def hostile_rows(self, run_id):
        return [*super().hostile_rows(run_id), (("abc", "ask", "1"), "column run_id is not an integer"),
                ((run_id, b"ask", "1"), "column node_id is not text")]

    def write_pending(self, run_id):
        """rowfleet's own write rings the orchestrator's doorbell (another program's waits for the poll)."""
        return self.store.enqueue_submission("", run_id, "ask", "woke")


class PostgresSubmissionsTest(PostgresDatabaseCase, SubmissionsContract, TempDirTestCase):
    def sql(self, statement, *params):
        with self.caller_connection() as conn:
            conn.execute(statement.replace("?", "%s"), params)

    def write_pending(self, run_id):
        """Another program's plain INSERT: the table's trigger sends the NOTIFY."""
        return self.insert_plain(run_id, "ask", '"woke"')


if __name__ == "__main__":
    unittest.main()
