"""Jobs that need several GPUs (``gpus=N``), as real processes on SQLite: ``rowfleet up``
with one GPU worker on each of a host's two GPUs (the fake ``nvidia-smi`` printing two
cards). A 2-GPU job runs on both, ``CUDA_VISIBLE_DEVICES`` naming them, the other GPU lent
to it through its lease, so that its own worker runs nothing meanwhile; a 3-GPU job is
never claimed and ``rowfleet job`` says why; once the gang ends its leases are let go and
the waiting one-GPU job runs."""

from __future__ import annotations

import os
import time
import unittest

from rowfleet.gpu import gang
from support import TempDirTestCase, fake_gpu_env, wait_until

HOST = "gangbox"
APP = '''\
import os
import time

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))


@rowfleet.model("a")
def load_a():
    return bytearray(16)


def _append(name, line):
    with open(os.path.join(HERE, name), "a") as handle:
        handle.write(line + "\\n")


@rowfleet.task(name="gang", queue="gpu", gpus=2)
def gang(tag, gate=None):
    _append("runs.log", f"{tag} {os.environ.get('CUDA_VISIBLE_DEVICES')}")
    give_up = time.monotonic() + 120
    while gate and not os.path.exists(os.path.join(HERE, gate)):
        if time.monotonic() > give_up:
            raise TimeoutError("the test never opened the gate")
        time.sleep(0.01)


@rowfleet.task(name="single", queue="gpu", gpus=1)
def single(tag):
    _append("runs.log", f"{tag} {os.environ.get('CUDA_VISIBLE_DEVICES')}")
'''
HELD_FOR = 2.0  # seconds the one-GPU job must wait while the gang holds both GPUs


class GpuGangProcessTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.write_module("gangapp", APP)
        self.smi_file = os.path.join(self.dir, "nvidia-smi.csv")
        with open(self.smi_file, "w") as handle:
            handle.write("0, GPU-fake-0, Fake GPU, 0, 1000, 24000\n1, GPU-fake-1, Fake GPU, 0, 1000, 24000\n")
        self.store = self.open_store()

    def env(self) -> dict[str, str]:
        return fake_gpu_env(FAKE_NVIDIA_SMI_FILE=self.smi_file, ROWFLEET_HOST=HOST, ROWFLEET_POLL="0.2",
                         ROWFLEET_HEARTBEAT="0.5", ROWFLEET_RENEW="0.5")

    def runs(self) -> list[str]:
        path = os.path.join(self.dir, "runs.log")
        return open(path).read().splitlines() if os.path.exists(path) else []

    def enqueue(self, task: str, *flags: str, **args: str) -> str:
        import json

        return self.cli("enqueue", task, "--app", "gangapp", "--args", json.dumps(args), *flags).stdout.strip()

    def test_a_two_gpu_job_holds_both_gpus_and_a_three_gpu_job_says_why_it_waits(self):
        box = self.launch_logged("up", "up", "--app", "gangapp", "--queue", "gpu:2:gpu,models=a,gpu-index=0+1",
                                 "--no-sampler", env=self.env())
        wait_until(lambda: len([row for row in self.store.reads.workers(0.0) if row["stopped_at"] is None]) == 2,
                   message=f"two GPU workers beating:\n{self.output(box)}")
        pair = self.enqueue("gang", tag="pair", gate="go")
        wait_until(lambda: self.runs(), message=f"the 2-GPU job running:\n{self.output(box)}")
        [line] = self.runs()
        tag, devices = line.split()
        self.assertEqual(sorted(devices.split(",")), ["0", "1"], "CUDA_VISIBLE_DEVICES names both GPUs")
        leases = self.store.host_gpu_leases(HOST)
        lent = [index for index, lease in leases.items() if lease.model == gang.lent_to(int(pair))
                and lease.expires_at > time.time()]
        self.assertEqual(sorted(lent), [0, 1], "a plain gang holds both GPUs through their leases")

        one = self.enqueue("single", tag="one")
        too_big = self.enqueue("gang", "--gpus", "3", tag="three")
        until = time.monotonic() + HELD_FOR
        while time.monotonic() < until:  # what must hold all along while the gang runs
            self.assertEqual(self.runs(), [line], "a job ran on a GPU lent to the gang")
            time.sleep(0.1)
        self.assertEqual(self.cli_json("job", one)["state"], "queued")
        why = " ".join(reason["text"] for reason in self.cli_json("job", too_big)["why_not_running"])
        self.assertIn("it needs 3 GPUs of one host; the most a host of the GPU workers of queue gpu has is 2", why)

        open(os.path.join(self.dir, "go"), "w").close()
        wait_until(lambda: self.cli_json("job", one)["state"] == "completed", message="the one-GPU job run after")
        self.assertEqual(self.cli_json("job", pair)["state"], "completed")
        one_line = next(line for line in self.runs() if line.startswith("one "))
        self.assertIn(one_line.split()[1], ("0", "1"), "a one-GPU job sees its own GPU")
        wait_until(lambda: all(lease.expires_at <= time.time() for lease in self.store.host_gpu_leases(HOST).values()
                               if gang.is_lent(lease.model)), message="the gang's leases let go")
        shown = self.cli_json("job", too_big)
        self.assertEqual((shown["state"], shown["attempts"]), ("queued", 0), "a 3-GPU job was claimed on 2 GPUs")
        self.stop_all(box)
        self.assertNotIn("Traceback", self.output(box))


if __name__ == "__main__":
    unittest.main()
