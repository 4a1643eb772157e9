"""PostgreSQL rows of rowfleet's benchmark: the ``postgres`` section.

Owns the PostgreSQL measurements, each rowfleet figure beside a bare psycopg baseline
measured in the same run on the same server; the bare loops run on the bench's own minimal
table (``yardstick.py``), in a database of their own, never on rowfleet's schema:

* round trip (claim -> no-op handler -> complete) with 1, 2 and 4 worker processes released
  together by a barrier, vs as many processes each running a bare ``FOR UPDATE SKIP LOCKED``
  loop of two transactions per job (claim, then complete), all over TCP to 127.0.0.1; with
  the CPU both sides spend per job, in the processes and in their server backends; with the
  most processes, also the ceiling of one job per claim (the yardstick's ``turn``) as a
  third loop;
* idle wake latency: an idle worker (poll 1 s, LISTEN) and jobs enqueued one at a time by
  this process, vs a bare LISTEN connection in another process stamping each notification;
* claim latency with 10k, 100k and 1M queued rows: ``Store.claim`` vs the yardstick's claim
  UPDATE on as many rows; and ``Store.claim`` with 10k due rows behind delayed ones of
  higher priority vs ``Store.claim`` with none delayed; and ``Store.claim`` with a GPU box's
  routing inputs vs the plain ``Store.claim`` on 100k queued model jobs.

Every number comes from one throwaway server (the harness's ``pg_server``: started by
tests/pg_harness.py, or the one ``ROWFLEET_TEST_PG`` names), which runs with fsync and
synchronous_commit off: the durability column says so, read back from the server. The
round trip with the most processes runs again on a second throwaway server with stock
durability (``pg_harness.STOCK_SETTINGS``), labelled so; not with an external server. Each
round-trip run gets a fresh database copied from one template, as the SQLite rows get a
fresh file. Without psycopg or the server binaries the section prints one row saying why,
and fails nothing.

psycopg is imported only inside functions (tools/check_deps.py allows that in files whose
name has ``postgres`` as a word part), so the rest of the bench runs without it. Imports
the harness (tools/bench/harness.py: the rows must read like the SQLite ones), the yardstick
and rowfleet's public pieces, never another section; reads rowfleet's SQL only to EXPLAIN its
claim and to LISTEN on the workers' channel.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import random
import secrets
import select
import statistics
import time
from typing import Any, Callable

from . import harness, yardstick
from .harness import NOOP, PROJECT, QUEUE, REQUEUE_CLAIMED, STAMP, Bench, Row, claim_micros, count, medians, \
    paired, percentile, progress, ratio, rounds_note, shares, short

import rowfleet
from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.job import JobSpec
from rowfleet.sql.queries import queries
from rowfleet.store import open_store
from rowfleet.store.jobs import claim_params
from rowfleet.worker.loop import Worker

LEGEND = """\
  pg rows     one throwaway PostgreSQL server (tests/pg_harness.py, or ROWFLEET_TEST_PG),
              over TCP (127.0.0.1 for the harness's own). Their durability is read from the
              server: "pg fsync=off" means fsync, full_page_writes and synchronous_commit
              are off (the harness's test settings), so no commit waits for a disk: these
              rows measure round trips and CPU, not what a durable server pays. "pg
              sync=on" rows ran on a second throwaway server with stock durability (all
              three on), as users run it: every commit waits for its WAL flush. Baselines
              run on the bench's own minimal table (tools/bench/yardstick.py: bare_jobs,
              bigserial id, one partial index on the queued rows) in a database of their
              own, never rowfleet's schema, over psycopg autocommit connections, one
              transaction per statement. Round trip: claim UPDATE ... WHERE id = (SELECT
              ... FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING, then the complete UPDATE; a
              busy rowfleet worker finishes a job and claims the next in one statement.
              With the most processes three more loops: "with --prefetch 10", rowfleet
              workers claiming 10 jobs a statement, each finished in its own commit;
              "with --batch 10", the same writing the 10 outcomes in one commit; and
              the "ceiling of one job per claim", that turn as one minimal statement on the
              minimal table: how far a claim of one job can beat the baseline here. Each
              run copies one template database (rowfleet's, or the minimal table's); its
              window opens once every process has claimed a job ("all claiming" = release
              to the last first claim, rowfleet/bare: a rowfleet worker imports psycopg,
              ~0.15 s here, and opens three connections after the release; the bare loop
              does both before it). Idle wake: a worker (poll 1 s) on LISTEN, jobs
              enqueued 20-50 ms apart; the baseline is a bare LISTEN connection in a third
              process stamping each NOTIFY as it arrives (the floor, about zero: no ratio).
              Claim latency: Store.claim on a queue filled by rowfleet.enqueue_many (100k
              jobs per call) vs the bare claim UPDATE on the minimal table holding as many
              rows (one INSERT ... SELECT), each then VACUUM ANALYZE. "Due behind
              delayed": Store.claim on 10k due jobs plus delayed ones of higher priority
              vs Store.claim on 10k due and none delayed, taking turns. "With model
              affinity": Store.claim with a models gate of A, B, C, warm on B, ranked C,
              B, A vs the plain Store.claim, taking turns on 100k model jobs. "CPU
              us/job": user+system CPU (/proc) over the window of the worker processes and
              of their server backends, per job completed, rowfleet/bare: on 2 cores the
              round trips are CPU-bound, so this says where the time goes."""

BARE_KINDS = ("bare", "floor")  # the round trip's loops that run on the yardstick's table
SLOW_WAKE = 0.5  # seconds: a wake-up this late waited for the safety poll, not for a NOTIFY
# Seconds a round-trip run may take for every process to hold a job: after the release a
# rowfleet worker imports psycopg (~0.15 s here) and opens three connections (claims, LISTEN,
# lease keeper); 0.2-1 s in all with 4 workers on 2 loaded cores.
STARTUP_LIMIT = 10.0


def _connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _database_url(url: str, name: str) -> str:
    """``url`` pointed at database ``name``, which must be a test database's name."""
    pg_harness = harness.pg_harness()
    return pg_harness.with_database(url, pg_harness.check_test_database(name))


@dataclasses.dataclass(frozen=True)
class Run:
    """One round-trip run: jobs/s, each process's share (%, largest first), seconds from the
    release until every process had claimed, a problem or '', and CPU microseconds per job
    of the processes and of their server backends (None where /proc is missing)."""

    rate: float
    split: list[float]
    started: float
    problem: str
    client_us: float | None
    server_us: float | None


def cpu_seconds(pids: list[int]) -> float | None:
    """User + system CPU seconds the processes ``pids`` have used, from /proc (Linux);
    None when any of them cannot be read."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return None
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
    return total / os.sysconf("SC_CLK_TCK")


# --- child processes (module level: spawned children import this file) ------------------


def roundtrip_worker(url: str, task_dir: str, barrier: Any, how: str = "") -> None:
    """One rowfleet worker (burst mode), released with the others by ``barrier``, taking its
    jobs as ``how`` says (``harness.CLAIMING``)."""
    harness.import_tasks(task_dir)
    worker = Worker(Config(db=url, project=PROJECT), QUEUE, burst=True, **harness.CLAIMING[how])
    barrier.wait()
    worker.run()


def roundtrip_bare(url: str, task_dir: str, barrier: Any) -> None:
    """The bare loop on the yardstick's table (``yardstick.pg_drain``): claim in one
    transaction, the same no-op handler, complete in a second."""
    from rowfleet import tasks

    harness.import_tasks(task_dir)
    handler = tasks.resolve(NOOP)
    conn = _connect(url)
    barrier.wait()
    yardstick.pg_drain(conn, handler)
    conn.close()


def roundtrip_floor(url: str, task_dir: str, barrier: Any) -> None:
    """The yardstick's ``turn`` in a loop: each statement finishes the job in hand and claims
    the next."""
    from rowfleet import tasks

    harness.import_tasks(task_dir)
    handler = tasks.resolve(NOOP)
    conn = _connect(url)
    barrier.wait()
    yardstick.pg_drain_in_turns(conn, handler)
    conn.close()


def bare_listener(url: str, control: Any) -> None:
    """A bare LISTEN connection that stamps each notification (time.time()) as it is read.

    Sends "ready" once listening; on any message from ``control`` sends the stamps and exits.
    """
    conn = _connect(url)
    conn.execute(queries("postgres")["listen_jobs"])  # the same channel the workers use
    stamps: list[float] = []
    control.send("ready")
    while True:
        readable, _, _ = select.select([conn.fileno(), control.fileno()], [], [])
        if conn.fileno() in readable:
            conn.pgconn.consume_input()
            while conn.pgconn.notifies() is not None:
                stamps.append(time.time())
        if control.fileno() in readable:
            control.recv()
            control.send(stamps)
            conn.close()
            return


# --- the section -------------------------------------------------------------------------


def run(bench: Bench) -> None:
    """The section: start the server, measure, stop it."""
    PostgresBench(bench).run()


class PostgresBench:
    """The postgres rows, added to ``bench`` as they are measured."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.lab = bench.lab
        self.sizes = bench.sizes
        self.mp = bench.mp
        self.server: Any = None
        self.durability = "pg"
        self._databases: list[str] = []

    def add(self, row: Row) -> None:
        self.bench.add(row)

    def run(self) -> None:
        """Start the server, measure, stop it. A server that cannot start is a row, not a failure."""
        harness.pg_harness()  # loaded before the clock, as the server's start is what it times
        started = time.perf_counter()
        self.server = harness.pg_server(self.bench, "postgres", "pg server")
        if self.server is None:
            return
        import psycopg

        try:
            self._describe_server(time.perf_counter() - started)
            self.roundtrip(self.sizes.worker_counts)
            self.wake()
            self.claim()
            self.stock_roundtrip()
        except psycopg.Error as exc:
            raise RuntimeError(f"PostgreSQL: {' '.join(str(exc).split())}") from exc
        finally:
            self._drop_databases()
            self.server.stop()

    def _describe_server(self, took: float) -> None:
        settings = self._durability_settings()
        with _connect(self.server.admin_url()) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0].split()[0]
            host = conn.info.host
        self.durability = harness.durability(settings)
        where = "external server (ROWFLEET_TEST_PG)" if self.server.external else f"started in {took:.1f} s"
        self.add(Row("pg server", self.durability, "-", "-", "-",
                     f"PostgreSQL {version}, TCP {host}, {where}; "
                     + ", ".join(f"{k}={v}" for k, v in sorted(settings.items()))))

    def _durability_settings(self) -> dict[str, str]:
        with _connect(self.server.admin_url()) as conn:
            return dict(conn.execute("SELECT name, setting FROM pg_settings WHERE name IN "
                                     "('fsync', 'synchronous_commit', 'full_page_writes')").fetchall())

    def stock_roundtrip(self) -> None:
        """The most processes' round trip again on a second throwaway server with stock
        durability (fsync, full_page_writes and synchronous_commit on: each commit waits
        for the WAL's flush), as users run it. An external server (ROWFLEET_TEST_PG) is
        measured as it is, so it gets no second one."""
        if self.server.external:
            return
        pg_harness = harness.pg_harness()
        progress("postgres: starting a second throwaway server with stock durability")
        fast, self.server = self.server, pg_harness.start_local(pg_harness.STOCK_SETTINGS)
        try:
            self.durability = harness.durability(self._durability_settings())
            self.roundtrip((max(self.sizes.worker_counts),))
        finally:
            self._drop_databases()
            self.server.stop()
            self.server = fast

    # --- databases ---------------------------------------------------------------------

    def _new_database(self, label: str, template: str | None = None) -> str:
        """A fresh ``*_test`` database: a copy of ``template``'s, or newly migrated."""
        url = self._create_database(label, template)
        if template is None:
            with open_store(Config(db=url, project=PROJECT), create=True) as store:
                store.migrate()
        return url

    def _new_yardstick(self, label: str) -> str:
        """A fresh ``*_test`` database holding the yardstick's empty table and nothing of rowfleet."""
        url = self._create_database(label)
        with _connect(url) as conn:
            yardstick.pg_create(conn)
        return url

    def _create_database(self, label: str, template: str | None = None) -> str:
        """An empty ``*_test`` database, or a copy of ``template``'s; its URL."""
        from psycopg import sql

        name = f"rowfleet_bench_{label}_{secrets.token_hex(4)}_test"
        url = _database_url(self.server.base_url, name)
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        with _connect(self.server.admin_url()) as conn:
            conn.execute(statement)
        self._databases.append(name)
        return url

    def _drop_database(self, url: str) -> None:
        from psycopg import sql

        pg_harness = harness.pg_harness()

        name = pg_harness.check_test_database(pg_harness.database_of(url))
        with _connect(self.server.admin_url()) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if name in self._databases:
            self._databases.remove(name)

    def _drop_databases(self) -> None:
        for name in list(self._databases):
            try:
                self._drop_database(_database_url(self.server.base_url, name))
            except Exception as exc:  # tidying up after a failure: the server is stopped next anyway
                progress(f"postgres: could not drop {name}: {exc}")

    # 1. round trips with worker processes

    def roundtrip(self, worker_counts: tuple[int, ...]) -> None:
        s = self.sizes
        template = self._new_database("roundtrip")
        with open_store(Config(db=template, project=PROJECT)) as store:
            store.enqueue_many(JobSpec(task=NOOP, queue=QUEUE), [None] * s.pg_roundtrip_jobs)
        with _connect(template) as conn:
            conn.execute("VACUUM ANALYZE")
        bare_template = self._new_yardstick("roundtrip_bare")
        with _connect(bare_template) as conn:
            yardstick.pg_load(conn, s.pg_roundtrip_jobs)
        database_of = harness.pg_harness().database_of
        templates = {"rowfleet": database_of(template), "bare": database_of(bare_template)}
        for procs in worker_counts:
            kinds = [("bare", roundtrip_bare), ("rowfleet", roundtrip_worker)]
            if procs == max(worker_counts):
                kinds += [("prefetch", functools.partial(roundtrip_worker, how="--prefetch")),
                          ("batch", functools.partial(roundtrip_worker, how="--batch")), ("floor", roundtrip_floor)]
            runs: dict[str, list[Run]] = {kind: [] for kind, _ in kinds}
            for round_no in range(s.roundtrip_rounds):
                progress(f"pg round trip, {procs} process(es), round {round_no + 1} of {s.roundtrip_rounds}: "
                         f"{', then '.join(kind for kind, _ in kinds)}, {s.pg_roundtrip_window:g} s each")
                for kind, target in kinds:
                    side = "bare" if kind in BARE_KINDS else "rowfleet"
                    runs[kind].append(self._run_workers(kind, target, templates[side], procs))
            ours, bare = runs["rowfleet"], runs["bare"]

            def median(runs: list[Run], field: str) -> float:
                values = [getattr(run, field) for run in runs if getattr(run, field) is not None]
                return statistics.median(values) if values else float("nan")

            a, b = median(ours, "rate"), median(bare, "rate")
            notes = [f"{rounds_note(s.roundtrip_rounds)} of {s.pg_roundtrip_window:g} s; all claiming "
                     f"{median(ours, 'started') * 1000:.0f}/{median(bare, 'started') * 1000:.0f} ms after the release"]
            if procs > 1:
                notes.append(f"shares {shares([r.split for r in ours])}% (bare {shares([r.split for r in bare])}%)")
            if not math.isnan(median(ours, "client_us")):
                notes.append(f"CPU us/job: workers {median(ours, 'client_us'):.0f}/{median(bare, 'client_us'):.0f}, "
                             f"their server backends {median(ours, 'server_us'):.0f}/{median(bare, 'server_us'):.0f}")
            if "prefetch" in runs:
                batched = median(runs["prefetch"], "rate")
                notes.append(f"with --prefetch {harness.PREFETCH}: {count(batched)} jobs/s, {ratio(batched, b)} "
                             f"the bare loop")
            if "batch" in runs:
                batched = median(runs["batch"], "rate")
                notes.append(f"with --batch {harness.PREFETCH}: {count(batched)} jobs/s, {ratio(batched, b)} "
                             f"the bare loop")
            if "floor" in runs:
                floor = median(runs["floor"], "rate")
                notes.append(f"ceiling of one job per claim: a minimal finish-and-claim statement (no events) "
                             f"ran {count(floor)} jobs/s, {ratio(floor, b)} the bare loop")
            notes += sorted({r.problem for kind_runs in runs.values() for r in kind_runs if r.problem})
            label = f"pg round trip, {procs} worker proc{'s' if procs > 1 else ''} (jobs/s)"
            self.add(Row(label, self.durability, count(a), count(b), ratio(a, b), "; ".join(notes)))
        self._drop_database(template)
        self._drop_database(bare_template)

    def _run_workers(self, kind: str, target: Callable[..., None], template: str, procs: int) -> Run:
        """As the SQLite round trip's ``_run_workers``, on a fresh copy of the ``template``
        database, but the window opens once every process has made its first claim: importing
        psycopg and connecting cost a rowfleet worker tenths of a second here, which a window
        opened by the first claim would charge to throughput. Also reads the CPU the processes
        and their server backends spend per job over the window (Linux /proc; None elsewhere)."""
        window = self.sizes.pg_roundtrip_window
        table = yardstick.TABLE if kind in BARE_KINDS else "jobs"  # a fixed name of ours, never input
        url = self._new_database(f"{kind}{procs}", template)
        barrier = self.mp.Barrier(procs + 1)
        children = [self.mp.Process(target=target, args=(url, self.lab.task_dir, barrier),
                                    name=f"bench-pg-{kind}-{i}") for i in range(procs)]
        for child in children:
            child.start()
        try:
            harness.await_start_line(barrier, children, f"pg {kind}")
            with _connect(url) as conn:
                start = time.time()
                barrier.wait()
                self._await_all_claiming(conn, table, procs, children)
                backends = [pid for (pid,) in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND backend_type = 'client backend' AND pid <> pg_backend_pid()")]
            workers = [child.pid for child in children]
            cpu_from, cpu_at = (cpu_seconds(workers), cpu_seconds(backends)), time.time()
            time.sleep(window + 0.1)
            cpu_to, cpu_until = (cpu_seconds(workers), cpu_seconds(backends)), time.time()
            stopped = cpu_until - 0.05  # commits begun before this had time to land
        finally:
            for child in children:
                child.terminate()  # jobs in hand are abandoned: this database is thrown away
            for child in children:
                child.join(30)
        completed = (f"SELECT count(*) FROM {table} WHERE state = 'completed' "
                     "AND finished_at > %(after)s AND finished_at <= %(until)s")
        with _connect(url) as conn:
            first, holders = conn.execute(
                f"SELECT max(first), count(*) FROM (SELECT min(started_at) AS first FROM {table} "
                "WHERE started_at IS NOT NULL GROUP BY claimed_by) AS firsts").fetchone()
            first = first or start
            end = first + window
            done = conn.execute(completed, {"after": first, "until": end}).fetchone()[0]
            last = conn.execute(f"SELECT max(finished_at) FROM {table} WHERE state = 'completed'").fetchone()[0]
            queued = conn.execute(f"SELECT count(*) FROM {table} WHERE state = 'queued'").fetchone()[0]
            per_holder = [n for (n,) in conn.execute(completed + " GROUP BY claimed_by ORDER BY 1 DESC",
                                                     {"after": first, "until": end})]
            measured = conn.execute(completed, {"after": cpu_at, "until": cpu_until}).fetchone()[0]
        self._drop_database(url)
        problem = ""
        elapsed = window
        if holders < procs:
            problem = f"{kind}: only {holders} of {procs} processes claimed a job"
        if end > stopped:
            problem = f"{kind}: the last process's first claim came {first - start:.2f} s after the release; " \
                      f"the window was cut short"
            elapsed = max(1e-6, stopped - first)
        if queued == 0:  # drained early: the window would undercount
            problem = "the queue ran dry: raise Sizes.pg_roundtrip_jobs"
            elapsed = max(1e-6, (last or end) - first)
        if done == 0:
            problem = f"{kind}: no job completed in the window"
        split = [100.0 * n / max(1, done) for n in per_holder] + [0.0] * (procs - len(per_holder))
        client = server = None
        if measured and None not in cpu_from + cpu_to:
            client = (cpu_to[0] - cpu_from[0]) / measured * 1e6
            server = (cpu_to[1] - cpu_from[1]) / measured * 1e6
        return Run(done / elapsed, split, first - start, problem, client, server)

    @staticmethod
    def _await_all_claiming(conn: Any, table: str, procs: int, children: list[Any]) -> None:
        """Return once ``procs`` holders have a running job in ``table`` (one of ours), or when
        STARTUP_LIMIT passes: the window is then found cut short."""
        deadline = time.monotonic() + STARTUP_LIMIT
        while time.monotonic() < deadline and all(c.exitcode is None for c in children):
            if conn.execute(f"SELECT count(DISTINCT claimed_by) FROM {table} WHERE state = 'running'"
                            ).fetchone()[0] >= procs:
                return
            time.sleep(0.01)

    # 2. idle wake latency

    def wake(self) -> None:
        samples = self.sizes.wake_samples
        progress(f"pg idle wake: {samples} enqueues, one at a time, to an idle worker (LISTEN), "
                 f"and a bare LISTEN connection")
        url = self._new_database("wake")
        ours, floor = self._wake_samples(url, samples)
        self._drop_database(url)
        slow = sum(1 for latency in ours if latency > SLOW_WAKE)
        for label, q in (("p50", 0.50), ("p99", 0.99)):
            a, b = percentile(ours, q) * 1000, percentile(floor, q) * 1000
            # No ratio: the floor is about zero (the NOTIFY can arrive before the COMMIT returns).
            note = f"handler start vs a bare LISTEN hearing the NOTIFY; {len(ours)} samples, spaced 20-50 ms"
            if q == 0.99:
                note += f"; {slow} over {SLOW_WAKE * 1000:.0f} ms (the 1 s safety poll), max {max(ours) * 1000:.1f} ms"
            self.add(Row(f"pg idle wake latency {label} (ms)", self.durability, f"{a:.2f}", f"{b:.2f}", "-", note))

    def _wake_samples(self, url: str, samples: int) -> tuple[list[float], list[float]]:
        """Seconds from each enqueue's commit returning to its handler's start, and to a bare
        LISTEN connection (another process) reading its notification."""
        control, child_end = self.mp.Pipe()
        worker = self.mp.Process(target=harness.idle_worker, args=(url, self.lab.task_dir, "bells", child_end),
                                 name="bench-pg-idle-worker")
        listen, listen_end = self.mp.Pipe()
        listener = self.mp.Process(target=bare_listener, args=(url, listen_end), name="bench-pg-listener")
        worker.start()
        listener.start()
        child_end.close()
        listen_end.close()
        reader = _connect(url)
        harness.configure_api(url)
        try:
            if not listen.poll(30) or listen.recv() != "ready":
                raise RuntimeError("the bare LISTEN process did not start")
            harness.wait_for(lambda: reader.execute("SELECT count(*) FROM workers").fetchone()[0] > 0,
                              "the idle worker's first heartbeat", worker)
            time.sleep(0.3)  # let it settle into its wait
            rng = random.Random(7)
            committed: list[tuple[int, float]] = []
            warmup = 3
            for _ in range(warmup + samples):
                job_id = rowfleet.enqueue(STAMP, queue=QUEUE).id
                committed.append((job_id, time.time()))  # the commit has returned: visible to all
                time.sleep(rng.uniform(0.020, 0.050))  # the handler usually ran meanwhile
                harness.wait_for(lambda: reader.execute("SELECT state FROM jobs WHERE id = %s", (job_id,)
                                                         ).fetchone()[0] == "completed", f"job {job_id}", worker)
            listen.send("stop")
            if not listen.poll(10):
                raise RuntimeError("the bare LISTEN process did not report")
            heard = listen.recv()
            started = dict(reader.execute("SELECT id, result FROM jobs WHERE state = 'completed'").fetchall())
        finally:
            reader.close()
            for pipe, child in ((control, worker), (listen, listener)):
                harness.stop_child(pipe, child)
        if len(heard) != len(committed):
            raise RuntimeError(f"the bare LISTEN process heard {len(heard)} notifications for "
                               f"{len(committed)} enqueues")
        ours = [float(started[job_id]) - at for job_id, at in committed[warmup:]]
        floor = [stamp - at for stamp, (_, at) in zip(heard[warmup:], committed[warmup:])]
        return ours, floor

    # 3. claim latency against the queue's depth

    def claim(self) -> None:
        """Claim latency at each depth, loading only the rows each depth adds to the last."""
        depths = sorted(self.sizes.claim_rows)
        url, bare_url = self._new_database("claim"), self._new_yardstick("claim_bare")
        harness.configure_api(url)
        medians: dict[int, tuple[float, float]] = {}
        loaded = 0
        for rows in depths:
            progress(f"pg claim latency: loading {rows - loaded:,} queued rows to reach {rows:,}")
            start, before = time.perf_counter(), loaded
            while loaded < rows:
                batch = min(self.sizes.pg_load_batch, rows - loaded)
                loaded += rowfleet.enqueue_many(NOOP, [None] * batch, queue=QUEUE)
            load_rate = (loaded - before) / (time.perf_counter() - start)
            with _connect(url) as conn:
                conn.execute("VACUUM ANALYZE jobs")
            took = time.perf_counter() - start
            with _connect(bare_url) as conn:
                yardstick.pg_load(conn, loaded - before)
            plan = self._claim_plan(url)
            progress(f"pg claim latency: {rows:,} queued rows: rowfleet and bare taking turns")
            ours, bare, samples = self._claims(url, bare_url)
            medians[rows] = (ours, bare)
            notes = [f"median of {samples:,}", plan,
                     f"loaded + VACUUM ANALYZE in {took:.1f} s (enqueue_many {load_rate:,.0f} jobs/s)"]
            if rows == depths[-1] and len(depths) > 1:
                o0, b0 = medians[depths[0]]
                notes.append(f"{short(rows)}/{short(depths[0])}: rowfleet {ours / o0:.2f}x, bare {bare / b0:.2f}x")
            self.add(Row(f"pg claim latency, {short(rows)} queued (us)", self.durability, f"{ours:.0f}",
                         f"{bare:.0f}", ratio(ours, bare), "; ".join(notes)))
        self._drop_database(url)
        self._drop_database(bare_url)
        self._claim_behind_delayed()
        self._claim_with_affinity()

    def _claim_behind_delayed(self) -> None:
        """Claim latency when delayed jobs of a higher priority sort ahead of the due ones,
        against rowfleet's own claim with none delayed, taking turns."""
        s = self.sizes
        due, delayed = 10_000, s.delayed_rows
        progress(f"pg claim latency: {due:,} due rows behind {delayed:,} delayed ones of higher priority")
        behind, alone = self._new_database("claim_delayed"), self._new_database("claim_none_delayed")
        for url, later in ((behind, delayed), (alone, 0)):
            with open_store(Config(db=url, project=PROJECT)) as store:
                store.enqueue_many(JobSpec(task=NOOP, queue=QUEUE, project=PROJECT), [None] * due)
                while later > 0:
                    batch = min(s.pg_load_batch, later)
                    later -= store.enqueue_many(JobSpec(task=NOOP, queue=QUEUE, project=PROJECT, priority=-1,
                                                        delay=3600.0), [None] * batch)
            with _connect(url) as conn:
                conn.execute("VACUUM ANALYZE jobs")
        plan = self._claim_plan(behind)
        stores = [open_store(Config(db=url, project=PROJECT)) for url in (behind, alone)]
        claim = Claim(PROJECT, QUEUE, f"bench:{os.getpid()}", 600.0)
        try:
            ours, base, calls = claim_micros((stores[0], claim), (stores[1], claim), s)
        finally:
            for store in stores:
                store.close()
        self.add(Row(f"pg claim latency, 10k due behind {short(delayed)} delayed (us)", self.durability,
                     f"{ours:.0f}", f"{base:.0f}", ratio(ours, base),
                     f"median of {calls:,}; baseline: rowfleet's claim with 10k queued "
                     f"and none delayed; {plan}"))
        for url in (behind, alone):
            self._drop_database(url)

    def _claim_with_affinity(self) -> None:
        """Store.claim with a GPU box's routing inputs (a models gate of three, a warm model,
        a rank) vs the plain Store.claim, taking turns on 100k queued model jobs."""
        s, rows = self.sizes, 100_000
        progress(f"pg claim latency: {rows:,} queued model jobs, with routing inputs and plain")
        url = self._new_database("claim_affinity")
        models = ("A", "B", "C")
        with open_store(Config(db=url, project=PROJECT)) as store:
            for n in range(0, rows, 1000):  # a third of each model, interleaved by arrival
                store.enqueue_many(JobSpec(task=NOOP, queue=QUEUE, project=PROJECT, model=models[n // 1000 % 3]),
                                   [None] * min(1000, rows - n))
        with _connect(url) as conn:
            conn.execute("VACUUM ANALYZE jobs")
        routed = Claim(PROJECT, QUEUE, "bench:affinity", 600.0, models=models, warm_model="B", rank=("C", "B", "A"))
        cold = Claim(PROJECT, QUEUE, "bench:cold", 600.0, models=models, rank=("C", "B", "A"))
        plain = Claim(PROJECT, QUEUE, "bench:plain", 600.0)
        store = open_store(Config(db=url, project=PROJECT))
        try:
            ours, base, calls = claim_micros((store, routed), (store, plain), s)
            cold_us, cold_base, cold_calls = claim_micros((store, cold), (store, plain), s)
        finally:
            store.close()
        self._drop_database(url)
        verdict = "met" if ours < 1.10 * base else "not met"
        self.add(Row(f"pg claim latency with model affinity, {short(rows)} queued (us)", self.durability,
                     f"{ours:.0f}", f"{base:.0f}", ratio(ours, base),
                     f"median of {calls:,}; a warm box's claim; baseline: the plain Store.claim on the same "
                     f"database; target < 1.10x: {verdict}"))
        self.add(Row(f"pg claim latency, cold box's pick, {short(rows)} queued (us)", self.durability,
                     f"{cold_us:.0f}", f"{cold_base:.0f}", ratio(cold_us, cold_base),
                     f"median of {cold_calls:,}; no warm model: the routed form probes every kind and sorts the few"))

    def _claim_plan(self, url: str) -> str:
        """Which index PostgreSQL's plan for rowfleet's own claim query searches."""
        params = {**claim_params(Claim(PROJECT, QUEUE, "x", 600.0)), "now": None}
        with _connect(url) as conn:
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + queries("postgres")["claim"], params))
        if "jobs_claim" in plan:
            return "plan: jobs_claim index"
        return "plan: " + "; ".join(line.strip() for line in plan.splitlines()[:3])

    def _claims(self, url: str, bare_url: str) -> tuple[float, float, int]:
        """Median microseconds per claim of ``Store.claim`` on ``url`` and of the yardstick's
        claim on ``bare_url``, taking turns, and how many each timed. The claimed jobs are put
        back on both."""
        s = self.sizes
        store = open_store(Config(db=url, project=PROJECT))
        holder = f"bench:{os.getpid()}"
        bare_conn = _connect(bare_url)

        def bare() -> None:
            if yardstick.pg_claim_one(bare_conn, "bare") is None:
                raise RuntimeError("the claim benchmark ran out of queued jobs")

        def ours() -> None:
            if store.claim(Claim(PROJECT, QUEUE, holder, 600.0)) is None:
                raise RuntimeError("the claim benchmark ran out of queued jobs")

        try:
            mine, theirs = paired(ours, bare, s.claims, s.claim_seconds, warmup=s.claim_warmup)
            yardstick.pg_requeue(bare_conn)
        finally:
            store.close()
            bare_conn.close()
        with _connect(url) as conn, conn.transaction():
            conn.execute(REQUEUE_CLAIMED)
            conn.execute("DELETE FROM job_events")
        return medians(mine, theirs)
