"""How much memory a job's process tree holds, read from ``/proc`` and cgroup v2.

Owns the pure parsers of ``/proc/<pid>/status`` (VmRSS), ``/proc/<pid>/stat`` (state and
ppid), ``/proc/<pid>/cgroup`` (the v2 path) and ``memory.current``, and the thin readers
that walk a process tree and measure it: ``process_tree``, ``tree_rss_bytes`` and
``memory_of``, and ``process_gone``. Readers take ``proc_root`` and ``cgroup_root`` so tests can point them at a
fake tree, and never raise for a process that exits while it is being read.

Linux only in what it finds; elsewhere the readers answer "gone". Imports nothing from rowfleet.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Mapping

from rowfleet.telemetry.text import parse_integer, read_text

# Which number ``memory_of`` returned.
CGROUP = "cgroup"  # memory.current of a cgroup holding the tree and nothing else
RSS = "rss"        # the sum of the tree's VmRSS
GONE = "gone"      # the process no longer exists; it holds nothing


@dataclasses.dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` a process tree needs."""

    pid: int
    comm: str
    state: str  # R, S, D, Z (zombie), ...
    ppid: int


@dataclasses.dataclass(frozen=True)
class MemoryReading:
    """A process tree's memory in bytes, which source gave it, and the pids it covers."""

    bytes: int
    source: str  # CGROUP, RSS or GONE
    pids: tuple[int, ...] = ()


# ---------------------------------------------------------------------------------------
# Pure parsers


def parse_proc_stat(text: str) -> ProcStat | None:
    """``/proc/<pid>/stat`` as a ``ProcStat``; ``None`` if it is not one.

    The command name sits in parentheses and may itself hold spaces and parentheses (a
    process may name itself anything), so the fields after it start at the last ``)``.

    >>> parse_proc_stat("27671 (evil) (x y) R 27630 27628 25322 0 -1 4194304")
    ProcStat(pid=27671, comm='evil) (x y', state='R', ppid=27630)
    >>> parse_proc_stat(""), parse_proc_stat("12 (truncated")
    (None, None)
    """
    opening, closing = text.find("("), text.rfind(")")
    if opening < 0 or closing < opening:
        return None
    after = text[closing + 1:].split()
    try:
        return ProcStat(pid=int(text[:opening]), comm=text[opening + 1:closing], state=after[0], ppid=int(after[1]))
    except (ValueError, IndexError):
        return None


def parse_vmrss_bytes(text: str) -> int | None:
    """The resident set size from ``/proc/<pid>/status``, in bytes.

    ``None`` when the line is absent, as it is for zombies and kernel threads.

    >>> parse_vmrss_bytes("Name:\\tcat\\nVmHWM:\\t    1744 kB\\nVmRSS:\\t    1744 kB\\n")
    1785856
    >>> parse_vmrss_bytes("Name:\\tpython3\\nState:\\tZ (zombie)\\n") is None
    True
    """
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            parts = line.split()
            amount = parse_integer(parts[1]) if len(parts) >= 2 else None
            if amount is not None:
                unit = parts[2].lower() if len(parts) > 2 else "b"
                return amount * _STATUS_UNITS.get(unit, 1)
            return None
    return None


_STATUS_UNITS = {"b": 1, "kb": 1024, "mb": 1024 ** 2, "gb": 1024 ** 3}  # the kernel's "kB" is KiB


def parse_cgroup_v2_path(text: str) -> str | None:
    """The cgroup v2 path from ``/proc/<pid>/cgroup`` (its ``0::`` line); v1 lines are ignored.

    >>> parse_cgroup_v2_path("4:memory:/process_api/2142\\n1:cpu:/\\n0::/\\n")
    '/'
    >>> parse_cgroup_v2_path("0::/system.slice/rowfleet-worker.service\\n")
    '/system.slice/rowfleet-worker.service'
    >>> parse_cgroup_v2_path("4:memory:/docker/abc\\n") is None
    True
    """
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or None
    return None


def parse_memory_current(text: str) -> int | None:
    """A cgroup v2 ``memory.current`` (bytes, one number) as an int; ``None`` if not one.

    >>> parse_memory_current("90914816\\n"), parse_memory_current("max\\n"), parse_memory_current("")
    (90914816, None, None)
    """
    return parse_integer(text)


def tree_of(pid: int, parents: Mapping[int, int]) -> list[int]:
    """``pid`` and all its descendants, parents before children, given each pid's parent.

    Empty when ``pid`` is not in ``parents`` (it is gone). Safe against the cycles a
    snapshot taken while pids are reused could show.

    >>> tree_of(10, {1: 0, 10: 1, 11: 10, 12: 10, 13: 11, 20: 1})
    [10, 11, 12, 13]
    >>> tree_of(99, {1: 0}), tree_of(5, {5: 6, 6: 5})
    ([], [5, 6])
    """
    if pid not in parents:
        return []
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    tree, seen, frontier = [], {pid}, [pid]
    while frontier:
        tree.extend(frontier)
        frontier = [c for p in frontier for c in sorted(children.get(p, ())) if c not in seen]
        seen.update(frontier)
    return tree


