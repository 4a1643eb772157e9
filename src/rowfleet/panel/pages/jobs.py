"""Jobs: the search (``/jobs``), a job's detail (``/jobs/<id>``), its actions with their
confirmation, and bulk actions on every job matching a filter.

The search filters by id, project, task, queue, state, host, model and a substring of the
args as stored, newest first, in pages that follow the last id (keyset paging) and that
each search a bounded window of ids (``store.reads.search_jobs``), so a rare match never walks a
million rows in one request. Every filter is in the address, so a view can be bookmarked.

Actions are offered only where the job's state allows them: retry a failed or cancelled
job (not a workflow node: its run restarts instead), cancel a queued one or ask a running
one's worker to stop it, make a queued one run next. Each shows what it will do and asks
for confirmation (a GET page holding the POST form), so it works without JavaScript. A
bulk action shows how many jobs match first (at most ``BULK_CAP``) and applies to at most
that many, each in its own transaction; what could not be done is counted, not hidden.

A job's args are shown with secret-looking values (keys like password, secret, token or
key) redacted unless asked (``?reveal=secrets``).
"""

from __future__ import annotations

import re
from typing import Any

from rowfleet import job as jobs
from rowfleet.errors import Conflict, NotFound
from rowfleet.job import Job
from rowfleet.panel import svg
from rowfleet.panel.app import HttpError, Redirect, Request, View
from rowfleet.views import diagnosis
from rowfleet.panel.html import (Markup, clipped, definitions, esc, join, link, post_form, pretty, select,
                                 state_badge, table, tag, text_input, url, when)
from rowfleet.store.reads import JobFilter
from rowfleet.store.telemetry import DETAIL
from rowfleet.views.snapshot import snapshot

PAGE_SIZE = 50
BULK_CAP = 1000
SECRET_KEY = re.compile(r"password|passwd|secret|token|key|credential|auth", re.IGNORECASE)
REDACTED = "[redacted]"
AROUND = 300.0  # seconds of the host's telemetry shown before and after a run

ACTIONS = {
    "retry": ("Retry", "queue it again now, with at least one attempt left", (jobs.FAILED, jobs.CANCELLED)),
    "cancel": ("Cancel", "cancel it now if queued; if running, ask its worker to stop it",
               (jobs.QUEUED, jobs.RUNNING)),
    "run-next": ("Run next", "make it run ahead of every priority in its queue", (jobs.QUEUED,)),
}
BULK_ACTIONS = {"retry": (jobs.FAILED, jobs.CANCELLED), "cancel": (jobs.QUEUED,)}


def job_filter(req: Request) -> JobFilter:
    """The search's filter from the address; 400 on a bad value."""
    return JobFilter(project=req.query.get("project") if "project" in req.query else None,
                     state=req.choice("state", jobs.STATES), queue=req.word("queue"), task=req.word("task"),
                     host=req.word("host"), model=req.word("model"), needle=_needle(req))


def job_list(req: Request) -> View:
    match = job_filter(req)
    wanted = req.number("id", least=1)
    before = req.number("before", least=1)
    if wanted is not None:
        found = _maybe(req, wanted)
        listed, next_before, searched = ([found] if found else []), None, None
    else:
        page = req.store.reads.search_jobs(match, before=before, limit=PAGE_SIZE)
        listed, next_before, searched = list(page.jobs), page.next_before, (page.before, page.searched_to)
    rows = [[link(f"/jobs/{j.id}", j.id), j.project or "''", j.queue, clipped(j.task, 80), state_badge(j.state),
             f"{j.attempts}/{j.max_attempts}", j.host, j.required_model, when(j.created_at, req.now),
             when(j.finished_at, req.now)] for j in listed]
    body = join(_search_form(req, match), _bulk_links(req, match),
                table(["id", "project", "queue", "task", "state", "attempts", "host", "model", "created", "finished"],
                      rows, empty="no job matches"),
                _pager(req, next_before, searched))
    data = {"jobs": [j.to_dict() for j in listed], "next_before": next_before,
            "filter": match.params(), "searched_ids": list(searched) if searched else None}
    return View("Jobs", data, body, active="/jobs")


