"""Warm models in a process: the registry, the one ``Resident`` model, and how a job names
the model it needs.

Owns the contract of ``rowfleet.models`` (a model loads once per process, a swap unloads
the held one first, a failed load leaves nothing held, the footprint is what the memory
reader saw change, two threads asking at once load it once), the rules of
``rowfleet.model`` (an id registers, no id gets the current job's model), and a worker's
model across its jobs (``WorkerModelContract``, on SQLite and PostgreSQL). How a job's
``required_model`` and ``vram_mb`` are stamped into its row is ``test_task_stamps``'s
contract. The loaders are fakes that count their calls and allocate a ``bytearray``.
"""

from __future__ import annotations

import itertools
import sys
import threading
import unittest

import rowfleet
from rowfleet import models, names
from rowfleet.errors import ConfigError, ModelLoadFailed, UnknownModel
from rowfleet.job import COMPLETED, FAILED
from rowfleet.models import Resident
from rowfleet.worker.loop import Worker
from pg_harness import PostgresServerCase
from support import LibraryOnEmptyDatabase, TempDirTestCase, wait_until
from process.test_cli import CliTestCase

_ids = itertools.count()


def fresh_id(stem: str = "m") -> str:
    """A model id no other test registered (the registry is the process's)."""
    return f"test-{stem}-{next(_ids)}:q4"


class FakeModel:
    """A loaded model: its id, which load made it, and some memory to hold."""

    def __init__(self, model_id: str, load: int) -> None:
        self.model_id, self.load = model_id, load
        self.weights = bytearray(1024)


