"""Writes on a caller's own connection (``conn=``), against a real database.

``CallerTransactionContract`` is backend-neutral and runs on SQLite and PostgreSQL, each
with the ways an application may hold its connection: a transaction opened for it by the
driver (Python's legacy ``sqlite3`` control, psycopg without autocommit), one it opened
itself on an autocommit connection, and an autocommit connection with none open. A failure
must leave the caller's own work intact and committable and nothing of rowfleet's behind;
success commits (or rolls back) with the caller.
"""

from __future__ import annotations

import sqlite3
import unittest
from unittest import mock

from rowfleet import dag
from rowfleet.errors import ConfigError, RowfleetError
from rowfleet.job import JobSpec
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase

# Every table a run or a job writes to; each must stay as it was after a failed write.
OURS = ("runs", "run_nodes", "jobs", "job_events", "dispatch_events")

# Node "b"'s reference does not resolve: the start has written the run and its nodes, and
# failed the run, by the time it raises.
UNSTARTABLE = {"name": "unstartable", "nodes": [
    {"id": "a", "task": "caller.noop"},
    {"id": "b", "task": "caller.noop", "args": {"$from": "$args.n"}},
]}
STARTABLE = {"name": "startable", "nodes": [{"id": "a", "task": "caller.noop"}]}


class CallerTransactionContract:
    """Subclasses provide ``config()``, ``caller_modes()`` (one fresh connection per way of
    holding it, as ``(mode, conn, in_transaction)``: whether the caller's statements wait for
    its commit) and ``open_transaction(conn)``."""

    def setUp(self) -> None:
        super().setUp()
        from rowfleet.store import open_store

        self.store = open_store(self.config(), create=True)
        self.addCleanup(self.store.close)
        self.store.migrate()
        with self.connection() as conn:
            conn.execute("CREATE TABLE orders (item text)")
            conn.commit()

    def connection(self):
        """A connection of the caller's, closed at cleanup."""
        conn = self.caller_connection()
        self.addCleanup(conn.close)
        return conn

    def modes(self) -> list:
        modes = list(self.caller_modes())
        for mode, conn, in_transaction in modes:
            self.addCleanup(conn.close)
        return modes

    def order(self, conn, item: str) -> None:
        """The caller's own work: a row of its own table."""
        conn.execute(f"INSERT INTO orders (item) VALUES ('{item}')")  # the test's fixed names only

    def orders(self) -> list[str]:
        with self.connection() as conn:
            return sorted(row[0] for row in conn.execute("SELECT item FROM orders").fetchall())

    def counts(self) -> dict[str, int]:
        """How many rows each of rowfleet's tables holds, as committed."""
        with self.connection() as conn:
            return {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in OURS}

    def refused_after(self, method: str):
        """Make the store's ``method`` fail after its write, as a write that breaks half-way
        does: a statement the database refuses (a duplicate key), on the same connection."""
        real = getattr(self.store, method)

        def failing(tx, *args, **kwargs):
            real(tx, *args, **kwargs)
            tx.run("migration_record", version=1, name="refused")

        return mock.patch.object(self.store, method, failing)

    def assert_failure_leaves_only_the_callers_work(self, write) -> None:
        for mode, conn, in_transaction in self.modes():
            with self.subTest(mode=mode):
                before = self.counts()
                self.order(conn, f"{mode}: before")
                with self.assertRaises(RowfleetError) as caught:
                    write(conn, mode)
                self.order(conn, f"{mode}: after")  # the caller's transaction goes on
                conn.commit()
                self.assertEqual(self.counts(), before, caught.exception)
                self.assertIn(f"{mode}: before", self.orders())
                self.assertIn(f"{mode}: after", self.orders())

    # --- a failure leaves the caller's work, and nothing of ours -----------------------

    def test_a_run_that_cannot_start_leaves_nothing_behind(self):
        flow = dag.parse_workflow(UNSTARTABLE)
        self.assert_failure_leaves_only_the_callers_work(
            lambda conn, mode: self.store.start_run(flow, None, "", conn=conn))
        with self.assertRaisesRegex(ConfigError, "cannot start"):
            self.store.start_run(flow, None, "", conn=self.connection())

    def test_an_enqueue_failing_after_its_write_leaves_nothing_behind(self):
        with self.refused_after("_enqueue"):  # keyed: a look-up, then the insert
            self.assert_failure_leaves_only_the_callers_work(
                lambda conn, mode: self.store.enqueue(JobSpec(task="caller.noop", key=mode), conn=conn))

    def test_an_enqueue_many_failing_after_its_write_leaves_nothing_behind(self):
        spec = JobSpec(task="caller.noop")
        with self.refused_after("_enqueue_many"):
            self.assert_failure_leaves_only_the_callers_work(
                lambda conn, mode: self.store.enqueue_many(spec, [[1], [2], [3]], conn=conn))

    def test_a_failure_with_nothing_of_the_callers_pending_leaves_no_transaction_open(self):
        flow = dag.parse_workflow(UNSTARTABLE)
        for mode, conn, in_transaction in self.modes():
            if self.open_transaction(conn):
                continue  # the caller's own BEGIN: its transaction, kept open for it
            with self.subTest(mode=mode):
                with self.assertRaises(ConfigError):
                    self.store.start_run(flow, None, "", conn=conn)
                # Nothing in it was the caller's, so no transaction of ours is left holding
                # the write lock (SQLite) or a snapshot (PostgreSQL) for the caller to end.
                self.assertFalse(self.open_transaction(conn))
                self.assertEqual(self.counts(), dict.fromkeys(OURS, 0))

    # --- success commits, or rolls back, with the caller --------------------------------

    def write_all(self, conn) -> None:
        self.store.enqueue(JobSpec(task="caller.noop", args=[0]), conn=conn)
        self.store.enqueue_many(JobSpec(task="caller.noop"), [[1], [2]], conn=conn)
        self.store.start_run(dag.parse_workflow(STARTABLE), None, "", conn=conn)

    def test_writes_commit_or_roll_back_with_the_caller(self):
        for mode, conn, in_transaction in self.modes():
            with self.subTest(mode=mode):
                self.assert_written_with_the_caller(mode, conn, in_transaction)

    def assert_written_with_the_caller(self, mode, conn, in_transaction) -> None:
        before = self.counts()
        self.order(conn, f"{mode}: lost")
        self.write_all(conn)
        if not in_transaction:  # every statement commits as it runs, and so do ours
            self.assertEqual(self.counts()["jobs"], before["jobs"] + 4)
            self.assertFalse(self.open_transaction(conn))
            return
        self.assertEqual(self.counts(), before, "not visible before the caller commits")
        conn.rollback()
        self.assertEqual(self.counts(), before)
        self.assertNotIn(f"{mode}: lost", self.orders())
        self.begin(conn)
        self.order(conn, f"{mode}: kept")
        self.write_all(conn)
        conn.commit()
        self.assertIn(f"{mode}: kept", self.orders())
        after = self.counts()
        self.assertEqual((after["jobs"], after["runs"]), (before["jobs"] + 4, before["runs"] + 1))