def job_detail(req: Request) -> View:
    job = req.store.reads.find_job(req.path_id())
    reveal = req.query.get("reveal") == "secrets"
    events = req.store.reads.events(job.id)
    reasons = diagnosis.why_not_running(job, diagnosis.gather(req.store, job, req.now), req.now)
    body = join(
        _actions(req, job),
        tag("h2", "Why isn't it running?" if job.state == jobs.QUEUED else "State"),
        Markup("<ul class=\"why\">" + "".join(f"<li>{esc(reason.text)}</li>" for reason in reasons) + "</ul>"),
        definitions([("state", state_badge(job.state)), ("project", job.project or "''"), ("queue", job.queue),
                     ("task", clipped(job.task, 200)), ("attempts", f"{job.attempts} of {job.max_attempts}"),
                     ("watchdog retries", job.watchdog_retries), ("priority", job.priority),
                     ("concurrency key", job.concurrency_key),
                     ("run next", "yes" if job.run_next else "no"), ("holder", job.claimed_by),
                     ("fencing token", job.lease_token), ("host", _host_link(job.host)),
                     ("model", job.required_model), ("VRAM (MiB)", job.vram_mb),
                     ("run", link(f"/runs/{job.run_id}", f"run {job.run_id} node {job.node_id}")
                      if job.run_id is not None else None),
                     ("schedule", _fired(job, req.now)),
                     ("created", when(job.created_at, req.now)), ("due", when(job.run_at, req.now)),
                     ("started", when(job.started_at, req.now)), ("finished", when(job.finished_at, req.now)),
                     ("lease until", when(job.lease_expires_at, req.now)),
                     ("progress", _progress(job)), ("unreadable", job.unreadable)]),
        tag("h2", "Args"),
        tag("pre", clipped(pretty(job.args if reveal else redacted(job.args)))),
        Markup("") if reveal else link(url(f"/jobs/{job.id}", reveal="secrets"), "show redacted values",
                                       class_="muted"),
        tag("h2", "Result"), tag("pre", clipped(pretty(job.result))),
        _error_block(job),
        tag("h2", "Timeline"), _timeline(job, events),
        _events_table(events, req.now),
        _telemetry(req, job))
    data = {"job": _job_data(job, reveal), "events": [event.to_dict() for event in events],
            "why": [{"code": reason.code, "text": reason.text} for reason in reasons],
            "actions": [name for name in available_actions(job, req.read_only)]}
    return View(f"Job {job.id}", data, body, active="/jobs")


def _fired(job: Job, now: float) -> Markup | None:
    """A scheduled job's schedule (a link to its project's schedules), the slot it fired
    for and why; None for any other job."""
    if job.schedule is None:
        return None
    where = link(url("/schedules", project=job.project), clipped(job.schedule, 200))
    return join(where, " · slot ", when(job.schedule_slot, now), " · ", str(job.fire_reason or "why unknown"))


def available_actions(job: Job, read_only: bool) -> list[str]:
    """The actions a job's state allows (none in read-only mode).

    >>> from types import SimpleNamespace as J
    >>> available_actions(J(state="failed", run_id=None), False), available_actions(J(state="failed", run_id=3), False)
    (['retry'], [])
    >>> available_actions(J(state="queued", run_id=None), False), available_actions(J(state="queued", run_id=None), True)
    (['cancel', 'run-next'], [])
    """
    if read_only:
        return []
    return [name for name, (_, _, states) in ACTIONS.items()
            if job.state in states and not (name == "retry" and job.run_id is not None)]


def action_confirm(req: Request) -> View:
    job, action = _job_action(req)
    label, what, _ = ACTIONS[action]
    body = join(tag("p", f"{label} job {job.id} ({job.task}, {job.state}): {what}?"),
                post_form(f"/jobs/{job.id}/{action}", f"{label} job {job.id}", req.csrf, class_="confirm"),
                link(f"/jobs/{job.id}", "Back to the job"))
    return View(f"{label} job {job.id}?", {"job": job.id, "action": action, "state": job.state}, body, active="/jobs")


def action_apply(req: Request) -> Redirect:
    job, action = _job_action(req)
    if action == "retry":
        req.store.retry(job.id, job.project)
        note = f"job {job.id} queued again"
    elif action == "cancel":
        done = req.store.cancel(job.id, job.project, reason="cancelled from the panel")
        note = f"job {job.id} cancelled" if done.state == jobs.CANCELLED else \
            f"job {job.id}: its worker was asked to stop it"
    else:
        req.store.prioritize(job.id, job.project)
        note = f"job {job.id} runs next"
    return Redirect(f"/jobs/{job.id}", note, {"job": job.id, "action": action})


