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

import functools
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
    fold = MinuteFold()
    for row in rows:
        fold.add(row)
    return fold.folded()


class MinuteFold:
    """``fold_minute`` a row at a time: rows added as they arrive, the fold read at any
    time, at the cost of the readings rather than of the rows (a panel refreshing every few
    seconds shows the minute its sampler has not folded yet, as the sampler will fold it).
    A reading's numbers are added up as they come while every value of it is one; any
    other reading keeps its values and is folded when asked."""

    __slots__ = ("values", "numbers", "rows", "_folded")

    def __init__(self) -> None:
        self.values: dict[str, list[Any]] = {}     # each reading's values, in row order
        self.numbers: dict[str, list[Any]] = {}    # while all are numbers: count, total, high, low, last
        self.rows = 0
        self._folded: dict[str, Any] | None = None

    def add(self, row: Mapping[str, Any]) -> None:
        values, numbers = self.values, self.numbers
        for name, value in row.items():
            if not isinstance(name, str) or ":" in name:  # a minute row's peaks are made, not folded
                continue
            seen = values.get(name)
            number = _number(value)
            if seen is None:
                values[name] = [value]
                if number:
                    numbers[name] = [1, 0 + value, value, value, value]  # 0 + as sum() starts
                continue
            seen.append(value)
            state = numbers.get(name)
            if state is None:
                continue
            if not number:
                del numbers[name]
                continue
            state[0] += 1
            state[1] += value
            if value > state[2]:
                state[2] = value
            if value < state[3]:
                state[3] = value
            state[4] = value
        self.rows += 1
        self._folded = None

    def folded(self) -> dict[str, Any]:
        """The fold of the rows added so far; the same dict until another row is added."""
        if self._folded is not None:
            return self._folded
        out: dict[str, Any] = {}
        for name, seen in self.values.items():
            state = self.numbers.get(name)
            if state is not None:
                _fold_numbers(out, name, *state)
            elif all(isinstance(value, list) for value in seen):
                _fold_lists(out, name, seen)
            else:
                texts = [value for value in seen if isinstance(value, str)]
                if texts:
                    out[name] = texts[-1]
        self._folded = out
        return out


def _fold_numbers(out: dict[str, Any], name: str, count: int, total: Any, high: Any, low: Any, last: Any) -> None:
    kind, peak, dip = _kind(name)
    if kind == "sum":
        out[name] = round(total, 3) if isinstance(total, float) else total
        return
    if kind == "last":
        out[name] = last
        return
    out[name] = round(total / count, 2)
    if peak:
        out[f"{name}:max"] = high
    if dip:
        out[f"{name}:min"] = low


@functools.lru_cache(maxsize=4096)  # a sampler writes the same names in every row
def _kind(name: str) -> tuple[str, bool, bool]:
    """How a minute folds the reading ``name``: ``sum`` (counter deltas, ``interval``,
    ``samples``), ``last`` (counters' totals) or ``mean``; and whether it keeps a peak and
    a dip beside the mean.

    >>> _kind("gpu.0.throttle_s.hw_slowdown"), _kind("gpu.3.util"), _kind("gpu.0.throttle_total_s.x")
    (('sum', False, False), ('mean', True, False), ('last', False, False))
    """
    if is_delta(name) or name in ("interval", "samples"):
        return "sum", False, False
    if any(infix in name for infix in TOTAL_INFIXES):
        return "last", False, False
    return "mean", _matches(name, PEAKS), _matches(name, DIPS)


def _number(value: Any) -> bool:
    """``is_finite_number``, with a float's case first: nearly every reading is one."""
    return value - value == 0.0 if value.__class__ is float else is_finite_number(value)


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
        for index, reason, value in _throttled(row):
            per_gpu = held.setdefault(index, {})
            per_gpu[reason] = round(per_gpu.get(reason, 0.0) + value, 3)
    return held


THROTTLED_KEPT = 4096  # rows whose throttle deltas are kept: an hour of twenty hosts, as the panel reads them
_throttled_of: dict[int, tuple[Mapping[str, Any], tuple[tuple[str, str, Any], ...]]] = {}


def _throttled(row: Mapping[str, Any]) -> tuple[tuple[str, str, Any], ...]:
    """A row's positive throttle deltas: (GPU index, reason, seconds) each. Kept by the
    row's identity, with the row (so that its id stays its own): the store hands the same
    decoded readings for the same stored text, and the panel adds an hour of them up on
    every refresh. A caller never changes a row it was handed."""
    kept = _throttled_of.get(id(row))
    if kept is not None and kept[0] is row:
        return kept[1]
    found = []
    for name, value in row.items():
        if type(name) is str and ".throttle_s." in name and name.startswith("gpu."):
            index, _, reason = name[len("gpu."):].partition(".throttle_s.")
            if ":" not in reason and _number(value) and value > 0:
                found.append((index, reason, value))
    if len(_throttled_of) >= THROTTLED_KEPT:
        _throttled_of.clear()
    kept = (row, tuple(found))  # a tuple: kept, it is no work for the garbage collector
    _throttled_of[id(row)] = kept
    return kept[1]


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
