"""The module-level Python API: enqueue and read jobs with the configured database.

Each thread gets its own store (connections are not shared across threads), opened on
first use with ``config.current()`` and reopened when ``configure()`` changes it.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Iterable

from rowfleet import config as _config
from rowfleet.job import Job, JobSpec
from rowfleet.store import Store, open_store
from rowfleet.worker import Worker

_local = threading.local()


def default_store() -> Store:
    """This thread's store for the current configuration."""
    current = _config.current()
    cached = getattr(_local, "store", None)
    if cached is not None and cached[0] is current and cached[1] == os.getpid():
        return cached[2]
    if cached is not None and cached[1] == os.getpid():
        cached[2].close()
    opened = open_store(current)
    _local.store = (current, os.getpid(), opened)
    return opened


def init() -> int:
    """Create or upgrade the schema of the configured database (like ``rowfleet init``);
    returns the schema version. Idempotent and safe to run from several processes."""
    with open_store(_config.current(), create=True) as created:
        return created.migrate()


def work(queue: str = "default", *, burst: bool = False) -> int:
    """Run a worker in this process on the configured database until stopped, or, with
    ``burst``, until nothing is due; returns how many jobs it ran. Handlers must be
    registered (imported) first."""
    worker = Worker(_config.current(), queue, burst=burst)
    worker.run()
    return worker.jobs_run


def enqueue(task: Any, args: Any = None, *, queue: str | None = None, priority: int = 0,
            run_next: bool = False, delay: float = 0.0, run_at: float | None = None,
            key: str | None = None, max_attempts: int = 5, project: str | None = None,
            conn: Any = None) -> Job:
    """Enqueue one job and return it (``job.id``); see the README for each option.

    ``task`` is a task name or a ``@rowfleet.task`` function. With ``key``, a second
    enqueue in the same project returns the first job and creates nothing. With ``conn``
    (your own ``sqlite3`` connection to the same database) the job is inserted in your
    transaction: it commits with your domain write, or not at all.
    """
    spec = _spec(task, args, queue, priority, run_next, delay, run_at, key, max_attempts, project)
    return default_store().enqueue(spec, conn=conn)


def enqueue_many(task: Any, args_list: Iterable[Any], *, queue: str | None = None, priority: int = 0,
                 run_next: bool = False, delay: float = 0.0, max_attempts: int = 5,
                 project: str | None = None, conn: Any = None) -> int:
    """Enqueue one job per item of ``args_list`` in one transaction (all or none); returns
    how many. Faster than a loop of ``enqueue`` by far; idempotency keys are not taken."""
    spec = _spec(task, None, queue, priority, run_next, delay, None, None, max_attempts, project)
    return default_store().enqueue_many(spec, args_list, conn=conn)


def get_job(job_id: int, *, project: str | None = None) -> Job:
    """The job with this id in the configured project (or ``NotFound``)."""
    return default_store().get_job(job_id, _project(project))


def _spec(task: Any, args: Any, queue: str | None, priority: int, run_next: bool, delay: float,
          run_at: float | None, key: str | None, max_attempts: int, project: str | None) -> JobSpec:
    name = getattr(task, "name", task)
    default_queue = getattr(task, "queue", "default")
    return JobSpec(task=name, args=args, queue=queue or default_queue, project=_project(project),
                   priority=priority, run_next=run_next, delay=delay, run_at=run_at, key=key,
                   max_attempts=max_attempts)


def _project(project: str | None) -> str:
    return _config.current().project if project is None else project
