"""The Flight Deck (``/deck``): every host side by side, worst first, each a card with its
newest sample, the jobs running on it, and its last hour drawn as charts on one time axis
shared by every card (``[now - 1 h, now]``), so that hosts line up; ``?host=H`` shows one.
A card is also where its host is switched: per queue its workers serve, the switch in
force and the Workers page's form (ON, OFF drain, OFF hard), which brings the operator
back here; and per GPU, the models warm on it, its memory and the jobs running on it.

A card's charts: CPU and GPU utilisation, temperatures, GPU power against its limit, SM
clock, VRAM used against total, network receive and send, and the seconds the GPUs were
held back per reason; ticks mark where jobs started and ended on the host. No line crosses
a gap: a gap is ``GAP_INTERVALS`` times the host's sample interval (``sample_interval``:
the intervals its sampler wrote in its rows, else the rows' spacing, else the configured
cadence). Every host at once is drawn a point a minute (``minute_rows``), one host from
every sample, bucketed to about ``deck_charts.POINTS_PER_CHART`` points a chart.

The charts are drawn by ``rowfleet.panel.deck_charts`` a slice of time at a time, through
the server's memo (``Request.memo``): a refresh draws only what new samples changed. Owns
the order of the hosts (``worst_first``), ``sample_interval``, ``minute_rows`` and the
cards. Reads through the hosts' read model (``rowfleet.views.hosts``) and the store's browsing
reads; imports no driver, no SQL and no command line, and of the other pages only the
Workers page's switch form (one form, one handler, wherever a switch is offered).
"""

from __future__ import annotations

import functools
import math
import statistics
import threading
from typing import Any, Iterable, Mapping, MutableMapping, Sequence

from rowfleet import names
from rowfleet.errors import ConfigError
from rowfleet.names import is_finite_number
from rowfleet.panel import svg
from rowfleet.panel.app import HttpError, Request, View
from rowfleet.panel.pages import workers
from rowfleet.panel.deck_charts import LABEL_MOST, Axis, ChartMemo, Drawn, Line
from rowfleet.panel.html import Markup, clipped, definitions, join, link, table, tag, url, when
from rowfleet.store.reads import EndedJob
from rowfleet.store.telemetry import DETAIL, HostSample
from rowfleet.telemetry.readings import MinuteFold
from rowfleet.views import hosts as host_model
from rowfleet.views.hosts import OVERLAP, REREAD, HostView, KeptRows

WINDOW = 3600.0         # seconds of the shared time axis
MINUTE = 60.0           # seconds a point of the every-host deck stands for
HOT_CELSIUS = 85.0      # a sensor or a GPU this hot puts its host near the top
DEAD_AFTER = 300.0      # seconds without a sample after which a host is silent, whatever its cadence
GAP_INTERVALS = 3       # samples missed in a row before a line is cut
TICK_JOBS = 2000        # finished jobs read for the ticks
NAME_MOST = 120         # characters of a host name in a card's heading
CHART_WIDTH, CHART_HEIGHT = 600, 80
STRIP_HEIGHT = 16       # the jobs strip under a card's charts
TICKS_SHOWN = 400       # job starts and ends drawn on one card's strip, the newest
EVERY_HOST_SLICE = 120  # seconds of a slice (a hover column) when every host is shown: 30 a chart
ONE_HOST_SLICE = 60     # and when one host is: 60 a chart

THROTTLING, HOT, SILENT, FINE = "throttling", "hot", "silent", "fine"
CONDITIONS = (THROTTLING, HOT, SILENT, FINE)  # worst first


# --- pure: the order of the hosts ------------------------------------------------------------


