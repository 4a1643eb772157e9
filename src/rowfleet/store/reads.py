"""The operator's reads (``OperatorReads``, reached as ``store.reads``): what the command
line, the panel and the read models (``rowfleet.views``) show people, kept apart from the
statements the engine runs (the worker, the orchestrator, the scheduler, the sampler), which
are ``Store``'s own methods. Written once for both dialects over the store's reader.

Browsing (the panel's pages and their JSON): a job or a run by id in any project, job
search in bounded windows with keyset paging, the jobs one bulk action would touch,
finished jobs per minute, and the jobs that ran on hosts lately. Lists and detail pages:
jobs, runs, a job's history, a run's dispatch events, submissions, schedules' slots, switches and their
log, workers. The fleet at one moment (``fleet_rows``, for ``rowfleet.views.snapshot``),
counts, the model groups, a job's place in its queue, and the host samples the hosts views
draw.

Every read is bounded however many rows are kept: a search walks at most ``window`` ids
per page (``JobPage.floor`` says where it stopped, and the next page goes on from there),
a bulk selection at most its cap per project, the minute counts and the ticks only the
last hour's finished jobs (``jobs_finished``), and running jobs come from ``jobs_state``, one range per project.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ContextManager, Iterable, Protocol

from rowfleet import job as jobs
from rowfleet import liveness
from rowfleet.control import Switch
from rowfleet.errors import NotFound
from rowfleet.job import QUEUED, RUNNING, Event, Job, decode_row
from rowfleet.store.fleet import FleetRows
from rowfleet.store.jobs import DEMAND_GROUPS
from rowfleet.store.runs import Run
from rowfleet.store.schedules import _SLOT_KINDS, ScheduleRow
from rowfleet.store.submissions import Submission
from rowfleet.store.telemetry import DETAIL, HostSample, _check_tier, oldest_queued, sample_of
from rowfleet.store.core import Tx

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


class ReadSource(Protocol):
    """What the operator's reads need of a store (``Store`` has it all): its reader, one read
    transaction, a run by id and the schedules' rows."""

    def reader(self) -> Tx: ...

    def _one_read(self) -> ContextManager[Tx]: ...

    def get_run(self, run_id: int, project: str) -> Run: ...

    def schedule_rows(self, project: str) -> list[ScheduleRow]: ...


