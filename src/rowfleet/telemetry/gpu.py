"""What the NVIDIA GPUs are doing, read by running ``nvidia-smi`` as a subprocess.

Owns the ``--query-gpu`` and ``--query-compute-apps`` questions the watchdogs ask, the pure
parsers of their CSV answers, the pure classifier that turns a failed run into a short
"GPU unknown" reason, and ``sample_gpus``/``sample_gpu_processes``, the thin runners.

The parsers never raise on what nvidia-smi prints: every placeholder (``[N/A]``,
``[Not Supported]``, bare ``N/A``, ``[Unknown Error]``, ...) becomes ``None``, and a line that
does not fit is skipped and reported. The runners never raise either, not for a missing
binary nor for a hung driver: a sample holds either readings or an ``unknown`` reason.

No NVML bindings and no third-party modules; imports nothing from rowfleet.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
from typing import Any, Iterable, Mapping, Sequence

from rowfleet.telemetry.text import parse_count, text_value

# Every one of these fields exists in drivers as old as 410, so the question itself never
# fails with 'Field "..." is not a valid field to query.' ``mig.mode.current`` would say why
# utilization is missing, but asking for it breaks the whole query on pre-450 drivers; in
# MIG mode utilization.gpu reads ``[N/A]``, which is enough to know it is unknown.
QUERY_FIELDS = ("index", "uuid", "name", "utilization.gpu", "memory.used", "memory.total")
COMPUTE_APPS_FIELDS = ("pid", "used_memory", "gpu_uuid")

# nvidia-smi accepts several names for one field and echoes the canonical one in its CSV
# header (a request for ``gpu_name`` comes back headed ``name``), so columns are keyed by
# canonical name. The two queries alias ``name`` differently, hence two tables.
GPU_FIELD_ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id", "gpu_serial": "serial"}
COMPUTE_APPS_ALIASES = {"used_memory": "used_gpu_memory", "name": "process_name"}

# nvidia-smi loads the driver state on every start; without persistence mode that takes
# seconds on a many-GPU host. Past this it is hung, and so, probably, is the GPU.
DEFAULT_TIMEOUT = 15.0
_REAP_GRACE = 2.0  # how long to wait for a killed nvidia-smi before abandoning it

# The kinds of "GPU unknown": what the watchdog may act on without reading the message.
NOT_INSTALLED = "not-installed"
NOT_EXECUTABLE = "not-executable"
TIMEOUT = "timeout"
NO_DRIVER = "no-driver"
VERSION_MISMATCH = "version-mismatch"
NVML_MISSING = "nvml-missing"
NVML_ERROR = "nvml-error"
NO_DEVICES = "no-devices"
GPU_LOST = "gpu-lost"
DEVICE_ERROR = "device-error"
INVALID_FIELD = "invalid-field"
NO_PERMISSION = "no-permission"
UNREADABLE = "unreadable"
FAILED = "failed"


@dataclasses.dataclass(frozen=True)
class GpuReading:
    """One GPU as one ``--query-gpu`` row reports it; ``None`` wherever it did not say."""

    index: int | None
    uuid: str | None
    name: str | None
    utilization_percent: int | None  # None in MIG mode and on cards that do not report it
    memory_used_mib: int | None
    memory_total_mib: int | None


@dataclasses.dataclass(frozen=True)
class GpuProcess:
    """One process holding a compute context on a GPU (``--query-compute-apps``)."""

    pid: int
    gpu_uuid: str | None
    used_memory_mib: int | None  # None under Windows WDDM, where the OS manages GPU memory


@dataclasses.dataclass(frozen=True)
class GpuUnknown:
    """Why the GPUs' state is unknown: a ``kind`` to act on and a ``reason`` to show."""

    kind: str
    reason: str

    def __str__(self) -> str:
        return self.reason


@dataclasses.dataclass(frozen=True)
class GpuSample:
    """One run of ``--query-gpu``: readings, or ``unknown`` (then ``readings`` is empty)."""

    readings: tuple[GpuReading, ...] = ()
    unknown: GpuUnknown | None = None
    skipped: tuple[str, ...] = ()  # lines of the output that did not parse, and why


@dataclasses.dataclass(frozen=True)
class GpuProcessSample:
    """One run of ``--query-compute-apps``: processes (maybe none), or ``unknown``."""

    processes: tuple[GpuProcess, ...] = ()
    unknown: GpuUnknown | None = None
    skipped: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------
# Pure: CSV output to readings


