"""Tests of a GPU's health: the memory-error query's CSV and ``-q -x`` answers, the driver's Xid
lines in a kernel log, and the verdict on each card (``rowfleet.telemetry.gpu_health``).

The parsers run against every captured output under ``fixtures/hw/nvidia-smi`` (the
``--query-gpu`` CSVs, the old drivers' full captures, the ``-q -x`` XMLs, the help texts that
name the fields), against the driver's Xid lines users pasted (``fixtures/hw/linux/kernel-log``;
see its README) and against hostile text; the runner against the fake nvidia-smi in
``fixtures/bin``, whose ``failing`` machine is a real capture with its memory-error counters
edited, since no real capture of a failing card exists.
"""

from __future__ import annotations

import glob
import os
import re
import unittest
from datetime import datetime, timedelta, timezone

from rowfleet.telemetry import gpu, gpu_readings
from rowfleet.telemetry.gpu_health import (
    FAILING, HEALTH_FIELDS, OK, UNKNOWN, GpuHealthReading, HealthThresholds, gpu_of, health_from_row,
    health_query_argv, health_verdict, judge_gpu, parse_health, parse_health_xml,
)
from rowfleet.telemetry.gpu_xid import (
    APP_FAULT, APP_FAULT_XIDS, CARD_FAULT, CARD_FAULT_XIDS, OTHER, XID_NAMES, XidEvent, parse_xid_log, pci_key,
    xid_class,
)
from support import DEADLINE, TempDirTestCase, read_fixture

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVIDIA_SMI = os.path.join(HERE, "fixtures", "hw", "nvidia-smi")
QUERY_GPU = os.path.join(NVIDIA_SMI, "query-gpu")
KERNEL_LOG = os.path.join(HERE, "fixtures", "hw", "linux", "kernel-log")
FAKE_NVIDIA_SMI = os.path.join(HERE, "fixtures", "bin", "nvidia-smi")
FAILING_CAPTURE = "../derived/query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-idle-failing.csv"
FAILING_REASON = ("row remapping failed: the memory has no spare rows left for bad ones; "
                  "uncorrectable ECC errors: 3 since the driver loaded")
H100_BUS = "0000:00:09"
AUG_9 = datetime(2024, 8, 9, 13, 32, 56, tzinfo=timezone.utc).timestamp()  # the akash report's Xid 94

# Every --query-gpu capture -> per row: status, uncorrectable ECC errors since the driver
# loaded, remap failed, remap pending. Datacenter cards report the counters (0, No); GeForce
# and old drivers print [N/A] or lack the columns, which is unknown, never failing; the
# captures of other fields name no GPU (unreadable), or have too few columns.
CSV_CAPTURES = {
    "query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-idle.csv": [(OK, 0, False, False)],
    "query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-load.csv": [(OK, 0, False, False)],
    FAILING_CAPTURE: [(FAILING, 3, True, False)],
    "query-gpu-allfields-linux-h100-mig-590.48.01-idle.csv": [(OK, 0, None, None)],  # no remapping in MIG mode
    "query-gpu-allfields-linux-h100-mig-590.48.01-load.csv": [(OK, 0, None, None)],
    "query-gpu-allfields-linux-h200-mig-590.48.01-idle.csv": [(OK, 0, None, None)],
    "query-gpu-allfields-linux-h200-mig-590.48.01-load.csv": [(OK, 0, None, None)],
    "query-gpu-allfields-linux-l40s-595.80-idle.csv": [(OK, 0, False, False)],
    "query-gpu-allfields-linux-l40s-595.80-load.csv": [(OK, 0, False, False)],
    "query-gpu-allfields-linux-rtx-2080-super-595.71.05-idle.csv": [(UNKNOWN, None, None, None)],
    "query-gpu-allfields-linux-rtx-2080-super-595.71.05-load.csv": [(UNKNOWN, None, None, None)],
    "query-gpu-allfields-linux-rtx-2080-super-610.57.04-idle.csv": [(UNKNOWN, None, None, None)],
    "query-gpu-allfields-linux-rtx-2080-super-610.57.04-load.csv": [(UNKNOWN, None, None, None)],
    "query-gpu-allfields-linux-rtx-4080-super-595.71.05-idle.csv": [(UNKNOWN, None, None, None)],
    "query-gpu-allfields-linux-rtx-4080-super-595.71.05-load.csv": [(UNKNOWN, None, None, None)],
    "query-gpu-allfields-rtx-2080-super-windows-471.11.csv": [(UNKNOWN, None, None, None)],
    "query-gpu-allfields-windows-rtx-2080-super-610.62-idle.csv": [(UNKNOWN, None, None, None)],
    "query-gpu-allfields-windows-rtx-2080-super-610.62-load.csv": [(UNKNOWN, None, None, None)],
    "query-gpu-2gpu-wddm-exporter-testdata.csv": [(UNKNOWN, None, None, None)] * 2,
    "query-gpu-csv-nounits-tesla-p100.csv": [(UNKNOWN, None, None, None)],
    "from-issues/csv-loop-rtx-520.56.06.csv": [(UNKNOWN, None, None, None)] * 13,
    "from-issues/csv-rtx2060-460.91.03.csv": [(UNKNOWN, None, None, None)],
    "from-issues/csv-noheader-temperature-only.csv": [(UNKNOWN, None, None, None)],
    "from-issues/csv-nounits-unknown-error-rtx2080ti-windows-442.19.csv": [(UNKNOWN, None, None, None)],
    "from-issues/csv-utilization-gpu-not-supported-gtx650-410.78.csv": [(UNKNOWN, None, None, None)],
    "from-issues/csv-utilization-memory-not-supported-gtx650-410.78.csv": [(UNKNOWN, None, None, None)],
    "from-issues/noheader-nounits-fanspeed-na-newer-driver.csv": [(UNKNOWN, None, None, None)],
    "from-issues/noheader-nounits-fanspeed-not-supported-older-driver.csv": [(UNKNOWN, None, None, None)],
}

