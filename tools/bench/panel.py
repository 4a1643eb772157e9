"""The ``panel`` section of rowfleet's benchmark: how long each page of the operator panel
takes to answer over HTTP with a long-running deployment's rows in the database, on SQLite
and on PostgreSQL.

For each database it loads one fixture (``Fixture``; the same shape on both), starts the
real panel as ``rowfleet panel`` serves it (``rowfleet.panel.server.serve``) on 127.0.0.1
port 0 in a thread, and times sequential GETs of every page in ``PAGES`` over ``http.client`` against
GET ``/static/panel.css`` on the same server (the HTTP floor: no store is opened), the two
taking turns in blocks. One row per page per database: the p95 in milliseconds, the
floor's, and the p50s and the verdict against the panel's target (p95 <= ``TARGET_MS``)
in the note. When a page misses the target, the worst page's function is run once more,
directly, under cProfile, and a row lists where its time went.

The fixture is written by plain SQL, a few ``INSERT ... SELECT`` statements over a series
(as ``tools/bench/metrics.py`` loads its million jobs): the jobs, the runs written as
finished and their nodes, and every host's samples; the rest goes through the store's own
calls (runs started by ``Store.start_run``, claims, worker heartbeats, switches, fired
schedule slots, model loads), so that the rows read as rowfleet writes them. The SQL is
written once, with SQLite's ``:name`` parameters (``pg_text`` turns it into psycopg's);
only the series it walks differs per dialect (``SERIES``).

PostgreSQL comes from the harness's ``pg_server`` (tests/pg_harness.py, or the server
``ROWFLEET_TEST_PG`` names); without one the section adds one row saying why. This module
never imports psycopg: it reaches the server through the harness's ``PgServer.psql``.
Imports the harness and rowfleet's public pieces, never another section.
"""

from __future__ import annotations

import cProfile
import dataclasses
import http.client
import pstats
import queue
import re
import sqlite3
import statistics
import threading
import time
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit

from . import harness
from .harness import PROJECT, Bench, Row, percentile, progress, ratio, short

from rowfleet import control, dag
from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.job import JobSpec, encode_json
from rowfleet.panel import app, pages
from rowfleet.panel.server import serve
from rowfleet.store import open_store
from rowfleet.telemetry.readings import fold_minute

LEGEND = """\
  panel       GET of each page of the operator panel: the real panel, served as `rowfleet panel`
              serves it (rowfleet.panel.server.serve) on 127.0.0.1:0 in a thread, which opens a store per request, asked over
              http.client, one connection per request, one request at a time. rowfleet: the
              page's p95 in ms; baseline: the p95 of GET /static/panel.css on the same server
              (the HTTP floor: no store), the two taking turns in blocks of 5 after a warm-up
              GET each: 30 GETs of each (10 with --quick), fewer for a page once it has had 3
              and 10 s (2 s) have passed. The note has both p50s, how many GETs, and the
              verdict against the target (p95 <= 100 ms). The fixture, the same shape on both
              databases: N jobs (the newest 1% queued, the rest finished over the last 24 h
              and created over 7 days, 1 in 100 failed, run on gpu-0..gpu-19, a third needing
              one of 4 models, one in 250,000 holding the rare args the search looks for),
              N/100 workflow runs of 6 nodes (a few hundred started by Store.start_run, the
              rest written as completed with a job per node), 20 hosts with minute samples
              and 2 s detail samples (CPU and 8 GPUs) of the last 24 h (1 h with --quick,
              which has 100k jobs), one host silent for 15 minutes; 20 GPU workers beating
              with a job each, 3 switches, 2 schedules' slots. While the pages are timed, the
              19 hosts that sample go on sampling: a thread writes each one's detail row every
              2 s through the store, and folds each minute that ends into its minute row, as
              the sampler does, so that a page showing samples never answers from rows that
              stopped changing. A page that misses the target gets a "profile" row: its
              function called once directly under cProfile, the calls that took the most
              time."""