class OperatorReads:
    """The operator's reads of one store (``store.reads``): each a read through the store's
    reader, never a write, never a statement the engine runs."""

    def __init__(self, store: ReadSource) -> None:
        self._store = store

    def find_job(self, job_id: int) -> Job:
        """The job ``job_id`` of whichever project holds it, or ``NotFound``."""
        row = self._store.reader().one("find_job", id=job_id)
        if row is None:
            raise NotFound(f"no job {job_id}")
        return Job.from_row(row)

    def search_jobs(self, match: JobFilter, before: int | None = None, limit: int = 50,
                    window: int = SEARCH_WINDOW) -> JobPage:
        """Up to ``limit`` jobs matching ``match`` with ids below ``before`` (None: all),
        newest first, searching at most ``window`` ids down from there."""
        tx = self._store.reader()
        if before is None:
            newest = tx.one("newest_job_id")["id"]
            before = (newest or 0) + 1
        floor = max(1, before - window)
        rows = tx.all("search_jobs", before=before, floor=floor, limit=limit, **match.params())
        return JobPage(tuple(Job.from_row(row) for row in rows), before, floor, limit)

    def jobs_in_state(self, projects: Iterable[str], match: JobFilter, cap: int) -> list[tuple[str, int]]:
        """(project, id) of up to ``cap`` jobs of ``projects`` in ``match.state`` that match
        the rest of ``match``, in no order: what a bulk action would touch."""
        tx = self._store.reader()
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
        return [dict(row) for row in self._store.reader().all("finished_per_minute", since=since)]

    def jobs_ended_since(self, since: float, limit: int) -> list[EndedJob]:
        """Up to ``limit`` jobs that ran on a host and finished since ``since``, newest first."""
        return [EndedJob.from_row(row) for row in self._store.reader().all("jobs_ended_since", since=since, limit=limit)]

    def jobs_running(self) -> list[EndedJob]:
        """Every running job, with its host and start."""
        return sorted((EndedJob.from_row(row) for row in self._store.reader().all("jobs_running")), key=lambda job: job.id)

    def oldest_queued(self, queues: Iterable[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
        """Per (project, queue) with queued jobs, its oldest one's ``created_at`` and ``run_at``."""
        return oldest_queued(self._store.reader(), queues)

    def find_run(self, run_id: int) -> Run:
        """The run ``run_id`` of whichever project holds it, with its nodes, or ``NotFound``."""
        row = self._store.reader().one("run_project", id=run_id)
        if row is None:
            raise NotFound(f"no run {run_id}")
        return self._store.get_run(run_id, row["project"])

    def search_runs(self, project: str | None, state: str | None = None, before: int | None = None,
                    limit: int = 50) -> list[Run]:
        """Up to ``limit`` runs with ids below ``before``, newest first, without their nodes."""
        rows = self._store.reader().all("search_runs", project=project, state=state,
                                 before=before if before is not None else 2 ** 62, limit=limit)
        return [Run.from_row(row) for row in rows]

    # --- jobs: lists, a history, counts, a place in the queue ---------------------------

    def list_jobs(self, project: str, state: str | None = None, queue: str | None = None,
                  limit: int = 50) -> list[Job]:
        rows = self._store.reader().all("list_jobs", project=project, state=state, queue=queue, limit=limit)
        return [Job.from_row(row) for row in rows]

    def events(self, job_id: int) -> list[Event]:
        """The job's history, in time order: its event rows, and the claim and completion of
        the attempt its row holds (which are no rows: ``jobs.attempt_events``)."""
        tx = self._store.reader()
        stored = [Event.from_row(row) for row in tx.all("events", job_id=job_id)]
        attempt = tx.one("job_holder", id=job_id)
        return jobs.attempt_events(job_id, stored, dict(attempt)) if attempt is not None else stored

    def counts(self) -> list[dict[str, Any]]:
        return [dict(row) for row in self._store.reader().all("counts")]

    def jobs_ahead(self, job: Job, cap: int = 10_000) -> tuple[int, bool]:
        """How many due queued jobs of ``job``'s (project, queue) a claim takes before it, in
        claim order (run-next, priority, due order, id), counted up to ``cap``: ``(n, capped)``,
        where capped means more than ``n``. Read with the job's sort values as given (one that
        plain SQL left undecoded is bound as stored: it compares, it never raises)."""
        run_next = int(job.run_next) if isinstance(job.run_next, bool) else job.run_next
        row = self._store.reader().one("jobs_ahead", project=job.project, queue=job.queue, run_next=run_next,
                                priority=job.priority, run_at=job.run_at, id=job.id, cap=cap)
        return min(row["n"], cap), row["n"] > cap

    def model_demand(self, project: str, limit: int = DEMAND_GROUPS) -> list[dict[str, Any]]:
        """The project's queued and running model jobs in groups, one per (``queue``,
        ``model``, the jobs' own ``vram_mb``, ``state``, ``unplaceable`` reason), each with
        its count ``n``, its oldest ``created_at`` (``oldest``) and its earliest
        ``unplaceable_since``: ``limit`` groups at most, never a row per job."""
        return [dict(row) for row in self._store.reader().all("model_demand", project=project, limit=limit)]

    # --- runs and schedules ------------------------------------------------------------

    def list_runs(self, project: str, state: str | None = None, limit: int = 50) -> list[Run]:
        """Runs, newest first, without their nodes."""
        rows = self._store.reader().all("list_runs", project=project, state=state, limit=limit)
        return [Run.from_row(row) for row in rows]

    def dispatch_events(self, run_id: int) -> list[dict[str, Any]]:
        return [dict(row) for row in self._store.reader().all("dispatch_events", run_id=run_id)]

    def list_submissions(self, project: str, run_id: int | None = None, state: str | None = None,
                         limit: int = 50) -> list[Submission]:
        """Submissions (answers to input nodes), newest first: of one run or all, in one state or any."""
        rows = self._store.reader().all("list_submissions", project=project, run_id=run_id, state=state, limit=limit)
        return [Submission.from_row(row) for row in rows]

    def get_submission(self, submission_id: int, project: str) -> Submission:
        row = self._store.reader().one("get_submission", id=submission_id, project=project)
        if row is None:
            raise NotFound(f"no submission {submission_id}" + (f" in project {project!r}" if project else ""))
        return Submission.from_row(row)

    def fired_slots(self, project: str, name: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """The slots fired, newest first (of every schedule, or of ``name``): each with its
        schedule's name, the slot, the job enqueued, when and by whom, and what of its row
        cannot be read (``unreadable``: None for a sound one; such a value is kept as text)."""
        rows = self._store.reader().all("fired_slots", project=project, name=name, limit=limit)
        return [{**values, "unreadable": problem} for values, problem in
                (decode_row(row, "schedule_slots", _SLOT_KINDS) for row in rows)]

    def last_slots(self, project: str) -> dict[str, float | str | None]:
        """Each schedule of ``project`` the database knows: the newest slot fired (None
        while a scheduler has held its row but not yet fired any; as stored, as text, when
        it cannot be read: ``schedule_rows`` says why)."""
        return {row.name: row.last_slot for row in self._store.schedule_rows(project)}

    # --- the fleet: workers, switches, services, one consistent moment ------------------

    def workers(self, since: float) -> list[dict[str, Any]]:
        """Live workers, and every worker row seen since ``since`` (stopped, dead or silent)."""
        return [dict(row) for row in self._store.reader().all("workers", since=since,
                                                       missed_beats=liveness.MISSED_BEATS)]

    def switches(self) -> list[Switch]:
        """Every switch row, of every project."""
        return [Switch.from_row(row) for row in self._store.reader().all("switches")]

    def switch_log(self, host: str | None = None, limit: int = 50) -> list[Switch]:
        """The newest switches written through rowfleet, newest first: of ``host`` (and
        every-host rows) or of all hosts."""
        return [Switch.from_row(row, "worker_control_log")
                for row in self._store.reader().all("switch_log", host=host, limit=limit)]

    def project_services(self) -> list[dict[str, Any]]:
        """Per project: how many live orchestrators serve it, how many outbox events wait to
        be drained, and when the oldest of them was written (None when none waits)."""
        return [dict(row) for row in self._store.reader().all("project_services", missed_beats=liveness.MISSED_BEATS)]

    def fleet_rows(self, cap: int, listed_for: float | None, workers_only: bool = False) -> FleetRows:
        """Everything ``rowfleet.views.snapshot`` shows, read in one read transaction so that the
        counts, workers, switches and services agree: workers seen in the last
        ``listed_for`` seconds (every row with None) and live ones; finished jobs counted
        up to ``cap`` (``cap + 1`` when there are more), live ones exactly. With
        ``workers_only``, the workers and switches alone (no count, service or unplaceable
        row), for a reader that shows what runs where."""
        with self._store._one_read() as tx:
            now = tx.one("fleet_rows")["now"]
            since = 0.0 if listed_for is None else now - listed_for
            workers = [dict(row) for row in tx.all("fleet_rows_workers", since=since,
                                                   missed_beats=liveness.MISSED_BEATS)]
            switches = [Switch.from_row(row) for row in tx.all("switches")]
            if workers_only:
                return FleetRows(now=now, counts=[], workers=workers, switches=switches, services=[], unplaceable=[])
            return FleetRows(
                now=now,
                counts=[dict(row) for row in tx.all("fleet_rows_counts", cap=cap, queued=QUEUED, running=RUNNING)],
                workers=workers, switches=switches,
                services=[dict(row) for row in tx.all("project_services", missed_beats=liveness.MISSED_BEATS)],
                unplaceable=[dict(row) for row in tx.all("fleet_rows_unplaceable")])

    # --- the hosts: samples the hosts views draw ------------------------------------------

    def latest_host_samples(self) -> list[HostSample]:
        """Each host's newest detail row, by host."""
        return [sample_of(row) for row in self._store.reader().all("latest_host_samples")]

    def samples_since(self, tier: str, since: float) -> list[HostSample]:
        """Every host's rows of ``tier`` from ``since`` on, by host, oldest first."""
        _check_tier(tier)
        return [sample_of(row) for row in self._store.reader().all("samples_since", tier=tier, since=float(since))]

    def sampled_hosts(self, tier: str = DETAIL, since: float = 0.0) -> list[dict[str, Any]]:
        """Every host with rows of ``tier`` since ``since``: host, first_at, last_at, n."""
        _check_tier(tier)
        return [dict(row) for row in self._store.reader().all("sampled_hosts", tier=tier, since=float(since))]

    def sampler_of(self, host: str) -> dict[str, Any] | None:
        row = self._store.reader().one("host_sampler", host=host)
        return dict(row) if row is not None else None
