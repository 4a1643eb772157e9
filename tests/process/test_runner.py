"""A box composed from Python with ``rowfleet.services.runner``, no command line.

A stop a signal handler sets (``StopEvent``) takes no lock; the plan's rules run as
doctests and table cases; then real processes: a script builds a
``Box`` of one worker and the host's sampler on a SQLite file and runs it; the job the test
enqueues is completed by the worker child, the sampler child holds the host's sampling
lease under the box's pid and writes samples, and SIGTERM stops the worker before the
sampler, every child gone, exit 0.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import unittest

from rowfleet.config import Config
from rowfleet.errors import ConfigError
from rowfleet.services import runner
from rowfleet.services.supervisor import Child
from rowfleet.store.wake import StopEvent

from support import DEADLINE, TempDirTestCase, child_env, kill_group, process_alive, wait_until
from process.test_processes import _children

BOX_TASKS = """\
import rowfleet


@rowfleet.task
def add(a, b):
    return a + b
"""
# The whole box, from Python: a Box, its plan printed, run_box's exit code the script's.
COMPOSE = """\
import logging
import sys

import box_tasks  # its @rowfleet.task handlers register before the children fork
from rowfleet.config import Config
from rowfleet.services import runner
from rowfleet.services.supervisor import Child

logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
config = Config(db=sys.argv[1], host="runner-box", poll=0.2, heartbeat=0.5, sample_every=0.5,
                allow_modules=("box_tasks",))
box = runner.Box(config, queues=[("default", 1)], orchestrator=False)
print("plan", [[role.name, role.count] for role in runner.box_plan(box)], flush=True)
sys.exit(runner.run_box(box))
"""


class StopEventTest(unittest.TestCase):
    def test_set_takes_no_lock_the_interrupted_thread_may_hold(self):
        stop = StopEvent()

        def handler_inside_wait() -> None:
            with stop._cond:  # what the main thread holds inside Event.wait when a stop signal lands
                stop.set()  # a threading.Event would wait here for ever

        setter = threading.Thread(target=handler_inside_wait, name="stop-setter", daemon=True)
        setter.start()
        setter.join(DEADLINE)
        self.assertFalse(setter.is_alive(), "set() waited for the event's lock")
        self.assertTrue(stop.wait(DEADLINE))

    def test_a_waiting_thread_wakes_when_set(self):
        stop = StopEvent()
        woke = []
        waiter = threading.Thread(target=lambda: woke.append(stop.wait()), name="stop-waiter")
        waiter.start()
        self.assertFalse(stop.wait(0.05))
        stop.set()
        waiter.join(DEADLINE)
        self.assertEqual(woke, [True])


class BoxTest(unittest.TestCase):
    def test_children_and_their_stop_stages(self):
        box = runner.Box(Config(db="jobs.db"), queues=[("default", 2), ("gpu", 1)], orchestrator=True)
        staged = [(child.name, child.stop_stage) for child in runner.box_children(box)]
        self.assertEqual(staged, [("orchestrator", runner.ORCHESTRATOR_STAGE)]
                         + [("worker", runner.WORKER_STAGE)] * 3 + [("sampler", runner.WATCHER_STAGE)])
        self.assertTrue(runner.box_children(box)[-1].auxiliary, "the sampler stops once the workers are done")

    def test_a_watcher_stops_last_and_no_sampler_means_none(self):
        box = runner.Box(Config(db="jobs.db"), orchestrator=False, sampler=False)
        watcher = Child("panel", lambda: 0)
        self.assertEqual([(child.name, child.stop_stage) for child in runner.box_children(box, [watcher])],
                         [("worker", runner.WORKER_STAGE), ("panel", runner.WATCHER_STAGE)])

    def test_a_box_refuses_what_it_cannot_run(self):
        for queues in ([], [("default", 0)], [("a", 1), ("a", 1)], [("*", 1)], [("a", 200), ("b", 57)]):
            with self.subTest(queues=queues), self.assertRaises(ConfigError):
                runner.Box(Config(db="jobs.db"), queues=queues)


class ComposedBoxTest(TempDirTestCase):
    SLOW = True

    def setUp(self) -> None:
        super().setUp()
        self.write_module("box_tasks", BOX_TASKS)
        self.write_module("compose", COMPOSE)
        self.cli("init")  # no orchestrator in this box: the schema is made beforehand

    def start_box(self) -> subprocess.Popen:
        log_path = os.path.join(self.dir, "box.log")
        with open(log_path, "w") as log:
            process = subprocess.Popen([sys.executable, "compose.py", self.db], cwd=self.dir,
                                       env=child_env(PYTHONPATH=os.pathsep.join([self.dir, child_env()["PYTHONPATH"]])),
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        process.log_path = log_path
        self.addCleanup(kill_group, process)
        return process

    def log(self, process: subprocess.Popen) -> str:
        with open(process.log_path) as handle:
            return handle.read()

    def rows(self, sql: str, *args: object) -> list[tuple]:
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=DEADLINE) as conn:
            return conn.execute(sql, args).fetchall()

    def test_one_worker_and_the_sampler_run_a_job_and_stop_on_sigterm(self):
        process = self.start_box()
        wait_until(lambda: "plan" in self.log(process) or process.poll() is not None, message="the plan printed")
        self.assertIn("plan [['worker', 1], ['sampler', 1], ['orchestrator', 0]", self.log(process))

        job = self.cli("enqueue", "box_tasks:add", "--args", json.dumps({"a": 2, "b": 3})).stdout.strip()
        wait_until(lambda: self.cli_json("job", job)["state"] == "completed" or process.poll() is not None,
                   message="the job completed by the box's worker")
        self.assertIsNone(process.poll(), self.log(process))
        self.assertEqual(self.cli_json("job", job)["result"], 5)

        wait_until(lambda: self.rows("SELECT holder FROM host_samplers WHERE host = 'runner-box'")
                   and self.rows("SELECT 1 FROM host_samples WHERE host = 'runner-box'"),
                   message="the sampler child writing this host's samples")
        self.assertEqual(self.rows("SELECT holder FROM host_samplers WHERE host = 'runner-box'"),
                         [(f"runner-box:{process.pid}",)], "the sampler holds the lease under the box's pid")
        children = _children(process.pid)
        self.assertEqual(len(children), 2, f"one worker and the sampler:\n{self.log(process)}")

        process.send_signal(signal.SIGTERM)
        process.wait(DEADLINE)
        log = self.log(process)
        self.assertEqual(process.returncode, 0, log)
        wait_until(lambda: not any(process_alive(pid) for pid in children), message="every child gone")
        stops = [log.find("stopping worker"), log.find("stopping sampler")]
        self.assertNotIn(-1, stops, log)
        self.assertLess(stops[0], stops[1], f"the sampler watches the workers' drain to its end:\n{log}")
        self.assertNotIn("Traceback", log)


if __name__ == "__main__":
    unittest.main()
