"""The Flight Deck (``/deck``): every host side by side, worst first, each a card with its
newest sample, the jobs running on it, and its last hour drawn as charts on one time axis
shared by every card (``[now - 1 h, now]``), so that hosts line up; ``?host=H`` shows one.

A card's charts: CPU and GPU utilisation, temperatures, GPU power against its limit, SM
clock, VRAM used against total, network receive and send, and the seconds the GPUs were
held back per reason; ticks mark where jobs started and ended on the host. No line crosses
a gap: a gap is ``GAP_INTERVALS`` times the host's sample interval (``sample_interval``:
the intervals its sampler wrote in its rows, else the rows' spacing, else the configured
cadence). An hour of 2-second samples is 1,800 points a reading, too many to draw twenty
times: each chart keeps about ``POINTS_PER_CHART`` points (``downsample``: a bucket's mean,
peak or dip, with the gaps kept).

Owns the order of the hosts (``worst_first``), which readings feed which chart
(``host_charts``), ``sample_interval`` and ``downsample``. Reads through the hosts' read
model (``rowfleet.hosts``) and the store's browsing reads; imports no driver, no SQL, no
command line and no other page.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Iterable, Mapping, Sequence

from rowfleet import hosts as host_model
from rowfleet import names
from rowfleet.errors import ConfigError
from rowfleet.hosts import HostView
from rowfleet.names import is_finite_number
from rowfleet.panel import svg
from rowfleet.panel.app import HttpError, Request, View
from rowfleet.panel.html import Markup, clipped, definitions, join, link, table, tag, url, when
from rowfleet.panel.svg import Point, Series
from rowfleet.store.browse import EndedJob
from rowfleet.store.telemetry import HostSample
from rowfleet.telemetry.readings import fold_minute, gpu_indexes

WINDOW = 3600.0         # seconds of the shared time axis
MINUTE = 60.0           # seconds a point of the every-host deck stands for
HOT_CELSIUS = 85.0      # a sensor or a GPU this hot puts its host near the top
DEAD_AFTER = 300.0      # seconds without a sample after which a host is silent, whatever its cadence
GAP_INTERVALS = 3       # samples missed in a row before a line is cut
POINTS_PER_CHART = 300  # about this many points per chart, shared by its lines
LEAST_POINTS = 60       # but never fewer per line
LINES_MOST = 16         # lines per chart; more (plain SQL, a host with many GPUs) are counted, not drawn
TICK_JOBS = 2000        # finished jobs read for the ticks
LABEL_MOST = 60         # characters of a name (an interface, a reason) in a label
NAME_MOST = 120         # characters of a host name in a card's heading
CHART_WIDTH, CHART_HEIGHT = 600, 80
STRIP_HEIGHT = 16       # the jobs strip under a card's charts
TICKS_SHOWN = 400       # job starts and ends drawn on one card's strip, the newest
HOVER_EVERY_HOST = 20.0  # width of a hover column when every host is shown (30 a chart: 2 minutes each)
TEMPERATURE_SCALE = 100.0  # °C at the top of every temperature chart (hotter is drawn at the edge)

THROTTLING, HOT, SILENT, FINE = "throttling", "hot", "silent", "fine"
CONDITIONS = (THROTTLING, HOT, SILENT, FINE)  # worst first
PALETTE = 8  # line classes s0 .. s7, reused in turn

COMBINED = {"sum": sum, "mean": lambda values: sum(values) / len(values), "max": max, "min": min}
AGGREGATES = {"mean": lambda values: sum(value / len(values) for value in values),  # no overflow to inf
              "max": max, "min": min}


# --- pure: the order of the hosts ------------------------------------------------------------


def condition(host: HostView, now: float) -> str:
    """What puts ``host`` where it is on the deck at ``now``: ``throttling`` (a GPU slowed
    by power or heat now), ``hot`` (its hottest sensor or a GPU at ``HOT_CELSIUS`` or
    more), ``silent`` (its newest sample is stale by its sampler's cadence, older than
    ``DEAD_AFTER``, or unreadable), else ``fine``. A silent host's last readings say
    nothing of now, so they never rank it as throttling or hot.

    >>> from rowfleet.hosts import GpuView
    >>> gpu = GpuView(0, None, 90, None, None, 70, None, None, None, slowdowns=("sw_power_cap",))
    >>> box = HostView("box", 100.0, 2.0, False, None, None, None, None, 60.0, gpus=(gpu,))
    >>> condition(box, 102.0), condition(box, 100.0 + DEAD_AFTER + 1)
    ('throttling', 'silent')
    >>> condition(HostView("b", 100.0, 2.0, False, None, None, None, None, 85.0), 102.0)
    'hot'
    """
    if host.stale or host.error is not None or now - host.at > DEAD_AFTER:
        return SILENT
    if any(gpu.slowdowns for gpu in host.gpus):
        return THROTTLING
    temperatures = [host.hottest, *(gpu.temp for gpu in host.gpus)]
    if any(value is not None and value >= HOT_CELSIUS for value in temperatures):
        return HOT
    return FINE


def worst_first(hosts: Iterable[HostView], now: float) -> list[HostView]:
    """``hosts`` in the order the deck shows them at ``now``: throttling GPUs first, then
    hot, then silent, then the rest (``condition``); ties by name.

    >>> def box(name, at=100.0, hottest=None, stale=False):
    ...     return HostView(name, at, 0.0, stale, None, None, None, None, hottest)
    >>> [h.host for h in worst_first([box("a"), box("c", hottest=91.0), box("b", stale=True),
    ...                               box("d", at=-1000.0), box("e", hottest=88.5)], now=101.0)]
    ['c', 'e', 'b', 'd', 'a']
    """
    return sorted(hosts, key=lambda host: (CONDITIONS.index(condition(host, now)), host.host))


# --- pure: series ------------------------------------------------------------------------------


def sample_interval(rows: Sequence[Mapping[str, Any]], default: float) -> float:
    """The seconds between a host's samples: the median of the intervals its sampler wrote
    in ``rows`` (``interval``), else the median spacing of the rows' times, else
    ``default`` (the configured cadence).

    >>> rows = [{"at": 0.0, "readings": {}}, {"at": 2.0, "readings": {"interval": 2.0}},
    ...         {"at": 4.1, "readings": {"interval": 2.1}}, {"at": 60.0, "readings": {"interval": 55.9}}]
    >>> sample_interval(rows, 5.0), sample_interval([{"at": 0.0, "readings": {}}, {"at": 10.0, "readings": {}}], 5.0)
    (2.1, 10.0)
    >>> sample_interval([], 5.0), sample_interval([{"at": 1.0, "readings": {"interval": "2"}}], 5.0)
    (5.0, 5.0)
    """
    intervals = [value for row in rows for value in (row["readings"].get("interval"),)
                 if is_finite_number(value) and value > 0]
    if intervals:
        return float(statistics.median(intervals))
    times = sorted(row["at"] for row in rows if is_finite_number(row["at"]))
    spacings = [later - earlier for earlier, later in zip(times, times[1:]) if later > earlier]
    return float(statistics.median(spacings)) if spacings else float(default)


def downsample(points: Iterable[Point], start: float, end: float, *, most: int, gap: float,
               how: str = "mean") -> list[Point]:
    """``points`` within ``[start, end]`` for a chart, at most ``most`` of them: when there
    are more, the window is cut into ``most`` buckets and each bucket's points become one
    (at their mean time, with the ``how`` of their values: ``mean``, ``max`` or ``min``).
    Gaps are kept: where two neighbours are more than ``gap`` seconds apart, or a value
    that is no finite number lies between them (where ``svg.segments`` cuts), a
    ``(time, nan)`` point goes between, which no chart line crosses; a gap inside one
    bucket is narrower than the chart can show, and the bucket spans it. Draw the result
    with ``drawn_gap``.

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
    """``downsample`` of points already in time order within the window, as floats (a nan
    value a gap): what a host's rows give, checked once (``_points``)."""
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