FULL_JOBS = 1_000_000    # the fixture the target is stated for; fewer jobs: the small one
HOSTS = 20
GPUS = 8
WORKERS = 20             # GPU workers beating, one per host, each running a job
MODELS = 4
TARGET_MS = 100.0
FLOOR = "/static/panel.css"
BLOCK = 5                # requests of one side before the other takes its turn
LEAST = 3                # requests a page gets however slow, unless its warm-up alone took its time
DETAIL_EVERY = 2.0       # seconds between a host's detail samples
SILENT_HOST = HOSTS - 1  # the host whose sampler stopped ...
SILENT_FOR = 900.0       # ... this many seconds ago
RARE = "needle-rare"     # the args substring of one job in RARE_EVERY
RARE_EVERY = 250_000
NODES = ("fetch", "train-a", "train-b", "train-c", "merge", "report")
WORKFLOW_JOB_EVERY = 16  # one job in this many belongs to a finished run's node
DAY = 86_400.0
WEEK = 7 * DAY

# The pages timed: (label, address); <job> and <run> are filled in once the fixture is loaded.
PAGES = (
    ("/", "/"),
    ("/deck", "/deck"),
    ("/deck?host=gpu-3", "/deck?host=gpu-3"),
    ("/jobs", "/jobs"),
    ("/jobs?state=failed", "/jobs?state=failed"),
    ("/jobs?queue=..&task=..", "/jobs?queue=queue-1&task=bench_tasks%3Atask5"),
    ("/jobs?args=<rare>", f"/jobs?args={RARE}"),
    ("/jobs/<id>", "/jobs/<job>"),
    ("/runs", "/runs"),
    ("/runs/<id>", "/runs/<run>"),
    ("/workers", "/workers"),
    ("/schedules", "/schedules"),
    ("/models", "/models"),
    ("/api/jobs", "/api/jobs"),
)

# The series each load walks, i from :first to :last: it replaces {series} in the loads.
SERIES = {
    "sqlite": "WITH RECURSIVE n(i) AS (SELECT CAST(:first AS INTEGER) UNION ALL SELECT i + 1 FROM n WHERE i < :last)",
    "postgres": "WITH n(i) AS (SELECT generate_series(CAST(:first AS bigint), CAST(:last AS bigint)))",
}

# Jobs 1..:last. The newest 1% (ids above :finished) are queued; of the others one in a
# hundred failed (in each queue by turns), and they finished over the last day, the newest
# last, each after a run of up to ~36 s on one of the hosts; every job was created over the
# last week, in id order. One job in WORKFLOW_JOB_EVERY, up to :run_jobs of them, is a
# node's job of a finished run (never a failed one: no failed id is a multiple of 16).
JOBS = """
{series}
INSERT INTO jobs (project, queue, task, args, state, run_at, attempts, max_attempts, lease_token, claimed_by, host,
                  result, error, created_at, updated_at, started_at, finished_at, required_model, warm_claim,
                  run_id, node_id, node_generation)
SELECT '', 'queue-' || (i % 4), 'bench_tasks:task' || (i % 20),
       CASE WHEN i % :rare_every = :rare_at THEN '{"n": ' || i || ', "tag": "' || :rare || '"}'
            ELSE '{"n": ' || i || ', "shard": "s-' || (i % 1000) || '"}' END,
       CASE WHEN i > :finished THEN 'queued' WHEN {failed} THEN 'failed' ELSE 'completed' END,
       created, CASE WHEN i > :finished THEN 0 WHEN {failed} THEN 5 ELSE 1 END, 5,
       CASE WHEN i > :finished THEN 0 ELSE 1 END,
       CASE WHEN i <= :finished THEN 'gpu-' || (i % :hosts) || ':' || (1000 + i % :hosts) END,
       CASE WHEN i <= :finished THEN 'gpu-' || (i % :hosts) END,
       CASE WHEN i <= :finished AND NOT ({failed}) THEN 'null' END,
       CASE WHEN i <= :finished AND {failed} THEN 'RuntimeError: the bench job ' || i || ' failed' END,
       created, CASE WHEN i > :finished THEN created ELSE finished END,
       CASE WHEN i <= :finished THEN finished - (i % 97) * 0.37 END,
       CASE WHEN i <= :finished THEN finished END,
       CASE WHEN i % 3 = 0 THEN 'model-' || (i % :models) END,
       CASE WHEN i <= :finished AND i % 3 = 0 AND i % 5 <> 0 THEN 1 ELSE 0 END,
       CASE WHEN {workflow} THEN (i / :every - 1) / :nodes + 1 END,
       CASE WHEN {workflow} THEN {node} END,
       CASE WHEN {workflow} THEN 0 END
FROM (SELECT i, :now - :week * (:last - i) / :last AS created,
             :now - 5.0 - :day * (:finished - i) / :finished AS finished
      FROM n) AS s
""".replace("{failed}", "i % 100 = 7 + (i / 100) % 4").replace(
    "{workflow}", "i % :every = 0 AND i / :every <= :run_jobs").replace(
    "{node}", "CASE (i / :every - 1) % :nodes " + " ".join(f"WHEN {k} THEN '{node}'" for k, node in enumerate(NODES))
    + " END")

