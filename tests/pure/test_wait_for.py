"""``Store.wait_for``'s rule for a wake-up that comes before the commit that raised it is
visible: on SQLite the WAL is written before its index, and the file watch folds the writes of
a fast job's claim and finish into one event. The store and the waiter are stand-ins that
play that order of events; the process tests and the bench's ``wait`` rows run the real thing."""

from __future__ import annotations

import time
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
        store._end_in_sight = lambda *args: JobStore._end_in_sight(store, *args)
        ended = JobStore.wait_for(store, 7, "", timeout=60.0)
        self.assertEqual(ended.state, "completed")
        self.assertLessEqual(waiter.waits, 1, "the end was left to a later wait: heard only at the poll")
        self.assertGreaterEqual(len(reads), 3)


    def test_an_end_that_becomes_visible_long_after_its_event_is_still_heard(self):
        # On a loaded box the finish's commit becomes visible well after the event its WAL
        # write raised (here 0.1 s, past the 30 ms a worker settles for), and no other event
        # follows: only the commit's visibility says when to look.
        waiter = OneWakeUp()
        visible_at = time.monotonic() + 0.1

        def state() -> str:
            if not waiter.waits:
                return "queued"
            return "completed" if time.monotonic() >= visible_at else "running"

        seen = []

        def changed() -> bool:  # data_version moves once, when the commit becomes visible
            moved = time.monotonic() >= visible_at and not seen
            if moved:
                seen.append(True)
            return moved

        store = SimpleNamespace(config=SimpleNamespace(poll=30.0), changed=changed,
                                get_job=lambda job_id, project: SimpleNamespace(id=job_id, state=state()),
                                job_waiter=lambda job_id, project: waiter)
        store._end_in_sight = lambda *args: JobStore._end_in_sight(store, *args)
        self.assertEqual(JobStore.wait_for(store, 7, "", timeout=60.0).state, "completed")
        self.assertEqual(waiter.waits, 1, "the end was left to a later wait: heard only at the poll")


    def test_an_end_written_before_the_watch_began_is_heard_without_an_event(self):
        # The finish was written before the waiter's watch began and becomes visible only
        # after its first look: no event will ever come for it.
        waiter = OneWakeUp()
        waiter.waits = 1  # every wait from here sleeps to its timeout: the poll
        visible_at = time.monotonic() + 0.1
        seen = []

        def changed() -> bool:
            moved = time.monotonic() >= visible_at and not seen
            if moved:
                seen.append(True)
            return moved

        state = lambda: "completed" if time.monotonic() >= visible_at else "running"  # noqa: E731
        store = SimpleNamespace(config=SimpleNamespace(poll=30.0), changed=changed,
                                get_job=lambda job_id, project: SimpleNamespace(id=job_id, state=state()),
                                job_waiter=lambda job_id, project: waiter)
        store._end_in_sight = lambda *args: JobStore._end_in_sight(store, *args)
        self.assertEqual(JobStore.wait_for(store, 7, "", timeout=60.0).state, "completed")
        self.assertEqual(waiter.waits, 1, "the end was left to a wait: heard only at the poll")


if __name__ == "__main__":
    unittest.main()
