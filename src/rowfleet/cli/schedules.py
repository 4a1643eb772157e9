"""Periodic jobs: ``scheduler`` fires the schedules of files and apps, ``fire`` fires one of
them now for an operator, ``schedules`` shows what the database knows of them."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from rowfleet import config as configuration
from rowfleet import exitcodes
from rowfleet.cli.arguments import (Parser, allow_module_flag, asker, positive_int, trusted, typed,
                                    vetted_schedules)
from rowfleet.cli.output import print_json, table
from rowfleet.errors import ConfigError, Conflict
from rowfleet.job import iso
from rowfleet.services import runner
from rowfleet.services.scheduler import Scheduler, fire_now
from rowfleet.store import open_store


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("scheduler", cmd_scheduler, "enqueue one job per due slot of each schedule, exactly once "
                  "however many schedulers run", reads=("database", "connection", "scheduler"))
    _schedule_sources(sub)
    sub.add_argument("--once", action="store_true", help="one tick: fire what is due, print it, exit")
    sub.add_argument("--json", action="store_true", help="with --once, print what fired as JSON")

    sub = command("fire", cmd_fire, "fire a schedule now, as an operator: its job, with reason manual, "
                  "enqueued once for this moment; print its id", reads=("database",))
    sub.add_argument("name", metavar="NAME", type=typed("schedule name"),
                     help="the schedule, as its file or its app's @rowfleet.periodic names it")
    _schedule_sources(sub)
    sub.add_argument("--by", type=typed("by"), help="who fires it, recorded on the slot (default: this user)")
    sub.add_argument("--json", action="store_true", help="print what fired as JSON")

    sub = command("schedules", cmd_schedules, "each schedule the database knows: its newest slot and the "
                  "slots fired lately, with their jobs", reads=("database",))
    sub.add_argument("--limit", type=positive_int, default=5, help="slots shown per schedule (default 5)")
    sub.add_argument("--json", action="store_true")


def _schedule_sources(sub: Parser) -> None:
    """Where a command reads the schedules: ``--schedule FILE`` and ``--app MODULE``, as the scheduler does."""
    sub.add_argument("--schedule", action="append", default=[], metavar="FILE",
                     help="a JSON file: a list of schedules (repeatable)")
    sub.add_argument("--app", action="append", default=[], metavar="MODULE",
                     help="import this module, so its @rowfleet.periodic schedules register and the tasks the "
                          "schedules name are checked here (repeatable)")
    allow_module_flag(sub)


def cmd_scheduler(args: argparse.Namespace, config: configuration.Config) -> int:
    config = trusted(config, args)
    schedules = vetted_schedules(args.schedule, args.app, config.allow_modules)
    if not schedules:
        raise ConfigError("no schedules to run: give --schedule FILE (a JSON list of schedules) or --app MODULE "
                          "(a module with @rowfleet.periodic functions)")
    if not args.once:
        return runner.run_scheduler(config, schedules)
    with open_store(config) as store:
        store.require_schema()
        _show_fired([fired.to_dict() for fired in Scheduler(config, schedules, store).run_once()], args.json)
    return exitcodes.OK


def _show_fired(fired: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json(fired)
    elif fired:
        print(table(["schedule", "slot", "why", "job"],
                    [[f["name"], f["slot"], f["reason"], f["job_id"]] for f in fired]))
    else:
        print("nothing was due")


def cmd_fire(args: argparse.Namespace, config: configuration.Config) -> int:
    config = trusted(config, args)
    # Before the database is opened: an unknown name writes nothing.
    schedule, = vetted_schedules(args.schedule, args.app, config.allow_modules, name=args.name)
    with open_store(config) as store:
        store.require_schema()
        fired = fire_now(store, config.project, schedule, asker(args.by))
    if fired is None:  # a scheduler whose clock runs ahead fired a later slot
        raise Conflict(f"schedule {schedule.name!r} was not fired: a slot as late as this moment has fired "
                       f"already; see rowfleet schedules")
    if args.json:
        print_json(fired.to_dict())
    else:
        print(fired.job_id)
    return exitcodes.OK


def cmd_schedules(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        store.require_schema()
        shown = [{"name": row.name, "last_slot": iso(row.last_slot), "unreadable": row.unreadable,
                  "recent": [_slot_dict(slot) for slot in store.reads.fired_slots(config.project, row.name, args.limit)]}
                 for row in store.schedule_rows(config.project)]
    if args.json:
        print_json(shown)
    elif not shown:
        print("no schedule has fired yet")
    else:
        print(table(["schedule", "slot", "why", "job", "fired by"], _rows(shown)))
        for each in shown:
            if each["unreadable"]:
                print(f"! schedule {each['name']} is unreadable (it does not fire): {each['unreadable']}")
    return exitcodes.OK


def _rows(shown: list[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for each in shown:
        pruned = [{"slot": each["last_slot"], "reason": "-", "job_id": "-", "fired_by": "-"}]  # its records are gone
        rows += [[each["name"], slot["slot"], slot["reason"] or "-", slot["job_id"], slot["fired_by"]]
                 for slot in each["recent"] or pruned]
    return rows


def _slot_dict(row: dict[str, Any]) -> dict[str, Any]:
    return {"slot": iso(row["slot"]), "reason": row["reason"], "job_id": row["job_id"],
            "fired_at": iso(row["fired_at"]), "fired_by": row["fired_by"]}
