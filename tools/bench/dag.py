"""Workflow (DAG) rows of rowfleet's benchmark: the ``dag`` section.

Owns the DAG throughput measurement: nodes per second through a wide fan-out, executed by
real processes, each rowfleet figure beside a baseline measured in the same run by the
same kind of worker processes on the same kind of database.

Every measurement gets a fresh database (a SQLite file from the harness's ``Lab``,
synchronous FULL, the default), two long-running rowfleet worker processes
(``harness.idle_worker``: ``Worker(...).run()`` on the default settings, poll 1 s) and, on
the rowfleet side only, one orchestrator process (``Orchestrator(store, config).run()`` on
the default settings: 5 s sweeps, poll 1 s; it drains the dispatch outbox as soon as a
commit wakes it). Every process has opened the database and gone idle before the clock
starts. Then:

* ``fan-out``: this process calls ``Store.start_run`` on a workflow "root -> N parallel
  no-op nodes -> one fan-in node" (N + 2 nodes of one job each; the fan-in takes no
  arguments). The clock stops at the run's ``finished_at``, written by the orchestrator in
  the drain that completes the run; this process finds it by reading the run's row
  (``store.reads.list_runs``) every 10 ms;
* ``map``: the same with a ``map`` node: the root returns ``list(range(N))``, the map node
  runs one no-op job per item, the fan-in depends on the map node (N + 2 jobs);
* baseline: ``Store.enqueue_many`` of N + 2 plain no-op jobs in one transaction, drained by
  two worker processes as above, with no orchestrator. The clock stops at the last job's
  ``finished_at``, found by reading the job counts every 10 ms.

Both sides start the clock just before the call that writes the first job, so the insert
is counted on both. The figure is (N + 2) / seconds: nodes/s for a workflow (a map item
counts as a node), jobs/s for the baseline; their ratio is what the DAG machinery (a
dispatch event per job, the drain of each, the walk that enqueues the next nodes, the
orchestrator's transactions taking turns with the workers' on one write lock) costs per
node. N is ``Sizes.dag_nodes`` (1000; 100 with ``--quick``). The rounds
(``Sizes.dag_rounds``: 3, one with ``--quick``) alternate baseline, fan-out, map, so that
all three meet the same machine; a row is the median of the rounds.

The note adds CPU time (getrusage in each child, asked over a pipe before and after, as
the idle-worker rows do): the orchestrator's per node until every dispatch event of the
run was drained (events are still drained after the run completed; each then finds the
run ended) and how long after the run's end that was; the two workers' per job, rowfleet
and baseline. And how long the root's dispatch event waited for its drain, which the
whole fan-out waits on.

On PostgreSQL (the harness's ``pg_server``: a throwaway server from tests/pg_harness.py,
or the one ``ROWFLEET_TEST_PG`` names; the durability column is read back from the
server) the fan-out row is measured again the same way, baseline included, on fresh
databases of that server, with N = ``Sizes.pg_dag_nodes`` (1000). Without psycopg or the
server binaries it is one row saying why; with ``--quick``, one row saying it did not run.

Imports the harness (tools/bench/harness.py: the rows must read like the others) and
rowfleet's public pieces, never another section; never psycopg itself, which only
rowfleet's Postgres store and pg_harness load.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, Callable

from . import harness
from .harness import EACH, NOOP, NUMBERS, PROJECT, QUEUE, Bench, Row, count, progress, ratio, rounds_note

from rowfleet import dag
from rowfleet.config import Config
from rowfleet.job import JobSpec
from rowfleet.services.orchestrator import Orchestrator
from rowfleet.store import Store, open_store

LEGEND = """\
  dag rows    workflow throughput, each measurement on a fresh database with two worker
              processes and one orchestrator process (default settings: 1 s poll, 5 s
              sweeps), all idle before the clock starts at Store.start_run; it stops at the
              run's finished_at. Fan-out: root -> N no-op nodes -> fan-in; map: the root
              returns N items -> a map node, one job per item -> fan-in. nodes/s = (N + 2)
              / seconds. Baseline: N + 2 plain no-op jobs enqueued in one transaction and
              drained by two such workers with no orchestrator (jobs/s); "s" is the time of
              each, rowfleet/baseline. "Orchestrator CPU us/node": its user+system CPU until
              every dispatch event of the run was drained, per node; "outbox empty" = how
              long after the run ended that was (an event drained after the end finds the
              run ended, but each drain still reads the whole run). "Workers' CPU us/job":
              rowfleet/baseline. "Root's event drained after": from the root job's finish
              to the drain that enqueues the fan-out; about 1 s means the orchestrator
              missed the wake-up and waited for its poll. pg dag: the same fan-out on the
              pg rows' server, N = Sizes.pg_dag_nodes (not with --quick)."""

