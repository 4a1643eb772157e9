"""The ``pgfleet`` section of rowfleet's benchmark: many boxes' workers on one PostgreSQL server.

Owns what a large idle fleet costs the one server it shares, measured on a throwaway
server with ``pg_fleet_workers`` (100) real ``python -m rowfleet worker`` processes on one
queue, default settings (LISTEN wake-ups and the 1 s safety poll), each figure beside the
same server with one idle worker, measured in the same run:

* idle: the server's CPU (user + system of the postmaster and every process it forked,
  from /proc, the postmaster's reaped children included) over ``fleet_seconds``, as % of
  one core; the connections the fleet holds (pg_stat_activity), in all and per worker;
* wake: jobs enqueued one at a time, spaced, to the idle fleet: enqueue -> ``started_at``
  p50/p95, and how many claim statements ran per job (pg_stat_statements, preloaded on the
  throwaway server), with the wake-up reads (``has_due``) beside them;
* burst: ``pg_fleet_burst`` jobs in one ``enqueue_many`` to the idle fleet: enqueue ->
  ``started_at`` p50/p95 and jobs/s until the last one finished.

The throwaway server is the harness's fast one (tests/pg_harness.py: fsync off) with room
for the fleet's connections (``max_connections``) and pg_stat_statements loaded where its
library is installed; with ``ROWFLEET_TEST_PG`` that server is measured as it is, without
its CPU (it may be another machine). Without psycopg or the server binaries the section
prints one row saying why and fails nothing. Every worker runs in a process group of its
own, and every group is stopped (SIGTERM, then SIGKILL) however the section ends.

psycopg is imported only inside functions (tools/check_deps.py allows that in files whose
name has ``pg`` as a word part, hence this file's name). Imports the harness and
rowfleet's public API, never another section; reads the server's statistics views and the
``jobs`` and ``workers`` tables only.
"""

from __future__ import annotations

import dataclasses
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import harness
from .harness import NOOP, PROJECT, QUEUE, Bench, Row, percentile, progress, ratio

import rowfleet
from rowfleet.config import Config
from rowfleet.store import open_store

LEGEND = """\
  pg fleet    N idle `python -m rowfleet worker` processes (default settings: LISTEN wake-
              ups, 1 s safety poll) on one queue of one throwaway PostgreSQL server, vs the
              same server with 1 idle worker (the baseline column), each on a fresh
              database. Idle: the server's CPU (user+system of the postmaster and all it
              forked, /proc) over the window, % of one core; connections = the fleet's rows
              in pg_stat_activity. Wake: one job enqueued at a time, 100-200 ms apart;
              latency = started_at (the claiming worker's clock as it claims; one machine,
              one clock) minus the moment enqueue was called (its commit included: once it
              commits, a woken fleet may hold the CPUs the enqueuing process needs to
              return). Claims per job = calls of an idle worker's claim UPDATE
              (pg_stat_statements; the empty ones, lost to another worker, included) per
              job; not counted: the finish_and_claim each job's holder runs to finish it. A
              woken worker first reads has_due and claims only if it sees a due job. Burst:
              jobs in one enqueue_many to the idle fleet; latency as for wake, jobs/s = jobs
              / (last finished_at - enqueue). The workers and the server share this
              machine's cores."""

LABEL = "pg fleet"
SETTLE = 2.0  # seconds after every worker's first heartbeat before the idle window opens
START_SECONDS_PER_WORKER = 1.5  # a worker imports rowfleet and psycopg: ~0.6 s of CPU here
STOP_SECONDS = 30.0  # for the whole fleet to exit on SIGTERM before SIGKILL
WAKE_GAP = (0.100, 0.200)  # seconds between one job's completion and the next enqueue
WAKE_WARMUP = 2
JOB_LIMIT = 10.0  # seconds a woken job may take to complete
# Room per worker in max_connections: an idle worker holds four (claims, its keeper's, and
# a LISTEN each for jobs and for switches); one more each for headroom.
CONNECTIONS_PER_WORKER = 5
STATEMENT_STATS = "pg_stat_statements"
# What the statement counts add up, told apart by fragments of rowfleet's SQL as
# pg_stat_statements normalizes it: every claim form sets lease_token = lease_token + 1;
# the busy worker's finish_and_claim (which every job's holder runs once, to finish it) is
# the one with "claimed AS (", counted apart from the claims an idle worker makes; an idle
# worker's look is has_due ("SELECT 1 AS due ...").
CLAIMS = "%lease_token = lease_token +%"
TURNS = "%claimed AS (%"
LOOKS = "% AS due%"


