"""The job lifecycle, written once against named queries; dialects plug in below it.

A dialect subclass provides ``transaction()`` (a write transaction that takes the write
lock up front), ``reader()`` (reads outside a transaction), ``caller_transaction(conn)``
(statements on a caller's own connection, committed by the caller), the waiters
(``waiter()``, ``dispatch_waiter()``, ``control_waiter()``) and ``close()``. Every state change is a guarded UPDATE; one that matches nothing is an
answer (``LeaseLost``, ``Conflict``), decided here rather than swallowed.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any, Callable, Iterable

from rowfleet import control, exitcodes, liveness
from rowfleet import job as jobs
from rowfleet.config import Config
from rowfleet.control import Switch
from rowfleet.errors import ConfigError, Conflict, LeaseLost, MigrationError, NotFound, SchemaMissing
from rowfleet.job import Event, Job, JobSpec, Outcome
from rowfleet.queries import latest_version, migrations, queries
from rowfleet.store.runs import WorkflowStore
from rowfleet.store.schedules import ScheduleStore
from rowfleet.wake import Waiter


class Tx(abc.ABC):
    """Named statements inside one transaction (or one autocommit read).

    ``now`` is read once when the transaction starts and passed to every statement as
    ``:now``, so every row it writes agrees.
    """

    now: float

    @abc.abstractmethod
    def one(self, query: str, **params: Any) -> Any | None:
        """Run a named query; its first row (mapping-like) or None."""

    @abc.abstractmethod
    def all(self, query: str, **params: Any) -> list[Any]:
        """Run a named query; every row."""

    @abc.abstractmethod
    def run(self, query: str, **params: Any) -> int:
        """Run a named statement that returns no rows; how many rows it changed."""

    @abc.abstractmethod
    def script(self, sql: str) -> None:
        """Run a multi-statement script (a migration) inside this transaction."""


class Store(WorkflowStore, ScheduleStore, abc.ABC):
    """One database connection and everything rowfleet does with it. Not thread-safe:
    each thread opens its own. Workflow runs are in ``WorkflowStore``, periodic schedules'
    fired slots in ``ScheduleStore``; operators' switches are here."""

    dialect: str = ""

    def __init__(self, config: Config, clock: Callable[[], float]) -> None:
        self.config = config
        self.clock = clock
        self.sql = queries(self.dialect)

    # --- what a dialect provides -------------------------------------------------------

    @abc.abstractmethod
    def transaction(self, durable: bool = True) -> contextlib.AbstractContextManager[Tx]:
        """A write transaction, holding the write lock from its first statement.

        ``durable=False`` lets the commit skip waiting for the disk. Only for writes whose
        loss in a power cut is harmless: a lost claim runs the job again (at-least-once
        either way), a lost renewal or heartbeat is renewed or beaten again.
        """

    @abc.abstractmethod
    def reader(self) -> Tx:
        """Statements that only read, each seeing the latest committed state."""

    @abc.abstractmethod
    def caller_transaction(self, conn: Any) -> Tx:
        """Statements on the caller's own connection; the caller commits or rolls back."""

    @abc.abstractmethod
    def waiter(self, queue: str) -> Waiter:
        """A way for an idle worker of ``queue`` to sleep until there may be work for it."""

    @abc.abstractmethod
    def control_waiter(self, host: str) -> Waiter:
        """A way for a worker of ``host`` to sleep until its switch may have changed."""

    @abc.abstractmethod
    def dispatch_waiter(self, project: str) -> Waiter:
        """A way for an orchestrator to sleep until a dispatch event of ``project`` may exist."""

    @abc.abstractmethod
    def changed(self) -> bool:
        """True when another connection has committed since the last call (cheap)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- schema ------------------------------------------------------------------------

    def schema_version(self) -> int:
        tx = self.reader()
        if not tx.one("migrations_exists")["n"]:
            return 0
        return tx.one("schema_version")["version"]

    def migrate(self) -> int:
        """Apply every pending migration, each with its bookkeeping row in one transaction.

        Safe to run from two processes at once: the version is re-read under the write lock.
        """
        target = latest_version(self.dialect)
        for migration in migrations(self.dialect):
            with self.transaction() as tx:
                tx.script(self.sql["migrations_table"])
                current = tx.one("schema_version")["version"]
                if current > target:
                    raise MigrationError(f"the database schema is version {current}, newer than this "
                                         f"rowfleet knows ({target}): upgrade rowfleet")
                if current >= migration.version:
                    continue
                tx.script(migration.sql)
                tx.run("migration_record", version=migration.version, name=migration.name)
        return self.schema_version()

    def require_schema(self) -> int:
        """The schema version, or ``SchemaMissing`` when it is absent or out of date."""
        version = self.schema_version()
        target = latest_version(self.dialect)
        if version < target:
            raise SchemaMissing(f"the database {self.config.db_shown!r} has schema version {version}, "
                                f"rowfleet needs {target}: run `rowfleet init` (or start the orchestrator)")
        if version > target:
            raise MigrationError(f"the database schema is version {version}, newer than this rowfleet "
                                 f"knows ({target}): upgrade rowfleet")
        return version

    # --- enqueue -----------------------------------------------------------------------

    def enqueue(self, spec: JobSpec, conn: Any = None) -> Job:
        """Insert one job, or return the existing one with the same idempotency key.

        With ``conn`` the insert runs on the caller's connection and commits with the
        caller's transaction, or not at all.
        """
        if conn is not None:
            return self._insert(self.caller_transaction(conn), spec)
        with self.transaction() as tx:
            return self._insert(tx, spec)

    def _insert(self, tx: Tx, spec: JobSpec, placement: dict[str, Any] | None = None) -> Job:
        """Insert a job (a workflow node's when ``placement`` names its run, node and generation)."""
        # Look the key up first: an INSERT that loses to the key would still spend a job id.
        row = tx.one("job_by_key", project=spec.project, key=spec.key) if spec.key is not None else None
        if row is None:
            row = tx.one("job_insert", **_insert_params(spec, placement))
        if row is None:  # a concurrent insert won the key (possible on a caller's connection)
            row = tx.one("job_by_key", project=spec.project, key=spec.key)
        return Job.from_row(row)

    def enqueue_many(self, spec: JobSpec, args_list: Iterable[Any], conn: Any = None) -> int:
        """Insert one job per item of ``args_list``, each otherwise as ``spec`` says, in one
        transaction (all or none); returns how many. Idempotency keys are one-by-one only."""
        if spec.key is not None:
            raise ConfigError("enqueue_many does not take an idempotency key: enqueue keyed jobs one by one")
        if conn is not None:
            return self._insert_many(self.caller_transaction(conn), spec, args_list)
        with self.transaction() as tx:
            return self._insert_many(tx, spec, args_list)

    def _insert_many(self, tx: Tx, spec: JobSpec, args_list: Iterable[Any],
                     placement: dict[str, Any] | None = None) -> int:
        """One statement for many jobs; with ``placement``, the items of a map node, numbered."""
        params = _insert_params(spec, placement)
        del params["args"], params["key"]
        params["args_list"] = jobs.encode_json([_encode_args(args) for args in args_list])
        return tx.run("job_insert_many", **params)

    # --- claim, renew, finish ----------------------------------------------------------

    def claim(self, project: str, queue: str, holder: str, lease: float) -> Job | None:
        """Take the next due job of (project, queue), or None when there is none."""
        with self.transaction(durable=False) as tx:
            return self._claim(tx, project, queue, holder, lease)

    def _claim(self, tx: Tx, project: str, queue: str, holder: str, lease: float) -> Job | None:
        row = tx.one("job_claim", project=project, queue=queue, holder=holder, lease=lease)
        if row is None:
            return None
        job = Job.from_row(row)
        _event(tx, job.id, "claimed", token=job.lease_token, holder=holder, attempt=job.attempts)
        return job

    def has_due(self, project: str, queue: str) -> bool:
        """A cheap read: is anything claimable now? Takes no lock."""
        return self.reader().one("job_due", project=project, queue=queue) is not None

    def renew(self, job: Job, lease: float) -> float:
        """Extend the lease of a job still held with ``job.lease_token``; the new deadline."""
        with self.transaction(durable=False) as tx:
            row = tx.one("job_renew", id=job.id, token=job.lease_token, lease=lease)
            if row is None:
                raise self._stale(tx, job)
            return row["lease_expires_at"]

    def finish(self, job: Job, outcome: Outcome, claim_next: tuple[str, str, str, float] | None = None
               ) -> Job | None:
        """Write a run's outcome, guarded by the job's token; optionally claim the next job
        of ``claim_next = (project, queue, holder, lease)`` in the same transaction, so a
        busy worker pays one commit per job.

        Raises ``LeaseLost`` (writing nothing) when the token is stale. Finishing again
        with the same token and the same terminal state is a no-op.
        """
        with self.transaction() as tx:
            self._write_outcome(tx, job, outcome)
            if claim_next is None:
                return None
            return self._claim(tx, *claim_next)

    def _write_outcome(self, tx: Tx, job: Job, outcome: Outcome) -> None:
        if outcome.state == jobs.QUEUED and job.run_id is not None:
            ended = self._run_ended(tx, job.run_id)
            if ended:  # no retry for a node of a run that has ended: nobody may claim it
                outcome = Outcome(jobs.CANCELLED, error=f"run {job.run_id} {ended}; not retried after: "
                                  f"{outcome.error}", traceback=outcome.traceback, event="cancelled")
        guard = {"id": job.id, "token": job.lease_token, "error": outcome.error,
                 "traceback": outcome.traceback}
        if outcome.state == jobs.QUEUED:
            row = tx.one("job_requeue", delay=outcome.delay, **guard)
        else:
            row = tx.one("job_finish", state=outcome.state, result=outcome.result_json, **guard)
        if row is None:
            self._check_already_written(tx, job, outcome)
            return
        tx.run("event_insert", job_id=job.id, kind=outcome.event or outcome.state,
               detail=outcome_detail(job, outcome))
        if job.run_id is not None and outcome.state in jobs.TERMINAL:
            self._dispatch(tx, job)

    def _check_already_written(self, tx: Tx, job: Job, outcome: Outcome) -> None:
        """The guarded write matched nothing: fine if this holder already wrote this terminal
        state (terminal transitions are idempotent), else ``LeaseLost``."""
        holder = tx.one("job_holder", id=job.id)
        if holder and holder["state"] == outcome.state in jobs.TERMINAL \
                and holder["lease_token"] == job.lease_token:
            return
        raise self._stale(tx, job, holder)

    def _stale(self, tx: Tx, job: Job, holder: Any = None) -> LeaseLost:
        holder = holder if holder is not None else tx.one("job_holder", id=job.id)
        if holder is None:
            return LeaseLost(job.id, job.lease_token, "the job no longer exists")
        return LeaseLost(job.id, job.lease_token,
                         f"it is {holder['state']} with token {holder['lease_token']}")

    # --- recovery and housekeeping -----------------------------------------------------

    def reclaim_lapsed(self, limit: int = 100) -> list[dict[str, Any]]:
        """Re-queue running jobs whose lease lapsed (or fail them on their last attempt, or
        when they belong to a workflow run that has ended).

        A reclaimed job keeps its id and run_at, so it sorts ahead of fresh work of its priority.
        """
        with self.transaction() as tx:
            done = [self._recover(tx, row, f"worker {row['claimed_by']} was lost (lease lapsed)", "reclaimed",
                                  requeue="job_reclaim", fail="job_fail_lapsed")
                    for row in tx.all("jobs_lapsed", limit=limit)]
        return [item for item in done if item["action"] != "none"]

    def _recover(self, tx: Tx, row: Any, lost: str, kind: str, requeue: str, fail: str) -> dict[str, Any]:
        """Put an orphaned running job back in the queue with ``requeue``, or end it with
        ``fail`` when that was its last attempt or its workflow run has ended. What it did."""
        guard = {"id": row["id"], "token": row["lease_token"]}
        detail = {"token": row["lease_token"], "holder": row["claimed_by"], "attempt": row["attempts"]}
        ended = row["run_id"] is not None and self._run_ended(tx, row["run_id"])
        if row["attempts"] < row["max_attempts"] and not ended:
            if tx.one(requeue, error=f"{lost}; re-queued", **guard):
                _event(tx, row["id"], kind, **detail)
                return {"id": row["id"], "action": "reclaimed", **detail}
            return {"id": row["id"], "action": "none", **detail}
        error = f"{lost} after its run {row['run_id']} {ended}" if ended else \
            f"{lost} on the last attempt ({row['attempts']} of {row['max_attempts']})"
        if tx.one(fail, error=error, **guard):
            _event(tx, row["id"], "failed", error=error, **detail)
            if row["run_id"] is not None:
                self._dispatch(tx, self._get(tx, row["id"], row["project"]))
            return {"id": row["id"], "action": "failed", **detail}
        return {"id": row["id"], "action": "none", **detail}

    def cancel(self, job_id: int, project: str, reason: str = "cancelled by an operator") -> Job:
        """Cancel a queued job. Cancelling a cancelled job is a no-op; others conflict."""
        with self.transaction() as tx:
            row = tx.one("job_cancel", id=job_id, project=project, reason=reason)
            if row is not None:
                _event(tx, job_id, "cancelled", reason=reason)
                job = Job.from_row(row)
                if job.run_id is not None:
                    self._dispatch(tx, job)
                return job
            job = self._get(tx, job_id, project)
            if job.state == jobs.CANCELLED:
                return job
            raise Conflict(f"job {job_id} is {job.state}; only queued jobs can be cancelled")

    def retry(self, job_id: int, project: str) -> Job:
        """Revive a failed or cancelled job: queued now, with at least one attempt left."""
        with self.transaction() as tx:
            node_job = self._get(tx, job_id, project)
            if node_job.run_id is not None:
                raise Conflict(f"job {job_id} is node {node_job.node_id!r} of run {node_job.run_id}: "
                               f"restart the run instead (rowfleet restart {node_job.run_id})")
            row = tx.one("job_revive", id=job_id, project=project)
            if row is None:
                job = self._get(tx, job_id, project)
                raise Conflict(f"job {job_id} is {job.state}; only failed or cancelled jobs can be retried")
            job = Job.from_row(row)
            _event(tx, job_id, "revived", max_attempts=job.max_attempts)
            return job

    def beat(self, worker_id: str, project: str, host: str, queue: str, pid: int,
             current_job: int | None, state: str = control.SERVING) -> None:
        """Upsert a worker's heartbeat row: the job in hand, serving, draining or parked, and
        the cadence and lease of this store's ``Config`` (the worker's own), by which every
        reader judges whether it went silent."""
        with self.transaction(durable=False) as tx:
            tx.run("worker_beat", worker_id=worker_id, project=project, host=host, queue=queue,
                   pid=pid, current_job=current_job, state=state, heartbeat=self.config.heartbeat,
                   lease=self.config.lease)

    def worker_stopped(self, worker_id: str) -> None:
        with self.transaction() as tx:
            tx.run("worker_stop", worker_id=worker_id)

    def flag_stale_workers(self) -> list[dict[str, Any]]:
        """Flag workers that missed ``liveness.MISSED_BEATS`` of their own heartbeats as dead,
        and put the jobs they hold back in the queue at once (ahead of fresh work) rather
        than waiting for their leases. The rows flagged, each with ``jobs``: what was done
        with its jobs.

        A frozen worker that wakes up finds its jobs' tokens taken and exits without writing.
        """
        with self.transaction() as tx:
            flagged = [dict(row) for row in tx.all("workers_flag_stale", missed_beats=liveness.MISSED_BEATS)]
            for worker in flagged:
                holder = f"{worker['host']}:{worker['pid']}"
                silent = worker["flagged_dead_at"] - worker["last_seen"]
                lost = f"worker {holder} stopped beating ({silent:.0f}s since its last heartbeat)"
                worker["jobs"] = self._recover_jobs_of(tx, worker, lost, "worker_dead")
            return flagged

    def _recover_jobs_of(self, tx: Tx, worker: Any, lost: str, kind: str) -> list[dict[str, Any]]:
        """Hand back (or end) the running jobs the worker of this row claimed in its lifetime."""
        return [self._recover(tx, row, lost, kind, requeue="job_hand_back", fail="job_orphan_fail")
                for row in tx.all("jobs_of_silent_worker", holder=f"{worker['host']}:{worker['pid']}",
                                  host=worker["host"], pid=worker["pid"], since=worker["started_at"])]

    def record_event(self, job_id: int, kind: str, **detail: Any) -> None:
        """Append a forensic event to a job's log."""
        with self.transaction() as tx:
            _event(tx, job_id, kind, **detail)

    def worker_exited(self, host: str, pid: int, code: int) -> list[dict[str, Any]]:
        """Record how a worker process ended (its supervisor saw the exit code, negative for a
        signal), and hand back at once any job it still held: a child killed by SIGKILL (the
        OOM killer's signal) must not leave its job waiting out the lease. What was done
        with each such job."""
        with self.transaction() as tx:
            worker = tx.one("worker_exited", host=host, pid=pid, code=code)
            if worker is None:  # it died before its first heartbeat: it claimed nothing
                return []
            lost = f"worker {host}:{pid} {exitcodes.describe(code)} while running it"
            return [item for item in self._recover_jobs_of(tx, worker, lost, "worker_exited")
                    if item["action"] != "none"]

    def flagged_workers(self, host: str) -> set[int]:
        """Pids of this host's workers that the dead-worker sweep flagged and that have not stopped."""
        return {row["pid"] for row in self.reader().all("workers_flagged_on_host", host=host)}

    # --- operators' switches -----------------------------------------------------------

    def set_switch(self, project: str, host: str, queue: str, desired: str, policy: str = control.DRAIN,
                   changed_by: str = "") -> Switch:
        """Write the switch of the workers of (project, host, queue); ``*`` matches all."""
        if desired not in (control.ON, control.OFF):
            raise ConfigError(f"a switch is {control.ON!r} or {control.OFF!r}, got {desired!r}")
        if policy not in control.POLICIES:
            raise ConfigError(f"a stop policy is {control.HARD!r} or {control.DRAIN!r}, got {policy!r}")
        for what, value in (("project", project), ("host", host), ("queue", queue)):
            if not isinstance(value, str) or (what != "project" and not value):
                raise ConfigError(f"a switch's {what} must be a non-empty string (or '*' for all), got {value!r}")
        with self.transaction() as tx:
            return Switch.from_row(tx.one("control_set", project=project, host=host, queue=queue, desired=desired,
                                          policy=policy, changed_by=changed_by))

    def switch_in_force(self, project: str, host: str, queue: str) -> Switch | None:
        """The off switch holding the workers of (project, host, queue), or None: they serve."""
        rows = self.reader().all("controls_for", project=project, host=host, queue=queue)
        return control.in_force((Switch.from_row(row) for row in rows), project, host, queue)

    def switches(self) -> list[Switch]:
        """Every switch row, of every project."""
        return [Switch.from_row(row) for row in self.reader().all("controls_list")]

    # --- what a running job reports, and how a watchdog stops it ------------------------

    def progress(self, job: Job, fraction: float | None, message: str | None) -> None:
        """Record a progress beat of a job still held with ``job.lease_token``."""
        with self.transaction(durable=False) as tx:
            if tx.one("job_progress", id=job.id, token=job.lease_token, progress=fraction, message=message) is None:
                raise self._stale(tx, job)

    def watchdog_trip(self, job: Job, detail: dict[str, Any], outcome: Outcome, spent: int, refund: int) -> None:
        """Write what a watchdog decided for the job in hand, in one transaction: the retry
        spent (or the attempt given back), the forensic ``watchdog_trip`` event, and the
        outcome (re-queued, or failed through the outbox like any failure). ``LeaseLost``
        (writing nothing) when the job is no longer this holder's."""
        with self.transaction() as tx:
            if tx.one("job_watchdog_mark", id=job.id, token=job.lease_token, spent=spent, refund=refund) is None:
                raise self._stale(tx, job)
            _event(tx, job.id, "watchdog_trip", **detail)
            if refund:  # not a fault: back at once, ahead of fresh work
                tx.one("job_hand_back", id=job.id, token=job.lease_token, error=outcome.error)
                _event(tx, job.id, outcome.event or "operator_stop", token=job.lease_token)
            else:
                self._write_outcome(tx, job, outcome)

    def prune(self, retention: float, batch: int = 1000) -> int:
        """Delete finished jobs (and their events) older than ``retention``; how many jobs."""
        total = 0
        while True:
            with self.transaction() as tx:
                tx.run("prune_events", retention=retention, limit=batch)
                deleted = tx.run("prune_jobs", retention=retention, limit=batch)
                tx.run("prune_workers", retention=retention)
                tx.run("prune_dispatch", retention=retention, limit=batch)
                tx.run("prune_run_nodes", retention=retention, limit=batch)
                deleted += tx.run("prune_runs", retention=retention, limit=batch)
                tx.run("prune_schedule_slots", retention=retention, limit=batch)
            total += deleted
            if deleted < batch:
                return total

    # --- reads -------------------------------------------------------------------------

    def get_job(self, job_id: int, project: str) -> Job:
        return self._get(self.reader(), job_id, project)

    def _get(self, tx: Tx, job_id: int, project: str) -> Job:
        row = tx.one("job_get", id=job_id, project=project)
        if row is None:
            where = f" in project {project!r}" if project else ""
            raise NotFound(f"no job {job_id}{where}")
        return Job.from_row(row)

    def list_jobs(self, project: str, state: str | None = None, queue: str | None = None,
                  limit: int = 50) -> list[Job]:
        rows = self.reader().all("jobs_list", project=project, state=state, queue=queue, limit=limit)
        return [Job.from_row(row) for row in rows]

    def events(self, job_id: int) -> list[Event]:
        rows = self.reader().all("events_of_job", job_id=job_id)
        return [Event(row["id"], row["job_id"], row["at"], row["kind"], jobs.decode_json(row["detail"]) or {})
                for row in rows]

    def counts(self) -> list[dict[str, Any]]:
        return [dict(row) for row in self.reader().all("job_counts")]

    def workers(self, since: float) -> list[dict[str, Any]]:
        """Live workers, and every worker row seen since ``since`` (stopped, dead or silent)."""
        return [dict(row) for row in self.reader().all("workers_list", since=since,
                                                       missed_beats=liveness.MISSED_BEATS)]


def _insert_params(spec: JobSpec, placement: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"project": spec.project, "queue": spec.queue, "task": spec.task, "args": spec.args_json(),
            "priority": spec.priority, "run_next": int(spec.run_next), "run_at": spec.run_at,
            "delay": float(spec.delay), "max_attempts": spec.max_attempts, "key": spec.key,
            "timeout": spec.timeout, "model": spec.model,
            **(placement or {"run_id": None, "node_id": None, "node_generation": None})}


def outcome_detail(job: Job, outcome: Outcome) -> str:
    """The JSON detail of the event that records a run's outcome."""
    detail: dict[str, Any] = {"token": job.lease_token, "attempt": job.attempts}
    if outcome.error:
        detail["error"] = outcome.error
    if outcome.state == jobs.QUEUED:
        detail["delay"] = round(outcome.delay, 3)
    return jobs.encode_json(detail)


def _encode_args(args: Any) -> str:
    try:
        return jobs.encode_json(args)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"args must be JSON-serialisable: {exc}") from None


def _event(tx: Tx, job_id: int, kind: str, **detail: Any) -> None:
    tx.run("event_insert", job_id=job_id, kind=kind, detail=jobs.encode_json(detail))