WORKERS = 2
POLL_EVERY = 0.01  # seconds between the cheap reads that watch for the end of a run
OUTBOX_POLL = 0.05  # seconds between reads of the run's dispatch events once it ended
READY_TIMEOUT = 60.0  # seconds the children may take to open the database on a loaded machine
# Seconds a wait may take before the measurement counts as stuck: generous, because each
# drain walks the whole run (8-25 s for the fan-out of 1000 on 2 loaded cores, and as long
# again for its outbox to be drained).
DEADLINE_BASE = 30.0
DEADLINE_PER_NODE = 0.1
SLOW_DRAIN = 0.5  # seconds: a root event drained this late waited for the orchestrator's poll
SHAPES = ("fan-out", "map")


def fan_out(n: int) -> dag.Workflow:
    """root -> n parallel no-op nodes -> one fan-in node.

    >>> [node.id for node in fan_out(2).nodes]
    ['root', 'n0', 'n1', 'fan_in']
    """
    nodes: list[dict[str, Any]] = [{"id": "root", "task": NOOP, "queue": QUEUE}]
    nodes += [{"id": f"n{i}", "task": NOOP, "queue": QUEUE, "depends_on": ["root"]} for i in range(n)]
    nodes.append({"id": "fan_in", "task": NOOP, "queue": QUEUE, "depends_on": [f"n{i}" for i in range(n)]})
    return dag.parse_workflow({"name": "bench-fan-out", "nodes": nodes})


def mapped(n: int) -> dag.Workflow:
    """root returns list(range(n)) -> a map node, one no-op job per item -> one fan-in node.

    >>> [(node.id, node.map) for node in mapped(3).nodes]
    [('root', None), ('each', 'root'), ('fan_in', None)]
    """
    return dag.parse_workflow({"name": "bench-map", "nodes": [
        {"id": "root", "task": NUMBERS, "queue": QUEUE, "args": [n]},
        {"id": "each", "task": EACH, "queue": QUEUE, "map": {"$from": "root"}, "depends_on": ["root"]},
        {"id": "fan_in", "task": NOOP, "queue": QUEUE, "depends_on": ["each"]},
    ]})


@dataclasses.dataclass(frozen=True)
class Drained:
    """One measurement: seconds from the first write to the last node's end; CPU seconds of
    the orchestrator until the run's outbox was empty and of the workers (summed); seconds
    the root's dispatch event waited to be drained; seconds from the run's end to its
    outbox being empty. The last three are None for the baseline."""

    seconds: float
    workers_cpu: float
    orchestrator_cpu: float | None = None
    root_wait: float | None = None
    outbox_after: float | None = None


# --- child processes (module level: spawned children import this file) ------------------


def orchestrator_child(db: str, control: Any) -> None:
    """One orchestrator (``Orchestrator.run``) on the default settings. Sends "ready" once
    its database is open and a first sweep is done; then a thread answers ``control``:
    "cpu" with this process's CPU seconds so far, anything else (or EOF) with a stop."""
    config = Config(db=db, project=PROJECT)
    store = open_store(config)
    store.require_schema()
    orchestrator = Orchestrator(store, config)
    orchestrator.run_once()
    control.send("ready")
    harness.answer_cpu_requests(control, orchestrator.request_stop)
    try:
        orchestrator.run()
    finally:
        store.close()


# --- the section -------------------------------------------------------------------------


def run(bench: Bench) -> None:
    """The section: the dag rows on SQLite, then the fan-out on PostgreSQL."""
    DagBench(bench).run()


