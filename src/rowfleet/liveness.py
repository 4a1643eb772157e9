"""When a running job is hung, and what a watchdog's trip does to it; when a running job's
row shows no live holder, and what becomes of it; how long a crashed process waits before
it is restarted. Pure.

The worker's watchdog thread (``rowfleet.worker.watchdog``) samples the clock, the job's
progress beats, the GPUs and the process's memory, and asks the functions here what those
readings mean; the store writes what ``trip_outcome`` decides. No I/O, no clock: every
function takes ``now`` and the readings.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable, Sequence

from rowfleet import exitcodes, names
from rowfleet.job import CANCELLED, FAILED, QUEUED, Outcome, backoff, decode_column, raw_text

GIB = 2 ** 30
# A worker that missed this many of its own heartbeats is silent: flagged dead by the sweep,
# shown as SILENT by every listing. Judged by the worker's cadence, never the reader's.
MISSED_BEATS = 3
# Stopped, dead and silent workers stay in the default listings this long after their
# last heartbeat, then leave them (``rowfleet workers --all`` still shows them).
LISTED_FOR = 600.0


def silent(last_seen: float, heartbeat: float, now: float) -> bool:
    """Has a worker beating every ``heartbeat`` seconds missed ``MISSED_BEATS`` of them?

    >>> silent(100.0, 10.0, 131.0), silent(100.0, 40.0, 131.0), silent(100.0, 40.0, 221.0)
    (True, False, True)
    """
    return now - last_seen > MISSED_BEATS * heartbeat


# How a worker's row reads when it is no longer doing what it last beat.
SILENT = "SILENT"    # flagged dead by the sweep, or past its own staleness
STOPPED = "stopped"  # stopped cleanly; a process whose supervisor saw its exit reads as that exit


def actual_state(row: Any, now: float) -> str:
    """What a heartbeat row says a worker is doing: serving, draining, parked, ``SILENT``
    (flagged dead, or past its own staleness even where no orchestrator sweeps), stopped,
    or how it ended. A beat that is no number (plain SQL) shows nothing alive: silent.

    >>> row = {"exit_code": None, "stopped_at": None, "flagged_dead_at": None, "last_seen": 100.0,
    ...        "heartbeat": 10.0, "state": "parked"}
    >>> actual_state(row, 120.0), actual_state(row, 131.0), actual_state({**row, "exit_code": -9}, 120.0)
    ('parked', 'SILENT', 'killed by SIGKILL')
    """
    if row["exit_code"] is not None:
        return exitcodes.describe(row["exit_code"])
    if row["stopped_at"]:
        return STOPPED
    last_seen, heartbeat = names.seconds_of(row["last_seen"]), names.seconds_of(row["heartbeat"])
    if row["flagged_dead_at"] or last_seen is None or heartbeat is None or silent(last_seen, heartbeat, now):
        return SILENT
    return row["state"]


# The lease rule: a holder that has not renewed its job's lease stops the job before the
# lease can lapse, so that no other worker starts it while it still runs. The margin covers
# the holder's clock running slower than the database's (a monotonic clock's rate error is
# parts per million; LEASE_CLOCK_RATE allows a hundred times the worst seen on a VM), the
# watchdog's tick and the hard exit itself (LEASE_STOP_TIME). It never takes more than half
# of what the lease leaves after one renew period, so that one renewal may always fail.
LEASE_CLOCK_RATE = 0.01
LEASE_STOP_TIME = 1.0


def lease_margin(lease: float, renew: float) -> float:
    """Seconds before its lease could lapse at which a holder that has not renewed stops its job.

    >>> lease_margin(30.0, 5.0), lease_margin(600.0, 10.0), lease_margin(1.0, 0.25)
    (1.0, 6.0, 0.375)
    """
    return max(lease * LEASE_CLOCK_RATE, min(LEASE_STOP_TIME, (lease - renew) / 2))


def lease_running_out(leased_since: float, now: float, lease: float, renew: float) -> bool:
    """Must a holder stop its job at ``now``, its lease last granted or renewed by a statement
    sent at ``leased_since`` (the same monotonic clock)? The database counts the lease from
    no earlier than that send, so the holder's count is the longer: it stops first.

    >>> lease_running_out(100.0, 128.9, 30.0, 5.0), lease_running_out(100.0, 129.0, 30.0, 5.0)
    (False, True)
    """
    return now - leased_since >= lease - lease_margin(lease, renew)


def lease_exit_by(leased_since: float, lease: float, renew: float) -> float:
    """The latest moment (monotonic, as ``leased_since``) a holder whose lease is running out
    may still be alive: what a watchdog's trip may spend recording its outcome stops here.

    >>> lease_exit_by(100.0, 30.0, 5.0)
    129.5
    """
    return leased_since + lease - lease_margin(lease, renew) / 2


def unheld(lease_expires_at: Any, claimed_by: Any) -> str | None:
    """Why a running job's row names no holder a sweep could ever see lose it, or None: it
    has no lease, or one that is no time (plain SQL's text or bytes, a NaN or an infinity:
    none of them ever falls behind the clock), or it names no worker. rowfleet's claim
    writes both, so only someone else's SQL leaves a row so; no wait mends it.

    >>> unheld(150.0, "box:7") is None
    True
    >>> unheld(None, "box:7")
    'its row has no lease (holder box:7), so no sweep could see it lapse'
    >>> unheld("soon", "box:7")
    "its lease is no time ('soon'; holder box:7), so no sweep could see it lapse"
    >>> unheld(float("inf"), None)
    'its lease is no time (inf; no holder named), so no sweep could see it lapse'
    >>> unheld(150.0, None)
    'its row names no worker as its holder'
    """
    holder = "no holder named" if claimed_by is None else f"holder {raw_text(claimed_by)}"
    if lease_expires_at is None:
        return f"its row has no lease ({holder}), so no sweep could see it lapse"
    if not names.is_finite_number(lease_expires_at):
        return f"its lease is no time ({lease_expires_at!r}; {holder}), so no sweep could see it lapse"
    if claimed_by is None:
        return "its row names no worker as its holder"
    return None


def lost_holder(lease_expires_at: Any, claimed_by: Any, now: float) -> str | None:
    """Why no live worker holds a running job, by its row at ``now`` (what its re-queue or
    end is written with), or None while a lease still to lapse names its holder.

    >>> lost_holder(50.0, "box:7", 100.0)
    'worker box:7 was lost (lease lapsed)'
    >>> lost_holder(150.0, "box:7", 100.0) is None
    True
    >>> lost_holder(50.0, None, 100.0)
    'its row names no worker as its holder'
    """
    problem = unheld(lease_expires_at, claimed_by)
    if problem is not None:
        return problem
    return f"worker {raw_text(claimed_by)} was lost (lease lapsed)" if lease_expires_at < now else None


def gone_from_host(recorded_boot: Any, recorded_start: Any, boot_now: str | None, start_now: str | None,
                   own_pid: bool) -> str | None:
    """Why a worker of this host that never said it stopped is certainly gone, or None while
    it may still be alive; asked by a worker starting on the same host, before its first
    heartbeat. ``recorded_boot`` and ``recorded_start``: the boot id and process start time
    the worker's row recorded (None: not recorded, or plain SQL's non-text); ``boot_now`` and
    ``start_now``: this boot's id and the start time of whatever process holds its pid now
    (None: no such process); ``own_pid``: its pid is the asking worker's own, which has not
    beaten yet, so the row is another's.

    >>> gone_from_host("b1", "100", "b1", "100", False) is None        # alive
    True
    >>> gone_from_host("b1", "100", "b1", None, False)
    'its process is gone'
    >>> gone_from_host("b1", "100", "b1", "250", False)
    'its pid now names a later process'
    >>> gone_from_host("b0", "100", "b1", "100", False)
    'the host has booted since it started'
    >>> gone_from_host(None, None, "b1", "100", False) is None         # cannot tell: left to its lease
    True
    """
    if own_pid:
        return "its pid is now the starting worker's"
    if isinstance(recorded_boot, str) and boot_now is not None and recorded_boot != boot_now:
        return "the host has booted since it started"
    if start_now is None:
        return "its process is gone"
    if isinstance(recorded_start, str) and recorded_start != start_now:
        return "its pid now names a later process"
    return None


def orphan_outcome(attempts: Any, max_attempts: Any, lost: str, stopped: str | None) -> tuple[str, str]:
    """What becomes of a running job no live worker holds (``lost`` says why), by its row:
    ``(state, error)``. Queued again while it has attempts left (the attempt its claim
    counted stays spent); cancelled when it is not to run again (``stopped`` says why: its
    workflow run ended, an operator asked); failed on its last attempt, or when its counts
    cannot be read (plain SQL's), which no retry would mend.

    >>> orphan_outcome(1, 5, "worker h:1 was lost (lease lapsed)", None)
    ('queued', 'worker h:1 was lost (lease lapsed); re-queued')
    >>> orphan_outcome(5, 5, "worker h:1 was lost (lease lapsed)", None)
    ('failed', 'worker h:1 was lost (lease lapsed) on the last attempt (5 of 5)')
    >>> orphan_outcome(1, 5, "worker h:1 was lost (lease lapsed)", "run 4 cancelled")
    ('cancelled', 'run 4 cancelled; not retried after: worker h:1 was lost (lease lapsed)')
    >>> orphan_outcome("one", 5, "its row has no lease", None)[1]
    "its row has no lease; not re-queued, since its row cannot be decoded: column attempts is not an integer: 'one'"
    """
    unreadable = "; ".join(problem for problem in (decode_column("attempts", attempts)[1],
                                                   decode_column("max_attempts", max_attempts)[1]) if problem)
    if stopped is not None:
        return CANCELLED, not_retried(stopped, lost)
    if unreadable:
        return FAILED, f"{lost}; not re-queued, since its row cannot be decoded: {unreadable}"
    if attempts < max_attempts:
        return QUEUED, f"{lost}; re-queued"
    return FAILED, f"{lost} on the last attempt ({attempts} of {max_attempts})"


def lapse_outcome(row: Any, lost: str, stopped: str | None, watchdog_retries: int) -> tuple[str, str]:
    """What becomes of a running job whose lease lapsed, by its row (``attempts``,
    ``max_attempts``, ``watchdog_retries``): ``(state, error)``. Its holder stopped renewing,
    and from the database a holder cut off (which stopped the job itself, by the lease rule)
    and one whose box died look the same; neither is the job's fault, so the attempt its claim
    counted is given back (the re-queue's statement does that) and one watchdog retry is
    spent instead: a job whose holders keep vanishing (one that takes its box down, say)
    fails once ``watchdog_retries`` are used up. Cancelled when it is not to run again, as
    any orphan (``orphan_outcome``).

    >>> row = {"attempts": 5, "max_attempts": 5, "watchdog_retries": 0}
    >>> lapse_outcome(row, "worker h:1 was lost (lease lapsed)", None, 3)
    ('queued', 'worker h:1 was lost (lease lapsed); re-queued, its attempt given back')
    >>> lapse_outcome({**row, "watchdog_retries": 3}, "worker h:1 was lost (lease lapsed)", None, 3)[1]
    'worker h:1 was lost (lease lapsed); its holders lost 4 leases (watchdog retries used up: 3)'
    >>> lapse_outcome({**row, "watchdog_retries": "x"}, "lapsed", None, 3)
    ('failed', "lapsed; not re-queued, since its row cannot be decoded: column watchdog_retries is not an integer: 'x'")
    """
    if stopped is not None:
        return CANCELLED, not_retried(stopped, lost)
    problems = [decode_column(name, row[name])[1] or f"column {name} is empty"
                for name in ("attempts", "max_attempts", "watchdog_retries")
                if row[name] is None or decode_column(name, row[name])[1]]
    if problems:
        return FAILED, f"{lost}; not re-queued, since its row cannot be decoded: {'; '.join(problems)}"
    spent = row["watchdog_retries"]
    if spent + 1 > watchdog_retries:
        return FAILED, f"{lost}; its holders lost {spent + 1} leases (watchdog retries used up: {watchdog_retries})"
    return QUEUED, f"{lost}; re-queued, its attempt given back"


def not_retried(why: str, error: str | None) -> str:
    """The error of a job that ends cancelled instead of running again.

    >>> not_retried("run 4 cancelled", "worker h:1 was lost (lease lapsed)")
    'run 4 cancelled; not retried after: worker h:1 was lost (lease lapsed)'
    """
    return f"{why}; not retried after: {error}" if error else why


@dataclasses.dataclass(frozen=True)
class Limits:
    """The watchdogs' settings (``Config`` holds the configured ones)."""

    stall_window: float = 300.0       # seconds without a progress beat, once a job has beaten
    stall_samples: int = 3            # readings that must all look hung before a stall trips ...
    stall_spacing: float = 1.0        # ... taken this many seconds apart
    idle_gpu_percent: float = 5.0     # GPU utilisation under this is idle
    memory_delta: float = 5 * GIB     # memory that moves less than this (bytes) across a window is static
    gpu_first_window: float = 1200.0  # GPU jobs: the window before the first beat (model load)
    gpu_window: float = 300.0         # GPU jobs: the window once the job has beaten
    watchdog_retries: int = 3         # trips a job may take; the next one fails it


@dataclasses.dataclass(frozen=True)
class Reading:
    """One sample of what a job's process is doing. ``None`` is unknown."""

    at: float
    gpu_percent: float | None = None  # the busiest GPU's utilisation
    gpu_memory_mib: float | None = None  # memory used across the GPUs
    memory: float | None = None       # bytes: the job's cgroup, or its process tree's RSS

    def to_dict(self) -> dict[str, Any]:
        return {"at": round(self.at, 3), "gpu_percent": self.gpu_percent, "gpu_memory_mib": self.gpu_memory_mib,
                "memory_mib": None if self.memory is None else round(self.memory / 2 ** 20, 1)}


def budget_exceeded(started: float, now: float, budget: float | None) -> bool:
    """Has a job that started at ``started`` run past ``budget`` seconds (None: no budget)?

    >>> budget_exceeded(100.0, 160.0, 60.0), budget_exceeded(100.0, 159.0, 60.0), budget_exceeded(0, 1e9, None)
    (True, False, False)
    """
    return budget is not None and now - started >= budget


def stall_suspected(first_beat: float | None, last_beat: float | None, now: float, limits: Limits) -> bool:
    """A job that has beaten at least once and then not for the stall window. A job that
    never beats is watched by its budget (and, on a GPU, by the GPU window) instead.

    >>> limits = Limits(stall_window=30)
    >>> stall_suspected(None, None, 1000, limits), stall_suspected(10, 50, 79, limits), stall_suspected(10, 50, 80, limits)
    (False, False, True)
    """
    return first_beat is not None and last_beat is not None and now - last_beat >= limits.stall_window


def looks_hung(readings: Sequence[Reading], limits: Limits) -> bool:
    """Do these readings show a process doing nothing: every GPU reading idle, and memory
    (the process's and the GPUs') moving less than ``memory_delta`` across them?

    An unknown GPU (no GPU, no driver) counts as idle, since nothing shows it busy; unknown
    memory counts as static. A model load moves memory while the GPU sits idle: not hung.

    >>> idle = [Reading(t, 0.0, 1000, 4 * GIB) for t in range(3)]
    >>> looks_hung(idle, Limits()), looks_hung([Reading(0, 80.0)] + idle[1:], Limits())
    (True, False)
    >>> loading = [Reading(t, 0.0, 1000, (4 + 3 * t) * GIB) for t in range(3)]
    >>> looks_hung(loading, Limits()), looks_hung([], Limits())
    (False, False)
    """
    if not readings:
        return False
    if any(r.gpu_percent is not None and r.gpu_percent >= limits.idle_gpu_percent for r in readings):
        return False
    return _static([r.memory for r in readings], limits.memory_delta) and \
        _static([None if r.gpu_memory_mib is None else r.gpu_memory_mib * 2 ** 20 for r in readings],
                limits.memory_delta)


def _static(values: Sequence[float | None], delta: float) -> bool:
    known = [value for value in values if value is not None]
    return not known or max(known) - min(known) < delta


def gpu_window(first_beat: float | None, limits: Limits) -> float:
    """The GPU health window: long until the job's first progress beat (a model may be
    loading), the normal one after.

    >>> gpu_window(None, Limits()), gpu_window(5.0, Limits())
    (1200.0, 300.0)
    """
    return limits.gpu_first_window if first_beat is None else limits.gpu_window


def gpu_idle_for_window(readings: Sequence[Reading], now: float, window: float, limits: Limits) -> bool:
    """Did the GPU stay idle, and memory static, for the whole of the last ``window``
    seconds? The readings must reach back that far: elapsed time alone never trips.

    >>> limits = Limits(gpu_first_window=60, gpu_window=20)
    >>> flat = [Reading(t, 1.0, 500, GIB) for t in range(0, 70, 10)]
    >>> gpu_idle_for_window(flat, 60, 60, limits), gpu_idle_for_window(flat[2:], 60, 60, limits)
    (True, False)
    >>> gpu_idle_for_window(flat[:-1] + [Reading(60, 90.0, 500, GIB)], 60, 60, limits)
    False
    """
    start = now - window
    covered = [r for r in readings if r.at >= start]
    if not readings or readings[0].at > start or not covered:
        return False
    before = [r for r in readings if r.at < start]
    return looks_hung(before[-1:] + covered, limits)


@dataclasses.dataclass(frozen=True)
class Trip:
    """A watchdog's verdict: the code (which decides the job's outcome), which watchdog, and
    what it saw. ``exit_code``, where given, is the process's exit instead of ``code``: a
    cold stop hands the job back as an operator stop (79) and then exits 0, as a stop asked
    for is no fault."""

    code: int
    watchdog: str
    reason: str
    readings: tuple[Reading, ...] = ()
    exit_code: int | None = None

    @property
    def exits_with(self) -> int:
        return self.code if self.exit_code is None else self.exit_code

    def detail(self, attempt: int, watchdog_retries: int) -> dict[str, Any]:
        """The forensic event's detail."""
        return {"code": self.code, "watchdog": self.watchdog, "reason": self.reason, "attempt": attempt,
                "watchdog_retries": watchdog_retries, "readings": [r.to_dict() for r in self.readings]}


def trip_outcome(job: Any, trip: Trip, limits: Limits, *, backoff_base: float = 2.0, backoff_max: float = 3600.0,
                 rng: Callable[[], float] = random.random) -> tuple[Outcome, int, int]:
    """The one policy for a job a watchdog stopped: ``(outcome, watchdog retries spent,
    attempts refunded)``.

    A fault (75, 76, 78) spends a watchdog retry and the attempt it happened in: the job
    is re-queued after a backoff, or fails once the retries (``limits.watchdog_retries``)
    or its attempts are used up. An operator stop (79) is not a fault: the job is
    re-queued at once and the attempt is given back. A cancel whose handler did not stop
    in time (80) ends the job cancelled, as the operator asked. A holder cut off (81: its
    lease could not be renewed) re-queues the job at once with its attempt given back and a
    watchdog retry spent, as the lapse it forestalls would (``lapse_outcome``), when it can
    still write at all.

    >>> from types import SimpleNamespace as J
    >>> job = J(attempts=1, max_attempts=5, watchdog_retries=0)
    >>> trip_outcome(job, Trip(75, "budget", "ran 61s of 60s"), Limits(), rng=lambda: 0.0)[0].state
    'queued'
    >>> spent = J(attempts=2, max_attempts=5, watchdog_retries=3)
    >>> outcome, retries, refund = trip_outcome(spent, Trip(76, "stall", "no beat"), Limits())
    >>> outcome.state, retries, refund
    ('failed', 1, 0)
    >>> trip_outcome(spent, Trip(79, "operator", "turned off"), Limits())[0:3:2]
    (Outcome(state='queued', result=None, error='stopped by an operator: turned off', traceback=None, delay=0.0, event='operator_stop', result_json=None), 1)
    >>> trip_outcome(spent, Trip(80, "cancel", "cancelled by ops"), Limits())[0].state
    'cancelled'
    >>> outcome, retries, refund = trip_outcome(job, Trip(81, "lease", "not renewed for 29s"), Limits())
    >>> outcome.state, outcome.delay, retries, refund
    ('queued', 0.0, 1, 1)
    """
    if trip.code == exitcodes.OPERATOR_STOP:
        return Outcome(QUEUED, error=f"stopped by an operator: {trip.reason}", event="operator_stop"), 0, 1
    if trip.code == exitcodes.CANCELLED:  # what the operator asked for: no fault, no retry
        return Outcome(CANCELLED, error=trip.reason, event="cancelled"), 0, 0
    error = f"watchdog {trip.watchdog} (exit {trip.code}, {exitcodes.meaning(trip.code)}): {trip.reason}"
    if trip.code == exitcodes.CUT_OFF:  # as a lapse would decide (lapse_outcome), written by the holder
        if job.watchdog_retries + 1 > limits.watchdog_retries:
            return Outcome(FAILED, error=f"{error}; watchdog retries used up ({job.watchdog_retries} of "
                           f"{limits.watchdog_retries})", event="failed"), 1, 0
        return Outcome(QUEUED, error=f"{error}; re-queued, its attempt given back", event="retried"), 1, 1
    if job.watchdog_retries + 1 > limits.watchdog_retries:
        return Outcome(FAILED, error=f"{error}; watchdog retries used up ({job.watchdog_retries} of "
                       f"{limits.watchdog_retries})", event="failed"), 1, 0
    if job.attempts >= job.max_attempts:
        return Outcome(FAILED, error=f"{error}; on the last attempt ({job.attempts} of {job.max_attempts})",
                       event="failed"), 1, 0
    delay = backoff(job.attempts, backoff_base, backoff_max, rng)
    return Outcome(QUEUED, error=error, delay=delay, event="retried"), 1, 0



# --- whether a dead-worker sweep may trust its moment ----------------------------------

# A sweep that comes more than this many of its intervals after the last one was late: the
# process, or the whole box, was held up (a storage stall, a VM paused), and its workers may
# not have had a moment to beat since either.
LATE_SWEEPS = 2.0
# Seconds the heartbeats' clock may run ahead of the monotonic clock between two sweeps
# before the sweep counts it as a jump (the box's clock stepped, a VM resumed): far above a
# clock's rate error or a round trip's, far below a heartbeat's staleness.
CLOCK_JUMP = 1.0


@dataclasses.dataclass(frozen=True)
class SweepMoment:
    """When a dead-worker sweep judged: by its own process's monotonic clock, and by the clock
    the heartbeats are written with (the database's on PostgreSQL, the box's on SQLite)."""

    monotonic: float
    wall: float


@dataclasses.dataclass(frozen=True)
class Beat:
    """A live worker's heartbeat as a sweep reads it: its project, its age by the heartbeats'
    clock and the worker's own cadence."""

    project: str
    age: float
    heartbeat: float

    @property
    def stale(self) -> bool:
        return silent(0.0, self.heartbeat, self.age)


@dataclasses.dataclass(frozen=True)
class Trust:
    """A dead-worker sweep's verdict on its own moment: ``flag`` the silent workers now, or
    hold off; ``held_since`` is the monotonic time a hold began (None: no hold), for the next
    sweep to carry; ``why`` says why it holds, for one log line."""

    flag: bool
    held_since: float | None = None
    why: str | None = None


def trust_sweep(previous: SweepMoment | None, now: SweepMoment, interval: float, beats: Sequence[Beat],
                held_since: float | None) -> Trust:
    """May a dead-worker sweep at ``now`` flag the workers whose heartbeats read stale
    (``beats``: every live worker's), given the moment of the sweep before (``previous``, None
    for a process's first), its ``interval`` and a hold begun at ``held_since``?

    It doubts its moment when every heartbeat of a project (two or more) is stale at once,
    when it came late (more than ``LATE_SWEEPS`` intervals after the last, by the monotonic
    clock), or when the heartbeats' clock ran ahead of the monotonic clock by more than
    ``CLOCK_JUMP`` seconds since: then it holds off one heartbeat (the longest cadence of the
    stale workers), so that live workers beat again, and flags whoever is still stale after
    it. One stale worker among fresh ones, at a sweep that came on time, is flagged at once.

    >>> fresh, dead = Beat("", 1.0, 2.0), Beat("", 30.0, 2.0)
    >>> before, on_time = SweepMoment(100.0, 5000.0), SweepMoment(105.0, 5005.0)
    >>> trust_sweep(before, on_time, 5.0, [fresh, dead, fresh], None)
    Trust(flag=True, held_since=None, why=None)
    >>> trust_sweep(before, on_time, 5.0, [dead, dead], None).why
    "every heartbeat of project '' is stale at once (2 workers)"
    >>> trust_sweep(before, SweepMoment(105.0, 5605.0), 5.0, [fresh, dead], None)
    Trust(flag=False, held_since=105.0, why='the clock moved 600.0s further than the monotonic clock since the last sweep')
    >>> trust_sweep(before, SweepMoment(140.0, 5040.0), 5.0, [fresh, dead], None).why
    'this sweep came 40.0s after the last, every 5s'
    >>> trust_sweep(on_time, SweepMoment(106.0, 5006.0), 5.0, [dead], 105.0).flag
    False
    >>> trust_sweep(on_time, SweepMoment(107.0, 5007.0), 5.0, [dead], 105.0).flag
    True
    """
    stale = [beat for beat in beats if beat.stale]
    if not stale:
        return Trust(True)  # nothing to flag; a hold ends when every worker beats again
    if held_since is not None:
        hold = max(beat.heartbeat for beat in stale)
        if now.monotonic - held_since >= hold:
            return Trust(True)
        return Trust(False, held_since, f"holding since {now.monotonic - held_since:.1f}s ago")
    why = _doubt(previous, now, interval, beats)
    return Trust(True) if why is None else Trust(False, now.monotonic, why)


def _doubt(previous: SweepMoment | None, now: SweepMoment, interval: float, beats: Sequence[Beat]) -> str | None:
    if previous is not None:
        gap = now.monotonic - previous.monotonic
        if gap > LATE_SWEEPS * interval:
            return f"this sweep came {gap:.1f}s after the last, every {interval:g}s"
        jump = (now.wall - previous.wall) - gap
        if jump > CLOCK_JUMP:
            return f"the clock moved {jump:.1f}s further than the monotonic clock since the last sweep"
    projects: dict[str, list[bool]] = {}
    for beat in beats:
        projects.setdefault(beat.project, []).append(beat.stale)
    for project, stale in sorted(projects.items()):
        if len(stale) >= 2 and all(stale):
            return f"every heartbeat of project {project!r} is stale at once ({len(stale)} workers)"
    return None


# A crashed process is restarted after a delay that doubles while it keeps dying young, so a
# crash loop cannot spin; the supervisor's children and a GPU worker's sidecar share it.
FIRST_RESTART_DELAY = 0.5
MAX_RESTART_DELAY = 30.0
HEALTHY_AFTER = 60.0  # a child that lived this long resets the restart delay


def restart_delay(previous: float, lived: float, first: float = FIRST_RESTART_DELAY,
                  most: float = MAX_RESTART_DELAY) -> float:
    """How long to wait before restarting a child that died after ``lived`` seconds.

    >>> restart_delay(0.0, 1.0), restart_delay(0.5, 1.0), restart_delay(16.0, 2.0), restart_delay(8.0, 90.0)
    (0.5, 1.0, 30.0, 0.5)
    """
    if lived >= HEALTHY_AFTER or previous <= 0:
        return first
    return min(most, previous * 2)
