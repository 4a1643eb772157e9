"""The orchestrator: migrates the schema, drains the workflow outbox, sweeps on a timer.

Draining applies the dispatch events that finished nodes wrote (each in its own
transaction with the walk it triggers), and runs as soon as one is written: the
orchestrator sleeps on the store's dispatch waiter (NOTIFY on Postgres, the database file
on SQLite) between sweeps. An event whose drain failed is skipped until its
``next_attempt_at`` (the store's backoff), however often the waiter wakes us. A sweep re-queues jobs whose lease lapsed (the only recovery
path for an orphaned row), flags workers whose heartbeat went stale, gives stranded runs
a fresh event, and prunes finished rows past the retention period. Every step is a
guarded write, so two orchestrators may run at once. Each sweep also beats the
orchestrator's own row, so ``status`` and ``broker`` can say whether a project is served.
``run_once(now)`` is one sweep and one drain; its ``Sweep`` says what they did.

Writes no SQL: everything goes through the store.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Any

from rowfleet import waiting
from rowfleet.config import Config
from rowfleet.errors import DatabaseBroken, RowfleetError
from rowfleet.store import Store

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


@dataclasses.dataclass(frozen=True)
class Sweep:
    """What one sweep did: jobs whose holder was gone (reclaimed, failed, or cancelled, by
    what their row said), workers flagged dead, runs walked again, dispatch events applied
    and failed, finished rows pruned."""

    reclaimed: int = 0
    failed: int = 0
    cancelled: int = 0
    flagged_workers: int = 0
    reconciled_runs: int = 0
    dispatched: int = 0
    dispatch_failures: int = 0
    pruned: int = 0

    def to_dict(self) -> dict[str, int]:
        """By field name, as ``rowfleet orchestrator --once`` prints it (after the schema version).

        >>> Sweep(reclaimed=1).to_dict()["reclaimed"], list(Sweep().to_dict())[-1]
        (1, 'pruned')
        """
        return dataclasses.asdict(self)


class Orchestrator:
    def __init__(self, store: Store, config: Config) -> None:
        self.store = store
        self.config = config
        self._next_prune = 0.0
        self._stop = threading.Event()
        self._waiter: Any = None
        # Its row in ``orchestrators``, beaten once per sweep: status shows the project served.
        self.orchestrator_id = f"{config.host}:{os.getpid()}:{int(time.time() * 1000)}"

    def drain(self) -> dict[str, int]:
        """Apply the pending dispatch events of this project."""
        return self.store.drain(self.config.project)

    def run_once(self, now: float | None = None) -> Sweep:
        """One sweep and one drain at ``now`` (the store's clock by default: it decides
        whether pruning is due); what they did."""
        now = self.store.clock() if now is None else now
        reclaimed = self.store.reclaim_lapsed()
        for item in reclaimed:
            log.warning("job %d: lease of %s lapsed; %s", item["id"], item["holder"], item["action"])
        flagged = self.store.flag_stale_workers()
        for worker in flagged:
            log.warning("worker %s (project %r, queue %r) missed its heartbeats; flagged dead",
                        worker["worker_id"], worker["project"], worker["queue"])
            for item in worker["jobs"]:
                if item["action"] != "none":
                    log.warning("job %d of silent worker %s: %s", item["id"], worker["worker_id"], item["action"])
        stranded = self.store.reconcile_runs(self.config.project, RECONCILE_GRACE)
        for run_id in stranded:
            log.warning("run %d had nothing left that would move it on; walking it again", run_id)
        drained = self.drain()
        pruned = 0
        if now >= self._next_prune:
            pruned = self.store.prune(self.config.retention)
            self._next_prune = now + PRUNE_EVERY
            if pruned:
                log.info("pruned %d finished job(s) and run(s) older than %.0fs", pruned, self.config.retention)
        actions = [item["action"] for item in reclaimed + [item for worker in flagged for item in worker["jobs"]]]
        return Sweep(reclaimed=actions.count("reclaimed"), failed=actions.count("failed"),
                     cancelled=actions.count("cancelled"), flagged_workers=len(flagged),
                     reconciled_runs=len(stranded), dispatched=drained["applied"],
                     dispatch_failures=drained["failed"], pruned=pruned)

    def request_stop(self) -> None:
        """Stop after the step in hand. Safe to call from a signal handler."""
        self._stop.set()
        if self._waiter is not None:
            self._waiter.interrupt()

    def _settle(self) -> None:
        """After a wake-up, drain until something was there or the waiter's settle window
        passed: on SQLite the file event can come before the commit that raised it is
        visible, and a drain that looked too early would leave the event for the poll."""
        waiting.settle(lambda: bool(self.drain()["applied"]), self._waiter.settle_window, self._stop, SETTLE_STEP,
                       SETTLE_STEP_MAX)

    def run(self, stop: threading.Event | None = None) -> None:
        """Sweep every ``config.interval`` seconds and drain whenever a dispatch event may
        have been written, until ``request_stop()`` (or ``stop`` is set)."""
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
                        self.drain()
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
