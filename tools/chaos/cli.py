"""``python make.py chaos``: storm the built archive, then judge what is left.

Owns the tool's command line and its flow: make sure ``dist/rowfleet.pyz`` is built and
newer than ``src/``, make a fresh folder and database, ``init``, seed jobs and workflow
runs through the archive's API, start the fleet, storm it, wait (with a deadline) for
every job and run to finish, stop the fleet with SIGTERM, read the database, the
handlers' records and the processes' logs, and print the checker's table. The modes
(``--disk-full``, ``--clock-step``, ``--failover``, ``--partition``: ``modes.py``) add their
fault to the same storm. Exit codes: 0 all well, 1 a fault (a job lost or completed twice,
a stale write, a node enqueued twice, an unexplained overlap, a child's exit no storm
causes, a traceback), 2 bad input or a storm that could not be set up, 3 a mode that cannot
run here (not root, a tool missing), said in one line. Imports nothing from rowfleet.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import check, database, modes
from .storm import Episode, Fleet, Storm, Timing, fleet_env

ROOT = Path(__file__).resolve().parent.parent.parent
PYZ = ROOT / "dist" / "rowfleet.pyz"
HERE = Path(__file__).resolve().parent
SQLITE_FILE = "jobs.db"
SETTLE_POLL = 0.25
OK, FAULT, BAD_INPUT, SKIPPED = 0, 1, 2, 3
LONGEST_STEP = 86_400  # a step of more than a day is taken as the new time, not held: no storm of ours


class UsageError(Exception):
    """Input the tool cannot work with; the message says what to change."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, as every rowfleet command
        raise UsageError(message)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="python make.py chaos", description=(
        "Storm the built dist/rowfleet.pyz (SIGKILLed workers, a killed orchestrator, a worker "
        "frozen past its lease, on PostgreSQL a server restart; the modes add a full disk, a clock "
        "step, a failover, a network partition) and check that no job was lost or completed twice, "
        "naming every worker child's exit code. Exit 0 pass, 1 a fault, 2 bad input, 3 a mode that "
        "cannot run here."))
    parser.add_argument("--jobs", type=int, default=2000, help="standalone jobs to enqueue (default 2000)")
    parser.add_argument("--runs", type=int, default=20, help="workflow runs to start (default 20)")
    parser.add_argument("--width", type=int, default=4, help="items of each run's map node (default 4)")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the storm (default 60)")
    parser.add_argument("--procs", type=int, default=4, help="worker processes under the supervisor (default 4)")
    parser.add_argument("--batch", type=int, default=1, metavar="N",
                        help="the workers' --batch N: claim N jobs at a time and write their outcomes together "
                             "(default 1), so that kills land while outcomes are held")
    parser.add_argument("--job-ms", type=float, default=None,
                        help="milliseconds each handler takes (default: enough that the work spans the storm)")
    parser.add_argument("--settle", type=float, default=180.0,
                        help="seconds after the storm for every job and run to finish (default 180)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the storm's random choices")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--db", help="a postgresql:// URL to storm instead of a fresh SQLite file "
                                    "(its jobs and runs tables should be empty)")
    where.add_argument("--postgres", action="store_true",
                       help="start a throwaway PostgreSQL server (as the tests do) and restart it mid-storm")
    where.add_argument("--recheck", metavar="FOLDER", help="only judge a storm folder kept earlier")
    parser.add_argument("--pg-restart-cmd", metavar="CMD",
                        help="with --db: a shell command that restarts that server at once, run mid-storm")
    parser.add_argument("--folder", help="put the storm's files here (kept); default a temp folder, "
                                         "removed after a pass")
    parser.add_argument("--disk-full", action="store_true",
                        help="SQLite: the database on a small tmpfs (root), filled by a ballast file a third into "
                             "the storm and freed a third later")
    parser.add_argument("--clock-step", type=int, metavar="SECONDS",
                        help="SQLite: every fleet process under libfaketime, its clock stepped by SECONDS "
                             "(e.g. -600 or 600) at half time")
    parser.add_argument("--failover", nargs="?", const="stop", choices=("stop", "vanish"),
                        help="PostgreSQL: a primary and a synchronous standby, the fleet on the multi-host URL; at "
                             "half time the primary is stopped (-m immediate; 'vanish': iptables drops its "
                             "packets, root) and the standby promoted")
    parser.add_argument("--partition", action="store_true",
                        help="PostgreSQL (root): a second worker box in a network namespace, cut off silently "
                             "(iptables DROP) for three leases a quarter into the storm, then healed")
    args = parser.parse_args(argv)
    _validate(args)
    return args


