"""Tests of the telemetry probes: nvidia-smi output and failures, /proc and cgroup memory.

The parsers run against every captured output under ``fixtures/hw`` (real nvidia-smi and
/proc text; see its README), the readers against a fake /proc and cgroup tree in a temp
dir and against the real /proc, and the GPU runners against the fake nvidia-smi in
``fixtures/bin``, which answers from the same captures.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from rowfleet.telemetry import gpu, memory
from rowfleet.telemetry.gpu import GpuReading
from support import DEADLINE, NVIDIA_SMI_FAILURES, read_fixture, TempDirTestCase, wait_until

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HW = os.path.join(HERE, "fixtures", "hw")
NVIDIA_SMI = os.path.join(HW, "nvidia-smi")
PROC = os.path.join(HW, "linux", "proc")
FAKE_NVIDIA_SMI = os.path.join(HERE, "fixtures", "bin", "nvidia-smi")
UUID0 = "GPU-00000000-0000-0000-0000-000000000000"  # the exporter captures mask their UUIDs

# Captures without a header line, and the fields of the command that produced each
# (fixtures/hw/README.md points to where the commands are recorded).
HEADERLESS_FIELDS = {
    "noheader-nounits-fanspeed-na-newer-driver.csv": (
        "memory.total", "memory.free", "memory.used", "temperature.gpu", "fan.speed", "utilization.gpu",
        "utilization.memory"),
    "noheader-nounits-fanspeed-not-supported-older-driver.csv": (
        "memory.total", "memory.free", "memory.used", "temperature.gpu", "fan.speed", "utilization.gpu",
        "utilization.memory"),
    "csv-noheader-temperature-only.csv": ("temperature.gpu",),
}


def files_under(folder: str) -> list[str]:
    return sorted(os.path.join(dirpath, name) for dirpath, _, names in os.walk(folder) for name in names)


def row_count(name: str, text: str) -> int:
    """How many rows a capture holds: its non-blank lines less the one header, if it has one."""
    return sum(1 for line in text.splitlines() if line.strip()) - (name not in HEADERLESS_FIELDS)


def readings_of(name: str) -> list[GpuReading]:
    path = next(p for p in files_under(os.path.join(NVIDIA_SMI, "query-gpu")) if os.path.basename(p) == name)
    return gpu.parse_query_gpu(read_fixture(path), HEADERLESS_FIELDS.get(name, gpu.QUERY_FIELDS))


class QueryGpuCapturesTest(unittest.TestCase):
    def test_every_capture_parses_whole(self):
        paths = files_under(os.path.join(NVIDIA_SMI, "query-gpu"))
        self.assertGreaterEqual(len(paths), 24)  # the loop below must not pass by finding nothing
        for path in paths:
            name = os.path.basename(path)
            with self.subTest(capture=name):
                text = read_fixture(path)
                rows, skipped = gpu.split_query_output(text, HEADERLESS_FIELDS.get(name, gpu.QUERY_FIELDS))
                self.assertEqual(skipped, [])
                self.assertEqual(len(rows), row_count(name, text))
                for reading in map(gpu.reading_from_row, rows):
                    if reading.utilization_percent is not None:
                        self.assertLessEqual(reading.utilization_percent, 100)
                    if reading.memory_used_mib is not None and reading.memory_total_mib is not None:
                        self.assertLessEqual(reading.memory_used_mib, reading.memory_total_mib)

    def test_values_checked_by_hand(self):
        h100, h200, rtx = "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA GeForce RTX 2080 SUPER"
        cases = [  # capture, row -> index, uuid, name, utilization %, MiB used, MiB total
            ("query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-idle.csv", 0, (0, UUID0, h100, 0, 0, 81559)),
            ("query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-load.csv", 0, (0, UUID0, h100, 100, 19818, 81559)),
            ("query-gpu-allfields-linux-h100-mig-590.48.01-idle.csv", 0, (0, UUID0, h100, None, 59, 81559)),
            ("query-gpu-allfields-linux-h100-mig-590.48.01-load.csv", 0, (0, UUID0, h100, None, 11125, 81559)),
            ("query-gpu-allfields-linux-h200-mig-590.48.01-load.csv", 0, (0, UUID0, h200, None, 16959, 143771)),
            ("query-gpu-allfields-linux-l40s-595.80-load.csv", 0, (0, UUID0, "NVIDIA L40S", 9, 1235, 46068)),
            ("query-gpu-allfields-windows-rtx-2080-super-610.62-idle.csv", 0, (0, UUID0, rtx, 0, 797, 8192)),
            ("query-gpu-allfields-rtx-2080-super-windows-471.11.csv", 0,
             (0, "GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa", rtx, 2, 876, 8192)),
            ("query-gpu-2gpu-wddm-exporter-testdata.csv", 1,
             (1, "GPU-04757e3e-3077-4e2e-b988-7e2d647b52e9", "Some Other GPU", None, 1234, None)),
            ("query-gpu-csv-nounits-tesla-p100.csv", 0,
             (None, "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6", "Tesla P100-PCIE-16GB", 0, 0, None)),
            ("csv-rtx2060-460.91.03.csv", 0, (None, None, "GeForce RTX 2060", 20, 682, 5934)),
            ("csv-nounits-unknown-error-rtx2080ti-windows-442.19.csv", 0,
             (None, None, "GeForce RTX 2080 Ti", 100, None, None)),
            ("csv-utilization-gpu-not-supported-gtx650-410.78.csv", 0, (None, None, None, None, None, None)),
            ("noheader-nounits-fanspeed-not-supported-older-driver.csv", 0, (None, None, None, 0, 0, 2004)),
            ("csv-loop-rtx-520.56.06.csv", 12, (0, None, None, 25, None, None)),
            ("csv-noheader-temperature-only.csv", 0, (None, None, None, None, None, None)),
        ]
        for name, row, expected in cases:
            with self.subTest(capture=name, row=row):
                self.assertEqual(readings_of(name)[row], GpuReading(*expected))

    def test_multi_row_captures_give_one_reading_per_row(self):
        self.assertEqual([r.index for r in readings_of("query-gpu-2gpu-wddm-exporter-testdata.csv")], [0, 1])
        loop = readings_of("csv-loop-rtx-520.56.06.csv")
        self.assertEqual([r.utilization_percent for r in loop], [26, 25, 24, 26, 27, 28, 29, 30, 28, 32, 28, 23, 25])

    def test_summaries_of_captures(self):
        cases = [  # capture -> busiest utilization, total MiB used
            ("query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-idle.csv", 0, 0),
            ("query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-load.csv", 100, 19818),
            ("query-gpu-allfields-linux-h100-mig-590.48.01-load.csv", None, 11125),
            ("query-gpu-2gpu-wddm-exporter-testdata.csv", None, 575 + 1234),
        ]
        for name, utilization, used in cases:
            with self.subTest(capture=name):
                readings = readings_of(name)
                self.assertEqual((gpu.max_utilization(readings), gpu.total_memory_used_mib(readings)),
                                 (utilization, used))


class QueryGpuQuirksTest(unittest.TestCase):
    def test_utilization_values(self):
        cases = [  # what nvidia-smi printed for utilization.gpu -> percent
            ("37", 37), ("37 %", 37), ("0", 0), ("100 %", 100),
            ("[N/A]", None), ("[Not Supported]", None), ("N/A", None), ("[Unknown Error]", None),
            ("[Insufficient Permissions]", None), ("[Requested functionality has been deprecated]", None),
            ("[Function Not Found]", None), ("", None), ("garbage", None), ("-1", None), ("1e999", None),
            ("37.6", 38), ("0x1", None),
        ]
        for value, expected in cases:
            with self.subTest(value=value):
                text = f"0, GPU-1a, Tesla T4, {value}, 10, 15360\n"
                self.assertEqual(gpu.parse_query_gpu(text)[0].utilization_percent, expected)

    def test_lines_that_do_not_fit_are_skipped_and_reported(self):
        text = ("0, GPU-1a, Tesla T4, 5, 10, 15360\n"
                "\n"
                "1, GPU-2b, Tesla T4, 5\n"
                "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.\n"
                "2, GPU-3c, Tesla T4, 5, 10, 15360, 7\n"
                "3, GPU-4d, Tesla T4, 7, 20, 15360\r\n")
        rows, skipped = gpu.split_query_output(text, gpu.QUERY_FIELDS)
        self.assertEqual([row["index"] for row in rows], ["0", "3"])
        self.assertEqual([line.split(":")[0] for line in skipped], ["line 3", "line 4", "line 5"])
        self.assertEqual(gpu.parse_query_gpu(text)[1].utilization_percent, 7)

    def test_nothing_raises(self):
        cases = ["", "\n\n", ",,,,,", "[N/A], [N/A], [N/A], [N/A], [N/A], [N/A]", "\x00\ufffd\x7f",
                 "index, uuid\n", "index\n0\n1\nx\n", "\ufeff0, GPU-1a, T4, 1, 2, 3", "🙂, 🙂, 🙂, 🙂, 🙂, 🙂",
                 "index [, uuid ]]\n", "memory.used [MiB]\n[N/A]\n"]
        for text in cases:
            with self.subTest(text=text):
                for reading in gpu.parse_query_gpu(text):
                    self.assertIsInstance(reading, GpuReading)
                gpu.parse_compute_apps(text)

    def test_a_header_names_the_columns_in_any_order_and_with_aliases(self):
        text = "memory.total [MiB], gpu_name, utilization.gpu [%], index\n81559 MiB, H100, 3 %, 4\n"
        self.assertEqual(gpu.parse_query_gpu(text), [GpuReading(4, None, "H100", 3, None, 81559)])

    def test_a_repeated_header_rules_the_rows_below_it(self):
        text = "index, memory.used [MiB]\n0, 5 MiB\nmemory.used [MiB], index\n6 MiB, 1\n"
        self.assertEqual([(r.index, r.memory_used_mib) for r in gpu.parse_query_gpu(text)], [(0, 5), (1, 6)])

    def test_eight_gpus_without_header(self):
        text = "".join(f"{i}, GPU-{i}, NVIDIA H200, {i * 10}, {i * 1000}, 143771\n" for i in range(8))
        readings = gpu.parse_query_gpu(text)
        self.assertEqual([r.index for r in readings], list(range(8)))
        self.assertEqual((gpu.max_utilization(readings), gpu.total_memory_used_mib(readings)), (70, 28000))


class ComputeAppsTest(unittest.TestCase):
    def test_every_capture_parses_whole(self):
        paths = files_under(os.path.join(NVIDIA_SMI, "compute-apps"))
        self.assertEqual(len(paths), 16)
        for path in paths:
            with self.subTest(capture=os.path.basename(path)):
                text = read_fixture(path)
                rows, skipped = gpu.split_query_output(text, gpu.COMPUTE_APPS_FIELDS, gpu.COMPUTE_APPS_ALIASES)
                self.assertEqual(skipped, [])
                processes = gpu.parse_compute_apps(text)
                self.assertEqual(len(processes), row_count(os.path.basename(path), text))
                windows = "windows" in path
                for process in processes:
                    self.assertEqual(process.gpu_uuid, UUID0)
                    self.assertEqual(process.used_memory_mib is None, windows)  # WDDM does not say

    def test_values_checked_by_hand(self):
        cases = [  # capture -> how many processes, (pid, MiB) of the first ones
            ("query-compute-apps-linux-h100-80gb-hbm3-590.48.01-idle.csv", 0, []),
            ("query-compute-apps-linux-h100-80gb-hbm3-590.48.01-load.csv", 3, [(11327, 2566), (11328, 1542), (11345, 15690)]),
            ("query-compute-apps-linux-h100-mig-590.48.01-load.csv", 3, [(21180, 2296), (21181, 1272), (21198, 7484)]),
            ("query-compute-apps-linux-rtx-4080-super-595.71.05-idle.csv", 1, [(2165, 25)]),
            ("query-compute-apps-windows-rtx-2080-super-610.62-load.csv", 21, [(2140, None), (13264, None)]),
        ]
        for name, count, first in cases:
            with self.subTest(capture=name):
                processes = gpu.parse_compute_apps(read_fixture(NVIDIA_SMI, "compute-apps", name))
                self.assertEqual(len(processes), count)
                self.assertEqual([(p.pid, p.used_memory_mib) for p in processes[:len(first)]], first)

    def test_headerless_output_and_memory_of_a_job(self):
        text = "11327, 2566, GPU-1a\n11345, 15690, GPU-2b\nNo running processes found\n, 5, GPU-1a\n"
        processes = gpu.parse_compute_apps(text)
        self.assertEqual([p.pid for p in processes], [11327, 11345])
        cases = [([11327, 11345], 18256), ([11345, 99], 15690), ([99], 0)]
        for pids, expected in cases:
            with self.subTest(pids=pids):
                self.assertEqual(gpu.gpu_memory_of_pids(processes, pids), expected)


class FailureTest(unittest.TestCase):
    CAPTURES = {  # errors/ file -> kind, a word the reason must carry
        "err-device-handle-unknown.txt": (gpu.DEVICE_ERROR, "0000:0B:00.0: Unknown Error"),
        "err-gpu-lost.txt": (gpu.GPU_LOST, "0000:02:00.0"),
        "err-invalid-field-cuda-version.txt": (gpu.INVALID_FIELD, '"cuda_version"'),
        "err-invalid-field-temperature-memory.txt": (gpu.INVALID_FIELD, '"temperature.memory"'),
        "err-libnvidia-ml-not-found.txt": (gpu.NVML_MISSING, "libnvidia-ml.so"),
        "err-no-devices.txt": (gpu.NO_DEVICES, "no NVIDIA GPUs"),
        "err-no-driver.txt": (gpu.NO_DRIVER, "NVIDIA driver"),
        "err-nvml-unknown-error-container.txt": (gpu.NVML_ERROR, "Unknown Error"),
        "err-version-mismatch-550.txt": (gpu.VERSION_MISMATCH, "NVML 550.144"),
        "err-version-mismatch-570.txt": (gpu.VERSION_MISMATCH, "NVML 570.124"),
        "err-version-mismatch-old.txt": (gpu.VERSION_MISMATCH, "version mismatch: reboot"),
    }

    def test_every_captured_error(self):
        names = sorted(os.listdir(os.path.join(NVIDIA_SMI, "errors")))
        self.assertEqual(names, sorted(self.CAPTURES))  # a new capture needs a row here
        for name in names:
            kind, words = self.CAPTURES[name]
            text = read_fixture(NVIDIA_SMI, "errors", name)
            for stdout, stderr in ((text, ""), ("", text)):  # whichever stream it came on
                with self.subTest(capture=name, on="stdout" if stdout else "stderr"):
                    unknown = gpu.classify_gpu_failure(255, stdout, stderr)
                    self.assertEqual(unknown.kind, kind)
                    self.assertIn(words, unknown.reason)
                    self.assertNotIn("\n", unknown.reason)
                    self.assertLess(len(unknown.reason), 120)

    def test_exit_codes_without_a_known_text(self):
        cases = [  # exit code, output -> kind, words
            (None, "", gpu.TIMEOUT, "did not answer"),
            (127, "", gpu.NOT_INSTALLED, "nvidia-smi not found"),
            (126, "", gpu.NOT_EXECUTABLE, "not executable"),
            (9, "", gpu.NO_DRIVER, "not loaded"),
            (12, "", gpu.NVML_MISSING, "NVML"),
            (15, "", gpu.GPU_LOST, "fallen off the bus"),
            (4, "", gpu.NO_PERMISSION, "permission"),
            (3, "Something new\nand more\n", gpu.FAILED, "(exit 3): Something new"),
            (-9, "", gpu.FAILED, "signal 9"),
            (0, "", gpu.UNREADABLE, "no readings"),
            (0, "x" * 500, gpu.UNREADABLE, "..."),
        ]
        for returncode, output, kind, words in cases:
            with self.subTest(returncode=returncode, output=output[:20]):
                unknown = gpu.classify_gpu_failure(returncode, output, "")
                self.assertEqual(unknown.kind, kind)
                self.assertIn(words, str(unknown))
                self.assertLess(len(unknown.reason), 200)


class SampleGpusTest(TempDirTestCase):
    """The runners against the fake nvidia-smi, a missing one, and ones that never answer."""

    def test_machines(self):
        cases = [  # FAKE_NVIDIA_SMI -> utilization, MiB used, pids on the GPU
            ("idle", 0, 0, []),
            ("busy", 100, 19818, [11327, 11328, 11345]),
            ("mig", None, 11125, [21180, 21181, 21198]),
        ]
        for machine, utilization, used, pids in cases:
            with self.subTest(machine=machine):
                self.patch_environ(FAKE_NVIDIA_SMI=machine)
                sample = gpu.sample_gpus(command=FAKE_NVIDIA_SMI)
                self.assertIsNone(sample.unknown)
                self.assertEqual(sample.skipped, ())
                self.assertEqual([(r.index, r.uuid, r.memory_total_mib) for r in sample.readings], [(0, UUID0, 81559)])
                self.assertEqual((gpu.max_utilization(sample.readings), gpu.total_memory_used_mib(sample.readings)),
                                 (utilization, used))
                processes = gpu.sample_gpu_processes(command=FAKE_NVIDIA_SMI)
                self.assertIsNone(processes.unknown)
                self.assertEqual([p.pid for p in processes.processes], pids)

    def test_failures(self):
        cases = [(machine, getattr(gpu, kind)) for machine, kind in NVIDIA_SMI_FAILURES]  # FAKE_NVIDIA_SMI -> kind
        for machine, kind in cases:
            with self.subTest(machine=machine):
                self.patch_environ(FAKE_NVIDIA_SMI=machine)
                sample = gpu.sample_gpus(command=FAKE_NVIDIA_SMI)
                self.assertEqual((sample.readings, sample.unknown.kind), ((), kind))
                self.assertEqual(gpu.sample_gpu_processes(command=FAKE_NVIDIA_SMI).unknown.kind, kind)

    def test_a_field_the_driver_does_not_know(self):
        self.patch_environ(FAKE_NVIDIA_SMI="busy")
        sample = gpu.sample_gpus(command=FAKE_NVIDIA_SMI, fields=gpu.QUERY_FIELDS + ("cuda_version",))
        self.assertEqual(sample.unknown.kind, gpu.INVALID_FIELD)
        self.assertIn("cuda_version", sample.unknown.reason)

    def test_printed_output(self):
        garbage = os.path.join(self.dir, "garbage.txt")
        partly = os.path.join(self.dir, "partly.txt")
        with open(garbage, "w") as file:
            file.write("Segmentation fault\n")
        with open(partly, "w") as file:
            file.write("0, GPU-1a, Tesla T4, 5, 10, 15360\nWARNING: infoROM is corrupted at gpu 0000:04:00.0\n")
        cases = [  # file printed, exit code -> GPUs read, kind of unknown, lines skipped
            (garbage, "0", 0, gpu.UNREADABLE, 1),
            (garbage, "139", 0, gpu.FAILED, 1),
            (partly, "0", 1, None, 1),
            (partly, "14", 0, gpu.FAILED, 1),
            (os.devnull, "0", 0, gpu.UNREADABLE, 0),
        ]
        for path, code, gpus, kind, skipped in cases:
            with self.subTest(path=os.path.basename(path), code=code):
                self.patch_environ(FAKE_NVIDIA_SMI_FILE=path, FAKE_NVIDIA_SMI_EXIT=code)
                sample = gpu.sample_gpus(command=FAKE_NVIDIA_SMI)
                self.assertEqual((len(sample.readings), sample.unknown and sample.unknown.kind, len(sample.skipped)),
                                 (gpus, kind, skipped))

    def test_a_missing_or_unrunnable_program(self):
        not_executable = os.path.join(self.dir, "nvidia-smi")
        with open(not_executable, "w") as file:
            file.write("#!/bin/sh\necho 0, GPU-1a, T4, 1, 2, 3\n")
        cases = [  # command -> kind
            (os.path.join(self.dir, "no-such-nvidia-smi"), gpu.NOT_INSTALLED),
            ("rowfleet-no-such-nvidia-smi", gpu.NOT_INSTALLED),
            ([os.path.join(self.dir, "no-such-wrapper"), "nvidia-smi"], gpu.NOT_INSTALLED),
            (not_executable, gpu.NOT_EXECUTABLE),
            (self.dir, gpu.NOT_EXECUTABLE),
        ]
        for command, kind in cases:
            with self.subTest(command=command):
                self.assertEqual(gpu.sample_gpus(command=command).unknown.kind, kind)
                self.assertEqual(gpu.sample_gpu_processes(command=command).unknown.kind, kind)

    def test_a_hung_nvidia_smi_is_killed_at_the_timeout(self):
        self.patch_environ(FAKE_NVIDIA_SMI="hang")
        started = time.monotonic()
        sample = gpu.sample_gpus(command=FAKE_NVIDIA_SMI, timeout=0.5)
        self.assertLess(time.monotonic() - started, DEADLINE)
        self.assertEqual(sample.unknown.kind, gpu.TIMEOUT)
        self.assertIn("0.5s", sample.unknown.reason)

    @unittest.skipUnless(os.path.exists("/bin/sh") and os.path.isdir("/proc/self"), "needs /bin/sh and /proc")
    def test_a_hung_wrapper_takes_its_helpers_down_with_it(self):
        # A wrapper whose helper holds the output pipe open: killing only the wrapper would
        # leave the helper running and the pipe open.
        pid_file = os.path.join(self.dir, "helper.pid")
        wrapper = os.path.join(self.dir, "nvidia-smi")
        with open(wrapper, "w") as file:
            file.write(f"#!/bin/sh\nsleep 300 &\necho $! > {pid_file}\nwait\n")
        os.chmod(wrapper, 0o755)
        started = time.monotonic()
        sample = gpu.sample_gpus(command=wrapper, timeout=1.0)
        self.assertLess(time.monotonic() - started, DEADLINE)
        self.assertEqual(sample.unknown.kind, gpu.TIMEOUT)
        helper = int(read_fixture(pid_file))

        def helper_is_dead():
            try:
                stat = memory.parse_proc_stat(read_fixture(f"/proc/{helper}/stat"))
            except OSError:
                return True  # gone and reaped
            return stat is None or stat.state in ("Z", "X")

        wait_until(helper_is_dead, message=f"the wrapper's helper {helper} to die")


def fake_stat(pid: int, comm: str, state: str, ppid: int) -> str:
    # The layout of the captured proc-self-stat.txt, with the fields a tree needs replaced.
    tail = read_fixture(PROC, "proc-self-stat.txt").split(") ", 1)[1].split(" ", 2)[2]
    return f"{pid} ({comm}) {state} {ppid} {tail}"


def fake_status(rss_kb: int | None) -> str:
    if rss_kb is None:
        return read_fixture(PROC, "proc-pid-status-zombie.txt")
    return "".join(f"VmRSS:\t{rss_kb:8d} kB\n" if line.startswith("VmRSS:") else line + "\n"
                   for line in read_fixture(PROC, "proc-self-status.txt").splitlines())


class MemoryParsersTest(unittest.TestCase):
    def test_stat_captures(self):
        cases = [  # capture -> pid, comm, state, ppid
            ("proc-self-stat.txt", (27673, "cat", "R", 27628)),
            ("proc-pid-stat-comm-with-parens.txt", (27671, "evil) (x y", "R", 27630)),
            ("proc-pid-stat-zombie.txt", (27742, "python3", "Z", 27700)),
        ]
        for name, expected in cases:
            with self.subTest(capture=name):
                self.assertEqual(memory.parse_proc_stat(read_fixture(PROC, name)), memory.ProcStat(*expected))

    def test_stat_texts(self):
        cases = [  # text -> (comm, ppid), or None
            ("5 (a b) S 1 5 5", ("a b", 1)),
            ("5 ()) S 1 5 5", (")", 1)),
            ("5 (() S 1 5 5", ("(", 1)),
            ("5 () S 1", ("", 1)),
            ("5 (x) (y) ) Z 7 0", ("x) (y) ", 7)),
            ("", None), ("garbage", None), ("5 (x) S", None), ("5 (x) S notanumber", None),
            ("x (cat) S 1", None), ("5 cat) S 1", None),
        ]
        for text, expected in cases:
            with self.subTest(text=text):
                stat = memory.parse_proc_stat(text)
                self.assertEqual(stat and (stat.comm, stat.ppid), expected)

    def test_status(self):
        cases = [  # text -> bytes
            (read_fixture(PROC, "proc-self-status.txt"), 1744 * 1024),
            (read_fixture(PROC, "proc-pid-status-zombie.txt"), None),
            ("VmRSS:\t  0 kB\n", 0),
            ("VmRSS:\n", None),
            ("VmRSS:\tlots kB\n", None),
            ("VmRSS:\t  \u00b2 kB\n", None),  # a digit to str.isdigit, not to int(): it raised
            ("VmRSS:\t  \u0661\u0662 kB\n", None),  # Arabic-Indic digits: read as 12 before
            ("", None),
        ]
        for text, expected in cases:
            with self.subTest(text=text[:30]):
                self.assertEqual(memory.parse_vmrss_bytes(text), expected)

    def test_cgroup(self):
        cases = [  # /proc/<pid>/cgroup -> v2 path
            (read_fixture(PROC, "proc-self-cgroup.txt"), "/"),  # hybrid v1 + v2
            ("0::/user.slice/user-1000.slice/session-2.scope\n", "/user.slice/user-1000.slice/session-2.scope"),
            ("0::/system.slice/rowfleet.service (deleted)\n", "/system.slice/rowfleet.service (deleted)"),
            ("0::/../../worker\n", "/../../worker"),
            ("12:memory:/docker/abc\n1:name=systemd:/docker/abc\n", None),  # v1 only
            ("0::\n", None),
            ("", None),
        ]
        for text, expected in cases:
            with self.subTest(text=text[:40]):
                self.assertEqual(memory.parse_cgroup_v2_path(text), expected)

    def test_memory_current(self):
        cases = [("90914816\n", 90914816), ("0", 0), ("max\n", None), ("-1", None), ("", None), ("12 34", None),
                 ("\u00b2", None), ("\u0661\u0662", None)]
        for text, expected in cases:
            with self.subTest(text=text):
                self.assertEqual(memory.parse_memory_current(text), expected)


class FakeTreeTest(unittest.TestCase):
    """The readers against a fake /proc and /sys/fs/cgroup built in a temp dir."""

    JOB = "/rowfleet.slice/job-42.scope"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rowfleet-test-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.proc = os.path.join(self.dir, "proc")
        self.cgroup = os.path.join(self.dir, "cgroup")
        os.makedirs(os.path.join(self.proc, "self"))  # a non-pid entry, as in the real /proc
        self.write(os.path.join(self.proc, "meminfo"), "MemTotal: 1 kB\n")
        # The worker (1), the job (100) with a child whose name is hostile (101) and a
        # grandchild (102); an unrelated process (200) elsewhere.
        self.add_process(1, 0, "rowfleet", 5000, "/")
        self.add_process(100, 1, "python3", 1000, self.JOB)
        self.add_process(101, 100, "x) (S 1", 200, self.JOB)
        self.add_process(102, 101, "torchrun", 30, self.JOB)
        self.add_process(200, 1, "sshd", 7000, "/system.slice/sshd.service")
        self.add_cgroup(self.JOB, [100, 101, 102], "123456789\n")

    def write(self, path: str, text: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as file:
            file.write(text)

    def add_process(self, pid: int, ppid: int, comm: str, rss_kb: int | None, cgroup: str, state: str = "S"):
        folder = os.path.join(self.proc, str(pid))
        self.write(os.path.join(folder, "stat"), fake_stat(pid, comm, state, ppid))
        self.write(os.path.join(folder, "status"), fake_status(rss_kb))
        # Hybrid v1 lines, as captured, then the v2 line.
        v1 = read_fixture(PROC, "proc-self-cgroup.txt").replace("0::/\n", "")
        self.write(os.path.join(folder, "cgroup"), f"{v1}0::{cgroup}\n")

    def add_cgroup(self, path: str, pids: list[int], current: str | None):
        folder = os.path.join(self.cgroup, path.lstrip("/"))
        self.write(os.path.join(folder, "cgroup.procs"), "".join(f"{pid}\n" for pid in pids))
        if current is not None:
            self.write(os.path.join(folder, "memory.current"), current)

    def remove(self, *parts: str):
        path = os.path.join(*parts)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)

    def test_process_tree_and_rss(self):
        cases = [(100, [100, 101, 102], 1230), (101, [101, 102], 230), (200, [200], 7000), (999, [], 0)]
        for pid, tree, rss_kb in cases:
            with self.subTest(pid=pid):
                self.assertEqual(memory.process_tree(pid, self.proc), tree)
                self.assertEqual(memory.tree_rss_bytes(tree, self.proc), rss_kb * 1024)

    def test_memory_of(self):
        rss = 1230 * 1024
        cases = [  # what changes in the fake tree -> source, bytes
            ("the job is alone in its cgroup", lambda: None, memory.CGROUP, 123456789),
            ("a stranger shares the cgroup", lambda: self.add_cgroup(self.JOB, [100, 101, 102, 200], "5\n"),
             memory.RSS, rss),
            ("a child moved to another cgroup",
             lambda: (self.add_process(102, 101, "torchrun", 30, "/other"), self.add_cgroup(self.JOB, [100, 101], "5\n")),
             memory.RSS, rss),
            ("a zombie child already left the cgroup",
             lambda: (self.add_process(102, 101, "torchrun", None, self.JOB, state="Z"),
                      self.add_cgroup(self.JOB, [100, 101], "5\n")),
             memory.CGROUP, 5),
            ("an empty cgroup.procs", lambda: self.add_cgroup(self.JOB, [], "5\n"), memory.RSS, rss),
            ("no memory controller (hybrid or v1)", lambda: self.remove(self.cgroup, self.JOB.lstrip("/"), "memory.current"),
             memory.RSS, rss),
            ("garbage in memory.current", lambda: self.add_cgroup(self.JOB, [100, 101, 102], "lots\n"), memory.RSS, rss),
            ("garbage in cgroup.procs", lambda: self.write(os.path.join(self.cgroup, self.JOB[1:], "cgroup.procs"), "x\n"),
             memory.RSS, rss),
            ("no cgroup fs at all", lambda: self.remove(self.cgroup), memory.RSS, rss),
            ("a v1-only /proc/<pid>/cgroup", lambda: self.write(os.path.join(self.proc, "100", "cgroup"), "4:memory:/x\n"),
             memory.RSS, rss),
            ("a cgroup outside our namespace",
             # "/.." leads from the fake cgroup root back into it: only the check keeps it out.
             lambda: self.add_process(100, 1, "python3", 1000, "/../cgroup" + self.JOB),
             memory.RSS, rss),
            ("a child vanished between stat and status",
             lambda: (self.remove(self.proc, "102", "status"), self.remove(self.cgroup)), memory.RSS, 1200 * 1024),
            ("the job's own cgroup file vanished", lambda: self.remove(self.proc, "100", "cgroup"), memory.RSS, rss),
            ("the job exited", lambda: self.remove(self.proc, "100"), memory.GONE, 0),
            ("a garbage stat for the job", lambda: self.write(os.path.join(self.proc, "100", "stat"), "100 (pyth"),
             memory.GONE, 0),
            ("no /proc at all", lambda: self.remove(self.proc), memory.GONE, 0),
        ]
        for description, change, source, expected in cases:
            with self.subTest(description):
                self.setUp()
                change()
                reading = memory.memory_of(100, self.proc, self.cgroup)
                self.assertEqual((reading.source, reading.bytes), (source, expected))
                if source != memory.GONE:
                    self.assertEqual(reading.pids[:2], (100, 101))


@unittest.skipUnless(os.path.isfile("/proc/self/stat"), "needs a Linux /proc")
class RealProcTest(unittest.TestCase):
    def test_this_process_and_its_child(self):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        me = os.getpid()
        tree = memory.process_tree(me)
        self.assertEqual(tree[0], me)
        self.assertIn(child.pid, tree)
        self.assertGreater(memory.tree_rss_bytes([me]), 1024 * 1024)
        reading = memory.memory_of(me)
        self.assertIn(reading.source, (memory.CGROUP, memory.RSS))
        self.assertGreater(reading.bytes, 1024 * 1024)
        self.assertIn(child.pid, reading.pids)

    def test_a_pid_that_does_not_exist(self):
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        child.wait()  # reaped: its pid is free, and not reused this quickly
        self.assertEqual(memory.memory_of(child.pid), memory.MemoryReading(0, memory.GONE))


if __name__ == "__main__":
    unittest.main()
