"""How hot a host runs and how much power it draws, read from ``/sys``.

Owns the pure parsers of sysfs sensor attributes: thermal zones
(``class/thermal/thermal_zone*/{type,temp}``), hwmon temperature sensors
(``class/hwmon/hwmon*/temp*_{input,label,max,crit}``), and Intel RAPL energy counters
(``class/powercap/intel-rapl:*``); the pure summaries ``hottest_celsius`` and
``rapl_power``; and ``read_sensors``, the thin reader that takes a filesystem root so tests
can point it at a fixture tree.

The parsers never raise: garbage, an empty attribute, a number no sensor could report all
read as ``None``. The reader never raises either: a machine without thermal zones, hwmon or
powercap (a VM) reads as empty, and a sensor that cannot be read (a dangling link, an error
from the driver, ``energy_uj`` readable only by root) has ``None`` for its value.

Linux only in what it finds; imports nothing from rowfleet.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Any, Callable, Mapping, TypeVar

from rowfleet.telemetry.text import parse_integer, read_text

# A sysfs attribute is at most one page; anything longer is not one, and cutting it to a
# page could turn garbage into a plausible number.
_ATTRIBUTE_LIMIT = 4096

# A decimal integer as the kernel prints one with %d, %ld or %llu: at most 20 digits,
# ASCII only (str.isdigit would let "²" through to int(), which then raises).

# Below absolute zero, or past 10 000 °C, no sensor is reporting a temperature: the number
# is a driver's error value or garbage, and would win any "hottest".
_MIN_MILLICELSIUS = -273150
_MAX_MILLICELSIUS = 10_000_000

_THERMAL_ZONE = re.compile(r"thermal_zone([0-9]+)")
_HWMON = re.compile(r"hwmon([0-9]+)")
_TEMPERATURE_ATTRIBUTE = re.compile(r"temp([0-9]+)_(input|label|max|crit)")
_RAPL_ZONE = re.compile(r"intel-rapl((?::[0-9]+)+)")  # intel-rapl:0, intel-rapl:0:1; not the intel-rapl control dir
_Z = TypeVar("_Z")  # a zone of a /sys/class folder


@dataclasses.dataclass(frozen=True)
class ThermalZone:
    """One ``/sys/class/thermal/thermal_zoneN``; ``None`` where it did not say."""

    zone: str              # "thermal_zone0"
    type: str | None       # what it measures, as the driver names it: "cpu-thermal", "acpitz", "x86_pkg_temp"
    celsius: float | None  # None when the driver answered an error or nonsense


@dataclasses.dataclass(frozen=True)
class HwmonTemperature:
    """One ``tempN_input`` of a hwmon chip, in °C, with the limits the driver gives."""

    hwmon: str                   # "hwmon0": two chips may share a name and labels (dual socket)
    chip: str | None             # the chip's ``name``: "coretemp", "k10temp", "nvme"; None if it has none
    sensor: str                  # "temp1"
    label: str                   # ``tempN_label``, or the sensor itself when there is none
    celsius: float | None
    max_celsius: float | None    # ``tempN_max``: where the chip starts to throttle or warn
    crit_celsius: float | None   # ``tempN_crit``: where it shuts down


@dataclasses.dataclass(frozen=True)
class RaplZone:
    """One RAPL power zone's energy counter (``/sys/class/powercap/intel-rapl:N[:M]``).

    A sub-zone (``intel-rapl:0:0``, "core" or "dram") is part of its parent's package
    energy, so adding sub-zones to their package counts them twice.
    """

    zone: str                         # "intel-rapl:0"
    name: str | None                  # "package-0", "core", "uncore", "dram", "psys"
    energy_uj: int | None             # µJ since some start; None where only root may read it
    max_energy_range_uj: int | None   # the counter wraps to 0 past this


@dataclasses.dataclass(frozen=True)
class SensorReading:
    """A host's temperatures and energy counters at one moment; empty where it has none."""

    thermal_zones: tuple[ThermalZone, ...] = ()
    temperatures: tuple[HwmonTemperature, ...] = ()
    rapl_zones: tuple[RaplZone, ...] = ()


# ---------------------------------------------------------------------------------------
# Pure parsers


def parse_sysfs_integer(text: str | None) -> int | None:
    """A sysfs attribute holding one decimal integer, as an int; ``None`` if it is not one.

    Not ``text.parse_number``: sysfs prints bare integers, and a float, a unit or a
    placeholder there means the file is not what we think it is.

    >>> parse_sysfs_integer("55000\\n"), parse_sysfs_integer("-5000"), parse_sysfs_integer("240422366267")
    (55000, -5000, 240422366267)
    >>> parse_sysfs_integer(""), parse_sysfs_integer("5.5e4"), parse_sysfs_integer("abc"), parse_sysfs_integer("9" * 30)
    (None, None, None, None)
    """
    return parse_integer(text, signed=True)


def parse_millicelsius(text: str | None) -> float | None:
    """A temperature attribute (millidegrees Celsius) in °C; ``None`` if it is not one.

    >>> parse_millicelsius("55000\\n"), parse_millicelsius("12376"), parse_millicelsius("-5500")
    (55.0, 12.376, -5.5)
    >>> parse_millicelsius("2147483647"), parse_millicelsius("-274000"), parse_millicelsius("N/A")
    (None, None, None)
    """
    value = parse_sysfs_integer(text)
    if value is None or not _MIN_MILLICELSIUS <= value <= _MAX_MILLICELSIUS:
        return None
    return value / 1000


def parse_sysfs_text(text: str | None) -> str | None:
    """A sysfs attribute holding a name or a label, stripped; ``None`` if empty.

    >>> parse_sysfs_text("coretemp\\n"), parse_sysfs_text("Core 0\\n"), parse_sysfs_text("\\n")
    ('coretemp', 'Core 0', None)
    """
    if text is None:
        return None
    return text.strip() or None


def thermal_zone_of(zone: str, type_text: str | None, temp_text: str | None) -> ThermalZone:
    """A ``ThermalZone`` from the text of its ``type`` and ``temp`` files (``None``: unread).

    >>> thermal_zone_of("thermal_zone0", "cpu-thermal\\n", "12376\\n")
    ThermalZone(zone='thermal_zone0', type='cpu-thermal', celsius=12.376)
    >>> thermal_zone_of("thermal_zone3", None, "garbage")
    ThermalZone(zone='thermal_zone3', type=None, celsius=None)
    """
    return ThermalZone(zone=zone, type=parse_sysfs_text(type_text), celsius=parse_millicelsius(temp_text))


def temperatures_of(hwmon: str, chip: str | None, attributes: Mapping[str, str | None]) -> list[HwmonTemperature]:
    """The temperature sensors of one hwmon chip, from its attribute files' text by name.

    A sensor is a ``tempN_input``; its ``tempN_label``, ``tempN_max`` and ``tempN_crit`` are
    taken when present. Every other attribute (voltages, fans, pwm, frequencies, kinds we
    do not know) is ignored, so a chip without temperatures gives none. In sensor order.

    >>> attributes = {"temp2_input": "54000\\n", "temp2_label": "Core 0\\n", "temp2_crit": "100000\\n",
    ...               "temp10_input": "garbage", "fan1_input": "1998\\n"}
    >>> for t in temperatures_of("hwmon0", "coretemp", attributes): print(t.sensor, t.label, t.celsius, t.crit_celsius)
    temp2 Core 0 54.0 100.0
    temp10 temp10 None None
    >>> temperatures_of("hwmon6", "asus", {"pwm1_enable": "2\\n"})
    []
    """
    numbers = sorted({int(found.group(1)) for found in map(_TEMPERATURE_ATTRIBUTE.fullmatch, attributes)
                      if found and found.group(2) == "input"})
    sensors = []
    for number in numbers:
        sensor = f"temp{number}"
        sensors.append(HwmonTemperature(
            hwmon=hwmon,
            chip=chip,
            sensor=sensor,
            label=parse_sysfs_text(attributes.get(f"{sensor}_label")) or sensor,
            celsius=parse_millicelsius(attributes.get(f"{sensor}_input")),
            max_celsius=parse_millicelsius(attributes.get(f"{sensor}_max")),
            crit_celsius=parse_millicelsius(attributes.get(f"{sensor}_crit")),
        ))
    return sensors


