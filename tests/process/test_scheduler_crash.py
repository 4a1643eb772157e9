"""The scheduler's crash safety with real processes and real crashes, on SQLite and PostgreSQL.

Owns the scheduler's crash contract, written once in ``SchedulerCrashContract`` and run on
both backends. Firing a slot is one transaction (``ScheduleStore.fire_slot``): hold the
schedule's row, insert the slot's record, insert the job, name the job in the record,
advance ``schedules.last_slot``. A child driver script runs one real
``Scheduler.run_once(now)`` at a fixed ``now`` and exits (``os._exit(137)``) at a named
step, injected by wrapping the real thing as test_crash_points.py does: right after a
named write inside the transaction (the store's ``transaction()`` is wrapped, so the
statement ran and its row came back), just before the ``COMMIT`` (on SQLite a ``sqlite3``
trace callback on the store's own connection sees it coming; on PostgreSQL the wrapped
``transaction()`` exits once the body is done, before the commit is sent, and the server
rolls the open transaction back as the connection drops), or right after the commit.

Recovery is the same driver at the same ``now``, then the real ``rowfleet scheduler
--once`` on the real clock. The schedule is yearly with ``at_boot``, so both agree on the
slot: the driver's ``now`` is five seconds after this year's slot (on time), and the real
scheduler, booting, fires this year's slot however old it is, unless it has fired already.

Invariants: a crash before the commit leaves nothing of the slot (no record, no job,
``last_slot`` not moved); after recovery, or after a crash that followed the commit, the
slot has exactly one record, that record names the one job, and ``last_slot`` is the slot.

Last, ``kill -9`` under load: two real ``rowfleet scheduler`` processes on a one-second
cadence, one of them killed and restarted again and again; every slot fired has exactly
one job and every job exactly one slot, and the one left running keeps firing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import unittest

from rowfleet.job import iso
from rowfleet.schedule import Schedule, due
from pg_harness import PostgresServerCase
from support import DEADLINE, TempDirTestCase, child_env, kill_group, wait_until

CRASHED = 137
YEARLY = {"name": "yearly", "task": "app:report", "cron": "@yearly", "args": {"kind": "annual"}, "at_boot": True}
TICK = {"name": "tick", "task": "app:tick", "every": 1}
ON_TIME = 5.0  # the driver's `now`: this many seconds after the slot, well within the grace
KILLS = 4  # SIGKILLs under load, taking turns between the two schedulers
LONGEST_GAP = 5.0  # seconds between two fired slots while at least one scheduler runs

DRIVER_SOURCE = '''\
"""Usage: python scheddriver.py STEP DB SCHEDULE_FILE NOW. One real tick of the scheduler
at NOW (epoch seconds); prints what fired as JSON, or exits 137 at STEP."""
import contextlib
import json
import os
import sys

from rowfleet.config import Config
from rowfleet.schedule import load_schedule_file
from rowfleet.services.scheduler import Scheduler
from rowfleet.store import open_store

STEP, DB, SCHEDULE_FILE, NOW = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
POSTGRES = DB.startswith(("postgres://", "postgresql://"))
# The steps that exit right after a named write, inside fire_slot's transaction.
CRASH_AFTER = {"after_slot_insert": "schedule_slot_insert", "after_job_insert": "enqueue"}
ADVANCE = "schedule_advance"  # fire_slot's last write


def crash():
    os._exit(137)


class WatchedTx:
    """A store's transaction that notes which named queries wrote a row, and exits right
    after the one STEP names."""

    def __init__(self, tx):
        self._tx, self.wrote = tx, set()

    def __getattr__(self, name):
        return getattr(self._tx, name)

    def one(self, query, **params):
        row = self._tx.one(query, **params)
        self._ran(query, row is not None)
        return row

    def run(self, query, **params):
        count = self._tx.run(query, **params)
        self._ran(query, count > 0)
        return count

    def _ran(self, query, wrote):
        if wrote:
            self.wrote.add(query)
            if CRASH_AFTER.get(STEP) == query:
                crash()


def watch(store):
    """Wrap the store's transactions: exit inside one, before its commit (Postgres) or
    right after it, as STEP says."""
    transaction = store.transaction

    @contextlib.contextmanager
    def watched(*args, **kwargs):
        with transaction(*args, **kwargs) as tx:
            watching = WatchedTx(tx)
            yield watching
            if STEP == "before_commit" and POSTGRES and ADVANCE in watching.wrote:
                crash()  # every write ran on the server; the COMMIT is never sent
        if STEP == "after_commit" and ADVANCE in watching.wrote:
            crash()  # committed; the process does nothing else

    store.transaction = watched


def crash_at_sqlite_commit(conn):
    """Exit when this connection is about to COMMIT a transaction that advanced a schedule."""
    seen = []

    def trace(sql):
        # A named query may open with comment lines of its own; judge the statement itself.
        sql = "\\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--")).strip()
        if sql.startswith("BEGIN"):
            seen.clear()
        elif sql.startswith("UPDATE schedules SET last_slot"):
            seen.append(sql)
        elif seen and sql.upper() == "COMMIT":
            crash()

    conn.set_trace_callback(trace)


config = Config(db=DB)
with open_store(config) as store:
    watch(store)
    if STEP == "before_commit" and not POSTGRES:
        crash_at_sqlite_commit(store.conn)
    scheduler = Scheduler(config, load_schedule_file(SCHEDULE_FILE), store)
    print(json.dumps([fired.to_dict() for fired in scheduler.run_once(NOW)]))
'''


class SchedulerCrashContract:
    """The crash contract for any backend. The TestCase mixing this in is a
    ``TempDirTestCase`` and provides ``empty_database()`` and ``await_rollbacks()``."""

    def setUp(self) -> None:
        super().setUp()
        self.db = self.empty_database()
        self.store = self.open_store()  # the schema, and this test's own connection
        self.driver = self.write_module("scheddriver", DRIVER_SOURCE)
        self.yearly = self.write_schedules([YEARLY], "yearly.json")
        # This year's slot, as a booting scheduler on the real clock sees it (the same slot
        # for the whole test, unless it runs across midnight on New Year's Eve, UTC); the
        # driver runs five seconds after it, where the slot is on time.
        self.slot = due(Schedule(**YEARLY), None, time.time(), grace=0.0, booting=True).slot
        self.now = self.slot + ON_TIME

    def empty_database(self) -> str:
        """What ``--db`` names for this test: a database with no rowfleet schema yet."""
        raise NotImplementedError

    def await_rollbacks(self) -> None:
        """Return once the database has undone whatever the dead child left uncommitted."""
        raise NotImplementedError

    # --- helpers -------------------------------------------------------------------------

    def write_schedules(self, schedules: list[dict], name: str) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w") as handle:
            json.dump(schedules, handle)
        return path

    def drive(self, step: str, expect: int = 0) -> list[dict]:
        """Run the driver's tick at ``self.now`` to ``step``; it must exit ``expect`` (137:
        the crash point was reached). What it fired, when it got to say."""
        result = subprocess.run([sys.executable, self.driver, step, self.db, self.yearly, repr(self.now)],
                                cwd=self.dir, env=child_env(), capture_output=True, text=True, timeout=DEADLINE)
        self.assertEqual(result.returncode, expect,
                         f"driver at {step} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        self.await_rollbacks()
        return json.loads(result.stdout) if expect == 0 else []

    def real_scheduler_once(self) -> list[dict]:
        """What the real ``rowfleet scheduler --once`` fires now, on the real clock."""
        return self.cli_json("scheduler", "--schedule", self.yearly, "--once")

    def assert_nothing_fired(self) -> None:
        self.assertEqual(self.store.reads.fired_slots("", limit=100), [], "a slot's record survived the crash")
        self.assertEqual(self.store.reads.list_jobs("", limit=100), [], "a job survived the crash")
        self.assertIsNone(self.store.reads.last_slots("").get(YEARLY["name"]), "last_slot moved without its slot")

    def assert_fired_once(self) -> int:
        """The slot has one record naming the one job, and ``last_slot`` is the slot; the job's id."""
        records = self.store.reads.fired_slots("", limit=100)
        jobs = self.store.reads.list_jobs("", limit=100)
        self.assertEqual([(record["name"], record["slot"]) for record in records], [(YEARLY["name"], self.slot)],
                         "not exactly one record of the slot")
        self.assertEqual(len(jobs), 1, f"not exactly one job: {jobs}")
        self.assertEqual(records[0]["job_id"], jobs[0].id, "the slot's record does not name its job")
        self.assertEqual((jobs[0].task, jobs[0].args, jobs[0].state), (YEARLY["task"], YEARLY["args"], "queued"))
        self.assertEqual(self.store.reads.last_slots(""), {YEARLY["name"]: self.slot})
        return jobs[0].id

    def crash_inside(self, step: str) -> None:
        """Crash inside fire_slot's transaction: nothing lands; recovery fires the slot once."""
        self.drive(step, expect=CRASHED)
        self.assert_nothing_fired()
        fired = self.drive("recover")
        job_id = self.assert_fired_once()
        self.assertEqual(fired, [{"name": YEARLY["name"], "slot": iso(self.slot), "job_id": job_id,
                                  "reason": "tick"}])
        self.assertEqual(self.real_scheduler_once(), [], "a restarted scheduler fired the slot again")
        self.assertEqual(self.assert_fired_once(), job_id)

    # --- crashes inside fire_slot, and right after it --------------------------------------

    def test_a_crash_after_the_slot_record_is_inserted_leaves_nothing_and_recovery_fires_once(self):
        self.crash_inside("after_slot_insert")

    def test_a_crash_after_the_job_is_inserted_leaves_nothing_and_recovery_fires_once(self):
        self.crash_inside("after_job_insert")

    def test_a_crash_just_before_the_commit_leaves_nothing_and_recovery_fires_once(self):
        self.crash_inside("before_commit")

    def test_a_crash_right_after_the_commit_fired_the_slot_once_and_a_restart_fires_nothing(self):
        self.drive("after_commit", expect=CRASHED)
        job_id = self.assert_fired_once()
        self.assertEqual(self.drive("recover"), [], "a restarted scheduler at the same moment fired again")
        self.assertEqual(self.real_scheduler_once(), [], "a restarted scheduler fired the slot again")
        self.assertEqual(self.assert_fired_once(), job_id)

    # --- kill -9 under load ----------------------------------------------------------------

    def test_kill_9_under_load_fires_each_slot_once(self):
        path = self.write_schedules([TICK], "tick.json")
        env = child_env(ROWFLEET_LOG_LEVEL="INFO")  # a scheduler logs when its loop starts

        def launch(n: int) -> subprocess.Popen:
            return self.launch_logged(f"scheduler-{n}", "scheduler", "--schedule", path, env=env)

        def newest() -> float:
            return self.store.reads.last_slots("").get(TICK["name"]) or 0.0

        def running(process: subprocess.Popen) -> bool:
            self.assertIsNone(process.poll(), f"a scheduler exited:\n{self.output(process)}")
            return "schedule(s) of project" in self.output(process)

        schedulers = [launch(1), launch(2)]
        launched = [*schedulers]
        last_kill = 0.0
        for kill in range(KILLS):
            # Both up, and a slot fired since the last kill: the survivor went on firing.
            wait_until(lambda: all(running(p) for p in schedulers) and newest() > last_kill,
                       message=f"both schedulers up and a new slot fired (before kill {kill + 1})")
            victim = kill % 2
            kill_group(schedulers[victim])
            self.assertEqual(schedulers[victim].returncode, -signal.SIGKILL)
            last_kill = newest()
            schedulers[victim] = launch(len(launched) + 1)
            launched.append(schedulers[victim])
        wait_until(lambda: all(running(p) for p in schedulers) and newest() > last_kill,
                   message="both schedulers up and a new slot fired after the last kill")
        self.stop_all(*schedulers)

        records = self.store.reads.fired_slots("", TICK["name"], limit=100_000)
        jobs = self.store.reads.list_jobs("", limit=100_000)
        slots = sorted(record["slot"] for record in records)
        self.assertGreaterEqual(len(slots), KILLS + 1)
        self.assertEqual(len(slots), len(set(slots)), "a slot fired twice")
        self.assertNotIn(None, [record["job_id"] for record in records], "a slot's record without its job")
        self.assertEqual(sorted(record["job_id"] for record in records), sorted(job.id for job in jobs),
                         "not one job per slot and one slot per job")
        self.assertEqual({job.task for job in jobs}, {TICK["task"]})
        self.assertEqual(self.store.reads.last_slots(""), {TICK["name"]: slots[-1]})
        gaps = [later - earlier for earlier, later in zip(slots, slots[1:])]
        self.assertLessEqual(max(gaps), LONGEST_GAP, f"slots went unfired while a scheduler ran: {slots}")
        for process in launched:
            self.assertNotIn("Traceback", self.output(process))


class SQLiteSchedulerCrashTest(SchedulerCrashContract, TempDirTestCase):
    def empty_database(self) -> str:
        return self.db  # the file in this test's folder, created when the store first opens

    def await_rollbacks(self) -> None:
        pass  # a dead process's locks went with it, and an uncommitted WAL tail is never read


class PostgresSchedulerCrashTest(PostgresServerCase, SchedulerCrashContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database: ``self.db`` is its URL."""


if __name__ == "__main__":
    unittest.main()
