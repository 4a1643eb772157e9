"""The in-process watchdog: a thread of each worker process that stops a job gone wrong.

It watches the job in hand for three faults and its lease, each decided by ``rowfleet.liveness``:

* 75, the wall-clock budget: the job's ``timeout`` (its own, else its task's, stamped when
  it was enqueued), else ``config.budget``;
* 76, a stall: a job that reported progress (``rowfleet.progress``) and then went quiet
  for ``stall_window``, confirmed by ``stall_samples`` readings ``stall_spacing`` apart that
  all show an idle GPU and static memory; otherwise a ``stall_suspected`` event, and it
  watches again;
* 78, GPU health (workers started with ``--gpu``): GPU idle and memory static for a whole
  window, the long ``gpu_first_window`` until the first progress beat, then ``gpu_window``;
* 81, the lease rule: a job whose lease its keeper has not renewed for the lease less a
  margin (``liveness.lease_running_out``: the box is cut off from the database, or its
  keeper is stuck) is stopped before the lease could lapse and another worker start it;

and it carries out an operator's hard switch (79, ``operator_stop``), so that stop takes
the same path: the policy hands the job back without spending an attempt; and an
operator's cancel of the running job (80) once its handler has had ``cancel_grace``
seconds to stop: the job ends cancelled.

A trip writes the policy's outcome (``liveness.trip_outcome``: re-queue or fail, a
watchdog retry spent, a forensic ``watchdog_trip`` event; for an operator's stop an
``operator_stop`` event instead, since an operator is not a fault) on the watchdog's own
connection, for no longer than the lease rule allows, then ends the process with
``os._exit(code)``: a wedged native call ignores any cooperative cancel, and only the death
of the process frees its memory and VRAM.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import Any, Callable, Sequence

from rowfleet import exitcodes, liveness
from rowfleet.config import Config
from rowfleet.errors import LeaseLost, RowfleetError
from rowfleet.job import Job
from rowfleet.liveness import Reading, Trip

log = logging.getLogger("rowfleet.watchdog")

TICK = 0.1  # seconds between checks while a job is held; a check is a few comparisons unless a reading is due
_FINISHED = -1  # a trip's record found the job finished just before: nothing to stop, no exit


def limits_of(config: Config) -> liveness.Limits:
    return liveness.Limits(stall_window=config.stall_window, stall_samples=config.stall_samples,
                           stall_spacing=config.stall_spacing, idle_gpu_percent=config.idle_gpu,
                           memory_delta=config.memory_delta_mb * 2 ** 20, gpu_first_window=config.gpu_first_window,
                           gpu_window=config.gpu_window, watchdog_retries=config.watchdog_retries)


def budget_of(job: Job, config: Config) -> float:
    """The job's wall-clock budget: its row's ``timeout`` (its own, else its task's, written
    by the enqueue), else the worker's. Never the task registry: a worker need not have
    imported a job's task to watch it."""
    return job.timeout or config.budget


