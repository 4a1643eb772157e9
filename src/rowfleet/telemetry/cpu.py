"""How busy a host's CPUs are, read from ``/proc`` and ``/sys``.

Owns the pure parsers of ``/proc/stat`` (the ``cpu`` and ``cpuN`` tick lines),
``/proc/loadavg``, ``/proc/pressure/*`` (PSI), ``cpufreq/scaling_cur_freq`` and the x86
``thermal_throttle`` counters, the pure deltas between two readings (busy percent, stalled
percent, new throttle events), and ``read_cpu``, the thin reader that takes a filesystem
root so tests can point it at a fake tree. A file the host lacks (no PSI before Linux 4.20,
no cpufreq in most VMs, no thermal_throttle off x86) reads as absent, never as an error.

Linux only in what it finds. Imports nothing of rowfleet outside ``rowfleet.telemetry``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Iterable

from rowfleet.telemetry.text import parse_count, parse_number, read_text

# /proc/stat's tick columns, in the kernel's order (Documentation/filesystems/proc.rst).
# Kernels before 2.6.33 print fewer of them; the ones they lack are None.
TICK_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
PRESSURE_KINDS = ("cpu", "memory", "io")

_CPU_DIR = re.compile(r"^cpu([0-9]+)$")


@dataclasses.dataclass(frozen=True)
class CpuTicks:
    """One ``cpu``/``cpuN`` line of ``/proc/stat``, in USER_HZ ticks since boot.

    ``cpu`` is the core's number, or ``None`` for the line that sums all cores.
    """

    cpu: int | None
    user: int
    nice: int
    system: int
    idle: int
    iowait: int | None = None
    irq: int | None = None
    softirq: int | None = None
    steal: int | None = None
    guest: int | None = None       # already counted in user
    guest_nice: int | None = None  # already counted in nice

    @property
    def total_ticks(self) -> int:
        """Every tick the CPU spent, counting guest time once (it is inside user and nice)."""
        return sum(getattr(self, name) or 0 for name in TICK_COLUMNS[:8])

    @property
    def idle_ticks(self) -> int:
        """Ticks spent idle, waiting on I/O included."""
        return self.idle + (self.iowait or 0)


@dataclasses.dataclass(frozen=True)
class CpuStat:
    """The tick lines of one read of ``/proc/stat``: the sum, and each online core's."""

    total: CpuTicks | None
    cores: tuple[CpuTicks, ...] = ()


@dataclasses.dataclass(frozen=True)
class CoreUtilisation:
    """One core's busy share between two reads; ``None`` when the ticks say nothing."""

    cpu: int
    busy_percent: float | None


@dataclasses.dataclass(frozen=True)
class CpuUtilisation:
    """Busy percent between two reads of ``/proc/stat``: all cores together, and each."""

    busy_percent: float | None
    cores: tuple[CoreUtilisation, ...] = ()


@dataclasses.dataclass(frozen=True)
class CoreFrequency:
    """A core's current clock, from ``cpufreq/scaling_cur_freq``."""

    cpu: int
    mhz: float


@dataclasses.dataclass(frozen=True)
class LoadAverage:
    """``/proc/loadavg``: run-queue averages over 1, 5 and 15 minutes, and task counts."""

    one: float
    five: float
    fifteen: float
    running: int | None = None  # tasks runnable now
    tasks: int | None = None    # tasks that exist


@dataclasses.dataclass(frozen=True)
class PressureLine:
    """One ``some``/``full`` line of a PSI file: percent of time stalled, and total stall."""

    avg10: float | None
    avg60: float | None
    avg300: float | None
    total_us: int | None  # microseconds stalled since boot


@dataclasses.dataclass(frozen=True)
class Pressure:
    """A PSI file: ``some`` (at least one task stalled) and ``full`` (all non-idle tasks)."""

    some: PressureLine | None
    full: PressureLine | None = None  # /proc/pressure/cpu has no full line before Linux 5.13


@dataclasses.dataclass(frozen=True)
class ThrottleCount:
    """A CPU's x86 thermal throttle counters since boot, with where the CPU sits.

    ``core_count`` is shared by the hyperthreads of one core, ``package_count`` by every
    CPU of one package, so a host's total counts each core and package once.
    """

    cpu: int
    core_count: int | None
    package_count: int | None
    package_id: int | None = None
    core_id: int | None = None


