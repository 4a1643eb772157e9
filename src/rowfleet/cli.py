"""The ``rowfleet`` command line: parse, call the library, print.

``main(argv=None) -> int``. A user error (bad flag, bad JSON, unknown job, a file that is
not a database) is one line on stderr and a non-zero exit, never a traceback; a bug is a
traceback. The environment is read here and in ``config`` only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from typing import Any, Callable, Sequence

import rowfleet
from rowfleet import api, dag, exitcodes, tasks
from rowfleet import config as configuration
from rowfleet.errors import ConfigError, Conflict, NotFound, RowfleetError
from rowfleet.job import STATES, JobSpec, iso
from rowfleet.orchestrator import Orchestrator
from rowfleet.store import Store, open_store
from rowfleet.supervisor import Supervisor
from rowfleet.worker import Worker


class UsageError(Exception):
    """argparse found the command line malformed."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and an exception, not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def number(convert: Callable[[str], Any], what: str, accept: Callable[[Any], bool],
           requirement: str) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text, then insist that ``accept`` holds."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {requirement}, got {text!r}")
        return value

    return parse


positive_float = number(float, "a number of seconds", lambda v: v > 0, "a positive number of seconds")
non_negative_float = number(float, "a number of seconds", lambda v: v >= 0,
                            "a non-negative number of seconds")
positive_int = number(int, "a whole number", lambda v: v >= 1, "a whole number of at least 1")
non_negative_int = number(int, "a whole number", lambda v: v >= 0, "a whole number of at least 0")


# Every Config knob as a flag; None means "not given", so the environment and defaults apply.
KNOBS: tuple[tuple[str, Callable[[str], Any], str], ...] = (
    ("--lease", positive_float, "seconds a claimed job's lease lasts (default 600)"),
    ("--renew", positive_float, "seconds between lease renewals (default 10)"),
    ("--heartbeat", positive_float, "seconds between worker heartbeats (default 10)"),
    ("--poll", positive_float, "safety poll of an idle worker, seconds (default 1)"),
    ("--interval", positive_float, "seconds between orchestrator sweeps (default 5)"),
    ("--backoff-base", positive_float, "first retry delay, seconds, doubling per attempt (default 2)"),
    ("--backoff-max", positive_float, "longest retry delay, seconds (default 3600)"),
    ("--retention", positive_float, "seconds finished jobs are kept before pruning (default 7 days)"),
    ("--synchronous", str.upper, "SQLite durability: FULL (default) or NORMAL"),
    ("--busy-timeout", positive_float, "seconds to wait for the SQLite write lock (default 30)"),
    ("--host", str, "this machine's label in holders and heartbeats (default: hostname)"),
    ("--budget", positive_float, "wall clock a job may run unless it or its task sets one (default 3600)"),
    ("--stall-window", positive_float, "seconds without a progress beat before a stall is suspected (default 300)"),
    ("--stall-samples", positive_int, "readings that confirm a stall (default 3)"),
    ("--stall-spacing", positive_float, "seconds between those readings (default 1)"),
    ("--idle-gpu", positive_float, "GPU utilisation %% under which a GPU is idle (default 5)"),
    ("--memory-delta-mb", positive_float, "memory moving less than this (MiB) is static (default 5120)"),
    ("--gpu-first-window", positive_float, "GPU jobs: idle window before the first beat (default 1200)"),
    ("--gpu-window", positive_float, "GPU jobs: idle window after the first beat (default 300)"),
    ("--gpu-sample", positive_float, "GPU jobs: seconds between GPU readings (default 10)"),
    ("--watchdog-retries", non_negative_int, "watchdog trips a job may take before it fails (default 3)"),
    ("--nvidia-smi", str, "the nvidia-smi command for GPU readings (default nvidia-smi)"),
    ("--restart-delay", positive_float, "supervisor: first wait before restarting a dead child (default 0.5)"),
    ("--restart-delay-max", positive_float, "supervisor: longest wait, doubling from the first (default 30)"),
)


GLOBALS: tuple[tuple[str, str], ...] = (
    ("--db", "database: a SQLite path or sqlite:///PATH (default ./rowfleet.db, or ROWFLEET_DB)"),
    ("--project", "project tag (default '', or ROWFLEET_PROJECT)"),
    ("--log-level", "DEBUG, INFO (default), WARNING or ERROR (or ROWFLEET_LOG_LEVEL)"),
)


