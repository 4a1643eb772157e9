"""The storm's handlers: tasks that record every execution, so the checker can see overlaps.

Loaded by the built archive's workers (``--app chaos_tasks``, copied into the storm's
folder), never by the chaos tool itself. Each execution appends a ``start`` and an ``end``
line (job id, lease token, pid, time: ``at`` by the monotonic clock, which the storm's log
shares and no step of the wall clock moves; ``wall`` for people) to its own process's file
under ``$CHAOS_RECORDS``,
each line fsync'd before the handler goes on, so a SIGKILL loses at most a torn last line
and a record on disk always happened. Imports rowfleet (from the archive) and the stdlib.
"""

from __future__ import annotations

import json
import os
import time

import rowfleet

RECORDS = os.environ.get("CHAOS_RECORDS", "records")
_file: dict[int, int] = {}  # pid -> descriptor: a forked or restarted child opens its own


def _record(event: str) -> dict:
    job = rowfleet.current_job()
    line = {"job": job.id, "token": job.lease_token, "pid": os.getpid(), "event": event, "at": time.monotonic(),
            "wall": time.time()}
    fd = _file.get(os.getpid())
    if fd is None:
        fd = _file[os.getpid()] = os.open(os.path.join(RECORDS, f"{os.getpid()}.jsonl"),
                                          os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (json.dumps(line) + "\n").encode())
    os.fsync(fd)
    return line


def _execute(ms: float, value: object = None) -> dict:
    """Record the start, take ``ms`` milliseconds, record the end; the result names the token."""
    started = _record("start")
    time.sleep(ms / 1000.0)
    _record("end")
    return {"token": started["token"], "pid": started["pid"], "value": value}


@rowfleet.task(name="chaos.work")
def work(n: int = 0, ms: float = 50.0) -> dict:
    """A standalone job of the storm."""
    return _execute(ms, n)


def _ran_before(job_id: int) -> bool:
    """Whether any process has recorded a start of ``job_id`` (this one's is not yet written)."""
    mark = f'"job": {job_id}, '
    for name in os.listdir(RECORDS):
        with open(os.path.join(RECORDS, name)) as handle:
            if any(mark in line and '"event": "start"' in line for line in handle):
                return True
    return False


@rowfleet.task(name="chaos.hold")
def hold(first_ms: float = 10_000.0, ms: float = 50.0) -> dict:
    """A job held long on its first execution (so a fault lands while it runs), short after."""
    return _execute(ms if _ran_before(rowfleet.current_job().id) else first_ms)


@rowfleet.task(name="chaos.split")
def split(width: int = 3, ms: float = 50.0) -> dict:
    """A run's first node: the items its map node fans out over."""
    result = _execute(ms)
    result["items"] = list(range(width))
    return result


@rowfleet.task(name="chaos.piece")
def piece(item: int = 0, ms: float = 50.0) -> dict:
    """One item of a run's map node."""
    return _execute(ms, item)


@rowfleet.task(name="chaos.join")
def join(pieces: list | None = None, ms: float = 50.0) -> dict:
    """A run's last node: how many pieces reached it."""
    return _execute(ms, len(pieces or []))
