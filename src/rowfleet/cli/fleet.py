"""Fleet commands: switch workers off and on (control), and see the fleet (workers, broker)."""

from __future__ import annotations

import argparse
import getpass
from typing import Any, Callable

from rowfleet import config as configuration
from rowfleet import control, exitcodes, liveness, names
from rowfleet.cli.arguments import Parser
from rowfleet.cli.output import print_json, table
from rowfleet.control import Switch
from rowfleet.errors import ConfigError
from rowfleet.job import iso
from rowfleet.store import Store, open_store

# The job states `broker` counts per queue, in its column order.
BROKER_STATES = ("queued", "running", "failed", "completed", "cancelled")


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("control", cmd_control, "switch the workers of a queue (or a whole box) off or on")
    which = sub.add_mutually_exclusive_group(required=True)
    which.add_argument("--queue", help="the queue whose workers to switch")
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
    sub.add_argument("--by", help="who asks, recorded on the switch (default: this user)")
    sub.add_argument("--json", action="store_true")

    sub = command("workers", cmd_workers, "workers with what their switches want and what they do")
    sub.add_argument("--all-projects", action="store_true", help="every project's workers, not only this one's")
    sub.add_argument("--all", action="store_true", dest="include_old",
                     help=f"also workers stopped, dead or silent for more than {liveness.LISTED_FOR / 60:.0f} minutes")
    sub.add_argument("--json", action="store_true")

    sub = command("broker", cmd_broker, "the whole shared database: every project's queues, counts and workers")
    sub.add_argument("--json", action="store_true")


def cmd_control(args: argparse.Namespace, config: configuration.Config) -> int:
    queue = control.ANY if args.all_queues else _word("--queue", args.queue)
    host = control.ANY if args.all_hosts else _word("--host", config.host)
    project = control.ANY if args.all_projects else config.project
    with open_store(config) as store:
        store.require_schema()
        switch = store.set_switch(project, host, queue, args.desired, args.policy, args.by or _user())
        # Off wins: turning one row on does not free workers that a wider off row holds.
        still_held = [held for held in store.switches() if held.desired == control.OFF and held != switch
                      and held.applies_to(switch.project, switch.host, switch.queue)] \
            if args.desired == control.ON else []
    if args.json:
        print_json({"switch": switch.to_dict(), "still_off": [held.to_dict() for held in still_held]})
        return exitcodes.OK
    print(f"{switch.scope()}: {_wanted(switch)}")
    for held in still_held:
        print(f"note: {held.scope()} is still switched off ({held.policy}, by {held.changed_by or '?'}); "
              f"workers it covers stay parked until it is switched on")
    return exitcodes.OK


