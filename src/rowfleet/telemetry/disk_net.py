"""A host's disks and network: free space, disk I/O and interface traffic.

Owns the pure parsers of ``/proc/diskstats`` and ``/proc/net/dev``, the pure delta functions
that turn two of their readings into rates (``disk_rates``, ``net_rates``), the pure filter
``whole_disks``, the pure conversion of an ``os.statvfs`` result into a ``DiskUsage``, and the
thin readers ``read_diskstats``, ``read_net_dev`` and ``disk_usage``.

The parsers skip a line that does not fit and never raise; the readers take a filesystem
root (or, for ``disk_usage``, a statvfs function) so tests can point them at a fake tree,
and read a missing file or path as absent. The kernel's counters are ``unsigned long`` (32
bits on a 32-bit kernel, 64 on a 64-bit one), so their wrap value is not knowable from the
text: a counter that went backwards (wrap, reboot, device re-created) gives ``None``.

Stdlib only; imports nothing from rowfleet outside ``rowfleet.telemetry``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable, Iterable, Mapping, TypeVar

from rowfleet.telemetry.text import parse_integer, read_text

# /proc/diskstats counts in 512-byte sectors whatever the device's logical block size
# (Documentation/admin-guide/iostats.rst; the block layer's sector_t unit).
SECTOR_BYTES = 512

# Devices that are not disks: loop-mounted files and RAM disks.
_NOT_DISKS = ("loop", "ram")


@dataclasses.dataclass(frozen=True)
class DiskUsage:
    """Space on the filesystem holding ``path``, in bytes, as ``df`` counts it.

    ``free_bytes`` is what an unprivileged user may still write (``f_bavail``); the blocks
    reserved for root are in neither ``used_bytes`` nor ``free_bytes``.
    """

    path: str
    total_bytes: int
    used_bytes: int
    free_bytes: int


@dataclasses.dataclass(frozen=True)
class DiskStat:
    """One line of ``/proc/diskstats``: a device's counters since boot.

    Fields the line's kernel did not have are ``None``: discards came with Linux 4.18
    (18 fields), flushes with 5.5 (20 fields).
    """

    major: int
    minor: int
    name: str
    reads: int            # reads completed
    sectors_read: int
    writes: int           # writes completed
    sectors_written: int
    in_flight: int        # I/Os in progress now: a gauge, not a counter
    io_ms: int            # milliseconds with at least one I/O in flight
    discards: int | None = None
    flushes: int | None = None

    @property
    def read_bytes(self) -> int:
        return self.sectors_read * SECTOR_BYTES

    @property
    def written_bytes(self) -> int:
        return self.sectors_written * SECTOR_BYTES


@dataclasses.dataclass(frozen=True)
class DiskRate:
    """A device's I/O between two readings; ``None`` for a counter that went backwards."""

    name: str
    read_bytes_per_second: float | None
    write_bytes_per_second: float | None
    reads_per_second: float | None
    writes_per_second: float | None
    busy_fraction: float | None  # share of the interval with I/O in flight, 0.0 to 1.0 (iostat's %util)


@dataclasses.dataclass(frozen=True)
class NetDevStat:
    """One interface of ``/proc/net/dev``: its counters since it was created."""

    name: str
    rx_bytes: int
    rx_packets: int
    rx_errors: int
    rx_dropped: int
    tx_bytes: int
    tx_packets: int
    tx_errors: int
    tx_dropped: int


@dataclasses.dataclass(frozen=True)
class NetRate:
    """An interface's traffic between two readings; ``None`` for a counter that went backwards.

    Bytes are per second; errors and drops are counts over the interval, since a handful
    of them matters more than their rate.
    """

    name: str
    rx_bytes_per_second: float | None
    tx_bytes_per_second: float | None
    rx_errors: int | None
    tx_errors: int | None
    rx_dropped: int | None
    tx_dropped: int | None


# ---------------------------------------------------------------------------------------
# Pure: counters


def _by_name(text: str, parse_line: Callable[[str], Any]) -> dict[str, Any]:
    """Every line ``parse_line`` reads (a bad one gives None and is skipped), by its name."""
    parsed = (parse_line(line) for line in text.splitlines())
    return {stat.name: stat for stat in parsed if stat is not None}


