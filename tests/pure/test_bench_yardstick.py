"""The bench's yardstick (tools/bench/yardstick.py): one minimal job table, its SQL written
once per dialect under the same names and parameters, and its loop doing what the
baselines claim it does.

The dialects' texts are checked as text; the SQLite loop runs on an in-memory database of
the bench's own (no file, nothing of rowfleet's). Loads the module by file path (tools/ is
not a package) and imports nothing from rowfleet.
"""

from __future__ import annotations

import doctest
import importlib.util
import re
import sys
import unittest
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def _load_yardstick():
    spec = importlib.util.spec_from_file_location("bench_yardstick", REPO_ROOT / "tools" / "bench" / "yardstick.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


yardstick = _load_yardstick()
POSTGRES_ONLY = {"turn"}  # SQLite has no UPDATE inside a WITH


def load_tests(loader, tests, ignore):
    tests.addTests(doctest.DocTestSuite(yardstick))
    return tests


def parameters(dialect: str, sql: str) -> set[str]:
    """The named parameters of a statement: ``:name`` in SQLite, ``%(name)s`` in psycopg."""
    pattern = r"(?<!:):([a-z_]+)" if dialect == "sqlite" else r"%\(([a-z_]+)\)s"
    return set(re.findall(pattern, sql))


def statements(dialect: str) -> dict[str, str]:
    """Every query of a dialect but the schema, by name."""
    texts = yardstick.SQLITE if dialect == "sqlite" else yardstick.POSTGRES
    return {name: sql for name, sql in texts.items() if name != "schema"}


class DialectsTest(unittest.TestCase):
    def test_both_dialects_define_the_same_queries(self):
        self.assertEqual(set(yardstick.SQLITE), set(yardstick.POSTGRES) - POSTGRES_ONLY)
        self.assertLessEqual({"schema", "insert", "load", "claim", "complete", "requeue"}, set(yardstick.SQLITE))

    def test_each_query_takes_the_same_parameters_in_both_dialects(self):
        sqlite, postgres = statements("sqlite"), statements("postgres")
        for name, sql in sqlite.items():
            with self.subTest(name):
                found = parameters("sqlite", sql)
                self.assertEqual(found, parameters("postgres", postgres[name]))
                self.assertNotIn("%(", sql)
                self.assertNotRegex(postgres[name], r"(?<!:):[a-z_]")  # no SQLite marker left behind
        self.assertEqual(parameters("sqlite", sqlite["claim"]), {"now", "holder"})

    def test_the_table_has_one_index_on_the_queued_rows_alone(self):
        for texts in (yardstick.SQLITE, yardstick.POSTGRES):
            schema = " ".join(" ".join(texts["schema"]).split())
            with self.subTest(schema=schema[:40]):
                self.assertEqual(schema.count("CREATE INDEX"), 1)
                self.assertIn("ON bare_jobs (id) WHERE state = 'queued'", schema)
                self.assertNotIn("TRIGGER", schema.upper())

    def test_only_the_postgres_claims_skip_locked_rows(self):
        for name in ("claim", "turn"):
            self.assertIn("FOR UPDATE SKIP LOCKED", yardstick.POSTGRES[name])
        self.assertNotIn("FOR UPDATE", yardstick.SQLITE["claim"])


class SqliteLoopTest(unittest.TestCase):
    def setUp(self):
        self.conn = yardstick.connect(":memory:", "FULL")
        self.addCleanup(self.conn.close)

    def states(self) -> dict[str, int]:
        return dict(self.conn.execute("SELECT state, count(*) FROM bare_jobs GROUP BY state"))

    def test_the_claim_takes_the_oldest_queued_job_and_leases_it(self):
        yardstick.enqueue_batch(self.conn, ["a", "b"])
        yardstick.enqueue_one(self.conn, "c")
        self.assertEqual(yardstick.claim_one(self.conn, "me"), (1, "a"))
        holder, lease, started = self.conn.execute(
            "SELECT claimed_by, lease_expires_at, started_at FROM bare_jobs WHERE id = 1").fetchone()
        self.assertEqual((holder, round(lease - started)), ("me", 600))
        self.assertEqual(yardstick.claim_one(self.conn, "me"), (2, "b"))
        self.assertEqual(self.states(), {"running": 2, "queued": 1})

    def test_the_drain_runs_each_job_once_and_stores_its_result(self):
        yardstick.enqueue_batch(self.conn, ["x"] * 5)
        calls = []
        yardstick.drain(self.conn, lambda: calls.append(1))
        self.assertEqual(len(calls), 5)
        self.assertEqual(self.states(), {"completed": 5})
        self.assertEqual({r for (r,) in self.conn.execute("SELECT result FROM bare_jobs")}, {"null"})
        self.assertIsNone(yardstick.claim_one(self.conn, "me"))
        self.assertFalse(self.conn.in_transaction)

    def test_the_load_makes_as_many_queued_rows_as_asked(self):
        self.conn.execute(yardstick.SQLITE["load"], {"rows": 1000, "payload": "null"})
        self.assertEqual(self.states(), {"queued": 1000})

    def test_the_requeue_puts_claimed_jobs_back_and_keeps_the_finished(self):
        yardstick.enqueue_batch(self.conn, ["a", "b", "c"])
        yardstick.complete(self.conn, yardstick.claim_one(self.conn, "me")[0], None)
        yardstick.claim_one(self.conn, "me")
        self.conn.execute(yardstick.SQLITE["requeue"])
        self.assertEqual(self.states(), {"completed": 1, "queued": 2})
        self.assertEqual(self.conn.execute("SELECT count(*) FROM bare_jobs WHERE claimed_by IS NOT NULL "
                                           "AND state = 'queued'").fetchone()[0], 0)

    def test_the_claim_searches_the_partial_index(self):
        plan = " ".join(row[3] for row in self.conn.execute("EXPLAIN QUERY PLAN " + yardstick.SQLITE["claim"],
                                                             {"now": 0.0, "holder": "me"}))
        self.assertIn("bare_queued", plan)


if __name__ == "__main__":
    unittest.main()
