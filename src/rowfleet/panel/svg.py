"""The panel's charts as inline SVG, drawn by small pure functions (no library, no script).

Owns ``segments`` (a series cut where samples are missing, so that no line is ever drawn
across a gap), ``sparkline`` (a queue's last hour in a table cell) and ``time_chart`` (one
host's readings on the Flight Deck's shared time axis, with a hover title on every point
and ticks where jobs started and ended). Every label and title is escaped with
``html.escape``; numbers are written by one formatter, so no value ever reaches the SVG as
markup. Pure: takes the points and the window, returns text. Imports only the leaf
``rowfleet.names``.
"""

from __future__ import annotations

import dataclasses
import html
from typing import Any, Iterable, Sequence

from rowfleet.names import is_finite_number

Point = tuple[float, float]  # (time in epoch seconds, value)
HOVER_COLUMN = 10.0  # width of one hover target of a chart, in its own units


@dataclasses.dataclass(frozen=True)
class Series:
    """One line of a chart: its label (shown in the titles), its points, and its CSS class."""

    label: str
    points: Sequence[Point]
    css: str = "line"
    unit: str = ""


def segments(points: Iterable[Point], gap: float) -> list[list[Point]]:
    """``points`` in time order, cut into runs wherever two neighbours are more than ``gap``
    seconds apart; a point that is no finite number is a gap too.

    >>> segments([(0, 1), (2, 2), (4, 3), (20, 4), (22, float("nan")), (24, 5)], gap=5)
    [[(0, 1), (2, 2), (4, 3)], [(20, 4)], [(24, 5)]]
    >>> segments([], gap=5)
    []
    """
    runs: list[list[Point]] = []
    previous: float | None = None
    for at, value in sorted(points, key=lambda point: point[0]):
        if not (_finite(at) and _finite(value)):
            previous = None
            continue
        if previous is None or at - previous > gap:
            runs.append([])
        runs[-1].append((at, value))
        previous = at
    return runs


def sparkline(points: Sequence[Point], start: float, end: float, *, gap: float, width: int = 120,
              height: int = 24, label: str = "") -> str:
    """A small chart of ``points`` over ``[start, end]``, scaled to its own maximum.

    >>> svg = sparkline([(0, 0), (30, 5), (60, 10)], 0, 60, gap=40, width=60, height=10, label="done <1h>")
    >>> svg.startswith('<svg class="spark" viewBox="0 0 60 10"') and "done &lt;1h&gt;" in svg
    True
    >>> '<polyline points="0,10 30,5 60,0"' in svg
    True
    """
    top = max((value for _, value in points if _finite(value)), default=0.0)
    lines = _lines([Series(label, points)], start, end, 0.0, top or 1.0, width, height, gap)
    return (f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="{escaped(label)}">{lines}</svg>')


def time_chart(series: Sequence[Series], start: float, end: float, *, gap: float, low: float = 0.0,
               high: float | None = None, width: int = 600, height: int = 80,
               ticks: Sequence[tuple[float, str]] = (), hover_column: float = HOVER_COLUMN) -> str:
    """``series`` on one time axis ``[start, end]`` (shared by every chart of a page, so
    hosts line up), values from ``low`` to ``high`` (default: the largest value), each
    point with a ``<title>`` for hover, and a tick at each ``(time, title)`` of ``ticks``.

    >>> chart = time_chart([Series("gpu0 util", [(10, 50.0), (20, 100.0)], unit="%")], 0, 20, gap=15,
    ...                    high=100, width=20, height=10, ticks=[(10, "job 7 started")])
    >>> '<polyline points="10,5 20,0"' in chart, "gpu0 util 100 %" in chart, "job 7 started" in chart
    (True, True, True)
    """
    values = [value for one in series for _, value in one.points if _finite(value)]
    top = high if high is not None else max(values, default=low + 1.0)
    if not top > low:
        top = low + 1.0
    marks = "".join(
        f'<line class="tick" x1="{coordinate(x)}" y1="0" x2="{coordinate(x)}" y2="{height}">'
        f'<title>{escaped(title)}</title></line>'
        for at, title in ticks if _finite(at) and start <= at <= end
        for x in (_x(at, start, end, width),))
    lines = _lines(series, start, end, low, top, width, height, gap)
    hover = hover_columns(series, start, end, width, height, hover_column)
    return (f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'preserveAspectRatio="none" role="img">{marks}{lines}{hover}</svg>')


def hover_columns(series: Sequence[Series], start: float, end: float, width: int, height: int,
                  column: float = HOVER_COLUMN) -> str:
    """Invisible hover targets, one per ``column`` of width that holds a point: each a
    ``<rect class="hover">`` whose title gives the time (UTC) and the value of every line
    there (a column's last point of each). One title per column, not per point, keeps a page
    of twenty hosts' hours small.

    >>> hover_columns([Series("cpu", [(0, 5.0), (0.5, 7.5)], unit="%"), Series("gpu0", [(0.5, 90.0)], unit="%")],
    ...               0, 60, width=600, height=10)
    '<rect class="hover" x="0" y="0" width="10" height="10"><title>00:00:00 UTC · cpu 7.5 %; gpu0 90 %</title></rect>'
    """
    if end <= start:
        return ""
    cells: dict[int, dict[str, tuple[float, float, str]]] = {}
    last = max(int(width / column) - 1, 0)
    per_cell = width / (end - start) / column
    for one in series:  # spelled out for speed: it runs for every point of every chart of a page
        label, unit = one.label, one.unit
        for at, value in one.points:
            if _number(at) and _number(value) and start <= at <= end:
                cell = min(int((at - start) * per_cell), last)
                cells.setdefault(cell, {})[label] = (at, value, unit)
    drawn = []
    size = coordinate(column)
    for cell, values in sorted(cells.items()):
        at = max(when for when, _, _ in values.values())
        text = "; ".join([f"{label} {value_text(value)} {unit}" if unit else f"{label} {value_text(value)}"
                          for label, (_, value, unit) in values.items()])
        drawn.append(f'<rect class="hover" x="{coordinate(cell * column)}" y="0" width="{size}" '
                     f'height="{height}"><title>{clock(at)} · {escaped(text)}</title></rect>')
    return "".join(drawn)


def clock(at: float) -> str:
    """A time of day in UTC, as a hover title gives it.

    >>> clock(3723.9)
    '01:02:03 UTC'
    """
    seconds = int(at) % 86400
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d} UTC"