# Every -q -x capture -> per GPU: status, bus id, uncorrectable ECC errors since the driver
# loaded, remap failed, retirement pending. The Teslas (P100, T4) report page retirement;
# Ampere and later datacenter cards, and some Ada and Blackwell cards, row remapping.
XML_CAPTURES = {
    "q-x-a100-sxm4-40gb-mig-510.47.03.xml": [(OK, "0000:00:04", None, None, None)],  # only the aggregate count
    "q-x-a100-sxm4-80gb-mig-535.54.03.xml": [(OK, "0000:01:00", 0, None, None)],
    "q-x-a10g-515.105.01.xml": [(OK, "0000:00:1e", 0, False, None)],
    "q-x-grid-p4-1q-vgpu-windows-513.46.xml": [(UNKNOWN, "0000:00:0b", None, None, None)],
    "q-x-gt-1030-470.74.xml": [(UNKNOWN, "0000:2d:00", None, None, None)],
    "q-x-gtx-1070-ti-fragment.xml": [(UNKNOWN, "0000:01:00", None, None, None)],
    "q-x-gtx-1660-ti-418.43.xml": [(UNKNOWN, "0000:43:00", None, None, None)],
    "q-x-quadro-p2000-525.125.06.xml": [(UNKNOWN, "0000:17:00", None, None, None)],
    "q-x-quadro-p400-418.43.xml": [(UNKNOWN, "0000:43:00", None, None, None)],
    "q-x-rtx-2080-2gpu-590.44.01.xml": [(UNKNOWN, "0000:01:00", None, None, None),
                                        (UNKNOWN, "0000:02:00", None, None, None)],
    "q-x-rtx-3060-570.124.04.xml": [(UNKNOWN, "0000:2d:00", None, None, None)],
    "q-x-rtx-3080-595.58.03.xml": [(UNKNOWN, "0000:0c:00", None, None, None)],
    "q-x-rtx-3080-windows-536.40.xml": [(UNKNOWN, "0000:04:00", None, None, None)],
    "q-x-rtx-3090-525.147.05.xml": [(UNKNOWN, "0000:00:10", None, None, None)],
    "q-x-rtx-3090-590.44.01.xml": [(UNKNOWN, "0000:09:00", None, None, None)],
    "q-x-rtx-4000-sff-ada-595.84.xml": [(OK, "0000:06:00", None, False, None)],
    "q-x-rtx-4090-535.86.05.xml": [(OK, "0000:84:00", None, False, None)],
    "q-x-rtx-a5000-2gpu-590.44.01.xml": [(OK, "0000:81:00", None, False, None), (OK, "0000:c1:00", None, False, None)],
    "q-x-rtx-pro-6000-blackwell-590.44.01.xml": [(OK, "0000:61:00", None, False, None)],
    "q-x-tesla-p100-pcie-510.47.03.xml": [(OK, "0000:00:04", 0, None, False)],
    "q-x-tesla-t4-515.105.01.xml": [(OK, "0000:00:1e", 0, None, False)],
}

# Every kernel-log fixture -> each Xid in it: code, bus id, pid, process name, class.
XID_LOGS = {
    "dmesg-xid-31-13-32-no-pid-418.txt": [(31, "0000:01:00", None, None, APP_FAULT)]
                                         + [(13, "0000:01:00", None, None, APP_FAULT)] * 4
                                         + [(32, "0000:01:00", None, None, OTHER)],
    "xid-31-pid-no-name.txt": [(31, "0000:00:06", 2708, None, APP_FAULT)],
    "dmesg-xid-31-62-45-pid-name.txt": [(31, "0000:0a:00", 13332, "cuda_plot_k32_v", APP_FAULT),
                                        (62, "0000:0a:00", None, None, CARD_FAULT)]
                                       + [(45, "0000:0a:00", None, None, APP_FAULT)] * 8,
    "dmesg-ctime-xid-43-31-94-535.txt": [(43, "0000:00:05", 1045242, "pt_main_thread", APP_FAULT),
                                         (43, "0000:00:05", 1084984, "pt_main_thread", APP_FAULT),
                                         (31, "0000:00:07", 2512125, "python3.10", APP_FAULT),
                                         (94, "0000:00:08", None, None, CARD_FAULT)],
    "journal-xid-45-caused-by-previous.txt": [(45, f"0000:{bus}:00", pid, "python3", APP_FAULT) for bus, pid in (
        ("dc", 1818990), ("ed", 1818992), ("ba", 1818989), ("97", 1818987), ("dc", 1818990), ("ba", 1818989),
        ("ed", 1818992))],
    "xid-119-gsp-timeout.txt": [(119, "0000:9b:00", pid, name, CARD_FAULT) for pid, name in (
        (4071838, "python"), (28232, "cache_mgr_main"), (28232, "cache_mgr_main"), (28098, "gpu-feature-dis"),
        (4071838, "python"))],
    "xid-79-fallen-off-the-bus.txt": [(79, "0000:c6:00", 1101234, "nvc:[driver]", CARD_FAULT)],
    "xid-79-no-pid.txt": [(79, "0000:44:00", None, None, CARD_FAULT)],
    "dmesg-fallen-off-the-bus-at-probe.txt": [(79, "0000:b3:00", None, None, CARD_FAULT)],
    "dmesg-xid-149-154-nvlink-recovery.txt": [
        (149, "0009:01:00", None, None, OTHER), (154, "0009:01:00", None, None, CARD_FAULT),
        (149, "0008:01:00", None, None, OTHER), (154, "0019:01:00", None, None, CARD_FAULT),
        (149, "0009:01:00", None, None, OTHER), (149, "0009:01:00", None, None, OTHER),
        (149, "0008:01:00", None, None, OTHER), (154, "0018:01:00", None, None, CARD_FAULT),
        (154, "0008:01:00", None, None, CARD_FAULT)],
    "xid-14-no-pci-prefix-doc.txt": [(14, "0000:03:00", None, None, OTHER)],
}