def _connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


@dataclasses.dataclass(frozen=True)
class Counts:
    """Statement calls in the database so far (pg_stat_statements): an idle worker's claims,
    the rows they took, finish_and_claim turns, has_due looks, and every statement."""

    claims: int
    claimed: int
    turns: int
    looks: int
    statements: int

    def __sub__(self, earlier: "Counts") -> "Counts":
        return Counts(*(a - b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(earlier))))


@dataclasses.dataclass
class Phase:
    """What one fleet size measured; None where it could not be read."""

    workers: int
    cpu: float | None = None            # % of one core, the server's, idle
    statements: float | None = None     # statements/s the idle fleet sent
    looks: float = 0.0                  # has_due reads/s of the idle fleet (its safety polls)
    connections: int = 0
    wakes: list[float] = dataclasses.field(default_factory=list)  # seconds, enqueue -> started_at
    wake_claims: float | None = None    # idle claim statements per woken job
    wake_claimed: float | None = None   # of which took the job (1.0: no claim needed a retry)
    wake_looks: float | None = None     # has_due reads per woken job, beyond the safety polls
    burst: list[float] = dataclasses.field(default_factory=list)  # seconds, enqueue -> started_at
    burst_rate: float = 0.0             # jobs/s
    burst_claims: float | None = None   # claim statements (idle claims and turns) per burst job


def server_cpu_seconds(postmaster: int) -> float | None:
    """CPU seconds the server has used so far: every process the postmaster forked that
    still runs, and the postmaster, from /proc/PID/schedstat (nanoseconds on a CPU, where
    /proc/PID/stat counts 10 ms ticks), plus the user + system ticks of the children it
    reaped (every backend that exited); None when /proc cannot tell."""
    own = _stat_fields(postmaster)
    running = _cpu_ns(postmaster)
    if own is None or running is None:
        return None
    reaped = int(own[13]) + int(own[14])  # cutime, cstime: fields 16 and 17 of stat(5)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and fields[1] == str(postmaster):
                running += _cpu_ns(int(entry)) or 0  # gone meanwhile: counted as reaped
    return running / 1e9 + reaped / os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat from its state on (index 0 = field 3 of stat(5)), or None: gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return None


def _cpu_ns(pid: int) -> int | None:
    """Nanoseconds the (single-threaded) process ``pid`` has run on a CPU, or None: gone."""
    try:
        with open(f"/proc/{pid}/schedstat") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def statement_stats_library(bindir: str) -> bool:
    """Whether the server binaries in ``bindir`` come with pg_stat_statements, so the server
    may preload it: next to the real binaries (Debian's layout: bin/../lib, through any
    symlink), or where that installation's pg_config says."""
    real_bindir = Path(os.path.realpath(os.path.join(bindir, "postgres"))).parent
    folders = [real_bindir.parent / "lib"]
    pg_config = real_bindir / "pg_config"
    if pg_config.exists():
        try:
            folders.append(Path(subprocess.run([str(pg_config), "--pkglibdir"], capture_output=True, text=True,
                                               check=True, timeout=30).stdout.strip()))
        except (OSError, subprocess.SubprocessError):
            pass
    return any((folder / f"{STATEMENT_STATS}.so").exists() for folder in folders)


# --- the section -------------------------------------------------------------------------


def run(bench: Bench) -> None:
    """The section: start the server, measure 1 worker then the fleet, stop it."""
    FleetBench(bench).run()


