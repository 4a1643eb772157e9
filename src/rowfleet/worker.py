"""The claim worker: one process, one job at a time, a lease it renews, a heartbeat.

The main thread claims a job, runs its handler, and writes the outcome together with the
claim of the next job in one transaction (one commit per job while busy). A ``Keeper``
thread, with its own connection, renews the lease of the job in hand and upserts the
worker's heartbeat row; a ``Watchdog`` thread stops a job gone wrong (see
``rowfleet.watchdog``). When idle the worker sleeps on the store's ``Waiter`` and
re-checks cheaply before taking the write lock; a missed wake-up costs at most
``config.poll`` seconds.

A worker that finds its job taken (its token is stale: the job was reclaimed or handed to
another worker) exits at once with code 77 and writes nothing more.

An operator cancels a running job through its row (``rowfleet cancel JOB``); the keeper's
next renewal returns the request. The handler is then asked to stop
(``cancel_requested()``) and the job ends cancelled, whatever it returns; a handler still
running after ``cancel_grace`` has the watchdog write the cancel and end the process (80).

Operators switch workers off and on with ``worker_controls`` rows (``rowfleet.control``).
The ``Keeper`` thread reads the worker's switch once per poll, or at once when Postgres
notifies a change. Off with ``drain``: the job in hand finishes, then the worker parks
(claims nothing, its heartbeat says parked) until switched on, when it resumes in place.
Off with ``hard``: the watchdog hands the job in hand back and the process exits 79; a
worker started while off parks before its first claim.

Writes no SQL: everything goes through the store.
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
from typing import Any, Callable

from rowfleet import control, exitcodes, tasks
from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.control import Switch
from rowfleet.errors import ConfigError, DatabaseUnreachable, LeaseLost, RowfleetError, SchemaMissing, StoreUnavailable
from rowfleet.job import CANCELLED, Job, Outcome, decide_outcome, unreadable_outcome
from rowfleet.store import Store, open_store
from rowfleet.watchdog import Watchdog

log = logging.getLogger("rowfleet.worker")

# Re-checks within a waiter's settle window start 0.2 ms apart and back off to 5 ms, so a
# busy neighbour queue costs an idle worker about ten cheap reads per commit, not hundreds.
SETTLE_STEP = 0.0002
SETTLE_STEP_MAX = 0.005

# Progress beats reach the database at most this often; the watchdog hears every one.
PROGRESS_WRITE_EVERY = 1.0

_current_job: contextvars.ContextVar[Job | None] = contextvars.ContextVar("rowfleet_job", default=None)
_reporter: contextvars.ContextVar[Callable[[float | None, str | None], None] | None] = \
    contextvars.ContextVar("rowfleet_progress", default=None)
_cancel_check: contextvars.ContextVar[Callable[[], bool] | None] = \
    contextvars.ContextVar("rowfleet_cancel", default=None)


def current_job() -> Job | None:
    """The job the calling handler is running, or None outside a handler."""
    return _current_job.get()


def cancel_requested() -> bool:
    """Inside a handler: has an operator cancelled this job (``rowfleet cancel JOB``)? A
    handler that runs long may check it and return (or raise ``rowfleet.Cancel``); the job
    ends cancelled either way, its result discarded. One that does not return within
    ``cancel_grace`` seconds has its worker process ended. False outside a worker."""
    check = _cancel_check.get()
    return check is not None and check()


def progress(fraction: float | None = None, message: str | None = None) -> None:
    """Report progress from inside a handler: ``fraction`` done (0 to 1) and a message,
    shown by ``rowfleet job``. It is also the handler's heartbeat: once a job has reported
    progress, going quiet for the stall window makes the watchdog look at it. Outside a
    worker (a handler called directly) it does nothing."""
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                 or not 0 <= fraction <= 1):
        raise ConfigError(f"progress must be a fraction from 0 to 1, got {fraction!r}")
    if message is not None and not isinstance(message, str):
        raise ConfigError(f"a progress message must be a string, got {type(message).__name__}")
    report = _reporter.get()
    if report is not None:
        report(None if fraction is None else float(fraction), message)


class Worker:
    """Claims and runs jobs of one (project, queue) until stopped (or, in burst mode, idle)."""

    def __init__(self, config: Config, queue: str, *, burst: bool = False, gpu: bool = False,
                 store_factory: Callable[[Config], Store] = open_store,
                 exit: Callable[[int], None] = os._exit) -> None:
        self.config = config
        self.queue = queue
        self.burst = burst
        self.gpu = gpu  # its jobs use a GPU: the GPU health watchdog (78) watches them
        self.store_factory = store_factory
        self.exit = exit  # how a watchdog or a stale token ends the process (os._exit)
        self.pid = os.getpid()
        self.holder = f"{config.host}:{self.pid}"
        self.worker_id = f"{config.host}:{self.pid}:{int(time.time() * 1000)}"
        self.stop_event = threading.Event()
        self.store: Store | None = None
        self.waiter: Any = None
        self.keeper: Keeper | None = None
        self.watchdog: Watchdog | None = None
        self.jobs_run = 0
        self._progress_written = 0.0
        self.switch: Switch | None = None  # the off switch holding this worker; None: serve
        self.state = control.SERVING  # what the heartbeat row shows
        self.exit_code = exitcodes.OK
        self._switch_moved = threading.Event()

    # --- lifecycle ---------------------------------------------------------------------

    def request_stop(self) -> None:
        """Finish the job in hand, then exit. Safe to call from a signal handler."""
        self.stop_event.set()
        self._switch_moved.set()
        if self.waiter is not None:
            self.waiter.interrupt()

    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()

    def run(self) -> int:
        """Serve until stopped; the process exit code (0, or 79 when an operator's hard
        switch stopped a worker that had run jobs)."""
        self.store = self._open_store()
        if self.store is None:
            return exitcodes.OK
        self.waiter = self.store.waiter(self.queue)
        self.watchdog = Watchdog(self.config, self.store_factory, gpu_jobs=self.gpu, exit=self.exit)
        self.watchdog.start()
        self.keeper = Keeper(self)  # after the watchdog: a switch it reads may stop a job through it
        self.keeper.beat(self.store)  # before the first claim: a worker that dies at once is still seen
        self.keeper.start()
        log.info("worker %s serving queue %r of project %r", self.holder, self.queue, self.config.project)
        try:
            self._serve()
        finally:
            self.watchdog.stop()
            self.keeper.stop()
            self._say_goodbye()
            self.waiter.close()
            self.store.close()
        log.info("worker %s stopped after %d job(s)", self.holder, self.jobs_run)
        return self.exit_code

    def _serve(self) -> None:
        job: Job | None = None
        idle = False  # the last claim came back empty: wait for work before the next
        pause = 0.0
        switch_read = False  # read before the first claim: a worker started while off never claims
        while not self.stopping:
            try:
                if not switch_read:
                    self.switch = self.store.switch_in_force(self.config.project, self.config.host, self.queue)
                    switch_read = True
                if job is None:
                    step = control.next_step(self.switch, holding_job=False, has_run_jobs=self.jobs_run > 0)
                    if step == control.STOP:
                        self._stop_for(self.switch)
                        return
                    if step == control.PARK and self.burst:  # it would wait, not drain: done
                        log.warning("worker %s: %s; a burst worker exits", self.holder,
                                    _describe_switch(self.switch, step))
                        return
                    if step == control.PARK:
                        self._park()
                        continue
                    if idle and not self.burst:
                        self._await_work()
                        if self.stopping or self.switch is not None:
                            continue
                    job = self._claim()
                    if job is None and self.burst:
                        return
                    idle = job is None
                    continue
                job = self.run_job(job)
                idle = job is None
                pause = 0.0
            except StoreUnavailable as exc:
                # The database is busy past the timeout or gone for a moment: back off and
                # carry on. A job in hand whose outcome could not be written is reclaimed.
                # A DatabaseBroken is no StoreUnavailable: no wait repairs it, so it ends us.
                job, idle = None, False
                pause = min(max(pause * 2, 0.1), 10.0)
                log.error("database unavailable (retrying in %.1fs): %s", pause, exc)
                self.stop_event.wait(pause)

    def _open_store(self) -> Store | None:
        """Open the database, waiting (until stopped) for it and its schema to exist.

        A missing database or schema, or a server that does not answer yet, is waited for;
        a file that is not a database, a schema newer than this rowfleet, or any other
        ``DatabaseBroken`` is an error for the operator to fix: it ends the worker.
        """
        announced = False
        while not self.stopping:
            store = None
            try:
                store = self.store_factory(self.config)
                store.require_schema()
                return store
            except (SchemaMissing, DatabaseUnreachable) as exc:
                if store is not None:
                    store.close()
                if not announced:
                    log.warning("waiting for the database: %s", exc)
                    announced = True
            self.stop_event.wait(self.config.poll)
        return None

    def _say_goodbye(self) -> None:
        try:
            self.store.worker_stopped(self.worker_id)
        except RowfleetError as exc:
            log.warning("could not record this worker's stop: %s", exc)

    # --- one job -----------------------------------------------------------------------

    def _claim_request(self) -> Claim:
        """What this worker asks the store for, each time it claims or looks for due work."""
        return Claim(self.config.project, self.queue, self.holder, self.config.lease)

    def _claim(self) -> Job | None:
        return self.store.claim(self._claim_request())

    def run_job(self, job: Job) -> Job | None:
        """Run a claimed job and write its outcome; the next job when one was claimed with it."""
        self.keeper.hold(job)
        # A row that cannot be decoded fails at once, unwatched (its budget may be garbage), unrun.
        readable = job.unreadable is None
        if readable:
            self.watchdog.watch(job)
        if control.next_step(self.switch, holding_job=True, has_run_jobs=True) == control.STOP:
            # Switched off hard between the claim and now: the keeper saw no job to stop.
            self.watchdog.operator_stop(_stop_reason(self.switch))
        started = time.monotonic()
        cancel_check = _cancel_check.set(lambda: self.keeper.cancel_reason(job) is not None)
        outcome = self.execute(job) if readable else unreadable_outcome(job)
        _cancel_check.reset(cancel_check)
        cancelled = self.keeper.cancel_reason(job)
        if cancelled is not None and outcome.state != CANCELLED:  # what it returned is discarded
            outcome = Outcome(CANCELLED, error=f"{cancelled} (while running; its handler stopped in time)",
                              event="cancelled")
        self.watchdog.release()
        self.keeper.release()
        self.jobs_run += 1
        try:
            following = self._finish(job, outcome)
        except LeaseLost as exc:
            log.error("job %d: %s; its outcome (%s) was discarded; exiting", job.id, exc, outcome.state)
            self.exit(exitcodes.REASSIGNED)
            return None
        _log_outcome(job, outcome, time.monotonic() - started)
        return following

    def _finish(self, job: Job, outcome: Outcome) -> Job | None:
        """Write the outcome (claiming the next job with it unless stopping). While the
        database is unavailable, keep trying for as long as the lease would have lasted:
        past that the job is reclaimed and run again anyway."""
        give_up = time.monotonic() + self.config.lease
        pause = 0.1
        while True:
            serving = not self.stopping and self.switch is None
            claim_next = self._claim_request() if serving else None
            try:
                return self.store.finish(job, outcome, claim_next)
            except StoreUnavailable as exc:
                if time.monotonic() + pause > give_up:
                    raise
                log.error("job %d: cannot write its outcome yet (retrying in %.1fs): %s", job.id, pause, exc)
                time.sleep(pause)
                pause = min(pause * 2, 10.0)

    def execute(self, job: Job) -> Outcome:
        """Run the handler; never raises for the handler's sake."""
        token = _current_job.set(job)
        reporter = _reporter.set(lambda fraction, message: self._report(job, fraction, message))
        try:
            handler = tasks.resolve(job.task, self.config.allow_modules)  # a row names only trusted code
            result = _call(handler, job.args)
        except (Exception, SystemExit) as exc:  # the handler's failure is the job's, not ours
            return decide_outcome(job, raised=exc, backoff_base=self.config.backoff_base,
                                  backoff_max=self.config.backoff_max)
        finally:
            _reporter.reset(reporter)
            _current_job.reset(token)
        return decide_outcome(job, result=result)

    def _report(self, job: Job, fraction: float | None, message: str | None) -> None:
        """A progress beat: the watchdog hears each; the job row gets one a second at most."""
        self.watchdog.beat()
        now = time.monotonic()
        if now - self._progress_written < PROGRESS_WRITE_EVERY and fraction != 1.0:
            return
        self._progress_written = now
        try:
            self.store.progress(job, fraction, message)
        except LeaseLost as exc:
            log.error("job %d: %s; exiting", job.id, exc)
            self.exit(exitcodes.REASSIGNED)
        except RowfleetError as exc:
            log.warning("job %d: progress not recorded: %s", job.id, exc)

    # --- idling ------------------------------------------------------------------------

    def _await_work(self) -> None:
        """Return when something may be due for us, or on stop. Between wake-ups only
        reads are made: the write lock is taken by the claim that follows."""
        self.waiter.drain()
        self.store.changed()
        if self._due():
            return
        deadline = time.monotonic() + self.config.poll
        while not self.stopping and self.switch is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:  # the safety poll, in case a wake-up was lost
                if self._due():
                    return
                deadline = time.monotonic() + self.config.poll
            elif self.waiter.wait(remaining) and self._settle():
                return

    def _settle(self) -> bool:
        """After a wake-up: is there work for us now? A wake-up can arrive before the commit
        that raised it is visible, so re-check for the waiter's settle window, backing off."""
        give_up = time.monotonic() + self.waiter.settle_window
        step = SETTLE_STEP
        while not self.stopping:
            if self.store.changed():
                return self._due()
            if time.monotonic() >= give_up:
                return False
            time.sleep(step)
            step = min(step * 2, SETTLE_STEP_MAX)
        return False

    def _due(self) -> bool:
        return self.store.has_due(self._claim_request())

    # --- the operator's switch ---------------------------------------------------------

    def switch_seen(self, switch: Switch | None, store: Store) -> None:
        """The keeper read ``switch``: act on a change. Runs on the keeper's thread, writing
        with its ``store``; the main thread acts when it next looks."""
        if switch == self.switch:
            return
        self.switch = switch
        job = self.keeper.held()
        step = control.next_step(switch, holding_job=job is not None, has_run_jobs=self.jobs_run > 0)
        log.warning("worker %s: %s", self.holder, _describe_switch(switch, step))
        if step == control.STOP and job is not None:
            self.watchdog.operator_stop(_stop_reason(switch))
        elif step != control.STOP:
            self.watchdog.operator_stop(None)  # switched back on, or down to drain, before the stop
        if step == control.FINISH_THEN_PARK or (step == control.SERVE and self.state == control.DRAINING):
            self.state = control.DRAINING if step == control.FINISH_THEN_PARK else control.SERVING
            self.keeper.beat(store)
        self._switch_moved.set()
        self.waiter.interrupt()

    def _park(self) -> None:
        """Claim nothing until switched on (return, to serve) or stopped, or until a hard
        switch asks a worker that has run jobs to exit (the caller sees it next)."""
        log.warning("worker %s parked: %s", self.holder, _describe_switch(self.switch, control.PARK))
        self._publish_state(control.PARKED)
        while not self.stopping:
            step = control.next_step(self.switch, holding_job=False, has_run_jobs=self.jobs_run > 0)
            if step != control.PARK:
                break
            self._switch_moved.wait(self.config.poll)
            self._switch_moved.clear()
        if self.switch is None:
            log.info("worker %s switched on: serving again", self.holder)
            self._publish_state(control.SERVING)

    def _stop_for(self, switch: Switch) -> None:
        log.warning("worker %s: stopped by %s's hard switch (%s); exiting %d to free its memory",
                    self.holder, switch.changed_by or "an operator", switch.scope(), exitcodes.OPERATOR_STOP)
        self.exit_code = exitcodes.OPERATOR_STOP

    def _publish_state(self, state: str) -> None:
        self.state = state
        self.keeper.beat(self.store)


