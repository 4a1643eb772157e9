"""Fleet commands: switch workers off and on (control), and see the fleet (workers, broker),
each rendering the one read model, ``rowfleet.views.snapshot``."""

from __future__ import annotations

import argparse
from typing import Any, Callable, Iterable, Mapping

from rowfleet import config as configuration
from rowfleet import control, exitcodes, flow, liveness
from rowfleet.cli.arguments import Parser, asker, typed
from rowfleet.cli.output import print_json, say, seen_text, services_table, table
from rowfleet.control import Switch
from rowfleet.errors import ConfigError
from rowfleet.job import iso
from rowfleet.store import open_store
from rowfleet.views.snapshot import Project, Worker, snapshot

# The job states `broker` counts per queue, in its column order.
BROKER_STATES = ("queued", "running", "failed", "completed", "cancelled")


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("control", cmd_control, "switch the workers of a queue (or a whole box) off or on",
                  reads=("database", "switches"))
    which = sub.add_mutually_exclusive_group(required=True)
    which.add_argument("--queue", type=typed("queue"), help="the queue whose workers to switch")
    which.add_argument("--all-queues", action="store_true", help="every queue of the host: a box-wide switch")
    # The host is the --host setting (default: this machine's label, as workers here use).
    sub.add_argument("--all-hosts", action="store_true", help="every host, instead of --host")
    sub.add_argument("--all-projects", action="store_true", help="every project sharing the database")
    state = sub.add_mutually_exclusive_group(required=True)
    state.add_argument("--on", dest="desired", action="store_const", const=control.ON)
    state.add_argument("--off", dest="desired", action="store_const", const=control.OFF)
    sub.add_argument("--policy", choices=control.POLICIES, default=control.DRAIN,
                     help="off: drain (finish the job in hand, then park; default) or hard (hand the job "
                          "back and exit 79)")
    sub.add_argument("--by", type=typed("by"), help="who asks, recorded on the switch (default: this user)")
    sub.add_argument("--reason", default="", type=typed("reason"),
                     help="why, recorded on the switch and in its log (free text)")
    sub.add_argument("--json", action="store_true")

    sub = command("model-control", cmd_model_control, "pin, forbid, unload or preload a model on a box, or list "
                                                       "the rules", reads=("database", "switches"))
    sub.add_argument("action", choices=(*control.MODEL_ACTIONS, "list"),
                     help="pin: keep it warm here (never unloaded); forbid: never claim its jobs here; unload, "
                          "preload: once, now; list: the rules and requests for this host")
    sub.add_argument("model", nargs="?", type=typed("model"), help="the model id (not for list)")
    sub.add_argument("--clear", action="store_true", help="delete the rule or request instead of writing it")
    # The host is the --host setting (default: this machine's label, as workers here use).
    sub.add_argument("--all-hosts", action="store_true", help="every host, instead of --host")
    sub.add_argument("--by", type=typed("by"), help="who asks, recorded on the row (default: this user)")
    sub.add_argument("--json", action="store_true")

    sub = command("gpu-control", cmd_gpu_control, "switch a GPU of a box on or off for new claims (the health gate "
                                                   "switches a failing one off), or list the GPUs' switches",
                  reads=("database", "switches"))
    sub.add_argument("action", choices=(control.ON, control.OFF, "list"),
                     help="on: claims again (and acknowledges the health gate's verdict in force); off: its workers "
                          "finish the job in hand and claim nothing more; list: every GPU's switch and verdict")
    sub.add_argument("gpu", nargs="?", type=typed("gpu index"), metavar="INDEX", help="the GPU's index (not for list)")
    # The host is the --host setting (default: this machine's label, as workers here use).
    sub.add_argument("--reason", default="", type=typed("reason"), help="why, recorded on the switch")
    sub.add_argument("--by", type=typed("by"), help="who switches it, recorded on the row (default: this user)")
    sub.add_argument("--json", action="store_true")

    sub = command("limit", cmd_limit, "set a queue's flow limits: running jobs, per key, rates, fair share",
                  reads=("database",))
    sub.add_argument("queue", type=typed("queue"), help="the queue (it need not have jobs yet)")
    sub.add_argument("--concurrency", type=typed("count"), metavar="N", help="at most N of its jobs running fleet-wide")
    sub.add_argument("--per-key", type=typed("count"), metavar="N",
                     help="at most N running jobs of one --concurrency-key")
    sub.add_argument("--rate", type=_rate("--rate"), metavar="N/SECONDS",
                     help="at most N starts in any SECONDS, e.g. 10/1")
    sub.add_argument("--per-key-rate", type=_rate("--per-key-rate"), metavar="N/SECONDS",
                     help="at most N starts in any SECONDS for each key")
    fair = sub.add_mutually_exclusive_group()
    fair.add_argument("--fair", dest="fair", action="store_const", const=True, default=None,
                      help="take the key that started least recently first (after run-next and priority)")
    fair.add_argument("--no-fair", dest="fair", action="store_const", const=False)
    lost = sub.add_mutually_exclusive_group()
    lost.add_argument("--lost-first", dest="lost_first", action="store_const", const=True, default=None,
                      help="a job lost with its worker goes back in the front band (run-next), not in its place")
    lost.add_argument("--lost-in-place", dest="lost_first", action="store_const", const=False,
                      help="a job lost with its worker keeps its place (the default)")
    sub.add_argument("--clear", action="store_true", help="drop its rules first (alone: no limits left)")
    sub.add_argument("--all-projects", action="store_true",
                     help="one limit over this queue of every project sharing the database")
    sub.add_argument("--by", type=typed("by"), help="who asks, recorded on the limit (default: this user)")
    sub.add_argument("--json", action="store_true")

    sub = command("limits", cmd_limits, "each queue's flow limits with their use now", reads=("database",))
    sub.add_argument("--all-projects", action="store_true", help="every project's limits, not only this one's")
    sub.add_argument("--json", action="store_true")

    sub = command("workers", cmd_workers, "workers with what their switches want and what they do", reads=("database",))
    sub.add_argument("--all-projects", action="store_true", help="every project's workers, not only this one's")
    sub.add_argument("--all", action="store_true", dest="include_old",
                     help=f"also workers stopped, dead or silent for more than {liveness.LISTED_FOR / 60:.0f} minutes")
    sub.add_argument("--json", action="store_true")

    sub = command("broker", cmd_broker, "the whole shared database: every project's queues, counts and workers",
                  reads=("database",))
    sub.add_argument("--json", action="store_true")


