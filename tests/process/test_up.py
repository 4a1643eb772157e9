"""``rowfleet up``: a whole box under one supervisor, on SQLite.

The plan ``--check`` prints and what bad input does (one line, exit 2, no database made,
a taken panel port included); then real processes: ``up`` with two workers, a schedule and
the panel runs jobs, a workflow and the schedule's slots, serves the panel, and on SIGTERM
stops its children in order, every one of them gone; Ctrl-C sent to the whole process
group, as a terminal sends it, still drains the job in hand and keeps the order.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.request
import unittest


from support import DEADLINE, TempDirTestCase, process_alive, wait_until
from process.test_processes import _children

BOX_TASKS = """\
import os
import time

import rowfleet


@rowfleet.task
def add(a, b):
    return a + b


@rowfleet.task
def tick():
    return time.time()


@rowfleet.task
def slow(marker):
    open(marker, "w").close()  # the test's sign that the job is in hand
    time.sleep(1.5)
    return "finished"
"""
WORKFLOW = {"name": "pair", "nodes": [
    {"id": "first", "task": "box_tasks:add", "args": {"a": 1, "b": 2}},
    {"id": "second", "task": "box_tasks:add", "depends_on": ["first"],
     "args": {"a": {"$from": "first"}, "b": 10}},
]}
SCHEDULES = [{"name": "tick", "task": "box_tasks:tick", "every": 1}]
# Short timers, so a test box starts and stops in seconds.
FAST = ("--poll", "0.2", "--heartbeat", "0.5", "--log-level", "INFO")


class UpTestCase(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.write_module("box_tasks", BOX_TASKS)
        self.schedule = self.write_json("schedules.json", SCHEDULES)

    def write_json(self, name: str, data: object) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w") as handle:
            json.dump(data, handle)
        return path


class UpCheckTest(UpTestCase):
    def test_check_names_every_role_and_starts_nothing(self):
        plan = json.loads(self.cli("up", "--check", "--json", "--app", "box_tasks", "--queue", "default:2",
                                   "--queue", "gpu", "--schedule", self.schedule, "--panel", "--port", "0").stdout)
        self.assertEqual([(role["name"], role["count"]) for role in plan],
                         [("orchestrator", 1), ("worker", 2), ("worker", 1), ("scheduler", 1), ("sampler", 1),
                          ("panel", 1)])
        self.assertEqual(plan[1]["what"], "queue default")
        self.assertIn("tick", plan[3]["what"])
        self.assertFalse(os.path.exists(self.db), "--check made the database")

    def test_check_gives_each_queue_its_own_kind(self):
        plan = json.loads(self.cli("up", "--check", "--json", "--app", "box_tasks", "--queue", "cpu:2",
                                   "--queue", "gpu:1:gpu", "--queue", "a:b:1").stdout)
        self.assertEqual([role["what"] for role in plan if role["name"] == "worker"],
                         ["queue cpu", "queue gpu, GPU watchdog", "queue a:b"])

    def test_check_says_why_a_role_is_left_out(self):
        text = self.cli("up", "--check", "--no-orchestrator", "--no-sampler").stdout
        self.assertRegex(text, r"orchestrator +--no-orchestrator: on SQLite nothing else reclaims")
        self.assertRegex(text, r"scheduler +no schedules")
        self.assertRegex(text, r"panel +not asked for: add --panel")
        self.assertIn("stops the scheduler, then the workers", text)

class UpBadInputTest(UpTestCase):
    SLOW = True  # a process per case: the whole suite runs them

    def test_bad_input_is_one_line_exit_2_and_no_database(self):
        missing = os.path.join(self.dir, "missing.json")
        cases = {
            "zero workers": (["--queue", "q:0"], "N must be a whole number from 1 to 256"),
            "a queue twice": (["--queue", "q", "--queue", "q:2"], "is given twice"),
            "the wildcard": (["--queue", "*"], "other than '*'"),
            "a panel flag alone": (["--port", "1"], "--port needs --panel"),
            "beyond loopback without a token": (["--panel", "--bind", "0.0.0.0"], "needs a token"),
            "an unreadable schedule file": (["--schedule", missing], "cannot read it"),
            "an app that is not there": (["--app", "no_such_module"], "no_such_module"),
            "routing without --gpu": (["--lane", "model"], "--gpu"),
            "--json without --check": (["--json"], "--json goes with --check"),
            "an unknown queue option": (["--queue", "gpu:1:gpu,vram=1"], "unknown option 'vram=1'"),
            "a queue's routing without gpu": (["--queue", "gpu:1:lane=model"], "--lane needs --gpu"),
            "a bad queue option value": (["--queue", "gpu:1:gpu,gpu-index=x"], "gpu-index: invalid int value"),
            "box-wide flags no queue takes": (["--queue", "gpu:1:gpu", "--gpu"], "every --queue gives its own"),
        }
        for case, (flags, says) in cases.items():
            with self.subTest(case):
                result = self.cli("up", *flags, check=False)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertIn(says, result.stderr)
                self.assertNotIn("Traceback", result.stderr)
                self.assertFalse(os.path.exists(self.db), f"{case}: the database was made")

    def test_a_taken_panel_port_stops_up_before_anything_starts(self):
        taken = socket.socket()
        self.addCleanup(taken.close)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = self.cli("up", "--panel", "--port", str(taken.getsockname()[1]), check=False)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("cannot serve the panel", result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertFalse(os.path.exists(self.db))


class SystemdUnitsTest(unittest.TestCase):
    """examples/systemd: every ExecStart is a command rowfleet accepts, every variable of the
    environment file is a setting, the supervising units leave the stop order to rowfleet,
    and systemd itself accepts each unit where systemd-analyze is installed."""

    FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples", "systemd")
    PYZ = "/usr/bin/python3 /opt/rowfleet/rowfleet.pyz "

    def units(self) -> dict[str, dict[str, str]]:
        found = {}
        for name in sorted(os.listdir(self.FOLDER)):
            if name.endswith(".service"):
                with open(os.path.join(self.FOLDER, name)) as handle:
                    found[name] = dict(line.split("=", 1) for line in handle.read().splitlines()
                                       if "=" in line and not line.startswith("#"))
        return found

    def test_every_unit_runs_a_command_rowfleet_accepts(self):
        from rowfleet.cli import build_parser

        units = self.units()
        self.assertIn("rowfleet-up.service", units)
        for name, keys in units.items():
            with self.subTest(name):
                self.assertTrue(keys["ExecStart"].startswith(self.PYZ), keys["ExecStart"])
                self.assertEqual(keys["EnvironmentFile"], "/etc/rowfleet/rowfleet.env")
                argv = keys["ExecStart"].removeprefix(self.PYZ).replace("%i", "gpu").split()
                build_parser().parse_args(argv)  # a UsageError fails the test
                if argv[0] == "up" or "--procs" in argv:
                    self.assertEqual(keys.get("KillMode"), "mixed", "the supervisor must get SIGTERM alone")

    def test_the_environment_file_names_only_settings(self):
        from rowfleet.config import SETTINGS

        known = {setting.env for setting in SETTINGS}
        with open(os.path.join(self.FOLDER, "rowfleet.env")) as handle:
            named = {line.split("=", 1)[0] for line in handle.read().splitlines()
                     if line.strip() and not line.startswith("#")}
        self.assertTrue(named)
        self.assertEqual(named - known, set())

    def test_systemd_accepts_every_unit(self):
        analyze = shutil.which("systemd-analyze")
        if analyze is None:
            self.skipTest("systemd-analyze is not installed: the units' syntax is not verified by systemd")
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        for name in self.units():
            target = os.path.join(folder, name.replace("@.", "@gpu."))  # a template verifies as an instance
            shutil.copy(os.path.join(self.FOLDER, name), target)
            result = subprocess.run([analyze, "verify", target], capture_output=True, text=True, timeout=DEADLINE)
            self.assertEqual((result.returncode, result.stderr), (0, ""), name)


class UpProcessTest(UpTestCase):
    SLOW = True

    def start_up(self, *flags: str):
        process = self.launch_logged("up", "up", "--app", "box_tasks", *flags, *FAST)
        wait_until(lambda: "serving queue" in self.output(process) or process.poll() is not None,
                   message="a worker serving")
        self.assertIsNone(process.poll(), self.output(process))
        return process

    def stopped(self, process, children: set[int]) -> str:
        """Wait for ``process`` to exit 0 and every one of ``children`` to be gone; its log."""
        process.wait(DEADLINE)
        log = self.output(process)
        self.assertEqual(process.returncode, 0, log)
        wait_until(lambda: not any(process_alive(pid) for pid in children), message="every child gone")
        return log

    def assert_stop_order(self, log: str, stages: list[str]) -> None:
        at = [log.find(f"stopping {stage}") for stage in stages]
        self.assertNotIn(-1, at, f"a stage was not stopped in turn ({stages}):\n{log}")
        self.assertEqual(at, sorted(at), f"stages out of order ({stages}):\n{log}")

    def test_up_runs_jobs_a_workflow_schedules_and_the_panel_then_stops_every_child(self):
        process = self.start_up("--queue", "default:2", "--schedule", self.schedule, "--panel", "--port", "0")
        wait_until(lambda: "panel at " in self.output(process), message="the panel's URL")
        url = re.search(r"panel at (\S+)", self.output(process)).group(1)
        ids = [self.cli("enqueue", "box_tasks:add", "--args", json.dumps({"a": n, "b": 1})).stdout.strip()
               for n in range(5)]
        workflow = self.write_json("pair.json", WORKFLOW)
        run = self.cli("run", workflow, "--app", "box_tasks").stdout.strip()

        wait_until(lambda: all(self.cli_json("job", job)["state"] == "completed" for job in ids),
                   message="the enqueued jobs done")
        wait_until(lambda: self.cli_json("runs", run)["state"] == "completed", message="the workflow done")
        self.assertEqual([(node["id"], node["result"]) for node in self.cli_json("runs", run)["nodes"]],
                         [("first", 3), ("second", 13)])
        wait_until(lambda: self.cli_json("schedules")[0]["last_slot"] is not None, message="a slot fired")
        with urllib.request.urlopen(url + "jobs", timeout=DEADLINE) as answer:
            self.assertIn("box_tasks:add", answer.read().decode())

        children = _children(process.pid)
        self.assertEqual(len(children), 6, f"2 workers, orchestrator, scheduler, sampler, panel:\n"
                                           f"{self.output(process)}")
        process.send_signal(signal.SIGTERM)
        log = self.stopped(process, children)
        self.assert_stop_order(log, ["scheduler", "worker", "orchestrator", "sampler, panel"])
        self.assertNotIn("Traceback", log)

    def test_ctrl_c_to_the_group_drains_the_job_in_hand_and_keeps_the_order(self):
        process = self.start_up()
        marker = os.path.join(self.dir, "in-hand")
        job = self.cli("enqueue", "box_tasks:slow", "--args", json.dumps({"marker": marker})).stdout.strip()
        wait_until(lambda: os.path.exists(marker), message="the slow job in hand")
        children = _children(process.pid)
        os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: every process of the group
        log = self.stopped(process, children)
        shown = self.cli_json("job", job)
        self.assertEqual((shown["state"], shown["result"], shown["attempts"]), ("completed", "finished", 1), log)
        self.assert_stop_order(log, ["worker", "orchestrator", "sampler"])
        self.assertLess(log.find("completed in"), log.find("stopping orchestrator"), log)


if __name__ == "__main__":
    unittest.main()
