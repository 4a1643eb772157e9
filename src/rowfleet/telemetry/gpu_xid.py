"""The NVIDIA driver's Xid lines, read from a kernel log: which GPU (by PCI bus id), which
code, when, which process, and what the code says about the card (``xid_class``: the card
failing, a job's own fault, or neither). ``rowfleet.telemetry.gpu_health`` judges a card by
them together with its memory-error counters.

Reads ``dmesg``, ``dmesg -T``, ``journalctl -k``, syslog and ``/dev/kmsg`` lines; a line that
is no Xid is skipped, and nothing here raises on what the kernel printed. Pure: no I/O and no
clock (the caller passes the text, the boot time and ``now``); imports nothing of rowfleet's.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timezone, tzinfo
from typing import Iterable

# What an Xid says about the card.
CARD_FAULT = "card"
APP_FAULT = "app"
OTHER = "other"

# Xid codes and what NVIDIA calls them (lowercased), from the "Xid Errors" document
# (docs.nvidia.com/deploy/xid-errors) and its Xid Catalog for Ampere and later
# (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html). A code not named here is
# still parsed and shown by number; it is of class OTHER unless a threshold says otherwise.
XID_NAMES = {
    8: "GPU stopped processing",
    13: "graphics engine exception",
    31: "GPU memory page fault",
    32: "invalid or corrupted push buffer stream",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to previous errors",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    154: "GPU recovery action changed",
}

CARD_FAULT_XIDS = frozenset({48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 154})
"""Xid codes that mean the card itself is failing, and where that comes from.

NVIDIA's "Xid Errors" document gives each code its possible causes (hardware error, driver
error, user application error, bus error, thermal issue, frame-buffer corruption), and its Xid
Catalog for Ampere and later an immediate action (RESTART_APP, RESET_GPU, RESTART_BM for a
reboot, CONTACT_SUPPORT). These are the codes whose cause is the card, its memory, firmware,
links or bus, so that the next job on it would meet the same fault:

- Memory: 48 double-bit ECC error; 94 contained and 95 uncontained ECC error (94 killed only
  the job that touched the bad memory, but that memory waits for a row remap, which takes a
  GPU reset); 63 a page retirement or row remap was recorded and waits for a reset or driver
  reload; 64 it could not be recorded. NVIDIA's "Dynamic Page Retirement" and "GPU Memory Error
  Management" documents. 92, a high rate of corrected single-bit errors, and 63 are treated by
  some fleets as early warnings to watch rather than faults; rowfleet takes the card out,
  since both say its memory is going, and a caller who disagrees passes ``card_fault_xids``
  without them.
- Firmware: 62 internal micro-controller halt; 119 GSP RPC timeout; 120 GSP error: the card's
  own processors stopped answering; the catalog's action is a GPU reset.
- Links and bus: 74 NVLink error; 79 the GPU has fallen off the bus (a reboot at the least).
- 154 the driver's own recommended recovery action changed: failing, unless it changed back
  to "None" (``xid_class``).
"""

APP_FAULT_XIDS = frozenset({13, 31, 43, 45})
"""Xid codes that are a job's fault, not the card's. 13 graphics engine exception (an illegal
instruction, an out-of-range address), 31 GPU memory page fault (an invalid address) and 43
the GPU stopped processing the job's work: NVIDIA's table lists a user application error
among their causes, and the catalog's action is restarting the application. 45 is the driver
tearing down a job's channels after another error; that error, if it was the card's, is
judged by its own code."""


@dataclasses.dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid`` line of a kernel log.

    ``at`` is the moment in seconds since the epoch when the line says it (or when
    ``since_boot`` and the boot time together do); ``None`` when it does not.
    """

    code: int
    bus_id: str  # as pci_key makes it: "0000:3b:00"
    message: str
    pid: int | None = None
    process: str | None = None
    at: float | None = None
    since_boot: float | None = None
    uuid: str | None = None  # from the driver's "NVRM: GPU at PCI:...: GPU-..." line, when the log has it
    gpu_instance: int | None = None  # MIG attribution, "GPU-I:01"
    compute_instance: int | None = None  # "GPU-CI:00"
    line: str = dataclasses.field(default="", repr=False, compare=False)

    @property
    def name(self) -> str:
        """What NVIDIA calls this code, or ``"Xid N"`` for one not named here."""
        return XID_NAMES.get(self.code, f"Xid {self.code}")



