"""A step of the box's clock under a SQLite fleet.

On SQLite every time rowfleet writes comes from the writing process's clock, so NTP stepping a
fast clock back once froze every job enqueued before the step, every lease and heartbeat
written before it, and cron, for the length of the step. The store's clock is held
(``rowfleet.store.clock``): never back, half speed while the wall clock is behind it, raised
at open to the newest time the fleet wrote.

The held clock's rule as tables, its floor read from a real database, then real processes
(worker, orchestrator, scheduler, the command line) whose clocks libfaketime steps back (and
forward) 600 s at once, all of them, as NTP would: jobs enqueued before the step keep being
claimed, a live worker's lease keeps being renewed, a dead one's still lapses, a worker
started after the step agrees with those started before it, and cron fires each slot once.

libfaketime (Debian's ``faketime``) is required in CI (``ROWFLEET_REQUIRE_FAKETIME=1``) and
skipped loudly elsewhere. Its 0.9.10 misreads an absolute sleep on the real monotonic clock
(Python's ``time.sleep``: EINVAL), so the children sleep through ``select`` (a relative
timeout, which it leaves alone), by a ``sitecustomize`` this test puts on their path.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import signal
import subprocess
import sys
import time
import unittest

from rowfleet.job import JobSpec
from rowfleet.store import clock as held
from rowfleet.store import open_store
from support import DEADLINE, TempDirTestCase, child_env, require_tool, wait_until

STEP = 600  # seconds: the step of the incident
APP = "clockapp"
APP_SOURCE = '''\
import os
import time

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))
GIVE_UP = 120.0  # a handler never outlives a failed test by much


def _append(name, line):
    fd = os.open(os.path.join(HERE, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _started(job):
    _append("ran.log", f"{job.id}\\n")
    with open(os.path.join(HERE, f"started-{job.id}.tmp"), "w") as handle:
        handle.write(str(os.getpid()))
    os.replace(os.path.join(HERE, f"started-{job.id}.tmp"), os.path.join(HERE, f"started-{job.id}"))


@rowfleet.task(name="quick")
def quick():
    time.sleep(0.05)
    _append("ran.log", f"{rowfleet.current_job().id}\\n")


@rowfleet.task(name="long")
def long(seconds):
    """Runs ``seconds`` by the monotonic clock, which no step moves."""
    _started(rowfleet.current_job())
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        time.sleep(0.05)
    return "done"


@rowfleet.task(name="hang_first")
def hang_first():
    """Hangs on its first run (until killed); returns on any later one. Not by attempts: a
    lease trip on a loaded box (exit 81) re-queues it with the attempt refunded."""
    job = rowfleet.current_job()
    first_run = not os.path.exists(os.path.join(HERE, f"started-{job.id}"))
    _started(job)
    if first_run:
        until = time.monotonic() + GIVE_UP
        while time.monotonic() < until:
            time.sleep(0.05)
    return "recovered"


@rowfleet.task(name="tick")
def tick():
    return None
'''

# Sleeps of a relative length, which libfaketime 0.9.10 passes through untouched.
SITECUSTOMIZE = '''\
import select
import time


def _sleep(seconds):
    select.select([], [], [], max(0.0, seconds))


time.sleep = _sleep
'''

LIBRARY_PATTERNS = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
                    "/usr/local/lib/faketime/libfaketime.so.1")
REQUIRE = "ROWFLEET_REQUIRE_FAKETIME"
FAST = ("--poll", "0.2", "--heartbeat", "0.5")
# Leases short enough that a killed worker's job comes back within the test's deadline, long
# enough that a live worker on a loaded two-core box (CI runs four lanes) renews in time: at 3 s
# a keeper starved for 2 s tripped its own lease (exit 81) and re-queued a live job.
LEASE = ("--lease", "6", "--renew", "0.5")


def libfaketime(test: unittest.TestCase) -> str:
    """The path of libfaketime's library, or skip ``test`` loudly (fail it under ``REQUIRE=1``)."""
    require_tool(test, "faketime", REQUIRE)
    for pattern in LIBRARY_PATTERNS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    reason = f"faketime is installed but libfaketime.so.1 is in none of {', '.join(LIBRARY_PATTERNS)}"
    if os.environ.get(REQUIRE) == "1":
        test.fail(f"libfaketime required by {REQUIRE}=1 but unavailable: {reason}")
    print(f"*** libfaketime tests SKIPPED: {reason} ***", file=sys.__stderr__ or sys.stderr, flush=True)
    test.skipTest(reason)


