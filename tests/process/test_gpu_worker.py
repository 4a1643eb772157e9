"""The GPU worker: ``rowfleet worker --gpu`` with models, as real processes on SQLite, with
fake loaders (``gpuapp`` below) and the fake ``nvidia-smi`` of tests/fixtures/bin, which
prints a state file the loaders rewrite (``FAKE_NVIDIA_SMI_FILE``), so the GPU's used memory
moves as models load and unload. Also the store pieces the worker uses (``hand_back``,
``model_backlog``, a worker's advert in the snapshot, the other GPU workers' adverts through
``gpu_adverts`` as the worker's fleet view) on SQLite and PostgreSQL.

Evidence comes from files the handlers append to (one ``os.write`` per line) and from the
database; every wait is a condition with a deadline.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import unittest
import unittest.mock

from rowfleet import liveness
from rowfleet.claim import Claim
from rowfleet.job import JobSpec
from rowfleet.views import snapshot
from pg_harness import PostgresDatabaseCase
from support import DEADLINE, ROOT, TempDirTestCase, fake_gpu_env, wait_until
from contract.test_lifecycle import Clock

HOST = "gpubox"
BASE_USED_MB, TOTAL_MB = 1000, 24000
SIZES = {"a": 9000, "b": 7000, "c": 5000}

APP_SOURCE = '''\
import os
import time

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = %r


def _append(name, line):
    fd = os.open(os.path.join(HERE, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


def _use(delta):
    """Move the fake GPU's used memory, as the fake nvidia-smi prints it."""
    path = os.environ["FAKE_NVIDIA_SMI_FILE"]
    used = int(open(path).read().split(",")[4]) + delta
    with open(path + ".tmp", "w") as handle:
        handle.write(f"0, GPU-fake-0, Fake GPU, 50, {used}, %d\\n")
    os.replace(path + ".tmp", path)


def _loader(model):
    def load():
        _append("models.log", f"load {model} {os.getpid()}")
        time.sleep(0.05)
        marker = os.path.join(HERE, f"fail-{model}")
        if os.path.exists(marker):
            os.remove(marker)
            raise RuntimeError(f"{model} weights are corrupt")
        _use(SIZES[model])
        return bytearray(1 << 20)

    def unload(obj):
        _append("models.log", f"unload {model} {os.getpid()}")
        _use(-SIZES[model])

    rowfleet.model(model, unload=unload)(load)


for _model in SIZES:
    _loader(_model)


@rowfleet.task(name="infer", queue="gpu")
def infer(tag, gate=None):
    model = rowfleet.model()
    if not isinstance(model, bytearray):
        raise TypeError(f"rowfleet.model() gave {type(model).__name__}")
    give_up = time.monotonic() + 120
    while gate and not os.path.exists(os.path.join(HERE, gate)):
        if time.monotonic() > give_up:
            raise TimeoutError("the test never opened the gate")
        time.sleep(0.005)
    _append("runs.log", f"{tag} {os.getpid()}")