class Watchdog(threading.Thread):
    """Watches the job a worker holds; see the module docstring."""

    def __init__(self, config: Config, store_factory: Callable[[Config], Any], *, gpu_jobs: bool = False,
                 exit: Callable[[int], None] = os._exit,
                 unstarted: Callable[[], Sequence[Job]] = lambda: (),
                 leased_since: Callable[[Job], float | None] = lambda job: None) -> None:
        super().__init__(name=f"rowfleet-watchdog-{os.getpid()}", daemon=True)
        self.config = config
        self.limits = limits_of(config)
        self.store_factory = store_factory
        self.gpu_jobs = gpu_jobs
        self.exit = exit
        self.unstarted = unstarted  # a prefetching worker's jobs not started: handed back with a trip
        self.leased_since = leased_since  # when the job's lease was last granted or renewed (monotonic)
        self._lock = threading.Lock()
        self._halt = threading.Event()
        # Set by whatever gives the thread something to look at: with no job held it sleeps
        # until then, rather than ticking ten times a second through an idle worker's life.
        self._nudge = threading.Event()
        self._idle = False  # the thread sleeps with no deadline (it saw no job): a new job must nudge it
        self._job: Job | None = None
        self._store: Any = None
        self._operator_stop: str | None = None  # kept across jobs: the process is going down
        self._cold_stop: str | None = None  # a second stop signal's: never withdrawn, as a switch's may be
        self._cancel: tuple[Job, str, float] | None = None  # a cancelled job, why, and its deadline
        self._ending: Job | None = None  # the job whose trip is being recorded: the process ends with it
        self._reset(None)

    # --- called by the worker's main thread ---------------------------------------------

    def watch(self, job: Job) -> None:
        # A thread already ticking looks at the new job at its next tick: a busy worker's
        # jobs wake it once per tick at most, never once per job.
        with self._lock:
            self._reset(job)
            idle, self._idle = self._idle, False
        if idle:
            self._nudge.set()

    def release(self) -> None:
        with self._lock:
            self._reset(None)
            self._cancel = None  # cleared here, not by watch(): a cancel may be seen before it

    def cancel(self, job: Job, reason: str, grace: float) -> None:
        """An operator cancelled ``job``: end the process if it is still running it after
        ``grace`` seconds (its handler was asked to stop)."""
        with self._lock:
            self._cancel = (job, reason, time.monotonic() + grace)
        self._nudge.set()

    def operator_stop(self, reason: str | None) -> None:
        """Stop the job in hand (and any job claimed after it) for an operator's hard switch;
        None withdraws a stop not yet carried out."""
        with self._lock:
            self._operator_stop = reason
        self._nudge.set()

    def cold_stop(self, reason: str) -> None:
        """Hand the job in hand (or the next one watched) back as an operator stop, no attempt
        spent, then end the process with exit 0: a second stop signal's answer. Called from a
        signal handler, so it takes no lock and rings nothing (the handler runs in the main
        thread, which may hold either): a thread watching a job looks at its next tick, and
        one watching none has no job to hand back."""
        self._cold_stop = reason

    def beat(self) -> None:
        """The job reported progress."""
        now = time.monotonic()
        with self._lock:
            self._last_beat = now
            if self._first_beat is None:
                self._first_beat = now

    def stop(self) -> None:
        self._halt.set()
        self._nudge.set()
        self.join()

    def _reset(self, job: Job | None) -> None:
        self._job = job
        self._since = time.monotonic()
        self._budget = budget_of(job, self.config) if job is not None else None
        self._first_beat: float | None = None
        self._last_beat: float | None = None
        self._readings: collections.deque[Reading] = collections.deque()
        self._next_reading = self._since

    def held(self) -> Job | None:
        with self._lock:
            return self._job

    def ending(self, job: Job) -> bool:
        """Whether a trip of ``job`` is being recorded: its lease is then lost by design (the
        record re-queues or fails it), and the process ends with the trip's code."""
        with self._lock:
            return self._ending is job

    # --- the thread ---------------------------------------------------------------------

    def run(self) -> None:
        try:
            while True:
                # Idleness is decided under the lock that watch() takes, and the nudge cleared
                # after the wait: a job handed over in between has set it, so the wait returns.
                with self._lock:
                    self._idle = self._job is None
                    idle = self._idle
                self._nudge.wait(None if idle else TICK)
                self._nudge.clear()
                if self._halt.is_set():
                    break
                trip = self._check()
                if trip is not None:
                    self._trip(*trip)
        finally:
            if self._store is not None:
                self._store.close()

    def _check(self) -> tuple[Job, Trip] | None:
        with self._lock:
            job, started, budget = self._job, self._since, self._budget
            first_beat, last_beat = self._first_beat, self._last_beat
            operator_stop, cold_stop, cancel = self._operator_stop, self._cold_stop, self._cancel
        if job is None:
            return None
        now = time.monotonic()
        leased_since = self.leased_since(job)
        if leased_since is not None and liveness.lease_running_out(leased_since, now, self.config.lease,
                                                                   self.config.renew):
            return job, Trip(exitcodes.CUT_OFF, "lease", f"its lease was last renewed {now - leased_since:.1f}s ago "
                             f"(lease {self.config.lease:g}s), so it was stopped before the lease could lapse")
        if cold_stop is not None:
            return job, Trip(exitcodes.OPERATOR_STOP, "operator", cold_stop, exit_code=exitcodes.OK)
        if operator_stop is not None:
            return job, Trip(exitcodes.OPERATOR_STOP, "operator", operator_stop)
        if cancel is not None and cancel[0] is job and now >= cancel[2]:
            return job, Trip(exitcodes.CANCELLED, "cancel", f"{cancel[1]}; its handler did not stop within "
                             f"{self.config.cancel_grace:g}s, so its worker process was ended")
        if liveness.budget_exceeded(started, now, budget):
            return job, Trip(exitcodes.BUDGET, "budget", f"ran {now - started:.1f}s of its {budget:g}s budget")
        if liveness.stall_suspected(first_beat, last_beat, now, self.limits):
            return self._confirm_stall(job, last_beat, now - last_beat)
        if self.gpu_jobs:
            return self._check_gpu(job, first_beat, now)
        return None

    def _confirm_stall(self, job: Job, last_beat: float, quiet: float) -> tuple[Job, Trip] | None:
        readings = []
        for index in range(self.limits.stall_samples):
            if index and self._halt.wait(self.limits.stall_spacing):
                return None
            readings.append(self._reading())
        with self._lock:
            if self._job is not job or self._last_beat != last_beat:
                return None  # it finished, or beat, while we looked
            if not liveness.looks_hung(readings, self.limits):
                self._last_beat = time.monotonic()  # alive after all: watch a whole window again
                suspected = True
            else:
                suspected = False
        reason = f"no progress beat for {quiet:.1f}s (stall window {self.limits.stall_window:g}s)"
        if suspected:
            log.warning("job %d: %s, but the GPU or memory is busy; watching on", job.id, reason)
            self._record(job, "stall_suspected", reason=reason, readings=[r.to_dict() for r in readings])
            return None
        return job, Trip(exitcodes.STALLED, "stall", f"{reason}; idle GPU and static memory confirmed",
                         tuple(readings))

    def _check_gpu(self, job: Job, first_beat: float | None, now: float) -> tuple[Job, Trip] | None:
        window = liveness.gpu_window(first_beat, self.limits)
        with self._lock:
            due = now >= self._next_reading
        if not due:
            return None
        reading = self._reading()
        with self._lock:
            if self._job is not job:
                return None
            self._readings.append(reading)
            self._next_reading = now + self.config.gpu_sample
            longest = max(self.limits.gpu_first_window, self.limits.gpu_window)
            while len(self._readings) > 2 and self._readings[1].at < now - longest:
                self._readings.popleft()  # keep one reading from before the longest window
            readings = list(self._readings)
        if not liveness.gpu_idle_for_window(readings, now, window, self.limits):
            return None
        return job, Trip(exitcodes.GPU_IDLE, "gpu", f"GPU idle and memory static for {window:g}s",
                         tuple(r for r in readings if r.at >= now - window))

    def _reading(self) -> Reading:
        # Imported here: only a GPU job's watchdog reads them, and a plain worker starts sooner.
        from rowfleet.telemetry import gpu, memory

        sample = gpu.sample_gpus(command=self.config.nvidia_smi, timeout=max(5.0, self.limits.stall_spacing))
        used = memory.memory_of(os.getpid())
        return Reading(time.monotonic(), gpu.max_utilization(sample.readings) if sample.readings else None,
                       gpu.total_memory_used_mib(sample.readings) if sample.readings else None,
                       used.bytes if used.source != memory.GONE else None)

    # --- tripping -----------------------------------------------------------------------

    def _trip(self, job: Job, trip: Trip) -> None:
        """Record the trip's outcome, then end the process with its code. The record is given
        only until the lease rule's last moment (``liveness.lease_exit_by``): on a path to the
        database that has died, the process must be gone before its lease could lapse, and
        the lapse recovers the job instead."""
        tripped = (f"watchdog {trip.watchdog} trips (exit {trip.exits_with}, {exitcodes.meaning(trip.code)}): "
                   f"{trip.reason}")
        with self._lock:
            self._ending = job  # the keeper's renewal that finds the record written is no reassignment
        recorded: list[int] = []
        recorder = threading.Thread(target=lambda: recorded.append(self._record_trip(job, trip, tripped)),
                                    name=f"rowfleet-trip-{os.getpid()}", daemon=True)
        recorder.start()
        leased_since = self.leased_since(job)
        if leased_since is None:
            recorder.join()
        else:
            recorder.join(max(0.0, liveness.lease_exit_by(leased_since, self.config.lease, self.config.renew)
                              - time.monotonic()))
        if not recorded:
            log.error("job %d: %s; could not record it before its lease ran out, so the lease will lapse",
                      job.id, tripped)
            self.exit(trip.exits_with)
        elif recorded[0] != _FINISHED:
            self.exit(recorded[0])

    def _record_trip(self, job: Job, trip: Trip, tripped: str) -> int:
        """Write the trip's outcome (``liveness.trip_outcome``); the code to exit with, or
        ``_FINISHED`` when the job finished just before (nothing to stop)."""
        outcome, spent, refund = liveness.trip_outcome(job, trip, self.limits, backoff_base=self.config.backoff_base,
                                                      backoff_max=self.config.backoff_max)
        try:
            written = self._connection().watchdog_trip(job, trip.detail(job.attempts, job.watchdog_retries + spent),
                                                       outcome, spent, refund, hand_back=self.unstarted())
            # What the store wrote, which may differ from the policy's outcome: a node of a
            # run that has ended is cancelled rather than re-queued.
            log.error("job %d: %s; the job is %s", job.id, tripped, written)
        except LeaseLost as exc:
            if self.held() is not job:
                return _FINISHED
            log.error("job %d: %s; exiting without writing", job.id, exc)
            return exitcodes.REASSIGNED
        except RowfleetError as exc:  # the lease lapses and the job is reclaimed: still recovered
            log.error("job %d: %s; could not record it (%s), so its lease will lapse", job.id, tripped, exc)
        return trip.exits_with

    def _record(self, job: Job, kind: str, **detail: Any) -> None:
        try:
            self._connection().record_event(job.id, kind, **detail)
        except RowfleetError as exc:
            log.warning("job %d: could not record %s: %s", job.id, kind, exc)

    def _connection(self) -> Any:
        if self._store is None:
            self._store = self.store_factory(self.config)
        return self._store