def build_parser() -> Parser:
    knobs = Parser(add_help=False)
    for flag, text in GLOBALS:  # accepted after the command too; SUPPRESS keeps an earlier value
        knobs.add_argument(flag, default=argparse.SUPPRESS, help=text)
    group = knobs.add_argument_group("settings (also ROWFLEET_<NAME> in the environment)")
    for flag, kind, text in KNOBS:
        group.add_argument(flag, type=kind, default=None, help=text)

    parser = Parser(prog="rowfleet", description="A self-healing job fleet on the database you already run.")
    parser.add_argument("--version", action="version", version=f"rowfleet {rowfleet.__version__}")
    for flag, text in GLOBALS:
        parser.add_argument(flag, default=None, help=text)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    def command(name: str, handler: Callable[..., int], help_text: str) -> Parser:
        sub = commands.add_parser(name, help=help_text, description=help_text, parents=[knobs])
        sub.set_defaults(handler=handler)
        return sub

    sub = command("init", cmd_init, "create or upgrade the schema (idempotent); print its version")
    sub.add_argument("--json", action="store_true")

    sub = command("enqueue", cmd_enqueue, "enqueue one job; print its id")
    sub.add_argument("task", help="a registered task name, or module:function")
    sub.add_argument("--args", default="null", help="JSON: an object (keyword args), a list, or a value")
    sub.add_argument("--queue", default="default")
    sub.add_argument("--priority", type=int, default=0, help="lower runs sooner; negatives allowed")
    sub.add_argument("--run-next", action="store_true", help="run before every priority")
    sub.add_argument("--delay", type=non_negative_float, default=0.0, help="seconds before it may run")
    sub.add_argument("--key", default=None, help="idempotency key: one job per key and project")
    sub.add_argument("--max-attempts", type=positive_int, default=5)
    sub.add_argument("--timeout", type=positive_float, default=None,
                     help="seconds of wall clock this job may run (default: its task's, else the worker's --budget)")
    sub.add_argument("--json", action="store_true", help="print the whole job")

    sub = command("worker", cmd_worker, "claim and run jobs of one queue")
    sub.add_argument("--queue", default="default")
    sub.add_argument("--app", action="append", default=[], metavar="MODULE",
                     help="import this module so its @rowfleet.task handlers register (repeatable)")
    sub.add_argument("--procs", type=positive_int, default=None,
                     help="worker processes under a supervising parent that restarts them (1 for one "
                          "supervised worker; without it the worker runs in this process)")
    sub.add_argument("--gpu", action="store_true",
                     help="its jobs use a GPU: watch them with the GPU health watchdog (exit 78)")
    sub.add_argument("--burst", action="store_true", help="drain what is due, then exit")

    sub = command("orchestrator", cmd_orchestrator, "migrate, then reclaim lapsed leases, flag "
                  "silent workers and prune old jobs on a timer")
    sub.add_argument("--once", action="store_true", help="one sweep, print what it did, exit")

    sub = command("status", cmd_status, "job counts per project/queue/state, and workers")
    sub.add_argument("--json", action="store_true")

    sub = command("jobs", cmd_jobs, "list jobs, newest first")
    sub.add_argument("--state", choices=STATES)
    sub.add_argument("--queue")
    sub.add_argument("--limit", type=positive_int, default=50)
    sub.add_argument("--json", action="store_true")

    sub = command("job", cmd_job, "one job with its events")
    sub.add_argument("id", type=int)
    sub.add_argument("--json", action="store_true")

    sub = command("retry", cmd_retry, "re-queue a failed or cancelled job")
    sub.add_argument("id", type=int)
    sub.add_argument("--json", action="store_true")

    sub = command("cancel", cmd_cancel, "cancel a queued job")
    sub.add_argument("id", type=int)
    sub.add_argument("--json", action="store_true")

    _workflow_commands(command)
    return parser


