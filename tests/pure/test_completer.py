"""Batched completion's bookkeeping (``rowfleet.worker.completer``): what a write that fails
or meets a stale token leaves behind, and when the completer writes on its own. The store is
a stand-in that records what it was asked; the process tests run the real thing."""

from __future__ import annotations

import logging
import threading
import time
import unittest
from types import SimpleNamespace

from rowfleet import exitcodes
from rowfleet.errors import LeaseLost, StoreUnavailable
from rowfleet.job import COMPLETED, Outcome
from rowfleet.store.jobs import Batch
from rowfleet.worker.completer import Completer, HeldOutcomes, Writer
from rowfleet.worker.keeper import Identity, Keeper, SwitchCell

DEADLINE = 10.0


def _job(job_id: int) -> SimpleNamespace:
    return SimpleNamespace(id=job_id, lease_token=1)  # what the bookkeeping reads of a job


class RecordingStore:
    """Answers ``finish_batch`` as told, and remembers each call."""

    def __init__(self, answer=None) -> None:
        self.calls: list[list[int]] = []
        self.answer = answer if answer is not None else (lambda done: Batch([], []))
        self.written = threading.Event()

    def finish_batch(self, done, **options):
        self.calls.append([job.id for job, _ in done])
        answer = self.answer(done)
        self.written.set()
        return answer

    def close(self) -> None:
        pass


class WriterTest(unittest.TestCase):
    def setUp(self) -> None:
        self.held = HeldOutcomes()
        self.forgotten: list[int] = []
        self.exits: list[int] = []
        self.writer = Writer(self.held, lambda jobs: self.forgotten.extend(job.id for job in jobs), self.exits.append)

    def test_a_write_that_fails_holds_its_outcomes_again_ahead_of_newer_ones(self):
        for job_id in (1, 2):
            self.held.add(_job(job_id), Outcome(COMPLETED))

        def fail(done):
            self.held.add(_job(3), Outcome(COMPLETED))  # decided while the write was under way
            raise StoreUnavailable("locked")

        with self.assertRaises(StoreUnavailable):
            self.writer.write(RecordingStore(fail))
        self.assertEqual([job.id for job in self.held.jobs()], [1, 2, 3])
        self.assertEqual(self.forgotten, [], "a lease let go of before its outcome was written")
        self.assertEqual(self.exits, [])

    def test_a_stale_token_ends_the_worker_once_the_others_are_written(self):
        for job_id in (1, 2):
            self.held.add(_job(job_id), Outcome(COMPLETED))
        store = RecordingStore(lambda done: Batch([], [LeaseLost(2, 1, "it was claimed again")]))
        with self.assertLogs("rowfleet.worker", "ERROR") as logged:
            self.writer.write(store)
        self.assertEqual((store.calls, self.forgotten, self.exits), ([[1, 2]], [1, 2], [exitcodes.REASSIGNED]))
        self.assertTrue(any("job 2" in line for line in logged.output), logged.output)

    def test_nothing_held_and_nothing_asked_writes_nothing(self):
        store = RecordingStore()
        self.assertEqual(self.writer.write(store), [])
        self.assertEqual(store.calls, [])


class UnwrittenRenewalTest(unittest.TestCase):
    """The keeper renews the jobs whose outcomes are held: one written since its snapshot is
    no warning; one someone else holds now is warned of (its outcome will be refused)."""

    def renew_with(self, between) -> list[str]:
        held = HeldOutcomes()
        for job_id in (1, 2):
            held.add(_job(job_id), Outcome(COMPLETED))
        renewed = []

        def renew(job, lease):
            renewed.append(job.id)
            between(held)
            raise LeaseLost(job.id, job.lease_token, message=f"job {job.id} is already completed")

        identity = Identity("box:1:1", "", "box", "q", 1, lease=60.0, renew=60.0, heartbeat=60.0, poll=0.05,
                            cancel_grace=0.5)
        guard = Keeper(identity, SwitchCell(), lambda: None, SimpleNamespace(operator_stop=lambda r: None),
                       exit=lambda code: self.fail("the keeper ended the worker"), wake=lambda: None, outcomes=held)
        with self.assertLogs("rowfleet.worker", "DEBUG") as logged:
            logging.getLogger("rowfleet.worker").debug("renewing")  # assertLogs needs one record
            guard._renew_unwritten(SimpleNamespace(renew=renew))
        self.assertEqual(renewed, [1, 2])
        return [line for line in logged.output if "will be refused" in line]

    def test_a_job_written_since_the_snapshot_is_no_warning(self):
        self.assertEqual(self.renew_with(lambda held: held.take()), [])

    def test_a_held_job_someone_else_holds_now_is_warned_of(self):
        self.assertEqual(len(self.renew_with(lambda held: None)), 2)


class CompleterTest(unittest.TestCase):
    def test_the_completer_writes_an_outcome_once_it_has_waited_its_window(self):
        held = HeldOutcomes()
        store = RecordingStore()
        completer = Completer(Writer(held, lambda jobs: None, lambda code: None), lambda: store, window=0.2)
        completer.start()
        self.addCleanup(completer.stop)
        held_at = time.monotonic()
        held.add(_job(7), Outcome(COMPLETED))
        self.assertTrue(store.written.wait(DEADLINE), "the held outcome was never written")
        self.assertGreaterEqual(time.monotonic() - held_at, 0.2, "written before its window")
        self.assertEqual((store.calls, len(held)), ([[7]], 0))

    def test_a_stopped_completer_writes_nothing_more(self):
        held = HeldOutcomes()
        store = RecordingStore()
        completer = Completer(Writer(held, lambda jobs: None, lambda code: None), lambda: store, window=0.05)
        completer.start()
        completer.stop()
        held.add(_job(8), Outcome(COMPLETED))
        self.assertFalse(completer.is_alive())
        self.assertEqual(store.calls, [])


if __name__ == "__main__":
    unittest.main()
