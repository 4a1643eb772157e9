"""How much memory a host has and uses, read from ``/proc/meminfo`` and its cgroup.

Owns the pure parsers of ``/proc/meminfo``, of ``/proc/self/cgroup`` and
``/proc/self/mountinfo`` (which folder holds this process's memory cgroup, v2 or v1) and of
the cgroup's usage and limit files, and ``read_host_memory``, the thin reader that takes a
filesystem root so tests can point it at a fake tree. A process tree's memory is
``memory.py``'s business, not this module's.

Linux only in what it finds. Imports nothing of rowfleet outside ``rowfleet.telemetry``.
"""

from __future__ import annotations

import dataclasses
import os
import re

from rowfleet.telemetry.memory import parse_cgroup_v2_path
from rowfleet.telemetry.text import parse_count, read_text

# cgroup v1 says "no limit" with the largest page counter times the page size: LONG_MAX
# rounded down to a page (9223372036854771712 with 4 KiB pages, less with 64 KiB ones).
# Anything this close to LONG_MAX is that, not a limit someone set.
_V1_UNLIMITED_FROM = 2 ** 63 - 2 ** 20

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space in a path as \040


@dataclasses.dataclass(frozen=True)
class MemInfo:
    """The host's RAM and swap from ``/proc/meminfo``, in bytes; ``None`` where it did not say."""

    total_bytes: int | None
    available_bytes: int | None  # MemAvailable, or MemFree + Buffers + Cached before Linux 3.14
    used_bytes: int | None       # total less available
    swap_total_bytes: int | None = None
    swap_free_bytes: int | None = None
    swap_used_bytes: int | None = None


@dataclasses.dataclass(frozen=True)
class CgroupMount:
    """One cgroup filesystem mount from ``/proc/self/mountinfo``."""

    version: int           # 1 or 2
    root: str              # the cgroup the mount shows at its mount point
    mount_point: str
    options: frozenset[str] = frozenset()  # super options; a v1 mount lists its controllers here


@dataclasses.dataclass(frozen=True)
class CgroupFolder:
    """Where a process's memory cgroup should be, as the process sees the filesystem."""

    version: int
    path: str


@dataclasses.dataclass(frozen=True)
class CgroupMemory(CgroupFolder):
    """A memory cgroup folder's usage and limit in bytes; ``limit_bytes`` is ``None`` for no limit."""

    usage_bytes: int | None
    limit_bytes: int | None


@dataclasses.dataclass(frozen=True)
class HostMemoryReading:
    """One read of the host's memory, and of the cgroup this process runs in."""

    meminfo: MemInfo | None
    cgroup: CgroupMemory | None = None


# ---------------------------------------------------------------------------------------
# Pure parsers


def parse_meminfo(text: str) -> MemInfo | None:
    """``/proc/meminfo`` (values in kB, which are KiB) in bytes; ``None`` without MemTotal.

    >>> info = parse_meminfo("MemTotal: 1000 kB\\nMemFree: 100 kB\\nMemAvailable: 600 kB\\n"
    ...                      "SwapTotal: 50 kB\\nSwapFree: 20 kB\\n")
    >>> info.total_bytes, info.used_bytes, info.swap_used_bytes
    (1024000, 409600, 30720)
    >>> parse_meminfo("MemTotal: 1000 kB\\nMemFree: 100 kB\\nBuffers: 10 kB\\nCached: 90 kB\\n").available_bytes
    204800
    >>> parse_meminfo("MemFree: 100 kB\\n"), parse_meminfo("MemTotal: lots\\n")
    (None, None)
    """
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        parts = rest.split()
        if colon and len(parts) == 2 and parts[1] == "kB" and name not in values:
            kib = parse_count(parts[0])
            if kib is not None:
                values[name] = kib * 1024
    total = values.get("MemTotal")
    if total is None:
        return None
    available = values.get("MemAvailable")
    if available is None and all(name in values for name in ("MemFree", "Buffers", "Cached")):
        available = values["MemFree"] + values["Buffers"] + values["Cached"]
    swap_total, swap_free = values.get("SwapTotal"), values.get("SwapFree")
    return MemInfo(total_bytes=total, available_bytes=available, used_bytes=_less(total, available),
                   swap_total_bytes=swap_total, swap_free_bytes=swap_free, swap_used_bytes=_less(swap_total, swap_free))


