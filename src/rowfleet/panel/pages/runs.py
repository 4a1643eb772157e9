"""Workflow runs: the list (``/runs``, by project and state, newest first, paged by id) and
a run's detail (``/runs/<id>``): its DAG laid out on the server (``panel.dag_layout``),
nodes coloured by state and linked to their jobs, at most ``MAX_NODES`` drawn with a focus
on one node and its neighbours (``?focus=NODE&hops=K``) for a larger run, map nodes as one
node with their item count; an answer form for each node awaiting input; cancel and
restart where the run's state allows them, each confirmed on a page of its own.

An input node with a spec (``rowfleet.inputs``) is answered with its widget's form: a text or
number field, Yes and No buttons, radio buttons or checkboxes (an option is posted as its index
in the list the page showed, which every reader resolves alike), a path field; one without
is answered with JSON or text. Either way the answer goes to ``Store.submit_input``, whose
check refuses a value that does not fit (a 400 with its one line) and stores nothing.
"""

from __future__ import annotations

import json
from typing import Any

from rowfleet import dag, inputs, names
from rowfleet.panel import dag_layout
from rowfleet.panel.app import HttpError, Redirect, Request, View
from rowfleet.panel.html import (Markup, attrs, clipped, definitions, esc, hidden_fields, join, link, post_form, pretty,
                                 select, state_badge, table, tag, text_input, url, when)

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
        node = next((node for node in run.nodes if node.id == node_id), None)
        if node is None:
            raise HttpError(400, "answer: name one of the run's nodes (node=)")
        value = _answer(req) if node.spec is None else _widget_answer(req, node)
        req.store.submit_input(run.id, node_id, value, run.project, by="panel")
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


def _widget_answer(req: Request, node: Any) -> Any:
    """The value a widget's form gives (the store then checks it): a choose widget's options
    by the indexes its boxes post, any other widget's field read as ``rowfleet submit``
    reads ``--value``."""
    if node.spec.widget not in inputs.CHOOSE:
        return inputs.read_text(node.spec, req.form.get("value", ""), node.options)
    options = node.options or []
    if node.spec.widget == inputs.CHOOSE_MANY:
        return [option for index, option in enumerate(options) if f"choice-{index}" in req.form]
    index = req.number("choice", most=max(len(options) - 1, 0), source="form")
    return None if index is None or not options else options[index]  # None: nothing chosen, which is refused


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
    prompt = tag("p", node.prompt or f"node {node.id} awaits an answer", class_="prompt")
    if node.spec is not None:
        prompt = join(prompt, tag("p", f"{node.spec.widget}: {inputs.expectation(node.spec, node.options)}",
                                  class_="muted"))
    if req.read_only:
        return join(tag("h2", f"Input: {node.id}"), prompt)
    if node.spec is not None:
        return join(tag("h2", f"Input: {node.id}"), prompt, _widget_form(req, run, node))
    extra = Markup(f'<label>answer <textarea name="value" rows="3" cols="40" maxlength="{ANSWER_MOST}" required>'
                   f'</textarea></label>') + select("as", "as", [("json", "JSON"), ("text", "text")], "json")
    return join(tag("h2", f"Input: {node.id}"), prompt,
                post_form(f"/runs/{run.id}/answer", "Answer", req.csrf, {"node": node.id}, class_="answer",
                          extra=extra))


def _widget_form(req: Request, run: Any, node: Any) -> Markup:
    """The form of an input node's widget, POSTed with the CSRF token to the answer action;
    every label and value escaped. A confirm is answered by its Yes or No button alone."""
    spec, action = node.spec, f"/runs/{run.id}/answer"
    hidden = hidden_fields({"node": node.id, "csrf": req.csrf})
    if spec.widget == inputs.CONFIRM:
        fields, submit = Markup(""), Markup(" ".join(
            f'<button{attrs(type="submit", name="value", value=value)}>{esc(text)}</button>'
            for value, text in (("yes", "Yes"), ("no", "No"))))
    else:
        fields, submit = _widget_fields(spec, node.options), Markup('<button type="submit">Answer</button>')
    return Markup(f'<form{attrs(method="post", action=action, class_="answer", aria_label=f"answer {node.id}")}>'
                  f"{hidden}{fields}{submit}</form>")


def _widget_fields(spec: inputs.InputSpec, options: list[Any] | None) -> Markup:
    default = None if spec.default is None else inputs.label(spec.default)
    if spec.widget == inputs.NUMBER:
        field = attrs(type="number", name="value", step="any", min=spec.minimum, max=spec.maximum, value=default,
                      required=True)
        return Markup(f"<label>answer <input{field}></label>")
    if spec.widget in (inputs.TEXT, inputs.FILE_PATH):
        path = spec.widget == inputs.FILE_PATH
        field = attrs(type="text", name="value", value=default, size=40, maxlength=spec.max_length,
                      placeholder="/path/to/file or relative/path" if path else None, required=path)
        return Markup(f"<label>{'path' if path else 'answer'} <input{field}></label>")
    if options is None:
        return tag("p", "its options cannot be resolved", class_="error")
    many = spec.widget == inputs.CHOOSE_MANY
    chosen = spec.default if many and isinstance(spec.default, list) else [spec.default]
    boxes = "".join(
        f'<label class="choice"><input{_choice_attrs(many, index, _is_in(option, chosen))}>'
        f"{esc(inputs.label(option))}</label>" for index, option in enumerate(options))
    return Markup(f'<fieldset class="choices"><legend>{"choose any" if many else "choose one"}</legend>'
                  f"{boxes}</fieldset>")


def _is_in(option: Any, chosen: list[Any]) -> bool:
    return any(names.same_json(option, value) for value in chosen if value is not None)


def _choice_attrs(many: bool, index: int, checked: bool) -> str:
    """A radio button (``choice=INDEX``) or a checkbox (``choice-INDEX``), posting the
    option's index in the list the page showed."""
    return attrs(type="checkbox" if many else "radio", name=f"choice-{index}" if many else "choice", value=index,
                 checked=checked, required=not many)


def _node_link(node: Any) -> str | None:
    return f"/jobs/{node.jobs[0]}" if node.jobs else None

