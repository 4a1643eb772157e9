"""A second stop signal is a cold stop, on SQLite with real processes.

A worker holding a long job finishes it on the first SIGTERM or Ctrl-C (unchanged: the job
is still running a moment later); the second hands the job back in one transaction (an
operator stop: queued again, no attempt spent, an event saying why) and the process exits 0
within seconds, its children gone. One SIGQUIT (Ctrl-\\) is a cold stop at once. For
``worker``, ``worker --procs`` (Ctrl-C to the whole group, as a terminal sends it: one
Ctrl-C must not count twice) and ``up``.
"""

from __future__ import annotations

import json
import os
import signal
import time
import unittest

from support import DEADLINE, TempDirTestCase, process_alive, wait_until
from process.test_processes import _children

LONG_TASKS = """\
import time

import rowfleet


@rowfleet.task
def long(marker):
    open(marker, "a").write("started\\n")  # the test's sign that the job is in hand
    time.sleep(600)
    return "finished"
"""
FAST = ("--poll", "0.2", "--heartbeat", "0.5", "--log-level", "INFO")
COLD_WITHIN = 10.0  # seconds from the second signal to the exit: "a few", with room for a loaded box
STILL_RUNNING_FOR = 1.5  # seconds the job must outlive the first signal


class ColdStopTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.write_module("long_tasks", LONG_TASKS)
        self.marker = os.path.join(self.dir, "in-hand")

    def start(self, *command: str):
        self.cli("init")
        process = self.launch_logged(command[0], *command, "--app", "long_tasks", *FAST)
        self.job = self.cli("enqueue", "long_tasks:long", "--app", "long_tasks",
                            "--args", json.dumps({"marker": self.marker})).stdout.strip()
        wait_until(lambda: os.path.exists(self.marker) or process.poll() is not None, message="the long job in hand")
        self.assertIsNone(process.poll(), self.output(process))
        return process

    def first_signal_keeps_the_job(self, process, send) -> None:
        """The first signal: the job in hand goes on (its row still running, the process up)."""
        send()
        until = time.monotonic() + STILL_RUNNING_FOR
        while time.monotonic() < until:  # what must hold all along: no deadline ends it sooner
            self.assertIsNone(process.poll(), f"exited on the first signal:\n{self.output(process)}")
            time.sleep(0.1)
        self.assertEqual(self.cli_json("job", self.job)["state"], "running", self.output(process))

    def assert_cold_stopped(self, process, children: set[int], sent_at: float) -> None:
        try:
            process.wait(COLD_WITHIN)
        except Exception:
            self.fail(f"still running {COLD_WITHIN:g}s after the second signal:\n{self.output(process)}")
        log = self.output(process)
        self.assertEqual(process.returncode, 0, log)
        self.assertLess(time.monotonic() - sent_at, COLD_WITHIN, log)
        wait_until(lambda: not any(process_alive(pid) for pid in children), message="every child gone")
        shown = self.cli_json("job", self.job)
        self.assertEqual((shown["state"], shown["attempts"]), ("queued", 0), f"{shown}\n{log}")
        stops = [event for event in shown["events"] if event["kind"] == "operator_stop"]
        self.assertEqual(len(stops), 1, shown["events"])
        self.assertIn("told to stop at once", json.dumps(stops[0]), stops[0])
        self.assertNotIn("Traceback", log)
        with open(self.marker) as handle:
            self.assertEqual(handle.read().count("started"), 1, "the job ran again after the stop")

    def test_a_second_sigterm_hands_a_workers_job_back_and_exits_0(self):
        process = self.start("worker")
        self.first_signal_keeps_the_job(process, lambda: process.send_signal(signal.SIGTERM))
        sent_at = time.monotonic()
        process.send_signal(signal.SIGTERM)
        self.assert_cold_stopped(process, set(), sent_at)
        self.assertIn("SIGTERM again while stopping", self.output(process))

    def test_one_sigquit_is_a_cold_stop_at_once(self):
        process = self.start("worker")
        sent_at = time.monotonic()
        process.send_signal(signal.SIGQUIT)
        self.assert_cold_stopped(process, set(), sent_at)

    def test_two_ctrl_c_to_a_procs_group_stop_every_child_cold(self):
        process = self.start("worker", "--procs", "2")
        children = _children(process.pid)
        self.assertEqual(len(children), 3, f"two workers and the sampler:\n{self.output(process)}")
        self.first_signal_keeps_the_job(process, lambda: os.killpg(process.pid, signal.SIGINT))
        sent_at = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        self.assert_cold_stopped(process, children, sent_at)
        self.assertIn("a cold stop", self.output(process))

    def test_a_second_sigterm_to_up_stops_the_whole_box_cold(self):
        process = self.start("up")
        children = _children(process.pid)
        self.first_signal_keeps_the_job(process, lambda: process.send_signal(signal.SIGTERM))
        sent_at = time.monotonic()
        process.send_signal(signal.SIGTERM)
        self.assert_cold_stopped(process, children, sent_at)


if __name__ == "__main__":
    unittest.main()
