"""Tests of the GPU state and clock-event readings: ``--query-gpu`` CSV and ``-q`` text.

The parsers run against every captured output under ``fixtures/hw/nvidia-smi`` (the
``--query-gpu`` CSVs, the ``--query-gpu`` and ``-q`` sections of the full captures; see its
README) and against hostile text; the runners against the fake nvidia-smi in
``fixtures/bin``, which answers from the same captures, and against a missing, failing,
hung and old-driver nvidia-smi.
"""

from __future__ import annotations

import os
import sys
import time
import unittest

from rowfleet.telemetry import gpu, gpu_readings
from rowfleet.telemetry.text import is_placeholder
from rowfleet.telemetry.gpu_readings import GpuPerformance, GpuState
from support import DEADLINE, NVIDIA_SMI_FAILURES, read_fixture, TempDirTestCase

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVIDIA_SMI = os.path.join(HERE, "fixtures", "hw", "nvidia-smi")
CAPTURES = os.path.join(NVIDIA_SMI, "captures")
QUERY_GPU = os.path.join(NVIDIA_SMI, "query-gpu")
FAKE_NVIDIA_SMI = os.path.join(HERE, "fixtures", "bin", "nvidia-smi")
UUID0 = "GPU-00000000-0000-0000-0000-000000000000"  # the exporter captures mask their UUIDs
H100_BUS = "00000000:00:09.0"

# Each GpuState attribute read from one field, for the check that a value is None exactly
# where nvidia-smi printed a placeholder.
FIELD_OF = {
    "index": "index", "uuid": "uuid", "name": "name", "temperature_c": "temperature.gpu",
    "memory_temperature_c": "temperature.memory", "power_draw_w": "power.draw", "power_limit_w": "power.limit",
    "enforced_power_limit_w": "enforced.power.limit", "sm_clock_mhz": "clocks.current.sm",
    "memory_clock_mhz": "clocks.current.memory", "max_sm_clock_mhz": "clocks.max.sm",
    "utilization_percent": "utilization.gpu", "memory_utilization_percent": "utilization.memory",
    "memory_used_mib": "memory.used", "memory_total_mib": "memory.total", "pstate": "pstate",
    "fan_percent": "fan.speed", "mig_enabled": "mig.mode.current", "event_reasons": "clocks_event_reasons.active",
}