def _workflow_commands(command: Callable[..., Parser]) -> None:
    sub = command("run", cmd_run, "start a workflow run; print its id")
    sub.add_argument("workflow", help="a workflow JSON file, or the name of a workflow an --app module registers")
    sub.add_argument("--args", default="null", help="JSON: the run's arguments, read by {\"$from\": \"$args...\"}")
    sub.add_argument("--app", action="append", default=[], metavar="MODULE",
                     help="import this module first, for its @rowfleet.task handlers and workflows (repeatable)")
    sub.add_argument("--no-task-check", action="store_true",
                     help="do not resolve the nodes' tasks here (for a host without their dependencies)")
    sub.add_argument("--json", action="store_true", help="print the whole run")

    sub = command("runs", cmd_runs, "list workflow runs, newest first; or one run with its nodes")
    sub.add_argument("id", nargs="?", type=int, help="show this run and its nodes")
    sub.add_argument("--state", choices=dag.RUN_STATES)
    sub.add_argument("--limit", type=positive_int, default=50)
    sub.add_argument("--json", action="store_true")

    sub = command("cancel-run", cmd_cancel_run, "cancel a workflow run and its queued nodes")
    sub.add_argument("id", type=int)
    sub.add_argument("--json", action="store_true")

    sub = command("restart", cmd_restart, "re-run a failed or cancelled run's failed and cancelled nodes "
                  "and what follows them, keeping completed results")
    sub.add_argument("id", type=int)
    sub.add_argument("--json", action="store_true")

    sub = command("submit", cmd_submit, "answer an input node of a run that awaits input")
    sub.add_argument("id", type=int)
    sub.add_argument("node", help="the input node's id")
    sub.add_argument("--value", required=True, help="JSON: the node's result")
    sub.add_argument("--json", action="store_true")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return exitcodes.USAGE
    if args.command is None:
        build_parser().print_help()
        return exitcodes.USAGE
    try:
        _setup_logging(args.log_level)
        config = configuration.from_env(os.environ, db=args.db, project=args.project,
                                        **{name: getattr(args, name) for name in _knob_names()})
        return args.handler(args, config)
    except RowfleetError as exc:
        return report(exc)
    except KeyboardInterrupt:
        return exitcodes.INTERRUPTED


def report(exc: RowfleetError) -> int:
    """One line on stderr for a user-facing error; the exit code it deserves."""
    if isinstance(exc, (NotFound, Conflict)):
        print(f"rowfleet: {exc}", file=sys.stderr)
        return exitcodes.REFUSED
    print(f"rowfleet: error: {exc}", file=sys.stderr)
    return exitcodes.USAGE


def _knob_names() -> list[str]:
    return [flag[2:].replace("-", "_") for flag, _, _ in KNOBS]


def _setup_logging(level_name: str | None) -> None:
    name = (level_name or os.environ.get("ROWFLEET_LOG_LEVEL") or "INFO").upper()
    level = logging.getLevelName(name)
    if not isinstance(level, int):
        raise ConfigError(f"--log-level must be DEBUG, INFO, WARNING or ERROR, got {level_name!r}")
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s")


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def _job_dict(store: Store, job: Any, with_events: bool = False) -> dict[str, Any]:
    data = job.to_dict()
    if with_events:
        data["events"] = [event.to_dict() for event in store.events(job.id)]
    return data


# --- commands --------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config, create=True) as store:
        version = store.migrate()
    if args.json:
        _print_json({"db": config.db_shown, "schema_version": version})
    else:
        print(version)
    return exitcodes.OK


def cmd_enqueue(args: argparse.Namespace, config: configuration.Config) -> int:
    spec = JobSpec(task=args.task, args=_json_flag("--args", args.args), queue=args.queue, project=config.project,
                   priority=args.priority, run_next=args.run_next, delay=args.delay, key=args.key,
                   max_attempts=args.max_attempts, timeout=args.timeout)
    with open_store(config) as store:
        job = store.enqueue(spec)
        if args.json:
            _print_json(_job_dict(store, job))
        else:
            print(job.id)
    return exitcodes.OK