''' % (SIZES, TOTAL_MB)


class GpuWorkerProcessTest(TempDirTestCase):
    """Real ``rowfleet worker --gpu`` processes on SQLite."""

    def setUp(self) -> None:
        super().setUp()
        self.write_module("gpuapp", APP_SOURCE)
        self.smi_file = os.path.join(self.dir, "nvidia-smi.csv")
        with open(self.smi_file, "w") as handle:
            handle.write(f"0, GPU-fake-0, Fake GPU, 50, {BASE_USED_MB}, {TOTAL_MB}\n")
        self.store = self.open_store()

    def env(self) -> dict[str, str]:
        return fake_gpu_env(FAKE_NVIDIA_SMI_FILE=self.smi_file, ROWFLEET_HOST=HOST,
                         ROWFLEET_HEARTBEAT="0.5", ROWFLEET_POLL="0.2", ROWFLEET_RENEW="0.5",
                         ROWFLEET_LEASE="30", ROWFLEET_BACKOFF_BASE="0.05")

    def worker(self, *flags: str) -> subprocess.Popen:
        return self.launch_logged("worker", "worker", "--queue", "gpu", "--app", "gpuapp", "--gpu", *flags,
                                  env=self.env())

    def enqueue(self, tag: str, model: str, gate: str | None = None) -> int:
        return self.store.enqueue(JobSpec("infer", {"tag": tag, "gate": gate}, queue="gpu", model=model)).id

    def lines(self, name: str) -> list[str]:
        """The lines of a log the handlers write, without the pids."""
        return [line.rsplit(" ", 1)[0] for line in (self.marker(name) or "").splitlines()]

    def state(self, job_id: int, state: str):
        return wait_until(lambda: (job := self.store.get_job(job_id, "")).state == state and job,
                          message=f"job {job_id} {state}")

    def beat(self, condition) -> dict:
        return wait_until(lambda: next((row for row in self.store.reads.workers(0.0) if row["stopped_at"] is None
                                        and condition(row)), None), message="a heartbeat row")

    def request(self, model: str, action: str):
        return next(row for row in self.store.model_controls(HOST) if (row.model, row.action) == (model, action))

    def open_gate(self, name: str = "go") -> None:
        open(os.path.join(self.dir, name), "w").close()

    def test_warm_work_first_one_load_per_model_a_swap_and_never_an_unlisted_model(self):
        first = self.enqueue("a1", "a", gate="go")
        worker = self.worker("--models", "a,b")
        self.state(first, "running")
        unlisted = self.enqueue("c1", "c")
        other = self.enqueue("b1", "b")  # older than a2, but of a cold model
        newer = self.enqueue("a2", "a")
        row = self.beat(lambda row: row["warm_model"] == "a")
        self.assertEqual((row["vram_total_mb"], row["vram_free_mb"]), (TOTAL_MB, TOTAL_MB - BASE_USED_MB - SIZES["a"]))
        self.assertIsNotNone(row["warm_since"])
        self.open_gate()
        self.state(other, "completed")
        self.assertEqual(self.store.get_job(newer, "").state, "completed")
        self.assertEqual(self.lines("runs.log"), ["a1", "a2", "b1"], "the warm model's newer job goes first")
        self.assertEqual(self.lines("models.log"), ["load a", "unload a", "load b"])
        row = self.beat(lambda row: row["warm_model"] == "b")
        self.assertEqual(row["vram_free_mb"], TOTAL_MB - BASE_USED_MB - SIZES["b"])
        stats = {row["model"]: row for row in self.store.model_stats("")}
        self.assertEqual({model: (row["loads"], row["footprint_mb"], row["runs"]) for model, row in stats.items()},
                         {"a": (1, SIZES["a"], 2), "b": (1, SIZES["b"], 1)})
        # The run time counts from after the load: b's job ran at once, a's first waited at its gate.
        self.assertLess(stats["b"]["run_seconds"], stats["a"]["run_seconds"])
        job = self.store.get_job(unlisted, "")
        self.assertEqual((job.state, job.attempts), ("queued", 0), "a model the worker does not list")
        self.assertEqual(self.store.gpu_lease(HOST, 0).model, "b")
        self.stop_all(worker)
        self.assertEqual(self.lines("models.log")[-1], "unload b", "a stopping worker unloads its model")
        self.assertLessEqual(self.store.gpu_lease(HOST, 0).expires_at, time.time(), "and lets the GPU go")

    def test_a_failed_load_fails_the_attempt_and_an_idle_worker_unloads(self):
        open(os.path.join(self.dir, "fail-a"), "w").close()
        job_id = self.enqueue("a1", "a")
        worker = self.worker("--idle-unload", "0.5")
        job = self.state(job_id, "completed")
        self.assertEqual(job.attempts, 2, "the failed load spent its attempt; the retry loaded and ran")
        [retried] = [event for event in self.store.reads.events(job_id) if event.kind == "retried"]
        self.assertIn("weights are corrupt", retried.detail["error"])
        [stats] = self.store.model_stats("")
        self.assertEqual((stats["loads"], stats["failed_loads"]), (1, 1))
        wait_until(lambda: self.lines("models.log") == ["load a", "load a", "unload a"], message="the idle unload")
        # The memory figure is at most one heartbeat old: a beat soon shows it back.
        row = self.beat(lambda row: row["warm_model"] is None and row["vram_free_mb"] == TOTAL_MB - BASE_USED_MB)
        self.assertEqual(row["lane"], "any")
        self.assertEqual(snapshot.gpu_advert_of(row).models, ("a", "b", "c"), "every registered model by default")
        wait_until(lambda: self.store.gpu_lease(HOST, 0).expires_at <= time.time(), message="the GPU let go")
        self.stop_all(worker)

    def test_up_gives_each_queue_its_own_kind_of_workers(self):
        """``up --queue cpu:1 --queue gpu:1:gpu,models=a``: a GPU worker of model a for queue
        gpu, a plain worker for queue cpu (not a GPU worker too, as box-wide flags made it)."""
        box = self.launch_logged("up", "up", "--app", "gpuapp", "--queue", "cpu:1", "--queue", "gpu:1:gpu,models=a",
                                 "--no-sampler", env=self.env())
        model_job = self.enqueue("a1", "a")
        plain_job = self.store.enqueue(JobSpec("gpuapp:_append", {"name": "plain.log", "line": "ran"},
                                               queue="cpu")).id
        self.state(model_job, "completed")
        self.state(plain_job, "completed")
        gpu_row = self.beat(lambda row: row["queue"] == "gpu" and row["warm_model"] == "a")
        cpu_row = self.beat(lambda row: row["queue"] == "cpu")
        self.assertEqual(snapshot.gpu_advert_of(gpu_row).models, ("a",), "only the models its OPTIONS name")
        self.assertIsNone(snapshot.gpu_advert_of(cpu_row), "the cpu queue's worker routes nothing")
        self.assertEqual(self.lines("models.log"), ["load a"])
        self.stop_all(box)

    def test_two_workers_on_one_gpu_hold_one_model_at_a_time_and_a_refused_job_is_handed_back(self):
        first = self.enqueue("a1", "a", gate="go")
        holder = self.worker("--models", "a", "--idle-unload", "1")
        self.state(first, "running")
        wait_until(lambda: (lease := self.store.gpu_lease(HOST, 0)) and lease.model == "a", message="a's lease")
        refused = self.enqueue("b1", "b")
        other = self.worker("--models", "b")
        wait_until(lambda: "handed_back" in [event.kind for event in self.store.reads.events(refused)],
                   message="the job of the other model handed back")
        job = self.store.get_job(refused, "")
        self.assertEqual((job.state, job.attempts), ("queued", 0), "handed back without spending an attempt")
        self.open_gate()
        job = self.state(refused, "completed")
        self.assertEqual((job.attempts, job.watchdog_retries), (1, 0))
        self.assertEqual(self.lines("models.log"), ["load a", "unload a", "load b"], "one model on the GPU at a time")
        self.assertEqual(self.store.gpu_lease(HOST, 0).model, "b")
        self.stop_all(holder, other)

    def test_operators_forbid_unload_and_preload_a_model_on_the_box(self):
        self.store.set_model_control(HOST, "a", "forbid", changed_by="ops")
        forbidden = self.enqueue("a1", "a")
        allowed = self.enqueue("b1", "b")
        worker = self.worker("--models", "a,b")
        self.state(allowed, "completed")
        self.assertEqual(self.store.get_job(forbidden, "").state, "queued", "a forbidden model was claimed")
        row = self.beat(lambda row: row["warm_model"] == "b")
        self.assertEqual(snapshot.gpu_advert_of(row).models, ("b",), "the heartbeat still offers a forbidden model")
        self.store.set_model_control(HOST, "b", "unload", changed_by="ops")
        self.beat(lambda row: row["warm_model"] is None)
        wait_until(lambda: self.request("b", "unload").done_at is not None, message="the unload marked done")
        self.store.clear_model_control(HOST, "a", "forbid")
        self.store.set_model_control(HOST, "c", "preload", changed_by="ops")  # c is not in its list
        self.state(forbidden, "completed")  # a is allowed again
        self.store.set_model_control(HOST, "b", "preload", changed_by="ops")
        self.beat(lambda row: row["warm_model"] == "b")
        self.assertEqual(self.lines("models.log"), ["load b", "unload b", "load a", "unload a", "load b"])
        wait_until(lambda: self.request("b", "preload").done_at is not None, message="the preload marked done")
        self.assertIsNone(self.request("c", "preload").done_at, "a preload of a model it does not list was done")
        self.stop_all(worker)

    def test_a_pinned_model_is_not_unloaded_when_idle(self):
        self.store.set_model_control(HOST, "a", "pin", changed_by="ops")
        job_id = self.enqueue("a1", "a")
        worker = self.worker("--models", "a", "--idle-unload", "0.3")
        self.state(job_id, "completed")
        first = self.beat(lambda row: row["warm_model"] == "a")
        # Several heartbeats past the idle time: still warm.
        wait_until(lambda: self.beat(lambda row: row["warm_model"] == "a")["last_seen"] > first["last_seen"] + 2.0,
                   message="heartbeats well past the idle unload time")
        self.assertEqual(self.lines("models.log"), ["load a"])
        self.store.clear_model_control(HOST, "a", "pin")
        self.beat(lambda row: row["warm_model"] is None)
        self.assertEqual(self.lines("models.log"), ["load a", "unload a"])
        self.stop_all(worker)

    def test_bad_flags_are_one_line_and_exit_2(self):
        for flags in (["--lane", "fast"], ["--vram-mb", "0"], ["--idle-unload", "-1"], ["--gpu-index", "x"],
                      ["--models", "a,nope"], ["--host-priority", "1.5"]):
            with self.subTest(flags=flags):
                done = self.cli("worker", "--queue", "gpu", "--app", "gpuapp", "--gpu", *flags, check=False,
                                env=self.env())
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
        done = self.cli("worker", "--app", "gpuapp", "--lane", "model", check=False, env=self.env())
        self.assertEqual((done.returncode, done.stderr.strip()),
                         (2, "rowfleet: error: --lane needs --gpu: they route a GPU worker's claims"))
        self.assertEqual(self.store.reads.workers(0.0), [], "a refused command starts no worker")


class GpuStoreContract:
    """The store pieces a GPU worker uses, on every backend."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.store = self.open_store(clock=self.clock)

    def claim(self) -> object:
        return self.store.claim(Claim("", "gpu", "box:1", 60.0, models=("a", "b")))

    def test_hand_back_gives_the_attempt_back_and_keeps_the_place(self):
        first = self.store.enqueue(JobSpec("t", queue="gpu", model="a"))
        self.clock.advance(1.0)
        self.store.enqueue(JobSpec("t", queue="gpu", model="a"))
        job = self.claim()
        self.assertEqual((job.id, job.attempts), (first.id, 1))
        self.assertTrue(self.store.hand_back(job, "GPU leased to b"))
        again = self.store.get_job(job.id, "")
        self.assertEqual((again.state, again.attempts, again.claimed_by, again.run_at),
                         ("queued", 0, None, first.run_at))
        self.assertEqual(self.store.reads.events(job.id)[-1].kind, "handed_back")
        self.assertEqual(self.store.reads.events(job.id)[-1].detail["reason"], "GPU leased to b")
        self.assertFalse(self.store.hand_back(job, "twice"), "a stale token hands nothing back")
        retaken = self.claim()
        self.assertEqual((retaken.id, retaken.attempts, retaken.lease_token), (first.id, 1, 2))

    def test_model_backlog_counts_due_queued_jobs_per_model(self):
        for model in ("a", "a", "b", None):
            self.store.enqueue(JobSpec("t", queue="gpu", model=model))
            self.clock.advance(10.0)
        self.store.enqueue(JobSpec("t", queue="gpu", model="b", delay=600.0))  # not due
        self.store.enqueue(JobSpec("t", queue="other", model="a"))
        rows = self.store.model_backlog("", "gpu")
        self.assertEqual([(row["model"], row["queued"], round(row["oldest_wait"])) for row in rows],
                         [("a", 2, 40), ("b", 1, 20)])

    def test_the_advert_of_a_beat_reads_back_as_a_box(self):
        self.store.worker_beat("box:1:0", "", "box", "gpu", 1, None, models=("a", "b"), gpu_index=1,
                               vram_total_mb=24000, vram_free_mb=6000, warm_model="a", warm_since=self.clock() - 5,
                               loading=None, lane="model", host_priority=-1)
        self.store.worker_beat("box:2:0", "", "box", "gpu", 2, None)
        workers = {worker.worker_id: worker for worker in snapshot.snapshot(self.store).workers}
        box = snapshot.box_of(workers["box:1:0"])
        self.assertEqual((box.models, box.gpu_index, box.vram_total_mb, box.vram_free_mb, box.warm_model,
                          box.host_priority, box.live, box.serving, box.busy),
                         (("a", "b"), 1, 24000, 6000, "a", -1, True, True, False))
        self.assertEqual(workers["box:1:0"].to_dict()["gpu"]["lane"], "model")
        self.assertIsNone(snapshot.box_of(workers["box:2:0"]), "a worker without an advert is no box")


    def test_the_workers_fleet_view_is_the_narrow_read_and_shows_what_the_snapshot_shows(self):
        from rowfleet import control
        from rowfleet.gpu import gpu_worker
        from rowfleet.store.reads import OperatorReads
        from rowfleet.telemetry import gpu

        heartbeat = self.store.config.heartbeat

        def beat(worker_id: str, host: str, queue: str = "gpu", project: str = "", **advert) -> None:
            pid = int(worker_id.rsplit(":", 1)[1])
            advert.setdefault("models", ("a", "b"))
            self.store.worker_beat(worker_id, project, host, queue, pid, advert.pop("job", None),
                                   advert.pop("state", control.SERVING), gpu_index=0, vram_total_mb=24000,
                                   **advert)

        beat("silent:1", "s")
        self.clock.advance(liveness.MISSED_BEATS * heartbeat + 1)  # it missed its beats: listed by no one
        beat("me:2", HOST)
        beat("warm:3", "a", warm_model="a", warm_since=self.clock() - 5, vram_free_mb=9000, job=7)
        beat("drain:4", "b", state=control.DRAINING, host_priority=-1)
        beat("parked:5", "c", state=control.PARKED, loading="b")
        beat("multi:6", "d", queue="cpu", queues=("cpu", "gpu"))
        beat("stopped:7", "f")
        self.store.worker_stopped("stopped:7")  # beaten this instant: the snapshot lists it, not live
        beat("off:8", "offbox")
        self.store.set_switch("", "offbox", "gpu", control.OFF)
        beat("other:9", "e", queue="other")
        beat("elsewhere:10", "a", project="p2")
        beat("plain:11", "a", models=None)
        fleet = snapshot.snapshot(self.store, listed_for=0.0)  # what the worker read before
        expected = tuple(box for worker in fleet.workers if worker.project == "" and worker.serves("gpu")
                         and worker.worker_id != "me:2" and (box := snapshot.box_of(worker)) is not None)
        box = gpu_worker.GpuBox(self.config(host=HOST),
                                gpu_worker.GpuSettings(("a",)), worker_id="me:2", holder="me:2", queues="gpu",
                                memory=gpu_worker.GpuMemory("nvidia-smi", 0, 1.0, sample=lambda **_: gpu.GpuSample()))
        with unittest.mock.patch.object(OperatorReads, "fleet_rows", side_effect=AssertionError("read the snapshot")):
            view = box._read_fleet(self.store)
        self.assertEqual(view.boxes, expected)
        self.assertEqual([(b.worker_id, b.live, b.serving, b.busy) for b in view.boxes],
                         [("warm:3", True, True, True), ("drain:4", True, False, False),
                          ("parked:5", True, False, False), ("multi:6", True, True, False),
                          ("stopped:7", False, False, False), ("off:8", True, False, False)])
        self.assertEqual((view.boxes[0].warm_model, view.boxes[0].vram_free_mb, view.boxes[1].host_priority,
                          view.boxes[2].loading), ("a", 9000, -1, "b"))
        self.assertEqual([w.worker_id for w in self.store.gpu_adverts("p2")], ["elsewhere:10"])

class SQLiteGpuStoreTest(GpuStoreContract, TempDirTestCase):
    pass


class GpuPreloadTest(TempDirTestCase):
    """An idle GPU worker's own preload decision, from what the store measured."""

    def box(self):
        from rowfleet.gpu import gpu_worker
        from rowfleet.telemetry import gpu

        return gpu_worker.GpuBox(self.config(host=HOST), gpu_worker.GpuSettings(("preloaded",)), worker_id="w",
                                 holder="w:1", queues="gpu",
                                 memory=gpu_worker.GpuMemory("nvidia-smi", 0, 1.0, sample=lambda **_: gpu.GpuSample()))

    def test_an_idle_box_preloads_a_model_once_its_queued_work_outweighs_its_load(self):
        from rowfleet import models

        loads: list[str] = []
        models.register("preloaded", lambda: loads.append("load") or bytearray(1))
        self.addCleanup(models._registry.pop, "preloaded", None)
        store = self.open_store()
        store.record_model_load("", "preloaded", 2.5, 1000, ok=True)
        for seconds in (1.0, 1.0):
            store.record_model_run("", "preloaded", seconds)
        store.enqueue_many(JobSpec("infer", queue="gpu", model="preloaded"), [None] * 2)
        self.assertFalse(self.box().preload_if_idle(store), "2 jobs x 1 s do not outweigh a 2.5 s load")
        self.assertEqual(loads, [])
        store.enqueue(JobSpec("infer", queue="gpu", model="preloaded"))
        box = self.box()
        self.assertTrue(box.preload_if_idle(store), "3 jobs x 1 s outweigh it")
        self.assertEqual((loads, box.resident.held().model_id), (["load"], "preloaded"))
        self.assertEqual(store.gpu_lease(HOST, 0).model, "preloaded", "a preload leases the GPU first")
        self.assertFalse(box.preload_if_idle(store), "a model held is not loaded again")
        box.close(store)

    def test_a_run_time_written_by_plain_sql_that_is_no_number_reads_as_unknown(self):
        import sqlite3

        from rowfleet import models

        models.register("preloaded", lambda: bytearray(1))
        self.addCleanup(models._registry.pop, "preloaded", None)
        store = self.open_store()
        store.record_model_load("", "preloaded", 0.5, 1000, ok=True)
        store.enqueue_many(JobSpec("infer", queue="gpu", model="preloaded"), [None] * 3)
        with sqlite3.connect(self.db) as conn:
            conn.execute("UPDATE model_stats SET run_seconds = 'slow' WHERE model = 'preloaded'")
        self.assertFalse(self.box().preload_if_idle(store), "no run time known: no preload, and no crash")


class GpuMemoryTest(TempDirTestCase):
    def test_the_processes_on_its_gpu_are_read_from_nvidia_smi(self):
        from rowfleet.gpu import gpu_worker

        smi = [sys.executable, os.path.join(ROOT, "tests", "fixtures", "bin", "nvidia-smi")]
        with unittest.mock.patch.dict(os.environ, {"FAKE_NVIDIA_SMI": "busy"}):
            memory = gpu_worker.GpuMemory(smi, 0, 10.0)
            self.assertEqual(memory.processes(), [(11327, 2566), (11328, 1542), (11345, 15690)])
            self.assertEqual(gpu_worker.GpuMemory(smi, 1, 10.0).processes()[:1], [(11327, 2566)],
                             "a GPU whose uuid is unknown takes every GPU's processes")
        self.assertEqual(gpu_worker.GpuMemory("no-such-nvidia-smi", 0, 1.0).processes(), [])


class GpuLeaseClockTest(TempDirTestCase):
    """A GPU worker judges the GPU's lease by its store's clock, which on SQLite is held
    across a step of the box's clock, never by the box's clock itself."""

    def test_a_lease_lapsed_by_the_stores_clock_locks_the_gpu_to_nothing(self):
        import time

        from rowfleet.gpu import gpu_worker
        from rowfleet.telemetry import gpu

        writer = self.open_store(clock=lambda: time.time() + 600)  # the fleet's clock, ahead of this box's
        self.assertIsNotNone(writer.acquire_gpu(HOST, 0, "other", "someone:1", 60.0))
        later = self.open_store(clock=lambda: time.time() + 1200)  # ten minutes on: that lease lapsed
        box = gpu_worker.GpuBox(self.config(host=HOST), gpu_worker.GpuSettings(("a",)), worker_id="w", holder="w:1",
                                queues="gpu", memory=gpu_worker.GpuMemory("nvidia-smi", 0, 1.0,
                                                                         sample=lambda **_: gpu.GpuSample()))
        box._read_lock(later)
        self.assertIsNone(box._locked_to, "a lapsed lease read as live by the box's clock")


class GpuLeaseRaceTest(TempDirTestCase):
    """The keeper renews the GPU's lease while the main thread lets it go (an idle unload)."""

    def test_a_renewal_in_flight_never_revives_a_released_lease(self):
        import threading

        from rowfleet.gpu import gpu_worker
        from rowfleet.telemetry import gpu

        store = self.open_store()
        box = gpu_worker.GpuBox(self.config(host=HOST), gpu_worker.GpuSettings(("a",)), worker_id="w", holder="w:1",
                                queues="gpu", memory=gpu_worker.GpuMemory("nvidia-smi", 0, 1.0,
                                                                         sample=lambda **_: gpu.GpuSample()))
        self.assertTrue(box._lease_for(store, "a"))
        renewing, released = threading.Event(), threading.Event()

        def keep() -> None:  # the keeper thread, with its own connection as a worker's keeper has
            from rowfleet.store import open_store

            keeper_store = open_store(self.config())
            renew_gpu = keeper_store.renew_gpu

            def slow_renewal(*args, **kwargs):  # the keeper read the lease; the main thread releases it now
                renewing.set()
                released.wait(2.0)  # with the release kept apart, it waits here in vain, and that is the point
                return renew_gpu(*args, **kwargs)

            keeper_store.renew_gpu = slow_renewal
            try:
                box.renew(keeper_store)
            finally:
                keeper_store.close()

        keeper = threading.Thread(target=keep)
        keeper.start()
        self.assertTrue(renewing.wait(DEADLINE))
        box._release(store)  # the idle unload's
        released.set()
        keeper.join(DEADLINE)
        lease = store.gpu_lease(HOST, 0)
        self.assertLessEqual(lease.expires_at, time.time(), "the released lease was renewed: the GPU stays locked")


class PostgresGpuStoreTest(PostgresDatabaseCase, GpuStoreContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""


if __name__ == "__main__":
    unittest.main()
