"""Whether an NVIDIA GPU is going bad, from what ``nvidia-smi`` and the kernel log say of it.

Owns the ``--query-gpu`` question for a card's memory-error state (uncorrectable ECC
counts, retired pages, remapped rows, the driver's recovery action) and the pure parsers of
its CSV answer and of ``nvidia-smi -q -x`` into frozen ``GpuHealthReading`` values, and
``health_verdict``, which says of each GPU, from those and from the driver's Xid lines
(``rowfleet.telemetry.gpu_xid`` reads them and says which codes mean the card is failing):
ok, failing (with one line an operator can act on) or unknown.

Unknown is never failing: a GeForce card has no ECC, no page retirement and no row
remapping, and prints ``[N/A]`` for all of them; only what a card does report takes it out
of service. Nothing here raises on what nvidia-smi or the kernel printed: a row that cannot
be read is a reading that says why (``unreadable``), a log line that is not an Xid is
skipped.

Pure: no I/O and no clock; the caller passes the text it read and ``now``. No NVML bindings
and no third-party modules; imports nothing from rowfleet outside ``rowfleet.telemetry``.
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ElementTree
from datetime import datetime, timezone
from typing import Iterable, Mapping, Sequence

from rowfleet.telemetry.gpu import GPU_FIELD_ALIASES, split_query_output
from rowfleet.telemetry.gpu_xid import CARD_FAULT, CARD_FAULT_XIDS, PCI_IN_TEXT, XidEvent, pci_key, xid_class
from rowfleet.telemetry.text import is_placeholder, parse_integer, text_value

# Every name below is in the --help-query-gpu of drivers 590, 595 and 610 (the fixtures'
# help texts); a test holds the query to them. The help of 465.27 and of a pre-535 driver
# lists neither remapped_rows.* nor gpu_recovery_action, and a driver rejects the whole query
# for one field it does not know: ask again without the field named in 'Field "x" is not a
# valid field to query.' (as gpu_readings.sample_gpu_states does); its column then reads as
# unknown.
HEALTH_FIELDS = (
    "index", "uuid", "pci.bus_id", "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.single_bit_ecc.count", "retired_pages.double_bit.count", "retired_pages.pending",
    "remapped_rows.correctable", "remapped_rows.uncorrectable", "remapped_rows.pending", "remapped_rows.failure",
    "gpu_recovery_action",
)
HEALTH_FORMAT = "--format=csv,noheader,nounits"

# The short names the help lists beside these fields; the CSV header echoes the long ones.
HEALTH_FIELD_ALIASES = {
    **GPU_FIELD_ALIASES,
    "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
    "retired_pages.dbe": "retired_pages.double_bit.count",
    "remapped_rows.sbe": "remapped_rows.correctable",
    "remapped_rows.dbe": "remapped_rows.uncorrectable",
}

# A verdict's status. Only FAILING stops a card taking work; UNKNOWN (nothing reported, or
# nothing readable) does not, or no GeForce card could ever run a job.
OK = "ok"
FAILING = "failing"
UNKNOWN = "unknown"

# How far back a card-fault Xid keeps a card out when no counter does: long enough that a
# card which faults under every job stays out between jobs, short enough that one reset
# without a reboot (which leaves the old lines in the log) takes work again the next day.
DEFAULT_XID_WINDOW = 24 * 3600.0

# Page retirement sets aside at most 64 pages of a card's memory (NVIDIA's "GPU Memory Error
# Management", page retirement against row remapping); at the limit the card cannot hide
# another bad page.
RETIRED_PAGES_LIMIT = 64


@dataclasses.dataclass(frozen=True)
class HealthThresholds:
    """What makes a card failing. ``None`` switches a counter's check off.

    >>> HealthThresholds().uncorrectable_volatile, HealthThresholds(xid_window=None).xid_window
    (0, None)
    """

    # More than this many uncorrectable ECC errors since the driver loaded. NVIDIA: these
    # are "detected but not corrected", so a job may have read corrupt data; on Ampere and
    # later the driver may offline the page and carry on, but a card that has just lost
    # memory is not one to hand the next job, and a GPU reset (which clears the counter)
    # brings it back.
    uncorrectable_volatile: int | None = 0
    # More than this many in the card's lifetime. Off: the aggregate counter never goes down,
    # so errors long since retired or remapped would keep a healthy card out for good.
    uncorrectable_aggregate: int | None = None
    # A row remap failed: the bank has no spare rows left; NVIDIA's RMA criterion.
    remap_failure: bool = True
    # A row remap is pending: it takes effect only when the GPU is reset.
    remap_pending: bool = True
    # A page retirement is pending: the bad page can still be allocated until the driver reloads.
    retirement_pending: bool = True
    # This many retired pages or more (single- and double-bit together): the driver cannot hide another.
    retired_pages: int | None = RETIRED_PAGES_LIMIT
    # The driver recommends a recovery action (gpu_recovery_action other than "None").
    recovery_action: bool = True
    # The Xid codes that fail a card; see CARD_FAULT_XIDS for where each comes from.
    card_fault_xids: frozenset[int] = CARD_FAULT_XIDS
    # Seconds a card-fault Xid counts for, back from ``now``; None: every one given counts.
    xid_window: float | None = DEFAULT_XID_WINDOW

    def __post_init__(self) -> None:
        for name in ("uncorrectable_volatile", "uncorrectable_aggregate", "retired_pages"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"HealthThresholds.{name} must be a whole number >= 0 or None, not {value!r}")
        if self.xid_window is not None and not self.xid_window > 0:
            raise ValueError(f"HealthThresholds.xid_window must be > 0 seconds or None, not {self.xid_window!r}")
        object.__setattr__(self, "card_fault_xids", frozenset(self.card_fault_xids))


@dataclasses.dataclass(frozen=True)
class GpuHealthReading:
    """One GPU's memory-error state as nvidia-smi reports it; ``None`` wherever it did not say.

    ``unreadable`` says why a row could not be read at all (then only ``bus_id`` and ``lost``
    may be known); ``garbled`` names fields whose value was neither a value nor a placeholder.
    """

    index: int | None
    uuid: str | None = None
    bus_id: str | None = None  # as pci_key makes it: "0000:3b:00"
    ecc_enabled: bool | None = None
    uncorrectable_volatile: int | None = None  # since the driver loaded
    uncorrectable_aggregate: int | None = None  # in the card's lifetime
    retired_single_bit: int | None = None  # pages retired after repeated single-bit errors
    retired_double_bit: int | None = None  # pages retired after a double-bit error
    retirement_pending: bool | None = None
    remapped_correctable: int | None = None  # rows remapped after correctable errors
    remapped_uncorrectable: int | None = None  # rows remapped after uncorrectable errors
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    recovery_action: str | None = None  # "None" when the driver asks for nothing
    unreadable: str | None = None
    lost: bool = False  # nvidia-smi said the GPU is lost (fallen off the bus)
    garbled: tuple[str, ...] = ()

    def reports_memory_state(self) -> bool:
        """Whether the card reported any of its memory-error counters or flags (ECC, page
        retirement, row remapping); a GeForce card reports none, only a recovery action."""
        return any(value is not None for value in (
            self.uncorrectable_volatile, self.uncorrectable_aggregate, self.retired_single_bit,
            self.retired_double_bit, self.retirement_pending, self.remapped_correctable,
            self.remapped_uncorrectable, self.remap_pending, self.remap_failed))


@dataclasses.dataclass(frozen=True)
class GpuHealth:
    """The verdict on one GPU: ``status`` is OK, FAILING or UNKNOWN; ``reason`` is one line."""

    index: int | None
    uuid: str | None
    bus_id: str | None
    status: str
    reason: str
    reasons: tuple[str, ...] = ()  # each fault on its own, most serious first; () unless failing

    @property
    def failing(self) -> bool:
        return self.status == FAILING


# ---------------------------------------------------------------------------------------
# Pure: the query and its CSV answer


def health_query_argv(fields: Sequence[str] = HEALTH_FIELDS) -> list[str]:
    """The arguments to give nvidia-smi for the health query (after the program itself).

    >>> health_query_argv(["index", "remapped_rows.failure"])
    ['--query-gpu=index,remapped_rows.failure', '--format=csv,noheader,nounits']
    """
    return [f"--query-gpu={','.join(fields)}", HEALTH_FORMAT]


def _flag(value: str | None, yes: str = "yes", no: str = "no") -> bool | None | str:
    if is_placeholder(value):
        return None
    text = value.strip().lower()
    return True if text == yes else False if text == no else value


def health_from_row(row: Mapping[str, str]) -> GpuHealthReading:
    """A ``GpuHealthReading`` from one row of ``split_query_output``; absent fields are ``None``.

    >>> reading = health_from_row({"index": "0", "pci.bus_id": "00000000:3B:00.0",
    ...     "ecc.errors.uncorrected.volatile.total": "3", "remapped_rows.failure": "Yes",
    ...     "retired_pages.pending": "[N/A]", "remapped_rows.pending": "maybe"})
    >>> reading.bus_id, reading.uncorrectable_volatile, reading.remap_failed, reading.retirement_pending
    ('0000:3b:00', 3, True, None)
    >>> reading.remap_pending, reading.garbled
    (None, ('remapped_rows.pending=maybe',))
    """
    row = {HEALTH_FIELD_ALIASES.get(key, key): value for key, value in row.items()}
    garbled: list[str] = []

    def count(field: str) -> int | None:
        value = row.get(field)
        if is_placeholder(value):
            return None
        number = parse_integer(value)
        if number is None:
            garbled.append(f"{field}={_clip(value, 40)}")
        return number

    def flag(field: str, yes: str = "yes", no: str = "no") -> bool | None:
        value = _flag(row.get(field), yes, no)
        if isinstance(value, str):
            garbled.append(f"{field}={_clip(value, 40)}")
            return None
        return value

    index = row.get("index")
    if parse_integer(index) is None and not is_placeholder(index):
        garbled.append(f"index={_clip(index, 40)}")
    bus = row.get("pci.bus_id")
    if pci_key(bus) is None and not is_placeholder(bus):
        garbled.append(f"pci.bus_id={_clip(bus, 40)}")
    uuid = text_value(row.get("uuid"))
    if uuid is not None and not _UUID.match(uuid):
        garbled.append(f"uuid={_clip(uuid, 40)}")
        uuid = None
    action = text_value(row.get("gpu_recovery_action"))
    if action is not None and not _ACTION.match(action):
        garbled.append(f"gpu_recovery_action={_clip(action, 40)}")
        action = None
    reading = GpuHealthReading(
        index=parse_integer(index),
        uuid=uuid,
        bus_id=pci_key(bus),
        ecc_enabled=flag("ecc.mode.current", "enabled", "disabled"),
        uncorrectable_volatile=count("ecc.errors.uncorrected.volatile.total"),
        uncorrectable_aggregate=count("ecc.errors.uncorrected.aggregate.total"),
        retired_single_bit=count("retired_pages.single_bit_ecc.count"),
        retired_double_bit=count("retired_pages.double_bit.count"),
        retirement_pending=flag("retired_pages.pending"),
        remapped_correctable=count("remapped_rows.correctable"),
        remapped_uncorrectable=count("remapped_rows.uncorrectable"),
        remap_pending=flag("remapped_rows.pending"),
        remap_failed=flag("remapped_rows.failure"),
        recovery_action=action,
    )
    if reading.index is None and reading.uuid is None and reading.bus_id is None:
        reason = "the row names no GPU (no index, UUID or PCI bus id)"
        return dataclasses.replace(reading, unreadable=reason, garbled=tuple(garbled))
    return dataclasses.replace(reading, garbled=tuple(garbled))


_SKIPPED_LINE = re.compile(r"^line (\d+): ")
_UUID = re.compile(r"^(?:GPU|MIG)-[0-9A-Za-z-]{1,80}$")  # masked captures print GPU-00000000-0000-...
_ACTION = re.compile(r"^[A-Za-z][A-Za-z0-9 ./-]{0,59}$")  # "None", "Reset", "Drain and Reset", ...
_LOST = re.compile(r"GPU is lost|fallen off the bus", re.I)


def unreadable_line(line: str, why: str) -> GpuHealthReading:
    """A reading for a line of output that is not a row: why, and which GPU if the line says.

    nvidia-smi prints some per-GPU failures in place of the GPU's row; "GPU is lost" is one
    (the card has fallen off the bus), and that one is a fault, not a mystery.

    >>> r = unreadable_line("Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. "
    ...                     "Reboot the system to recover this GPU", "1 values for 14 columns")
    >>> r.bus_id, r.lost, r.unreadable
    ('0000:02:00', True, '1 values for 14 columns')
    """
    found = PCI_IN_TEXT.search(line)
    return GpuHealthReading(index=None, bus_id=pci_key(found.group(0)) if found else None, unreadable=why,
                            lost=bool(_LOST.search(line)))


def parse_health(text: str, fields: Sequence[str] = HEALTH_FIELDS) -> list[GpuHealthReading]:
    """Per-GPU readings from ``nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]``.

    ``fields`` names the columns of output that has no header; a header, when present, wins
    and may be a superset (a query of every field). A line that is not a row becomes an
    ``unreadable`` reading, after the rows, that says why. Reads what a run printed; why a
    run failed as a whole (no driver, no devices) is ``gpu.classify_gpu_failure``'s.

    >>> [(r.index, r.uncorrectable_volatile, r.remap_failed, r.unreadable) for r in parse_health(
    ...     "0, GPU-1a, 00000000:3B:00.0, Enabled, 0, 0, [N/A], [N/A], [N/A], 0, 0, No, No, None\\n"
    ...     "1, GPU-2b, 00000000:5E:00.0, Enabled, 3, 3, [N/A], [N/A], [N/A], 0, 8, No, Yes, None\\n"
    ...     "garbage\\n")]
    [(0, 0, False, None), (1, 3, True, None), (None, None, None, 'line 3: 1 values for 14 columns: garbage')]
    """
    lines = text.lstrip("\ufeff").splitlines()
    rows, skipped = split_query_output(text, fields, HEALTH_FIELD_ALIASES)
    readings = [health_from_row(row) for row in rows]
    for why in skipped:
        found = _SKIPPED_LINE.match(why)
        number = int(found.group(1)) if found else 0
        raw = lines[number - 1] if 0 < number <= len(lines) else why
        readings.append(unreadable_line(raw, why))
    return readings


# ---------------------------------------------------------------------------------------
# Pure: nvidia-smi -q -x


def _xml_text(element: ElementTree.Element | None, path: str) -> str | None:
    found = element.find(path) if element is not None else None
    return None if found is None or found.text is None or not found.text.strip() else found.text.strip()


def _xml_sum(section: ElementTree.Element | None, tags: Iterable[str]) -> tuple[int | None, list[str]]:
    # Known parts are added up; parts the card does not report (N/A) are left out of the sum.
    total, garbled, known = 0, [], False
    for tag in tags:
        value = _xml_text(section, tag)
        if is_placeholder(value):
            continue
        number = parse_integer(value)
        if number is None:
            garbled.append(f"{tag}={_clip(value, 40)}")
            continue
        total, known = total + number, True
    return (total if known else None), garbled


def _xml_uncorrectable(errors: ElementTree.Element | None, scope: str) -> tuple[int | None, list[str]]:
    section = errors.find(scope) if errors is not None else None
    if section is None:
        return None, []
    if section.find("double_bit") is not None:  # schema v11 and older: per-location counts and a total
        return _xml_sum(section, ["double_bit/total"])
    return _xml_sum(section, [child.tag for child in section if "uncorrectable" in child.tag])


def _reading_from_xml(position: int, gpu: ElementTree.Element) -> GpuHealthReading:
    garbled: list[str] = []

    def flag(path: str, yes: str = "yes", no: str = "no") -> bool | None:
        value = _flag(_xml_text(gpu, path), yes, no)
        if isinstance(value, str):
            garbled.append(f"{path}={_clip(value, 40)}")
            return None
        return value

    def count(path: str) -> int | None:
        value, bad = _xml_sum(gpu, [path])
        garbled.extend(bad)
        return value

    errors = gpu.find("ecc_errors")
    volatile, bad_volatile = _xml_uncorrectable(errors, "volatile")
    aggregate, bad_aggregate = _xml_uncorrectable(errors, "aggregate")
    garbled.extend(bad_volatile + bad_aggregate)
    # Older drivers say "pending blacklist" for a retired page not yet set aside.
    pending = [flag("retired_pages/pending_retirement"), flag("retired_pages/pending_blacklist")]
    return GpuHealthReading(
        index=position,
        uuid=text_value(_xml_text(gpu, "uuid")),
        bus_id=pci_key(gpu.get("id")) or pci_key(_xml_text(gpu, "pci/pci_bus_id")),
        ecc_enabled=flag("ecc_mode/current_ecc", "enabled", "disabled"),
        uncorrectable_volatile=volatile,
        uncorrectable_aggregate=aggregate,
        retired_single_bit=count("retired_pages/multiple_single_bit_retirement/retired_count"),
        retired_double_bit=count("retired_pages/double_bit_retirement/retired_count"),
        retirement_pending=True if True in pending else False if False in pending else None,
        remapped_correctable=count("remapped_rows/remapped_row_corr"),
        remapped_uncorrectable=count("remapped_rows/remapped_row_unc"),
        remap_pending=flag("remapped_rows/remapped_row_pending"),
        remap_failed=flag("remapped_rows/remapped_row_failure"),
        recovery_action=text_value(_xml_text(gpu, "gpu_recovery_action")),
        garbled=tuple(garbled),
    )


def parse_health_xml(text: str) -> list[GpuHealthReading]:
    """Per-GPU readings from ``nvidia-smi -q -x``, every schema from v10 to v13.

    The XML has no index; GPUs come in index order, so the n-th ``<gpu>`` is index n (the
    ``minor_number`` is the device file's number, not the index). Text that is not this XML
    is one ``unreadable`` reading.

    >>> gpus = parse_health_xml('''<nvidia_smi_log><gpu id="00000000:00:1E.0">
    ...   <uuid>GPU-d37e</uuid><ecc_mode><current_ecc>Enabled</current_ecc></ecc_mode>
    ...   <ecc_errors><volatile><sram_uncorrectable>0</sram_uncorrectable><dram_uncorrectable>2</dram_uncorrectable>
    ...   </volatile></ecc_errors><remapped_rows>N/A</remapped_rows></gpu></nvidia_smi_log>''')
    >>> gpus[0].index, gpus[0].bus_id, gpus[0].uncorrectable_volatile, gpus[0].remap_failed
    (0, '0000:00:1e', 2, None)
    >>> parse_health_xml("No devices were found")[0].unreadable
    'not the XML of nvidia-smi -q -x: syntax error: line 1, column 0'
    """
    if "<!ENTITY" in text:  # nvidia-smi declares none; an entity could expand without bound
        return [GpuHealthReading(index=None, unreadable="the XML declares entities; nvidia-smi's never does")]
    try:
        root = ElementTree.fromstring(text.lstrip("\ufeff").strip())
    except ElementTree.ParseError as exc:
        return [GpuHealthReading(index=None, unreadable=f"not the XML of nvidia-smi -q -x: {exc}")]
    gpus = [root] if root.tag == "gpu" else root.findall("gpu")
    if not gpus:
        return [GpuHealthReading(index=None, unreadable=f"no <gpu> element under <{_clip(root.tag, 40)}>")]
    return [_reading_from_xml(position, gpu) for position, gpu in enumerate(gpus)]


def gpu_of(event: XidEvent, readings: Iterable[GpuHealthReading]) -> GpuHealthReading | None:
    """The reading of the GPU an Xid is about: by PCI bus id, else by UUID; ``None`` if none is.

    >>> readings = [GpuHealthReading(0, bus_id="0000:3b:00"), GpuHealthReading(1, bus_id="0000:5e:00")]
    >>> gpu_of(XidEvent(79, pci_key("PCI:0000:5e:00"), "GPU has fallen off the bus."), readings).index
    1
    """
    readings = list(readings)
    for reading in readings:
        if reading.bus_id is not None and reading.bus_id == event.bus_id:
            return reading
    for reading in readings:
        if reading.uuid is not None and event.uuid is not None and reading.uuid == event.uuid:
            return reading
    return None


# ---------------------------------------------------------------------------------------
# Pure: the verdict


def _when(event: XidEvent) -> str:
    if event.at is not None:
        return "at " + datetime.fromtimestamp(event.at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if event.since_boot is not None:
        return f"{event.since_boot:.0f}s after boot"
    return "in the kernel log"


def _age(event: XidEvent) -> float:
    return event.at if event.at is not None else float("-inf")  # a line with no time sorts as the oldest


def _xid_reasons(events: Sequence[XidEvent]) -> list[str]:
    # One reason per code, from its latest report; the latest code first.
    latest: dict[int, tuple[XidEvent, int]] = {}
    for event in events:
        seen, times = latest.get(event.code, (event, 0))
        latest[event.code] = (event if _age(event) >= _age(seen) else seen, times + 1)
    ordered = sorted(latest.values(), key=lambda pair: _age(pair[0]), reverse=True)
    return [f"XID {event.code} ({event.name}) {_when(event)}" + (f", {times} times" if times > 1 else "")
            for event, times in ordered]


def _counter_reasons(reading: GpuHealthReading, thresholds: HealthThresholds) -> list[str]:
    reasons = []
    if reading.lost:
        reasons.append("GPU is lost: nvidia-smi cannot reach it (fallen off the bus), reboot to recover it")
    if reading.unreadable is not None:
        return reasons  # the values of a row that names no GPU are no card's
    if thresholds.remap_failure and reading.remap_failed:
        reasons.append("row remapping failed: the memory has no spare rows left for bad ones")
    limit = thresholds.uncorrectable_volatile
    if limit is not None and reading.uncorrectable_volatile is not None and reading.uncorrectable_volatile > limit:
        reasons.append(f"uncorrectable ECC errors: {reading.uncorrectable_volatile} since the driver loaded")
    limit = thresholds.uncorrectable_aggregate
    if limit is not None and reading.uncorrectable_aggregate is not None and reading.uncorrectable_aggregate > limit:
        reasons.append(f"uncorrectable ECC errors: {reading.uncorrectable_aggregate} in the card's lifetime")
    if thresholds.recovery_action and reading.recovery_action not in (None, "None"):
        reasons.append(f"the driver asks for recovery: {reading.recovery_action}")
    if thresholds.remap_pending and reading.remap_pending:
        reasons.append("row remapping pending: reset the GPU to apply it")
    if thresholds.retirement_pending and reading.retirement_pending:
        reasons.append("page retirement pending: reset the GPU or reload the driver to apply it")
    retired = [count for count in (reading.retired_single_bit, reading.retired_double_bit) if count is not None]
    if thresholds.retired_pages is not None and retired and sum(retired) >= thresholds.retired_pages:
        reasons.append(f"retired pages: {sum(retired)}, at the limit of {thresholds.retired_pages}")
    return reasons


def _counts(event: XidEvent, thresholds: HealthThresholds, now: float | None) -> bool:
    if xid_class(event.code, event.message, thresholds.card_fault_xids) != CARD_FAULT:
        return False
    if now is None or thresholds.xid_window is None or event.at is None:
        return True  # no time to judge by: the caller chose the log, so the line counts
    return event.at >= now - thresholds.xid_window


def judge_gpu(reading: GpuHealthReading, xids: Sequence[XidEvent] = (),
              thresholds: HealthThresholds = HealthThresholds(), now: float | None = None) -> GpuHealth:
    """The verdict on one GPU from its reading and the Xids already known to be its own.

    >>> judge_gpu(GpuHealthReading(0, uncorrectable_volatile=3, remap_failed=True)).reason
    'row remapping failed: the memory has no spare rows left for bad ones; uncorrectable ECC errors: 3 since the driver loaded'
    >>> judge_gpu(GpuHealthReading(0, uncorrectable_volatile=0, remap_failed=False)).status
    'ok'
    >>> judge_gpu(GpuHealthReading(0)).status
    'unknown'
    """
    mine = [event for event in xids if _counts(event, thresholds, now)]
    reasons = _counter_reasons(reading, thresholds) + _xid_reasons(mine)
    status, reason = FAILING, "; ".join(reasons)
    if not reasons and reading.unreadable is not None:
        status, reason = UNKNOWN, f"unreadable: {reading.unreadable}"
    elif not reasons and not reading.reports_memory_state():
        status, reason = UNKNOWN, "reports no ECC, page-retirement or row-remapping state (ECC off or not supported)"
        if reading.recovery_action == "None":
            reason += "; the driver asks for no recovery"
    elif not reasons:
        status, reason = OK, "no uncorrectable ECC errors, retirement or remapping faults, or card-fault XIDs"
    if reading.garbled and status != FAILING:
        reason += f" (unreadable values: {', '.join(reading.garbled)})"
    return GpuHealth(index=reading.index, uuid=reading.uuid, bus_id=reading.bus_id, status=status, reason=reason,
                     reasons=tuple(reasons))


def health_verdict(readings: Sequence[GpuHealthReading], xids: Sequence[XidEvent] = (),
                   thresholds: HealthThresholds = HealthThresholds(), now: float | None = None) -> tuple[GpuHealth, ...]:
    """The verdict on each GPU: one ``GpuHealth`` per reading, in order, then one per GPU that
    a card-fault Xid names but nvidia-smi did not list (a card that has fallen off the bus
    drops out of its output), failing, with no index.

    An Xid is matched to its GPU by PCI bus id (``gpu_of``); application faults (13, 31, 43,
    45) never fail a card; card faults count for ``thresholds.xid_window`` seconds back from
    ``now`` (with ``now=None``, or for a line with no time, every one given counts).

    >>> readings = parse_health("0, GPU-1a, 00000000:3B:00.0, Enabled, 0, 0, [N/A], [N/A], [N/A], 0, 0, No, No, None\\n"
    ...                         "1, GPU-2b, 00000000:5E:00.0, Enabled, 0, 0, [N/A], [N/A], [N/A], 0, 0, No, No, None\\n")
    >>> from rowfleet.telemetry.gpu_xid import parse_xid_log
    >>> xids = parse_xid_log("2026-03-01T10:00:00+00:00 h kernel: NVRM: Xid (PCI:0000:5e:00): 79, pid=7, name=python, "
    ...                      "GPU has fallen off the bus.\\n"
    ...                      "2026-03-01T10:00:01+00:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=9, name=python, "
    ...                      "Graphics Exception\\n")
    >>> for health in health_verdict(readings, xids, now=1772362800.0):
    ...     print(health.index, health.status, health.reason)
    0 ok no uncorrectable ECC errors, retirement or remapping faults, or card-fault XIDs
    1 failing XID 79 (GPU has fallen off the bus) at 2026-03-01T10:00:00Z
    """
    owners = [gpu_of(event, readings) for event in xids]
    verdicts = [judge_gpu(reading, [event for event, owner in zip(xids, owners) if owner is reading], thresholds, now)
                for reading in readings]
    unlisted: dict[str, list[XidEvent]] = {}
    for event, owner in zip(xids, owners):
        if owner is None and _counts(event, thresholds, now):
            unlisted.setdefault(event.bus_id, []).append(event)
    for bus, events in unlisted.items():
        reasons = tuple(_xid_reasons(events))
        uuid = next((event.uuid for event in events if event.uuid), None)
        verdicts.append(GpuHealth(index=None, uuid=uuid, bus_id=bus, status=FAILING,
                                  reason="; ".join(reasons) + " (a GPU nvidia-smi does not list)", reasons=reasons))
    return tuple(verdicts)


def _clip(text: str, limit: int = 120) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
