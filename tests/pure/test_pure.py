"""Table-driven tests of the pure parts: backoff, outcomes, config, SQL files, parsers.

No database and no processes; the docstrings' examples run in ``test_doctests``.
"""

from __future__ import annotations

import struct
import unittest
from types import SimpleNamespace

from rowfleet import config, liveness
from rowfleet.errors import ConfigError, UnknownTask
from rowfleet.job import CANCELLED, COMPLETED, FAILED, QUEUED, Cancel, JobSpec, Retry, backoff, decide_outcome
from rowfleet.sql import queries
from rowfleet.store import sqlite as sqlite_store
from rowfleet.store import wake

class BackoffTest(unittest.TestCase):
    def test_table(self):
        cases = [  # attempt, base, cap, rng -> delay
            (1, 2.0, 3600.0, 0.0, 1.0),
            (1, 2.0, 3600.0, 0.999, 1.999),
            (2, 2.0, 3600.0, 0.0, 2.0),
            (5, 2.0, 3600.0, 0.5, 24.0),
            (20, 2.0, 60.0, 0.0, 30.0),
            (10_000, 2.0, 60.0, 1.0, 60.0),  # huge attempt counts do not overflow
        ]
        for attempt, base, cap, rng, expected in cases:
            with self.subTest(attempt=attempt, rng=rng):
                self.assertAlmostEqual(backoff(attempt, base, cap, lambda: rng), expected, places=6)


class OutcomeTest(unittest.TestCase):
    def job(self, attempts=1, max_attempts=3):
        return SimpleNamespace(attempts=attempts, max_attempts=max_attempts)

    def test_table(self):
        cases = [  # attempts, max, result, raised -> state, delay
            (1, 3, 7, None, COMPLETED, 0.0),
            (1, 3, None, ValueError("x"), QUEUED, 1.0),
            (3, 3, None, ValueError("x"), FAILED, 0.0),
            (1, 3, None, Retry(delay=12), QUEUED, 12.0),
            (3, 3, None, Retry(delay=12), FAILED, 0.0),
            (1, 3, None, Cancel("stop"), CANCELLED, 0.0),
            (1, 3, None, UnknownTask("nope"), FAILED, 0.0),
            (1, 3, object(), None, FAILED, 0.0),  # an unserialisable result: retrying cannot help
        ]
        for attempts, max_attempts, result, raised, state, delay in cases:
            with self.subTest(raised=raised, result=result, attempts=attempts):
                outcome = decide_outcome(self.job(attempts, max_attempts), result=result, raised=raised,
                                         backoff_base=2.0, rng=lambda: 0.0)
                self.assertEqual((outcome.state, outcome.delay), (state, delay))

    def test_unserialisable_result_is_not_retried(self):
        outcome = decide_outcome(self.job(1, 3), result={1, 2})
        self.assertEqual(outcome.state, FAILED)
        self.assertIn("not JSON-serialisable", outcome.error)

    def test_retry_rejects_a_delay_that_is_no_time(self):
        for delay in (-1, float("inf"), float("nan"), 1e12, "5", True):
            with self.subTest(delay=delay), self.assertRaises(ValueError):
                Retry(delay=delay)


class JobSpecTest(unittest.TestCase):
    def test_invalid_specs(self):
        cases = [
            {"task": ""}, {"task": "a b"}, {"task": "t", "queue": ""}, {"task": "t", "priority": 1.5},
            {"task": "t", "priority": True}, {"task": "t", "max_attempts": 0}, {"task": "t", "delay": -1},
            {"task": "t", "key": ""}, {"task": "t", "args": {"x": {1, 2}}}, {"task": "t", "args": float("nan")},
        ]
        for fields in cases:
            with self.subTest(fields=fields), self.assertRaises(ConfigError):
                JobSpec(**fields)

    def test_task_registrations_follow_the_same_rules(self):
        from rowfleet import tasks

        for options in ({"queue": "*"}, {"queue": "a b"}, {"timeout": float("inf")}, {"timeout": 0},
                        {"name": "a b"}, {"name": "*"}):
            with self.subTest(options=options), self.assertRaises(ConfigError):
                tasks.task(lambda: None, **options)

    def test_valid_spec(self):
        spec = JobSpec(task="m:f", args=[1, {"a": None}], priority=-4, run_next=True, delay=2.5, key="k")
        self.assertEqual(spec.args_json(), '[1,{"a":null}]')


