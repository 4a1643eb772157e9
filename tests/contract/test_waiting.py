"""How the processes wait (``rowfleet.store.waiting``): for a store to open and be ready, and for a
wake-up's commit to show. With stand-in stores for each rule, then a contract against a real
database on SQLite and PostgreSQL: a schema made while we wait is found, and a stop ends it.
"""

from __future__ import annotations

import logging
import threading
import unittest

from rowfleet.errors import DatabaseBroken, DatabaseUnreachable, SchemaMissing
from rowfleet.store import open_store
from rowfleet.store.waiting import open_when_ready, settle
from pg_harness import PostgresDatabaseCase
from support import DEADLINE, TempDirTestCase, wait_until

log = logging.getLogger("rowfleet.test")


class FakeStore:
    def __init__(self, number: int) -> None:
        self.number, self.closed = number, False

    def close(self) -> None:
        self.closed = True


class Opening:
    """Stands in for connect() and ready(): raises the next of ``failures`` at its step."""

    def __init__(self, connect_failures=(), ready_failures=()) -> None:
        self.connect_failures, self.ready_failures = list(connect_failures), list(ready_failures)
        self.opened: list[FakeStore] = []

    def connect(self) -> FakeStore:
        if self.connect_failures:
            raise self.connect_failures.pop(0)
        self.opened.append(FakeStore(len(self.opened) + 1))
        return self.opened[-1]

    def ready(self, store: FakeStore) -> None:
        if self.ready_failures:
            raise self.ready_failures.pop(0)


class OpenWhenReadyTest(unittest.TestCase):
    def test_transient_failures_are_waited_out_and_failed_stores_closed(self):
        opening = Opening([DatabaseUnreachable("down")], [SchemaMissing("no schema"), SchemaMissing("no schema")])
        with self.assertLogs(log, "WARNING") as logged:
            store = open_when_ready(opening.connect, threading.Event(), 0, log, ready=opening.ready)
        self.assertEqual(store.number, 3)
        self.assertEqual([s.closed for s in opening.opened], [True, True, False])
        self.assertEqual(logged.output, ["WARNING:rowfleet.test:waiting for the database: down"], "said once")

    def test_announce_hears_every_failed_try(self):
        heard = []
        opening = Opening([DatabaseUnreachable("down"), DatabaseUnreachable("still down")])
        store = open_when_ready(opening.connect, threading.Event(), 0, log, announce=lambda exc: heard.append(str(exc)))
        self.assertEqual((store.number, heard), (1, ["down", "still down"]))

    def test_what_waiting_cannot_repair_is_raised_and_its_store_closed(self):
        opening = Opening(ready_failures=[DatabaseBroken("not a database")])
        with self.assertRaises(DatabaseBroken):
            open_when_ready(opening.connect, threading.Event(), 0, log, ready=opening.ready)
        self.assertTrue(opening.opened[0].closed)
        narrow = Opening([SchemaMissing("no schema")])
        with self.assertRaises(SchemaMissing):  # not among what this caller waits for
            open_when_ready(narrow.connect, threading.Event(), 0, log, transient=(DatabaseUnreachable,))

    def test_a_stop_ends_the_wait_with_none(self):
        stop = threading.Event()
        stop.set()
        opening = Opening()
        self.assertIsNone(open_when_ready(opening.connect, stop, 0, log))
        self.assertEqual(opening.opened, [], "a stopped caller opens nothing")
        stopping = Opening([DatabaseUnreachable("down")] * 1000)
        stop = threading.Event()
        found = []
        waiter = threading.Thread(target=lambda: found.append(
            open_when_ready(stopping.connect, stop, 0.01, log, announce=lambda exc: None)))
        waiter.start()
        wait_until(lambda: len(stopping.connect_failures) < 1000, message="a first try")
        stop.set()
        waiter.join(DEADLINE)
        self.assertEqual(found, [None])


class SettleTest(unittest.TestCase):
    def test_looks_until_true_or_the_window_passes(self):
        looks = []
        answers = iter([False, False, True, True])
        self.assertTrue(settle(lambda: looks.append(1) or next(answers), DEADLINE, threading.Event(), 0.0001, 0.001))
        self.assertEqual(len(looks), 3)
        looks.clear()
        self.assertFalse(settle(lambda: looks.append(1) or False, 0.0, threading.Event(), 0.0001, 0.001))
        self.assertEqual(len(looks), 1, "one look, even with no window")

    def test_a_stop_ends_it_without_a_look(self):
        stop = threading.Event()
        stop.set()
        looks = []
        self.assertFalse(settle(lambda: looks.append(1) or True, DEADLINE, stop, 0.0001, 0.001))
        self.assertEqual(looks, [])


class WaitForSchemaContract:
    """A worker's wait (the schema required) against a real database."""

    def open_ready(self, stop: threading.Event) -> list:
        """Wait in a thread (a SQLite connection stays in the thread that made it); what it
        found: the schema version of the store it opened, or None."""
        found: list = []

        def wait() -> None:
            store = open_when_ready(lambda: open_store(self.config()), stop, 0.01, log,
                                    ready=lambda store: store.require_schema())
            found.append(None if store is None else store.schema_version())
            if store is not None:
                store.close()

        thread = threading.Thread(target=wait)
        with self.assertLogs(log, "WARNING") as logged:
            thread.start()
            wait_until(lambda: logged.output, message="the wait to begin")
        self.addCleanup(thread.join, DEADLINE)
        self.thread = thread
        self.assertIn("waiting for the database", logged.output[0])
        return found

    def test_a_schema_made_while_waiting_is_found(self):
        found = self.open_ready(threading.Event())
        with open_store(self.config(), create=True) as maker:
            version = maker.migrate()
        self.thread.join(DEADLINE)
        self.assertEqual(found, [version])

    def test_a_stop_ends_the_wait(self):
        stop = threading.Event()
        found = self.open_ready(stop)
        stop.set()
        self.thread.join(DEADLINE)
        self.assertEqual(found, [None])


class SQLiteWaitForSchemaTest(WaitForSchemaContract, TempDirTestCase):
    pass


class PostgresWaitForSchemaTest(PostgresDatabaseCase, WaitForSchemaContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""


if __name__ == "__main__":
    unittest.main()
