"""What a host sampler records of each NVIDIA GPU: its state now, and how long its clocks were held back.

Owns the ``--query-gpu`` question for a GPU's state (temperatures, power, clocks,
utilization, memory, performance state, fan, MIG mode, the active clock-event reasons),
the pure parser of its CSV answer into frozen ``GpuState`` values, the decoder of the
clock-event-reasons bitmask, the pure parser of ``nvidia-smi -q -d PERFORMANCE`` text into
per-GPU ``GpuPerformance`` counters, the pure ``throttle_seconds`` delta between two of
them, and ``sample_gpu_states``/``sample_performance``, the thin runners.

NVIDIA renamed "clock throttle reasons" to "clock event reasons" in the R535 drivers:
``--query-gpu`` still accepts the old ``clocks_throttle_reasons.*`` names but heads its
columns with the new ones, and ``-q`` prints "Clocks Event Reasons" where older drivers
print "Clocks Throttle Reasons". Both spellings parse, to the same names.

Like ``gpu``, whose CSV splitter, number parsing, placeholders, runner and failure
classifier it uses, nothing here raises on what nvidia-smi prints or on a missing, failing
or hung nvidia-smi: an unsupported value is ``None``, a failed run an ``unknown`` reason.

No NVML bindings and no third-party modules; imports nothing from rowfleet outside
``rowfleet.telemetry``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Mapping, Sequence

from rowfleet.telemetry import gpu_health
from rowfleet.telemetry.gpu import (
    DEFAULT_TIMEOUT, GPU_FIELD_ALIASES, INVALID_FIELD, GpuUnknown, card_fields, classify_gpu_failure, command_argv,
    run_nvidia_smi, split_query_output,
)
from rowfleet.telemetry.text import parse_count, parse_number

# NVML's nvmlClocksEventReason* constants (formerly nvmlClocksThrottleReason*, same bits),
# in bit order. BoardLimit and Reliability are in newer NVML headers only.
EVENT_REASON_BITS = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clock_setting", 0x100),
    ("board_limit", 0x200),
    ("reliability", 0x400),
)
_EVENT_REASON_ORDER = {name: position for position, (name, _) in enumerate(EVENT_REASON_BITS)}

# The reasons that have a per-reason ``--query-gpu`` field (display_clock_setting has none).
QUERIED_REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
                   "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown", "sync_boost")

# The reasons ``-q`` keeps a microsecond counter for (drivers after 570; 590 has them).
COUNTER_REASONS = ("sw_power_cap", "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
                   "hw_power_brake_slowdown")

# Reasons are asked for by their old names: every driver accepts those, and R535 and later
# answer under the new ones, so one question serves both. temperature.memory and
# mig.mode.current are unknown to some older drivers; sample_gpu_states leaves out what
# the driver rejects.
STATE_FIELDS = (
    "index", "uuid", "name", "temperature.gpu", "temperature.memory", "power.draw", "power.limit",
    "enforced.power.limit", "clocks.current.sm", "clocks.current.memory", "clocks.max.sm", "utilization.gpu",
    "utilization.memory", "memory.used", "memory.total", "pstate", "fan.speed", "mig.mode.current",
    "clocks_throttle_reasons.active",
) + tuple(f"clocks_throttle_reasons.{reason}" for reason in QUERIED_REASONS)

# Every spelling of a field this module reads, as the canonical name a header echoes.
STATE_FIELD_ALIASES = {
    **GPU_FIELD_ALIASES,
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "gpu.power.requested_limit": "power.limit",
    "gpu.power.current_limit": "enforced.power.limit",
    **{f"clocks_throttle_reasons.{name}": f"clocks_event_reasons.{name}"
       for name in ("active", "supported") + QUERIED_REASONS},
}

_PSTATE = re.compile(r"^P(\d{1,2})$")
_HEX_MASK = re.compile(r"^0[xX]([0-9A-Fa-f]{1,16})$")
# "GPU 00000000:0C:00.0" opens one GPU's block of -q output.
_GPU_LINE = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")

# -q labels, lowercased, of the clock-event reasons and of their counters.
_REASON_LABELS = {
    "idle": "gpu_idle", "applications clocks setting": "applications_clocks_setting", "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown", "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown", "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown", "display clock setting": "display_clock_setting",
}
_COUNTER_LABELS = {
    "sw power capping": "sw_power_cap", "sw power cap": "sw_power_cap", "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown", "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power braking": "hw_power_brake_slowdown", "hw power brake slowdown": "hw_power_brake_slowdown",
}
_REASONS_SECTIONS = frozenset({"clocks event reasons", "clocks throttle reasons"})
_COUNTERS_SECTIONS = frozenset({"clocks event reasons counters", "clocks throttle reasons counters"})


@dataclasses.dataclass(frozen=True)
class GpuState:
    """One GPU as one ``--query-gpu`` row reports it; ``None`` wherever it did not say."""

    index: int | None
    uuid: str | None
    name: str | None
    temperature_c: int | None
    memory_temperature_c: int | None  # HBM cards only; bare "N/A" on GDDR
    power_draw_w: float | None
    power_limit_w: float | None  # the limit software set (nvidia-smi -pl)
    enforced_power_limit_w: float | None  # the lowest of all limiters: what the board is held under
    sm_clock_mhz: int | None
    memory_clock_mhz: int | None
    max_sm_clock_mhz: int | None
    utilization_percent: int | None  # None in MIG mode
    memory_utilization_percent: int | None  # None in MIG mode
    memory_used_mib: int | None
    memory_total_mib: int | None
    pstate: int | None  # 0 (P0, fastest) to 15
    fan_percent: int | None  # may exceed 100; None on passively cooled cards
    mig_enabled: bool | None
    event_reasons: tuple[str, ...] | None  # the active clock-event reasons, names of EVENT_REASON_BITS


@dataclasses.dataclass(frozen=True)
class GpuStateSample:
    """One run of the state query: states, or ``unknown`` (then ``states`` is empty)."""

    states: tuple[GpuState, ...] = ()
    unknown: GpuUnknown | None = None
    skipped: tuple[str, ...] = ()  # lines of the output that did not parse, and why
    left_out: tuple[str, ...] = ()  # fields this driver does not know, asked without


@dataclasses.dataclass(frozen=True)
class GpuPerformance:
    """One GPU's block of ``nvidia-smi -q -d PERFORMANCE``; counters in microseconds since boot."""

    bus_id: str | None
    pstate: int | None
    event_reasons: tuple[str, ...] | None  # the reasons marked Active; None if none was listed
    sw_power_cap_us: int | None = None
    sync_boost_us: int | None = None
    sw_thermal_slowdown_us: int | None = None
    hw_thermal_slowdown_us: int | None = None
    hw_power_brake_slowdown_us: int | None = None