# A real Xid line (the akash report's 94) behind each timestamp prefix the kernel's readers
# print: prefix -> (parse options, seconds since the epoch, seconds since boot). Formats: dmesg
# and dmesg -T/--ctime and -H/--reltime (util-linux dmesg(1)), journalctl -o short and
# short-iso (journalctl(1)), /dev/kmsg records (the kernel's Documentation/ABI/testing/dev-kmsg).
BODY_94 = "NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No"
BOOT = 1_700_000_000.0
PLUS_TWO = timezone(timedelta(hours=2))
PREFIXES = [
    ("", {}, None, None),
    ("[ 1843.308145] ", {}, None, 1843.308145),
    ("[ 1843.308145] ", {"boot_time": BOOT}, BOOT + 1843.308145, 1843.308145),
    ("[Fri Aug  9 13:32:56 2024] ", {}, AUG_9, None),
    ("[Fri Aug  9 13:32:56 2024] ", {"tz": PLUS_TWO}, AUG_9 - 7200, None),
    ("[  +0.000012] ", {"boot_time": BOOT}, None, None),  # a delta from the line before: no time
    ("Aug  9 13:32:56 gpu-7 kernel: ", {}, None, None),  # no year without now
    ("Aug  9 13:32:56 gpu-7 kernel: ", {"now": AUG_9 + 60}, AUG_9, None),
    ("Aug  9 13:32:56 gpu-7 kernel: ", {"now": AUG_9 + 150 * 86400}, AUG_9, None),  # the year before now's
    ("Aug  9 13:32:56 gpu-7 kernel: [ 1843.308145] ", {"now": AUG_9 + 60, "boot_time": BOOT}, AUG_9, 1843.308145),
    ("2024-08-09T13:32:56+0000 gpu-7 kernel: ", {}, AUG_9, None),
    ("2024-08-09T15:32:56.250000+02:00 gpu-7 kernel: ", {}, AUG_9 + 0.25, None),
    ("2024-08-09T13:32:56 gpu-7 kernel: ", {"tz": PLUS_TWO}, AUG_9 - 7200, None),
    ("6,1234,1843308145,-;", {"boot_time": BOOT}, BOOT + 1843.308145, 1843.308145),
]


def capture(name: str) -> str:
    """A --query-gpu capture by its path from ``query-gpu/`` (the derived one is in ``../derived``)."""
    return read_fixture(os.path.normpath(os.path.join(QUERY_GPU, *name.split("/"))))


def legacy_query_gpu(name: str) -> str:
    """The ``--query-gpu`` section of an old driver's full capture (under its ``# nvidia-smi`` line)."""
    lines = read_fixture(NVIDIA_SMI, "captures", name).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# nvidia-smi --query-gpu="))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("# ")), len(lines))
    return "\n".join(lines[start + 1:end]) + "\n"


def health_columns(text: str) -> str:
    """An all-fields capture cut down to the health query's columns, as ``noheader,nounits``
    output: what nvidia-smi prints for the health query alone."""
    lines = [line for line in text.splitlines() if line.strip()]
    names = [re.sub(r"\s*\[[^\]]*\]$", "", cell.strip()) for cell in lines[0].split(",")]
    picked = [names.index(field) for field in HEALTH_FIELDS]
    rows = [[cell.strip() for cell in line.split(",")] for line in lines[1:]]
    return "".join(", ".join(row[i] for i in picked) + "\n" for row in rows)


def summary(reading: GpuHealthReading, verdict) -> tuple:
    return verdict.status, reading.uncorrectable_volatile, reading.remap_failed, reading.remap_pending


def xid_line(code: int, bus: str = "0000:3b:00", message: str | None = None) -> str:
    # The driver's format (kernel_rc.c, krcReportXid), for codes no pasted log here has.
    return f"NVRM: Xid (PCI:{bus}): {code}, pid='<unknown>', name=<unknown>, {message or XID_NAMES.get(code, 'x')}"


class HealthQueryTest(unittest.TestCase):
    def test_the_query_names_only_fields_the_drivers_document(self):
        for name in ("help-query-gpu-linux-590.48.01.txt", "help-query-gpu-linux-595.80.txt",
                     "help-query-gpu-linux-610.57.04.txt", "help-query-gpu-windows-610.62.txt"):
            documented = set(re.findall(r'^"([^"]+)"', read_fixture(NVIDIA_SMI, "help", name), re.M))
            with self.subTest(help=name):
                self.assertEqual([field for field in HEALTH_FIELDS if field not in documented], [])

    def test_old_drivers_lack_the_remapping_and_recovery_fields(self):
        # What the module's note on old drivers says: their question must go without these.
        for name in ("help-query-gpu-linux-465.27.txt", "help-query-gpu-pre535-netdata-testdata.txt"):
            documented = set(re.findall(r'^"([^"]+)"', read_fixture(NVIDIA_SMI, "help", name), re.M))
            with self.subTest(help=name):
                self.assertEqual([field for field in HEALTH_FIELDS if field not in documented],
                                 ["remapped_rows.correctable", "remapped_rows.uncorrectable", "remapped_rows.pending",
                                  "remapped_rows.failure", "gpu_recovery_action"])

    def test_the_query_string(self):
        self.assertEqual(health_query_argv(), [
            "--query-gpu=index,uuid,pci.bus_id,ecc.mode.current,ecc.errors.uncorrected.volatile.total,"
            "ecc.errors.uncorrected.aggregate.total,retired_pages.single_bit_ecc.count,retired_pages.double_bit.count,"
            "retired_pages.pending,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,"
            "remapped_rows.failure,gpu_recovery_action", "--format=csv,noheader,nounits"])


class CsvCapturesTest(unittest.TestCase):
    def test_the_table_covers_every_capture(self):
        found = {os.path.relpath(path, QUERY_GPU).replace(os.sep, "/")
                 for folder in (QUERY_GPU, os.path.join(NVIDIA_SMI, "derived"))
                 for path in glob.glob(os.path.join(folder, "**", "*.csv"), recursive=True)}
        self.assertEqual(found, set(CSV_CAPTURES))

    def test_every_capture(self):
        for name, expected in CSV_CAPTURES.items():
            with self.subTest(capture=name):
                readings = parse_health(capture(name))
                verdicts = health_verdict(readings)
                self.assertEqual([summary(r, v) for r, v in zip(readings, verdicts)], expected)
                if name != FAILING_CAPTURE:
                    self.assertNotIn(FAILING, [verdict.status for verdict in verdicts])

    def test_the_failing_card(self):
        (reading,) = parse_health(capture(FAILING_CAPTURE))
        self.assertEqual((reading.index, reading.bus_id, reading.uncorrectable_aggregate, reading.remapped_uncorrectable,
                          reading.recovery_action), (0, H100_BUS, 3, 8, "None"))
        (verdict,) = health_verdict([reading])
        self.assertEqual((verdict.status, verdict.reason), (FAILING, FAILING_REASON))
        self.assertTrue(verdict.failing)

    def test_the_health_query_alone_reads_the_same(self):
        # Without a header, without the other columns and their units: the run's own output.
        for name in (name for name in CSV_CAPTURES if "allfields-linux" in name or "allfields-windows" in name):
            with self.subTest(capture=name):
                self.assertEqual(parse_health(health_columns(capture(name))), parse_health(capture(name)))

    def test_the_old_drivers_full_captures(self):
        for name in ("legacy-linux-rtx-2080-super__465.27.txt", "legacy-windows-rtx-2080-super__466.63.txt"):
            with self.subTest(capture=name):
                (reading,) = parse_health(legacy_query_gpu(name))
                self.assertEqual((reading.index, reading.bus_id, reading.reports_memory_state()), (0, "0000:0c:00", False))
                self.assertEqual(health_verdict([reading])[0].status, UNKNOWN)


