"""The workflow contract, against a real database: runs advance through the real worker
and the real orchestrator drain, in this process.

``WorkflowContract`` is backend-neutral and runs on SQLite and PostgreSQL. Crashes and
concurrent orchestrators in separate processes are in test_workflow_processes.py.
"""

from __future__ import annotations

import json
import os
import threading
import time

import rowfleet
from rowfleet import dag
from rowfleet.claim import Claim
from rowfleet.errors import Conflict, NotFound
from rowfleet.job import COMPLETED, Outcome, Retry, decide_outcome
from rowfleet.services.orchestrator import Orchestrator
from rowfleet.worker.loop import Worker
from pg_harness import PostgresDatabaseCase
from support import DEADLINE, TempDirTestCase

FLAKY_MARKER = "WORKFLOW_TEST_FLAKY"  # while this file exists, workflow.flaky fails


@rowfleet.task(name="workflow.emit")
def emit(*args, **kwargs):
    """Returns its args as given: an object's keys (called as keywords), a list, a value."""
    if kwargs:
        return kwargs
    return args[0] if len(args) == 1 else list(args)


@rowfleet.task(name="workflow.add")
def add(a, b):
    return a + b


@rowfleet.task(name="workflow.total")
def total(values):
    return sum(values)


@rowfleet.task(name="workflow.shout")
def shout(word):
    return word.upper()


@rowfleet.task(name="workflow.boom")
def boom():
    raise ValueError("boom")


@rowfleet.task(name="workflow.flaky")
def flaky(marker):
    if os.path.exists(marker):
        raise ValueError("the marker file is there")
    return "fine"


@rowfleet.task(name="workflow.retry_once")
def retry_once():
    if rowfleet.current_job().attempts == 1:
        raise Retry(reason="once more")
    return "second time lucky"


def node(node_id, task="workflow.emit", *deps, **fields):
    data = {"id": node_id, "task": task, **fields}
    if deps:
        data["depends_on"] = list(deps)
    return data


def ref(path):
    return {"$from": path}