@dataclasses.dataclass(frozen=True)
class GpuPerformanceSample:
    """One run of ``-q -d PERFORMANCE``: a ``GpuPerformance`` per GPU, or ``unknown``."""

    gpus: tuple[GpuPerformance, ...] = ()
    unknown: GpuUnknown | None = None


# ---------------------------------------------------------------------------------------
# Pure: the clock-event reasons


def parse_event_mask(value: str | None) -> int | None:
    """A ``clocks_event_reasons.active`` value (a 64-bit ``0x`` bitmask) as an int, else ``None``.

    >>> parse_event_mask("0x0000000000000004"), parse_event_mask("[N/A]"), parse_event_mask("0x"), parse_event_mask("4")
    (4, None, None, None)
    """
    found = _HEX_MASK.match(value.strip()) if value is not None else None
    return int(found.group(1), 16) if found else None


def decode_event_reasons(mask: int) -> tuple[str, ...]:
    """The reasons set in a clock-event-reasons bitmask, in bit order.

    A bit NVML has not named (yet) comes back as ``unknown_0x...``, so nothing is dropped.

    >>> decode_event_reasons(0x1), decode_event_reasons(0x0), decode_event_reasons(0xC4)
    (('gpu_idle',), (), ('sw_power_cap', 'hw_thermal_slowdown', 'hw_power_brake_slowdown'))
    >>> decode_event_reasons(0x1000 | 0x8)
    ('hw_slowdown', 'unknown_0x1000')
    """
    names = [name for name, bit in EVENT_REASON_BITS if mask & bit]
    known = sum(bit for _, bit in EVENT_REASON_BITS)
    rest = mask & ~known
    names.extend(f"unknown_{1 << n:#x}" for n in range(rest.bit_length()) if rest >> n & 1)
    return tuple(names)


def _active(value: str | None) -> bool | None:
    text = (value or "").strip().lower()
    return True if text == "active" else False if text == "not active" else None


def _reasons_from_flags(flags: Mapping[str, bool | None]) -> tuple[str, ...] | None:
    if all(flag is None for flag in flags.values()):
        return None
    return tuple(sorted((name for name, flag in flags.items() if flag), key=lambda name: _EVENT_REASON_ORDER[name]))