# Every --query-gpu capture of all fields -> temperature, memory temperature, power draw,
# SM clock, utilization, pstate, fan, MIG mode, active clock-event reasons.
ALLFIELDS = {
    "query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-idle.csv": (41, 48, 69.85, 345, 0, 0, None, False, ("gpu_idle",)),
    "query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-load.csv": (59, 54, 631.95, 1980, 100, 0, None, False, ()),
    "query-gpu-allfields-linux-h100-mig-590.48.01-idle.csv": (42, 48, 71.15, 345, None, 0, None, True, ("gpu_idle",)),
    "query-gpu-allfields-linux-h100-mig-590.48.01-load.csv": (53, 59, 433.78, 1980, None, 0, None, True, ()),
    "query-gpu-allfields-linux-h200-mig-590.48.01-idle.csv": (28, 32, 78.28, 345, None, 0, None, True, ("gpu_idle",)),
    "query-gpu-allfields-linux-h200-mig-590.48.01-load.csv": (36, 39, 295.01, 1980, None, 0, None, True, ()),
    "query-gpu-allfields-linux-l40s-595.80-idle.csv": (63, None, 144.97, 2520, 100, 0, None, None, ()),
    "query-gpu-allfields-linux-l40s-595.80-load.csv": (54, None, 110.23, 2520, 9, 0, None, None, ()),
    "query-gpu-allfields-linux-rtx-2080-super-595.71.05-idle.csv": (40, None, 39.32, 765, 0, 8, 38, None, ("sw_power_cap",)),
    "query-gpu-allfields-linux-rtx-2080-super-595.71.05-load.csv": (45, None, 111.5, 2055, 8, 2, 38, None, ()),
    "query-gpu-allfields-linux-rtx-2080-super-610.57.04-idle.csv": (33, None, 39.17, 765, 0, 8, 38, None, ("gpu_idle",)),
    "query-gpu-allfields-linux-rtx-2080-super-610.57.04-load.csv": (38, None, 98.14, 2070, 8, 2, 38, None, ()),
    "query-gpu-allfields-linux-rtx-4080-super-595.71.05-idle.csv": (43, None, 26.2, 210, 0, 8, 0, None, ("gpu_idle",)),
    "query-gpu-allfields-linux-rtx-4080-super-595.71.05-load.csv": (46, None, 84.24, 2805, 7, 2, 0, None, ()),
    "query-gpu-allfields-rtx-2080-super-windows-471.11.csv": (36, None, 32.7, 111, 2, 8, 38, None, ("gpu_idle",)),
    "query-gpu-allfields-windows-rtx-2080-super-610.62-idle.csv": (40, None, 39.25, 300, 0, 8, 38, None, ("gpu_idle",)),
    "query-gpu-allfields-windows-rtx-2080-super-610.62-load.csv": (44, None, 97.99, 2040, 7, 2, 38, None, ()),
}
# The old drivers' full captures, whose --query-gpu sections say clocks_throttle_reasons.*:
# the same columns as above, plus memory used and total.
LEGACY = {
    "legacy-linux-rtx-2080-super__465.27.txt": (32, None, 30.37, 300, 0, 8, 38, None, ("gpu_idle",), 344, 7979),
    "legacy-windows-rtx-2080-super__466.63.txt": (35, None, 31.12, 300, 0, 8, 38, None, ("gpu_idle",), 856, 8192),
}
# Every capture with -q sections -> bus id, then idle and load: pstate, active reasons,
# SW power cap counter (us); and the seconds of SW power capping between the two.
PERFORMANCE = {
    "linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt":
        ("00000000:0C:00.0", (8, ("gpu_idle",), 212288427), (2, (), 221310321), 9.021894),
    "linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt":
        ("00000000:0C:00.0", (8, ("gpu_idle",), 15814235622), (2, (), 15820333506), 6.097884),
    "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt":
        ("00000000:01:00.0", (8, ("gpu_idle",), 0), (2, (), 0), 0.0),
    "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt": (H100_BUS, (0, ("gpu_idle",), 0), (0, (), 0), 0.0),
    "linux-x86_64__nvidia-h100-mig__590.48.01.txt": (H100_BUS, (0, ("gpu_idle",), 0), (0, (), 0), 0.0),
    "linux-x86_64__nvidia-h200-mig__590.48.01.txt": ("00000000:83:00.0", (0, ("gpu_idle",), 0), (0, (), 0), 0.0),
    "linux-x86_64__nvidia-l40s__595.80.txt": ("00000000:01:00.0", (0, (), 200740215), (0, (), 204642816), 3.902601),
    "windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt":
        ("00000000:0C:00.0", (8, ("gpu_idle",), 824547036), (2, (), 834002687), 9.455651),
}


def capture_sections(text: str) -> dict[str, str]:
    """A full capture's sections by title: ``idle :: query (-q)`` and the like, each the
    output under its ``# $ command`` line and rule; in the old layout, the output under
    each ``# nvidia-smi ...`` line, titled by that command."""
    lines = text.splitlines()
    sections: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if " :: " in line and line.startswith("# ") and i + 2 < len(lines) and lines[i + 2].startswith("####"):
            end = next((k for k in range(i + 3, len(lines)) if lines[k].startswith("####")), len(lines))
            sections[line[2:]] = "\n".join(lines[i + 3:end]) + "\n"
            i = end
        elif line.startswith("# nvidia-smi "):
            end = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("# ")), len(lines))
            sections[line[2:]] = "\n".join(lines[i + 1:end]) + "\n"
            i = end
        else:
            i += 1
    return sections


def legacy_query_gpu(name: str) -> str:
    sections = capture_sections(read_fixture(CAPTURES, name))
    return next(text for title, text in sections.items() if title.startswith("nvidia-smi --query-gpu="))


def performance_sections(name: str) -> tuple[str, str]:
    sections = capture_sections(read_fixture(CAPTURES, name))
    return sections["idle :: query (-q)"], sections["load :: query (-q)"]


def summary(state: GpuState) -> tuple:
    return (state.temperature_c, state.memory_temperature_c, state.power_draw_w, state.sm_clock_mhz,
            state.utilization_percent, state.pstate, state.fan_percent, state.mig_enabled, state.event_reasons)


class QueryGpuCapturesTest(unittest.TestCase):
    def test_the_table_covers_every_allfields_capture(self):
        names = sorted(name for name in os.listdir(QUERY_GPU) if name.startswith("query-gpu-allfields-"))
        self.assertEqual(names, sorted(ALLFIELDS))

    def test_every_allfields_capture(self):
        for name, expected in ALLFIELDS.items():
            with self.subTest(capture=name):
                states = gpu_readings.parse_gpu_states(read_fixture(QUERY_GPU, name))
                self.assertEqual(len(states), 1)
                state = states[0]
                self.assertEqual(summary(state), expected)
                self.assertEqual(state.index, 0)
                self.assertTrue(state.name.startswith("NVIDIA "))
                self.assertTrue(state.uuid.startswith("GPU-"))
                self.assertGreater(state.memory_total_mib, 0)
                self.assertGreaterEqual(state.max_sm_clock_mhz, state.sm_clock_mhz)
                self.assertGreaterEqual(state.enforced_power_limit_w, 100)

    def test_the_old_drivers_full_captures(self):
        for name, expected in LEGACY.items():
            with self.subTest(capture=name):
                text = legacy_query_gpu(name)
                self.assertIn("clocks_throttle_reasons.active", text.splitlines()[0])
                (state,) = gpu_readings.parse_gpu_states(text)
                self.assertEqual(summary(state) + (state.memory_used_mib, state.memory_total_mib), expected)
                self.assertEqual((state.power_limit_w, state.enforced_power_limit_w), (250.0, 250.0))

    def test_a_value_is_none_exactly_where_nvidia_smi_printed_a_placeholder(self):
        texts = {name: read_fixture(QUERY_GPU, name) for name in ALLFIELDS}
        texts.update({name: legacy_query_gpu(name) for name in LEGACY})
        for name, text in texts.items():
            (row,), _ = gpu.split_query_output(text, ["index"], gpu_readings.STATE_FIELD_ALIASES)
            (state,) = gpu_readings.parse_gpu_states(text)
            for attribute, field in FIELD_OF.items():
                with self.subTest(capture=name, field=field):
                    self.assertIn(field, row)
                    if attribute in ("utilization_percent", "memory_utilization_percent") and state.mig_enabled:
                        self.assertIsNone(getattr(state, attribute))
                        continue
                    self.assertEqual(getattr(state, attribute) is None, is_placeholder(row[field]), row[field])

    def test_the_same_columns_without_a_header(self):
        # What sample_gpu_states asks for (noheader), cut from each capture by header name.
        columns = [gpu.column_name(field, gpu_readings.STATE_FIELD_ALIASES) for field in gpu_readings.STATE_FIELDS]
        texts = {name: read_fixture(QUERY_GPU, name) for name in ALLFIELDS}
        texts.update({name: legacy_query_gpu(name) for name in LEGACY})
        for name, text in texts.items():
            with self.subTest(capture=name):
                (row,), _ = gpu.split_query_output(text, ["index"], gpu_readings.STATE_FIELD_ALIASES)
                headerless = ", ".join(row[column] for column in columns) + "\n"
                self.assertEqual(gpu_readings.parse_gpu_states(headerless), gpu_readings.parse_gpu_states(text))

    def test_the_other_query_gpu_captures(self):
        def state(name: str, fields=gpu_readings.STATE_FIELDS) -> GpuState:
            path = next(os.path.join(folder, name) for folder in (QUERY_GPU, os.path.join(QUERY_GPU, "from-issues"))
                        if os.path.exists(os.path.join(folder, name)))
            return gpu_readings.parse_gpu_states(read_fixture(path), fields)[0]

        p100 = state("query-gpu-csv-nounits-tesla-p100.csv")  # nounits values under a header with [units]
        self.assertEqual((p100.name, p100.fan_percent, p100.pstate, p100.power_draw_w, p100.sm_clock_mhz,
                          p100.memory_clock_mhz, p100.temperature_c, p100.event_reasons),
                         ("Tesla P100-PCIE-16GB", None, 0, 28.16, 405, 715, 37, None))
        windows = state("csv-nounits-unknown-error-rtx2080ti-windows-442.19.csv")
        self.assertEqual((windows.name, windows.utilization_percent, windows.power_draw_w, windows.power_limit_w,
                          windows.fan_percent, windows.memory_clock_mhz),
                         ("GeForce RTX 2080 Ti", 100, 228.82, 210.0, 56, 6800))
        self.assertEqual(state("csv-utilization-gpu-not-supported-gtx650-410.78.csv").utilization_percent, None)
        self.assertEqual(state("csv-utilization-memory-not-supported-gtx650-410.78.csv").memory_utilization_percent,
                         None)
        fields = ("memory.total", "memory.free", "memory.used", "temperature.gpu", "fan.speed", "utilization.gpu",
                  "utilization.memory")
        for name in ("noheader-nounits-fanspeed-na-newer-driver.csv",
                     "noheader-nounits-fanspeed-not-supported-older-driver.csv"):
            with self.subTest(capture=name):
                old = state(name, fields)
                self.assertEqual((old.memory_total_mib, old.temperature_c, old.fan_percent, old.utilization_percent),
                                 (2004, 44, None, 0))
        loop = gpu_readings.parse_gpu_states(read_fixture(QUERY_GPU, "from-issues", "csv-loop-rtx-520.56.06.csv"))
        self.assertEqual(len(loop), 13)
        self.assertEqual({(s.index, s.pstate, s.memory_clock_mhz) for s in loop}, {(0, 3, 5001)})
        two = gpu_readings.parse_gpu_states(read_fixture(QUERY_GPU, "query-gpu-2gpu-wddm-exporter-testdata.csv"))
        self.assertEqual([(s.index, s.fan_percent, s.memory_used_mib) for s in two], [(0, 38, 575), (1, 50, 1234)])


