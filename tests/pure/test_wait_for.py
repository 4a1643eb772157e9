"""``Store.wait_for``'s rule for a wake-up that comes before the commit that raised it is
visible: on SQLite the WAL is written before its index, and the file watch folds the writes of
a fast job's claim and finish into one event. The store and the waiter are stand-ins that
play that order of events; the process tests and the bench's ``wait`` rows run the real thing."""

from __future__ import annotations

import unittest
from types import SimpleNamespace

from rowfleet.store.jobs import JobStore


class OneWakeUp:
    """A waiter whose only event has already been read: one wake-up, then silence until the
    timeout (the poll) ends each later wait."""

    settle_window = 0.05

    def __init__(self) -> None:
        self.waits = 0

    def wait(self, timeout: float) -> bool:
        self.waits += 1
        return self.waits == 1  # a later wait would sleep to its timeout: the poll

    def close(self) -> None:
        pass


class WaitForTest(unittest.TestCase):
    def test_an_end_not_yet_visible_at_the_wake_up_is_still_heard_before_the_poll(self):
        # queued at the first look; running at the look right after the wake-up (the claim is
        # visible, the finish's commit not yet); completed from the look after that.
        states = iter(["queued", "running"])
        reads = []

        def get_job(job_id, project):
            reads.append(job_id)
            return SimpleNamespace(id=job_id, state=next(states, "completed"))

        waiter = OneWakeUp()
        store = SimpleNamespace(config=SimpleNamespace(poll=30.0), get_job=get_job, changed=lambda: True,
                                job_waiter=lambda job_id, project: waiter)
        ended = JobStore.wait_for(store, 7, "", timeout=60.0)
        self.assertEqual(ended.state, "completed")
        self.assertEqual(waiter.waits, 1, "the end was left to a later wait: heard only at the poll")
        self.assertGreaterEqual(len(reads), 3)


if __name__ == "__main__":
    unittest.main()
