"""Jobs over named queries: enqueue, the claim, finish, recovery of orphaned jobs, what
operators do to a job, placement flags (queued model jobs no GPU worker can hold), and the reads. Written once for both dialects as the jobs part of
``Store`` (``StoreCore`` is what it builds on; ``rowfleet.store.sql`` names each statement
after the method that runs it). Every state change is a guarded UPDATE; one that matches
nothing is an answer (``LeaseLost``, ``Conflict``), decided here rather than swallowed.

A job written to run later is *delayed* (its ``delayed`` column): still queued to every
reader, but out of the claim's index, so that a claim never steps over a backlog of jobs
not yet due. The claim promotes the delayed jobs of its (project, queue) that have fallen
due, inside its own transaction: before claiming, when this store has not promoted for
that queue within the last ``config.poll`` seconds (or its last promotion filled its
batch), and whenever a claim finds nothing else. ``has_due`` sees a fallen-due delayed job
too, so an idle worker's safety poll claims it; a delayed job starts within ``config.poll``
of falling due, as it did when claims stepped over it.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, Iterable, Sequence

from rowfleet import job as jobs
from rowfleet import liveness
from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.errors import ConfigError, Conflict, LeaseLost, NotFound
from rowfleet.job import Job, JobSpec, Outcome
from rowfleet.liveness import not_retried
from rowfleet.store.core import StoreCore, Tx

PROMOTE_BATCH = 1000  # delayed jobs one promotion moves into the claim index, at most
DEMAND_GROUPS = 1000  # groups of model jobs placement reads per sweep, at most
PLACEMENT_BATCH = 500  # jobs one placement write flags, clears or fails, at most
# After a file watch's wake-up, a waiter for a job looks for the commits that become visible
# this long (``_end_in_sight``), at these steps (an idle worker's: a few pragmas a commit).
WAIT_SETTLE_WINDOW = 1.0
WAIT_SETTLE_STEP = 0.0002
WAIT_SETTLE_STEP_MAX = 0.005


class JobStore(StoreCore):
    """The jobs part of ``Store``."""

    def __init__(self, config: Config, clock: Callable[[], float]) -> None:
        super().__init__(config, clock)
        # When this store last promoted each (project, queue)'s fallen-due delayed jobs, by
        # ``local_clock``; absent: never, or its last batch was full.
        self._promoted: dict[tuple[str, str], float] = {}

    # --- enqueue -----------------------------------------------------------------------

    def enqueue(self, spec: JobSpec, conn: Any = None) -> Job:
        """Insert one job, or return the existing one with the same idempotency key.

        With ``conn`` the insert runs on the caller's connection and commits with the
        caller's transaction, or not at all.
        """
        with self._writing(conn) as tx:
            return self._enqueue(tx, spec)

    def _enqueue(self, tx: Tx, spec: JobSpec, placement: dict[str, Any] | None = None) -> Job:
        """Insert a job (a workflow node's when ``placement`` names its run, node and generation;
        a fired schedule's when it names the schedule, its slot and the reason it fired)."""
        if spec.unique is not None and (duplicate := self._duplicate(tx, spec)) is not None:
            return duplicate
        key = spec.idempotency_key
        # Look the key up first: an INSERT that loses to the key would still spend a job id.
        row = tx.one("job_by_key", project=spec.project, key=key) if key is not None else None
        if row is None:
            row = tx.one("enqueue", **_enqueue_params(spec, placement))
            self._queued_into(tx, spec.queue)
        if row is None:  # a concurrent insert won the key (possible on a caller's connection)
            row = tx.one("job_by_key", project=spec.project, key=key)
        return Job.from_row(row)

    def _duplicate(self, tx: Tx, spec: JobSpec) -> Job | None:
        """A unique job's duplicate (``JobSpec.unique``): the one that waits (or, "active",
        waits or runs), its start pushed by a debounce; None when there is none. Concurrent
        enqueues of one duplicate key are serialized (``lock_unique``) until this transaction
        ends, so they write one job."""
        key = {"project": spec.project, "queue": spec.queue, "unique_key": spec.unique_key()}
        tx.one("lock_unique", **key)
        pending = [Job.from_row(row) for row in tx.all("unique_pending", **key)]
        duplicate = next((job for job in pending if job.state == jobs.QUEUED or spec.unique == "active"), None)
        if duplicate is not None and spec.debounce > 0 and duplicate.state == jobs.QUEUED:
            pushed = tx.one("debounce", id=duplicate.id, debounce=spec.debounce)
            return duplicate if pushed is None else Job.from_row(pushed)
        return duplicate

    def _end_in_sight(self, job_id: int, project: str, window: float) -> Job:
        """After a file watch's wake-up (and at the first look): the job, read again at each
        commit that becomes visible within ``window`` seconds until it has ended. The event
        comes with the WAL's write, before the commit is visible (the WAL index lives in
        shared memory, which raises no event); one event may stand for a fast job's claim and
        finish together; and a finish written before the watch began raised none for it. On a
        loaded box the finish can become visible long after its write: only the commit's
        visibility (``changed``, a cheap pragma) tells when to look."""
        give_up = time.monotonic() + window
        step = WAIT_SETTLE_STEP
        while True:
            job = self.get_job(job_id, project)
            if job.state in jobs.TERMINAL:
                return job
            while not self.changed():
                if time.monotonic() >= give_up:
                    return job
                time.sleep(step)
                step = min(step * 2, WAIT_SETTLE_STEP_MAX)

    def enqueue_many(self, spec: JobSpec, args_list: Iterable[Any], conn: Any = None) -> int:
        """Insert one job per item of ``args_list``, each otherwise as ``spec`` says, in one
        transaction (all or none); returns how many. Idempotency keys are one-by-one only."""
        if spec.key is not None or spec.unique is not None:
            raise ConfigError("enqueue_many takes neither an idempotency key nor unique: enqueue those jobs one by one")
        with self._writing(conn) as tx:
            return self._enqueue_many(tx, spec, args_list)

    def _enqueue_many(self, tx: Tx, spec: JobSpec, args_list: Iterable[Any],
                     placement: dict[str, Any] | None = None) -> int:
        """One statement for many jobs; with ``placement``, the items of a map node, numbered."""
        params = _enqueue_params(spec, placement)
        del params["args"], params["key"]
        params["args_list"] = jobs.encode_json([_encode_args(args) for args in args_list])
        self._queued_into(tx, spec.queue)
        return tx.run("enqueue_many", **params)

    # --- claim, renew, finish ----------------------------------------------------------

    def claim(self, claim: Claim) -> Job | None:
        """Take the next due job of the claim's (project, queue), or None when there is none."""
        with self.transaction(durable=False) as tx:
            return self._claim(tx, claim)

    def _claim(self, tx: Tx, claim: Claim) -> Job | None:
        """The claim in ``tx``, promoting fallen-due delayed jobs first when that is due, or
        once nothing else is found (promoted jobs are claimed in the same transaction)."""
        promoted = self._promotion_due(claim)
        if promoted:
            self._promote(tx, claim)
        job = self._take(tx, claim)
        if job is None and not promoted and self._promote(tx, claim):
            job = self._take(tx, claim)
        return job

    def _take(self, tx: Tx, claim: Claim) -> Job | None:
        if claim.limited:
            return self._flow_take(tx, claim)
        return self._plain_take(tx, claim, None)

    def _plain_take(self, tx: Tx, claim: Claim, held_keys: list[str] | None) -> Job | None:
        """The claim by its own forms, passing over jobs of ``held_keys`` (a routed claim's
        per-key limits; None: none held)."""
        params = claim_params(claim, held_keys)
        row = next((row for query in claim_forms("claim", claim) if (row := tx.one(query, **params)) is not None),
                   None)
        if row is None:
            return None
        return Job.from_row(row)  # the claim is on the row (its event: ``events``)

    def claim_batch(self, claim: Claim, limit: int) -> list[Job]:
        """Up to ``limit`` due jobs of a plain claim (no routing inputs) at once, in claim
        order, each held with its own token and lease: a prefetching worker's claim (``worker
        --prefetch``). Promotes fallen-due delayed jobs as ``claim`` does."""
        with self.transaction(durable=False) as tx:
            return self._claim_batch(tx, claim, limit)

    def _claim_batch(self, tx: Tx, claim: Claim, limit: int) -> list[Job]:
        if claim.models is not None:
            raise ValueError("a batch claim is a plain claim: a claim with routing inputs takes one job")
        promoted = self._promotion_due(claim)
        if promoted:
            self._promote(tx, claim)
        taken = self._take_batch(tx, claim, limit)
        if not taken and not promoted and self._promote(tx, claim):
            taken = self._take_batch(tx, claim, limit)
        return taken

    def _take_batch(self, tx: Tx, claim: Claim, limit: int) -> list[Job]:
        if claim.limited:  # one at a time: each start is counted against the limits before the next
            return [job] if (job := self._take(tx, claim)) is not None else []
        rows = tx.all("claim_batch", limit=limit, **claim_params(claim))
        return sorted((Job.from_row(row) for row in rows), key=claim_order)

    def _promotion_due(self, claim: Claim) -> bool:
        """Whether a claim of ``claim``'s queue should promote first (``promotion_due``), by
        when this store last promoted that queue."""
        return promotion_due(self._promoted.get((claim.project, claim.queue)), self.local_clock(),
                             self.config.poll)

    def _promote(self, tx: Tx, claim: Claim) -> int:
        """Move the delayed jobs of ``claim``'s queue that have fallen due into the claim
        index (a batch at most); how many. Recorded, so that the next claims skip it."""
        moved = tx.run("promote_due", project=claim.project, queue=claim.queue, limit=PROMOTE_BATCH)
        if moved >= PROMOTE_BATCH:
            self._promoted.pop((claim.project, claim.queue), None)
        else:
            self._promoted[(claim.project, claim.queue)] = self.local_clock()
        return moved

    def local_clock(self) -> float:
        """The time by this store's clock where the database's need not be read: promotions
        are spaced by it, and a GPU worker judges the leases and figures it read with it.
        SQLite's is the store's own (held across a step of the box's clock); a dialect whose
        clock costs a round trip reads the host's instead."""
        return self.clock()

    def has_due(self, claim: Claim) -> bool:
        """A cheap read: would ``claim`` find a job now (a delayed job fallen due included, as
        the claim promotes it)? Takes no lock. It takes the whole claim, not its queue alone,
        so that every input that narrows a claim narrows this too."""
        if claim.limited:
            with self._one_read() as tx:
                return self._flow_due(tx, claim)
        return self._plain_due(self.reader(), claim, None)

    def _plain_due(self, tx: Tx, claim: Claim, held_keys: list[str] | None) -> bool:
        return tx.one(claim_forms("has_due", claim)[-1], **claim_params(claim, held_keys)) is not None

    def renew(self, job: Job, lease: float) -> "Renewal":
        """Extend the lease of a job still held with ``job.lease_token``: the new deadline,
        and whether an operator has asked for the job to be cancelled."""
        with self.statement() as tx:
            row = tx.one("renew", id=job.id, token=job.lease_token, lease=lease)
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

    def finish_prefetched(self, job: Job, outcome: Outcome, *, hand_back: Sequence[Job] = (), reason: str = "",
                          claim_next: Claim | None = None, limit: int = 1) -> list[Job]:
        """``finish`` for a worker holding jobs it has not started (``worker --prefetch``), in
        one transaction: the outcome; the unstarted jobs of ``hand_back`` given back
        (``hand_back``'s rule, with ``reason``); and with ``claim_next`` up to ``limit`` next
        jobs (``claim_batch``). ``LeaseLost`` as ``finish``, writing nothing."""
        written = self.finish_batch([(job, outcome)], hand_back=hand_back, reason=reason, claim_next=claim_next,
                                    limit=limit, fenced=True)
        return written.claimed

    def finish_batch(self, done: Sequence[tuple[Job, Outcome]], *, hand_back: Sequence[Job] = (),
                     reason: str = "", claim_next: Claim | None = None, limit: int = 1,
                     fenced: bool = False) -> "Batch":
        """Several runs' outcomes in one transaction, one commit (``worker --batch``), with
        ``finish_prefetched``'s hand-back and next claim. An outcome whose token is stale is
        not written and its ``LeaseLost`` returned in ``Batch.lost``: the others commit all
        the same (with ``fenced``, the first stale token raises instead, writing nothing)."""
        with self.transaction() as tx:
            lost = self._write_outcomes(tx, done, fenced)
            for unstarted in hand_back:
                self._hand_back(tx, unstarted, reason)
            claimed = [] if claim_next is None else self._claim_batch(tx, claim_next, limit)
        return Batch(claimed, lost)

    def _write_outcomes(self, tx: Tx, done: Sequence[tuple[Job, Outcome]], fenced: bool) -> list[LeaseLost]:
        """Write each outcome in ``tx``; the ``LeaseLost`` of each stale one (``fenced``: raised)."""
        lost: list[LeaseLost] = []
        for job, outcome in done:
            refused_if_stale(lost, fenced, lambda: self._write_outcome(tx, job, outcome))
        return lost

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
            row = tx.one("finish_requeue", delay=outcome.delay, **guard)
        else:
            row = tx.one("finish", state=outcome.state, result=outcome.result_json, **guard)
        if row is None:
            self._check_already_written(tx, job, outcome)
            return outcome
        kind = outcome.event or outcome.state
        if kind != jobs.COMPLETED:  # a completion is on the row (its event: ``events``)
            tx.run("record_event", job_id=job.id, kind=kind, detail=outcome_detail(job, outcome))
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

    # --- recovery ----------------------------------------------------------------------

    def reclaim_lapsed(self, limit: int = 100, as_of: float | None = None) -> list[dict[str, Any]]:
        """Re-queue running jobs whose lease lapsed, with the attempt given back and a watchdog
        retry spent (``liveness.lapse_outcome``: failed once those are used up, cancelled when
        it belongs to a workflow run that has ended or an operator cancelled it). ``as_of``:
        only leases that had lapsed by then (the moment a sweep judged trustworthy: a clock
        step after it must not make a live lease read lapsed); None: now.

        A reclaimed job keeps its id and run_at, so it sorts ahead of fresh work of its priority.
        """
        with self.transaction() as tx:
            rows = tx.all("reclaim_lapsed", limit=limit, as_of=as_of)
            now = self._now_of(tx) if rows else 0.0
            done = []
            for row in rows:
                lost = (liveness.lost_holder(row["lease_expires_at"], row["claimed_by"], now)
                        or f"worker {jobs.raw_text(row['claimed_by'])} was lost (lease lapsed)")
                decided = liveness.lapse_outcome(row, lost, self._not_to_run_again(tx, row),
                                                 self.config.watchdog_retries)
                done.append(self._recover(tx, row, lost, "reclaimed", requeue="job_reclaim", fail="job_fail_lapsed",
                                          decided=decided))
        return [item for item in done if item["action"] != "none"]

    def reclaim_unheld(self, limit: int = 100) -> list[dict[str, Any]]:
        """Re-queue (or end, as ``reclaim_lapsed`` does) running jobs whose row names no
        holder a sweep could see lose them (``liveness.unheld``: no lease, a lease that is no
        time, no worker named), which plain SQL may write and no lapse would ever free. Each
        gets a ``reclaimed`` event (or the state it ended in) saying why."""
        with self.transaction() as tx:
            done = []
            for row in tx.all("reclaim_unheld", limit=limit):
                why = liveness.unheld(row["lease_expires_at"], row["claimed_by"])
                if why is not None:  # the query's rule and the pure one agree; a row they do not is left
                    done.append(self._recover(tx, row, why, "reclaimed", requeue="job_lost",
                                              fail="job_orphan_fail", reason=why))
        return [item for item in done if item["action"] != "none"]

    def fail_never_due(self, limit: int = 100) -> list[Job]:
        """Fail queued jobs whose ``run_at`` is no number (SQLite's text or bytes, which sort
        after every number; PostgreSQL's NaN, likewise): no claim's due filter ever matches
        one, so it would stay queued for ever. Each fails unclaimed as a worker fails a row it
        cannot read (``job.unreadable_outcome``: the error names the column), with a
        ``failed`` event, and a workflow node's run is told through the outbox."""
        with self.transaction() as tx:
            failed = []
            for row in tx.all("never_due", limit=limit):
                error = jobs.unreadable_outcome(Job.from_row(row)).error
                ended = tx.one("fail_never_due", id=row["id"], error=error)
                if ended is None:
                    continue
                job = Job.from_row(ended)
                _record_event(tx, job.id, jobs.FAILED, error=error)
                if job.run_id is not None:
                    self._dispatch(tx, job)
                failed.append(job)
        return failed

    def _now_of(self, tx: Tx) -> float:
        """The time ``tx``'s statements take as now: its own, or the database's clock (on a
        dialect whose SQL reads the clock itself)."""
        return tx.now if tx.now is not None else self.clock()

    def _recover_jobs_of(self, tx: Tx, worker: Any, lost: str, kind: str,
                         lease_lost: bool = False, reason: str | None = None) -> list[dict[str, Any]]:
        """Hand back (or end) the running jobs the worker of this row claimed in its lifetime;
        as a lapse would (``liveness.lapse_outcome``) when it ended because it had lost their
        leases (``lease_lost``: it exited 81, cut off). ``reason``, when given, goes in each
        re-queue's event."""
        rows = tx.all("jobs_of_silent_worker", holder=f"{worker['host']}:{worker['pid']}", host=worker["host"],
                      pid=worker["pid"], since=worker["started_at"])
        if not lease_lost:
            return [self._recover(tx, row, lost, kind, requeue="job_lost", fail="job_orphan_fail", reason=reason)
                    for row in rows]
        return [self._recover(tx, row, lost, kind, requeue="job_lease_lost", fail="job_orphan_fail",
                              decided=liveness.lapse_outcome(row, lost, self._not_to_run_again(tx, row),
                                                             self.config.watchdog_retries))
                for row in rows]

    def _recover(self, tx: Tx, row: Any, lost: str, kind: str, requeue: str, fail: str,
                 reason: str | None = None, decided: tuple[str, str] | None = None) -> dict[str, Any]:
        """Put an orphaned running job back in the queue with ``requeue``, or end it with
        ``fail``, as ``liveness.orphan_outcome`` decides: cancelled when it was not to run
        again (its workflow run has ended, or an operator asked for it to be cancelled),
        failed when that was its last attempt or its counts cannot be read (plain SQL's: such
        a row ends here, rather than the sweep and every other job of its batch on a
        TypeError). What it did: its ``action`` is the state written (reclaimed for a
        re-queue), or none. ``reason``, when given, goes in the re-queue's event; ``decided``,
        when given, is the ``(state, error)`` to write instead of ``orphan_outcome``'s."""
        guard = {"id": row["id"], "token": row["lease_token"]}
        detail = {"token": row["lease_token"], "holder": row["claimed_by"], "attempt": row["attempts"]}
        state, error = decided or liveness.orphan_outcome(row["attempts"], row["max_attempts"], lost,
                                                          self._not_to_run_again(tx, row))
        if state == jobs.QUEUED:
            if tx.one(requeue, error=error, **guard):
                _record_event(tx, row["id"], kind, **detail, **({} if reason is None else {"reason": reason}))
                return {"id": row["id"], "action": "reclaimed", **detail}
            return {"id": row["id"], "action": "none", **detail}
        if tx.one(fail, state=state, error=error, **guard):
            _record_event(tx, row["id"], state, error=error, **detail)
            if row["run_id"] is not None:
                self._dispatch(tx, self._get_job(tx, row["id"], row["project"]))
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

    # --- what operators do to a job ----------------------------------------------------

    def cancel(self, job_id: int, project: str, reason: str = "cancelled by an operator") -> Job:
        """Cancel a queued job at once; for a running job, ask its worker to stop it: the
        worker learns of it with its next lease renewal, asks the handler to stop
        (``rowfleet.cancel_requested()``), and past ``config.cancel_grace`` ends its own
        process; the job ends cancelled either way, and the job returned is still running.
        Cancelling a cancelled job, or asking twice, is a no-op; a finished job conflicts."""
        with self.transaction() as tx:
            row = tx.one("cancel", id=job_id, project=project, reason=reason)
            if row is not None:
                _record_event(tx, job_id, "cancelled", reason=reason)
                job = Job.from_row(row)
                if job.run_id is not None:
                    self._dispatch(tx, job)
                return job
            job = self._get_job(tx, job_id, project)
            if job.state == jobs.RUNNING:
                unheld = liveness.unheld(job.lease_expires_at, job.claimed_by)
                if unheld is not None:
                    return self._cancel_unheld(tx, job, reason, unheld) or self._request_cancel(tx, job, reason)
                return self._request_cancel(tx, job, reason)
            if job.state == jobs.CANCELLED:
                return job
            raise Conflict(f"job {job_id} is {job.state}; only queued or running jobs can be cancelled")

    def _cancel_unheld(self, tx: Tx, job: Job, reason: str, unheld: str) -> Job | None:
        """Cancel at once a running job whose row names no holder that could be asked to
        stop it (``liveness.unheld``); None, writing nothing, if its row moved since it was read."""
        error = f"{reason} (at once: {unheld})"
        row = tx.one("cancel_unheld", id=job.id, project=job.project, token=job.lease_token, reason=error)
        if row is None:
            return None
        _record_event(tx, job.id, "cancelled", reason=reason, token=job.lease_token, unheld=unheld)
        cancelled = Job.from_row(row)
        if cancelled.run_id is not None:
            self._dispatch(tx, cancelled)
        return cancelled

    def _request_cancel(self, tx: Tx, job: Job, reason: str) -> Job:
        row = tx.one("request_cancel", id=job.id, project=job.project, reason=reason)
        if row is None:  # asked before: the first request's time and reason stand
            return job
        _record_event(tx, job.id, "cancel_requested", reason=reason, token=job.lease_token, holder=job.claimed_by)
        return Job.from_row(row)

    def prioritize(self, job_id: int, project: str) -> Job:
        """Make a queued job run next: ahead of every priority (``run_next``). A no-op for a
        job that already runs next; a job that is not queued conflicts."""
        with self.transaction() as tx:
            row = tx.one("prioritize", id=job_id, project=project)
            if row is not None:
                _record_event(tx, job_id, "prioritized", run_next=True)
                return Job.from_row(row)
            job = self._get_job(tx, job_id, project)
            if job.state == jobs.QUEUED:  # already run-next
                return job
            raise Conflict(f"job {job_id} is {job.state}; only a queued job can be made to run next")

    def retry(self, job_id: int, project: str) -> Job:
        """Revive a failed or cancelled job: queued now, with at least one attempt left."""
        with self.transaction() as tx:
            node_job = self._get_job(tx, job_id, project)
            if node_job.run_id is not None:
                raise Conflict(f"job {job_id} is node {node_job.node_id!r} of run {node_job.run_id}: "
                               f"restart the run instead (rowfleet restart {node_job.run_id})")
            row = tx.one("retry", id=job_id, project=project)
            if row is None:
                job = self._get_job(tx, job_id, project)
                raise Conflict(f"job {job_id} is {job.state}; only failed or cancelled jobs can be retried")
            job = Job.from_row(row)
            _record_event(tx, job_id, "revived", max_attempts=job.max_attempts)
            return job

    # --- what a running job reports, and how a watchdog stops it ------------------------

    def progress(self, job: Job, fraction: float | None, message: str | None) -> None:
        """Record a progress beat of a job still held with ``job.lease_token``."""
        with self.transaction(durable=False) as tx:
            if tx.one("progress", id=job.id, token=job.lease_token, progress=fraction, message=message) is None:
                raise self._stale(tx, job)

    def watchdog_trip(self, job: Job, detail: dict[str, Any], outcome: Outcome, spent: int, refund: int,
                      hand_back: Sequence[Job] = ()) -> str:
        """Write what a watchdog decided for the job in hand, in one transaction: the retry
        spent and the forensic ``watchdog_trip`` event, or for an operator's stop the attempt
        given back and an ``operator_stop`` event (an operator is not a fault), and the
        outcome (re-queued, or failed through the outbox like any failure); and the jobs the
        worker holds unstarted (prefetched) given back, as the process is about to end. The
        state written: a re-queue of a node whose run has ended is cancelled instead.
        ``LeaseLost`` (writing nothing) when the job is no longer this holder's."""
        with self.transaction() as tx:
            if tx.one("watchdog_trip", id=job.id, token=job.lease_token, spent=spent, refund=refund) is None:
                raise self._stale(tx, job)
            for unstarted in hand_back:
                self._hand_back(tx, unstarted, f"its worker is ending: job {job.id}'s watchdog tripped")
            if refund and not (job.run_id is not None and self._run_ended(tx, job.run_id)):
                # an operator's stop or a holder cut off, not the job's fault: back at once,
                # ahead of fresh work
                tx.one("job_hand_back", id=job.id, token=job.lease_token, error=outcome.error)
                _record_event(tx, job.id, outcome.event or "operator_stop", token=job.lease_token, **detail)
                return jobs.QUEUED
            _record_event(tx, job.id, "watchdog_trip", token=job.lease_token, **detail)
            return self._write_outcome(tx, job, outcome).state

    def hand_back(self, job: Job, reason: str) -> bool:
        """Give a claimed job back unrun, which is no fault (its worker may not run it: the
        GPU is another model's): queued again at once, the attempt its claim counted given
        back, no retry spent, and a ``handed_back`` event with ``reason``. False, writing
        nothing, when the job is no longer this holder's."""
        with self.transaction() as tx:
            return self._hand_back(tx, job, reason)

    def _hand_back(self, tx: Tx, job: Job, reason: str) -> bool:
        if tx.one("hand_back", id=job.id, token=job.lease_token) is None:
            return False
        _record_event(tx, job.id, "handed_back", token=job.lease_token, holder=job.claimed_by, reason=reason)
        return True

    def record_event(self, job_id: int, kind: str, **detail: Any) -> None:
        """Append a forensic event to a job's log."""
        with self.transaction() as tx:
            _record_event(tx, job_id, kind, **detail)

    # --- placement: queued model jobs no GPU worker can hold ----------------------------

    def flag_unplaceable(self, project: str, queue: str, model: str, vram_mb: int | None, was: str | None,
                         reason: str, limit: int = PLACEMENT_BATCH) -> list[int]:
        """Flag one batch of a group's queued jobs whose reason is still ``was`` (None:
        placeable) as unplaceable for ``reason``, each with one ``unplaceable`` event; the
        ids flagged. A job's ``unplaceable_at`` stays the start of its unplaceable stretch."""
        with self.transaction(durable=False) as tx:  # a flag lost in a power cut is set again
            ids = [row["id"] for row in tx.all("flag_unplaceable", project=project, queue=queue, model=model,
                                                vram_mb=vram_mb, was=was, reason=reason, limit=limit)]
            for job_id in ids:
                _record_event(tx, job_id, "unplaceable", reason=reason, **({"was": was} if was else {}))
        return ids

    def clear_unplaceable(self, project: str, queue: str, model: str, vram_mb: int | None, state: str, was: str,
                          limit: int = PLACEMENT_BATCH) -> list[int]:
        """Clear the flag of one batch of a group's jobs in ``state`` (queued, or running:
        a worker took it) flagged ``was``, each with one ``placeable`` event; the ids cleared."""
        with self.transaction(durable=False) as tx:
            ids = [row["id"] for row in tx.all("clear_unplaceable", project=project, queue=queue, model=model,
                                                vram_mb=vram_mb, state=state, was=was, limit=limit)]
            for job_id in ids:
                _record_event(tx, job_id, "placeable", was=was)
        return ids

    def fail_unplaceable(self, project: str, queue: str, model: str, vram_mb: int | None, reason: str,
                         before: float, error: str, limit: int = PLACEMENT_BATCH) -> list[Job]:
        """Fail one batch of a group's queued jobs unplaceable for ``reason`` since
        ``before`` or earlier, with ``error``, as every failure ends: a ``failed`` event,
        and a workflow node's run told through the outbox. The jobs failed."""
        with self.transaction() as tx:
            rows = tx.all("fail_unplaceable", project=project, queue=queue, model=model, vram_mb=vram_mb,
                          reason=reason, before=before, error=error, limit=limit)
            failed = [Job.from_row(row) for row in rows]
            for job in failed:
                _record_event(tx, job.id, jobs.FAILED, error=error, reason=reason)
                if job.run_id is not None:
                    self._dispatch(tx, job)
        return failed

    # --- reads -------------------------------------------------------------------------

    def get_job(self, job_id: int, project: str) -> Job:
        return self._get_job(self.reader(), job_id, project)

    def wait_for(self, job_id: int, project: str, timeout: float | None = None) -> Job:
        """The job once it has ended (completed, failed or cancelled), read as it ended;
        ``TimeoutError`` when it has not after ``timeout`` seconds, ``NotFound`` when there is
        no such job. Sleeps on ``job_waiter`` (a NOTIFY on PostgreSQL, the file watch on
        SQLite), looking again at least every ``config.poll`` seconds, never in a tight loop."""
        give_up = None if timeout is None else time.monotonic() + timeout
        waiter = self.job_waiter(job_id, project)
        try:
            # The first look is as after a wake-up: a commit written before the watch began
            # (and not yet visible) raised no event the waiter will hear.
            woken = True
            while True:
                left = None if give_up is None else give_up - time.monotonic()
                if woken and waiter.settle_window > 0:
                    window = WAIT_SETTLE_WINDOW if left is None else max(0.0, min(WAIT_SETTLE_WINDOW, left))
                    job = self._end_in_sight(job_id, project, window)
                else:
                    job = self.get_job(job_id, project)
                if job.state in jobs.TERMINAL:
                    return job
                left = None if give_up is None else give_up - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"job {job_id} is still {job.state} after {timeout:g}s")
                woken = waiter.wait(self.config.poll if left is None else min(left, self.config.poll))
        finally:
            waiter.close()

    def _get_job(self, tx: Tx, job_id: int, project: str) -> Job:
        row = tx.one("get_job", id=job_id, project=project)
        if row is None:
            where = f" in project {project!r}" if project else ""
            raise NotFound(f"no job {job_id}{where}")
        return Job.from_row(row)

    def model_backlog(self, project: str, queue: str) -> list[dict[str, Any]]:
        """Per model with due queued jobs in (project, queue): ``model``, ``queued`` (how
        many) and ``oldest_wait`` (seconds the oldest has waited, by the database's clock)."""
        return [dict(row) for row in self.reader().all("model_backlog", project=project, queue=queue)]


