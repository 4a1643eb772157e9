"""What every section of rowfleet's benchmark shares: sizes, rows, timing, temp databases,
child processes, the throwaway PostgreSQL server, and the table they all print into.

Owns the row format (``Row``: benchmark, durability, rowfleet, baseline, ratio, note), the
table and the legend's opening and closing lines, so that every section's rows read alike;
the ``Bench`` each section is handed (the temporary ``Lab``, the ``Sizes``, a spawn
context, the rows measured so far); the helpers several sections repeat: timing in turns
(``paired``), percentiles and shares, the number formats, the handlers the workers import
(``TASK_SOURCE``), an idle worker that reports its CPU use over a pipe, starting children
at one start line and stopping them, and finding the PostgreSQL server
(``pg_server``) and its durability.

Must not import any section (tools/bench/sqlite.py, dag.py, postgres.py, ...) nor the
command line (__main__.py): sections import this module, never the reverse. Stdlib and
rowfleet only: it never imports psycopg, and loads tests/pg_harness.py only when a section
asks for a server. Puts ``<repo>/src`` on ``sys.path`` itself, so that the bench runs from a
checkout and so do the children it spawns.
"""

from __future__ import annotations

import compileall
import dataclasses
import math
import multiprocessing
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent.parent
SRC = ROOT / "src"
TESTS = ROOT / "tests"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from rowfleet import tasks  # noqa: E402  (needs the sys.path line above)
from rowfleet.config import Config  # noqa: E402
from rowfleet.store.sqlite import SQLiteStore  # noqa: E402
from rowfleet.worker.loop import Worker  # noqa: E402

QUEUE = "bench"
PROJECT = ""
TASK_MODULE = "rowfleet_bench_tasks"
NOOP = f"{TASK_MODULE}:noop"
STAMP = f"{TASK_MODULE}:stamp"
NUMBERS = f"{TASK_MODULE}:numbers"
EACH = f"{TASK_MODULE}:each"
TASK_SOURCE = textwrap.dedent('''\
    """Handlers for rowfleet's benchmark (written by tools/bench/harness.py)."""
    import time

    import rowfleet


    @rowfleet.task
    def noop():
        return None


    @rowfleet.task
    def stamp():
        return time.time()  # when the handler started: the wake benchmark reads it back


    @rowfleet.task
    def numbers(n):
        return list(range(n))  # the list a workflow's map node fans out over


    @rowfleet.task
    def each(item):
        return None  # a no-op that takes one map item
''')

