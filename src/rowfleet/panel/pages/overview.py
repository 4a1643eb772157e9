"""The Overview (``/``): per project and queue, the jobs by state (finished states capped,
so the page never counts a million rows), the last hour's finished jobs per minute as a
sparkline (done and failed), the age of the oldest queued job, the workers serving, parked
and silent, and whether the project has a live orchestrator and how many outbox events
wait. One snapshot read, one read of the last hour's finished jobs, one seek per queue.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from rowfleet import job as jobs
from rowfleet.panel import svg
from rowfleet.panel.app import Request, View
from rowfleet.panel.html import Markup, ago, esc, join, link, table, tag, url
from rowfleet.views.snapshot import SILENT, snapshot

HOUR = 3600.0
MINUTE = 60.0
STATE_COLUMNS = (jobs.QUEUED, jobs.RUNNING, jobs.COMPLETED, jobs.FAILED, jobs.CANCELLED)


def overview(req: Request) -> View:
    fleet = snapshot(req.store)
    now = fleet.at
    per_minute = minute_counts(req.memo.setdefault("finished per minute", FinishedPerMinute()).rows(req.store, now))
    queued = sorted({(c.project, c.queue) for c in fleet.counts if c.state == jobs.QUEUED and c.n})
    oldest = req.store.reads.oldest_queued(queued)
    sections, data = [], []
    for project in fleet.projects():
        rows, queues = [], []
        for queue in project.queues():
            tally = project.tally(queue)
            workers = [w for w in project.workers if queue in (w.queues or (w.queue,))]
            crew = worker_tally(workers)
            done = per_minute.get((project.name, queue, jobs.COMPLETED), {})
            failed = per_minute.get((project.name, queue, jobs.FAILED), {})
            first = oldest.get((project.name, queue))
            waited = now - min(first["created_at"], first["run_at"]) if first else None
            queues.append({"queue": queue, "counts": {s: c.to_dict() for s, c in tally.items()},
                           "finished_last_hour": sum(done.values()), "failed_last_hour": sum(failed.values()),
                           "oldest_queued_seconds": waited, "workers": crew})
            counts = [_count_cell(project.name, queue, state, tally.get(state)) for state in STATE_COLUMNS]
            rows.append([link(url("/jobs", project=project.name or None, queue=queue), queue), *counts,
                         _spark(done, failed, now), "-" if waited is None else ago(now - waited, now).replace(" ago", ""),
                         _crew_text(crew)])
        services = project.services
        orchestrated = (tag("span", f"{services.orchestrators} orchestrator(s) live", class_="ok")
                        if services.orchestrators else tag("span", "no live orchestrator", class_="bad"))
        outbox = f"{services.outbox_waiting} outbox event(s) waiting" if services.outbox_waiting else "outbox empty"
        sections.append(join(
            tag("h2", f"project {project.name!r}" if project.name else "default project"),
            tag("p", join(orchestrated, " · ", outbox), class_="services"),
            table(["queue", *STATE_COLUMNS, "last hour (done / failed)", "oldest queued", "workers"], rows,
                  empty="no jobs yet")))
        data.append({"project": project.name, "orchestrators": services.orchestrators,
                     "outbox_waiting": services.outbox_waiting, "queues": queues})
    if not sections:
        sections.append(tag("p", "No jobs, workers or orchestrators yet: enqueue a job or start a worker.",
                            class_="empty"))
    return View("Overview", {"at": now, "count_cap": fleet.cap, "projects": data}, join(*sections), active="/")


class FinishedPerMinute:
    """The last hour's finished jobs per minute, read once per minute that is over: a
    minute's counts do not change once it has passed (but for a job retried later, which
    the sparkline keeps counting where it first finished; the Jobs page is exact), so each
    refresh reads only the minutes since the last one, a few hundred rows at most instead
    of the hour's tens of thousands. Shared by the requests of one server."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: list[dict[str, Any]] = []  # rows of the minutes that were over when read
        self.until = -math.inf                 # the minute (epoch seconds) they reach up to

    def rows(self, store: Any, now: float) -> list[dict[str, Any]]:
        start, current = now - HOUR, now // MINUTE * MINUTE
        with self.lock:
            done, until = self.done, self.until
        since = max(start, until)
        fresh = store.reads.finished_per_minute(since)
        over = [row for row in fresh if row["minute"] * MINUTE < current]
        kept = [row for row in done if row["minute"] * MINUTE >= start - MINUTE]
        with self.lock:
            if current > self.until:
                self.done, self.until = kept + over, current
        return kept + fresh


def minute_counts(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[int, int]]:
    """Finished jobs per (project, queue, state), per epoch minute.

    >>> minute_counts([{"project": "", "queue": "q", "state": "completed", "minute": 5, "n": 2}])
    {('', 'q', 'completed'): {5: 2}}
    """
    counts: dict[tuple[str, str, str], dict[int, int]] = {}
    for row in rows:
        counts.setdefault((row["project"], row["queue"], row["state"]), {})[int(row["minute"])] = int(row["n"])
    return counts


def worker_tally(workers: list[Any]) -> dict[str, int]:
    """How many workers serve, are parked (or draining) and are silent.

    >>> from types import SimpleNamespace as W
    >>> worker_tally([W(actual="serving"), W(actual="parked"), W(actual="SILENT"), W(actual="stopped")])
    {'serving': 1, 'parked': 1, 'silent': 1}
    """
    tally = {"serving": 0, "parked": 0, "silent": 0}
    for worker in workers:
        if worker.actual == "serving":
            tally["serving"] += 1
        elif worker.actual in ("parked", "draining"):
            tally["parked"] += 1
        elif worker.actual == SILENT:
            tally["silent"] += 1
    return tally


def _crew_text(crew: dict[str, int]) -> Markup:
    parts = [tag("span", f"{crew['serving']} serving", class_="ok" if crew["serving"] else "muted")]
    if crew["parked"]:
        parts.append(tag("span", f"{crew['parked']} parked", class_="warn"))
    if crew["silent"]:
        parts.append(tag("span", f"{crew['silent']} silent", class_="bad"))
    return join(*[item for part in parts for item in (part, " ")])


def _count_cell(project: str, queue: str, state: str, count: Any) -> Markup:
    if count is None or not count.n:
        return esc("0")
    return link(url("/jobs", project=project or None, queue=queue, state=state), count.text(),
                class_=f"count state-{state}")


def _spark(done: dict[int, int], failed: dict[int, int], now: float) -> Markup:
    start = now - HOUR
    first = int(start // MINUTE) + 1
    minutes = range(first, int(now // MINUTE) + 1)
    series = [svg.Series("done per minute", [(m * MINUTE, float(done.get(m, 0))) for m in minutes], css="line done"),
              svg.Series("failed per minute", [(m * MINUTE, float(failed.get(m, 0))) for m in minutes],
                         css="line failed")]
    top = max([*done.values(), *failed.values(), 1])
    chart = svg.time_chart(series, start, now, gap=2 * MINUTE, high=float(top), width=120, height=24)
    return join(Markup(chart), " ", f"{sum(done.values())} / {sum(failed.values())}")
