"""Limits (``/limits``): each queue's flow limits (``rowfleet.flow``) with their use now,
what holds the queue at this moment, and a form per limit to change it, plus one to set a
new one (a queue need not have jobs yet).

A change from the panel is the same ``flow_limits`` row ``rowfleet limit`` writes
(``Store.set_limit``, its rules checked there), recorded as by ``panel`` or the name the
operator gives; the server's CSRF, token and read-only rules hold as for the switches.
A field left empty keeps the rule it names; ``clear`` drops every rule of the row.
"""

from __future__ import annotations

from rowfleet import flow, names
from rowfleet.errors import ConfigError
from rowfleet.panel.app import HttpError, Redirect, Request, View
from rowfleet.panel.html import Markup, attrs, esc, hidden_fields, join, select, table, tag, text_input, url, when

FAIR_CHOICES = (("keep", "fair: keep"), ("on", "fair: on"), ("off", "fair: off"))
LOST_CHOICES = (("keep", "lost jobs: keep"), ("on", "lost jobs: first"), ("off", "lost jobs: in place"))


def limit_list(req: Request) -> View:
    found = req.store.limits()
    rows = [[_scope(use.limit), use.limit.queue, ", ".join(use.limit.rules()), use.running, use.keys_at_limit,
             "; ".join(hold.text for hold in use.holds) or "-", use.limit.updated_by or "-",
             when(use.limit.updated_at, req.now)] for use in found]
    forms = [] if req.read_only else [_limit_form(req, use.limit.project, use.limit.queue,
                                                  f"{_scope(use.limit)} · queue {use.limit.queue}") for use in found]
    new = [] if req.read_only else [tag("h2", "Set a limit"), _limit_form(req, None, None, "new limit")]
    body = join(table(["project", "queue", "limits", "running", "keys at limit", "held now", "by", "changed"], rows,
                      empty="no limits: every queue runs as fast as its workers go"),
                tag("div", join(*forms), class_="switches"), *new)
    return View("Limits", {"limits": [use.to_dict() for use in found]}, body, active="/limits")


def set_limit(req: Request) -> Redirect:
    form = req.form
    queue = req.word("queue", source="form")
    if queue is None:
        raise HttpError(400, "queue= the queue to limit")
    project = flow.ANY if form.get("all_projects") == "on" or form.get("project") == flow.ANY else \
        (form.get("project") or "")
    try:
        rules = {"concurrency": _count(form.get("concurrency"), "concurrency"),
                 "per_key": _count(form.get("per_key"), "per_key"),
                 "rate": flow.Rate.of("rate", (form.get("rate") or "").strip()),
                 "key_rate": flow.Rate.of("per_key_rate", (form.get("per_key_rate") or "").strip()),
                 "fair": _choice(form.get("fair")), "lost_first": _choice(form.get("lost_first"))}
        by = " ".join((form.get("by") or "").split())[:80] or "panel"
        limit = req.store.set_limit(project, queue, by, clear=form.get("clear") == "clear", **rules)
    except ConfigError as exc:
        raise HttpError(400, str(exc)) from None
    said = ", ".join(limit.rules()) if limit is not None else "no limits"
    scope = flow.Limit(project, queue).scope()
    return Redirect(url("/limits"), f"{scope}: {said}", None if limit is None else limit.to_dict())


def _choice(value: str | None) -> bool | None:
    """A select of on / off / keep (None: the rule keeps its value)."""
    return {"on": True, "off": False}.get(value or "keep")


def _count(text: str | None, what: str) -> int | None:
    if not text:
        return None
    return names.RULES["count"].parse(what, text.strip())


def _scope(limit: flow.Limit) -> str:
    return "every project" if limit.project == flow.ANY else (limit.project or "''")


def _limit_form(req: Request, project: str | None, queue: str | None, label: str) -> Markup:
    fixed = hidden_fields({"project": project, "queue": queue, "csrf": req.csrf})  # a new limit's: the csrf alone
    where = Markup("") if queue is not None else join(
        text_input("queue", "queue", None, size=10), text_input("project", "project", None, size=8),
        Markup('<label><input type="checkbox" name="all_projects" value="on"> every project</label>'))
    fields = join(where, text_input("concurrency", "running at most", None, size=4, placeholder="N"),
                  text_input("per_key", "per key", None, size=4, placeholder="N"),
                  text_input("rate", "rate", None, size=9, placeholder="N/SECONDS"),
                  text_input("per_key_rate", "per-key rate", None, size=9, placeholder="N/SECONDS"),
                  select("fair", "", FAIR_CHOICES, "keep"), select("lost_first", "", LOST_CHOICES, "keep"))
    clear = "" if queue is None else '<button type="submit" name="clear" value="clear">Clear</button>'
    return Markup(f'<form method="post" action="/limits" class="switch"{attrs(aria_label=f"limit {label}")}>'
                  f'{fixed}'
                  f'<span class="scope">{esc(label)}</span>{fields}'
                  f'<button type="submit" name="set" value="set">Set</button>{clear}</form>')