def _enqueue_params(spec: JobSpec, placement: dict[str, Any] | None = None) -> dict[str, Any]:
    # A debounced job starts no sooner than its debounce.
    return {"project": spec.project, "queue": spec.queue, "task": spec.task, "args": spec.args_json(),
            "priority": spec.priority, "run_next": int(spec.run_next), "run_at": spec.run_at,
            "delay": max(float(spec.delay), spec.debounce), "max_attempts": spec.max_attempts,
            "key": spec.idempotency_key, "unique_key": spec.unique_key(), "concurrency_key": spec.concurrency_key,
            "timeout": spec.timeout, "model": spec.model, "vram_mb": spec.vram_mb, "gpus": spec.gpus,
            **_UNPLACED, **(placement or {})}


# Where a job comes from, unless its ``placement`` says: a workflow node's run, node and
# generation, or a fired schedule's name, slot and reason (``ScheduleStore.fire_slot``).
_UNPLACED = {"run_id": None, "node_id": None, "node_generation": None,
             "schedule": None, "schedule_slot": None, "fire_reason": None}


@dataclasses.dataclass(frozen=True)
class Renewal:
    """What a lease renewal tells the holder: the new deadline, and any cancel request."""

    lease_expires_at: float
    cancel_requested_at: float | None = None
    cancel_reason: str | None = None


