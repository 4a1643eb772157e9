"""The panel's Flight Deck, Schedules and Models pages: the pure parts table-tested (the
order of the hosts, the sample interval, downsampling that keeps gaps, the clock chart's
scale), and the pages called directly with a request over a real store on SQLite and
PostgreSQL (``PagesContract``), with samples written through the store under hostile host
names (markup, right-to-left text, 10,000 characters) that must come out as text, the HTML
parsed to check it is well formed. A card's switch forms are posted to a real panel server
over that store, where the Workers page's handler and the server's CSRF rule answer them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import http.client
import json
import math
import os
import re
import sqlite3
import unittest
from html.parser import HTMLParser
from typing import Any
from unittest import mock
from urllib.parse import urlencode

from rowfleet.claim import Claim
from rowfleet.job import COMPLETED, JobSpec, Outcome, iso
from rowfleet.panel import app, server, svg
from rowfleet.panel.app import HttpError, Request
from rowfleet.panel.deck_charts import BUCKET_SLACK, LINES_MOST, POINTS_PER_CHART, downsample
from rowfleet.panel.pages import deck, jobs, models, schedules
from rowfleet.panel.pages.deck import DEAD_AFTER, condition, host_charts, sample_interval, worst_first
from rowfleet.schedule import Schedule, next_slot
from rowfleet.store import open_store
from rowfleet.telemetry.readings import fold_minute
from rowfleet.views.hosts import GpuView, HostView
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase, serve_in_background
from contract.test_lifecycle import Clock

SCRIPT = "<script>x</script>"
RTL = "\u202e\u05e9\u05e8\u05ea-\u0627\u0644\u062e\u0627\u062f\u0645"  # an override, Hebrew, Arabic
LONG = "h" * 10_000
TTL = 60.0
HOST = {"cpu.busy": 37.5, "load.1": 1.2, "mem.used": 13_000_000_000, "mem.total": 68_719_476_736,
        "temp.hottest": 60.0, "interval": 2.0, "samples": 1, "net.eth0.rx_bps": 1000, "net.eth0.tx_bps": 500}
GPU0 = {"gpu.0.name": "H100", "gpu.0.util": 80, "gpu.0.vram_used_mib": 60000, "gpu.0.vram_total_mib": 81920,
        "gpu.0.temp": 70, "gpu.0.power_w": 300.0, "gpu.0.power_limit_w": 350, "gpu.0.sm_mhz": 1980,
        "gpu.0.reasons": ["gpu_idle"], "gpu.0.throttle_s.sw_power_cap": 0.0}


def host(name: str, *, at: float = 100.0, hottest: float | None = None, stale: bool = False, gpus=(),
         error: str | None = None) -> HostView:
    return HostView(name, at, 0.0, stale, None, None, None, None, hottest, gpus=tuple(gpus), error=error)


def gpu(temp: float | None = None, slowdowns: tuple[str, ...] = ()) -> GpuView:
    return GpuView(0, None, None, None, None, temp, None, None, None, slowdowns=slowdowns)


# --- pure ---------------------------------------------------------------------------------------


class WorstFirstTest(unittest.TestCase):
    def test_conditions(self):
        cases = [
            (host("a"), "fine"),
            (host("a", gpus=[gpu(slowdowns=("hw_slowdown",))]), "throttling"),
            (host("a", hottest=85.0), "hot"),
            (host("a", hottest=84.9, gpus=[gpu(temp=85.0)]), "hot"),
            (host("a", hottest=84.9, gpus=[gpu(temp=84.9)]), "fine"),
            (host("a", stale=True, gpus=[gpu(temp=99, slowdowns=("sw_power_cap",))]), "silent"),
            (host("a", error="readings are not valid JSON"), "silent"),
            (host("a", at=100.0 - DEAD_AFTER - 0.5), "silent"),
            (host("a", at=100.0 - DEAD_AFTER + 0.5), "fine"),
        ]
        for view, expected in cases:
            with self.subTest(view=view):
                self.assertEqual(condition(view, now=100.0), expected)

    def test_order_is_throttling_hot_silent_then_the_rest_ties_by_name(self):
        views = [host("fine-b"), host("fine-a"), host("silent", stale=True), host("hot-z", hottest=90.0),
                 host("hot-a", gpus=[gpu(temp=86.0)]), host("throttle-y", gpus=[gpu(slowdowns=("sw_power_cap",))]),
                 host("throttle-x", hottest=99.0, gpus=[gpu(slowdowns=("hw_slowdown",))]),
                 host("dead", at=-10_000.0)]
        self.assertEqual([v.host for v in worst_first(views, now=100.0)],
                         ["throttle-x", "throttle-y", "hot-a", "hot-z", "dead", "silent", "fine-a", "fine-b"])
        self.assertEqual(worst_first([], now=0.0), [])


class SampleIntervalTest(unittest.TestCase):
    def test_from_the_rows(self):
        row = lambda at, **readings: {"at": at, "readings": readings}
        cases = [
            ([row(0.0), row(2.0, interval=2.0), row(4.0, interval=2.0), row(99.0, interval=95.0)], 2.0),
            ([row(0.0), row(10.0), row(20.0), row(500.0)], 10.0),       # no intervals: the spacing
            ([row(0.0, interval=True), row(5.0, interval="2"), row(10.0, interval=-1)], 5.0),
            ([row(0.0)], 7.0),                                          # one row: the configured cadence
            ([], 7.0),
        ]
        for rows, expected in cases:
            with self.subTest(rows=rows):
                self.assertEqual(sample_interval(rows, 7.0), expected)


def finite(points):
    return [(at, value) for at, value in points if not math.isnan(value)]


class DownsampleTest(unittest.TestCase):
    HOUR = 3600.0

    def test_an_hour_of_two_second_samples_with_a_gap_keeps_the_gap(self):
        points = [(float(t), 50.0) for t in range(0, 3600, 2) if not 1000 <= t < 1300]
        out = downsample(points, 0.0, self.HOUR, most=300, gap=6.0)
        self.assertLessEqual(len(finite(out)), 300)
        self.assertGreater(len(finite(out)), 250)
        gaps = [at for at, value in out if math.isnan(value)]
        self.assertEqual(len(gaps), 1)
        self.assertTrue(998 < gaps[0] < 1300, gaps)
        self.assertFalse([at for at, _ in finite(out) if 999 < at < 1300], "no point inside the gap")
        runs = svg.segments(out, math.inf)  # cut at the marks only
        self.assertEqual(len(runs), 2, "drawn, the line is cut at the gap and only there")
        self.assertLess(runs[0][-1][0], 1000)
        self.assertGreaterEqual(runs[1][0][0], 1300)

    def test_a_gap_narrower_than_two_buckets_is_still_cut(self):
        # 30 s missing: more than 3 samples, less than two 24 s buckets: the mark cuts it.
        points = [(float(t), 1.0) for t in range(0, 3600, 2) if not 2000 < t < 2030]
        out = downsample(points, 0.0, self.HOUR, most=150, gap=6.0)
        self.assertEqual(len(svg.segments(out, math.inf)), 2)

    def test_peaks_and_dips_survive_by_their_bucket_rule(self):
        points = [(float(t), 100.0 if t == 1800 else 10.0) for t in range(0, 3600, 2)]
        self.assertEqual(max(v for _, v in downsample(points, 0.0, self.HOUR, most=100, gap=6.0, how="max")), 100.0)
        self.assertLess(max(v for _, v in downsample(points, 0.0, self.HOUR, most=100, gap=6.0)), 100.0)
        dips = [(at, 1.0 if at == 1800 else v) for at, v in points]
        self.assertEqual(min(v for _, v in downsample(dips, 0.0, self.HOUR, most=100, gap=6.0, how="min")), 1.0)

    def test_few_points_pass_as_they_are_with_their_gaps_marked(self):
        points = [(0, 1), (2, 2), (4, 3), (40, 4), (42, float("inf")), (44, 5)]
        out = downsample(points, 0.0, 100.0, most=300, gap=6.0)
        self.assertEqual(finite(out), [(0.0, 1.0), (2.0, 2.0), (4.0, 3.0), (40.0, 4.0), (44.0, 5.0)])
        self.assertEqual([at for at, v in out if math.isnan(v)], [22.0, 42.0])

    def test_a_non_number_between_buckets_is_a_gap(self):
        points = [(float(t), float("nan") if t == 1800 else 1.0) for t in range(0, 3600, 2)]
        out = downsample(points, 0.0, self.HOUR, most=100, gap=6.0)
        self.assertEqual(len(svg.segments(out, math.inf)), 2)

    def test_the_window_and_bad_input(self):
        points = [(-10.0, 1.0), (5.0, 2.0), (50.0, 3.0), ("x", 4.0), (None, 5.0)]
        self.assertEqual(downsample(points, 0.0, 10.0, most=5, gap=6.0), [(5.0, 2.0)])
        self.assertEqual(downsample([], 0.0, 10.0, most=5, gap=6.0), [])
        self.assertEqual(downsample(points, 10.0, 10.0, most=5, gap=6.0), [])
        with self.assertRaises(ValueError):
            downsample(points, 0.0, 10.0, most=5, gap=6.0, how="median")

    def test_many_gaps_never_exceed_the_budget(self):
        points = [(float(t), 1.0) for t in range(0, 3600, 10)]  # every neighbour a gap at gap=6
        out = downsample(points, 0.0, self.HOUR, most=100, gap=6.0)
        self.assertLessEqual(len(finite(out)), 100)
        self.assertTrue(all(not math.isnan(out[i][1]) for i in range(0, len(out), 2)), "marks alternate")


class HostChartsTest(unittest.TestCase):
    def test_the_charts_of_a_gpu_host(self):
        rows = [{"at": float(t), "readings": {**HOST, **GPU0, "gpu.1.util": 5, "gpu.0.throttle_s.hw_slowdown": 1.5,
                                              "gpu.1.throttle_s.hw_slowdown": 0.5}} for t in range(0, 3600, 2)]
        charts = {chart.title: chart for chart in host_charts(rows, 0.0, 3600.0, gap=6.0)}
        self.assertEqual(list(charts), ["Utilisation", "Temperature", "GPU power", "SM clock", "VRAM", "Network",
                                        "Throttled"])
        self.assertEqual([line.label for line in charts["Utilisation"].lines], ["cpu", "gpu0", "gpu1"])
        self.assertEqual([line.label for line in charts["GPU power"].lines], ["gpu0", "gpu0 limit"])
        self.assertEqual([line.label for line in charts["Network"].lines], ["eth0 rx", "eth0 tx"])
        self.assertEqual(charts["Throttled"].points()[0][0][1], 2.0, "a reason's seconds over every GPU")
        self.assertEqual((charts["Utilisation"].high, charts["Temperature"].high, charts["GPU power"].high),
                         (100.0, 100.0, 350.0))
        for chart in charts.values():
            with self.subTest(chart=chart.title):
                drawn = sum(len(finite(points)) for points in chart.points())
                self.assertLessEqual(drawn, POINTS_PER_CHART / BUCKET_SLACK)
                self.assertGreater(drawn, POINTS_PER_CHART / 2)
                json.dumps(chart.to_dict(), allow_nan=False)

    def test_the_clock_chart_tops_at_the_cards_highest_clock(self):
        idle = {"gpu.0.sm_mhz": 345, "gpu.1.sm_mhz": 210}
        cases = [  # the clocks' readings -> the top of the SM clock chart, a line per GPU and the slowest's
            ({**idle, "gpu.0.max_sm_mhz": 1980, "gpu.1.max_sm_mhz": 1755}, 1980.0, 1980.0),  # the fastest card's
            ({**idle, "gpu.1.max_sm_mhz": 1755}, 1755.0, 1755.0),                            # the one known
            ({**idle, "gpu.0.max_sm_mhz": "fast"}, 345.0, 210.0),  # none known: the highest value drawn
            (idle, 345.0, 210.0),
            ({"gpu.0.sm_mhz": 2100, "gpu.0.max_sm_mhz": 1980}, 2100.0, 2100.0),  # past its maximum: drawn whole
        ]
        for readings, *tops in cases:
            rows = [{"at": float(t), "readings": readings} for t in range(0, 600, 2)]
            for apart, top in zip((True, False), tops):
                with self.subTest(readings=readings, gpus_apart=apart):
                    chart, = [c for c in host_charts(rows, 0.0, 600.0, gap=6.0, gpus_apart=apart)
                              if c.title == "SM clock"]
                    self.assertEqual(chart.high, top)
                    self.assertIn(f"0 to {top:.0f} MHz", deck._figure(chart))

    def test_garbage_readings_draw_nothing_and_many_lines_are_counted(self):
        rows = [{"at": float(t), "readings": {"cpu.busy": "busy", "gpu.x.util": 5, "gpu.0.util": [1],
                                              "temp.hottest": 10 ** 400,
                                              **{f"net.if{n}.rx_bps": 1 for n in range(40)}}} for t in (0, 2)]
        charts = host_charts(rows, 0.0, 10.0, gap=6.0)
        self.assertEqual([chart.title for chart in charts], ["Network"])
        self.assertEqual((len(charts[0].lines), charts[0].left_out), (LINES_MOST, 40 - LINES_MOST))
        self.assertEqual(host_charts([], 0.0, 10.0, gap=6.0), [])


# --- the pages over a real store -----------------------------------------------------------------


class Page(HTMLParser):
    """A page as a browser would take it apart: the script tags, whether every element
    closes in order, its forms (action, method, label, hidden fields, buttons), and per
    host card its heading, text, chart lines, chart captions, switch rows, table rows (the
    text of each cell) and forms."""

    VOID = frozenset({"meta", "link", "input", "br", "img", "hr"})

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[dict[str, Any]] = []
        self.open: list[str] = []
        self.moves: list[float] = []  # the translations of the groups open, in the chart's units
        self.problems: list[str] = []
        self.cards: list[dict[str, Any]] = []
        self.forms: list[dict[str, Any]] = []
        self.text: list[str] = []
        self.links: list[str] = []
        self._heading = False
        self._kept: list[tuple[int, list[str]]] = []  # elements whose text is kept: their depth, where it goes
        self.feed(text)
        self.close()
        if self.open:
            self.problems.append(f"left open: {self.open}")

    def in_card(self) -> bool:
        return bool(self.cards) and "section" in self.open

    def keep_text(self, into: list[str]) -> None:
        """Keep the text of the element opening now, as the last item of ``into``."""
        into.append("")
        self._kept.append((len(self.open), into))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        if tag == "script":
            self.scripts.append(attributes)
        if tag == "a" and attributes.get("href"):
            self.links.append(attributes["href"])
        if tag == "section" and "host" in classes:
            self.cards.append({"heading": "", "text": [], "lines": [], "ticks": [], "links": [], "forms": [],
                               "captions": [], "switch_rows": [], "rows": []})
        if tag == "h2" and self.in_card():
            self._heading = True
        if tag == "a" and self.in_card():
            self.cards[-1]["links"].append(attributes.get("href"))
        self._forms(tag, attributes)
        if self.in_card():
            if tag == "figcaption":
                self.keep_text(self.cards[-1]["captions"])
            if tag == "li" and "switch-row" in classes:
                self.keep_text(self.cards[-1]["switch_rows"])
            if tag == "tr":
                self.cards[-1]["rows"].append([])
            if tag == "td":
                self.keep_text(self.cards[-1]["rows"][-1])
        if tag == "g":
            move = re.fullmatch(r"translate\((-?[0-9.]+)\)", attributes.get("transform") or "")
            self.moves.append(float(move.group(1)) if move else 0.0)
        if tag not in self.VOID:
            self.open.append(tag)

    def _forms(self, tag: str, attributes: dict[str, str | None]) -> None:
        if tag == "form":
            form = {"action": attributes.get("action"), "method": attributes.get("method"),
                    "label": attributes.get("aria-label"), "fields": {}, "buttons": []}
            self.forms.append(form)
            if self.in_card():
                self.cards[-1]["forms"].append(form)
        elif "form" in self.open and tag == "input" and attributes.get("type") == "hidden":
            self.forms[-1]["fields"][attributes.get("name")] = attributes.get("value")
        elif "form" in self.open and tag == "button":
            self.forms[-1]["buttons"].append({"name": attributes.get("name"), "value": attributes.get("value"),
                                              "current": attributes.get("aria-current"), "text": []})
            self.keep_text(self.forms[-1]["buttons"][-1]["text"])

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "polyline" and self.cards and "section" in self.open:  # as drawn: moved by its groups
            moved = sum(self.moves)
            self.cards[-1]["lines"].append(" ".join(f"{float(x) + moved:g},{y}" for x, y in
                                                    (xy.split(",") for xy in dict(attrs)["points"].split())))

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        if not self.open or self.open[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.open[-1:] or 'nothing'}")
            return
        self.open.pop()
        if tag == "g":
            self.moves.pop()
        if tag == "h2":
            self._heading = False
        while self._kept and self._kept[-1][0] >= len(self.open):
            self._kept.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        for _, into in self._kept:
            into[-1] += data
        if self.cards and "section" in self.open:
            self.cards[-1]["text"].append(data)
            if self._heading:
                self.cards[-1]["heading"] += data
            if self.open[-1] == "title" and "line" in self.open[-2:]:
                self.cards[-1]["ticks"].append(data)


class PagesContract:
    """Every backend must pass these. Subclasses provide ``config()``."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.store = self.open_store(clock=self.clock)
        self._holding: set[str] = set()

    def write(self, host: str, readings: dict[str, Any]) -> None:
        if host not in self._holding:
            self.assertTrue(self.store.acquire_sampler(host, f"{host}:1:test", TTL))
            self._holding.add(host)
        self.assertIsNotNone(self.store.record_host_sample(host, f"{host}:1:test", TTL, readings))

    def plain_sample(self, host: str, at: float, readings: dict[str, Any]) -> None:
        """A detail row written by another program's plain SQL."""
        self.plain_sql("INSERT INTO host_samples (host, tier, at, readings) VALUES (?, 'detail', ?, ?)",
                       (host, at, json.dumps(readings)))

    def request(self, path: str, memo: dict[str, Any] | None = None, read_only: bool = False, **query: str) -> Request:
        return Request("GET", path, query, {}, self.store, self.store.clock(), "csrf-token", read_only,
                       memo={} if memo is None else memo)

    def render(self, handler, path: str, memo: dict[str, Any] | None = None, read_only: bool = False,
               **query: str) -> tuple[app.View, Page]:
        req = self.request(path, memo=memo, read_only=read_only, **query)
        view = handler(req)
        status, kind, body = app.render(view, req, as_json=False, note=None)
        self.assertEqual((status, kind), (200, app.HTML))
        text = body.decode("utf-8")
        page = Page(text)
        self.assertEqual(page.problems, [])
        self.assertEqual(page.scripts, [{"src": "/static/panel.js", "defer": None}], "no script but the panel's")
        self.assertNotIn("<script>x", text)
        self.assertNotIn("<script>x", view.body)
        data = view.twin()
        json.loads(app.dumps(data))  # the JSON twin: no NaN, every value JSON can hold
        return dataclasses.replace(view, data=data), page

    # --- the Flight Deck ---------------------------------------------------------------------

    def fleet_with_an_hour(self) -> dict[str, Any]:
        """Five hosts over the last 800 s: "box" sampled every 2 s but for 30 s, with a job
        that ran and one running; the others only lately ("quiet" only at first)."""
        self.store.enqueue(JobSpec(task="train", queue="gpu"))
        self.store.enqueue(JobSpec(task="train", queue="gpu"))
        jobs: dict[str, Any] = {}
        for step in range(400):
            if step == 100:
                jobs["ended"] = self.store.claim(Claim("", "gpu", "box:4242", 600.0))
            if step == 300:
                self.store.finish(jobs["ended"], Outcome(COMPLETED))
                jobs["running"] = self.store.claim(Claim("", "gpu", "box:4242", 600.0))
            if step == 200:
                jobs["gap"] = (self.clock.now - 2.0, self.clock.now + 30.0)
            if not 200 <= step < 215:
                self.write("box", {**HOST, **GPU0, "cpu.busy": float(step % 50)})
            if step == 0:
                self.write("quiet", HOST)
            if step >= 395:
                self.write(SCRIPT, {**HOST, "temp.hottest": 91.0})
                self.write(RTL, {**HOST, **GPU0, "gpu.0.reasons": ["sw_power_cap"]})
                self.write(LONG, HOST)
            self.clock.advance(2.0)
        self.store.worker_beat("box:4242:0", "", "box", "gpu", 4242, jobs["running"].id)
        return jobs

    def test_the_deck_worst_first_escaped_with_gaps_and_ticks(self):
        jobs = self.fleet_with_an_hour()
        view, page = self.render(deck.flight_deck, "/deck")
        headings = [card["heading"] for card in page.cards]
        long_shown = "h" * deck.NAME_MOST + "… (10,000 characters)"
        self.assertEqual(headings, [f"{RTL} throttling", f"{SCRIPT} hot", "quiet silent", "box fine",
                                    f"{long_shown} fine"])
        self.assertEqual([h["host"] for h in view.data["hosts"]], [RTL, SCRIPT, "quiet", "box", LONG])
        self.assertEqual(view.data["conditions"], {"throttling": 1, "hot": 1, "silent": 1, "fine": 2})
        self.assertNotIn("h" * (deck.NAME_MOST + 1), view.body)
        self.assertIn("/deck?host=%3Cscript%3Ex%3C%2Fscript%3E", page.links, "a card links to itself")
        self.assertNotIn(f"/deck?host={'h' * 300}", "".join(page.links), "a name ?host= cannot take is no link")

        box_card, box = page.cards[3], view.data["hosts"][3]
        self.assertIn(f"/jobs/{jobs['running'].id}", box_card["links"], "the job running on it")
        self.assertNotIn(f"/jobs/{jobs['ended'].id}", box_card["links"])
        for tick in (f"job {jobs['ended'].id} train started", f"job {jobs['ended'].id} train completed",
                     f"job {jobs['running'].id} train started"):
            self.assertIn(tick, box_card["ticks"])
        self.assertEqual([t for t in page.cards[0]["ticks"] if t.startswith("job")], [], "not on another host")

        # Every host at once: a point a minute. One host: every sample, and the 30 s without.
        self.assertEqual((box["interval"], box["gap"]), (60.0, 180.0))
        view, page = self.render(deck.flight_deck, "/deck", host="box")
        box_card, box = page.cards[0], view.data["hosts"][0]
        self.assertEqual((box["interval"], box["gap"]), (2.0, 6.0))
        start, end = jobs["gap"]
        for chart in box["charts"]:
            with self.subTest(chart=chart["title"]):
                drawn = sum(1 for one in chart["series"] for _, value in one["points"] if value is not None)
                self.assertLessEqual(drawn, POINTS_PER_CHART / BUCKET_SLACK)
                for one in chart["series"]:
                    marks = [at for at, value in one["points"] if value is None]
                    self.assertEqual(len(marks), 1, one["label"])
                    self.assertTrue(start < marks[0] < end, (marks, start, end))
        since = view.data["since"]
        crossing = []
        for points in box_card["lines"]:
            times = [since + float(xy.split(",")[0]) / deck.CHART_WIDTH * deck.WINDOW for xy in points.split()]
            crossing += [(a, b) for a, b in zip(times, times[1:]) if a <= start + 0.5 and b >= end - 0.5]
        self.assertTrue(box_card["lines"])
        self.assertEqual(crossing, [], "no line crosses the 30 s without samples")

    def test_what_the_memo_keeps_never_shows(self):
        # Refreshes every 5 s while samples, minute rows and jobs arrive, one of them a row
        # written late with an older time: each page through the server's memo is the page
        # a fresh memo draws (the memo only saves work), and the memo lets go of what the
        # deck no longer draws.
        memo: dict[str, Any] = {}
        self.store.enqueue(JobSpec(task="train", queue="gpu"))
        claimed = None
        minute_rows: list[dict[str, Any]] = []
        for step in range(200):
            at = self.clock.now
            readings = {**HOST, **GPU0, "cpu.busy": float(step % 37), "gpu.0.util": (step * 7) % 101}
            self.write("box", readings)
            self.write("other", {**HOST, "cpu.busy": float(step % 11)})
            minute_rows.append(readings)
            if step == 20:
                claimed = self.store.claim(Claim("", "gpu", "box:4242", 600.0))
            if step == 90:
                self.store.finish(claimed, Outcome(COMPLETED))
            if step == 130:  # plain SQL, late, between two whole reads: a row 5 s in the past
                self.plain_sample("other", at - 5.0, {**HOST, "cpu.busy": 99.0})
            self.clock.advance(2.0)
            if self.clock.now // 60 > at // 60:  # a minute ended: fold it, as the sampler does
                self.store.record_host_minute("box", at // 60 * 60, fold_minute(minute_rows))
                minute_rows = []
            if step % 5 == 4:
                for query in ({}, {"host": "box"}):
                    with self.subTest(step=step, query=query):
                        kept = deck.flight_deck(self.request("/deck", memo=memo, **query))
                        fresh = deck.flight_deck(self.request("/deck", memo={}, **query))
                        self.assertEqual(kept.body, fresh.body)
                        self.assertEqual(app.dumps(kept.twin()), app.dumps(fresh.twin()))
        charts = memo["deck charts"]
        self.assertLessEqual(len(charts.slices.made) + len(charts.slices.last), 2 * 31 * 2,
                             "two hosts' slices of two refreshes at most")

    def test_one_host_and_bad_hosts(self):
        self.write("box", HOST)
        self.write(SCRIPT, HOST)
        view, page = self.render(deck.flight_deck, "/deck", host=SCRIPT)
        self.assertEqual([h["host"] for h in view.data["hosts"]], [SCRIPT])
        self.assertEqual(len(page.cards), 1)
        self.assertIn("/deck", page.links, "a way back to every host")
        for value, status in (("nobody", 404), ("two words", 400), ("*", 400), ("x" * 300, 400)):
            with self.subTest(value=value[:20]), self.assertRaises(HttpError) as refused:
                deck.flight_deck(self.request("/deck", host=value))
            self.assertEqual(refused.exception.status, status)
            self.assertNotIn("\n", refused.exception.message)

    def test_no_host_yet(self):
        view, page = self.render(deck.flight_deck, "/deck")
        self.assertEqual((view.data["hosts"], page.cards), ([], []))
        self.assertIn("rowfleet sampler", "".join(page.text))

    # --- a card's switches and GPUs ----------------------------------------------------------------

    def test_a_card_offers_each_queue_its_switch_with_the_form_token(self):
        self.write("box", {**HOST, **GPU0})
        self.store.worker_beat("box:1:0", "", "box", "gpu", 1, None, queues=("gpu", "cpu"))
        self.store.worker_beat("box:2:0", "beta", "box", "gpu", 2, None)
        self.store.worker_beat("other:3:0", "", "other", "far", 3, None)  # another host's queue: not on this card
        self.store.set_switch("", "box", "cpu", "off", "drain", changed_by="ops", reason="fan <swap>")
        view, page = self.render(deck.flight_deck, "/deck")
        card, = page.cards
        forms = {(form["fields"]["project"], form["fields"]["queue"]): form for form in card["forms"]}
        self.assertEqual(list(forms), [("", "cpu"), ("", "gpu"), ("beta", "gpu")])
        for (project, queue), form in forms.items():
            with self.subTest(project=project, queue=queue):
                self.assertEqual((form["method"], form["action"]), ("post", "/workers/switch"))
                self.assertEqual(form["fields"], {"project": project, "host": "box", "queue": queue,
                                                  "csrf": "csrf-token", "back": "/deck"})
                self.assertEqual([(b["name"], b["value"], b["text"]) for b in form["buttons"]],
                                 [("set", "on", ["ON"]), ("set", "off-drain", ["OFF drain"]),
                                  ("set", "off-hard", ["OFF hard"])])
        pressed = {key: [b["value"] for b in form["buttons"] if b["current"] == "true"] for key, form in forms.items()}
        self.assertEqual(pressed, {("", "cpu"): ["off-drain"], ("", "gpu"): ["on"], ("beta", "gpu"): ["on"]})
        self.assertEqual([" ".join(row.split()) for row in card["switch_rows"]],
                         ["queue cpu off (drain) reason ON OFF drain OFF hard",
                          "queue gpu on reason ON OFF drain OFF hard",
                          "queue gpu · project beta on reason ON OFF drain OFF hard"])
        self.assertIn("1 of 3 queues off", card["heading"])
        self.assertEqual([(q["project"], q["queue"], q["switch"] and q["switch"]["reason"])
                          for q in view.data["hosts"][0]["latest"]["queues"]],
                         [("", "cpu", "fan <swap>"), ("", "gpu", None), ("beta", "gpu", None)])

        _, page = self.render(deck.flight_deck, "/deck", host="box")
        self.assertEqual({form["fields"]["back"] for form in page.cards[0]["forms"]}, {"/deck?host=box"},
                         "one host's card brings the operator back to it")

        _, page = self.render(deck.flight_deck, "/deck", read_only=True)
        self.assertEqual(page.forms, [], "a read-only panel offers no switch")
        self.assertEqual([" ".join(row.split()) for row in page.cards[0]["switch_rows"]],
                         ["queue cpu off (drain)", "queue gpu on", "queue gpu · project beta on"])

    def panel(self) -> "PanelPoster":
        """A real panel server over this test's store (its clock too), and a client of it."""
        made = server.PanelServer(("127.0.0.1", 0), lambda: open_store(self.config(), clock=self.clock), None, False)
        return PanelPoster(serve_in_background(self, made))

    def test_the_cards_form_switches_its_queue_through_the_workers_pages_handler(self):
        self.write("box", HOST)
        self.store.worker_beat("box:1:0", "", "box", "gpu", 1, None)
        panel = self.panel()
        status, _, body = panel.get("/deck")
        self.assertEqual(status, 200, body[:300])
        form, = Page(body).cards[0]["forms"]
        self.assertEqual(form["fields"]["csrf"], panel.csrf, "the server's token, as every form of it carries")
        fields = {**form["fields"], "set": "off-drain", "reason": "fan <swap>"}

        # A stale token: refused as the Workers page's own form is refused, and nothing written.
        workers_form, = [f for f in Page(panel.get("/workers")[2]).forms if f["label"] == "switch queue gpu of box"]
        refused = [panel.post(action, {**sent, "set": "off-drain", "csrf": "stale"})
                   for action, sent in ((form["action"], fields), (workers_form["action"], workers_form["fields"]))]
        self.assertEqual([status for status, _, _ in refused], [403, 403])
        self.assertEqual({error_line(body) for _, _, body in refused},
                         {"refused: the form's token is missing or stale; reload the page and try again"})
        self.assertEqual((self.store.switches_in_force("", "box", ("gpu",)), self.store.reads.switch_log()),
                         ({"gpu": None}, []))

        status, headers, body = panel.post(form["action"], fields)
        self.assertEqual(status, 303, body[:300])
        self.assertRegex(headers["location"], r"^/deck\?note=")
        held = self.store.switches_in_force("", "box", ("gpu",))["gpu"]
        self.assertEqual((held.desired, held.policy, held.reason, held.changed_by),
                         ("off", "drain", "fan <swap>", "panel"))
        status, _, body = panel.get(headers["location"])
        landed = Page(body)
        self.assertIn("queue gpu of box: off (drain)", landed.text)
        self.assertEqual([" ".join(row.split()[:4]) for row in landed.cards[0]["switch_rows"]],
                         ["queue gpu off (drain)"])
        self.assertEqual([b["value"] for b in landed.cards[0]["forms"][0]["buttons"] if b["current"]], ["off-drain"])

        # A form naming anywhere but one of the panel's own pages to go back to lands on the Workers page.
        for back in ("//evil.example/deck", "https://evil.example/", "/\\evil.example", "/deck\r\nSet-Cookie: a=b",
                     "javascript:alert(1)", "/deck#x"):
            with self.subTest(back=back):
                status, headers, _ = panel.post(form["action"], {**fields, "set": "on", "back": back})
                self.assertEqual(status, 303)
                self.assertRegex(headers["location"], r"^/workers\?note=")
        self.assertIsNone(self.store.switches_in_force("", "box", ("gpu",))["gpu"])

    def test_each_gpu_shows_its_warm_models_its_memory_and_its_job(self):
        self.store.worker_beat("box:9:0", "", "box", "gpu", 9, None, models=("gone",), gpu_index=1, warm_model="gone")
        self.clock.advance(120.0)  # that worker is silent now: what it held is no longer shown
        self.write("box", {**HOST, **GPU0})  # GPU 0 read by the sampler; GPU 1 not at all
        self.store.enqueue(JobSpec(task=SCRIPT, queue="gpu"))
        job = self.store.claim(Claim("", "gpu", "box:11", 600.0))
        self.store.worker_beat("box:11:0", "", "box", "gpu", 11, job.id, models=(SCRIPT,), gpu_index=0,
                               vram_total_mb=81920, vram_free_mb=100, warm_model=SCRIPT)
        self.store.worker_beat("box:12:0", "", "box", "gpu", 12, None, models=("llm",), gpu_index=1,
                               vram_total_mb=24000, vram_free_mb=4000, warm_model="llm")
        self.store.worker_beat("box:13:0", "", "box", "gpu", 13, None, models=("llm", "vae"), gpu_index=1,
                               vram_total_mb=24000, vram_free_mb=4000, warm_model="vae")
        view, page = self.render(deck.flight_deck, "/deck")
        card, = page.cards
        gpus = {row[0]: [" ".join(cell.split()) for cell in row[:4]] for row in card["rows"] if row}
        self.assertEqual(gpus, {  # gpu, warm models, job, vram: the sampler's reading over the adverts'
            "0": ["0", SCRIPT, f"job {job.id} {SCRIPT}", "60,000 / 81,920 MiB"],
            "1": ["1", "llm, vae", "-", "20,000 / 24,000 MiB"]})
        self.assertIn(f"/jobs/{job.id}", card["links"])
        shown = view.data["hosts"][0]["latest"]["gpus"]
        self.assertEqual([(g["index"], g["models"], g["jobs"]) for g in shown],
                         [(0, [SCRIPT], [{"job_id": job.id, "task": SCRIPT}]), (1, ["llm", "vae"], [])])

    def test_a_gpu_switched_off_shows_who_and_why_and_a_cleared_verdict_shows_as_a_note(self):
        self.write("box", {**HOST, **GPU0})
        self.store.record_gpu_health("box", 0, "uncorrectable ECC errors: 3 <since> the driver loaded")
        view, page = self.render(deck.flight_deck, "/deck")
        row = next(row for row in page.cards[0]["rows"] if row and row[0].startswith("0"))
        self.assertIn("off by health gate: uncorrectable ECC errors: 3 <since> the driver loaded", row[0])
        self.assertNotIn("<since>", str(view.body), "the reason is escaped")
        self.assertEqual(view.data["hosts"][0]["latest"]["gpus"][0]["switch"]["desired"], "off")
        self.store.set_gpu_switch("box", 0, "on", changed_by="ops")
        _, page = self.render(deck.flight_deck, "/deck")
        row = next(row for row in page.cards[0]["rows"] if row and row[0].startswith("0"))
        self.assertIn("failing, cleared: uncorrectable ECC errors", row[0])
        self.assertNotIn("off by", row[0])

    def test_the_clock_chart_tops_at_the_cards_highest_clock(self):
        idle = {**HOST, **GPU0, "gpu.0.sm_mhz": 345}
        for _ in range(5):
            self.write("box", {**idle, "gpu.0.max_sm_mhz": 1980})
            self.write("older", idle)  # a sampler that reads no maximum
            self.clock.advance(2.0)
        for query in ({}, {"host": "box"}):
            with self.subTest(query=query):
                view, page = self.render(deck.flight_deck, "/deck", **query)
                card = {" ".join(c["heading"].split()[:1]): c for c in page.cards}["box"]
                self.assertIn("SM clock 0 to 1980 MHz", card["captions"])
                clock, = [c for c in view.data["hosts"][0]["charts"] if c["title"] == "SM clock"]
                self.assertEqual(clock["high"], 1980.0)
                self.assertIn("345 / 1,980 MHz", [cell for row in card["rows"] for cell in row])
        _, page = self.render(deck.flight_deck, "/deck", host="older")
        self.assertIn("SM clock 0 to 345 MHz", page.cards[0]["captions"], "no maximum known: the highest value seen")

    # --- Schedules ------------------------------------------------------------------------------

    def fire(self, project: str, name: str, slot: float, fired_by: str = "box:1") -> int:
        job = self.store.fire_slot(project, name, slot, JobSpec(task="app:t", project=project), fired_by)
        self.assertIsNotNone(job)
        return job.id

    def test_schedules_without_a_declaration(self):
        now = self.clock.now
        first = self.fire("", "nightly", now - 7200.0, fired_by=SCRIPT)
        second = self.fire("", "nightly", now - 3600.0, fired_by=RTL)
        self.fire("beta", "hourly", now - 60.0)
        with mock.patch.object(schedules, "registered_schedules", return_value=[]):
            view, page = self.render(schedules.schedule_list, "/schedules")
        nightly, = [s for s in view.data["schedules"] if s["name"] == "nightly"]
        self.assertEqual((nightly["project"], nightly["declared"], nightly["next_fire"], nightly["last_slot"]),
                         ("", False, None, iso(now - 3600.0)))
        self.assertEqual([(r["job_id"], r["fired_by"]) for r in nightly["recent"]], [(second, RTL), (first, SCRIPT)])
        self.assertEqual([(s["project"], s["name"]) for s in view.data["schedules"]],
                         [("", "nightly"), ("beta", "hourly")])
        text = "".join(page.text)
        self.assertIn(schedules.NO_DECLARATION, text)
        self.assertIn(SCRIPT, text)
        self.assertIn(f"/jobs/{first}", page.links)

        with mock.patch.object(schedules, "registered_schedules", return_value=[]):
            view, page = self.render(schedules.schedule_list, "/schedules", project="beta")
        self.assertEqual([s["name"] for s in view.data["schedules"]], ["hourly"])
        view, _ = self.render(schedules.schedule_list, "/schedules", project="")
        self.assertNotIn("hourly", [s["name"] for s in view.data["schedules"]])
        with self.assertRaises(HttpError) as refused:
            schedules.schedule_list(self.request("/schedules", project="two words"))
        self.assertEqual(refused.exception.status, 400)

    def test_schedules_with_a_schedule_file(self):
        now = self.clock.now
        self.fire("", "nightly", now - 3600.0)
        path = os.path.join(self.dir, "schedules.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump([{"name": "nightly", "task": "app:nightly", "every": 900},
                       {"name": "new", "task": "app:new", "cron": "0 3 * * *", "zone": "Europe/Berlin"}], handle)
        files = (path, os.path.join(self.dir, "missing.json"))
        with mock.patch.object(schedules, "SCHEDULE_FILES", files), \
                mock.patch.object(schedules, "registered_schedules", return_value=[]):
            view, page = self.render(schedules.schedule_list, "/schedules")
        shown = {s["name"]: s for s in view.data["schedules"]}
        self.assertEqual(set(shown), {"nightly", "new"})
        self.assertEqual(shown["nightly"]["next_fire"],
                         iso(next_slot([Schedule("nightly", "app:nightly", every=900)], now)))
        self.assertEqual((shown["new"]["fired"], shown["new"]["last_slot"], shown["new"]["recent"]), (False, None, []))
        self.assertEqual(shown["new"]["cadence"], "cron 0 3 * * * (Europe/Berlin)")
        self.assertEqual(len(view.data["problems"]), 1)
        self.assertIn("missing.json", view.data["problems"][0])
        self.assertNotIn(schedules.NO_DECLARATION, "".join(page.text), "every schedule shown is declared")

    def test_each_fired_slot_says_why_and_a_scheduled_job_its_schedule(self):
        now, spec = self.clock.now, JobSpec(task="app:t", project="beta")
        booted = self.store.fire_slot("beta", "nightly", now - 7200.0, spec, "box:1", "boot")
        by_hand = self.store.fire_slot("beta", "nightly", now - 60.0, spec, SCRIPT, "manual")
        self.store.fire_slot("beta", "odd", now - 30.0, spec, "box:1", SCRIPT)  # as plain SQL could write it
        with mock.patch.object(schedules, "registered_schedules", return_value=[]):
            view, page = self.render(schedules.schedule_list, "/schedules", project="beta")
        shown = {s["name"]: s for s in view.data["schedules"]}
        self.assertEqual([(r["job_id"], r["reason"]) for r in shown["nightly"]["recent"]],
                         [(by_hand.id, "manual"), (booted.id, "boot")])
        self.assertEqual([r["reason"] for r in shown["odd"]["recent"]], [SCRIPT])
        text = "".join(page.text)
        for words in ("at boot", "fired by hand", SCRIPT):  # SCRIPT shown as text: render() checks it is escaped
            self.assertIn(words, text)

        def detail(job_id):
            return lambda req: jobs.job_detail(dataclasses.replace(req, params={"id": str(job_id)}))

        view, page = self.render(detail(booted.id), f"/jobs/{booted.id}")
        self.assertEqual((view.data["job"]["schedule"], view.data["job"]["schedule_slot"],
                          view.data["job"]["fire_reason"]), ("nightly", iso(now - 7200.0), "boot"))
        facts = "".join(page.text)
        self.assertIn("nightly · slot 2 h ago · boot", facts)
        self.assertIn("/schedules?project=beta", page.links)
        plain = self.store.enqueue(JobSpec(task="app:t"))
        view, page = self.render(detail(plain.id), f"/jobs/{plain.id}")
        self.assertIsNone(view.data["job"]["schedule"])
        self.assertNotIn("/schedules?project=", " ".join(page.links))

    # --- Models ----------------------------------------------------------------------------------

    def test_models_of_every_project(self):
        self.store.enqueue(JobSpec(task="t", queue="gpu", model="llm"))
        self.store.enqueue(JobSpec(task="t", queue="gpu", model="llm", vram_mb=900_000))
        self.store.enqueue(JobSpec(task="t", queue="gpu", model=SCRIPT, project="beta"))
        self.assertEqual(len(self.store.flag_unplaceable("", "gpu", "llm", 900_000, None, "no_box_big_enough")), 1)
        self.store.worker_beat("w1", "", SCRIPT, "gpu", 7, None, models=("llm",), gpu_index=0, vram_total_mb=81920,
                               vram_free_mb=80000, warm_model="llm", warm_since=self.clock.now - 60.0)
        view, page = self.render(models.model_list, "/models")
        shown = {(p["project"], m["model"]): m for p in view.data["projects"] for m in p["models"]}
        self.assertEqual(set(shown), {("", "llm"), ("beta", SCRIPT)})
        llm = shown[("", "llm")]
        self.assertEqual((llm["queued"], llm["running"], llm["unplaceable"]), (2, 0, {"no_box_big_enough": 1}))
        self.assertEqual([(h["host"], h["gpu_index"]) for h in llm["holders"]], [(SCRIPT, 0)])
        text = "".join(page.text)
        self.assertIn("no_box_big_enough (it needs more GPU memory", text)
        self.assertIn(SCRIPT, text)
        self.assertIn("/jobs?project=&state=queued&model=llm", page.links)

        view, page = self.render(models.model_list, "/models", project="beta")
        self.assertEqual([p["project"] for p in view.data["projects"]], ["beta"])
        view, _ = self.render(models.model_list, "/models", project="")
        self.assertEqual([p["project"] for p in view.data["projects"]], [""])
        for value in ("two words", "*"):
            with self.subTest(value=value), self.assertRaises(HttpError) as refused:
                models.model_list(self.request("/models", project=value))
            self.assertEqual(refused.exception.status, 400)

    def test_no_models(self):
        view, page = self.render(models.model_list, "/models")
        self.assertEqual([p["models"] for p in view.data["projects"]], [[]])
        self.assertIn("no model jobs or GPU workers", "".join(page.text))