class NotApplicableTest(unittest.TestCase):
    """What a card does not report is unknown, whichever way nvidia-smi says so."""

    def test_placeholders_and_missing_columns(self):
        row = dict(zip(HEALTH_FIELDS, "0, GPU-1a, 00000000:3B:00.0, Enabled, 0, 0, 0, 0, No, 0, 0, No, No, None".split(", ")))
        counters = [field for field in HEALTH_FIELDS[3:] if field != "gpu_recovery_action"]
        for placeholder in ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "[Insufficient Permissions]",
                            "[Requested functionality has been deprecated]", "", None):
            with self.subTest(placeholder=placeholder):
                blank = {**row, **{field: placeholder for field in counters}}
                if placeholder is None:
                    blank = {key: value for key, value in blank.items() if key not in counters}
                reading = health_from_row(blank)
                self.assertEqual((reading.index, reading.bus_id, reading.garbled, reading.reports_memory_state()),
                                 (0, "0000:3b:00", (), False))
                verdict = judge_gpu(reading)
                self.assertEqual(verdict.status, UNKNOWN)
                self.assertEqual(verdict.reason, "reports no ECC, page-retirement or row-remapping state "
                                                 "(ECC off or not supported); the driver asks for no recovery")

    def test_one_known_counter_is_enough_to_judge(self):
        text = "0, GPU-1a, 00000000:3B:00.0, [N/A], 0, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]\n"
        self.assertEqual(health_verdict(parse_health(text))[0].status, OK)
        self.assertEqual(health_verdict(parse_health(text.replace(", 0, [N/A]", ", 2, [N/A]", 1)))[0].status, FAILING)


class GarbageTest(unittest.TestCase):
    """Text that is not a row: never an exception, a reading that says why."""

    def test_hostile_text(self):
        good = "0, GPU-1a, 00000000:3B:00.0, Enabled, 0, 0, [N/A], [N/A], [N/A], 0, 0, No, No, None"
        cases = [  # text -> per reading: unreadable (a substring of the reason, or None), garbled fields
            ("", []),
            ("\n\n", []),
            ("garbage", [("1 values for 14 columns: garbage", ())]),
            ("Segmentation fault (core dumped)\n", [("1 values for 14 columns", ())]),
            ("\ufeff" + good + "\r\n", [(None, ())]),
            (good + "\n" + good.replace("0, GPU-1a", "1, GPU-2b", 1)[:40] + "\n", [(None, ()), ("6 values", ())]),
            (good.replace("Enabled, 0, 0", "Enabled, lots, -1"), [(None, ("ecc.errors.uncorrected.volatile.total=lots",
                                                                          "ecc.errors.uncorrected.aggregate.total=-1"))]),
            (good.replace(", No, No,", ", Maybe, 1,"), [(None, ("remapped_rows.pending=Maybe", "remapped_rows.failure=1"))]),
            (good.replace("0, GPU-1a, 00000000:3B:00.0", "x, [N/A], somewhere"),
             [("the row names no GPU", ("index=x", "pci.bus_id=somewhere"))]),
            (good.replace("Enabled, 0", "Enabled, " + "9" * 30), [(None, ("ecc.errors.uncorrected.volatile.total=" + "9" * 30,))]),
            (",".join(["\x00\xff"] * 14), [("the row names no GPU", tuple(
                f"{field}=\x00\xff" for field in ("index", "pci.bus_id", "uuid", "gpu_recovery_action") + HEALTH_FIELDS[3:13]))]),
            (good.replace("GPU-1a", "not a uuid").replace("None", "<reset>"),
             [(None, ("uuid=not a uuid", "gpu_recovery_action=<reset>"))]),
            ("x" * 100_000, [("1 values for 14 columns", ())]),
        ]
        for text, expected in cases:
            with self.subTest(text=text[:60]):
                readings = parse_health(text)
                self.assertEqual(len(readings), len(expected))
                for reading, (unreadable, garbled) in zip(readings, expected):
                    if unreadable is None:
                        self.assertIsNone(reading.unreadable)
                    else:
                        self.assertIn(unreadable, reading.unreadable)
                    self.assertEqual(reading.garbled, garbled)
                    self.assertFalse(reading.lost)
                for reading, verdict in zip(readings, health_verdict(readings)):
                    self.assertNotEqual(verdict.status, FAILING)
                    if reading.unreadable is not None:
                        self.assertEqual(verdict.status, UNKNOWN)
                        self.assertTrue(verdict.reason.startswith(f"unreadable: {reading.unreadable}"), verdict.reason)

    def test_an_unreadable_reading_is_unknown_and_says_why(self):
        (verdict,) = health_verdict(parse_health("garbage\n"))
        self.assertEqual((verdict.index, verdict.status, verdict.reason),
                         (None, UNKNOWN, "unreadable: line 1: 1 values for 14 columns: garbage"))
        (verdict,) = health_verdict(parse_health("0, GPU-1a, 00000000:3B:00.0, Enabled, lots, 0, [N/A], [N/A], [N/A], "
                                                 "0, 0, No, No, None\n"))
        self.assertEqual((verdict.status, verdict.reason), (OK, "no uncorrectable ECC errors, retirement or remapping "
                         "faults, or card-fault XIDs (unreadable values: ecc.errors.uncorrected.volatile.total=lots)"))

    def test_a_lost_gpu_in_place_of_its_row(self):
        # nvidia-smi's own words for a card that has fallen off the bus (fixtures/hw/nvidia-smi/errors).
        text = read_fixture(NVIDIA_SMI, "errors", "err-gpu-lost.txt")
        (reading,) = parse_health(text)
        self.assertEqual((reading.index, reading.bus_id, reading.lost), (None, "0000:02:00", True))
        (verdict,) = health_verdict([reading])
        self.assertEqual((verdict.status, verdict.bus_id), (FAILING, "0000:02:00"))
        self.assertTrue(verdict.reason.startswith("GPU is lost"), verdict.reason)
        for name in ("err-no-devices.txt", "err-no-driver.txt", "err-device-handle-unknown.txt"):
            with self.subTest(error=name):
                self.assertNotIn(FAILING, [v.status for v in health_verdict(parse_health(
                    read_fixture(NVIDIA_SMI, "errors", name)))])