_UNIT_IN_HEADER = re.compile(r"\s*\[[^\]]*\]\s*$")  # "memory.used [MiB]"
# Field names are lowercase words joined by dots, with some camelCase (encoder.stats.averageFps).
_FIELD_NAME = re.compile(r"^[a-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*$")
# Old drivers said [Not Supported], new ones [N/A]; some fields print N/A without brackets.


def column_name(cell: str, aliases: Mapping[str, str] = GPU_FIELD_ALIASES) -> str:
    """A header cell or requested field as its canonical field name, units dropped.

    >>> column_name(" memory.used [MiB]"), column_name("gpu_name"), column_name("utilization.gpu [%]")
    ('memory.used', 'name', 'utilization.gpu')
    """
    name = _UNIT_IN_HEADER.sub("", cell.strip())
    return aliases.get(name, name)


def _looks_like_header(cells: list[str], known: set[str], aliases: Mapping[str, str]) -> bool:
    # A header is all field names, and either carries a [unit] or names a field we know:
    # that keeps a data row of lowercase words from being mistaken for one.
    names = [_UNIT_IN_HEADER.sub("", c) for c in cells]
    if not all(_FIELD_NAME.match(n) for n in names):
        return False
    return any(n != c for n, c in zip(names, cells)) or any(aliases.get(n, n) in known for n in names)


def split_query_output(text: str, fields: Sequence[str],
                       aliases: Mapping[str, str] = GPU_FIELD_ALIASES) -> tuple[list[dict[str, str]], list[str]]:
    """Rows of nvidia-smi CSV as ``{canonical field: raw value}``, and the lines skipped.

    Reads ``--format=csv`` with or without ``noheader`` and ``nounits``. A header line (with
    or without ``[unit]`` suffixes) names the columns; without one, the columns are
    ``fields``, the fields that were asked for, in order. Values are not quoted by
    nvidia-smi, so a line is split on commas; a line with the wrong number of values is
    skipped and reported, never guessed at.

    >>> split_query_output("0, 35 %\\ngarbage\\n", ["index", "utilization.gpu"])
    ([{'index': '0', 'utilization.gpu': '35 %'}], ['line 2: 1 values for 2 columns: garbage'])
    >>> split_query_output("gpu_name, memory.used [MiB]\\nTesla T4, 0 MiB\\n", ["index"])[0]
    [{'name': 'Tesla T4', 'memory.used': '0 MiB'}]
    """
    columns = [column_name(f, aliases) for f in fields]
    known = set(columns) | set(aliases) | set(aliases.values())
    rows: list[dict[str, str]] = []
    skipped: list[str] = []
    for number, line in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if _looks_like_header(cells, known, aliases):
            # Loop mode (-l) and concatenated outputs may repeat the header; each one rules below it.
            columns = [column_name(cell, aliases) for cell in cells]
            continue
        if len(cells) != len(columns):
            skipped.append(f"line {number}: {len(cells)} values for {len(columns)} columns: {_clip(line)}")
            continue
        rows.append(dict(zip(columns, cells)))
    return rows, skipped


def reading_from_row(row: Mapping[str, str]) -> GpuReading:
    """A ``GpuReading`` from one row of ``split_query_output``; absent fields are ``None``.

    >>> reading_from_row({"index": "0", "utilization.gpu": "[N/A]", "memory.used": "59 MiB"})
    GpuReading(index=0, uuid=None, name=None, utilization_percent=None, memory_used_mib=59, memory_total_mib=None)
    """
    return GpuReading(**card_fields(row), utilization_percent=parse_count(row.get("utilization.gpu")))


def card_fields(row: Mapping[str, str]) -> dict[str, Any]:
    """What every decoder of a ``--query-gpu`` row reads alike (``GpuReading`` here,
    ``gpu_readings.GpuState``): which card it is, and its memory in use and in all.

    >>> card_fields({"index": "1", "uuid": "[N/A]", "memory.total": "81559 MiB"})
    {'index': 1, 'uuid': None, 'name': None, 'memory_used_mib': None, 'memory_total_mib': 81559}
    """
    return {"index": parse_count(row.get("index")), "uuid": text_value(row.get("uuid")),
            "name": text_value(row.get("name")), "memory_used_mib": parse_count(row.get("memory.used")),
            "memory_total_mib": parse_count(row.get("memory.total"))}