def drawn_gap(gap: float, start: float, end: float, most: int) -> float:
    """The gap to draw a ``downsample`` result with: its gaps are marked already, and two
    neighbours of one run are at most ``gap`` plus two buckets apart.

    >>> drawn_gap(6.0, 0.0, 3600.0, 300)
    30.0
    """
    return gap + 2 * (end - start) / max(most, 1)


@dataclasses.dataclass(frozen=True)
class Line:
    """One line a chart asks for: its label, the readings it takes (added up when several:
    a reason's throttle seconds over every GPU), its CSS class, how a bucket keeps it."""

    label: str
    readings: tuple[str, ...]
    css: str
    how: str = "mean"
    combine: str = "sum"  # how a row's several readings make one value: sum, mean, max or min


@dataclasses.dataclass(frozen=True)
class Chart:
    """One chart of a card: its title and unit, its lines (points downsampled, gaps marked),
    the top of its scale, the gap to draw it with (``drawn_gap``) and how many lines were
    left out (past ``LINES_MOST``)."""

    title: str
    unit: str
    series: tuple[Series, ...]
    high: float
    gap: float
    left_out: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: each point ``[time, value]``, a gap ``[time, null]``."""
        return {"title": self.title, "unit": self.unit, "high": self.high, "left_out": self.left_out,
                "series": [{"label": one.label, "points": [[at, None if math.isnan(value) else value]
                                                          for at, value in one.points]} for one in self.series]}


def host_charts(rows: Sequence[Mapping[str, Any]], start: float, end: float, gap: float,
                gpus_apart: bool = True) -> list[Chart]:
    """A host's charts from its ``rows`` (``HostSeries.rows``) over ``[start, end]``, where
    neighbours more than ``gap`` seconds apart are a gap. With ``gpus_apart`` a line per
    GPU; without (every host at once) its GPUs together: their mean and least utilisation,
    the hottest, their power and VRAM added up, the slowest clock. Each line is downsampled so that
    a chart holds about ``POINTS_PER_CHART`` points (``LEAST_POINTS`` a line at least); a
    chart without a line is left out. A scale's top is the largest value, or the chart's
    own when higher (100 % and 100 °C, so hosts side by side compare).

    >>> rows = [{"at": float(t), "readings": {"cpu.busy": 10.0, "gpu.0.util": 90, "gpu.0.power_w": 300,
    ...          "gpu.0.power_limit_w": 350, "gpu.0.throttle_s.sw_power_cap": 0.5}} for t in (0, 2, 4)]
    >>> charts = host_charts(rows, 0.0, 10.0, gap=6.0)
    >>> [(c.title, [s.label for s in c.series], c.high) for c in charts]
    [('Utilisation', ['cpu', 'gpu0'], 100.0), ('GPU power', ['gpu0', 'gpu0 limit'], 350.0), ('Throttled', ['sw_power_cap'], 0.5)]
    >>> charts[0].series[1].points
    [(0.0, 90.0), (2.0, 90.0), (4.0, 90.0)]
    """
    timed = sorted(((float(row["at"]), row["readings"]) for row in rows
                    if _finite(row["at"]) and start <= row["at"] <= end),
                   key=lambda row: row[0])  # the store's rows are in order already: linear
    present = set().union(*[readings.keys() for _, readings in timed])
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

    asked = [  # title, unit, the least top of its scale, its lines
        ("Utilisation", "%", 100.0, host("cpu", "cpu.busy", "line cpu", "max") + utilisation),
        ("Temperature", "°C", TEMPERATURE_SCALE,
         host("hottest sensor", "temp.hottest", "line hottest", "max") + temperature),
        ("GPU power", "W", 0.0, power),
        ("SM clock", "MHz", 0.0, clock),
        ("VRAM", "MiB", 0.0, vram),
        ("Network", "B/s", 0.0, [Line(f"{clipped(net, LABEL_MOST)} {way}", (f"net.{net}.{way}_bps",),
                                      f"line {way} s{n % PALETTE}")
                                 for n, net in enumerate(nets) for way in ("rx", "tx")
                                 if f"net.{net}.{way}_bps" in present]),
        ("Throttled", "s/sample", 0.0, [Line(clipped(reason, LABEL_MOST),
                                             tuple(f"gpu.{index}.throttle_s.{reason}" for index in gpus),
                                             f"line s{n % PALETTE}", "max") for n, reason in enumerate(reasons)]),
    ]
    charts = []
    for title, unit, least_top, lines in asked:
        drawn = lines[:LINES_MOST]
        each = max(LEAST_POINTS, POINTS_PER_CHART // max(len(drawn), 1))
        series = tuple(one for one in (
            Series(line.label, _downsampled(_points(timed, line.readings, line.combine), start, end, each, gap,
                                            line.how),
                   css=line.css, unit=unit) for line in drawn)
            if any(not math.isnan(value) for _, value in one.points))
        if not series:
            continue
        top = max([least_top, *(value for one in series for _, value in one.points if not math.isnan(value))])
        charts.append(Chart(title, unit, series, top if top > 0 else 1.0, drawn_gap(gap, start, end, each),
                            left_out=len(lines) - len(drawn)))
    return charts


def _pairs(first: list[Line], second: list[Line]) -> list[Line]:
    """Each GPU's line followed by its limit's, so that a chart cut at ``LINES_MOST`` keeps pairs."""
    limit_of = {line.label.split(" ")[0]: line for line in second}
    paired = []
    for line in first:
        paired.append(line)
        if line.label in limit_of:
            paired.append(limit_of.pop(line.label))
    return paired + list(limit_of.values())


def _points(timed: Sequence[tuple[float, Mapping[str, Any]]], readings: tuple[str, ...],
            combine: str = "sum") -> list[Point]:
    """A line's points from ``timed`` rows (time, readings), as floats: each row's reading
    (the sum of ``readings`` where several are given, of those it has); a row without a
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
            points.append((at, total))
    return points