def cgroup_holds_only(cgroup_pids: Iterable[int], tree: Iterable[int], zombies: Iterable[int] = ()) -> bool:
    """Whether a cgroup's processes are exactly the tree's, so its memory is the tree's.

    Zombies hold no memory and may already have left the cgroup, so they are not required
    to be in it. A tree member elsewhere would be missed by the cgroup's count, and any
    stranger in it counted, so both make the answer no.

    >>> cgroup_holds_only([10, 11], [10, 11]), cgroup_holds_only([10, 11, 99], [10, 11])
    (True, False)
    >>> cgroup_holds_only([10], [10, 11]), cgroup_holds_only([10], [10, 11], zombies=[11]), cgroup_holds_only([], [])
    (False, True, False)
    """
    members, tree = set(cgroup_pids), set(tree)
    return bool(members) and members <= tree and tree - set(zombies) <= members


# ---------------------------------------------------------------------------------------
# Thin readers


def read_proc_stats(proc_root: str = "/proc") -> dict[int, ProcStat]:
    """Every process's ``ProcStat``, by pid; processes that vanish while read are left out."""
    try:
        names = [entry.name for entry in os.scandir(proc_root) if parse_integer(entry.name) is not None]
    except OSError:
        return {}
    stats = {}
    for name in names:
        text = read_text(os.path.join(proc_root, name, "stat"))
        stat = parse_proc_stat(text) if text is not None else None
        if stat is not None:
            stats[stat.pid] = stat
    return stats


def process_tree(pid: int, proc_root: str = "/proc") -> list[int]:
    """``pid`` and all its descendants now (parents first); empty if ``pid`` is gone."""
    return tree_of(pid, {stat.pid: stat.ppid for stat in read_proc_stats(proc_root).values()})


def tree_rss_bytes(pids: Iterable[int], proc_root: str = "/proc") -> int:
    """The summed VmRSS of ``pids``, in bytes; a vanished process or zombie counts 0.

    An upper bound: pages the processes share (libraries, fork copy-on-write) count once
    per process.
    """
    total = 0
    for pid in pids:
        text = read_text(os.path.join(proc_root, str(pid), "status"))
        total += (parse_vmrss_bytes(text) or 0) if text is not None else 0
    return total


def process_gone(pid: int, proc_root: str = "/proc") -> bool:
    """Is there no process ``pid`` on this machine (none, or only its zombie)? Where there is
    no ``/proc`` to read, asks the kernel with signal 0 instead."""
    if not os.path.isdir(proc_root):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:  # someone else's process: it exists
            return False
        return False
    stat = parse_proc_stat(read_text(os.path.join(proc_root, str(pid), "stat")) or "")
    return stat is None or stat.state == "Z"


def memory_of(pid: int, proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> MemoryReading:
    """The memory held by ``pid`` and its descendants, and where the number came from.

    Prefers the cgroup v2 ``memory.current`` when the tree is alone in its own cgroup: it
    counts shared pages once and includes the page cache and kernel memory the job caused.
    Otherwise (a shared cgroup, cgroup v1, no cgroup fs) sums the tree's VmRSS. Answers
    ``GONE`` with 0 bytes for a pid that no longer exists; never raises.
    """
    stats = read_proc_stats(proc_root)
    tree = tree_of(pid, {stat.pid: stat.ppid for stat in stats.values()})
    if not tree:
        return MemoryReading(0, GONE)
    zombies = [p for p in tree if stats[p].state == "Z"]
    current = _cgroup_memory(pid, tree, zombies, proc_root, cgroup_root)
    if current is not None:
        return MemoryReading(current, CGROUP, tuple(tree))
    if read_text(os.path.join(proc_root, str(pid), "stat")) is None:
        return MemoryReading(0, GONE)  # exited while we looked
    return MemoryReading(tree_rss_bytes(tree, proc_root), RSS, tuple(tree))


def _cgroup_memory(pid: int, tree: list[int], zombies: list[int], proc_root: str, cgroup_root: str) -> int | None:
    text = read_text(os.path.join(proc_root, str(pid), "cgroup"))
    path = parse_cgroup_v2_path(text) if text is not None else None
    # A process outside our cgroup namespace shows a path with "..": it is not under cgroup_root.
    if path is None or ".." in path.split("/"):
        return None
    folder = os.path.join(cgroup_root, path.lstrip("/"))
    procs = read_text(os.path.join(folder, "cgroup.procs"))
    if procs is None:
        return None
    try:
        members = [int(line) for line in procs.split()]
    except ValueError:
        return None
    if not cgroup_holds_only(members, tree, zombies):
        return None
    current = read_text(os.path.join(folder, "memory.current"))
    return parse_memory_current(current) if current is not None else None
