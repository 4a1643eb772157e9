"""One host sample: what the sampler reads of a host, and the flat readings a row stores.

A row of ``host_samples`` holds a JSON object of named readings, flat so that anyone's SQL,
the minute fold, ``/metrics`` and the panel can take one by its name. Names are dotted:
a family, then an instance where there are several, then the reading::

    cpu.busy  cpu.cores  cpu.mhz  cpu.throttle_events  load.1  load.5  load.15
    pressure.cpu  pressure.memory  pressure.io           (% of the interval stalled)
    mem.used  mem.total  mem.available  swap.used  swap.total  cgroup.used  cgroup.limit
    disk.<path>.used|total|free                            (bytes)
    diskio.<device>.read_bps|write_bps|busy                (busy: % of the interval)
    net.<interface>.rx_bps|tx_bps|rx_errors|tx_errors|rx_dropped|tx_dropped
    temp.hottest  temp.<where>                             (°C)
    power.<zone>                                           (W, from RAPL)
    gpu.<index>.util|mem_util|vram_used_mib|vram_total_mib|temp|mem_temp|power_w|
        power_limit_w|sm_mhz|mem_mhz|max_sm_mhz|pstate|fan|mig|name|reasons
    gpu.<index>.throttle_s.<reason>                        (seconds held back in the interval)
    gpu.<index>.throttle_total_s.<reason>                  (the driver's counter: seconds since boot)
    gpu.error  interval  samples

Rates, shares and counter deltas cover ``interval``, the seconds since the sampler's
previous reading, so a row stands alone; the first reading after a start has no deltas.
A reading not known is left out, never written as a guess.

Owns ``HostReads`` and ``read_host`` (the thin reader, taking a filesystem root), the
pure ``readings_of`` (two reads to one row's readings), ``fold_minute`` (a minute of rows
to one row: means, sums of deltas, peaks of what an operator looks for) and
``throttle_seconds`` (a window's throttling per reason). Imports nothing of rowfleet
outside ``rowfleet.telemetry`` but the leaf ``rowfleet.names``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from rowfleet.names import is_finite_number
from rowfleet.telemetry import cpu, disk_net, gpu_readings, host_memory, sensors

# Counter deltas: a minute's is the sum of its rows'. Everything else numeric is a gauge,
# whose minute value is the mean.
DELTA_SUFFIXES = (".throttle_events", ".rx_errors", ".tx_errors", ".rx_dropped", ".tx_dropped")
DELTA_INFIXES = (".throttle_s.",)
# Counters' running totals (as of their last read): a minute's is the last of its rows'.
TOTAL_INFIXES = (".throttle_total_s.",)
# Gauges whose minute row also keeps the highest (":max") or lowest (":min") value, since a
# spike or a dip inside the minute is what an operator looks for. "*" is one name segment.
PEAKS = ("cpu.busy", "temp.hottest", "mem.used", "load.1", "gpu.*.util", "gpu.*.temp", "gpu.*.power_w",
         "gpu.*.vram_used_mib")
DIPS = ("gpu.*.sm_mhz", "cpu.mhz")
# Interfaces left out: the loopback, and containers' virtual pairs (one per container).
LOOPBACK = "lo"
VIRTUAL_PAIR = "veth"

# Clock-event reasons that slow a busy GPU (idle and the applications-clock setting do not).
SLOWDOWN_REASONS = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                              "hw_power_brake_slowdown"})


@dataclasses.dataclass(frozen=True)
class HostReads:
    """One moment's reads of a host, raw; ``at`` is a monotonic time, for intervals.

    ``gpu`` and ``performance`` are ``None`` when not asked this time (no GPU, or the
    clock-event counters are read less often than the rest).
    """

    at: float
    cpu: cpu.CpuReading
    memory: host_memory.HostMemoryReading
    diskstats: Mapping[str, disk_net.DiskStat]
    net: Mapping[str, disk_net.NetDevStat]
    sensors: sensors.SensorReading
    disks: Mapping[str, disk_net.DiskUsage | None]
    gpu: gpu_readings.GpuStateSample | None = None
    performance: gpu_readings.GpuPerformanceSample | None = None


def read_host(root: str = "/", paths: Iterable[str] = (), *, gpu: Callable[[], Any] | None = None,
              performance: Callable[[], Any] | None = None,
              clock: Callable[[], float] = time.monotonic) -> HostReads:
    """The host now, read under ``root``; ``paths``: where to report disk space. ``gpu`` and
    ``performance`` run nvidia-smi's two questions (``gpu_readings.sample_gpu_states`` and
    ``sample_performance``) when given. Never raises."""
    return HostReads(at=clock(), cpu=cpu.read_cpu(root), memory=host_memory.read_host_memory(root),
                     diskstats=disk_net.read_diskstats(root), net=disk_net.read_net_dev(root),
                     sensors=sensors.read_sensors(root), disks=disk_net.disk_usage(paths),
                     gpu=gpu() if gpu else None, performance=performance() if performance else None)


# ---------------------------------------------------------------------------------------
# Pure: two reads to one row


def readings_of(before: HostReads | None, after: HostReads,
                performance_before: gpu_readings.GpuPerformanceSample | None = None) -> dict[str, Any]:
    """The readings of ``after``, with rates and deltas since ``before`` (none without it).

    ``performance_before`` is the last clock-event counters read, which may be older than
    ``before``; throttle seconds are given only when ``after`` read them too.
    """
    seconds = after.at - before.at if before is not None else None
    if seconds is not None and not seconds > 0:
        before, seconds = None, None
    out: dict[str, Any] = {"samples": 1}
    if seconds is not None:
        out["interval"] = round(seconds, 3)
    _cpu(out, before.cpu if before else None, after.cpu, seconds)
    _memory(out, after.memory)
    _disks(out, before, after, seconds)
    _net(out, before, after, seconds)
    _sensors(out, before.sensors if before else None, after.sensors, seconds)
    _gpus(out, after.gpu, performance_before, after.performance)
    return out


def _put(out: dict[str, Any], name: str, value: Any, digits: int | None = 2) -> None:
    """Set a reading, leaving it out when unknown; floats are rounded to keep rows small."""
    if value is None or isinstance(value, float) and not math.isfinite(value):
        return
    out[name] = round(value, digits) if isinstance(value, float) and digits is not None else value


def _cpu(out: dict[str, Any], before: cpu.CpuReading | None, after: cpu.CpuReading, seconds: float | None) -> None:
    if before is not None and seconds is not None:
        used = cpu.cpu_utilisation(before.ticks, after.ticks)
        _put(out, "cpu.busy", used.busy_percent, 1)
        cores = [core.busy_percent for core in used.cores]
        if cores and all(value is not None for value in cores):
            out["cpu.cores"] = [round(value, 1) for value in cores]
        _put(out, "cpu.throttle_events", cpu.throttle_increase(before.throttles, after.throttles))
        for kind in cpu.PRESSURE_KINDS:
            then, now = getattr(before, f"{kind}_pressure"), getattr(after, f"{kind}_pressure")
            _put(out, f"pressure.{kind}", cpu.stalled_percent(then.some if then else None,
                                                              now.some if now else None, seconds))
    if after.frequencies:
        _put(out, "cpu.mhz", sum(core.mhz for core in after.frequencies) / len(after.frequencies), 0)
    if after.load is not None:
        for label, value in (("1", after.load.one), ("5", after.load.five), ("15", after.load.fifteen)):
            _put(out, f"load.{label}", value)


def _memory(out: dict[str, Any], memory: host_memory.HostMemoryReading) -> None:
    info = memory.meminfo
    if info is not None:
        for name, value in (("mem.used", info.used_bytes), ("mem.total", info.total_bytes),
                            ("mem.available", info.available_bytes), ("swap.used", info.swap_used_bytes),
                            ("swap.total", info.swap_total_bytes)):
            _put(out, name, value)
    if memory.cgroup is not None:
        _put(out, "cgroup.used", memory.cgroup.usage_bytes)
        _put(out, "cgroup.limit", memory.cgroup.limit_bytes)


def _disks(out: dict[str, Any], before: HostReads | None, after: HostReads, seconds: float | None) -> None:
    for path, usage in after.disks.items():
        if usage is not None:
            out[f"disk.{path}.used"], out[f"disk.{path}.total"] = usage.used_bytes, usage.total_bytes
            out[f"disk.{path}.free"] = usage.free_bytes
    if before is None or seconds is None:
        return
    for name, rate in disk_net.whole_disks(disk_net.disk_rates(before.diskstats, after.diskstats, seconds)).items():
        _put(out, f"diskio.{name}.read_bps", rate.read_bytes_per_second, 0)
        _put(out, f"diskio.{name}.write_bps", rate.write_bytes_per_second, 0)
        _put(out, f"diskio.{name}.busy", None if rate.busy_fraction is None else 100 * rate.busy_fraction, 1)


def _net(out: dict[str, Any], before: HostReads | None, after: HostReads, seconds: float | None) -> None:
    if before is None or seconds is None:
        return
    for name, rate in disk_net.net_rates(before.net, after.net, seconds).items():
        if name == LOOPBACK or name.startswith(VIRTUAL_PAIR):
            continue
        _put(out, f"net.{name}.rx_bps", rate.rx_bytes_per_second, 0)
        _put(out, f"net.{name}.tx_bps", rate.tx_bytes_per_second, 0)
        for counter in ("rx_errors", "tx_errors", "rx_dropped", "tx_dropped"):
            _put(out, f"net.{name}.{counter}", getattr(rate, counter))


def _sensors(out: dict[str, Any], before: sensors.SensorReading | None, after: sensors.SensorReading,
             seconds: float | None) -> None:
    _put(out, "temp.hottest", sensors.hottest_celsius(after), 1)
    for zone in after.thermal_zones:
        _put(out, f"temp.{zone.type or zone.zone}", zone.celsius, 1)
    for sensor in after.temperatures:
        _put(out, f"temp.{sensor.chip or sensor.hwmon}/{sensor.label}", sensor.celsius, 1)
    if before is None or seconds is None:
        return
    earlier = {zone.zone: zone for zone in before.rapl_zones}
    for zone in after.rapl_zones:
        if zone.zone in earlier:
            _put(out, f"power.{zone.name or zone.zone}", sensors.rapl_power(earlier[zone.zone], zone, seconds), 1)


_GPU_FIELDS = (("util", "utilization_percent"), ("mem_util", "memory_utilization_percent"),
               ("vram_used_mib", "memory_used_mib"), ("vram_total_mib", "memory_total_mib"),
               ("temp", "temperature_c"), ("mem_temp", "memory_temperature_c"), ("power_w", "power_draw_w"),
               ("power_limit_w", "enforced_power_limit_w"), ("sm_mhz", "sm_clock_mhz"),
               ("mem_mhz", "memory_clock_mhz"), ("max_sm_mhz", "max_sm_clock_mhz"), ("pstate", "pstate"),
               ("fan", "fan_percent"), ("name", "name"))


def _gpus(out: dict[str, Any], states: gpu_readings.GpuStateSample | None,
          performance_before: gpu_readings.GpuPerformanceSample | None,
          performance: gpu_readings.GpuPerformanceSample | None) -> None:
    if states is None:
        return
    if states.unknown is not None:
        out["gpu.error"] = str(states.unknown)[:200]
        return
    for position, state in enumerate(states.states):
        index = state.index if state.index is not None else position
        for name, field in _GPU_FIELDS:
            _put(out, f"gpu.{index}.{name}", getattr(state, field), 1)
        if f"gpu.{index}.power_limit_w" not in out:  # no enforced limit said: the one software set
            _put(out, f"gpu.{index}.power_limit_w", state.power_limit_w, 1)
        if state.mig_enabled is not None:
            out[f"gpu.{index}.mig"] = int(state.mig_enabled)
        if state.event_reasons is not None:
            out[f"gpu.{index}.reasons"] = list(state.event_reasons)
    fresh = performance is not None and performance.unknown is None
    newest = performance if fresh else performance_before
    if newest is not None:  # the counters as last read: Prometheus takes them as counters
        for position, counters in enumerate(newest.gpus):
            index = states.states[position].index if position < len(states.states) else position
            for reason in gpu_readings.COUNTER_REASONS:
                total = getattr(counters, f"{reason}_us")
                _put(out, f"gpu.{index}.throttle_total_s.{reason}", None if total is None else total / 1e6, 6)
    if not fresh or performance_before is None:
        return
    for position, (then, now) in enumerate(zip(performance_before.gpus, performance.gpus)):
        index = states.states[position].index if position < len(states.states) else position
        for reason, held in gpu_readings.throttle_seconds(then, now).items():
            _put(out, f"gpu.{index}.throttle_s.{reason}", held, 3)


# ---------------------------------------------------------------------------------------
# Pure: a minute of rows to one


def fold_minute(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One row for a minute's rows: the mean of each gauge, the sum of each counter delta
    (and of ``interval`` and ``samples``), the peaks of ``PEAKS`` as ``NAME:max`` and the
    dips of ``DIPS`` as ``NAME:min``, the last of each text, every reason seen. A reading
    that is no number where numbers are expected (plain SQL) is skipped.

    >>> fold_minute([{"cpu.busy": 10.0, "gpu.0.throttle_s.sw_power_cap": 1.5, "samples": 1, "gpu.0.name": "H100"},
    ...              {"cpu.busy": 30.0, "gpu.0.throttle_s.sw_power_cap": 0.5, "samples": 1, "gpu.0.reasons": ["sw_power_cap"]}])
    {'cpu.busy': 20.0, 'cpu.busy:max': 30.0, 'gpu.0.throttle_s.sw_power_cap': 2.0, 'samples': 2, 'gpu.0.name': 'H100', 'gpu.0.reasons': ['sw_power_cap']}
    """
    values: dict[str, list[Any]] = {}
    for row in rows:
        for name, value in row.items():
            if isinstance(name, str) and ":" not in name:
                values.setdefault(name, []).append(value)
    out: dict[str, Any] = {}
    for name, seen in values.items():
        numbers = [value for value in seen if is_finite_number(value)]
        if numbers and len(numbers) == len(seen):
            _fold_numbers(out, name, numbers)
        elif all(isinstance(value, list) for value in seen):
            _fold_lists(out, name, seen)
        else:
            texts = [value for value in seen if isinstance(value, str)]
            if texts:
                out[name] = texts[-1]
    return out


