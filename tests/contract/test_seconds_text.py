"""How a wait in seconds reads in a log line (``terminal.seconds_text``): a sub-second wait
as itself, never as 0. The outbox's retry log is checked through ``RunStore._drain_failed``
on a real SQLite file."""

from __future__ import annotations

import contextlib
import sqlite3
import unittest

from rowfleet.terminal import seconds_text
from support import TempDirTestCase


class SecondsTextTest(unittest.TestCase):
    def test_a_wait_reads_with_one_decimal_and_never_as_nothing(self):
        for seconds, text in ((0.2, "0.2"), (0.4, "0.4"), (0.8, "0.8"), (0.31, "0.3"), (0.04, "0.1"),
                              (0.0, "0.1"), (1.6, "1.6"), (300.0, "300.0")):
            with self.subTest(seconds=seconds):
                self.assertEqual(seconds_text(seconds), text)


class DrainRetryLogTest(TempDirTestCase):
    def test_a_failed_drain_says_its_sub_second_wait(self):
        for interval, said in ((0.2, "tried again in 0.2 s"), (0.4, "tried again in 0.4 s"),
                               (5.0, "tried again in 5.0 s")):
            with self.subTest(interval=interval):
                store = self.open_store(interval=interval)
                # An outbox event of another program's plain SQL: the drain's failure path
                # needs only its row.
                with contextlib.closing(sqlite3.connect(self.db)) as conn, conn:
                    event_id = conn.execute("INSERT INTO dispatch_events (project, run_id, kind, created_at) "
                                            "VALUES ('', 3, 'job_finished', 0) RETURNING id").fetchone()[0]
                event = {"id": event_id, "run_id": 3, "attempts": 0, "kind": "job_finished", "node_id": None}
                with self.assertLogs("rowfleet.runs", "ERROR") as logs:
                    store._drain_failed(event, ValueError("boom"))
                self.assertIn(said, logs.output[0])


if __name__ == "__main__":
    unittest.main()
