"""Schedule and workflow files that are no such thing, and schedules naming tasks no worker
would run.

Owns two promises. A file handed to rowfleet (``scheduler --schedule``, ``up --schedule``,
``run FILE``, ``load_schedule_file``, ``rowfleet.load_workflow``) is read only if it is a
regular file of at most ``DECLARATION_MOST`` bytes: a device that never ends, a FIFO that
blocks until a writer comes, a directory and a file of 2 MiB are each one line and exit 2,
at once (every command runs under a deadline, so one that hangs fails). And a scheduler
vets its schedules' tasks as ``enqueue`` does (``tasks.vet``): with ``--app`` a task no app
registers and no prefix allows is refused at the start, in one line, nothing written;
without, it warns once per schedule, not at every tick.

Each bad file is a row of ``BAD_FILES`` and each entry point a row of ``ENTRY_POINTS``, so a
new kind of file or a new command that reads one joins by adding a row.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
import unittest
from typing import Callable

from rowfleet import api, exitcodes, files, schedule
from rowfleet.errors import ConfigError
from support import TempDirTestCase, wait_until

TASK = "hostile_files.ok"
APP = "hostilefilesapp"
APP_SOURCE = f'''\
import rowfleet


@rowfleet.task(name="{TASK}")
def ok(*args, **kwargs):
    return "ran"
'''
QUICK = 10.0  # seconds a refusal may take, on a loaded machine: far less than a hang


def fifo(test: TempDirTestCase) -> str:
    path = os.path.join(test.dir, "schedules.fifo")
    os.mkfifo(path)
    return path


def large(test: TempDirTestCase) -> str:
    """A valid JSON list, 2 MiB long: refused for its size, not its content."""
    path = os.path.join(test.dir, "large.json")
    with open(path, "w") as handle:
        handle.write("[" + " " * (2 * 1024 * 1024) + "]")
    return path


# Each bad file: how to make it, and the words its refusal must hold.
BAD_FILES: dict[str, tuple[Callable[[TempDirTestCase], str], str]] = {
    "a device that never ends": (lambda test: "/dev/zero", "is a character device, not a regular file"),
    "a FIFO no one writes to": (fifo, "is a FIFO, not a regular file"),
    "a directory": (lambda test: test.dir, "is a directory, not a regular file"),
    "a file of 2 MiB": (large, "is larger than 1,048,576 bytes"),
}
# Each command that reads a schedule or workflow file, with PATH standing for the file.
ENTRY_POINTS = {
    "scheduler --once": ("scheduler", "--schedule", "PATH", "--once"),
    "scheduler": ("scheduler", "--schedule", "PATH"),
    "up --check": ("up", "--schedule", "PATH", "--check"),  # up reads its files before it starts anything
    "run": ("run", "PATH"),
}


class BadFilesTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.cli("init")

    def test_each_entry_point_refuses_each_bad_file_in_one_line_at_once(self):
        for kind, (make, says) in BAD_FILES.items():
            path = make(self)
            for entry, args in ENTRY_POINTS.items():
                with self.subTest(file=kind, command=entry):
                    started = time.monotonic()
                    result = self.cli(*[path if arg == "PATH" else arg for arg in args], check=False, timeout=QUICK * 3)
                    self.assertLess(time.monotonic() - started, QUICK)
                    self.assertEqual(result.returncode, exitcodes.USAGE, result.stderr)
                    self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                    self.assertIn(says, result.stderr)
                    self.assertIn(path, result.stderr)
                    self.assertEqual(result.stdout, "")
            with self.subTest(file=kind, command="the Python API"):
                for load in (schedule.load_schedule_file, api.load_workflow):
                    raised = self.within(QUICK, load, path)
                    self.assertIsInstance(raised, ConfigError)
                    self.assertIn(says, str(raised))
        self.assertEqual(self.count("jobs") + self.count("runs") + self.count("schedules"), 0, "nothing written")

    def within(self, seconds: float, load: Callable[[str], object], path: str) -> BaseException | None:
        """What ``load(path)`` raised, called on a thread of its own so that a call that
        blocks (a FIFO opened without O_NONBLOCK) fails the test instead of hanging it."""
        raised: list[BaseException | None] = []

        def call() -> None:
            try:
                load(path)
                raised.append(None)
            except BaseException as exc:  # handed to the test thread
                raised.append(exc)

        thread = threading.Thread(target=call, name=f"load-{load.__name__}", daemon=True)  # daemon: it may block
        thread.start()
        thread.join(seconds)
        self.assertFalse(thread.is_alive(), f"{load.__name__}({path!r}) still blocked after {seconds:.0f}s")
        return raised[0]

    def test_a_file_at_the_limit_is_read(self):
        path = os.path.join(self.dir, "padded.json")
        entry = json.dumps([{"name": "tick", "task": TASK, "every": 60}])
        with open(path, "w") as handle:
            handle.write(entry + " " * (files.DECLARATION_MOST - len(entry)))
        self.assertEqual(os.path.getsize(path), files.DECLARATION_MOST)
        self.assertEqual([s.name for s in schedule.load_schedule_file(path)], ["tick"])

    def count(self, table: str) -> int:
        with sqlite3.connect(self.db) as conn:
            return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # the test's own table names


# Tasks a worker started with --app APP would refuse: not registered, and not in its modules.
UNTRUSTED = {"a function of a module no app names": "os:system", "a module that is not there": "nosuch:fn",
             "a name no app registers": "hostile_files.missing", "a function the app lacks": f"{APP}:missing"}


class ScheduleTasksTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.write_module(APP, APP_SOURCE)
        self.cli("init")

    def schedule_file(self, task: str, every: float = 1) -> str:
        path = os.path.join(self.dir, "schedules.json")
        with open(path, "w") as handle:
            json.dump([{"name": "fine", "task": TASK, "every": every}, {"name": "odd", "task": task, "every": every}],
                      handle)
        return path

    def test_with_app_a_task_no_app_registers_is_refused_at_the_start_as_enqueue_refuses_it(self):
        for why, task in UNTRUSTED.items():
            path = self.schedule_file(task)
            enqueued = self.cli("enqueue", task, "--app", APP, check=False)
            self.assertEqual(enqueued.returncode, exitcodes.USAGE, enqueued.stderr)
            for command in (("scheduler", "--once"), ("scheduler",), ("up", "--check")):
                with self.subTest(why=why, command=command):
                    result = self.cli(*command, "--schedule", path, "--app", APP, check=False,
                                      timeout=QUICK * 3)
                    self.assertEqual(result.returncode, exitcodes.USAGE, result.stderr)
                    self.assertEqual(result.stderr.strip().splitlines(),
                                     [enqueued.stderr.strip().replace("rowfleet: error: ",
                                                                      "rowfleet: error: schedule 'odd': ")])
        self.assertEqual(self.count("jobs") + self.count("schedules"), 0, "nothing written")

    def test_with_app_a_registered_task_or_an_allowed_module_fires(self):
        self.write_module("hostilelib", "def fn():\n    return 1\n")
        path = self.schedule_file("hostilelib:fn")
        refused = self.cli("scheduler", "--schedule", path, "--app", APP, "--once", check=False)
        self.assertEqual(refused.returncode, exitcodes.USAGE, refused.stderr)
        fired = self.cli("scheduler", "--schedule", path, "--app", APP, "--allow-module", "hostilelib", "--once",
                         "--json")
        self.assertEqual(sorted(item["name"] for item in json.loads(fired.stdout)), ["fine", "odd"])
        self.assertEqual(fired.stderr, "")

    def test_without_app_an_untrusted_task_warns_once_not_at_every_tick(self):
        path = self.schedule_file("os:system", every=0.5)
        once = self.cli("scheduler", "--schedule", path, "--once", "--json")
        self.assertEqual(sorted(item["name"] for item in json.loads(once.stdout)), ["fine", "odd"])
        self.assertEqual(self.warnings(once.stderr, "odd"), 1, once.stderr)
        process = self.launch_logged("scheduler", "scheduler", "--schedule", path)
        fired = self.fired("odd")
        wait_until(lambda: self.fired("odd") >= fired + 3 or process.poll() is not None,
                   message="three more slots of 'odd'")
        process.send_signal(signal.SIGTERM)
        self.assertEqual(process.wait(30), 0, self.output(process))
        log = self.output(process)
        self.assertNotIn("Traceback", log)
        self.assertEqual(self.warnings(log, "odd"), 1, log)

    def warnings(self, text: str, schedule: str) -> int:
        return sum(1 for line in text.splitlines() if f"schedule {schedule!r}" in line and "not trusted" in line)

    def fired(self, name: str) -> int:
        with sqlite3.connect(self.db) as conn:
            return conn.execute("SELECT count(*) FROM schedule_slots WHERE name = ?", (name,)).fetchone()[0]

    def count(self, table: str) -> int:
        with sqlite3.connect(self.db) as conn:
            return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # the test's own table names


if __name__ == "__main__":
    unittest.main()
