"""The host's telemetry sampler: reads the host every few seconds and keeps its flight
recorder, the ``host_samples`` rows.

One sampler writes each host's rows. It holds the host's lease (``host_samplers``) and
renews it with every row it writes, in the same transaction, so a second sampler on the
host (two supervisors, a stray ``rowfleet sampler``) stands by and writes nothing until
the first stops or dies and its lease lapses (``lease_ttl``).

Each turn (``run_once``) reads the host (``telemetry.sample.read_host``), turns the read
and the previous one into a row's readings (rates and counter deltas over the interval)
and writes the detail row. The GPUs' state comes from one nvidia-smi left running in loop
mode (``telemetry.gpu_stream``: starting nvidia-smi each turn would cost more than all the
rest); its clock-event counters (``-q -d PERFORMANCE``) are asked for every
``PERFORMANCE_EVERY`` seconds: they are cumulative, so asking less often loses no throttle
second. A host without nvidia-smi is asked again only every ``ABSENT_GPU_RECHECK`` seconds.
Every ``HEALTH_EVERY`` seconds the sampler that holds the host judges each GPU's health
(``telemetry.gpu_health``: uncorrectable ECC errors, row remaps, retired pages, the
driver's Xid lines in the kernel's ring buffer where this process may read it) and
records the verdicts (``Store.record_gpu_health``): a failing GPU is switched off for new
claims until an operator switches it on. Once a minute has
passed, its detail rows are folded into one minute row (``fold_minute``), written once
whoever folds it; a sampler that starts folds the minutes of the last hour it finds
unfolded, so a restart leaves no hole in the minute tier. Pruning both tiers is the
orchestrator's.

Runs as its own process (``rowfleet sampler``, or a child of a worker's supervisor), so a
database that is down or slow stalls only the sampler, never a worker: a failed turn is
logged and the next tries again. Imports the store, never a driver.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator, Sequence

from rowfleet import exitcodes
from rowfleet.config import Config
from rowfleet.errors import DatabaseBroken, RowfleetError
from rowfleet.store.wake import StopEvent
from rowfleet.store import Store, open_store, sqlite_path
from rowfleet.store import waiting
from rowfleet.store.telemetry import DETAIL, MINUTE
from rowfleet.telemetry import gpu, gpu_health, gpu_readings, gpu_xid
from rowfleet.telemetry.gpu_stream import GpuStateStream
from rowfleet.telemetry.readings import fold_minute
from rowfleet.telemetry.sample import HostReads, read_host, readings_of

log = logging.getLogger("rowfleet.sampler")

MINUTE_SECONDS = 60.0
PERFORMANCE_EVERY = 30.0    # seconds between reads of the GPUs' clock-event counters
HEALTH_EVERY = 30.0         # seconds between judgements of the GPUs' health: ECC, remaps and Xids change rarely
ABSENT_GPU_RECHECK = 300.0  # seconds before asking again for an nvidia-smi that was not there
REFOLD_WINDOW = 3600.0      # how far back a starting sampler looks for unfolded minutes
ERROR_LOG_EVERY = 60.0      # a failing database is logged once a minute, not every turn


def lease_ttl(every: float) -> float:
    """How long a sampler's lease outlives its last row: three missed turns, at least 10 s.

    >>> lease_ttl(2.0), lease_ttl(30.0)
    (10.0, 90.0)
    """
    return max(10.0, 3 * every)


def holder_name(host: str, pid: int | None = None) -> str:
    """The name a sampler holds its host's lease by: the host and a process id. A sampler
    under a supervisor gives the supervisor's, so the child it restarts after a crash is
    the same holder and takes over at once instead of waiting for the lease to lapse.

    >>> holder_name("gpu1", 4242)
    'gpu1:4242'
    """
    return f"{host}:{os.getpid() if pid is None else pid}"


def minutes_to_fold(detail_times: Sequence[float], folded: Sequence[float], now: float) -> list[float]:
    """The starts of the minutes that have detail rows, are over by ``now`` and have no
    minute row yet, oldest first.

    >>> minutes_to_fold([61.0, 62.0, 125.0, 181.0], folded=[60.0], now=185.0)
    [120.0]
    """
    current = minute_of(now)
    return sorted({minute_of(at) for at in detail_times if minute_of(at) < current} - set(folded))


def minute_of(at: float) -> float:
    """The start of the minute holding ``at`` (epoch seconds).

    >>> minute_of(125.5), minute_of(120.0)
    (120.0, 120.0)
    """
    return math.floor(at / MINUTE_SECONDS) * MINUTE_SECONDS


@dataclasses.dataclass(frozen=True)
class Turn:
    """What one turn did: wrote a row at ``at``; or stood by, another sampler holding the
    host (``standby``); and the minutes folded."""

    at: float | None = None
    standby: bool = False
    folded: int = 0


class Sampler:
    """The sampler of ``config.host``: ``run_once()`` is one turn, ``run(stop)`` the loop."""

    def __init__(self, store: Store, config: Config, *, root: str = "/", paths: Sequence[str] = (),
                 holder: str | None = None, read: Callable[..., HostReads] = read_host,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.config = config
        self.host = config.host
        self.holder = holder or holder_name(config.host)
        self.every = config.sample_every
        self.ttl = lease_ttl(self.every)
        self.root = root
        self.paths = tuple(paths)
        self._read = read
        self._monotonic = monotonic
        self._command = gpu.command_argv(config.nvidia_smi)
        self._stream = GpuStateStream(self._command, self.every)
        self.previous: HostReads | None = None
        self.last_readings: dict[str, Any] = {}
        self.performance_before: gpu_readings.GpuPerformanceSample | None = None
        self._next_performance = 0.0
        self._next_health = 0.0
        self._health: dict[int, str] = {}  # each GPU's last verdict recorded ('' healthy), for the log
        self._gpu_absent_until = 0.0
        self.holding = False
        self._announced_standby = False
        self._last_state_timed_out = False
        self._folded_until: float | None = None  # minutes before this are folded (or looked at)

    # --- one turn ------------------------------------------------------------------------

    def run_once(self) -> Turn:
        """Read the host, write its row if this sampler holds the host, fold a finished minute."""
        reads = self._read_host()
        readings = readings_of(self.previous, reads, self.performance_before)
        self.previous, self.last_readings = reads, readings
        if reads.performance is not None and not reads.performance.unknown:
            self.performance_before = reads.performance
        if not self.holding:
            self.holding = self.store.acquire_sampler(self.host, self.holder, self.ttl)
            if not self.holding:
                if not self._announced_standby:
                    log.info("another sampler writes host %r's samples; standing by", self.host)
                    self._announced_standby = True
                return Turn(standby=True)
            self._announced_standby = False
            log.info("sampling host %r every %gs", self.host, self.every)
        at = self.store.record_host_sample(self.host, self.holder, self.ttl, readings)
        if at is None:
            self.holding = False
            log.warning("another sampler took host %r over; standing by", self.host)
            return Turn(standby=True)
        # Not right after a state query that timed out: the health query would hang as long.
        if self.previous.gpu is not None and not self._last_state_timed_out and self._monotonic() >= self._next_health:
            self._next_health = self._monotonic() + HEALTH_EVERY
            self._judge_gpus()
        return Turn(at=at, folded=self._fold_minutes(at))

    def _judge_gpus(self) -> None:
        """Judge every GPU's health and record each verdict; a GPU the gate switches off is
        logged as an error, once."""
        readings, unknown = gpu_readings.sample_gpu_health(self._command)
        if unknown is not None:
            return  # the state query says why, in the sample's row
        log_text = gpu_readings.read_kernel_log()
        xids = gpu_xid.parse_xid_log(log_text, boot_time=_boot_time(), now=time.time()) if log_text else []
        for verdict in gpu_health.health_verdict(readings, xids, now=time.time()):
            if verdict.index is None:
                continue  # a GPU nvidia-smi no longer lists: its worker finds no GPU anyway
            said = verdict.reason if verdict.failing else ""
            switch = self.store.record_gpu_health(self.host, verdict.index, said)
            if said and self._health.get(verdict.index) != said and switch.off:
                log.error("GPU %d of host %r is failing (%s): switched off for new claims until an operator "
                          "switches it on (rowfleet gpu-control on %d --host %s)", verdict.index, self.host, said,
                          verdict.index, self.host)
            self._health[verdict.index] = said

    def _read_host(self) -> HostReads:
        now = self._monotonic()
        ask_gpu = now >= self._gpu_absent_until
        ask_performance = ask_gpu and now >= self._next_performance
        reads = self._read(self.root, self.paths,
                           gpu=self._gpu_states if ask_gpu else None,
                           performance=self._performance_unless_hung if ask_performance else None,
                           clock=self._monotonic)
        if ask_performance:
            self._next_performance = now + PERFORMANCE_EVERY
        if reads.gpu is not None and reads.gpu.unknown is not None and reads.gpu.unknown.kind == gpu.NOT_INSTALLED:
            self._gpu_absent_until = now + ABSENT_GPU_RECHECK
            reads = dataclasses.replace(reads, gpu=None, performance=None)  # no GPU is no error
        return reads

    def _gpu_states(self) -> gpu_readings.GpuStateSample:
        states = self._stream.latest()
        self._last_state_timed_out = states.unknown is not None and states.unknown.kind == gpu.TIMEOUT
        return states

    def _performance(self) -> gpu_readings.GpuPerformanceSample:
        return gpu_readings.sample_performance(self._command)

    def _performance_unless_hung(self) -> gpu_readings.GpuPerformanceSample:
        # Asked right after the state query: one that just timed out would hang this too.
        if self._last_state_timed_out:
            return gpu_readings.GpuPerformanceSample(unknown=gpu.GpuUnknown(gpu.TIMEOUT, "nvidia-smi timed out"))
        return self._performance()

    def _fold_minutes(self, now: float) -> int:
        """Fold every finished minute since the last look (the last hour, at the start)."""
        current = minute_of(now)
        if self._folded_until is not None and current <= self._folded_until:
            return 0
        since = current - REFOLD_WINDOW if self._folded_until is None else self._folded_until
        detail = self.store.host_samples(self.host, DETAIL, since=since, until=current)
        folded = self.store.sample_times(self.host, MINUTE, since=since)
        written = 0
        for minute in minutes_to_fold([row.at for row in detail], folded, now):
            rows = [row.readings for row in detail if minute_of(row.at) == minute and row.error is None]
            if rows and self.store.record_host_minute(self.host, minute, fold_minute(rows)):
                written += 1
        self._folded_until = current
        return written

    # --- the loop ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """A turn every ``sample_every`` seconds until ``stop``; the lease is let go at the end."""
        last_error = -math.inf
        try:
            while not stop.is_set():
                started = self._monotonic()
                try:
                    self.run_once()
                except DatabaseBroken:
                    raise
                except RowfleetError as exc:
                    self.holding = False  # renewed only by a row written: take it again next turn
                    if started - last_error >= ERROR_LOG_EVERY:
                        log.warning("host sample not written (%s); trying again every %gs", exc, self.every)
                        last_error = started
                stop.wait(max(0.0, self.every - (self._monotonic() - started)))
        finally:
            self.close()

    def close(self) -> None:
        """Stop the nvidia-smi stream and let the host's lease go (it lapses anyway)."""
        self._stream.close()
        if self.holding:
            self.holding = False
            try:
                self.store.release_sampler(self.host, self.holder)
            except RowfleetError:
                pass  # it lapses by itself