# ---------------------------------------------------------------------------------------
# Pure: PCI bus ids


_PCI_ID = re.compile(r"^(?:PCI:)?(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{2}):(?P<device>[0-9A-Fa-f]{2})"
                     r"(?:\.(?P<function>[0-7]))?$")
PCI_IN_TEXT = re.compile(r"\b(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\b")


def pci_key(bus_id: str | None) -> str | None:
    """A PCI address as the one key both spellings share: domain, bus and device, lowercase.

    nvidia-smi prints ``00000000:3B:00.0`` (an 8-digit domain, uppercase, with the function);
    the kernel's Xid lines print ``PCI:0000:3b:00`` (4-digit domain, no function). A GPU is
    function 0, so dropping the function loses nothing.

    >>> pci_key("00000000:3B:00.0"), pci_key("PCI:0000:3b:00"), pci_key("3b:00.0"), pci_key("0009:01:00")
    ('0000:3b:00', '0000:3b:00', '0000:3b:00', '0009:01:00')
    >>> pci_key("[N/A]"), pci_key("garbage"), pci_key(None)
    (None, None, None)
    """
    found = _PCI_ID.match(bus_id.strip()) if bus_id is not None else None
    if not found:
        return None
    domain = int(found.group("domain") or "0", 16)
    return f"{domain:04x}:{found.group('bus').lower()}:{found.group('device').lower()}"


# ---------------------------------------------------------------------------------------
# Pure: Xid lines of a kernel log

# The driver writes (open-gpu-kernel-modules, src/nvidia/src/kernel/gpu/rc/kernel_rc.c,
# krcReportXid):
#   NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, <message>
#   NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u[ GPU-CI:%02u]): %d, pid=..., name=..., <message>   (MIG)
# with pid='<unknown>' and name=<unknown> when no process is to blame. Older drivers print no
# name (``31, pid=2708, Ch 0000003d, ...``; a 2019 report), older still no pid either (``31,
# Ch 0000003a, intr 10000000. ...``; driver 418), and the oldest no "PCI:" (``Xid (0000:03:00): 14,``).
_BDF = r"[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}"
_XID = re.compile(rf"NVRM: Xid \((?:PCI:)?(?P<bus>{_BDF})(?:\.[0-7])?(?P<attribution>[^)]*)\):\s*(?P<code>\d{{1,5}})\b,?\s*"
                  r"(?P<rest>.*)$")
_PID = re.compile(r"^pid=(?:'?<unknown>'?|'?N/A'?|(?P<pid>\d{1,10}))(?:,\s*|$)")
_NAME = re.compile(r"^name=(?P<name>[^,]*)(?:,\s*|$)")
_MIG = re.compile(r"GPU-I:(?P<gi>\d+)(?:\s+GPU-CI:(?P<ci>\d+))?")
# Printed once per GPU before its first Xid: which card the bus id is.
_GPU_AT = re.compile(rf"NVRM: GPU at (?:PCI:)?(?P<bus>{_BDF}): (?P<uuid>GPU-[0-9A-Fa-f-]+)")
# Fallen off the bus without an Xid number: the driver's NV_DEV_PRINTF line beside Xid 79,
# and the probe's three-line message when the card is gone before the driver could use it.
_FELL_OFF = re.compile(rf"NVRM: GPU (?:PCI:)?(?P<bus>{_BDF})\.[0-7]: GPU has fallen off the bus")
_PROBE_GPU = re.compile(rf"NVRM: The NVIDIA GPU (?:PCI:)?(?P<bus>{_BDF})\.[0-7]\s*$")
_PROBE_FELL = "fallen off the bus and is not responding to commands"
_PROBE_SPAN = 3  # lines the probe's message runs to

