"""The worker's claim loop, decided without a database: ``decide.next_action`` table-driven
over the loop's state, the switch cell its two threads share, and the keeper's identity.

The loop's actions against real databases and real processes are in test_lifecycle.py,
test_fleet_processes.py and test_processes.py.
"""

from __future__ import annotations

import threading
import unittest

from types import SimpleNamespace
from typing import Any, Callable

from rowfleet import control, exitcodes
from rowfleet.config import Config
from rowfleet.control import Switch
from rowfleet.errors import LeaseLost
from rowfleet.worker import keeper
from rowfleet.worker.decide import Action, Moment, next_action
from rowfleet.worker.keeper import Identity, SwitchCell
from support import wait_until

AWAIT, CLAIM, DONE, DONE_SWITCHED_OFF, EXIT_HARD, PARK, READ_SWITCH, RESUME, RUN, WAIT_SWITCH = (
    Action.AWAIT, Action.CLAIM, Action.DONE, Action.DONE_SWITCHED_OFF, Action.EXIT_HARD, Action.PARK,
    Action.READ_SWITCH, Action.RESUME, Action.RUN, Action.WAIT_SWITCH)

HARD = Switch("", "box", "q", control.OFF, control.HARD, changed_by="ops")
DRAIN = Switch("", "box", "q", control.OFF, control.DRAIN, changed_by="ops")


def looked(**facts) -> Moment:
    """A moment of a loop that has read its switch (every one after the first step)."""
    return Moment(switch_read=True, **facts)


class NextActionTest(unittest.TestCase):
    def test_table(self):
        cases = [  # the loop's state -> what it does next
            # starting: the switch first, so a worker started while off never claims
            (Moment(), READ_SWITCH),
            (Moment(switch=HARD, burst=True), READ_SWITCH),
            (Moment(stopping=True), DONE),
            # decide
            (looked(), CLAIM),
            (looked(idle=True), AWAIT),  # the last claim found nothing: wait for work
            (looked(holding_job=True), RUN),
            (looked(holding_job=True, idle=True), RUN),
            (looked(holding_job=True, switch=HARD, has_run_jobs=True), RUN),  # the watchdog stops it, not the loop
            (looked(holding_job=True, switch=DRAIN), RUN),  # the job in hand finishes
            (looked(stopping=True, holding_job=True), DONE),  # claimed with the last outcome: its lease lapses
            (looked(stopping=True, idle=True), DONE),
            # burst: never waits, never parks; leaves once a claim of its own found nothing
            (looked(burst=True), CLAIM),
            (looked(burst=True, idle=True), CLAIM),  # a finish found nothing next: one more claim
            (looked(burst=True, idle=True, drained=True), DONE),
            (looked(burst=True, drained=True, switch=HARD, has_run_jobs=True), DONE),  # drained first
            (looked(burst=True, switch=DRAIN), DONE_SWITCHED_OFF),
            (looked(burst=True, switch=HARD), DONE_SWITCHED_OFF),  # ran nothing: it would park
            (looked(burst=True, switch=HARD, has_run_jobs=True), EXIT_HARD),
            # drain: park until switched on, then serve in place
            (looked(switch=DRAIN), PARK),
            (looked(switch=DRAIN, has_run_jobs=True), PARK),
            (looked(switch=DRAIN, idle=True), PARK),
            (looked(switch=DRAIN, parked=True), WAIT_SWITCH),
            (looked(parked=True), RESUME),
            (looked(parked=True, idle=True), RESUME),  # announced decide before it waits for work
            (looked(stopping=True, parked=True), DONE),
            # hard: a worker that ran jobs exits (79) to free its memory; a fresh one parks
            (looked(switch=HARD, has_run_jobs=True), EXIT_HARD),
            (looked(switch=HARD, has_run_jobs=True, parked=True), EXIT_HARD),  # escalated while parked
            (looked(switch=HARD), PARK),
            (looked(switch=HARD, parked=True), WAIT_SWITCH),
        ]
        for moment, expected in cases:
            with self.subTest(moment=moment):
                self.assertEqual(next_action(moment), expected)

    def test_every_action_is_reachable(self):
        actions = {next_action(Moment(**facts)) for facts in _every_moment()}
        self.assertEqual(actions, {DONE, DONE_SWITCHED_OFF, EXIT_HARD, READ_SWITCH, RUN, PARK, WAIT_SWITCH, RESUME,
                                   AWAIT, CLAIM})

    def test_a_stop_always_ends_the_loop_and_nothing_claims_under_an_off_switch(self):
        for facts in _every_moment():
            action = next_action(Moment(**facts))
            with self.subTest(**facts):
                if facts["stopping"]:
                    self.assertEqual(action, DONE)
                if facts["switch"] is not None or not facts["switch_read"]:
                    self.assertNotEqual(action, CLAIM)
                if facts["burst"]:
                    self.assertNotIn(action, (AWAIT, PARK, WAIT_SWITCH))


