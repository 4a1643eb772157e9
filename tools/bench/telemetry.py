"""The bench's telemetry section: what the host's sampler costs, in CPU and in storage.

``sampler``: a real ``rowfleet sampler`` process at its default 2 s cadence and a real
idle ``rowfleet worker`` run side by side on one SQLite file for the same wall time, and
their CPU (their own and their children's, from ``/proc/PID/stat``) is compared; then
once more with the fake nvidia-smi (a Python script answering from captured output, so
the GPU path is paid for: the stream left running, and a query of the counters every 30 s). Then the storage: the rows that
sampler wrote are copied into fresh databases, as many as one host writes in an hour of
detail rows and in a day of minute rows (folded from them), and the file's growth per
row gives each tier's rows and bytes per host per day, and what each keeps by default.

Imports the harness, never the bench's command line.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

from .harness import ROOT, SRC, Bench, Row, progress


from rowfleet.services.sampler import MINUTE_SECONDS  # noqa: E402  (the harness set sys.path)
from rowfleet.store.telemetry import encode_readings  # noqa: E402
from rowfleet.telemetry.readings import fold_minute  # noqa: E402

LEGEND = """\
  sampler     % of one core over the run: a real `rowfleet sampler` beside an idle worker
              (the baseline) on one SQLite file, children's CPU counted (nvidia-smi).
  storage     rows and bytes a host writes a day, from the file's growth per row, at the
              default cadence (2 s) and horizons (detail 1 hour, minutes 7 days)."""
EVERY = 2.0
DAY = 86400.0
FAKE_NVIDIA_SMI = ROOT / "tests" / "fixtures" / "bin" / "nvidia-smi"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def sampler(bench: Bench) -> None:
    seconds = 6.0 if bench.sizes.rounds == 1 else 60.0  # --quick runs one round of everything
    for label, smi in (("no GPU (nvidia-smi absent)", "/nonexistent/nvidia-smi"),
                       ("fake nvidia-smi, Python", str(FAKE_NVIDIA_SMI))):
        path = bench.lab.database(f"sampler-{len(bench.rows)}")
        progress(f"sampler: {label}, {seconds:g} s beside an idle worker")
        sampler_cpu, worker_cpu = _side_by_side(path, seconds, smi)
        bench.add(Row(f"sampler CPU (% of a core), {label}", "FULL", f"{sampler_cpu:.2f}", f"{worker_cpu:.2f}",
                      f"{sampler_cpu / worker_cpu:.2f}x" if worker_cpu > 0 else "-",
                      f"{seconds:g} s at every {EVERY:g} s; baseline: an idle worker, same file"))
    _storage(bench, path)


def _cli(path: str, *args: str, **env: str) -> subprocess.Popen:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", ""))
                                                               if p),
                   "ROWFLEET_LOG_LEVEL": "WARNING", **env}
    return subprocess.Popen([sys.executable, "-m", "rowfleet", "--db", path, *args], env=environment,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _side_by_side(path: str, seconds: float, nvidia_smi: str) -> tuple[float, float]:
    env = {"FAKE_NVIDIA_SMI": "busy"}
    host = _cli(path, "sampler", "--every", str(EVERY), "--nvidia-smi", nvidia_smi, "--host", "bench", **env)
    worker = _cli(path, "worker", "--queue", "idle", "--host", "bench")
    try:
        _wait_for_rows(path, 1)
        time.sleep(EVERY)  # both past their start: only the steady state is counted
        before = (_cpu(host.pid), _cpu(worker.pid), time.monotonic())
        time.sleep(seconds)
        after = (_cpu(host.pid), _cpu(worker.pid), time.monotonic())
    finally:
        for process in (host, worker):
            process.terminate()
        for process in (host, worker):
            process.wait(60)
    wall = after[2] - before[2]
    return 100 * (after[0] - before[0]) / wall, 100 * (after[1] - before[1]) / wall


def _cpu(pid: int) -> float:
    """Seconds of CPU ``pid`` used, with its children's: the exited ones it waited for (each
    one-shot nvidia-smi) and the live ones (the nvidia-smi left running in loop mode)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/task/{pid}/children") as file:
            children = [int(child) for child in file.read().split()]
    except FileNotFoundError:
        return 0.0  # exited meanwhile: its parent's cutime holds it
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    return (utime + stime + cutime + cstime) / CLOCK_TICKS + sum(_cpu(child) for child in children)


def _wait_for_rows(path: str, n: int, timeout: float = 60.0) -> None:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        try:
            with sqlite3.connect(path) as conn:
                if conn.execute("SELECT count(*) FROM host_samples").fetchone()[0] >= n:
                    return
        except sqlite3.OperationalError:
            pass  # not migrated yet
        time.sleep(0.2)
    raise RuntimeError(f"the sampler wrote no row within {timeout:.0f}s")


def _storage(bench: Bench, source: str) -> None:
    with sqlite3.connect(source) as conn:
        readings = [json.loads(text) for (text,) in conn.execute(
            "SELECT readings FROM host_samples WHERE tier = 'detail' AND readings LIKE '%cpu.busy%' ORDER BY at")]
    if not readings:
        raise RuntimeError("the sampler wrote no row with rates to measure")
    per_minute = int(MINUTE_SECONDS / EVERY)
    minute = encode_readings(fold_minute((readings * per_minute)[:per_minute]))
    detail = [encode_readings(r) for r in readings]
    detail_rows, minute_rows = int(3600 / EVERY), 1440
    detail_bytes = _bytes_per_row(bench, "detail", detail, detail_rows)
    minute_bytes = _bytes_per_row(bench, "minute", [minute], minute_rows)
    detail_text = sum(len(text) for text in detail) / len(detail)
    for tier, rows_a_day, bytes_a_row, kept_rows, text in (
            ("detail", int(DAY / EVERY), detail_bytes, detail_rows, detail_text),
            ("minute", 1440, minute_bytes, 7 * 1440, len(minute))):
        bench.add(Row(f"host_samples, {tier} tier, per host per day", "FULL",
                      f"{rows_a_day:,} rows, {rows_a_day * bytes_a_row / 1e6:.1f} MB",
                      "-", "-",
                      f"{bytes_a_row:.0f} B a row ({text:.0f} B of readings, this box and one fake H100); "
                      f"kept by default: {kept_rows:,} rows, {kept_rows * bytes_a_row / 1e6:.1f} MB"))


def _bytes_per_row(bench: Bench, tier: str, texts: list[str], rows: int) -> float:
    """The growth of a fresh database's file per row, writing ``rows`` rows of ``texts``."""
    path = bench.lab.database(f"storage-{tier}")
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        empty = _file_bytes(conn)
        conn.executemany("INSERT INTO host_samples (host, tier, at, readings) VALUES ('bench', ?, ?, ?)",
                         [(tier, float(n), texts[n % len(texts)]) for n in range(rows)])
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return (_file_bytes(conn) - empty) / rows


def _file_bytes(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
