"""The fleet read model: job counts, workers, switches and each project's services at one
moment, as typed values that every front end renders (``rowfleet status``, ``workers`` and
``broker``; the panel and ``/metrics`` render the same values).

``snapshot(store)`` is the one store call: ``Store.fleet_rows`` reads every row in one read
transaction, so the counts, workers and switches agree. Everything else here is pure: the
functions from those rows to the typed values take ``now`` and the rows, and apply the
rules where they live (``rowfleet.liveness`` judges silence by each worker's own cadence,
``rowfleet.control`` picks the switch in force, ``rowfleet.exitcodes`` says how a process
ended).

Counts stay cheap however many jobs are kept: live states (queued, running) are counted
exactly, finished ones only up to a cap (``COUNT_CAP``), past which a count reads
``10,000+`` (``Count.capped``).

Imports the pure rules and ``rowfleet.job``; takes the store as an argument and never
imports it at load time, nor anything of the command line or the panel.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterable

from rowfleet import control, exitcodes, liveness
from rowfleet.control import Switch
from rowfleet.job import decode_column, iso

if TYPE_CHECKING:
    from rowfleet.store import Store
    from rowfleet.store.fleet import FleetRows

# Finished jobs are counted up to this many per (project, queue, state): past it a count
# reads "10,000+", so a listing never walks a million completed rows.
COUNT_CAP = 10_000

# How a worker's row reads when it is no longer doing what it last beat.
SILENT = "SILENT"    # flagged dead by the sweep, or past its own staleness
STOPPED = "stopped"  # stopped cleanly; a process whose supervisor saw its exit reads as that exit


@dataclasses.dataclass(frozen=True)
class Count:
    """How many jobs of a project's queue are in a state; ``capped``: at least ``n``."""

    project: str
    queue: str
    state: str
    n: int
    capped: bool = False

    def text(self) -> str:
        """
        >>> Count("", "q", "completed", 10_000, capped=True).text(), Count("", "q", "queued", 12_345).text()
        ('10,000+', '12345')
        """
        return f"{self.n:,}+" if self.capped else str(self.n)

    def to_dict(self) -> dict[str, Any]:
        """
        >>> Count("", "q", "completed", 3, capped=True).to_dict()
        {'project': '', 'queue': 'q', 'state': 'completed', 'n': 3, 'capped': True}
        """
        data: dict[str, Any] = {"project": self.project, "queue": self.queue, "state": self.state, "n": self.n}
        if self.capped:
            data["capped"] = True
        return data


@dataclasses.dataclass(frozen=True)
class Progress:
    """What a busy worker's job last reported: ``fraction`` (0..1, or a value from plain SQL
    that is no number, as stored), its message, and when (epoch seconds)."""

    fraction: Any
    message: Any
    at: Any

    def to_dict(self) -> dict[str, Any]:
        return {"fraction": self.fraction, "message": self.message, "at": iso(self.at)}


@dataclasses.dataclass(frozen=True)
class Worker:
    """A worker's heartbeat row, with what it means now: ``state`` is what it beat
    (serving, draining, parked), ``actual`` what it is doing (``actual_state``), ``desired``
    what the switch in force (``switch``, None when none holds it) wants, ``age`` seconds
    since its last beat, and its current job's ``progress``. ``heartbeat`` and ``lease`` are
    the worker's own cadence, by which its silence is judged."""

    worker_id: str
    project: str
    host: str
    queue: str
    pid: int
    state: str
    current_job: int | None
    started_at: float
    last_seen: float
    stopped_at: float | None
    flagged_dead_at: float | None
    exit_code: int | None
    heartbeat: float
    lease: float
    actual: str
    desired: str
    switch: Switch | None
    age: float | None
    progress: Progress | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO-8601, the age in seconds (3 decimals)."""
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        for key in ("started_at", "last_seen", "stopped_at", "flagged_dead_at"):
            data[key] = iso(data[key])
        data["switch"] = None if self.switch is None else self.switch.to_dict()
        data["progress"] = None if self.progress is None else self.progress.to_dict()
        return data


@dataclasses.dataclass(frozen=True)
class Services:
    """Whether a project is served: its live orchestrators, and the outbox events waiting to
    be drained with the age of the oldest (None when none waits)."""

    project: str
    orchestrators: int
    outbox_waiting: int
    outbox_oldest_age: float | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Project:
    """One project's part of a snapshot: its counts, its workers and its services."""

    name: str
    counts: tuple[Count, ...]
    workers: tuple[Worker, ...]
    services: Services

    def queues(self) -> tuple[str, ...]:
        """The queues its counts name, sorted."""
        return tuple(sorted({count.queue for count in self.counts}))

    def tally(self, queue: str) -> dict[str, Count]:
        """The counts of one queue, by state."""
        return {count.state: count for count in self.counts if count.queue == queue}


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The fleet at one moment (``at``): counts of every project's queues, the listed workers,
    every switch, and each project's services; finished states counted up to ``cap``."""

    at: float
    cap: int
    counts: tuple[Count, ...]
    workers: tuple[Worker, ...]
    switches: tuple[Switch, ...]
    services: tuple[Services, ...]

    def for_project(self, project: str) -> "Snapshot":
        """The part one project sees: its counts, workers and services, and the switches that
        may hold its workers (its own and those for every project)."""
        return dataclasses.replace(
            self, counts=tuple(c for c in self.counts if c.project == project),
            workers=tuple(w for w in self.workers if w.project == project),
            switches=tuple(s for s in self.switches if s.project in (project, control.ANY)),
            services=tuple(s for s in self.services if s.project == project))

    def projects(self) -> tuple[Project, ...]:
        """Every project that has counts, workers or services, by name."""
        names = {c.project for c in self.counts} | {w.project for w in self.workers} | \
            {s.project for s in self.services}
        served = {s.project: s for s in self.services}
        return tuple(Project(name, tuple(c for c in self.counts if c.project == name),
                             tuple(w for w in self.workers if w.project == name),
                             served.get(name, Services(name, 0, 0, None))) for name in sorted(names))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``projects`` holds each project's services."""
        return {"at": iso(self.at), "count_cap": self.cap, "counts": [c.to_dict() for c in self.counts],
                "projects": [s.to_dict() for s in self.services], "workers": [w.to_dict() for w in self.workers],
                "switches": [s.to_dict() for s in self.switches]}


