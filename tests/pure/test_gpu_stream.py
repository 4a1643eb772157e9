"""The GPUs' state from one nvidia-smi in loop mode (``rowfleet.telemetry.gpu_stream``), against
the fake nvidia-smi of the tests: blocks read as they come, a stream that exits started
again, one that stops printing killed, and no stream outliving the process reading it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import unittest

from rowfleet.telemetry import gpu
from rowfleet.telemetry.gpu_stream import GpuStateStream

from support import TempDirTestCase, child_env, wait_until

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE_NVIDIA_SMI = os.path.join(HERE, "fixtures", "bin", "nvidia-smi")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class GpuStreamTest(TempDirTestCase):
    def stream(self, **options) -> GpuStateStream:
        stream = GpuStateStream(FAKE_NVIDIA_SMI, every=0.2, **options)
        self.addCleanup(stream.close)
        return stream

    def test_blocks_come_from_one_process_left_running(self):
        self.patch_environ(FAKE_NVIDIA_SMI="busy")
        stream = self.stream()
        first = stream.latest()
        self.assertIsNone(first.unknown)
        self.assertEqual([state.index for state in first.states], [0])
        child = stream._child
        self.assertTrue("--loop-ms=200" in child.args, child.args)
        wait_until(lambda: stream.latest() is not first, message="a block printed by the stream")
        later = stream.latest()
        self.assertEqual(later.states[0].name, "NVIDIA H100 80GB HBM3")
        self.assertGreater(later.states[0].utilization_percent, 90)
        self.assertIs(stream._child, child, "the same process answers every turn")

    def test_no_driver_answers_at_once_and_starts_no_stream(self):
        for machine, kind in (("error", gpu.NO_DRIVER), ("no-devices", gpu.NO_DEVICES)):
            with self.subTest(machine):
                self.patch_environ(FAKE_NVIDIA_SMI=machine)
                stream = self.stream()
                sample = stream.latest()
                self.assertEqual(sample.unknown.kind, kind)
                self.assertIsNone(stream._child)

    def test_a_missing_nvidia_smi_is_said_so(self):
        stream = GpuStateStream(os.path.join(self.dir, "nvidia-smi"), every=0.2)
        self.assertEqual(stream.latest().unknown.kind, gpu.NOT_INSTALLED)

    def test_a_stream_that_exits_is_asked_once_meanwhile_and_started_again(self):
        self.patch_environ(FAKE_NVIDIA_SMI="busy")
        clock = Clock()
        stream = self.stream(clock=clock, restart_every=30.0)
        stream.latest()
        first = stream._child
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        meanwhile = stream.latest()
        self.assertIsNone(meanwhile.unknown, "a one-shot query answers while the stream is down")
        self.assertFalse(stream._running())
        clock.now += 31.0
        stream.latest()
        self.assertTrue(stream._running())
        self.assertIsNot(stream._child, first)

    def test_a_stream_that_prints_nothing_is_killed_as_hung(self):
        self.patch_environ(FAKE_NVIDIA_SMI="busy")
        clock = Clock()
        stream = self.stream(clock=clock, hung_after=5.0)
        stream.latest()
        child = stream._child
        os.killpg(child.pid, signal.SIGSTOP)  # alive, printing nothing
        clock.now += 6.0
        self.assertEqual(stream.latest().unknown.kind, gpu.TIMEOUT)
        wait_until(lambda: not alive(child.pid), message="the hung stream killed")

    def test_the_stream_dies_with_a_reader_killed_with_9(self):
        script = textwrap.dedent(f"""\
            import sys, time
            from rowfleet.telemetry.gpu_stream import GpuStateStream
            stream = GpuStateStream({FAKE_NVIDIA_SMI!r}, every=0.1)
            stream.latest()
            print(stream._child.pid, flush=True)
            time.sleep(300)
            """)
        reader = subprocess.Popen([sys.executable, "-c", script], env=child_env(FAKE_NVIDIA_SMI="busy"),
                                  stdout=subprocess.PIPE, text=True)
        self.addCleanup(reader.kill)
        pid = int(reader.stdout.readline())
        self.assertTrue(alive(pid))
        reader.kill()
        reader.wait(10)
        wait_until(lambda: not alive(pid), message="the stream ended by SIGPIPE once its reader died")


if __name__ == "__main__":
    unittest.main()
