"""Wake-ups without a broker on SQLite: sleep until the database files change.

SQLite has no NOTIFY. Polling ``PRAGMA data_version`` is cheap (microseconds) but a 1 ms
poll loop still burns a few percent of a core, so an idle worker instead blocks on Linux
inotify (through ``ctypes``, stdlib) watching the database's folder for writes to the
database or its ``-wal`` file. Any process's commit writes the WAL, so an enqueue from any
program, even plain SQL, wakes every idle worker within a millisecond or two, and an idle
worker costs nothing while nothing happens.

The event says only "something was written"; the caller re-checks ``data_version`` and a
cheap read before taking the write lock (see ``Worker._await_work``). Where inotify is not
available (not Linux, or the limit on watches is reached) ``FileWaiter`` falls back to a
short fixed sleep, and the caller's data_version check does the rest. Either way a lost
wake-up costs at most the safety poll, never a stuck job.

Knows nothing of SQL or of the store.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import struct
import threading
from typing import Protocol

log = logging.getLogger("rowfleet.wake")

IN_MODIFY = 0x00000002
IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_EVENT_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len

FALLBACK_INTERVAL = 0.05  # seconds between data_version checks when inotify is missing
SETTLE_WINDOW = 0.03


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


class Doorbell:
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


def event_names(buffer: bytes) -> list[bytes]:
    """The file names carried by a buffer of raw ``inotify_event`` records.

    >>> raw = struct.pack("iIII", 1, IN_MODIFY, 0, 8) + b"a.db\\0\\0\\0\\0"
    >>> event_names(raw)
    [b'a.db']
    """
    names, offset = [], 0
    while offset + _EVENT_HEADER.size <= len(buffer):
        _wd, _mask, _cookie, length = _EVENT_HEADER.unpack_from(buffer, offset)
        offset += _EVENT_HEADER.size
        names.append(buffer[offset:offset + length].rstrip(b"\0"))
        offset += length
    return names


class FileWaiter:
    """Block until the database file or its WAL is written, a timeout, or ``interrupt()``."""

    def __init__(self, db_path: str, poll: float) -> None:
        self.poll = poll
        absolute = os.path.abspath(db_path)
        base = os.path.basename(absolute).encode()
        self._names = {base, base + b"-wal"}
        self._doorbell = Doorbell()
        self._inotify = _watch(os.path.dirname(absolute))
        self._poller = select.poll()
        self._poller.register(self._doorbell.fileno(), select.POLLIN)
        if self._inotify is not None:
            self._poller.register(self._inotify, select.POLLIN)

    @property
    def settle_window(self) -> float:
        """The WAL write that raises an event can land before its commit is visible (the
        wal-index lives in the mmap'd -shm, which raises no event): after an event, keep
        re-checking this long. A waiter that only naps has nothing to settle."""
        return SETTLE_WINDOW if self._inotify is not None else 0.0

    def wait(self, timeout: float) -> bool:
        """True if the database may have changed; False on timeout or interrupt."""
        if self._inotify is None:
            timeout = min(timeout, FALLBACK_INTERVAL)
        ready = self._poller.poll(max(0, int(timeout * 1000 + 0.999)))
        fds = {fd for fd, _ in ready}
        if self._doorbell.fileno() in fds:
            self._doorbell.clear()
            return False
        if self._inotify is None:
            return True  # a nap ended: let the caller check data_version
        return self._inotify in fds and self._drain_events()

    def drain(self) -> None:
        """Forget events already queued (our own commits while we were busy)."""
        if self._inotify is not None:
            self._drain_events()

    def interrupt(self) -> None:
        """Wake a waiting ``wait`` at once. Safe to call from a signal handler."""
        self._doorbell.ring()

    def _drain_events(self) -> bool:
        relevant = False
        while True:
            try:
                buffer = os.read(self._inotify, 65536)
            except (BlockingIOError, InterruptedError):
                return relevant
            if not buffer:
                return relevant
            relevant = relevant or any(name in self._names for name in event_names(buffer))

    def close(self) -> None:
        self._doorbell.close()
        if self._inotify is not None:
            try:
                os.close(self._inotify)
            except OSError:
                pass
            self._inotify = None


def _watch(folder: str) -> int | None:
    """An inotify descriptor watching ``folder`` for writes, or None where unavailable."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        init, add_watch = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError):
        log.info("inotify is not available here: idle workers check for changes every %.0f ms",
                 FALLBACK_INTERVAL * 1000)
        return None
    add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    fd = init(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        log.warning("inotify_init1 failed (%s): falling back to polling", os.strerror(ctypes.get_errno()))
        return None
    if add_watch(fd, os.fsencode(folder), IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0:
        log.warning("cannot watch %s (%s): falling back to polling", folder, os.strerror(ctypes.get_errno()))
        os.close(fd)
        return None
    return fd
