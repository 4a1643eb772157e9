"""A dispatch event whose drain fails is tried again only after a growing backoff, on
SQLite and PostgreSQL.

The drain's failure is a walk of the run that raises, as a bug in one run's walk would (a
run whose rows cannot be decoded is no such failure: the drain fails that run at once). Time is a clock the test moves, handed to the store (the
writer decides ``next_attempt_at`` from it); nothing waits on the wall clock except for
conditions, with deadlines.
"""

from __future__ import annotations

import threading
import unittest
from unittest import mock

from rowfleet import dag
from rowfleet.claim import Claim
from rowfleet.job import COMPLETED, Outcome, drain_retry_delay
from rowfleet.services.orchestrator import Orchestrator
from rowfleet.store.runs import POISON_AFTER
from pg_harness import PostgresDatabaseCase
from support import DEADLINE, TempDirTestCase, wait_until
from contract.test_lifecycle import Clock

INTERVAL = 30.0  # the sweep interval: the first wait after a failed drain
FLOW = dag.parse_workflow({"name": "outbox", "nodes": [{"id": "a", "task": "outbox.a"},
                                                       {"id": "b", "task": "outbox.b", "depends_on": ["a"]}]})


class CountingDrains:
    """The real store, counting the drains an orchestrator asks of it."""

    def __init__(self, store) -> None:
        self._store = store
        self.drains = 0

    def drain(self, project: str, limit: int = 500) -> dict[str, int]:
        self.drains += 1
        return self._store.drain(project, limit)

    def __getattr__(self, name: str):
        return getattr(self._store, name)


class OutboxBackoffContract:
    """Subclasses provide ``config()`` and ``run_state(run_id)``."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.store = self.make_store()

    def make_store(self, owned: bool = True):
        from rowfleet.store import open_store

        store = open_store(self.settings(), create=True, clock=self.clock)
        if owned:
            self.addCleanup(store.close)
        store.migrate()
        return store

    def settings(self):
        return self.config(interval=INTERVAL, poll=0.05)

    def failing_event(self) -> int:
        """A run whose first node finished (writing its dispatch event) and whose walk
        raises from now on, in every store of this test, so every drain of that event
        fails; the run's id."""
        run_id = self.store.start_run(FLOW, None, "")
        job = self.store.claim(Claim("", "default", "test:1", 60.0))
        self.store.finish(job, Outcome(COMPLETED, result=1))
        store_class, advance = type(self.store), type(self.store)._advance

        def walk(store, tx, run, *more, **named):
            if run["id"] == run_id:
                raise RuntimeError(f"the walk of run {run_id} broke (a planted fault)")
            return advance(store, tx, run, *more, **named)

        patch = mock.patch.object(store_class, "_advance", walk)
        patch.start()
        self.addCleanup(patch.stop)
        return run_id

    def event(self, run_id: int) -> dict:
        [event] = self.store.reads.dispatch_events(run_id)
        return event

    def test_failed_drains_wait_a_growing_backoff_then_the_event_is_set_aside(self):
        run_id = self.failing_event()
        waits = [INTERVAL]
        for attempt in range(1, POISON_AFTER + 1):
            self.assertEqual(self.store.drain(""), {"applied": 0, "failed": 1}, f"attempt {attempt}")
            event = self.event(run_id)
            self.assertEqual(event["attempts"], attempt)
            if attempt == POISON_AFTER:
                break
            wait = event["next_attempt_at"] - self.clock.now
            self.assertAlmostEqual(wait, drain_retry_delay(attempt, INTERVAL), places=3)
            self.assertGreaterEqual(wait, waits[-1] - 1e-6, "at least the interval, and growing")
            waits.append(wait)
            self.assertEqual(self.store.reconcile_runs("", grace=0.0), [], "a waiting event is not a stranded run")
            self.clock.advance(wait - 1.0)
            self.assertEqual(self.store.drain(""), {"applied": 0, "failed": 0}, "drained before it was due")
            self.clock.advance(1.0)
        self.assertIsNotNone(event["poisoned_at"])
        self.assertIn("a planted fault", event["last_error"])
        self.assertEqual(self.store.drain(""), {"applied": 0, "failed": 0})
        state, error = self.run_state(run_id)
        self.assertEqual(state, dag.FAILED)
        self.assertIn(f"dispatch event {event['id']} (job_finished of node 'a') failed {POISON_AFTER} times "
                      f"and was set aside", error)
        self.assertEqual(self.store.get_run(run_id, "").node("b").state, dag.CANCELLED)

    def test_an_orchestrator_that_keeps_draining_does_not_retry_before_the_backoff(self):
        run_id = self.failing_event()
        started, errors = threading.Event(), []
        orchestrator: list[Orchestrator] = []

        def serve() -> None:
            store = CountingDrains(self.make_store(owned=False))
            try:
                orchestrator.append(Orchestrator(store, self.settings()))
                started.set()
                orchestrator[0].run()
            except Exception as exc:  # reported below: the test's own thread must see it
                errors.append(exc)
            finally:
                started.set()
                store.close()

        thread = threading.Thread(target=serve, name="test-orchestrator")
        thread.start()
        self.addCleanup(thread.join, DEADLINE)
        started.wait(DEADLINE)
        self.addCleanup(lambda: orchestrator and orchestrator[0].request_stop())
        counter = orchestrator[0].store
        # Its own failed drain's commit wakes it, and it drains on every poll: many drains,
        # each of which would retry the event if it were due.
        wait_until(lambda: self.event(run_id)["attempts"] >= 1, message="the first failed drain")
        seen = counter.drains
        wait_until(lambda: counter.drains >= seen + 15, message="fifteen more drains")
        self.assertEqual(self.event(run_id)["attempts"], 1, "retried before its next attempt was due")
        first = self.event(run_id)["next_attempt_at"]
        self.clock.advance(first - self.clock.now)  # due now
        wait_until(lambda: self.event(run_id)["attempts"] >= 2, message="the second attempt, once due")
        event = self.event(run_id)
        self.assertEqual(event["attempts"], 2)
        self.assertAlmostEqual(event["next_attempt_at"] - first, 2 * INTERVAL, places=3)
        orchestrator[0].request_stop()
        thread.join(DEADLINE)
        self.assertEqual(errors, [])


class SQLiteOutboxBackoffTest(OutboxBackoffContract, TempDirTestCase):
    def _execute(self, sql: str, params: tuple):
        import sqlite3

        with sqlite3.connect(self.db) as conn:
            return conn.execute(sql, params).fetchall()

    def run_state(self, run_id: int):
        return self._execute("SELECT state, error FROM runs WHERE id = ?", (run_id,))[0]


class PostgresOutboxBackoffTest(PostgresDatabaseCase, OutboxBackoffContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""

    def _execute(self, sql: str, params: tuple):
        with self.caller_connection() as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else None

    def run_state(self, run_id: int):
        return self._execute("SELECT state, error FROM runs WHERE id = %s", (run_id,))[0]


if __name__ == "__main__":
    unittest.main()