def cmd_control(args: argparse.Namespace, config: configuration.Config) -> int:
    queue = control.ANY if args.all_queues else args.queue  # a name, by its flag's rule
    host = control.ANY if args.all_hosts else config.host  # a name: Config refuses '*'
    project = control.ANY if args.all_projects else config.project
    with open_store(config) as store:
        store.require_schema()
        switch = store.set_switch(project, host, queue, args.desired, args.policy, asker(args.by),
                                  reason=args.reason)
        # Off wins: turning one row on does not free workers that a wider off row holds.
        still_held = [held for held in store.reads.switches() if held.desired == control.OFF and held != switch
                      and held.applies_to(switch.project, switch.host, switch.queue)] \
            if args.desired == control.ON else []
    if args.json:
        print_json({"switch": switch.to_dict(), "still_off": [held.to_dict() for held in still_held]})
        return exitcodes.OK
    say(f"{switch.scope()}: {_wanted(switch)}")
    for held in still_held:
        say(f"note: {held.scope()} is still switched off ({held.policy}, by {held.changed_by or '?'}); "
            f"workers it covers stay parked until it is switched on")
    return exitcodes.OK


def _rate(flag: str) -> Callable[[str], flow.Rate]:
    def read(text: str) -> flow.Rate:
        try:
            return flow.Rate.parse(flag, text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return read


def cmd_limit(args: argparse.Namespace, config: configuration.Config) -> int:
    project = flow.ANY if args.all_projects else config.project
    rules = {"concurrency": args.concurrency, "per_key": args.per_key, "rate": args.rate,
             "key_rate": args.per_key_rate, "fair": args.fair, "lost_first": args.lost_first}
    if not args.clear and all(value is None for value in rules.values()):
        raise ConfigError("limit needs a rule to set (--concurrency, --per-key, --rate, --per-key-rate, --fair, "
                          "--no-fair, --lost-first, --lost-in-place) or --clear; `rowfleet limits` lists them")
    with open_store(config) as store:
        store.require_schema()
        limit = store.set_limit(project, args.queue, asker(args.by), clear=args.clear, **rules)
    scope = flow.Limit(project, args.queue).scope()
    if args.json:
        print_json({"limit": None if limit is None else limit.to_dict(), "project": project, "queue": args.queue})
    else:
        say(f"{scope}: {', '.join(limit.rules()) if limit is not None else 'no limits'}"
            + ("" if project == flow.ANY else f" (project {project!r})" if project else ""))
    return exitcodes.OK


def cmd_limits(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        store.require_schema()
        found = [use for use in store.limits()
                 if args.all_projects or use.limit.project in (config.project, flow.ANY)]
    if args.json:
        print_json({"limits": [use.to_dict() for use in found]})
        return exitcodes.OK
    print(table(["project", "queue", "limits", "running", "keys at limit", "held now", "by"],
                [[("every project" if use.limit.project == flow.ANY else use.limit.project or "(default)"),
                  use.limit.queue, ", ".join(use.limit.rules()), str(use.running), str(use.keys_at_limit),
                  "; ".join(hold.text for hold in use.holds) or "-", use.limit.updated_by or "-"] for use in found])
          or "no limits (set one with rowfleet limit QUEUE ...)")
    return exitcodes.OK


def cmd_model_control(args: argparse.Namespace, config: configuration.Config) -> int:
    host = control.ANY if args.all_hosts else config.host  # a name: Config refuses '*'
    if args.action == "list":
        if args.model is not None or args.clear:
            raise ConfigError("model-control list takes no model and no --clear")
        return _list_model_controls(config, None if args.all_hosts else host, args.json)
    if args.model is None:
        raise ConfigError(f"model-control {args.action} needs a model id, e.g. model-control {args.action} llama3-8b:q4")
    model = args.model
    with open_store(config) as store:
        store.require_schema()
        if args.clear:
            found = store.clear_model_control(host, model, args.action)
            shown = {"cleared": found, "host": host, "model": model, "action": args.action}
        else:
            shown = store.set_model_control(host, model, args.action, asker(args.by)).to_dict()
    if args.json:
        print_json(shown)
    elif args.clear:
        say(f"{args.action} {model} on {_hosts(host)}: {'cleared' if shown['cleared'] else 'there was none'}")
    else:
        say(f"{args.action} {model} on {_hosts(host)}" + ("" if args.action in control.STANDING
                                                          else ": a worker there carries it out once"))
    return exitcodes.OK


def _list_model_controls(config: configuration.Config, host: str | None, as_json: bool) -> int:
    with open_store(config) as store:
        store.require_schema()
        rows = store.model_controls(host)
    if as_json:
        print_json({"model_controls": [row.to_dict() for row in rows]})
        return exitcodes.OK
    print(table(["host", "model", "action", "by", "at", "done"],
                [[row.host, row.model, row.action, row.changed_by or "-", iso(row.changed_at),
                  iso(row.done_at) if row.done_at is not None else ("-" if row.action in control.STANDING
                                                                     else "pending")] for row in rows])
          or "no model controls")
    return exitcodes.OK


def cmd_gpu_control(args: argparse.Namespace, config: configuration.Config) -> int:
    if args.action == "list":
        if args.gpu is not None or args.reason:
            raise ConfigError("gpu-control list takes no GPU index and no --reason")
        return _list_gpu_switches(config, args.json)
    if args.gpu is None:
        raise ConfigError(f"gpu-control {args.action} needs the GPU's index, e.g. gpu-control {args.action} 0 "
                          f"--host {config.host}")
    with open_store(config) as store:
        store.require_schema()
        switch = store.set_gpu_switch(config.host, args.gpu, args.action, asker(args.by), args.reason)
    if args.json:
        print_json(switch.to_dict())
    elif switch.off:
        say(f"GPU {switch.gpu_index} of host {switch.host}: off; its workers finish the job in hand and claim nothing "
            f"more")
    else:
        cleared = f" (the health gate's verdict cleared: {switch.cleared})" if switch.cleared else ""
        say(f"GPU {switch.gpu_index} of host {switch.host}: on{cleared}")
    return exitcodes.OK


def _list_gpu_switches(config: configuration.Config, as_json: bool) -> int:
    with open_store(config) as store:
        store.require_schema()
        switches = store.gpu_switches()
    if as_json:
        print_json({"gpu_switches": [switch.to_dict() for switch in switches]})
        return exitcodes.OK
    print(table(["host", "gpu", "switch", "by", "at", "why", "health"],
                [[s.host, s.gpu_index, s.desired, s.changed_by or "-", iso(s.changed_at), s.reason or "-",
                  s.health or ("ok" if s.health_at is not None else "-")] for s in switches])
          or "no GPU has been judged or switched")
    return exitcodes.OK


def _hosts(host: str) -> str:
    return "every host" if host == control.ANY else f"host {host}"


def cmd_workers(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        store.require_schema()
        fleet = snapshot(store, listed_for=None if args.include_old else liveness.LISTED_FOR)
    if not args.all_projects:
        fleet = fleet.for_project(config.project)
    if args.json:
        print_json({"workers": [w.to_dict() for w in fleet.workers], "switches": [s.to_dict() for s in fleet.switches]})
        return exitcodes.OK
    print(_workers_table(fleet.workers) or "no workers")
    if fleet.switches:
        print()
        print(_switches_table(fleet.switches))
    return exitcodes.OK


def cmd_broker(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        store.require_schema()
        fleet = snapshot(store)
    projects = fleet.projects()
    if args.json:
        print_json({"projects": {project.name: _broker_dict(project) for project in projects},
                    "switches": [s.to_dict() for s in fleet.switches], "count_cap": fleet.cap})
        return exitcodes.OK
    rows = []
    for project in projects:
        for queue in project.queues():
            tally = project.tally(queue)
            here = [w for w in project.workers if w.serves(queue)]
            rows.append([project.name or "''", queue, *(tally[state].text() if state in tally else 0
                                                        for state in BROKER_STATES), _worker_tally(here)])
    print(table(["project", "queue", *BROKER_STATES, "workers"], rows) or "no jobs")
    if fleet.services:
        print()
        print(services_table(fleet.services))
    print()
    print(_workers_table(fleet.workers) or "no workers")
    if fleet.switches:
        print()
        print(_switches_table(fleet.switches))
    return exitcodes.OK


def _broker_dict(project: Project) -> dict[str, Any]:
    """One project as ``broker --json`` shows it: per queue a count for each of
    ``BROKER_STATES`` (and any other state its jobs are in), and which of those counts
    stopped at the cap (``capped``: queue -> states)."""
    queues = {queue: {**dict.fromkeys(BROKER_STATES, 0), **{state: count.n for state, count in
                                                           project.tally(queue).items()}}
              for queue in project.queues()}
    capped: dict[str, list[str]] = {}
    for count in project.counts:
        if count.capped:
            capped.setdefault(count.queue, []).append(count.state)
    return {"queues": queues, "workers": [w.to_dict() for w in project.workers],
            "orchestrators": project.services.orchestrators, "outbox_waiting": project.services.outbox_waiting,
            "outbox_oldest_age": project.services.outbox_oldest_age, "capped": capped}


def _workers_table(workers: Iterable[Worker]) -> str:
    workers = list(workers)
    rows = [[w.project or "''", w.host, ",".join(w.queues or (w.queue,)), w.pid, w.current_job or "-",
             w.desired if w.switch is None else f"off ({w.switch.policy})", w.actual, seen_text(w)]
            for w in workers]
    headers = ["project", "host", "queue", "pid", "job", "wanted", "actual", "last seen"]
    if any(w.sidecar is not None for w in workers):  # a column only where some worker owns a sidecar
        rows = [row + [sidecar_text(w.sidecar)] for row, w in zip(rows, workers)]
        headers.append("sidecar")
    return table(headers, rows)


def sidecar_text(state: Mapping[str, Any] | None) -> str:
    """A sidecar's state as the listing shows it.

    >>> sidecar_text({"state": "stuck_vram", "holders": [4242, 4243]}), sidecar_text({"state": "up", "pid": 7})
    ('stuck_vram (GPU memory held by pids 4242, 4243)', 'up (pid 7)')
    """
    if state is None:
        return "-"
    name = str(state.get("state", "?"))
    holders = state.get("holders") if isinstance(state.get("holders"), list) else []
    if name == "stuck_vram":
        return f"{name} (GPU memory held by pids {', '.join(str(pid) for pid in holders) or 'unknown'})"
    return f"{name} (pid {state['pid']})" if name == "up" and "pid" in state else name


def _switches_table(switches: Iterable[Switch]) -> str:
    rows = [[s.project or "''", s.host, s.queue, s.desired, s.policy if s.desired == control.OFF else "-",
             s.changed_by or "-", iso(s.changed_at)] for s in switches]
    return table(["switch: project", "host", "queue", "wanted", "policy", "by", "at"], rows)


def _worker_tally(workers: Iterable[Worker]) -> str:
    states: dict[str, int] = {}
    for worker in workers:
        states[worker.actual] = states.get(worker.actual, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(states.items())) or "-"


def _wanted(switch: Switch) -> str:
    by = f" by {switch.changed_by}" if switch.changed_by else ""
    return f"on{by}" if switch.desired == control.ON else f"off ({switch.policy}){by}"