def cmd_worker(args: argparse.Namespace, config: configuration.Config) -> int:
    tasks.import_apps(args.app)
    if not args.queue or any(c.isspace() for c in args.queue):
        raise ConfigError(f"--queue must be a non-empty word, got {args.queue!r}")

    def one_worker() -> int:
        worker = Worker(config, args.queue, burst=args.burst, gpu=args.gpu)
        _on_stop_signals(lambda *_: worker.request_stop())
        try:
            return worker.run()
        except RowfleetError as exc:  # in a forked child main() is not there to catch it
            return report(exc)

    if args.procs is None:
        return one_worker()

    def record_exit(pid: int, code: int) -> None:
        with open_store(config) as store:  # opened and closed here: no connection may cross a fork
            store.worker_exited(config.host, pid, code)

    def flagged() -> set[int]:
        with open_store(config) as store:
            return store.flagged_workers(config.host)

    supervisor = Supervisor(args.procs, one_worker, fatal_codes={exitcodes.USAGE}, on_exit=record_exit,
                            flagged=flagged, check_every=config.heartbeat, first_delay=config.restart_delay,
                            max_delay=config.restart_delay_max)
    _on_stop_signals(supervisor.request_stop)
    return supervisor.run()


def cmd_orchestrator(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config, create=True) as store:
        version = store.migrate()
        orchestrator = Orchestrator(store, config)
        if args.once:
            _print_json({"schema_version": version, **orchestrator.run_once()})
            return exitcodes.OK
        stop = threading.Event()
        _on_stop_signals(lambda *_: stop.set())
        orchestrator.run(stop)
    return exitcodes.OK


