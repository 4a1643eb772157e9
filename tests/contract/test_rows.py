"""Row types against their tables, on both databases.

Owns two promises. Every row dataclass has a field per column of its table and no other
(bar the fields it names as no column), as the migrated database itself says (SQLite's
``PRAGMA table_info``, PostgreSQL's ``information_schema.columns``): a column added
without a field, or a field without a column, fails here. And a row type is built from
its row by column name: a row whose columns come in another order (a SELECT listing them
reversed, a dict in another order) builds the same value as ``SELECT *``, and a row that
lacks a column the type needs raises ``MissingColumn`` naming it.

The rows are read through the driver directly, with the store's own row type
(``sqlite3.Row``, psycopg's ``dict_row``). ``RowsContract`` runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import unittest
from typing import Any

from rowfleet import dag
from rowfleet.control import OFF, HARD, GpuSwitch, ModelControl, Switch
from rowfleet.job import Event, Job, JobSpec, MissingColumn
from rowfleet.store.fleet import GpuLease
from rowfleet.store.runs import Run
from rowfleet.store.submissions import Submission
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase

PROJECT = "rows"


@dataclasses.dataclass(frozen=True)
class RowType:
    """A row dataclass and its table: ``not_columns`` are its fields that no column holds,
    ``unread`` the columns it has no field for, each for a reason given where it is built."""

    type: type
    table: str
    order_by: str
    not_columns: frozenset[str] = frozenset()
    unread: frozenset[str] = frozenset()
    names_table: bool = False  # its from_row is told the table (a type read from two tables)

    def column_fields(self) -> set[str]:
        return {field.name for field in dataclasses.fields(self.type)} - self.not_columns

    def build(self, row: Any) -> Any:
        return self.type.from_row(row, self.table) if self.names_table else self.type.from_row(row)


JOBS = RowType(Job, "jobs", "id", not_columns=frozenset({"unreadable"}))  # what could not be decoded
ROW_TYPES = (
    JOBS,
    RowType(Event, "job_events", "id"),
    RowType(Switch, "worker_controls", "project, host, queue"),
    # The switch log's rows are the switches as written; its id only orders them.
    RowType(Switch, "worker_control_log", "id", unread=frozenset({"id"}), names_table=True),
    # A run's view holds the nodes walked from its definition, not the definition's JSON; what of
    # its rows could not be decoded is no column either.
    RowType(Run, "runs", "id", not_columns=frozenset({"nodes", "unreadable"}), unread=frozenset({"definition"})),
    RowType(GpuLease, "gpu_leases", "host, gpu_index"),
    RowType(ModelControl, "model_controls", "host, model, action"),
    RowType(GpuSwitch, "gpu_switches", "host, gpu_index"),
    # What of its row could not be decoded is no column.
    RowType(Submission, "submissions", "id", not_columns=frozenset({"unreadable"})),
)
# Tables with no row dataclass: their rows are handed on as plain dicts (``dict(row)``:
# workers, dispatch_events, schedule_slots) or read a column or two by name where they are
# used (run_nodes, schedules, orchestrators), so there are no fields to tie to them.
# Telemetry's tables too: a sample's readings are decoded where they are read
# (store.telemetry.sample_of), the samplers' leases and the tallies are read as dicts.
DICT_TABLES = frozenset({"workers", "run_nodes", "dispatch_events", "schedules", "schedule_slots", "orchestrators",
                         "model_stats", "host_samples", "host_samplers", "job_tallies",
                         "flow_keys",
                         "flow_limits"})  # read by flow.Limit.from_row, whose rates pair two columns each
BOOKKEEPING = frozenset({"schema_migrations"})  # the migrations' own record

FLOW = dag.parse_workflow({"name": "rows", "nodes": [{"id": "fetch", "task": "rows:fetch"},
                                                     {"id": "use", "task": "rows:use", "depends_on": ["fetch"]}]})


class RowsContract:
    """Subclasses provide ``columns(table)`` (in the table's order), ``tables()`` and
    ``select(sql, params)``: rows of the store's own row type, from a connection of the test's own."""

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()
        # Values unlike their neighbours', so that a value read from the wrong column shows.
        self.job = self.store.enqueue(JobSpec("rows.task", {"a": [1, 2]}, queue="rowsq", project=PROJECT,
                                              priority=7, key="once", max_attempts=3, timeout=45.5, model="llm"))
        self.store.record_event(self.job.id, "note", said="hello")
        self.store.set_switch(PROJECT, "box", "gpu", OFF, HARD, changed_by="ops")
        run_id = self.store.start_run(FLOW, {"n": 2}, PROJECT)
        self.store.enqueue_submission(PROJECT, run_id, "fetch", {"answer": [3]}, by="ops")
        self.store.acquire_gpu("box", 1, "llm", "box:7", 60.0)
        self.store.set_model_control("box", "llm", "pin", changed_by="ops")
        self.store.record_gpu_health("box", 2, "row remapping failed")

    def rows(self, row_type: RowType, columns: list[str] | None = None) -> list[Any]:
        """The rows of ``row_type``'s table, with ``columns`` in that order (None: ``SELECT *``)."""
        listed = "*" if columns is None else ", ".join(f'"{name}"' for name in columns)  # the database's names
        return self.select(f"SELECT {listed} FROM {row_type.table} ORDER BY {row_type.order_by}")

    def built(self, row_type: RowType, columns: list[str] | None = None) -> list[Any]:
        return [row_type.build(row) for row in self.rows(row_type, columns)]

    def test_every_table_has_a_row_type_or_is_read_as_dicts(self):
        typed = {row_type.table for row_type in ROW_TYPES}
        self.assertEqual(self.tables(), typed | DICT_TABLES | BOOKKEEPING)

    def test_each_row_type_has_a_field_for_each_column_of_its_table_and_no_other(self):
        for row_type in ROW_TYPES:
            with self.subTest(row_type.type.__name__):
                columns = set(self.columns(row_type.table))
                self.assertLessEqual(row_type.unread, columns, "a column said to be unread is gone")
                self.assertEqual(row_type.column_fields(), columns - row_type.unread)

    def test_a_row_type_is_the_same_whatever_order_its_query_lists_the_columns(self):
        for row_type in ROW_TYPES:
            with self.subTest(row_type.type.__name__):
                columns = self.columns(row_type.table)
                from_star = self.built(row_type)
                self.assertTrue(from_star, f"the test wrote no row of {row_type.table}")
                self.assertEqual(self.built(row_type, columns[::-1]), from_star)
                reordered = [{name: row[name] for name in reversed(list(row.keys()))}
                             for row in self.rows(row_type)]
                self.assertEqual([row_type.build(row) for row in reordered], from_star)

    def test_a_job_read_with_its_columns_reversed_is_the_job_enqueued(self):
        job, = [job for job in self.built(JOBS, self.columns("jobs")[::-1]) if job.id == self.job.id]
        self.assertEqual(job, self.job)
        self.assertIsNone(job.unreadable)
        self.assertEqual((job.args, job.priority, job.timeout, job.required_model), ({"a": [1, 2]}, 7, 45.5, "llm"))

    def test_a_row_lacking_a_column_its_type_needs_raises_naming_the_column(self):
        for row_type in ROW_TYPES:
            columns = self.columns(row_type.table)
            for missing in sorted(row_type.column_fields()):
                with self.subTest(row_type.type.__name__, missing=missing):
                    rows = self.rows(row_type, [name for name in columns if name != missing])
                    with self.assertRaises(MissingColumn) as raised:
                        row_type.build(rows[0])
                    self.assertIn(f"a row of {row_type.table} lacks column {missing}:", str(raised.exception))

    def test_a_column_a_row_type_leaves_unread_may_be_left_out(self):
        for row_type in ROW_TYPES:
            if row_type.unread:
                with self.subTest(row_type.type.__name__):
                    kept = [name for name in self.columns(row_type.table) if name not in row_type.unread]
                    self.assertEqual(self.built(row_type, kept), self.built(row_type))


class SQLiteRowsTest(RowsContract, TempDirTestCase):
    def select(self, sql: str, params: tuple = ()) -> list[Any]:
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            conn.row_factory = sqlite3.Row  # as the store reads
            return conn.execute(sql, params).fetchall()

    def columns(self, table: str) -> list[str]:
        return [row["name"] for row in self.select(f"PRAGMA table_info({table})")]

    def tables(self) -> set[str]:
        return {row["name"] for row in self.select(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}


class PostgresRowsTest(PostgresDatabaseCase, RowsContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""

    def select(self, sql: str, params: tuple = ()) -> list[Any]:
        from rowfleet.store.postgres import connect  # the store's own connection: dict rows

        with contextlib.closing(connect(self.url)) as conn:
            return conn.execute(sql, params or None).fetchall()

    def columns(self, table: str) -> list[str]:
        return [row["column_name"] for row in self.select(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = %s ORDER BY ordinal_position", (table,))]

    def tables(self) -> set[str]:
        return {row["table_name"] for row in self.select(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")}


class RowByNameTest(unittest.TestCase):
    """The same rules without a database: rows as dicts, and rows without names."""

    ROW = {"id": 9, "job_id": 4, "at": 2.5, "kind": "note", "detail": '{"x": 1}'}

    def test_an_event_from_a_dict_in_another_order_is_the_same(self):
        self.assertEqual(Event.from_row(dict(reversed(list(self.ROW.items())))), Event.from_row(self.ROW))
        self.assertEqual(Event.from_row(self.ROW), Event(9, 4, 2.5, "note", {"x": 1}))

    def test_a_row_without_column_names_is_refused(self):
        for row_type, row in ((Job, tuple(range(34))), (Event, tuple(self.ROW.values())),
                              (Switch, ("", "box", "gpu", OFF, HARD, "ops", 1.0))):
            with self.subTest(row_type.__name__), self.assertRaisesRegex(TypeError, "keyed by column name"):
                row_type.from_row(row)

    def test_columns_beyond_the_type_are_ignored(self):
        self.assertEqual(Event.from_row({**self.ROW, "finished": True}), Event.from_row(self.ROW))


if __name__ == "__main__":
    unittest.main()
