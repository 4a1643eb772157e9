"""Keeps a host's processes alive under one parent (``rowfleet worker --procs N``): N
workers and the host's telemetry sampler, each declared as a ``Child``.

Each child is forked from the parent after the user's app modules are imported. A worker
child runs one ``Worker`` and so holds one job at a time; a hard exit of a child frees
exactly that job's memory. A child that exits 0 is done (burst drained, or stopped); any
other exit is logged with its meaning (``exitcodes.describe``), reported to ``on_exit``
when its ``Child`` says so (a worker's: it records the exit and hands back at once any job
the child still held) and restarted
after a delay that doubles while the child keeps dying young, so a crash loop cannot
become a restart storm (an operator's hard stop, 79, is not a fault: that child comes back
after the first delay, and parks until its switch is on); a child exiting with one of its
fatal codes (bad configuration) stops them all. Every ``check_every`` seconds the parent asks ``flagged()`` for the pids the
dead-worker sweep flagged, and kills those of its children with SIGKILL: a frozen child
(a hang holding the GIL) answers nothing else. SIGTERM/SIGINT are passed to the
children, which finish their job in hand; the parent returns once all have exited. A second
stop signal (or SIGQUIT, Ctrl-\\) is a cold stop: every child is told at once, a worker with
its ``cold_signal`` (SIGQUIT), which hands its job back unfinished and exits 0. Children
may stop in stages (``Child.stop_stage``, as ``rowfleet up`` declares them: the scheduler,
then the workers, then the orchestrator, then the sampler and the panel): each stage is
signalled once the one before it has exited. Ctrl-C (SIGINT, which a terminal sends to every
process of its group) and Ctrl-\\ (SIGQUIT) are the parent's to pass on: children ignore them,
so that the order holds and one Ctrl-C is not taken for two.

Holds no database connection: a forked child must not inherit one, so ``on_exit`` and
``flagged`` open their own and close it before returning.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time
from typing import Callable, Sequence

from rowfleet import exitcodes, names
from rowfleet.liveness import FIRST_RESTART_DELAY, HEALTHY_AFTER, MAX_RESTART_DELAY, restart_delay
from rowfleet.store.wake import StopEvent

log = logging.getLogger("rowfleet.supervisor")

REAP_EVERY = 0.1      # seconds between looks for exited children while waiting
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT}


@dataclasses.dataclass(frozen=True)
class Child:
    """One supervised process: ``name`` in the log lines, ``main`` its body (returns its exit
    code), ``fatal_codes`` the exits that mean restarting cannot help (they stop every
    child), ``reports_exits`` whether its non-zero exits go to the supervisor's ``on_exit``,
    ``auxiliary`` whether it only serves the others (the sampler): once no other child is
    left (burst workers done), it is stopped too. ``stop_stage``: on a stop, the children
    of the lowest stage are signalled first, the next stage once they have all exited.
    ``cold_signal``: what a cold stop sends it (a worker's SIGQUIT hands its job back at
    once); None, the child has no cold stop, and SIGTERM ends it as promptly as it can."""

    name: str
    main: Callable[[], int]
    fatal_codes: frozenset[int] = frozenset()
    reports_exits: bool = True
    auxiliary: bool = False
    stop_stage: int = 0
    cold_signal: int | None = None


def workers(procs: int, main: Callable[[], int], fatal_codes: frozenset[int] = frozenset()) -> list[Child]:
    """``procs`` worker children of one body; as many as the procs rule allows
    (``names.MOST_PROCS``), or ``InvalidValue``.

    >>> [child.name for child in workers(2, lambda: 0)]
    ['worker', 'worker']
    >>> workers(100_000, lambda: 0)
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: procs must be an integer of at least 1 and at most 256, got 100000
    """
    names.RULES["procs"].check("procs", procs)
    return [Child("worker", main, frozenset(fatal_codes), cold_signal=signal.SIGQUIT)] * procs


class Supervisor:
    def __init__(self, children: Sequence[Child], *,
                 on_exit: Callable[[int, int], None] = lambda pid, code: None,
                 flagged: Callable[[], set[int]] = set, check_every: float = 10.0,
                 first_delay: float = FIRST_RESTART_DELAY, max_delay: float = MAX_RESTART_DELAY) -> None:
        self.specs = tuple(children)
        self.procs = len(self.specs)
        self.on_exit = on_exit
        self.flagged = flagged
        self.check_every = check_every
        self.first_delay, self.max_delay = first_delay, max_delay
        self.stop = StopEvent()  # set by a stop signal's handler, which must take no lock
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (slot, started)
        self.restarts: dict[int, float] = {}  # slot -> when to start it again
        self.delays = [0.0] * self.procs
        self.crashes = [0] * self.procs  # quick deaths in a row, per slot
        self.exit_code = 0
        self._auxiliaries_stopped = False
        self._staged = len({spec.stop_stage for spec in self.specs}) > 1
        self._stopping_stage: int | None = None  # the stage last told to stop
        self._cold = False  # every child has been told to stop at once

    def request_stop(self, signum: int = signal.SIGTERM, _frame: object = None) -> None:
        """Stop every child, stage by stage; asked again (or by SIGQUIT), a cold stop.
        Runs in a signal handler: it takes no lock."""
        if signum == signal.SIGQUIT or self.stop.is_set():
            self._cold_stop(signal.Signals(signum).name)
            return
        self.stop.set()
        self._stop_next_stage()

    def _cold_stop(self, signal_name: str) -> None:
        """Tell every child at once: a worker with its cold signal, the others with SIGTERM."""
        if self._cold:
            return
        self.stop.set()
        self._cold = True
        log.warning("%s while stopping: a cold stop (workers hand their jobs back unfinished)"
                    if signal_name != "SIGQUIT" else "%s: a cold stop (workers hand their jobs back unfinished)",
                    signal_name)
        for pid, (slot, _) in list(self.children.items()):
            _signal(pid, self.specs[slot].cold_signal or signal.SIGTERM)

    def _stop_next_stage(self) -> None:
        """SIGTERM the children of the lowest stage still alive, unless already told."""
        alive = {self.specs[slot].stop_stage for slot, _ in self.children.values()}
        if self._cold or not alive or min(alive) == self._stopping_stage:
            return
        self._stopping_stage = min(alive)
        stopping = [(pid, self.specs[slot].name) for pid, (slot, _) in self.children.items()
                    if self.specs[slot].stop_stage == self._stopping_stage]
        if self._staged:
            log.info("stopping %s", ", ".join(dict.fromkeys(name for _, name in stopping)))
        for pid, _ in stopping:
            _signal(pid, signal.SIGTERM)

    def run(self) -> int:
        for slot in range(self.procs):
            self._spawn(slot)
        next_check = time.monotonic() + self.check_every
        while self.children or (self.restarts and not self.stop.is_set()):
            for pid, status in _reap():
                if pid in self.children:
                    self._exited(pid, os.waitstatus_to_exitcode(status))
            now = time.monotonic()
            for slot, due in list(self.restarts.items()):
                if now >= due and not self.stop.is_set():
                    del self.restarts[slot]
                    self._spawn(slot)
            if now >= next_check:
                self._kill_flagged()
                next_check = now + self.check_every
            if not self._auxiliaries_stopped and self._main_children_done():
                self._stop_auxiliaries()
            if self.stop.is_set():
                self._stop_next_stage()
            time.sleep(REAP_EVERY)  # a signal handler may run meanwhile: stops are seen next turn
        return self.exit_code

    def _exited(self, pid: int, code: int) -> None:
        slot, started = self.children.pop(pid)
        spec = self.specs[slot]
        lived = time.monotonic() - started
        if code != 0 and spec.reports_exits:
            self._report(pid, code)
        if code == 0 or self.stop.is_set() or (spec.auxiliary and self._auxiliaries_stopped):
            return
        if code in spec.fatal_codes:
            log.error("%s child %d %s; stopping the others", spec.name, pid, exitcodes.describe(code))
            self.request_stop()
            self.exit_code = code
            return
        if code in (exitcodes.OPERATOR_STOP, exitcodes.CANCELLED, exitcodes.CUT_OFF):  # no fault of the child's
            self.delays[slot], self.crashes[slot] = 0.0, 0
            then = {exitcodes.OPERATOR_STOP: "it parks until switched on", exitcodes.CANCELLED: "its job was cancelled",
                    exitcodes.CUT_OFF: "it serves again once the database answers"}[code]
            log.info("%s child %d %s; restarting it (%s)", spec.name, pid, exitcodes.describe(code), then)
            self.restarts[slot] = time.monotonic() + self.first_delay
            return
        self.delays[slot] = restart_delay(self.delays[slot], lived, self.first_delay, self.max_delay)
        self.crashes[slot] = self.crashes[slot] + 1 if lived < HEALTHY_AFTER else 1
        in_a_row = f"; {self.crashes[slot]} quick exits in a row" if self.crashes[slot] > 1 else ""
        log.warning("%s child %d %s after %.1fs%s; restarting in %.1fs",
                    spec.name, pid, exitcodes.describe(code), lived, in_a_row, self.delays[slot])
        self.restarts[slot] = time.monotonic() + self.delays[slot]

    def _main_children_done(self) -> bool:
        """No child but auxiliaries runs or waits for its restart."""
        slots = [slot for slot, _ in self.children.values()] + list(self.restarts)
        return all(self.specs[slot].auxiliary for slot in slots)

    def _stop_auxiliaries(self) -> None:
        self._auxiliaries_stopped = True
        self.restarts = {slot: due for slot, due in self.restarts.items() if not self.specs[slot].auxiliary}
        for pid, (slot, _) in list(self.children.items()):
            if self.specs[slot].auxiliary:
                _signal(pid, signal.SIGTERM)

    def _report(self, pid: int, code: int) -> None:
        try:
            self.on_exit(pid, code)
        except Exception as exc:  # the record is a courtesy: never let it stop the restarts
            log.warning("could not record the exit of child %d: %s", pid, exc)

    def _kill_flagged(self) -> None:
        try:
            frozen = self.flagged() & set(self.children)
        except Exception as exc:  # the database may be away; the next check tries again
            log.warning("could not read which workers are flagged dead: %s", exc)
            return
        for pid in frozen:
            log.error("worker child %d was flagged dead (no heartbeat); killing it (SIGKILL)", pid)
            _signal(pid, signal.SIGKILL)

    def _spawn(self, slot: int) -> None:
        # Stop signals wait while we fork: the parent's handler then runs only once the
        # child is in ``children`` (so the stop reaches it), and never inside the child.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            if self.stop.is_set():  # stopped before this (re)start: nothing would signal it
                return
            spec = self.specs[slot]
            pid = os.fork()
            if pid == 0:  # the child: run its body, never return into the parent's loop
                code = 1
                try:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    # Ctrl-C and Ctrl-\\ reach the whole group: the parent passes them on, once
                    signal.signal(signal.SIGINT, signal.SIG_IGN)
                    signal.signal(signal.SIGQUIT, signal.SIG_DFL if spec.cold_signal == signal.SIGQUIT
                                  else signal.SIG_IGN)
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                    code = spec.main()
                except BaseException:
                    logging.getLogger(f"rowfleet.{spec.name}").exception("%s child crashed", spec.name)
                finally:
                    logging.shutdown()
                    os._exit(code)
            self.children[pid] = (slot, time.monotonic())
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # already gone; waitpid will collect it


def _reap() -> list[tuple[int, int]]:
    """Every child that has exited since the last look, without waiting."""
    reaped = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        except InterruptedError:
            continue
        if pid == 0:
            return reaped
        reaped.append((pid, status))