def cmd_status(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        store.require_schema()
        counts = store.counts()
        now = store.clock()
        workers = store.workers(since=now - config.stale_after)
        for worker in workers:  # what each busy worker's job last reported
            job = _job_or_none(store, worker["current_job"], worker["project"])
            worker["progress"] = None if job is None or job.progress_at is None else \
                {"fraction": job.progress, "message": job.progress_message, "at": iso(job.progress_at)}
    for worker in workers:
        worker["age"] = round(now - worker["last_seen"], 3)
        for key in ("started_at", "last_seen", "stopped_at", "flagged_dead_at"):
            worker[key] = iso(worker[key])
    if args.json:
        _print_json({"counts": counts, "workers": workers})
        return exitcodes.OK
    print(_table(["project", "queue", "state", "jobs"],
                 [[c["project"] or "''", c["queue"], c["state"], c["n"]] for c in counts]) or "no jobs")
    print()
    rows = [[w["project"] or "''", w["host"], w["queue"], w["pid"], w["current_job"] or "-",
             _progress_text(w["progress"]), f"{w['age']:.1f}s ago", _worker_state(w)] for w in workers]
    print(_table(["project", "host", "queue", "pid", "job", "progress", "last seen", "state"], rows)
          or "no workers")
    return exitcodes.OK


def _job_or_none(store: Store, job_id: int | None, project: str) -> Any:
    try:
        return None if job_id is None else store.get_job(job_id, project)
    except NotFound:  # finished and pruned since the heartbeat named it
        return None


def _progress_text(progress: dict[str, Any] | None) -> str:
    if progress is None:
        return "-"
    share = "" if progress["fraction"] is None else f"{progress['fraction']:.0%}"
    return _short(" ".join(part for part in (share, progress["message"] or "") if part), 40)


def _worker_state(worker: dict[str, Any]) -> str:
    if worker["exit_code"] is not None:
        return f"exited {worker['exit_code']} ({exitcodes.meaning(worker['exit_code'])})"
    if worker["stopped_at"]:
        return "stopped"
    return "SILENT" if worker["flagged_dead_at"] else "alive"


def cmd_jobs(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        found = store.list_jobs(config.project, state=args.state, queue=args.queue, limit=args.limit)
    if args.json:
        _print_json([job.to_dict() for job in found])
        return exitcodes.OK
    rows = [[j.id, j.state, j.queue, j.task, ("next " if j.run_next else "") + str(j.priority),
             f"{j.attempts}/{j.max_attempts}", iso(j.created_at)] for j in found]
    print(_table(["id", "state", "queue", "task", "priority", "attempts", "created"], rows) or "no jobs")
    return exitcodes.OK


def cmd_job(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        data = _job_dict(store, store.get_job(args.id, config.project), with_events=True)
    if args.json:
        _print_json(data)
        return exitcodes.OK
    keys = ["id", "task", "queue", "project", "state", "priority", "run_next", "attempts", "max_attempts", "args",
            "result", "error", "claimed_by", "lease_token", "run_at", "created_at", "started_at", "finished_at"]
    keys += [key for key in ("run_id", "node_id", "node_item", "timeout", "required_model", "progress",
                             "progress_message", "progress_at") if data[key] is not None]
    keys += ["watchdog_retries"] if data["watchdog_retries"] else []
    for key in keys:
        value = data[key]
        print(f"{key:>13}: {json.dumps(value) if key in ('args', 'result') else value}")
    if data["traceback"]:
        print("    traceback:\n" + data["traceback"].rstrip())
    print("       events:")
    for event in data["events"]:
        print(f"  {event['at']}  {event['kind']:<10} {json.dumps(event['detail'])}")
    return exitcodes.OK


def cmd_retry(args: argparse.Namespace, config: configuration.Config) -> int:
    return _change(args, config, lambda store: store.retry(args.id, config.project), "re-queued")


def cmd_cancel(args: argparse.Namespace, config: configuration.Config) -> int:
    return _change(args, config, lambda store: store.cancel(args.id, config.project), "cancelled")


def _change(args: argparse.Namespace, config: configuration.Config,
            action: Callable[[Store], Any], verb: str) -> int:
    with open_store(config) as store:
        job = action(store)
        if args.json:
            _print_json(_job_dict(store, job))
        else:
            print(f"job {job.id} {verb}")
    return exitcodes.OK


# --- workflow commands -----------------------------------------------------------------


def cmd_run(args: argparse.Namespace, config: configuration.Config) -> int:
    run_args = _json_flag("--args", args.args)
    tasks.import_apps(args.app)
    flow = tasks.workflow_named(args.workflow)
    if flow is None:
        if not os.path.isfile(args.workflow):
            raise ConfigError(f"{args.workflow!r} is neither a workflow file nor a workflow registered by "
                              f"an --app module")
        flow = api.load_workflow(args.workflow)
    if not args.no_task_check:
        api.check_tasks(flow)
    with open_store(config) as store:
        run_id = store.start_run(flow, run_args, config.project)
        if args.json:
            _print_json(store.get_run(run_id, config.project).to_dict())
        else:
            print(run_id)
    return exitcodes.OK


def cmd_runs(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        if args.id is not None:
            return _show_run(store.get_run(args.id, config.project), args.json)
        found = store.list_runs(config.project, state=args.state, limit=args.limit)
    if args.json:
        _print_json([run.to_dict() for run in found])
        return exitcodes.OK
    rows = [[r.id, r.name, r.state, iso(r.created_at), iso(r.finished_at) or "-", r.error or ""] for r in found]
    print(_table(["id", "name", "state", "created", "finished", "error"], rows) or "no runs")
    return exitcodes.OK


def cmd_cancel_run(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        return _show_run(store.cancel_run(args.id, config.project), args.json, f"run {args.id} cancelled")


def cmd_restart(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        return _show_run(store.restart_run(args.id, config.project), args.json, f"run {args.id} restarted")


def cmd_submit(args: argparse.Namespace, config: configuration.Config) -> int:
    value = _json_flag("--value", args.value)
    with open_store(config) as store:
        run = store.submit_input(args.id, args.node, value, config.project)
    return _show_run(run, args.json, f"run {args.id}: {args.node} answered; the run is {run.state}")


def _show_run(run: Any, as_json: bool, headline: str | None = None) -> int:
    if as_json:
        _print_json(run.to_dict())
        return exitcodes.OK
    if headline:
        print(headline)
        return exitcodes.OK
    print(f"run {run.id} {run.name}: {run.state}" + (f" ({run.error})" if run.error else ""))
    rows = [[n.id, n.state, n.attempts, _short(json.dumps(n.result)) if n.result is not None else "-",
             _short(n.error or n.prompt or "")] for n in run.nodes]
    print(_table(["node", "state", "attempts", "result", "error, skip reason or prompt"], rows))
    return exitcodes.OK


# --- helpers ---------------------------------------------------------------------------


def _json_flag(flag: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag} is not valid JSON: {exc}") from None


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _on_stop_signals(handler: Callable[..., Any]) -> None:
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return ""
    cells = [headers] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in cells)


if __name__ == "__main__":
    sys.exit(main())
