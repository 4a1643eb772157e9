"""The scheduler service: fires the due slot of each schedule, one job per slot, exactly once.

What a schedule is and which slot is due are ``rowfleet.schedule``'s (pure); this module is
the loop that asks it at each tick and enqueues the job of a due slot in the transaction that
records the slot (``ScheduleStore.fire_slot``), so two schedulers of a project make one job
between them; and an operator's fire of a schedule now (``fire_now``), recorded alike.
Writes no SQL and holds no driver connection.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Iterable, NamedTuple

from rowfleet import names
from rowfleet.config import Config
from rowfleet.errors import ConfigError, StoreUnavailable
from rowfleet.job import iso
from rowfleet.schedule import SHORTEST_GRACE, Due, Schedule, due, manual, next_slot
from rowfleet.store import Store, open_store

log = logging.getLogger("rowfleet.scheduler")

BACKOFF_MAX = 10.0  # longest wait after failed ticks: longer would let on-time slots go stale
SHORTEST_WAIT = 0.005  # a wake-up a hair before a slot (clocks disagree) must not spin


# --- the service --------------------------------------------------------------------------


class Fired(NamedTuple):
    """A slot fired: the schedule, the slot (epoch seconds), its job and why it fired (one
    of ``job.FIRE_REASONS``)."""

    name: str
    slot: float
    job_id: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "slot": iso(self.slot), "job_id": self.job_id, "reason": self.reason}


class Scheduler:
    """Fires ``schedules`` for ``config.project``: one job per due slot, exactly once
    however many schedulers run. ``store`` defaults to one opened (and closed) here;
    ``clock`` (epoch seconds) to the store's, which on PostgreSQL is the database's, so
    schedulers on hosts with skewed clocks agree on what is due. ``tick`` is the longest
    wait between two looks (the loop also wakes at each slot); ``grace`` how late a slot
    may fire and still be on time (default ``max(2 * tick, 60)``)."""

    def __init__(self, config: Config, schedules: Iterable[Schedule], store: Store | None = None, *,
                 clock: Callable[[], float] | None = None, tick: float = 1.0, grace: float | None = None,
                 identity: str | None = None) -> None:
        self.schedules = _unique(schedules)
        if not names.RULES["seconds"].allows(tick):
            raise ConfigError(f"the scheduler's tick must be a positive number of seconds, got {tick!r}")
        grace = max(2 * tick, SHORTEST_GRACE) if grace is None else grace
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace < 0:
            raise ConfigError(f"the scheduler's grace must be a number of seconds, 0 or more, got {grace!r}")
        self.config, self.tick, self.grace = config, float(tick), float(grace)
        self._owns_store = store is None
        self.store = open_store(config) if store is None else store
        self.clock = self.store.clock if clock is None else clock
        self.identity = identity or f"{config.host}:{os.getpid()}"
        self._booting = True
        self._unreadable: dict[str, str] = {}  # the schedules skipped, each warned of once: why

    def run_once(self, now: float | None = None) -> list[Fired]:
        """Fire every schedule's due slot that nobody fired yet; what this scheduler fired.
        A schedule whose row cannot be read (plain SQL wrote its ``last_slot``) is skipped,
        with one warning, until the row is mended or deleted; the others fire."""
        now = self.clock() if now is None else now
        project = self.config.project
        rows = {row.name: row for row in self.store.schedule_rows(project)}
        fired = []
        for schedule in self.schedules:
            row = rows.get(schedule.name)
            if not self._readable(schedule.name, None if row is None else row.unreadable):
                continue
            fire = due(schedule, None if row is None else row.last_slot, now, self.grace, self._booting)
            if fire is None:
                continue
            done = fire_slot(self.store, project, schedule, fire, self.identity)
            if done is not None:
                fired.append(done)
        self._booting = False  # only once a whole tick got through: a failed first tick boots again
        return fired

    def _readable(self, name: str, problem: str | None) -> bool:
        """Whether schedule ``name``'s row can be read; a warning the first time it cannot
        (and again if what is wrong changes), a note once it can again."""
        if problem is None:
            if self._unreadable.pop(name, None) is not None:
                log.info("schedule %r: its row in table schedules can be read again; it fires as declared", name)
            return True
        if self._unreadable.get(name) != problem:
            self._unreadable[name] = problem
            log.warning("schedule %r does not fire: its row in table schedules cannot be read (%s); mend or "
                        "delete that row and it fires again", name, problem)
        return False

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set: at each slot, and at least every ``tick`` seconds."""
        log.info("scheduler %s: %d schedule(s) of project %r", self.identity, len(self.schedules),
                 self.config.project)
        failures = 0
        while not stop.is_set():
            try:
                wait, failures = self._tick(), 0
            except StoreUnavailable as exc:
                failures += 1
                wait = min(self.tick * 2 ** failures, BACKOFF_MAX)
                log.warning("scheduler tick failed (trying again in %.1fs): %s", wait, exc)
            stop.wait(wait)

    def _tick(self) -> float:
        """One look, logged; how long to wait before the next: until the next slot, at most a tick."""
        now, started = self.clock(), time.monotonic()
        for fired in self.run_once(now):
            log.info("schedule %s: slot %s fired (%s) as job %d", fired.name, iso(fired.slot), fired.reason,
                     fired.job_id)
        until_slot = next_slot(self.schedules, now) - now - (time.monotonic() - started)
        return min(max(until_slot, SHORTEST_WAIT), self.tick)

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> "Scheduler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fire_slot(store: Store, project: str, schedule: Schedule, fire: Due, fired_by: str) -> Fired | None:
    """Enqueue ``schedule``'s job for ``fire`` in ``project``, exactly once
    (``ScheduleStore.fire_slot``); what fired, or None when the slot (or a later one) had."""
    job = store.fire_slot(project, schedule.name, fire.slot, schedule.spec(project), fired_by, fire.reason)
    return None if job is None else Fired(schedule.name, fire.slot, job.id, fire.reason)


def fire_now(store: Store, project: str, schedule: Schedule, fired_by: str) -> Fired | None:
    """Fire ``schedule`` now, as an operator asks (``rowfleet fire NAME``): its slot is the
    store's clock now (the database's on PostgreSQL), its reason ``manual``, and it is fired
    as the scheduler's slots are, so two fires of one instant make one job. None when that
    slot or a later one had fired (a scheduler whose clock runs ahead)."""
    return fire_slot(store, project, schedule, manual(store.clock()), fired_by)


def _unique(schedules: Iterable[Schedule]) -> tuple[Schedule, ...]:
    found: dict[str, Schedule] = {}
    for schedule in schedules:
        if not isinstance(schedule, Schedule):
            raise TypeError(f"a scheduler takes Schedule objects, got {type(schedule).__name__}")
        if schedule.name in found and found[schedule.name] != schedule:
            raise ConfigError(f"two different schedules are named {schedule.name!r}: rename one")
        found[schedule.name] = schedule
    if not found:
        raise ConfigError("the scheduler has no schedules: give it a schedule file or an app that declares "
                          "@rowfleet.periodic functions")
    return tuple(found.values())