def _less(whole: int | None, part: int | None) -> int | None:
    return None if whole is None or part is None or part > whole else whole - part


def parse_cgroup_v1_path(text: str, controller: str = "memory") -> str | None:
    """The path of ``controller``'s v1 hierarchy in ``/proc/<pid>/cgroup``; ``None`` if none.

    >>> parse_cgroup_v1_path("4:memory:/process_api/2142\\n2:cpu,cpuacct:/\\n0::/\\n")
    '/process_api/2142'
    >>> parse_cgroup_v1_path("2:cpu,cpuacct:/a\\n", "cpuacct"), parse_cgroup_v1_path("0::/\\n")
    ('/a', None)
    """
    for line in text.splitlines():
        number, _, rest = line.partition(":")
        controllers, colon, path = rest.partition(":")
        if colon and number.strip() != "0" and controller in controllers.split(",") and path.startswith("/"):
            return path.strip()
    return None


def parse_cgroup_mounts(text: str) -> tuple[CgroupMount, ...]:
    """The cgroup and cgroup2 mounts in ``/proc/<pid>/mountinfo`` (see proc(5)), in order.

    The filesystem type follows a lone ``-``, after any number of optional fields.

    >>> mounts = parse_cgroup_mounts("35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\\n"
    ...                              "29 23 0:26 /a /sys/fs/cgroup rw shared:4 - cgroup2 cgroup2 rw,nsdelegate\\n"
    ...                              "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\\ngarbage\\n")
    >>> [(m.version, m.root, m.mount_point, sorted(m.options)) for m in mounts]
    [(1, '/', '/sys/fs/cgroup/memory', ['memory', 'rw']), (2, '/a', '/sys/fs/cgroup', ['nsdelegate', 'rw'])]
    """
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        try:
            separator = fields.index("-", 6)
        except ValueError:
            continue
        kind = fields[separator + 1] if len(fields) > separator + 1 else ""
        if kind not in ("cgroup", "cgroup2"):
            continue
        options = fields[separator + 3].split(",") if len(fields) > separator + 3 else []
        mounts.append(CgroupMount(version=2 if kind == "cgroup2" else 1, root=_unescape(fields[3]),
                                  mount_point=_unescape(fields[4]), options=frozenset(options)))
    return tuple(mounts)


def _unescape(field: str) -> str:
    return _OCTAL_ESCAPE.sub(lambda found: chr(int(found.group(1), 8)), field)


def cgroup_folder(mount: CgroupMount, path: str) -> str | None:
    """Where cgroup ``path`` appears under ``mount``; ``None`` if the mount does not show it.

    A container may mount only its own part of the hierarchy (the mount's ``root``), and a
    cgroup outside our namespace reads with ``..``: neither is reachable through the mount.

    >>> cgroup_folder(CgroupMount(1, "/", "/sys/fs/cgroup/memory"), "/process_api/2142")
    '/sys/fs/cgroup/memory/process_api/2142'
    >>> cgroup_folder(CgroupMount(2, "/docker/ab", "/sys/fs/cgroup"), "/docker/ab/job")
    '/sys/fs/cgroup/job'
    >>> cgroup_folder(CgroupMount(2, "/docker/ab", "/sys/fs/cgroup"), "/docker/abc") is None
    True
    >>> cgroup_folder(CgroupMount(2, "/", "/sys/fs/cgroup"), "/../../user.slice") is None
    True
    """
    if ".." in path.split("/") or not path.startswith("/"):
        return None
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    inside = path[len(root):].strip("/")
    return os.path.join(mount.mount_point, inside) if inside else mount.mount_point