# Runs 1..:last, finished (completed) over the last week, ten minutes each.
RUNS = """
{series}
INSERT INTO runs (project, name, state, definition, args, created_at, updated_at, finished_at)
SELECT '', :name, 'completed', :definition, '{"r": ' || i || '}', created, created + 600.0, created + 600.0
FROM (SELECT i, :now - :week * (:last - i) / :last - 600.0 AS created FROM n) AS s
"""

RUN_NODES = """
INSERT INTO run_nodes (run_id, node_id, state, generation, result, updated_at)
SELECT runs.id, node.column1, 'completed', 0, '{"ok": true}', runs.finished_at
FROM runs CROSS JOIN (VALUES """ + ", ".join(f"('{node}')" for node in NODES) + """) AS node
"""


def _readings() -> str:
    """The SQL expression of one sample's readings as JSON text, from its host ``h``, its
    number ``k`` (0: the newest) and the ``:interval`` and ``:samples`` it stands for:
    the host's CPU, memory, disk and network, and each GPU's use, heat, power, clocks,
    memory and throttling, varying from sample to sample (a GPU reaches 85 degrees now and
    then; one sample in 30 holds a power-cap throttle)."""
    parts = [("interval", ":interval"), ("samples", ":samples"), ("cpu.busy", "(k * 7 + h * 3) % 100"),
             ("load.1", "(k % 40) * 0.25"), ("mem.used", "17179869184 + (k % 64) * 67108864"),
             ("mem.total", "68719476736"), ("temp.hottest", "50 + (k + h) % 36"),
             ("net.eth0.rx_bps", "1000000 + (k % 50) * 20000"), ("net.eth0.tx_bps", "200000 + (k % 30) * 5000"),
             ("disk./.used", "274877906944"), ("disk./.total", "1099511627776")]
    for g in range(GPUS):
        parts += [(f"gpu.{g}.util", f"(k * 7 + {g * 13}) % 101"), (f"gpu.{g}.temp", f"55 + (k + {g * 3}) % 31"),
                  (f"gpu.{g}.power_w", f"300 + (k * 11 + {g}) % 400"), (f"gpu.{g}.power_limit_w", "700"),
                  (f"gpu.{g}.sm_mhz", f"1500 + (k * 17 + {g}) % 480"),
                  (f"gpu.{g}.vram_used_mib", f"40000 + (k * 31 + {g * 1000}) % 40000"),
                  (f"gpu.{g}.vram_total_mib", "81559"),
                  (f"gpu.{g}.throttle_s.sw_power_cap", f"CASE WHEN (k + {g}) % 30 = 0 THEN 0.5 ELSE 0 END")]
    return "'{' || " + " || ', ' || ".join(f"'\"{name}\": ' || ({value})" for name, value in parts) + " || '}'"


