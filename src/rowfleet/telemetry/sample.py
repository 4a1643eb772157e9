"""One host sample as the sampler takes it: the raw reads of a host, and the readings a
row stores (their names: ``rowfleet.telemetry.readings``).

Rates, shares and counter deltas cover ``interval``, the seconds since the sampler's
previous reading, so a row stands alone; the first reading after a start has no deltas.
A reading not known is left out, never written as a guess.

Owns ``HostReads`` and ``read_host`` (the thin reader, taking a filesystem root) and the
pure ``readings_of`` (two reads to one row's readings). Only the sampler needs it: what a
stored row says is ``readings``' business, which imports none of the parsers. Imports
nothing of rowfleet outside ``rowfleet.telemetry``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Iterable, Mapping

from rowfleet.telemetry import cpu, disk_net, gpu_readings, host_memory, sensors

# Interfaces left out: the loopback, and containers' virtual pairs (one per container).
LOOPBACK = "lo"
VIRTUAL_PAIR = "veth"



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
