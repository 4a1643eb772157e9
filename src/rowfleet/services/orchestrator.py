"""The orchestrator: migrates the schema, drains the workflow outbox, sweeps on a timer.

Draining applies the dispatch events that finished nodes wrote (each in its own
transaction with the walk it triggers), and runs as soon as one is written: the
orchestrator sleeps on the store's dispatch waiter (NOTIFY on Postgres, the database file
on SQLite) between sweeps. An event whose drain failed is skipped until its
``next_attempt_at`` (the store's backoff), however often the waiter wakes us.

A sweep re-queues jobs whose lease lapsed (the only recovery path for an orphaned row) or
whose row names no holder a lapse could ever free (no lease, a lease that is no time, no
worker: plain SQL's), fails queued jobs no claim could ever take (a run_at that is no
number), flags workers whose heartbeat went stale (unless the sweep doubts its moment: see
``trust_moment``), gives stranded runs a fresh event, and prunes finished rows past the
retention period. A flagged worker's jobs go back to the queue at once only when its death
is certain (``known_dead``: its process is gone from this host); otherwise they wait for
their leases, since a worker cut off from the database runs them until its lease rule
stops them, just before the lease could lapse. Every step is a guarded write, so two
orchestrators may run at once. Each sweep also beats the orchestrator's own row, so
``status`` and ``broker`` can say whether a project is served. ``run_once(now)`` is one
sweep and one drain; its ``Sweep`` says what they did.

Answers to input nodes written as rows of ``submissions`` (``rowfleet submit --queued``,
another program's plain INSERT) are applied with the drain, on the same wake-ups (a
PostgreSQL trigger NOTIFYs the dispatch channel; on SQLite rowfleet's own inserts ring the
dispatch doorbell, another program's are found at the safety poll), each exactly once
(``rowfleet.store.submissions``); a sweep first puts back to pending those held longer than
``SUBMISSION_GRACE`` by an orchestrator that died between claiming and applying them.

Each sweep also decides placement for the project's queued model jobs, a group at a time
(one per queue, model and job size, as ``rowfleet.gpu.placement`` reads them, never a job
at a time): ``rowfleet.gpu.routing.unplaceable_reason`` against the GPU workers of the job's
queue (their heartbeat rows, live or not) and the models' measured figures. A group whose
reason changed is flagged (``unplaceable``, with one ``unplaceable`` event per job), and a
flagged one that some worker could now take is cleared (one ``placeable`` event per job),
as is a flagged job a worker has claimed; so a job is flagged by the first sweep after it
became unplaceable. The flag is information only: a flagged job stays claimable, so a
fitting worker that appears takes it, and the next sweep clears the flag. With
``fail_unplaceable_after`` seconds, a job unplaceable for longer fails, naming the reason,
as any failure ends (a workflow node's run is told through the outbox). Writes go in
batches (``PLACEMENT_BATCH`` jobs each, ``PLACEMENT_BATCHES`` per sweep at most): a huge
backlog is flagged over a few sweeps, never in one long write.

Writes no SQL: everything goes through the store.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Any, Callable, Mapping

from rowfleet import liveness
from rowfleet.config import Config
from rowfleet.errors import DatabaseBroken, RowfleetError
from rowfleet.gpu import routing
from rowfleet.gpu.placement import Demand, Placement, placement, unplaceable_text
from rowfleet.job import QUEUED
from rowfleet.store import Store
from rowfleet.store import waiting
from rowfleet.store.jobs import PLACEMENT_BATCH
from rowfleet.telemetry import memory

log = logging.getLogger("rowfleet.orchestrator")

PRUNE_EVERY = 60.0  # seconds between prune passes; pruning is not urgent
# Seconds an unfinished run must have had nothing live before the sweep re-walks it:
# long enough that it is not merely between two transactions, short enough to be "seconds".
RECONCILE_GRACE = 2.0
# Seconds between two drains that a wake-up triggers. On SQLite every commit to the file
# wakes the orchestrator, most of them a busy worker's; this caps the cheap "anything to
# drain?" reads at a few hundred a second, for a few milliseconds of dispatch latency.
DRAIN_SPACING = 0.005
# After a wake-up, re-checks start this far apart and back off to SETTLE_STEP_MAX.
SETTLE_STEP = 0.0005
SETTLE_STEP_MAX = 0.005
# Placement writes (of up to PLACEMENT_BATCH jobs each) one sweep makes at most.
PLACEMENT_BATCHES = 20
# Seconds a claimed submission may stay unapplied before a sweep hands it on: claiming and
# applying take milliseconds, so only an orchestrator that died in between leaves one so long.
SUBMISSION_GRACE = 30.0
SUBMISSION_BATCH = 100  # submissions claimed at once


@dataclasses.dataclass(frozen=True)
class Sweep:
    """What one sweep did: jobs whose holder was gone (reclaimed, failed, or cancelled, by
    what their row said: a lapsed lease, or none a sweep could see lapse), queued jobs failed
    unclaimed since no claim could ever take them (``unreadable_failed``: a run_at that is no
    number), workers flagged dead, runs walked again, dispatch events applied and failed,
    submissions applied, failed and handed back (reclaimed), queued model jobs flagged
    unplaceable (or with a new reason), flags cleared (``placeable``), unplaceable jobs
    failed past ``fail_unplaceable_after``, finished jobs counted into the tallies
    ``/metrics`` reads, host samples past their tier's horizon and finished rows pruned."""

    reclaimed: int = 0
    failed: int = 0
    cancelled: int = 0
    unreadable_failed: int = 0
    flagged_workers: int = 0
    reconciled_runs: int = 0
    dispatched: int = 0
    dispatch_failures: int = 0
    submissions_applied: int = 0
    submissions_failed: int = 0
    submissions_reclaimed: int = 0
    unplaceable: int = 0
    placeable: int = 0
    unplaceable_failed: int = 0
    tallied: int = 0
    samples_pruned: int = 0
    pruned: int = 0

    def to_dict(self) -> dict[str, int]:
        """By field name, as ``rowfleet orchestrator --once`` prints it (after the schema version).

        >>> Sweep(reclaimed=1).to_dict()["reclaimed"], list(Sweep().to_dict())[-1]
        (1, 'pruned')
        """
        return dataclasses.asdict(self)

    def __add__(self, other: "Sweep") -> "Sweep":
        """Two sweeps' counts together.

        >>> (Sweep(reclaimed=1) + Sweep(reclaimed=2, flagged_workers=1)).to_dict()["reclaimed"]
        3
        """
        return Sweep(**{name: getattr(self, name) + getattr(other, name) for name in self.to_dict()})


