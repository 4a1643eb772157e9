"""How the long-running processes wait: for the database to open, and for a commit to show.

``open_when_ready`` is the one loop that opens a store and readies it (its schema required,
or migrated), waiting out what time repairs (a server not answering yet, a schema not made
yet, a full disk) until stopped, with one log line when it starts waiting and one per
``REMIND_EVERY`` while it goes on, however often it retries; the worker, its keeper, the
sampler, the scheduler and the orchestrator start with it. ``settle``
is the one loop that follows a wake-up: on SQLite the file event can come before the commit
that raised it is visible, so a look is repeated, backing off, for the waiter's settle window.

Imports only ``rowfleet.errors``; the store is whatever ``connect`` returns.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, TypeVar

from rowfleet.errors import DatabaseUnreachable, DiskFull, RowfleetError, SchemaMissing

Opened = TypeVar("Opened")

# What waiting repairs: a server that does not answer yet, a schema the orchestrator has
# not made yet, a disk with no room (weather, not configuration: room is made, by an
# operator or a pruner, and the same process goes on). Anything else (a file that is no
# database, a schema newer than this rowfleet: a DatabaseBroken or MigrationError) is for
# the operator, and is raised.
TRANSIENT: tuple[type[RowfleetError], ...] = (SchemaMissing, DatabaseUnreachable, DiskFull)
# Seconds between the lines of a wait that goes on: one when it starts, then one a minute,
# never one per try (a process retries every poll, a second by default).
REMIND_EVERY = 60.0


def open_when_ready(connect: Callable[[], Opened], stop: threading.Event, poll: float, log: logging.Logger, *,
                    ready: Callable[[Opened], object] = lambda store: None,
                    transient: tuple[type[RowfleetError], ...] = TRANSIENT,
                    announce: Callable[[RowfleetError], None] | None = None,
                    remind_every: float = REMIND_EVERY,
                    clock: Callable[[], float] = time.monotonic) -> Opened | None:
    """A store from ``connect()`` that ``ready(store)`` accepted, trying again every ``poll``
    seconds while either raises one of ``transient``; None once ``stop`` is set first. A
    store whose ``ready`` failed is closed. Each failed try is passed to ``announce``; without
    one, the first is logged on ``log`` as "waiting for the database", and then one a
    ``remind_every`` seconds (by ``clock``) while the wait goes on, whatever ``poll`` is.

    >>> tries = iter([DatabaseUnreachable("no answer"), "store"])
    >>> def connect():
    ...     attempt = next(tries)
    ...     if isinstance(attempt, Exception):
    ...         raise attempt
    ...     return attempt
    >>> open_when_ready(connect, threading.Event(), 0, logging.getLogger("doctest"), announce=print)
    no answer
    'store'
    """
    began: float | None = None
    said = 0.0  # when the last line was logged
    while not stop.is_set():
        try:
            store = _opened(connect, ready)
        except transient as exc:
            if announce is not None:
                announce(exc)
            elif began is None:
                began = said = clock()
                log.warning("waiting for the database: %s", exc)
            elif clock() - said >= remind_every:
                said = clock()
                log.warning("still waiting for the database after %.0fs: %s", said - began, exc)
        else:
            if began is not None:
                log.info("the database is ready after %.0fs of waiting", clock() - began)
            return store
        stop.wait(poll)
    return None


def _opened(connect: Callable[[], Opened], ready: Callable[[Opened], object]) -> Opened:
    store = connect()
    try:
        ready(store)
    except BaseException:
        store.close()  # type: ignore[attr-defined]
        raise
    return store


def settle(look: Callable[[], bool], window: float, stop: threading.Event, first_step: float,
           longest_step: float) -> bool:
    """Whether ``look()`` came true within ``window`` seconds: looked at once, then again
    after pauses that double from ``first_step`` up to ``longest_step``. False at once when
    ``stop`` is set.

    >>> answers = iter([False, False, True])
    >>> settle(lambda: next(answers), 1.0, threading.Event(), 0.0001, 0.001)
    True
    >>> settle(lambda: False, 0.0, threading.Event(), 0.0001, 0.001)
    False
    """
    give_up = time.monotonic() + window
    step = first_step
    while not stop.is_set():
        if look():
            return True
        if time.monotonic() >= give_up:
            return False
        time.sleep(step)
        step = min(step * 2, longest_step)
    return False
