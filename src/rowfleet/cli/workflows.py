"""Workflow commands: run, runs, cancel-run, restart, submit, submissions."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Callable

from rowfleet import api, dag, exitcodes, inputs, tasks
from rowfleet import config as configuration
from rowfleet.cli.arguments import (Parser, allow_module_flag, asker, int64, json_flag, positive_int, trusted,
                                    typed)
from rowfleet.cli.output import print_json, say, short, table, warn
from rowfleet.errors import ConfigError, NotFound, UnknownTask
from rowfleet.job import iso
from rowfleet.store import open_store
from rowfleet.store.submissions import STATES as SUBMISSION_STATES


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("run", cmd_run, "start a workflow run; print its id", reads=("database",))
    sub.add_argument("workflow", help="a workflow JSON file, or the name of a workflow an --app module registers")
    sub.add_argument("--args", default="null", help="JSON: the run's arguments, read by {\"$from\": \"$args...\"}")
    sub.add_argument("--app", action="append", default=[], metavar="MODULE",
                     help="import this module first, for its @rowfleet.task handlers and workflows (repeatable)")
    allow_module_flag(sub)
    sub.add_argument("--no-task-check", action="store_true",
                     help="do not resolve the nodes' tasks here (for a host without their dependencies)")
    sub.add_argument("--json", action="store_true", help="print the whole run")

    sub = command("runs", cmd_runs, "list workflow runs, newest first; or one run with its nodes", reads=("database",))
    sub.add_argument("id", nargs="?", type=int64, help="show this run and its nodes")
    sub.add_argument("--state", choices=dag.RUN_STATES)
    sub.add_argument("--limit", type=positive_int, default=50)
    sub.add_argument("--json", action="store_true")

    sub = command("cancel-run", cmd_cancel_run, "cancel a workflow run and its queued nodes", reads=("database",))
    sub.add_argument("id", type=int64)
    sub.add_argument("--json", action="store_true")

    sub = command("restart", cmd_restart, "re-run a failed or cancelled run's failed and cancelled nodes "
                  "and what follows them, keeping completed results", reads=("database",))
    sub.add_argument("id", type=int64)
    sub.add_argument("--json", action="store_true")

    sub = command("submit", cmd_submit, "answer an input node of a run that awaits input", reads=("database",))
    sub.add_argument("id", type=int64)
    sub.add_argument("node", help="the input node's id")
    sub.add_argument("--value", required=True,
                     help="the node's result: JSON; for a node with a widget, as the widget reads it (text and "
                          "file_path as typed, confirm yes/no/true/false, choose_many a JSON list or comma-separated)")
    sub.add_argument("--queued", action="store_true",
                     help="only write the answer as a pending submission, for an orchestrator to apply; print its id")
    sub.add_argument("--by", type=typed("by"), help="who answers, recorded on the submission (default: this user)")
    sub.add_argument("--json", action="store_true")

    sub = command("submissions", cmd_submissions, "list submissions (answers to input nodes), newest first, "
                  "with their state and error", reads=("database",))
    sub.add_argument("--run", type=int64, help="only this run's")
    sub.add_argument("--state", choices=SUBMISSION_STATES)
    sub.add_argument("--limit", type=positive_int, default=50)
    sub.add_argument("--json", action="store_true")


def cmd_run(args: argparse.Namespace, config: configuration.Config) -> int:
    config = trusted(config, args)
    run_args = json_flag("--args", args.args)
    tasks.import_apps(args.app)
    flow = tasks.workflow_named(args.workflow)
    if flow is None:
        if not os.path.lexists(args.workflow):  # one that is there but no file: load_workflow says what it is
            raise ConfigError(f"{args.workflow!r} is neither a workflow file nor a workflow registered by "
                              f"an --app module")
        flow = api.load_workflow(args.workflow)
    warnings = [] if args.no_task_check else _vet_tasks(flow, config.allow_modules, strict=bool(args.app))
    with open_store(config) as store:
        run_id = store.start_run(flow, run_args, config.project)
        if args.json:
            print_json(store.get_run(run_id, config.project).to_dict())
        else:
            print(run_id)
    for warning in warnings:  # once started: a refused command says only why
        warn(warning)
    return exitcodes.OK


def _vet_tasks(flow: dag.Workflow, allow_modules: tuple[str, ...], strict: bool) -> list[str]:
    """What a worker trusting ``allow_modules`` would refuse of the flow's tasks: one warning
    per task name, or with ``strict`` (the apps are loaded here) a ``DefinitionError``."""
    warnings: dict[str, str] = {}
    for node in flow.nodes:
        if node.kind != dag.TASK or node.task in warnings:
            continue
        try:
            warning = tasks.vet(node.task, allow_modules, strict=strict)
        except UnknownTask as exc:
            raise dag.DefinitionError(f"node {node.id!r}: {exc}") from None
        if warning:
            warnings[node.task] = warning
    return list(warnings.values())


def cmd_runs(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        if args.id is not None:
            return _show_run(store.get_run(args.id, config.project), args.json)
        found = store.reads.list_runs(config.project, state=args.state, limit=args.limit)
    if args.json:
        print_json([run.to_dict() for run in found])
        return exitcodes.OK
    rows = [[r.id, r.name, r.state, iso(r.created_at), iso(r.finished_at) or "-", r.error or ""] for r in found]
    print(table(["id", "name", "state", "created", "finished", "error"], rows) or "no runs")
    for run in found:
        if run.unreadable:
            print(f"! run {run.id} is unreadable: {run.unreadable}")
    return exitcodes.OK


def cmd_cancel_run(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        return _show_run(store.cancel_run(args.id, config.project), args.json, f"run {args.id} cancelled")


def cmd_restart(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        return _show_run(store.restart_run(args.id, config.project), args.json, f"run {args.id} restarted")


def cmd_submit(args: argparse.Namespace, config: configuration.Config) -> int:
    by = asker(args.by)
    with open_store(config) as store:
        value = _answer(store, args, config.project)
        if args.queued:
            return _show_queued(store, store.enqueue_submission(config.project, args.id, args.node, value, by),
                                config.project, args.json)
        run = store.submit_input(args.id, args.node, value, config.project, by=by)
    return _show_run(run, args.json, f"run {args.id}: {args.node} answered; the run is {run.state}")


def _show_queued(store: Any, submission_id: int, project: str, as_json: bool) -> int:
    if as_json:
        print_json(store.reads.get_submission(submission_id, project).to_dict())
    else:
        print(submission_id)
    return exitcodes.OK


def cmd_submissions(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        found = store.reads.list_submissions(config.project, run_id=args.run, state=args.state, limit=args.limit)
    if args.json:
        print_json([submission.to_dict() for submission in found])
        return exitcodes.OK
    rows = [[s.id, s.run_id, s.node_id, s.state, s.submitted_by or "-", iso(s.created_at),
             iso(s.processed_at) or "-", short(s.error or "")] for s in found]
    print(table(["id", "run", "node", "state", "by", "submitted", "handled", "error"], rows) or "no submissions")
    for submission in found:
        if submission.unreadable:
            print(f"! submission {submission.id} is unreadable: {submission.unreadable}")
    return exitcodes.OK


def _answer(store: Any, args: argparse.Namespace, project: str) -> Any:
    """``--value`` as the node reads it: as its widget reads text (``inputs.read_text``),
    else as JSON. The store checks the value against the node's spec; a run or node that is
    not there is left for it to name."""
    try:
        node = store.get_run(args.id, project).node(args.node)
    except (NotFound, KeyError):
        node = None
    if node is None or node.spec is None:
        return json_flag("--value", args.value)
    return inputs.read_text(node.spec, args.value, node.options)


def _show_run(run: Any, as_json: bool, headline: str | None = None) -> int:
    if as_json:
        print_json(run.to_dict())
        return exitcodes.OK
    if headline:
        print(headline)
        return exitcodes.OK
    print(f"run {run.id} {run.name}: {run.state}" + (f" ({run.error})" if run.error else ""))
    rows = [[n.id, _node_state(n), n.attempts, _result_text(n), short(n.error or n.prompt or "")] for n in run.nodes]
    print(table(["node", "state", "attempts", "result", "error, skip reason or prompt"], rows))
    for node in run.nodes:
        if node.state == dag.AWAITING_INPUT:
            for line in _asked(run.id, node):
                say(line)
    if run.unreadable:
        print(f"! run {run.id} is unreadable: {run.unreadable}")
    return exitcodes.OK


def _asked(run_id: int, node: Any) -> list[str]:
    """What an input node awaiting an answer asks, for people: its prompt, its widget and
    what it expects (each option on a line of its own), and how to answer."""
    widget = "any JSON value" if node.spec is None else node.spec.widget
    lines = [f"input {node.id} ({widget}): {node.prompt or 'no prompt'}"]
    if node.spec is not None and node.spec.widget in inputs.CHOOSE:
        lines.append("  options:" if node.options is not None else "  options: cannot be resolved (see the node)")
        lines += [f"    - {inputs.label(option)}" for option in node.options or ()]
    elif node.spec is not None:
        lines.append(f"  expects {inputs.expectation(node.spec)}")
    if node.spec is not None and node.spec.default is not None:
        lines.append(f"  default: {inputs.label(node.spec.default)}")
    lines.append(f"  answer: rowfleet submit {run_id} {node.id} --value VALUE")
    return lines


def _result_text(node: Any) -> str:
    """A node's result as JSON, or as stored when its row holds no JSON there."""
    if node.result is None:
        return "-"
    if node.unreadable and "column result " in node.unreadable:
        return f"{short(str(node.result), 40)}  [as stored: unreadable]"
    return short(json.dumps(node.result))


def _node_state(node: Any) -> str:
    """A node's state for people: a node whose jobs have finished but whose dispatch event
    the orchestrator has not drained yet says so, rather than looking queued."""
    return f"{node.unapplied}, not yet applied" if node.unapplied else node.state