def bulk_confirm(req: Request) -> View:
    action, match = _bulk_request(req)
    found = req.store.reads.jobs_in_state(_projects(req, match), match, BULK_CAP + 1)
    count = f"{BULK_CAP:,}+ (at most {BULK_CAP:,} are changed per request)" if len(found) > BULK_CAP else f"{len(found):,}"
    label = ACTIONS[action][0]
    fields = {key: value for key, value in match.params().items() if value is not None}
    body = join(tag("p", f"{label} all {count} {match.state} job(s) matching this filter?"),
                definitions([(key, value) for key, value in fields.items()]),
                post_form("/jobs/bulk", f"{label} {min(len(found), BULK_CAP):,} job(s)", req.csrf,
                          {**fields, "action": action}, class_="confirm") if found else tag("p", "nothing to do"),
                link(url("/jobs", **fields), "Back to the jobs"))
    return View(f"{label} matching jobs?", {"action": action, "matching": len(found), "cap": BULK_CAP,
                                            "capped": len(found) > BULK_CAP}, body, active="/jobs")


def bulk_apply(req: Request) -> Redirect:
    action, match = _bulk_request(req, source="form")
    found = req.store.reads.jobs_in_state(_projects(req, match), match, BULK_CAP)
    done = refused = 0
    for project, job_id in found:
        try:
            if action == "retry":
                req.store.retry(job_id, project)
            else:
                req.store.cancel(job_id, project, reason="cancelled from the panel (bulk)")
            done += 1
        except (Conflict, NotFound):  # it moved on since it was selected: counted, and the rest go on
            refused += 1
    fields = {key: value for key, value in match.params().items() if value is not None and key != "state"}
    note = f"{ACTIONS[action][0].lower()}: {done} job(s) done" + (f", {refused} had moved on" if refused else "")
    return Redirect(url("/jobs", **fields), note, {"done": done, "refused": refused})