class DagBench:
    """The dag rows, added to ``bench`` as they are measured."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.lab = bench.lab
        self.sizes = bench.sizes
        self.mp = bench.mp

    def add(self, row: Row) -> None:
        self.bench.add(row)

    def run(self) -> None:
        n, rounds = self.sizes.dag_nodes, self.sizes.dag_rounds
        flows = {"fan-out": fan_out(n), "map": mapped(n)}
        results: dict[str, list[Drained]] = {kind: [] for kind in ("baseline", *SHAPES)}
        for round_no in range(rounds):
            progress(f"dag: round {round_no + 1} of {rounds}: {n + 2:,} plain jobs, then a fan-out to {n:,} "
                     f"nodes, then a map over {n:,} items; {WORKERS} worker processes (+ an orchestrator)")
            for kind, flow in (("baseline", None), *((shape, flows[shape]) for shape in SHAPES)):
                results[kind].append(self._measure(self.lab.database, flow, n, kind))
        for shape in SHAPES:
            self.add(self._row(shape, "FULL", n, results[shape], results["baseline"]))
        self.postgres(self.sizes.pg_dag_nodes)

    def _row(self, shape: str, durability: str, n: int, ours: list[Drained], bare: list[Drained]) -> Row:
        jobs = n + 2
        median = statistics.median
        a, b = median([jobs / d.seconds for d in ours]), median([jobs / d.seconds for d in bare])
        what = f"root -> {n:,} nodes -> fan-in" if shape == "fan-out" else f"root -> map over {n:,} items -> fan-in"
        waits = [d.root_wait for d in ours if d.root_wait is not None]
        slow = sum(1 for wait in waits if wait >= SLOW_DRAIN)
        notes = [f"{rounds_note(len(ours))}; N={n:,}: {what}",
                 f"{median([d.seconds for d in ours]):.2f} s/{median([d.seconds for d in bare]):.2f} s",
                 f"orchestrator CPU us/node {median([d.orchestrator_cpu for d in ours]) / jobs * 1e6:,.0f} "
                 f"(outbox empty {median([d.outbox_after for d in ours]):.1f} s after the run ended)",
                 f"workers' CPU us/job {median([d.workers_cpu for d in ours]) / jobs * 1e6:,.0f}/"
                 f"{median([d.workers_cpu for d in bare]) / jobs * 1e6:,.0f}",
                 f"root's event drained after {median(waits) * 1000:,.0f} ms"
                 + (f" ({slow} of {len(waits)} waited for the orchestrator's 1 s poll)" if slow else "")]
        label = f"{'pg ' if durability.startswith('pg') else ''}dag {shape}, {WORKERS} workers (nodes/s)"
        return Row(label, durability, count(a), count(b), ratio(a, b), "; ".join(notes))

    # --- PostgreSQL --------------------------------------------------------------------

    def postgres(self, n: int) -> None:
        """The fan-out row on a throwaway PostgreSQL server; a row saying why when there is none."""
        label = f"pg dag fan-out, {WORKERS} workers (nodes/s)"
        if not n:
            self.add(Row(label, "-", "-", "-", "-", "not run with --quick (a server takes seconds to start)"))
            return
        server = harness.pg_server(self.bench, "dag on postgres", label)
        if server is None:
            return
        created: list[str] = []

        def database(_label: str) -> str:
            url = server.create_database("rowfleet_bench_dag")
            created.append(url)
            with open_store(Config(db=url, project=PROJECT), create=True) as store:
                store.migrate()
            return url

        try:
            settings = dict(server.psql(database("settings"), "SELECT name, setting FROM pg_settings "
                                                              "WHERE name IN ('fsync', 'synchronous_commit')"))
            durability = harness.durability(settings)
            ours, bare = [], []
            for round_no in range(self.sizes.dag_rounds):
                progress(f"dag on postgres: round {round_no + 1} of {self.sizes.dag_rounds}: {n + 2:,} plain "
                         f"jobs, then a fan-out to {n:,} nodes")
                bare.append(self._measure(database, None, n, "baseline"))
                ours.append(self._measure(database, fan_out(n), n, "fan-out"))
                for url in created:
                    server.drop_database(url)
                created.clear()
            self.add(self._row("fan-out", durability, n, ours, bare))
        except Exception as exc:  # psycopg's errors are not importable here: name them instead
            if type(exc).__module__.split(".")[0] != "psycopg":
                raise
            raise RuntimeError(f"PostgreSQL: {' '.join(str(exc).split())}") from exc
        finally:
            for url in created:
                try:
                    server.drop_database(url)
                except Exception as exc:  # tidying up after a failure: the server is stopped next anyway
                    progress(f"dag on postgres: could not drop a database: {exc}")
            server.stop()

    # --- one measurement ---------------------------------------------------------------

    def _measure(self, database: Callable[[str], str], flow: dag.Workflow | None, n: int, kind: str) -> Drained:
        """Start the workers (and, for a workflow, the orchestrator) on a fresh database, wait
        until all are idle, then time ``flow`` (or N + 2 plain jobs) to its end."""
        db = database(f"dag-{kind}")
        children: list[tuple[Any, Any]] = []  # (pipe, process); the orchestrator last
        targets = [(harness.idle_worker, (db, self.lab.task_dir, "bells"), f"bench-dag-worker-{i}")
                   for i in range(WORKERS)]
        if flow is not None:
            targets.append((orchestrator_child, (db,), "bench-dag-orchestrator"))
        try:
            for target, args, name in targets:
                here, there = self.mp.Pipe()
                child = self.mp.Process(target=target, args=(*args, there), name=name)
                child.start()
                there.close()
                children.append((here, child))
            store = open_store(Config(db=db, project=PROJECT))
            try:
                watch = Watch(store, [child for _, child in children])
                watch.ready(children[WORKERS] if flow is not None else None)
                time.sleep(0.2)  # let them settle into their waits
                cpu_before = [_cpu(pipe) for pipe, _ in children]
                start = time.time()
                if flow is None:
                    store.enqueue_many(JobSpec(task=NOOP, queue=QUEUE, project=PROJECT), [None] * (n + 2))
                    end = watch.jobs_done(n + 2, self._deadline(n))
                    cpu_after = [_cpu(pipe) for pipe, _ in children]
                    progress(f"dag: {kind}: {n + 2:,} jobs in {end - start:.2f} s")
                    return Drained(max(1e-6, end - start), sum(cpu_after) - sum(cpu_before))
                run_id = store.start_run(flow, None, PROJECT)
                end = watch.run_done(run_id, n + 2, self._deadline(n))
                events = watch.outbox_empty(run_id, self._deadline(n))
                cpu_after = [_cpu(pipe) for pipe, _ in children]
            finally:
                store.close()
        finally:
            for pipe, child in children:
                harness.stop_child(pipe, child)
        progress(f"dag: {kind}: {n + 2:,} nodes in {end - start:.2f} s; the outbox was empty "
                 f"{max(event['processed_at'] for event in events) - end:.1f} s later")
        used = [after - before for before, after in zip(cpu_before, cpu_after)]
        first = min(events, key=lambda event: event["id"])
        return Drained(max(1e-6, end - start), sum(used[:WORKERS]), used[WORKERS],
                       first["processed_at"] - first["created_at"],
                       max(event["processed_at"] for event in events) - end)

    def _deadline(self, n: int) -> float:
        return DEADLINE_BASE + DEADLINE_PER_NODE * n


def _cpu(pipe: Any) -> float:
    pipe.send("cpu")
    if not pipe.poll(30):
        raise RuntimeError("a dag benchmark child did not report its CPU use")
    return pipe.recv()


class Watch:
    """The cheap reads that wait for the children to be ready and for a measurement's end."""

    def __init__(self, store: Store, processes: list[Any]) -> None:
        self.store = store
        self.processes = processes

    def _alive(self, what: str) -> None:
        for process in self.processes:
            if process.exitcode is not None:
                raise RuntimeError(f"{process.name} exited (code {process.exitcode}) while waiting for {what}")

    def _until(self, done: Callable[[], Any], seconds: float, every: float, what: Callable[[], str]) -> Any:
        deadline = time.monotonic() + seconds
        while True:
            found = done()
            if found is not None:
                return found
            self._alive(what())
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {seconds:g} s waiting for {what()}")
            time.sleep(every)

    def ready(self, orchestrator: tuple[Any, Any] | None) -> None:
        """Both workers' first heartbeats, and the orchestrator's "ready"."""
        self._until(lambda: True if len(self.store.reads.workers(0.0)) >= WORKERS else None, READY_TIMEOUT, 0.01,
                    lambda: "the dag worker processes' first heartbeats")
        if orchestrator is not None:
            pipe, _ = orchestrator
            self._until(lambda: pipe.recv() if pipe.poll(0) else None, READY_TIMEOUT, 0.01,
                        lambda: "the dag orchestrator process to start")

    def run_done(self, run_id: int, jobs: int, seconds: float) -> float:
        """The run's finished_at once it completed; a failed or cancelled run raises."""

        def done() -> float | None:
            run = next(run for run in self.store.reads.list_runs(PROJECT, limit=1) if run.id == run_id)
            if run.state == dag.COMPLETED:
                return run.finished_at
            if run.state in dag.RUN_TERMINAL:
                raise RuntimeError(f"the benchmark run ended {run.state}: {run.error}")
            return None

        return self._until(done, seconds, POLL_EVERY,
                           lambda: f"run {run_id} to complete (jobs by state: {self._job_counts()} of {jobs})")

    def outbox_empty(self, run_id: int, seconds: float) -> list[dict[str, Any]]:
        """The run's dispatch events, once every one of them has been drained."""

        def done() -> list[dict[str, Any]] | None:
            events = self.store.reads.dispatch_events(run_id)
            if any(event["poisoned_at"] is not None for event in events):
                raise RuntimeError(f"a dispatch event of run {run_id} was set aside")
            return events if all(event["processed_at"] is not None for event in events) else None

        return self._until(done, seconds, OUTBOX_POLL, lambda: f"the outbox of run {run_id} to be drained")

    def jobs_done(self, jobs: int, seconds: float) -> float:
        """The last job's finished_at once all ``jobs`` completed."""

        def done() -> float | None:
            if self._job_counts().get("completed", 0) < jobs:
                return None
            return max(job.finished_at for job in self.store.reads.list_jobs(PROJECT, state="completed", limit=jobs))

        return self._until(done, seconds, POLL_EVERY, lambda: f"{jobs:,} jobs (by state: {self._job_counts()})")

    def _job_counts(self) -> dict[str, int]:
        return {row["state"]: row["n"] for row in self.store.reads.counts()
                if row["project"] == PROJECT and row["queue"] == QUEUE}
