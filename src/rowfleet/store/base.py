"""The job lifecycle, written once against named queries; dialects plug in below it.

A dialect subclass provides ``transaction()`` (a write transaction that takes the write
lock up front), ``reader()`` (reads outside a transaction), ``caller_transaction(conn)``
(a context manager: statements on a caller's own connection inside a savepoint, committed
by the caller), the waiters
(``waiter()``, ``dispatch_waiter()``, ``control_waiter()``) and ``close()``. Every state change is a guarded UPDATE; one that matches nothing is an
answer (``LeaseLost``, ``Conflict``), decided here rather than swallowed.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
from typing import Any, Callable, Iterable, Iterator

from rowfleet import control, exitcodes, liveness
from rowfleet import job as jobs
from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.control import Switch
from rowfleet.errors import (ConfigError, Conflict, DatabaseBroken, LeaseLost, MigrationError, NotFound,
                             RowfleetError, SchemaMissing)
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
    def caller_transaction(self, conn: Any) -> contextlib.AbstractContextManager[Tx]:
        """Statements on the caller's own connection, which the caller commits or rolls back.

        A connection is borrowed, never trusted to roll back for us: inside the caller's open
        transaction the statements run in a ``savepoint``, so a failure undoes them and leaves
        the caller's own work committable; with none open they are a transaction of their own
        (committed at once where the connection autocommits, else left for the caller's commit).
        """

    def _writing(self, conn: Any = None) -> contextlib.AbstractContextManager[Tx]:
        """A write transaction: on the caller's ``conn`` when given, else one of our own."""
        return self.transaction() if conn is None else self.caller_transaction(conn)

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
        """The schema version the database records (0: none yet)."""
        return recorded_version(self.reader())

    def refuse_newer_schema(self) -> int:
        """The recorded schema version, or ``MigrationError`` when it is newer than this
        rowfleet: an older rowfleet's writes could break a newer schema, so every store is
        checked once, when it is opened (``open_store``), before any command writes."""
        version = self.schema_version()
        target = latest_version(self.dialect)
        if version > target:
            raise MigrationError(_newer(version, target))
        return version

    def migrate(self) -> int:
        """Apply every pending migration, each with its bookkeeping row in one transaction;
        then the schema must be whole (``DatabaseBroken`` if its tables were dropped).

        Safe to run from two processes at once: the version is re-read under the write lock.
        """
        target = latest_version(self.dialect)
        for migration in migrations(self.dialect):
            with self.transaction() as tx:
                tx.script(self.sql["migrations_table"])
                current = tx.one("schema_version")["version"]
                if current > target:
                    raise MigrationError(_newer(current, target))
                if current >= migration.version:
                    continue
                tx.script(migration.sql)
                tx.run("migration_record", version=migration.version, name=migration.name)
        return self.require_schema()

    def require_schema(self) -> int:
        """The schema version; ``SchemaMissing`` when it is absent or out of date (wait, or
        run init), ``MigrationError`` when newer, ``DatabaseBroken`` when its tables are gone."""
        version = self.refuse_newer_schema()
        target = latest_version(self.dialect)
        if version < target:
            raise SchemaMissing(f"the database {self.config.db_shown!r} has schema version {version}, "
                                f"rowfleet needs {target}: run `rowfleet init` (or start the orchestrator)")
        try:
            self.reader().one("schema_tables")
        except SchemaMissing as exc:
            raise schema_gone(version, exc) from None
        return version

    # --- enqueue -----------------------------------------------------------------------

    def enqueue(self, spec: JobSpec, conn: Any = None) -> Job:
        """Insert one job, or return the existing one with the same idempotency key.

        With ``conn`` the insert runs on the caller's connection and commits with the
        caller's transaction, or not at all.
        """
        with self._writing(conn) as tx:
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
        with self._writing(conn) as tx:
            return self._insert_many(tx, spec, args_list)

    def _insert_many(self, tx: Tx, spec: JobSpec, args_list: Iterable[Any],
                     placement: dict[str, Any] | None = None) -> int:
        """One statement for many jobs; with ``placement``, the items of a map node, numbered."""
        params = _insert_params(spec, placement)
        del params["args"], params["key"]
        params["args_list"] = jobs.encode_json([_encode_args(args) for args in args_list])
        return tx.run("job_insert_many", **params)

    # --- claim, renew, finish ----------------------------------------------------------

    def claim(self, claim: Claim) -> Job | None:
        """Take the next due job of the claim's (project, queue), or None when there is none."""
        with self.transaction(durable=False) as tx:
            return self._claim(tx, claim)

    def _claim(self, tx: Tx, claim: Claim) -> Job | None:
        row = tx.one("job_claim", **claim_params(claim))
        if row is None:
            return None
        job = Job.from_row(row)
        tx.run("event_insert", job_id=job.id, kind="claimed", detail=claimed_detail(job))
        return job

    def has_due(self, claim: Claim) -> bool:
        """A cheap read: would ``claim`` find a job now? Takes no lock. It takes the whole
        claim, not its queue alone, so that every input that narrows a claim narrows this too."""
        return self.reader().one("job_due", **claim_params(claim)) is not None

    def renew(self, job: Job, lease: float) -> "Renewal":
        """Extend the lease of a job still held with ``job.lease_token``: the new deadline,
        and whether an operator has asked for the job to be cancelled."""
        with self.transaction(durable=False) as tx:
            row = tx.one("job_renew", id=job.id, token=job.lease_token, lease=lease)
            if row is None:
                raise self._stale(tx, job)
            return Renewal(row["lease_expires_at"], row["cancel_requested_at"], row["cancel_reason"])

    def finish(self, job: Job, outcome: Outcome, claim_next: Claim | None = None) -> Job | None:
        """Write a run's outcome, guarded by the job's token; optionally take the next job
        for ``claim_next`` in the same transaction, so a busy worker pays one commit per job.

        Raises ``LeaseLost`` (writing nothing) when the token is stale. Finishing again
        with the same token and the same terminal state is a no-op.
        """
        with self.transaction() as tx:
            self._write_outcome(tx, job, outcome)
            if claim_next is None:
                return None
            return self._claim(tx, claim_next)

    def _write_outcome(self, tx: Tx, job: Job, outcome: Outcome) -> Outcome:
        """Write ``outcome`` (a re-queue of a node whose run has ended becomes cancelled);
        the outcome as written."""
        if outcome.state == jobs.QUEUED and job.run_id is not None:
            ended = self._run_ended(tx, job.run_id)
            if ended:  # no retry for a node of a run that has ended: nobody may claim it
                outcome = Outcome(jobs.CANCELLED, error=not_retried(f"run {job.run_id} {ended}", outcome.error),
                                  traceback=outcome.traceback, event="cancelled")
        guard = {"id": job.id, "token": job.lease_token, "error": outcome.error,
                 "traceback": outcome.traceback}
        if outcome.state == jobs.QUEUED:
            row = tx.one("job_requeue", delay=outcome.delay, **guard)
        else:
            row = tx.one("job_finish", state=outcome.state, result=outcome.result_json, **guard)
        if row is None:
            self._check_already_written(tx, job, outcome)
            return outcome
        tx.run("event_insert", job_id=job.id, kind=outcome.event or outcome.state,
               detail=outcome_detail(job, outcome))
        if job.run_id is not None and outcome.state in jobs.TERMINAL:
            self._dispatch(tx, job)
        return outcome

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
        if holder["lease_token"] == job.lease_token:  # this holder's own claim, already ended
            return LeaseLost(job.id, job.lease_token, message=f"job {job.id} is already {holder['state']}")
        return LeaseLost(job.id, job.lease_token, f"it was claimed again (token {holder['lease_token']}) "
                                                  f"and is {holder['state']}")

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
        ``fail``: cancelled when it was not to run again (its workflow run has ended, or an
        operator asked for it to be cancelled), failed when that was its last attempt. What
        it did: its ``action`` is the state written (reclaimed for a re-queue), or none."""
        guard = {"id": row["id"], "token": row["lease_token"]}
        detail = {"token": row["lease_token"], "holder": row["claimed_by"], "attempt": row["attempts"]}
        stopped = self._not_to_run_again(tx, row)
        # A row from plain SQL may hold anything: counts that are no numbers end the job here,
        # rather than the sweep (and every other lapsed job in its batch) on a TypeError.
        unreadable = "; ".join(problem for problem in (jobs.decode_column(name, row[name])[1]
                                                       for name in ("attempts", "max_attempts")) if problem)
        if not unreadable and stopped is None and row["attempts"] < row["max_attempts"]:
            if tx.one(requeue, error=f"{lost}; re-queued", **guard):
                _event(tx, row["id"], kind, **detail)
                return {"id": row["id"], "action": "reclaimed", **detail}
            return {"id": row["id"], "action": "none", **detail}
        if stopped is not None:
            state, error = jobs.CANCELLED, not_retried(stopped, lost)
        elif unreadable:
            state, error = jobs.FAILED, f"{lost}; not re-queued, since its row cannot be decoded: {unreadable}"
        else:
            state, error = jobs.FAILED, f"{lost} on the last attempt ({row['attempts']} of {row['max_attempts']})"
        if tx.one(fail, state=state, error=error, **guard):
            _event(tx, row["id"], state, error=error, **detail)
            if row["run_id"] is not None:
                self._dispatch(tx, self._get(tx, row["id"], row["project"]))
            return {"id": row["id"], "action": state, **detail}
        return {"id": row["id"], "action": "none", **detail}

    def _not_to_run_again(self, tx: Tx, row: Any) -> str | None:
        """Why an orphaned running job must not run again (its workflow run has ended, or an
        operator asked for it to be cancelled); None when it may."""
        ended = row["run_id"] is not None and self._run_ended(tx, row["run_id"])
        if ended:
            return f"run {row['run_id']} {ended}"
        if row["cancel_requested_at"] is not None:
            return row["cancel_reason"] or "cancelled by an operator"
        return None

    def cancel(self, job_id: int, project: str, reason: str = "cancelled by an operator") -> Job:
        """Cancel a queued job at once; for a running job, ask its worker to stop it: the
        worker learns of it with its next lease renewal, asks the handler to stop
        (``rowfleet.cancel_requested()``), and past ``config.cancel_grace`` ends its own
        process; the job ends cancelled either way, and the job returned is still running.
        Cancelling a cancelled job, or asking twice, is a no-op; a finished job conflicts."""
        with self.transaction() as tx:
            row = tx.one("job_cancel", id=job_id, project=project, reason=reason)
            if row is not None:
                _event(tx, job_id, "cancelled", reason=reason)
                job = Job.from_row(row)
                if job.run_id is not None:
                    self._dispatch(tx, job)
                return job
            job = self._get(tx, job_id, project)
            if job.state == jobs.RUNNING:
                return self._request_cancel(tx, job, reason)
            if job.state == jobs.CANCELLED:
                return job
            raise Conflict(f"job {job_id} is {job.state}; only queued or running jobs can be cancelled")

    def _request_cancel(self, tx: Tx, job: Job, reason: str) -> Job:
        row = tx.one("job_cancel_request", id=job.id, project=job.project, reason=reason)
        if row is None:  # asked before: the first request's time and reason stand
            return job
        _event(tx, job.id, "cancel_requested", reason=reason, token=job.lease_token, holder=job.claimed_by)
        return Job.from_row(row)

    def prioritize(self, job_id: int, project: str) -> Job:
        """Make a queued job run next: ahead of every priority (``run_next``). A no-op for a
        job that already runs next; a job that is not queued conflicts."""
        with self.transaction() as tx:
            row = tx.one("job_prioritize", id=job_id, project=project)
            if row is not None:
                _event(tx, job_id, "prioritized", run_next=True)
                return Job.from_row(row)
            job = self._get(tx, job_id, project)
            if job.state == jobs.QUEUED:  # already run-next
                return job
            raise Conflict(f"job {job_id} is {job.state}; only a queued job can be made to run next")

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

    def watchdog_trip(self, job: Job, detail: dict[str, Any], outcome: Outcome, spent: int, refund: int) -> str:
        """Write what a watchdog decided for the job in hand, in one transaction: the retry
        spent and the forensic ``watchdog_trip`` event, or for an operator's stop the attempt
        given back and an ``operator_stop`` event (an operator is not a fault), and the
        outcome (re-queued, or failed through the outbox like any failure). The state written:
        a re-queue of a node whose run has ended is cancelled instead. ``LeaseLost``
        (writing nothing) when the job is no longer this holder's."""
        with self.transaction() as tx:
            if tx.one("job_watchdog_mark", id=job.id, token=job.lease_token, spent=spent, refund=refund) is None:
                raise self._stale(tx, job)
            if refund and not (job.run_id is not None and self._run_ended(tx, job.run_id)):
                # an operator's stop, not a fault: back at once, ahead of fresh work
                tx.one("job_hand_back", id=job.id, token=job.lease_token, error=outcome.error)
                _event(tx, job.id, outcome.event or "operator_stop", token=job.lease_token, **detail)
                return jobs.QUEUED
            _event(tx, job.id, "watchdog_trip", **detail)
            return self._write_outcome(tx, job, outcome).state

    def prune(self, retention: float, batch: int = 1000) -> int:
        """Delete finished jobs (and their events) older than ``retention``; how many jobs."""
        total = 0
        while True:
            with self.transaction() as tx:
                tx.run("prune_events", retention=retention, limit=batch)
                deleted = tx.run("prune_jobs", retention=retention, limit=batch)
                tx.run("prune_workers", retention=retention)
                tx.run("prune_orchestrators", retention=retention)
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
        return [Event.from_row(row) for row in self.reader().all("events_of_job", job_id=job_id)]

    def counts(self) -> list[dict[str, Any]]:
        return [dict(row) for row in self.reader().all("job_counts")]

    def orchestrator_beat(self, orchestrator_id: str, project: str, host: str, pid: int) -> None:
        """Upsert an orchestrator's row, with this store's sweep interval (its own cadence)."""
        with self.transaction(durable=False) as tx:
            tx.run("orchestrator_beat", orchestrator_id=orchestrator_id, project=project, host=host, pid=pid,
                   sweep_interval=self.config.interval)

    def orchestrator_stopped(self, orchestrator_id: str) -> None:
        with self.transaction() as tx:
            tx.run("orchestrator_stop", orchestrator_id=orchestrator_id)

    def project_services(self) -> list[dict[str, Any]]:
        """Per project: how many live orchestrators serve it, how many outbox events wait to
        be drained, and when the oldest of them was written (None when none waits)."""
        return [dict(row) for row in self.reader().all("project_services", missed_beats=liveness.MISSED_BEATS)]

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


@dataclasses.dataclass(frozen=True)
class Renewal:
    """What a lease renewal tells the holder: the new deadline, and any cancel request."""

    lease_expires_at: float
    cancel_requested_at: float | None = None
    cancel_reason: str | None = None


def not_retried(why: str, error: str | None) -> str:
    """The error of a job that ends cancelled instead of running again.

    >>> not_retried("run 4 cancelled", "worker h:1 was lost (lease lapsed)")
    'run 4 cancelled; not retried after: worker h:1 was lost (lease lapsed)'
    """
    return f"{why}; not retried after: {error}" if error else why


def claim_params(claim: Claim) -> dict[str, Any]:
    """The bound parameters of every claim query (job_claim, job_due, and a dialect's own).

    >>> claim_params(Claim("", "default", "box:7", 600.0))
    {'project': '', 'queue': 'default', 'holder': 'box:7', 'lease': 600.0}
    """
    return dict(vars(claim))  # its fields, flat; dataclasses.asdict would deep-copy, on every claim


def claimed_detail(job: Job) -> str:
    """The JSON detail of the event that records a claim, from the claimed job. (A dialect
    that claims and logs in one statement builds the same keys in its SQL, from the same row.)

    >>> from types import SimpleNamespace
    >>> claimed_detail(SimpleNamespace(lease_token=5, claimed_by="box:7", attempts=2))
    '{"token":5,"holder":"box:7","attempt":2}'
    """
    return jobs.encode_json({"token": job.lease_token, "holder": job.claimed_by, "attempt": job.attempts})


def outcome_detail(job: Job, outcome: Outcome) -> str:
    """The JSON detail of the event that records a run's outcome (every dialect writes this
    one, bound as a parameter)."""
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


@contextlib.contextmanager
def savepoint(tx: Tx) -> Iterator[Tx]:
    """``tx``'s statements in a savepoint of the transaction open on its connection: released
    when they succeed, rolled back to on any error, so the transaction's earlier work stays
    as it was (and, on PostgreSQL, committable after a failed statement)."""
    tx.run("savepoint_begin")
    try:
        yield tx
    except BaseException:
        # An error that ended the whole transaction (a lost connection) took the savepoint
        # with it: the error to raise is the first one.
        with contextlib.suppress(RowfleetError):
            tx.run("savepoint_rollback")
            tx.run("savepoint_release")
        raise
    tx.run("savepoint_release")


def _event(tx: Tx, job_id: int, kind: str, **detail: Any) -> None:
    tx.run("event_insert", job_id=job_id, kind=kind, detail=jobs.encode_json(detail))


def recorded_version(tx: Tx) -> int:
    """The schema version the database records (0: none yet)."""
    if not tx.one("migrations_exists")["n"]:
        return 0
    return tx.one("schema_version")["version"]


def schema_gone(version: int, missing: SchemaMissing) -> DatabaseBroken:
    return DatabaseBroken(f"the database records rowfleet schema version {version}, but {missing.detail}: its "
                          f"tables were dropped; restore it from a backup, or move it aside and run `rowfleet init`")


def schema_gone_unless_new(missing: SchemaMissing, tx: Tx, dialect: str) -> RowfleetError:
    """What a missing table means: a schema not made yet (``SchemaMissing``: wait, or run
    init), unless the database (read with ``tx``) records the current version, so its tables
    existed and were dropped since: ``DatabaseBroken``, which no wait repairs."""
    try:
        version = recorded_version(tx)
    except RowfleetError:  # the version cannot be read either: say what we know
        return missing
    return schema_gone(version, missing) if version >= latest_version(dialect) else missing


def _newer(version: int, target: int) -> str:
    return f"the database schema is version {version}, newer than this rowfleet knows ({target}): upgrade rowfleet"
