"""Schedules (``/schedules``): per schedule of each project (``?project=P`` one), when it
fires next where its declaration is known, the newest slot fired, and the slots fired
lately: when, why (on time, at a scheduler's boot, made up for, or by an operator's
``rowfleet fire``), by which scheduler or operator, and the job each enqueued.

The database keeps only what fired (``Store.schedule_rows``, ``store.reads.fired_slots``); when a
schedule fires next is in its declaration: a schedule file given to ``rowfleet
scheduler``, or an app's ``@rowfleet.periodic``. The command that starts the panel names
the files in ``SCHEDULE_FILES`` (its ``--schedule FILE``, as the scheduler's) and imports
the apps, whose schedules register; declared schedules belong to the panel's own project
(``Config.project``), as a scheduler's do. Without a declaration the page shows the slots
fired and says how to show the next fire.

When a slot is next is ``rowfleet.services.scheduler``'s rule (``next_slot``); reading the files is
``load_schedule_file``. Imports no driver, no SQL, no command line; of the other pages
only the project filter of ``models``.
"""

from __future__ import annotations

from typing import Any, Mapping

from rowfleet.errors import ConfigError
from rowfleet.job import iso
from rowfleet.panel.app import Request, View
from rowfleet.panel.html import Markup, clipped, join, link, table, tag, when
from rowfleet.panel.pages.models import chosen_project, known_projects, project_label, project_links
from rowfleet.schedule import Schedule, load_schedule_file, next_slot, registered_schedules

# The schedule files whose declarations say when each schedule fires next: set by the
# command that starts the panel (--schedule FILE), read at each request.
SCHEDULE_FILES: tuple[str, ...] = ()
RECENT = 5              # slots shown per schedule
SCHEDULES_MOST = 200    # schedules shown per project; the rest are counted
NAME_MOST = 120         # characters of a name shown in a cell
NO_DECLARATION = "known when the panel is started with --schedule FILE (the scheduler's schedule file)"


def declared_schedules() -> tuple[dict[str, Schedule], list[str]]:
    """The schedules whose declarations the panel knows, by name: those of
    ``SCHEDULE_FILES`` (the first file naming one wins), then those registered with
    ``@rowfleet.periodic``; and, per file that could not be read, why (one line)."""
    found: dict[str, Schedule] = {}
    problems = []
    for path in SCHEDULE_FILES:
        try:
            schedules = load_schedule_file(path)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        for schedule in schedules:
            found.setdefault(schedule.name, schedule)
    for schedule in registered_schedules():
        found.setdefault(schedule.name, schedule)
    return found, problems


def next_fire(schedule: Schedule, now: float) -> float | None:
    """When ``schedule`` fires next after ``now`` (epoch seconds); None when it never does
    within the horizon cron looks ahead.

    >>> next_fire(Schedule("tick", "app:tick", every=900), 1000.0)
    1800.0
    """
    try:
        return next_slot([schedule], now)
    except (ValueError, OverflowError, ConfigError):  # cron's and a cadence's "never"
        return None


def timing(schedule: Schedule) -> str:
    """A schedule's cadence in a few words.

    >>> timing(Schedule("t", "app:t", cron="*/15 * * * *", hours=[8, 18], zone="Europe/Berlin"))
    'cron */15 * * * * (Europe/Berlin), hours 8-18'
    >>> timing(Schedule("t", "app:t", every=30))
    'every 30 s'
    """
    text = f"cron {schedule.cron}" if schedule.cron is not None else f"every {schedule.every:g} s"
    if schedule.zone != "UTC":
        text += f" ({schedule.zone})"
    if schedule.hours is not None:
        text += f", hours {schedule.hours[0]}-{schedule.hours[1]}"
    return text


