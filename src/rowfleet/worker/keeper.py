"""A worker's keeper thread: lease renewal, heartbeat and the operator's switch, on its own connection.

The keeper knows its worker by an ``Identity`` (who it is, as its heartbeat row and its
claims name it, and the rhythm of the keeper's chores) and shares with the worker's main
thread only explicit cells: the ``SwitchCell`` both threads read and write, the job in
hand (``hold``/``release``), and the state its heartbeat shows (``publish``).

Each renewal that succeeds is noted in ``Leases`` with the moment it was sent: a keeper
that cannot renew (its box cut off from the database) leaves the watchdog to stop the job
before its lease could lapse and another worker start it (the lease rule, exit 81).

A switch that moves is acted on here, because the main thread may be deep in a handler:
a hard switch has the watchdog stop the job in hand, a drain switch makes the heartbeat
say draining; then ``wake`` tells the main thread to look. A renewal that finds the job
handed to another worker ends the process (77); one that carries an operator's cancel
asks the handler to stop and has the watchdog end the process after the grace.

A GPU worker's keeper (``gpu``, a ``rowfleet.gpu.gpu_worker.GpuBox``) also renews the GPU's
lease with each renewal of the job's, and adds the worker's GPU advert to every beat.

Writes no SQL: everything goes through the store. Must not import ``rowfleet.worker.loop``.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from rowfleet import control, exitcodes
from rowfleet.config import Config
from rowfleet.control import Switch
from rowfleet.errors import LeaseLost, RowfleetError
from rowfleet.job import CANCELLED, Job, Outcome
from rowfleet.store import Store, waiting
from rowfleet.store.jobs import Renewal
from rowfleet.worker.decide import describe_switch, stop_reason
from rowfleet.worker.watchdog import Watchdog

if TYPE_CHECKING:
    from rowfleet.gpu.gpu_worker import GpuBox
    from rowfleet.worker.completer import HeldOutcomes

log = logging.getLogger("rowfleet.worker")


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who a worker is, and the rhythm its keeper keeps (seconds)."""

    worker_id: str  # its heartbeat row: host, pid and start time, unique across restarts
    project: str
    host: str
    queue: str
    pid: int
    lease: float         # how long a claim or a renewal holds the job
    renew: float         # between two renewals of the job in hand
    heartbeat: float     # between two heartbeats
    poll: float          # between two reads of the switch (a NOTIFY on Postgres is sooner)
    cancel_grace: float  # how long a cancelled handler may take to return
    queues: tuple[str, ...] = ()  # every queue it serves, in order (``queue`` is the first)
    gpu_index: int | None = None  # the GPU its jobs run on, whose switch holds it too; None: none
    # This boot of the host and the process's start time (``telemetry.pids``): with the pid,
    # what tells its host's next worker that it is gone; None where they cannot be read.
    boot_id: str | None = None
    pid_started: str | None = None

    @classmethod
    def of(cls, config: Config, queues: str | Sequence[str], pid: int, started: float,
           gpu_index: int | None = None, boot_id: str | None = None, pid_started: str | None = None) -> "Identity":
        """The identity of a worker of ``queues`` (one, or several in order) in process
        ``pid``, started at ``started`` (epoch seconds), running its jobs on GPU
        ``gpu_index`` (None: no GPU), in boot ``boot_id`` of its host, its process started at
        ``pid_started`` (see ``telemetry.pids``).

        >>> me = Identity.of(Config(host="box"), ["gpu", "cpu"], 42, 1.5)
        >>> me.worker_id, me.queue, me.queues
        ('box:42:1500', 'gpu', ('gpu', 'cpu'))
        """
        served = (queues,) if isinstance(queues, str) else tuple(queues)
        return cls(f"{config.host}:{pid}:{int(started * 1000)}", config.project, config.host, served[0], pid,
                   config.lease, config.renew, config.heartbeat, config.poll, config.cancel_grace, served, gpu_index,
                   boot_id, pid_started)

    @property
    def holder(self) -> str:
        """How its claims name it: host and pid."""
        return f"{self.host}:{self.pid}"