def _lines(series: Sequence[Series], start: float, end: float, low: float, high: float, width: int,
           height: int, gap: float) -> str:
    drawn = []
    across = width / (end - start) if end > start else 0.0
    up = height / (high - low)
    for one in series:
        css = escaped(one.css)
        for run in segments(one.points, gap):
            # Whole pixels of the chart's own units: finer than a screen shows at its size, and
            # formatted for every point of every chart of a page, so kept cheap.
            xy = [f"{(at - start) * across:.0f},{height - (min(max(value, low), high) - low) * up:.0f}"
                  for at, value in run if start <= at <= end]
            if len(xy) == 1:  # a lone sample between gaps: a dot, not a line to nowhere
                x, y = xy[0].split(",")
                drawn.append(f'<circle class="{css}" cx="{x}" cy="{y}" r="1.5"/>')
            elif xy:
                drawn.append(f'<polyline points="{" ".join(xy)}" class="{css}" fill="none"/>')
    return "".join(drawn)


def _x(at: float, start: float, end: float, width: int) -> float:
    return 0.0 if end <= start else (at - start) / (end - start) * width


def coordinate(value: float) -> str:
    """A coordinate or value as SVG takes it: at most one decimal (a tenth of a unit of a
    600-wide chart is finer than a screen shows), no exponent.

    >>> coordinate(3.0), coordinate(2.456), coordinate(-0.001), coordinate(1e20)
    ('3', '2.5', '0', '100000000000000000000')
    """
    text = f"{value:.1f}"
    if text.endswith(".0"):
        text = text[:-2]
    return "0" if text == "-0" else text


def value_text(value: float) -> str:
    """A reading as a title shows it: at most two decimals, no exponent.

    >>> value_text(61.25), value_text(3.0), value_text(-0.001)
    ('61.25', '3', '0')
    """
    if abs(value) < 1e15 and value == int(value):  # most readings: whole numbers
        return str(int(value))
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def escaped(value: str) -> str:
    """Text for an SVG attribute or title: escaped, quotes too."""
    return html.escape(str(value), quote=True)


_finite = is_finite_number  # a reading from a row may be anything: only numbers are drawn


def _number(value: Any) -> bool:
    """``is_finite_number``, with a fast way for the floats nearly every point holds."""
    return value - value == 0.0 if type(value) is float else _finite(value)