@dataclasses.dataclass(frozen=True)
class Placed:
    """What one sweep's placement did: jobs flagged, cleared and failed."""

    flagged: int = 0
    cleared: int = 0
    failed: int = 0


def reason_now(group: Demand, fleet: Placement) -> str | None:
    """Why the group's jobs can run on no GPU worker of their queue now (a
    ``routing.Unplaceable`` value), or None: some worker can take them, or they run."""
    if group.state != QUEUED:
        return None
    info = fleet.info.get(group.model)
    reason = routing.unplaceable_reason(group.model, routing.vram_need(group.vram_mb, info),
                                        fleet.boxes(group.queue), info)
    return None if reason is None else reason.value


def overdue(group: Demand, reason: str | None, now: float, after: float | None) -> bool:
    """Have the group's jobs been unplaceable (still for ``reason``) longer than ``after``
    seconds (None: never too long)?

    >>> group = Demand("gpu", "llm", None, "queued", "model_unknown", 2, unplaceable_since=100.0)
    >>> overdue(group, "model_unknown", 161.0, 60.0), overdue(group, "model_unknown", 160.0, 60.0)
    (True, False)
    >>> overdue(group, None, 1e9, 60.0), overdue(group, "model_unknown", 1e9, None)
    (False, False)
    """
    return (after is not None and reason is not None and group.unplaceable_since is not None
            and now - group.unplaceable_since > after)