class Loaders:
    """Fake loaders and unloaders that record what they were called for, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def loader(self, model_id: str, fail: bool = False):
        def load() -> FakeModel:
            self.calls.append(("load", model_id))
            if fail:
                raise RuntimeError("out of GPU memory")
            return FakeModel(model_id, self.loads(model_id))
        return load

    def unload(self, loaded: FakeModel) -> None:
        self.calls.append(("unload", loaded.model_id))

    def loads(self, model_id: str) -> int:
        return self.calls.count(("load", model_id))

    def register(self, stem: str = "m", fail: bool = False, **options) -> str:
        model_id = fresh_id(stem)
        models.register(model_id, self.loader(model_id, fail), unload=self.unload, **options)
        return model_id


class RegistryTest(unittest.TestCase):
    def test_register_and_look_up(self):
        model_id = fresh_id()
        loader = lambda: None  # noqa: E731
        registered = models.register(model_id, loader, vram_mb=17000)
        self.assertEqual((registered.id, registered.loader, registered.vram_mb, registered.unload),
                         (model_id, loader, 17000, None))
        self.assertIs(models.registered(model_id), registered)
        self.assertIn(registered, models.registered_models())
        self.assertIsNone(models.registered("never-registered"))

    def test_ids_are_names_with_any_punctuation_but_no_whitespace(self):
        for model_id in ("llama3-8b:q4", "org/model@rev", "m.gguf"):
            with self.subTest(model_id=model_id):
                self.assertEqual(models.register(model_id, lambda: None).id, model_id)
        for model_id in ("two words", "", "*", None, "x" * 256):
            with self.subTest(model_id=model_id), self.assertRaises(names.InvalidValue):
                models.register(model_id, lambda: None)

    def test_bad_vram_or_loader_is_refused(self):
        for vram_mb in (0, -1, 1.5, True, 2 ** 31):
            with self.subTest(vram_mb=vram_mb), self.assertRaisesRegex(names.InvalidValue, "vram_mb"):
                models.register(fresh_id(), lambda: None, vram_mb=vram_mb)
        with self.assertRaisesRegex(names.InvalidValue, "loader must be callable"):
            models.register(fresh_id(), "not a function")
        with self.assertRaisesRegex(names.InvalidValue, "unload must be callable"):
            models.register(fresh_id(), lambda: None, unload=42)


class ResidentTest(unittest.TestCase):
    def setUp(self):
        self.fakes = Loaders()
        self.resident = Resident()

    def test_consecutive_gets_of_one_model_load_it_once(self):
        model_id = self.fakes.register()
        first = self.resident.get(model_id)
        self.assertIs(self.resident.get(model_id), first)
        self.assertEqual(self.fakes.calls, [("load", model_id)])
        self.assertEqual(self.resident.held().model_id, model_id)

    def test_asking_for_another_model_unloads_the_held_one_then_loads(self):
        old_id, new_id = self.fakes.register("old"), self.fakes.register("new")
        old = self.resident.get(old_id)
        new = self.resident.get(new_id)
        self.assertEqual(self.fakes.calls, [("load", old_id), ("unload", old_id), ("load", new_id)])
        self.assertEqual((new.model_id, self.resident.held().model_id), (new_id, new_id))
        self.assertIsNot(new, old)

    def test_unload_is_called_with_the_held_object(self):
        seen = []
        model_id = fresh_id()
        models.register(model_id, lambda: FakeModel(model_id, 1), unload=seen.append)
        held = self.resident.get(model_id)
        self.resident.unload()
        self.assertEqual(seen, [held])
        self.assertIsNone(self.resident.held())
        self.resident.unload()  # nothing held: nothing to do
        self.assertEqual(seen, [held])

    def test_a_failing_load_leaves_nothing_held_and_names_the_model(self):
        held_id, broken_id = self.fakes.register("held"), self.fakes.register("broken", fail=True)
        self.resident.get(held_id)
        with self.assertRaises(ModelLoadFailed) as raised:
            self.resident.get(broken_id)
        self.assertEqual(raised.exception.model_id, broken_id)
        self.assertIn(f"model {broken_id!r} failed to load: RuntimeError: out of GPU memory", str(raised.exception))
        self.assertIsInstance(raised.exception.__cause__, RuntimeError)
        self.assertIsNone(self.resident.held())
        self.assertIsNone(self.resident.loading)
        self.assertEqual(self.fakes.calls, [("load", held_id), ("unload", held_id), ("load", broken_id)])
        with self.assertRaises(ModelLoadFailed):  # not remembered as loaded: the next get tries again
            self.resident.get(broken_id)
        self.assertEqual(self.fakes.loads(broken_id), 2)

    def test_an_unknown_model_is_a_clear_error_and_keeps_the_held_one(self):
        model_id = self.fakes.register()
        self.resident.get(model_id)
        with self.assertRaisesRegex(UnknownModel, r"unknown model 'nowhere:q4': register it with @rowfleet.model"):
            self.resident.get("nowhere:q4")
        self.assertEqual(self.resident.held().model_id, model_id)

    def test_held_records_when_how_long_and_the_footprint_the_memory_reader_saw(self):
        ticks = iter([100.0, 112.5])
        used = iter([1000, 18000])
        resident = Resident(clock=lambda: next(ticks), wall=lambda: 1_750_000_000.0,
                            memory_used_mb=lambda: next(used))
        model_id = self.fakes.register()
        resident.get(model_id)
        self.assertEqual(resident.held(), (model_id, 1_750_000_000.0, 12.5, 17000))
        self.assertEqual(resident.held().footprint_mb, 17000)

    def test_without_a_memory_reader_the_footprint_is_not_measured(self):
        self.resident.get(self.fakes.register())
        self.assertIsNone(self.resident.held().footprint_mb)

    def test_loading_names_the_model_while_its_load_runs(self):
        model_id = fresh_id()
        seen = []
        models.register(model_id, lambda: seen.append(self.resident.loading) or FakeModel(model_id, 1))
        self.resident.get(model_id)
        self.assertEqual((seen, self.resident.loading), ([model_id], None))

    def test_two_threads_asking_for_one_model_load_it_once(self):
        model_id = fresh_id()
        release = threading.Event()
        calls = []

        def slow_load() -> FakeModel:
            calls.append(model_id)
            release.wait(30)
            return FakeModel(model_id, len(calls))

        models.register(model_id, slow_load)
        got = {}
        threads = [threading.Thread(target=lambda n=n: got.update({n: self.resident.get(model_id)}),
                                    name=f"test-get-{n}") for n in (1, 2)]
        threads[0].start()
        wait_until(lambda: self.resident.loading == model_id, message="the first load to start")
        threads[1].start()
        # The second asks while the first loads: it waits on the lock (its innermost frame is
        # ``get``), or, were there no lock, it would call the loader too.
        wait_until(lambda: len(calls) == 2 or _innermost(threads[1]) is Resident.get.__code__,
                   message="the second thread to ask")
        release.set()
        for thread in threads:
            thread.join(30)
        self.assertEqual(calls, [model_id])
        self.assertIs(got[1], got[2])

    def test_current_is_one_resident_per_process_and_install_replaces_it(self):
        self.assertIs(models.current(), models.current())
        original = models.current()
        self.addCleanup(models.install, original)
        model_id = self.fakes.register()
        original.get(model_id)
        replacement = Resident()
        self.assertIs(models.install(replacement), replacement)
        self.assertIs(models.current(), replacement)
        self.assertIsNone(original.held(), "the replaced resident unloads its model")
        self.assertEqual(self.fakes.calls[-1], ("unload", model_id))


def _innermost(thread: threading.Thread):
    frame = sys._current_frames().get(thread.ident)
    return None if frame is None else frame.f_code


class ModelApiTest(unittest.TestCase):
    """``rowfleet.model``: with an id, a decorator that registers; without one, the getter."""

    def test_an_id_returns_a_decorator_that_registers_the_loader_unchanged(self):
        model_id = fresh_id()
        release = lambda loaded: None  # noqa: E731

        @rowfleet.model(model_id, vram_mb=17000, unload=release)
        def load():
            return "weights"

        self.assertEqual(load(), "weights")
        registered = models.registered(model_id)
        self.assertEqual((registered.loader, registered.vram_mb, registered.unload), (load, 17000, release))

    def test_misuses_are_refused_at_once_with_a_clear_message(self):
        with self.assertRaisesRegex(ConfigError, r"@rowfleet.model needs the model's id"):
            @rowfleet.model
            def load():
                return None
        with self.assertRaisesRegex(ConfigError, "takes no options"):
            rowfleet.model(vram_mb=100)
        with self.assertRaisesRegex(names.InvalidValue, "model must be a non-empty word"):
            rowfleet.model("two words")
        with self.assertRaisesRegex(names.InvalidValue, "vram_mb"):
            rowfleet.model(fresh_id(), vram_mb=0)

    def test_the_getter_outside_a_job_is_a_clear_error(self):
        with self.assertRaisesRegex(ConfigError, r"no job is running here: call it inside a task"):
            rowfleet.model()

    def test_a_tasks_model_is_a_name(self):
        self.assertEqual(rowfleet.task(name="models.ok", model="org/model@rev")(lambda: None).model,
                         "org/model@rev")
        with self.assertRaisesRegex(names.InvalidValue, "a task's model must be a non-empty word"):
            rowfleet.task(name="models.bad", model="two words")


# Registered at import, as an app module would: a worker imports it before its first job.
VRAM = 17000
LLAMA = "test-llama3-8b:q4"
MISTRAL = "org/mistral-7b@rev2"
FAKES = Loaders()
models.register(LLAMA, FAKES.loader(LLAMA), vram_mb=VRAM, unload=FAKES.unload)
models.register(MISTRAL, FAKES.loader(MISTRAL), unload=FAKES.unload)


@rowfleet.task(name="models.chat", queue="models-gpu", model=LLAMA)
def chat(**_):
    loaded = rowfleet.model()
    return {"model": loaded.model_id, "load": loaded.load}


@rowfleet.task(name="models.plain", queue="models-gpu")
def plain(**_):
    return rowfleet.model()  # its job names no model


class WorkerModelContract(LibraryOnEmptyDatabase):
    """A worker's model across its jobs; every backend must pass these (``empty_database()``)."""

    def test_a_worker_loads_a_model_once_for_its_jobs_and_swaps_for_another(self):
        resident = models.install(Resident())
        self.addCleanup(resident.unload)
        llama, mistral = FAKES.loads(LLAMA), FAKES.loads(MISTRAL)  # this process's earlier tests load them too
        first, second = chat.enqueue(priority=1), chat.enqueue(priority=2)
        other, third = chat.enqueue(model=MISTRAL, priority=3), chat.enqueue(priority=4)
        Worker(self.config(), "models-gpu", burst=True).run()
        self.assertEqual([self.row(job.id).state for job in (first, second, other, third)], [COMPLETED] * 4)
        self.assertEqual([self.row(job.id).result for job in (first, second, other, third)],
                         [{"model": LLAMA, "load": llama + 1}, {"model": LLAMA, "load": llama + 1},
                          {"model": MISTRAL, "load": mistral + 1}, {"model": LLAMA, "load": llama + 2}])
        self.assertEqual(resident.held().model_id, LLAMA)

    def test_the_getter_in_a_job_without_a_model_fails_that_job_clearly(self):
        job = plain.enqueue(max_attempts=1)
        Worker(self.config(), "models-gpu", burst=True).run()
        found = self.row(job.id)
        self.assertEqual(found.state, FAILED)
        self.assertIn(f"job {job.id} names no model", found.error)


class SQLiteWorkerModelTest(WorkerModelContract, TempDirTestCase):
    def empty_database(self) -> str:
        return self.db


class PostgresWorkerModelTest(PostgresServerCase, WorkerModelContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database: ``self.db`` is its URL."""


class CommandLineTest(CliTestCase):
    def test_bad_model_or_vram_is_one_line_and_exit_2(self):
        cases = [
            (("--model", "two words"), "model must be a non-empty word"),
            (("--model", "*"), "model must be a name other than '*'"),
            (("--vram-mb", "0"), "expected an integer of at least 1"),
            (("--vram-mb", "lots"), "invalid int value"),
            (("--vram-mb", str(2 ** 31)), "vram_mb must be an integer of at least 1 and at most 2147483647"),
        ]
        for flags, says in cases:
            with self.subTest(flags=flags):
                self.assert_refused("enqueue", "mod:fn", *flags, says=says)


if __name__ == "__main__":
    unittest.main()
