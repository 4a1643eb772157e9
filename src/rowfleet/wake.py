"""Wake-ups without a broker on SQLite: doorbells rung after rowfleet's commits, and a
watch on the database files for everyone else's.

SQLite has no NOTIFY. Polling ``PRAGMA data_version`` is cheap (microseconds) but a 1 ms
poll loop still burns a few percent of a core, so an idle worker instead blocks on Linux
inotify (through ``ctypes``, stdlib), on two things:

* **Its doorbells.** A bell is an empty file beside the database (``<db>-bells/queue-<hash
  of the queue's name>``, one per queue; ``dispatch-<hash of a project>`` for an
  orchestrator). rowfleet's own store rings the bells of the queues a commit put jobs in
  (``ring``: it touches the file's times), after the commit returns, so the job is visible
  by the time the waiter wakes; a worker watches its own queues' bells only, and a busy
  neighbour queue rings a bell nobody of ours listens to.
* **The database's ``-wal`` file**, for writers that ring no bell: plain SQL from another
  program, an enqueue in a caller's own transaction. Any commit writes the WAL, so this
  watch wakes on every commit of every queue, and the worker re-checks ``data_version`` and
  a cheap read before taking the write lock (see ``Worker._await_work``). Once it has woken
  for one, it ignores the WAL for ``WAL_QUIET`` seconds (its bells still wake it at once):
  a neighbour taking a thousand commits a second costs ten cheap looks a second, and a
  plain-SQL enqueue amid such a storm waits at most that long. With no bell to watch (the
  folder cannot be written) nothing is quieted. An orchestrator, whose dispatch events only
  rowfleet's store writes, watches its bell alone (``bells_only``).

Where inotify is not available (not Linux, or the limit on watches is reached)
``FileWaiter`` falls back to a short fixed sleep, and the caller's data_version check does
the rest. Either way a lost wake-up costs at most the safety poll, never a stuck job.

Knows nothing of SQL or of the store.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import logging
import os
import select
import struct
import threading
import time
from typing import Any, Callable, Iterable, Protocol, Sequence

log = logging.getLogger("rowfleet.wake")

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_IGNORED = 0x00008000
IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_EVENT_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len

FALLBACK_INTERVAL = 0.05  # seconds between data_version checks when inotify is missing
SETTLE_WINDOW = 0.03
WAL_QUIET = 0.1  # seconds a waiter with bells ignores the WAL after waking for it
BELLS_SUFFIX = "-bells"


class Waiter(Protocol):
    """What an idle worker sleeps on; each dialect's store hands out its own kind."""

    settle_window: float
    """Seconds to keep re-checking after a wake-up for the change to become visible."""

    def wait(self, timeout: float) -> bool:
        """True when the database may have changed; False on timeout or interrupt."""

    def drain(self) -> None:
        """Forget wake-ups already pending (the worker's own writes while it was busy)."""

    def interrupt(self) -> None:
        """Make a current or next ``wait`` return at once; safe from a signal handler."""

    def close(self) -> None: ...


