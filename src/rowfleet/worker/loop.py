"""The claim worker: one process, one job at a time, a lease it renews, a heartbeat.

The main thread claims a job, runs its handler, and writes the outcome together with the
claim of the next job in one transaction (one commit per job while busy). It is a loop of
``Worker.step()``: each performs the one action that ``rowfleet.worker.decide.next_action``
decides from the loop's state (claim, run, wait for work, park, leave). A ``Keeper``
thread (``rowfleet.worker.keeper``), with its own connection, renews the lease of the job in
hand and upserts the worker's heartbeat row; a ``Watchdog`` thread stops a job gone wrong
(see ``rowfleet.worker.watchdog``). When idle the worker sleeps on the store's ``Waiter`` and
re-checks cheaply before taking the write lock; a missed wake-up costs at most
``config.poll`` seconds. Before all that it waits for the database and its schema
(``rowfleet.store.waiting``).

A worker that finds its job taken (its token is stale: the job was reclaimed or handed to
another worker) exits at once with code 77 and writes nothing more.

An operator cancels a running job through its row (``rowfleet cancel JOB``); the keeper's
next renewal returns the request. The handler is then asked to stop
(``cancel_requested()``) and the job ends cancelled, whatever it returns; a handler still
running after ``cancel_grace`` has the watchdog write the cancel and end the process (80).

Operators switch workers off and on with ``worker_controls`` rows (``rowfleet.control``).
The ``Keeper`` thread reads the worker's switch once per poll, or at once when Postgres
notifies a change, into the ``SwitchCell`` the main thread reads too. Off with ``drain``: the job in hand finishes, then the worker parks
(claims nothing, its heartbeat says parked) until switched on, when it resumes in place.
Off with ``hard``: the watchdog hands the job in hand back and the process exits 79; a
worker started while off parks before its first claim.

A GPU worker (``--gpu`` with models to load) hands its claims to a ``GpuBox``
(``rowfleet.gpu.gpu_worker``): each claim carries its routing inputs, a model job runs only once
the GPU's lease is its model's (else it is handed back, unrun and unspent), its model is
loaded before the handler runs, and an idle worker unloads its model after ``idle_unload``.

Writes no SQL: everything goes through the store.
"""

from __future__ import annotations

import logging
import os
import random
import select
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from rowfleet import control, exitcodes, models, names, tasks
from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.errors import ConfigError, LeaseLost, RowfleetError, StoreUnavailable
from rowfleet.gpu.sidecar import Sidecar, SidecarSpec
from rowfleet.job import CANCELLED, COMPLETED, Job, Outcome, decide_outcome, unreadable_outcome
from rowfleet.store import Store, open_store
from rowfleet.store import waiting
from rowfleet.store.wake import SelfPipe, StopEvent
from rowfleet.worker import decide, handler, rejoin
from rowfleet.worker.completer import Completer, HeldOutcomes, Writer
from rowfleet.worker.keeper import Identity, Keeper, Leases, Prefetched, SwitchCell, read_switch
from rowfleet.worker.watchdog import Watchdog

if TYPE_CHECKING:
    from rowfleet.gpu.gpu_worker import GpuBox, GpuSettings

log = logging.getLogger("rowfleet.worker")

# Re-checks within a waiter's settle window start 0.2 ms apart and back off to 5 ms, so a
# busy neighbour queue costs an idle worker about ten cheap reads per commit, not hundreds.
SETTLE_STEP = 0.0002
SETTLE_STEP_MAX = 0.005

# Progress beats reach the database at most this often; the watchdog hears every one.
PROGRESS_WRITE_EVERY = 1.0

_Taken = TypeVar("_Taken")  # what a claiming statement returns: a job, None, or a list of jobs