class Interrupted(BaseException):
    """A stop signal arrived while the sampler was busy (a hung nvidia-smi, a slow write):
    raised out of the signal handler so that nothing is waited for. A BaseException, so
    that no ``except Exception`` on the way swallows it."""


class StopSignal:
    """The sampler process's stop signal, installed as its handler: it sets ``event`` and,
    while ``sample_host`` is sampling, raises ``Interrupted`` so that nothing is waited
    for. Outside that span (logging why sampling ended, the way out of the process) it only
    sets the event: an exception raised there would escape every handler as a traceback.

    Python runs a handler between any two bytecodes, so ``Interrupted`` may be raised
    inside a weakref callback or a ``__del__``, where Python cannot pass it on: it prints
    it as "Exception ignored" and goes on. ``install`` catches that case and asks for the
    interruption again ``REDELIVER_AFTER`` seconds later (SIGALRM, a timer of the kernel's:
    it also breaks a blocking read), from wherever sampling is by then."""

    REDELIVER_AFTER = 0.01

    def __init__(self) -> None:
        self.event = StopEvent()  # a threading.Event's set() could wait for a lock this handler interrupted
        self._armed = False
        self._sampling = False

    def __call__(self, *_: Any) -> None:
        self.event.set()
        if self._armed:
            self._armed = False  # once: the way out (letting the lease go) runs undisturbed
            raise Interrupted()

    def install(self) -> None:
        """Take SIGALRM and the unraisable hook of this process (the sampler's own): the
        redelivery described above. Only from the main thread, as ``signal.signal``."""
        signal.signal(signal.SIGALRM, self)
        previous = sys.unraisablehook

        def hook(unraisable: Any) -> None:
            if isinstance(unraisable.exc_value, Interrupted):
                self._redeliver()
            else:
                previous(unraisable)

        sys.unraisablehook = hook

    def _redeliver(self) -> None:
        if self._sampling:
            self._armed = True
            signal.setitimer(signal.ITIMER_REAL, self.REDELIVER_AFTER)

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        self._armed = self._sampling = True
        try:
            yield
        finally:
            self._armed = self._sampling = False