def parse_query_gpu(text: str, fields: Sequence[str] = QUERY_FIELDS) -> list[GpuReading]:
    """Per-GPU readings from ``nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]``.

    ``fields`` names the columns of output that has no header; a header, when present,
    wins. Lines that do not parse are left out (``split_query_output`` says which).

    >>> parse_query_gpu("0, GPU-1a, NVIDIA H100 80GB HBM3, 100, 19818, 81559\\n"
    ...                 "1, GPU-2b, NVIDIA H100 80GB HBM3, [N/A], 11125, 81559\\n")[1]
    GpuReading(index=1, uuid='GPU-2b', name='NVIDIA H100 80GB HBM3', utilization_percent=None, memory_used_mib=11125, memory_total_mib=81559)
    """
    rows, _ = split_query_output(text, fields, GPU_FIELD_ALIASES)
    return [reading_from_row(row) for row in rows]


def process_from_row(row: Mapping[str, str]) -> GpuProcess | None:
    """A ``GpuProcess`` from one row of compute-apps output; ``None`` if it names no pid.

    >>> process_from_row({"pid": "2140", "used_gpu_memory": "[N/A]", "gpu_uuid": "GPU-1a"})
    GpuProcess(pid=2140, gpu_uuid='GPU-1a', used_memory_mib=None)
    """
    pid = parse_count(row.get("pid"))
    if pid is None:
        return None
    return GpuProcess(pid=pid, gpu_uuid=text_value(row.get("gpu_uuid")), used_memory_mib=parse_count(row.get("used_gpu_memory")))


def parse_compute_apps(text: str, fields: Sequence[str] = COMPUTE_APPS_FIELDS) -> list[GpuProcess]:
    """Processes from ``nvidia-smi --query-compute-apps=FIELDS --format=csv[,noheader][,nounits]``.

    No processes is an empty answer (a bare header, or nothing at all), not an error.

    >>> parse_compute_apps("11345, 15690, GPU-1a\\n21180, [N/A], GPU-1a\\n")
    [GpuProcess(pid=11345, gpu_uuid='GPU-1a', used_memory_mib=15690), GpuProcess(pid=21180, gpu_uuid='GPU-1a', used_memory_mib=None)]
    """
    rows, _ = split_query_output(text, fields, COMPUTE_APPS_ALIASES)
    return [process for process in map(process_from_row, rows) if process is not None]


# ---------------------------------------------------------------------------------------
# Pure: summaries the watchdog asks for


def max_utilization(readings: Iterable[GpuReading]) -> int | None:
    """The busiest GPU's utilization; ``None`` if there are no GPUs or any one is unknown.

    One unknown GPU makes the whole answer unknown: the unknown one may be the job's, and a
    watchdog must not read "idle" from a partial view and kill a busy job.

    >>> r = lambda u: GpuReading(0, None, None, u, None, None)
    >>> max_utilization([r(3), r(97)]), max_utilization([r(3), r(None)]), max_utilization([])
    (97, None, None)
    """
    values = [reading.utilization_percent for reading in readings]
    return None if not values or None in values else max(values)


def total_memory_used_mib(readings: Iterable[GpuReading]) -> int | None:
    """Memory used across all GPUs; ``None`` if there are no GPUs or any one is unknown.

    >>> r = lambda m: GpuReading(0, None, None, None, m, 81559)
    >>> total_memory_used_mib([r(19818), r(0)]), total_memory_used_mib([r(19818), r(None)])
    (19818, None)
    """
    values = [reading.memory_used_mib for reading in readings]
    return None if not values or None in values else sum(values)


def gpu_memory_of_pids(processes: Iterable[GpuProcess], pids: Iterable[int]) -> int | None:
    """GPU memory held by the given processes (a job's process tree): 0 if they hold none,
    ``None`` if any of them holds an unknown amount (Windows WDDM).

    nvidia-smi reports pids as its own pid namespace sees them; inside a container they
    may not match the container's pids, and then this answers 0.

    >>> apps = [GpuProcess(11327, "GPU-1a", 2566), GpuProcess(11345, "GPU-1a", 15690), GpuProcess(7, "GPU-1a", None)]
    >>> gpu_memory_of_pids(apps, [11327, 11345]), gpu_memory_of_pids(apps, [1]), gpu_memory_of_pids(apps, [7])
    (18256, 0, None)
    """
    wanted = set(pids)
    values = [process.used_memory_mib for process in processes if process.pid in wanted]
    return None if None in values else sum(values)


# ---------------------------------------------------------------------------------------
# Pure: a failed run to a reason

