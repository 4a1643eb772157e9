"""The orchestrator's ``run_once(now)``: its typed summary, as ``orchestrator --once`` prints
it, and pruning paced by the ``now`` it is given (time is moved, never waited for).
"""

from __future__ import annotations

import doctest
import json
import unittest

from rowfleet import orchestrator
from rowfleet.orchestrator import PRUNE_EVERY, Orchestrator, Sweep
from support import TempDirTestCase

PRINTED_KEYS = {"schema_version", "reclaimed", "failed", "cancelled", "unreadable_failed", "flagged_workers",
                "reconciled_runs",
                "dispatched", "dispatch_failures", "unplaceable", "placeable", "unplaceable_failed", "tallied",
                "samples_pruned", "pruned"}


def load_tests(loader, tests, pattern):
    tests.addTests(doctest.DocTestSuite(orchestrator))
    return tests


class CountingPrunes:
    """The real store, counting its prune passes."""

    def __init__(self, store) -> None:
        self._store, self.prunes = store, 0

    def prune(self, retention):
        self.prunes += 1
        return self._store.prune(retention)

    def __getattr__(self, name):
        return getattr(self._store, name)


class RunOnceTest(TempDirTestCase):
    def test_an_idle_sweep_is_all_zeros(self):
        store = self.open_store()
        self.assertEqual(Orchestrator(store, self.config()).run_once(), Sweep())

    def test_pruning_is_paced_by_the_now_it_is_given(self):
        store = CountingPrunes(self.open_store())
        sweeps = Orchestrator(store, self.config())
        for now, prunes in [(1000.0, 1), (1000.0 + PRUNE_EVERY - 1, 1), (1000.0 + PRUNE_EVERY, 2),
                            (1000.0 + PRUNE_EVERY + 1, 2)]:
            sweeps.run_once(now)
            self.assertEqual(store.prunes, prunes, f"at {now}")

    def test_once_prints_the_schema_version_and_the_summary(self):
        printed = json.loads(self.cli("orchestrator", "--once").stdout)
        self.assertEqual(set(printed), PRINTED_KEYS)
        self.assertEqual({key: printed[key] for key in PRINTED_KEYS - {"schema_version"}}, Sweep().to_dict())


if __name__ == "__main__":
    unittest.main()