class Leases:
    """When the lease of each job a worker holds was last granted or renewed: the monotonic
    moment the statement that did it was sent, since the database counts the lease from no
    earlier. Written by the main thread (its claims) and the keeper (its renewals), read by
    the watchdog, which stops a job whose lease is running out (``liveness.lease_running_out``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[tuple[int, int], float] = {}

    def granted(self, jobs: "Job | Sequence[Job] | None", sent: float) -> None:
        """The jobs a statement sent at ``sent`` claimed or renewed (one, several, or None)."""
        taken = [] if jobs is None else [jobs] if isinstance(jobs, Job) else list(jobs)
        with self._lock:
            for job in taken:
                self._since[(job.id, job.lease_token)] = sent

    def since(self, job: Job) -> float | None:
        with self._lock:
            return self._since.get((job.id, job.lease_token))

    def forget(self, jobs: Sequence[Job]) -> None:
        with self._lock:
            for job in jobs:
                self._since.pop((job.id, job.lease_token), None)


class Prefetched:
    """The jobs a prefetching worker (``worker --prefetch N``) holds but has not started, in
    claim order: its main thread takes them one at a time, its keeper renews their leases,
    and a watchdog's trip hands them back. Shared by those threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: collections.deque[Job] = collections.deque()

    def put(self, jobs: Sequence[Job]) -> None:
        with self._lock:
            self._jobs.extend(jobs)

    def take(self) -> Job | None:
        """The next job to start, or None."""
        with self._lock:
            return self._jobs.popleft() if self._jobs else None

    def snapshot(self) -> list[Job]:
        with self._lock:
            return list(self._jobs)

    def holds(self, job: Job) -> bool:
        """Whether ``job`` still waits its turn here (the main thread has not taken it)."""
        with self._lock:
            return any(waiting is job for waiting in self._jobs)

    def discard(self, jobs: Sequence[Job]) -> None:
        """Let go of ``jobs`` (handed back, or found held by someone else)."""
        gone = {id(job) for job in jobs}
        with self._lock:
            self._jobs = collections.deque(job for job in self._jobs if id(job) not in gone)

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)


class SwitchCell:
    """The off switch holding a worker (None: on) and the queues of its own that are
    switched off (a worker of several queues claims from the others), read and written by
    its two threads."""

    def __init__(self, switch: Switch | None = None) -> None:
        self._lock = threading.Lock()
        self._switch = switch
        self._off: frozenset[str] = frozenset()

    def get(self) -> Switch | None:
        with self._lock:
            return self._switch

    def off(self) -> frozenset[str]:
        with self._lock:
            return self._off

    def set(self, switch: Switch | None, off: frozenset[str] = frozenset()) -> bool:
        """Hold ``switch``, with the queues in ``off`` switched off, from now on; whether
        either differs from what was held before."""
        with self._lock:
            moved = (switch, off) != (self._switch, self._off)
            self._switch, self._off = switch, off
            return moved


def read_switch(store: Store, identity: Identity, job_queue: str | None) -> tuple[Switch | None, frozenset[str]]:
    """The switch holding the worker (``control.holding``, with a job of ``job_queue`` in
    hand or none) and its queues switched off, from one read of the switches in force; a
    worker of a GPU switched off (by an operator, or by the health gate) is held by it as by
    a drain switch of all its queues, unless a queue's own switch holds it already."""
    per_queue = store.switches_in_force(identity.project, identity.host, identity.queues or (identity.queue,))
    holding, off = control.holding(per_queue, job_queue), frozenset(q for q, s in per_queue.items() if s is not None)
    if identity.gpu_index is None or holding is not None:
        return holding, off
    gpu = store.gpu_switch(identity.host, identity.gpu_index)
    if gpu is None or not gpu.off:
        return holding, off
    return gpu.holding(), frozenset(per_queue)