class XmlCapturesTest(unittest.TestCase):
    def test_the_table_covers_every_capture(self):
        self.assertEqual(set(os.listdir(os.path.join(NVIDIA_SMI, "xml"))), set(XML_CAPTURES))

    def test_every_capture(self):
        for name, expected in XML_CAPTURES.items():
            with self.subTest(capture=name):
                readings = parse_health_xml(read_fixture(NVIDIA_SMI, "xml", name))
                verdicts = health_verdict(readings)
                self.assertEqual([(v.status, r.bus_id, r.uncorrectable_volatile, r.remap_failed, r.retirement_pending)
                                  for r, v in zip(readings, verdicts)], expected)
                self.assertEqual([r.index for r in readings], list(range(len(expected))))
                self.assertEqual([(r.unreadable, r.garbled) for r in readings], [(None, ())] * len(expected))

    def test_the_xml_and_the_csv_of_one_card_agree(self):
        # The index is the position, not the minor number: the A5000 at 81:00 is minor 1 but comes first.
        readings = parse_health_xml(read_fixture(NVIDIA_SMI, "xml", "q-x-rtx-a5000-2gpu-590.44.01.xml"))
        self.assertEqual([(r.index, r.bus_id, r.uuid, r.remapped_uncorrectable, r.recovery_action) for r in readings], [
            (0, "0000:81:00", "GPU-12345678-aaaa-bbbb-cccc-0123456789ab", 0, "None"),
            (1, "0000:c1:00", "GPU-12345678-aaaa-bbbb-cccc-0123456789cd", 0, "None")])
        (p100,) = parse_health_xml(read_fixture(NVIDIA_SMI, "xml", "q-x-tesla-p100-pcie-510.47.03.xml"))
        self.assertEqual((p100.ecc_enabled, p100.retired_single_bit, p100.retired_double_bit, p100.uncorrectable_aggregate),
                         (True, 0, 0, 0))

    def test_a_failing_card_in_xml(self):
        # The T4 capture with its counters edited, as the failing CSV is (no real capture exists).
        text = read_fixture(NVIDIA_SMI, "xml", "q-x-tesla-t4-515.105.01.xml")
        volatile = text.index("<volatile>")
        text = text[:volatile] + text[volatile:].replace("<dram_uncorrectable>0", "<dram_uncorrectable>2", 1)
        text = text.replace("<pending_retirement>No", "<pending_retirement>Yes")
        (reading,) = parse_health_xml(text)
        self.assertEqual((reading.uncorrectable_volatile, reading.uncorrectable_aggregate, reading.retirement_pending),
                         (2, 0, True))
        self.assertEqual(judge_gpu(reading).reason, "uncorrectable ECC errors: 2 since the driver loaded; "
                                                    "page retirement pending: reset the GPU or reload the driver to apply it")

    def test_hostile_text(self):
        cases = [  # text -> a substring of the one reading's reason
            ("", "not the XML"),
            ("No devices were found\n", "not the XML"),
            ("<nvidia_smi_log><gpu id='x'>", "not the XML"),
            ("<html><body>502</body></html>", "no <gpu> element"),
            ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]><x>&b;</x>', "declares entities"),
        ]
        for text, why in cases:
            with self.subTest(text=text[:40]):
                (reading,) = parse_health_xml(text)
                self.assertIn(why, reading.unreadable)
                self.assertEqual(health_verdict([reading])[0].status, UNKNOWN)
        (reading,) = parse_health_xml("<nvidia_smi_log><gpu id='00000000:01:00.0'><ecc_errors><volatile>"
                                      "<dram_uncorrectable>many</dram_uncorrectable></volatile></ecc_errors>"
                                      "<remapped_rows><remapped_row_failure>perhaps</remapped_row_failure></remapped_rows>"
                                      "</gpu></nvidia_smi_log>")
        self.assertEqual((reading.uncorrectable_volatile, reading.remap_failed, reading.garbled),
                         (None, None, ("dram_uncorrectable=many", "remapped_rows/remapped_row_failure=perhaps")))