@dataclasses.dataclass(frozen=True)
class CpuReading:
    """One read of a host's CPU state; each part ``None`` or empty where the host lacks it."""

    ticks: CpuStat | None
    frequencies: tuple[CoreFrequency, ...] = ()
    load: LoadAverage | None = None
    cpu_pressure: Pressure | None = None
    memory_pressure: Pressure | None = None
    io_pressure: Pressure | None = None
    throttles: tuple[ThrottleCount, ...] = ()


# ---------------------------------------------------------------------------------------
# Pure parsers


def parse_cpu_stat(text: str) -> CpuStat | None:
    """The ``cpu`` and ``cpuN`` lines of ``/proc/stat``; ``None`` if it has neither.

    A line with fewer than the four columns every kernel prints, or a column that is not a
    count, is skipped; columns past the ten known are ignored. Offline cores have no line.

    >>> stat = parse_cpu_stat("cpu  9166 0 7351 52142 3051 0 556 26 0 0\\n"
    ...                       "cpu0 2606 0 1882 31465 509 0 36 11 0 0\\ncpu1 garbage\\nintr 1413140 0\\n")
    >>> stat.total.idle, [core.cpu for core in stat.cores], stat.total.total_ticks
    (52142, [0], 72292)
    >>> parse_cpu_stat("cpu0 1 2\\n"), parse_cpu_stat("")
    (None, None)
    """
    total: CpuTicks | None = None
    cores: dict[int, CpuTicks] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or not parts[0].startswith("cpu"):
            continue
        label = parts[0][3:]
        if label and not (label.isascii() and label.isdigit()):
            continue
        values = [parse_count(word) for word in parts[1:len(TICK_COLUMNS) + 1]]
        if len(values) < 4 or None in values:
            continue
        cpu = int(label) if label else None
        ticks = CpuTicks(cpu, *values)
        if cpu is None:
            total = total or ticks
        else:
            cores.setdefault(cpu, ticks)
    if total is None and not cores:
        return None
    return CpuStat(total, tuple(cores[cpu] for cpu in sorted(cores)))


def parse_frequency_mhz(text: str) -> float | None:
    """``scaling_cur_freq`` (kHz) in MHz; ``None`` for anything else (``<unknown>``, empty).

    >>> parse_frequency_mhz("2394123\\n"), parse_frequency_mhz("<unknown>\\n"), parse_frequency_mhz("")
    (2394.123, None, None)
    """
    khz = parse_count(text.strip())
    return None if khz is None else khz / 1000


def parse_loadavg(text: str) -> LoadAverage | None:
    """``/proc/loadavg``; ``None`` without its three averages. The last pid is not kept.

    >>> parse_loadavg("0.88 0.50 0.20 2/106 13275\\n")
    LoadAverage(one=0.88, five=0.5, fifteen=0.2, running=2, tasks=106)
    >>> parse_loadavg("0.88 0.50\\n"), parse_loadavg("0.1 0.2 0.3 x").tasks
    (None, None)
    """
    parts = text.split()
    averages = [parse_number(word) for word in parts[:3]]
    if len(averages) < 3 or None in averages or min(averages) < 0:
        return None
    running = tasks = None
    if len(parts) > 3 and parts[3].count("/") == 1:
        running, tasks = (parse_count(word) for word in parts[3].split("/"))
    return LoadAverage(*averages, running=running, tasks=tasks)


def parse_pressure(text: str) -> Pressure | None:
    """A PSI file (``/proc/pressure/*``, or a cgroup v2 ``*.pressure``); ``None`` if empty.

    >>> parse_pressure("some avg10=9.75 avg60=6.83 avg300=4.01 total=19321926\\n").some
    PressureLine(avg10=9.75, avg60=6.83, avg300=4.01, total_us=19321926)
    >>> parse_pressure("full avg10=x total=12\\n")
    Pressure(some=None, full=PressureLine(avg10=None, avg60=None, avg300=None, total_us=12))
    >>> parse_pressure("garbage\\n"), parse_pressure("some\\n")
    (None, None)
    """
    lines: dict[str, PressureLine] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] not in ("some", "full") or parts[0] in lines:
            continue
        fields = dict(word.partition("=")[::2] for word in parts[1:])
        parsed = PressureLine(avg10=parse_number(fields.get("avg10")), avg60=parse_number(fields.get("avg60")),
                              avg300=parse_number(fields.get("avg300")), total_us=parse_count(fields.get("total")))
        if parsed != PressureLine(None, None, None, None):
            lines[parts[0]] = parsed
    return Pressure(lines.get("some"), lines.get("full")) if lines else None


