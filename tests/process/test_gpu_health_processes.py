"""The GPU health gate with real processes, on SQLite: ``rowfleet up`` on a box whose fake
``nvidia-smi`` reports a failing card (uncorrectable ECC errors, a failed row remap). Its
sampler switches GPU 0 off at its first turn; the GPU worker parks and claims nothing (a
job waits, unspent); ``hosts`` and ``gpu-control list`` say why; only an operator's
``gpu-control on`` brings the worker back. (That the verdict the operator cleared does not
switch it off again, and ``/metrics``, are the contract tests'.)"""

from __future__ import annotations

import json
import os
import unittest

from rowfleet import control
from support import TempDirTestCase, fake_gpu_env, wait_until

TASKS = """\
import rowfleet


@rowfleet.task
def add(a, b):
    return a + b
"""
HOST = "gpu-box"


class GpuHealthGateProcessTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.write_module("gate_tasks", TASKS)
        self.store = self.open_store()

    def env(self) -> dict[str, str]:
        return fake_gpu_env(FAKE_NVIDIA_SMI="failing", ROWFLEET_HOST=HOST, ROWFLEET_POLL="0.2",
                         ROWFLEET_HEARTBEAT="0.5")

    def worker_state(self) -> str | None:
        rows = [row for row in self.store.reads.workers(0.0) if row["stopped_at"] is None and row["queue"] == "gpu"]
        return rows[0]["state"] if rows else None

    def test_a_failing_card_parks_its_worker_until_an_operator_switches_it_on(self):
        box = self.launch_logged("up", "up", "--app", "gate_tasks", "--queue", "gpu:1:gpu", env=self.env())
        switch = wait_until(lambda: (found := self.store.gpu_switch(HOST, 0)) is not None and found.off and found,
                            message="the sampler to switch the failing GPU off")
        self.assertEqual(switch.changed_by, control.HEALTH_GATE)
        self.assertIn("uncorrectable ECC errors: 3", switch.reason)
        wait_until(lambda: self.worker_state() == control.PARKED, message=f"the GPU worker parked:\n{self.output(box)}")
        job = self.cli("enqueue", "gate_tasks:add", "--queue", "gpu", "--args", '{"a": 1, "b": 2}').stdout.strip()

        hosts = self.cli("hosts", env=self.env()).stdout
        self.assertIn("OFF by health gate: row remapping failed", hosts)
        listed = json.loads(self.cli("gpu-control", "list", "--json").stdout)["gpu_switches"]
        self.assertEqual([(row["host"], row["gpu_index"], row["desired"]) for row in listed], [(HOST, 0, "off")])
        self.assertIn("is failing", self.output(box))
        shown = self.cli_json("job", job)
        self.assertEqual((shown["state"], shown["attempts"]), ("queued", 0), "a parked worker claimed it")

        self.cli("gpu-control", "on", "0", "--host", HOST, "--by", "ops")
        wait_until(lambda: self.cli_json("job", job)["state"] == "completed", message="the job run once switched on")
        self.assertEqual(self.cli_json("job", job)["result"], 3)
        switch = self.store.gpu_switch(HOST, 0)
        self.assertEqual((switch.off, switch.changed_by, switch.cleared), (False, "ops", switch.health))
        self.stop_all(box)


if __name__ == "__main__":
    unittest.main()