class Worker:
    """Claims and runs jobs of a project's queue, or of several in order (the first with a
    due job wins), until stopped (or, in burst mode, idle)."""

    def __init__(self, config: Config, queue: str | Sequence[str], *, burst: bool = False, gpu: bool = False,
                 gpu_settings: GpuSettings | None = None, sidecar: SidecarSpec | None = None,
                 prefetch: int = 1, batch: int = 1, store_factory: Callable[[Config], Store] = open_store,
                 exit: Callable[[int], None] = os._exit) -> None:
        check_prefetch(max(prefetch, batch), routed=gpu_settings is not None, sidecar=sidecar is not None)
        self.config = config
        self.batch = batch  # outcomes written in one commit at most (worker --batch): claims as many at once
        self.prefetch = max(prefetch, batch)
        self.prefetched = Prefetched()  # claimed with the job in hand, not started yet (prefetch > 1)
        self.leases = Leases()  # when each held job's lease was granted or renewed: the lease rule's count
        self.held = HeldOutcomes()  # run, their outcomes not written yet (batch > 1)
        self.completer: Completer | None = None
        self.writer = Writer(self.held, self.leases.forget, self._exit)
        self.queues = (queue,) if isinstance(queue, str) else tuple(dict.fromkeys(queue))
        self.queue = self.queues[0]
        self.burst = burst
        self.gpu = gpu  # its jobs use a GPU: the GPU health watchdog (78) watches them
        self.store_factory = store_factory
        self._hard_exit = exit
        self._exit_lock = threading.Lock()
        self.exit = self._exit  # how a watchdog or a stale token ends the process (os._exit)
        self.identity = Identity.of(config, self.queues, os.getpid(), time.time(),
                                    gpu_index=gpu_settings.gpu_index if gpu_settings is not None else 0 if gpu else None,
                                    **rejoin.identity_readings())
        self.holder = self.identity.holder
        # A GPU worker's placement: None for a worker that loads no models (it claims as before).
        self.gpu_box = None if gpu_settings is None else _gpu_box(config, gpu_settings, self.identity.worker_id,
                                                                  self.holder, self.queues)
        # The inference server it owns (--sidecar): started before a job, stopped when idle,
        # on a hard switch and when the worker ends; its GPU memory read like the models'.
        self.sidecar = None if sidecar is None else Sidecar(
            sidecar, memory_used_mb=self.gpu_box.memory.used_mb if self.gpu_box is not None else lambda: None,
            gpu_processes=self.gpu_box.memory.processes if self.gpu_box is not None else lambda: ())
        self.stop_event = StopEvent()  # request_stop may run in a signal handler: no lock taken
        self.store: Store | None = None
        self.waiter: Any = None
        self.keeper: Keeper | None = None
        self.watchdog: Watchdog | None = None
        self.jobs_run = 0
        self._progress_written = 0.0
        self.switch = SwitchCell()  # the off switch holding this worker (None: serve); the keeper's too
        self.exit_code = exitcodes.OK
        self._switch_moved = SelfPipe()  # rung by the keeper or a stop; waited on by a parked worker
        # The claim loop's own part of its state (see ``_moment``).
        self._job: Job | None = None  # the job in hand
        self._switch_read = False     # read before the first claim: a worker started while off never claims
        self._idle = False            # the last claim came back empty: wait for work before the next
        self._drained = False         # a claim of its own came back empty
        self._woken = False           # the claim to come follows a wake-up: a race it may lose
        self._stagger = 0.0           # the longest wait before a look after a wake-up (decide.next_stagger)
        self._parked = False          # its heartbeat says parked
        self._served = False          # it has served: its start log said so (else it started parked)
        self._pause = 0.0             # the back-off while the database is unavailable
        self._limited: frozenset[str] = frozenset()  # its queues that limit rows hold (rowfleet.flow)
        self._limits_read_at: float | None = None    # when those were read (monotonic), each poll at most

    # --- lifecycle ---------------------------------------------------------------------

    def request_stop(self, what: str = "a stop signal") -> None:
        """Finish the job in hand, then exit; asked again while stopping, a cold stop. Safe
        to call from a signal handler."""
        if self.stop_event.is_set():
            self.request_cold_stop(f"{what} again while stopping")
            return
        self.stop_event.set()
        self._wake()

    def request_cold_stop(self, why: str = "a cold stop signal") -> None:
        """Hand the job in hand back at once (an operator stop: no attempt spent, an event
        saying ``why``) and exit 0. Safe to call from a signal handler."""
        if self.watchdog is not None:
            self.watchdog.cold_stop(f"its worker was told to stop at once ({why}); the job is handed back unfinished")
        self.stop_event.set()
        self._wake()

    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()

    def run(self) -> int:
        """Serve until stopped; the process exit code (0, or 79 when an operator's hard
        switch stopped a worker that had run jobs)."""
        self.store = waiting.open_when_ready(lambda: self.store_factory(self.config), self.stop_event,
                                             self.config.poll, log, ready=lambda store: store.require_schema())
        if self.store is None:
            return exitcodes.OK
        self.waiter = self.store.waiter(self.queues)
        self.watchdog = Watchdog(self.config, self.store_factory, gpu_jobs=self.gpu, exit=self.exit,
                                 unstarted=self.prefetched.snapshot, leased_since=self.leases.since)
        self.watchdog.start()
        # After the watchdog: a switch the keeper reads may stop a job through it.
        if self.gpu_box is not None:
            models.install(self.gpu_box.resident)  # what rowfleet.model() in a handler gets
        self.keeper = Keeper(self.identity, self.switch, lambda: self.store_factory(self.config), self.watchdog,
                             exit=self.exit, wake=self._wake, gpu=self.gpu_box,
                             sidecar=self.sidecar.status if self.sidecar is not None else lambda: None,
                             prefetched=self.prefetched, leases=self.leases, outcomes=self.held)
        rejoin.hand_back_gone(self.store, self.identity)  # before the first beat: see rowfleet.worker.rejoin
        self.keeper.beat(self.store)  # before the first claim: a worker that dies at once is still seen
        self.keeper.start()
        if self.batch > 1:
            self.completer = Completer(self.writer, lambda: self.store_factory(self.config))
            self.completer.start()
        try:
            while self.step():
                pass
        finally:
            if self.completer is not None:
                self.completer.stop()
            self._hand_back_prefetched("its worker stopped before it started")
            self.watchdog.stop()
            self.keeper.stop()
            if self.gpu_box is not None:
                self.gpu_box.close(self.store)
            if self._stop_sidecar("the worker stopped"):
                self.keeper.beat(self.store)
            self._say_goodbye()
            self.waiter.close()
            self.store.close()
        log.info("worker %s stopped after %d job(s)", self.holder, self.jobs_run)
        return self.exit_code

    def step(self) -> bool:
        """Perform the one action ``decide.next_action`` names for the loop's state now;
        False once the worker is done serving."""
        moment = self._moment()
        action = decide.next_action(moment)
        try:
            return self._perform(action, moment)
        except StoreUnavailable as exc:
            # The database is busy past the timeout or gone for a moment: back off and
            # carry on. A job in hand whose outcome could not be written is reclaimed.
            # A DatabaseBroken is no StoreUnavailable: no wait repairs it, so it ends us.
            self._job, self._idle = None, False
            self._pause = min(max(self._pause * 2, 0.1), 10.0)
            log.error("database unavailable (retrying in %.1fs): %s", self._pause, exc)
            self.stop_event.wait(self._pause)
            return True

    def _moment(self) -> decide.Moment:
        return decide.Moment(stopping=self.stopping, switch_read=self._switch_read, switch=self.switch.get(),
                              holding_job=self._job is not None, has_run_jobs=self.jobs_run > 0, burst=self.burst,
                              idle=self._idle, drained=self._drained, parked=self._parked)

    def _perform(self, action: decide.Action, moment: decide.Moment) -> bool:
        """Do ``action``, decided at ``moment``; False when it ends the loop."""
        actions: dict[decide.Action, Callable[[decide.Moment], bool]] = {
            decide.Action.DONE: lambda moment: False, decide.Action.DONE_SWITCHED_OFF: self._leave_switched_off,
            decide.Action.EXIT_HARD: self._stop_for, decide.Action.READ_SWITCH: self._read_switch,
            decide.Action.RUN: self._run_in_hand, decide.Action.CLAIM: self._claim_one, decide.Action.AWAIT: self._await,
            decide.Action.PARK: self._park, decide.Action.WAIT_SWITCH: self._wait_switch, decide.Action.RESUME: self._resume}
        return actions[action](moment)

    def _read_switch(self, moment: decide.Moment) -> bool:
        switch, off = read_switch(self.store, self.identity, None)
        self.switch.set(switch, off)
        self._switch_read = True
        if switch is None:  # held, it says so as it parks (or as a burst worker leaves), not that it serves
            self._say_serving()
        return True

    def _say_serving(self, how: str = "") -> None:
        """The log line of a worker that starts serving (``how``: why now), with the queues it
        serves and those switched off."""
        serving, off = self._serving(), [queue for queue in self.queues if queue in self.switch.off()]
        log.info("worker %s %sserving %s %s of project %r%s", self.holder, how,
                 "queues" if len(serving) > 1 else "queue", ", ".join(map(repr, serving)), self.config.project,
                 f" ({', '.join(map(repr, off))} switched off)" if off else "")
        self._served = True

    def _run_in_hand(self, moment: decide.Moment) -> bool:
        self._job = self.run_job(self._job)
        self._idle, self._pause = self._job is None, 0.0
        return True

    def _claim_one(self, moment: decide.Moment) -> bool:
        self._job = self._claim()
        self._idle = self._drained = self._job is None
        if self._woken:
            self._woken = False
            self._stagger = decide.next_stagger(self._stagger, won=self._job is not None)
        return True

    def _await(self, moment: decide.Moment) -> bool:
        due = self._await_work()
        # A stop or a switch that cut the wait short leaves the worker idle: it waits again once serving.
        self._idle = not due or self.stopping or self.switch.get() is not None
        return True

    def _leave_switched_off(self, moment: decide.Moment) -> bool:
        log.warning("worker %s: %s; a burst worker exits", self.holder,
                    decide.describe_switch(moment.switch, control.PARK))
        return False

    def _say_goodbye(self) -> None:
        try:
            self.store.worker_stopped(self.identity.worker_id)
        except RowfleetError as exc:
            log.warning("could not record this worker's stop: %s", exc)

    # --- one job -----------------------------------------------------------------------

    def _claim_request(self, queue: str) -> Claim:
        """What this worker asks the store for, each time it claims or looks for due work
        in ``queue``."""
        # A --gpu worker without models holds its one GPU: jobs that ask for one GPU are its.
        routing = self.gpu_box.claim_fields(self.store) if self.gpu_box is not None else \
            {"gpus_free": 1} if self.gpu else {}
        limited = queue in self._limited_queues()
        return Claim(self.config.project, queue, self.holder, self.config.lease, limited=limited, **routing)

    def _limited_queues(self) -> frozenset[str]:
        """Its queues that limit rows hold, read again once a poll has passed: a limit an
        operator sets reaches a running worker within a poll, with no restart."""
        now = time.monotonic()
        if self._limits_read_at is None or now - self._limits_read_at >= self.config.poll:
            self._limits_read_at = now
            try:
                self._limited = self.store.limited_queues(self.config.project)
            except StoreUnavailable as exc:  # the last read stands until the next poll's
                log.warning("could not read which queues are limited (kept: %s): %s",
                            ", ".join(sorted(self._limited)) or "none", exc)
        return self._limited

    def _serving(self) -> list[str]:
        """Its queues in order, less those switched off (a worker of several serves the rest)."""
        off = self.switch.off()
        return [queue for queue in self.queues if queue not in off]

    def _claim(self) -> Job | None:
        """The first due job of its queues, in order: with prefetch, the next one claimed
        before, else the first of a batch, the rest held to run next."""
        if self.prefetch > 1:
            return self._next_prefetched() or self._claim_batch()
        for queue in self._serving():
            job = self._leasing(lambda: self.store.claim(self._claim_request(queue)))
            if job is not None:
                return job
        return None

    def _claim_batch(self) -> Job | None:
        for queue in self._serving():
            taken = self._leasing(lambda: self._take_batch(self._claim_request(queue)))
            if taken:
                return self._hold_batch(taken)
        return None

    def _take_batch(self, claim: Claim) -> list[Job]:
        """A batch claim; a batching worker's carries the outcomes it holds, in one commit."""
        if self.batch > 1:
            return self.writer.write(self.store, claim_next=claim, limit=self.prefetch)
        return self.store.claim_batch(claim, self.prefetch)

    def _leasing(self, claim: Callable[[], _Taken]) -> _Taken:
        """Run a statement that may claim jobs, noting when it was sent: the leases it grants
        run from no earlier, and the lease rule counts from there (``Leases``)."""
        sent = time.monotonic()
        taken = claim()
        self.leases.granted(taken, sent)
        return taken

    def _hold_batch(self, taken: list[Job]) -> Job | None:
        """The first of a batch just claimed, to run now; the rest held for later."""
        if not taken:
            return None
        self.prefetched.put(taken[1:])
        return taken[0]

    def _next_prefetched(self) -> Job | None:
        """The next job claimed before, whose queue still serves; one of a queue switched off
        meanwhile is handed back (a switch of the whole worker hands all back at the finish)."""
        while (job := self.prefetched.take()) is not None:
            if job.queue not in self.switch.off():
                return job
            self.store.hand_back(job, "its queue was switched off before it started")
        return None

    def _hand_back_prefetched(self, reason: str) -> None:
        """Give back every job claimed and not started, and write the outcomes held (a stop,
        best effort: what cannot be written lapses and is reclaimed, as after a crash)."""
        if self.batch > 1:
            try:
                self.writer.write(self.store, hand_back=self.prefetched.snapshot(), reason=reason)
            except RowfleetError as exc:
                log.warning("held outcomes and prefetched jobs not written (%s); their leases will lapse", exc)
            self.leases.forget(self.prefetched.snapshot())
            self.prefetched.discard(self.prefetched.snapshot())
            return
        for job in self.prefetched.snapshot():
            try:
                self.store.hand_back(job, reason)
            except RowfleetError as exc:
                log.warning("prefetched job %d: not handed back (%s); its lease will lapse", job.id, exc)
        self.leases.forget(self.prefetched.snapshot())
        self.prefetched.discard(self.prefetched.snapshot())

    def run_job(self, job: Job) -> Job | None:
        """Run a claimed job and write its outcome; the next job when one was claimed with it.
        A model job whose GPU is another model's is handed back unrun (None: claim again)."""
        if self.gpu_box is not None and not self.gpu_box.place(self.store, job):
            return None
        self.keeper.hold(job)
        # A row that cannot be decoded fails at once, unwatched (its budget may be garbage), unrun.
        readable = job.unreadable is None
        if readable:
            self.watchdog.watch(job)
        switch = self.switch.get()
        if control.next_step(switch, holding_job=True, has_run_jobs=True) == control.STOP:
            # Switched off hard between the claim and now: the keeper saw no job to stop.
            self.watchdog.operator_stop(decide.stop_reason(switch))
        started = time.monotonic()
        with handler.cancel_checked(lambda: self.keeper.cancel_reason(job) is not None):
            outcome = self.execute(job) if readable else unreadable_outcome(job)
        cancelled = self.keeper.cancel_reason(job)
        if cancelled is not None and outcome.state != CANCELLED:  # what it returned is discarded
            outcome = Outcome(CANCELLED, error=f"{cancelled} (while running; its handler stopped in time)",
                              event="cancelled")
        self.watchdog.release()
        self.keeper.release()
        self.leases.forget([job])
        ran = time.monotonic() - started
        self.jobs_run += 1
        try:
            following = self._finish(job, outcome)
        except LeaseLost as exc:
            log.error("job %d: %s; its outcome (%s) was discarded; exiting", job.id, exc, outcome.state)
            self.exit(exitcodes.REASSIGNED)
            return None
        if self.gpu_box is not None:  # after the finish, which the job's figures must not hold up
            self.gpu_box.job_done(self.store, job, ran, outcome.state == COMPLETED)
        _log_outcome(job, outcome, ran, self.stopping)
        return following

    def _finish(self, job: Job, outcome: Outcome) -> Job | None:
        """Write the outcome (claiming the next job with it unless stopping). While the
        database is unavailable, keep trying for as long as the lease would have lasted:
        past that the job is reclaimed and run again anyway."""
        give_up = time.monotonic() + self.config.lease
        pause = 0.1
        if self.batch > 1:
            self.held.add(job, outcome)  # written with the next claim, or by the completer
        while True:
            serving = self._serving() if not self.stopping and self.switch.get() is None else []
            try:  # the next claim's request may read the database too: its failure is retried as the finish's
                claim_next = self._claim_request(serving[0]) if serving else None  # the others: the next claim
                if self.batch > 1:
                    return self._finish_batched(claim_next)
                if self.prefetch > 1:
                    return self._finish_prefetched(job, outcome, claim_next)
                return self._leasing(lambda: self.store.finish(job, outcome, claim_next))
            except StoreUnavailable as exc:
                if time.monotonic() + pause > give_up:
                    raise
                log.error("job %d: cannot write its outcome yet (retrying in %.1fs): %s", job.id, pause, exc)
                time.sleep(pause)
                pause = min(pause * 2, 10.0)

    def _finish_prefetched(self, job: Job, outcome: Outcome, claim_next: Claim | None) -> Job | None:
        """A prefetching worker's finish: the next job held runs next (no claim); none held,
        the finish claims the next batch; stopping or switched off, it hands back what it
        holds unstarted, in the same transaction."""
        if claim_next is None:
            unstarted = self.prefetched.snapshot()
            reason = "its worker is stopping" if self.stopping else "its worker was switched off"
            self.store.finish_prefetched(job, outcome, hand_back=unstarted, reason=f"{reason} before it started")
            self.prefetched.discard(unstarted)
            return None
        if len(self.prefetched):
            self.store.finish(job, outcome)
            return self._next_prefetched()
        return self._hold_batch(self._leasing(lambda: self.store.finish_prefetched(
            job, outcome, claim_next=claim_next, limit=self.prefetch)))

    def _finish_batched(self, claim_next: Claim | None) -> Job | None:
        """A batching worker's finish, its outcome held: the next job held runs next (the
        outcomes written first once a batch's worth is held); none held, every outcome is
        written with the next batch's claim; stopping or switched off, with the unstarted
        jobs handed back, in one transaction."""
        if claim_next is None:
            unstarted = self.prefetched.snapshot()
            reason = "its worker is stopping" if self.stopping else "its worker was switched off"
            self.writer.write(self.store, hand_back=unstarted, reason=f"{reason} before it started")
            self.leases.forget(unstarted)
            self.prefetched.discard(unstarted)
            return None
        if len(self.prefetched):
            if len(self.held) >= self.batch:
                self.writer.write(self.store)
            return self._next_prefetched()
        return self._hold_batch(self._leasing(lambda: self.writer.write(self.store, claim_next=claim_next,
                                                                         limit=self.prefetch)))

    def execute(self, job: Job) -> Outcome:
        """Run the handler; never raises for the handler's sake."""
        with handler.running(job, lambda fraction, message: self._report(job, fraction, message)):
            try:
                run = tasks.resolve(job.task, self.config.allow_modules)  # a row names only trusted code
                if self.sidecar is not None:
                    self.sidecar.ensure_up()  # a server that will not come up fails the attempt, as a load would
                self._load_model(job)  # a load that fails fails the attempt, as the handler would
                result = _call(run, job.args)
            except (Exception, SystemExit) as exc:  # the handler's failure is the job's, not ours
                return decide_outcome(job, raised=exc, backoff_base=self.config.backoff_base,
                                      backoff_max=self.config.backoff_max)
            finally:
                if self.sidecar is not None:
                    self.sidecar.used()
        return decide_outcome(job, result=result)

    def _load_model(self, job: Job) -> None:
        """A GPU worker loads the job's model before its handler runs; the heartbeat shows
        the model warm at once."""
        if self.gpu_box is not None and self.gpu_box.load(self.store, job):
            self.keeper.beat(self.store)

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

    def _await_work(self) -> bool:
        """Whether something may be due for us, once it may be, or False on stop or a
        switch that moved off. Between wake-ups only reads are made: the write lock is
        taken by the claim that follows."""
        self.waiter.drain()
        self.store.changed()
        if self._due():
            return True
        self.keeper.lookout(True)  # one wake-up per poll reads both its switch and the queue
        try:
            deadline = self._next_look()
            while not self.stopping and self.switch.get() is None:
                unload_in = self._unload_idle()
                remaining = deadline - time.monotonic()
                if remaining <= 0:  # the safety poll, in case a wake-up was lost
                    if self._look():
                        return True
                    deadline = self._next_look()
                elif self.waiter.wait(remaining if unload_in is None else min(remaining, max(unload_in, 0.01))) \
                        and self._settled():
                    self._stand_back()
                    if self._look():
                        self._woken = True
                        return True
                    self._stagger = decide.next_stagger(self._stagger, won=False)  # taken before we looked
                    # That look was as good as the safety poll's: its time starts again from it, so
                    # a fleet's heartbeats waking an idle worker do not add a poll of their own.
                    deadline = self._next_look()
            return False
        finally:
            self.keeper.lookout(False)

    def _next_look(self) -> float:
        """When the idle wait looks again with no wake-up (monotonic): the safety poll, or
        sooner when a rate holds one of its queues (its window opens with time, not with a commit)."""
        wait = self.config.poll
        for queue in self._serving():
            ready = self.store.flow_ready_at(self.config.project, queue)
            if ready is not None:
                wait = min(wait, max(ready - self.store.local_clock(), 0.001))
        return time.monotonic() + wait

    def _stand_back(self) -> None:
        """After a wake-up, wait a moment drawn up to the stagger before looking (cut short by
        the next wake-up, a stop or a switch): the worker that won the last race looks first."""
        if self._stagger > 0:
            self.waiter.wait(random.uniform(0, self._stagger))

    def _look(self) -> bool:
        """An idle look: the switch (the keeper's read, made here meanwhile), then, while
        still serving, whether work is due."""
        self.keeper.look(self.store)
        return self.switch.get() is None and self._due()

    def _unload_idle(self) -> float | None:
        """A GPU worker's chores while idle (and its heartbeat says what changed): unload its
        model past ``idle_unload`` or when an operator asks, preload one ahead of its jobs;
        seconds until an idle unload is due, or None: never."""
        if self.sidecar is not None and self.sidecar.stop_if_idle() is not None:
            self.keeper.beat(self.store)  # how the stop ended (stuck_vram names who holds the memory)
        if self.gpu_box is None:
            return None
        if self.gpu_box.unload_if_idle(self.store) or self.gpu_box.preload_if_idle(self.store):
            self.keeper.beat(self.store)
        return self.gpu_box.unload_in()

    def _stop_sidecar(self, reason: str) -> bool:
        """Stop the sidecar, if one runs; whether one was stopped."""
        if self.sidecar is None:
            return False
        try:
            return self.sidecar.stop(reason) is not None
        except OSError as exc:  # the worker ends either way
            log.warning("could not stop the sidecar: %s", exc)
            return False

    def _exit(self, code: int) -> None:
        """End the process at once (a watchdog, an operator's hard switch, a stale token):
        its sidecar's process group first, since a hard exit would leave it running. The
        first thread to call decides the exit code; another waits, as the process ends."""
        with self._exit_lock:
            if self._stop_sidecar(f"the worker is exiting ({exitcodes.describe(code)})"):
                self._beat_once_more()
            if code == exitcodes.OK:  # a cold stop: the process ends as asked, so say goodbye as a stop does
                self._goodbye_once_more()
            self._hard_exit(code)

    def _beat_once_more(self) -> None:
        """A last heartbeat on a connection of its own (any thread may be exiting), so that
        the row shows how the sidecar's stop ended; never raises."""
        if self.keeper is None:
            return
        try:
            with self.store_factory(self.config) as store:
                self.keeper.beat(store)
        except Exception as exc:  # the exit goes ahead whatever happens here
            log.warning("could not record the sidecar's stop: %s", exc)

    def _goodbye_once_more(self) -> None:
        """``worker_stopped`` on a connection of its own (the main thread is in a handler);
        never raises: a row left behind is a silent worker the sweep clears."""
        try:
            with self.store_factory(self.config) as store:
                store.worker_stopped(self.identity.worker_id)
        except Exception as exc:  # the exit goes ahead whatever happens here
            log.warning("could not record this worker's stop: %s", exc)

    def _settled(self) -> bool:
        """After a wake-up: has the database changed? A wake-up can arrive before the commit
        that raised it is visible, so look for a change for the waiter's settle window."""
        return waiting.settle(self.store.changed, self.waiter.settle_window, self.stop_event, SETTLE_STEP,
                              SETTLE_STEP_MAX)

    def _due(self) -> bool:
        return any(self.store.has_due(self._claim_request(queue)) for queue in self._serving())

    # --- the operator's switch ---------------------------------------------------------

    def _wake(self) -> None:
        """Cut short whatever wait the main thread is in: a stop, or the keeper saw the switch move."""
        self._switch_moved.ring()
        if self.waiter is not None:
            self.waiter.interrupt()

    def _park(self, moment: decide.Moment) -> bool:
        """Claim nothing from now until switched on, or stopped, or until a hard switch asks a
        worker that has run jobs to exit."""
        log.warning("worker %s %s: %s", self.holder, "parked" if self._served else "starts parked",
                    decide.describe_switch(moment.switch, control.PARK))
        self._hand_back_prefetched("its worker was switched off before it started")
        self._parked = True
        self.keeper.publish(control.PARKED, self.store)
        return True

    def _wait_switch(self, moment: decide.Moment) -> bool:
        select.select([self._switch_moved], [], [], self.config.poll)
        self._switch_moved.clear()
        return True

    def _resume(self, moment: decide.Moment) -> bool:
        if self._served:
            log.info("worker %s switched on: serving again", self.holder)
        else:
            self._say_serving("switched on: ")
        self._parked = False
        self.keeper.publish(control.SERVING, self.store)
        return True

    def _stop_for(self, moment: decide.Moment) -> bool:
        switch = moment.switch
        log.warning("worker %s: stopped by %s's hard switch (%s); exiting %d to free its memory",
                    self.holder, switch.changed_by or "an operator", switch.scope(), exitcodes.OPERATOR_STOP)
        self.exit_code = exitcodes.OPERATOR_STOP
        return False