# Where a line says when, in the prefix before "NVRM:".
_MONTHS = {name: number for number, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
_MONTH = "(?P<month>" + "|".join(_MONTHS) + ")"
_KMSG = re.compile(r"^\d{1,3},\d+,(?P<usec>\d+),[^;]*;")  # /dev/kmsg: priority,sequence,microseconds,flags;
_ISO = re.compile(r"^\s*\[?(?P<iso>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\]?")
_SYSLOG = re.compile(rf"^\s*{_MONTH} +(?P<day>\d{{1,2}}) (?P<time>\d{{2}}:\d{{2}}:\d{{2}})(?:\.(?P<fraction>\d{{1,9}}))?\s")
_CTIME = re.compile(rf"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) {_MONTH} +(?P<day>\d{{1,2}}) (?P<time>\d{{2}}:\d{{2}}:\d{{2}}) "
                    r"(?P<year>\d{4})\]")
_UPTIME = re.compile(r"\[\s*(?P<seconds>\d{1,10}\.\d{1,9})\]")  # dmesg's seconds since boot; "[ +6.01]" is a delta


def _line_time(prefix: str, boot_time: float | None, now: float | None, tz: tzinfo) -> tuple[float | None, float | None]:
    """(seconds since the epoch, seconds since boot) the prefix of a log line gives, each or neither."""
    since_boot = None
    found = _KMSG.match(prefix)
    if found:
        since_boot = int(found.group("usec")) / 1_000_000
    else:
        uptimes = _UPTIME.findall(prefix)
        since_boot = float(uptimes[-1]) if uptimes else None
    at = None
    try:
        if (found := _ISO.match(prefix)) is not None:
            moment = datetime.fromisoformat(found.group("iso").replace(" ", "T", 1).replace(",", ".", 1))
            at = (moment if moment.tzinfo else moment.replace(tzinfo=tz)).timestamp()
        elif (found := _CTIME.search(prefix)) is not None:
            at = _moment(int(found.group("year")), found, tz)
        elif (found := _SYSLOG.match(prefix)) is not None and now is not None:
            # Syslog leaves out the year: the latest year that puts the line not after now.
            year = datetime.fromtimestamp(now, tz).year
            at = _moment(year, found, tz)
            if at is not None and at > now + 86400:
                at = _moment(year - 1, found, tz)
    except (ValueError, OverflowError):
        at = None
    if at is None and since_boot is not None and boot_time is not None:
        at = boot_time + since_boot
    return at, since_boot


def _moment(year: int, found: re.Match, tz: tzinfo) -> float | None:
    hour, minute, second = (int(part) for part in found.group("time").split(":"))
    try:
        moment = datetime(year, _MONTHS[found.group("month")], int(found.group("day")), hour, minute, second, tzinfo=tz)
    except ValueError:  # 29 February of a year that has none
        return None
    fraction = found.groupdict().get("fraction")
    return moment.timestamp() + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)


def _xid_from(body: str, line: str, at: float | None, since_boot: float | None,
              uuids: Mapping[str, str]) -> XidEvent | None:
    found = _XID.search(body)
    if not found:
        return None
    bus = pci_key(found.group("bus"))
    if bus is None:
        return None
    rest = found.group("rest").strip()
    pid = process = None
    if (pid_found := _PID.match(rest)) is not None:
        pid = int(pid_found.group("pid")) if pid_found.group("pid") else None
        rest = rest[pid_found.end():]
        if (name_found := _NAME.match(rest)) is not None:
            name = name_found.group("name").strip()
            process = None if name in ("", "<unknown>") else name
            rest = rest[name_found.end():]
    mig = _MIG.search(found.group("attribution"))
    return XidEvent(
        code=int(found.group("code")), bus_id=bus, message=rest.strip(), pid=pid, process=process, at=at,
        since_boot=since_boot, uuid=uuids.get(bus),
        gpu_instance=int(mig.group("gi")) if mig else None,
        compute_instance=int(mig.group("ci")) if mig and mig.group("ci") else None,
        line=line.strip())


