"""The models command: per model of the project, its jobs queued, running and unplaceable
(with the reasons), the GPU workers that hold it warm and since when, its measured load
time and footprint, and the last hour's warm-hit rate and reloads, rendering the models'
read model (``rowfleet.views.snapshot.models``). A model whose figures plain SQL made unreadable
is listed with those figures unknown and a line naming each, as ``jobs`` shows a job's."""

from __future__ import annotations

import argparse
from typing import Callable, Iterable

from rowfleet import config as configuration
from rowfleet import exitcodes
from rowfleet.cli.arguments import Parser
from rowfleet.cli.output import print_json, say, table
from rowfleet.job import iso
from rowfleet.store import open_store
from rowfleet.views.snapshot import MODEL_WINDOW, Holder, ModelView, models


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("models", cmd_models, "each model's jobs, where it is warm, its load figures and "
                  f"warm hits over the last {MODEL_WINDOW / 3600:.0f} hour", reads=("database",))
    sub.add_argument("--json", action="store_true")


def cmd_models(args: argparse.Namespace, config: configuration.Config) -> int:
    with open_store(config) as store:
        store.require_schema()
        view = models(store, config.project)
    if args.json:
        print_json(view.to_dict())
        return exitcodes.OK
    rows = [[m.model, m.queued, m.running, _reasons(m), _holders(m.holders), _seconds(m.load_seconds),
             "-" if m.footprint_mb is None else f"{m.footprint_mb} MiB", _seconds(m.run_seconds), _hits(m),
             m.reloads] for m in view.models]
    print(table(["model", "queued", "running", "unplaceable", "warm on", "load", "footprint", "mean run",
                 "warm hits (1h)", "reloads (1h)"], rows) or "no models")
    for model in view.models:  # its unreadable figures are shown unknown ("-") above, and named here
        if model.unreadable:
            say(f"! model {model.model} is unreadable: {model.unreadable}")
    if view.capped:
        print(f"note: only the first {len(view.demand)} groups of model jobs were read")
    return exitcodes.OK


def _reasons(view: ModelView) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in view.unplaceable) or "-"


def _holders(holders: Iterable[Holder]) -> str:
    shown = [f"{h.worker_id} ({'loading' if h.loading else 'since ' + iso(h.since)})" for h in holders]
    return ", ".join(shown) or "-"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _hits(view: ModelView) -> str:
    rate = view.warm_hit_rate
    return "-" if rate is None else f"{rate:.0%} ({view.warm_claims}/{view.claims})"
