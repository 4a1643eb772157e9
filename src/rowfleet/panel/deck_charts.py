"""The Flight Deck's charts, drawn a slice of time at a time and kept between refreshes.

A host's hour is cut into slices of the time axis aligned to the clock (``Axis.slice``:
two minutes when every host is shown, one when one host is); a slice is also one hover
column. What a slice draws depends only on the rows that fall in it, on the point its
lines come in from (the previous slice's last), on the chart's scale, and on which lines
the charts have. Each slice is drawn in its own coordinates and placed on the axis by a
translation, so that the axis moves with the clock without redrawing anything: a refresh
draws only the slices whose rows changed (the newest, where samples still arrive) and
takes the rest from ``ChartMemo``, the server's, which lets go at each refresh of what
the one before it did not use (``Kept``). A slice is known by its rows' times and the
decoded readings they hold (``rowfleet.store.telemetry.decode_readings`` hands the same
dict for the same stored text), which the memo keeps alive with the slice, so that a row
rewritten by plain SQL is a new slice and is drawn again.

Owns which readings feed which chart (``layouts``), how a line's points are bucketed
(``downsample``: a bucket's mean, peak or dip, gaps kept) and the drawn charts
(``ChartMemo.charts``). Pure but for the memo; imports the panel's ``svg`` and ``html``
helpers, the readings' names (``rowfleet.telemetry.readings``) and the leaf
``rowfleet.names``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Iterable, Mapping, Sequence

from rowfleet.names import is_finite_number
from rowfleet.panel import svg
from rowfleet.panel.html import clipped
from rowfleet.panel.svg import Point
from rowfleet.telemetry.readings import gpu_indexes

POINTS_PER_CHART = 300  # about this many points per chart over the hour, shared by its lines
LEAST_POINTS = 60       # but never fewer per line
BUCKET_SLACK = 0.8      # a bucket may be this much narrower than the budget asks (``bucket_seconds``)
LINES_MOST = 16         # lines per chart; more (plain SQL, a host with many GPUs) are counted, not drawn
LABEL_MOST = 60         # characters of a name (an interface, a reason) in a label
PALETTE = 8             # line classes s0 .. s7, reused in turn
NAME_SETS_KEPT = 256    # distinct sets of reading names kept to share (``_NAMES``)
DRAWINGS_KEPT = 8       # drawings a slice keeps (one per scale and incoming point it was drawn with)
TEMPERATURE_SCALE = 100.0  # °C at the top of every temperature chart (hotter is drawn at the edge)

COMBINED = {"sum": sum, "mean": lambda values: sum(values) / len(values), "max": max, "min": min}
AGGREGATES = {"mean": lambda values: sum(value / len(values) for value in values),  # no overflow to inf
              "max": max, "min": min}


# --- pure: which readings feed which chart ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Line:
    """One line a chart asks for: its label, the readings it takes (several made one value
    by ``combine``: a reason's throttle seconds over every GPU), its CSS class, and how a
    bucket keeps it (``how``: mean, max or min)."""

    label: str
    readings: tuple[str, ...]
    css: str
    how: str = "mean"
    combine: str = "sum"


@dataclasses.dataclass(frozen=True, eq=False)  # known by identity: ``layouts`` hands the same ones
class Layout:
    """One chart of a card: its title and unit, the least top of its scale (100 % and
    100 °C, so that hosts side by side compare), its lines, how many were left out past
    ``LINES_MOST``, and the readings whose largest value tops its scale where the rows
    hold any (``ceiling``: the GPUs' highest SM clock, so that an idle card's 345 MHz
    reads as low on its own scale rather than filling the chart)."""

    title: str
    unit: str
    least_top: float
    lines: tuple[Line, ...]
    left_out: int = 0
    ceiling: tuple[str, ...] = ()



@functools.lru_cache(maxsize=256)
def layouts(present: frozenset[str], gpus_apart: bool = True) -> tuple[Layout, ...]:
    """The charts a host's readings named ``present`` make, each with its lines; a chart
    without a line is left out. With ``gpus_apart`` a line per GPU; without (every host
    at once) its GPUs together: their mean and least utilisation, the hottest, their power
    and VRAM added up, the slowest clock.

    >>> [(chart.title, [line.label for line in chart.lines])
    ...  for chart in layouts(frozenset({"cpu.busy", "gpu.0.util", "gpu.1.util", "gpu.0.throttle_s.hw_slowdown"}))]
    [('Utilisation', ['cpu', 'gpu0', 'gpu1']), ('Throttled', ['hw_slowdown'])]
    >>> [line.label for line in layouts(frozenset({"gpu.0.util", "gpu.1.util"}), gpus_apart=False)[0].lines]
    ['GPUs mean', 'least busy GPU']
    >>> layouts(frozenset({"gpu.0.sm_mhz", "gpu.0.max_sm_mhz", "gpu.1.sm_mhz"}))[0].ceiling
    ('gpu.0.max_sm_mhz',)
    """
    gpus = [index for index in gpu_indexes(dict.fromkeys(present)) if index.isascii() and index.isdigit()]
    nets = sorted({name[len("net."):-len(".rx_bps")] for name in present
                   if name.startswith("net.") and name.endswith(".rx_bps") and len(name) > len("net..rx_bps")})
    reasons = sorted({name.partition(".throttle_s.")[2] for name in present
                      if name.startswith("gpu.") and ".throttle_s." in name and ":" not in name})

    def per_gpu(reading: str, how: str, suffix: str = "", css: str = "line") -> list[Line]:
        return [Line(f"gpu{index}{suffix}", (f"gpu.{index}.{reading}",), f"{css} s{n % PALETTE}", how)
                for n, index in enumerate(gpus) if f"gpu.{index}.{reading}" in present]

    def host(label: str, reading: str, css: str, how: str) -> list[Line]:
        return [Line(label, (reading,), css, how)] if reading in present else []

    def all_gpus(reading: str, how: str, label: str, combine: str, css: str = "line s0") -> list[Line]:
        """One line for every GPU's ``reading`` together, as ``combine`` makes one value of them."""
        names = tuple(f"gpu.{index}.{reading}" for index in gpus if f"gpu.{index}.{reading}" in present)
        return [Line(label, names, css, how, combine)] if names else []

    if gpus_apart:
        utilisation, temperature = per_gpu("util", "max"), per_gpu("temp", "max")
        clock = per_gpu("sm_mhz", "min")
        power = _pairs(per_gpu("power_w", "max"), per_gpu("power_limit_w", "mean", " limit", "line limit"))
        vram = _pairs(per_gpu("vram_used_mib", "max"), per_gpu("vram_total_mib", "mean", " total", "line limit"))
    else:  # every host at once: a host's GPUs as one
        mean = all_gpus("util", "max", "GPUs mean", "mean")
        least = all_gpus("util", "min", "least busy GPU", "min", "line s1") if len(gpus) > 1 else []
        utilisation = mean + least
        temperature = all_gpus("temp", "max", "hottest GPU", "max")
        clock = all_gpus("sm_mhz", "min", "slowest GPU", "min")
        power = all_gpus("power_w", "max", "GPUs", "sum") + \
            all_gpus("power_limit_w", "mean", "GPUs limit", "sum", "line limit s1")
        vram = all_gpus("vram_used_mib", "max", "GPUs", "sum") + \
            all_gpus("vram_total_mib", "mean", "GPUs total", "sum", "line limit s1")

    highest_clocks = tuple(f"gpu.{index}.max_sm_mhz" for index in gpus if f"gpu.{index}.max_sm_mhz" in present)
    asked = [  # title, unit, the least top of its scale, its lines, the readings that top its scale
        ("Utilisation", "%", 100.0, host("cpu", "cpu.busy", "line cpu", "max") + utilisation),
        ("Temperature", "°C", TEMPERATURE_SCALE,
         host("hottest sensor", "temp.hottest", "line hottest", "max") + temperature),
        ("GPU power", "W", 0.0, power),
        ("SM clock", "MHz", 0.0, clock, highest_clocks),
        ("VRAM", "MiB", 0.0, vram),
        ("Network", "B/s", 0.0, [Line(f"{clipped(net, LABEL_MOST)} {way}", (f"net.{net}.{way}_bps",),
                                      f"line {way} s{n % PALETTE}")
                                 for n, net in enumerate(nets) for way in ("rx", "tx")
                                 if f"net.{net}.{way}_bps" in present]),
        ("Throttled", "s/sample", 0.0, [Line(clipped(reason, LABEL_MOST),
                                             tuple(f"gpu.{index}.throttle_s.{reason}" for index in gpus),
                                             f"line s{n % PALETTE}", "max") for n, reason in enumerate(reasons)]),
    ]
    return tuple(Layout(title, unit, top, tuple(lines[:LINES_MOST]), max(len(lines) - LINES_MOST, 0), *ceiling)
                 for title, unit, top, lines, *ceiling in asked if lines)


def _pairs(first: list[Line], second: list[Line]) -> list[Line]:
    """Each GPU's line followed by its limit's, so that a chart cut at ``LINES_MOST`` keeps pairs."""
    limit_of = {line.label.split(" ")[0]: line for line in second}
    paired = []
    for line in first:
        paired.append(line)
        if line.label in limit_of:
            paired.append(limit_of.pop(line.label))
    return paired + list(limit_of.values())


# --- pure: a line's points ----------------------------------------------------------------------


def downsample(points: Iterable[Point], start: float, end: float, *, most: int, gap: float,
               how: str = "mean") -> list[Point]:
    """``points`` within ``[start, end]``, at most ``most`` of them: when there are more,
    the span is cut into ``most`` buckets and each bucket's points become one (at their
    mean time, with the ``how`` of their values: ``mean``, ``max`` or ``min``). Gaps are
    kept: where two neighbours are more than ``gap`` seconds apart, or a value that is no
    finite number lies between them (where ``svg.segments`` cuts), a ``(time, nan)`` point
    goes between, which no chart line crosses; a gap inside one bucket is narrower than
    the chart can show, and the bucket spans it.

    >>> downsample([(0, 1.0), (1, 3.0), (2, 5.0), (3, 7.0)], 0, 4, most=2, gap=5)
    [(0.5, 2.0), (2.5, 6.0)]
    >>> downsample([(0, 1.0), (1, 3.0), (2, 5.0), (3, 7.0)], 0, 4, most=2, gap=5, how="max")
    [(0.5, 3.0), (2.5, 7.0)]
    >>> downsample([(0, 1), (1, 1), (30, 2), (31, float("nan")), (32, 2), (50, 9)], 0, 40, most=10, gap=5)
    [(0.0, 1.0), (1.0, 1.0), (15.5, nan), (30.0, 2.0), (31.0, nan), (32.0, 2.0)]
    >>> downsample([(t, 1.0) for t in range(0, 100)] + [(t, 2.0) for t in range(200, 300)], 0, 300, most=3, gap=5)
    [(49.5, 1.0), (149.5, nan), (249.5, 2.0)]
    """
    if how not in AGGREGATES:
        raise ValueError(f"how must be one of {', '.join(AGGREGATES)}, got {how!r}")
    if most < 1 or not end > start:
        return []
    # In time order; a value that is no number stays, as a gap.
    ordered = sorted(((float(at), float(value) if _finite(value) else math.nan)
                      for at, value in points if _finite(at) and start <= at <= end), key=lambda point: point[0])
    return _downsampled(ordered, start, end, most, gap, how)


def _downsampled(ordered: list[Point], start: float, end: float, most: int, gap: float, how: str) -> list[Point]:
    """``downsample`` of points already in time order within the span, as floats (a nan
    value a gap): what a slice's rows give, checked once (``_points``)."""
    out: list[Point] = []
    previous: float | None = None
    pending = False  # a gap since the previous point
    if sum(1 for _, value in ordered if value == value) <= most:
        for at, value in ordered:
            if value != value:
                pending = True
                continue
            if previous is not None and (pending or at - previous > gap):
                out.append(((previous + at) / 2, math.nan))
            out.append((at, value))
            previous, pending = at, False
        return out
    width, aggregate = (end - start) / most, AGGREGATES[how]
    current: int | None = None
    times: list[float] = []
    values: list[float] = []
    gap_before = False
    for at, value in ordered:
        if value != value:
            pending = True
            continue
        if previous is not None and at - previous > gap:
            pending = True
        index = int((at - start) // width)
        if index >= most:
            index = most - 1  # ``end`` itself
        if index != current:
            if times:
                _bucket(out, times, values, gap_before, aggregate)
            gap_before, current, times, values = pending, index, [], []
        pending = False  # a gap inside one bucket is narrower than the chart shows
        times.append(at)
        values.append(value)
        previous = at
    if times:
        _bucket(out, times, values, gap_before, aggregate)
    return out


def _bucket(out: list[Point], times: list[float], values: list[float], gap_before: bool, aggregate: Any) -> None:
    """Add a bucket's point to ``out``, after a gap's mark when one came before it."""
    at = round(sum(times) / len(times), 3)
    if gap_before and out:
        out.append((round((out[-1][0] + at) / 2, 3), math.nan))
    out.append((at, round(aggregate(values), 3)))


def _finite(value: Any) -> bool:
    """``names.is_finite_number``, with a float's case first (most readings are floats)."""
    return value - value == 0.0 if value.__class__ is float else is_finite_number(value)


def _points(timed: Sequence[tuple[float, Mapping[str, Any]]], readings: tuple[str, ...],
            combine: str = "sum") -> list[Point]:
    """A line's points from ``timed`` rows (time, readings), as floats: each row's reading
    (``combine`` of ``readings`` where several are given, of those it has); a row without a
    number for any is no point. Spelled out for speed: it runs for every sample of every
    line of the deck."""
    if len(readings) == 1:
        name = readings[0]
        return [(at, float(value)) for at, values in timed for value in (values.get(name),)
                if value is not None and _finite(value)]
    points: list[Point] = []
    for at, values in timed:
        get = values.get
        found = [value for value in map(get, readings) if value is not None and _finite(value)]
        if not found:
            continue
        total = COMBINED[combine](found)
        if total - total == 0.0:  # floats: a huge sum is inf, no point
            points.append((at, float(total)))
    return points


def bucket_seconds(lines: int, slice_seconds: int, window: float) -> int:
    """The width of a chart's buckets: about ``POINTS_PER_CHART`` points over ``window``
    shared by its ``lines`` (``LEAST_POINTS`` a line at least), as a width that divides a
    slice, so that a slice holds whole buckets and its points never depend on the next
    slice's rows: the narrowest at least ``BUCKET_SLACK`` of the width asked for (so a
    chart holds at most a quarter more points than asked, rather than half as many).

    >>> bucket_seconds(1, 60, 3600.0), bucket_seconds(3, 60, 3600.0), bucket_seconds(16, 60, 3600.0)
    (10, 30, 60)
    """
    each = max(LEAST_POINTS, POINTS_PER_CHART // max(lines, 1))
    least = max(1, math.ceil(BUCKET_SLACK * window / each))
    return next((width for width in range(least, slice_seconds + 1) if slice_seconds % width == 0), slice_seconds)


# --- the drawn charts ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Axis:
    """The time axis every chart of a page shares: the window ``[start, end]``, the slice
    (seconds, a whole number that divides a day, so slices align to the clock), the gap
    (seconds between neighbours after which a line is cut), and the chart's size."""

    start: float
    end: float
    slice: int
    gap: float
    width: int
    height: int

    @property
    def across(self) -> float:
        """Units of the chart per second."""
        return self.width / (self.end - self.start)


@dataclasses.dataclass(frozen=True)
class Drawn:
    """One chart as the deck shows it: title, unit, scale top, the lines drawn (those with a
    point in the window), how many were left out, and its SVG. ``points`` gives the lines'
    points (gaps as nan) for the JSON twin."""

    title: str
    unit: str
    high: float
    lines: tuple[Line, ...]
    left_out: int
    svg: str
    slices: tuple["Slice", ...]  # what ``points`` reads: the chart's ``chart``-th, lines ``shown``
    chart: int
    shown: tuple[int, ...]
    gap: float

    def points(self) -> list[list[Point]]:
        """Each drawn line's points in the window, in time order, a ``(time, nan)`` between
        two that a gap parts."""
        out = []
        for index in self.shown:
            joined: list[Point] = []
            before: Incoming = None
            for one in self.slices:
                points, edges = one.points[self.chart][index], one.edges[self.chart][index]
                if joined and points and not _joins(edges, before, self.gap):
                    joined.append(((joined[-1][0] + points[0][0]) / 2, math.nan))
                joined += points
                before = _last(points, edges, before)
            out.append(joined)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: each point ``[time, value]``, a gap ``[time, null]``."""
        return {"title": self.title, "unit": self.unit, "high": self.high, "left_out": self.left_out,
                "series": [{"label": line.label, "points": [[at, None if math.isnan(value) else value]
                                                           for at, value in points]}
                           for line, points in zip(self.lines, self.points())]}


# What a line comes into a slice from: the time and value of its last point before it, and
# the time of its last sample (a point may be a bucket's), or None for nothing.
Incoming = tuple[float, float, float] | None


class Slice:
    """One slice of a host's rows, its lines' points (per chart, per line: bucketed, a gap
    as nan) and the drawings made of it. Holds its rows' readings, so that the ids its
    key is made of stay theirs while it is kept."""

    __slots__ = ("start", "rows", "points", "edges", "tops", "ceilings", "drawings")

    def __init__(self, start: float, rows: tuple[tuple[float, Mapping[str, Any]], ...],
                 points: tuple[tuple[tuple[Point, ...], ...], ...],
                 edges: tuple[tuple[tuple[float, float] | None, ...], ...],
                 ceilings: tuple[float | None, ...]) -> None:
        self.start = start
        self.rows = rows
        self.points = points  # per chart, per line: bucketed, a gap as nan
        self.edges = edges    # per chart, per line: the times of its first and last sample here, or None
        self.tops = tuple(_top(lines) for lines in points)  # per chart, per line: its largest value
        self.ceilings = ceilings  # per chart: the largest of its ceiling's readings, or None
        self.drawings: dict[tuple[Any, ...], tuple[str, tuple[Incoming, ...]]] = {}

    def top(self, chart: int) -> tuple[float | None, ...]:
        """Each line of chart ``chart``: its largest value in the slice, None for none."""
        return self.tops[chart]

    def ceiling(self, chart: int) -> float | None:
        """The largest of chart ``chart``'s ceiling readings in the slice, None for none."""
        return self.ceilings[chart]

    def drawing(self, chart: int, lines: tuple[Line, ...], incoming: tuple[Incoming, ...], axis: Axis,
                high: float, unit: str) -> tuple[str, tuple[Incoming, ...]]:
        """The slice's drawing of chart ``chart`` when its lines come in from ``incoming``
        (``Incoming``, per line) on a scale up to ``high``, and what comes out of it."""
        key = (chart, high, incoming)
        kept = self.drawings.get(key)
        if kept is None:
            points, edges = self.points[chart], self.edges[chart]
            kept = (_slice_body(points, edges, lines, incoming, self.start, axis, high, unit),
                    tuple(_last(*each) for each in zip(points, edges, incoming)))
            if len(self.drawings) >= DRAWINGS_KEPT:
                self.drawings.clear()
            self.drawings[key] = kept
        return kept


_NAMES: dict[frozenset[str], frozenset[str]] = {}


class Kept:
    """What one refresh made, kept for the next: two generations, the one being made
    (``made``) and the last (``last``). A lookup that finds a value in the last moves it
    on; ``turn`` lets go of what the last refresh made and this one did not use, so that
    the memo holds what the deck draws now and no more, however many hosts it has."""

    def __init__(self) -> None:
        self.made: dict[Any, Any] = {}
        self.last: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        value = self.made.get(key)
        if value is None:
            value = self.last.get(key)
            if value is not None:
                self.made[key] = value
        return value

    def put(self, key: Any, value: Any) -> None:
        self.made[key] = value

    def turn(self) -> None:
        self.last, self.made = self.made, {}


class ChartMemo:
    """The slices drawn for the last refresh, shared by a server's requests: a page calls
    ``turn`` once per refresh, and what the refresh before did not use is let go. Each
    request computes outside any lock (dict reads and writes are atomic): two computing
    one slice at once both get it right, and two refreshes at once only draw more."""

    def __init__(self) -> None:
        self.slices, self.names, self.strips, self.runs = Kept(), Kept(), Kept(), Kept()

    def turn(self) -> None:
        """A refresh begins: let go of what the one before it did not use."""
        for kept in (self.slices, self.names, self.strips, self.runs):
            kept.turn()

    def charts(self, rows: Sequence[Mapping[str, Any]], axis: Axis, gpus_apart: bool) -> list[Drawn]:
        """The charts of a host's ``rows`` (``{"at", "readings"}``, in time order) on
        ``axis``: a line per GPU with ``gpus_apart``, else a host's GPUs as one."""
        by_slice = self._cut(rows, axis)
        present = frozenset().union(*(self._names(key, one) for key, one in by_slice))
        charts = layouts(present, gpus_apart)
        slices = tuple(self._slice((gpus_apart, charts, axis.slice, axis.gap, key), one, charts, axis)
                       for key, one in by_slice)
        drawn = (self._chart(slices, index, layout, axis) for index, layout in enumerate(charts))
        return [chart for chart in drawn if chart is not None]

    # --- the slices --------------------------------------------------------------------------

    @staticmethod
    def _cut(rows: Sequence[Mapping[str, Any]], axis: Axis) -> list[tuple[tuple[Any, ...], list[Any]]]:
        """The window's rows by slice, in time order, each slice with its key: its index and
        its rows' times and readings' ids."""
        found: dict[int, list[tuple[float, Mapping[str, Any]]]] = {}
        size = axis.slice
        for row in rows:
            at = row["at"]
            if _finite(at) and axis.start <= at <= axis.end:
                found.setdefault(int(at // size), []).append((float(at), row["readings"]))
        return [((k, tuple((at, id(readings)) for at, readings in one)), one) for k, one in sorted(found.items())]

    def _names(self, key: tuple[Any, ...], rows: list[tuple[float, Mapping[str, Any]]]) -> frozenset[str]:
        kept = self.names.get(key)
        if kept is not None:
            return kept[1]
        names = frozenset(name for _, readings in rows for name in readings if type(name) is str)
        names = _NAMES.setdefault(names, names)  # a sampler's slices name the same readings: one set for all
        if len(_NAMES) > NAME_SETS_KEPT:
            _NAMES.clear()
        self.names.put(key, (tuple(rows), names))
        return names

    def _slice(self, key: tuple[Any, ...], rows: list[tuple[float, Mapping[str, Any]]],
               charts: tuple[Layout, ...], axis: Axis) -> Slice:
        kept = self.slices.get(key)
        if kept is not None:
            return kept
        start = key[-1][0] * axis.slice
        end = start + axis.slice
        window = axis.end - axis.start
        points, edges, ceilings = [], [], []
        for chart in charts:
            most = axis.slice // bucket_seconds(len(chart.lines), axis.slice, window)
            samples = [_points(rows, line.readings, line.combine) for line in chart.lines]
            # Tuples, not lists: what the memo keeps is then no work for the garbage collector.
            points.append(tuple(tuple(_downsampled(one, start, end, most, axis.gap, line.how))
                                for one, line in zip(samples, chart.lines)))
            edges.append(tuple((one[0][0], one[-1][0]) if one else None for one in samples))
            ceilings.append(max((value for _, value in _points(rows, chart.ceiling, "max")), default=None)
                            if chart.ceiling else None)
        made = Slice(start, tuple(rows), tuple(points), tuple(edges), tuple(ceilings))
        self.slices.put(key, made)
        return made

    def strip(self, ticks: Sequence[tuple[float, str]], axis: Axis, height: int) -> str:
        """A strip of ``height`` with a tick at each ``(time, title)`` of ``ticks`` in the
        window, a slice at a time as the charts are drawn (the same ticks as the last
        refresh's are drawn once: a host's jobs change less often than the deck refreshes)."""
        key = (axis.slice, axis.width, axis.end - axis.start, height, tuple(ticks))
        groups = self.strips.get(key)
        if groups is None:
            groups = self._strip_slices(ticks, axis, height)
            self.strips.put(key, groups)
        across, first, last = axis.across, int(axis.start // axis.slice), int(axis.end // axis.slice)
        drawn = [f'<g transform="translate({(k * axis.slice - axis.start) * across:.2f})">{body}</g>'
                 for k, body in groups if first <= k <= last]
        return (f'<svg class="chart" viewBox="0 0 {axis.width} {height}" width="{axis.width}" height="{height}" '
                f'preserveAspectRatio="none" role="img">{"".join(drawn)}</svg>')

    @staticmethod
    def _strip_slices(ticks: Sequence[tuple[float, str]], axis: Axis, height: int) -> tuple[tuple[int, str], ...]:
        """The ticks drawn a slice at a time: (slice index, drawing) each, in time order."""
        by_slice: dict[int, list[tuple[float, str]]] = {}
        for at, title in ticks:
            if _finite(at):
                by_slice.setdefault(int(at // axis.slice), []).append((float(at), title))
        across = axis.across
        return tuple((k, "".join(f'<line class="tick" x1="{x}" y1="0" x2="{x}" y2="{height}">'
                                 f'<title>{svg.escaped(title)}</title></line>'
                                 for at, title in one for x in (svg.coordinate((at - k * axis.slice) * across),)))
                     for k, one in sorted(by_slice.items()))

    def _run(self, slices: tuple[Slice, ...]) -> "Run":
        key = tuple(id(one) for one in slices)
        kept = self.runs.get(key)
        if kept is None:
            kept = Run(slices)
            self.runs.put(key, kept)
        return kept

    def _chart(self, slices: tuple[Slice, ...], index: int, layout: Layout, axis: Axis) -> Drawn | None:
        """Chart ``index`` of ``slices``: the leftmost slice (which loses rows as the window
        moves on), the run of slices after it (kept whole while the window moves, ``Run``)
        and the newest (where rows still arrive), each placed on the axis."""
        lines = layout.lines
        parts: list[Slice | Run] = [slices[0], self._run(slices[1:-1]), slices[-1]] if len(slices) > 2 else \
            list(slices)
        tops = [part.top(index) for part in parts]
        shown = [n for n in range(len(lines)) if any(top[n] is not None for top in tops)]
        if not shown:
            return None
        seen = max([layout.least_top, *(top[n] for top in tops for n in shown if top[n] is not None)])
        # Up to the ceiling where the rows say one (the GPUs' highest clock); only where
        # none is known (a sampler that reads no maximum, rows from plain SQL) up to the
        # highest value seen. A value past the ceiling still fits.
        top = max([seen, *(ceiling for part in parts for ceiling in (part.ceiling(index),) if ceiling is not None)])
        high = top if top > 0 else 1.0
        drawn = []
        last: tuple[Incoming, ...] = (None,) * len(lines)  # what each line comes in from
        for part in parts:
            body, last = part.drawing(index, lines, last, axis, high, layout.unit)
            drawn.append(f'<g transform="translate({(part.start - axis.start) * axis.across:.2f})">{body}</g>')
        picture = (f'<svg class="chart" viewBox="0 0 {axis.width} {axis.height}" width="{axis.width}" '
                   f'height="{axis.height}" preserveAspectRatio="none" role="img">{"".join(drawn)}</svg>')
        return Drawn(layout.title, layout.unit, high, tuple(lines[n] for n in shown), layout.left_out, picture,
                     slices, index, tuple(shown), axis.gap)


class Run:
    """Consecutive slices drawn as one, in the coordinates of the first: the slices between
    a chart's leftmost and its newest, which stay the same while the window moves on for
    a slice's time. Holds its slices, so that the ids its key is made of stay theirs."""

    __slots__ = ("slices", "start", "tops", "ceilings", "drawings")

    def __init__(self, slices: tuple[Slice, ...]) -> None:
        self.slices = slices
        self.start = slices[0].start if slices else 0.0
        self.tops: dict[int, tuple[float | None, ...]] = {}
        self.ceilings: dict[int, float | None] = {}
        self.drawings: dict[tuple[Any, ...], tuple[str, tuple[Incoming, ...]]] = {}

    def ceiling(self, chart: int) -> float | None:
        """The largest of chart ``chart``'s ceiling readings in the run, None for none."""
        if chart not in self.ceilings:
            self.ceilings[chart] = max((c for one in self.slices for c in (one.ceiling(chart),) if c is not None),
                                       default=None)
        return self.ceilings[chart]

    def top(self, chart: int) -> tuple[float | None, ...]:
        """Each line of chart ``chart``: its largest value in the run, None for none."""
        if chart not in self.tops:
            each = [one.tops[chart] for one in self.slices]
            self.tops[chart] = tuple(max((top[n] for top in each if top[n] is not None), default=None)
                                     for n in range(len(each[0]))) if each else ()
        return self.tops[chart]

    def drawing(self, chart: int, lines: tuple[Line, ...], incoming: tuple[Incoming, ...], axis: Axis,
                high: float, unit: str) -> tuple[str, tuple[Incoming, ...]]:
        """The run's drawing of chart ``chart``, as ``Slice.drawing``."""
        key = (chart, high, incoming)
        kept = self.drawings.get(key)
        if kept is None:
            drawn, last = [], incoming
            for one in self.slices:
                body, last = one.drawing(chart, lines, last, axis, high, unit)
                drawn.append(f'<g transform="translate({(one.start - self.start) * axis.across:.2f})">{body}</g>')
            kept = ("".join(drawn), last)
            if len(self.drawings) >= DRAWINGS_KEPT:
                self.drawings.clear()
            self.drawings[key] = kept
        return kept


def _top(lines: tuple[Sequence[Point], ...]) -> tuple[float | None, ...]:
    """Each line's largest value, None for none."""
    return tuple(max((value for _, value in points if value == value), default=None) for points in lines)


def _last(points: Sequence[Point], edges: tuple[float, float] | None, before: Incoming) -> Incoming:
    """What a line comes into the next slice from: this slice's last point and last sample,
    or, when it has none, what it came in from."""
    if not points or edges is None:
        return before
    at, value = points[-1]  # never a gap's mark: marks go between points
    return at, value, edges[1]


def _joins(edges: tuple[float, float] | None, before: Incoming, gap: float) -> bool:
    """Whether a line's first sample in a slice continues the line it comes in from: no more
    than ``gap`` seconds after the last sample before it."""
    return before is not None and edges is not None and edges[0] - before[2] <= gap


def _slice_body(lines_points: tuple[Sequence[Point], ...], lines_edges: tuple[tuple[float, float] | None, ...],
                lines: tuple[Line, ...], incoming: tuple[Incoming, ...], k_start: float, axis: Axis, high: float,
                unit: str) -> str:
    """A slice's drawing in its own coordinates (x from the slice's start): each line's runs
    as polylines, the first starting at the point it comes in from when no gap parts them,
    a lone point as a dot; then the slice's hover target, titled with the time and each
    line's last value in it."""
    across = axis.across
    height = axis.height
    up = height / high
    drawn = []
    values = []
    newest = -math.inf
    for points, edges, line, before in zip(lines_points, lines_edges, lines, incoming):
        runs: list[list[Point]] = [[]]
        if before is not None and _joins(edges, before, axis.gap):
            runs[0].append(before[:2])
        for at, value in points:
            if value != value:
                runs.append([])
            else:
                runs[-1].append((at, value))
        css = svg.escaped(line.css)
        for run in runs:
            xy = [f"{svg.coordinate((at - k_start) * across)},"
                  f"{svg.coordinate(height - min(max(value, 0.0), high) * up)}" for at, value in run]
            if len(xy) == 1:  # a lone sample between gaps: a dot, not a line to nowhere
                x, y = xy[0].split(",")
                drawn.append(f'<circle class="{css}" cx="{x}" cy="{y}" r="1.5"/>')
            elif xy:
                drawn.append(f'<polyline points="{" ".join(xy)}" class="{css}" fill="none"/>')
        mine = [point for point in points if point[1] == point[1]]
        if mine:
            at, value = mine[-1]
            newest = max(newest, at)
            values.append(f"{line.label} {svg.value_text(value)} {unit}" if unit else
                          f"{line.label} {svg.value_text(value)}")
    if values:
        drawn.append(f'<rect class="hover" x="0" y="0" width="{svg.coordinate(axis.slice * across)}" '
                     f'height="{height}"><title>{svg.clock(newest)} · {svg.escaped("; ".join(values))}</title></rect>')
    return "".join(drawn)
