"""Workflow runs: the list (``/runs``, by project and state, newest first, paged by id) and
a run's detail (``/runs/<id>``): its DAG laid out on the server (``panel.dag_layout``),
nodes coloured by state and linked to their jobs, at most ``MAX_NODES`` drawn with a focus
on one node and its neighbours (``?focus=NODE&hops=K``) for a larger run, map nodes as one
node with their item count; an answer form for each node awaiting input; cancel and
restart where the run's state allows them, each confirmed on a page of its own.
"""

from __future__ import annotations

import json
from typing import Any

from rowfleet import dag, names
from rowfleet.panel import dag_layout
from rowfleet.panel.app import HttpError, Redirect, Request, View
from rowfleet.panel.html import (Markup, clipped, definitions, join, link, post_form, pretty, select, state_badge,
                                 table, tag, text_input, url, when)

PAGE_SIZE = 50
ANSWER_MOST = 16 * 1024
ACTIONS = {"cancel": ("Cancel", "cancel the run and its queued jobs", (dag.RUNNING, dag.AWAITING_INPUT)),
           "restart": ("Restart", "run it again from where it broke, keeping completed results",
                       (dag.FAILED, dag.CANCELLED))}


def run_list(req: Request) -> View:
    project = req.query.get("project") if "project" in req.query else None
    state = req.choice("state", dag.RUN_STATES)
    runs = req.store.reads.search_runs(project, state, before=req.number("before", least=1), limit=PAGE_SIZE)
    rows = [[link(f"/runs/{run.id}", run.id), run.project or "''", clipped(run.name, 80),
             join(state_badge(run.state), tag("span", " unreadable", class_="bad", title=run.unreadable)
                  if run.unreadable else ""),
             when(run.created_at, req.now), when(run.finished_at, req.now)] for run in runs]
    form = Markup('<form method="get" action="/runs" class="search">'
                  + text_input("project", "project", project, size=10)
                  + select("state", "state", [("", "any state"), *[(s, s) for s in dag.RUN_STATES]], state or "")
                  + '<button type="submit">Filter</button></form>')
    more = link(url("/runs", project=project, state=state, before=runs[-1].id), "older →", rel="next") \
        if len(runs) == PAGE_SIZE else Markup("")
    body = join(form, table(["run", "project", "workflow", "state", "created", "finished"], rows,
                            empty="no run matches"), tag("p", more, class_="pager"))
    return View("Runs", {"runs": [run.to_dict() for run in runs],
                         "next_before": runs[-1].id if len(runs) == PAGE_SIZE else None}, body, active="/runs")


def run_detail(req: Request) -> View:
    run = _run(req)
    focus_node = req.text("focus")
    hops = req.number("hops", least=0, most=20, default=2)
    ids = [node.id for node in run.nodes]
    edges = [(parent, node.id) for node in run.nodes for parent in node.depends_on]
    shown = dag_layout.visible(ids, edges, focus_node=focus_node, hops=hops)
    info = {node.id: node for node in run.nodes}
    drawn = dag_layout.layout(shown.nodes, shown.edges)
    picture = Markup(dag_layout.dag_svg(drawn, info, link=lambda node_id: _node_link(info[node_id])))
    notes = []
    if shown.left_out:
        notes.append(tag("p", f"showing {len(shown.nodes):,} of {shown.total:,} nodes: focus on a node to see "
                              f"its neighbours", class_="muted"))
    focus_form = Markup('<form method="get" class="search">'
                        + text_input("focus", "focus on node", focus_node or "", size=16)
                        + text_input("hops", "± hops", str(hops), size=3)
                        + '<button type="submit">Focus</button></form>') if len(ids) > 1 else Markup("")
    rows = [[link(url(f"/runs/{run.id}", focus=node.id), node.id), node.kind, state_badge(node.state), node.attempts,
             node.items, join(*[link(f"/jobs/{job_id}", job_id) for job_id in node.jobs[:20]]),
             clipped("; ".join(text for text in (node.error, node.unreadable and f"unreadable: {node.unreadable}")
                               if text), 300)] for node in run.nodes[:dag_layout.MAX_NODES * 5]]
    body = join(
        _actions(req, run),
        definitions([("workflow", run.name), ("project", run.project or "''"), ("state", state_badge(run.state)),
                     ("created", when(run.created_at, req.now)), ("finished", when(run.finished_at, req.now)),
                     ("error", run.error), ("unreadable", run.unreadable)]),
        *notes, focus_form, tag("div", picture, class_="dag-wrap scroll"),
        *[_input_form(req, run, node) for node in run.nodes if node.state == dag.AWAITING_INPUT],
        tag("h2", "Nodes"), table(["node", "kind", "state", "attempts", "items", "jobs", "error"], rows),
        tag("h2", "Args"), tag("pre", clipped(pretty(run.args))))
    data = run.to_dict() | {"shown": list(shown.nodes), "left_out": shown.left_out}
    return View(f"Run {run.id}", data, body, active="/runs")