# Puts the jobs a claim benchmark took back in rowfleet's queue; the same text on both databases.
REQUEUE_CLAIMED = """
UPDATE jobs SET state = 'queued', attempts = 0, claimed_by = NULL, lease_expires_at = NULL,
    started_at = NULL
WHERE state = 'running'
"""


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much work each section does; ``--quick`` shrinks everything."""

    enqueue_jobs: int = 3000          # per measurement, at most ...
    enqueue_seconds: float = 1.0      # ... and for at most this long
    rounds: int = 3                   # alternating bare/rowfleet rounds; the median counts
    batch_jobs: int = 100_000
    roundtrip_jobs: int = 40_000      # queued before each run; a run should not drain them
    roundtrip_window: float = 2.0     # seconds each round-trip run is timed over
    roundtrip_rounds: int = 3
    worker_counts: tuple[int, ...] = (1, 2, 4)
    wake_samples: int = 200
    storm_rate: float = 1000.0        # commits/s to another queue while an idle worker is timed
    polling_samples: int = 100
    idle_seconds: float = 3.0
    claim_rows: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    claims: int = 2000                # per measurement, at most ...
    claim_seconds: float = 2.0        # ... and for at most this long (100 claims at least)
    claim_warmup: int = 50            # claims not counted, on each fresh connection
    delayed_rows: int = 100_000       # not-yet-due jobs sorting ahead of 10k due ones
    walpages_jobs: int = 1000         # jobs each side of the WAL pages count finishes
    fleet_seconds: float = 10.0       # the idle fleet's CPU is summed over this long
    # postgres also uses worker_counts, roundtrip_rounds, wake_samples, claim_rows, claims,
    # claim_seconds and claim_warmup
    pg_roundtrip_jobs: int = 20_000   # queued in the template each round-trip run copies
    pg_roundtrip_window: float = 1.0  # seconds each round-trip run is timed over
    pg_load_batch: int = 100_000      # jobs per enqueue_many call when filling the claim queue
    dag_nodes: int = 1000             # N: root -> N nodes -> fan-in, and a map over N items
    dag_rounds: int = 3               # alternating rounds, the median counts
    pg_dag_nodes: int = 1000          # N of the fan-out on PostgreSQL (0: not measured)
    # pgfleet also uses fleet_seconds (its idle window)
    pg_fleet_workers: int = 100       # idle worker processes on one PostgreSQL server
    pg_fleet_wakes: int = 20          # jobs enqueued one at a time to the idle fleet
    pg_fleet_burst: int = 500         # jobs in one enqueue_many to the idle fleet
    flow_keyed_jobs: int = 20_000     # jobs over 10,000 keys, drained with a per-key limit and without
    flow_rate_window: float = 60.0    # seconds a rate limit is measured over
    flow_backlog: int = 50_000        # one key's jobs queued before the nine small keys' (fair share)
    flow_fair_window: float = 8.0     # seconds the fleet's jobs/s is counted over, with that backlog


QUICK = Sizes(enqueue_jobs=300, enqueue_seconds=0.3, rounds=1, batch_jobs=10_000, roundtrip_jobs=10_000,
              roundtrip_window=0.5, roundtrip_rounds=1, wake_samples=40, polling_samples=20,
              idle_seconds=1.0, claim_rows=(10_000, 100_000), claims=300, claim_seconds=0.5,
              delayed_rows=10_000, walpages_jobs=200, fleet_seconds=3.0, pg_roundtrip_jobs=10_000, pg_roundtrip_window=0.5,
              dag_nodes=100, dag_rounds=1, pg_dag_nodes=0, pg_fleet_workers=20, pg_fleet_wakes=10,
              pg_fleet_burst=200, flow_keyed_jobs=4_000, flow_rate_window=10.0, flow_backlog=5_000,
              flow_fair_window=2.0)


@dataclasses.dataclass
class Row:
    benchmark: str
    durability: str
    rowfleet: str
    baseline: str
    ratio: str
    note: str = ""


# --- small helpers -----------------------------------------------------------------------


def progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def count(value: float) -> str:
    return f"{value:,.0f}"


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs > 0 else "-"


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile.

    >>> percentile([1, 2, 3, 4], 0.5), percentile(list(range(1, 101)), 0.99)
    (2, 99)
    """
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(round(fraction * len(ordered), 9))))
    return ordered[rank - 1]


def shares(rounds: list[list[float]]) -> str:
    """Per-process shares in percent (each round sorted largest first), averaged over rounds.

    >>> shares([[60.0, 40.0], [50.0, 50.0]])
    '55/45'
    """
    return "/".join(f"{statistics.mean(column):.0f}" for column in zip(*rounds))


def rounds_note(n: int) -> str:
    """How many rounds a row's figure comes from, as its note says it.

    >>> rounds_note(3), rounds_note(1)
    ('median of 3 rounds', '1 round')
    """
    return f"median of {n} rounds" if n > 1 else "1 round"


def short(rows: int) -> str:
    """A row count as the table names it.

    >>> short(10_000), short(1_000_000), short(2500)
    ('10k', '1M', '2500')
    """
    if rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}M"
    if rows % 1000 == 0:
        return f"{rows // 1000}k"
    return str(rows)


def durability(settings: dict[str, str]) -> str:
    """The durability column for a PostgreSQL server's ``fsync`` and ``synchronous_commit``.

    >>> durability({"fsync": "off", "synchronous_commit": "off"}), durability({"fsync": "on",
    ... "synchronous_commit": "off"}), durability({"fsync": "on", "synchronous_commit": "on"})
    ('pg fsync=off', 'pg sync=off', 'pg sync=on')
    """
    if settings.get("fsync") == "off":
        return "pg fsync=off"
    return "pg sync=off" if settings.get("synchronous_commit") == "off" else "pg sync=on"