class WorkflowContract:
    """Subclasses provide ``config()`` naming their database."""

    def setUp(self):
        super().setUp()
        self.store = self.open_store()
        self.orchestrator = Orchestrator(self.store, self.config())

    # --- driving runs ------------------------------------------------------------------

    def start(self, nodes, args=None, name="flow"):
        flow = dag.parse_workflow({"name": name, "nodes": nodes})
        return self.store.start_run(flow, args, "")

    def work(self, queue="default"):
        """Run what is due on ``queue`` with a real worker (burst), then drain the outbox."""
        Worker(self.config(), queue, burst=True).run()
        return self.store.drain("")

    def settle(self, run_id, queues=("default",)):
        """Work and drain until the run stops moving; the run."""
        give_up = time.monotonic() + DEADLINE
        while time.monotonic() < give_up:
            for queue in queues:
                self.work(queue)
            run = self.store.get_run(run_id, "")
            if run.state != dag.RUNNING or not self.live_jobs(run_id):
                return run
        self.fail(f"run {run_id} did not settle")

    def live_jobs(self, run_id):
        return [job for job in self.store.reads.list_jobs("", limit=1000)
                if job.run_id == run_id and job.state in ("queued", "running")]

    def node_states(self, run):
        return {n.id: n.state for n in run.nodes}

    # --- the walk, end to end ----------------------------------------------------------

    def test_fan_out_and_fan_in_pass_results_along(self):
        run_id = self.start([node("a", args=ref("$args.x")),
                             node("left", "workflow.add", "a", args={"a": ref("a"), "b": 1}),
                             node("right", "workflow.add", "a", args={"a": ref("a"), "b": 2}),
                             node("join", "workflow.add", "left", "right", args=[ref("left"), ref("right")])],
                            args={"x": 10})
        run = self.settle(run_id)
        self.assertEqual(run.state, dag.COMPLETED)
        self.assertEqual(run.node("join").result, 23)
        self.assertEqual({n.attempts for n in run.nodes}, {1})

    def test_skip_if_skips_and_still_unblocks_dependents(self):
        run_id = self.start([node("count", args=0),
                             node("report", "workflow.emit", "count", args="sent",
                                  skip_if={"$from": "count", "equals": 0}),
                             node("keep", "workflow.emit", "count", args="kept",
                                  skip_if={"$from": "count", "not_equals": 0}),
                             node("after", "workflow.emit", "report", "keep", args=[ref("report"), ref("keep")])])
        run = self.settle(run_id)
        self.assertEqual(self.node_states(run), {"count": "completed", "report": "skipped",
                                                 "keep": "completed", "after": "completed"})
        self.assertEqual(run.node("after").result, [None, "kept"])
        self.assertIn("skip_if held", run.node("report").error)
        self.assertEqual(run.node("report").jobs, ())

    def test_map_runs_once_per_item_and_fans_in_in_item_order(self):
        words = ["alpha", "beta", "gamma", "delta"]
        run_id = self.start([node("fetch", args={"items": words}),
                             node("shout", "workflow.shout", "fetch", map=ref("fetch.items"),
                                  args={"word": ref("$item")}),
                             node("count", "workflow.total", "shout", args=[[1, 2]]),
                             node("echo", "workflow.emit", "shout", args=ref("shout"))])
        run = self.settle(run_id)
        self.assertEqual(run.state, dag.COMPLETED)
        self.assertEqual(run.node("echo").result, [w.upper() for w in words])
        self.assertEqual(run.node("shout").items, 4)
        self.assertEqual(len(run.node("shout").jobs), 4)

    def test_a_map_node_without_args_hands_each_item_over_whole(self):
        items = [{"a": 1}, [1, 2], None, 5]
        run_id = self.start([node("src", args=[items]), node("each", "workflow.emit", "src", map=ref("src"))])
        run = self.settle(run_id)
        self.assertEqual(run.node("each").result, items)

    def test_map_over_an_empty_list_completes_at_once(self):
        run_id = self.start([node("fetch", args=[]), node("each", "workflow.shout", "fetch", map=ref("fetch")),
                             node("after", "workflow.emit", "each", args=ref("each"))])
        run = self.settle(run_id)
        self.assertEqual(self.node_states(run), {"fetch": "completed", "each": "completed", "after": "completed"})
        self.assertEqual(run.node("after").result, [])

    def test_a_failed_node_cancels_its_queued_siblings_and_fails_the_run(self):
        run_id = self.start([node("doomed", "workflow.boom", max_attempts=1),
                             node("sibling", queue="elsewhere"),
                             node("later", "workflow.emit", "doomed", "sibling")])
        self.work()
        run = self.store.get_run(run_id, "")
        self.assertEqual(run.state, dag.FAILED)
        self.assertIn("node 'doomed' failed", run.error)
        self.assertIn("boom", run.error)
        self.assertEqual(self.node_states(run), {"doomed": "failed", "sibling": "cancelled", "later": "cancelled"})
        self.assertIsNone(self.store.claim(Claim("", "elsewhere", "test:1", 60)), "a node of a failed run was claimable")

    def test_a_node_retries_within_its_attempts(self):
        run_id = self.start([node("wobbly", "workflow.retry_once")])
        Worker(self.config(backoff_base=0.01, backoff_max=0.01), "default", burst=True).run()
        run = self.settle(run_id)
        self.assertEqual(run.state, dag.COMPLETED)
        self.assertEqual(run.node("wobbly").attempts, 2)

    def test_an_unresolvable_reference_fails_the_node_once_without_retries(self):
        run_id = self.start([node("a", args={"x": 1}), node("b", "workflow.emit", "a", args=ref("a.missing.0"))])
        run = self.settle(run_id)
        self.assertEqual(run.state, dag.FAILED)
        self.assertEqual(run.node("b").state, "failed")
        self.assertIn("a.missing.0", run.node("b").error)
        self.assertEqual(run.node("b").jobs, ())
        self.assertEqual(self.store.drain(""), {"applied": 0, "failed": 0})

    def test_run_args_are_resolved_when_the_node_is_enqueued(self):
        run_id = self.start([node("a", "workflow.add", args={"a": ref("$args.n"), "b": ref("$args.list.1")})],
                            args={"n": 5, "list": [0, 7]})
        self.assertEqual(self.settle(run_id).node("a").result, 12)

    # --- operators ---------------------------------------------------------------------

    def test_cancel_run_cancels_queued_nodes_and_nothing_can_be_claimed(self):
        run_id = self.start([node("a"), node("b"), node("c", "workflow.emit", "a", "b")])
        run = self.store.cancel_run(run_id, "")
        self.assertEqual(run.state, dag.CANCELLED)
        self.assertEqual(set(self.node_states(run).values()), {"cancelled"})
        self.assertIsNone(self.store.claim(Claim("", "default", "test:1", 60)))
        self.assertEqual(self.store.cancel_run(run_id, "").state, dag.CANCELLED, "cancelling twice is a no-op")

    def test_a_running_node_of_a_cancelled_run_is_not_retried(self):
        run_id = self.start([node("a", "workflow.boom", max_attempts=3)])
        job = self.store.claim(Claim("", "default", "test:1", 60))
        self.store.cancel_run(run_id, "")
        outcome = decide_outcome(job, raised=ValueError("boom"))  # its handler failed on attempt 1 of 3
        self.assertEqual(outcome.state, "queued")
        self.store.finish(job, outcome)  # the retry must not make it claimable again
        self.assertEqual(self.store.get_job(job.id, "").state, "cancelled")
        self.assertIsNone(self.store.claim(Claim("", "default", "test:1", 60)))
        self.store.drain("")
        self.assertEqual(self.store.get_run(run_id, "").node("a").state, "cancelled")

    def test_restart_reruns_failed_nodes_and_keeps_completed_results(self):
        marker = os.path.join(self.dir, "flaky")
        open(marker, "w").close()
        run_id = self.start([node("first", args="kept"),
                             node("flaky", "workflow.flaky", "first", args=marker, max_attempts=1),
                             node("last", "workflow.emit", "flaky", args=[ref("first"), ref("flaky")])])
        run = self.settle(run_id)
        self.assertEqual(run.state, dag.FAILED)
        first_jobs = run.node("first").jobs
        with self.assertRaises(Conflict):
            self.store.retry(run.node("flaky").jobs[0], "")  # a node's job is restarted with its run
        os.remove(marker)
        self.assertEqual(self.store.restart_run(run_id, "").state, dag.RUNNING)
        run = self.settle(run_id)
        self.assertEqual(run.state, dag.COMPLETED)
        self.assertEqual(run.node("last").result, ["kept", "fine"])
        self.assertEqual(run.node("first").jobs, first_jobs, "a completed node ran again")
        with self.assertRaises(Conflict):
            self.store.restart_run(run_id, "")

    def test_input_node_parks_the_run_until_a_value_is_submitted(self):
        run_id = self.start([node("draft", args="text"),
                             {"id": "approve", "kind": "input", "prompt": "Publish it?", "depends_on": ["draft"]},
                             node("publish", "workflow.emit", "approve", args=ref("approve.ok"))])
        with self.assertRaisesRegex(Conflict, "not awaiting input"):
            self.store.submit_input(run_id, "approve", {"ok": True}, "")
        run = self.settle(run_id)
        self.assertEqual(run.state, dag.AWAITING_INPUT)
        self.assertEqual(run.node("approve").prompt, "Publish it?")
        self.assertEqual(self.orchestrator.run_once().reconciled_runs, 0)
        with self.assertRaises(NotFound):
            self.store.submit_input(run_id, "nope", 1, "")
        with self.assertRaisesRegex(Conflict, "task node"):
            self.store.submit_input(run_id, "draft", 1, "")
        self.assertEqual(self.store.submit_input(run_id, "approve", {"ok": True}, "").state, dag.RUNNING)
        with self.assertRaisesRegex(Conflict, "already submitted"):
            self.store.submit_input(run_id, "approve", {"ok": False}, "")
        run = self.settle(run_id)
        self.assertEqual(run.state, dag.COMPLETED)
        self.assertEqual(run.node("publish").result, True)

    # --- the outbox --------------------------------------------------------------------

    def test_each_terminal_node_job_writes_one_dispatch_event_and_each_is_applied_once(self):
        run_id = self.start([node("a"), node("b"), node("c", "workflow.emit", "a", "b")])
        Worker(self.config(), "default", burst=True).run()
        events = self.store.reads.dispatch_events(run_id)
        self.assertEqual([(e["kind"], e["node_id"]) for e in events], [("job_finished", "a"), ("job_finished", "b")])
        self.assertEqual(self.store.drain(""), {"applied": 2, "failed": 0})
        self.assertEqual(self.store.drain(""), {"applied": 0, "failed": 0})
        self.assertEqual(self.node_states(self.store.get_run(run_id, ""))["c"], "queued")

    def test_two_drainers_at_once_apply_each_event_once_and_fan_out_once(self):
        run_id = self.start([node(f"n{i}") for i in range(12)] +
                            [node("join", "workflow.emit", *[f"n{i}" for i in range(12)])])
        Worker(self.config(), "default", burst=True).run()
        results, errors = [], []

        def drainer():
            from rowfleet.store import open_store

            try:
                with open_store(self.config()) as store:
                    results.append(store.drain(""))
            except Exception as exc:  # reported below: the test's own thread must see it
                errors.append(exc)

        threads = [threading.Thread(target=drainer) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(DEADLINE)
        self.assertEqual(errors, [])
        self.assertEqual(sum(r["applied"] for r in results), 12)
        join_jobs = [job for job in self.store.reads.list_jobs("", limit=100) if job.node_id == "join"]
        self.assertEqual(len(join_jobs), 1, "the fan-in node was enqueued twice")
        self.assertTrue(all(e["processed_at"] for e in self.store.reads.dispatch_events(run_id)))

    def test_a_stranded_run_is_found_and_walked_again(self):
        run_id = self.start([node("a"), node("b", "workflow.emit", "a")])
        Worker(self.config(), "default", burst=True).run()
        self.mark_events_processed(run_id)  # as if the event had been lost
        self.assertEqual(self.store.reconcile_runs("", grace=0.0), [run_id])
        self.assertEqual(self.store.reconcile_runs("", grace=0.0), [], "a pending event makes it not stranded")
        self.assertEqual(self.settle(run_id).state, dag.COMPLETED)

    # --- definitions -------------------------------------------------------------------

    def test_the_definition_is_snapshotted_at_the_start(self):
        path = os.path.join(self.dir, "flow.json")
        with open(path, "w") as handle:
            json.dump({"name": "snap", "nodes": [node("a", args="before")]}, handle)
        run_id = self.store.start_run(rowfleet.load_workflow(path), None, "")
        with open(path, "w") as handle:
            json.dump({"name": "snap", "nodes": [node("a", args="after"), node("b")]}, handle)
        run = self.settle(run_id)
        self.assertEqual([n.id for n in run.nodes], ["a"])
        self.assertEqual(run.node("a").result, "before")

    def test_a_run_in_the_callers_transaction_commits_with_it_or_not_at_all(self):
        flow = dag.parse_workflow({"name": "tx", "nodes": [node("a")]})
        conn = self.caller_connection()
        self.addCleanup(conn.close)
        self.store.start_run(flow, None, "", conn=conn)
        conn.rollback()
        self.assertEqual(self.store.reads.list_runs(""), [])
        self.assertEqual(self.store.reads.list_jobs(""), [])
        run_id = self.store.start_run(flow, None, "", conn=conn)
        conn.commit()
        self.assertEqual(self.settle(run_id).state, dag.COMPLETED)


class SQLiteWorkflowTest(WorkflowContract, TempDirTestCase):
    def caller_connection(self):
        import sqlite3

        return sqlite3.connect(self.db)

    def corrupt_definition(self, run_id):
        with self.caller_connection() as conn:
            conn.execute("UPDATE runs SET definition = 'not json' WHERE id = ?", (run_id,))

    def mark_events_processed(self, run_id):
        with self.caller_connection() as conn:
            conn.execute("UPDATE dispatch_events SET processed_at = 1 WHERE run_id = ?", (run_id,))

    def run_row(self, run_id):
        with self.caller_connection() as conn:
            return conn.execute("SELECT state, error FROM runs WHERE id = ?", (run_id,)).fetchone()

    def test_a_version_1_database_upgrades_with_its_jobs(self):
        import sqlite3

        from rowfleet.sql.queries import migrations, queries
        from rowfleet.store import open_store

        path = os.path.join(self.dir, "old.db")
        with sqlite3.connect(path) as conn:
            conn.executescript(queries("sqlite")["migrations_table"])
            conn.executescript(migrations("sqlite")[0].sql)
            conn.execute("INSERT INTO schema_migrations VALUES (1, 'jobs', 0)")
            conn.execute("INSERT INTO jobs (queue, task, run_at, created_at, updated_at) "
                         "VALUES ('default', 'workflow.emit', 0, 0, 0)")
        with open_store(self.config().replace(db=path)) as store:
            self.assertEqual(store.migrate(), len(migrations("sqlite")))
            job = store.claim(Claim("", "default", "test:1", 60))
            self.assertIsNone(job.run_id)
            store.finish(job, Outcome(COMPLETED, result=None))
            self.assertEqual(store.get_job(job.id, "").state, COMPLETED)


class PostgresWorkflowTest(PostgresDatabaseCase, WorkflowContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""

    def _execute(self, sql, params):
        with self.caller_connection() as conn:
            return conn.execute(sql, params).fetchall() if sql.lstrip().startswith("SELECT") else \
                conn.execute(sql, params)

    def corrupt_definition(self, run_id):
        self._execute("UPDATE runs SET definition = 'not json' WHERE id = %s", (run_id,))

    def mark_events_processed(self, run_id):
        self._execute("UPDATE dispatch_events SET processed_at = 1 WHERE run_id = %s", (run_id,))

    def run_row(self, run_id):
        return self._execute("SELECT state, error FROM runs WHERE id = %s", (run_id,))[0]