def action_confirm(req: Request) -> View:
    run, action = _run_action(req)
    label, what, _ = ACTIONS.get(action, ("Answer", "", ()))
    if action == "answer":
        raise HttpError(405, "answer a node with the form on the run's page (a POST)")
    body = join(tag("p", f"{label} run {run.id} ({run.name}, {run.state}): {what}?"),
                post_form(f"/runs/{run.id}/{action}", f"{label} run {run.id}", req.csrf, class_="confirm"),
                link(f"/runs/{run.id}", "Back to the run"))
    return View(f"{label} run {run.id}?", {"run": run.id, "action": action}, body, active="/runs")


def action_apply(req: Request) -> Redirect:
    run, action = _run_action(req)
    if action == "cancel":
        req.store.cancel_run(run.id, run.project, reason="cancelled from the panel")
        note = f"run {run.id} cancelled"
    elif action == "restart":
        req.store.restart_run(run.id, run.project)
        note = f"run {run.id} restarted"
    else:
        node_id = req.text("node", source="form")
        if node_id is None or node_id not in {node.id for node in run.nodes}:
            raise HttpError(400, "answer: name one of the run's nodes (node=)")
        req.store.submit_input(run.id, node_id, _answer(req), run.project)
        note = f"run {run.id}: node {node_id} answered"
    return Redirect(f"/runs/{run.id}", note, {"run": run.id, "action": action})


def _answer(req: Request) -> Any:
    text = req.form.get("value", "")
    if len(text) > ANSWER_MOST:
        raise HttpError(413, f"an answer may hold at most {ANSWER_MOST // 1024} KiB")
    if req.form.get("as") == "text":
        return text
    try:
        return names.parse_json("value", text)  # NaN, 1e999, nesting too deep: refused as the CLI refuses them
    except json.JSONDecodeError as exc:
        raise HttpError(400, f"the answer is not JSON ({exc.msg} at character {exc.pos}); "
                             f"choose 'as text' to send it as a string") from None


def _run(req: Request) -> Any:
    return req.store.reads.find_run(req.path_id())


def _run_action(req: Request) -> tuple[Any, str]:
    action = req.params["action"]
    if action not in (*ACTIONS, "answer"):
        raise HttpError(404, f"no such action: {action[:40]}")
    run = _run(req)
    if action in ACTIONS and run.state not in ACTIONS[action][2]:
        raise HttpError(409, f"run {run.id} is {run.state}: {action} does not apply")
    return run, action


def _actions(req: Request, run: Any) -> Markup:
    if req.read_only:
        return Markup("")
    offered = [link(f"/runs/{run.id}/{name}", label + "…", class_="button")
               for name, (label, _, states) in ACTIONS.items() if run.state in states]
    return tag("p", join(*offered), class_="actions") if offered else Markup("")


def _input_form(req: Request, run: Any, node: Any) -> Markup:
    prompt = tag("p", node.prompt or f"node {node.id} awaits an answer")
    if req.read_only:
        return join(tag("h2", f"Input: {node.id}"), prompt)
    extra = Markup(f'<label>answer <textarea name="value" rows="3" cols="40" maxlength="{ANSWER_MOST}" required>'
                   f'</textarea></label>') + select("as", "as", [("json", "JSON"), ("text", "text")], "json")
    return join(tag("h2", f"Input: {node.id}"), prompt,
                post_form(f"/runs/{run.id}/answer", "Answer", req.csrf, {"node": node.id}, class_="answer",
                          extra=extra))


def _node_link(node: Any) -> str | None:
    return f"/jobs/{node.jobs[0]}" if node.jobs else None