def _fold_numbers(out: dict[str, Any], name: str, numbers: list[float]) -> None:
    if is_delta(name) or name in ("interval", "samples"):
        total = sum(numbers)
        out[name] = round(total, 3) if isinstance(total, float) else total
        return
    if any(infix in name for infix in TOTAL_INFIXES):
        out[name] = numbers[-1]
        return
    out[name] = round(sum(numbers) / len(numbers), 2)
    if _matches(name, PEAKS):
        out[f"{name}:max"] = max(numbers)
    if _matches(name, DIPS):
        out[f"{name}:min"] = min(numbers)


def _fold_lists(out: dict[str, Any], name: str, lists: list[list[Any]]) -> None:
    if all(isinstance(item, str) for items in lists for item in items):  # reasons: every one seen
        out[name] = list(dict.fromkeys(item for items in lists for item in items))
    elif len({len(items) for items in lists}) == 1 and all(is_finite_number(item) for items in lists for item in items):
        out[name] = [round(sum(column) / len(column), 1) for column in zip(*lists)]  # per-core means


def is_delta(name: str) -> bool:
    """Whether a reading is a counter's delta over its row's interval (summed, not averaged).

    >>> is_delta("gpu.0.throttle_s.hw_slowdown"), is_delta("net.eth0.rx_errors"), is_delta("net.eth0.rx_bps")
    (True, True, False)
    """
    return name.endswith(DELTA_SUFFIXES) or any(infix in name for infix in DELTA_INFIXES)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    parts = name.split(".")
    return any(len(pattern.split(".")) == len(parts)
               and all(want in ("*", got) for want, got in zip(pattern.split("."), parts)) for pattern in patterns)