@dataclasses.dataclass(frozen=True)
class Batch:
    """What ``finish_batch`` did: the jobs it claimed next, and the outcomes it could not
    write because their tokens were stale (each one's ``LeaseLost``)."""

    claimed: list[Job]
    lost: list[LeaseLost]


def refused_if_stale(lost: list[LeaseLost], fenced: bool, write: Callable[[], Any]) -> None:
    """Run one outcome's ``write`` in a batch: a stale token's ``LeaseLost`` is added to
    ``lost`` (``fenced``: raised, and the batch writes nothing). A guarded write that matched
    nothing wrote nothing of its job, so the transaction goes on without it: no savepoint."""
    try:
        write()
    except LeaseLost as exc:
        if fenced:
            raise
        lost.append(exc)


def promotion_due(last: float | None, now: float, poll: float) -> bool:
    """Whether a claim promotes fallen-due delayed jobs before it claims: none promoted
    since ``last`` (None: never, or the last batch was full) for ``poll`` seconds, or a
    clock that went back since.

    >>> [promotion_due(None, 10.0, 1.0), promotion_due(9.5, 10.0, 1.0), promotion_due(9.0, 10.0, 1.0),
    ...  promotion_due(11.0, 10.0, 1.0)]
    [True, False, True, True]
    """
    return last is None or not last <= now < last + poll


