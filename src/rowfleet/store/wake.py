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


class StopEvent(threading.Event):
    """A ``threading.Event`` that a signal handler may set. ``threading.Event.set`` takes
    the event's lock, and the handler runs in the main thread, which may hold that very lock
    (inside ``wait``): the process would hang on its own stop signal. Here ``set`` takes no
    lock: it marks the flag and writes a byte to a pipe that every ``wait`` selects on.
    For a process's lifetime: its pipe is closed only with the process.

    >>> stop = StopEvent()
    >>> stop.wait(0.01), stop.is_set()
    (False, False)
    >>> stop.set(); stop.set()
    >>> stop.wait(), stop.is_set()
    (True, True)
    """

    def __init__(self) -> None:
        super().__init__()
        self._stopped = False
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)

    def set(self) -> None:
        if not self._stopped:
            self._stopped = True
            os.write(self._write, b"!")  # the pipe stays readable: every waiter, now and later, wakes

    def is_set(self) -> bool:
        return self._stopped

    def wait(self, timeout: float | None = None) -> bool:
        if not self._stopped:
            select.select([self._read], [], [], timeout)  # a signal handled meanwhile: retried (PEP 475)
        return self._stopped

    def clear(self) -> None:
        raise TypeError("a stop is not taken back: make a new StopEvent")


class Sleeper:
    """A waiter with no push path: it reports no change, and sleeps until its timeout or an
    interrupt. For what is read once per poll anyway."""

    settle_window = 0.0

    def __init__(self) -> None:
        self._halt = SelfPipe()  # not a threading.Event: interrupt() may run in a signal handler

    def wait(self, timeout: float) -> bool:
        select.select([self._halt], [], [], max(timeout, 0.0))
        self._halt.clear()
        return False

    def drain(self) -> None:
        pass

    def interrupt(self) -> None:
        self._halt.ring()

    def close(self) -> None:
        self._halt.close()


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


def inotify_events(buffer: bytes) -> list[tuple[int, int, bytes]]:
    """``(watch descriptor, mask, name)`` of each raw ``inotify_event`` record in ``buffer``.

    >>> raw = struct.pack("iIII", 1, IN_MODIFY, 0, 8) + b"a.db\\0\\0\\0\\0"
    >>> inotify_events(raw) == [(1, IN_MODIFY, b"a.db")]
    True
    """
    events, offset = [], 0
    while offset + _EVENT_HEADER.size <= len(buffer):
        wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(buffer, offset)
        offset += _EVENT_HEADER.size
        events.append((wd, mask, buffer[offset:offset + length].rstrip(b"\0")))
        offset += length
    return events