def rapl_zone_of(zone: str, name_text: str | None, energy_text: str | None, range_text: str | None) -> RaplZone:
    """A ``RaplZone`` from the text of its ``name``, ``energy_uj`` and ``max_energy_range_uj``.

    >>> rapl_zone_of("intel-rapl:0", "package-0\\n", "240422366267\\n", "262143328850\\n")
    RaplZone(zone='intel-rapl:0', name='package-0', energy_uj=240422366267, max_energy_range_uj=262143328850)
    >>> rapl_zone_of("intel-rapl:1", "package-1\\n", None, "-1\\n")
    RaplZone(zone='intel-rapl:1', name='package-1', energy_uj=None, max_energy_range_uj=None)
    """
    energy, limit = parse_sysfs_integer(energy_text), parse_sysfs_integer(range_text)
    return RaplZone(
        zone=zone,
        name=parse_sysfs_text(name_text),
        energy_uj=energy if energy is not None and energy >= 0 else None,
        max_energy_range_uj=limit if limit is not None and limit > 0 else None,
    )


# ---------------------------------------------------------------------------------------
# Pure summaries


def hottest_celsius(reading: SensorReading) -> float | None:
    """The highest temperature any zone or sensor of ``reading`` reports; ``None`` if none does.

    A sensor often shows up twice (an ACPI thermal zone is also hwmon ``acpitz``), which the
    maximum does not mind.

    >>> hottest_celsius(SensorReading(thermal_zones=(ThermalZone("thermal_zone0", "acpitz", 41.0),),
    ...     temperatures=(HwmonTemperature("hwmon1", "k10temp", "temp1", "Tctl", 63.5, None, None),
    ...                   HwmonTemperature("hwmon2", "nvme", "temp1", "Composite", None, None, None))))
    63.5
    >>> hottest_celsius(SensorReading()) is None
    True
    """
    values = [item.celsius for item in (*reading.thermal_zones, *reading.temperatures) if item.celsius is not None]
    return max(values, default=None)


def rapl_power(t0: RaplZone, t1: RaplZone, seconds: float) -> float | None:
    """The zone's mean power in watts between two readings ``seconds`` apart.

    A counter that went down wrapped past ``max_energy_range_uj``, which is added back.
    ``None`` when it cannot be known: an energy unread, two different zones, a range that
    changed between the readings (the driver was reloaded), a counter beyond its range, or
    a gap that is not positive. A counter that wrapped twice between the readings cannot be
    told from one that wrapped once: at 95 W the package counter above wraps every ~46
    minutes, so sample more often than that. A reboot also looks like a wrap.

    >>> zone = lambda uj: RaplZone("intel-rapl:0", "package-0", uj, 262143328850)
    >>> rapl_power(zone(240422366267), zone(240922366267), 10.0)
    50.0
    >>> round(rapl_power(zone(262000000000), zone(1000000000), 10.0), 6)
    114.332885
    >>> rapl_power(zone(None), zone(1000000000), 10.0), rapl_power(zone(1), zone(2), 0.0)
    (None, None)
    """
    e0, e1, limit = t0.energy_uj, t1.energy_uj, t0.max_energy_range_uj
    if t0.zone != t1.zone or e0 is None or e1 is None or limit != t1.max_energy_range_uj:
        return None
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
        return None
    delta = e1 - e0
    if delta < 0:
        if limit is None or e0 > limit or e1 > limit:
            return None
        delta += limit
    return delta / 1e6 / seconds