def snapshot(store: "Store", *, cap: int = COUNT_CAP, listed_for: float | None = liveness.LISTED_FOR) -> Snapshot:
    """The fleet now, from one store read: workers seen in the last ``listed_for`` seconds
    and every live one (every row with None); finished jobs counted up to ``cap``."""
    return snapshot_of(store.fleet_rows(cap, listed_for), cap)


def snapshot_of(rows: "FleetRows", cap: int) -> Snapshot:
    """The typed snapshot of what ``Store.fleet_rows`` read."""
    switches = tuple(rows.switches)
    return Snapshot(at=rows.now, cap=cap, counts=tuple(count_of(row, cap) for row in rows.counts),
                    workers=tuple(worker_of(row, switches, rows.now) for row in rows.workers),
                    switches=switches, services=tuple(services_of(row, rows.now) for row in rows.services))


def count_of(row: Any, cap: int) -> Count:
    """A counts row as a ``Count``: one counted only up to the cap (not ``exact``) that found
    more than ``cap`` jobs reads as ``cap``, capped.

    >>> count_of({"project": "", "queue": "q", "state": "completed", "exact": 0, "n": 4}, 3)
    Count(project='', queue='q', state='completed', n=3, capped=True)
    >>> count_of({"project": "", "queue": "q", "state": "queued", "exact": 1, "n": 4}, 3).capped
    False
    """
    over = not row["exact"] and row["n"] > cap
    return Count(row["project"], row["queue"], row["state"], cap if over else row["n"], over)


def worker_of(row: Any, switches: Iterable[Switch], now: float) -> Worker:
    """A worker's row (with its job's ``job_progress*`` columns) as a ``Worker`` at ``now``."""
    held = control.in_force(switches, row["project"], row["host"], row["queue"])
    last_seen = _seconds(row["last_seen"])
    return Worker(
        worker_id=row["worker_id"], project=row["project"], host=row["host"], queue=row["queue"], pid=row["pid"],
        state=row["state"], current_job=row["current_job"], started_at=row["started_at"],
        last_seen=row["last_seen"], stopped_at=row["stopped_at"], flagged_dead_at=row["flagged_dead_at"],
        exit_code=row["exit_code"], heartbeat=row["heartbeat"], lease=row["lease"],
        actual=actual_state(row, now), desired=control.ON if held is None else control.OFF, switch=held,
        age=None if last_seen is None else round(now - last_seen, 3), progress=progress_of(row))


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
    last_seen, heartbeat = _seconds(row["last_seen"]), _seconds(row["heartbeat"])
    if row["flagged_dead_at"] or last_seen is None or heartbeat is None or liveness.silent(last_seen, heartbeat, now):
        return SILENT
    return row["state"]


def progress_of(row: Any) -> Progress | None:
    """What the worker's current job last reported, or None (no job, or no report yet). The
    job's columns are decoded as every listing decodes them: a bad value is shown as stored.

    >>> progress_of({"job_progress": 0.5, "job_progress_message": "half", "job_progress_at": 7.0})
    Progress(fraction=0.5, message='half', at=7.0)
    >>> progress_of({"job_progress": None, "job_progress_message": None, "job_progress_at": None}) is None
    True
    """
    if row["job_progress_at"] is None:
        return None
    return Progress(*(decode_column(name, row[f"job_{name}"])[0]
                      for name in ("progress", "progress_message", "progress_at")))


def services_of(row: Any, now: float) -> Services:
    """A ``project_services`` row as ``Services`` at ``now``.

    >>> services_of({"project": "a", "orchestrators": 1, "outbox_waiting": 2, "outbox_oldest": 90.0}, 100.0)
    Services(project='a', orchestrators=1, outbox_waiting=2, outbox_oldest_age=10.0)
    """
    oldest = row["outbox_oldest"]
    return Services(row["project"], row["orchestrators"], row["outbox_waiting"],
                    None if oldest is None else round(now - oldest, 3))


def _seconds(value: Any) -> float | None:
    """A time or a duration as a number, or None when the row holds something else."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