# Samples 0..:last of every host, :every seconds apart back from :newest, one host silent
# for its newest :silent samples.
SAMPLES = """
{series}
INSERT INTO host_samples (host, tier, at, readings)
SELECT 'gpu-' || h, :tier, :newest - k * :every, """ + _readings() + """
FROM (SELECT i % :hosts AS h, i / :hosts AS k FROM n) AS s
WHERE NOT (h = :silent_host AND k < :silent)
"""


@dataclasses.dataclass(frozen=True)
class Fixture:
    """What the database holds while the pages are timed, and how many requests each
    page gets."""

    jobs: int
    runs: int
    started_runs: int   # of ``runs``, started through Store.start_run (the rest by SQL)
    hours: float        # of samples of each tier
    requests: int       # timed GETs per page, and as many of the floor, at most ...
    seconds: float      # ... and once a page has LEAST of them, for at most this long

    @property
    def finished(self) -> int:
        """The newest finished job's id: the jobs above it are queued."""
        return self.jobs - self.jobs // 100

    def describe(self) -> str:
        """The fixture as a row's note names it.

        >>> fixture_for(1_000_000).describe()
        '1M jobs, 10k runs, 20 hosts x 24 h'
        """
        return f"{short(self.jobs)} jobs, {short(self.runs)} runs, {HOSTS} hosts x {self.hours:g} h"


