"""The GPUs' state from one long-running nvidia-smi, for a sampler that asks every few seconds.

Starting nvidia-smi is most of what a query costs (it initialises NVML each time), so a
sampler that started it every 2 s would spend more CPU on that than on everything else it
reads. ``GpuStateStream`` starts it once, in loop mode (``--query-gpu=FIELDS
--format=csv,noheader,nounits -lms MS``), and keeps the last complete block of rows it
printed (one row per GPU) as a ``GpuStateSample``. The fields are those
``gpu_readings.sample_gpu_states`` found this driver to accept, by one ordinary query
first, which also answers at once when there is no driver or no nvidia-smi at all.

A stream that exits (a driver reload, a GPU lost) is started again at the next ``latest()``,
at most every ``restart_every`` seconds, a one-shot query answering meanwhile; one
that prints nothing for ``hung_after`` seconds is killed (its process group, as the
one-shot runner does) and its GPUs read as unknown (timeout) until a new one answers.
``close()`` kills it; a reader that dies without closing (kill -9) takes it along all the
same: the stream's next write meets a pipe with no reader, and SIGPIPE ends it.

Imports nothing of rowfleet outside ``rowfleet.telemetry``; never raises on what nvidia-smi
prints or does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Callable, Sequence

from rowfleet.telemetry import gpu
from rowfleet.telemetry.gpu_readings import (STATE_FIELD_ALIASES, STATE_FIELDS, GpuStateSample, sample_gpu_states,
                                             state_from_row)


class GpuStateStream:
    """nvidia-smi in loop mode, read by a thread; ``latest()`` is its newest block."""

    def __init__(self, command: str | Sequence[str] = "nvidia-smi", every: float = 2.0, *,
                 fields: Sequence[str] = STATE_FIELDS, restart_every: float = 30.0, hung_after: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.argv = gpu.command_argv(command)
        self.every = every
        self.fields = tuple(fields)
        self.restart_every = restart_every
        self.hung_after = hung_after if hung_after is not None else max(3 * every, 15.0)
        self._clock = clock
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._latest: GpuStateSample | None = None
        self._latest_at = 0.0
        self._next_start = 0.0
        self._gpus = 0  # rows in a block, as the one-shot query counted them

    def latest(self) -> GpuStateSample:
        """The newest complete block, or why there is none; starts (or restarts) the stream
        when it is not running."""
        now = self._clock()
        if not self._running():
            if now < self._next_start:  # it exited lately: ask once, as if there were no stream
                return sample_gpu_states(self.argv, fields=self.fields)
            self._next_start = now + self.restart_every
            return self._start(now)
        with self._lock:
            latest, at = self._latest, self._latest_at
        if now - at > self.hung_after:
            self._stop_child()
            return GpuStateSample(unknown=gpu.GpuUnknown(
                gpu.TIMEOUT, f"{self.argv[0]} printed nothing for {now - at:.0f}s (a hung driver or GPU?)"))
        return latest

    def close(self) -> None:
        """Stop the stream; ``latest()`` would start it again."""
        self._stop_child()

    # --- the child and its reader ------------------------------------------------------------

    def _start(self, now: float) -> GpuStateSample:
        first = sample_gpu_states(self.argv, fields=self.fields)
        if first.unknown is not None or not first.states:
            return first
        accepted = [field for field in self.fields if field not in first.left_out]
        argv = self.argv + [f"--query-gpu={','.join(accepted)}", "--format=csv,noheader,nounits",
                            f"--loop-ms={max(100, int(self.every * 1000))}"]
        try:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, encoding="utf-8", errors="replace",
                                     start_new_session=True)
        except OSError:
            return first  # the one-shot answer stands; the next start is tried later
        with self._lock:
            self._child, self._gpus = child, len(first.states)
            self._latest, self._latest_at = first, now
        self._reader = threading.Thread(target=self._read, args=(child, accepted), name="nvidia-smi-stream",
                                        daemon=True)
        self._reader.start()
        return first

    def _read(self, child: subprocess.Popen, fields: list[str]) -> None:
        block: list = []
        for line in child.stdout:  # ends when the child exits or is killed
            rows, _ = gpu.split_query_output(line, fields, STATE_FIELD_ALIASES)
            if not rows:
                continue
            state = state_from_row(rows[0])
            if block and (state.index is None or block[-1].index is None or state.index <= block[-1].index):
                block = []  # a new block began before the last one was whole
            block.append(state)
            if len(block) >= self._gpus:
                with self._lock:
                    self._latest, self._latest_at = GpuStateSample(states=tuple(block)), self._clock()
                block = []

    def _running(self) -> bool:
        with self._lock:
            child = self._child
        return child is not None and child.poll() is None

    def _stop_child(self) -> None:
        with self._lock:
            child, self._child = self._child, None
        if child is None:
            return
        try:
            os.killpg(child.pid, signal.SIGKILL)  # its own group: start_new_session
        except (ProcessLookupError, PermissionError):
            pass
        try:
            child.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass  # stuck in the kernel on a wedged GPU: abandoned, as the one-shot runner does
        if child.stdout is not None:
            try:
                child.stdout.close()
            except OSError:
                pass
