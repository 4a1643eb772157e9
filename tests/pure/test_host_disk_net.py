"""Tests of ``rowfleet.telemetry.disk_net``: free space, /proc/diskstats and /proc/net/dev.

The parsers and delta functions run against every capture of those files under
``fixtures/hw/linux/proc`` (see its README) and against hostile text; the readers against a
fake /proc tree in a temp dir, the real /proc, and injected statvfs functions.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import unittest
from types import SimpleNamespace

from rowfleet.telemetry import disk_net
from rowfleet.telemetry.disk_net import DiskRate, DiskStat, DiskUsage, NetDevStat, NetRate

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROC = os.path.join(HERE, "fixtures", "hw", "linux", "proc")
HUGE = "9" * 5000  # past the digits int() converts by default


def read(name: str) -> str:
    with open(os.path.join(PROC, name), encoding="utf-8") as file:
        return file.read()


def data_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# Each capture: what its parse must hold. Counts are the file's non-blank lines, less the
# headers, so a parser that drops a good line fails.
DISKSTATS_CAPTURES = {
    "proc-diskstats-t0.txt": DiskStat(254, 0, "vda", 250294, 11736170, 2464154, 109271824, 0, 446224,
                                      discards=372323, flushes=654255),
    "proc-diskstats-t1.txt": DiskStat(254, 0, "vda", 250297, 11736250, 2464162, 109304616, 0, 446252,
                                      discards=372323, flushes=654256),
}
NET_DEV_CAPTURES = {
    "proc-net-dev-t0.txt": NetDevStat("eth0", 36549329, 1219, 0, 0, 109347, 769, 0, 0),
    "proc-net-dev-t1.txt": NetDevStat("eth0", 36549329, 1219, 0, 0, 109347, 769, 0, 0),
}


class DiskstatsCaptureTest(unittest.TestCase):
    def test_every_capture_parses_every_line(self):
        for name, vda in DISKSTATS_CAPTURES.items():
            with self.subTest(name):
                text = read(name)
                stats = disk_net.parse_diskstats(text)
                self.assertEqual(len(stats), len(data_lines(text)))
                self.assertEqual(stats["vda"], vda)
                self.assertEqual(set(stats), {f"loop{i}" for i in range(8)} | {"vda", "zram0"})
                self.assertEqual(stats["zram0"], DiskStat(253, 0, "zram0", 0, 0, 0, 0, 0, 0, 0, 0))

    def test_capture_pair_rates(self):
        t0, t1 = (disk_net.parse_diskstats(read(name)) for name in DISKSTATS_CAPTURES)
        rates = disk_net.disk_rates(t0, t1, 1.0)
        self.assertEqual(set(rates), set(t0))
        # 16 MiB were written with fsync between the two captures.
        self.assertEqual(rates["vda"], DiskRate("vda", 80 * 512.0, 32792 * 512.0, 3.0, 8.0, 0.028))
        self.assertGreaterEqual(rates["vda"].write_bytes_per_second, 16 * 1024 * 1024)
        self.assertEqual(rates["loop0"], DiskRate("loop0", 0.0, 0.0, 0.0, 0.0, 0.0))

    def test_capture_whole_disks(self):
        stats = disk_net.parse_diskstats(read("proc-diskstats-t0.txt"))
        self.assertEqual(sorted(disk_net.whole_disks(stats)), ["vda", "zram0"])


# One line per format: (line, expected DiskStat or None).
LINE_14 = "   8       0 sda 9 1 200 5 7 2 300 6 0 11 12"
LINE_18 = "   8       0 sda 9 1 200 5 7 2 300 6 1 11 12 4 0 64 3"
LINE_20 = "   8       0 sda 9 1 200 5 7 2 300 6 1 11 12 4 0 64 3 13 14"
LINE_22 = "   8       0 sda 9 1 200 5 7 2 300 6 1 11 12 4 0 64 3 13 14 98 99"
DISKSTATS_LINES = [
    (LINE_14, DiskStat(8, 0, "sda", 9, 200, 7, 300, 0, 11, None, None)),
    (LINE_18, DiskStat(8, 0, "sda", 9, 200, 7, 300, 1, 11, 4, None)),
    (LINE_20, DiskStat(8, 0, "sda", 9, 200, 7, 300, 1, 11, 4, 13)),
    (LINE_22, DiskStat(8, 0, "sda", 9, 200, 7, 300, 1, 11, 4, 13)),
    ("\t8\t1\tsda1\t1 0 2 0 3 0 4 0 0 5 6", DiskStat(8, 1, "sda1", 1, 2, 3, 4, 0, 5)),
    (" 259 0 nvme0n1 1 0 18446744073709551615 0 0 0 0 0 0 0 0",
     DiskStat(259, 0, "nvme0n1", 1, 18446744073709551615, 0, 0, 0, 0)),  # exact past 2**53
    ("   8    1 sda1 1 2 3 4", None),  # the 7-field partition lines before Linux 2.6.25
    ("   8    0 sda 9 1 200 5 7 2 300 6 0 11", None),  # truncated
    ("   8    0 sda 9 1 -200 5 7 2 300 6 0 11 12", None),
    ("   8    0 sda 9 1 2.5 5 7 2 300 6 0 11 12", None),
    ("   8    0 sda 9 1 \u0663 5 7 2 300 6 0 11 12", None),  # an Arabic-Indic digit
    (f"   8    0 sda 9 1 {HUGE} 5 7 2 300 6 0 11 12", None),
    ("   x    0 sda 9 1 200 5 7 2 300 6 0 11 12", None),
    ("", None),
    ("garbage", None),
]


class DiskstatsHostileTest(unittest.TestCase):
    def test_lines(self):
        for line, expected in DISKSTATS_LINES:
            with self.subTest(line[:60]):
                self.assertEqual(disk_net.parse_diskstats_line(line), expected)

    def test_mixed_text_keeps_good_lines(self):
        text = "\n".join(line for line, _ in DISKSTATS_LINES[:5]) + "\n\x00\xff\n" + "\n".join(
            line for line, _ in DISKSTATS_LINES[6:])
        stats = disk_net.parse_diskstats(text)
        self.assertEqual(sorted(stats), ["sda", "sda1"])
        self.assertEqual(stats["sda"].flushes, 13)  # the last line of a name wins
        self.assertEqual(disk_net.parse_diskstats(""), {})

    def test_bytes_are_512_byte_sectors(self):
        stat = disk_net.parse_diskstats_line(LINE_20)
        self.assertEqual((stat.read_bytes, stat.written_bytes), (200 * 512, 300 * 512))

    def test_rates(self):
        before = DiskStat(8, 0, "sda", reads=10, sectors_read=100, writes=20, sectors_written=200, in_flight=3, io_ms=1000)
        cases = [
            ("steady", dataclasses.replace(before, reads=14, sectors_read=140, writes=28, sectors_written=280,
                                         io_ms=3000), 4.0,
             DiskRate("sda", 40 * 512 / 4, 80 * 512 / 4, 1.0, 2.0, 0.5)),
            ("reads went backwards", dataclasses.replace(before, reads=1, sectors_read=50, io_ms=900), 2.0,
             DiskRate("sda", None, 0.0, None, 0.0, None)),
            ("busy past the interval is capped", dataclasses.replace(before, io_ms=1000 + 2500), 2.0,
             DiskRate("sda", 0.0, 0.0, 0.0, 0.0, 1.0)),
        ]
        for label, after, seconds, expected in cases:
            with self.subTest(label):
                self.assertEqual(disk_net.disk_rates({"sda": before}, {"sda": after}, seconds), {"sda": expected})

    def test_rates_only_for_devices_in_both(self):
        a = disk_net.parse_diskstats(LINE_14 + "\n 8 16 sdb 1 0 1 0 1 0 1 0 0 1 1\n")
        b = disk_net.parse_diskstats(LINE_20 + "\n 8 32 sdc 1 0 1 0 1 0 1 0 0 1 1\n")
        self.assertEqual(set(disk_net.disk_rates(a, b, 1.0)), {"sda"})

    def test_rates_need_a_positive_interval(self):
        stats = disk_net.parse_diskstats(LINE_20)
        for seconds in (0, -1.0, float("nan"), float("inf")):
            with self.subTest(seconds):
                self.assertEqual(disk_net.disk_rates(stats, stats, seconds), {})
        self.assertEqual(set(disk_net.disk_rates(stats, stats, 1)), {"sda"})


# (device names listed, the ones whole_disks keeps)
WHOLE_DISKS = [
    (["sda", "sda1", "sda2", "sdb"], ["sda", "sdb"]),
    (["nvme0n1", "nvme0n1p1", "nvme0n1p12", "nvme0n10", "nvme1n1p1"], ["nvme0n1", "nvme0n10", "nvme1n1p1"]),
    (["mmcblk0", "mmcblk0p1", "mmcblk0boot0"], ["mmcblk0", "mmcblk0boot0"]),
    (["md0", "md0p1", "md127"], ["md0", "md127"]),
    (["loop0", "loop1", "loop0p1", "ram0", "ram15", "zram0"], ["zram0"]),
    (["dm-0", "dm-1", "dm-10", "vda", "vda1", "xvda", "xvda1", "hda", "hda3"], ["dm-0", "dm-1", "dm-10", "hda", "vda", "xvda"]),
    (["sda1", "sdb2"], ["sda1", "sdb2"]),  # a partition whose disk is not listed stays
    (["sd", "sd1", "1", "12"], ["1", "12", "sd"]),  # sd1 is sd's, by the rule; a bare number is no partition
    ([], []),
]


class WholeDisksTest(unittest.TestCase):
    def test_table(self):
        for names, kept in WHOLE_DISKS:
            with self.subTest(names):
                devices = {name: object() for name in names}
                result = disk_net.whole_disks(devices)
                self.assertEqual(sorted(result), kept)
                self.assertTrue(all(result[name] is devices[name] for name in result))

    def test_filters_rates_too(self):
        stats = disk_net.parse_diskstats(LINE_20 + "\n" + LINE_20.replace(" sda ", " sda1 ") + "\n")
        self.assertEqual(sorted(disk_net.whole_disks(disk_net.disk_rates(stats, stats, 1))), ["sda"])


class NetDevCaptureTest(unittest.TestCase):
    def test_every_capture_parses_every_interface(self):
        for name, eth0 in NET_DEV_CAPTURES.items():
            with self.subTest(name):
                text = read(name)
                stats = disk_net.parse_net_dev(text)
                self.assertEqual(len(stats), len(data_lines(text)) - 2)  # two header lines
                self.assertEqual(sorted(stats), ["eth0", "ifb0", "ifb1", "lo"])
                self.assertEqual(stats["eth0"], eth0)
                self.assertEqual(stats["lo"], NetDevStat("lo", 238060, 702, 0, 0, 238060, 702, 0, 0))

    def test_capture_pair_rates(self):
        # The two shared captures, 1 s apart, happen to hold the same counters.
        t0, t1 = (disk_net.parse_net_dev(read(name)) for name in NET_DEV_CAPTURES)
        rates = disk_net.net_rates(t0, t1, 1.0)
        self.assertEqual(sorted(rates), ["eth0", "ifb0", "ifb1", "lo"])
        self.assertEqual(rates["eth0"], NetRate("eth0", 0.0, 0.0, 0, 0, 0, 0))


NET_LINES = [
    ("  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16", NetDevStat("eth0", 1, 2, 3, 4, 9, 10, 11, 12)),
    ("eth0:123 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16", NetDevStat("eth0", 123, 2, 3, 4, 9, 10, 11, 12)),
    ("wlp3s0:\t1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17", NetDevStat("wlp3s0", 1, 2, 3, 4, 9, 10, 11, 12)),
    ("br-1a2b.100: 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0",
     NetDevStat("br-1a2b.100", 18446744073709551615, 0, 0, 0, 0, 0, 0, 0)),
    ("Inter-|   Receive                                                |  Transmit", None),
    (" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop", None),
    ("  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15", None),  # truncated
    ("  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 x", None),
    ("  eth0: -1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16", None),
    (f"  eth0: {HUGE} 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16", None),
    ("  : 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16", None),
    ("  et h0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16", None),
    ("eth0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16", None),
    ("", None),
]


class NetDevHostileTest(unittest.TestCase):
    def test_lines(self):
        for line, expected in NET_LINES:
            with self.subTest(line[:60]):
                self.assertEqual(disk_net.parse_net_dev_line(line), expected)

    def test_mixed_text_keeps_good_lines(self):
        text = "\n".join(line for line, _ in NET_LINES) + "\n\x00\ufffd\n"
        self.assertEqual(sorted(disk_net.parse_net_dev(text)), ["br-1a2b.100", "eth0", "wlp3s0"])
        self.assertEqual(disk_net.parse_net_dev(""), {})

    def test_rates(self):
        before = NetDevStat("eth0", rx_bytes=1000, rx_packets=10, rx_errors=2, rx_dropped=1,
                            tx_bytes=4000, tx_packets=40, tx_errors=0, tx_dropped=5)
        cases = [
            ("steady", NetDevStat("eth0", 3000, 30, 5, 1, 4400, 44, 0, 7), 2.0,
             NetRate("eth0", 1000.0, 200.0, 3, 0, 0, 2)),
            ("interface re-created", NetDevStat("eth0", 10, 1, 0, 0, 20, 2, 0, 0), 2.0,
             NetRate("eth0", None, None, None, 0, None, None)),
            ("only rx bytes wrapped", NetDevStat("eth0", 5, 11, 2, 1, 4000, 40, 0, 5), 0.5,
             NetRate("eth0", None, 0.0, 0, 0, 0, 0)),
        ]
        for label, after, seconds, expected in cases:
            with self.subTest(label):
                self.assertEqual(disk_net.net_rates({"eth0": before}, {"eth0": after}, seconds), {"eth0": expected})

    def test_rates_only_for_interfaces_in_both_and_a_positive_interval(self):
        a = disk_net.parse_net_dev(NET_LINES[0][0] + "\n" + NET_LINES[2][0])
        b = disk_net.parse_net_dev(NET_LINES[1][0] + "\n" + NET_LINES[3][0])
        self.assertEqual(set(disk_net.net_rates(a, b, 1)), {"eth0"})
        for seconds in (0, -2, float("nan"), float("-inf")):
            with self.subTest(seconds):
                self.assertEqual(disk_net.net_rates(a, b, seconds), {})


def statvfs_like(**fields):
    base = dict(f_bsize=4096, f_frsize=4096, f_blocks=1000, f_bfree=300, f_bavail=250)
    base.update(fields)
    return SimpleNamespace(**{k: v for k, v in base.items() if v is not ...})


USAGE = [
    ("typical", statvfs_like(), DiskUsage("/d", 4096000, 700 * 4096, 250 * 4096)),
    ("fragment size 0 falls back to the block size", statvfs_like(f_frsize=0, f_bsize=1024),
     DiskUsage("/d", 1024000, 700 * 1024, 250 * 1024)),
    ("fragments smaller than blocks count", statvfs_like(f_frsize=1024, f_bsize=4096),
     DiskUsage("/d", 1024000, 700 * 1024, 250 * 1024)),
    ("full, none reserved", statvfs_like(f_bfree=0, f_bavail=0), DiskUsage("/d", 4096000, 4096000, 0)),
    ("empty filesystem", statvfs_like(f_blocks=0, f_bfree=0, f_bavail=0), DiskUsage("/d", 0, 0, 0)),
    ("exabytes", statvfs_like(f_blocks=2 ** 60, f_bfree=2 ** 59, f_bavail=2 ** 59),
     DiskUsage("/d", 2 ** 72, 2 ** 71, 2 ** 71)),
    ("no f_bavail", statvfs_like(f_bavail=...), None),
    ("no f_frsize", statvfs_like(f_frsize=...), None),
    ("no sizes at all", statvfs_like(f_frsize=0, f_bsize=0), None),
    ("negative", statvfs_like(f_bfree=-1), None),
    ("a float", statvfs_like(f_blocks=1000.0), None),
    ("a string", statvfs_like(f_bavail="250"), None),
    ("a bool", statvfs_like(f_bavail=True), None),
    ("more free than blocks", statvfs_like(f_bfree=2000), None),
    ("not a statvfs result", None, None),
    ("a tuple", (4096, 4096, 1000, 300, 250, 0, 0, 0, 0, 255), None),
]


class DiskUsageTest(unittest.TestCase):
    def test_usage_from_statvfs(self):
        for label, st, expected in USAGE:
            with self.subTest(label):
                self.assertEqual(disk_net.usage_from_statvfs("/d", st), expected)

    def test_reader_with_injected_statvfs(self):
        answers = {"/db/rowfleet.sqlite3": statvfs_like(), "/scratch": statvfs_like(f_bavail=...)}

        def statvfs(path):
            if path not in answers:
                raise FileNotFoundError(2, "No such file or directory", path)
            return answers[path]

        self.assertEqual(disk_net.disk_usage(["/db/rowfleet.sqlite3", "/gone", "/scratch"], statvfs), {
            "/db/rowfleet.sqlite3": DiskUsage("/db/rowfleet.sqlite3", 4096000, 700 * 4096, 250 * 4096),
            "/gone": None,
            "/scratch": None,
        })

    def test_reader_on_this_machine(self):
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        database = os.path.join(folder, "rowfleet.sqlite3")
        with open(database, "w"):
            pass
        missing = os.path.join(folder, "missing", "x")
        usages = disk_net.disk_usage([database, missing, "bad\x00path", folder])
        self.assertEqual(list(usages), [database, missing, "bad\x00path", folder])
        self.assertIsNone(usages[missing])
        self.assertIsNone(usages["bad\x00path"])
        expected = shutil.disk_usage(folder)
        for path in (database, folder):
            usage = usages[path]
            self.assertEqual(usage.path, path)
            self.assertEqual(usage.total_bytes, expected.total)
            # df's used (blocks less f_bfree); other writers on the filesystem may move it a
            # little between the two calls, the total not at all.
            self.assertAlmostEqual(usage.used_bytes, expected.used, delta=256 * 1024 * 1024)
            self.assertGreater(usage.free_bytes, 0)
            self.assertLessEqual(usage.used_bytes + usage.free_bytes, usage.total_bytes)

    def test_reader_of_no_paths(self):
        self.assertEqual(disk_net.disk_usage([]), {})


class ReaderTest(unittest.TestCase):
    def make_root(self, files: dict[str, str]) -> str:
        root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, root)
        for target, fixture in files.items():
            path = os.path.join(root, target)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            shutil.copy(os.path.join(PROC, fixture), path)
        return root

    def test_fixture_tree(self):
        for disk, net in zip(DISKSTATS_CAPTURES, NET_DEV_CAPTURES):
            with self.subTest(disk):
                root = self.make_root({"proc/diskstats": disk, "proc/net/dev": net})
                self.assertEqual(disk_net.read_diskstats(root), disk_net.parse_diskstats(read(disk)))
                self.assertEqual(disk_net.read_diskstats(root)["vda"], DISKSTATS_CAPTURES[disk])
                self.assertEqual(disk_net.read_net_dev(root)["eth0"], NET_DEV_CAPTURES[net])

    def test_absent_files_read_as_empty(self):
        empty = self.make_root({})
        self.assertEqual(disk_net.read_diskstats(empty), {})
        self.assertEqual(disk_net.read_net_dev(empty), {})
        self.assertEqual(disk_net.read_diskstats(os.path.join(empty, "no", "such", "root")), {})
        os.makedirs(os.path.join(empty, "proc", "diskstats"))  # a directory where the file should be
        self.assertEqual(disk_net.read_diskstats(empty), {})

    def test_unreadable_bytes_read_without_raising(self):
        root = self.make_root({})
        os.makedirs(os.path.join(root, "proc", "net"))
        with open(os.path.join(root, "proc", "net", "dev"), "wb") as file:
            file.write(b"\xff\xfe garbage\n  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n\x00\x00")
        self.assertEqual(list(disk_net.read_net_dev(root)), ["eth0"])

    @unittest.skipUnless(os.path.exists("/proc/diskstats") and os.path.exists("/proc/net/dev"), "no Linux /proc")
    def test_real_proc(self):
        self.assertIn("lo", disk_net.read_net_dev())
        with open("/proc/diskstats", encoding="utf-8") as file:
            self.assertEqual(len(disk_net.read_diskstats()), len(data_lines(file.read())))


if __name__ == "__main__":
    unittest.main()