def parse_pstate(value: str | None) -> int | None:
    """A performance state (``P0`` .. ``P15``) as its number, else ``None``.

    >>> parse_pstate("P0"), parse_pstate(" P12 "), parse_pstate("[N/A]"), parse_pstate("P32"), parse_pstate("0")
    (0, 12, None, None, None)
    """
    found = _PSTATE.match(value.strip()) if value is not None else None
    return int(found.group(1)) if found and int(found.group(1)) <= 15 else None


# ---------------------------------------------------------------------------------------
# Pure: CSV output to states


def _whole(value: str | None) -> int | None:
    # Temperatures may be below zero; everything else counted here may not.
    number = parse_number(value)
    return None if number is None else round(number)


def _watts(value: str | None) -> float | None:
    number = parse_number(value)
    return None if number is None or number < 0 else number


def _mig(value: str | None) -> bool | None:
    text = (value or "").strip().lower()
    return True if text == "enabled" else False if text == "disabled" else None


def state_from_row(row: Mapping[str, str]) -> GpuState:
    """A ``GpuState`` from one row of ``split_query_output``; absent fields are ``None``.

    The active reasons come from the ``active`` bitmask; where that is missing, from the
    per-reason ``Active``/``Not Active`` fields. In MIG mode utilization is ``None``:
    NVML does not report it for the whole GPU then.

    >>> state = state_from_row({"index": "0", "pstate": "P8", "clocks_event_reasons.active": "0x0000000000000004",
    ...                         "power.draw": "39.32 W", "mig.mode.current": "[N/A]", "temperature.memory": "N/A"})
    >>> state.pstate, state.event_reasons, state.power_draw_w, state.mig_enabled, state.memory_temperature_c
    (8, ('sw_power_cap',), 39.32, None, None)
    >>> state_from_row({"clocks_throttle_reasons.gpu_idle": "Active", "utilization.gpu": "7 %",
    ...                 "mig.mode.current": "Enabled"}).event_reasons
    ('gpu_idle',)
    """
    row = {STATE_FIELD_ALIASES.get(key, key): value for key, value in row.items()}
    mask = parse_event_mask(row.get("clocks_event_reasons.active"))
    if mask is not None:
        reasons = decode_event_reasons(mask)
    else:
        flags = {name: _active(row.get(f"clocks_event_reasons.{name}")) for name in QUERIED_REASONS}
        reasons = _reasons_from_flags(flags)
    mig = _mig(row.get("mig.mode.current"))
    return GpuState(
        **card_fields(row),
        temperature_c=_whole(row.get("temperature.gpu")),
        memory_temperature_c=_whole(row.get("temperature.memory")),
        power_draw_w=_watts(row.get("power.draw")),
        power_limit_w=_watts(row.get("power.limit")),
        enforced_power_limit_w=_watts(row.get("enforced.power.limit")),
        sm_clock_mhz=parse_count(row.get("clocks.current.sm")),
        memory_clock_mhz=parse_count(row.get("clocks.current.memory")),
        max_sm_clock_mhz=parse_count(row.get("clocks.max.sm")),
        utilization_percent=None if mig else parse_count(row.get("utilization.gpu")),
        memory_utilization_percent=None if mig else parse_count(row.get("utilization.memory")),
        pstate=parse_pstate(row.get("pstate")),
        fan_percent=parse_count(row.get("fan.speed")),
        mig_enabled=mig,
        event_reasons=reasons,
    )


def parse_gpu_states(text: str, fields: Sequence[str] = STATE_FIELDS) -> list[GpuState]:
    """Per-GPU states from ``nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]``.

    ``fields`` names the columns of output that has no header; a header, when present,
    wins, and may be a superset (``--query-gpu`` of every field): the columns this module
    does not read are ignored. Lines that do not parse are left out.

    >>> [s.event_reasons for s in parse_gpu_states("0, GPU-1a, NVIDIA L40S, 63, N/A, 144.97, 350.00, 350.00, "
    ...     "2520, 9001, 2520, 100, 9, 0, 46068, P0, [N/A], [N/A], 0x0000000000000000, "
    ...     + ", ".join(["Not Active"] * 8) + "\\n")]
    [()]
    """
    rows, _ = split_query_output(text, fields, STATE_FIELD_ALIASES)
    return [state_from_row(row) for row in rows]


# ---------------------------------------------------------------------------------------
# Pure: -q text to performance counters


def _label(text: str) -> str:
    return " ".join(text.lower().split())