# Checked in order, against stdout and stderr together (nvidia-smi prints most of its
# errors on stdout). Texts are those seen in the field; see tests/fixtures/hw/nvidia-smi/errors.
_FAILURE_TEXTS = (
    (re.compile(r"couldn't communicate with the NVIDIA driver"), NO_DRIVER,
     "{program} couldn't communicate with the NVIDIA driver (not loaded or not installed)"),
    (re.compile(r"Driver/library version mismatch(?:.*?NVML library version: *(?P<version>\S+))?", re.S),
     VERSION_MISMATCH, "NVIDIA driver/library version mismatch{version}: reboot after a driver upgrade"),
    (re.compile(r"couldn't find libnvidia-ml"), NVML_MISSING, "{program} couldn't find libnvidia-ml.so (NVIDIA driver not installed)"),
    (re.compile(r"device handle for GPU (?P<bus>\S+): GPU is lost"), GPU_LOST,
     "GPU {bus} is lost (fallen off the bus); a reboot is needed to recover it"),
    (re.compile(r"device handle for GPU (?P<bus>\S+?):? (?P<detail>[^\n]*)"), DEVICE_ERROR,
     "no device handle for GPU {bus}: {detail}"),
    (re.compile(r'Field "(?P<field>[^"]*)" is not a valid field to query'), INVALID_FIELD,
     'this driver does not know the field "{field}"'),
    (re.compile(r"Failed to initialize NVML: *(?P<detail>[^\n]*)"), NVML_ERROR, "failed to initialize NVML: {detail}"),
    (re.compile(r"No devices were found"), NO_DEVICES, "no NVIDIA GPUs found"),
    (re.compile(r"Insufficient Permissions", re.I), NO_PERMISSION, "{program}: insufficient permissions"),
)

# nvidia-smi's documented exit codes, for failures whose text is not one we know.
_FAILURE_CODES = {
    2: (FAILED, "{program} rejected its arguments (exit 2)"),
    4: (NO_PERMISSION, "{program}: no permission (exit 4)"),
    9: (NO_DRIVER, "NVIDIA driver is not loaded (exit 9)"),
    12: (NVML_MISSING, "NVML library couldn't be found or loaded (exit 12)"),
    15: (GPU_LOST, "a GPU has fallen off the bus or is inaccessible (exit 15)"),
    126: (NOT_EXECUTABLE, "{program} is not executable"),
    127: (NOT_INSTALLED, "{program} not found"),
}


def classify_gpu_failure(returncode: int | None, stdout: str = "", stderr: str = "", program: str = "nvidia-smi",
                         timeout: float | None = None) -> GpuUnknown:
    """Why a run of nvidia-smi told us nothing, as a short ``GpuUnknown``.

    ``returncode`` is ``None`` when the run timed out, 127 when the program was not found
    (what a shell would say), 126 when it could not be executed. A known message wins
    over the exit code, which the texts in the wild were not recorded with.

    >>> classify_gpu_failure(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    ...                         "Make sure that the latest NVIDIA driver is installed and running.\\n").kind
    'no-driver'
    >>> print(classify_gpu_failure(18, "Failed to initialize NVML: Driver/library version mismatch\\n"
    ...                                "NVML library version: 570.124\\n"))
    NVIDIA driver/library version mismatch (NVML 570.124): reboot after a driver upgrade
    >>> print(classify_gpu_failure(None, timeout=15))
    nvidia-smi did not answer within 15s (a hung driver or GPU?)
    >>> print(classify_gpu_failure(127, program="/opt/bin/nvidia-smi"))
    /opt/bin/nvidia-smi not found
    >>> print(classify_gpu_failure(3, "", "Something new\\n"))
    nvidia-smi failed (exit 3): Something new
    """
    if returncode is None:
        within = f" within {timeout:g}s" if timeout is not None else " in time"
        return GpuUnknown(TIMEOUT, f"{program} did not answer{within} (a hung driver or GPU?)")
    said = f"{stdout}\n{stderr}"
    for pattern, kind, message in _FAILURE_TEXTS:
        found = pattern.search(said)
        if found:
            details = {key: value or "" for key, value in found.groupdict().items()}
            if kind == VERSION_MISMATCH:
                details["version"] = f" (NVML {details['version']})" if details.get("version") else ""
            return GpuUnknown(kind, message.format(program=program, **details).rstrip(": "))
    if returncode in _FAILURE_CODES:
        kind, message = _FAILURE_CODES[returncode]
        return GpuUnknown(kind, message.format(program=program))
    first_line = next((line.strip() for line in said.splitlines() if line.strip()), "")
    tail = f": {_clip(first_line)}" if first_line else ""
    if returncode < 0:
        return GpuUnknown(FAILED, f"{program} was killed by signal {-returncode}{tail}")
    if returncode == 0:
        return GpuUnknown(UNREADABLE, f"{program} printed no readings we could parse{tail}")
    return GpuUnknown(FAILED, f"{program} failed (exit {returncode}){tail}")