def paired(ours: Callable[[], Any], bare: Callable[[], Any], most: int, seconds: float, *,
           least: int = 100, warmup: int = 20, block: int = 25) -> tuple[list[float], list[float]]:
    """Seconds per call of ``ours`` and of ``bare``, the two taking turns in blocks of
    ``block`` calls so that both meet the same machine (a neighbour's load, a slow fsync).

    Stops after ``most`` calls each, or once ``seconds`` have passed and each has ``least``.
    """
    for _ in range(warmup):
        bare()
        ours()
    took: tuple[list[float], list[float]] = ([], [])
    deadline = time.perf_counter() + seconds
    clock = time.perf_counter
    while len(took[0]) < most and (len(took[0]) < least or clock() < deadline):
        for op, into in ((bare, took[1]), (ours, took[0])):
            for _ in range(min(block, most - len(into))):
                start = clock()
                op()
                into.append(clock() - start)
    return took


def claim_micros(ours: tuple[Any, Any], bare: tuple[Any, Any], sizes: "Sizes") -> tuple[float, float, int]:
    """Median microseconds of ``Store.claim`` for two (store, Claim) pairs taking turns
    (``paired``), and how many calls each median is of; a claim that finds nothing means
    the file ran out of queued jobs."""
    def claimer(store: Any, claim: Any) -> Callable[[], None]:
        def claim_one() -> None:
            if store.claim(claim) is None:
                raise RuntimeError("the claim benchmark ran out of queued jobs")
        return claim_one

    return medians(*paired(claimer(*ours), claimer(*bare), sizes.claims, sizes.claim_seconds,
                           warmup=sizes.claim_warmup))


def medians(mine: list[float], theirs: list[float]) -> tuple[float, float, int]:
    """Median microseconds of two lists of seconds, and how many calls the shorter holds."""
    return statistics.median(mine) * 1e6, statistics.median(theirs) * 1e6, min(len(mine), len(theirs))


