"""Periodic jobs: ``scheduler`` fires the schedules of files and apps, ``schedules`` shows
what the database knows of them."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from rowfleet import config as configuration
from rowfleet import exitcodes
from rowfleet.cli.arguments import Parser, allow_module_flag, positive_int, trusted, vetted_schedules
from rowfleet.cli.output import print_json, table
from rowfleet.errors import ConfigError
from rowfleet.job import iso
from rowfleet.services import runner
from rowfleet.services.scheduler import Scheduler
from rowfleet.store import open_store


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("scheduler", cmd_scheduler, "enqueue one job per due slot of each schedule, exactly once "
                  "however many schedulers run", reads=("database", "connection", "scheduler"))
    sub.add_argument("--schedule", action="append", default=[], metavar="FILE",
                     help="a JSON file: a list of schedules (repeatable)")
    sub.add_argument("--app", action="append", default=[], metavar="MODULE",
                     help="import this module, so its @rowfleet.periodic schedules register and the tasks the "
                          "schedules name are checked here (repeatable)")
    allow_module_flag(sub)
    sub.add_argument("--once", action="store_true", help="one tick: fire what is due, print it, exit")
    sub.add_argument("--json", action="store_true", help="with --once, print what fired as JSON")

    sub = command("schedules", cmd_schedules, "each schedule the database knows: its newest slot and the "
                  "slots fired lately, with their jobs", reads=("database",))
    sub.add_argument("--limit", type=positive_int, default=5, help="slots shown per schedule (default 5)")
    sub.add_argument("--json", action="store_true")


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
        print(table(["schedule", "slot", "job"], [[f["name"], f["slot"], f["job_id"]] for f in fired]))
    else:
        print("nothing was due")


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
        print(table(["schedule", "slot", "job", "fired by"], _rows(shown)))
        for each in shown:
            if each["unreadable"]:
                print(f"! schedule {each['name']} is unreadable (it does not fire): {each['unreadable']}")
    return exitcodes.OK


def _rows(shown: list[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for each in shown:
        pruned = [{"slot": each["last_slot"], "job_id": "-", "fired_by": "-"}]  # its records are gone
        rows += [[each["name"], slot["slot"], slot["job_id"], slot["fired_by"]] for slot in each["recent"] or pruned]
    return rows


def _slot_dict(row: dict[str, Any]) -> dict[str, Any]:
    return {"slot": iso(row["slot"]), "job_id": row["job_id"], "fired_at": iso(row["fired_at"]),
            "fired_by": row["fired_by"]}
