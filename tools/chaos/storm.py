"""The storm: the built archive's processes, started, killed, frozen and restarted on a timer.

Owns the fleet under test (one supervising worker parent with its children, one
orchestrator, each in a process group of its own so nothing outlives the tool) and the
schedule of harm: a random worker child SIGKILLed about every half second, the
orchestrator killed -9 and restarted about every ten, a child frozen (SIGSTOP) past its
lease and then resumed, and each mode's ``Episode`` (an immediate server restart, a full
disk, a clock step, a failover, a partition) at its moment, undone after its hold. Every
act is appended to ``storm.jsonl`` as it happens, stamped by the monotonic clock (which a
step of the wall clock does not move), for the checker. Imports nothing from rowfleet: the
fleet is the archive, run as users run it.
"""

from __future__ import annotations

import glob
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from .check import Action

TICK = 0.05
STOP_DEADLINE = 30.0


@dataclass(frozen=True)
class Timing:
    """The storm's rhythm and the fleet's short settings, so that reclaims come fast."""

    seconds: float
    kill_every: float = 0.5
    orchestrator_every: float = 10.0
    freeze_every: float = 20.0
    first_freeze: float = 2.0
    lease: float = 2.0
    renew: float = 0.5

    @property
    def freeze_for(self) -> float:
        """Longer than the lease plus a few sweeps, so the job is surely taken meanwhile."""
        return self.lease + 3.0


@dataclass(frozen=True)
class Episode:
    """One fault of a mode: ``act`` at ``at`` seconds into the storm, recorded as ``kind``;
    ``undo`` (if any) ``hold`` seconds later, recorded as ``undo_kind``, and at the latest
    when the storm ends, whatever happened. Each returns a detail for the log, or None."""

    kind: str
    at: float
    act: Callable[[], str | None]
    undo: Callable[[], str | None] | None = None
    hold: float = 0.0
    undo_kind: str = ""


def child_pids(parent: int) -> list[int]:
    """The live children of ``parent``, from every thread's ``/proc/PID/task/TID/children``."""
    found: set[int] = set()
    for path in glob.glob(f"/proc/{parent}/task/*/children"):
        try:
            with open(path) as handle:
                found.update(int(pid) for pid in handle.read().split())
        except OSError:
            continue  # the thread ended between the glob and the read
    return sorted(pid for pid in found if _running(pid))


def _running(pid: int) -> bool:
    """Not a zombie: a child killed a moment ago stays listed until its parent reaps it."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return False
    return text[text.rindex(")") + 2:][:1] not in ("Z", "X")


def holds_a_job(records: Path, pid: int) -> bool:
    """Whether ``pid``'s last handler record is a start: it is inside a handler now."""
    try:
        with open(records / f"{pid}.jsonl", "rb") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return False
    return bool(lines) and b'"event": "start"' in lines[-1]