def condition(host: HostView, now: float) -> str:
    """What puts ``host`` where it is on the deck at ``now``: ``throttling`` (a GPU slowed
    by power or heat now), ``hot`` (its hottest sensor or a GPU at ``HOT_CELSIUS`` or
    more), ``silent`` (its newest sample is stale by its sampler's cadence, older than
    ``DEAD_AFTER``, or unreadable), else ``fine``. A silent host's last readings say
    nothing of now, so they never rank it as throttling or hot.

    >>> from rowfleet.views.hosts import GpuView
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


def host_charts(rows: Sequence[Mapping[str, Any]], start: float, end: float, gap: float,
                gpus_apart: bool = True, memo: ChartMemo | None = None) -> list[Drawn]:
    """A host's charts from its ``rows`` (``HostSeries.rows``) over ``[start, end]``, where
    neighbours more than ``gap`` seconds apart are a gap: a line per GPU with
    ``gpus_apart`` (one host, every sample, a slice a minute), else a host's GPUs as one
    (every host, a point a minute, a slice two minutes). Drawn through ``memo`` (the
    server's), which keeps the slices whose rows did not change.

    >>> rows = [{"at": float(t), "readings": {"cpu.busy": 10.0, "gpu.0.util": 90, "gpu.0.power_w": 300,
    ...          "gpu.0.power_limit_w": 350, "gpu.0.throttle_s.sw_power_cap": 0.5}} for t in (0, 2, 4)]
    >>> charts = host_charts(rows, 0.0, 10.0, gap=6.0)
    >>> [(c.title, [line.label for line in c.lines], c.high) for c in charts]
    [('Utilisation', ['cpu', 'gpu0'], 100.0), ('GPU power', ['gpu0', 'gpu0 limit'], 350.0), ('Throttled', ['sw_power_cap'], 0.5)]
    >>> charts[0].points()[1]
    [(0.0, 90.0), (2.0, 90.0), (4.0, 90.0)]
    """
    return (memo or ChartMemo()).charts(rows, _axis(start, end, gap, gpus_apart), gpus_apart)


def _axis(start: float, end: float, gap: float, gpus_apart: bool) -> Axis:
    return Axis(start, end, ONE_HOST_SLICE if gpus_apart else EVERY_HOST_SLICE, gap, CHART_WIDTH, CHART_HEIGHT)


def job_ticks(jobs: Iterable[EndedJob]) -> dict[str | None, list[tuple[float, str]]]:
    """Where jobs started and ended, with their titles, by host, by time.

    >>> job = EndedJob(7, "", "gpu", "train", "completed", "box", 10.0, 20.0)
    >>> job_ticks([job, EndedJob(8, "", "gpu", "t", "running", "other", 5.0, None)])["box"]
    [(10.0, 'job 7 train started'), (20.0, 'job 7 train completed')]
    """
    ticks: dict[str | None, list[tuple[float, str]]] = {}
    for job in jobs:
        ticks.setdefault(job.host, []).extend(_ticks_of(job))
    for on in ticks.values():
        on.sort(key=lambda tick: tick[0])
    return ticks


@functools.lru_cache(maxsize=2 * TICK_JOBS)  # a refresh ticks the same jobs as the last one, but a few
def _ticks_of(job: EndedJob) -> tuple[tuple[float, str], ...]:
    what = f"job {job.id} {clipped(job.task, LABEL_MOST)}"
    ticks = []
    if is_finite_number(job.started_at):
        ticks.append((float(job.started_at), f"{what} started"))
    if is_finite_number(job.finished_at):
        ticks.append((float(job.finished_at), f"{what} {clipped(job.state, 24)}"))
    return tuple(ticks)


class EndedJobs:
    """The jobs the deck ticks (the newest ``TICK_JOBS`` that ran on a host and ended since
    a time), kept between refreshes as ``hosts.KeptRows`` keeps rows: read whole every
    ``REREAD`` seconds, and in between only those that ended since the newest held (less
    ``OVERLAP``), the same job read again taking its place. A job whose end is no number
    (plain SQL) is no tick: there is nowhere on the axis to draw it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[int, EndedJob] = {}
        self.read_at = -math.inf

    def read(self, store: Any, since: float, now: float) -> list[EndedJob]:
        with self.lock:
            if now - self.read_at >= REREAD or not now >= self.read_at:
                self.jobs = {job.id: job for job in _ended(store.reads.jobs_ended_since(since, limit=TICK_JOBS))}
                self.read_at = now
            else:
                newest = min(max((job.finished_at for job in self.jobs.values()), default=since), now)
                for job in _ended(store.reads.jobs_ended_since(max(since, newest - OVERLAP), limit=TICK_JOBS)):
                    self.jobs[job.id] = job
            kept = sorted((job for job in self.jobs.values() if job.finished_at >= since),
                          key=lambda job: job.finished_at, reverse=True)[:TICK_JOBS]
            self.jobs = {job.id: job for job in kept}
            return kept


def _ended(jobs: Iterable[EndedJob]) -> list[EndedJob]:
    """The jobs whose end is a number, which compares with the axis's times."""
    return [job for job in jobs if is_finite_number(job.finished_at)]


# --- the page -------------------------------------------------------------------------------------


def minute_rows(minute: Sequence[HostSample], detail: Sequence[HostSample],
                folds: MutableMapping[Any, Any] | None = None) -> list[dict[str, Any]]:
    """A host's hour a point a minute, as the deck shows every host at once: its minute
    rows, and its detail rows after them folded into minutes as the sampler will fold them
    (``MinuteFold``), each at its minute's start. ``folds`` (the server's) keeps each
    minute's fold between refreshes, so that a refresh adds only the rows that arrived
    since; a fold is made again whenever its rows are not the ones it was made of.

    >>> minute = [HostSample("b", "minute", 0.0, {"cpu.busy": 10.0})]
    >>> detail = [HostSample("b", "detail", t, {"cpu.busy": float(t)}) for t in (60.0, 62.0, 130.0)]
    >>> [(row["at"], row["readings"]["cpu.busy"]) for row in minute_rows(minute, detail)]
    [(0.0, 10.0), (60.0, 61.0), (120.0, 130.0)]
    """
    rows = [{"at": row.at, "readings": row.readings} for row in minute]
    newest = minute[-1].at if minute else -math.inf
    pending: dict[float, list[HostSample]] = {}
    for row in detail:
        if is_finite_number(row.at) and row.at >= newest + MINUTE:
            pending.setdefault(row.at // MINUTE * MINUTE, []).append(row)
    folds = {} if folds is None else folds
    host = (minute or detail or [None])[0]
    for at, samples in sorted(pending.items()):
        rows.append({"at": at, "readings": _folded(folds, (samples[0].host, at), samples)})
    if host is not None:  # the host's folds of minutes that have their rows now are let go
        for done in [key for key in folds if key[0] == host.host and key[1] not in pending]:
            del folds[done]
    return rows


def _folded(folds: MutableMapping[Any, Any], key: tuple[str, float], samples: list[HostSample]) -> Mapping[str, Any]:
    """The fold of ``samples``, from the one kept under ``key`` (host, minute) when it was
    made of the first of them (the same rows, by identity: the kept fold holds them)."""
    kept = folds.get(key)
    if kept is not None:
        fold, made_of = kept
        if len(made_of) <= len(samples) and all(a is b.readings for a, b in zip(made_of, samples)):
            for sample in samples[len(made_of):]:
                fold.add(sample.readings)
                made_of.append(sample.readings)
            return fold.folded()
    fold = MinuteFold()
    for sample in samples:
        fold.add(sample.readings)
    folds[key] = (fold, [sample.readings for sample in samples])
    return fold.folded()


def flight_deck(req: Request) -> View:
    """Every host (or ``?host=H`` only), worst first, with its last hour."""
    now, wanted = req.now, req.word("host")
    start, end = now - WINDOW, now
    kept = req.memo.setdefault("deck rows" if wanted is None else "deck rows of one host", host_model.RecentRows())
    running = req.store.reads.jobs_running()  # the cards' task names, and the ticks of jobs not ended yet
    read = host_model.hosts_with_rows(req.store, now, only=wanted, kept=kept, running=running)
    if wanted is not None:
        read = [each for each in read if each[0].host == wanted]
        if not read:
            raise HttpError(404, f"no sample of host {names.shown(wanted)}: the Flight Deck lists the hosts that "
                                 f"have sampled")
    views = [view for view, _, _ in read]
    ended = req.memo.setdefault("deck jobs", EndedJobs()).read(req.store, start, now) if views else []
    jobs = ended + running if views else []
    ticks_on = job_ticks(jobs)
    memo = req.memo.setdefault("deck charts" if wanted is None else "deck charts of one host", ChartMemo())
    memo.turn()
    cards, hosts = [], []
    back = url("/deck", host=wanted)  # where a card's switch brings the operator back to
    rows_of = {view.host: (minute, detail) for view, minute, detail in read}
    for view in worst_first(views, now):
        if wanted is None:  # every host: a point a minute, from the rows its view was read from
            rows = minute_rows(*rows_of[view.host], folds=req.memo.setdefault("deck folds", {}))
            interval = MINUTE
        else:  # one host: every sample
            samples = req.memo.setdefault("deck samples of one host", KeptRows(DETAIL)).read(
                req.store, {view.host: start}, now)[view.host]
            rows = list(host_model.series_of(view.host, DETAIL, start, now, samples).rows)
            interval = sample_interval(rows, req.store.config.sample_every)
        gap = GAP_INTERVALS * interval
        charts = host_charts(rows, start, end, gap, gpus_apart=wanted is not None, memo=memo)
        ticks = ticks_on.get(view.host, [])
        state = condition(view, now)
        strip = memo.strip(ticks[-TICKS_SHOWN:], _axis(start, end, gap, gpus_apart=wanted is not None), STRIP_HEIGHT)
        cards.append(_card(req, view, state, charts, ticks, strip, back))
        hosts.append((view, state, interval, gap, charts, ticks))
    tally = {name: sum(1 for host in hosts if host[1] == name) for name in CONDITIONS}
    summary = tag("p", join(
        f"{len(hosts)} host(s) over the last hour, worst first",
        (": " + ", ".join(f"{n} {name}" for name, n in tally.items() if n)) if hosts else "",
        join(" · ", link("/deck", "every host")) if wanted is not None else ""), class_="deck-summary")
    if not cards:
        cards.append(tag("p", "No host has sampled yet: run `rowfleet sampler` on each host (a worker's supervisor "
                              "starts one).", class_="empty"))
    body = join(summary, tag("div", join(*cards), class_="deck"))

    def data() -> dict[str, Any]:  # the JSON twin, made only when asked for: every point of every chart
        return {"at": now, "since": start, "until": end, "conditions": tally, "hosts": [
            {"host": view.host, "condition": state, "latest": view.to_dict(), "interval": interval, "gap": gap,
             "charts": [chart.to_dict() for chart in charts],
             "ticks": [{"at": at, "title": title} for at, title in ticks]}
            for view, state, interval, gap, charts, ticks in hosts]}

    return View("Flight Deck", data, body, active="/deck")


def _card(req: Request, view: HostView, state: str, charts: Sequence[Drawn], ticks: Sequence[tuple[float, str]],
          strip: str, back: str) -> Markup:
    """A host's card; its switches' forms bring the operator back to ``back`` (this page)."""
    name = clipped(view.host, NAME_MOST)
    heading = tag("h2", join(link(url("/deck", host=view.host), name) if _linkable(view.host) else name, " ",
                             tag("span", state, class_=f"badge condition-{state}"), _switched_off(view.queues)))
    age = join(when(view.at, req.now), " ", tag("span", "stale", class_="bad stale") if view.stale else "")
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
    drawn = [_figure(chart) for chart in charts]
    if not drawn:
        drawn.append(tag("p", "no samples in the last hour", class_="muted"))
    drawn.append(_job_strip(ticks, strip))
    return tag("section", join(heading, facts, _switches(req, view, back), jobs, _gpu_table(view),
                               tag("div", join(*drawn), class_="charts")), class_=f"host condition-{state}")


def _switched_off(queues: Sequence[host_model.HostQueue]) -> Markup:
    """A mark in the heading for a host whose workers a switch holds off, on some queues or all."""
    off = sum(1 for queue in queues if queue.switch is not None)
    if not off:
        return Markup("")
    text = "switched off" if off == len(queues) else f"{off} of {len(queues)} queues off"
    return join(" ", tag("span", text, class_="badge switched-off"))


def _switches(req: Request, view: HostView, back: str) -> Markup:
    """A row per queue the host's workers serve: the switch in force, and the Workers
    page's form that switches it ON, OFF drain or OFF hard (answered there); the switch in
    force alone when the panel is read-only."""
    rows = []
    for queue in view.queues:
        label = f"queue {clipped(queue.queue, LABEL_MOST)}" + \
            (f" · project {clipped(queue.project, LABEL_MOST)}" if queue.project else "")
        state = workers.switch_state(queue.switch)
        form = workers.switch_form(req, queue.project, view.host, queue.queue, label, state=state,
                                   current=workers.choice_of(queue.switch), back=back)
        rows.append(tag("li", form or join(tag("span", label, class_="scope"), " ", state), class_="switch-row"))
    return tag("ul", join(*rows), class_="host-switches", aria_label="switches") if rows else Markup("")


def _gpu_table(view: HostView) -> Markup:
    """The host's GPUs: what runs on each (the models warm there, the jobs) and its memory
    first, where a narrow card shows them without scrolling; then its readings now and
    over the hour, and its name."""
    if not view.gpus and not view.gpu_error:
        return Markup("")
    headers = ["gpu", "warm model", "job", "vram", "util", "temp", "power", "sm clock", "slowed now by",
               "held back (1 h)", "name"]
    rows = [[join(str(gpu.index), _gpu_state(gpu)),
             tag("span", ", ".join(clipped(model, LABEL_MOST) for model in gpu.models) or "-", class_="wraps"),
             _gpu_jobs(gpu.jobs), _pair(gpu.vram_used_mib, gpu.vram_total_mib, "MiB"), _value(gpu.util, "%", 0),
             _value(gpu.temp, "°C", 0), _pair(gpu.power_w, gpu.power_limit_w, "W"),
             _value(gpu.sm_mhz, "MHz", 0) if gpu.max_sm_mhz is None else _pair(gpu.sm_mhz, gpu.max_sm_mhz, "MHz"),
             ", ".join(gpu.slowdowns) or "-", _held(gpu.throttle_seconds), clipped(gpu.name or "-", 40)]
            for gpu in view.gpus]
    return table(headers, rows, empty="no GPU readings", class_="grid gpus")


def _gpu_state(gpu: host_model.GpuView) -> Markup | str:
    """A GPU switched off for new claims (the health gate's verdict, or an operator's word),
    as a badge with who and why; a verdict an operator cleared, as a note. Switched on again
    with ``rowfleet gpu HOST INDEX on``."""
    switch = gpu.switch
    if switch is None or not (switch.off or switch.health):
        return ""
    if switch.off:
        text = f"off by {switch.changed_by or 'an operator'}" + (f": {switch.reason}" if switch.reason else "")
        return join(" ", tag("span", clipped(text, 300), class_="badge switched-off", title=text))
    return join(" ", tag("span", clipped(f"failing, cleared: {switch.health}", 300), class_="muted wraps"))


def _gpu_jobs(jobs: Sequence[host_model.GpuJob]) -> Markup | str:
    """The jobs running on a GPU: each linked, with its task."""
    if not jobs:
        return "-"
    return Markup("<br>".join(tag("span", join(link(f"/jobs/{job.job_id}", f"job {job.job_id}"), " ",
                                               tag("span", clipped(job.task or "-", LABEL_MOST), class_="muted")),
                                  class_="wraps") for job in jobs))


def _job_strip(ticks: Sequence[tuple[float, str]], strip: str) -> Markup:
    """The jobs that started and ended on the host, as ticks on a strip under its charts,
    on the same axis (``strip``, drawn): the newest ``TICKS_SHOWN`` of them."""
    shown = min(len(ticks), TICKS_SHOWN)
    caption = join(tag("span", "Jobs", class_="chart-title"), " ",
                   tag("span", f"{len(ticks)} starts and ends" if ticks else "none started or ended", class_="muted"),
                   tag("span", f" (the newest {shown} drawn)", class_="muted") if shown < len(ticks) else "")
    return tag("figure", join(tag("figcaption", caption), Markup(strip)), class_="deck-chart jobs-strip")


def _figure(chart: Drawn) -> Markup:
    caption, legend = _labels(chart.title, chart.unit, chart.high, chart.left_out, chart.lines)
    return Markup(f'<figure class="deck-chart">{caption}{chart.svg}{legend}</figure>')


@functools.lru_cache(maxsize=1024)  # a chart's labels change when its scale or its lines do: seldom
def _labels(title: str, unit: str, high: float, left_out: int, lines: tuple[Line, ...]) -> tuple[Markup, Markup]:
    """A chart's caption (title, scale, lines left out) and legend, as markup."""
    caption = join(tag("span", title, class_="chart-title"), " ",
                   tag("span", f"0 to {svg.value_text(high)} {unit}", class_="muted"),
                   tag("span", f" ({left_out} more not drawn)", class_="muted") if left_out else "")
    legend = tag("ul", join(*[tag("li", join(tag("span", "", class_=f"key {line.css}"), line.label))
                              for line in lines]), class_="legend")
    return tag("figcaption", caption), legend


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