def fsync_micros(folder: str, seconds: float = 0.5) -> float:
    """Median microseconds of ``fsync`` after a 4 KB write in ``folder`` (what a FULL commit waits on)."""
    path = os.path.join(folder, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    took = []
    try:
        deadline = time.perf_counter() + seconds
        while len(took) < 200 and (len(took) < 10 or time.perf_counter() < deadline):
            os.pwrite(fd, b"\0" * 4096, 4096 * (len(took) % 16))
            start = time.perf_counter()
            os.fsync(fd)
            took.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(took) * 1e6


def compile_sources() -> None:
    """Write the bytecode of rowfleet's sources, as installing a package does (pip compiled
    each peer's): a process started from ``src/`` with no bytecode, or with bytecode older
    than its sources, compiles every module it imports first, and the start-up rows would
    time the compiler (a third of a worker's start here), not rowfleet."""
    compileall.compile_dir(str(SRC / "rowfleet"), quiet=1)


def revision() -> str:
    """The checkout's commit, marked when the working tree has changes; '' without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("+changes in src" if dirty else "")


class Lab:
    """The temporary folder: one subfolder per database, so no benchmark's writes wake
    another's worker. Holds the no-op task module the workers import."""

    def __init__(self, parent: str | None) -> None:
        self.root = tempfile.mkdtemp(prefix="rowfleet-bench-", dir=parent)
        self._n = 0
        self.task_dir = os.path.join(self.root, "app")
        os.mkdir(self.task_dir)
        with open(os.path.join(self.task_dir, TASK_MODULE + ".py"), "w", encoding="utf-8") as f:
            f.write(TASK_SOURCE)

    def folder(self, label: str) -> str:
        self._n += 1
        folder = os.path.join(self.root, f"{self._n:03d}-{label}")
        os.mkdir(folder)
        return folder

    def database(self, label: str, template: str | None = None) -> str:
        """A fresh database in its own folder: a copy of ``template``, or newly migrated."""
        path = os.path.join(self.folder(label), "jobs.db")
        if template is not None:
            shutil.copyfile(template, path)
            return path
        with SQLiteStore(path, Config(db=path, project=PROJECT), create=True) as store:
            store.migrate()
        return path

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class Bench:
    """One run of the benchmark, handed to every section: where its databases go (``lab``),
    how big each measurement is (``sizes``), how children are started (``mp``: spawn, so a
    child never inherits a parent's open database), whether the real peers run
    (``peers``, ``--peers``), and the rows measured so far."""

    def __init__(self, lab: Lab, sizes: Sizes, peers: bool = False) -> None:
        self.lab = lab
        self.sizes = sizes
        self.peers = peers
        self.mp = multiprocessing.get_context("spawn")
        self.rows: list[Row] = []

    def add(self, row: Row) -> None:
        self.rows.append(row)


# --- child processes (module level: spawned children import this file) ------------------


def import_tasks(task_dir: str) -> None:
    """Register the bench's handlers (``TASK_SOURCE``) in this process."""
    tasks.import_apps([TASK_MODULE], task_dir)


# The batch a prefetching worker claims in the round-trip rows (worker --prefetch N).
PREFETCH = 10
# How a round trip's rowfleet workers take their jobs ('': one a claim): each the Worker's options.
CLAIMING = {"": {}, "--prefetch": {"prefetch": PREFETCH}, "--batch": {"batch": PREFETCH}}

# How an idle SQLite worker hears of work: its doorbells and the WAL watch (as shipped); the
# WAL watch alone (no bells, as before doorbells: every commit wakes it); no push path at all
# (as on a system without inotify: a nap between data_version checks).
WATCHES = ("bells", "wal", "polling")


def idle_worker(path: str, task_dir: str, watch: str, control: Any) -> None:
    """A long-running worker (safety poll 1 s) that answers ``control`` (``answer_cpu_requests``),
    hearing of work as ``watch`` (one of ``WATCHES``) says."""
    import_tasks(task_dir)
    if watch != "bells":
        from rowfleet.store import wake

        switch = "_watch_bells" if watch == "wal" else "_inotify_init"
        if not hasattr(wake, switch):
            raise RuntimeError(f"rowfleet.store.wake.{switch} is gone: update the bench's {watch} switch")
        setattr(wake, switch, lambda *where: None)
    worker = Worker(Config(db=path, project=PROJECT, poll=1.0), QUEUE)
    answer_cpu_requests(control, worker.request_stop)
    worker.run()


def configure_api(db: str, **settings: Any) -> None:
    """rowfleet's API on ``db`` in the bench's project, trusting the bench's task module as
    the bench's workers do (so an enqueue by name is not warned about)."""
    import rowfleet

    rowfleet.configure(db=db, project=PROJECT, allow_modules=(TASK_MODULE,), **settings)


def storm(path: str, rate: float, control: Any) -> None:
    """Enqueue to the queue ``"other"`` at ``rate`` commits a second, one job per
    ``rowfleet.enqueue``, paced by the clock, until ``control`` says stop; then send how
    many it made and over how many seconds."""
    import rowfleet

    configure_api(path, synchronous="FULL")
    stopped = threading.Event()
    answer_cpu_requests(control, stopped.set)
    made, start = 0, time.monotonic()
    while not stopped.is_set():
        rowfleet.enqueue(NOOP, queue="other")
        made += 1
        ahead = start + made / rate - time.monotonic()
        if ahead > 0:
            stopped.wait(ahead)
    control.send((made, time.monotonic() - start))


def answer_cpu_requests(control: Any, stop: Callable[[], None]) -> None:
    """A thread that answers ``control``: "cpu" with this process's CPU seconds so far
    (getrusage counts microseconds; /proc counts 10 ms ticks), anything else, or the pipe
    closing, with ``stop()``."""
    def answer() -> None:
        while True:
            try:
                request = control.recv()
            except EOFError:
                request = "stop"
            if request != "cpu":
                stop()
                return
            usage = resource.getrusage(resource.RUSAGE_SELF)
            control.send(usage.ru_utime + usage.ru_stime)

    threading.Thread(target=answer, name="bench-control", daemon=True).start()


# --- the parent's side of its children ---------------------------------------------------


def stop_group(child: subprocess.Popen) -> None:
    """Stop a child started in a process group of its own (a supervisor and its workers):
    SIGTERM to the group, SIGKILL to it if it has not gone in 10 s."""
    try:
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(10)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(10)


def stop_child(control: Any, child: Any) -> None:
    """Ask a benchmark child to stop over its pipe; kill it if it has not gone in 15 s."""
    try:
        control.send("stop")
    except OSError:
        pass  # the child is gone already
    control.close()
    child.join(15)
    if child.is_alive():
        child.kill()
        child.join()


def await_start_line(barrier: Any, children: list[Any], kind: str) -> None:
    """Wait until every child waits at the barrier, so that our own arrival is the release."""
    deadline = time.monotonic() + 60
    while barrier.n_waiting < len(children):
        if time.monotonic() > deadline or any(c.exitcode is not None for c in children):
            raise RuntimeError(f"{kind} worker processes did not reach the start line")
        time.sleep(0.005)


def wait_for(condition: Callable[[], bool], what: str, child: Any, timeout: float = 10.0) -> None:
    """Return once ``condition()`` holds; raise if ``child`` exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not condition():
        if not child.is_alive():
            raise RuntimeError(f"the worker process exited (code {child.exitcode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.002)


# --- PostgreSQL ---------------------------------------------------------------------------


def pg_harness() -> Any:
    """tests/pg_harness.py, the one place that starts a throwaway server (and imports psycopg)."""
    sys.path.insert(0, str(TESTS))
    try:
        import pg_harness
    finally:
        sys.path.remove(str(TESTS))
    return pg_harness


def pg_server(bench: Bench, section: str, label: str) -> Any:
    """The throwaway server (tests/pg_harness.py, or the one ROWFLEET_TEST_PG names), or None
    after adding a row ``label`` that says why there is none: a server that cannot start is a
    row, not a failure."""
    harness = pg_harness()
    progress(f"{section}: starting a throwaway server (tests/pg_harness.py)")
    server = harness.server()
    if server is None:
        reason = " ".join((harness.unavailable_reason() or "unknown reason").split())
        progress(f"{section}: skipped: {reason}")
        bench.add(Row(label, "-", "-", "-", "-", f"skipped, PostgreSQL unavailable: {reason}"))
    return server


# --- output ------------------------------------------------------------------------------

HEADERS = ("benchmark", "durability", "rowfleet", "baseline", "ratio", "note")
RIGHT = {"rowfleet", "baseline", "ratio"}

# The legend opens with what every row shares and closes with how to read the whole table;
# each section brings the lines for its own rows (its module's LEGEND) in between.
LEGEND_HEAD = """\
legend:
  durability  PRAGMA synchronous of every connection in the row. FULL (rowfleet's default)
              waits for an fsync of the WAL on each commit; NORMAL does not (a power cut
              may lose the last commits, never corrupt the file).
  ratio       rowfleet / baseline: above 1 is better for jobs/s, below 1 for latency and CPU."""
LEGEND_TAIL = """\
  Every number is from this one run on this machine; rerun to see the noise. The footer's
  fsync time is what each FULL commit waits for."""


def render(rows: list[Row]) -> str:
    """The table: a header, a rule, one line per row; numbers right-aligned."""
    table = [HEADERS] + [dataclasses.astuple(r) for r in rows]
    widths = [max(len(str(line[i])) for line in table) for i in range(len(HEADERS))]
    out = []
    for n, line in enumerate(table):
        cells = [str(v).rjust(w) if HEADERS[i] in RIGHT else str(v).ljust(w)
                 for i, (v, w) in enumerate(zip(line, widths))]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def legend(parts: list[str]) -> str:
    """The legend around the sections' own ``parts`` (each part once, in the order given).

    >>> legend(["  x  one", "  x  one"]).splitlines()[-3]
    '  x  one'
    """
    return "\n".join([LEGEND_HEAD, *dict.fromkeys(part for part in parts if part), LEGEND_TAIL])