def _clip(text: str, limit: int = 120) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------
# Thin runners


def sample_gpus(command: str | Sequence[str] = "nvidia-smi", timeout: float = DEFAULT_TIMEOUT,
                fields: Sequence[str] = QUERY_FIELDS) -> GpuSample:
    """Run ``nvidia-smi --query-gpu`` once and return its readings or why there are none.

    ``command`` is the program (a path or a name on PATH), or a program and leading
    arguments. Never raises: a missing binary, a timeout, a failed or unreadable run all
    come back as ``GpuSample(unknown=...)``.
    """
    argv = command_argv(command) + [f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    ran = run_nvidia_smi(argv, timeout)
    if isinstance(ran, GpuUnknown):
        return GpuSample(unknown=ran)
    returncode, stdout, stderr = ran
    rows, skipped = split_query_output(stdout, fields, GPU_FIELD_ALIASES)
    readings = tuple(reading_from_row(row) for row in rows)
    if returncode != 0 or not readings:
        return GpuSample(unknown=classify_gpu_failure(returncode, stdout, stderr, argv[0]), skipped=tuple(skipped))
    return GpuSample(readings=readings, skipped=tuple(skipped))


def sample_gpu_processes(command: str | Sequence[str] = "nvidia-smi", timeout: float = DEFAULT_TIMEOUT,
                         fields: Sequence[str] = COMPUTE_APPS_FIELDS) -> GpuProcessSample:
    """Run ``nvidia-smi --query-compute-apps`` once: the processes on the GPUs, or why not.

    Never raises; see ``sample_gpus``.
    """
    argv = command_argv(command) + [f"--query-compute-apps={','.join(fields)}", "--format=csv,noheader,nounits"]
    ran = run_nvidia_smi(argv, timeout)
    if isinstance(ran, GpuUnknown):
        return GpuProcessSample(unknown=ran)
    returncode, stdout, stderr = ran
    if returncode != 0:
        return GpuProcessSample(unknown=classify_gpu_failure(returncode, stdout, stderr, argv[0]))
    rows, skipped = split_query_output(stdout, fields, COMPUTE_APPS_ALIASES)
    processes = tuple(p for p in map(process_from_row, rows) if p is not None)
    return GpuProcessSample(processes=processes, skipped=tuple(skipped))


def command_argv(command: str | Sequence[str]) -> list[str]:
    """The program and leading arguments a runner is given, as an argv list."""
    return [command] if isinstance(command, str) else list(command)


def run_nvidia_smi(argv: Sequence[str], timeout: float) -> tuple[int, str, str] | GpuUnknown:
    """Run ``argv`` (no shell) and return its exit code, stdout and stderr; never raises.

    Not ``subprocess.run``: after a timeout it kills the child and then waits for it with
    no limit, and an nvidia-smi stuck in the kernel on a wedged GPU cannot die until the
    driver lets go, so the watchdog would hang with it. Here the child gets its own process
    group (so helpers it started die with it) and is abandoned if it outlives the kill.
    """
    program = argv[0]
    try:
        child = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, encoding="utf-8", errors="replace", start_new_session=True)
    except FileNotFoundError:
        return classify_gpu_failure(127, program=program)
    except PermissionError:
        return classify_gpu_failure(126, program=program)
    except OSError as exc:
        return GpuUnknown(FAILED, f"could not run {program}: {exc.strerror or exc}")
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _abandon(child)
        return classify_gpu_failure(None, program=program, timeout=timeout)
    except BaseException:  # a stop signal's exception: the child, in its own group, must not outlive us
        _abandon(child)
        raise
    return child.returncode, stdout, stderr


def _abandon(child: subprocess.Popen) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(child.pid, signal.SIGKILL)  # the group is the child's own: start_new_session
        else:
            child.kill()
    except OSError:
        pass  # already gone
    try:
        child.wait(timeout=_REAP_GRACE)
    except subprocess.TimeoutExpired:
        pass  # in uninterruptible sleep; subprocess reaps it later, if it ever returns
    for stream in (child.stdout, child.stderr):
        if stream is not None:
            stream.close()
