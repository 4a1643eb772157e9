"""The GPU health gate on every backend: the sampler's verdicts (``Store.record_gpu_health``)
switch a failing GPU off, never on; an operator's ``on`` acknowledges the verdict in force,
so that only a new one trips the gate again; a worker of a GPU that is off is held as by a
drain switch (``keeper.read_switch``); ``/metrics`` says which GPUs are off and failing.
A whole sampler turn over the fake ``nvidia-smi``'s failing card trips it too."""

from __future__ import annotations

import logging
import os
import shutil

from rowfleet import control
from rowfleet.config import Config
from rowfleet.errors import ConfigError
from rowfleet.metrics import prometheus
from rowfleet.services import sampler as sampler_module
from rowfleet.services.exporter import scrape
from rowfleet.services.sampler import Sampler
from rowfleet.worker.keeper import Identity, read_switch
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase
from contract.test_sampler import FAKE_NVIDIA_SMI, SYS, Clock, lay_proc

ECC = "uncorrectable ECC errors: 3 since the driver loaded"
MORE_ECC = "uncorrectable ECC errors: 5 since the driver loaded"


class GpuHealthGateContract:
    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()

    def test_a_failing_verdict_switches_a_gpu_off_and_a_healthy_one_never_on(self):
        self.assertFalse(self.store.record_gpu_health("box", 0, "").off)
        tripped = self.store.record_gpu_health("box", 0, ECC)
        self.assertEqual((tripped.desired, tripped.reason, tripped.changed_by, tripped.health),
                         (control.OFF, ECC, control.HEALTH_GATE, ECC))
        again = self.store.record_gpu_health("box", 0, "")
        self.assertTrue(again.off, "a healthy verdict switched the GPU back on: only an operator may")
        self.assertEqual((again.health, again.reason), ("", ECC), "the verdict is kept, the reason of the switch too")
        self.assertFalse(self.store.gpu_switch("box", 1), "another GPU of the host is untouched")

    def test_an_operators_on_acknowledges_the_verdict_and_only_a_new_one_trips_again(self):
        self.store.record_gpu_health("box", 0, ECC)
        on = self.store.set_gpu_switch("box", 0, control.ON, changed_by="ops", reason="reset the card")
        self.assertEqual((on.desired, on.cleared, on.changed_by), (control.ON, ECC, "ops"))
        self.assertFalse(self.store.record_gpu_health("box", 0, ECC).off, "the verdict the operator cleared")
        tripped = self.store.record_gpu_health("box", 0, MORE_ECC)
        self.assertTrue(tripped.off, "a new verdict (more errors) trips the gate again")
        self.assertEqual(tripped.reason, MORE_ECC)

    def test_an_operator_switches_a_gpu_off_and_the_gate_keeps_their_word(self):
        off = self.store.set_gpu_switch("box", 2, control.OFF, changed_by="ops", reason="fan noise")
        self.assertTrue(off.off)
        kept = self.store.record_gpu_health("box", 2, ECC)
        self.assertEqual((kept.changed_by, kept.reason, kept.health), ("ops", "fan noise", ECC))
        self.assertEqual([(s.host, s.gpu_index) for s in self.store.gpu_switches()], [("box", 2)])

    def test_bad_switches_are_refused_and_change_nothing(self):
        for desired, host, index, reason in (("maybe", "box", 0, ""), ("off", "two words", 0, ""),
                                             ("off", "box", -1, ""), ("off", "box", 0, "x" * 100_000)):
            with self.subTest(desired=desired, host=host, index=index), self.assertRaises(ConfigError):
                self.store.set_gpu_switch(host, index, desired, reason=reason)
        self.assertEqual(self.store.gpu_switches(), [])

    def test_a_worker_of_a_gpu_that_is_off_is_held_as_by_a_drain_switch(self):
        config = Config(db=self.db, host="box")
        on_gpu = Identity.of(config, ["gpu", "cpu"], 42, 1.0, gpu_index=1)
        plain = Identity.of(config, ["gpu"], 43, 1.0)
        self.assertEqual(read_switch(self.store, on_gpu, None), (None, frozenset()))
        self.store.record_gpu_health("box", 1, ECC)
        switch, off = read_switch(self.store, on_gpu, None)
        self.assertEqual((switch.desired, switch.policy, switch.changed_by), (control.OFF, control.DRAIN,
                                                                               control.HEALTH_GATE))
        self.assertEqual(switch.reason, f"GPU 1 of box: {ECC}")
        self.assertEqual(off, frozenset({"gpu", "cpu"}), "every queue of the worker")
        self.assertEqual(read_switch(self.store, plain, None), (None, frozenset()), "a worker of no GPU")
        self.assertEqual(read_switch(self.store, Identity.of(config, ["gpu"], 44, 1.0, gpu_index=0), None)[0],
                         None, "a worker of another GPU")
        self.store.set_gpu_switch("box", 1, control.ON, changed_by="ops")
        self.assertEqual(read_switch(self.store, on_gpu, None), (None, frozenset()))

    def test_metrics_say_which_gpus_are_off_and_failing(self):
        self.store.record_gpu_health("box", 0, ECC)
        self.store.record_gpu_health("box", 1, "")
        self.store.set_gpu_switch("other", 0, control.OFF, changed_by="ops")
        text = scrape(self.store)
        self.assertIn('rowfleet_gpu_off{host="box",gpu="0",changed_by="health gate"} 1', text)
        self.assertIn('rowfleet_gpu_off{host="box",gpu="1",changed_by=""} 0', text)
        self.assertIn('rowfleet_gpu_off{host="other",gpu="0",changed_by="ops"} 1', text)
        self.assertIn('rowfleet_gpu_failing{host="box",gpu="0"} 1', text)
        self.assertIn('rowfleet_gpu_failing{host="box",gpu="1"} 0', text)
        self.assertNotIn('rowfleet_gpu_failing{host="other"', text, "never judged: no verdict to export")
        self.assertIn("# TYPE rowfleet_gpu_off gauge", text)
        self.assertIn("gpu_off", prometheus.FAMILIES)


