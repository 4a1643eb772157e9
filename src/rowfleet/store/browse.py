"""Reads for browsing the fleet (the panel's pages and their JSON): a job by id in any
project, job search in bounded windows with keyset paging, the jobs one bulk action would
touch, finished jobs per minute, and the jobs that ran on hosts lately. Written once for
both dialects as the browsing part of ``Store``.

Every read is bounded however many rows are kept: a search walks at most ``window`` ids
per page (``JobPage.floor`` says where it stopped, and the next page goes on from there),
a bulk selection at most its cap per project, the minute counts and the ticks only the
last hour's finished jobs (``jobs_finished``), and running jobs come from ``jobs_lease``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from rowfleet.errors import NotFound
from rowfleet.job import Job
from rowfleet.store.core import StoreCore
from rowfleet.store.runs import Run
from rowfleet.store.telemetry import oldest_queued

SEARCH_WINDOW = 100_000  # ids one page of a search walks at most


@dataclasses.dataclass(frozen=True)
class JobFilter:
    """What a job search matches: each field None (anything) or the value a job must have;
    ``needle`` is a substring of the job's args as stored (JSON text)."""

    project: str | None = None
    state: str | None = None
    queue: str | None = None
    task: str | None = None
    host: str | None = None
    model: str | None = None
    needle: str | None = None

    def params(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class JobPage:
    """A page of a search: up to ``limit`` ``jobs``, newest first, found among the ids from
    ``floor`` up to (not including) ``before``. A full page stops at its last job; a page
    that is not full searched its whole window."""

    jobs: tuple[Job, ...]
    before: int
    floor: int
    limit: int

    @property
    def full(self) -> bool:
        return len(self.jobs) >= self.limit

    @property
    def next_before(self) -> int | None:
        """Where the next page starts (ids below it), or None: no older id is left."""
        if self.full:
            return self.jobs[-1].id
        return self.floor if self.floor > 1 else None

    @property
    def searched_to(self) -> int:
        """The oldest id this page searched."""
        return self.jobs[-1].id if self.full else self.floor


@dataclasses.dataclass(frozen=True, slots=True)  # slots: the Flight Deck keeps thousands
class EndedJob:
    """A job as the Flight Deck ticks it: where it ran, when it started and ended."""

    id: int
    project: str
    queue: str
    task: str
    state: str
    host: str | None
    started_at: float | None
    finished_at: float | None

    @classmethod
    def from_row(cls, row: Any) -> "EndedJob":
        return cls(row["id"], row["project"], row["queue"], row["task"], row["state"], row["host"],
                   row["started_at"], row["finished_at"])


class BrowseStore(StoreCore):
    """The browsing part of ``Store``: bounded reads for the panel."""

    def find_job(self, job_id: int) -> Job:
        """The job ``job_id`` of whichever project holds it, or ``NotFound``."""
        row = self.reader().one("find_job", id=job_id)
        if row is None:
            raise NotFound(f"no job {job_id}")
        return Job.from_row(row)

    def search_jobs(self, match: JobFilter, before: int | None = None, limit: int = 50,
                    window: int = SEARCH_WINDOW) -> JobPage:
        """Up to ``limit`` jobs matching ``match`` with ids below ``before`` (None: all),
        newest first, searching at most ``window`` ids down from there."""
        tx = self.reader()
        if before is None:
            newest = tx.one("newest_job_id")["id"]
            before = (newest or 0) + 1
        floor = max(1, before - window)
        rows = tx.all("search_jobs", before=before, floor=floor, limit=limit, **match.params())
        return JobPage(tuple(Job.from_row(row) for row in rows), before, floor, limit)

    def jobs_in_state(self, projects: Iterable[str], match: JobFilter, cap: int) -> list[tuple[str, int]]:
        """(project, id) of up to ``cap`` jobs of ``projects`` in ``match.state`` that match
        the rest of ``match``, in no order: what a bulk action would touch."""
        tx = self.reader()
        found: list[tuple[str, int]] = []
        for project in projects:
            if len(found) >= cap:
                break
            params = match.params() | {"project": project, "limit": cap - len(found)}
            found += [(project, row["id"]) for row in tx.all("jobs_in_state", **params)]
        return found

    def finished_per_minute(self, since: float) -> list[dict[str, Any]]:
        """Jobs finished since ``since``: rows of project, queue, state, minute (epoch
        minutes) and n."""
        return [dict(row) for row in self.reader().all("finished_per_minute", since=since)]

    def jobs_ended_since(self, since: float, limit: int) -> list[EndedJob]:
        """Up to ``limit`` jobs that ran on a host and finished since ``since``, newest first."""
        return [EndedJob.from_row(row) for row in self.reader().all("jobs_ended_since", since=since, limit=limit)]

    def jobs_running(self) -> list[EndedJob]:
        """Every running job, with its host and start."""
        return sorted((EndedJob.from_row(row) for row in self.reader().all("jobs_running")), key=lambda job: job.id)

    def oldest_queued(self, queues: Iterable[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
        """Per (project, queue) with queued jobs, its oldest one's ``created_at`` and ``run_at``."""
        return oldest_queued(self.reader(), queues)

    def find_run(self, run_id: int) -> Run:
        """The run ``run_id`` of whichever project holds it, with its nodes, or ``NotFound``."""
        row = self.reader().one("run_project", id=run_id)
        if row is None:
            raise NotFound(f"no run {run_id}")
        return self.get_run(run_id, row["project"])

    def search_runs(self, project: str | None, state: str | None = None, before: int | None = None,
                    limit: int = 50) -> list[Run]:
        """Up to ``limit`` runs with ids below ``before``, newest first, without their nodes."""
        rows = self.reader().all("search_runs", project=project, state=state,
                                 before=before if before is not None else 2 ** 62, limit=limit)
        return [Run.from_row(row) for row in rows]