def _boot_time() -> float | None:
    """When this host booted (epoch seconds), from ``/proc/uptime``: what dates the kernel
    log's records; None where it cannot be read."""
    try:
        with open("/proc/uptime") as handle:
            return time.time() - float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def disk_paths(config: Config) -> tuple[str, ...]:
    """Where the sampler reports disk space: the configured paths and, on SQLite, the
    database's folder (a PostgreSQL server's disk is its own host's business).

    >>> from rowfleet.config import Config
    >>> disk_paths(Config(db="/data/jobs.db", sample_paths=("/models",)))
    ('/models', '/data')
    """
    path = sqlite_path(config.db)
    folder = (os.path.dirname(os.path.abspath(path)),) if path else ()
    return tuple(dict.fromkeys(config.sample_paths + folder))


def sample_host(config: Config, stop_signal: StopSignal, paths: Sequence[str] | None = None,
                holder: str | None = None) -> int:
    """The sampler process's body: wait for the database and its schema, then sample until
    ``stop_signal`` arrives; the exit code (0 once stopped). ``holder``: see ``holder_name``."""
    stop = stop_signal.event
    try:
        with stop_signal.interruptible():
            store = waiting.open_when_ready(lambda: open_store(config), stop, config.poll, log,
                                            ready=lambda opened: opened.require_schema())
            if store is None:
                return exitcodes.OK
            with store:
                Sampler(store, config, paths=disk_paths(config) if paths is None else paths,
                        holder=holder).run(stop)
    except Interrupted:
        pass  # stopped mid-turn: the lease was let go on the way out, or lapses
    return exitcodes.OK