def _counter(text: str) -> int | None:
    return parse_integer(text)


def _counters(fields: list[str]) -> list[int] | None:
    numbers = [_counter(field) for field in fields]
    return None if None in numbers else numbers


def _delta(before: int | None, after: int | None) -> int | None:
    if before is None or after is None or after < before:
        return None
    return after - before


def _per_second(before: int | None, after: int | None, seconds: float, scale: int = 1) -> float | None:
    delta = _delta(before, after)
    return None if delta is None else delta * scale / seconds


def _valid_interval(seconds: float) -> bool:
    return isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0


def _paired_rates(t0: Mapping[str, Any], t1: Mapping[str, Any], seconds: float,
                  rate_of: Callable[[str, Any, Any, float], Any]) -> dict[str, Any]:
    """``rate_of(name, before, after, seconds)`` for each name in both readings; empty unless
    ``seconds`` is a positive number. A ``rate_of`` gives ``None`` for what it would make
    from a counter that went backwards (a reset, a wrap, a device replaced)."""
    if not _valid_interval(seconds):
        return {}
    return {name: rate_of(name, t0[name], after, seconds) for name, after in t1.items() if name in t0}


# ---------------------------------------------------------------------------------------
# Pure: /proc/diskstats


def parse_diskstats_line(line: str) -> DiskStat | None:
    """One line of ``/proc/diskstats`` as a ``DiskStat``; ``None`` if it is not one.

    Reads the 14-field lines of old kernels and the 18- and 20-field lines of newer ones;
    fields past 20, which a later kernel may add, are ignored. The 7-field partition lines
    of kernels before 2.6.25 are not read.

    >>> s = parse_diskstats_line("254 0 vda 248517 52225 11684482 138925 2464041 687685 109230176 983311 0 445968 1409787")
    >>> s.name, s.reads, s.read_bytes, s.writes, s.written_bytes, s.discards
    ('vda', 248517, 5982454784, 2464041, 55925850112, None)
    >>> parse_diskstats_line("8 0 sda 1 2 3"), parse_diskstats_line("8 0 sda x 0 0 0 0 0 0 0 0 0 0 0")
    (None, None)
    """
    fields = line.split()
    if len(fields) < 14:
        return None
    numbers = _counters(fields[3:])
    head = _counters(fields[:2])
    if numbers is None or head is None:
        return None
    return DiskStat(
        major=head[0], minor=head[1], name=fields[2],
        reads=numbers[0], sectors_read=numbers[2], writes=numbers[4], sectors_written=numbers[6],
        in_flight=numbers[8], io_ms=numbers[9],
        discards=numbers[11] if len(numbers) >= 15 else None,
        flushes=numbers[15] if len(numbers) >= 17 else None,
    )


def parse_diskstats(text: str) -> dict[str, DiskStat]:
    """Every device in ``/proc/diskstats``, by name; lines that do not parse are left out.

    >>> sorted(parse_diskstats("   7 0 loop0 0 0 0 0 0 0 0 0 0 0 0\\ngarbage\\n"
    ...                        " 254 0 vda 1 0 8 0 2 0 16 0 0 3 3 0 0 0 0 0 0\\n"))
    ['loop0', 'vda']
    """
    return _by_name(text, parse_diskstats_line)


def disk_rates(t0: Mapping[str, DiskStat], t1: Mapping[str, DiskStat], seconds: float) -> dict[str, DiskRate]:
    """Each device's I/O per second between readings ``t0`` and ``t1``, ``seconds`` apart,
    paired as ``_paired_rates`` says.

    >>> a = parse_diskstats("8 0 sda 100 0 800 0 10 0 80 0 0 1000 0")
    >>> b = parse_diskstats("8 0 sda 150 0 2800 0 5 0 80 0 0 1500 0")
    >>> disk_rates(a, b, 2.0)["sda"]
    DiskRate(name='sda', read_bytes_per_second=512000.0, write_bytes_per_second=0.0, reads_per_second=25.0, writes_per_second=None, busy_fraction=0.25)
    >>> disk_rates(a, b, 0)
    {}
    """
    return _paired_rates(t0, t1, seconds, _disk_rate)