def _validate(args: argparse.Namespace) -> None:
    for name, least in (("jobs", 1), ("runs", 0), ("width", 1), ("procs", 1), ("batch", 1)):
        if getattr(args, name) < least:
            raise UsageError(f"--{name} must be at least {least}, got {getattr(args, name)}")
    for name in ("seconds", "settle"):
        if not getattr(args, name) > 0:
            raise UsageError(f"--{name} must be more than 0 seconds, got {getattr(args, name)}")
    if args.job_ms is not None and not 0 <= args.job_ms <= 60_000:
        raise UsageError(f"--job-ms must be between 0 and 60000, got {args.job_ms}")
    if args.db is not None and not database.is_postgres(args.db):
        raise UsageError(f"--db must be a postgresql:// URL (SQLite storms use a fresh file), got {args.db!r}")
    if args.pg_restart_cmd and args.db is None:
        raise UsageError("--pg-restart-cmd needs --db URL (with --postgres the tool restarts its own server)")
    if args.folder and Path(args.folder).exists() and any(Path(args.folder).iterdir()):
        raise UsageError(f"--folder {args.folder} is not empty; name a new or empty folder")
    _validate_modes(args)
    if args.recheck and not (Path(args.recheck) / "seed.json").is_file():
        raise UsageError(f"--recheck {args.recheck}: no seed.json there; name a folder a storm kept")


def _validate_modes(args: argparse.Namespace) -> None:
    sqlite = [flag for flag, on in (("--disk-full", args.disk_full), ("--clock-step", args.clock_step is not None))
              if on]
    postgres = [flag for flag, on in (("--failover", args.failover), ("--partition", args.partition)) if on]
    if args.recheck and (sqlite or postgres):
        raise UsageError(f"--recheck judges a kept folder; {' '.join(sqlite + postgres)} storms a new one")
    if args.clock_step is not None and not 0 < abs(args.clock_step) <= LONGEST_STEP:
        raise UsageError(f"--clock-step must be a step of 1 to {LONGEST_STEP} seconds, either way, "
                         f"got {args.clock_step}")
    if sqlite and (postgres or args.db or args.postgres):
        other = postgres[0] if postgres else "--db" if args.db else "--postgres"
        raise UsageError(f"{sqlite[0]} storms a SQLite file; it cannot go with {other}")
    if len(postgres) > 1:
        raise UsageError("--failover and --partition each start servers of their own; run them one at a time")
    if postgres and (args.db or args.postgres):
        raise UsageError(f"{postgres[0]} starts servers of its own; it cannot go with {'--db' if args.db else '--postgres'}")


def job_ms(args: argparse.Namespace) -> float:
    """Handler time that keeps the workers busy for most of the storm, within 5-500 ms.

    >>> job_ms(argparse.Namespace(job_ms=None, procs=4, seconds=60.0, jobs=2000, runs=20, width=4))
    84.9
    """
    if args.job_ms is not None:
        return args.job_ms
    total = args.jobs + args.runs * (args.width + 2)
    return round(min(500.0, max(5.0, 0.75 * 1000.0 * args.procs * args.seconds / total)), 1)


def stale_archive() -> str | None:
    """Why the archive must be built first, or None when it is newer than every source."""
    if not PYZ.is_file():
        return "it is missing"
    newest = max(p.stat().st_mtime for p in (ROOT / "src").rglob("*") if p.is_file())
    return "it is older than src/" if newest > PYZ.stat().st_mtime else None


def ensure_archive() -> None:
    reason = stale_archive()
    if reason is None:
        return
    print(f"chaos: building dist/rowfleet.pyz first ({reason}): python make.py build", flush=True)
    if subprocess.call([sys.executable, str(ROOT / "make.py"), "build"], cwd=ROOT) != 0:
        raise UsageError("python make.py build failed; fix the build, then run chaos again")


# --- one storm ---------------------------------------------------------------------------