def schedule_list(req: Request) -> View:
    """Every schedule of every project (or ``?project=``'s)."""
    chosen = chosen_project(req)
    known = known_projects(req)
    declared, problems = declared_schedules()
    own = req.store.config.project
    sections: list[Markup] = [project_links("/schedules", known, chosen)]
    sections += [tag("p", problem, class_="error") for problem in problems]
    if not declared:
        sections.append(tag("p", f"Next fires are {NO_DECLARATION}.", class_="muted"))
    data = []
    for project in known if chosen is None else [chosen]:
        stored = req.store.schedule_rows(project)
        last = {row.name: row.last_slot for row in stored}
        unreadable = {row.name: row.unreadable for row in stored if row.unreadable}
        mine = declared if project == own else {}
        listed = sorted(set(last) | set(mine))
        rows = []
        for name in listed[:SCHEDULES_MOST]:
            schedule = mine.get(name)
            recent = req.store.reads.fired_slots(project, name, RECENT) if name in last else []
            upcoming = next_fire(schedule, req.now) if schedule is not None else None
            rows.append(_row(name, schedule, upcoming, last, recent, req.now, unreadable.get(name)))
            data.append({"project": project, "name": name, "declared": schedule is not None,
                         "cadence": None if schedule is None else timing(schedule), "next_fire": iso(upcoming),
                         "fired": name in last, "last_slot": iso(last.get(name)), "unreadable": unreadable.get(name),
                         "recent": [{"slot": iso(row["slot"]), "reason": row["reason"], "job_id": row["job_id"],
                                     "fired_at": iso(row["fired_at"]), "fired_by": row["fired_by"]}
                                    for row in recent]})
        if not rows and chosen is None and project != own:
            continue  # a project without schedules
        sections.append(join(
            tag("h2", project_label(project)),
            table(["schedule", "cadence", "next fire", "last slot", "fired lately"], rows,
                  empty="no schedule has fired yet", class_="grid schedules"),
            tag("p", f"{len(listed) - SCHEDULES_MOST:,} more schedules not shown", class_="muted")
            if len(listed) > SCHEDULES_MOST else ""))
    return View("Schedules", {"at": req.now, "schedule_files": list(SCHEDULE_FILES), "problems": problems,
                              "schedules": data}, join(*sections), active="/schedules")


def _row(name: str, schedule: Schedule | None, upcoming: float | None, last: Mapping[str, float | str | None],
         recent: list[dict[str, Any]], now: float, unreadable: str | None = None) -> list[Any]:
    if schedule is None:
        next_cell: Any = tag("span", "not declared here", class_="muted", title=NO_DECLARATION)
    elif upcoming is None:
        next_cell = tag("span", "never", class_="bad")
    else:
        next_cell = when(upcoming, now)
    if unreadable is not None:  # plain SQL wrote it: shown as stored, and why it does not fire
        last_cell: Any = tag("span", f"{clipped(last[name], NAME_MOST)} (unreadable, so it does not fire: "
                                     f"{clipped(unreadable, 300)})", class_="bad")
    elif name not in last:
        last_cell = tag("span", "never fired", class_="muted")
    elif last[name] is None:
        last_cell = tag("span", "held, none fired yet", class_="muted")
    else:
        last_cell = when(last[name], now)
    slots = [tag("li", join("slot ", when(row["slot"], now), " · ", _reason(row["reason"]),
                            " · fired ", when(row["fired_at"], now), " by ",
                            tag("span", clipped(row["fired_by"], NAME_MOST), class_="muted"), " · ",
                            link(f"/jobs/{row['job_id']}", f"job {row['job_id']}")
                            if isinstance(row["job_id"], int) and not isinstance(row["job_id"], bool) else "no job"))
             for row in recent]
    if slots:
        fired: Any = tag("ul", join(*slots), class_="slots")
    elif last.get(name) is not None:
        fired = tag("span", "older records pruned", class_="muted")
    else:
        fired = "-"
    return [clipped(name, NAME_MOST), "-" if schedule is None else timing(schedule), next_cell, last_cell, fired]


REASONS = {"tick": "on time", "boot": "at boot", "catch_up": "caught up", "manual": "fired by hand"}


def _reason(reason: Any) -> Markup:
    """Why a slot fired, in words, its stored value as the title; a value rowfleet does not
    write (plain SQL's) as stored, a slot recorded before reasons were kept as unknown.

    >>> str(_reason("boot")), str(_reason(None))
    ('<span class="reason" title="boot">at boot</span>', '<span class="muted">why unknown</span>')
    """
    if reason is None:
        return tag("span", "why unknown", class_="muted")
    shown = clipped(reason, NAME_MOST)
    return tag("span", REASONS.get(reason, shown), class_="reason", title=shown)
