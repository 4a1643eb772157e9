"""The scheduler: which slot is due (table-driven, pure), schedules as Python and as a JSON
file, the ``@rowfleet.periodic`` registry, and the exactly-once contract of two
schedulers against a real database, on SQLite and PostgreSQL.

Time is moved, never waited for: the contract drives ``run_once(now)`` with made-up
moments, and the one test of the ``run`` loop uses a cadence of a few milliseconds and
waits for its slots with a deadline. Real ``rowfleet scheduler`` processes are in
test_scheduler_processes.py.
"""

from __future__ import annotations

import json
import os
import threading
import unittest
from datetime import datetime, timedelta, timezone

import rowfleet
from rowfleet import schedule, tasks
from rowfleet.errors import ConfigError, StoreUnavailable
from rowfleet.schedule import CATCH_UP, InvalidSchedule, Schedule, due, load_schedule_file, manual
from rowfleet.services.scheduler import Scheduler
from pg_harness import PostgresDatabaseCase
from support import DEADLINE, TempDirTestCase, wait_until

GRACE = 60.0


def at(hour: int, minute: int = 0, second: float = 0, day: int = 1, month: int = 6) -> float:
    """Epoch seconds of a moment in 2025, UTC."""
    moment = datetime(2025, month, day, hour, minute, tzinfo=timezone.utc) + timedelta(seconds=second)
    return moment.timestamp()


@rowfleet.task(name="scheduled.note", queue="notes")
def note(**kwargs):
    return kwargs


@rowfleet.task(name="scheduled.why", queue="why")
def why():
    job = rowfleet.current_job()  # what a handler knows of why its job exists
    return {"schedule": job.schedule, "slot": job.schedule_slot, "reason": job.fire_reason}


# --- which slot is due (pure) ----------------------------------------------------------------

MINUTELY = Schedule("minutely", "scheduled.note", cron="* * * * *")
FIVE = Schedule("five", "scheduled.note", cron="*/5 * * * *")
FIVE_CATCH_UP = Schedule("five-catch-up", "scheduled.note", cron="*/5 * * * *", missed=CATCH_UP)
NIGHTLY = Schedule("nightly", "scheduled.note", cron="0 3 * * *")
NIGHTLY_AT_BOOT = Schedule("nightly-at-boot", "scheduled.note", cron="0 3 * * *", at_boot=True)
EVERY_20 = Schedule("every-20", "scheduled.note", every=20)
OFFICE_HOURS = Schedule("office", "scheduled.note", cron="0 * * * *", hours=(9, 17))
OFFICE_CATCH_UP = Schedule("office-catch-up", "scheduled.note", cron="0 * * * *", hours=(9, 17), missed=CATCH_UP)
BERLIN_NIGHTLY = Schedule("berlin", "scheduled.note", cron="30 2 * * *", zone="Europe/Berlin")
BERLIN_HOURLY = Schedule("berlin-hourly", "scheduled.note", cron="0 * * * *", zone="Europe/Berlin")