# --- the held clock, pure --------------------------------------------------------------------


class HeldClockRuleTest(unittest.TestCase):
    def test_advance_table(self):
        day = held.LONGEST_HOLD
        rows = [  # (held, monotonic seconds since, wall now) -> reading, why
            ((None, 0.0, 500.0), 500.0, "the first reading is the wall clock"),
            ((500.0, 1.0, 501.0), 501.0, "in step: the wall clock"),
            ((500.0, 1.0, 500.9), 500.9, "a wall clock a little slow (slewed) is still followed"),
            ((500.0, 1.0, 1101.0), 1101.0, "a step forward is taken"),
            ((1101.0, 1.0, 501.0), 1101.5, "a step back: held, at half rate"),
            ((1101.5, 0.0, 501.0), 1101.5, "no monotonic time passed: the same reading"),
            ((1101.5, -3.0, 501.0), 1101.5, "never back, whatever the clocks say"),
            ((1e6, 1.0, 1e6 - day + 1), 1e6 + 0.5, "a step back within a day is held"),
            ((1e6, 1.0, 1e6 - day - 1), 1e6 - day - 1, "a step back of more than a day is taken"),
        ]
        for args, expected, why in rows:
            with self.subTest(why):
                self.assertEqual(held.advance(*args), expected)

    def test_raised_table(self):
        day = held.LONGEST_HOLD
        rows = [  # (held, floor, wall) -> reading, why
            ((100.0, 700.0, 100.0), 700.0, "a newer time written to the database lifts the clock"),
            ((800.0, 700.0, 800.0), 800.0, "an older one does not lower it"),
            ((100.0, 100.0 + day, 100.0), 100.0 + day, "a day ahead of the wall clock still counts"),
            ((100.0, 101.0 + day, 100.0), 100.0, "further ahead: no clock of this box wrote it"),
            ((100.0, None, 100.0), 100.0, "nothing written"),
            ((100.0, "tomorrow", 100.0), 100.0, "plain SQL's text"),
            ((100.0, float("nan"), 100.0), 100.0, "not a number"),
            ((100.0, float("inf"), 100.0), 100.0, "an infinity"),
            ((100.0, True, 100.0), 100.0, "a boolean is no time"),
        ]
        for args, expected, why in rows:
            with self.subTest(why):
                self.assertEqual(held.raised(*args), expected)

    def simulate(self, steps: dict[float, float], seconds: float, every: float = 1.0):
        """Read a ``HeldClock`` every ``every`` seconds for ``seconds``; the wall clock runs
        with the box and steps by ``steps[t]`` at monotonic time ``t``. [(t, wall, held)]."""
        now = [0.0]
        offset = [0.0]
        clock = held.HeldClock(wall=lambda: 1_000_000.0 + now[0] + offset[0], monotonic=lambda: now[0])
        readings = []
        while now[0] <= seconds:
            offset[0] += steps.get(now[0], 0.0)
            readings.append((now[0], 1_000_000.0 + now[0] + offset[0], clock()))
            now[0] += every
        return readings

    def test_a_step_back_is_absorbed_in_twice_its_length_and_nothing_stops(self):
        readings = self.simulate({10.0: -STEP}, 10.0 + 2 * STEP + 20)
        times = [reading for _, _, reading in readings]
        self.assertEqual(times, sorted(times), "the held clock went back")
        rates = [later - earlier for earlier, later in zip(times, times[1:])]
        self.assertGreaterEqual(min(rates), held.SLOW_RATE, "the held clock slowed below half rate, or stopped")
        self.assertLessEqual(max(rates), 1.0)
        caught = [t for t, wall, reading in readings if t > 10.0 and reading == wall]
        self.assertAlmostEqual(caught[0] - 10.0, 2 * STEP, delta=2.0, msg="the wall clock caught up after twice the step")
        self.assertTrue(all(reading == wall for t, wall, reading in readings if t < 10.0 or t >= caught[0]))

    def test_a_step_forward_is_taken_at_once(self):
        readings = self.simulate({10.0: STEP}, 20.0)
        self.assertEqual([(wall, reading) for _, wall, reading in readings if wall != reading], [])
        self.assertEqual(readings[10][2] - readings[9][2], STEP + 1.0)

    def test_a_floor_lifts_the_clock_which_then_holds_from_there(self):
        now = [0.0]
        clock = held.HeldClock(wall=lambda: 1000.0 + now[0], monotonic=lambda: now[0])
        self.assertEqual(clock(), 1000.0)
        clock.hold_at_least(1600.0)  # the fleet wrote 1600 before the wall clock stepped back to 1000
        self.assertEqual(clock(), 1600.0)
        now[0] = 10.0
        self.assertEqual(clock(), 1605.0)
        clock.hold_at_least(1200.0)  # an older floor changes nothing
        self.assertEqual(clock(), 1605.0)

    def test_one_held_clock_per_database_file(self):
        import tempfile

        folder = tempfile.mkdtemp(prefix="rowfleet-test-")
        self.addCleanup(os.rmdir, folder)
        one, other = os.path.join(folder, "a.db"), os.path.join(folder, "b.db")
        self.assertIs(held.for_database(one), held.for_database(os.path.join(folder, ".", "a.db")))
        self.assertIsNot(held.for_database(one), held.for_database(other))


