"""Periodic schedules over named queries: fire a slot exactly once, read what fired.

Written once for both dialects, below the storage seam, as the schedules part of ``Store`` (over
``StoreCore``: ``transaction()``, ``reader()``, and ``_enqueue`` of the jobs part). A slot is fired in one
transaction that first holds the schedule's row (``schedule_hold``), so schedulers racing
for a schedule take turns, and each one sees the newest slot the others fired. The slot's
row in ``schedule_slots`` is the proof of firing: its primary key admits one row per
slot, and the job is inserted only by the transaction that wrote it.

Decides nothing about *when* a slot is due: that is ``rowfleet.services.scheduler``'s pure part.

A ``schedules`` row may come from anyone's plain SQL: it is read through ``job.decode_row``
(``ScheduleRow``), so a ``last_slot`` that no slot can be compared with (text, bytes, NaN or
an infinity) is named in ``unreadable`` and kept as stored, never compared: that schedule
alone does not fire until its row is mended or deleted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rowfleet.job import TICK, Job, JobSpec, decode_row
from rowfleet.store.core import StoreCore


@dataclasses.dataclass(frozen=True)
class ScheduleRow:
    """A schedule the database knows: its name, the newest slot fired (epoch seconds; None
    while a scheduler has held its row but not yet fired any), and what of its row cannot be
    read (then ``last_slot`` is the value as stored, as text), or None.

    >>> ScheduleRow.from_row({"name": "tick", "last_slot": 60.0})
    ScheduleRow(name='tick', last_slot=60.0, unreadable=None)
    >>> ScheduleRow.from_row({"name": "tick", "last_slot": float("inf")}).unreadable
    'column last_slot is not a finite number (a time): inf'
    """

    name: str
    last_slot: float | str | None
    unreadable: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> "ScheduleRow":
        values, problem = decode_row(row, "schedules", _SCHEDULE_KINDS)
        return cls(values["name"], values["last_slot"], problem)


_SCHEDULE_KINDS = {"name": "text", "last_slot": "time"}
_SLOT_KINDS = {"name": "text", "slot": "time", "job_id": "integer", "fired_at": "time", "fired_by": "text",
               "reason": "text"}


class ScheduleStore(StoreCore):
    """The periodic-schedule part of ``Store``."""

    def fire_slot(self, project: str, name: str, slot: float, spec: JobSpec, fired_by: str,
                  reason: str = TICK) -> Job | None:
        """Enqueue ``spec`` as schedule ``name``'s job for ``slot`` (epoch seconds), in one
        transaction with the slot's record; the job, or None when the slot is not this
        caller's to fire: another scheduler fired it, or a later slot (a scheduler whose
        clock runs ahead got there first, and a stale slot must not fire after it), or its
        row's ``last_slot`` cannot be read (``schedule_rows`` says why). ``reason`` (one of
        ``job.FIRE_REASONS``: why it fired) is written on the job and on the record,
        with the schedule's name and the slot on the job too."""
        if spec.project != project:
            raise ValueError(f"the job of schedule {name!r} is for project {spec.project!r}, not {project!r}")
        key = {"project": project, "name": name, "slot": slot}
        with self.transaction() as tx:
            held = ScheduleRow.from_row({"name": name,
                                         "last_slot": tx.one("fire_slot", project=project, name=name)["last_slot"]})
            if held.unreadable is not None or (held.last_slot is not None and held.last_slot >= slot):
                return None
            if tx.one("schedule_slot_insert", fired_by=fired_by, reason=reason, **key) is None:
                return None
            job = self._enqueue(tx, spec, {"schedule": name, "schedule_slot": slot, "fire_reason": reason})
            tx.run("schedule_slot_set_job", job_id=job.id, **key)
            tx.run("schedule_advance", **key)
            return job

    def schedule_rows(self, project: str) -> list[ScheduleRow]:
        """Each schedule of ``project`` the database knows, by name: its newest slot fired,
        and what of its row cannot be read."""
        return [ScheduleRow.from_row(row) for row in self.reader().all("last_slots", project=project)]