class PanelPoster:
    """Requests to a panel server as its own pages make them (same origin), each on a
    connection of its own: the status, the headers (lower-case names) and the body."""

    def __init__(self, panel: server.PanelServer) -> None:
        self.port, self.csrf = panel.server_address[1], panel.csrf

    def request(self, method: str, path: str, body: str | None = None, headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers={"Sec-Fetch-Site": "same-origin", **(headers or {})})
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode("utf-8")
        finally:
            conn.close()

    def get(self, path: str):
        return self.request("GET", path)

    def post(self, path: str, fields: dict[str, str]):
        return self.request("POST", path, urlencode(fields), {"Content-Type": "application/x-www-form-urlencoded"})


def error_line(body: str) -> str:
    """The one line an error page says."""
    found = re.search(r'<p class="error">(.*?)</p>', body)
    return html.unescape(found.group(1)) if found else body[:200]


class SQLitePagesTest(PagesContract, TempDirTestCase):
    def plain_sql(self, statement: str, params: tuple) -> None:
        with contextlib.closing(sqlite3.connect(self.store.config.db)) as conn, conn:
            conn.execute(statement, params)

    def test_a_finished_job_whose_times_are_no_numbers_is_no_tick(self):
        # SQLite holds whatever plain SQL writes; text sorts after every number, so the read
        # of jobs ended since a time returns it. The deck draws the rest, twice (kept).
        self.write("box", HOST)
        for _ in range(2):
            self.store.enqueue(JobSpec(task="train", queue="gpu"))
        for n in range(2):
            job = self.store.claim(Claim("", "gpu", "box:1", 600.0))
            self.store.finish(job, Outcome(COMPLETED))
            self.clock.advance(1.0)
        self.plain_sql("UPDATE jobs SET finished_at = 'soon', started_at = x'00' WHERE id = ?", (job.id,))
        memo: dict[str, Any] = {}
        for _ in range(2):
            view, page = self.render(deck.flight_deck, "/deck", memo=memo)
            self.assertEqual(page.cards[0]["ticks"], [f"job {job.id - 1} train started",
                                                     f"job {job.id - 1} train completed"])
            self.clock.advance(2.0)


class PostgresPagesTest(PagesContract, PostgresDatabaseCase, TempDirTestCase):
    def plain_sql(self, statement: str, params: tuple) -> None:
        with contextlib.closing(self.caller_connection()) as conn, conn:
            conn.execute(statement.replace("?", "%s"), params)


if __name__ == "__main__":
    unittest.main()
