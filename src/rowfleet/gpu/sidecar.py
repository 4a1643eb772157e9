"""An inference server a GPU worker owns (a vLLM- or ollama-like sidecar), started and stopped by it.

A worker given ``--sidecar CMD`` starts the command before it claims a job that needs it,
in a process group of its own, and waits until ``--sidecar-health URL`` answers 2xx (a
``urllib`` GET, no dependency). After ``--sidecar-idle SECONDS`` without a job, or when an
operator switches the worker off hard, it stops **only the process group it started**:
SIGTERM, then SIGKILL after a grace. Never a ``pkill`` by name: another worker's server,
or the operator's own, may run the same program.

Giving VRAM back is checked, not assumed: with a GPU memory reader, the memory the server
took (used while up minus used before it started) must be at least 75% back within 10
seconds of the stop, else the stop is ``stuck_vram``, naming the processes that still
hold GPU memory (the usual cause: a grandchild that left the group, or a driver that has
not let go). A server that dies on its own is restarted at its next use, after the
supervisor's backoff (``liveness.restart_delay``), so a crash loop cannot spin.

The decisions (is it idle, did the memory come back, how long to back off) are pure
functions; ``Sidecar`` holds the process. The worker calls ``ensure_up`` before a job,
``used`` after it, ``stop_if_idle`` while idle and ``stop`` on a hard switch or its exit.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import signal
import subprocess
import time
from typing import Callable, Iterable

from rowfleet.errors import ConfigError, RowfleetError
from rowfleet.liveness import restart_delay

log = logging.getLogger("rowfleet.sidecar")

VRAM_BACK_SHARE = 0.75   # of the server's footprint that must be free again after a stop ...
VRAM_BACK_WITHIN = 10.0  # ... within this many seconds
STOP_GRACE = 10.0        # seconds between SIGTERM and SIGKILL
START_TIMEOUT = 300.0    # a server not healthy by then failed to start (models take a while to load)
HEALTH_EVERY = 0.25      # seconds between health probes while starting
STOPPED, STUCK_VRAM = "stopped", "stuck_vram"


class SidecarFailed(RowfleetError):
    """The sidecar did not come up: it exited, or its health URL never answered."""


@dataclasses.dataclass(frozen=True)
class SidecarSpec:
    """What ``--sidecar``, ``--sidecar-health`` and ``--sidecar-idle`` say."""

    command: str
    health_url: str | None = None
    idle_ttl: float | None = None  # None: kept up while the worker lives
    start_timeout: float = START_TIMEOUT
    stop_grace: float = STOP_GRACE
    vram_back_within: float = VRAM_BACK_WITHIN

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.argv():
            raise ConfigError("--sidecar needs a command, e.g. --sidecar 'vllm serve MODEL --port 8000'")
        if self.health_url is not None and not self.health_url.startswith(("http://", "https://")):
            raise ConfigError(f"--sidecar-health must be an http:// or https:// URL, got {self.health_url!r}")
        if self.idle_ttl is not None and not self.idle_ttl > 0:
            raise ConfigError(f"--sidecar-idle must be a positive number of seconds, got {self.idle_ttl!r}")

    def argv(self) -> list[str]:
        """The command split as a shell would (no shell runs it).

        >>> SidecarSpec("serve --port 8000 'my model'").argv()
        ['serve', '--port', '8000', 'my model']
        """
        try:
            return shlex.split(self.command)
        except ValueError as exc:
            raise ConfigError(f"--sidecar: cannot split the command: {exc}") from None


@dataclasses.dataclass(frozen=True)
class Stop:
    """How a stop ended: ``stopped``, or ``stuck_vram`` with the pids still holding memory."""

    outcome: str
    reason: str
    footprint_mb: float | None = None
    freed_mb: float | None = None
    holders: tuple[int, ...] = ()


# --- the decisions (pure) ------------------------------------------------------------


def idle_expired(last_used: float | None, now: float, idle_ttl: float | None) -> bool:
    """Whether a running sidecar has been idle long enough to stop.

    >>> idle_expired(100.0, 130.0, 30.0), idle_expired(100.0, 129.0, 30.0), idle_expired(100.0, 1e9, None)
    (True, False, False)
    """
    return idle_ttl is not None and last_used is not None and now - last_used >= idle_ttl


def vram_back(before_start: float | None, while_up: float | None, after_stop: float | None,
              share: float = VRAM_BACK_SHARE) -> bool | None:
    """Whether the memory the sidecar took is back: at least ``share`` of its footprint
    (used while up minus used before it started) freed since. None when unknown.

    >>> vram_back(1000, 21000, 2000), vram_back(1000, 21000, 7000), vram_back(None, 21000, 2000)
    (True, False, None)
    >>> vram_back(1000, 1000, 1000)  # it took nothing: nothing to give back
    True
    """
    if None in (before_start, while_up, after_stop):
        return None
    footprint = while_up - before_start
    if footprint <= 0:
        return True
    return while_up - after_stop >= share * footprint


def memory_holders(processes: Iterable[tuple[int, float | None]]) -> tuple[int, ...]:
    """The pids that still hold GPU memory, from (pid, MiB used) pairs.

    >>> memory_holders([(7, 512.0), (8, 0.0), (9, None)])
    (7,)
    """
    return tuple(pid for pid, used in processes if used)


# --- the process ---------------------------------------------------------------------


class Sidecar:
    """One sidecar process group. Not thread-safe: the worker's main thread drives it
    (``status`` only reads, for the heartbeat).

    ``memory_used_mb`` reads the GPU's used memory (None when unknown); ``gpu_processes``
    lists (pid, MiB) of the processes holding GPU memory. Both default to "unknown", in
    which case a stop cannot be checked and is taken as done.
    """

    def __init__(self, spec: SidecarSpec, *, memory_used_mb: Callable[[], float | None] = lambda: None,
                 gpu_processes: Callable[[], Iterable[tuple[int, float | None]]] = lambda: (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.spec = spec
        self.memory_used_mb = memory_used_mb
        self.gpu_processes = gpu_processes
        self.clock = clock
        self.child: subprocess.Popen | None = None
        self.last_used: float | None = None
        self.before_start: float | None = None
        self.restart_after = 0.0   # clock time before which a crashed server is not restarted
        self.delay = 0.0           # the backoff, doubling while the server keeps dying young
        self.started_at: float | None = None
        self._last: dict | None = None  # what status() says once no server runs: how the last one ended
        self._started_wall: float | None = None

    @property
    def running(self) -> bool:
        return self.child is not None and self.child.poll() is None

    def ensure_up(self) -> None:
        """Start the sidecar if it is not running, and wait until it is healthy. A server
        that died since its last use is reaped and restarted after the backoff."""
        if self.running:
            return
        if self.child is not None:
            self._died()
        wait = self.restart_after - self.clock()
        if wait > 0:
            log.warning("sidecar died young: restarting it in %.1fs", wait)
            time.sleep(wait)
        self._start()
        self._await_health()

    def status(self) -> dict | None:
        """What the worker's heartbeat shows of its sidecar: ``up`` (its pid, since when),
        ``down`` (it died on its own), or how the last stop ended (``stopped`` or
        ``stuck_vram`` with the pids still holding GPU memory); None before its first start."""
        if self.child is not None:  # read, not polled: the keeper's thread asks too
            state = "up" if self.child.returncode is None else "down"
            return {"state": state, "pid": self.child.pid, "at": self._started_wall}
        return None if self._last is None else dict(self._last)

    def used(self) -> None:
        """A job just used the sidecar: its idle time starts again."""
        self.last_used = self.clock()

    def stop_if_idle(self) -> Stop | None:
        """Stop the sidecar when it has been idle past its TTL; what the stop found, or None."""
        if self.running and idle_expired(self.last_used, self.clock(), self.spec.idle_ttl):
            return self.stop(f"idle for {self.spec.idle_ttl:g}s")
        return None

    def stop(self, reason: str) -> Stop | None:
        """Stop the process group this sidecar started (SIGTERM, then SIGKILL past the grace),
        then check that its GPU memory came back. None when it was not running."""
        if self.child is None:
            return None
        while_up = self.memory_used_mb()
        child, self.child = self.child, None
        _end_group(child, self.spec.stop_grace)
        stop = self._check_vram(reason, while_up)
        self._last = {"state": stop.outcome, "pid": child.pid, "at": time.time(), "reason": stop.reason,
                      "footprint_mb": stop.footprint_mb, "freed_mb": stop.freed_mb, "holders": list(stop.holders)}
        log_line = log.warning if stop.outcome == STUCK_VRAM else log.info
        log_line("sidecar (pid %d) stopped: %s%s", child.pid, reason,
                 f"; GPU memory still held by pids {list(stop.holders)}" if stop.outcome == STUCK_VRAM else "")
        return stop

    # --- inside ---------------------------------------------------------------------

    def _start(self) -> None:
        self.before_start = self.memory_used_mb()
        try:
            # Its own session, so its process group is ours to end, and only it.
            self.child = subprocess.Popen(self.spec.argv(), stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise SidecarFailed(f"cannot start the sidecar {self.spec.command!r}: {exc.strerror or exc}") from None
        self.started_at = self.last_used = self.clock()
        self._started_wall = time.time()
        log.info("sidecar started (pid %d): %s", self.child.pid, self.spec.command)

    def _await_health(self) -> None:
        if self.spec.health_url is None:
            return
        deadline = self.clock() + self.spec.start_timeout
        while True:
            if not self.running:
                code = self.child.returncode if self.child is not None else None
                self._died()
                raise SidecarFailed(f"the sidecar exited (code {code}) before {self.spec.health_url} answered")
            if _healthy(self.spec.health_url):
                return
            if self.clock() >= deadline:
                self.stop("never became healthy")
                raise SidecarFailed(f"the sidecar's {self.spec.health_url} did not answer within "
                                    f"{self.spec.start_timeout:g}s; it was stopped")
            time.sleep(HEALTH_EVERY)

    def _died(self) -> None:
        """The server is gone without our stop: end what is left of its group, back off."""
        child, self.child = self.child, None
        if child is not None:
            _end_group(child, 0.0)
        lived = self.clock() - (self.started_at or self.clock())
        self.delay = restart_delay(self.delay, lived)
        self.restart_after = self.clock() + self.delay

    def _check_vram(self, reason: str, while_up: float | None) -> Stop:
        deadline = self.clock() + self.spec.vram_back_within
        while True:
            after = self.memory_used_mb()
            back = vram_back(self.before_start, while_up, after)
            footprint = None if None in (self.before_start, while_up) else while_up - self.before_start
            freed = None if None in (while_up, after) else while_up - after
            if back is None or back:
                return Stop(STOPPED, reason, footprint, freed)
            if self.clock() >= deadline:
                return Stop(STUCK_VRAM, reason, footprint, freed, memory_holders(self.gpu_processes()))
            time.sleep(min(0.5, self.spec.vram_back_within / 4))


def _healthy(url: str) -> bool:
    # Imported here: urllib.request brings http.client, ssl and email, which would slow the
    # start of every command (a worker imports this module) for a check few workers make.
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _end_group(child: subprocess.Popen, grace: float) -> None:
    """SIGTERM the child's process group (its own session: ``start_new_session``), SIGKILL
    it if the leader outlives ``grace``, and reap the leader."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            pass  # the group is gone
        try:
            child.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(child.pid, signal.SIGKILL)  # whatever the leader left behind in its group
    except (ProcessLookupError, PermissionError):
        pass