class Keeper(threading.Thread):
    """On its own connection (``connect()``): renews the lease of the job in hand, upserts
    the heartbeat, and reads the worker's switch (once per poll, and at once when the
    store's control waiter hears of a change: a NOTIFY on Postgres)."""

    def __init__(self, identity: Identity, switch: SwitchCell, connect: Callable[[], Store], watchdog: Watchdog, *,
                 exit: Callable[[int], None], wake: Callable[[], None], gpu: "GpuBox | None" = None,
                 sidecar: Callable[[], Mapping[str, Any] | None] = lambda: None,
                 prefetched: Prefetched | None = None, leases: Leases | None = None,
                 outcomes: "HeldOutcomes | None" = None) -> None:
        super().__init__(name=f"rowfleet-keeper-{identity.pid}", daemon=True)
        self.identity = identity
        self.switch = switch
        self.connect = connect
        self.watchdog = watchdog
        self.exit = exit  # how a stale token ends the process (os._exit)
        self.wake = wake  # tells the main thread the switch moved
        self.gpu = gpu  # a GPU worker's lease and advert; None for a worker without one
        self.sidecar = sidecar  # what its sidecar is doing (Sidecar.status), for the heartbeat
        self.prefetched = prefetched if prefetched is not None else Prefetched()  # renewed with the job in hand
        self.leases = leases if leases is not None else Leases()  # each renewal noted, for the lease rule
        self.outcomes = outcomes  # run, their outcomes not written yet (worker --batch): renewed until written
        self._job: Job | None = None
        self._cancel_reason: str | None = None  # an operator cancelled the job in hand: why
        self._state = control.SERVING  # what the heartbeat row shows
        self._released = 0  # jobs held and let go: the worker has run jobs
        self._lock = threading.Lock()
        self._look_lock = threading.Lock()  # one look at the switch at a time, whichever thread looks
        self._lookout = False  # the idle main thread reads the switch at its own looks (``lookout``)
        self._halt = threading.Event()
        self._waiter: Any = None  # the control waiter, made with the keeper's connection

    # --- called by the worker's main thread ---------------------------------------------

    def hold(self, job: Job) -> None:
        with self._lock:
            self._job = job
            self._cancel_reason = None

    def release(self) -> None:
        with self._lock:
            self._job = None
            self._released += 1

    def cancel_reason(self, job: Job) -> str | None:
        """Why an operator cancelled ``job``, once a renewal has told us; else None."""
        with self._lock:
            return self._cancel_reason if self._job is job else None

    def held(self) -> Job | None:
        with self._lock:
            return self._job

    def publish(self, state: str, store: Store) -> None:
        """Show ``state`` (``control.SERVING``, ``DRAINING``, ``PARKED``) in the heartbeat row
        now, written with ``store`` (the calling thread's connection)."""
        with self._lock:
            self._state = state
        self.beat(store)

    def lookout(self, on: bool) -> None:
        """An idle main thread takes over the switch's reading (``look`` at each of its own
        looks for work), so that an idle worker wakes once per poll, not once per thread;
        handed back (``on=False``) the keeper reads it at once and then once per poll again."""
        with self._lock:
            self._lookout = on
        if not on and self._waiter is not None:
            self._waiter.interrupt()

    def look(self, store: Store) -> None:
        """Read the switch now and act on a change, on ``store`` (the calling thread's)."""
        with self._look_lock:
            self._look(store)

    def stop(self) -> None:
        self._halt.set()
        if self._waiter is not None:
            self._waiter.interrupt()
        self.join()

    # --- the thread ---------------------------------------------------------------------

    def run(self) -> None:
        store = waiting.open_when_ready(self.connect, self._halt, self.identity.poll, log,
                                        transient=(RowfleetError,), announce=_cannot_reach)
        if store is None:
            return
        try:
            self._waiter = store.control_waiter(self.identity.host)
            if self._halt.is_set():  # stopped while we connected: stop() found no waiter to wake
                self._waiter.interrupt()
            self._keep(store)
        finally:
            if self._waiter is not None:
                self._waiter.close()
            store.close()

    def _keep(self, store: Store) -> None:
        # The renewal goes before the beat, and with every beat: a process frozen past its
        # staleness (SIGSTOP, a hang) whose job was handed on learns so from the renewal and
        # exits 77, before a beat could claim that it still holds the job.
        chores = {"renew": (self.identity.renew, self._renew), "switch": (self.identity.poll, self.look),
                  "beat": (self.identity.heartbeat, self.beat)}
        due = dict.fromkeys(chores, 0.0)  # when each chore is next due (monotonic)
        lookout = False
        while not self._halt.is_set():
            if time.monotonic() >= due["beat"]:
                due["renew"] = 0.0
            with self._lock:
                if lookout and not self._lookout:
                    due["switch"] = 0.0  # handed back: read it now
                lookout = self._lookout
            for chore, (every, act) in chores.items():
                # While the idle main thread reads the switch, a change we are told of is still read here.
                if chore == "switch" and lookout and due[chore] != 0.0:
                    continue
                if time.monotonic() >= due[chore]:
                    act(store)
                    due[chore] = time.monotonic() + every
            next_due = min(due[chore] for chore in chores if chore != "switch" or not lookout)
            if self._waiter.wait(max(0.0, next_due - time.monotonic())):
                due["switch"] = 0.0  # told of a change: look now

    def _look(self, store: Store) -> None:
        with self._lock:
            job_queue = self._job.queue if self._job is not None else None
        try:
            switch, off = read_switch(store, self.identity, job_queue)
        except RowfleetError as exc:  # keep acting on the last switch read
            log.warning("could not read this worker's switch: %s", exc)
            return
        held, held_off = self.switch.get(), self.switch.off()
        if not self.switch.set(switch, off):
            return
        if off != held_off and len(self.identity.queues) > 1:
            serving = [queue for queue in self.identity.queues if queue not in off]
            log.warning("worker %s: queues switched off: %s; serving %s", self.identity.holder,
                        ", ".join(sorted(off)) or "none", ", ".join(serving) or "none")
        if switch != held:
            self._switch_moved(switch, store)
        else:
            self.wake()  # the main thread claims from the queues that serve now

    def _switch_moved(self, switch: Switch | None, store: Store) -> None:
        """Act on a new switch now: the main thread acts when it next looks (``wake``)."""
        with self._lock:
            job, has_run_jobs, state = self._job, self._released > 0, self._state
        step = control.next_step(switch, holding_job=job is not None, has_run_jobs=has_run_jobs)
        log.warning("worker %s: %s", self.identity.holder, describe_switch(switch, step))
        if step == control.STOP and job is not None:
            self.watchdog.operator_stop(stop_reason(switch))
        elif step != control.STOP:
            self.watchdog.operator_stop(None)  # switched back on, or down to drain, before the stop
        if step == control.FINISH_THEN_PARK or (step == control.SERVE and state == control.DRAINING):
            self.publish(control.DRAINING if step == control.FINISH_THEN_PARK else control.SERVING, store)
        self.wake()

    def beat(self, store: Store) -> None:
        """Upsert the worker's heartbeat row, naming the job in hand; never raises."""
        with self._lock:
            job, state = self._job, self._state
        me = self.identity
        advert = self.gpu.advert() if self.gpu is not None else {}
        try:
            store.worker_beat(me.worker_id, me.project, me.host, me.queue, me.pid, job.id if job else None, state,
                              queues=me.queues if len(me.queues) > 1 else None, sidecar=self.sidecar(),
                              boot_id=me.boot_id, pid_started=me.pid_started, **advert)
        except RowfleetError as exc:
            log.warning("heartbeat failed: %s", exc)

    def _renew(self, store: Store) -> None:
        if self.gpu is not None:
            self.gpu.renew(store)
        self._renew_prefetched(store)
        self._renew_unwritten(store)
        job = self.held()
        if job is None:
            return
        renewal = self._renew_one(store, job, "job")
        if isinstance(renewal, LeaseLost):
            with self._lock:
                held, cancelling = self._job is job, self._cancel_reason is not None
            # Not merely finished between our read and the renew; and not an operator's cancel
            # being carried out (the watchdog wrote it cancelled and is ending the process, 80),
            # nor a watchdog's trip being recorded (it ends the process with the trip's code).
            if held and not cancelling and not self.watchdog.ending(job):
                log.error("job %d: %s; it was given to another worker: exiting", job.id, renewal)
                self.exit(exitcodes.REASSIGNED)
            return
        if renewal is not None and renewal.cancel_requested_at is not None:
            self._cancel_seen(job, renewal.cancel_reason or "cancelled by an operator")

    def _renew_one(self, store: Store, job: Job, what: str) -> Renewal | LeaseLost | None:
        """Renew ``job``'s lease and count the grant for the lease rule (from when it was
        sent): the renewal; the ``LeaseLost`` saying the job is someone else's now; or None
        after a failure worth retrying, logged naming ``what`` the job is."""
        sent = time.monotonic()
        try:
            renewal = store.renew(job, self.identity.lease)
        except LeaseLost as exc:
            return exc
        except RowfleetError as exc:
            log.warning("lease renewal of %s %d failed (will retry): %s", what, job.id, exc)
            return None
        self.leases.granted(job, sent)
        return renewal

    def _renew_prefetched(self, store: Store) -> None:
        """Renew the leases of the jobs prefetched and not started. One held by someone else
        now (its lease lapsed and it was reclaimed) is let go, as is one an operator has
        cancelled meanwhile, which ends cancelled without running. One the main thread took
        and finished since the snapshot is no loss: short jobs often end between the two."""
        for job in self.prefetched.snapshot():
            renewal = self._renew_one(store, job, "prefetched job")
            if isinstance(renewal, LeaseLost):
                if self.prefetched.holds(job):
                    log.warning("prefetched job %d: %s; letting it go", job.id, renewal)
                    self.prefetched.discard([job])
                continue
            if renewal is not None and renewal.cancel_requested_at is not None:
                self.prefetched.discard([job])
                reason = renewal.cancel_reason or "cancelled by an operator"
                try:
                    store.finish(job, Outcome(CANCELLED, error=f"{reason} (before it started)", event="cancelled"))
                    log.warning("prefetched job %d: %s before it started", job.id, reason)
                except RowfleetError as exc:  # its lease lapses, and the sweep ends it cancelled
                    log.warning("prefetched job %d: could not record its cancel: %s", job.id, exc)

    def _renew_unwritten(self, store: Store) -> None:
        """Renew the leases of the jobs run whose outcomes are held, not yet written: they are
        still running to everyone else until the write commits. One written since the snapshot
        is no loss; one held by someone else now is refused when its outcome is written."""
        if self.outcomes is None:
            return
        for job in self.outcomes.jobs():
            renewal = self._renew_one(store, job, "finished job")
            if isinstance(renewal, LeaseLost) and self.outcomes.holds(job):
                log.warning("finished job %d: %s; its outcome will be refused", job.id, renewal)

    def _cancel_seen(self, job: Job, reason: str) -> None:
        """An operator cancelled the job in hand: its handler is asked to stop (it may check
        ``cancel_requested()``), and the watchdog ends the process if it has not after the grace."""
        with self._lock:
            if self._job is not job or self._cancel_reason is not None:
                return  # finished meanwhile, or already seen
            self._cancel_reason = reason
        grace = self.identity.cancel_grace
        log.warning("job %d: %s; asking its handler to stop (the process is ended in %gs if it has not)",
                    job.id, reason, grace)
        self.watchdog.cancel(job, reason, grace)


def _cannot_reach(exc: RowfleetError) -> None:
    log.error("keeper cannot reach the database, so leases are not renewed yet: %s", exc)