# --- the held clock on a real database -------------------------------------------------------


class StoreClockTest(TempDirTestCase):
    def test_a_test_clock_is_used_as_given(self):
        fake = lambda: 1234.0  # noqa: E731
        store = self.open_store(clock=fake)
        self.assertIs(store.clock, fake)

    def test_a_store_opened_after_a_step_back_starts_from_the_newest_time_written(self):
        self.open_store().close()  # the schema
        ahead = time.time() + STEP  # the fleet's time before the box's clock stepped back
        with open_store(self.config(), clock=lambda: ahead) as before:
            before.enqueue(JobSpec(task="t"))
        with open_store(self.config()) as after:
            reading = after.clock()
        self.assertGreaterEqual(reading, ahead, "the clock did not start from the newest time written")
        self.assertLess(reading, ahead + 5)

    def test_times_no_clock_of_this_box_wrote_are_passed_over(self):
        self.open_store().close()
        far = time.time() + held.LONGEST_HOLD + 3600
        with open_store(self.config(), clock=lambda: far) as future:
            future.enqueue(JobSpec(task="t"))
        with open_store(self.config()) as store:
            reading = store.clock()
        self.assertLess(reading, time.time() + 5)


# --- real processes, their clocks stepped by libfaketime -------------------------------------


class ClockStepProcessTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        library = libfaketime(self)
        self.offset_file = os.path.join(self.dir, "clock-offset")
        self.set_offset("+0")
        shim = os.path.join(self.dir, "shim")
        os.mkdir(shim)
        with open(os.path.join(shim, "sitecustomize.py"), "w") as handle:
            handle.write(SITECUSTOMIZE)
        self.env = child_env(LD_PRELOAD=library, FAKETIME_TIMESTAMP_FILE=self.offset_file, FAKETIME_NO_CACHE="1",
                             FAKETIME_DONT_FAKE_MONOTONIC="1")
        self.env["PYTHONPATH"] = os.pathsep.join([shim, self.env["PYTHONPATH"]])
        self.write_module(APP, APP_SOURCE)
        self.store = self.open_store()
        self.assert_children_offset(0)

    # --- the box's clock ---------------------------------------------------------------------

    def set_offset(self, text: str) -> None:
        """Every child's clock moves at once (libfaketime rereads the file at each call)."""
        with open(self.offset_file + ".tmp", "w") as handle:
            handle.write(text + "\n")
        os.replace(self.offset_file + ".tmp", self.offset_file)

    def step(self, seconds: int) -> None:
        self.set_offset(f"{seconds:+d}s")
        self.assert_children_offset(seconds)

    def assert_children_offset(self, seconds: int) -> None:
        """A fresh child's time.time() reads the box's clock moved by ``seconds``, and it can sleep."""
        probe = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.01); print(time.time())"],
                               env=self.env, capture_output=True, text=True, timeout=DEADLINE)
        self.assertEqual(probe.returncode, 0, probe.stderr)
        self.assertAlmostEqual(float(probe.stdout) - time.time(), seconds, delta=2.0,
                               msg="libfaketime did not move the children's clock")

    # --- the fleet -------------------------------------------------------------------------

    def launch(self, label: str, *args: str):
        return self.launch_logged(label, *args, env=self.env)

    def worker(self, queue: str, *flags: str):
        return self.launch(f"worker-{queue}", "worker", "--app", APP, "--queue", queue, *FAST, *flags)

    def enqueue(self, task: str, count: int = 1, *, queue: str = "default", args=None, delay: float = 0.0):
        """Enqueue ``count`` jobs from this test's process (before any step: its clock is the
        children's); their ids."""
        known = {job.id for job in self.store.reads.list_jobs("", limit=1_000_000)}
        self.store.enqueue_many(JobSpec(task=task, queue=queue, delay=delay), [args] * count)
        ids = sorted(job.id for job in self.store.reads.list_jobs("", limit=1_000_000) if job.id not in known)
        self.assertEqual(len(ids), count)
        return ids

    def enqueue_stepped(self, task: str, queue: str, args) -> int:
        """Enqueue from a process started after the step: the command line, its clock stepped."""
        result = self.cli("enqueue", task, "--queue", queue, "--args", json.dumps(args), env=self.env)
        return int(result.stdout)

    def jobs(self, ids):
        return [self.store.get_job(job_id, "") for job_id in ids]

    def states(self, ids) -> collections.Counter:
        return collections.Counter(job.state for job in self.jobs(ids))

    def ran(self) -> collections.Counter:
        return collections.Counter(int(line) for line in (self.marker("ran.log") or "").split())

    def all_completed(self, ids, within: float, what: str) -> float:
        """Seconds until every job of ``ids`` completed (the test fails past ``within``)."""
        began = time.monotonic()

        def done():
            states = self.states(ids)
            return states["completed"] == len(ids) or None
        try:
            wait_until(done, timeout=within, message=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {dict(self.states(ids))}\n{self.logs()}") from None
        return time.monotonic() - began

    def logs(self) -> str:
        return "\n".join(f"--- {os.path.basename(p)}:\n{open(p).read()[-3000:]}"
                         for p in sorted(glob.glob(os.path.join(self.dir, "process-*.log"))))

    def assert_no_traceback(self) -> None:
        self.assertNotIn("Traceback", self.logs())

    # --- a step back ---------------------------------------------------------------------

    def test_jobs_enqueued_before_a_step_back_keep_being_claimed(self):
        due = self.enqueue("quick", 40)
        delayed = self.enqueue("quick", 4, queue="later", delay=2.0)
        worker = self.worker("default", "--queue", "later")
        wait_until(lambda: self.states(due)["completed"] >= 5, message="the first jobs to complete")
        self.step(-STEP)
        waiting = self.states(due)["queued"]
        self.assertGreater(waiting, 0, "every job ran before the step: the test proved nothing")
        took = self.all_completed(due + delayed, DEADLINE, f"the {waiting} jobs queued at the step to complete")
        self.assertEqual(self.ran(), collections.Counter({job_id: 1 for job_id in due + delayed}))
        self.assertEqual({job.attempts for job in self.jobs(due + delayed)}, {1})
        print(f"\n  {waiting} jobs queued at a -{STEP}s step, and 4 delayed 2s, completed {took:.1f}s after it",
              file=sys.stderr)
        self.stop_all(worker)
        self.assert_no_traceback()

    def test_leases_and_heartbeats_across_a_step_back(self):
        orchestrator = self.launch("orchestrator", "orchestrator", "--interval", "0.2", *FAST)
        keeper = self.worker("long", *LEASE)
        doomed = self.worker("doomed", *LEASE)
        long_id, = self.enqueue("long", queue="long", args={"seconds": 8})
        doomed_id, = self.enqueue("hang_first", queue="doomed")
        for job_id in (long_id, doomed_id):
            wait_until(lambda: self.marker(f"started-{job_id}"), message=f"job {job_id} to start")
        first_lease = self.store.get_job(long_id, "").lease_expires_at
        wait_until(lambda: self.store.get_job(long_id, "").lease_expires_at > first_lease,
                   message="the first renewal")

        self.step(-STEP)
        stepped = time.monotonic()
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(DEADLINE)
        # Started after the step, with only the stepped clock to go by, beside processes that held theirs.
        rescuer = self.worker("doomed", *LEASE)
        fresh = self.worker("fresh", *LEASE)
        fresh_id = self.enqueue_stepped("long", "fresh", {"seconds": 4})

        self.all_completed([doomed_id], DEADLINE, "the killed worker's job to be recovered")
        recovered = time.monotonic() - stepped
        self.all_completed([long_id, fresh_id], DEADLINE, "the long jobs to complete")
        for job in self.jobs([long_id, fresh_id]):
            with self.subTest(job=job.id):
                self.assertEqual((job.attempts, job.result), (1, "done"), "a live worker's lease lapsed")
                self.assertEqual([e.kind for e in self.store.reads.events(job.id)], ["claimed", "completed"])
        self.assertEqual(self.store.get_job(doomed_id, "").result, "recovered")
        self.assertEqual(self.ran()[long_id], 1)
        live = {w["pid"]: w for w in self.store.reads.workers(since=0)}
        for process in (keeper, fresh, rescuer):
            self.assertIsNone(live[process.pid]["flagged_dead_at"], f"{process.args[4:]} flagged dead")
        print(f"\n  a worker killed at a -{STEP}s step: its job recovered {recovered:.1f}s after it",
              file=sys.stderr)
        self.stop_all(keeper, fresh, rescuer, orchestrator)
        self.assert_no_traceback()

    def test_cron_fires_each_slot_once_across_a_step_back(self):
        path = os.path.join(self.dir, "schedules.json")
        with open(path, "w") as handle:
            json.dump([{"name": "tick", "task": "tick", "every": 1, "queue": "ticks"}], handle)
        first = self.launch("scheduler-1", "scheduler", "--schedule", path)
        slots = lambda: sorted(row["slot"] for row in self.store.reads.fired_slots("", "tick", limit=10_000))  # noqa: E731
        wait_until(lambda: len(slots()) >= 3, message="three slots before the step")
        self.step(-STEP)
        before = len(slots())
        second = self.launch("scheduler-2", "scheduler", "--schedule", path)  # started after the step
        stepped, seen, gaps = time.monotonic(), before, []

        def fired_four_more():
            nonlocal stepped, seen
            count = len(slots())
            if count > seen:
                gaps.append(time.monotonic() - stepped)
                stepped, seen = time.monotonic(), count
            return count >= before + 4
        wait_until(fired_four_more, message="four slots after the step")
        self.stop_all(first, second)
        fired = slots()
        self.assertEqual(fired, [fired[0] + n for n in range(len(fired))], "a slot skipped or fired twice")
        jobs = [job for job in self.store.reads.list_jobs("", limit=10_000) if job.task == "tick"]
        self.assertEqual(len(jobs), len(fired), "one job per slot")
        self.assertLess(max(gaps), 2 / held.SLOW_RATE + 3, f"cron fell silent after the step: {gaps}")
        print(f"\n  cron at a -{STEP}s step: the next slots fired after {', '.join(f'{g:.1f}' for g in gaps)}s",
              file=sys.stderr)
        self.assert_no_traceback()

    # --- a step forward -----------------------------------------------------------------------

    def test_a_step_forward_is_taken_and_runs_every_job_once(self):
        orchestrator = self.launch("orchestrator", "orchestrator", "--interval", "0.2", *FAST)
        worker = self.worker("default", *LEASE)
        path = os.path.join(self.dir, "schedules.json")
        with open(path, "w") as handle:
            json.dump([{"name": "tick", "task": "tick", "every": 1, "queue": "ticks"}], handle)
        scheduler = self.launch("scheduler", "scheduler", "--schedule", path)
        before = self.enqueue("quick", 10)
        later = self.enqueue("quick", 3, queue="later", delay=STEP / 2)  # due once the step is taken
        self.all_completed(before, DEADLINE, "the jobs enqueued before the step")  # none in hand at the step
        wait_until(lambda: self.store.reads.fired_slots("", "tick"), message="a slot before the step")

        self.step(STEP)
        later_worker = self.worker("later", *LEASE)
        after = [self.enqueue_stepped("quick", "default", None) for _ in range(3)]
        self.all_completed([*later, *after], DEADLINE, "the jobs due after the step")
        wait_until(lambda: max(row["slot"] for row in self.store.reads.fired_slots("", "tick")) > time.time() + STEP - 60,
                   message="a slot after the step")
        self.stop_all(worker, later_worker, scheduler, orchestrator)
        every = [*before, *later, *after]
        self.assertEqual(self.ran(), collections.Counter({job_id: 1 for job_id in every}))
        self.assertEqual({job.attempts for job in self.jobs(every)}, {1})
        fired = [row["slot"] for row in self.store.reads.fired_slots("", "tick", limit=10_000)]
        self.assertEqual(len(fired), len(set(fired)))
        self.assertEqual(len([job for job in self.store.reads.list_jobs("", limit=10_000) if job.task == "tick"]),
                         len(fired), "one job per slot")
        self.assert_no_traceback()

    def test_a_lease_in_hand_across_a_step_forward_is_not_reclaimed(self):
        """A step forward is taken, so a lease granted just before it looks lapsed just after
        it, until its holder renews. The sweep doubts that moment (``liveness.trust_sweep``)
        and holds its lapse reclaim, as its dead-worker flags, one heartbeat: the keeper
        renews meanwhile, and the live job is not re-queued."""
        orchestrator = self.launch("orchestrator", "orchestrator", "--interval", "0.2", *FAST)
        # The hold lasts the worker's heartbeat: 2 s, so that a keeper a loaded box keeps
        # waiting for half a second still renews within it (0.5 s failed so on a 2-core CI).
        worker = self.worker("default", *LEASE, "--heartbeat", "2")
        long_id, = self.enqueue("long", args={"seconds": 3})
        wait_until(lambda: self.marker(f"started-{long_id}"), message="the long job to start")
        self.step(STEP)
        self.all_completed([long_id], DEADLINE, "the long job to complete")
        self.stop_all(worker, orchestrator)
        self.assertEqual([e.kind for e in self.store.reads.events(long_id)], ["claimed", "completed"])


if __name__ == "__main__":
    unittest.main()
