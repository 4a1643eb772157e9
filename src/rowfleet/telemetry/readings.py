"""The readings a ``host_samples`` row holds, and the pure rules over stored rows.

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

Owns the names' kinds (counter deltas, counters' totals, peaks and dips), ``fold_minute``
(a minute of rows to one: means, sums of deltas, peaks of what an operator looks for),
``throttle_seconds`` (a window's throttling per reason), ``gpu_indexes`` and
``slowdowns``. Light on purpose: the hosts' view and ``/metrics`` read rows with it, and
neither needs the parsers of ``/proc`` and ``/sys``. Imports only the leaf
``rowfleet.names``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from rowfleet.names import is_finite_number

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
# Clock-event reasons that slow a busy GPU (idle and the applications-clock setting do not).
SLOWDOWN_REASONS = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                              "hw_power_brake_slowdown"})


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
            # The cheap test first: it runs for every reading of every row of an hour.
            if type(name) is not str or ".throttle_s." not in name or not name.startswith("gpu."):
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