def parse_performance(text: str) -> list[GpuPerformance]:
    """Each GPU's block of ``nvidia-smi -q -d PERFORMANCE`` (or of a whole ``-q``).

    A block starts at its ``GPU <bus id>`` line; its sections are read by indentation, so
    one GPU's counters never spill into the next one's. Lines that do not fit are skipped.

    >>> gpus = parse_performance('''GPU 00000000:0C:00.0
    ...     Performance State                  : P8
    ...     Clocks Event Reasons
    ...         Idle                           : Active
    ...         HW Slowdown                    : Not Active
    ...             HW Thermal Slowdown        : Not Active
    ...     Clocks Event Reasons Counters
    ...         SW Power Capping               : 212288427 us
    ...         HW Power Braking               : 0 us
    ... ''')
    >>> gpus[0].bus_id, gpus[0].pstate, gpus[0].event_reasons, gpus[0].sw_power_cap_us, gpus[0].sync_boost_us
    ('00000000:0C:00.0', 8, ('gpu_idle',), 212288427, None)
    >>> parse_performance("No devices were found\\n"), parse_performance("")
    ([], [])
    """
    gpus: list[GpuPerformance] = []
    block: dict | None = None
    sections: list[tuple[int, str]] = []  # the headings enclosing the current line: (indent, label)

    def close() -> None:
        if block is not None:
            gpus.append(GpuPerformance(
                bus_id=block["bus_id"], pstate=block["pstate"], event_reasons=_reasons_from_flags(block["flags"]),
                **{f"{reason}_us": block["counters"].get(reason) for reason in COUNTER_REASONS}))

    for raw in text.lstrip("\ufeff").splitlines():
        line = raw.expandtabs(8).rstrip()
        body = line.strip()
        if not body:
            continue
        indent = len(line) - len(body)
        if indent == 0:
            close()
            found = _GPU_LINE.match(body)
            block = {"bus_id": found.group(1), "pstate": None, "flags": {}, "counters": {}} if found else None
            sections = []
            continue
        if block is None:
            continue
        while sections and sections[-1][0] >= indent:
            sections.pop()
        key, colon, value = body.partition(":")
        if not colon:
            sections.append((indent, _label(body)))
            continue
        key, value = _label(key), value.strip()
        section = sections[0][1] if sections else None
        if section is None and key == "performance state":
            block["pstate"] = parse_pstate(value)
        elif section in _REASONS_SECTIONS and key in _REASON_LABELS:
            block["flags"][_REASON_LABELS[key]] = _active(value)
        elif section in _COUNTERS_SECTIONS and key in _COUNTER_LABELS:
            block["counters"][_COUNTER_LABELS[key]] = parse_count(value)
    close()
    return gpus


def throttle_seconds(t0: GpuPerformance, t1: GpuPerformance) -> dict[str, float | None]:
    """Seconds each reason held the clocks back between two readings of one GPU.

    ``None`` for a reason either reading lacks, for a counter that went backwards (a
    reboot or driver reload resets them), and for all of them if the readings are of two
    different GPUs.

    >>> t0 = GpuPerformance("00000000:0C:00.0", 8, (), sw_power_cap_us=212288427, sync_boost_us=5)
    >>> t1 = GpuPerformance("00000000:0C:00.0", 2, (), sw_power_cap_us=221310321, sync_boost_us=0)
    >>> seconds = throttle_seconds(t0, t1)
    >>> seconds["sw_power_cap"], seconds["sync_boost"], seconds["hw_thermal_slowdown"]
    (9.021894, None, None)
    """
    same = t0.bus_id == t1.bus_id or None in (t0.bus_id, t1.bus_id)
    seconds: dict[str, float | None] = {}
    for reason in COUNTER_REASONS:
        before, after = getattr(t0, f"{reason}_us"), getattr(t1, f"{reason}_us")
        valid = same and before is not None and after is not None and after >= before
        seconds[reason] = (after - before) / 1_000_000 if valid else None
    return seconds


# ---------------------------------------------------------------------------------------
# Thin runners


def sample_gpu_states(command: str | Sequence[str] = "nvidia-smi", timeout: float = DEFAULT_TIMEOUT,
                      fields: Sequence[str] = STATE_FIELDS) -> GpuStateSample:
    """Run the state query once and return each GPU's state, or why there are none (see
    ``query_gpus``). Never raises."""
    rows, skipped, left_out, unknown = query_gpus(command, timeout, fields, STATE_FIELD_ALIASES)
    if unknown is not None:
        return GpuStateSample(unknown=unknown, skipped=skipped, left_out=left_out)
    return GpuStateSample(states=tuple(state_from_row(row) for row in rows), skipped=skipped, left_out=left_out)


