"""What a job takes from its task's registration is written into its row when it is enqueued.

Owns the contract that a task's ``timeout``, ``queue`` and ``model`` (``@rowfleet.task``),
and the ``vram_mb`` its model was registered with (``@rowfleet.model``), reach the job's row
through every enqueue path that knows the task (``rowfleet.enqueue``, ``Task.enqueue``,
``enqueue_many``, ``rowfleet.workflow`` nodes, the scheduler's fired jobs, ``rowfleet
enqueue NAME --app MODULE``), that a job's own values beat its task's, that a bad model or
vram is refused with nothing written, and that the budget watchdog reads the job's row and
the worker's budget alone, never the task registry. Written once in ``StampContract`` and
run on SQLite and PostgreSQL; the watchdog's lookup needs no database.
"""

from __future__ import annotations

import json
import os
import unittest

import rowfleet
from rowfleet import tasks
from rowfleet.config import Config
from rowfleet.errors import ConfigError
from rowfleet.job import JobSpec
from rowfleet.schedule import Schedule
from rowfleet.store import open_store
from rowfleet.worker import watchdog
from pg_harness import PostgresServerCase
from support import LibraryOnEmptyDatabase, TempDirTestCase

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


@rowfleet.model("stamps-other@rev2")  # registered without vram: unknown
def load_other():
    return object()


@rowfleet.task(name="stamps.infer", queue="stamps-gpu", model="stamps-llm:q4")
def infer(**_):
    return None


LLM, OTHER, VRAM = "stamps-llm:q4", "stamps-other@rev2", 17000


APP_SOURCE = '''\
import rowfleet


@rowfleet.task(name="stampapp.slow", queue="stampapp-io", timeout=9)
def slow():
    return None


@rowfleet.model("stampapp-llm:q4", vram_mb=9000)
def load():
    return "weights"


@rowfleet.task(name="stampapp.chat", model="stampapp-llm:q4")
def chat():
    return None
'''


class StampContract(LibraryOnEmptyDatabase):
    """Every backend must pass these; subclasses provide ``empty_database()``."""

    def needs(self, job_id: int) -> tuple:
        job = self.row(job_id)
        return job.required_model, job.vram_mb

    def unregistered(self, **options):
        """A job of a task no module of this process registers: written, with the warning
        ``rowfleet enqueue`` gives without ``--app``."""
        with self.assertWarns(rowfleet.TaskWarning):
            return rowfleet.enqueue("nowhere:task", **options)

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
        for job in (plain.enqueue(), self.unregistered()):
            with self.subTest(task=job.task):
                self.assertEqual((self.row(job.id).timeout, self.row(job.id).queue), (None, "default"))

    def test_enqueue_many_stamps_every_job(self):
        self.assertEqual(rowfleet.enqueue_many(slow, [{"n": 1}, {"n": 2}]), 2)
        self.assertEqual(rowfleet.enqueue_many(infer, [{"n": 1}, {"n": 2}]), 2)
        self.assertEqual([job.timeout for job in self.store.reads.list_jobs("", queue="stamps-io")], [TIMEOUT, TIMEOUT])
        self.assertEqual([self.needs(job.id) for job in self.store.reads.list_jobs("", queue="stamps-gpu")],
                         [(LLM, VRAM), (LLM, VRAM)])

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
            {"id": "by_name", "task": "stamps.infer"},
            {"id": "own_vram", "task": infer, "vram_mb": 9000},
            {"id": "own_model", "task": infer, "model": OTHER},
            {"id": "plain", "task": plain},
        ])
        run = rowfleet.get_run(rowfleet.start_run(flow, check=False))
        found = {node.id: self.row(node.jobs[0]) for node in run.nodes}
        self.assertEqual({node: (job.required_model, job.vram_mb) for node, job in found.items()},
                         {"by_task": (LLM, VRAM), "by_name": (LLM, VRAM), "own_vram": (LLM, 9000),
                          "own_model": (OTHER, None), "plain": (None, None)})

    def test_a_tasks_model_and_its_registered_vram_are_stamped_into_the_row(self):
        for job in (infer.enqueue(), rowfleet.enqueue(infer), rowfleet.enqueue("stamps.infer")):
            with self.subTest(job=job.id):
                self.assertEqual(self.needs(job.id), (LLM, VRAM))

    def test_a_jobs_own_model_and_vram_beat_its_tasks(self):
        own_model = infer.enqueue(model=OTHER)
        own_vram = infer.enqueue(vram_mb=20000)
        both = rowfleet.enqueue("stamps.infer", model=OTHER, vram_mb=8000)
        self.assertEqual([self.needs(job.id) for job in (own_model, own_vram, both)],
                         [(OTHER, None), (LLM, 20000), (OTHER, 8000)])

    def test_an_unregistered_task_or_model_takes_what_the_writer_says(self):
        jobs = [self.unregistered(), self.unregistered(model=LLM), self.unregistered(model="unregistered:q4"),
                self.unregistered(vram_mb=512)]
        self.assertEqual([self.needs(job.id) for job in jobs],
                         [(None, None), (LLM, VRAM), ("unregistered:q4", None), (None, 512)])

    def test_bad_models_and_vram_are_refused_and_write_nothing(self):
        for options in ({"model": "two words"}, {"model": ""}, {"vram_mb": 0}, {"vram_mb": 2 ** 31},
                        {"vram_mb": "big"}):
            with self.subTest(options=options), self.assertRaises(ConfigError):
                rowfleet.enqueue("nowhere:task", **options)
        self.assertEqual(self.store.reads.list_jobs(""), [])

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

    def test_the_command_line_stamps_model_and_vram(self):
        self.write_module("stampapp", APP_SOURCE)
        with_app = int(self.cli("enqueue", "stampapp.chat", "--app", "stampapp").stdout)
        own = int(self.cli("enqueue", "stampapp.chat", "--model", "org/other@rev", "--vram-mb", "4000").stdout)
        model_only = int(self.cli("enqueue", "stampapp.chat", "--app", "stampapp", "--model",
                                  "stampapp-llm:q4").stdout)
        without = int(self.cli("enqueue", "stampapp.chat").stdout)  # this process registered nothing
        self.assertEqual([self.needs(job) for job in (with_app, own, model_only, without)],
                         [("stampapp-llm:q4", 9000), ("org/other@rev", 4000), ("stampapp-llm:q4", 9000),
                          (None, None)])


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