class XidLogTest(unittest.TestCase):
    def test_the_table_covers_every_log(self):
        self.assertEqual(set(os.listdir(KERNEL_LOG)), set(XID_LOGS))

    def test_every_log(self):
        for name, expected in XID_LOGS.items():
            with self.subTest(log=name):
                events = parse_xid_log(read_fixture(KERNEL_LOG, name))
                self.assertEqual([(e.code, e.bus_id, e.pid, e.process, xid_class(e.code, e.message)) for e in events],
                                 expected)
                self.assertTrue(all(event.message for event in events))

    def test_what_each_line_says(self):
        events = parse_xid_log(read_fixture(KERNEL_LOG, "dmesg-ctime-xid-43-31-94-535.txt"))
        self.assertEqual([(e.uuid, e.at) for e in events], [
            ("GPU-efbdfde9-5798-a6e7-4c46-12518fa15375", datetime(2024, 7, 31, 23, 14, 18, tzinfo=timezone.utc).timestamp()),
            ("GPU-efbdfde9-5798-a6e7-4c46-12518fa15375", datetime(2024, 7, 31, 23, 15, 26, tzinfo=timezone.utc).timestamp()),
            ("GPU-3b6ec030-5adc-1847-e155-79f635584b4e", datetime(2024, 8, 5, 3, 54, 13, tzinfo=timezone.utc).timestamp()),
            ("GPU-c24840ec-8de1-83d5-b126-08000173ae32", AUG_9)])
        self.assertEqual(events[3].message, "Contained: SM (0x1). RST: No, D-RST: No")
        self.assertEqual(events[2].message, "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 "
                                            "faulted @ 0x73ac_1c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE")
        (probe,) = parse_xid_log(read_fixture(KERNEL_LOG, "dmesg-fallen-off-the-bus-at-probe.txt"), boot_time=BOOT)
        self.assertEqual((probe.code, probe.since_boot, probe.at, probe.name),
                         (79, 1843.308145, BOOT + 1843.308145, "GPU has fallen off the bus"))
        (old,) = parse_xid_log(read_fixture(KERNEL_LOG, "xid-14-no-pci-prefix-doc.txt"))
        self.assertEqual((old.uuid, old.message, old.name), ("GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7",
                                                             "Channel 00000001", "Xid 14"))

    def test_every_timestamp_prefix(self):
        for prefix, options, at, since_boot in PREFIXES:
            with self.subTest(prefix=prefix, options=options):
                (event,) = parse_xid_log(prefix + BODY_94 + "\n", **options)
                self.assertEqual((event.code, event.bus_id), (94, "0000:00:08"))
                if at is None:
                    self.assertIsNone(event.at)
                else:
                    self.assertAlmostEqual(event.at, at, places=5)
                self.assertEqual(event.since_boot, since_boot)

    def test_mig_attribution(self):
        # The driver's two MIG layouts (kernel_rc.c): the GPU instance, and it with the compute instance.
        cases = [("(PCI:0000:3b:00 GPU-I:01 GPU-CI:00)", 1, 0), ("(PCI:0000:3b:00 GPU-I:02)", 2, None),
                 ("(PCI:0000:3b:00)", None, None)]
        for parenthesis, instance, compute in cases:
            with self.subTest(parenthesis=parenthesis):
                (event,) = parse_xid_log(f"NVRM: Xid {parenthesis}: 43, pid=123, name=python, Ch 00000008\n")
                self.assertEqual((event.bus_id, event.code, event.pid, event.gpu_instance, event.compute_instance),
                                 ("0000:3b:00", 43, 123, instance, compute))

    def test_hostile_lines(self):
        for text in ("NVRM: Xid error: xyz, invalid data", "NVRM: Xid (invalid): some error",
                     "NVRM: Xid (PCI:zz:00:00): 79, x", "NVRM: Xid (PCI:0000:05:00): 99999999, x",
                     "NVRM: Xid (PCI:0000:05:00) 79 no colon", "NVRM: GPU at PCI:nonsense: GPU-1",
                     "NVRM: The NVIDIA GPU 0000:b3:00.0\nsomething else\nNVRM: fallen off the bus and is not responding",
                     "\x00\xff NVRM: \x00", "NVRM:" * 10_000, "x" * 100_000, "", "\n" * 10,
                     "[Fri Feb 30 13:32:56 2024] " + BODY_94, "[Fri Aug  9 99:99:99 2024] " + BODY_94):
            with self.subTest(text=text[:60]):
                events = parse_xid_log(text, now=AUG_9)
                self.assertTrue(all(event.code == 94 and event.at is None for event in events), events)

    def test_one_fall_is_one_event(self):
        # The driver logs Xid 79 and its own "GPU has fallen off the bus." line for the same fall.
        text = ("[100.0] NVRM: Xid (PCI:0000:29:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
                "[100.0] NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.\n"
                "[101.0] NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus.\n"
                "[900.0] NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.\n")
        self.assertEqual([(e.code, e.bus_id, e.since_boot) for e in parse_xid_log(text)],
                         [(79, "0000:29:00", 100.0), (79, "0000:2a:00", 101.0), (79, "0000:29:00", 900.0)])

    def test_classes(self):
        for code in CARD_FAULT_XIDS:
            self.assertEqual(xid_class(code, XID_NAMES[code]), CARD_FAULT, code)
        for code in APP_FAULT_XIDS:
            self.assertEqual(xid_class(code, XID_NAMES[code]), APP_FAULT, code)
        for code in (8, 14, 32, 61, 69, 109, 149, 12345):
            self.assertEqual(xid_class(code), OTHER, code)
        self.assertEqual(set(XID_NAMES) >= CARD_FAULT_XIDS | APP_FAULT_XIDS, True)
        self.assertEqual(xid_class(13, card_fault_xids={13}), CARD_FAULT)


class BusIdTest(unittest.TestCase):
    def test_nvidia_smi_and_kernel_spellings_meet(self):
        cases = [  # nvidia-smi pci.bus_id, kernel bus id -> the same GPU
            ("00000000:3B:00.0", "PCI:0000:3b:00", True),
            ("00000000:00:08.0", "PCI:0000:00:08", True),
            ("00000009:01:00.0", "PCI:0009:01:00", True),
            ("0000:3b:00.0", "0000:3b:00", True),
            ("00000000:3B:00.0", "PCI:0000:3c:00", False),
            ("00000001:3B:00.0", "PCI:0000:3b:00", False),
            ("00000000:3B:01.0", "PCI:0000:3b:00", False),
        ]
        for smi, kernel, same in cases:
            with self.subTest(smi=smi, kernel=kernel):
                self.assertEqual(pci_key(smi) == pci_key(kernel), same)
                reading = GpuHealthReading(0, bus_id=pci_key(smi))
                self.assertEqual(gpu_of(XidEvent(79, pci_key(kernel), "x"), [reading]) is reading, same)

    def test_the_right_index_of_several(self):
        # The akash report's three GPUs, as nvidia-smi would list them: 43 and 31 are the jobs'
        # faults, 94 is the card's, and only its GPU fails.
        readings = parse_health("".join(
            f"{index}, GPU-{index}, 00000000:00:{bus}.0, Enabled, 0, 0, [N/A], [N/A], [N/A], 0, 0, No, No, None\n"
            for index, bus in enumerate(("05", "07", "08"))))
        xids = parse_xid_log(read_fixture(KERNEL_LOG, "dmesg-ctime-xid-43-31-94-535.txt"))
        self.assertEqual([gpu_of(event, readings).index for event in xids], [0, 0, 1, 2])
        verdicts = health_verdict(readings, xids, now=AUG_9 + 3600)
        self.assertEqual([(v.index, v.status) for v in verdicts], [(0, OK), (1, OK), (2, FAILING)])
        self.assertEqual(verdicts[2].reason, "XID 94 (contained ECC error) at 2024-08-09T13:32:56Z")

    def test_by_uuid_when_no_bus_id_is_known(self):
        reading = GpuHealthReading(3, uuid="GPU-c24840ec-8de1-83d5-b126-08000173ae32", uncorrectable_volatile=0)
        xids = parse_xid_log(read_fixture(KERNEL_LOG, "dmesg-ctime-xid-43-31-94-535.txt"))
        self.assertEqual([gpu_of(event, [reading]) for event in xids], [None, None, None, reading])


