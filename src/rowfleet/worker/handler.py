"""What a task's handler calls while it runs: the job it is running, whether an operator
cancelled it, and its progress. Each reads what the worker running the handler set for it
(context variables, so a handler's own threads started with a copied context see them too);
outside a worker they answer "none" and do nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterator

from rowfleet.errors import ConfigError
from rowfleet.job import Job

_current_job: contextvars.ContextVar[Job | None] = contextvars.ContextVar("rowfleet_job", default=None)
_reporter: contextvars.ContextVar[Callable[[float | None, str | None], None] | None] = \
    contextvars.ContextVar("rowfleet_progress", default=None)
_cancel_check: contextvars.ContextVar[Callable[[], bool] | None] = \
    contextvars.ContextVar("rowfleet_cancel", default=None)


def current_job() -> Job | None:
    """The job the calling handler is running, or None outside a handler."""
    return _current_job.get()


def cancel_requested() -> bool:
    """Inside a handler: has an operator cancelled this job (``rowfleet cancel JOB``)? A
    handler that runs long may check it and return (or raise ``rowfleet.Cancel``); the job
    ends cancelled either way, its result discarded. One that does not return within
    ``cancel_grace`` seconds has its worker process ended. False outside a worker."""
    check = _cancel_check.get()
    return check is not None and check()


def progress(fraction: float | None = None, message: str | None = None) -> None:
    """Report progress from inside a handler: ``fraction`` done (0 to 1) and a message,
    shown by ``rowfleet job``. It is also the handler's heartbeat: once a job has reported
    progress, going quiet for the stall window makes the watchdog look at it. Outside a
    worker (a handler called directly) it does nothing."""
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                 or not 0 <= fraction <= 1):
        raise ConfigError(f"progress must be a fraction from 0 to 1, got {fraction!r}")
    if message is not None and not isinstance(message, str):
        raise ConfigError(f"a progress message must be a string, got {type(message).__name__}")
    report = _reporter.get()
    if report is not None:
        report(None if fraction is None else float(fraction), message)


@contextlib.contextmanager
def running(job: Job, report: Callable[[float | None, str | None], None]) -> Iterator[None]:
    """While the handler of ``job`` runs: ``current_job()`` is it, ``progress()`` goes to ``report``."""
    job_token = _current_job.set(job)
    report_token = _reporter.set(report)
    try:
        yield
    finally:
        _reporter.reset(report_token)
        _current_job.reset(job_token)


@contextlib.contextmanager
def cancel_checked(check: Callable[[], bool]) -> Iterator[None]:
    """While a job is in hand: ``cancel_requested()`` asks ``check``."""
    token = _cancel_check.set(check)
    try:
        yield
    finally:
        _cancel_check.reset(token)