# ---------------------------------------------------------------------------------------
# Thin reader


def _read(path: str) -> str | None:
    # A driver may answer a read with an error (EIO, ENODATA, EAGAIN), a link may dangle,
    # energy_uj is root-only since Linux 5.10: all of them are "not known", not errors.
    return read_text(path, limit=_ATTRIBUTE_LIMIT)


def _numbered(folder: str, pattern: re.Pattern) -> list[str]:
    """The entries of ``folder`` that ``pattern`` matches, by their numbers; [] if unreadable."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = [(tuple(int(n) for n in re.findall(r"[0-9]+", name)), name) for name in names if pattern.fullmatch(name)]
    return [name for _, name in sorted(found)]


def _thermal_zones(sys_root: str) -> list[ThermalZone]:
    return _class_zones(sys_root, "thermal", _THERMAL_ZONE, lambda zone, read: thermal_zone_of(
        zone, read("type"), read("temp")))


def _class_zones(sys_root: str, kind: str, pattern: re.Pattern[str],
                 zone_of: Callable[[str, Callable[[str], Any]], _Z]) -> list[_Z]:
    """``zone_of(zone, read)`` for each numbered folder of ``/sys/class/KIND`` matching
    ``pattern``, where ``read(attribute)`` reads one of its files; a dangling link is no zone."""
    folder = os.path.join(sys_root, "class", kind)
    zones = []
    for zone in _numbered(folder, pattern):
        path = os.path.join(folder, zone)
        if os.path.isdir(path):
            zones.append(zone_of(zone, lambda attribute, path=path: _read(os.path.join(path, attribute))))
    return zones


def _hwmon_temperatures(sys_root: str) -> list[HwmonTemperature]:
    folder = os.path.join(sys_root, "class", "hwmon")
    temperatures = []
    for hwmon in _numbered(folder, _HWMON):
        # hwmonN links into devices/ by a relative path; opening through it resolves it as
        # real sysfs does. Kernels before the hwmon class kept the attributes (and the
        # name) on the device, which hwmonN/device links to; libsensors looks there too.
        attributes_dir = os.path.join(folder, hwmon)
        chip = parse_sysfs_text(_read(os.path.join(attributes_dir, "name")))
        if chip is None:
            device_chip = parse_sysfs_text(_read(os.path.join(attributes_dir, "device", "name")))
            if device_chip is not None:
                attributes_dir, chip = os.path.join(attributes_dir, "device"), device_chip
        try:
            names = [name for name in os.listdir(attributes_dir) if _TEMPERATURE_ATTRIBUTE.fullmatch(name)]
        except OSError:
            continue  # a dangling link, or a class entry that is not a directory
        attributes = {name: _read(os.path.join(attributes_dir, name)) for name in names}
        temperatures.extend(temperatures_of(hwmon, chip, attributes))
    return temperatures


def _rapl_zones(sys_root: str) -> list[RaplZone]:
    return _class_zones(sys_root, "powercap", _RAPL_ZONE, lambda zone, read: rapl_zone_of(
        zone, read("name"), read("energy_uj"), read("max_energy_range_uj")))


def read_sensors(root: str = "/") -> SensorReading:
    """The thermal zones, hwmon temperatures and RAPL counters under ``root``'s ``/sys``.

    Never raises. What the host lacks reads as empty (a VM usually has none of the three);
    a sensor that cannot be read keeps its place with ``None`` for its value, and an entry
    that leads nowhere (a dangling link) is left out.
    """
    sys_root = os.path.join(root, "sys")
    return SensorReading(
        thermal_zones=tuple(_thermal_zones(sys_root)),
        temperatures=tuple(_hwmon_temperatures(sys_root)),
        rapl_zones=tuple(_rapl_zones(sys_root)),
    )