def query_gpus(command: str | Sequence[str], timeout: float, fields: Sequence[str],
               aliases: Mapping[str, str]) -> tuple[list[dict[str, str]], tuple[str, ...], tuple[str, ...],
                                                    GpuUnknown | None]:
    """Run ``--query-gpu=FIELDS`` once: (rows, lines skipped, fields left out, None), or why
    there are no rows in place of the None.

    An older driver rejects the whole query for one field it does not know; then that
    field is left out (``left_out`` says which; its column reads as unknown) and the query
    asked again, quickly, since the rejection is immediate. Never raises: a missing binary,
    a timeout, a failed or unreadable run all come back as the unknown.
    """
    fields = list(fields)
    left_out: list[str] = []
    while True:
        argv = command_argv(command) + [f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
        ran = run_nvidia_smi(argv, timeout)
        if isinstance(ran, GpuUnknown):
            return [], (), tuple(left_out), ran
        returncode, stdout, stderr = ran
        rows, skipped = split_query_output(stdout, fields, aliases)
        if returncode == 0 and rows:
            return rows, tuple(skipped), tuple(left_out), None
        unknown = classify_gpu_failure(returncode, stdout, stderr, argv[0])
        rejected = _rejected_field(unknown, fields, stdout + stderr)
        if rejected is None:
            return [], tuple(skipped), tuple(left_out), unknown
        fields.remove(rejected)
        left_out.append(rejected)


def sample_gpu_health(command: str | Sequence[str] = "nvidia-smi",
                      timeout: float = DEFAULT_TIMEOUT) -> tuple[list[gpu_health.GpuHealthReading], GpuUnknown | None]:
    """Run the health query (``gpu_health.HEALTH_FIELDS``) once: each GPU's memory-error
    state, and why there is none (None when read). A line that is no row is an unreadable
    reading, which ``gpu_health`` judges. Never raises."""
    rows, skipped, _, unknown = query_gpus(command, timeout, gpu_health.HEALTH_FIELDS, gpu_health.HEALTH_FIELD_ALIASES)
    readings = [gpu_health.health_from_row(row) for row in rows]
    return readings + [gpu_health.unreadable_line(why, why) for why in skipped], unknown


KERNEL_LOG = "/dev/kmsg"
KERNEL_LOG_MOST = 1 << 22  # bytes of the kernel's ring buffer read at most (its default is far less)


def read_kernel_log(path: str = KERNEL_LOG, most: int = KERNEL_LOG_MOST) -> str | None:
    """The records the kernel's ring buffer holds now (``/dev/kmsg``, one record a read, up
    to ``most`` bytes), where the driver writes its Xid lines; None where this process may
    not read it (``kernel.dmesg_restrict``, a container) or there is none. Never blocks."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    records: list[bytes] = []
    size = 0
    try:
        while size < most:
            try:
                record = os.read(handle, 8192)
            except BlockingIOError:
                break  # every record read
            except BrokenPipeError:
                continue  # records overwritten while reading: the next read goes on from the oldest kept
            except OSError:
                return None
            if not record:
                break
            records.append(record)
            size += len(record)
    finally:
        os.close(handle)
    return b"".join(records).decode("utf-8", "replace")


def _rejected_field(unknown: GpuUnknown, fields: list[str], said: str) -> str | None:
    # Without its index a row could not be told from another GPU's, so that one stays.
    if unknown.kind != INVALID_FIELD:
        return None
    return next((field for field in fields if field != "index" and f'"{field}"' in said), None)


def sample_performance(command: str | Sequence[str] = "nvidia-smi",
                       timeout: float = DEFAULT_TIMEOUT) -> GpuPerformanceSample:
    """Run ``nvidia-smi -q -d PERFORMANCE`` once: each GPU's clock-event counters, or why not.

    Never raises; see ``sample_gpu_states``.
    """
    argv = command_argv(command) + ["-q", "-d", "PERFORMANCE"]
    ran = run_nvidia_smi(argv, timeout)
    if isinstance(ran, GpuUnknown):
        return GpuPerformanceSample(unknown=ran)
    returncode, stdout, stderr = ran
    gpus = tuple(parse_performance(stdout))
    if returncode != 0 or not gpus:
        return GpuPerformanceSample(unknown=classify_gpu_failure(returncode, stdout, stderr, argv[0]))
    return GpuPerformanceSample(gpus=gpus)