def prepare(folder: Path, db: str) -> None:
    """The folder the fleet runs in: the handlers, the workflow, the records, the schema."""
    (folder / "records").mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "chaos_tasks.py", folder / "chaos_tasks.py")
    shutil.copy(HERE / "workflow.json", folder / "workflow.json")
    _archive(folder, db, "init")


def _archive(folder: Path, db: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(PYZ), "--db", db, *args], cwd=folder, env=fleet_env(folder),
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise UsageError(f"rowfleet {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout


def seed(folder: Path, db: str, args: argparse.Namespace, staged: tuple[modes.Mode, ...] = ()) -> dict:
    """Enqueue the jobs and start the runs through the archive; the ids, saved as seed.json."""
    env = fleet_env(folder)
    env["PYTHONPATH"] = f"{PYZ}:{folder}"
    command = [sys.executable, str(HERE / "seed.py"), db, str(args.jobs), str(args.runs), str(args.width),
               str(job_ms(args)), str(folder / "workflow.json"),
               *(extra for mode in staged for extra in mode.seed_args(Timing(seconds=args.seconds)))]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise UsageError(f"seeding the storm failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
    # A SQLite database is named relative to its folder, so a copied folder judges its own copy.
    postgres = database.is_postgres(db)
    printed = json.loads(done.stdout)
    names = [mode.name for mode in staged]
    seeded = {"db": db if postgres else SQLITE_FILE, "runs": printed["runs"], "postgres": postgres,
              "jobs": [row["id"] for row in database.query(db, database.STANDALONE_IDS)],
              "modes": names, "box_host": modes.BOX_HOST if "partition" in names else "", "hold": printed["hold"]}
    (folder / "seed.json").write_text(json.dumps(seeded))
    return seeded


def settle(db: str, deadline: float) -> float:
    """Wait until every job and run is terminal, or the deadline; the seconds it took."""
    started = time.monotonic()
    while database.unfinished(db) and time.monotonic() - started < deadline:
        time.sleep(SETTLE_POLL)
    return time.monotonic() - started


def storm(args: argparse.Namespace, folder: Path) -> check.Report:
    server, restart = _database(args)
    staged: list[modes.Mode] = []
    try:
        staged = modes.build(args, folder)
        chosen = [found for mode in staged if (found := mode.database(folder))]
        db = args.db or (server.url if server else chosen[0] if chosen else str(folder / SQLITE_FILE))
        prepare(folder, db)
        names = tuple(mode.name for mode in staged)
        seeded = seed(folder, db, args, tuple(staged))
        print(f"chaos: {len(seeded['jobs'])} jobs and {len(seeded['runs'])} runs ({job_ms(args)} ms each) on "
              f"{'PostgreSQL' if seeded['postgres'] else 'SQLite'}; storming {args.seconds:.0f}s in {folder}"
              + (f" with {', '.join(names)}" if names else ""), flush=True)
        timing = Timing(seconds=args.seconds)
        env = fleet_env(folder)
        for mode in staged:
            env = mode.environment(env)
        fleet = Fleet(PYZ, db, folder, args.procs, timing, env, batch=args.batch)
        try:
            for mode in staged:
                mode.started(fleet, seeded)
            episodes = [episode for mode in staged for episode in mode.episodes(fleet, timing)]
            if restart is not None:
                episodes.append(Episode("restart-db", args.seconds / 2, restart))
            Storm(fleet, timing, random.Random(args.seed), episodes).run()
            waited = settle(_reader(staged, db), args.settle)
        finally:
            clean = fleet.stop()
        for mode in staged:
            mode.stopped(folder)
        report = judge(folder, _reader(staged, db))
        report.rows.append(check.Row("settled after the storm", f"{waited:.1f}s"))
        report.rows.append(check.Row("SIGTERM shutdown", "clean" if clean else "NOT clean",
                                     detail="" if clean else "see process-*.log"))
        return report
    finally:
        for mode in reversed(staged):
            mode.close()
        if server is not None:
            server.stop()


def _reader(staged: list[modes.Mode], db: str) -> str:
    for mode in staged:
        db = mode.reader(db)
    return db


def _database(args: argparse.Namespace):
    """(the throwaway server or None, the immediate restart to run mid-storm or None)."""
    if args.postgres:
        from .postgres import LocalServer

        try:
            server = LocalServer()
        except RuntimeError as exc:
            raise UsageError(str(exc)) from None
        return server, server.restart_immediately
    if args.pg_restart_cmd:
        from .postgres import CommandRestart

        return None, CommandRestart(args.pg_restart_cmd).restart_immediately
    return None, None


def judge(folder: Path, reader: str | None = None) -> check.Report:
    """Read a storm folder, its database (through ``reader`` where given) and its logs; the
    checker's report."""
    seeded = json.loads((folder / "seed.json").read_text())
    db = reader or (seeded["db"] if seeded["postgres"] else str(folder / seeded["db"]))
    records = [record for path in sorted((folder / "records").glob("*.jsonl"))
               for record in check.parse_records(path.read_text())]
    log = folder / "storm.jsonl"
    actions = [check.Action(**json.loads(line)) for line in log.read_text().splitlines() if line] \
        if log.exists() else []
    evidence = check.Evidence(enqueued=seeded["jobs"], run_ids=seeded["runs"],
                              jobs=database.query(db, database.JOBS),
                              completions=database.query(db, database.COMPLETIONS),
                              runs=database.query(db, database.RUNS), records=records, actions=actions,
                              db_restarts_wanted=seeded["postgres"] and not seeded.get("modes"),
                              modes=tuple(seeded.get("modes", ())), box_host=seeded.get("box_host", ""))
    _read_exits(folder, db, evidence)
    return check.check(evidence)


def _read_exits(folder: Path, db: str, evidence: check.Evidence) -> None:
    """How every worker child ended (the workers table, else the supervisors' logs), the
    archive's words for each code, and any traceback in the fleet's logs."""
    logs = {path.name: path.read_text(errors="replace") for path in sorted(folder.glob("process-*.log"))}
    logged: dict[int, int] = {}
    flagged: set[int] = set()
    for text in logs.values():
        codes, killed = check.supervisor_exits(text)
        logged.update(codes)
        flagged |= killed
    evidence.exits = check.child_exits(database.query(db, database.WORKERS), logged)
    evidence.flagged = frozenset(flagged)
    evidence.meanings = exit_meanings(sorted({e.code for e in evidence.exits if e.code is not None and e.code >= 0}))
    evidence.tracebacks = [found for name, text in logs.items() for found in check.tracebacks(name, text)]


def exit_meanings(codes: list[int]) -> dict[int, str]:
    """The archive's own words for each exit code (``rowfleet.exitcodes.meaning``), asked of
    the built archive in a child process; {} where it cannot answer (the checker then says
    "exit code N")."""
    if not codes or not PYZ.is_file():
        return {}
    env = fleet_env(Path(tempfile.gettempdir()))
    env["PYTHONPATH"] = str(PYZ)
    script = ("import json, sys\nfrom rowfleet import exitcodes\n"
              "print(json.dumps({c: exitcodes.meaning(int(c)) for c in sys.argv[1:]}))")
    try:
        done = subprocess.run([sys.executable, "-c", script, *map(str, codes)], env=env, capture_output=True,
                              text=True, timeout=60)
        return {int(code): text for code, text in json.loads(done.stdout).items()} if done.returncode == 0 else {}
    except (OSError, ValueError, subprocess.SubprocessError):
        return {}


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        if args.recheck:
            report = _recheck(Path(args.recheck))
        else:
            ensure_archive()
            report = _storm_in_folder(args)
    except UsageError as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return BAD_INPUT
    except modes.Skip as exc:
        print(f"chaos: SKIPPED {exc}", file=sys.stderr)
        return SKIPPED
    except KeyboardInterrupt:
        return 130
    print(check.render(report), flush=True)
    return FAULT if report.failed else OK


def _recheck(folder: Path) -> check.Report:
    from .postgres import Unreachable  # psycopg itself only where a PostgreSQL URL is read

    try:
        return judge(folder)
    except Unreachable as exc:
        raise UsageError(f"--recheck {folder}: {exc} (a server the storm started itself is gone once it "
                         f"ends; a --db storm's folder can be judged again while that server runs)") from None


def _storm_in_folder(args: argparse.Namespace) -> check.Report:
    folder = Path(args.folder) if args.folder else Path(tempfile.mkdtemp(prefix="rowfleet-chaos-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        report = storm(args, folder.resolve())
    except modes.Skip:
        if args.folder is None:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    if args.folder is None and not report.failed:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        print(f"chaos: the storm's files are kept in {folder}", flush=True)
    return report