def _every_moment():
    flags = ("stopping", "switch_read", "holding_job", "has_run_jobs", "burst", "idle", "drained", "parked")
    for bits in range(2 ** len(flags)):
        for switch in (None, DRAIN, HARD):
            facts = {flag: bool(bits >> i & 1) for i, flag in enumerate(flags)}
            yield {**facts, "switch": switch}


class SwitchCellTest(unittest.TestCase):
    def test_set_says_whether_the_switch_moved(self):
        cell = SwitchCell()
        self.assertIsNone(cell.get())
        self.assertFalse(cell.set(None))
        self.assertTrue(cell.set(DRAIN))
        self.assertFalse(cell.set(Switch("", "box", "q", control.OFF, control.DRAIN, changed_by="ops")))  # equal
        self.assertTrue(cell.set(HARD))
        self.assertEqual(cell.get(), HARD)
        self.assertTrue(cell.set(None))

    def test_two_threads_setting_at_once_see_each_move_once(self):
        cell, moves = SwitchCell(), []
        barrier = threading.Barrier(2)

        def flip():
            barrier.wait()
            moves.append(sum(cell.set(DRAIN) for _ in range(1000)))

        threads = [threading.Thread(target=flip) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(sum(moves), 1, "exactly one of the threads moved it from on to drain")


class IdentityTest(unittest.TestCase):
    def test_of_takes_the_keeper_rhythm_from_the_config(self):
        config = Config(project="alpha", host="box", lease=60.0, renew=5.0, heartbeat=3.0, poll=0.5, cancel_grace=7.0)
        identity = Identity.of(config, "gpu", 42, 1700000000.25)
        self.assertEqual(identity, Identity("box:42:1700000000250", "alpha", "box", "gpu", 42, lease=60.0, renew=5.0,
                                            heartbeat=3.0, poll=0.5, cancel_grace=7.0, queues=("gpu",)))
        self.assertEqual(identity.holder, "box:42")


class KeeperRenewalTest(unittest.TestCase):
    """A lost lease ends the worker with 77, but not while an operator's cancel of the job is
    being carried out, nor while a watchdog's trip of it is being recorded: then the watchdog
    has written its outcome and exits 80, or the trip's code, itself (the keeper's renewal in
    between once won that race and exited 77)."""

    class LostStore:
        def renew(self, job, lease):
            raise LeaseLost(job.id, job.lease_token, "it is cancelled")

    def keeper(self) -> tuple[keeper.Keeper, list[int]]:
        identity = Identity("box:1:1", "", "box", "q", 1, lease=60.0, renew=1.0, heartbeat=1.0, poll=1.0,
                            cancel_grace=0.5)
        exits: list[int] = []
        self.tripping: list = []
        watchdog = SimpleNamespace(cancel=lambda job, reason, grace: None, ending=lambda job: job in self.tripping)
        return keeper.Keeper(identity, SwitchCell(), lambda: None, watchdog, exit=exits.append,
                             wake=lambda: None), exits

    def test_a_lost_lease_exits_77(self):
        guard, exits = self.keeper()
        guard.hold(JOB)
        guard._renew(self.LostStore())
        self.assertEqual(exits, [exitcodes.REASSIGNED])

    def test_a_lost_lease_of_a_job_being_cancelled_is_left_to_the_watchdog(self):
        guard, exits = self.keeper()
        guard.hold(JOB)
        guard._cancel_seen(JOB, "cancelled by an operator")
        guard._renew(self.LostStore())
        self.assertEqual(exits, [])

    def test_a_lost_lease_of_a_job_whose_trip_is_being_recorded_is_left_to_the_watchdog(self):
        guard, exits = self.keeper()
        guard.hold(JOB)
        self.tripping.append(JOB)  # the trip's record re-queued it: the watchdog exits 75, not 77
        guard._renew(self.LostStore())
        self.assertEqual(exits, [])

    def test_a_job_finished_meanwhile_exits_nothing(self):
        guard, exits = self.keeper()
        guard.hold(JOB)
        guard.release()
        guard._renew(SimpleNamespace(renew=lambda job, lease: self.fail("nothing held: no renewal")))
        self.assertEqual(exits, [])


class KeeperLookoutTest(unittest.TestCase):
    """While the idle main thread reads the switch (``lookout``), the keeper sleeps until
    its next beat instead of waking once per poll; handed back, it reads at once."""

    def test_the_keeper_leaves_the_switch_to_an_idle_main_thread_then_takes_it_back(self):
        from rowfleet.store import wake

        reads: list[float] = []
        waits: list[float] = []
        store = SimpleNamespace(switches_in_force=lambda project, host, queues: reads.append(1) or {"q": None},
                                worker_beat=lambda *args, **kwargs: None)

        class Recording(wake.Sleeper):
            def wait(self, timeout: float) -> bool:
                waits.append(timeout)
                return super().wait(timeout)

        identity = Identity("box:1:1", "", "box", "q", 1, lease=60.0, renew=60.0, heartbeat=60.0, poll=0.05,
                            cancel_grace=0.5)
        guard = keeper.Keeper(identity, SwitchCell(), lambda: None, SimpleNamespace(operator_stop=lambda r: None),
                              exit=lambda code: None, wake=lambda: None)
        guard._waiter = Recording()
        guard.lookout(True)
        thread = threading.Thread(target=guard._keep, args=(store,), daemon=True)
        thread.start()
        self.addCleanup(thread.join, 5)
        self.addCleanup(guard._halt.set)
        self.addCleanup(lambda: guard._waiter.interrupt())
        wait_until(lambda: waits, message="the keeper's first wait")
        self.assertEqual(len(reads), 1, "the keeper reads the switch once as it starts")
        self.assertGreater(waits[0], 1.0, "with the lookout on, the keeper woke for the switch at the poll")
        guard.lookout(False)
        wait_until(lambda: len(reads) >= 2, message="the keeper to read the switch once handed back")
        wait_until(lambda: len(waits) >= 2, message="the keeper's next wait")
        self.assertLessEqual(waits[1], identity.poll, "handed back, the keeper reads the switch once per poll")


class PrefetchedRenewalTest(unittest.TestCase):
    """The keeper renews the prefetched jobs of a snapshot; one the main thread took and
    finished meanwhile is no loss (a bench of short jobs logged a warning for each), while
    one still waiting that someone else holds now is let go, with a warning."""

    def renew_with(self, between: Callable[[keeper.Prefetched, Any], None]) -> tuple[keeper.Prefetched, list[str]]:
        waiting = [SimpleNamespace(id=n, lease_token=1) for n in (1, 2)]
        prefetched = keeper.Prefetched()
        prefetched.put(waiting)

        def renew(job, lease):
            between(prefetched, job)
            raise LeaseLost(job.id, job.lease_token, message=f"job {job.id} is already completed")

        identity = Identity("box:1:1", "", "box", "q", 1, lease=60.0, renew=60.0, heartbeat=60.0, poll=0.05,
                            cancel_grace=0.5)
        guard = keeper.Keeper(identity, SwitchCell(), lambda: None, SimpleNamespace(operator_stop=lambda r: None),
                              exit=lambda code: None, wake=lambda: None, prefetched=prefetched)
        with self.assertLogs(keeper.log, "DEBUG") as logged:
            keeper.log.debug("renewing")  # assertLogs needs one record
            guard._renew_prefetched(SimpleNamespace(renew=renew))
        return prefetched, [line for line in logged.output if "letting it go" in line]

    def test_a_job_taken_and_finished_since_the_snapshot_is_no_warning(self):
        prefetched, warned = self.renew_with(lambda jobs, job: jobs.take())  # the worker took it meanwhile
        self.assertEqual(warned, [])
        self.assertEqual(len(prefetched), 0)

    def test_a_waiting_job_held_by_someone_else_is_let_go_with_a_warning(self):
        prefetched, warned = self.renew_with(lambda jobs, job: None)
        self.assertEqual(len(warned), 2)
        self.assertEqual(len(prefetched), 0)


JOB = SimpleNamespace(id=7, lease_token=4)  # all the keeper reads of the job in hand


if __name__ == "__main__":
    unittest.main()


class StopSignalTest(unittest.TestCase):
    """A worker's stop comes from a signal handler, which runs in the main thread wherever it
    was: inside an event's wait it holds that event's lock, so a stop that takes one hangs."""

    def test_a_stop_takes_no_lock_the_interrupted_main_thread_may_hold(self):
        from rowfleet.worker.loop import Worker
        worker = Worker(Config(db="never-opened.db"), "q")
        held = [value._cond for value in vars(worker).values() if isinstance(value, threading.Event)]
        for lock in held:  # what the main thread holds inside Event.wait when the signal lands
            lock.acquire()
        try:
            stopper = threading.Thread(target=worker.request_stop, name="stop-signal", daemon=True)
            stopper.start()
            stopper.join(5.0)
            self.assertFalse(stopper.is_alive(), "request_stop waited for a lock the main thread holds")
        finally:
            for lock in held:
                lock.release()
        self.assertTrue(worker.stopping)
