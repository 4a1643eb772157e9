"""How a wait in seconds reads in a log line (``terminal.seconds_text``): a sub-second wait
as itself, never as 0. The outbox's retry log is checked through ``RunStore._drain_failed``
with a stand-in transaction, so no database is opened."""

from __future__ import annotations

import contextlib
import types
import unittest

from rowfleet.store.runs import RunStore
from rowfleet.terminal import seconds_text


class SecondsTextTest(unittest.TestCase):
    def test_a_wait_reads_with_one_decimal_and_never_as_nothing(self):
        for seconds, text in ((0.2, "0.2"), (0.4, "0.4"), (0.8, "0.8"), (0.31, "0.3"), (0.04, "0.1"),
                              (0.0, "0.1"), (1.6, "1.6"), (300.0, "300.0")):
            with self.subTest(seconds=seconds):
                self.assertEqual(seconds_text(seconds), text)


class _FailedTx:
    """The transaction of a failed drain: the event has failed once, far from set aside."""

    def one(self, name: str, **params):
        return {"attempts": 1}


class DrainRetryLogTest(unittest.TestCase):
    def test_a_failed_drain_says_its_sub_second_wait(self):
        for interval, said in ((0.2, "tried again in 0.2 s"), (0.4, "tried again in 0.4 s"),
                               (5.0, "tried again in 5.0 s")):
            store = types.SimpleNamespace(config=types.SimpleNamespace(interval=interval),
                                          transaction=lambda: contextlib.nullcontext(_FailedTx()))
            with self.subTest(interval=interval), self.assertLogs("rowfleet.runs", "ERROR") as logs:
                RunStore._drain_failed(store, {"id": 7, "run_id": 3, "attempts": 0}, ValueError("boom"))
            self.assertIn(said, logs.output[0])


if __name__ == "__main__":
    unittest.main()