@functools.lru_cache(maxsize=256)  # a worker's claims repeat the same few inputs
def claim_forms(name: str, claim: Claim) -> tuple[str, ...]:
    """The forms of the claim statement ``name`` that take a job for ``claim``, to run in
    turn until one does: the plain one; or, when a routing input narrows or orders the
    claim, ``[routed]``, first tried as ``[warm]`` when its warm model goes first
    (``Claim.warm_first``: one probe finds its job, in the common case of a warm box);
    ``[newest]`` for an overflow box. The last form always decides the whole rule (``has_due``
    asks it).

    >>> claim_forms("claim", Claim("", "q", "h", 1.0)), claim_forms("claim", Claim("", "q", "h", 1.0, models=()))
    (('claim',), ('claim[routed]',))
    >>> claim_forms("claim", Claim("", "q", "h", 1.0, models=("llm",), warm_model="llm"))
    ('claim[warm]', 'claim[routed]')
    >>> claim_forms("claim", Claim("", "q", "h", 1.0, models=("llm",), newest_first=True))
    ('claim[newest]',)
    """
    if not claim.routed:
        return (name,)
    if claim.newest_first:
        return (f"{name}[newest]",)
    return (f"{name}[warm]", f"{name}[routed]") if claim.warm_first() else (f"{name}[routed]",)