# ---------------------------------------------------------------------------------------
# Pure: what the rows say


def throttle_seconds(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Seconds each GPU was held back, per reason, over ``rows`` (by GPU index), from the
    counter deltas they carry; reasons that held nothing are left out.

    >>> throttle_seconds([{"gpu.0.throttle_s.sw_power_cap": 2.0, "gpu.0.throttle_s.sync_boost": 0.0},
    ...                   {"gpu.0.throttle_s.sw_power_cap": 1.25, "gpu.1.throttle_s.hw_slowdown": "x"}])
    {'0': {'sw_power_cap': 3.25}}
    """
    held: dict[str, dict[str, float]] = {}
    for row in rows:
        for name, value in row.items():
            if not (isinstance(name, str) and name.startswith("gpu.") and ".throttle_s." in name):
                continue
            index, _, reason = name[len("gpu."):].partition(".throttle_s.")
            if is_finite_number(value) and value > 0 and ":" not in reason:
                per_gpu = held.setdefault(index, {})
                per_gpu[reason] = round(per_gpu.get(reason, 0.0) + value, 3)
    return held


def gpu_indexes(readings: Mapping[str, Any]) -> list[str]:
    """The GPUs a row has readings of, in index order.

    >>> gpu_indexes({"gpu.1.util": 5, "gpu.0.temp": 40, "gpu.error": "x", "cpu.busy": 1})
    ['0', '1']
    """
    found = {name.split(".")[1] for name in readings if isinstance(name, str) and name.startswith("gpu.")
             and name.count(".") >= 2}
    return sorted(found, key=lambda index: (len(index), index))


def slowdowns(reasons: Any) -> list[str]:
    """The clock-event reasons of a reading that slow a busy GPU.

    >>> slowdowns(["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]), slowdowns(None)
    (['sw_power_cap', 'hw_thermal_slowdown'], [])
    """
    if not isinstance(reasons, list):
        return []
    return [reason for reason in reasons if reason in SLOWDOWN_REASONS]