class Keeper(threading.Thread):
    """On its own connection: renews the lease of the job in hand, upserts the heartbeat,
    and reads the worker's switch (once per poll, and at once when the store's control
    waiter hears of a change: a NOTIFY on Postgres)."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(name=f"rowfleet-keeper-{worker.pid}", daemon=True)
        self.worker = worker
        self.config = worker.config
        self._job: Job | None = None
        self._cancel_reason: str | None = None  # an operator cancelled the job in hand: why
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._waiter: Any = None  # the control waiter, made with the keeper's connection

    def hold(self, job: Job) -> None:
        with self._lock:
            self._job = job
            self._cancel_reason = None

    def release(self) -> None:
        with self._lock:
            self._job = None

    def cancel_reason(self, job: Job) -> str | None:
        """Why an operator cancelled ``job``, once a renewal has told us; else None."""
        with self._lock:
            return self._cancel_reason if self._job is job else None

    def held(self) -> Job | None:
        with self._lock:
            return self._job

    def stop(self) -> None:
        self._halt.set()
        if self._waiter is not None:
            self._waiter.interrupt()
        self.join()

    def run(self) -> None:
        # The renewal goes before the beat, and with every beat: a process frozen past its
        # staleness (SIGSTOP, a hang) whose job was handed on learns so from the renewal and
        # exits 77, before a beat could claim that it still holds the job.
        chores = {"renew": (self.config.renew, self._renew), "switch": (self.config.poll, self._look),
                  "beat": (self.config.heartbeat, self.beat)}
        due = dict.fromkeys(chores, 0.0)  # when each chore is next due (monotonic)
        store: Store | None = None
        try:
            while not self._halt.is_set():
                store = store or self._open()
                if store is not None:
                    if time.monotonic() >= due["beat"]:
                        due["renew"] = 0.0
                    for chore, (every, act) in chores.items():
                        if time.monotonic() >= due[chore]:
                            act(store)
                            due[chore] = time.monotonic() + every
                pause = max(0.0, min(due.values()) - time.monotonic()) if store else self.config.poll
                if self._waiter is None:
                    self._halt.wait(pause)
                elif self._waiter.wait(pause):
                    due["switch"] = 0.0  # told of a change: look now
        finally:
            if self._waiter is not None:
                self._waiter.close()
            if store is not None:
                store.close()

    def _open(self) -> Store | None:
        """The keeper's own connection (and its control waiter); None (and a try again after
        a poll) while unavailable."""
        try:
            store = self.worker.store_factory(self.config)
        except RowfleetError as exc:
            log.error("keeper cannot reach the database, so leases are not renewed yet: %s", exc)
            return None
        if self._waiter is None:
            self._waiter = store.control_waiter(self.config.host)
            if self._halt.is_set():  # stopped while we connected: stop() found no waiter to wake
                self._waiter.interrupt()
        return store

    def _look(self, store: Store) -> None:
        try:
            switch = store.switch_in_force(self.config.project, self.config.host, self.worker.queue)
        except RowfleetError as exc:  # keep acting on the last switch read
            log.warning("could not read this worker's switch: %s", exc)
            return
        self.worker.switch_seen(switch, store)

    def beat(self, store: Store) -> None:
        """Upsert the worker's heartbeat row, naming the job in hand; never raises."""
        job = self.held()
        try:
            store.beat(self.worker.worker_id, self.config.project, self.config.host, self.worker.queue,
                       self.worker.pid, job.id if job else None, self.worker.state)
        except RowfleetError as exc:
            log.warning("heartbeat failed: %s", exc)

    def _renew(self, store: Store) -> None:
        job = self.held()
        if job is None:
            return
        try:
            renewal = store.renew(job, self.config.lease)
        except LeaseLost as exc:
            if self.held() is job:  # not merely finished between our read and the renew
                log.error("job %d: %s; it was given to another worker: exiting", job.id, exc)
                self.worker.exit(exitcodes.REASSIGNED)
            return
        except RowfleetError as exc:
            log.warning("lease renewal of job %d failed (will retry): %s", job.id, exc)
            return
        if renewal.cancel_requested_at is not None:
            self._cancel_seen(job, renewal.cancel_reason or "cancelled by an operator")

    def _cancel_seen(self, job: Job, reason: str) -> None:
        """An operator cancelled the job in hand: its handler is asked to stop (it may check
        ``cancel_requested()``), and the watchdog ends the process if it has not after the grace."""
        with self._lock:
            if self._job is not job or self._cancel_reason is not None:
                return  # finished meanwhile, or already seen
            self._cancel_reason = reason
        log.warning("job %d: %s; asking its handler to stop (the process is ended in %gs if it has not)",
                    job.id, reason, self.config.cancel_grace)
        self.worker.watchdog.cancel(job, reason, self.config.cancel_grace)


def _stop_reason(switch: Switch) -> str:
    return f"switched off ({switch.policy}) by {switch.changed_by or 'an operator'}"


def _describe_switch(switch: Switch | None, step: str) -> str:
    if switch is None:
        return "switched on"
    by = switch.changed_by or "an operator"
    return f"switched off ({switch.policy}) by {by} for {switch.scope()}: {step}"


def _call(handler: Callable[..., Any], args: Any) -> Any:
    if isinstance(args, dict):
        return handler(**args)
    if isinstance(args, list):
        return handler(*args)
    if args is None:
        return handler()
    return handler(args)


def _log_outcome(job: Job, outcome: Outcome, seconds: float) -> None:
    took = f"{seconds * 1000:.0f} ms"
    if outcome.state == "completed":
        log.info("job %d %s completed in %s", job.id, job.task, took)
    elif outcome.state == "queued":
        log.warning("job %d %s attempt %d/%d: %s; retrying in %.1fs", job.id, job.task, job.attempts,
                    job.max_attempts, outcome.error, outcome.delay)
    else:
        log.warning("job %d %s %s after %d attempt(s): %s", job.id, job.task, outcome.state,
                    job.attempts, outcome.error)