def memory_cgroup_folders(cgroup_text: str, mountinfo_text: str) -> tuple[CgroupFolder, ...]:
    """Where this process's memory cgroup may be, the v2 one first, from its two ``/proc`` files.

    On a hybrid host both exist and only one holds the memory controller; which one the
    reader learns by finding its files there.

    >>> memory_cgroup_folders("4:memory:/p/21\\n0::/\\n",
    ...                       "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\\n"
    ...                       "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\\n")
    (CgroupFolder(version=2, path='/sys/fs/cgroup/unified'), CgroupFolder(version=1, path='/sys/fs/cgroup/memory/p/21'))
    >>> memory_cgroup_folders("4:memory:/p/21\\n", "")
    ()
    """
    mounts = parse_cgroup_mounts(mountinfo_text)
    folders = []
    v2_path = parse_cgroup_v2_path(cgroup_text)
    v2_mount = next((mount for mount in mounts if mount.version == 2), None)
    if v2_path is not None and v2_mount is not None:
        folders.append((2, cgroup_folder(v2_mount, v2_path)))
    v1_path = parse_cgroup_v1_path(cgroup_text, "memory")
    v1_mount = next((mount for mount in mounts if mount.version == 1 and "memory" in mount.options), None)
    if v1_path is not None and v1_mount is not None:
        folders.append((1, cgroup_folder(v1_mount, v1_path)))
    return tuple(CgroupFolder(version, path) for version, path in folders if path is not None)


def parse_cgroup_bytes(text: str) -> int | None:
    """A cgroup memory file holding one byte count (usage, or a limit); ``None`` if not one.

    >>> parse_cgroup_bytes("90914816\\n"), parse_cgroup_bytes("max\\n"), parse_cgroup_bytes("-1\\n")
    (90914816, None, None)
    """
    return parse_count(text.strip())


def parse_cgroup_limit(text: str, version: int) -> int | None:
    """A memory limit in bytes; ``None`` for "no limit" (v2 ``max``, v1 a page-rounded LONG_MAX).

    >>> parse_cgroup_limit("max\\n", 2), parse_cgroup_limit("9223372036854771712\\n", 1)
    (None, None)
    >>> parse_cgroup_limit("536870912\\n", 1)
    536870912
    """
    limit = parse_cgroup_bytes(text)
    if limit is None or (version == 1 and limit >= _V1_UNLIMITED_FROM):
        return None
    return limit


# ---------------------------------------------------------------------------------------
# Thin reader

# The files that hold a memory cgroup's usage and limit, by cgroup version.
_CGROUP_FILES = {2: ("memory.current", "memory.max"), 1: ("memory.usage_in_bytes", "memory.limit_in_bytes")}


def read_cgroup_memory(root: str = "/") -> CgroupMemory | None:
    """The memory usage and limit of this process's cgroup; ``None`` where none is found.

    The v2 folder is tried first; a hybrid host's v2 folder has no ``memory.current`` when
    the memory controller is bound to v1, and then the v1 one answers. The v2 root cgroup
    has no memory files either, so a process there reads ``None``.
    """
    cgroup_text = read_text(os.path.join(root, "proc", "self", "cgroup"))
    mountinfo_text = read_text(os.path.join(root, "proc", "self", "mountinfo"))
    if cgroup_text is None or mountinfo_text is None:
        return None
    for folder in memory_cgroup_folders(cgroup_text, mountinfo_text):
        usage_name, limit_name = _CGROUP_FILES[folder.version]
        where = os.path.join(root, folder.path.lstrip("/"))
        usage = read_text(os.path.join(where, usage_name))
        if usage is None:
            continue
        limit = read_text(os.path.join(where, limit_name))
        return CgroupMemory(version=folder.version, path=folder.path, usage_bytes=parse_cgroup_bytes(usage),
                            limit_bytes=parse_cgroup_limit(limit, folder.version) if limit is not None else None)
    return None


def read_host_memory(root: str = "/") -> HostMemoryReading:
    """The host's memory now, and this process's cgroup's, read under ``root``; never raises."""
    meminfo = read_text(os.path.join(root, "proc", "meminfo"))
    return HostMemoryReading(meminfo=parse_meminfo(meminfo) if meminfo is not None else None,
                             cgroup=read_cgroup_memory(root))