def claim_order(job: Job) -> tuple[int, int, float, int]:
    """Where a claim puts ``job``: run-next first, then priority, due time, id (a field
    that plain SQL made unreadable sorts as zero: the batch still runs in an order).

    >>> from types import SimpleNamespace as J
    >>> sorted([J(run_next=False, priority=0, run_at=1.0, id=2), J(run_next=True, priority=5, run_at=9.0, id=3),
    ...         J(run_next=False, priority=0, run_at=1.0, id=1)], key=claim_order)[0].id
    3
    """
    def number(value: Any) -> float:
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

    return (-int(job.run_next is True), number(job.priority), number(job.run_at), number(job.id))


def claim_params(claim: Claim, held_keys: list[str] | None = None) -> dict[str, Any]:
    """The bound parameters of every claim query (claim, has_due, and a dialect's own): the
    claim's scalar fields, its gate (``Claim.gate``) as one JSON object of model ->
    preference (one bound parameter, never SQL text; None: no gate) with plain jobs'
    preference, and the keys a limited routed claim passes over (``held_keys``, a JSON array;
    None: none). (Newest first is a form of the statement, ``claim_forms``, not a parameter.)

    >>> claim_params(Claim("", "default", "box:7", 600.0))["gate"] is None
    True
    >>> params = claim_params(Claim("", "gpu", "box:7", 600.0, models=("llm", "ocr"), warm_model="ocr",
    ...                                only_warm=True, lane="model"))
    >>> params["gate"], params["plain_preference"], params["warm_model"]
    ('{"ocr":2}', None, 'ocr')
    """
    gate, plain = _gate(claim)
    return {"project": claim.project, "queue": claim.queue, "holder": claim.holder, "host": claim.host,
            "lease": claim.lease,
            "warm_model": claim.warm_model, "vram_free_mb": claim.vram_free_mb, "gpus_free": claim.gpus_free,
            "gate": gate, "plain_preference": plain,
            "held_keys": None if held_keys is None else jobs.encode_json(held_keys)}


@functools.lru_cache(maxsize=256)
def _gate(claim: Claim) -> tuple[str | None, int | None]:
    """A claim's gate, encoded, and plain jobs' preference: a worker's claims repeat the
    same few inputs, so each is worked out once."""
    gate = claim.gate()
    return (None, None) if gate is None else (jobs.encode_json(gate), claim.plain_preference())


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


def _record_event(tx: Tx, job_id: int, kind: str, **detail: Any) -> None:
    tx.run("record_event", job_id=job_id, kind=kind, detail=jobs.encode_detail(detail))