class VerdictTest(unittest.TestCase):
    def test_counters(self):
        clean = dict(index=0, uncorrectable_volatile=0, uncorrectable_aggregate=0, retired_single_bit=0,
                     retired_double_bit=0, retirement_pending=False, remap_pending=False, remap_failed=False,
                     recovery_action="None")
        cases = [  # changes to a clean card, thresholds -> status, reason
            ({}, {}, OK, "no uncorrectable ECC errors, retirement or remapping faults, or card-fault XIDs"),
            ({"uncorrectable_volatile": 3}, {}, FAILING, "uncorrectable ECC errors: 3 since the driver loaded"),
            ({"uncorrectable_volatile": 3}, {"uncorrectable_volatile": 3}, OK, None),
            ({"uncorrectable_volatile": 3}, {"uncorrectable_volatile": None}, OK, None),
            ({"uncorrectable_aggregate": 7}, {}, OK, None),
            ({"uncorrectable_aggregate": 7}, {"uncorrectable_aggregate": 0}, FAILING,
             "uncorrectable ECC errors: 7 in the card's lifetime"),
            ({"remap_failed": True}, {}, FAILING, "row remapping failed: the memory has no spare rows left for bad ones"),
            ({"remap_failed": True}, {"remap_failure": False}, OK, None),
            ({"remap_pending": True}, {}, FAILING, "row remapping pending: reset the GPU to apply it"),
            ({"retirement_pending": True}, {}, FAILING,
             "page retirement pending: reset the GPU or reload the driver to apply it"),
            ({"retired_single_bit": 40, "retired_double_bit": 23}, {}, OK, None),
            ({"retired_single_bit": 40, "retired_double_bit": 24}, {}, FAILING, "retired pages: 64, at the limit of 64"),
            ({"retired_single_bit": 40, "retired_double_bit": 24}, {"retired_pages": None}, OK, None),
            ({"recovery_action": "Reset"}, {}, FAILING, "the driver asks for recovery: Reset"),
            ({"recovery_action": "Drain and Reset"}, {"recovery_action": False}, OK, None),
            ({"lost": True}, {}, FAILING,
             "GPU is lost: nvidia-smi cannot reach it (fallen off the bus), reboot to recover it"),
            ({"uncorrectable_volatile": 1, "remap_pending": True}, {}, FAILING,
             "uncorrectable ECC errors: 1 since the driver loaded; row remapping pending: reset the GPU to apply it"),
        ]
        for changes, limits, status, reason in cases:
            with self.subTest(changes=changes, limits=limits):
                verdict = judge_gpu(GpuHealthReading(**{**clean, **changes}), thresholds=HealthThresholds(**limits))
                self.assertEqual(verdict.status, status)
                if reason is not None:
                    self.assertEqual(verdict.reason, reason)
                self.assertEqual(len(verdict.reasons), 0 if status != FAILING else reason.count("; ") + 1)

    def test_every_card_fault_xid_fails_a_card_and_no_app_fault_does(self):
        reading = GpuHealthReading(0, bus_id="0000:3b:00", uncorrectable_volatile=0)
        for code in sorted(CARD_FAULT_XIDS | APP_FAULT_XIDS):
            message = "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)" if code == 154 else None
            with self.subTest(code=code):
                xids = parse_xid_log(f"2026-03-01T10:00:00+00:00 h kernel: {xid_line(code, message=message)}\n")
                (verdict,) = health_verdict([reading], xids, now=datetime(2026, 3, 1, 12, tzinfo=timezone.utc).timestamp())
                if code in CARD_FAULT_XIDS:
                    self.assertEqual((verdict.status, verdict.reason),
                                     (FAILING, f"XID {code} ({XID_NAMES[code]}) at 2026-03-01T10:00:00Z"))
                else:
                    self.assertEqual(verdict.status, OK)

    def test_the_pasted_logs(self):
        # Each log against a card on each bus it names: failing exactly where a card-fault Xid is.
        for name, expected in XID_LOGS.items():
            with self.subTest(log=name):
                xids = parse_xid_log(read_fixture(KERNEL_LOG, name))
                buses = sorted({bus for _, bus, _, _, _ in expected})
                readings = [GpuHealthReading(i, bus_id=bus, uncorrectable_volatile=0) for i, bus in enumerate(buses)]
                failing = {bus for _, bus, _, _, kind in expected if kind == CARD_FAULT}
                self.assertEqual([v.bus_id for v in health_verdict(readings, xids) if v.failing], sorted(failing))

    def test_the_recovery_action_going_back_to_none(self):
        reading = GpuHealthReading(0, bus_id="0009:01:00", uncorrectable_volatile=0)
        xids = parse_xid_log(read_fixture(KERNEL_LOG, "dmesg-xid-149-154-nvlink-recovery.txt"))
        self.assertEqual(health_verdict([reading], xids)[0].reason, "XID 154 (GPU recovery action changed) 171168s after boot")
        back = xid_line(154, "0009:01:00", "GPU recovery action changed from 0x4 (Drain and Reset) to 0x0 (None)")
        self.assertEqual(health_verdict([reading], parse_xid_log(back))[0].status, OK)

    def test_the_xid_window(self):
        reading = GpuHealthReading(0, bus_id="0000:3b:00", uncorrectable_volatile=0)
        xids = parse_xid_log(f"[100.0] {xid_line(79)}\n", boot_time=BOOT)
        cases = [  # now, window -> failing
            (BOOT + 100, {}, True),
            (BOOT + 100 + 86399, {}, True),
            (BOOT + 100 + 86401, {}, False),
            (BOOT + 100 + 86401, {"xid_window": None}, True),
            (BOOT + 100 + 3601, {"xid_window": 3600}, False),
            (None, {}, True),
        ]
        for now, limits, failing in cases:
            with self.subTest(now=now, limits=limits):
                (verdict,) = health_verdict([reading], xids, HealthThresholds(**limits), now)
                self.assertEqual(verdict.failing, failing)
        # A line with no time counts: the caller chose the log it passed.
        (verdict,) = health_verdict([reading], parse_xid_log(xid_line(79)), now=BOOT + 10 ** 7)
        self.assertEqual(verdict.reason, "XID 79 (GPU has fallen off the bus) in the kernel log")

    def test_repeats_and_several_codes(self):
        reading = GpuHealthReading(0, bus_id="0000:3b:00")
        text = "".join(f"[{t}.0] {xid_line(code)}\n" for t, code in ((10, 48), (20, 63), (30, 48), (40, 13)))
        (verdict,) = health_verdict([reading], parse_xid_log(text, boot_time=BOOT))
        self.assertEqual(verdict.reasons, ("XID 48 (double-bit ECC error) at 2023-11-14T22:13:50Z, 2 times",
                                           "XID 63 (ECC page retirement or row remapping recording event) at "
                                           "2023-11-14T22:13:40Z"))
        self.assertEqual(verdict.reason, "; ".join(verdict.reasons))

    def test_a_card_nvidia_smi_no_longer_lists(self):
        readings = [GpuHealthReading(0, bus_id="0000:3b:00", uncorrectable_volatile=0)]
        xids = parse_xid_log(read_fixture(KERNEL_LOG, "xid-79-fallen-off-the-bus.txt")
                             + read_fixture(KERNEL_LOG, "journal-xid-45-caused-by-previous.txt"))
        verdicts = health_verdict(readings, xids)
        self.assertEqual([(v.index, v.bus_id, v.status) for v in verdicts],
                         [(0, "0000:3b:00", OK), (None, "0000:c6:00", FAILING)])
        self.assertEqual(verdicts[1].reason, "XID 79 (GPU has fallen off the bus) in the kernel log "
                                             "(a GPU nvidia-smi does not list)")

    def test_thresholds_are_checked(self):
        for bad in ({"uncorrectable_volatile": -1}, {"retired_pages": 1.5}, {"uncorrectable_aggregate": True},
                    {"xid_window": 0}, {"xid_window": -5.0}):
            with self.subTest(thresholds=bad), self.assertRaises(ValueError):
                HealthThresholds(**bad)
        self.assertEqual(HealthThresholds(card_fault_xids=[79]).card_fault_xids, frozenset({79}))