def cmd_workers(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        store.require_schema()
        workers, switches = _fleet(store, config, include_old=args.include_old)
    if not args.all_projects:
        workers = [w for w in workers if w["project"] == config.project]
        switches = [s for s in switches if s.project in (config.project, control.ANY)]
    if args.json:
        print_json({"workers": workers, "switches": [s.to_dict() for s in switches]})
        return exitcodes.OK
    print(_workers_table(workers) or "no workers")
    if switches:
        print()
        print(_switches_table(switches))
    return exitcodes.OK


def cmd_broker(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        store.require_schema()
        counts = store.counts()
        workers, switches = _fleet(store, config)
        served = services(store)
    projects: dict[str, Any] = {}
    for service in served:
        _project(projects, service["project"]).update(
            orchestrators=service["orchestrators"], outbox_waiting=service["outbox_waiting"],
            outbox_oldest_age=service["outbox_oldest_age"])
    for row in counts:
        queue = _project(projects, row["project"])["queues"].setdefault(row["queue"], dict.fromkeys(BROKER_STATES, 0))
        queue[row["state"]] = row["n"]
    for worker in workers:
        _project(projects, worker["project"])["workers"].append(worker)
    if args.json:
        print_json({"projects": projects, "switches": [s.to_dict() for s in switches]})
        return exitcodes.OK
    rows = []
    for name, project in sorted(projects.items()):
        for queue, tally in sorted(project["queues"].items()):
            here = [w for w in project["workers"] if w["queue"] == queue]
            rows.append([name or "''", queue, *(tally[state] for state in BROKER_STATES), _worker_tally(here)])
    print(table(["project", "queue", *BROKER_STATES, "workers"], rows) or "no jobs")
    if served:
        print()
        print(services_table(served))
    print()
    print(_workers_table(workers) or "no workers")
    if switches:
        print()
        print(_switches_table(switches))
    return exitcodes.OK


def actual_state(worker: dict[str, Any], now: float) -> str:
    """What a heartbeat row says a worker is doing: serving, draining, parked, SILENT
    (flagged dead, or past its own staleness even where no orchestrator sweeps), stopped,
    or how it ended ("killed by SIGKILL")."""
    if worker["exit_code"] is not None:
        return exitcodes.describe(worker["exit_code"])
    if worker["stopped_at"]:
        return "stopped"
    if worker["flagged_dead_at"] or liveness.silent(worker["last_seen"], worker["heartbeat"], now):
        return "SILENT"
    return worker["state"]


def _fleet(store: Store, config: configuration.Config, include_old: bool = False
           ) -> tuple[list[dict[str, Any]], list[Switch]]:
    """Recent workers of every project (every row with ``include_old``), each with its
    switch's wish and its actual state."""
    now = store.clock()
    switches = store.switches()
    workers = store.workers(since=0.0 if include_old else now - liveness.LISTED_FOR)
    for worker in workers:
        held = control.in_force(switches, worker["project"], worker["host"], worker["queue"])
        worker["desired"] = control.ON if held is None else control.OFF
        worker["switch"] = None if held is None else held.to_dict()
        worker["actual"] = actual_state(worker, now)
        worker["age"] = round(now - worker["last_seen"], 3)
        for key in ("started_at", "last_seen", "stopped_at", "flagged_dead_at"):
            worker[key] = iso(worker[key])
    return workers, switches


def services(store: Store) -> list[dict[str, Any]]:
    """Per project: live orchestrators and waiting outbox events, JSON-ready (the age of the
    oldest waiting event in seconds)."""
    now = store.clock()
    found = store.project_services()
    for service in found:
        oldest = service.pop("outbox_oldest")
        service["outbox_oldest_age"] = None if oldest is None else round(now - oldest, 3)
    return found


def services_table(found: list[dict[str, Any]]) -> str:
    """Whether each project is served: an orchestrator drains its workflows' outbox and
    recovers its lost jobs; without one, both wait."""
    rows = [[s["project"] or "''", s["orchestrators"] or "NONE", s["outbox_waiting"],
             "-" if s["outbox_oldest_age"] is None else f"{s['outbox_oldest_age']:.1f}s"] for s in found]
    return table(["project", "orchestrators", "outbox waiting", "oldest"], rows)


def _project(projects: dict[str, Any], name: str) -> dict[str, Any]:
    return projects.setdefault(name, {"queues": {}, "workers": [], "orchestrators": 0, "outbox_waiting": 0,
                                      "outbox_oldest_age": None})


def _workers_table(workers: list[dict[str, Any]]) -> str:
    rows = [[w["project"] or "''", w["host"], w["queue"], w["pid"], w["current_job"] or "-",
             w["desired"] if w["switch"] is None else f"off ({w['switch']['policy']})", w["actual"],
             f"{w['age']:.1f}s ago"] for w in workers]
    return table(["project", "host", "queue", "pid", "job", "wanted", "actual", "last seen"], rows)


def _switches_table(switches: list[Switch]) -> str:
    rows = [[s.project or "''", s.host, s.queue, s.desired, s.policy if s.desired == control.OFF else "-",
             s.changed_by or "-", iso(s.changed_at)] for s in switches]
    return table(["switch: project", "host", "queue", "wanted", "policy", "by", "at"], rows)


def _worker_tally(workers: list[dict[str, Any]]) -> str:
    states: dict[str, int] = {}
    for worker in workers:
        states[worker["actual"]] = states.get(worker["actual"], 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(states.items())) or "-"


def _wanted(switch: Switch) -> str:
    by = f" by {switch.changed_by}" if switch.changed_by else ""
    return f"on{by}" if switch.desired == control.ON else f"off ({switch.policy}){by}"


def _word(flag: str, value: str) -> str:
    try:
        return names.check_name(flag, value)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (use the --all-... flag for every one)") from None


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment or the password database
        return ""