class ConfigTest(unittest.TestCase):
    def test_precedence_environment_then_overrides(self):
        env = {"ROWFLEET_LEASE": "30", "ROWFLEET_PROJECT": "alpha", "ROWFLEET_SYNCHRONOUS": "normal"}
        built = config.from_env(env, project="beta", renew=None)
        self.assertEqual((built.lease, built.project, built.renew, built.synchronous), (30.0, "beta", 5.0, "NORMAL"))

    def test_invalid_values(self):
        cases = [({"ROWFLEET_LEASE": "x"}, {}), ({}, {"lease": 0}), ({}, {"lease": 5, "renew": 5}),
                 ({}, {"synchronous": "OFF"}), ({}, {"db": " "}), ({}, {"poll": -1}), ({}, {"bogus": 1})]
        for env, overrides in cases:
            with self.subTest(env=env, overrides=overrides), self.assertRaises(ConfigError):
                config.from_env(env, **overrides)

    def test_silence_is_judged_by_the_workers_own_heartbeat(self):
        from rowfleet.liveness import silent

        for last_seen, heartbeat, now, expected in ((0, 4, 12, False), (0, 4, 12.5, True), (0, 40, 30, False),
                                                    (0, 40, 121, True), (100, 10, 100, False)):
            with self.subTest(heartbeat=heartbeat, age=now - last_seen):
                self.assertEqual(silent(last_seen, heartbeat, now), expected)