class FakeNvidiaSmiTest(TempDirTestCase):
    """The health query through the real runner against the fake nvidia-smi, as a subprocess."""

    def health(self, machine: str):
        self.patch_environ(FAKE_NVIDIA_SMI=machine)
        ran = gpu.run_nvidia_smi([FAKE_NVIDIA_SMI] + health_query_argv(), DEADLINE)
        self.assertIsInstance(ran, tuple, ran)
        returncode, stdout, stderr = ran
        return returncode, parse_health(stdout), stdout + stderr

    def test_the_failing_card(self):
        returncode, readings, _ = self.health("failing")
        self.assertEqual(returncode, 0)
        (verdict,) = health_verdict(readings)
        self.assertEqual((verdict.index, verdict.bus_id, verdict.status, verdict.reason), (0, H100_BUS, FAILING, FAILING_REASON))
        self.assertEqual(readings, parse_health(capture(FAILING_CAPTURE)))

    def test_the_healthy_machines(self):
        for machine in ("idle", "busy", "mig"):
            with self.subTest(machine=machine):
                returncode, readings, _ = self.health(machine)
                self.assertEqual((returncode, [v.status for v in health_verdict(readings)]), (0, [OK]))

    def test_a_lost_gpu(self):
        returncode, readings, said = self.health("gpu-lost")
        self.assertEqual((returncode, gpu.classify_gpu_failure(returncode, said).kind), (15, gpu.GPU_LOST))
        self.assertEqual([(v.bus_id, v.status) for v in health_verdict(readings)], [("0000:02:00", FAILING)])

    def test_the_failing_card_answers_the_other_questions(self):
        self.patch_environ(FAKE_NVIDIA_SMI="failing")
        sample = gpu.sample_gpus(command=FAKE_NVIDIA_SMI)
        self.assertEqual((sample.unknown, [r.index for r in sample.readings]), (None, [0]))
        states = gpu_readings.sample_gpu_states(command=FAKE_NVIDIA_SMI)
        self.assertEqual((states.unknown, states.left_out), (None, ()))
        self.assertEqual(states.states, tuple(gpu_readings.parse_gpu_states(
            capture("query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-idle.csv"))))
        performance = gpu_readings.sample_performance(command=FAKE_NVIDIA_SMI)
        self.assertEqual((performance.unknown, [p.bus_id for p in performance.gpus]), (None, ["00000000:00:09.0"]))
        self.assertIsNone(gpu.sample_gpu_processes(command=FAKE_NVIDIA_SMI).unknown)
        returncode, stdout, _ = gpu.run_nvidia_smi([FAKE_NVIDIA_SMI, "-q"], DEADLINE)
        edited = [line.split(":")[0].strip() + ": " + line.split(":")[1].strip()
                  for line in stdout.splitlines() if re.search(r"DRAM Uncorrectable|Uncorrectable Error|Remapping Failure", line)]
        self.assertEqual((returncode, edited), (0, ["DRAM Uncorrectable: 3", "DRAM Uncorrectable: 3",
                                                    "Uncorrectable Error: 8", "Remapping Failure Occurred: Yes"]))

    def test_the_short_field_names(self):
        self.patch_environ(FAKE_NVIDIA_SMI="failing")
        returncode, stdout, _ = gpu.run_nvidia_smi(
            [FAKE_NVIDIA_SMI, "--query-gpu=index,retired_pages.dbe,remapped_rows.dbe,remapped_rows.failure", "--format=csv"],
            DEADLINE)
        (reading,) = parse_health(stdout, ["index", "retired_pages.dbe", "remapped_rows.dbe", "remapped_rows.failure"])
        self.assertEqual((returncode, reading.retired_double_bit, reading.remapped_uncorrectable, reading.remap_failed),
                         (0, None, 8, True))


if __name__ == "__main__":
    unittest.main()
