"""What a job takes from its task's registration is written into its row when it is enqueued.

Owns the contract that a task's ``timeout`` and ``queue`` (``@rowfleet.task``) reach
``jobs.timeout`` and ``jobs.queue`` through every enqueue path that knows the task
(``rowfleet.enqueue``, ``Task.enqueue``, ``enqueue_many``, ``rowfleet.workflow`` nodes,
the scheduler's fired jobs, ``rowfleet enqueue NAME --app MODULE``), that a job's own
timeout beats its task's, and that the budget watchdog reads the job's row and the
worker's budget alone, never the task registry. Written once in ``StampContract`` and
run on SQLite and PostgreSQL; the watchdog's lookup needs no database.
"""

from __future__ import annotations

import json
import os
import unittest

import rowfleet
from rowfleet import tasks
from rowfleet.config import Config
from rowfleet.job import JobSpec
from rowfleet.schedule import Schedule
from rowfleet.store import open_store
from rowfleet.worker import watchdog
from pg_harness import PostgresServerCase
from support import TempDirTestCase

TIMEOUT = 7.0  # the registered task's: no worker's default budget is this


@rowfleet.task(name="stamps.slow", queue="stamps-io", timeout=TIMEOUT)
def slow(**_):
    return None


@rowfleet.task(name="stamps.plain")
def plain(**_):
    return None


@rowfleet.model("stamps-llm:q4", vram_mb=17000)
def load_llm():
    return object()


@rowfleet.task(name="stamps.infer", queue="stamps-gpu", model="stamps-llm:q4")
def infer(**_):
    return None


APP_SOURCE = '''\
import rowfleet


@rowfleet.task(name="stampapp.slow", queue="stampapp-io", timeout=9)
def slow():
    return None
'''