class SQLiteCallerTransactionTest(CallerTransactionContract, TempDirTestCase):
    def caller_connection(self):
        return sqlite3.connect(self.db)

    def caller_modes(self):
        yield "legacy transaction control", sqlite3.connect(self.db), True
        explicit = sqlite3.connect(self.db, isolation_level=None)
        explicit.execute("BEGIN")
        yield "autocommit, in BEGIN", explicit, True
        yield "autocommit", sqlite3.connect(self.db, isolation_level=None), False

    def begin(self, conn) -> None:
        if conn.isolation_level is None:
            conn.execute("BEGIN")

    def open_transaction(self, conn) -> bool:
        return conn.in_transaction


class PostgresCallerTransactionTest(PostgresDatabaseCase, CallerTransactionContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""

    def caller_modes(self):
        from rowfleet.store.postgres import driver

        yield "implicit transactions", driver().connect(self.url), True
        explicit = driver().connect(self.url, autocommit=True)
        explicit.execute("BEGIN")
        yield "autocommit, in BEGIN", explicit, True
        yield "autocommit", driver().connect(self.url, autocommit=True), False

    def begin(self, conn) -> None:
        if conn.autocommit:
            conn.execute("BEGIN")

    def open_transaction(self, conn) -> bool:
        from rowfleet.store.postgres import driver  # lazily: this is not one of the *pg* files

        return conn.info.transaction_status != driver().pq.TransactionStatus.IDLE


if __name__ == "__main__":
    unittest.main()