class SelfPipe:
    """A self-pipe: ``ring()`` from anywhere, a signal handler included, makes ``fileno()``
    readable, so a thread blocked in poll/select on it (and on other descriptors) wakes."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def fileno(self) -> int:
        return self._read

    def ring(self) -> None:
        try:
            os.write(self._write, b"!")
        except OSError:
            pass  # the pipe is full or closed: a wake-up is already pending or moot

    def clear(self) -> None:
        try:
            while os.read(self._read, 512):
                pass
        except OSError:
            pass  # empty (or closed): nothing left to clear

    def close(self) -> None:
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass


class Sleeper:
    """A waiter with no push path: it reports no change, and sleeps until its timeout or an
    interrupt. For what is read once per poll anyway."""

    settle_window = 0.0

    def __init__(self) -> None:
        self._halt = threading.Event()

    def wait(self, timeout: float) -> bool:
        self._halt.wait(max(timeout, 0.0))
        self._halt.clear()
        return False

    def drain(self) -> None:
        pass

    def interrupt(self) -> None:
        self._halt.set()

    def close(self) -> None:
        pass


def bell_path(db_path: str, kind: str, name: str) -> str:
    """The bell of ``name`` (a queue, a project) for ``kind`` of waiter, beside the database.
    A digest, not the name: any name makes a short, safe file name.

    >>> bell_path("/srv/jobs.db", "queue", "default")
    '/srv/jobs.db-bells/queue-ed027182b0f311ceda57'
    """
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=10).hexdigest()
    return os.path.join(os.path.abspath(db_path) + BELLS_SUFFIX, f"{kind}-{digest}")


def ring(paths: Iterable[str]) -> None:
    """Ring bells: touch each file's times, which its watchers hear (inotify's IN_ATTRIB).
    A bell nobody has made has nobody listening; one that cannot be touched is left to the
    WAL watch and the safety poll."""
    for path in paths:
        try:
            os.utime(path)
        except OSError:
            pass


def event_names(buffer: bytes) -> list[bytes]:
    """The file names carried by a buffer of raw ``inotify_event`` records.

    >>> raw = struct.pack("iIII", 1, IN_MODIFY, 0, 8) + b"a.db\\0\\0\\0\\0"
    >>> event_names(raw)
    [b'a.db']
    """
    return [name for _mask, name in _events(buffer)]


def _events(buffer: bytes) -> list[tuple[int, bytes]]:
    """``(mask, name)`` of each raw ``inotify_event`` record in ``buffer``."""
    events, offset = [], 0
    while offset + _EVENT_HEADER.size <= len(buffer):
        _wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(buffer, offset)
        offset += _EVENT_HEADER.size
        events.append((mask, buffer[offset:offset + length].rstrip(b"\0")))
        offset += length
    return events


class FileWaiter:
    """Block until one of its bells rings, the database file or its WAL is written (no
    more than once per ``quiet`` seconds where bells are watched), a timeout, or
    ``interrupt()``. With ``bells_only`` (for what only rowfleet's store writes, which rings)
    the WAL is not watched at all once its bells are."""

    def __init__(self, db_path: str, poll: float, bells: Sequence[str] = (), *, quiet: float = WAL_QUIET,
                 bells_only: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.poll = poll
        self._quiet, self._clock = quiet, clock
        absolute = os.path.abspath(db_path)
        base = os.path.basename(absolute).encode()
        self._names = {base, base + b"-wal"}
        self._pipe = SelfPipe()
        self._wal = _watch(os.path.dirname(absolute))
        self._bell_paths = tuple(bells)
        self._bells = _watch_bells(self._bell_paths) if self._wal is not None else None
        if bells_only and self._bells is not None:
            os.close(self._wal)  # the WAL would wake it only for others' commits
            self._wal = None
        self._quiet_until = 0.0  # until then only bells wake it
        self._any = select.poll()         # the self-pipe, bells, the WAL
        self._bells_only = select.poll()  # the self-pipe and bells: while the WAL is quieted
        for poller in (self._any, self._bells_only):
            poller.register(self._pipe.fileno(), select.POLLIN)
            if self._bells is not None:
                poller.register(self._bells, select.POLLIN)
        if self._wal is not None:
            self._any.register(self._wal, select.POLLIN)

    @property
    def _napping(self) -> bool:
        """No inotify at all: it naps, and the caller's data_version check does the rest."""
        return self._wal is None and self._bells is None

    @property
    def settle_window(self) -> float:
        """The WAL write that raises an event can land before its commit is visible (the
        wal-index lives in the mmap'd -shm, which raises no event): after an event, keep
        re-checking this long. A bell rings after its commit; a nap has nothing to settle."""
        return SETTLE_WINDOW if self._wal is not None else 0.0

    def wait(self, timeout: float) -> bool:
        """True if the database may have changed; False on timeout, interrupt, or the end of
        a quiet spell (the caller waits again for what is left of its time)."""
        if self._napping:
            timeout = min(timeout, FALLBACK_INTERVAL)
        quiet = self._quiet_until - self._clock()
        poller = self._bells_only if quiet > 0 else self._any
        ready = poller.poll(_millis(min(timeout, quiet) if quiet > 0 else timeout))
        fds = {fd for fd, _ in ready}
        if self._pipe.fileno() in fds:
            self._pipe.clear()
            return False
        if self._napping:
            return True  # a nap ended: let the caller check data_version
        if self._bells is not None and self._bells in fds and self._drain_bells():
            return True
        if self._wal is not None and self._wal in fds and self._drain_wal():
            if self._bells is not None:
                self._quiet_until = self._clock() + self._quiet
            return True
        return False

    def drain(self) -> None:
        """Forget events already queued (our own commits while we were busy)."""
        if self._wal is not None:
            self._drain_wal()
        if self._bells is not None:
            self._drain_bells()

    def interrupt(self) -> None:
        """Wake a waiting ``wait`` at once. Safe to call from a signal handler."""
        self._pipe.ring()

    def _drain_wal(self) -> bool:
        return any(name in self._names for _mask, name in _read_events(self._wal))

    def _drain_bells(self) -> bool:
        """Whether a bell rang. A bell file removed under us drops its watch: watch it anew
        (made again), so the next ring is heard; this wake-up counts as one either way."""
        events = _read_events(self._bells)
        if any(mask & IN_IGNORED for mask, _name in events):
            _rewatch_bells(self._bells, self._bell_paths)
        return bool(events)

    def close(self) -> None:
        self._pipe.close()
        for fd in (self._wal, self._bells):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._wal = self._bells = None


def _millis(seconds: float) -> int:
    """A poll timeout in whole milliseconds, rounded up (a 0.2 ms wait is not a busy loop)."""
    return max(0, int(seconds * 1000 + 0.999))


def _read_events(fd: int) -> list[tuple[int, bytes]]:
    """Every event queued on an inotify descriptor, read without blocking."""
    events: list[tuple[int, bytes]] = []
    while True:
        try:
            buffer = os.read(fd, 65536)
        except (BlockingIOError, InterruptedError):
            return events
        if not buffer:
            return events
        events.extend(_events(buffer))


def _watch_bells(paths: Sequence[str]) -> int | None:
    """An inotify descriptor watching each bell (made if missing), or None: no bells, or
    none could be made or watched (then the WAL watch wakes for every commit, unquieted)."""
    if not paths:
        return None
    fd = _inotify_init()
    if fd is None:
        return None
    if not _rewatch_bells(fd, paths):
        os.close(fd)
        return None
    return fd


def _rewatch_bells(fd: int, paths: Sequence[str]) -> bool:
    """Make each bell and watch it on ``fd``; whether every one is watched."""
    watched = 0
    for path in paths:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o666))
        except OSError as exc:
            log.info("cannot make the doorbell %s (%s): woken by every commit instead", path, exc)
            continue
        if _libc().inotify_add_watch(fd, os.fsencode(path), IN_ATTRIB | IN_MODIFY) >= 0:
            watched += 1
    return watched == len(paths)


def _watch(folder: str) -> int | None:
    """An inotify descriptor watching ``folder`` for writes, or None where unavailable."""
    fd = _inotify_init()
    if fd is None:
        return None
    if _libc().inotify_add_watch(fd, os.fsencode(folder), IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0:
        log.warning("cannot watch %s (%s): falling back to polling", folder, os.strerror(ctypes.get_errno()))
        os.close(fd)
        return None
    return fd


def _inotify_init() -> int | None:
    """A fresh non-blocking inotify descriptor, or None where inotify is unavailable."""
    libc = _libc()
    if libc is None:
        return None
    fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        log.warning("inotify_init1 failed (%s): falling back to polling", os.strerror(ctypes.get_errno()))
        return None
    return fd


@functools.cache
def _libc() -> Any:
    """The C library with its inotify calls typed, or None (not Linux)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError):
        log.info("inotify is not available here: idle workers check for changes every %.0f ms",
                 FALLBACK_INTERVAL * 1000)
        return None
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return libc