class StampContract:
    """Every backend must pass these; subclasses provide ``empty_database()``."""

    def setUp(self) -> None:
        super().setUp()
        self.db = self.empty_database()
        rowfleet.configure(db=self.db)
        self.addCleanup(rowfleet.configure)
        rowfleet.init()
        self.store = open_store(Config(db=self.db))
        self.addCleanup(self.store.close)

    def row(self, job_id: int):
        return self.store.get_job(job_id, "")

    def test_an_enqueue_of_a_registered_task_writes_its_timeout_and_queue_into_the_row(self):
        for job in (slow.enqueue({"n": 1}), rowfleet.enqueue(slow), rowfleet.enqueue("stamps.slow")):
            with self.subTest(job=job.id):
                self.assertEqual((self.row(job.id).timeout, self.row(job.id).queue), (TIMEOUT, "stamps-io"))

    def test_a_jobs_own_timeout_and_queue_beat_its_tasks(self):
        own = slow.enqueue(timeout=2, queue="elsewhere")
        by_name = rowfleet.enqueue("stamps.slow", timeout=3)
        self.assertEqual((self.row(own.id).timeout, self.row(own.id).queue), (2.0, "elsewhere"))
        self.assertEqual((self.row(by_name.id).timeout, self.row(by_name.id).queue), (3.0, "stamps-io"))

    def test_a_task_without_a_timeout_or_an_unregistered_name_leaves_the_worker_budget(self):
        for job in (plain.enqueue(), rowfleet.enqueue("nowhere:task")):
            with self.subTest(task=job.task):
                self.assertEqual((self.row(job.id).timeout, self.row(job.id).queue), (None, "default"))

    def test_enqueue_many_stamps_every_job(self):
        self.assertEqual(rowfleet.enqueue_many(slow, [{"n": 1}, {"n": 2}]), 2)
        jobs = self.store.list_jobs("", queue="stamps-io")
        self.assertEqual([job.timeout for job in jobs], [TIMEOUT, TIMEOUT])

    def test_workflow_nodes_take_their_tasks_timeout_and_queue_unless_they_set_their_own(self):
        flow = rowfleet.workflow("stamps.flow", [
            {"id": "by_task", "task": slow},
            {"id": "by_name", "task": "stamps.slow"},
            {"id": "own", "task": slow, "timeout": 1, "queue": "mine"},
        ])
        run = rowfleet.get_run(rowfleet.start_run(flow, check=False))
        found = {node.id: self.row(node.jobs[0]) for node in run.nodes}
        self.assertEqual({node: (job.timeout, job.queue) for node, job in found.items()},
                         {"by_task": (TIMEOUT, "stamps-io"), "by_name": (TIMEOUT, "stamps-io"),
                          "own": (1.0, "mine")})

    def test_workflow_nodes_take_their_tasks_model_and_its_registered_vram_unless_they_set_their_own(self):
        flow = rowfleet.workflow("stamps.gpuflow", [
            {"id": "by_task", "task": infer},
            {"id": "own_vram", "task": infer, "vram_mb": 9000},
            {"id": "plain", "task": plain},
        ])
        run = rowfleet.get_run(rowfleet.start_run(flow, check=False))
        found = {node.id: self.row(node.jobs[0]) for node in run.nodes}
        self.assertEqual({node: (job.required_model, job.vram_mb) for node, job in found.items()},
                         {"by_task": ("stamps-llm:q4", 17000), "own_vram": ("stamps-llm:q4", 9000),
                          "plain": (None, None)})

    def test_a_schedules_fired_job_carries_its_tasks_model_and_vram(self):
        schedule = Schedule("stamps.gpu-every", "stamps.infer", every=60)
        job = self.store.fire_slot("", schedule.name, 60.0, schedule.spec(""), "test")
        self.assertEqual((self.row(job.id).required_model, self.row(job.id).vram_mb, self.row(job.id).queue),
                         ("stamps-llm:q4", 17000, "stamps-gpu"))

    def test_a_workflow_file_run_with_its_app_stamps_its_nodes(self):
        self.write_module("stampapp", APP_SOURCE)
        path = os.path.join(self.dir, "flow.json")
        with open(path, "w") as handle:
            json.dump({"name": "stamps.file", "nodes": [{"id": "a", "task": "stampapp.slow"},
                                                        {"id": "b", "task": "stampapp.slow", "timeout": 1}]},
                      handle)
        run_id = int(self.cli("run", path, "--app", "stampapp").stdout)
        run = rowfleet.get_run(run_id)
        self.assertEqual({node.id: (self.row(node.jobs[0]).timeout, self.row(node.jobs[0]).queue)
                          for node in run.nodes}, {"a": (9.0, "stampapp-io"), "b": (1.0, "stampapp-io")})

    def test_a_schedules_fired_job_carries_its_tasks_timeout(self):
        schedule = Schedule("stamps.every", "stamps.slow", every=60)
        own = Schedule("stamps.own", "stamps.slow", every=60, timeout=4, queue="mine")
        for fired, expected in ((schedule, (TIMEOUT, "stamps-io")), (own, (4.0, "mine"))):
            with self.subTest(schedule=fired.name):
                job = self.store.fire_slot("", fired.name, 60.0, fired.spec(""), "test")
                self.assertEqual((self.row(job.id).timeout, self.row(job.id).queue), expected)

    def test_the_command_line_stamps_what_its_app_modules_register(self):
        self.write_module("stampapp", APP_SOURCE)
        with_app = int(self.cli("enqueue", "stampapp.slow", "--app", "stampapp").stdout)
        own = int(self.cli("enqueue", "stampapp.slow", "--app", "stampapp", "--timeout", "2",
                           "--queue", "mine").stdout)
        without = int(self.cli("enqueue", "stampapp.slow").stdout)  # this process registered nothing
        self.assertEqual([(self.row(job).timeout, self.row(job).queue) for job in (with_app, own, without)],
                         [(9.0, "stampapp-io"), (2.0, "mine"), (None, "default")])


class SQLiteStampTest(StampContract, TempDirTestCase):
    def empty_database(self) -> str:
        return self.db


class PostgresStampTest(PostgresServerCase, StampContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database: ``self.db`` is its URL."""


class BudgetLookupTest(TempDirTestCase):
    """The watchdog's budget comes from the job's row, else the worker's budget: a worker
    that never imported the task's module watches its job alike."""

    def job(self, task: str, timeout: float | None = None):
        with open_store(self.config(), create=True) as store:
            store.migrate()
            return store.enqueue(JobSpec(task=task, timeout=timeout))

    def test_the_rows_timeout_is_the_budget_with_the_task_unregistered(self):
        job = self.job("unimported.module:task", timeout=2)
        self.assertFalse(tasks.registered(job.task))
        self.assertEqual(watchdog.budget_of(job, Config(budget=60)), 2.0)
        dog = watchdog.Watchdog(Config(budget=60), open_store)  # its thread is never started
        dog.watch(job)
        self.assertEqual(dog._budget, 2.0)

    def test_a_row_without_a_timeout_gets_the_workers_budget_whatever_the_registry_says(self):
        job = self.job("stamps.slow")  # written as plain SQL would: no timeout stamped
        self.assertEqual(tasks.stamp(job.task).timeout, TIMEOUT)  # the registry has one
        self.assertEqual(watchdog.budget_of(job, Config(budget=60)), 60.0)


if __name__ == "__main__":
    unittest.main()