# ---------------------------------------------------------------------------------------
# Pure deltas


def busy_percent(before: CpuTicks, after: CpuTicks) -> float | None:
    """The share of ticks between two reads of one line that were not idle or I/O wait.

    ``None`` when no tick passed or a counter went backwards (a reboot, a core replaced
    by hotplug). I/O wait alone may shrink, as proc.rst warns, so it is judged together
    with idle: time moves between the two, and only their sum must grow.

    >>> t0 = CpuTicks(1, 6560, 0, 5468, 20676, 2542, 0, 520, 15, 0, 0)
    >>> busy_percent(t0, CpuTicks(1, 6588, 0, 5498, 20677, 2567, 0, 522, 15, 0, 0))
    69.76744186046511
    >>> busy_percent(t0, t0), busy_percent(t0, CpuTicks(1, 10, 0, 10, 10))
    (None, None)
    """
    for name in TICK_COLUMNS:
        if name not in ("idle", "iowait") and (getattr(after, name) or 0) < (getattr(before, name) or 0):
            return None
    if after.idle_ticks < before.idle_ticks:
        return None
    ticks = after.total_ticks - before.total_ticks
    if ticks <= 0:
        return None
    return 100 * (ticks - (after.idle_ticks - before.idle_ticks)) / ticks


def cpu_utilisation(before: CpuStat | None, after: CpuStat | None) -> CpuUtilisation:
    """Busy percent of all cores together and of each core online in ``after``.

    A core that was not in ``before`` (it came online) has ``None``.

    >>> t0 = parse_cpu_stat("cpu 10 0 10 80\\ncpu0 5 0 5 40\\ncpu1 5 0 5 40\\n")
    >>> used = cpu_utilisation(t0, parse_cpu_stat("cpu 40 0 10 150\\ncpu0 35 0 5 60\\ncpu1 5 0 5 90\\ncpu2 1 1 1 1\\n"))
    >>> used.busy_percent, [(core.cpu, core.busy_percent) for core in used.cores]
    (30.0, [(0, 60.0), (1, 0.0), (2, None)])
    >>> cpu_utilisation(None, t0)
    CpuUtilisation(busy_percent=None, cores=())
    """
    if before is None or after is None:
        return CpuUtilisation(None)
    earlier = {core.cpu: core for core in before.cores}
    total = busy_percent(before.total, after.total) if before.total and after.total else None
    cores = tuple(CoreUtilisation(core.cpu, busy_percent(earlier[core.cpu], core) if core.cpu in earlier else None)
                  for core in after.cores)
    return CpuUtilisation(total, cores)


def stalled_percent(before: PressureLine | None, after: PressureLine | None, seconds: float) -> float | None:
    """The share of ``seconds`` stalled between two reads of one PSI line, from ``total``.

    Unlike ``avg10`` it covers exactly the interval. ``None`` when a total is unknown, it
    went backwards, or no time passed; capped at 100 against clock jitter.

    >>> p = lambda total: PressureLine(None, None, None, total)
    >>> stalled_percent(p(19321926), p(19571926), 1.0), stalled_percent(p(5), p(4), 1.0), stalled_percent(p(0), p(9), 0)
    (25.0, None, None)
    """
    if before is None or after is None or before.total_us is None or after.total_us is None or seconds <= 0:
        return None
    stalled = after.total_us - before.total_us
    return None if stalled < 0 else min(100.0, 100 * stalled / (seconds * 1e6))


