"""The scheduler as real OS processes: two ``rowfleet scheduler --schedule FILE`` processes
fire a one-second cadence against the same database, on SQLite and PostgreSQL, and a bad
schedule file is refused before anything is written.

The in-process contract (moved time, two schedulers racing from two threads) is
test_scheduler.py; this one shows the command line, the loop, its signals and the
database's own locking doing the same with real processes and real time.
"""

from __future__ import annotations

import json
import os
import unittest

from pg_harness import PostgresServerCase
from support import TempDirTestCase, wait_until

SLOTS = 5  # slots to wait for: about five seconds of a one-second cadence
SCHEDULES = [{"name": "tick", "task": "app:tick", "every": 1, "args": {"from": "file"}, "queue": "ticks"}]

NIGHTLY_APP = """\
import rowfleet


@rowfleet.periodic("0 3 * * *", name="nightly", args={"full": True}, queue="reports", at_boot=True)
def nightly(full):
    return full
"""

HOURLY_APP = """\
import rowfleet


@rowfleet.periodic(every=3600, name="hourly", queue="why")
def hourly():
    job = rowfleet.current_job()  # why this job exists, as its handler reads it
    return [job.schedule, job.schedule_slot, job.fire_reason]
"""


class SchedulerProcessContract:
    """Subclasses provide ``empty_database()``: what ``--db`` names for this test."""

    def setUp(self) -> None:
        super().setUp()
        self.db = self.empty_database()
        self.store = self.open_store()  # the schema, and this test's own connection

    def empty_database(self) -> str:
        raise NotImplementedError

    def write_schedules(self, schedules, name="schedules.json") -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w") as handle:
            handle.write(schedules if isinstance(schedules, str) else json.dumps(schedules))
        return path

    def test_two_schedulers_fire_each_slot_once(self):
        path = self.write_schedules(SCHEDULES)
        schedulers = [self.launch_logged(f"scheduler-{n}", "scheduler", "--schedule", path) for n in (1, 2)]

        def fired():
            for process in schedulers:
                self.assertIsNone(process.poll(), f"a scheduler exited early:\n{self.output(process)}")
            return len(self.store.reads.fired_slots("", "tick", limit=1000)) >= SLOTS

        wait_until(fired, message=f"{SLOTS} slots of a one-second cadence")
        self.stop_all(*schedulers)
        rows = self.store.reads.fired_slots("", "tick", limit=1000)
        jobs = self.store.reads.list_jobs("", limit=1000)
        slots = [row["slot"] for row in rows]
        self.assertEqual(len(slots), len(set(slots)))
        self.assertTrue(all(slot == int(slot) for slot in slots), slots)  # whole seconds, as both computed them
        self.assertEqual(len(jobs), len(rows), "one job per slot")
        self.assertEqual(sorted(job.id for job in jobs), sorted(row["job_id"] for row in rows))
        self.assertEqual([(job.task, job.queue, job.args) for job in jobs],
                         [("app:tick", "ticks", {"from": "file"})] * len(jobs))
        self.assertEqual(self.store.reads.last_slots(""), {"tick": max(slots)})
        for process in schedulers:
            self.assertNotIn("Traceback", self.output(process))

    def test_an_app_schedule_once_then_the_schedules_shown(self):
        self.write_module("nightly_app", NIGHTLY_APP)
        fired = self.cli_json("scheduler", "--app", "nightly_app", "--once")
        self.assertEqual([(item["name"], item["reason"]) for item in fired], [("nightly", "boot")])  # at_boot: 03:00 at once
        self.assertEqual(self.cli_json("scheduler", "--app", "nightly_app", "--once"), [])  # fired already
        job = self.store.get_job(fired[0]["job_id"], "")
        self.assertEqual((job.task, job.queue, job.args), ("nightly", "reports", {"full": True}))
        [shown] = self.cli_json("schedules")
        self.assertEqual((shown["name"], shown["last_slot"]), ("nightly", fired[0]["slot"]))
        self.assertEqual([(slot["slot"], slot["job_id"], slot["reason"]) for slot in shown["recent"]],
                         [(fired[0]["slot"], fired[0]["job_id"], "boot")])
        listed = self.cli("schedules").stdout.splitlines()
        self.assertEqual(listed[0].split(), ["schedule", "slot", "why", "job", "fired", "by"])
        self.assertEqual(listed[1].split()[:4], ["nightly", fired[0]["slot"], "boot", str(job.id)])
        shown = self.cli("job", str(job.id)).stdout
        for line in ("schedule: nightly", f"schedule_slot: {fired[0]['slot']}", "fire_reason: boot"):
            self.assertIn(line, shown)
        self.assertEqual({key: self.cli_json("job", str(job.id))[key] for key in ("schedule", "schedule_slot", "fire_reason")},
                         {"schedule": "nightly", "schedule_slot": fired[0]["slot"], "fire_reason": "boot"})

    def test_an_operator_fires_a_schedule_by_hand(self):
        self.write_module("hourly_app", HOURLY_APP)
        path = self.write_schedules([{**SCHEDULES[0], "every": 3600}])
        first = int(self.cli("fire", "hourly", "--app", "hourly_app").stdout)
        second = self.cli_json("fire", "tick", "--schedule", path, "--by", "ops")
        self.assertEqual((second["name"], second["reason"]), ("tick", "manual"))
        job = self.store.get_job(first, "")
        self.assertEqual((job.task, job.queue, job.schedule, job.fire_reason), ("hourly", "why", "hourly", "manual"))
        self.assertEqual(self.store.reads.last_slots(""), {  # the newest slot of each: the operator's
            "hourly": job.schedule_slot, "tick": self.store.get_job(second["job_id"], "").schedule_slot})
        [row] = self.store.reads.fired_slots("", "tick")
        self.assertEqual((row["job_id"], row["reason"], row["fired_by"]), (second["job_id"], "manual", "ops"))
        self.cli("worker", "--queue", "why", "--app", "hourly_app", "--burst")
        self.assertEqual(self.store.get_job(first, "").result, ["hourly", job.schedule_slot, "manual"])
        self.assertIn("fire_reason: manual", self.cli("job", str(first)).stdout)

    def test_firing_an_unknown_schedule_is_one_line_and_writes_nothing(self):
        path = self.write_schedules(SCHEDULES)
        cases = [  # arguments -> the one line on stderr
            (("fire", "nope", "--schedule", path), "no schedule is named 'nope'; the schedules given are: tick"),
            (("fire", "tick"), "no schedule is named 'tick': give the --schedule FILE or the --app MODULE"),
            (("fire", "two words", "--schedule", path), "argument NAME: expected a non-empty word"),
            (("fire", "tick", "--schedule", os.path.join(self.dir, "missing.json")), "cannot read it"),
            (("fire", "--schedule", path), "the following arguments are required: NAME"),
        ]
        for args, says in cases:
            with self.subTest(args=args):
                result = self.cli(*args, check=False)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
                self.assertIn(says, result.stderr)
                self.assertNotIn("Traceback", result.stderr)
                self.assertEqual(result.stdout, "")
        self.assertEqual(self.store.reads.last_slots(""), {})
        self.assertEqual(self.store.reads.list_jobs("", limit=10), [])

    def test_a_bad_schedule_file_is_refused_before_anything_is_written(self):
        path = self.write_schedules([{**SCHEDULES[0], "every": "1s"}])
        result = self.cli("scheduler", "--schedule", path, check=False)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(result.stderr.splitlines(),
                         [f"rowfleet: error: schedule file {path}: entry 1 ('tick'): every: must be a positive "
                          f"number of seconds, at most 100 years, got '1s'"])
        self.assertEqual(result.stdout, "")
        self.assertEqual(self.store.reads.last_slots(""), {})
        self.assertEqual(self.store.reads.list_jobs("", limit=10), [])


class SQLiteSchedulerProcessTest(SchedulerProcessContract, TempDirTestCase):
    def empty_database(self) -> str:
        return self.db  # the file in this test's folder, created when the store first opens


class PostgresSchedulerProcessTest(PostgresServerCase, SchedulerProcessContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database: ``self.db`` is its URL."""


if __name__ == "__main__":
    unittest.main()
