"""Models (``/models``): per project and model, where it is warm (the live GPU workers
holding it, by host and GPU), its jobs queued, running and unplaceable (with the reasons),
its measured load, and the last hour's warm-hit rate and reloads, rendering the models'
read model (``rowfleet.views.snapshot.models``, as ``rowfleet models`` does). Every project by
default; ``?project=P`` one (``?project=`` the default project).

Also owns the project filter the Schedules page shares (``chosen_project``,
``known_projects``, ``project_links``). Reads through the read model; imports no driver,
no SQL, no command line and no other page.
"""

from __future__ import annotations

from typing import Any, Iterable
from urllib.parse import urlencode

from rowfleet import names
from rowfleet.errors import ConfigError
from rowfleet.panel.app import HttpError, Request, View
from rowfleet.panel.html import Markup, clipped, join, link, table, tag, when
from rowfleet.views.snapshot import Holder, ModelView, models, snapshot, unplaceable_text

NAME_MOST = 120  # characters of a name shown in a cell
UNREADABLE_MOST = 300  # characters of what is unreadable in a model's figures


def chosen_project(req: Request) -> str | None:
    """The project ``?project=`` names: None when the address has none (every project),
    ``""`` for the default project; 400 for a value that is no project name."""
    if "project" not in req.query:
        return None
    value = req.query["project"]
    if value == "":
        return ""
    try:
        return names.check_name("project", value)
    except ConfigError as exc:
        raise HttpError(400, str(exc)) from None


def known_projects(req: Request) -> list[str]:
    """Every project the fleet's snapshot knows (with jobs, workers or services), and the
    panel's own, by name. Jobs are counted up to one: a project is known by having any,
    and counting a million jobs to learn the names would cost most of the page."""
    known = snapshot(req.store, cap=1).projects()
    return sorted({project.name for project in known} | {req.store.config.project})


def project_links(path: str, projects: Iterable[str], chosen: str | None) -> Markup:
    """Links to ``path`` for every project and for all of them, the chosen one marked.

    >>> str(project_links("/models", ["", "beta"], "beta")).count("aria-current")
    1
    """
    items = [link(path, "every project", aria_current="page" if chosen is None else None)]
    items += [link(project_url(path, name), project_label(name), aria_current="page" if name == chosen else None)
              for name in projects]
    return tag("p", join(*[join(" · " if n else "", item) for n, item in enumerate(items)]), class_="projects")


def project_url(path: str, project: str, **query: Any) -> str:
    """``path`` for ``project``, the default project (``""``) included.

    >>> project_url("/models", ""), project_url("/jobs", "a b", state="queued")
    ('/models?project=', '/jobs?project=a+b&state=queued')
    """
    return f"{path}?{urlencode({'project': project, **query})}"


def project_label(project: str) -> str:
    """A project as a page names it.

    >>> project_label(""), project_label("beta")
    ('default project', "project 'beta'")
    """
    return f"project {clipped(project, NAME_MOST)!r}" if project else "default project"


def model_list(req: Request) -> View:
    """Every model of every project (or ``?project=``'s)."""
    chosen = chosen_project(req)
    known = known_projects(req)
    sections, data = [project_links("/models", known, chosen)], []
    for project in known if chosen is None else [chosen]:
        view = models(req.store, project)
        rows = [_row(req, project, model) for model in view.models]
        sections.append(join(
            tag("h2", project_label(project)),
            table(["model", "warm on", "queued", "running", "unplaceable", "load", "footprint", "mean run",
                   "warm hits (1 h)", "reloads (1 h)"], rows, empty="no model jobs or GPU workers",
                  class_="grid models"),
            tag("p", f"only the first {len(view.demand):,} groups of model jobs were read", class_="muted")
            if view.capped else ""))
        data.append({"project": project, **view.to_dict()})
    return View("Models", {"at": req.now, "projects": data}, join(*sections), active="/models")


def _row(req: Request, project: str, model: ModelView) -> list[Any]:
    jobs = lambda state, n: link(project_url("/jobs", project, state=state, model=model.model), f"{n:,}") if n else "0"
    return [_name(model), _holders(model.holders, req.now), jobs("queued", model.queued),
            jobs("running", model.running), _reasons(model), _seconds(model.load_seconds),
            "-" if model.footprint_mb is None else f"{model.footprint_mb:,} MiB", _seconds(model.run_seconds),
            _hits(model), model.reloads]


def _name(model: ModelView) -> Markup:
    """The model's name, and what plain SQL made unreadable in its figures (shown unknown)."""
    if not model.unreadable:
        return join(clipped(model.model, NAME_MOST))
    return join(clipped(model.model, NAME_MOST),
                tag("div", f"unreadable: {clipped(model.unreadable, UNREADABLE_MOST)}", class_="bad"))


def _holders(holders: Iterable[Holder], now: float) -> Markup:
    items = [tag("li", join(clipped(h.host, NAME_MOST), "" if h.gpu_index is None else f" gpu{h.gpu_index}", " ",
                            tag("span", clipped(h.worker_id, NAME_MOST), class_="muted"), " ",
                            tag("span", "loading", class_="badge loading") if h.loading else
                            join("since ", when(h.since, now))))
             for h in holders]
    return tag("ul", join(*items), class_="holders") if items else Markup("-")


def _reasons(model: ModelView) -> Markup:
    items = [tag("li", join(tag("span", f"{n:,}", class_="bad"), " ", unplaceable_text(clipped(reason, NAME_MOST))))
             for reason, n in model.unplaceable]
    return tag("ul", join(*items), class_="reasons") if items else Markup("-")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _hits(model: ModelView) -> str:
    rate = model.warm_hit_rate
    return "-" if rate is None else f"{rate:.0%} ({model.warm_claims}/{model.claims})"