def parse_xid_log(text: str, *, boot_time: float | None = None, now: float | None = None,
                  tz: tzinfo = timezone.utc) -> list[XidEvent]:
    """The driver's Xid reports in a kernel log, in the order the log has them.

    Reads ``dmesg`` (``[  123.456789]``: seconds since boot, placed in time by ``boot_time``),
    ``dmesg -T`` (``[Wed Jul 31 23:14:18 2024]``), ``journalctl -k`` and syslog (``Jul 31
    23:14:18 host kernel:``, whose year comes from ``now``), ``journalctl -o short-iso`` and
    other ISO 8601 stamps, and ``/dev/kmsg`` records (``4,9921,9370042162,-;``). Times with
    no zone of their own (``dmesg -T``, syslog) are in ``tz``, the host's zone. A line gives
    ``at=None`` when it carries no time this can place.

    The driver's fallen-off-the-bus messages that carry no Xid number are read as Xid 79,
    which is what they report, unless the log already has that GPU's Xid 79 for the same moment.

    >>> [(e.code, e.bus_id, e.pid, e.process, e.at) for e in parse_xid_log(
    ...     "[Fri Aug  9 13:32:56 2024] NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', name=<unknown>, "
    ...     "Contained: SM (0x1). RST: No, D-RST: No\\n"
    ...     "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 31, pid=2708, Ch 0000003d, intr 10000000\\n"
    ...     "unrelated line\\n", boot_time=1_700_000_000.0)]
    [(94, '0000:00:08', None, None, 1723210376.0), (31, '0000:3b:00', 2708, None, 1700001843.308145)]
    """
    events: list[XidEvent] = []
    uuids: dict[str, str] = {}
    probe: tuple[str, float | None, float | None, int, str] | None = None  # bus, at, since boot, lines left, line
    for raw in text.lstrip("\ufeff").splitlines():
        where = raw.find("NVRM:")
        if where < 0:
            probe = None
            continue
        prefix, body = raw[:where], raw[where:]
        if (found := _GPU_AT.search(body)) is not None and pci_key(found.group("bus")):
            uuids[pci_key(found.group("bus"))] = found.group("uuid")
            continue
        if probe is not None and _PROBE_FELL in body:
            _add_fall(events, probe[0], probe[1], probe[2], _PROBE_FELL, probe[4], uuids)
            probe = None
            continue
        probe = None if probe is None or probe[3] <= 1 else (*probe[:3], probe[3] - 1, probe[4])
        if not body.startswith("NVRM: Xid") and not _FELL_OFF.search(body) and not _PROBE_GPU.search(body):
            continue
        at, since_boot = _line_time(prefix, boot_time, now, tz)
        if (found := _PROBE_GPU.search(body)) is not None:
            probe = (pci_key(found.group("bus")), at, since_boot, _PROBE_SPAN, raw)
            continue
        if (found := _FELL_OFF.search(body)) is not None:
            _add_fall(events, pci_key(found.group("bus")), at, since_boot, "GPU has fallen off the bus.", raw, uuids)
            continue
        event = _xid_from(body, raw, at, since_boot, uuids)
        if event is not None:
            events.append(event)
    return events


def _add_fall(events: list[XidEvent], bus: str, at: float | None, since_boot: float | None, message: str, line: str,
              uuids: Mapping[str, str]) -> None:
    def same_moment(event: XidEvent) -> bool:
        if since_boot is not None and event.since_boot is not None:
            return abs(since_boot - event.since_boot) <= 1.0
        if at is not None and event.at is not None:
            return abs(at - event.at) <= 1.0
        return True  # no times to tell them apart: one fall, printed twice

    if any(event.code == 79 and event.bus_id == bus and same_moment(event) for event in events):
        return  # the same fall, already reported by its Xid line
    events.append(XidEvent(code=79, bus_id=bus, message=message, at=at, since_boot=since_boot, uuid=uuids.get(bus),
                           line=line.strip()))


def xid_class(code: int, message: str = "", card_fault_xids: Iterable[int] = CARD_FAULT_XIDS) -> str:
    """CARD_FAULT, APP_FAULT or OTHER: what an Xid says about the card (see CARD_FAULT_XIDS).

    Xid 154 reports the driver's recovery action changing; a change back to "None" says the
    card is fine again.

    >>> xid_class(79), xid_class(13), xid_class(14)
    ('card', 'app', 'other')
    >>> xid_class(154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)")
    'card'
    >>> xid_class(154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)")
    'other'
    """
    if code == 154 and re.search(r"\bto 0x0 \(None\)", message):
        return OTHER
    if code in frozenset(card_fault_xids):
        return CARD_FAULT
    return APP_FAULT if code in APP_FAULT_XIDS else OTHER
