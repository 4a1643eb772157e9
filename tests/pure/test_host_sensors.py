"""Tests of the host's sensors: thermal zones, hwmon temperatures and RAPL energy from /sys.

The reader runs against a temp-dir copy of node_exporter's sysfs fixture (its relative
symlinks kept, see fixtures/hw/README.md), against hostile edits of that copy, against a
tree laid out like this machine's (no hwmon, no powercap, no thermal zones) and against the
real /sys; the parsers against every attribute file of the fixture and hostile text.
"""

from __future__ import annotations

import builtins
import math
import os
import re
import shutil
import tempfile
import unittest
from unittest import mock

from rowfleet.telemetry import sensors
from rowfleet.telemetry.sensors import HwmonTemperature, RaplZone, SensorReading, ThermalZone

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE_SYS = os.path.join(HERE, "fixtures", "hw", "linux", "public", "node_exporter-sysfs", "sys")
HWMON = os.path.join("class", "hwmon")
CORETEMP0 = os.path.join("devices", "platform", "coretemp.0", "hwmon", "hwmon0")
RAPL0 = os.path.join("class", "powercap", "intel-rapl:0")
WRAP_UJ = 262143328850  # max_energy_range_uj of both RAPL zones in the fixture

# Every temperature the fixture holds, as the kernel's hwmon ABI reads it:
# (hwmon, chip, sensor, label, °C, max °C, crit °C).
CORETEMP_SENSORS = (("temp1", "Physical id 0", 55.0), ("temp2", "Core 0", 54.0), ("temp3", "Core 1", 52.0),
                    ("temp4", "Core 2", 53.0), ("temp5", "Core 3", 50.0))
FIXTURE_TEMPERATURES = (
    *(HwmonTemperature("hwmon0", "coretemp", s, label, c, 84.0, 100.0) for s, label, c in CORETEMP_SENSORS),
    *(HwmonTemperature("hwmon1", "coretemp", s, label, c, 84.0, 100.0) for s, label, c in CORETEMP_SENSORS),
    # hwmon4 is a real directory with no name; its labels were hand-edited upstream.
    HwmonTemperature("hwmon4", None, "temp1", "foosensor", 55.0, 100.0, 100.0),
    HwmonTemperature("hwmon4", None, "temp2", "foosensor", 54.0, 100.0, 100.0),
    # The Wi-Fi chip's sensors have no label, max or crit.
    HwmonTemperature("hwmon8", "mt7996_phy0_0", "temp1", "temp1", 55.0, None, None),
    HwmonTemperature("hwmon9", "mt7996_phy0_1", "temp1", "temp1", 56.0, None, None),
    HwmonTemperature("hwmon10", "mt7996_phy0_2", "temp1", "temp1", 57.0, None, None),
)
FIXTURE_ZONES = (ThermalZone("thermal_zone0", "cpu-thermal", 12.376),)
FIXTURE_RAPL = (RaplZone("intel-rapl:0", "package-0", 240422366267, WRAP_UJ),
                RaplZone("intel-rapl:0:0", "core", 118821284256, WRAP_UJ))


def fixture_files() -> list[str]:
    """Every regular file of the fixture, as a path relative to its ``sys``."""
    found = []
    for dirpath, _, names in os.walk(FIXTURE_SYS):
        for name in names:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                found.append(os.path.relpath(path, FIXTURE_SYS))
    return sorted(found)


