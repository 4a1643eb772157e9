"""The SQLite store's clock: the box's wall clock, held so that it never goes back.

On SQLite every time rowfleet writes (a job's ``run_at``, a lease's deadline, a heartbeat, a
fired slot) comes from the writing process's clock, and every comparison with ``:now`` reads
it again. When NTP steps a fast clock back, each of those times lies ahead of the clock by
the step: a queued job is not due, a dead worker's lease and heartbeat look fresh, a cron
slot already fired, all for as long as the step. (PostgreSQL reads the database server's
clock and does not use this module.)

So the store's clock is held (``advance``): it reads the wall clock while the wall clock
keeps ahead of it, forward steps included (the dead-worker sweep doubts a moment after one,
``liveness.trust_sweep``); once the wall clock is behind it, it goes on at half the rate of
the monotonic clock (``SLOW_RATE``), so the wall clock catches it up after twice the step
(a 600 s step in 1200 s) and nothing stops meanwhile. A slower clock is the safe direction:
a lease lasts at most twice as long, never less; a delay or a cron cadence stretches by as
much. A step back of more than ``LONGEST_HOLD`` is taken instead (a clock that was a year
ahead is not run at half speed for two years).

A process started after the step has seen no clock but the stepped one: when a store opens
a database it raises its clock to the newest time the fleet wrote there that was "now" when
written (``raised``; the store reads it, ``clock_floor``). One ``HeldClock`` per database file
per process (``for_database``) serves every store of it, so a store opened after the step in
an older process agrees with the rest. Pure apart from ``HeldClock``, which reads the two
clocks it is given; imports only the stdlib.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any, Callable

SLOW_RATE = 0.5  # the held clock's rate, in monotonic seconds, while the wall clock is behind it
LONGEST_HOLD = 86400.0  # seconds behind the held clock past which a step back is taken instead


def advance(held: float | None, elapsed: float, wall: float) -> float:
    """The held clock's reading now: ``held`` was its reading ``elapsed`` seconds ago (by the
    monotonic clock; None: never read) and the wall clock reads ``wall``.

    >>> advance(None, 0.0, 100.0), advance(100.0, 1.0, 101.0)  # first, then in step: the wall clock
    (100.0, 101.0)
    >>> advance(101.0, 1.0, 701.0)  # stepped forward: taken
    701.0
    >>> advance(701.0, 2.0, 102.0)  # stepped back 600 s: held, going on at half rate
    702.0
    >>> advance(702.0, 0.0, 103.0)  # never back, whatever the wall clock says
    702.0
    >>> advance(1e6, 1.0, 1e6 - LONGEST_HOLD - 60)  # back more than a day: taken
    913540.0
    """
    if held is None:
        return wall
    slow = held + SLOW_RATE * max(elapsed, 0.0)
    if wall >= slow or slow - wall > LONGEST_HOLD:
        return wall
    return slow


def raised(held: float, floor: Any, wall: float) -> float:
    """``held`` raised to ``floor``, the newest time written to the database (read by the store,
    so any value: only a finite number counts), unless it is lower, or further ahead of the
    wall clock than a held clock may run (``LONGEST_HOLD``: a row no clock of this box wrote).

    >>> raised(100.0, 160.0, 100.0), raised(200.0, 160.0, 100.0)
    (160.0, 200.0)
    >>> raised(100.0, 100.0 + LONGEST_HOLD + 1, 100.0), raised(100.0, None, 100.0), raised(100.0, "x", 100.0)
    (100.0, 100.0, 100.0)
    """
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not math.isfinite(floor):
        return held
    if floor <= held or floor - wall > LONGEST_HOLD:
        return held
    return float(floor)


class HeldClock:
    """The held clock of one database in this process: call it for the time (epoch seconds).
    ``hold_at_least(floor)`` raises it to a time read from the database. Thread-safe.

    >>> ticks = iter([0.0, 0.0, 2.0])
    >>> walls = iter([1000.0, 400.0, 402.0])
    >>> clock = HeldClock(wall=lambda: next(walls), monotonic=lambda: next(ticks))
    >>> clock(), clock(), clock()  # read; stepped back 600 s; held at half rate
    (1000.0, 1000.0, 1001.0)
    """

    def __init__(self, *, wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._wall, self._monotonic = wall, monotonic
        self._lock = threading.Lock()
        self._held: float | None = None
        self._read_at = 0.0  # the monotonic time of the reading ``_held``

    def __call__(self) -> float:
        with self._lock:
            return self._read(self._wall())

    def hold_at_least(self, floor: Any) -> None:
        """Never read earlier than ``floor`` again (``raised`` says which floors count)."""
        with self._lock:
            wall = self._wall()
            self._held = raised(self._read(wall), floor, wall)

    def _read(self, wall: float) -> float:
        now = self._monotonic()
        self._held, self._read_at = advance(self._held, now - self._read_at, wall), now
        return self._held

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # another thread may have held it at the fork


_clocks: dict[str, HeldClock] = {}
_clocks_lock = threading.Lock()


def for_database(path: str) -> HeldClock:
    """The held clock of the database file at ``path`` in this process, made on first use."""
    key = os.path.realpath(path)
    with _clocks_lock:
        clock = _clocks.get(key)
        if clock is None:
            clock = _clocks[key] = HeldClock()
        return clock


def _after_fork() -> None:
    # A forked child (a supervised worker) keeps its parent's readings: the monotonic clock is
    # the box's, so they hold in the child too. Only the locks are made anew.
    global _clocks_lock
    _clocks_lock = threading.Lock()
    for clock in _clocks.values():
        clock._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