def throttle_total(counts: Iterable[ThrottleCount]) -> int | None:
    """Throttle events on the host: each core's count once, plus each package's once.

    Hyperthreads of one core report the same core count, and all CPUs of a package the
    same package count, so they are keyed by core and package (by CPU where the topology
    is unknown). ``None`` when no CPU reports a count.

    >>> t = [ThrottleCount(0, 3, 7, 0, 0), ThrottleCount(1, 3, 7, 0, 0), ThrottleCount(2, 1, 7, 0, 1)]
    >>> throttle_total(t), throttle_total(t + [ThrottleCount(3, 2, None)]), throttle_total([])
    (11, 13, None)
    """
    cores: dict[tuple, int] = {}
    packages: dict[tuple, int] = {}
    for count in counts:
        if count.core_count is not None:
            key = ("core", count.package_id, count.core_id) if None not in (count.package_id, count.core_id) \
                else ("cpu", count.cpu)
            cores[key] = max(cores.get(key, 0), count.core_count)
        if count.package_count is not None:
            key = ("package", count.package_id) if count.package_id is not None else ("cpu", count.cpu)
            packages[key] = max(packages.get(key, 0), count.package_count)
    if not cores and not packages:
        return None
    return sum(cores.values()) + sum(packages.values())


def throttle_increase(before: Iterable[ThrottleCount], after: Iterable[ThrottleCount]) -> int | None:
    """New throttle events between two reads; ``None`` if unknown or the total went back.

    >>> throttle_increase([ThrottleCount(0, 3, 7)], [ThrottleCount(0, 5, 8)]), throttle_increase([], [])
    (3, None)
    >>> throttle_increase([ThrottleCount(0, 3, 7)], [ThrottleCount(0, 0, 0)])
    """
    earlier, later = throttle_total(before), throttle_total(after)
    if earlier is None or later is None or later < earlier:
        return None
    return later - earlier


# ---------------------------------------------------------------------------------------
# Thin reader


def _parsed(path: str, parse):
    text = read_text(path)
    return parse(text) if text is not None else None


def cpu_numbers(root: str = "/") -> list[int]:
    """The CPUs ``/sys/devices/system/cpu`` lists (online or not), by number; empty if none."""
    try:
        names = os.listdir(os.path.join(root, "sys", "devices", "system", "cpu"))
    except OSError:
        return []
    return sorted(int(found.group(1)) for found in map(_CPU_DIR.match, names) if found)


def read_frequencies(root: str = "/", cpus: Iterable[int] | None = None) -> tuple[CoreFrequency, ...]:
    """Each core's current clock; empty where cpufreq is absent (most virtual machines)."""
    frequencies = []
    for cpu in cpu_numbers(root) if cpus is None else cpus:
        mhz = _parsed(os.path.join(_cpu_dir(root, cpu), "cpufreq", "scaling_cur_freq"), parse_frequency_mhz)
        if mhz is not None:
            frequencies.append(CoreFrequency(cpu, mhz))
    return tuple(frequencies)


def read_throttles(root: str = "/", cpus: Iterable[int] | None = None) -> tuple[ThrottleCount, ...]:
    """Each CPU's thermal throttle counters; empty off x86 and in most virtual machines."""
    counts = []
    for cpu in cpu_numbers(root) if cpus is None else cpus:
        folder = _cpu_dir(root, cpu)
        core = _parsed(os.path.join(folder, "thermal_throttle", "core_throttle_count"), parse_count)
        package = _parsed(os.path.join(folder, "thermal_throttle", "package_throttle_count"), parse_count)
        if core is None and package is None:
            continue
        topology = os.path.join(folder, "topology")
        counts.append(ThrottleCount(cpu, core, package,
                                    package_id=_parsed(os.path.join(topology, "physical_package_id"), parse_count),
                                    core_id=_parsed(os.path.join(topology, "core_id"), parse_count)))
    return tuple(counts)


def _cpu_dir(root: str, cpu: int) -> str:
    return os.path.join(root, "sys", "devices", "system", "cpu", f"cpu{cpu}")


def read_cpu(root: str = "/") -> CpuReading:
    """The host's CPU state now, read under ``root``; never raises.

    Take two readings some seconds apart and pass their ``ticks`` to ``cpu_utilisation``.
    """
    proc = os.path.join(root, "proc")
    cpus = cpu_numbers(root)
    pressure = {kind: _parsed(os.path.join(proc, "pressure", kind), parse_pressure) for kind in PRESSURE_KINDS}
    return CpuReading(
        ticks=_parsed(os.path.join(proc, "stat"), parse_cpu_stat),
        frequencies=read_frequencies(root, cpus),
        load=_parsed(os.path.join(proc, "loadavg"), parse_loadavg),
        cpu_pressure=pressure["cpu"],
        memory_pressure=pressure["memory"],
        io_pressure=pressure["io"],
        throttles=read_throttles(root, cpus),
    )