def redacted(value: Any) -> Any:
    """``value`` with the values of secret-looking keys replaced, at any depth.

    >>> redacted({"api_key": "k", "n": [{"Password": 1}], "keep": "x"})
    {'api_key': '[redacted]', 'n': [{'Password': '[redacted]'}], 'keep': 'x'}
    """
    if isinstance(value, dict):
        return {key: REDACTED if SECRET_KEY.search(str(key)) else redacted(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [redacted(inner) for inner in value]
    return value


def _job_data(job: Job, reveal: bool) -> dict[str, Any]:
    data = job.to_dict()
    if not reveal:
        data["args"] = redacted(data["args"])
    return data


def _job_action(req: Request) -> tuple[Job, str]:
    action = req.params["action"]
    if action not in ACTIONS:
        raise HttpError(404, f"no such action: {action[:40]} (one of {', '.join(ACTIONS)})")
    job = req.store.reads.find_job(req.path_id())
    if action not in available_actions(job, req.read_only):
        raise HttpError(409, f"job {job.id} is {job.state}: {ACTIONS[action][0].lower()} does not apply")
    return job, action


def _bulk_request(req: Request, source: str = "query") -> tuple[str, JobFilter]:
    action = req.choice("action", tuple(BULK_ACTIONS), source=source)
    if action is None:
        raise HttpError(400, f"a bulk action needs action= one of {', '.join(BULK_ACTIONS)}")
    view = Request(req.method, req.path, req.form if source == "form" else req.query, req.form, req.store, req.now,
                   req.csrf, req.read_only)
    match = job_filter(view)
    if match.state not in BULK_ACTIONS[action]:
        raise HttpError(400, f"{action} applies to jobs in state {' or '.join(BULK_ACTIONS[action])}: "
                             f"filter by one of them first")
    return action, match


def _projects(req: Request, match: JobFilter) -> list[str]:
    if match.project is not None:
        return [match.project]
    return [project.name for project in snapshot(req.store).projects()]


def _maybe(req: Request, job_id: int) -> Job | None:
    try:
        return req.store.reads.find_job(job_id)
    except NotFound:
        return None


def _needle(req: Request) -> str | None:
    needle = req.text("args")
    if needle is not None and len(needle) > 200:
        raise HttpError(400, "args: search for at most 200 characters")
    return needle


def _search_form(req: Request, match: JobFilter) -> Markup:
    states = [("", "any state"), *[(state, state) for state in jobs.STATES]]
    return Markup('<form method="get" action="/jobs" class="search" role="search">'
                  + text_input("id", "id", req.text("id"), size=8)
                  + text_input("project", "project", match.project, size=10)
                  + text_input("task", "task", match.task)
                  + text_input("queue", "queue", match.queue, size=10)
                  + select("state", "state", states, match.state or "")
                  + text_input("host", "host", match.host, size=10)
                  + text_input("model", "model", match.model, size=10)
                  + text_input("args", "args contain", match.needle)
                  + '<button type="submit">Search</button></form>')


def _bulk_links(req: Request, match: JobFilter) -> Markup:
    if req.read_only or match.state is None:
        return Markup("")
    fields = {key: value for key, value in match.params().items() if value is not None}
    offered = [link(url("/jobs/bulk", action=action, **fields), f"{ACTIONS[action][0]} all matching…", class_="button")
               for action, states in BULK_ACTIONS.items() if match.state in states]
    return tag("p", join(*offered), class_="bulk") if offered else Markup("")


def _pager(req: Request, next_before: int | None, searched: tuple[int, int] | None) -> Markup:
    parts = []
    if searched is not None:
        top, bottom = searched
        parts.append(tag("span", f"searched ids {bottom:,} to {max(top - 1, bottom):,}", class_="muted"))
    if next_before is not None:
        query = {key: value for key, value in req.query.items() if key not in ("before", "note")}
        parts.append(link(url("/jobs", **query, before=next_before), "older →", rel="next"))
    return tag("p", join(*[item for part in parts for item in (part, " ")]), class_="pager")


def _actions(req: Request, job: Job) -> Markup:
    names = available_actions(job, req.read_only)
    if not names:
        return Markup("")
    return tag("p", join(*[link(f"/jobs/{job.id}/{name}", ACTIONS[name][0] + "…", class_="button")
                           for name in names]), class_="actions")


def _host_link(host: str | None) -> Markup:
    return link(url("/deck", host=host), host) if host else esc(None)


def _progress(job: Job) -> str | None:
    if job.progress is None:
        return None
    return f"{job.progress * 100:.0f}%" + (f" {job.progress_message}" if job.progress_message else "") \
        if isinstance(job.progress, (int, float)) else str(job.progress)


def _error_block(job: Job) -> Markup:
    if not job.error and not job.traceback:
        return Markup("")
    return join(tag("h2", "Error"), tag("pre", clipped(job.error or ""), class_="error"),
                tag("details", join(tag("summary", "traceback"), tag("pre", clipped(job.traceback or "", 20000))))
                if job.traceback else "")


def _events_table(events: list[Any], now: float) -> Markup:
    rows = [[when(event.at, now), event.kind, clipped(jobs.encode_json(event.detail), 400)] for event in events]
    return table(["at", "event", "detail"], rows, empty="no events recorded")


def _timeline(job: Job, events: list[Any]) -> Markup:
    times = [event.at for event in events if isinstance(event.at, (int, float))]
    times += [t for t in (job.created_at, job.finished_at) if isinstance(t, (int, float))]
    if not times:
        return Markup("")
    start, end = min(times), max(times)
    if end - start < 1:
        end = start + 1
    ticks = [(event.at, f"{event.kind} {jobs.encode_json(event.detail)[:200]}") for event in events
             if isinstance(event.at, (int, float))]
    return Markup(svg.time_chart([], start, end, gap=end - start, high=1.0, width=600, height=24, ticks=ticks))


def _telemetry(req: Request, job: Job) -> Markup:
    if not job.host or not isinstance(job.started_at, (int, float)):
        return Markup("")
    start = job.started_at - AROUND
    end = (job.finished_at if isinstance(job.finished_at, (int, float)) else req.now) + AROUND
    samples = req.store.host_samples(job.host, DETAIL, since=start, until=end)
    if not samples:
        return tag("p", f"no telemetry of host {job.host} is kept around this run", class_="muted")
    cpu = svg.Series("cpu busy", [(s.at, s.readings.get("cpu.busy")) for s in samples], css="line cpu", unit="%")
    gpus = sorted({name.split(".")[1] for s in samples for name in s.readings
                   if name.startswith("gpu.") and name.endswith(".util")})
    series = [cpu] + [svg.Series(f"gpu {index} util", [(s.at, s.readings.get(f"gpu.{index}.util")) for s in samples],
                                 css="line gpu", unit="%") for index in gpus[:4]]
    ticks = [(t, label) for t, label in ((job.started_at, "started"), (job.finished_at, "finished"))
             if isinstance(t, (int, float))]
    return join(tag("h2", f"Host {job.host} around the run"),
                Markup(svg.time_chart(series, start, end, gap=30.0, high=100.0, ticks=ticks)))
