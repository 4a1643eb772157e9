"""The host's sampler and its flight recorder, on both databases.

In process: a sampler's turns over a fixture tree of /proc and /sys (and the fake
nvidia-smi), one writer per host by the lease, the minute fold (once, and again after a
restart without doubling), the orchestrator's pruning of both tiers and its fold of
finished jobs into the tallies. As processes: the worker's supervisor runs the sampler as
a child and restarts it after kill -9, two supervisors of one host have one writer, a hung
nvidia-smi stalls only the sampler, and on PostgreSQL the sampler writes again after the
server restarts.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import sys
import time
import unittest
import weakref

from rowfleet.claim import Claim
from rowfleet.errors import StoreUnavailable
from rowfleet.job import COMPLETED, FAILED, JobSpec, Outcome
from rowfleet.metrics import tally
from rowfleet.services import sampler
from rowfleet.services.orchestrator import Orchestrator
from rowfleet.services.sampler import Sampler, minute_of
from rowfleet.store.telemetry import DETAIL, MINUTE
from rowfleet.telemetry import cpu, gpu_readings, readings
from rowfleet.telemetry.readings import fold_minute

from pg_harness import PostgresDatabaseCase
from support import DEADLINE, TempDirTestCase, child_env, wait_until

SLOW = False
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HW = os.path.join(HERE, "fixtures", "hw")
PROC = os.path.join(HW, "linux", "proc")
SYS = os.path.join(HW, "linux", "public", "node_exporter-sysfs", "sys")
FAKE_NVIDIA_SMI = os.path.join(HERE, "fixtures", "bin", "nvidia-smi")


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def lay_proc(root: str, moment: str) -> None:
    """The fixture /proc of ``moment`` (t0 or t1) under ``root``, with the fixed files."""
    proc = os.path.join(root, "proc")
    os.makedirs(os.path.join(proc, "net"), exist_ok=True)
    os.makedirs(os.path.join(proc, "pressure"), exist_ok=True)
    for source, target in ((f"proc-stat-{moment}.txt", "stat"), (f"proc-diskstats-{moment}.txt", "diskstats"),
                           (f"proc-net-dev-{moment}.txt", "net/dev"), ("proc-meminfo.txt", "meminfo"),
                           ("proc-loadavg.txt", "loadavg"), ("proc-pressure-cpu.txt", "pressure/cpu"),
                           ("proc-pressure-io.txt", "pressure/io"), ("proc-pressure-memory.txt", "pressure/memory")):
        shutil.copy(os.path.join(PROC, source), os.path.join(proc, target))


class StopSignalTest(unittest.TestCase):
    """A stop signal interrupts sampling only, never the way out: one that arrived while a
    supervised sampler was logging why it stopped used to end it in a traceback."""

    def test_outside_sampling_a_signal_only_sets_the_event(self):
        signal_ = sampler.StopSignal()
        signal_(signal.SIGTERM, None)
        self.assertTrue(signal_.event.is_set())

    def test_while_sampling_the_first_signal_interrupts_and_a_second_does_not(self):
        signal_ = sampler.StopSignal()
        with self.assertRaises(sampler.Interrupted), signal_.interruptible():
            signal_(signal.SIGTERM, None)
        with signal_.interruptible():
            pass
        signal_(signal.SIGTERM, None)  # after the span: no raise
        self.assertTrue(signal_.event.is_set())

    def test_an_interruption_python_swallowed_is_delivered_again(self):
        """Python runs a handler between any two bytecodes, a weakref callback's too: the
        Interrupted raised there was printed as "Exception ignored" with its traceback
        (a fresh-clone CI run caught it under ``worker --procs``) and sampling went on."""
        self.addCleanup(signal.signal, signal.SIGALRM, signal.getsignal(signal.SIGALRM))
        self.addCleanup(setattr, sys, "unraisablehook", sys.unraisablehook)
        printed = []
        sys.unraisablehook = printed.append
        signal_ = sampler.StopSignal()
        signal_.install()

        class Dying:
            pass

        dying = Dying()
        watch = weakref.ref(dying, lambda _: signal_(signal.SIGTERM, None))
        started = time.monotonic()
        with self.assertRaises(sampler.Interrupted), signal_.interruptible():
            del dying  # the handler runs inside the callback, where Python cannot raise
            time.sleep(5)  # a blocking call: the redelivery breaks it
        self.assertLess(time.monotonic() - started, 4)
        self.assertEqual(printed, [], "nothing printed as ignored")
        self.assertTrue(signal_.event.is_set())
        self.assertIsNotNone(watch)


class SamplerTurnTest(TempDirTestCase):
    """What a turn reads and writes, over fixture trees, with a moved clock."""

    def setUp(self) -> None:
        super().setUp()
        self.root = os.path.join(self.dir, "root")
        shutil.copytree(SYS, os.path.join(self.root, "sys"), symlinks=True)
        lay_proc(self.root, "t0")
        self.patch_environ(FAKE_NVIDIA_SMI="busy")
        self.clock = Clock()
        self.store = self.open_store()
        self.sampler = Sampler(self.store, self.config(host="box", nvidia_smi=FAKE_NVIDIA_SMI), root=self.root,
                               paths=(self.dir,), monotonic=self.clock)
        self.addCleanup(self.sampler.close)  # its nvidia-smi stream

    def test_two_turns_write_the_fixtures_readings_with_rates_over_the_interval(self):
        first = self.sampler.run_once()
        self.assertIsNotNone(first.at)
        lay_proc(self.root, "t1")
        self.clock.now += 1.0
        second = self.sampler.run_once()
        rows = self.store.host_samples("box", DETAIL)
        self.assertEqual([row.at for row in rows], [first.at, second.at])
        before, after = rows[0].readings, rows[1].readings
        self.assertNotIn("cpu.busy", before, "the first turn has no previous read: no rates")
        self.assertNotIn("interval", before)
        self.assertEqual(after["interval"], 1.0)
        t0 = cpu.parse_cpu_stat(open(os.path.join(PROC, "proc-stat-t0.txt")).read())
        t1 = cpu.parse_cpu_stat(open(os.path.join(PROC, "proc-stat-t1.txt")).read())
        self.assertEqual(after["cpu.busy"], round(cpu.cpu_utilisation(t0, t1).busy_percent, 1))
        self.assertEqual(len(after["cpu.cores"]), 2)
        from rowfleet.telemetry.host_memory import parse_meminfo

        self.assertEqual(after["mem.total"], parse_meminfo(open(os.path.join(PROC, "proc-meminfo.txt")).read()).total_bytes)
        self.assertEqual(after["load.1"], cpu.parse_loadavg(open(os.path.join(PROC, "proc-loadavg.txt")).read()).one)
        self.assertIn("net.eth0.rx_bps", after)
        self.assertNotIn("net.lo.rx_bps", after, "the loopback is left out")
        self.assertIn(f"disk.{self.dir}.free", after)
        self.assertIn("temp.hottest", after)
        self.assertEqual(after["gpu.0.name"], "NVIDIA H100 80GB HBM3")
        self.assertGreater(after["gpu.0.util"], 90)
        self.assertGreater(after["gpu.0.power_limit_w"], 0)
        self.assertNotIn("gpu.0.throttle_s.sw_power_cap", after, "one counter read: no delta yet")

    def test_throttle_seconds_come_from_two_reads_of_the_counters(self):
        self.sampler.run_once()
        self.clock.now += sampler.PERFORMANCE_EVERY + 1  # the counters are read again
        self.patch_environ(FAKE_NVIDIA_SMI="busy")
        self.sampler.run_once()
        latest = self.store.host_samples("box", DETAIL)[-1].readings
        # The fake answers the same capture twice: every counter moved by 0 seconds.
        throttled = [name for name in latest if ".throttle_s." in name]
        self.assertTrue(throttled, latest)
        self.assertTrue(all(latest[name] == 0 for name in throttled), latest)
        # The counters themselves, as last read, for /metrics to give as counters.
        counters = gpu_readings.sample_performance(FAKE_NVIDIA_SMI).gpus[0]
        self.assertEqual(latest["gpu.0.throttle_total_s.sw_power_cap"], counters.sw_power_cap_us / 1e6)
        for row in self.store.host_samples("box", DETAIL):
            self.assertIn("gpu.0.throttle_total_s.hw_thermal_slowdown", row.readings)
        minute = fold_minute([row.readings for row in self.store.host_samples("box", DETAIL)])
        self.assertEqual(minute["gpu.0.throttle_total_s.sw_power_cap"], counters.sw_power_cap_us / 1e6,
                         "a minute keeps a counter's last value")

    def test_a_host_without_nvidia_smi_writes_no_gpu_error_and_asks_again_later(self):
        missing = Sampler(self.store, self.config(host="cpu-box", nvidia_smi=os.path.join(self.dir, "absent")),
                          root=self.root, monotonic=self.clock)
        missing.run_once()
        readings = self.store.host_samples("cpu-box", DETAIL)[-1].readings
        self.assertFalse([name for name in readings if name.startswith("gpu.")], readings)
        self.assertGreater(missing._gpu_absent_until, self.clock.now)

    def test_a_failing_driver_is_written_as_the_gpu_error(self):
        self.patch_environ(FAKE_NVIDIA_SMI="error")
        self.sampler.run_once()
        readings = self.store.host_samples("box", DETAIL)[-1].readings
        self.assertIn("NVIDIA driver", readings["gpu.error"])

    def test_a_hung_nvidia_smi_is_killed_and_the_row_still_written(self):
        self.patch_environ(FAKE_NVIDIA_SMI="hang", FAKE_NVIDIA_SMI_SLEEP="60")
        hung = Sampler(self.store, self.config(host="hung", nvidia_smi=FAKE_NVIDIA_SMI), root=self.root,
                       monotonic=self.clock)
        self.addCleanup(hung.close)
        hung._gpu_states = lambda: gpu_readings.sample_gpu_states(hung._command, timeout=0.5)
        hung._performance = lambda: gpu_readings.sample_performance(hung._command, timeout=0.5)
        started = time.monotonic()
        turn = hung.run_once()
        self.assertLess(time.monotonic() - started, DEADLINE)
        self.assertIsNotNone(turn.at)
        self.assertIn("gpu.error", self.store.host_samples("hung", DETAIL)[-1].readings)


class SamplerContract:
    """One writer per host, the minute fold, pruning and tallies, on each database."""

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()
        self.root = os.path.join(self.dir, "root")
        lay_proc(self.root, "t0")

    def a_sampler(self, host: str = "box", holder: str | None = None, **settings) -> Sampler:
        return Sampler(self.store, self.config(host=host, nvidia_smi=os.path.join(self.dir, "none"), **settings),
                       root=self.root, holder=holder)

    def plain_sql(self, sql: str, *rows: tuple) -> None:
        """Rows written by plain SQL, as another program would (``?`` placeholders)."""
        if self.db.startswith("postgresql"):
            with self.caller_connection() as conn:
                for row in rows:
                    conn.execute(sql.replace("?", "%s"), row)
        else:
            conn = sqlite3.connect(self.db)
            with conn:
                conn.executemany(sql, rows)
            conn.close()

    def insert_rows(self, host: str, tier: str, times, readings: str = '{"cpu.busy": 10.0, "samples": 1}') -> None:
        self.plain_sql("INSERT INTO host_samples (host, tier, at, readings) VALUES (?, ?, ?, ?)",
                       *[(host, tier, float(at), readings) for at in times])

    def test_one_sampler_writes_a_host_and_another_takes_over_when_it_lets_go(self):
        first, second = self.a_sampler(holder="box:1"), self.a_sampler(holder="box:2")
        self.assertIsNotNone(first.run_once().at)
        self.assertTrue(second.run_once().standby)
        self.assertTrue(second.run_once().standby)
        self.assertEqual(len(self.store.host_samples("box")), 1)
        self.store.release_sampler("box", "box:1")
        self.assertIsNotNone(second.run_once().at)
        lost = first.run_once()
        self.assertTrue(lost.standby, "the first no longer holds the host: it writes nothing")
        self.assertEqual(len(self.store.host_samples("box")), 2)
        self.assertEqual(self.store.reads.sampler_of("box")["holder"], "box:2")

    def test_a_lapsed_lease_is_taken_over_and_other_hosts_are_not_affected(self):
        self.assertTrue(self.store.acquire_sampler("box", "box:dead", 0.3))
        waiting = self.a_sampler(holder="box:2")
        self.assertTrue(waiting.run_once().standby)
        self.assertIsNotNone(self.a_sampler(host="other", holder="other:1").run_once().at)
        wait_until(lambda: waiting.run_once().at is not None, message="the lapsed lease to be taken")

    def test_the_same_holder_takes_its_lease_again_at_once_after_a_restart(self):
        self.assertIsNotNone(self.a_sampler(holder="box:7").run_once().at)
        restarted = self.a_sampler(holder="box:7")  # a supervisor's child restarted after kill -9
        self.assertIsNotNone(restarted.run_once().at)

    def test_finished_minutes_are_folded_once_even_by_a_restarted_sampler(self):
        now = self.store.clock()
        current = minute_of(now)
        two_ago, one_ago = current - 120, current - 60
        self.insert_rows("box", DETAIL, [two_ago + 1, two_ago + 30], '{"cpu.busy": 10.0, "samples": 1}')
        self.insert_rows("box", DETAIL, [one_ago + 5], '{"cpu.busy": 50.0, "samples": 1, "gpu.0.throttle_s.sw_power_cap": 2.5}')
        self.insert_rows("box", DETAIL, [one_ago + 6], 'not json')
        self.insert_rows("box", DETAIL, [current + 0.5])
        first = self.a_sampler(holder="box:1")
        self.assertEqual(first._fold_minutes(now), 2)
        minutes = {row.at: row.readings for row in self.store.host_samples("box", MINUTE)}
        self.assertEqual(sorted(minutes), [two_ago, one_ago], "the current minute is not over yet")
        self.assertEqual(minutes[two_ago]["cpu.busy"], 10.0)
        self.assertEqual(minutes[two_ago]["samples"], 2)
        self.assertEqual(minutes[one_ago]["cpu.busy:max"], 50.0)
        self.assertEqual(minutes[one_ago]["gpu.0.throttle_s.sw_power_cap"], 2.5)
        self.assertEqual(first._fold_minutes(now), 0, "folded once")
        restarted = self.a_sampler(holder="box:1")
        self.assertEqual(restarted._fold_minutes(now), 0, "a restart finds them folded")
        self.assertEqual(len(self.store.host_samples("box", MINUTE)), 2)

    def test_the_orchestrator_prunes_each_tier_at_its_horizon(self):
        now = self.store.clock()
        self.insert_rows("box", DETAIL, [now - 7200, now - 3700, now - 60])
        self.insert_rows("box", MINUTE, [now - 8 * 86400, now - 6 * 86400])
        self.insert_rows("other", DETAIL, [now - 5000])
        sweep = Orchestrator(self.store, self.config()).run_once()
        self.assertEqual(sweep.samples_pruned, 4)
        self.assertEqual([round(now - row.at) for row in self.store.host_samples("box", DETAIL)], [60])
        self.assertEqual([round((now - row.at) / 86400) for row in self.store.host_samples("box", MINUTE)], [6])
        shorter = Orchestrator(self.store, self.config(sample_detail_keep=30.0, sample_minute_keep=86400.0))
        self.assertEqual(shorter.run_once().samples_pruned, 2)

    def test_finished_jobs_are_tallied_once_per_finish_and_outlive_pruning(self):
        for n in range(3):
            self.store.enqueue(JobSpec(task="tally:work", queue="q", args={"n": n}))
        claim = Claim("", "q", "box:1", 60.0)
        for state in (COMPLETED, COMPLETED, FAILED):
            self.store.finish(self.store.claim(claim), Outcome(state, error="boom" if state == FAILED else None,
                                                               event=state))
        rows = self.store.metrics_rows()
        self.assertEqual(len(rows.untallied), 3, "not folded yet: a scrape reads them")
        self.assertEqual(self.store.fold_tallies(), 3)
        self.assertEqual(self.store.fold_tallies(), 0, "each finish is counted once")
        counted = {t.key.state: t.jobs for t in tally.totals(self.store.metrics_rows().tallies, [])}
        self.assertEqual(counted, {"completed": 2, "failed": 1})
        failed = self.store.reads.list_jobs("", state=FAILED)[0]
        self.store.retry(failed.id, "")
        self.store.finish(self.store.claim(claim), Outcome(COMPLETED, event=COMPLETED))
        self.store.prune(retention=1e-6)
        self.assertEqual(self.store.reads.list_jobs("", limit=10), [], "every finished job pruned")
        rows = self.store.metrics_rows()
        counted = {t.key.state: t.jobs for t in tally.totals(rows.tallies, rows.untallied)}
        self.assertEqual(counted, {"completed": 3, "failed": 1}, "the retried job's second finish counts too")


class SQLiteSamplerTest(SamplerContract, TempDirTestCase):
    def test_rows_whose_time_is_no_number_do_not_stop_the_fold(self):
        # SQLite keeps text in a REAL column: plain SQL may leave a row the fold must step over.
        now = self.store.clock()
        self.insert_rows("box", DETAIL, [minute_of(now) - 60 + 1])
        self.plain_sql("INSERT INTO host_samples (host, tier, at, readings) VALUES (?, ?, ?, ?)",
                       ("box", MINUTE, "soon", "{}"), ("box", DETAIL, "later", "{}"))
        self.assertEqual(self.a_sampler(holder="box:1")._fold_minutes(now), 1)
        self.assertEqual(self.store.sample_times("box", MINUTE, since=0), [minute_of(now) - 60])


class PostgresSamplerTest(SamplerContract, PostgresDatabaseCase, TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.db = self.url


class SamplerProcessContract:
    """The sampler as a process: under the worker's supervisor, and alone."""

    SLOW = True

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()
        self.app = self.write_module("sampled_app", "import rowfleet\n\n@rowfleet.task\ndef note(n):\n"
                                                    "    return n\n")

    def rows(self, host: str = "box") -> int:
        try:
            return len(self.store.host_samples(host, DETAIL))
        except StoreUnavailable:  # the test's own connection, across a server restart
            return 0

    def supervise(self, *extra: str):
        return self.launch_logged("worker", "worker", "--host", "box", "--app", "sampled_app", "--procs", "2",
                                  "--sample-every", "0.2", "--poll", "0.2", "--log-level", "INFO", *extra, db=self.db)

    def sampler_child(self, parent: int) -> int | None:
        workers = {worker.pid for worker in self.snapshot_workers()}
        others = _children(parent) - workers
        return next(iter(others)) if len(others) == 1 and len(workers) == 2 else None

    def snapshot_workers(self):
        from rowfleet.views.snapshot import snapshot

        return [worker for worker in snapshot(self.store).workers if worker.actual != "stopped"
                and worker.stopped_at is None]

    def test_the_supervisor_runs_the_sampler_and_restarts_it_after_kill_9(self):
        parent = self.supervise()
        wait_until(lambda: self.rows() >= 2, message="the supervised sampler's rows")
        child = wait_until(lambda: self.sampler_child(parent.pid), message="the sampler child")
        self.assertEqual(self.store.reads.sampler_of("box")["holder"], f"box:{parent.pid}")
        os.kill(child, signal.SIGKILL)
        wait_until(lambda: (self.sampler_child(parent.pid) or child) != child, message="a new sampler child")
        written = self.rows()
        wait_until(lambda: self.rows() >= written + 3, message="the restarted sampler writing at once")
        ids = [self.store.enqueue(JobSpec(task="sampled_app:note", args={"n": n})).id for n in range(3)]
        wait_until(lambda: all(self.store.get_job(i, "").state == COMPLETED for i in ids), message="the jobs")
        parent.send_signal(signal.SIGTERM)
        parent.wait(DEADLINE)
        self.assertEqual(parent.returncode, 0, self.output(parent))
        wait_until(lambda: not _children(parent.pid), message="every child gone")

    def test_two_supervisors_of_one_host_have_one_writer(self):
        first = self.supervise()
        wait_until(lambda: self.rows() >= 1, message="the first sampler")
        second = self.supervise()
        wait_until(lambda: "standing by" in self.output(second), message="the second sampler to stand by")
        self.assertEqual(self.store.reads.sampler_of("box")["holder"], f"box:{first.pid}")
        first.send_signal(signal.SIGTERM)
        first.wait(DEADLINE)
        wait_until(lambda: (self.store.reads.sampler_of("box") or {}).get("holder") == f"box:{second.pid}",
                   message="the second sampler to take over once the first let go")
        times = [row.at for row in self.store.host_samples("box", DETAIL)]
        self.assertEqual(times, sorted(set(times)))

    def test_a_hung_nvidia_smi_stalls_only_the_sampler(self):
        env = child_env(FAKE_NVIDIA_SMI="hang", FAKE_NVIDIA_SMI_SLEEP="120")
        parent = self.launch_logged("worker", "worker", "--host", "box", "--app", "sampled_app", "--procs", "1",
                                    "--sample-every", "0.2", "--poll", "0.2", "--nvidia-smi", FAKE_NVIDIA_SMI,
                                    db=self.db, env=env)
        ids = [self.store.enqueue(JobSpec(task="sampled_app:note", args={"n": n})).id for n in range(5)]
        wait_until(lambda: all(self.store.get_job(i, "").state == COMPLETED for i in ids),
                   message="the jobs, while the sampler waits on nvidia-smi")
        self.assertEqual(self.rows(), 0, "the sampler is still waiting for nvidia-smi")
        parent.send_signal(signal.SIGTERM)
        parent.wait(DEADLINE)


class SQLiteSamplerProcessTest(SamplerProcessContract, TempDirTestCase):
    pass


class PostgresSamplerProcessTest(SamplerProcessContract, PostgresDatabaseCase, TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.db = self.url

    def test_the_sampler_writes_again_after_the_server_restarts(self):
        process = self.launch_logged("sampler", "sampler", "--host", "solo", "--every", "0.2", db=self.db)
        wait_until(lambda: self.rows("solo") >= 2, message="the sampler's rows")
        self.pg.restart()
        written = self.rows("solo")
        wait_until(lambda: self.rows("solo") >= written + 3, message="rows after the restart")
        process.send_signal(signal.SIGTERM)
        process.wait(DEADLINE)
        self.assertEqual(process.returncode, 0, self.output(process))


def _children(parent: int) -> set[int]:
    """Live children of ``parent``."""
    from process.test_processes import _children as children

    return children(parent)


if __name__ == "__main__":
    unittest.main()