class SQLiteGpuHealthGateTest(GpuHealthGateContract, TempDirTestCase):
    pass


class PostgresGpuHealthGateTest(PostgresDatabaseCase, GpuHealthGateContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""


class SamplerHealthTurnTest(TempDirTestCase):
    """A sampler's turn over the fake nvidia-smi's failing card switches its GPU off, says
    so once, and a healthy card's turn leaves its GPU on."""

    def setUp(self) -> None:
        super().setUp()
        self.root = os.path.join(self.dir, "root")
        shutil.copytree(SYS, os.path.join(self.root, "sys"), symlinks=True)
        lay_proc(self.root, "t0")
        self.clock = Clock()
        self.store = self.open_store()

    def sampler(self, machine: str) -> Sampler:
        self.patch_environ(FAKE_NVIDIA_SMI=machine)
        sampler = Sampler(self.store, self.config(host="box", nvidia_smi=FAKE_NVIDIA_SMI), root=self.root,
                          monotonic=self.clock)
        self.addCleanup(sampler.close)
        return sampler

    def test_the_failing_card_is_switched_off_at_the_first_turn_and_said_once(self):
        failing = self.sampler("failing")
        with self.assertLogs("rowfleet.sampler", logging.ERROR) as said:
            failing.run_once()
            self.clock.now += sampler_module.HEALTH_EVERY + 1
            failing.run_once()
        switch = self.store.gpu_switch("box", 0)
        self.assertTrue(switch.off, switch)
        self.assertEqual(switch.changed_by, control.HEALTH_GATE)
        self.assertIn("uncorrectable ECC errors: 3", switch.reason)
        self.assertIn("row remapping failed", switch.reason)
        self.assertEqual(len([line for line in said.output if "is failing" in line]), 1, said.output)

    def test_a_healthy_card_stays_on(self):
        self.sampler("busy").run_once()
        switch = self.store.gpu_switch("box", 0)
        self.assertIsNotNone(switch, "the verdict is recorded")
        self.assertEqual((switch.off, switch.health), (False, ""))
