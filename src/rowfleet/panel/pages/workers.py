"""Workers (``/workers``): per host and queue, what its switch wants against what its
workers do, their current job and model, when each was last seen; the switches ON,
OFF-drain and OFF-hard per (host, queue) and per box (every queue of the host), each with
a reason; and the log of who switched what when.

A switch from the panel is the same ``worker_controls`` row the command line writes
(``Store.set_switch``, logged in the same transaction, its project, host and queue checked
there by the command line's rule), recorded as by ``panel`` or the name the operator gives.
The switch's form is built here (``switch_form``) for every page that offers it (the
Flight Deck's cards too), and answered here (``switch``): after it, the operator lands on
the page the form names (``back``, a path of the panel's own), else on this one.
"""

from __future__ import annotations

from typing import Any

from rowfleet import control
from rowfleet.control import Switch
from rowfleet.panel.app import HttpError, Redirect, Request, View
from rowfleet.panel.html import (Markup, attrs, esc, hidden_fields, join, link, own_path, state_badge, table, tag,
                                 url, when)
from rowfleet.views.snapshot import snapshot

LOG_SHOWN = 50
SWITCH_PATH = "/workers/switch"
CHOICES = {"on": (control.ON, control.DRAIN), "off-drain": (control.OFF, control.DRAIN),
           "off-hard": (control.OFF, control.HARD)}
BUTTONS = (("on", "ON"), ("off-drain", "OFF drain"), ("off-hard", "OFF hard"))  # CHOICES' keys, as pressed


def worker_list(req: Request) -> View:
    fleet = snapshot(req.store)
    host_filter = req.word("host")
    workers = [w for w in fleet.workers if host_filter is None or w.host == host_filter]
    boxes: dict[tuple[str, str], list[Any]] = {}
    for worker in workers:
        boxes.setdefault((worker.project, worker.host), []).append(worker)
    sections = []
    for (project, host), crew in sorted(boxes.items()):
        queues = sorted({queue for w in crew for queue in (w.queues or (w.queue,))})
        rows = [[w.queue if not w.queues else ", ".join(w.queues), w.pid, switch_state(w.switch), state_badge(w.actual),
                 link(f"/jobs/{w.current_job}", w.current_job) if w.current_job else "-",
                 w.gpu.warm_model if w.gpu else None, when(w.last_seen, fleet.at), w.exit_code] for w in crew]
        switches = [switch_form(req, project, host, queue, f"queue {queue}") for queue in queues] + \
            [switch_form(req, project, host, control.ANY, "the whole box")]
        sections.append(join(
            tag("h2", join(link(url("/deck", host=host), host), f" · project {project!r}" if project else "")),
            table(["queue", "pid", "wanted", "doing", "job", "model", "last seen", "exit"], rows),
            tag("div", join(*switches), class_="switches")))
    if not sections:
        sections.append(tag("p", "No worker has been seen in the last 10 minutes.", class_="empty"))
    log = req.store.reads.switch_log(host=host_filter, limit=LOG_SHOWN)
    log_rows = [[when(s.changed_at, fleet.at), s.project or "''", s.host, s.queue, _switch_text(s), s.reason or "-",
                 s.changed_by or "-"] for s in log]
    standing = [[s.project or "''", s.host, s.queue, _switch_text(s), s.reason or "-", s.changed_by or "-",
                 when(s.changed_at, fleet.at)] for s in fleet.switches]
    body = join(*sections, tag("h2", "Switches in the database"),
                table(["project", "host", "queue", "wanted", "reason", "by", "at"], standing,
                      empty="no switch: every worker serves"),
                tag("h2", "Who switched what when"),
                table(["at", "project", "host", "queue", "switch", "reason", "by"], log_rows,
                      empty="no switch written through rowfleet yet"))
    data = {"workers": [w.to_dict() for w in workers], "switches": [s.to_dict() for s in fleet.switches],
            "log": [s.to_dict() for s in log]}
    return View("Workers", data, body, active="/workers")


def switch(req: Request) -> Redirect:
    chosen = req.choice("set", tuple(CHOICES), source="form")
    if chosen is None:
        raise HttpError(400, f"set= one of {', '.join(CHOICES)}")
    desired, policy = CHOICES[chosen]
    # Checked where every switch is written (Store.set_switch, by control.check_scope), as
    # the command line's are: a refusal is a 400 and writes nothing.
    project, host, queue = (req.form.get(field, "") for field in ("project", "host", "queue"))
    reason = " ".join((req.form.get("reason") or "").split())
    by = " ".join((req.form.get("by") or "").split())[:80] or "panel"
    written = req.store.set_switch(project, host, queue, desired, policy, changed_by=by, reason=reason)
    scope = "every queue" if queue == control.ANY else f"queue {queue}"
    # Back to the page the form was on, when it names one of the panel's own paths: never
    # another site, whatever a forged form says.
    back = own_path(req.form.get("back")) or url("/workers")
    return Redirect(back, f"{scope} of {host}: {_switch_text(written)}", written.to_dict())


def switch_state(held: Switch | None) -> Markup:
    """What the switch in force (``held``, None: none) wants, in words and its colour."""
    if held is None or held.desired == control.ON:
        return tag("span", "on", class_="ok switch-state")
    return tag("span", _switch_text(held), class_="warn switch-state", title=held.reason or None)


def choice_of(held: Switch | None) -> str | None:
    """The key of ``CHOICES`` that the switch in force (``held``, None: none) stands for;
    None for a policy no button writes (plain SQL's).

    >>> choice_of(None), choice_of(Switch("", "box", "gpu", control.OFF, control.DRAIN))
    ('on', 'off-drain')
    """
    if held is None or held.desired == control.ON:
        return "on"
    chosen = f"off-{held.policy}"
    return chosen if chosen in CHOICES else None


def switch_form(req: Request, project: str, host: str, queue: str, label: str, *, state: Markup = Markup(""),
                current: str | None = None, back: str | None = None) -> Markup:
    """The form that switches the workers of (project, host, queue) ON, OFF drain or OFF
    hard, with a reason, POSTed with the CSRF token to ``switch``: ``state`` is shown after
    its ``label``, the button of ``current`` (a key of ``CHOICES``) is marked as the one in
    force, and ``back`` is the page to land on after. Nothing when the panel is read-only:
    it offers no change it would refuse."""
    if req.read_only:
        return Markup("")
    hidden = hidden_fields({"project": project, "host": host, "queue": queue, "csrf": req.csrf, "back": back})
    buttons = Markup(" ".join(
        f'<button{attrs(type="submit", name="set", value=value, class_=f"switch-{value}", aria_current="true" if value == current else None)}>'
        f'{esc(text)}</button>' for value, text in BUTTONS))  # not ``tag``, whose first argument is called name
    reason = Markup('<label>reason <input type="text" name="reason" maxlength="500" size="14"></label>')
    parts = [tag("span", label, class_="scope"), state, reason, buttons]  # apart, as text too (unstyled, read aloud)
    return tag("form", join(hidden, Markup(" ".join(part for part in parts if part))), method="post",
               class_="switch", action=SWITCH_PATH, aria_label=f"switch {label} of {host}")


def _switch_text(switch: Any) -> str:
    return "on" if switch.desired == control.ON else f"off ({switch.policy})"