class Fleet:
    """The archive's processes for one storm, each logged to its own file in ``folder``."""

    def __init__(self, pyz: Path, db: str, folder: Path, procs: int, timing: Timing,
                 env: dict[str, str] | None = None, batch: int = 1) -> None:
        self.pyz, self.db, self.folder, self.procs, self.timing = pyz, db, folder, procs, timing
        self.batch = batch  # the workers' --batch: outcomes held and written together
        self.env = env or fleet_env(folder)
        self.launched = 0
        self.others: list[subprocess.Popen] = []  # more supervisors (the partition's box)
        self.supervisor = self.start_workers(procs)
        self.orchestrator = self.start_orchestrator()

    def start_workers(self, procs: int, *, label: str = "worker", db: str | None = None,
                      prefix: Sequence[str] = (), host: Sequence[str] = ()) -> subprocess.Popen:
        """A supervisor of ``procs`` worker children; ``prefix`` wraps the command (``ip netns
        exec NAME``), ``db`` is the URL as that box reaches the database."""
        return self._launch(label, "worker", "--procs", str(procs), "--app", "chaos_tasks", "--no-sampler",
                            "--batch", str(self.batch), *self._leases(), "--restart-delay", "0.1", "--restart-delay-max", "1", *host,
                            db=db, prefix=prefix)

    def _leases(self) -> tuple[str, ...]:
        return ("--lease", str(self.timing.lease), "--renew", str(self.timing.renew), "--poll", "0.2")

    def _launch(self, label: str, *args: str, db: str | None = None, prefix: Sequence[str] = ()) -> subprocess.Popen:
        self.launched += 1
        with open(self.folder / f"process-{self.launched}-{label}.log", "w") as log:
            return subprocess.Popen([*prefix, sys.executable, str(self.pyz), "--db", db or self.db, *args],
                                    cwd=self.folder, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def start_orchestrator(self) -> subprocess.Popen:
        return self._launch("orchestrator", "orchestrator", "--interval", "0.2", *self._leases())

    def children(self) -> list[int]:
        return child_pids(self.supervisor.pid)

    def stop(self) -> bool:
        """SIGTERM them all; True when all exited 0 in time (the rest are killed, with their groups)."""
        every = (self.supervisor, *self.others, self.orchestrator)
        for process in every:
            _signal(process, signal.SIGTERM)
        clean = True
        for process in every:
            try:
                clean = process.wait(STOP_DEADLINE) == 0 and clean
            except subprocess.TimeoutExpired:
                clean = False
            kill_group(process)
        return clean


def fleet_env(folder: Path) -> dict[str, str]:
    """The caller's environment without anything that could bend the archive: no
    PYTHONPATH (the archive must not borrow from src/), no ROWFLEET_* settings."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("ROWFLEET_")}
    # INFO: the supervisor's line for every child's exit, the not-a-fault ones (81) included
    env["ROWFLEET_LOG_LEVEL"] = "INFO"
    env["CHAOS_RECORDS"] = str(folder / "records")
    return env


def _signal(process: subprocess.Popen, signum: int) -> None:
    if process.poll() is None:
        process.send_signal(signum)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL a launched process and its group (stopped members too) and reap it."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGCONT)
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    else:
        try:  # the leader is gone; children it left in the group may not be
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    process.wait(STOP_DEADLINE)


class Storm:
    """Harm done to a fleet on a schedule; ``run`` returns when the storm's time is up."""

    def __init__(self, fleet: Fleet, timing: Timing, rng: random.Random, episodes: Sequence[Episode] = ()) -> None:
        self.fleet, self.timing, self.rng = fleet, timing, rng
        self.log = fleet.folder / "storm.jsonl"
        self.frozen: dict[int, float] = {}  # pid -> when to SIGCONT it
        self.killed: set[int] = set()  # listed until reaped: never a victim twice, nor frozen
        self.pending = sorted(episodes, key=lambda e: e.at)
        self.to_undo: list[tuple[float, Episode]] = []

    def run(self) -> None:
        start = time.monotonic()
        end = start + self.timing.seconds
        next_kill = start + self._jitter(self.timing.kill_every)
        next_orchestrator = start + self.timing.orchestrator_every
        next_freeze = start + self.timing.first_freeze
        try:
            while (now := time.monotonic()) < end or self.to_undo:
                self._episodes(now - start)
                if now >= end:  # the storm is over; only an episode's undo is still due
                    time.sleep(TICK)
                    continue
                self._thaw(now)
                self._respawn_if_gone()
                if now >= next_kill:
                    self._kill_a_child()
                    next_kill = now + self._jitter(self.timing.kill_every)
                if now >= next_orchestrator:
                    self._kill_orchestrator()
                    next_orchestrator = now + self._jitter(self.timing.orchestrator_every)
                if now >= next_freeze and end - now > self.timing.freeze_for + 1 and self._freeze_a_child(now):
                    next_freeze = now + self.timing.freeze_every
                time.sleep(TICK)
        finally:
            self._thaw(float("inf"))
            for _, episode in self.to_undo:
                self._undo(episode)
            self.to_undo = []

    def _episodes(self, elapsed: float) -> None:
        while self.pending and elapsed >= self.pending[0].at:
            episode = self.pending.pop(0)
            began = time.monotonic()
            detail = episode.act()
            self._record(episode.kind, detail=detail or "", began=began)
            if episode.undo is not None:  # held from the moment the act was done
                self.to_undo.append((elapsed + time.monotonic() - began + episode.hold, episode))
        for due, episode in list(self.to_undo):
            if elapsed >= due:
                self.to_undo.remove((due, episode))
                self._undo(episode)

    def _undo(self, episode: Episode) -> None:
        began = time.monotonic()
        detail = episode.undo()
        self._record(episode.undo_kind, detail=detail or "", began=began)

    def _jitter(self, every: float) -> float:
        return every * self.rng.uniform(0.6, 1.4)

    def _record(self, kind: str, pid: int = 0, until: float = 0.0, code: int | None = None, detail: str = "",
                began: float | None = None) -> None:
        """Append an act; an episode's ``at`` is when it began and ``until`` when it was done."""
        now = time.monotonic()
        action = Action(kind, now if began is None else began, pid, now if began is not None else until, code, detail)
        with open(self.log, "a") as handle:
            handle.write(json.dumps(asdict(action)) + "\n")

    def _killable(self) -> list[int]:
        return [pid for pid in self.fleet.children() if pid not in self.frozen and pid not in self.killed]

    def _kill_a_child(self) -> None:
        victims = self._killable()
        if victims:
            victim = self.rng.choice(victims)
            _kill(victim, signal.SIGKILL)
            self.killed.add(victim)
            self._record("kill", victim)

    def _kill_orchestrator(self) -> None:
        old = self.fleet.orchestrator
        _kill(old.pid, signal.SIGKILL)
        old.wait(STOP_DEADLINE)
        self._record("orchestrator", old.pid)
        self.fleet.orchestrator = self.fleet.start_orchestrator()

    def _freeze_a_child(self, now: float) -> bool:
        """SIGSTOP a child that is inside a handler (so a job is held while it sleeps)."""
        holding = [pid for pid in self._killable() if holds_a_job(self.fleet.folder / "records", pid)]
        if not holding:
            return False  # try again next tick
        victim = self.rng.choice(holding)
        _kill(victim, signal.SIGSTOP)
        self.frozen[victim] = now + self.timing.freeze_for
        self._record("freeze", victim, until=time.monotonic() + self.timing.freeze_for)
        return True

    def _thaw(self, now: float) -> None:
        for pid, until in list(self.frozen.items()):
            if now >= until:
                _kill(pid, signal.SIGCONT)
                del self.frozen[pid]

    def _respawn_if_gone(self) -> None:
        """An orchestrator that died of the storm (a database restart, say) comes back; the
        supervisor must not die at all, which the shutdown check reports."""
        if (code := self.fleet.orchestrator.poll()) is not None:
            self._record("orchestrator-exited", self.fleet.orchestrator.pid, code=code)
            self.fleet.orchestrator = self.fleet.start_orchestrator()


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # it ended on its own a moment ago
