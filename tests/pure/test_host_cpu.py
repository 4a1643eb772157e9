"""Tests of the host's CPU and memory probes: /proc/stat, loadavg, PSI, cpufreq, thermal
throttle counters, /proc/meminfo and the process's memory cgroup (v1 and v2).

The parsers run against every capture under ``fixtures/hw/linux`` that they read (real
files from a Linux 6.18 VM with hybrid cgroups; see its README) and against hostile text;
the readers against a fake root laid out like ``/proc`` and ``/sys`` in a temp dir, and
against the real root. This VM has no cpufreq, no thermal_throttle and no cgroup v2 memory
files, so those trees are written by hand in the tests below, per the kernel's documents.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import unittest

from rowfleet.telemetry import cpu, host_memory
from rowfleet.telemetry.cpu import CpuStat, CpuTicks, PressureLine, ThrottleCount
from rowfleet.telemetry.host_memory import CgroupFolder, CgroupMemory, CgroupMount
from support import read_fixture

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROC = os.path.join(HERE, "fixtures", "hw", "linux", "proc")
CGROUP = os.path.join(HERE, "fixtures", "hw", "linux", "cgroup")

# The v1 memory cgroup that fixtures/hw/linux/proc/proc-self-cgroup.txt names.
V1_PATH = "/process_api/21423979792181a8042c31cb4b693936"

# Text that no parser here may raise on: truncated, binary, huge, non-ASCII digits, NaN.
HOSTILE = ("", "\n", "\x00\xff garbage", "cpu", "cpu0", "cpu0 1 2", "cpu0 1 2 3 x", "cpux 1 2 3 4",
           "cpu0 -1 2 3 4", "cpu0 ² 2 3 4", "cpu0 nan 2 3 4", "cpu " + " ".join(["9" * 400] * 10),
           "some", "some avg10=", "full total=-5", "some avg10==1 total=1e999", "1 2", "0.1 0.2",
           "0.1 0.2 0.3 2/", "0.1 0.2 0.3 //", "MemTotal:", "MemTotal: 10", "MemTotal: 10 MB",
           "MemTotal: ¹² kB", ":::", "4:memory", "4:memory:relative", "0::", "- - - - - - -",
           "1 2 3 4 5 6 - cgroup2", "1 2 3 4 5 6 -", "max", "-1", "18446744073709551616")


def columns_of(text: str) -> dict[str, list[int]]:
    """The ``cpu*`` lines of /proc/stat text by label, split independently of the parser."""
    return {line.split()[0]: [int(word) for word in line.split()[1:]]
            for line in text.splitlines() if line.startswith("cpu")}


class FakeRoot(unittest.TestCase):
    """A temp dir that readers take as ``/``; ``put`` writes a file at a path under it."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="rowfleet-host-")
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)

    def put(self, path: str, text: str | None = None, copy_of: str | None = None) -> None:
        target = os.path.join(self.root, path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if copy_of is not None:
            shutil.copy(copy_of, target)
        else:
            with open(target, "w", encoding="utf-8") as file:
                file.write(text)


# ---------------------------------------------------------------------------------------
# CPU


class CpuStatTest(unittest.TestCase):
    def test_every_capture_parses_each_cpu_line(self):
        for name in ("proc-stat-t0.txt", "proc-stat-t1.txt"):
            with self.subTest(capture=name):
                text = read_fixture(PROC, name)
                expected = columns_of(text)
                stat = cpu.parse_cpu_stat(text)
                self.assertEqual(len(expected), 3)  # cpu, cpu0, cpu1: the loop must check something
                lines = [stat.total] + list(stat.cores)
                self.assertEqual([line.cpu for line in lines], [None, 0, 1])
                for ticks, (label, values) in zip(lines, expected.items()):
                    self.assertEqual([getattr(ticks, c) for c in cpu.TICK_COLUMNS], values, label)
                    self.assertEqual(ticks.total_ticks, sum(values[:8]), label)  # guest counted once
                    self.assertEqual(ticks.idle_ticks, values[3] + values[4], label)

    def test_utilisation_between_the_two_captures(self):
        t0, t1 = (cpu.parse_cpu_stat(read_fixture(PROC, name)) for name in ("proc-stat-t0.txt", "proc-stat-t1.txt"))
        used = cpu.cpu_utilisation(t0, t1)
        # Worked by hand from the files: total 188 ticks, 98 idle + 25 iowait; cpu0 100 ticks,
        # 97 idle; cpu1 86 ticks, 1 idle + 25 iowait.
        self.assertAlmostEqual(used.busy_percent, 100 * 65 / 188)
        self.assertEqual([core.cpu for core in used.cores], [0, 1])
        self.assertAlmostEqual(used.cores[0].busy_percent, 3.0)
        self.assertAlmostEqual(used.cores[1].busy_percent, 100 * 60 / 86)
        self.assertIsNone(cpu.cpu_utilisation(t1, t0).busy_percent)  # the wrong way round: backwards

    def test_busy_percent_table(self):
        base = CpuTicks(0, 100, 10, 50, 800, 40, 0, 5, 0, 0, 0)
        cases = [
            ("no tick passed", base, None),
            ("all idle", CpuTicks(0, 100, 10, 50, 900, 40, 0, 5, 0, 0, 0), 0.0),
            ("all busy", CpuTicks(0, 150, 10, 100, 800, 40, 0, 5, 0, 0, 0), 100.0),
            ("steal is busy", CpuTicks(0, 100, 10, 50, 850, 40, 0, 5, 50, 0, 0), 50.0),
            ("guest is inside user", CpuTicks(0, 150, 10, 50, 850, 40, 0, 5, 0, 50, 0), 50.0),
            ("iowait shrinks, idle grows more", CpuTicks(0, 100, 10, 50, 900, 30, 0, 5, 0, 0, 0), 0.0),
            ("idle and iowait shrink", CpuTicks(0, 300, 10, 50, 700, 40, 0, 5, 0, 0, 0), None),
            ("user went backwards (reboot)", CpuTicks(0, 1, 10, 50, 900, 40, 0, 5, 0, 0, 0), None),
            ("steal went backwards", CpuTicks(0, 200, 10, 50, 900, 40, 0, 5, -1, 0, 0), None),
            ("old kernel, four columns", CpuTicks(0, 150, 10, 50, 850), None),  # iowait vanished: 40 -> 0
        ]
        for label, after, expected in cases:
            with self.subTest(label):
                self.assertEqual(cpu.busy_percent(base, after), expected)
        old = CpuTicks(0, 10, 0, 10, 80)
        self.assertEqual(cpu.busy_percent(old, CpuTicks(0, 20, 0, 20, 160)), 20.0)

    def test_core_not_in_the_first_read_has_no_percent(self):
        t0 = CpuStat(CpuTicks(None, 1, 0, 1, 8), (CpuTicks(0, 1, 0, 1, 8),))
        t1 = CpuStat(CpuTicks(None, 2, 0, 2, 16), (CpuTicks(0, 2, 0, 2, 16), CpuTicks(3, 9, 0, 9, 9)))
        used = cpu.cpu_utilisation(t0, t1)
        self.assertEqual([(c.cpu, c.busy_percent) for c in used.cores], [(0, 20.0), (3, None)])
        self.assertEqual(used.busy_percent, 20.0)

    def test_hostile_text(self):
        for text in HOSTILE:
            with self.subTest(text=text[:40]):
                stat = cpu.parse_cpu_stat(text)
                self.assertTrue(stat is None or isinstance(stat, CpuStat))
        self.assertIsNone(cpu.parse_cpu_stat("cpu0 ² 2 3 4\ncpu1 1 2 3\ncpuX 1 2 3 4\n"))
        huge = cpu.parse_cpu_stat("cpu0 " + " ".join(["9" * 30] * 4))
        self.assertEqual(huge.cores[0].idle, int(float("9" * 30)))

    def test_first_of_duplicate_lines_wins_and_extra_columns_are_ignored(self):
        stat = cpu.parse_cpu_stat("cpu0 1 2 3 4 5 6 7 8 9 10 11 12\ncpu0 9 9 9 9\ncpu 5 5 5 5\n")
        self.assertEqual(stat.cores[0].guest_nice, 10)
        self.assertEqual(stat.cores[0].user, 1)
        self.assertEqual(stat.total.user, 5)


class LoadAndPressureTest(unittest.TestCase):
    def test_loadavg_capture(self):
        self.assertEqual(cpu.parse_loadavg(read_fixture(PROC, "proc-loadavg.txt")),
                         cpu.LoadAverage(0.88, 0.50, 0.20, running=2, tasks=106))

    def test_pressure_captures(self):
        cases = {
            "proc-pressure-cpu.txt": (PressureLine(9.75, 6.83, 4.01, 19321926), PressureLine(0.0, 0.0, 0.0, 0)),
            "proc-pressure-io.txt": (PressureLine(30.06, 19.41, 8.98, 35695024),
                                     PressureLine(24.40, 15.52, 7.10, 28232407)),
            "proc-pressure-memory.txt": (PressureLine(0.0, 0.0, 0.0, 0), PressureLine(0.0, 0.0, 0.0, 0)),
        }
        for name, (some, full) in cases.items():
            with self.subTest(capture=name):
                self.assertEqual(cpu.parse_pressure(read_fixture(PROC, name)), cpu.Pressure(some, full))

    def test_pressure_before_linux_5_13_has_no_full_cpu_line(self):
        pressure = cpu.parse_pressure("some avg10=1.00 avg60=2.00 avg300=3.00 total=4\n")
        self.assertEqual(pressure, cpu.Pressure(PressureLine(1.0, 2.0, 3.0, 4), None))

    def test_stalled_percent(self):
        p = lambda total: PressureLine(None, None, None, total)
        cases = [
            (p(0), p(500_000), 2.0, 25.0),
            (p(0), p(3_000_000), 2.0, 100.0),  # capped: two clocks never agree exactly
            (p(10), p(10), 1.0, 0.0),
            (p(10), p(9), 1.0, None),
            (p(None), p(9), 1.0, None),
            (None, p(9), 1.0, None),
            (p(0), p(9), -1.0, None),
        ]
        for before, after, seconds, expected in cases:
            with self.subTest(before=before, after=after, seconds=seconds):
                self.assertEqual(cpu.stalled_percent(before, after, seconds), expected)

    def test_hostile_text(self):
        for text in HOSTILE:
            with self.subTest(text=text[:40]):
                load = cpu.parse_loadavg(text)
                pressure = cpu.parse_pressure(text)
                self.assertTrue(load is None or isinstance(load, cpu.LoadAverage))
                self.assertTrue(pressure is None or isinstance(pressure, cpu.Pressure))
        self.assertIsNone(cpu.parse_loadavg("-1 0 0 1/2 3"))
        self.assertIsNone(cpu.parse_loadavg("nan 0 0 1/2 3"))
        self.assertEqual(cpu.parse_pressure("some avg10==1 total=1e999\n"), None)
        self.assertEqual(cpu.parse_loadavg("0.1 0.2 0.3 2/").running, 2)


class ThrottleTest(unittest.TestCase):
    def test_total_counts_each_core_and_package_once(self):
        # Two packages, two cores each, two hyperthreads per core.
        counts = [ThrottleCount(cpu_number, core_count=10 * package + core, package_count=100 * (package + 1),
                                package_id=package, core_id=core)
                  for cpu_number, (package, core) in enumerate((p, c) for p in (0, 1) for c in (0, 1) for _ in (0, 1))]
        self.assertEqual(len(counts), 8)
        self.assertEqual(cpu.throttle_total(counts), (0 + 1 + 10 + 11) + (100 + 200))

    def test_total_without_topology_counts_each_cpu(self):
        counts = [ThrottleCount(0, 2, 5), ThrottleCount(1, 2, 5)]
        self.assertEqual(cpu.throttle_total(counts), 14)
        self.assertIsNone(cpu.throttle_total([ThrottleCount(0, None, None)]))

    def test_increase(self):
        t0 = [ThrottleCount(0, 1, 4, 0, 0), ThrottleCount(1, 1, 4, 0, 0)]
        t1 = [ThrottleCount(0, 3, 6, 0, 0), ThrottleCount(1, 3, 6, 0, 0)]
        self.assertEqual(cpu.throttle_increase(t0, t1), 4)
        self.assertIsNone(cpu.throttle_increase(t1, t0))
        self.assertIsNone(cpu.throttle_increase([], t1))


class ReadCpuTest(FakeRoot):
    def lay_out_proc(self) -> None:
        self.put("proc/stat", copy_of=os.path.join(PROC, "proc-stat-t0.txt"))
        self.put("proc/loadavg", copy_of=os.path.join(PROC, "proc-loadavg.txt"))
        for kind in cpu.PRESSURE_KINDS:
            self.put(f"proc/pressure/{kind}", copy_of=os.path.join(PROC, f"proc-pressure-{kind}.txt"))

    def test_fixture_tree_like_this_machine(self):
        self.lay_out_proc()
        os.makedirs(os.path.join(self.root, "sys/devices/system/cpu/cpu0/topology"))
        os.makedirs(os.path.join(self.root, "sys/devices/system/cpu/cpu1/topology"))
        reading = cpu.read_cpu(self.root)
        self.assertEqual(reading.ticks, cpu.parse_cpu_stat(read_fixture(PROC, "proc-stat-t0.txt")))
        self.assertEqual(reading.ticks.total.user, 9166)
        self.assertEqual(reading.load.tasks, 106)
        self.assertEqual(reading.cpu_pressure.some.total_us, 19321926)
        self.assertEqual(reading.io_pressure.full.avg10, 24.40)
        self.assertEqual(reading.memory_pressure.some.total_us, 0)
        self.assertEqual((reading.frequencies, reading.throttles), ((), ()))  # absent, as on this VM

    def test_cpufreq_and_thermal_throttle_trees(self):
        # Written by hand, per Documentation/admin-guide/pm/cpufreq.rst (scaling_cur_freq in
        # kHz) and Documentation/ABI/testing/sysfs-devices-system-cpu (thermal_throttle/*
        # counts) and .../topology: no machine here has them. cpu0 and cpu1 are hyperthreads
        # of one core; cpu2 is another core of the package; cpu3 is offline (no cpufreq),
        # cpufreq of cpu2 is the symlink to a policy directory that real sysfs uses.
        base = "sys/devices/system/cpu"
        for number, core, khz in ((0, 0, "2394000\n"), (1, 0, "800123\n"), (2, 1, None), (3, 1, None)):
            self.put(f"{base}/cpu{number}/topology/physical_package_id", "0\n")
            self.put(f"{base}/cpu{number}/topology/core_id", f"{core}\n")
            if khz:
                self.put(f"{base}/cpu{number}/cpufreq/scaling_cur_freq", khz)
            if number < 3:
                self.put(f"{base}/cpu{number}/thermal_throttle/core_throttle_count", f"{5 + core}\n")
                self.put(f"{base}/cpu{number}/thermal_throttle/package_throttle_count", "40\n")
        self.put(f"{base}/cpufreq/policy2/scaling_cur_freq", "<unknown>\n")
        os.symlink("../cpufreq/policy2", os.path.join(self.root, base, "cpu2", "cpufreq"))
        self.put(f"{base}/cpu4x/cpufreq/scaling_cur_freq", "1000\n")  # not a CPU
        self.put(f"{base}/cpu10/cpufreq/scaling_cur_freq", "1500000\n")  # ordered by number, not name
        reading = cpu.read_cpu(self.root)
        self.assertEqual(reading.frequencies, (cpu.CoreFrequency(0, 2394.0), cpu.CoreFrequency(1, 800.123),
                                               cpu.CoreFrequency(10, 1500.0)))
        self.assertEqual([t.cpu for t in reading.throttles], [0, 1, 2])
        self.assertEqual(reading.throttles[2], ThrottleCount(2, 6, 40, package_id=0, core_id=1))
        self.assertEqual(cpu.throttle_total(reading.throttles), 5 + 6 + 40)
        self.assertIsNone(reading.ticks)

    def test_empty_root_reads_as_absent(self):
        self.assertEqual(cpu.read_cpu(self.root), cpu.CpuReading(ticks=None))
        self.assertEqual(cpu.read_cpu(os.path.join(self.root, "no-such-dir")), cpu.CpuReading(ticks=None))

    def test_unreadable_entries_are_absent(self):
        self.put("proc/stat/oops", "a directory where a file should be\n")
        self.put("proc/loadavg", "\x00\x01\x02")
        self.put("proc/pressure/cpu", "some avg10=1.00 avg60=2.00 avg300=3.00 total=4\n")
        reading = cpu.read_cpu(self.root)
        self.assertEqual((reading.ticks, reading.load, reading.io_pressure), (None, None, None))
        self.assertEqual(reading.cpu_pressure.some.total_us, 4)

    def test_real_root(self):
        self.assertIsInstance(cpu.read_cpu("/"), cpu.CpuReading)


# ---------------------------------------------------------------------------------------
# Host memory


# A pure cgroup v2 host's mountinfo line (with an optional "shared:" field), written by hand
# per proc(5): this VM mounts cgroup v2 only beside v1.
V2_MOUNTINFO = "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


class MemInfoTest(unittest.TestCase):
    def test_capture(self):
        info = host_memory.parse_meminfo(read_fixture(PROC, "proc-meminfo.txt"))
        kib = 1024
        self.assertEqual(info, host_memory.MemInfo(
            total_bytes=24684096 * kib, available_bytes=24326948 * kib, used_bytes=(24684096 - 24326948) * kib,
            swap_total_bytes=0, swap_free_bytes=0, swap_used_bytes=0))

    def test_before_memavailable_falls_back_to_free_buffers_cached(self):
        text = "".join(line + "\n" for line in read_fixture(PROC, "proc-meminfo.txt").splitlines()
                       if not line.startswith("MemAvailable:"))
        info = host_memory.parse_meminfo(text)
        self.assertEqual(info.available_bytes, (23951400 + 9696 + 567016) * 1024)
        self.assertEqual(info.used_bytes, (24684096 - 23951400 - 9696 - 567016) * 1024)
        without_cached = "MemTotal: 100 kB\nMemFree: 10 kB\nBuffers: 1 kB\n"
        self.assertEqual(host_memory.parse_meminfo(without_cached).available_bytes, None)

    def test_inconsistent_values_give_no_used(self):
        info = host_memory.parse_meminfo("MemTotal: 10 kB\nMemAvailable: 20 kB\nSwapTotal: 1 kB\nSwapFree: 2 kB\n")
        self.assertEqual((info.used_bytes, info.swap_used_bytes), (None, None))
        self.assertEqual(info.available_bytes, 20 * 1024)

    def test_hostile_text(self):
        for text in HOSTILE:
            with self.subTest(text=text[:40]):
                info = host_memory.parse_meminfo(text)
                self.assertTrue(info is None or isinstance(info, host_memory.MemInfo))
        self.assertIsNone(host_memory.parse_meminfo("MemTotal: ¹² kB\n"))
        self.assertIsNone(host_memory.parse_meminfo("MemTotal: 10 MB\n"))
        self.assertEqual(host_memory.parse_meminfo("MemTotal: 1 kB\nMemTotal: 2 kB\n").total_bytes, 1024)


class CgroupPathTest(unittest.TestCase):
    def test_hybrid_captures(self):
        folders = host_memory.memory_cgroup_folders(read_fixture(PROC, "proc-self-cgroup.txt"),
                                                    read_fixture(PROC, "proc-self-mountinfo-cgroup.txt"))
        self.assertEqual(folders, (CgroupFolder(2, "/sys/fs/cgroup/unified"),
                                   CgroupFolder(1, "/sys/fs/cgroup/memory" + V1_PATH)))

    def test_mount_captures(self):
        mounts = host_memory.parse_cgroup_mounts(read_fixture(PROC, "proc-self-mountinfo-cgroup.txt"))
        self.assertEqual(len(mounts), 10)  # the tmpfs at /sys/fs/cgroup is not one
        self.assertEqual([m.version for m in mounts], [1] * 9 + [2])
        memory = [m for m in mounts if "memory" in m.options]
        self.assertEqual(memory, [CgroupMount(1, "/", "/sys/fs/cgroup/memory", frozenset({"rw", "memory"}))])

    def test_folder_table(self):
        cases = [
            ("pure v2", "0::/system.slice/rowfleet.service\n", V2_MOUNTINFO,
             (CgroupFolder(2, "/sys/fs/cgroup/system.slice/rowfleet.service"),)),
            ("v2 root of a cgroup namespace", "0::/\n", V2_MOUNTINFO, (CgroupFolder(2, "/sys/fs/cgroup"),)),
            ("outside our namespace", "0::/../../user.slice\n", V2_MOUNTINFO, ()),
            ("v1 co-mounted controllers, container root",
             "3:cpu,memory:/docker/ab/job\n",
             "35 31 0:32 /docker/ab /sys/fs/cgroup/cpu,memory ro - cgroup cgroup rw,cpu,memory\n",
             (CgroupFolder(1, "/sys/fs/cgroup/cpu,memory/job"),)),
            ("v1 path the mount does not show", "4:memory:/other\n",
             "35 31 0:32 /docker/ab /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", ()),
            ("escaped space in a mount point", "0::/a\n",
             "29 23 0:26 / /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n", (CgroupFolder(2, "/mnt/cg two/a"),)),
            ("v1 memory not mounted", "4:memory:/a\n0::/\n",
             "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", ()),
            ("no cgroup lines", "", V2_MOUNTINFO, ()),
        ]
        for label, cgroup_text, mountinfo_text, expected in cases:
            with self.subTest(label):
                self.assertEqual(host_memory.memory_cgroup_folders(cgroup_text, mountinfo_text), expected)

    def test_hostile_text(self):
        for text in HOSTILE:
            with self.subTest(text=text[:40]):
                self.assertIsInstance(host_memory.parse_cgroup_mounts(text), tuple)
                self.assertIsInstance(host_memory.memory_cgroup_folders(text, text), tuple)
                path = host_memory.parse_cgroup_v1_path(text)
                self.assertTrue(path is None or path.startswith("/"))
        self.assertEqual(host_memory.parse_cgroup_mounts("1 2 3 4 5 6 - cgroup2"),
                         (CgroupMount(2, "4", "5", frozenset()),))


class CgroupValuesTest(unittest.TestCase):
    def test_v1_captures(self):
        cases = {
            "v1-memory.usage_in_bytes.txt": (90914816, 90914816),
            "v1-root-memory.usage_in_bytes.txt": (629080064, 629080064),
            "v1-memory.limit_in_bytes.txt": (9223372036854771712, None),
            "v1-root-memory.limit_in_bytes.txt": (9223372036854771712, None),
        }
        for name, (as_bytes, as_limit) in cases.items():
            with self.subTest(capture=name):
                text = read_fixture(CGROUP, name)
                self.assertEqual(host_memory.parse_cgroup_bytes(text), as_bytes)
                self.assertEqual(host_memory.parse_cgroup_limit(text, 1), as_limit)

    def test_limit_table(self):
        cases = [
            ("2147483648\n", 2, 2147483648), ("max\n", 2, None), ("", 2, None), ("-1\n", 1, None),
            ("9223372036854771712\n", 1, None),  # LONG_MAX rounded to 4 KiB pages
            ("9223372036854710272\n", 1, None),  # ... to 64 KiB pages (arm64, ppc64)
            ("9223372036854771712\n", 2, 9223372036854771712),  # v2 says "max" instead
            ("536870912\n", 1, 536870912),
        ]
        for text, version, expected in cases:
            with self.subTest(text=text, version=version):
                self.assertEqual(host_memory.parse_cgroup_limit(text, version), expected)


class ReadHostMemoryTest(FakeRoot):
    def test_hybrid_tree_like_this_machine(self):
        self.put("proc/meminfo", copy_of=os.path.join(PROC, "proc-meminfo.txt"))
        self.put("proc/self/cgroup", copy_of=os.path.join(PROC, "proc-self-cgroup.txt"))
        self.put("proc/self/mountinfo", copy_of=os.path.join(PROC, "proc-self-mountinfo-cgroup.txt"))
        folder = "sys/fs/cgroup/memory" + V1_PATH
        self.put(f"{folder}/memory.usage_in_bytes", copy_of=os.path.join(CGROUP, "v1-memory.usage_in_bytes.txt"))
        self.put(f"{folder}/memory.limit_in_bytes", copy_of=os.path.join(CGROUP, "v1-memory.limit_in_bytes.txt"))
        self.put("sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n")  # v2 without memory files
        reading = host_memory.read_host_memory(self.root)
        self.assertEqual(reading.meminfo.total_bytes, 24684096 * 1024)
        self.assertEqual(reading.cgroup, CgroupMemory(1, "/" + folder, usage_bytes=90914816, limit_bytes=None))

    def test_v1_with_a_limit(self):
        self.put("proc/self/cgroup", "4:memory:/jobs/7\n")
        self.put("proc/self/mountinfo", "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
        self.put("sys/fs/cgroup/memory/jobs/7/memory.usage_in_bytes", "4096\n")
        self.put("sys/fs/cgroup/memory/jobs/7/memory.limit_in_bytes", "1073741824\n")
        self.assertEqual(host_memory.read_cgroup_memory(self.root),
                         CgroupMemory(1, "/sys/fs/cgroup/memory/jobs/7", 4096, 1073741824))

    def test_v2_tree(self):
        # Written by hand, per Documentation/admin-guide/cgroup-v2.rst (memory.current is
        # bytes; memory.max is bytes or "max"): this VM binds its memory controller to v1.
        self.put("proc/self/cgroup", "0::/system.slice/rowfleet.service\n")
        self.put("proc/self/mountinfo", V2_MOUNTINFO)
        folder = "sys/fs/cgroup/system.slice/rowfleet.service"
        self.put(f"{folder}/memory.current", "90914816\n")
        self.put(f"{folder}/memory.max", "max\n")
        self.assertEqual(host_memory.read_cgroup_memory(self.root),
                         CgroupMemory(2, "/" + folder, usage_bytes=90914816, limit_bytes=None))
        self.put(f"{folder}/memory.max", "2147483648\n")
        self.assertEqual(host_memory.read_cgroup_memory(self.root).limit_bytes, 2147483648)
        os.remove(os.path.join(self.root, folder, "memory.max"))
        self.assertEqual(host_memory.read_cgroup_memory(self.root).limit_bytes, None)

    def test_v2_root_cgroup_has_no_memory_files(self):
        self.put("proc/self/cgroup", "0::/\n")
        self.put("proc/self/mountinfo", V2_MOUNTINFO)
        self.put("sys/fs/cgroup/cgroup.controllers", "cpu memory io\n")
        self.assertIsNone(host_memory.read_cgroup_memory(self.root))

    def test_empty_root_reads_as_absent(self):
        self.assertEqual(host_memory.read_host_memory(self.root), host_memory.HostMemoryReading(None, None))
        self.put("proc/self/cgroup", "\x00garbage")
        self.put("proc/self/mountinfo", "- - -")
        self.put("proc/meminfo", "MemFree: 1 kB\n")
        self.assertEqual(host_memory.read_host_memory(self.root), host_memory.HostMemoryReading(None, None))

    def test_real_root(self):
        self.assertIsInstance(host_memory.read_host_memory("/"), host_memory.HostMemoryReading)


if __name__ == "__main__":
    unittest.main()
