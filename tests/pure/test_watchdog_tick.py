"""The watchdog on a busy worker's hot path (``rowfleet.worker.watchdog``): armed by its own
tick, not woken by every job handed to it. The store is never reached (nothing trips)."""

from __future__ import annotations

import time
import unittest
from types import SimpleNamespace

from rowfleet.config import Config
from rowfleet.worker.watchdog import TICK, Watchdog
from support import wait_until


def _job(job_id: int) -> SimpleNamespace:
    return SimpleNamespace(id=job_id, lease_token=1, timeout=None)  # what the watchdog reads of a job


class QuietWatchdogTest(unittest.TestCase):
    """A busy worker hands its watchdog a job per job; the watchdog looks at them on its own
    tick, and only a watchdog asleep with no job to watch is woken by a hand-over."""

    def started_dog(self) -> tuple[Watchdog, list]:
        """A running watchdog that notes the job it holds at each of its looks."""
        looks: list = []
        dog = Watchdog(Config(budget=60.0), lambda config: None, exit=lambda code: self.fail("it tripped"))
        original = dog._check
        dog._check = lambda: (looks.append(dog.held()), original())[1]
        dog.start()
        self.addCleanup(dog.stop)
        return dog, looks

    def test_a_ticking_watchdog_is_not_woken_once_per_job(self):
        dog, looks = self.started_dog()
        dog.watch(_job(0))
        wait_until(lambda: looks, message="the watchdog's first look")
        started = time.monotonic()
        for job_id in range(1, 2001):  # a stream of jobs, each held for no time at all
            dog.release()
            dog.watch(_job(job_id))
        ticks = (time.monotonic() - started) / TICK
        self.assertLessEqual(len(looks), 3 + 2 * ticks, f"{len(looks)} looks in {ticks:.1f} ticks")

    def test_a_job_handed_to_an_idle_watchdog_wakes_it(self):
        dog, looks = self.started_dog()
        wait_until(lambda: dog._idle, message="the watchdog asleep with nothing to watch")
        job = _job(1)
        dog.watch(job)
        wait_until(lambda: job in looks, message="a look at the job (asleep with no deadline, nothing else wakes it)")


if __name__ == "__main__":
    unittest.main()
