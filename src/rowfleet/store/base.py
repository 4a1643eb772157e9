"""``Store``: the parts of the store, one per entity, composed over their declared core.

Each part is written once for every dialect against named queries: ``JobStore``
(``store/jobs.py``), ``RunStore`` (workflow runs and the outbox, ``store/runs.py``),
``ScheduleStore`` (``store/schedules.py``), ``FleetStore`` (workers, switches,
orchestrators, ``store/fleet.py``), ``FlowStore`` (limits and the limited claim,
``store/flow.py``), ``SubmissionStore`` (answers to input nodes as rows,
``store/submissions.py``) and ``TelemetryStore`` (host samples and job tallies,
``store/telemetry.py``), each over ``StoreCore`` (``store/core.py``: the transaction
interface a dialect implements, the schema, and the steps one part asks of another). A
dialect (``store/sqlite.py``, ``store/postgres.py``) subclasses ``Store``. Only what spans
every part lives here: pruning the rows of all of them in one sweep.

The store has two faces. Its own methods are what the engine runs (and the API's writes and
reads by id): claim, finish, beat, sweep, fire, sample. What people are shown (the command
line's lists, the panel's pages, the read models of ``rowfleet.views``) is read through
``store.reads`` (``OperatorReads``, ``store/reads.py``), so neither face hides in the other.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from rowfleet.store.core import StoreCore, Tx
from rowfleet.store.fleet import FleetStore
from rowfleet.store.flow import FlowStore
from rowfleet.store.jobs import JobStore
from rowfleet.store.runs import RunStore
from rowfleet.store.schedules import ScheduleStore
from rowfleet.store.submissions import SubmissionStore
from rowfleet.store.telemetry import TelemetryStore

if TYPE_CHECKING:
    from rowfleet.store.reads import OperatorReads

__all__ = ["Store", "StoreCore", "Tx"]


class Store(JobStore, RunStore, ScheduleStore, FleetStore, FlowStore, SubmissionStore, TelemetryStore, abc.ABC):
    """One database connection and everything rowfleet does with it. Not thread-safe:
    each thread opens its own."""

    @property
    def reads(self) -> OperatorReads:
        """The operator's reads of this store (lists, pages, counts, the fleet's snapshot rows).
        Imported when first read: a worker never reads them, and its start is the sooner."""
        from rowfleet.store.reads import OperatorReads

        return OperatorReads(self)

    def prune(self, retention: float, batch: int = 1000) -> int:
        """Delete finished jobs (and their events), ended runs, old slots, stopped workers'
        rows and handled submissions older than ``retention``, in batches; how many jobs and
        runs. Jobs are counted into the tallies first: a pruned job stays in ``/metrics``'
        counts."""
        self.fold_tallies(batch)
        total = 0
        while True:
            with self.transaction() as tx:
                tx.run("prune_events", retention=retention, limit=batch)
                deleted = tx.run("prune_jobs", retention=retention, limit=batch)
                tx.run("prune_workers", retention=retention)
                tx.run("prune_orchestrators", retention=retention)
                tx.run("prune_flow_keys", retention=retention)
                tx.run("prune_dispatch", retention=retention, limit=batch)
                tx.run("prune_submissions", retention=retention, limit=batch)
                tx.run("prune_run_nodes", retention=retention, limit=batch)
                deleted += tx.run("prune_runs", retention=retention, limit=batch)
                tx.run("prune_schedule_slots", retention=retention, limit=batch)
                tx.run("prune_switch_log", retention=retention)
            total += deleted
            if deleted < batch:
                return total