def _disk_rate(name: str, before: DiskStat, after: DiskStat, seconds: float) -> DiskRate:
    busy = _delta(before.io_ms, after.io_ms)
    return DiskRate(
        name=name,
        read_bytes_per_second=_per_second(before.sectors_read, after.sectors_read, seconds, SECTOR_BYTES),
        write_bytes_per_second=_per_second(before.sectors_written, after.sectors_written, seconds, SECTOR_BYTES),
        reads_per_second=_per_second(before.reads, after.reads, seconds),
        writes_per_second=_per_second(before.writes, after.writes, seconds),
        # The kernel and our clock read the interval a little differently: like iostat, cap at 1.
        busy_fraction=None if busy is None else min(1.0, busy / (seconds * 1000)),
    )


_T = TypeVar("_T")


def whole_disks(devices: Mapping[str, _T]) -> dict[str, _T]:
    """``devices`` (stats or rates, by device name) less loop and RAM devices and the
    partitions of a disk that is itself listed, whose I/O the disk's line already counts.

    A partition is its disk's name and a number, with a ``p`` between when the disk's name
    ends in a digit (``sda1`` of ``sda``; ``nvme0n1p1`` of ``nvme0n1``; ``mmcblk0p2``). A
    partition whose disk is not listed is kept.

    >>> sorted(whole_disks(dict.fromkeys(["loop0", "ram1", "sda", "sda1", "sdb2", "nvme0n1", "nvme0n1p1", "nvme0n10", "dm-0"])))
    ['dm-0', 'nvme0n1', 'nvme0n10', 'sda', 'sdb2']
    """
    return {name: value for name, value in devices.items()
            if not name.startswith(_NOT_DISKS) and _disk_of(name, devices) is None}


def _disk_of(name: str, devices: Mapping[str, Any]) -> str | None:
    stem = name.rstrip("0123456789")
    if stem == name or not stem:
        return None
    if stem in devices and not stem[-1].isdigit():
        return stem
    if stem.endswith("p") and stem[:-1] in devices and stem[:-1][-1:].isdigit():
        return stem[:-1]
    return None


# ---------------------------------------------------------------------------------------
# Pure: /proc/net/dev


def parse_net_dev_line(line: str) -> NetDevStat | None:
    """One interface line of ``/proc/net/dev``; ``None`` for the headers and bad lines.

    The name ends at the first ``:`` (the kernel forbids ``:`` in interface names), which
    old kernels print with no space before a wide first number.

    >>> parse_net_dev_line("  eth0:36549329 1219 0 3 0 0 0 0 109347 769 1 0 0 0 0 0")
    NetDevStat(name='eth0', rx_bytes=36549329, rx_packets=1219, rx_errors=0, rx_dropped=3, tx_bytes=109347, tx_packets=769, tx_errors=1, tx_dropped=0)
    >>> parse_net_dev_line(" face |bytes    packets errs drop fifo frame compressed multicast|bytes"), parse_net_dev_line("eth0: 1 2 3")
    (None, None)
    """
    name, colon, rest = line.partition(":")
    name = name.strip()
    if not colon or not name or any(c.isspace() for c in name):
        return None
    numbers = _counters(rest.split())
    if numbers is None or len(numbers) < 16:
        return None
    return NetDevStat(
        name=name,
        rx_bytes=numbers[0], rx_packets=numbers[1], rx_errors=numbers[2], rx_dropped=numbers[3],
        tx_bytes=numbers[8], tx_packets=numbers[9], tx_errors=numbers[10], tx_dropped=numbers[11],
    )


def parse_net_dev(text: str) -> dict[str, NetDevStat]:
    """Every interface in ``/proc/net/dev``, by name; the two header lines and bad lines are skipped.

    >>> sorted(parse_net_dev("Inter-|   Receive |  Transmit\\n face |bytes packets|bytes packets\\n"
    ...                      "    lo: 5 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0\\n  eth0: 9 1 0 0\\n"))
    ['lo']
    """
    return _by_name(text, parse_net_dev_line)