class SqlFilesTest(unittest.TestCase):
    def test_every_query_the_store_names_exists(self):
        import importlib
        import inspect
        import pkgutil
        import re

        import rowfleet.store

        # Every part of the store written once for both dialects (a dialect's own queries are its own).
        parts = [importlib.import_module(f"rowfleet.store.{info.name}")
                 for info in pkgutil.iter_modules(rowfleet.store.__path__) if info.name not in ("sqlite", "postgres")]
        source = "".join(inspect.getsource(part) for part in parts)
        # Queries are named by string literals: tx.one("name", ...) or passed on as recover's
        # requeue="name"; every literal the store uses as a name must exist, and every query must be used.
        named = set(re.findall(r'\.(?:one|all|run)\("([a-z_]+(?:\[[a-z_]+\])?)"', source))
        named |= set(re.findall(r'(?:requeue|fail)="([a-z_]+)"', source))
        # A claim statement is named through claim_forms, which picks its forms.
        named |= {form for name in re.findall(r'claim_forms\("([a-z_]+)"', source) for form in (name, name + "[routed]", name + "[newest]", name + "[warm]")}
        from rowfleet.store import sqlite as sqlite_store

        defined = set(queries.queries("sqlite"))
        self.assertEqual(named - defined, set())
        own = sqlite_store.SQLiteStore.own_queries
        self.assertEqual(defined - named - own - {"migrations_table"}, set(), "unused queries")
        dialect_source = inspect.getsource(sqlite_store)
        self.assertEqual({name for name in own if f'"{name}"' not in dialect_source}, set(),
                         "SQLite's own queries that its store never names")

    def test_both_dialects_define_the_same_queries(self):
        from rowfleet.store.postgres import PostgresStore  # imports no driver until used
        from rowfleet.store.sqlite import SQLiteStore

        self.assertEqual(set(queries.queries("sqlite")) - SQLiteStore.own_queries,
                         set(queries.queries("postgres")) - PostgresStore.own_queries)
        self.assertLessEqual(PostgresStore.own_queries, set(queries.queries("postgres")))
        self.assertLessEqual(SQLiteStore.own_queries, set(queries.queries("sqlite")))
        self.assertEqual([(m.version, m.name) for m in queries.migrations("sqlite")],
                         [(m.version, m.name) for m in queries.migrations("postgres")])

    def test_both_dialects_define_the_same_fragments_and_use_each(self):
        from rowfleet.store.postgres import PostgresStore

        sqlite, postgres = queries.fragments("sqlite"), queries.fragments("postgres")
        self.assertEqual(set(sqlite), set(postgres) - PostgresStore.own_fragments)
        self.assertLessEqual(PostgresStore.own_fragments, set(postgres))
        for dialect in ("sqlite", "postgres"):
            with self.subTest(dialect=dialect):
                text = "\n".join(queries._sql_files(dialect).values())
                unused = {name for name in queries.fragments(dialect) if "{{" + name.split("[")[0] + "}}" not in text}
                self.assertEqual(unused, set(), "fragments no query includes")
                self.assertFalse(any("{{" in sql for sql in queries.queries(dialect).values()))

    def test_both_dialects_split_their_queries_into_the_same_files(self):
        from rowfleet.store.postgres import PostgresStore
        from rowfleet.store.sqlite import SQLiteStore

        own = PostgresStore.own_queries | PostgresStore.own_fragments
        sqlite, postgres = queries.query_files("sqlite"), queries.query_files("postgres")
        self.assertEqual(set(sqlite), {"core", "jobs", "runs", "schedules", "fleet", "flow", "submissions",
                                       "telemetry"})
        self.assertEqual(set(sqlite), set(postgres))
        for entity in sqlite:
            with self.subTest(entity=entity):
                self.assertEqual(set(sqlite[entity]) - SQLiteStore.own_queries, set(postgres[entity]) - own)

    def test_a_query_defined_in_two_files_is_refused(self):
        with self.assertRaisesRegex(ValueError, "query 'claim' is defined in both jobs.sql and fleet.sql"):
            queries.merge_files({"jobs": "-- name: claim\nSELECT 1;", "fleet": "-- name: claim\nSELECT 2;"})

    def test_a_files_opening_comment_is_not_part_of_the_last_query_before_it(self):
        for dialect in ("sqlite", "postgres"):
            with self.subTest(dialect=dialect):
                trailing = {name for name, sql in queries.queries(dialect).items() if "rowfleet's queries" in sql}
                self.assertEqual(trailing, set())

    def test_fragments_are_not_queries(self):
        text = "-- fragment: due\nrun_at <= :now\n-- name: due_jobs\nSELECT id FROM jobs WHERE {{due}};"
        self.assertEqual(set(queries.parse_queries(text)), {"due_jobs"})
        for bad in ("-- name: a\nSELECT 1 WHERE {{missing}};",  # an unknown fragment
                    "-- fragment: a\nx = 1 -- why\n-- name: b\nSELECT 1 WHERE {{a}};",  # a comment would eat the line
                    "-- fragment: a\nx = 1\n-- fragment: a\nx = 2\n-- name: b\nSELECT {{a}};",
                    "-- fragment: a\nx = {{b}}\n-- fragment: b\n{{a}}\n-- name: c\nSELECT {{b}};",  # a cycle
                    "-- fragment: a\nx = {{missing}}\n-- name: b\nSELECT 1;"):  # unknown, even if unused
            with self.subTest(sql=bad), self.assertRaises(ValueError):
                queries.parse_queries(bad)

    def test_parse_queries_rejects_duplicates(self):
        with self.assertRaises(ValueError):
            queries.parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;")

    def test_migrations_are_numbered_from_one(self):
        for dialect in ("sqlite", "postgres"):
            versions = [m.version for m in queries.migrations(dialect)]
            self.assertEqual(versions, list(range(1, len(versions) + 1)))

    def test_split_script(self):
        self.assertEqual(sqlite_store.split_script("CREATE TABLE a (x TEXT DEFAULT ';');\n\nSELECT 1;\n-- end\n"),
                         ["CREATE TABLE a (x TEXT DEFAULT ';');", "SELECT 1;"])
        with self.assertRaises(ValueError):
            sqlite_store.split_script("CREATE TABLE a (x")


class WakeTest(unittest.TestCase):
    def test_inotify_events_of_several_records(self):
        raw = b"".join(struct.pack("iIII", wd, wake.IN_MODIFY, 0, len(name)) + name
                       for wd, name in ((1, b"jobs.db-wal\0"), (2, b"other\0\0\0\0"), (3, b"")))
        self.assertEqual(wake.inotify_events(raw), [(1, wake.IN_MODIFY, b"jobs.db-wal"),
                                                    (2, wake.IN_MODIFY, b"other"), (3, wake.IN_MODIFY, b"")])
        self.assertEqual(wake.inotify_events(raw[:10]), [])


class SupervisorTest(unittest.TestCase):
    def test_restart_delay_doubles_while_children_die_young(self):
        delay, seen = 0.0, []
        for _ in range(8):
            delay = liveness.restart_delay(delay, lived=1.0)
            seen.append(delay)
        self.assertEqual(seen, [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0])
        self.assertEqual(liveness.restart_delay(30.0, lived=liveness.HEALTHY_AFTER), 0.5)


if __name__ == "__main__":
    unittest.main()