class FleetBench:
    """The pg fleet rows, added to ``bench`` once both fleet sizes are measured."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.sizes = bench.sizes
        self.workers = bench.sizes.pg_fleet_workers
        self.server: Any = None
        self.postmaster: int | None = None
        self.counted = False  # pg_stat_statements is loaded
        self.durability = "pg"
        self._databases: list[str] = []

    def run(self) -> None:
        started = time.perf_counter()
        self.server = self._start_server()
        if self.server is None:
            return
        import psycopg

        try:
            described = self._describe(time.perf_counter() - started)
            baseline = self._phase(1)
            fleet = self._phase(self.workers)
            self._add_rows(described, fleet, baseline)
        except psycopg.Error as exc:
            raise RuntimeError(f"PostgreSQL: {' '.join(str(exc).split())}") from exc
        finally:
            self._drop_databases()
            self.server.stop()

    # --- the server --------------------------------------------------------------------

    def _start_server(self) -> Any:
        """A private throwaway server with room for the fleet's connections, or the one
        ROWFLEET_TEST_PG names; None after a row saying why there is none."""
        pg_harness = harness.pg_harness()
        if os.environ.get(pg_harness.ENV_URL):
            return harness.pg_server(self.bench, "pgfleet", f"{LABEL} server")
        progress(f"pgfleet: starting a throwaway server (tests/pg_harness.py) for {self.workers} workers")
        try:
            bindir = pg_harness.find_binaries()
            settings = tuple(s for s in pg_harness.SERVER_SETTINGS if not s.startswith("max_connections="))
            settings += (f"max_connections={CONNECTIONS_PER_WORKER * self.workers + 50}",)
            if statement_stats_library(bindir):
                settings += (f"shared_preload_libraries={STATEMENT_STATS}",)
            return pg_harness.start_local(settings)
        except (pg_harness.Unavailable, OSError, subprocess.SubprocessError) as exc:
            reason = " ".join(str(exc).split())
            progress(f"pgfleet: skipped: {reason}")
            self.bench.add(Row(f"{LABEL} server", "-", "-", "-", "-", f"skipped, PostgreSQL unavailable: {reason}"))
            return None

    def _describe(self, took: float) -> str:
        with _connect(self.server.admin_url()) as conn:
            settings = dict(conn.execute("SELECT name, setting FROM pg_settings WHERE name IN "
                                         "('fsync', 'synchronous_commit', 'full_page_writes', 'max_connections', "
                                         "'shared_preload_libraries')").fetchall())
            version = conn.execute("SHOW server_version").fetchone()[0].split()[0]
        self.durability = harness.durability(settings)
        self.counted = STATEMENT_STATS in settings.get("shared_preload_libraries", "")
        if self.server.directory is not None:
            with open(os.path.join(self.server.directory, "data", "postmaster.pid")) as pid_file:
                self.postmaster = int(pid_file.readline())
        where = "external server (ROWFLEET_TEST_PG), CPU not read" if self.server.external \
            else f"started in {took:.1f} s"
        counted = "pg_stat_statements loaded" if self.counted else "no pg_stat_statements: claims not counted"
        return (f"PostgreSQL {version}, {where}; max_connections={settings.get('max_connections')}; {counted}; "
                f"{os.cpu_count()} CPUs shared by server, workers and this process")

    def _new_database(self, label: str) -> str:
        from psycopg import sql

        pg_harness = harness.pg_harness()
        name = pg_harness.check_test_database(f"rowfleet_bench_{label}_{secrets.token_hex(4)}_test")
        url = pg_harness.with_database(self.server.base_url, name)
        with _connect(self.server.admin_url()) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self._databases.append(name)
        with open_store(Config(db=url, project=PROJECT), create=True) as store:
            store.migrate()
        if self.counted:
            with _connect(url) as conn:
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {STATEMENT_STATS}")
        return url

    def _drop_databases(self) -> None:
        from psycopg import sql

        pg_harness = harness.pg_harness()
        for name in list(self._databases):
            try:
                with _connect(self.server.admin_url()) as conn:
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(pg_harness.check_test_database(name))))
                self._databases.remove(name)
            except Exception as exc:  # tidying up after a failure: the server is stopped next anyway
                progress(f"pgfleet: could not drop {name}: {exc}")

    # --- one fleet size ----------------------------------------------------------------

    def _phase(self, workers: int) -> Phase:
        """Start ``workers`` idle workers on a fresh database, measure idle, wake and burst,
        and stop them, whatever happens."""
        url = self._new_database(f"fleet{workers}")
        phase = Phase(workers)
        fleet = Fleet(url, self.bench.lab, workers)
        try:
            fleet.start()
            with _connect(url) as conn:
                fleet.await_beats(conn)
                time.sleep(SETTLE)
                self._idle(conn, phase)
                self._wake(url, conn, fleet, phase)
                self._burst(url, conn, fleet, phase)
        finally:
            fleet.stop()
        return phase

    def _counts(self, conn: Any) -> Counts | None:
        if not self.counted:
            return None
        row = conn.execute(
            "SELECT coalesce(sum(calls) FILTER (WHERE query LIKE %(claims)s AND query NOT LIKE %(turns)s), 0), "
            "coalesce(sum(rows) FILTER (WHERE query LIKE %(claims)s AND query NOT LIKE %(turns)s), 0), "
            "coalesce(sum(calls) FILTER (WHERE query LIKE %(turns)s), 0), "
            "coalesce(sum(calls) FILTER (WHERE query LIKE %(looks)s), 0), coalesce(sum(calls), 0) "
            f"FROM {STATEMENT_STATS} WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
            {"claims": CLAIMS, "turns": TURNS, "looks": LOOKS}).fetchone()
        return Counts(*(int(value) for value in row))

    def _cpu(self) -> float | None:
        return server_cpu_seconds(self.postmaster) if self.postmaster is not None else None

    def _idle(self, conn: Any, phase: Phase) -> None:
        seconds = self.sizes.fleet_seconds
        progress(f"pgfleet: {phase.workers} idle worker(s): server CPU and connections over {seconds:g} s")
        held = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
        connections = conn.execute(held).fetchone()[0]
        counts, cpu, start = self._counts(conn), self._cpu(), time.monotonic()
        time.sleep(seconds)
        cpu_after, elapsed = self._cpu(), time.monotonic() - start
        counts_after = self._counts(conn)
        phase.connections = max(connections, conn.execute(held).fetchone()[0])
        if cpu is not None and cpu_after is not None:
            phase.cpu = 100.0 * (cpu_after - cpu) / elapsed
        if counts is not None and counts_after is not None:
            phase.statements = (counts_after - counts).statements / elapsed
            phase.looks = (counts_after - counts).looks / elapsed

    def _wake(self, url: str, conn: Any, fleet: "Fleet", phase: Phase) -> None:
        samples = self.sizes.pg_fleet_wakes
        progress(f"pgfleet: {phase.workers} idle worker(s): {samples} jobs enqueued one at a time")
        harness.configure_api(url)
        rng = random.Random(7)
        counts, start = None, 0.0
        for n in range(WAKE_WARMUP + samples):
            if n == WAKE_WARMUP:
                counts, start = self._counts(conn), time.monotonic()
            # Stamped before the call: once it commits, a fleet woken at once takes the CPUs
            # from this process, whose return may then come after the claim.
            enqueued = time.time()
            job_id = rowfleet.enqueue(NOOP, queue=QUEUE).id
            started = self._await_completed(conn, fleet, job_id)
            if n >= WAKE_WARMUP:
                phase.wakes.append(started - enqueued)
            time.sleep(rng.uniform(*WAKE_GAP))
        after = self._counts(conn)
        if counts is not None and after is not None:
            made = after - counts
            phase.wake_claims = made.claims / samples
            phase.wake_claimed = made.claimed / samples
            background = phase.looks * (time.monotonic() - start)
            phase.wake_looks = max(0.0, made.looks - background) / samples

    def _await_completed(self, conn: Any, fleet: "Fleet", job_id: int) -> float:
        """The job's started_at once it has completed; raise after JOB_LIMIT or a worker's exit."""
        deadline = time.monotonic() + JOB_LIMIT
        while True:
            state, started = conn.execute("SELECT state, started_at FROM jobs WHERE id = %s", (job_id,)).fetchone()
            if state == "completed":
                return started
            fleet.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {job_id} was not done {JOB_LIMIT:g} s after its enqueue (state {state})")
            time.sleep(0.005)

    def _burst(self, url: str, conn: Any, fleet: "Fleet", phase: Phase) -> None:
        jobs = self.sizes.pg_fleet_burst
        progress(f"pgfleet: {phase.workers} idle worker(s): a burst of {jobs} jobs in one enqueue_many")
        harness.configure_api(url)
        after_id = conn.execute("SELECT coalesce(max(id), 0) FROM jobs").fetchone()[0]
        counts = self._counts(conn)
        enqueued = time.time()  # before the call, as for the wake
        rowfleet.enqueue_many(NOOP, [None] * jobs, queue=QUEUE)
        deadline = time.monotonic() + 60.0 + 0.1 * jobs
        done = "SELECT count(*) FROM jobs WHERE id > %s AND state = 'completed'"
        while conn.execute(done, (after_id,)).fetchone()[0] < jobs:
            fleet.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the burst of {jobs} jobs was not done in {60.0 + 0.1 * jobs:g} s")
            time.sleep(0.02)
        rows = conn.execute("SELECT started_at, finished_at FROM jobs WHERE id > %s", (after_id,)).fetchall()
        phase.burst = [started - enqueued for started, _ in rows]
        phase.burst_rate = jobs / max(1e-6, max(finished for _, finished in rows) - enqueued)
        after = self._counts(conn)
        if counts is not None and after is not None:
            made = after - counts
            phase.burst_claims = (made.claims + made.turns) / jobs

    # --- the rows ----------------------------------------------------------------------

    def _add_rows(self, described: str, fleet: Phase, one: Phase) -> None:
        n, d = fleet.workers, self.durability

        def add(label: str, ours: str, base: str, ratio_: str, note: str) -> None:
            self.bench.add(Row(f"{LABEL} {label}", d, ours, base, ratio_, note))

        def figure(value: float | None, form: str = ".2f") -> str:
            return "-" if value is None else format(value, form)

        def ms(values: list[float], q: float) -> float:
            return percentile(values, q) * 1000

        add("server", "-", "-", "-", described)
        window = f"{self.sizes.fleet_seconds:g} s window"
        cpu_note = f"{n} workers vs 1; {window}"
        if fleet.statements is not None and one.statements is not None:
            cpu_note += f"; statements/s {fleet.statements:,.0f} vs {one.statements:,.0f}"
        if fleet.cpu is not None:
            cpu_note += f"; {fleet.cpu / n:.2f}% of a core per worker"
        add(f"idle, server CPU, {n} workers (% of a core)", figure(fleet.cpu), figure(one.cpu),
            ratio(fleet.cpu, one.cpu) if fleet.cpu is not None and one.cpu else "-", cpu_note)
        add(f"idle, connections, {n} workers", str(fleet.connections), str(one.connections),
            ratio(fleet.connections, one.connections), "client backends of the fleet's database (pg_stat_activity)")
        add("idle, connections per worker", f"{fleet.connections / n:.2f}", f"{one.connections:.2f}", "-",
            "claims, the keeper's, LISTEN for jobs, LISTEN for switches")
        wake_note = f"{len(fleet.wakes)} jobs one at a time, enqueue call to started_at, {n} idle workers vs 1"
        for q, label in ((0.50, "p50"), (0.95, "p95")):
            a, b = ms(fleet.wakes, q), ms(one.wakes, q)
            add(f"wake of one job, {n} workers, {label} (ms)", f"{a:.1f}", f"{b:.1f}", ratio(a, b), wake_note)
        claims_note = "not counted: pg_stat_statements is not loaded on this server"
        if fleet.wake_claims is not None and one.wake_claims is not None:
            claims_note = (f"an idle worker's claim UPDATEs per woken job (pg_stat_statements), "
                           f"{fleet.wake_claimed:.2f} vs {one.wake_claimed:.2f} of them took it; has_due reads per "
                           f"job beyond the safety polls {fleet.wake_looks:.1f} vs {one.wake_looks:.1f}")
        add(f"wake of one job, {n} workers, claims per job", figure(fleet.wake_claims), figure(one.wake_claims),
            "-", claims_note)
        jobs = len(fleet.burst)
        burst_note = f"{jobs} jobs in one enqueue_many, {n} idle workers vs 1"
        if fleet.burst_claims is not None:
            burst_note += (f"; claim statements per job (idle claims and finish_and_claim) "
                           f"{fleet.burst_claims:.2f} vs {one.burst_claims:.2f}")
        for q, label in ((0.50, "p50"), (0.95, "p95")):
            a, b = ms(fleet.burst, q), ms(one.burst, q)
            add(f"burst of {jobs}, {n} workers, start {label} (ms)", f"{a:,.0f}", f"{b:,.0f}", ratio(a, b),
                burst_note)
        add(f"burst of {jobs}, {n} workers (jobs/s)", f"{fleet.burst_rate:,.0f}", f"{one.burst_rate:,.0f}",
            ratio(fleet.burst_rate, one.burst_rate),
            f"enqueue to the last finished_at; {os.cpu_count()} CPUs run the server and every worker: workers "
            f"beyond the cores add contention here, not throughput")


class Fleet:
    """``workers`` real ``python -m rowfleet worker`` processes, each in a process group of
    its own (a worker's children go with it), logging to a file in the lab."""

    def __init__(self, url: str, lab: harness.Lab, workers: int) -> None:
        self.url = url
        self.workers = workers
        self.logs = lab.folder(f"pgfleet-{workers}")
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(harness.SRC), lab.task_dir]))
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        argv = [sys.executable, "-m", "rowfleet", "worker", "--db", self.url, "--project", PROJECT,
                "--queue", QUEUE, "--app", harness.TASK_MODULE]
        for n in range(self.workers):
            with open(os.path.join(self.logs, f"worker-{n}.log"), "wb") as log:
                self.processes.append(subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL,
                                                       stdout=log, stderr=subprocess.STDOUT, process_group=0))

    def await_beats(self, conn: Any) -> None:
        """Until every worker has written its heartbeat row, or raise."""
        limit = 60.0 + START_SECONDS_PER_WORKER * self.workers
        progress(f"pgfleet: waiting for {self.workers} worker(s) to beat (at most {limit:g} s)")
        deadline = time.monotonic() + limit
        while conn.execute("SELECT count(*) FROM workers").fetchone()[0] < self.workers:
            self.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.workers} workers did not all beat within {limit:g} s")
            time.sleep(0.2)

    def check(self) -> None:
        """Raise if a worker has exited, with the end of its log."""
        for n, process in enumerate(self.processes):
            if process.poll() is not None:
                with open(os.path.join(self.logs, f"worker-{n}.log"), errors="replace") as log:
                    tail = " | ".join(log.read().strip().splitlines()[-3:])
                raise RuntimeError(f"worker {n} exited with code {process.returncode}: {tail}")

    def stop(self) -> None:
        """SIGTERM every group, SIGKILL those still there after STOP_SECONDS, reap all."""
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        if any(process.poll() is None for process in self.processes):
            progress("pgfleet: some workers outlived SIGTERM: SIGKILL")
        self._signal(signal.SIGKILL)
        for process in self.processes:
            process.wait()

    def _signal(self, signum: int) -> None:
        """Send ``signum`` to the group of every worker not yet reaped (its pid is its group's)."""
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signum)
                except ProcessLookupError:
                    pass