def net_rates(t0: Mapping[str, NetDevStat], t1: Mapping[str, NetDevStat], seconds: float) -> dict[str, NetRate]:
    """Each interface's traffic between readings ``t0`` and ``t1``, ``seconds`` apart,
    paired as ``_paired_rates`` says.

    >>> a = parse_net_dev("eth0: 1000 10 0 0 0 0 0 0 500 5 2 0 0 0 0 0")
    >>> b = parse_net_dev("eth0: 3000 20 1 0 0 0 0 0 100 6 2 0 0 0 0 0")
    >>> net_rates(a, b, 2)["eth0"]
    NetRate(name='eth0', rx_bytes_per_second=1000.0, tx_bytes_per_second=None, rx_errors=1, tx_errors=0, rx_dropped=0, tx_dropped=0)
    """
    return _paired_rates(t0, t1, seconds, _net_rate)


def _net_rate(name: str, before: NetDevStat, after: NetDevStat, seconds: float) -> NetRate:
    return NetRate(
        name=name,
        rx_bytes_per_second=_per_second(before.rx_bytes, after.rx_bytes, seconds),
        tx_bytes_per_second=_per_second(before.tx_bytes, after.tx_bytes, seconds),
        rx_errors=_delta(before.rx_errors, after.rx_errors),
        tx_errors=_delta(before.tx_errors, after.tx_errors),
        rx_dropped=_delta(before.rx_dropped, after.rx_dropped),
        tx_dropped=_delta(before.tx_dropped, after.tx_dropped),
    )


# ---------------------------------------------------------------------------------------
# Pure: statvfs


def usage_from_statvfs(path: str, st: Any) -> DiskUsage | None:
    """A ``DiskUsage`` from an ``os.statvfs`` result (or anything with its ``f_*`` fields).

    Counts in fragments (``f_frsize``), as POSIX defines the block counts, falling back to
    ``f_bsize`` where a filesystem reports a fragment size of 0. ``None`` if a field is
    missing, negative or not a whole number.

    >>> from types import SimpleNamespace as S
    >>> usage_from_statvfs("/", S(f_frsize=4096, f_bsize=4096, f_blocks=100, f_bfree=30, f_bavail=25))
    DiskUsage(path='/', total_bytes=409600, used_bytes=286720, free_bytes=102400)
    >>> usage_from_statvfs("/", S(f_frsize=4096, f_blocks=100)) is None
    True
    """
    try:
        values = [getattr(st, name) for name in ("f_frsize", "f_blocks", "f_bfree", "f_bavail")]
        bsize = getattr(st, "f_bsize", 0)
    except AttributeError:
        return None
    if not all(type(v) is int and v >= 0 for v in [*values, bsize]):
        return None
    frsize, blocks, bfree, bavail = values
    unit = frsize or bsize
    if not unit or bfree > blocks:
        return None
    return DiskUsage(path=path, total_bytes=blocks * unit, used_bytes=(blocks - bfree) * unit,
                     free_bytes=bavail * unit)


# ---------------------------------------------------------------------------------------
# Thin readers


def read_diskstats(root: str = "/") -> dict[str, DiskStat]:
    """Every device in ``<root>/proc/diskstats`` now, by name; empty where there is no such file."""
    text = read_text(os.path.join(root, "proc", "diskstats"))
    return parse_diskstats(text) if text is not None else {}


def read_net_dev(root: str = "/") -> dict[str, NetDevStat]:
    """Every interface in ``<root>/proc/net/dev`` now, by name; empty where there is no such file."""
    text = read_text(os.path.join(root, "proc", "net", "dev"))
    return parse_net_dev(text) if text is not None else {}


def disk_usage(paths: Iterable[str], statvfs: Callable[[str], Any] = os.statvfs) -> dict[str, DiskUsage | None]:
    """The space on the filesystem of each of ``paths`` (a database file, a data folder), by path.

    A path that does not exist, cannot be read, or gives an answer that is not a statvfs
    result reads as ``None``; never raises.
    """
    usages: dict[str, DiskUsage | None] = {}
    for path in paths:
        try:
            usages[path] = usage_from_statvfs(path, statvfs(path))
        except (OSError, ValueError, TypeError):  # ENOENT/EACCES; a NUL in the path; not a path
            usages[path] = None
    return usages
