"""Keeps N worker processes alive under one parent (``rowfleet worker --procs N``).

Each child is forked from the parent after the user's app modules are imported, runs one
``Worker`` and so holds one job at a time; a hard exit of a child frees exactly that
job's memory. A child that exits 0 is done (burst drained, or stopped); any other exit is
restarted after a delay that doubles while the child keeps dying young, so a crash loop
cannot become a restart storm; a child exiting with a fatal code (bad configuration)
stops them all. SIGTERM/SIGINT are passed to the children, which finish
their job in hand; the parent returns once all have exited.

Holds no database connection: a forked child must not inherit one.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Callable

log = logging.getLogger("rowfleet.supervisor")

FIRST_RESTART_DELAY = 0.5
MAX_RESTART_DELAY = 30.0
HEALTHY_AFTER = 60.0  # a child that lived this long resets the restart delay
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def restart_delay(previous: float, lived: float) -> float:
    """How long to wait before restarting a child that died after ``lived`` seconds.

    >>> restart_delay(0.0, 1.0), restart_delay(0.5, 1.0), restart_delay(16.0, 2.0), restart_delay(8.0, 90.0)
    (0.5, 1.0, 30.0, 0.5)
    """
    if lived >= HEALTHY_AFTER or previous <= 0:
        return FIRST_RESTART_DELAY
    return min(MAX_RESTART_DELAY, previous * 2)


class Supervisor:
    def __init__(self, procs: int, child_main: Callable[[], int], fatal_codes: set[int] = frozenset()) -> None:
        self.procs = procs
        self.child_main = child_main
        self.fatal_codes = fatal_codes  # a child exiting so was misconfigured: restarting cannot help
        self.stop = threading.Event()
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (slot, started)
        self.delays = [0.0] * procs
        self.exit_code = 0

    def request_stop(self, signum: int = signal.SIGTERM, _frame: object = None) -> None:
        self.stop.set()
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass  # already gone; waitpid will collect it

    def run(self) -> int:
        for slot in range(self.procs):
            self._spawn(slot)
        while self.children:
            pid, status = _wait_any()
            if pid == 0:  # no children left to wait for
                break
            if pid not in self.children:
                continue
            slot, started = self.children.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            lived = time.monotonic() - started
            if code == 0 or self.stop.is_set():
                continue
            if code in self.fatal_codes:
                log.error("worker child %d exited with %s; stopping the others", pid, _describe(code))
                self.request_stop()
                self.exit_code = code
                continue
            self.delays[slot] = restart_delay(self.delays[slot], lived)
            log.warning("worker child %d exited with %s after %.1fs; restarting in %.1fs",
                        pid, _describe(code), lived, self.delays[slot])
            if not self.stop.wait(self.delays[slot]):
                self._spawn(slot)
        return self.exit_code

    def _spawn(self, slot: int) -> None:
        # Stop signals wait while we fork: the parent's handler then runs only once the
        # child is in ``children`` (so the stop reaches it), and never inside the child.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            if self.stop.is_set():  # stopped before this (re)start: nothing would signal it
                return
            pid = os.fork()
            if pid == 0:  # the child: run one worker, never return into the parent's loop
                code = 1
                try:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    signal.signal(signal.SIGINT, signal.SIG_DFL)
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                    code = self.child_main()
                except BaseException:
                    logging.getLogger("rowfleet.worker").exception("worker child crashed")
                finally:
                    logging.shutdown()
                    os._exit(code)
            self.children[pid] = (slot, time.monotonic())
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _wait_any() -> tuple[int, int]:
    while True:
        try:
            return os.waitpid(-1, 0)
        except ChildProcessError:
            return 0, 0
        except InterruptedError:
            continue


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"