class DueSlotTest(unittest.TestCase):
    def test_table(self):
        cases = [  # schedule, last slot fired, now, booting -> the slot to fire
            # on time
            (MINUTELY, at(12, 0), at(12, 1, 5), False, at(12, 1)),
            (MINUTELY, at(12, 0), at(12, 0, 59), False, None),  # fired already
            (MINUTELY, at(12, 2), at(12, 1, 5), False, None),  # a later slot fired (a clock ahead)
            (EVERY_20, at(12, 0, 20), at(12, 0, 41), False, at(12, 0, 40)),
            (EVERY_20, at(12, 0, 20), at(12, 0, 40), False, at(12, 0, 40)),  # at the slot counts
            (FIVE, at(12, 0), at(12, 6), False, at(12, 5)),  # a minute late is still on time
            # all schedulers were down: skip
            (FIVE, at(12, 0), at(12, 6, 1), False, None),
            (FIVE, at(12, 0), at(12, 32), False, None),  # 12:05 to 12:30 skipped
            (FIVE, at(12, 0), at(12, 30, 20), False, at(12, 30)),  # no backfill, but on time again
            # ... catch_up: one job for the gap, the latest missed slot
            (FIVE_CATCH_UP, at(12, 0), at(12, 32), False, at(12, 30)),
            (FIVE_CATCH_UP, at(12, 30), at(12, 32), False, None),  # made up for already
            (FIVE_CATCH_UP, at(12, 0), at(12, 32), True, at(12, 30)),
            # first start ever: nothing in the past, unless at_boot
            (FIVE, None, at(12, 30, 20), True, at(12, 30)),
            (FIVE, None, at(12, 32), True, None),
            (FIVE_CATCH_UP, None, at(12, 32), False, None),
            (NIGHTLY, None, at(9, 0), True, None),
            (NIGHTLY_AT_BOOT, None, at(9, 0), True, at(3, 0)),
            (NIGHTLY_AT_BOOT, None, at(9, 0), False, None),  # a later tick is not a boot
            (NIGHTLY_AT_BOOT, at(3, 0), at(9, 0), True, None),  # fired already
            (NIGHTLY_AT_BOOT, at(3, 0, day=1), at(9, 0, day=3), True, at(3, 0, day=3)),
            (NIGHTLY_AT_BOOT, at(3, 0, day=1), at(9, 0, day=3), False, None),
            # hour windows: nothing is owed while the window is shut
            (OFFICE_HOURS, at(16, 0), at(17, 30), False, None),
            (OFFICE_HOURS, at(16, 0), at(9, 0, 10, day=2), False, at(9, 0, day=2)),
            (OFFICE_CATCH_UP, at(16, 0), at(23, 0), False, None),
            (OFFICE_CATCH_UP, at(16, 0), at(10, 30, day=2), False, at(10, 0, day=2)),
            # DST: 02:30 does not exist in Berlin on 30 March (fires at 03:00 CEST, 01:00Z) ...
            (BERLIN_NIGHTLY, at(0, 30, day=29, month=3), at(1, 0, 10, day=30, month=3), False, at(1, 0, day=30, month=3)),
            # ... and 02:00 happens twice on 26 October: it fires at the first one only
            (BERLIN_HOURLY, at(0, 0, day=26, month=10), at(1, 0, 10, day=26, month=10), False, None),
            (BERLIN_HOURLY, at(0, 0, day=26, month=10), at(2, 0, 10, day=26, month=10), False, at(2, 0, day=26, month=10)),
        ]
        for schedule, last_slot, now, booting, expected in cases:
            with self.subTest(schedule=schedule.name, last_slot=_shown(last_slot), now=_shown(now), booting=booting):
                fire = due(schedule, last_slot, now, GRACE, booting)
                self.assertEqual(None if fire is None else fire.slot, expected)

    def test_each_slot_due_says_why(self):
        cases = [  # schedule, last slot fired, now, booting -> the slot and why
            (FIVE, at(12, 0), at(12, 6), False, (at(12, 5), "tick")),
            (FIVE, None, at(12, 30, 20), True, (at(12, 30), "tick")),  # on time at boot is on time
            (NIGHTLY_AT_BOOT, None, at(9, 0), True, (at(3, 0), "boot")),
            (NIGHTLY_AT_BOOT, at(3, 0, day=1), at(9, 0, day=3), True, (at(3, 0, day=3), "boot")),
            (FIVE_CATCH_UP, at(12, 0), at(12, 32), False, (at(12, 30), "catch_up")),
            (FIVE_CATCH_UP, at(12, 0), at(12, 32), True, (at(12, 30), "catch_up")),
            (Schedule("both", "scheduled.note", cron="*/5 * * * *", missed=CATCH_UP, at_boot=True),
             at(12, 0), at(12, 32), True, (at(12, 30), "boot")),  # at_boot is the reason at a boot
            (FIVE, at(12, 0), at(12, 32), True, None),
        ]
        for schedule, last_slot, now, booting, expected in cases:
            with self.subTest(schedule=schedule.name, last_slot=_shown(last_slot), now=_shown(now), booting=booting):
                self.assertEqual(due(schedule, last_slot, now, GRACE, booting), expected)
        self.assertEqual(manual(at(12, 1, 0.5)), (at(12, 1, 0.5), "manual"))

    def test_grace_is_the_edge_of_on_time(self):
        self.assertEqual(due(FIVE, at(12, 0), at(12, 5, 30), grace=30).slot, at(12, 5))
        self.assertIsNone(due(FIVE, at(12, 0), at(12, 5, 30.001), grace=30))


def _shown(epoch):
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc).isoformat()


# --- schedules: built in Python, loaded from a file, declared with @periodic ---------------------


class ScheduleTest(unittest.TestCase):
    def test_valid(self):
        schedule = Schedule("refresh", "scheduled.note", cron="@hourly", args={"full": True}, hours=[8, 18],
                            zone="Europe/Berlin", priority=-1, max_attempts=2, timeout=30)
        self.assertEqual((schedule.queue, schedule.hours), ("notes", (8, 18)))  # the registered task's queue
        spec = schedule.spec("alpha")
        self.assertEqual((spec.task, spec.args, spec.queue, spec.project, spec.priority, spec.max_attempts,
                          spec.timeout), ("scheduled.note", {"full": True}, "notes", "alpha", -1, 2, 30))
        self.assertEqual(Schedule("x", "app:unregistered", every=1).queue, "default")
        self.assertEqual(Schedule("x", "scheduled.note", every=1, queue="other").queue, "other")

    def test_invalid_names_the_schedule_and_the_field(self):
        cases = [  # keyword arguments -> the field and a bit of the problem
            ({"name": ""}, "name", "non-empty word"),
            ({"task": "two words"}, "task", "module:function"),
            ({}, "cron/every", "exactly one of cron"),
            ({"cron": "* * * * *", "every": 5}, "cron/every", "exactly one"),
            ({"cron": "* * * *"}, "cron", "has 4 fields"),
            ({"cron": 5}, "cron", "must be a string"),
            ({"every": 0}, "every", "positive number"),
            ({"every": "5"}, "every", "positive number"),
            ({"every": True}, "every", "positive number"),
            ({"every": float("inf")}, "every", "positive number"),
            ({"every": 5, "zone": "Mars/Olympus"}, "zone", "unknown time zone"),
            ({"every": 5, "hours": [9]}, "hours", "needs \\[start, end\\]"),
            ({"every": 5, "hours": [9, 9]}, "hours", "different end hour"),
            ({"every": 5, "hours": [9, 25]}, "hours", "end hour 0-24"),
            ({"every": 86400, "hours": [9, 17]}, "every", "never lands inside the hour window"),
            ({"cron": "0 3 * * *", "hours": [9, 17]}, "cron", "never fires inside the hour window"),
            ({"every": 5, "missed": "backfill"}, "missed", "'skip' or 'catch_up'"),
            ({"every": 5, "at_boot": "yes"}, "at_boot", "true or false"),
            ({"every": 5, "queue": ""}, "queue", "non-empty word"),
            ({"every": 5, "priority": 1.5}, "priority", "whole number"),
            ({"every": 5, "max_attempts": 0}, "max_attempts", "at least 1"),
            ({"every": 5, "timeout": -1}, "timeout", "positive number"),
            ({"every": 5, "args": {"when": datetime(2025, 1, 1)}}, "args", "JSON value"),
        ]
        for changes, field, problem in cases:
            arguments = {"name": "refresh", "task": "scheduled.note", **changes}
            with self.subTest(**{k: repr(v) for k, v in changes.items()}):
                with self.assertRaisesRegex(InvalidSchedule, f"^schedule '.*': {field}: .*{problem}") as caught:
                    Schedule(**arguments)
                self.assertIsInstance(caught.exception, ConfigError)
                self.assertNotIn("\n", str(caught.exception))


class ScheduleFileTest(TempDirTestCase):
    def write(self, content, name="schedules.json"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as handle:
            handle.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def test_loads_every_key(self):
        path = self.write([
            {"name": "refresh", "task": "scheduled.note", "cron": "*/15 * * * *", "args": {"full": True},
             "zone": "Europe/Berlin", "hours": [8, 18], "missed": "catch_up", "at_boot": True, "priority": 3,
             "max_attempts": 2, "timeout": 60},
            {"name": "ping", "task": "app:ping", "every": 0.5, "queue": "fast"},
        ])
        refresh, ping = load_schedule_file(path)
        self.assertEqual(refresh, Schedule("refresh", "scheduled.note", cron="*/15 * * * *", args={"full": True},
                                           queue="notes", zone="Europe/Berlin", hours=(8, 18), missed="catch_up",
                                           at_boot=True, priority=3, max_attempts=2, timeout=60))
        self.assertEqual((ping.every, ping.queue, ping.missed, ping.at_boot), (0.5, "fast", "skip", False))
        self.assertEqual(load_schedule_file(self.write("[]", "empty.json")), [])

    def test_problems_are_one_line_naming_file_entry_and_key(self):
        good = {"name": "refresh", "task": "app:refresh", "cron": "@hourly"}
        cases = [  # file content -> what the message says after the file's name
            ("[{", "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 3"),
            ({"name": "refresh"}, "needs a JSON list of schedules, .* not an object"),
            ([good, "refresh"], "entry 2: needs an object .* not a string"),
            ([{**good, "crn": "@daily"}], "entry 1 \\('refresh'\\): unknown key 'crn'; the keys are name, task, cron"),
            ([{"name": "refresh", "cron": "@daily"}], "entry 1 \\('refresh'\\): missing key 'task'"),
            ([{"task": "app:refresh", "cron": "@daily"}], "entry 1: missing key 'name'"),
            ([good, {**good, "name": 7}], "entry 2: name: must be a non-empty word"),
            ([{**good, "cron": "@fortnightly"}], "entry 1 \\('refresh'\\): cron: .*unknown macro '@fortnightly'"),
            ([{**good, "cron": None, "every": "5"}], "entry 1 \\('refresh'\\): every: must be a positive number"),
            ([{**good, "hours": "8-18"}], "entry 1 \\('refresh'\\): hours: needs \\[start, end\\]"),
            ([{**good, "at_boot": 1}], "entry 1 \\('refresh'\\): at_boot: must be true or false"),
            ([good, {**good, "every": 5, "cron": None}], "entry 2: name 'refresh' is taken by entry 1"),
        ]
        for content, message in cases:
            with self.subTest(content=content):
                path = self.write(content)
                with self.assertRaisesRegex(ConfigError, f"^schedule file {path}: {message}") as caught:
                    load_schedule_file(path)
                self.assertNotIn("\n", str(caught.exception))

    def test_a_missing_file(self):
        path = os.path.join(self.dir, "nowhere.json")
        with self.assertRaisesRegex(ConfigError, f"^schedule file {path}: cannot read it: No such file"):
            load_schedule_file(path)


class PeriodicTest(unittest.TestCase):
    def test_registers_a_task_and_a_schedule(self):
        @rowfleet.periodic("*/15 * * * *", name="periodic.refresh", args={"full": True}, queue="maintenance",
                           hours=[8, 18], missed="catch_up", at_boot=True, timeout=30)
        def refresh(full):
            return {"full": full}

        self.assertEqual(refresh(full=False), {"full": False})  # still a plain function to call
        self.assertIs(tasks.resolve("periodic.refresh"), refresh.fn)
        self.assertEqual(tasks.stamp("periodic.refresh").timeout, 30)
        declared = next(s for s in schedule.registered_schedules() if s.name == "periodic.refresh")
        self.assertEqual(declared, Schedule("periodic.refresh", "periodic.refresh", cron="*/15 * * * *",
                                            args={"full": True}, queue="maintenance", hours=(8, 18),
                                            missed="catch_up", at_boot=True))

    def test_default_name_and_every(self):
        @rowfleet.periodic(every=20)
        def ping():
            return "pong"

        name = f"{__name__}:PeriodicTest.test_default_name_and_every.<locals>.ping"
        self.assertEqual(ping.name, name)
        declared = next(s for s in schedule.registered_schedules() if s.name == name)
        self.assertEqual((declared.task, declared.every, declared.queue), (name, 20, "default"))

    def test_refused_when_declared(self):
        with self.assertRaisesRegex(ConfigError, "@periodic needs a cron expression"):
            @rowfleet.periodic
            def bare():
                pass
        with self.assertRaisesRegex(InvalidSchedule, "schedule 'periodic.bad': cron: .*has 2 fields"):
            @rowfleet.periodic("* *", name="periodic.bad")
            def bad():
                pass
        self.assertNotIn("periodic.bad", [s.name for s in schedule.registered_schedules()])


# --- two schedulers against one database -----------------------------------------------------


class SchedulerContract:
    """Subclasses provide ``config()`` naming their database."""

    def setUp(self):
        super().setUp()
        self.store = self.open_store(synchronous="NORMAL")

    def scheduler(self, schedules, identity, **options):
        """A scheduler with a database connection of its own, as in a process of its own."""
        return Scheduler(self.config(), schedules, self.open_store(migrate=False, synchronous="NORMAL"),
                         identity=identity, **options)

    def own_store(self):
        """A store for a thread: opened, and to be closed, in the thread that uses it."""
        from rowfleet.store import open_store

        return open_store(self.config(synchronous="NORMAL"))

    def drive(self, schedulers, start, end, step=7.0):
        """Tick every scheduler at each moment from ``start`` to ``end``, each a little after
        the one before, taking turns at going first; what each one fired."""
        fired = {id(s): [] for s in schedulers}
        now, turn = start, 0
        while now <= end:
            order = schedulers[turn % len(schedulers):] + schedulers[:turn % len(schedulers)]
            for offset, each in enumerate(order):
                fired[id(each)].extend(each.run_once(now + 0.25 * offset))
            now, turn = now + step, turn + 1
        return [fired[id(s)] for s in schedulers]

    def slots(self, name):
        return sorted(row["slot"] for row in self.store.reads.fired_slots("", name, limit=10_000))

    def assert_exactly_once(self, fired_lists, expected):
        """Each expected slot fired once, by one scheduler, as one job; nothing else fired."""
        fired = [item for items in fired_lists for item in items]
        rows = self.store.reads.fired_slots("", limit=10_000)
        self.assertEqual({name: self.slots(name) for name in expected}, expected)
        self.assertEqual(sorted((r["name"], r["slot"], r["job_id"], r["reason"]) for r in rows), sorted(fired))
        jobs = self.store.reads.list_jobs("", limit=10_000)
        self.assertEqual(len(jobs), sum(len(slots) for slots in expected.values()))
        self.assertEqual(sorted((job.id, job.schedule, job.schedule_slot, job.fire_reason) for job in jobs),
                         sorted((item.job_id, item.name, item.slot, item.reason) for item in fired))

    def test_two_schedulers_fire_each_slot_once_over_an_hour(self):
        every_20 = Schedule("every-20", "scheduled.note", every=20, args={"kind": "cadence"})
        schedules = [MINUTELY, every_20]
        a, b = self.scheduler(schedules, "a"), self.scheduler(schedules, "b")
        fired_a, fired_b = self.drive([a, b], at(12, 0, 3), at(13, 0, 3))
        self.assert_exactly_once([fired_a, fired_b], {
            "minutely": [at(12, 0, 60 * m) for m in range(61)],  # 12:00 was on time at the first tick
            "every-20": [at(12, 0, s) for s in range(0, 3601, 20)],
        })
        self.assertTrue(fired_a and fired_b, "both schedulers won some slots")
        job = self.store.get_job(fired_b[0].job_id, "")
        by_id = {item.job_id: item.name for item in fired_a + fired_b}
        expected_args = {"minutely": None, "every-20": {"kind": "cadence"}}[by_id[job.id]]
        self.assertEqual((job.task, job.queue, job.args), ("scheduled.note", "notes", expected_args))
        fired_by = {row["fired_by"] for row in self.store.reads.fired_slots("", limit=10_000)}
        self.assertEqual(fired_by, {"a", "b"})
        self.assertEqual(self.store.reads.last_slots(""), {"every-20": at(13, 0), "minutely": at(13, 0)})

    def test_two_schedulers_racing_from_two_threads(self):
        schedules = [MINUTELY, EVERY_20]
        moments = [at(12, 0, 1) + 3.0 * step for step in range(200)]  # ten minutes
        barrier = threading.Barrier(2, timeout=DEADLINE)
        fired, failures = {}, []

        def tick_along(identity):
            try:
                with self.own_store() as store:
                    each = Scheduler(self.config(), schedules, store, identity=identity)
                    fired[identity] = []
                    for now in moments:
                        barrier.wait()  # both at the same moment: a race for every slot
                        fired[identity].extend(each.run_once(now))
            except BaseException as exc:  # reported by the test thread below
                failures.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=tick_along, args=(name,), name=f"scheduler-{name}") for name in "ab"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(DEADLINE)
        self.assertEqual(failures, [])
        self.assert_exactly_once(list(fired.values()), {
            "minutely": [at(12, m) for m in range(10)],
            "every-20": [at(12, 0, s) for s in range(0, 598, 20)],
        })

    def test_catch_up_fires_one_job_for_the_gap(self):
        a, b = self.scheduler([FIVE_CATCH_UP], "a"), self.scheduler([FIVE_CATCH_UP], "b")
        self.drive([a, b], at(12, 0, 2), at(12, 7))
        # Both down from 12:07 to 12:32: slots 12:10 to 12:30 are missed.
        a, b = self.scheduler([FIVE_CATCH_UP], "a2"), self.scheduler([FIVE_CATCH_UP], "b2")
        self.assertEqual([f.slot for f in a.run_once(at(12, 32)) + b.run_once(at(12, 32, 1))], [at(12, 30)])
        self.drive([b, a], at(12, 32, 7), at(12, 45, 30))
        self.assertEqual(self.slots("five-catch-up"), [at(12, m) for m in (0, 5, 30, 35, 40, 45)])
        self.assertEqual(len(self.store.reads.list_jobs("", limit=100)), 6)

    def test_skip_fires_nothing_for_the_gap(self):
        a, b = self.scheduler([FIVE], "a"), self.scheduler([FIVE], "b")
        self.drive([a, b], at(12, 0, 2), at(12, 7))
        a, b = self.scheduler([FIVE], "a2"), self.scheduler([FIVE], "b2")
        self.assertEqual(a.run_once(at(12, 32)) + b.run_once(at(12, 32, 1)), [])
        self.drive([b, a], at(12, 32, 7), at(12, 45, 30))
        self.assertEqual(self.slots("five"), [at(12, m) for m in (0, 5, 35, 40, 45)])

    def test_at_boot_fires_the_current_slot_once(self):
        a = self.scheduler([NIGHTLY_AT_BOOT, NIGHTLY], "a")
        self.assertEqual([(f.name, f.slot) for f in a.run_once(at(9, 0))], [("nightly-at-boot", at(3, 0))])
        self.assertEqual(a.run_once(at(9, 0, 1)), [])
        b = self.scheduler([NIGHTLY_AT_BOOT, NIGHTLY], "b")  # boots later the same day: fired already
        self.assertEqual(b.run_once(at(9, 5)), [])
        self.drive([a, b], at(2, 59, 50, day=2), at(3, 1, day=2), step=5)
        self.assertEqual(self.slots("nightly-at-boot"), [at(3, 0), at(3, 0, day=2)])
        self.assertEqual(self.slots("nightly"), [at(3, 0, day=2)])

    def test_a_slot_older_than_the_newest_fired_is_refused(self):
        spec = FIVE.spec("")
        self.assertIsNotNone(self.store.fire_slot("", "five", at(12, 10), spec, "fast-clock"))
        self.assertIsNone(self.store.fire_slot("", "five", at(12, 10), spec, "slow-clock"))
        self.assertIsNone(self.store.fire_slot("", "five", at(12, 5), spec, "slow-clock"))
        self.assertEqual(self.slots("five"), [at(12, 10)])
        self.assertEqual(len(self.store.reads.list_jobs("", limit=10)), 1)

    def test_projects_are_apart(self):
        spec = FIVE.spec("alpha")
        self.assertIsNotNone(self.store.fire_slot("alpha", "five", at(12, 10), spec, "a"))
        self.assertIsNotNone(self.store.fire_slot("", "five", at(12, 10), FIVE.spec(""), "a"))
        self.assertEqual(self.store.reads.last_slots("alpha"), {"five": at(12, 10)})
        with self.assertRaises(ValueError):
            self.store.fire_slot("beta", "five", at(12, 15), spec, "a")

    def test_old_slot_records_prune(self):
        from rowfleet.store import open_store

        clock = [at(12, 0)]
        store = open_store(self.config(), clock=lambda: clock[0])
        self.addCleanup(store.close)
        store.fire_slot("", "five", at(12, 0), FIVE.spec(""), "a")
        clock[0] = at(13, 0)
        store.fire_slot("", "five", at(13, 0), FIVE.spec(""), "a")
        with store.transaction() as tx:  # as Store.prune would run it: half an hour of retention
            self.assertEqual(tx.run("prune_schedule_slots", retention=1800.0, limit=1000), 1)
        self.assertEqual(self.slots("five"), [at(13, 0)])
        self.assertEqual(store.reads.last_slots(""), {"five": at(13, 0)})

    def test_the_loop_wakes_at_each_slot_and_backs_off_when_the_store_fails(self):
        schedule = Schedule("fast", "scheduled.note", every=0.02)
        stop, failures = threading.Event(), []

        def loop():
            try:
                with self.own_store() as store:
                    Scheduler(self.config(), [schedule], FailingStore(store, fail_calls=1), tick=0.05).run(stop)
            except BaseException as exc:  # reported by the test thread below
                failures.append(exc)

        thread = threading.Thread(target=loop, name="scheduler-loop")
        self.addCleanup(thread.join, DEADLINE)
        self.addCleanup(stop.set)
        with self.assertLogs("rowfleet.scheduler", "WARNING") as logged:
            thread.start()
            wait_until(lambda: len(self.slots("fast")) >= 3 or failures, message="three slots of a 20 ms cadence")
            stop.set()
            thread.join(DEADLINE)
        self.assertEqual([record.getMessage() for record in logged.records],
                         ["scheduler tick failed (trying again in 0.1s): database unreachable: injected"])
        self.assertFalse(thread.is_alive())
        self.assertEqual(failures, [])
        slots = self.slots("fast")
        self.assertEqual(len(self.store.reads.list_jobs("", limit=10_000)), len(slots))

    # --- why each slot fired: on its record, on its job, and to its handler ----------------

    def reasons(self, name):
        """Each slot of ``name`` fired, oldest first, with why: (slot, reason), as its record
        says, after checking that its job says the same."""
        rows = sorted(self.store.reads.fired_slots("", name, limit=10_000), key=lambda row: row["slot"])
        for row in rows:
            job = self.store.get_job(row["job_id"], "")
            self.assertEqual((job.schedule, job.schedule_slot, job.fire_reason), (name, row["slot"], row["reason"]))
        return [(row["slot"], row["reason"]) for row in rows]

    def test_each_fired_job_says_why_it_fired(self):
        schedules = [NIGHTLY_AT_BOOT, FIVE, FIVE_CATCH_UP]
        a = self.scheduler(schedules, "a")
        first = a.run_once(at(9, 0, 10))
        self.assertEqual(sorted((f.name, f.reason) for f in first),
                         [("five", "tick"), ("five-catch-up", "tick"), ("nightly-at-boot", "boot")])
        self.assertEqual([f.reason for f in a.run_once(at(9, 5, 1))], ["tick", "tick"])
        # Every scheduler down from 09:06 to 09:32: 09:10 to 09:30 are missed.
        b = self.scheduler(schedules, "b")
        self.assertEqual([(f.name, f.slot, f.reason) for f in b.run_once(at(9, 32))],
                         [("five-catch-up", at(9, 30), "catch_up")])
        self.assertEqual(self.reasons("nightly-at-boot"), [(at(3, 0), "boot")])
        self.assertEqual(self.reasons("five"), [(at(9, 0), "tick"), (at(9, 5), "tick")])
        self.assertEqual(self.reasons("five-catch-up"), [(at(9, 0), "tick"), (at(9, 5), "tick"),
                                                          (at(9, 30), "catch_up")])

    def test_a_slot_on_time_at_boot_is_a_tick(self):
        a = self.scheduler([Schedule("hourly-at-boot", "scheduled.note", cron="@hourly", at_boot=True)], "a")
        self.assertEqual([(f.slot, f.reason) for f in a.run_once(at(9, 0, 30))], [(at(9, 0), "tick")])

    def test_a_manual_fire_is_a_slot_at_its_moment_fired_once(self):
        from rowfleet.services.scheduler import fire_now
        from rowfleet.store import open_store

        clock = [at(12, 5, 0.5)]
        store = open_store(self.config(), clock=lambda: clock[0])
        self.addCleanup(store.close)
        fired = fire_now(store, "", FIVE, "ops")
        self.assertEqual((fired.name, fired.slot, fired.reason), ("five", at(12, 5, 0.5), "manual"))
        self.assertIsNone(fire_now(store, "", FIVE, "ops again"), "the same instant fired twice")
        self.assertEqual(self.reasons("five"), [(at(12, 5, 0.5), "manual")])
        self.assertEqual([row["fired_by"] for row in self.store.reads.fired_slots("", "five")], ["ops"])
        # The operator's job stands for 12:05, which a scheduler a hair behind has not fired yet.
        a = self.scheduler([FIVE], "a")
        self.assertEqual(a.run_once(at(12, 5, 1)), [])
        self.assertEqual([(f.slot, f.reason) for f in a.run_once(at(12, 10, 1))], [(at(12, 10), "tick")])
        clock[0] = at(12, 11)
        self.assertEqual(fire_now(store, "", FIVE, "ops").reason, "manual")
        self.assertEqual(self.reasons("five"), [(at(12, 5, 0.5), "manual"), (at(12, 10), "tick"),
                                                (at(12, 11), "manual")])

    def test_two_manual_fires_of_one_instant_make_one_job(self):
        from rowfleet.services.scheduler import fire_now
        from rowfleet.store import open_store

        barrier = threading.Barrier(2, timeout=DEADLINE)
        fired, failures = [], []

        def fire(by):
            try:
                with open_store(self.config(synchronous="NORMAL"), clock=lambda: at(12, 3, 0.25)) as store:
                    barrier.wait()
                    fired.append(fire_now(store, "", FIVE, by))
            except BaseException as exc:  # reported by the test thread below
                failures.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=fire, args=(by,), name=f"fire-{by}") for by in ("ops-a", "ops-b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(DEADLINE)
        self.assertEqual(failures, [])
        self.assertEqual(len([f for f in fired if f is not None]), 1, fired)
        self.assertEqual(self.reasons("five"), [(at(12, 3, 0.25), "manual")])
        self.assertEqual(len(self.store.reads.list_jobs("", limit=10)), 1)

    def test_the_handler_reads_why_its_job_fired(self):
        from rowfleet.services.scheduler import fire_now
        from rowfleet.worker.loop import Worker

        why = Schedule("why", "scheduled.why", cron="0 3 * * *", at_boot=True)
        booted, = self.scheduler([why], "a").run_once(at(9, 0))
        by_hand = fire_now(self.store, "", why, "ops")
        Worker(self.config(), "why", burst=True).run()
        self.assertEqual(self.store.get_job(booted.job_id, "").result,
                         {"schedule": "why", "slot": at(3, 0), "reason": "boot"})
        self.assertEqual(self.store.get_job(by_hand.job_id, "").result,
                         {"schedule": "why", "slot": by_hand.slot, "reason": "manual"})

    def test_refuses_no_schedules_and_clashing_names(self):
        with self.assertRaisesRegex(ConfigError, "no schedules"):
            Scheduler(self.config(), [], self.store)
        with self.assertRaisesRegex(ConfigError, "two different schedules are named 'five'"):
            Scheduler(self.config(), [FIVE, Schedule("five", "scheduled.note", every=5)], self.store)


class FailingStore:
    """The real store, whose first ``fail_calls`` reads of the schedules' rows fail as an
    unreachable database would."""

    def __init__(self, store, fail_calls):
        self._store, self._left = store, fail_calls

    def schedule_rows(self, project):
        if self._left > 0:
            self._left -= 1
            raise StoreUnavailable("database unreachable: injected")
        return self._store.schedule_rows(project)

    def __getattr__(self, name):
        return getattr(self._store, name)


class SQLiteSchedulerTest(SchedulerContract, TempDirTestCase):
    pass


class PostgresSchedulerTest(PostgresDatabaseCase, SchedulerContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""


if __name__ == "__main__":
    unittest.main()