class StateRowTest(unittest.TestCase):
    def test_reasons_from_the_mask_or_else_the_flags(self):
        flags = {f"clocks_event_reasons.{name}": "Not Active" for name in gpu_readings.QUERIED_REASONS}
        cases = [  # row -> reasons
            ({"clocks_event_reasons.active": "0x0000000000000001"}, ("gpu_idle",)),
            ({"clocks_event_reasons.active": "0x00000000000000C4"},
             ("sw_power_cap", "hw_thermal_slowdown", "hw_power_brake_slowdown")),
            ({"clocks_event_reasons.active": "0x0000000000000100"}, ("display_clock_setting",)),
            ({"clocks_event_reasons.active": "0x0000000000000600"}, ("board_limit", "reliability")),
            ({"clocks_event_reasons.active": "0x0000000000000800"}, ("unknown_0x800",)),
            ({"clocks_event_reasons.active": "0x0", **flags, "clocks_event_reasons.sync_boost": "Active"}, ()),
            ({"clocks_event_reasons.active": "[N/A]", **flags, "clocks_event_reasons.sync_boost": "Active",
              "clocks_event_reasons.hw_slowdown": "Active"}, ("hw_slowdown", "sync_boost")),
            ({**flags}, ()),
            ({"clocks_throttle_reasons.active": "0x0000000000000020"}, ("sw_thermal_slowdown",)),
            ({"clocks_throttle_reasons.sw_power_cap": "Active"}, ("sw_power_cap",)),
            ({"clocks_event_reasons.active": "[Not Supported]", "clocks_event_reasons.gpu_idle": "[N/A]"}, None),
            ({"clocks_event_reasons.active": "0xFFFFFFFFFFFFFFFFF"}, None),  # 17 digits: not a 64-bit mask
            ({"clocks_event_reasons.active": "garbage"}, None),
            ({}, None),
        ]
        for row, reasons in cases:
            with self.subTest(row=row):
                self.assertEqual(gpu_readings.state_from_row(row).event_reasons, reasons)

    def test_hostile_values(self):
        cases = [  # field, value -> attribute, what it reads as
            ("temperature.gpu", "-5", "temperature_c", -5),
            ("temperature.gpu", "1e400", "temperature_c", None),
            ("temperature.memory", "N/A", "memory_temperature_c", None),
            ("power.draw", "-1.00 W", "power_draw_w", None),
            ("power.draw", "[Unknown Error]", "power_draw_w", None),
            ("power.draw", "inf", "power_draw_w", None),
            ("gpu.power.requested_limit", "300.00 W", "power_limit_w", 300.0),
            ("gpu.power.current_limit", "280.00", "enforced_power_limit_w", 280.0),
            ("clocks.sm", "1410 MHz", "sm_clock_mhz", 1410),
            ("clocks.mem", "1593", "memory_clock_mhz", 1593),
            ("memory.used", "99999999999999999999 MiB", "memory_used_mib", 10 ** 20),  # rounded, as a float is
            ("memory.used", "12 34", "memory_used_mib", None),
            ("fan.speed", "105 %", "fan_percent", 105),
            ("fan.speed", "[Not Supported]", "fan_percent", None),
            ("pstate", "P16", "pstate", None),
            ("pstate", "[Insufficient Permissions]", "pstate", None),
            ("mig.mode.current", "Enabled", "mig_enabled", True),
            ("mig.mode.current", "Pending", "mig_enabled", None),
            ("uuid", "[N/A]", "uuid", None),
            ("index", "-1", "index", None),
        ]
        for field, value, attribute, expected in cases:
            with self.subTest(field=field, value=value):
                self.assertEqual(getattr(gpu_readings.state_from_row({field: value}), attribute), expected)

    def test_utilization_is_unknown_in_mig_mode(self):
        row = {"utilization.gpu": "55 %", "utilization.memory": "12 %"}
        self.assertEqual(summary(gpu_readings.state_from_row({**row, "mig.mode.current": "Disabled"}))[4], 55)
        state = gpu_readings.state_from_row({**row, "mig.mode.current": "Enabled"})
        self.assertEqual((state.utilization_percent, state.memory_utilization_percent), (None, None))

    def test_hostile_text(self):
        line = read_fixture(QUERY_GPU, "query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-load.csv")
        cases = [  # text -> states read
            ("", 0),
            ("\x00\xff garbage \x1b[31m\n", 0),
            ("0, GPU-1a, T4\n", 0),  # truncated: 3 values for 27 columns
            (line, 1),
            (line[: len(line) // 2], 0),  # cut inside the row
            (line + line.splitlines()[1][:40] + "\n", 1),  # a second, truncated row
            ("WARNING: infoROM is corrupted at gpu 0000:04:00.0\n" + line, 1),
            (line.replace("\n", "\r\n"), 1),
        ]
        for text, count in cases:
            with self.subTest(text=text[:40]):
                self.assertEqual(len(gpu_readings.parse_gpu_states(text)), count)


class PerformanceCapturesTest(unittest.TestCase):
    def test_the_table_covers_every_capture_with_q_sections(self):
        with_q = sorted(name for name in os.listdir(CAPTURES)
                        if "idle :: query (-q)" in capture_sections(read_fixture(CAPTURES, name)))
        self.assertEqual(with_q, sorted(PERFORMANCE))

    def test_every_capture(self):
        for name, (bus_id, idle, load, capped) in PERFORMANCE.items():
            with self.subTest(capture=name):
                readings = []
                for text, (pstate, reasons, sw_power_cap_us) in zip(performance_sections(name), (idle, load)):
                    (reading,) = gpu_readings.parse_performance(text)
                    self.assertEqual((reading.bus_id, reading.pstate, reading.event_reasons, reading.sw_power_cap_us),
                                     (bus_id, pstate, reasons, sw_power_cap_us))
                    self.assertEqual((reading.sync_boost_us, reading.sw_thermal_slowdown_us,
                                      reading.hw_thermal_slowdown_us, reading.hw_power_brake_slowdown_us), (0, 0, 0, 0))
                    readings.append(reading)
                seconds = gpu_readings.throttle_seconds(*readings)
                self.assertEqual(list(seconds), list(gpu_readings.COUNTER_REASONS))
                self.assertAlmostEqual(seconds["sw_power_cap"], capped, places=6)
                self.assertEqual([seconds[r] for r in gpu_readings.COUNTER_REASONS[1:]], [0.0, 0.0, 0.0, 0.0])
                self.assertEqual(set(gpu_readings.throttle_seconds(readings[1], readings[0]).values()) - {0.0},
                                 {None} if capped else set())  # the counter going backwards

    def test_the_old_spelling(self):
        # Drivers before R535 head the section "Clocks Throttle Reasons" (shared fixtures
        # README section 3); no capture here has one, so the real text is renamed back.
        for name in PERFORMANCE:
            for text in performance_sections(name):
                with self.subTest(capture=name):
                    old = text.replace("Clocks Event Reasons", "Clocks Throttle Reasons")
                    self.assertNotEqual(old, text)
                    self.assertEqual(gpu_readings.parse_performance(old), gpu_readings.parse_performance(text))

    def test_one_gpus_counters_never_spill_into_the_next(self):
        idle, _ = performance_sections("linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt")
        head, _, block = idle.partition("GPU 00000000:0C:00.0\n")
        without_counters = "".join(line + "\n" for line in block.splitlines()
                                   if "Counters" not in line and " us" not in line)
        two = head + "GPU 00000000:0C:00.0\n" + block + "GPU 00000000:0D:00.0\n" + without_counters
        first, second = gpu_readings.parse_performance(two)
        self.assertEqual((first.bus_id, first.sw_power_cap_us), ("00000000:0C:00.0", 212288427))
        self.assertEqual((second.bus_id, second.pstate, second.event_reasons, second.sw_power_cap_us),
                         ("00000000:0D:00.0", 8, ("gpu_idle",), None))
        self.assertEqual(gpu_readings.throttle_seconds(first, second)["sw_power_cap"], None)

    def test_hostile_text(self):
        idle, _ = performance_sections("linux-x86_64__nvidia-l40s__595.80.txt")
        cases = [  # text -> bus ids, SW power cap counters
            ("", [], []),
            ("\x00\xff\x1b[31mgarbage\n:::\n", [], []),
            ("No devices were found\n", [], []),
            (idle[: idle.index("SW Power Capping")], ["00000000:01:00.0"], [None]),  # cut before the counters
            (idle.replace("\n", "\r\n"), ["00000000:01:00.0"], [200740215]),
            (idle.replace("    ", "\t"), ["00000000:01:00.0"], [200740215]),
            (idle.replace("200740215 us", "-5 us"), ["00000000:01:00.0"], [None]),
            (idle.replace("200740215 us", "N/A"), ["00000000:01:00.0"], [None]),
            # Rounded as a float is: exact to 2**53 us, which no counter reaches in 285 years.
            (idle.replace("200740215 us", "99999999999999999999 us"), ["00000000:01:00.0"], [10 ** 20]),
            (idle.replace("GPU 00000000:01:00.0", "GPU garbage"), [], []),
            ("        SW Power Capping : 5 us\n", [], []),  # counters outside any GPU's block
            ("GPU 00000000:01:00.0\n    MIG Devices\n        Clocks Event Reasons Counters\n"
             "            SW Power Capping : 5 us\n", ["00000000:01:00.0"], [None]),  # not the GPU's own section
        ]
        for text, bus_ids, counters in cases:
            with self.subTest(text=text[-60:]):
                gpus = gpu_readings.parse_performance(text)
                self.assertEqual([g.bus_id for g in gpus], bus_ids)
                self.assertEqual([g.sw_power_cap_us for g in gpus], counters)

    def test_throttle_seconds(self):
        def reading(bus_id="00000000:0C:00.0", **counters) -> GpuPerformance:
            return GpuPerformance(bus_id, 0, (), **counters)

        cases = [  # t0, t1 -> seconds of SW power capping, of HW thermal slowdown
            (reading(sw_power_cap_us=1_000_000), reading(sw_power_cap_us=3_500_000), 2.5, None),
            (reading(sw_power_cap_us=3_500_000), reading(sw_power_cap_us=10), None, None),  # a reboot
            (reading(hw_thermal_slowdown_us=7), reading(hw_thermal_slowdown_us=7), None, 0.0),
            (reading(sw_power_cap_us=1), reading("00000000:0D:00.0", sw_power_cap_us=2), None, None),
            (reading(None, sw_power_cap_us=1), reading(sw_power_cap_us=2_000_001), 2.0, None),
        ]
        for t0, t1, capped, thermal in cases:
            with self.subTest(t0=t0, t1=t1):
                seconds = gpu_readings.throttle_seconds(t0, t1)
                self.assertEqual((seconds["sw_power_cap"], seconds["hw_thermal_slowdown"]), (capped, thermal))


class SampleTest(TempDirTestCase):
    """The runners against the fake nvidia-smi, a missing one, an old driver, and one that never answers."""

    def write(self, name: str, text: str, mode: int = 0o644) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(path, mode)
        return path

    def test_machines(self):
        cases = [  # FAKE_NVIDIA_SMI -> the capture its state answers from, its performance sample
            ("idle", "query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-idle.csv",
             GpuPerformance(H100_BUS, 0, ("gpu_idle",), 0, 0, 0, 0, 0)),
            ("busy", "query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-load.csv",
             GpuPerformance(H100_BUS, 0, (), 0, 0, 0, 0, 0)),
            ("mig", "query-gpu-allfields-linux-h100-mig-590.48.01-load.csv",
             GpuPerformance(H100_BUS, 0, (), 0, 0, 0, 0, 0)),
        ]
        for machine, capture, performance in cases:
            with self.subTest(machine=machine):
                self.patch_environ(FAKE_NVIDIA_SMI=machine)
                sample = gpu_readings.sample_gpu_states(command=FAKE_NVIDIA_SMI)
                self.assertEqual((sample.unknown, sample.skipped, sample.left_out), (None, (), ()))
                self.assertEqual(sample.states, tuple(gpu_readings.parse_gpu_states(read_fixture(QUERY_GPU, capture))))
                self.assertEqual(summary(sample.states[0]), ALLFIELDS[capture])
                self.assertEqual(sample.states[0].uuid, UUID0)
                self.assertEqual(gpu_readings.sample_performance(command=FAKE_NVIDIA_SMI),
                                 gpu_readings.GpuPerformanceSample(gpus=(performance,)))

    def test_every_capture_through_the_runners(self):
        for name in ALLFIELDS:
            with self.subTest(capture=name):
                self.patch_environ(FAKE_NVIDIA_SMI_FILE=os.path.join(QUERY_GPU, name), FAKE_NVIDIA_SMI_EXIT="0")
                sample = gpu_readings.sample_gpu_states(command=FAKE_NVIDIA_SMI)
                self.assertIsNone(sample.unknown)
                self.assertEqual(summary(sample.states[0]), ALLFIELDS[name])
        for name, (bus_id, idle, load, _) in PERFORMANCE.items():
            for state, text, (pstate, reasons, capped) in zip(("idle", "load"), performance_sections(name), (idle, load)):
                with self.subTest(capture=name, state=state):
                    self.patch_environ(FAKE_NVIDIA_SMI_FILE=self.write(f"{state}.txt", text), FAKE_NVIDIA_SMI_EXIT="0")
                    (reading,) = gpu_readings.sample_performance(command=FAKE_NVIDIA_SMI).gpus
                    self.assertEqual((reading.bus_id, reading.pstate, reading.event_reasons, reading.sw_power_cap_us),
                                     (bus_id, pstate, reasons, capped))

    def test_failures(self):
        cases = [(machine, getattr(gpu, kind)) for machine, kind in NVIDIA_SMI_FAILURES]  # FAKE_NVIDIA_SMI -> kind
        for machine, kind in cases:
            with self.subTest(machine=machine):
                self.patch_environ(FAKE_NVIDIA_SMI=machine)
                sample = gpu_readings.sample_gpu_states(command=FAKE_NVIDIA_SMI)
                self.assertEqual((sample.states, sample.unknown.kind, sample.left_out), ((), kind, ()))
                performance = gpu_readings.sample_performance(command=FAKE_NVIDIA_SMI)
                self.assertEqual((performance.gpus, performance.unknown.kind), ((), kind))

    def test_printed_output(self):
        garbage = self.write("garbage.txt", "Segmentation fault\n")
        cases = [  # file printed, exit code -> kind of unknown
            (garbage, "0", gpu.UNREADABLE),
            (garbage, "139", gpu.FAILED),
            (os.devnull, "0", gpu.UNREADABLE),
            (os.path.join(QUERY_GPU, "query-gpu-allfields-linux-l40s-595.80-idle.csv"), "14", gpu.FAILED),
        ]
        for path, code, kind in cases:
            with self.subTest(path=os.path.basename(path), code=code):
                self.patch_environ(FAKE_NVIDIA_SMI_FILE=path, FAKE_NVIDIA_SMI_EXIT=code)
                self.assertEqual(gpu_readings.sample_gpu_states(command=FAKE_NVIDIA_SMI).unknown.kind, kind)
                self.assertEqual(gpu_readings.sample_performance(command=FAKE_NVIDIA_SMI).unknown.kind, kind)

    def test_a_field_the_driver_does_not_know_is_left_out(self):
        self.patch_environ(FAKE_NVIDIA_SMI="busy")
        sample = gpu_readings.sample_gpu_states(command=FAKE_NVIDIA_SMI,
                                                fields=gpu_readings.STATE_FIELDS + ("cuda_version",))
        self.assertEqual((sample.unknown, sample.left_out), (None, ("cuda_version",)))
        self.assertEqual(summary(sample.states[0]), ALLFIELDS["query-gpu-allfields-linux-h100-80gb-hbm3-590.48.01-load.csv"])

    def test_an_old_driver_without_memory_temperature(self):
        # Wraps the fake: the real message of a driver that lacks temperature.memory
        # (fixtures/hw/nvidia-smi/errors), else the fake's busy H100.
        error = os.path.join(NVIDIA_SMI, "errors", "err-invalid-field-temperature-memory.txt")
        old_driver = self.write("nvidia-smi", "\n".join([
            f"#!{sys.executable}",
            "import os, sys",
            "asked = [arg.split('=', 1)[1].split(',') for arg in sys.argv if arg.startswith('--query-gpu=')]",
            "if any('temperature.memory' in fields for fields in asked):",
            f"    sys.stdout.write(open({error!r}).read())",
            "    sys.exit(2)",
            f"os.execv({sys.executable!r}, [{sys.executable!r}, {FAKE_NVIDIA_SMI!r}] + sys.argv[1:])",
        ]) + "\n", 0o755)
        self.patch_environ(FAKE_NVIDIA_SMI="busy")
        sample = gpu_readings.sample_gpu_states(command=old_driver)
        self.assertEqual((sample.unknown, sample.left_out), (None, ("temperature.memory",)))
        (state,) = sample.states
        self.assertEqual((state.memory_temperature_c, state.temperature_c, state.power_draw_w), (None, 59, 631.95))

    def test_a_driver_that_rejects_everything_is_asked_a_bounded_number_of_times(self):
        error = os.path.join(NVIDIA_SMI, "errors", "err-invalid-field-temperature-memory.txt")
        self.patch_environ(FAKE_NVIDIA_SMI_FILE=error, FAKE_NVIDIA_SMI_EXIT="2")
        sample = gpu_readings.sample_gpu_states(command=FAKE_NVIDIA_SMI)
        self.assertEqual((sample.states, sample.unknown.kind, sample.left_out),
                         ((), gpu.INVALID_FIELD, ("temperature.memory",)))

    def test_a_missing_or_unrunnable_program(self):
        not_executable = self.write("not-executable", "#!/bin/sh\necho 0\n")
        cases = [  # command -> kind
            (os.path.join(self.dir, "no-such-nvidia-smi"), gpu.NOT_INSTALLED),
            ("rowfleet-no-such-nvidia-smi", gpu.NOT_INSTALLED),
            (not_executable, gpu.NOT_EXECUTABLE),
        ]
        for command, kind in cases:
            with self.subTest(command=command):
                self.assertEqual(gpu_readings.sample_gpu_states(command=command).unknown.kind, kind)
                self.assertEqual(gpu_readings.sample_performance(command=command).unknown.kind, kind)

    def test_a_hung_nvidia_smi_is_killed_at_the_timeout(self):
        self.patch_environ(FAKE_NVIDIA_SMI="hang")
        for run in (gpu_readings.sample_gpu_states, gpu_readings.sample_performance):
            with self.subTest(run=run.__name__):
                started = time.monotonic()
                sample = run(command=FAKE_NVIDIA_SMI, timeout=0.5)
                self.assertLess(time.monotonic() - started, DEADLINE)
                self.assertEqual(sample.unknown.kind, gpu.TIMEOUT)
                self.assertIn("0.5s", sample.unknown.reason)


if __name__ == "__main__":
    unittest.main()