def fixture_for(jobs: int) -> Fixture:
    """The fixture of ``jobs`` jobs (1,000 at least): a run per hundred jobs; at
    ``FULL_JOBS`` and above a day of samples and 30 requests per page in at most 10 s,
    below it (``--quick``) an hour and 10 requests in at most 2 s.

    >>> fixture_for(1_000_000)
    Fixture(jobs=1000000, runs=10000, started_runs=200, hours=24, requests=30, seconds=10.0)
    >>> fixture_for(100_000)
    Fixture(jobs=100000, runs=1000, started_runs=20, hours=1, requests=10, seconds=2.0)
    >>> fixture_for(10).describe()
    '1k jobs, 10 runs, 20 hosts x 1 h'
    """
    jobs = max(jobs, 1000)
    full = jobs >= FULL_JOBS
    runs = jobs // 100
    return Fixture(jobs=jobs, runs=runs, started_runs=min(200, max(1, runs // 50)), hours=24 if full else 1,
                   requests=30 if full else 10, seconds=10.0 if full else 2.0)


def pg_text(sql: str) -> str:
    """SQL written with SQLite's ``:name`` parameters as psycopg takes it: ``%(name)s``,
    and every other ``%`` doubled.

    >>> pg_text("SELECT i % 4, :now, x::text, ':' || y")
    "SELECT i %% 4, %(now)s, x::text, ':' || y"
    """
    return re.sub(r"(?<![:\w]):([A-Za-z_]\w*)", r"%(\1)s", sql.replace("%", "%%"))


def verdict(p95_ms: float) -> str:
    """The note's word on the target.

    >>> verdict(42.0), verdict(130.5)
    ('met', 'missed by 30.5 ms')
    """
    return "met" if p95_ms <= TARGET_MS else f"missed by {p95_ms - TARGET_MS:.1f} ms"


def workflow() -> dag.Workflow:
    """The workflow every run of the fixture is of: a fetch, three trainings, a merge, a report."""
    task = "bench_tasks:step"
    return dag.parse_workflow({"name": "bench-train", "nodes": [
        {"id": "fetch", "task": task, "queue": "queue-0"},
        *[{"id": node, "task": task, "queue": "queue-1", "depends_on": ["fetch"], "model": "model-1"}
          for node in ("train-a", "train-b", "train-c")],
        {"id": "merge", "task": task, "queue": "queue-2", "depends_on": ["train-a", "train-b", "train-c"]},
        {"id": "report", "task": task, "queue": "queue-3", "depends_on": ["merge"]}]})


# --- the run -------------------------------------------------------------------------------


def run(bench: Bench) -> None:
    fixture = fixture_for(max(bench.sizes.claim_rows))
    on_sqlite(bench, fixture)
    on_postgres(bench, fixture)


def on_sqlite(bench: Bench, fixture: Fixture) -> None:
    path = bench.lab.database("panel")
    config = Config(db=path, project=PROJECT)
    started = time.perf_counter()
    progress(f"panel sqlite: loading {fixture.describe()}")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = DELETE")  # nothing here must survive a crash
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN IMMEDIATE")
        load(lambda sql, params: conn.execute(sql, params), "sqlite", fixture)
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()
    targets = through_store(config, fixture)
    measure(bench, "sqlite", "-", config, fixture, targets, time.perf_counter() - started)


def on_postgres(bench: Bench, fixture: Fixture) -> None:
    server = harness.pg_server(bench, "panel", "panel pg")
    if server is None:
        return
    try:
        url = server.create_database("rowfleet_bench_panel")
        config = Config(db=url, project=PROJECT)
        with open_store(config, create=True) as store:
            store.migrate()
        settings = dict(server.psql(url, "SELECT name, setting FROM pg_settings WHERE name IN "
                                         "('fsync', 'synchronous_commit', 'full_page_writes')"))
        started = time.perf_counter()
        progress(f"panel pg: loading {fixture.describe()}")
        load(lambda sql, params: server.psql(url, pg_text(sql), params), "postgres", fixture)
        targets = through_store(config, fixture)
        server.psql(url, "VACUUM ANALYZE")  # what autovacuum does after such a load
        measure(bench, "pg", harness.durability(settings), config, fixture, targets, time.perf_counter() - started)
    except Exception as exc:
        if type(exc).__module__.startswith("psycopg"):
            raise RuntimeError(f"PostgreSQL: {' '.join(str(exc).split())}") from exc
        raise
    finally:
        server.stop()


def load(execute: Callable[[str, dict[str, Any]], Any], dialect: str, fixture: Fixture) -> None:
    """Write the fixture's jobs, finished runs with their nodes, and host samples by plain
    SQL: ``execute(sql, params)`` runs one statement written with ``:name`` parameters."""
    now, series = time.time(), SERIES[dialect]
    bulk_runs = fixture.runs - fixture.started_runs
    execute(JOBS.replace("{series}", series), {
        "first": 1, "last": fixture.jobs, "finished": fixture.finished, "now": now, "week": WEEK, "day": DAY,
        "hosts": HOSTS, "models": MODELS, "rare_every": RARE_EVERY, "rare_at": 4321, "rare": RARE,
        "every": WORKFLOW_JOB_EVERY, "nodes": len(NODES), "run_jobs": bulk_runs * len(NODES)})
    execute(RUNS.replace("{series}", series), {"first": 1, "last": bulk_runs, "now": now, "week": WEEK,
                                         "name": workflow().name, "definition": encode_json(workflow().to_dict())})
    execute(RUN_NODES, {})
    per_host = int(fixture.hours * 3600 / DETAIL_EVERY)
    execute(SAMPLES.replace("{series}", series), {
        "first": 0, "last": HOSTS * per_host - 1, "tier": "detail", "newest": now, "every": DETAIL_EVERY,
        "interval": DETAIL_EVERY, "samples": 1, "hosts": HOSTS, "silent_host": SILENT_HOST,
        "silent": int(SILENT_FOR / DETAIL_EVERY)})
    minutes = int(fixture.hours * 60)
    execute(SAMPLES.replace("{series}", series), {
        "first": 0, "last": HOSTS * minutes - 1, "tier": "minute", "newest": (now // 60 - 1) * 60, "every": 60.0,
        "interval": 60.0, "samples": int(60 / DETAIL_EVERY), "hosts": HOSTS, "silent_host": SILENT_HOST,
        "silent": int(SILENT_FOR / 60)})


def through_store(config: Config, fixture: Fixture) -> dict[str, int]:
    """What the store's own calls write: the runs started, each host's sampler lease, the
    GPU workers' claims and heartbeats, switches, schedule slots and model loads. The ids
    of the job and the run whose pages are timed."""
    now = time.time()
    flow = workflow()
    with open_store(config) as store:
        bulk_runs = store.reads.search_runs(None, limit=1)[0].id
        if bulk_runs != fixture.runs - fixture.started_runs:
            raise RuntimeError(f"the panel fixture's {fixture.runs - fixture.started_runs:,} runs written by SQL end "
                               f"at id {bulk_runs}: the database was not fresh")
        for n in range(fixture.started_runs):
            store.start_run(flow, {"r": bulk_runs + n + 1}, PROJECT)
        for h in range(HOSTS):
            if h != SILENT_HOST and not store.acquire_sampler(f"gpu-{h}", f"gpu-{h}:bench", 600.0):
                raise RuntimeError(f"the panel benchmark could not take gpu-{h}'s sampler lease")
        for n in range(WORKERS):
            host, queue = f"gpu-{n % HOSTS}", f"queue-{n % 4}"
            holder = f"{host}:{2000 + n}"
            job = store.claim(Claim(PROJECT, queue, holder, 600.0))
            store.worker_beat(f"{holder}:{int(now)}", PROJECT, host, queue, 2000 + n, job.id if job else None,
                              models=tuple(f"model-{m}" for m in range(MODELS)), gpu_index=n // HOSTS,
                              vram_total_mb=81559, warm_model=f"model-{n % MODELS}", warm_since=now - 3600)
        store.set_switch(PROJECT, "gpu-5", "queue-1", control.OFF, control.DRAIN, changed_by="bench",
                         reason="maintenance")
        store.set_switch(PROJECT, "gpu-6", control.ANY, control.OFF, control.HARD, changed_by="bench", reason="bad fan")
        store.set_switch(PROJECT, "gpu-6", "queue-2", control.ON, changed_by="bench")
        for name, every in (("nightly", DAY), ("hourly", 3600.0)):
            for slot in range(10, 0, -1):
                at = (now // every - slot) * every
                store.fire_slot(PROJECT, name, at, JobSpec(task=f"bench_tasks:{name}", queue="queue-0"), "bench")
        for m in range(MODELS):
            store.record_model_load(PROJECT, f"model-{m}", 20.0 + 5 * m, 20000 + 4000 * m, True)
    job = max(i for i in range(1, fixture.finished + 1) if i % 100 == 7 + i // 100 % 4)  # the newest failed job
    return {"job": job, "run": bulk_runs}


# --- the samplers going on ------------------------------------------------------------------


def live_readings(h: int, k: int) -> dict[str, Any]:
    """Host ``h``'s ``k``-th live sample: the readings ``_readings`` gives a loaded row."""
    readings: dict[str, Any] = {
        "interval": DETAIL_EVERY, "samples": 1, "cpu.busy": (k * 7 + h * 3) % 100, "load.1": (k % 40) * 0.25,
        "mem.used": 17179869184 + (k % 64) * 67108864, "mem.total": 68719476736, "temp.hottest": 50 + (k + h) % 36,
        "net.eth0.rx_bps": 1000000 + (k % 50) * 20000, "net.eth0.tx_bps": 200000 + (k % 30) * 5000,
        "disk./.used": 274877906944, "disk./.total": 1099511627776}
    for g in range(GPUS):
        readings.update({f"gpu.{g}.util": (k * 7 + g * 13) % 101, f"gpu.{g}.temp": 55 + (k + g * 3) % 31,
                         f"gpu.{g}.power_w": 300 + (k * 11 + g) % 400, f"gpu.{g}.power_limit_w": 700,
                         f"gpu.{g}.sm_mhz": 1500 + (k * 17 + g) % 480,
                         f"gpu.{g}.vram_used_mib": 40000 + (k * 31 + g * 1000) % 40000,
                         f"gpu.{g}.vram_total_mib": 81559,
                         f"gpu.{g}.throttle_s.sw_power_cap": 0.5 if (k + g) % 30 == 0 else 0})
    return readings


class LiveSamplers:
    """Every host but the silent one sampling on while pages are timed: a thread writing
    each host's detail row every ``DETAIL_EVERY`` seconds through a store of its own, and
    at each minute's end the minute row of the rows it wrote in it (``fold_minute``, as
    ``rowfleet.services.sampler`` folds)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="bench-panel-samplers", daemon=True)
        self.written = 0
        self.error: BaseException | None = None

    def __enter__(self) -> "LiveSamplers":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join()
        if self.error is not None:
            raise RuntimeError(f"the panel benchmark's samplers stopped: {self.error!r}") from self.error

    def run(self) -> None:
        minute_rows: dict[int, list[dict[str, Any]]] = {}
        minute: float | None = None
        k = 0
        try:
            with open_store(self.config) as store:
                while not self.stop.is_set():
                    now = store.clock()
                    if minute is not None and now // 60 * 60 > minute:
                        for h, rows in minute_rows.items():
                            store.record_host_minute(f"gpu-{h}", minute, fold_minute(rows))
                        minute_rows = {}
                    minute = now // 60 * 60
                    for h in range(HOSTS):
                        if h != SILENT_HOST:
                            readings = live_readings(h, k)
                            if store.record_host_sample(f"gpu-{h}", f"gpu-{h}:bench", 600.0, readings) is None:
                                raise RuntimeError(f"gpu-{h}'s sampler lease was lost")
                            minute_rows.setdefault(h, []).append(readings)
                            self.written += 1
                    k += 1
                    self.stop.wait(DETAIL_EVERY)
        except BaseException as exc:  # reported by __exit__, on the thread that times
            self.error = exc


# --- timing ----------------------------------------------------------------------------------


def get(host: str, port: int, path: str) -> None:
    """One GET on a connection of its own (the panel answers HTTP/1.0); a refusal raises."""
    conn = http.client.HTTPConnection(host, port, timeout=120)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        body = answer.read()
    except http.client.HTTPException as exc:
        raise RuntimeError(f"the panel's answer to GET {path} is no HTTP: {exc!r}") from exc
    finally:
        conn.close()
    if answer.status != 200:
        line = body.decode("utf-8", "replace").strip().splitlines()[:1]
        raise RuntimeError(f"the panel answered GET {path} with {answer.status} {line[0][:200] if line else ''}")


def turns(page: Callable[[], None], floor: Callable[[], None], fixture: Fixture) -> tuple[list[float], list[float]]:
    """Seconds per call of ``page`` and of ``floor``, taking turns in blocks of ``BLOCK``
    after one warm-up call each: ``fixture.requests`` of each, or fewer once the page has
    ``LEAST`` and ``fixture.seconds`` have passed (one, when its warm-up alone took that
    long), so that a page far off its target does not hold up the rest."""
    clock = time.perf_counter
    start = clock()
    page()
    least = 1 if clock() - start > fixture.seconds else LEAST
    floor()
    took: tuple[list[float], list[float]] = ([], [])
    deadline = clock() + fixture.seconds

    def done() -> bool:
        return len(took[0]) >= fixture.requests or (len(took[0]) >= least and clock() > deadline)

    while not done():
        for op, into in ((floor, took[1]), (page, took[0])):
            for _ in range(BLOCK):
                if len(into) >= fixture.requests or (into is took[0] and done()):
                    break
                start = clock()
                op()
                into.append(clock() - start)
    return took


def measure(bench: Bench, db: str, durability: str, config: Config, fixture: Fixture, targets: dict[str, int],
            loaded: float) -> None:
    """Time every page against the floor on a server of ``config``'s database; a row each,
    after one that says what the database holds."""
    bench.add(Row(f"panel {db} fixture", durability, "-", "-", "-", f"{fixture.describe()}; loaded in {loaded:.1f} s"))
    stop, listening = threading.Event(), queue.Queue()
    thread = threading.Thread(target=serve, args=(config, "127.0.0.1", 0, stop), kwargs={"listening": listening.put},
                              name="bench-panel-http")
    thread.start()  # as `rowfleet panel` serves
    worst: tuple[float, str] = (0.0, "")
    try:
        try:
            address = listening.get(timeout=60)
        except queue.Empty:
            raise RuntimeError("the panel did not listen within 60 s") from None
        where = urlsplit(address)
        host, port = where.hostname or "127.0.0.1", where.port or 80
        progress(f"panel {db}: loaded in {loaded:.1f} s; up to {fixture.requests} GETs of each of {len(PAGES)} "
                 f"pages in {fixture.seconds:g} s each, taking turns with GET {FLOOR}, the hosts sampling on")
        with LiveSamplers(config) as samplers:
            worst = time_pages(bench, db, durability, fixture, targets, host, port)
        progress(f"panel {db}: the samplers wrote {samplers.written} rows while the pages were timed")
    finally:
        stop.set()
        thread.join()
    if worst[0] > TARGET_MS:
        bench.add(profile(db, config, worst[1]))


def time_pages(bench: Bench, db: str, durability: str, fixture: Fixture, targets: dict[str, int], host: str,
               port: int) -> tuple[float, str]:
    """A row per page of ``PAGES``, timed on the server at ``host``:``port``; the worst p95 and its path."""
    worst: tuple[float, str] = (0.0, "")
    for label, address in PAGES:
        path = address.replace("<job>", str(targets["job"])).replace("<run>", str(targets["run"]))
        ours, floor = turns(lambda: get(host, port, path), lambda: get(host, port, FLOOR), fixture)
        p95, p50 = percentile(ours, 0.95) * 1e3, statistics.median(ours) * 1e3
        f95, f50 = percentile(floor, 0.95) * 1e3, statistics.median(floor) * 1e3
        worst = max(worst, (p95, path))
        cut = "" if len(ours) >= fixture.requests else f" (its {fixture.seconds:g} s were spent)"
        bench.add(Row(f"panel {db} GET {label} (ms)", durability, f"{p95:.1f}", f"{f95:.1f}", ratio(p95, f95),
                      f"p95; p50 {p50:.1f}/{f50:.1f}; {len(ours)} GETs{cut}, {len(floor)} of the floor; "
                      f"{fixture.describe()}{'' if path == address else f'; {path}'}; "
                      f"target p95 <= {TARGET_MS:.0f} ms: {verdict(p95)}"))
    return worst


def profile(db: str, config: Config, path: str) -> Row:
    """A row naming where the page at ``path`` spends its time: its function, called
    directly on a store of ``config`` twice, the second time under cProfile (with what the
    first kept in the server's memo, as a refresh finds it); the five calls of most own
    time and the five rowfleet calls of most time in all (below the page itself)."""
    progress(f"panel {db}: profiling GET {path}")
    parts = urlsplit(path)
    as_json, page_path = app.api_path(parts.path)
    route, params = app.find(pages.ROUTES, "GET", page_path)
    memo: dict[str, Any] = {}
    with open_store(config) as store:
        def request() -> app.Request:
            return app.Request("GET", page_path, dict(parse_qsl(parts.query)), {}, store, store.clock(), "bench",
                               False, False, params, memo)
        app.call(route.handler, request())
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.runcall(app.call, route.handler, request())
        took = (time.perf_counter() - start) * 1e3
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (calls, primitive, own, cumulative, callers)

    def named(key: tuple[str, int, str]) -> str:
        file, line, name = key
        where = file.split("/src/")[-1] if "/src/" in file else file.rsplit("/", 1)[-1]
        return f"{name} ({where}:{line})" if line else name

    own = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:5]
    inner = sorted(((key, value) for key, value in stats.items()
                    if "rowfleet/" in key[0] and key[2] != route.handler.__name__ and "panel/app.py" not in key[0]),
                   key=lambda item: item[1][3], reverse=True)[:5]
    note = (f"{took:.0f} ms under the profiler; most own time: "
            + "; ".join(f"{named(key)} {value[2] * 1e3:.0f} ms in {value[0]:,} calls" for key, value in own)
            + ". Most time in all: "
            + "; ".join(f"{named(key)} {value[3] * 1e3:.0f} ms" for key, value in inner))
    progress(f"panel {db}: {path}: {note}")
    return Row(f"panel {db} profile of GET {path}", "-", "-", "-", "-", note)