def read_text(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


class TreeCase(unittest.TestCase):
    """Each test gets its own copy of the fixture under a temp root, to spoil at will."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="rowfleet-sensors-")
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
        self.sys = os.path.join(self.root, "sys")
        shutil.copytree(FIXTURE_SYS, self.sys, symlinks=True)

    def write(self, relative: str, text: str) -> None:
        path = os.path.join(self.sys, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.remove(path)
        with open(path, "w", encoding="utf-8") as file:
            file.write(text)

    def link(self, relative: str, target: str) -> None:
        path = os.path.join(self.sys, relative)
        if os.path.lexists(path):
            os.remove(path)
        os.symlink(target, path)

    def read(self) -> SensorReading:
        return sensors.read_sensors(self.root)

    def temperature(self, hwmon: str, sensor: str) -> HwmonTemperature:
        reading = self.read()
        found = [t for t in reading.temperatures if (t.hwmon, t.sensor) == (hwmon, sensor)]
        self.assertEqual(len(found), 1, f"{hwmon}/{sensor} in {reading.temperatures}")
        return found[0]

    def rapl(self, zone: str) -> RaplZone:
        found = [z for z in self.read().rapl_zones if z.zone == zone]
        self.assertEqual(len(found), 1, zone)
        return found[0]


class FixtureTreeTest(TreeCase):
    def test_the_fixture_keeps_the_relative_symlinks_of_real_sysfs(self):
        # The tests below walk through these links; a copy that flattened them would test nothing.
        for relative in ("class/hwmon/hwmon0", "class/hwmon/hwmon2", "class/thermal/thermal_zone0",
                         "devices/platform/applesmc.768/hwmon/hwmon2/device"):
            with self.subTest(relative):
                path = os.path.join(self.sys, relative)
                self.assertTrue(os.path.islink(path))
                self.assertFalse(os.path.isabs(os.readlink(path)))
                self.assertTrue(os.path.isdir(path))

    def test_reads_every_temperature_and_limit_of_the_fixture(self):
        self.assertEqual(self.read().temperatures, FIXTURE_TEMPERATURES)

    def test_chips_without_temperatures_give_none(self):
        # applesmc (old layout, fans only), nct6779 (volts, fans, pwm), bogus, the two asus (pwm only).
        chips = {t.hwmon for t in self.read().temperatures}
        for hwmon in ("hwmon2", "hwmon3", "hwmon5", "hwmon6", "hwmon7"):
            with self.subTest(hwmon):
                self.assertNotIn(hwmon, chips)

    def test_reads_the_thermal_zone_and_not_the_cooling_device(self):
        self.assertEqual(self.read().thermal_zones, FIXTURE_ZONES)

    def test_reads_rapl_zones_and_sub_zones_but_not_the_control_dir(self):
        self.assertEqual(self.read().rapl_zones, FIXTURE_RAPL)

    def test_the_hottest_is_the_wifi_chip(self):
        self.assertEqual(sensors.hottest_celsius(self.read()), 57.0)

    def test_old_kernel_layout_reads_temperatures_from_the_device(self):
        # applesmc's hwmon2 holds only a ``device`` link; its name and attributes are there.
        self.write("devices/platform/applesmc.768/temp1_input", "61000\n")
        self.write("devices/platform/applesmc.768/temp1_label", "TC0P\n")
        self.assertEqual(self.temperature("hwmon2", "temp1"),
                         HwmonTemperature("hwmon2", "applesmc", "temp1", "TC0P", 61.0, None, None))

    def test_temperatures_are_in_sensor_number_order(self):
        self.write(os.path.join(CORETEMP0, "temp10_input"), "70000\n")
        sensors_of_hwmon0 = [t.sensor for t in self.read().temperatures if t.hwmon == "hwmon0"]
        self.assertEqual(sensors_of_hwmon0, ["temp1", "temp2", "temp3", "temp4", "temp5", "temp10"])

    def test_a_chip_that_lost_its_name_keeps_its_temperatures(self):
        os.remove(os.path.join(self.sys, CORETEMP0, "name"))
        self.assertEqual(self.temperature("hwmon0", "temp2"),
                         HwmonTemperature("hwmon0", None, "temp2", "Core 0", 54.0, 84.0, 100.0))


class FixtureFilesTest(unittest.TestCase):
    """Every attribute the reader takes from the fixture parses as the ABI says it should."""

    def test_every_temperature_attribute_is_a_temperature(self):
        files = [f for f in fixture_files() if re.fullmatch(r"temp[0-9]+_(input|max|crit)", os.path.basename(f))]
        self.assertEqual(len(files), 39)  # 2 coretemp chips x 5 sensors x 3, hwmon4: 2 x 3, 3 Wi-Fi inputs
        for relative in files:
            with self.subTest(relative):
                celsius = sensors.parse_millicelsius(read_text(os.path.join(FIXTURE_SYS, relative)))
                self.assertIsNotNone(celsius)
                self.assertTrue(0 < celsius <= 100)

    def test_every_energy_counter_is_a_counter_within_its_range(self):
        zones = [os.path.dirname(f) for f in fixture_files() if os.path.basename(f) == "energy_uj"]
        self.assertEqual(len(zones), 2)
        for zone in zones:
            with self.subTest(zone):
                energy = sensors.parse_sysfs_integer(read_text(os.path.join(FIXTURE_SYS, zone, "energy_uj")))
                limit = sensors.parse_sysfs_integer(read_text(os.path.join(FIXTURE_SYS, zone, "max_energy_range_uj")))
                self.assertEqual(limit, WRAP_UJ)
                self.assertTrue(0 <= energy <= limit)

    def test_every_name_and_label_is_text(self):
        files = [f for f in fixture_files() if re.fullmatch(r"name|type|temp[0-9]+_label", os.path.basename(f))]
        self.assertGreater(len(files), 20)
        for relative in files:
            with self.subTest(relative):
                text = sensors.parse_sysfs_text(read_text(os.path.join(FIXTURE_SYS, relative)))
                self.assertTrue(text and text == text.strip())


class HostileTreeTest(TreeCase):
    """A spoiled attribute costs that one value, never the reading."""

    def test_a_bad_temperature_input_reads_as_unknown(self):
        cases = {
            "garbage": "garbage\n",
            "empty": "",
            "huge number": "9" * 30 + "\n",
            "more digits than int() accepts": "9" * 5000,
            "an error value": "2147483647\n",
            "below absolute zero": "-274000\n",
            "a float": "55.0\n",
            "binary": "\x00\xff\xfe",
            "longer than a page": "55000" + " " * 5000,
        }
        for case, text in cases.items():
            with self.subTest(case):
                self.write(os.path.join(CORETEMP0, "temp2_input"), text)
                self.assertEqual(self.temperature("hwmon0", "temp2"),
                                 HwmonTemperature("hwmon0", "coretemp", "temp2", "Core 0", None, 84.0, 100.0))
                self.assertEqual(self.temperature("hwmon0", "temp3").celsius, 52.0)

    def test_an_unreadable_temperature_input_reads_as_unknown(self):
        path = os.path.join(self.sys, CORETEMP0, "temp2_input")
        cases = {
            "a directory": lambda: (os.remove(path), os.mkdir(path)),
            "a dangling symlink": lambda: self.link(os.path.join(CORETEMP0, "temp2_input"), "../nowhere/temp2_input"),
            "a symlink loop": lambda: self.link(os.path.join(CORETEMP0, "temp2_input"), "temp2_input"),
        }
        for case, spoil in cases.items():
            with self.subTest(case):
                if os.path.isdir(path) and not os.path.islink(path):
                    os.rmdir(path)
                spoil()
                self.assertIsNone(self.temperature("hwmon0", "temp2").celsius)

    def test_a_bad_label_falls_back_to_the_sensor_and_bad_limits_are_unknown(self):
        self.write(os.path.join(CORETEMP0, "temp2_label"), "\n")
        self.write(os.path.join(CORETEMP0, "temp2_max"), "garbage")
        os.remove(os.path.join(self.sys, CORETEMP0, "temp2_crit"))
        self.assertEqual(self.temperature("hwmon0", "temp2"),
                         HwmonTemperature("hwmon0", "coretemp", "temp2", "temp2", 54.0, None, None))

    def test_a_hwmon_entry_that_leads_nowhere_is_left_out(self):
        cases = {
            "dangling symlink": lambda: self.link(os.path.join(HWMON, "hwmon11"), "../../devices/platform/gone/hwmon/hwmon11"),
            "plain file": lambda: self.write(os.path.join(HWMON, "hwmon11"), "../../devices/platform/coretemp.0/hwmon/hwmon0"),
            "a hwmon dir with no attributes": lambda: os.mkdir(os.path.join(self.sys, HWMON, "hwmon11")),
        }
        for case, spoil in cases.items():
            with self.subTest(case):
                spoil()
                self.assertEqual(self.read().temperatures, FIXTURE_TEMPERATURES)
                target = os.path.join(self.sys, HWMON, "hwmon11")
                (os.rmdir if os.path.isdir(target) and not os.path.islink(target) else os.remove)(target)

    def test_a_bad_thermal_zone(self):
        zone = os.path.join("devices", "virtual", "thermal", "thermal_zone0")
        cases = {
            "garbage temp": ({"temp": "garbage\n"}, ThermalZone("thermal_zone0", "cpu-thermal", None)),
            "empty temp and type": ({"temp": "", "type": ""}, ThermalZone("thermal_zone0", None, None)),
            "huge temp": ({"temp": "1" * 25}, ThermalZone("thermal_zone0", "cpu-thermal", None)),
            "negative temp": ({"temp": "-5500\n"}, ThermalZone("thermal_zone0", "cpu-thermal", -5.5)),
        }
        for case, (files, expected) in cases.items():
            with self.subTest(case):
                self.write(os.path.join(zone, "type"), "cpu-thermal\n")
                for name, text in files.items():
                    self.write(os.path.join(zone, name), text)
                self.assertEqual(self.read().thermal_zones, (expected,))

    def test_a_dangling_thermal_zone_is_left_out_and_others_are_ordered_by_number(self):
        self.link(os.path.join("class", "thermal", "thermal_zone1"), "../../devices/virtual/thermal/gone")
        os.makedirs(os.path.join(self.sys, "class", "thermal", "thermal_zone10"))
        self.write(os.path.join("class", "thermal", "thermal_zone10", "temp"), "40000\n")
        self.write(os.path.join("class", "thermal", "thermal_zone2", "temp"), "30000\n")
        self.assertEqual([z.zone for z in self.read().thermal_zones], ["thermal_zone0", "thermal_zone2", "thermal_zone10"])

    def test_a_bad_energy_counter_reads_as_unknown(self):
        cases = {"garbage": "garbage", "empty": "", "negative": "-1\n", "huge": "9" * 40}
        for case, text in cases.items():
            with self.subTest(case):
                self.write(os.path.join(RAPL0, "energy_uj"), text)
                self.assertEqual(self.rapl("intel-rapl:0"), RaplZone("intel-rapl:0", "package-0", None, WRAP_UJ))

    def test_an_energy_counter_only_root_may_read_reads_as_unknown(self):
        # Since Linux 5.10 energy_uj is mode 0400. Tests may run as root, where a chmod
        # changes nothing, so the refusal is injected at open().
        real_open = builtins.open

        def refusing_open(path, *args, **kwargs):
            if os.path.basename(str(path)) == "energy_uj":
                raise PermissionError(13, "Permission denied", path)
            return real_open(path, *args, **kwargs)

        with mock.patch("builtins.open", refusing_open):
            reading = self.read()
        self.assertEqual(reading.rapl_zones, (RaplZone("intel-rapl:0", "package-0", None, WRAP_UJ),
                                              RaplZone("intel-rapl:0:0", "core", None, WRAP_UJ)))
        self.assertEqual(reading.temperatures, FIXTURE_TEMPERATURES)

    def test_a_zero_or_bad_range_is_unknown(self):
        for text in ("0\n", "-1\n", "garbage"):
            with self.subTest(text):
                self.write(os.path.join(RAPL0, "max_energy_range_uj"), text)
                self.assertIsNone(self.rapl("intel-rapl:0").max_energy_range_uj)

    def test_power_from_two_readings_of_the_tree_unwraps_the_counter(self):
        before = self.rapl("intel-rapl:0")
        self.write(os.path.join(RAPL0, "energy_uj"), "1000000000\n")  # went down: wrapped
        after = self.rapl("intel-rapl:0")
        expected = (WRAP_UJ - 240422366267 + 1000000000) / 1e6 / 60.0
        self.assertAlmostEqual(sensors.rapl_power(before, after, 60.0), expected)
        self.assertAlmostEqual(expected, 378.68, places=2)

    def test_a_hostile_tree_never_raises(self):
        # Every kind of spoiling at once.
        self.write(os.path.join(CORETEMP0, "temp1_input"), "\x00" * 10000)
        self.link(os.path.join(HWMON, "hwmon3"), "../../devices/platform/gone")
        self.link(os.path.join("class", "thermal", "thermal_zone0"), "thermal_zone0")
        self.write(os.path.join(RAPL0, "name"), "\ufffd" * 3)
        os.remove(os.path.join(self.sys, RAPL0, "max_energy_range_uj"))
        reading = self.read()
        self.assertEqual(reading.thermal_zones, ())
        self.assertIsNone(self.temperature("hwmon0", "temp1").celsius)
        self.assertEqual(self.rapl("intel-rapl:0").max_energy_range_uj, None)
        self.assertEqual(sensors.hottest_celsius(reading), 57.0)


class AbsentTest(unittest.TestCase):
    def test_a_machine_like_this_one_reads_as_empty(self):
        # /sys/class/thermal exists but is empty; hwmon and powercap do not exist.
        root = tempfile.mkdtemp(prefix="rowfleet-sensors-")
        self.addCleanup(shutil.rmtree, root, ignore_errors=True)
        os.makedirs(os.path.join(root, "sys", "class", "thermal"))
        self.assertEqual(sensors.read_sensors(root), SensorReading())
        self.assertIsNone(sensors.hottest_celsius(sensors.read_sensors(root)))

    def test_a_root_that_does_not_exist_reads_as_empty(self):
        self.assertEqual(sensors.read_sensors(os.path.join(tempfile.gettempdir(), "rowfleet-no-such-root")), SensorReading())

    def test_the_real_sys_reads_what_it_lists(self):
        reading = sensors.read_sensors("/")
        self.assertIsInstance(reading, SensorReading)
        thermal = "/sys/class/thermal"
        listed = sorted(n for n in (os.listdir(thermal) if os.path.isdir(thermal) else [])
                        if re.fullmatch(r"thermal_zone[0-9]+", n) and os.path.isdir(os.path.join(thermal, n)))
        self.assertEqual(sorted(z.zone for z in reading.thermal_zones), listed)
        if not os.path.isdir("/sys/class/hwmon"):
            self.assertEqual(reading.temperatures, ())
        if not os.path.isdir("/sys/class/powercap"):
            self.assertEqual(reading.rapl_zones, ())


class ParserTest(unittest.TestCase):
    def test_parse_sysfs_integer(self):
        cases = {
            "55000\n": 55000, "-0": 0, "  7  ": 7, "18446744073709551615": 2 ** 64 - 1,
            "": None, " \n": None, "abc": None, "55000abc": None, "55 000": None, "1e5": None, "0x10": None,
            "+5": None, "5.0": None, "\u00b2": None, "\u0661\u0662": None, "9" * 21: None, "9" * 5000: None,
            "55000\n\n": 55000, "--5": None,
        }
        for text, expected in cases.items():
            with self.subTest(text=text[:30]):
                self.assertEqual(sensors.parse_sysfs_integer(text), expected)
        self.assertIsNone(sensors.parse_sysfs_integer(None))

    def test_parse_millicelsius_keeps_what_a_sensor_can_report(self):
        cases = {"0": 0.0, "-273150": -273.15, "-273151": None, "10000000": 10000.0, "10000001": None,
                 "127000": 127.0, "1": 0.001, "garbage": None, None: None}
        for text, expected in cases.items():
            with self.subTest(text=text):
                self.assertEqual(sensors.parse_millicelsius(text), expected)

    def test_temperatures_of_ignores_every_other_kind_of_sensor(self):
        attributes = {name: "55000\n" for name in (
            "in0_input", "fan2_input", "pwm1", "freq1_input", "bogus1_input", "power1_input", "curr1_input",
            "temp_input", "temp1_inputx", "xtemp1_input", "temp1_max", "temp1_crit", "temp1_label")}
        self.assertEqual(sensors.temperatures_of("hwmon3", "nct6779", attributes), [])
        attributes["temp1_input"] = "40000\n"
        self.assertEqual(sensors.temperatures_of("hwmon3", "nct6779", attributes),
                         [HwmonTemperature("hwmon3", "nct6779", "temp1", "55000", 40.0, 55.0, 55.0)])

    def test_temperatures_of_an_unread_attribute_is_unknown(self):
        self.assertEqual(sensors.temperatures_of("hwmon0", "coretemp", {"temp1_input": None, "temp1_label": None}),
                         [HwmonTemperature("hwmon0", "coretemp", "temp1", "temp1", None, None, None)])


class HottestTest(unittest.TestCase):
    def test_table(self):
        zone = lambda c: ThermalZone("thermal_zone0", "acpitz", c)
        temp = lambda c: HwmonTemperature("hwmon0", "k10temp", "temp1", "Tctl", c, None, None)
        cases = [
            (SensorReading(), None),
            (SensorReading(thermal_zones=(zone(None),), temperatures=(temp(None),)), None),
            (SensorReading(thermal_zones=(zone(41.0),)), 41.0),
            (SensorReading(temperatures=(temp(-5.5), temp(-20.0))), -5.5),
            (SensorReading(thermal_zones=(zone(90.5),), temperatures=(temp(63.5), temp(None))), 90.5),
            (SensorReading(thermal_zones=(zone(41.0),), temperatures=(temp(63.5),)), 63.5),
        ]
        for reading, expected in cases:
            with self.subTest(reading=reading):
                self.assertEqual(sensors.hottest_celsius(reading), expected)


class RaplPowerTest(unittest.TestCase):
    def test_table(self):
        package = lambda uj, limit=WRAP_UJ, zone="intel-rapl:0": RaplZone(zone, "package-0", uj, limit)
        e0 = FIXTURE_RAPL[0].energy_uj
        cases = {
            "steady": (package(e0), package(e0 + 95_000_000), 1.0, 95.0),
            "idle": (package(e0), package(e0), 5.0, 0.0),
            "wrapped": (package(e0), package(1_000_000), 2.0, (WRAP_UJ - e0 + 1_000_000) / 2e6),
            "wrapped at the very top": (package(WRAP_UJ), package(0), 1.0, 0.0),
            "first energy unknown": (package(None), package(e0), 1.0, None),
            "second energy unknown": (package(e0), package(None), 1.0, None),
            "went down, range unknown": (package(e0, None), package(1, None), 1.0, None),
            "went up, range unknown": (package(1, None), package(1_000_001, None), 1.0, 1.0),
            "range changed": (package(e0), package(e0 + 1, WRAP_UJ - 1), 1.0, None),
            "different zones": (package(e0), package(e0 + 1, zone="intel-rapl:0:0"), 1.0, None),
            "counter past its range": (package(WRAP_UJ + 5), package(1), 1.0, None),
            "no time": (package(e0), package(e0 + 1), 0.0, None),
            "negative time": (package(e0), package(e0 + 1), -1.0, None),
            "nan time": (package(e0), package(e0 + 1), math.nan, None),
            "infinite time": (package(e0), package(e0 + 1), math.inf, None),
        }
        for case, (t0, t1, seconds, expected) in cases.items():
            with self.subTest(case):
                power = sensors.rapl_power(t0, t1, seconds)
                if expected is None:
                    self.assertIsNone(power)
                else:
                    self.assertAlmostEqual(power, expected)


if __name__ == "__main__":
    unittest.main()