class Orchestrator:
    def __init__(self, store: Store, config: Config, fail_unplaceable_after: float | None = None, *,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.config = config
        # The dead-worker sweep's own clock, which no step of the wall clock moves, and its
        # last moment and hold (``liveness.trust_sweep``): one stale moment flags nobody.
        self.monotonic = monotonic
        self._last_sweep: liveness.SweepMoment | None = None
        self._held_since: float | None = None
        self._hold = 0.0  # seconds the hold in progress lasts: the longest cadence of the stale workers
        # Seconds a queued model job may stay unplaceable before it fails; None: forever.
        self.fail_unplaceable_after = fail_unplaceable_after
        self._next_prune = 0.0
        self._stop = threading.Event()
        self._waiter: Any = None
        # Its row in ``orchestrators``, beaten once per sweep: status shows the project served.
        self.orchestrator_id = f"{config.host}:{os.getpid()}:{int(time.time() * 1000)}"

    def drain(self) -> dict[str, int]:
        """Apply the pending dispatch events of this project."""
        return self.store.drain(self.config.project)

    def answer(self) -> dict[str, int]:
        """Apply the pending submissions of this project, held by this orchestrator meanwhile."""
        return self.store.process_submissions(self.config.project, self.orchestrator_id, SUBMISSION_BATCH)

    def take_waiting(self) -> bool:
        """Drain and answer what waits; whether anything was there."""
        drained, answered = self.drain(), self.answer()
        return bool(drained["applied"] + drained["failed"] + sum(answered.values()))

    def run_once_settled(self, sleep: Callable[[float], None] = time.sleep) -> Sweep:
        """One sweep as ``run_once``; when its dead-worker sweep held off (its moment was in
        doubt), wait the hold out and sweep once more, so that a one-shot sweep (``orchestrator
        --once``, from cron say) still judges its silent workers. The two sweeps' counts."""
        done = self.run_once()
        if self._held_since is None:
            return done
        sleep(max(0.0, self._held_since + self._hold - self.monotonic()))
        return done + self.run_once()

    def run_once(self, now: float | None = None) -> Sweep:
        """One sweep and one drain at ``now`` (the store's clock by default: it decides
        whether pruning is due); what they did."""
        now = self.store.clock() if now is None else now
        trusted = self.trust_moment()
        # Judged at the moment trusted: a step of the clock since must not make live leases read lapsed.
        reclaimed = self.store.reclaim_lapsed(as_of=self._last_sweep.wall) if trusted else []
        for item in reclaimed:
            log.warning("job %d: lease of %s lapsed; %s", item["id"], item["holder"], item["action"])
        unheld = self.store.reclaim_unheld()
        for item in unheld:
            log.warning("job %d: running, but its row names no holder a lapse could free; %s", item["id"],
                        item["action"])
        reclaimed += unheld
        never_due = self.store.fail_never_due()
        for job in never_due:
            log.warning("job %d failed unclaimed: %s", job.id, job.error)
        flagged = self.store.flag_stale_workers(self.known_dead) if trusted else []
        for worker in flagged:
            log.warning("worker %s (project %r, queue %r) missed its heartbeats; flagged dead; %s",
                        worker["worker_id"], worker["project"], worker["queue"],
                        "its process is gone" if worker["known_dead"] else
                        "the jobs it holds wait for their leases, which it stops them before if merely cut off")
            for item in worker["jobs"]:
                if item["action"] != "none":
                    log.warning("job %d of silent worker %s: %s", item["id"], worker["worker_id"], item["action"])
        stranded = self.store.reconcile_runs(self.config.project, RECONCILE_GRACE)
        for run_id in stranded:
            log.warning("run %d had nothing left that would move it on; walking it again", run_id)
        placed = self.place()
        drained = self.drain()
        handed_back = self.store.reclaim_submissions(self.config.project, SUBMISSION_GRACE)
        for item in handed_back:
            log.warning("submission %d: held past %gs and not applied (its orchestrator died?); pending again",
                        item["id"], SUBMISSION_GRACE)
        answered = self.answer()
        tallied = self.store.fold_tallies()
        pruned = samples_pruned = 0
        if now >= self._next_prune:
            pruned = self.store.prune(self.config.retention)
            samples_pruned = self.store.prune_host_samples(self.config.sample_detail_keep,
                                                           self.config.sample_minute_keep)
            self._next_prune = now + PRUNE_EVERY
            if pruned:
                log.info("pruned %d finished job(s) and run(s) older than %.0fs", pruned, self.config.retention)
        actions = [item["action"] for item in reclaimed + [item for worker in flagged for item in worker["jobs"]]]
        return Sweep(reclaimed=actions.count("reclaimed"), failed=actions.count("failed"),
                     cancelled=actions.count("cancelled"), unreadable_failed=len(never_due),
                     flagged_workers=len(flagged),
                     reconciled_runs=len(stranded), dispatched=drained["applied"],
                     dispatch_failures=drained["failed"], submissions_applied=answered["processed"],
                     submissions_failed=answered["failed"], submissions_reclaimed=len(handed_back),
                     unplaceable=placed.flagged, placeable=placed.cleared,
                     unplaceable_failed=placed.failed, tallied=tallied, samples_pruned=samples_pruned,
                     pruned=pruned)

    def trust_moment(self) -> bool:
        """May this sweep judge liveness now: flag the workers that missed their heartbeats
        and reclaim the jobs whose leases read lapsed? Not when its moment is in doubt
        (``liveness.trust_sweep``: every heartbeat stale at once, a late sweep, a clock that
        jumped ahead, after which every lease granted before the jump reads lapsed until its
        live holder renews): then it judges again on fresh heartbeats and renewals one
        heartbeat later (a keeper renews with every beat)."""
        wall, beats = self.store.heartbeat_ages()
        moment = liveness.SweepMoment(self.monotonic(), wall)
        trust = liveness.trust_sweep(self._last_sweep, moment, self.config.interval, beats, self._held_since)
        if not trust.flag and self._held_since is None:
            log.warning("not flagging silent workers nor reclaiming lapsed leases yet: %s; judging again after "
                        "one heartbeat", trust.why)
            self._hold = max(beat.heartbeat for beat in beats if beat.stale)
        self._last_sweep, self._held_since = moment, trust.held_since
        return trust.flag

    def known_dead(self, worker: Mapping[str, Any]) -> bool:
        """Is a silent worker's death certain, not merely its silence? So when it ran on this
        host (by its label: one label, one machine's processes) and its process is gone. A
        worker of another host may be cut off from the database and still running its jobs,
        so they wait for their leases (which it stops them before); a reused pid only makes
        that wait happen here too."""
        pid = worker["pid"]
        return (worker["host"] == self.config.host and isinstance(pid, int) and pid > 0
                and memory.process_gone(pid))

    def place(self) -> Placed:
        """Flag, clear and fail this project's queued model jobs by where they could run
        now (the module docstring gives the rules); what it did."""
        project = self.config.project
        fleet = placement(self.store, project)
        flagged = cleared = failed = 0
        budget = PLACEMENT_BATCHES
        for group in fleet.demand:
            reason = reason_now(group, fleet)
            if reason != group.unplaceable and budget > 0:
                ids, budget = self._transition(group, reason, budget)
                if reason is None:
                    cleared += len(ids)
                else:
                    flagged += len(ids)
                    log.warning("%d job(s) of queue %r needing model %r: unplaceable: %s", len(ids), group.queue,
                                group.model, unplaceable_text(reason))
            if overdue(group, reason, fleet.at, self.fail_unplaceable_after) and budget > 0:
                failed += self._fail_overdue(group, reason, fleet.at - self.fail_unplaceable_after)
                budget -= 1
        return Placed(flagged, cleared, failed)

    def _transition(self, group: Demand, reason: str | None, budget: int) -> tuple[list[int], int]:
        """Move the group's jobs from their flag to ``reason`` (None: clear it), batch by
        batch while ``budget`` batches are left; the ids moved and the budget left."""
        moved: list[int] = []
        while budget > 0:
            budget -= 1
            if reason is None:
                batch = self.store.clear_unplaceable(self.config.project, group.queue, group.model, group.vram_mb,
                                                     group.state, group.unplaceable)
            else:
                batch = self.store.flag_unplaceable(self.config.project, group.queue, group.model, group.vram_mb,
                                                    group.unplaceable, reason)
            moved += batch
            if len(batch) < PLACEMENT_BATCH:
                break
        return moved, budget

    def _fail_overdue(self, group: Demand, reason: str, before: float) -> int:
        error = (f"unplaceable for more than {self.fail_unplaceable_after:g}s: "
                 f"{unplaceable_text(reason)}; model {group.model!r}, queue {group.queue!r}")
        jobs = self.store.fail_unplaceable(self.config.project, group.queue, group.model, group.vram_mb, reason,
                                           before, error)
        for job in jobs:
            log.warning("job %d failed: %s", job.id, error)
        return len(jobs)

    def request_stop(self) -> None:
        """Stop after the step in hand. Safe to call from a signal handler."""
        self._stop.set()
        if self._waiter is not None:
            self._waiter.interrupt()

    def _settle(self) -> None:
        """After a wake-up, drain and answer until something was there or the waiter's settle
        window passed: on SQLite the file event can come before the commit that raised it is
        visible, and a drain that looked too early would leave the event for the poll."""
        waiting.settle(self.take_waiting, self._waiter.settle_window, self._stop, SETTLE_STEP,
                       SETTLE_STEP_MAX)

    def run(self, stop: threading.Event | None = None) -> None:
        """Sweep every ``config.interval`` seconds, and drain and answer whenever a dispatch
        event or a submission may have been written (at the safety poll ``config.poll`` at
        the latest), until ``request_stop()`` (or ``stop`` is set)."""
        if stop is not None:
            self._stop = stop
        self._waiter = self.store.dispatch_waiter(self.config.project)
        log.info("orchestrator sweeping every %.1fs, draining project %r as events arrive",
                 self.config.interval, self.config.project)
        next_sweep = 0.0
        woke = False
        try:
            while not self._stop.is_set():
                self._waiter.drain()  # before the work: what is written from here on wakes us
                try:
                    if time.monotonic() >= next_sweep:
                        self.store.orchestrator_beat(self.orchestrator_id, self.config.project,
                                                     self.config.host, os.getpid())
                        self.run_once()
                        next_sweep = time.monotonic() + self.config.interval
                    elif woke:
                        self._settle()
                    else:
                        self.take_waiting()
                except DatabaseBroken:
                    raise  # no retry repairs it: the operator hears of it once, as the exit
                except RowfleetError as exc:
                    log.error("sweep failed (will retry): %s", exc)
                    self._stop.wait(min(self.config.interval, 1.0))
                woke = self._waiter.wait(max(0.0, min(next_sweep - time.monotonic(), self.config.poll)))
                if woke:
                    self._stop.wait(DRAIN_SPACING)
        finally:
            self._waiter.close()
            self._say_goodbye()

    def _say_goodbye(self) -> None:
        try:
            self.store.orchestrator_stopped(self.orchestrator_id)
        except RowfleetError as exc:
            log.warning("could not record this orchestrator's stop: %s", exc)
