"""Commands for the schema and for single jobs: init, enqueue, status, jobs, job, retry,
cancel, prioritize."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any, Callable

from rowfleet import config as configuration
from rowfleet import exitcodes, models, tasks
from rowfleet.cli.arguments import (Parser, allow_module_flag, app_flag, int64, json_flag, non_negative_float,
                                  positive_float, positive_int, project_named, trusted, typed)
from rowfleet.cli.output import escaped, print_json, say, seen_text, services_table, short, table, warn
from rowfleet.errors import ConfigError
from rowfleet.job import QUEUED, RUNNING, STATES, JobSpec, iso
from rowfleet.store import Store, open_store
from rowfleet.views.snapshot import Progress, snapshot, unplaceable_text


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("init", cmd_init, "create or upgrade the schema (idempotent); print its version", reads=("database",))
    sub.add_argument("--json", action="store_true")

    sub = command("enqueue", cmd_enqueue, "enqueue one job; print its id", reads=("database", "waiting"))
    sub.add_argument("task", help="a registered task name, or module:function")
    app_flag(sub, "import this module first and refuse a task that a worker with it would refuse "
                  "(repeatable; without it an untrusted task name is only warned of)")
    allow_module_flag(sub)
    sub.add_argument("--args", default="null", help="JSON: an object (keyword args), a list, or a value")
    sub.add_argument("--queue", default=None, type=typed("queue"),
                     help="default: its task's queue when an --app module registers it, else 'default'")
    sub.add_argument("--priority", type=typed("priority"), default=0, help="lower runs sooner; negatives allowed")
    sub.add_argument("--run-next", action="store_true", help="run before every priority")
    sub.add_argument("--delay", type=non_negative_float, default=0.0, help="seconds before it may run")
    sub.add_argument("--key", default=None, type=typed("key"), help="idempotency key: one job per key and project")
    sub.add_argument("--unique", choices=("queued", "active"), default=None,
                     help="print the id of the job that waits (queued), or waits or runs (active), with the same "
                          "task and args (with --key: the same key) instead of enqueueing another")
    sub.add_argument("--debounce", type=non_negative_float, default=0.0, metavar="SECONDS",
                     help="with a duplicate waiting, push its start to SECONDS from now (implies --unique queued)")
    sub.add_argument("--concurrency-key", default=None, type=typed("key"), metavar="K",
                     help="what the queue's per-key limits and fair share count this job by (a customer, a tenant)")
    sub.add_argument("--max-attempts", type=typed("max attempts"), default=5)
    sub.add_argument("--timeout", type=positive_float, default=None,
                     help="seconds of wall clock this job may run (default: its task's when an --app module "
                          "registers it, else the worker's --budget)")
    sub.add_argument("--model", default=None, metavar="MODEL",
                     help="the model this job needs warm (default: its task's when an --app module registers it)")
    sub.add_argument("--vram-mb", type=positive_int, default=None, metavar="MB",
                     help="GPU memory (MiB) this job needs, on each of its GPUs (default: what an --app module "
                          "registered its model with, else unknown)")
    sub.add_argument("--gpus", type=typed("gpus"), default=None, metavar="N",
                     help="GPUs of one host this job needs: only a GPU worker that can hold N now takes it, with "
                          "CUDA_VISIBLE_DEVICES naming them (default: its task's, else none)")
    sub.add_argument("--json", action="store_true", help="print the whole job")
    sub.add_argument("--wait", action="store_true",
                     help="wait for the job to end and print its result as JSON, as `rowfleet wait` does")
    sub.add_argument("--wait-timeout", type=positive_float, default=None, metavar="SECONDS",
                     help="with --wait: give up after this long (exit 124; default: wait as long as it takes)")

    sub = command("wait", cmd_wait, "wait for a job to end; print its result as JSON (exit 1 when it failed or was "
                  "cancelled, with its error; 124 when --timeout passed first)", reads=("database", "waiting"))
    sub.add_argument("id", type=int64)
    sub.add_argument("--timeout", type=positive_float, default=None, metavar="SECONDS",
                     help="give up after this long (exit 124; default: wait as long as it takes)")

    sub = command("status", cmd_status, "job counts per project/queue/state, and workers: of every project, or of "
                  "the one --project (or ROWFLEET_PROJECT) names", reads=("database",))
    sub.add_argument("--json", action="store_true", help="with \"project\": the project shown, null for every one")

    sub = command("jobs", cmd_jobs, "list jobs, newest first", reads=("database",))
    sub.add_argument("--state", choices=STATES)
    sub.add_argument("--queue", type=typed("queue"))
    sub.add_argument("--limit", type=positive_int, default=50)
    sub.add_argument("--json", action="store_true")

    sub = command("job", cmd_job, "one job with its events", reads=("database",))
    sub.add_argument("id", type=int64)
    sub.add_argument("--json", action="store_true")

    sub = command("retry", cmd_retry, "re-queue a failed or cancelled job", reads=("database",))
    sub.add_argument("id", type=int64)
    sub.add_argument("--json", action="store_true")

    sub = command("cancel", cmd_cancel, "cancel a queued job; ask a running job's worker to stop it",
                  reads=("database",))
    sub.add_argument("id", type=int64)
    sub.add_argument("--wait", type=positive_float, default=None, metavar="SECONDS",
                     help="for a running job: wait up to SECONDS for it to end, and say how it ended")
    sub.add_argument("--json", action="store_true")

    sub = command("prioritize", cmd_prioritize, "make a queued job run next, ahead of every priority",
                  reads=("database",))
    sub.add_argument("id", type=int64)
    sub.add_argument("--json", action="store_true")


def _job_dict(store: Store, job: Any, with_events: bool = False) -> dict[str, Any]:
    data = job.to_dict()
    if with_events:
        data["events"] = [event.to_dict() for event in store.reads.events(job.id)]
    return data



def cmd_init(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config, create=True) as store:
        version = store.migrate()
    if args.json:
        print_json({"db": config.db_shown, "schema_version": version})
    else:
        print(version)
    return exitcodes.OK


def cmd_enqueue(args: argparse.Namespace, config: configuration.Config) -> int:
    config = trusted(config, args)
    if args.wait and args.json:
        raise ConfigError("--wait prints the job's result and --json the job as enqueued: give one of them")
    if args.wait_timeout is not None and not args.wait:
        raise ConfigError("--wait-timeout needs --wait")
    if args.model is not None:
        models.check(args.model)  # a model id is a name, as everywhere
    # Checked before any app is imported:
    spec = JobSpec(task=args.task, args=json_flag("--args", args.args),
                   queue="default" if args.queue is None else args.queue, project=config.project,
                   priority=args.priority, run_next=args.run_next, delay=args.delay, key=args.key,
                   max_attempts=args.max_attempts, timeout=args.timeout, model=args.model,
                   vram_mb=args.vram_mb, unique=args.unique, debounce=args.debounce,
                   concurrency_key=args.concurrency_key, gpus=args.gpus)
    tasks.import_apps(args.app)
    warning = tasks.vet(args.task, config.allow_modules, strict=bool(args.app))  # with --app: refuse
    if args.app and args.model is not None and models.registered(args.model) is None:
        raise ConfigError(f"model {args.model!r} is not registered by the --app modules, so no worker with them "
                          f"can load it: register it with @rowfleet.model, or leave out --app")
    stamp = tasks.stamp(args.task, args.queue, args.timeout, args.model, args.vram_mb, args.gpus)  # --app's
    spec = dataclasses.replace(spec, queue=stamp.queue, timeout=stamp.timeout, model=stamp.model,
                               vram_mb=stamp.vram_mb, gpus=stamp.gpus)
    with open_store(config) as store:
        job = store.enqueue(spec)
        if warning:  # once written: a refused command says only why
            warn(warning)
        if args.wait:
            return _print_when_ended(store, job.id, config.project, args.wait_timeout)
        if args.json:
            print_json(_job_dict(store, job))
        else:
            print(job.id)
    return exitcodes.OK


def cmd_wait(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        store.require_schema()
        return _print_when_ended(store, args.id, config.project, args.timeout)


def _print_when_ended(store: Store, job_id: int, project: str, timeout: float | None) -> int:
    """Wait for the job to end and print its result as JSON; a failed or cancelled job is
    ``JobFailed`` (exit 1, its error on stderr), a wait past ``timeout`` exit 124."""
    try:
        job = store.wait_for(job_id, project, timeout)
    except TimeoutError as exc:
        say(f"rowfleet: {exc}", file=sys.stderr)
        return exitcodes.TIMED_OUT
    print_json(job.ended_result())
    return exitcodes.OK



def cmd_status(args: argparse.Namespace, config: configuration.Config) -> int:
    # Every project unless one is named: a shared database's overview is what status was first.
    project = config.project if project_named(args) else None
    with open_store(config) as store:
        store.require_schema()
        fleet = snapshot(store)
    if project is not None:
        fleet = fleet.for_project(project)
    if args.json:
        print_json({**fleet.to_dict(), "project": project})
        return exitcodes.OK
    print(_projects_shown(project))
    print()
    print(table(["project", "queue", "state", "jobs"],
                 [[c.project or "''", c.queue, c.state, c.text()] for c in fleet.counts]) or "no jobs")
    if fleet.unplaceable:
        print()
        print(table(["project", "queue", "unplaceable (see: rowfleet models)"],
                    [[c.project or "''", c.queue, c.text()] for c in fleet.unplaceable]))
    if fleet.services:
        print()
        print(services_table(fleet.services))
    print()
    rows = [[w.project or "''", w.host, w.queue, w.pid, w.current_job or "-", _progress_text(w.progress),
             seen_text(w), w.actual] for w in fleet.workers]
    print(table(["project", "host", "queue", "pid", "job", "progress", "last seen", "actual"], rows)
          or "no workers")
    return exitcodes.OK


def _projects_shown(project: str | None) -> str:
    """The heading of ``status``: which project it shows, or that it shows every one.

    >>> _projects_shown(None), _projects_shown("a"), _projects_shown("")
    ('every project (--project NAME shows one)', "project 'a'", "project '' (the default)")
    """
    if project is None:
        return "every project (--project NAME shows one)"
    return f"project {project!r}" + ("" if project else " (the default)")


def _progress_text(progress: Progress | None) -> str:
    if progress is None:
        return "-"
    fraction = progress.fraction
    share = "" if fraction is None else f"{fraction:.0%}" if isinstance(fraction, (int, float)) else str(fraction)
    return short(" ".join(part for part in (share, progress.message or "") if part), 40)


def cmd_jobs(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        found = store.reads.list_jobs(config.project, state=args.state, queue=args.queue, limit=args.limit)
    if args.json:
        print_json([job.to_dict() for job in found])
        return exitcodes.OK
    rows = [[j.id, j.state, j.queue, j.task, ("next " if j.run_next else "") + str(j.priority),
             f"{j.attempts}/{j.max_attempts}", iso(j.created_at)] for j in found]
    print(table(["id", "state", "queue", "task", "priority", "attempts", "created"], rows) or "no jobs")
    for job in found:
        if job.unreadable:
            say(f"! job {job.id} is unreadable: {job.unreadable}")
        if _unplaceable(job):
            say(f"! job {job.id} is unplaceable: {_unplaceable(job)}")
    return exitcodes.OK


def _unplaceable(job: Any) -> str | None:
    """Why no GPU worker can hold a queued job, and since when; None when it is placeable.
    The flag speaks of a queued job only: one claimed since keeps it until the next sweep."""
    if job.state != QUEUED or not isinstance(job.unplaceable, str):
        return None
    return f"{unplaceable_text(job.unplaceable)} since {iso(job.unplaceable_at)}"


def cmd_job(args: argparse.Namespace, config: configuration.Config) -> int:
    from rowfleet.views import diagnosis  # read models: only this command needs them

    with open_store(config) as store:
        job = store.get_job(args.id, config.project)
        data = _job_dict(store, job, with_events=True)
        now = store.clock()
        waiting = job.state == QUEUED
        reasons = diagnosis.why_not_running(job, diagnosis.gather(store, job, now), now) if waiting else []
    data["why_not_running"] = [reason.to_dict() for reason in reasons]
    if args.json:
        print_json(data)
        return exitcodes.OK
    keys = ["id", "task", "queue", "project", "state", "priority", "run_next", "attempts", "max_attempts", "args",
            "result", "error", "claimed_by", "lease_token", "run_at", "created_at", "started_at", "finished_at"]
    keys += [key for key in ("concurrency_key", "run_id", "node_id", "node_item", "schedule", "schedule_slot",
                             "fire_reason", "timeout", "required_model", "vram_mb", "gpus", "progress",
                             "progress_message", "progress_at", "cancel_requested_at", "cancel_reason",
                             "unreadable") if data[key] is not None]
    keys += ["watchdog_retries"] if data["watchdog_retries"] else []
    fields = [(key, _field_text(job, key, data[key])) for key in keys]
    fields += [("unplaceable", _unplaceable(job))] if _unplaceable(job) else []
    fields += [("not running", reason.text) for reason in reasons]
    # The labels' column is as wide as the longest label shown, the events' kind column as
    # the longest kind: a long one (watchdog_retries, watchdog_trip) shifts no line.
    width = max(len(label) for label in [*(label for label, _ in fields), "traceback", "events"])
    for label, text in fields:
        say(f"{label:>{width}}: {text}")
    if data["traceback"]:
        say(f"{'traceback':>{width}}:\n" + str(data["traceback"]).rstrip(), lines=True)
    print(f"{'events':>{width}}:")
    kinds = [escaped(event["kind"]) for event in data["events"]]  # as shown: an escape is wider
    kind_width = max(map(len, kinds), default=0)
    for event, kind in zip(data["events"], kinds):
        say(f"  {event['at']}  {kind:<{kind_width}} {json.dumps(event['detail'])}")
    return exitcodes.OK


def _field_text(job: Any, key: str, value: Any) -> str:
    """A field of ``rowfleet job``: args and result as JSON, or as stored when not JSON."""
    if job.undecoded(key):
        return f"{value}  [as stored: unreadable]"
    return json.dumps(value) if key in ("args", "result") else str(value)


def cmd_retry(args: argparse.Namespace, config: configuration.Config) -> int:
    return _change(args, config, lambda store: store.retry(args.id, config.project), "re-queued")


def cmd_cancel(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        job = store.cancel(args.id, config.project)
        if job.state == RUNNING and args.wait is not None:
            job = _await_end(store, job, args.wait)
        data = _job_dict(store, job)
    if args.json:
        print_json(data)
    elif job.state == RUNNING:  # a holder the row does not name is cancelled at once, so one is named here
        holder = "a worker its row does not name" if job.claimed_by is None else f"worker {job.claimed_by}"
        print(f"cancel requested for running job {job.id} ({holder})")
    else:
        print(f"job {job.id} {job.state}")
    if job.state == RUNNING and args.wait is not None:
        print(f"rowfleet: job {job.id} is still running {args.wait:g}s after the cancel request", file=sys.stderr)
        return exitcodes.REFUSED
    return exitcodes.OK


def _await_end(store: Store, job: Any, seconds: float) -> Any:
    """The job once it has left ``running``, or as it is after ``seconds`` (looked at ten
    times a second: one cheap read each)."""
    give_up = time.monotonic() + seconds
    while job.state == RUNNING and time.monotonic() < give_up:
        time.sleep(min(0.1, max(0.0, give_up - time.monotonic())))
        job = store.get_job(job.id, job.project)
    return job


def cmd_prioritize(args: argparse.Namespace, config: configuration.Config) -> int:
    return _change(args, config, lambda store: store.prioritize(args.id, config.project), "runs next")


def _change(args: argparse.Namespace, config: configuration.Config,
            action: Callable[[Store], Any], verb: str) -> int:
    with open_store(config) as store:
        job = action(store)
        if args.json:
            print_json(_job_dict(store, job))
        else:
            print(f"job {job.id} {verb}")
    return exitcodes.OK