class FileWaiter:
    """Block until one of its bells rings, the database file or its WAL is written (no
    more than once per ``quiet`` seconds where bells are watched), a timeout, or
    ``interrupt()``. With ``bells_only`` (for what only rowfleet's store writes, which rings)
    the WAL is not watched at all once its bells are.

    One inotify instance holds every watch (Linux allows a user 128 by default, and a box
    may run many workers). A quiet spell removes the folder's watch, so a neighbour's storm
    of commits raises no event meanwhile. At its end the database files' sizes and times
    say whether anything was written during it: if so, that is one wake-up and another
    spell begins (a storm costs one look per spell); if not, the watch is back."""

    def __init__(self, db_path: str, poll: float, bells: Sequence[str] = (), *, quiet: float = WAL_QUIET,
                 bells_only: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.poll = poll
        self._quiet, self._clock = quiet, clock
        absolute = os.path.abspath(db_path)
        base = os.path.basename(absolute).encode()
        self._folder = os.path.dirname(absolute)
        self._names = {base, base + b"-wal"}
        self._pipe = SelfPipe()
        self._fd = _inotify_init()
        self._bell_paths = tuple(bells)
        self._bells = _watch_bells(self._fd, self._bell_paths) if self._fd is not None and bells else None
        self._wal: int | None = None  # the folder's watch descriptor
        if self._fd is not None and not (bells_only and self._bells):
            self._wal = self._watch_wal()
        self._watches_wal = self._wal is not None
        if self._fd is not None and self._wal is None and not self._bells:
            os.close(self._fd)  # nothing to watch: nap instead
            self._fd = None
        self._paths = (absolute, absolute + "-wal")
        self._quiet_until: float | None = None  # while set, the folder is unwatched and only bells wake it
        self._stamp: tuple[Any, ...] = ()  # the files as a quiet spell began
        self._poller = select.poll()
        self._poller.register(self._pipe.fileno(), select.POLLIN)
        if self._fd is not None:
            self._poller.register(self._fd, select.POLLIN)

    @property
    def settle_window(self) -> float:
        """The WAL write that raises an event can land before its commit is visible (the
        wal-index lives in the mmap'd -shm, which raises no event): after an event, keep
        re-checking this long. A bell rings after its commit; a nap has nothing to settle."""
        return SETTLE_WINDOW if self._watches_wal else 0.0

    def wait(self, timeout: float) -> bool:
        """True if the database may have changed; False on timeout or interrupt."""
        if self._fd is None:
            timeout = min(timeout, FALLBACK_INTERVAL)
        elif self._quiet_until is not None:
            left = self._quiet_until - self._clock()
            if left <= 0 and self._written_in_spell():
                self._start_quiet_spell()  # the look this wake-up brings covers the spell
                return True
            if left <= 0:  # a quiet end: watch again (and look if a commit slipped in meanwhile)
                self._quiet_until = None
                self._wal = self._watch_wal()
                if self._written_in_spell():
                    return True
            else:
                timeout = min(timeout, left)
        ready = {fd for fd, _ in self._poller.poll(_millis(timeout))}
        if self._pipe.fileno() in ready:
            self._pipe.clear()
            return False
        if self._fd is None:
            return True  # a nap ended: let the caller check data_version
        if self._fd not in ready:
            return False
        rang, written = self._take_events()
        if rang:
            return True
        if written and self._bells:
            self._start_quiet_spell()
        return written

    def drain(self) -> None:
        """Forget events already queued (our own commits while we were busy), and what a
        quiet spell has seen written so far."""
        if self._fd is not None:
            self._take_events()
            if self._quiet_until is not None:
                self._stamp = self._files_now()

    def interrupt(self) -> None:
        """Wake a waiting ``wait`` at once. Safe to call from a signal handler."""
        self._pipe.ring()

    def _take_events(self) -> tuple[bool, bool]:
        """Read every queued event: (whether a bell rang, whether the database was written).
        A bell file removed under us drops its watch (IN_IGNORED): it is made and watched
        anew, so the next ring is heard, and this counts as a ring."""
        rang = written = lost = False
        for wd, mask, name in _read_events(self._fd):
            if self._bells and wd in self._bells:
                rang = True
                lost = lost or bool(mask & IN_IGNORED)
            elif wd == self._wal and name in self._names:
                written = True
        if lost:
            self._bells = _watch_bells(self._fd, self._bell_paths) or self._bells
        return rang, written

    def _start_quiet_spell(self) -> None:
        if self._wal is not None:
            _libc().inotify_rm_watch(self._fd, self._wal)
            self._wal = None
        self._stamp = self._files_now()
        self._quiet_until = self._clock() + self._quiet

    def _written_in_spell(self) -> bool:
        return self._files_now() != self._stamp

    def _files_now(self) -> tuple[Any, ...]:
        """The database file's and its WAL's size and times (None for one that is missing)."""
        stamps = []
        for path in self._paths:
            try:
                found = os.stat(path)
                stamps.append((found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns))
            except OSError:
                stamps.append(None)
        return tuple(stamps)

    def _watch_wal(self) -> int | None:
        return _add_watch(self._fd, self._folder, IN_MODIFY | IN_CREATE | IN_MOVED_TO)

    def close(self) -> None:
        self._pipe.close()
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


def _millis(seconds: float) -> int:
    """A poll timeout in whole milliseconds, rounded up (a 0.2 ms wait is not a busy loop)."""
    return max(0, int(seconds * 1000 + 0.999))


def _read_events(fd: int) -> list[tuple[int, int, bytes]]:
    """Every event queued on an inotify descriptor, read without blocking."""
    events: list[tuple[int, int, bytes]] = []
    while True:
        try:
            buffer = os.read(fd, 65536)
        except (BlockingIOError, InterruptedError):
            return events
        if not buffer:
            return events
        events.extend(inotify_events(buffer))


def _watch_bells(fd: int, paths: Sequence[str]) -> dict[int, str] | None:
    """Make each bell (an empty file) and watch it on ``fd``: watch descriptor -> path; None
    when one could not be made or watched. Then no bell is relied on: the WAL wakes the
    waiter for every commit, unquieted, so no queue of its waits out a quiet spell."""
    watched = {}
    for path in paths:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o666))
        except OSError as exc:
            log.info("cannot make the doorbell %s (%s): woken by every commit instead", path, exc)
            return None
        wd = _add_watch(fd, path, IN_ATTRIB | IN_MODIFY)
        if wd is None:
            return None
        watched[wd] = path
    return watched


def _add_watch(fd: int, path: str, mask: int) -> int | None:
    """Watch ``path`` on ``fd``: its watch descriptor, or None (logged) where refused."""
    wd = _libc().inotify_add_watch(fd, os.fsencode(path), mask)
    if wd < 0:
        log.warning("cannot watch %s (%s): it wakes nobody", path, os.strerror(ctypes.get_errno()))
        return None
    return wd


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
        libc.inotify_init1, libc.inotify_add_watch, libc.inotify_rm_watch
    except (OSError, AttributeError):
        log.info("inotify is not available here: idle workers check for changes every %.0f ms",
                 FALLBACK_INTERVAL * 1000)
        return None
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc
