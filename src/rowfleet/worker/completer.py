"""Batched completion (``worker --batch N``): outcomes decided and not yet written, and the
thread that writes them when the main thread has not within a few milliseconds.

A batching worker claims up to N jobs in one transaction and, as it runs them, holds their
outcomes here instead of committing each: the next claim writes them all with it, in one
commit, so that one commit carries N finished jobs and N new claims. SQLite's limit is the
commit (its fsync), not the statements, so this is where throughput comes from.

Nothing is reported done before its commit: a held job is still ``running`` to every
reader, its lease renewed by the keeper like any job the worker holds. A crash before the
write loses only the write: the leases lapse and the jobs run again (at-least-once, as after
any crash), and each outcome is written under its own token, so a stale one is refused and
the others commit all the same.

A job that runs long must not keep the outcomes of the short ones before it waiting: the
``Completer`` thread writes whatever has been held for ``window`` seconds on a connection
of its own. It wakes when the first outcome of a batch is held and then once per window at
most, never once per job.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Sequence

from rowfleet import exitcodes
from rowfleet.claim import Claim
from rowfleet.errors import RowfleetError
from rowfleet.job import Job, Outcome

log = logging.getLogger("rowfleet.worker")

# How long an outcome may wait for the next claim's commit before the completer writes it:
# a few milliseconds costs a fast queue nothing and a slow job's neighbours little.
WINDOW = 0.01


class HeldOutcomes:
    """Outcomes decided and not yet written, in the order they were decided; shared by the
    main thread (which adds them and writes them with its claims), the completer (which
    writes those held past the window) and the keeper (which renews their jobs' leases)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: list[tuple[Job, Outcome]] = []
        self._first_at: float | None = None  # when the oldest was held (monotonic)
        self.arrived = threading.Event()  # set when a first outcome is held: the completer's cue

    def add(self, job: Job, outcome: Outcome) -> None:
        with self._lock:
            if not self._done:
                self._first_at = time.monotonic()
                self.arrived.set()
            self._done.append((job, outcome))

    def take(self) -> list[tuple[Job, Outcome]]:
        """All held outcomes, now the caller's to write."""
        with self._lock:
            done, self._done, self._first_at = self._done, [], None
            return done

    def put_back(self, done: Sequence[tuple[Job, Outcome]]) -> None:
        """Outcomes a write could not commit: held again, ahead of any held since."""
        if not done:
            return
        with self._lock:
            self._done[:0] = done
            self._first_at = time.monotonic() if self._first_at is None else self._first_at
            self.arrived.set()

    def oldest(self) -> float | None:
        """When the oldest held outcome was held (monotonic), or None: none held."""
        with self._lock:
            return self._first_at

    def jobs(self) -> list[Job]:
        with self._lock:
            return [job for job, _ in self._done]

    def holds(self, job: Job) -> bool:
        with self._lock:
            return any(held is job for held, _ in self._done)

    def __len__(self) -> int:
        with self._lock:
            return len(self._done)


class Writer:
    """Writes held outcomes on a store: with the next claim (the main thread's), or alone (the
    completer's). One place for what a write means: the leases of written jobs forgotten, a
    failed write's outcomes held again, a stale token ending the worker (exit 77) once the
    others are committed."""

    def __init__(self, held: HeldOutcomes, forget: Callable[[Sequence[Job]], None],
                 exit: Callable[[int], None]) -> None:
        self.held = held
        self.forget = forget  # the lease rule's count lets go of written jobs
        self.exit = exit

    def write(self, store: Any, *, claim_next: Claim | None = None, limit: int = 1, hand_back: Sequence[Job] = (),
              reason: str = "") -> list[Job]:
        """Write every held outcome in one transaction, with ``store.finish_batch``'s
        hand-back and next claim; the jobs it claimed."""
        done = self.held.take()
        if not done and claim_next is None and not hand_back:
            return []
        try:
            batch = store.finish_batch(done, hand_back=hand_back, reason=reason, claim_next=claim_next, limit=limit)
        except BaseException:
            self.held.put_back(done)  # still held, their leases still renewed: the next write tries again
            raise
        self.forget([job for job, _ in done])
        for lost in batch.lost:
            log.error("%s; its outcome was discarded", lost)
        if batch.lost:
            log.error("%d outcome(s) of this worker were refused as stale: exiting", len(batch.lost))
            self.exit(exitcodes.REASSIGNED)
        return batch.claimed


class Completer(threading.Thread):
    """Writes outcomes held past ``window`` seconds, on a connection of its own (opened at its
    first write), while the main thread runs a job that outlasts the window."""

    def __init__(self, writer: Writer, connect: Callable[[], Any], *, window: float = WINDOW) -> None:
        super().__init__(name="rowfleet-completer", daemon=True)
        self.writer = writer
        self.connect = connect
        self.window = window
        self._halt = threading.Event()
        self._store: Any = None

    def stop(self) -> None:
        self._halt.set()
        self.writer.held.arrived.set()
        self.join()

    def run(self) -> None:
        try:
            self._serve()
        finally:
            if self._store is not None:  # closed by the thread that opened it (SQLite insists)
                self._store.close()

    def _serve(self) -> None:
        held = self.writer.held
        while not self._halt.is_set():
            oldest = held.oldest()
            if oldest is None:
                held.arrived.wait()
                held.arrived.clear()
                continue
            wait = oldest + self.window - time.monotonic()
            if wait > 0:
                self._halt.wait(wait)
                continue
            self._write()

    def _write(self) -> None:
        try:
            if self._store is None:
                self._store = self.connect()
            self.writer.write(self._store)
        except RowfleetError as exc:  # held again: the main thread's next claim or our next turn writes them
            log.warning("could not write held outcomes yet (retrying): %s", exc)
            self._halt.wait(min(1.0, self.window * 10))
