"""A worker's sidecar: started in a process group of its own, healthy before use, stopped
(only its own group, SIGKILL after the grace) when idle, restarted after a crash with
backoff, and its GPU memory checked after a stop (``stuck_vram`` names who still holds it).

Real processes: a small HTTP server script with a grandchild in its group stands in for an
inference server. The GPU memory readers are the machine's edge, so they are fakes that
answer from whether the server is alive.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

from rowfleet.errors import ConfigError
from rowfleet.gpu.sidecar import STOPPED, STUCK_VRAM, Sidecar, SidecarFailed, SidecarSpec
from rowfleet.views import snapshot
from support import TempDirTestCase, wait_until

SERVER = textwrap.dedent('''\
    """A stand-in inference server: /health answers 200; a grandchild shares its group."""
    import http.server, os, signal, subprocess, sys

    port, pids, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "dies":
        sys.exit(3)
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(pids, "w") as out:
        out.write(f"{os.getpid()} {helper.pid}")

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
''')


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


class SidecarTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.script = os.path.join(self.dir, "fake_server.py")
        with open(self.script, "w") as out:
            out.write(SERVER)
        self.pids_file = os.path.join(self.dir, "pids")

    def spec(self, mode: str = "serve", **options) -> SidecarSpec:
        self.port = free_port()
        command = f"{sys.executable} {self.script} {self.port} {self.pids_file} {mode}"
        return SidecarSpec(command, health_url=f"http://127.0.0.1:{self.port}/health", start_timeout=20.0, **options)

    def pids(self) -> tuple[int, int]:
        wait_until(lambda: os.path.exists(self.pids_file) and os.path.getsize(self.pids_file) > 0,
                   message="the server to write its pids")
        with open(self.pids_file) as handle:
            leader, helper = map(int, handle.read().split())
        return leader, helper

    def started(self, spec: SidecarSpec, **readers) -> Sidecar:
        car = Sidecar(spec, **readers)
        self.addCleanup(car.stop, "test over")
        car.ensure_up()
        return car

    def test_it_is_healthy_once_up_and_a_stop_ends_its_whole_group_and_nothing_else(self):
        twin = subprocess.Popen([sys.executable, self.script, str(free_port()), os.path.join(self.dir, "twin"),
                                 "serve"])  # the same program, not ours: a stop by name would kill it
        self.addCleanup(twin.kill)
        car = self.started(self.spec())
        leader, helper = self.pids()
        self.assertTrue(car.running and alive(leader) and alive(helper))
        stop = car.stop("hard switch")
        self.assertEqual((stop.outcome, stop.reason), (STOPPED, "hard switch"))
        wait_until(lambda: not alive(helper), message="the grandchild in its group to end")
        self.assertFalse(alive(leader))
        self.assertIsNone(twin.poll(), "a process running the same command was killed")
        self.assertIsNone(car.stop("again"), "a second stop has nothing to stop")

    def test_a_server_that_ignores_sigterm_is_killed_after_the_grace(self):
        car = self.started(self.spec("stubborn", stop_grace=0.5))
        leader, helper = self.pids()
        started = time.monotonic()
        car.stop("hard switch")
        self.assertFalse(alive(leader))
        wait_until(lambda: not alive(helper), message="the grandchild to end")
        self.assertGreaterEqual(time.monotonic() - started, 0.5, "SIGKILL came before the grace")

    def test_it_stops_once_idle_past_its_ttl(self):
        now = [1000.0]
        car = Sidecar(self.spec(idle_ttl=30.0), clock=lambda: now[0])
        self.addCleanup(car.stop, "test over")
        car.ensure_up()
        car.used()
        now[0] += 29.0
        self.assertIsNone(car.stop_if_idle())
        self.assertTrue(car.running)
        now[0] += 1.0
        self.assertEqual(car.stop_if_idle().reason, "idle for 30s")
        self.assertFalse(car.running)

    def test_a_crashed_server_is_restarted_at_its_next_use_after_the_backoff(self):
        car = self.started(self.spec())
        first, _ = self.pids()
        os.remove(self.pids_file)
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: not car.running, message="the server to be seen dead")
        car.ensure_up()
        second, _ = self.pids()
        self.assertNotEqual(first, second)
        self.assertGreater(car.delay, 0, "no backoff was set for a server that died young")

    def test_a_server_that_exits_before_it_is_healthy_fails_in_one_line(self):
        car = Sidecar(self.spec("dies"))
        with self.assertRaisesRegex(SidecarFailed, r"exited \(code 3\) before http://127.0.0.1:\d+/health answered"):
            car.ensure_up()
        self.assertFalse(car.running)

    def test_vram_that_comes_back_is_a_clean_stop_and_vram_that_does_not_is_stuck(self):
        for holds_on, expected in ((False, STOPPED), (True, STUCK_VRAM)):
            with self.subTest(holds_on=holds_on):
                state = {"car": None}

                def used() -> float:
                    car = state["car"]
                    up = car is not None and (car.running or holds_on)
                    return 21000.0 if up and car.started_at is not None else 1000.0

                car = Sidecar(self.spec(vram_back_within=0.5), memory_used_mb=used,
                              gpu_processes=lambda: [(4242, 20000.0), (4243, None)])
                self.addCleanup(car.stop, "test over")
                state["car"] = car
                car.ensure_up()
                self.assertEqual(car.status()["state"], "up")
                stop = car.stop("idle")
                self.assertEqual((stop.outcome, stop.footprint_mb), (expected, 20000.0))
                self.assertEqual(stop.holders, (4242,) if holds_on else ())
                # The heartbeat row carries how the stop ended, as the fleet's read model shows it.
                store = self.open_store()
                store.worker_beat("box:1:0", "", "box", "default", 1, None, sidecar=car.status())
                [worker] = snapshot.snapshot(store).workers
                self.assertEqual((worker.sidecar["state"], worker.sidecar["holders"], worker.sidecar["reason"]),
                                 (expected, [4242] if holds_on else [], "idle"))
                os.remove(self.pids_file)

    def test_bad_specs_are_one_clear_line(self):
        cases = [(dict(command=""), "needs a command"), (dict(command="serve 'unclosed"), "cannot split"),
                 (dict(command="serve", health_url="localhost:8000"), "http:// or https://"),
                 (dict(command="serve", idle_ttl=0), "positive number of seconds")]
        for options, message in cases:
            with self.subTest(options=options), self.assertRaisesRegex(ConfigError, message):
                SidecarSpec(**options)


WORKER_APP = '''\
import os
import time

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))


@rowfleet.task(name="side.ask")
def ask(gate=None):
    give_up = time.monotonic() + 60
    while gate and not os.path.exists(os.path.join(HERE, gate)):
        if time.monotonic() > give_up:
            raise TimeoutError("the test never opened the gate")
        time.sleep(0.01)
    return "answered"
'''


class WorkerSidecarTest(SidecarTest):
    """``rowfleet worker --sidecar``: the server comes up before the job, goes when idle,
    and goes with the worker when an operator switches it off hard."""

    def setUp(self) -> None:
        super().setUp()
        self.write_module("sideapp", WORKER_APP)
        self.store = self.open_store()

    def worker(self, *flags: str) -> subprocess.Popen:
        spec = self.spec()
        return self.launch_logged("worker", "worker", "--app", "sideapp", "--sidecar", spec.command,
                                  "--sidecar-health", spec.health_url, "--heartbeat", "0.5", "--poll", "0.2",
                                  "--renew", "0.3", *flags)

    def enqueue(self, gate: str | None = None) -> int:
        from rowfleet.job import JobSpec

        return self.store.enqueue(JobSpec("side.ask", {"gate": gate})).id

    def done(self, job_id: int):
        return wait_until(lambda: (job := self.store.get_job(job_id, "")).state == "completed" and job,
                          message=f"job {job_id} completed")

    def test_the_server_is_up_for_the_job_and_stopped_once_idle(self):
        worker = self.worker("--sidecar-idle", "0.5")
        self.assertFalse(os.path.exists(self.pids_file), "started before any job needed it")
        job = self.done(self.enqueue())
        self.assertEqual(job.result, "answered")
        leader, helper = self.pids()
        wait_until(lambda: not alive(leader) and not alive(helper), message="the idle sidecar's group to end")
        self.assertIsNone(worker.poll(), "the worker went with its sidecar")
        os.remove(self.pids_file)
        self.done(self.enqueue())  # the next job brings it up again
        self.assertTrue(alive(self.pids()[0]))
        self.stop_all(worker)
        self.assertFalse(alive(self.pids()[0]), "the sidecar outlived its worker")

    def test_a_hard_switch_ends_the_worker_and_its_sidecar(self):
        worker = self.worker()
        job_id = self.enqueue(gate="never")
        wait_until(lambda: self.store.get_job(job_id, "").state == "running", message="the job running")
        leader, helper = self.pids()
        self.cli("control", "--queue", "default", "--off", "--policy", "hard")
        worker.wait(30)
        self.assertEqual(worker.returncode, 79, self.output(worker))
        wait_until(lambda: not alive(leader) and not alive(helper), message="the sidecar's group to end")

    def test_sidecar_flags_without_a_command_are_one_line(self):
        result = self.cli("worker", "--sidecar-idle", "5", check=False)
        self.assertEqual((result.returncode, len(result.stderr.strip().splitlines())), (2, 1), result.stderr)
        self.assertIn("need --sidecar CMD", result.stderr)
