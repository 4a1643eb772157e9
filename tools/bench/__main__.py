"""The command line of rowfleet's benchmark (``python -m tools.bench``, ``python make.py bench``).

Owns the registry of sections (``SECTIONS``: name -> what measures it and the legend lines
its rows need, in the order the table lists them), the options, and the run: one
temporary folder for every section, each section's rows added to one table, a failed
section turned into a FAILED row, then the table, the legend and a footer with the fsync
cost and the load average at the start and the end (every FULL row pays that fsync).
Progress goes to stderr; the table, legend and footer to stdout. It never asserts a target.

Usage: ``python -m tools.bench [--quick] [--section NAME[,NAME]]... [--claim-rows N,N]
[--rounds N] [--jobs N] [--samples N] [--fleet-size N] [--dir PARENT] [NAME ...]``: sections named
positionally or with ``--section`` (``--only`` is the same option) run alone, in the
table's order; none named runs them all. Exit 0 when every section ran, 1 when one
failed, 2 for a bad option (one line on stderr).

The only module that imports the sections; they import the harness, never this module.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sqlite3
import sys
import time
from typing import Any, Callable

from . import cpu, dag, fleet, flow, gpu, harness, metrics, panel, peers, pg_fleet, postgres, sqlite, status, telemetry, wait, walpages
from .harness import Bench, Lab, Row, progress

import rowfleet
from rowfleet.cli import Parser, UsageError, positive_int


@dataclasses.dataclass(frozen=True)
class Section:
    """One section of the table: ``run`` measures and adds its rows with ``bench.add(Row(...))``;
    ``legend`` is the legend lines those rows need (sections that share them name the same text)."""

    run: Callable[[Bench], None]
    legend: str


SECTIONS: dict[str, Section] = {
    "enqueue": Section(sqlite.enqueue, sqlite.LEGEND),
    "batch": Section(sqlite.batch, sqlite.LEGEND),
    "roundtrip": Section(sqlite.roundtrip, sqlite.LEGEND),
    "peers": Section(peers.run, peers.LEGEND),
    "cpu": Section(cpu.run, cpu.LEGEND),
    "wake": Section(sqlite.wake, sqlite.LEGEND),
    "wait": Section(wait.run, wait.LEGEND),
    "flow": Section(flow.run, flow.LEGEND),
    "claim": Section(sqlite.claim, sqlite.LEGEND),
    "walpages": Section(walpages.run, walpages.LEGEND),
    "fleet": Section(fleet.run, fleet.LEGEND),
    "status": Section(status.run, status.LEGEND),
    "metrics": Section(metrics.scrape, metrics.LEGEND),
    "panel": Section(panel.run, panel.LEGEND),
    "dag": Section(dag.run, dag.LEGEND),
    "gpu": Section(gpu.run, gpu.LEGEND),
    "sampler": Section(telemetry.sampler, telemetry.LEGEND),
    "postgres": Section(postgres.run, postgres.LEGEND),
    "pgfleet": Section(pg_fleet.run, pg_fleet.LEGEND),
}


def parse_rows(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part.strip().replace("_", "")) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated row counts, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive row counts, got {text!r}")
    return values


def parse_sections(text: str) -> tuple[str, ...]:
    """Comma-separated section names, each one of ``SECTIONS``."""
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    return chosen


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="bench", description="Benchmark rowfleet against bare SQLite "
                                     "loops on temporary files; prints one table. Asserts nothing.")
    parser.add_argument("names", nargs="*", type=parse_sections, metavar="SECTION",
                        help=f"sections to run, as --section names them (default all: {', '.join(SECTIONS)})")
    parser.add_argument("--peers", action="store_true",
                        help="also run the peers section: Huey's real consumer (and pgqueuer's, on PostgreSQL) "
                             "beside rowfleet's real worker (installs them into a venv under the cache folder "
                             "once; needs network then)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes and no 1M-row claim test: a sanity run of well under a minute")
    parser.add_argument("--section", "--only", dest="sections", type=parse_sections, action="append",
                        default=[], metavar="NAME[,NAME]",
                        help=f"run this section (repeat, or separate by commas; default all: {','.join(SECTIONS)})")
    parser.add_argument("--claim-rows", type=parse_rows, metavar="N,N,...",
                        help="queue depths for the claim latency (default 10000,100000,1000000)")
    parser.add_argument("--rounds", type=positive_int, metavar="N",
                        help="rounds per comparison (default 3; 1 with --quick)")
    parser.add_argument("--jobs", type=positive_int, metavar="N",
                        help="jobs queued before each round-trip run (default 40000)")
    parser.add_argument("--samples", type=positive_int, metavar="N", help="wake-latency samples (default 200)")
    parser.add_argument("--fleet-size", type=positive_int, metavar="N",
                        help="idle worker processes of the pgfleet section (default 100; 20 with --quick)")
    parser.add_argument("--dir", metavar="PARENT", help="make the temporary folder here (default: the "
                        "system's); its filesystem decides what an fsync costs")
    return parser


def chosen_sections(args: argparse.Namespace) -> list[str]:
    """The sections named (positionally or by --section), in the table's order; all if none."""
    named = {name for names in [*args.names, *args.sections] for name in names}
    return [name for name in SECTIONS if not named or name in named]


def sizes_of(args: argparse.Namespace) -> harness.Sizes:
    sizes = harness.QUICK if args.quick else harness.Sizes()
    changes: dict[str, Any] = {}
    if args.claim_rows:
        changes["claim_rows"] = args.claim_rows
    if args.rounds:
        changes.update(rounds=args.rounds, roundtrip_rounds=args.rounds, dag_rounds=args.rounds)
    if args.jobs:
        changes["roundtrip_jobs"] = args.jobs
    if args.samples:
        changes["wake_samples"] = args.samples
    if args.fleet_size:
        changes["pg_fleet_workers"] = args.fleet_size
    return dataclasses.replace(sizes, **changes)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:  # one line, as the rowfleet command line answers
        print(exc, file=sys.stderr)
        return 2
    names = chosen_sections(args)
    harness.compile_sources()
    lab = Lab(args.dir)
    bench = Bench(lab, sizes_of(args), peers=args.peers)
    started = time.monotonic()
    load_before, fsync_before = os.getloadavg()[0], harness.fsync_micros(lab.root)
    progress(f"working in {lab.root}; fsync {fsync_before:,.0f} us, load average {load_before:.2f}")
    failed = []
    try:
        for name in names:
            try:
                SECTIONS[name].run(bench)
            except (RuntimeError, rowfleet.RowfleetError, sqlite3.Error, OSError) as exc:
                progress(f"{name} failed: {exc}")
                failed.append(name)
                bench.add(Row(name, "-", "-", "-", "-", f"FAILED: {exc}"))
        load_after, fsync_after = os.getloadavg()[0], harness.fsync_micros(lab.root)
    except KeyboardInterrupt:
        progress("interrupted: printing what was measured")
        failed.append("interrupted")
        load_after, fsync_after = os.getloadavg()[0], float("nan")
    finally:
        lab.remove()
    print(harness.render(bench.rows))
    print()
    print(harness.legend([SECTIONS[name].legend for name in names]))
    print()
    revision = harness.revision()
    where = f"rowfleet {rowfleet.__version__}" + (f" at {revision}" if revision else "")
    print(f"{where}; SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"{'--quick; ' if args.quick else ''}{time.monotonic() - started:.0f} s in all.")
    print(f"fsync of 4 KB in the temp folder: median {fsync_before:,.0f} us before, {fsync_after:,.0f} us after; "
          f"load average {load_before:.2f} before, {load_after:.2f} after.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