def check_prefetch(prefetch: int, *, routed: bool, sidecar: bool) -> int:
    """``prefetch`` (``worker --prefetch``), or ``ConfigError`` saying why a worker cannot.

    >>> check_prefetch(10, routed=False, sidecar=False)
    10
    >>> check_prefetch(10, routed=True, sidecar=False)
    Traceback (most recent call last):
    ...
    rowfleet.errors.ConfigError: --prefetch and --batch are for many short jobs: a worker that routes by model (--gpu with models) or owns a sidecar claims one job at a time
    """
    names.RULES["prefetch"].check("--prefetch", prefetch)
    if prefetch > 1 and (routed or sidecar):
        raise ConfigError("--prefetch and --batch are for many short jobs: a worker that routes by model "
                          "(--gpu with models) or owns a sidecar claims one job at a time")
    return prefetch


def _call(handler: Callable[..., Any], args: Any) -> Any:
    if isinstance(args, dict):
        return handler(**args)
    if isinstance(args, list):
        return handler(*args)
    if args is None:
        return handler()
    return handler(args)


def _gpu_box(config: Config, settings: "GpuSettings", worker_id: str, holder: str,
             queues: Sequence[str]) -> "GpuBox":
    # Imported here: only a GPU worker places its claims, and a plain worker starts sooner.
    from rowfleet.gpu.gpu_worker import GpuBox

    return GpuBox(config, settings, worker_id=worker_id, holder=holder, queues=queues)


def _log_outcome(job: Job, outcome: Outcome, seconds: float, stopping: bool) -> None:
    if outcome.state == "completed":
        # A completion is the common case: at INFO, a line per job cost a busy worker a fifth of
        # its throughput. The job in hand at a stop is still said, as the stop's last news.
        log.log(logging.INFO if stopping else logging.DEBUG, "job %d %s completed in %.0f ms", job.id, job.task,
                seconds * 1000)
        return
    if outcome.state == "queued":
        log.warning("job %d %s attempt %d/%d: %s; retrying in %.1fs", job.id, job.task, job.attempts,
                    job.max_attempts, outcome.error, outcome.delay)
    else:
        log.warning("job %d %s %s after %d attempt(s): %s", job.id, job.task, outcome.state,
                    job.attempts, outcome.error)
