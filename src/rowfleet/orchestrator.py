"""The orchestrator: migrates the schema, then sweeps on a timer.

A tick re-queues jobs whose lease lapsed (the only recovery path for an orphaned row),
flags workers whose heartbeat went stale, and prunes finished jobs past the retention
period. Every step is a guarded write, so two orchestrators may run at once.

Writes no SQL: everything goes through the store.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from rowfleet.config import Config
from rowfleet.errors import RowfleetError
from rowfleet.store import Store

log = logging.getLogger("rowfleet.orchestrator")

PRUNE_EVERY = 60.0  # seconds between prune passes; pruning is not urgent


class Orchestrator:
    def __init__(self, store: Store, config: Config) -> None:
        self.store = store
        self.config = config
        self._next_prune = 0.0

    def run_once(self) -> dict[str, Any]:
        """One sweep; a summary of what it did."""
        reclaimed = self.store.reclaim_lapsed()
        for item in reclaimed:
            log.warning("job %d: lease of %s lapsed; %s", item["id"], item["holder"], item["action"])
        flagged = self.store.flag_stale_workers(self.config.stale_after)
        for worker in flagged:
            log.warning("worker %s (project %r, queue %r) missed its heartbeats; flagged",
                        worker["worker_id"], worker["project"], worker["queue"])
        pruned = 0
        now = self.store.clock()
        if now >= self._next_prune:
            pruned = self.store.prune(self.config.retention)
            self._next_prune = now + PRUNE_EVERY
            if pruned:
                log.info("pruned %d finished job(s) older than %.0fs", pruned, self.config.retention)
        return {"reclaimed": len([i for i in reclaimed if i["action"] == "reclaimed"]),
                "failed": len([i for i in reclaimed if i["action"] == "failed"]),
                "flagged_workers": len(flagged), "pruned": pruned}

    def run(self, stop: threading.Event) -> None:
        """Sweep every ``config.interval`` seconds until ``stop`` is set."""
        log.info("orchestrator sweeping every %.1fs", self.config.interval)
        while not stop.is_set():
            try:
                self.run_once()
            except RowfleetError as exc:
                log.error("sweep failed (will retry): %s", exc)
            stop.wait(self.config.interval)