def job_ticks(jobs: Iterable[EndedJob], host: str) -> list[tuple[float, str]]:
    """Where jobs started and ended on ``host``, with their titles, by time.

    >>> job = EndedJob(7, "", "gpu", "train", "completed", "box", 10.0, 20.0)
    >>> job_ticks([job, EndedJob(8, "", "gpu", "t", "running", "other", 5.0, None)], "box")
    [(10.0, 'job 7 train started'), (20.0, 'job 7 train completed')]
    """
    ticks = []
    for job in jobs:
        if job.host != host:
            continue
        what = f"job {job.id} {clipped(job.task, LABEL_MOST)}"
        if is_finite_number(job.started_at):
            ticks.append((float(job.started_at), f"{what} started"))
        if is_finite_number(job.finished_at):
            ticks.append((float(job.finished_at), f"{what} {clipped(job.state, 24)}"))
    return sorted(ticks, key=lambda tick: tick[0])


# --- the page -------------------------------------------------------------------------------------


def minute_rows(minute: Sequence[HostSample], detail: Sequence[HostSample]) -> list[dict[str, Any]]:
    """A host's hour a point a minute, as the deck shows every host at once: its minute
    rows, and its detail rows after them folded into minutes as the sampler will fold them
    (``fold_minute``), each at its minute's start.

    >>> minute = [HostSample("b", "minute", 0.0, {"cpu.busy": 10.0})]
    >>> detail = [HostSample("b", "detail", t, {"cpu.busy": float(t)}) for t in (60.0, 62.0, 130.0)]
    >>> [(row["at"], row["readings"]["cpu.busy"]) for row in minute_rows(minute, detail)]
    [(0.0, 10.0), (60.0, 61.0), (120.0, 130.0)]
    """
    rows = [{"at": row.at, "readings": row.readings} for row in minute]
    newest = minute[-1].at if minute else -math.inf
    pending: dict[float, list[Mapping[str, Any]]] = {}
    for row in detail:
        if is_finite_number(row.at) and row.at >= newest + MINUTE:
            pending.setdefault(row.at // MINUTE * MINUTE, []).append(row.readings)
    rows += [{"at": at, "readings": fold_minute(readings)} for at, readings in sorted(pending.items())]
    return rows


def flight_deck(req: Request) -> View:
    """Every host (or ``?host=H`` only), worst first, with its last hour."""
    now, wanted = req.now, req.word("host")
    start, end = now - WINDOW, now
    read = host_model.hosts_with_rows(req.store, now, only=wanted)
    if wanted is not None:
        read = [each for each in read if each[0].host == wanted]
        if not read:
            raise HttpError(404, f"no sample of host {names.shown(wanted)}: the Flight Deck lists the hosts that "
                                 f"have sampled")
    views = [view for view, _, _ in read]
    jobs = (req.store.jobs_ended_since(start, limit=TICK_JOBS) + req.store.jobs_running()) if views else []
    cards, data = [], []
    rows_of = {view.host: (minute, detail) for view, minute, detail in read}
    for view in worst_first(views, now):
        if wanted is None:  # every host: a point a minute, from the rows its view was read from
            rows = minute_rows(*rows_of[view.host])
            interval = MINUTE
        else:  # one host: every sample
            rows = host_model.host_series(req.store, view.host, WINDOW, now=now).rows
            interval = sample_interval(rows, req.store.config.sample_every)
        gap = GAP_INTERVALS * interval
        charts = host_charts(rows, start, end, gap, gpus_apart=wanted is not None)
        ticks = job_ticks(jobs, view.host)
        state = condition(view, now)
        hover = HOVER_EVERY_HOST if wanted is None else svg.HOVER_COLUMN
        cards.append(_card(view, state, charts, ticks, start, end, now, hover))
        data.append({"host": view.host, "condition": state, "latest": view.to_dict(), "interval": interval,
                     "gap": gap, "charts": [chart.to_dict() for chart in charts],
                     "ticks": [{"at": at, "title": title} for at, title in ticks]})
    tally = {name: sum(1 for host in data if host["condition"] == name) for name in CONDITIONS}
    summary = tag("p", join(
        f"{len(data)} host(s) over the last hour, worst first",
        (": " + ", ".join(f"{n} {name}" for name, n in tally.items() if n)) if data else "",
        join(" · ", link("/deck", "every host")) if wanted is not None else ""), class_="deck-summary")
    if not cards:
        cards.append(tag("p", "No host has sampled yet: run `rowfleet sampler` on each host (a worker's supervisor "
                              "starts one).", class_="empty"))
    body = join(summary, tag("div", join(*cards), class_="deck"))
    return View("Flight Deck", {"at": now, "since": start, "until": end, "conditions": tally, "hosts": data}, body,
                active="/deck")


def _card(view: HostView, state: str, charts: Sequence[Chart], ticks: Sequence[tuple[float, str]], start: float,
          end: float, now: float, hover: float) -> Markup:
    name = clipped(view.host, NAME_MOST)
    heading = tag("h2", join(link(url("/deck", host=view.host), name) if _linkable(view.host) else name, " ",
                             tag("span", state, class_=f"badge condition-{state}")))
    age = join(when(view.at, now), " ", tag("span", "stale", class_="bad stale") if view.stale else "")
    facts = definitions([
        ("sample", age), ("cpu", _value(view.cpu_busy, "%", 0)), ("load", _value(view.load1, "", 2)),
        ("ram", _pair(_gib(view.ram_used), _gib(view.ram_total), "GiB", 1)),
        ("hottest", _value(view.hottest, "°C", 0)),
        *([("readings", tag("span", view.error, class_="bad"))] if view.error else []),
        *([("gpus", tag("span", clipped(view.gpu_error, 300), class_="bad"))] if view.gpu_error else [])])
    jobs = (tag("ul", join(*[tag("li", join(link(f"/jobs/{job.job_id}", f"job {job.job_id}"), " ",
                                            tag("span", _job_text(job), class_="muted")))
                             for job in view.jobs]), class_="host-jobs")
            if view.jobs else tag("p", "no job running", class_="muted host-jobs"))
    gpus = table(["gpu", "name", "util", "vram", "temp", "power", "sm clock", "slowed now by", "held back (1 h)"],
                 [[gpu.index, clipped(gpu.name or "-", 40), _value(gpu.util, "%", 0),
                   _pair(gpu.vram_used_mib, gpu.vram_total_mib, "MiB"), _value(gpu.temp, "°C", 0),
                   _pair(gpu.power_w, gpu.power_limit_w, "W"), _value(gpu.sm_mhz, "MHz", 0),
                   ", ".join(gpu.slowdowns) or "-", _held(gpu.throttle_seconds)] for gpu in view.gpus],
                 empty="no GPU readings", class_="grid gpus") if view.gpus or view.gpu_error else Markup("")
    drawn = [_figure(chart, start, end, hover) for chart in charts]
    if not drawn:
        drawn.append(tag("p", "no samples in the last hour", class_="muted"))
    drawn.append(_job_strip(ticks, start, end))
    return tag("section", join(heading, facts, jobs, gpus, tag("div", join(*drawn), class_="charts")),
               class_=f"host condition-{state}")


def _job_strip(ticks: Sequence[tuple[float, str]], start: float, end: float) -> Markup:
    """The jobs that started and ended on the host, as ticks on a strip under its charts,
    on the same axis: the newest ``TICKS_SHOWN`` of them."""
    shown = ticks[-TICKS_SHOWN:]
    caption = join(tag("span", "Jobs", class_="chart-title"), " ",
                   tag("span", f"{len(ticks)} starts and ends" if ticks else "none started or ended", class_="muted"),
                   tag("span", f" (the newest {len(shown)} drawn)", class_="muted") if len(shown) < len(ticks) else "")
    drawing = svg.time_chart([], start, end, gap=end - start, high=1.0, width=CHART_WIDTH, height=STRIP_HEIGHT,
                             ticks=shown)
    return tag("figure", join(tag("figcaption", caption), Markup(drawing)), class_="deck-chart jobs-strip")


def _figure(chart: Chart, start: float, end: float, hover: float) -> Markup:
    drawing = svg.time_chart(chart.series, start, end, gap=chart.gap, high=chart.high, width=CHART_WIDTH,
                             height=CHART_HEIGHT, hover_column=hover)
    caption = join(tag("span", chart.title, class_="chart-title"), " ",
                   tag("span", f"0 to {svg.value_text(chart.high)} {chart.unit}", class_="muted"),
                   tag("span", f" ({chart.left_out} more not drawn)", class_="muted") if chart.left_out else "")
    legend = tag("ul", join(*[tag("li", join(tag("span", "", class_=f"key {one.css}"), one.label))
                              for one in chart.series]), class_="legend")
    return tag("figure", join(tag("figcaption", caption), Markup(drawing), legend), class_="deck-chart")


def _linkable(host: str) -> bool:
    """Whether ``?host=`` can name ``host`` (rows from plain SQL may hold any text)."""
    try:
        names.check_name("host", host)
    except ConfigError:
        return False
    return True


def _job_text(job: host_model.HostJob) -> str:
    parts = [f"queue {clipped(job.queue, LABEL_MOST)}", f"pid {job.pid}"]
    if job.project:
        parts.insert(0, f"project {clipped(job.project, LABEL_MOST)}")
    if job.model:
        parts.append(f"model {clipped(job.model, LABEL_MOST)}")
    return " · ".join(parts)


def _value(value: float | None, unit: str, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f} {unit}".rstrip()


def _pair(used: float | None, total: float | None, unit: str, digits: int = 0) -> str:
    if used is None and total is None:
        return "-"
    shown = lambda value: "?" if value is None else f"{value:,.{digits}f}"
    return f"{shown(used)} / {shown(total)} {unit}"


def _gib(value: float | None) -> float | None:
    return None if value is None else value / 2 ** 30


def _held(seconds: Mapping[str, float]) -> str:
    return ", ".join(f"{clipped(reason, LABEL_MOST)} {value:.0f} s" for reason, value in sorted(seconds.items())) or "-"
