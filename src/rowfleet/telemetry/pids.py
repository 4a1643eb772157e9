"""Which process a pid names now, and which boot of the machine this is: what tells a
worker that is gone from a live process that took its pid.

A pid alone names no process for long: the kernel hands it out again. With the process's
start time (``/proc/PID/stat``'s 22nd field, clock ticks since boot) and the kernel's boot
id (``/proc/sys/kernel/random/boot_id``, new at every boot) it does: the same pid with
another start time, or the same start time in another boot, is another process.

Linux only in what it finds; elsewhere each reader answers None ("cannot tell"), and a
caller falls back to the pid alone. Readers take ``proc_root`` so tests can point them at
a fake tree, and never raise. Imports nothing from rowfleet but the text reader.
"""

from __future__ import annotations

import os

from rowfleet.telemetry.text import read_text

START_FIELD = 22  # /proc/PID/stat: starttime, in clock ticks after boot


def parse_start_ticks(stat: str) -> str | None:
    """The start time from a ``/proc/PID/stat`` line, as text (compared, never counted);
    None for a line that is not one or a zombie's (its process is gone). The command name,
    in parentheses, may hold anything, so the fields are counted from the last ``)``.

    >>> line = "4242 (rowfleet (w)) S 1 4242 4242 0 -1 4194560 " + "0 " * 12 + "873561 24000"
    >>> parse_start_ticks(line)
    '873561'
    >>> parse_start_ticks(line.replace(") S ", ") Z ")) is None, parse_start_ticks("4242 (cut") is None
    (True, True)
    """
    closing = stat.rfind(")")
    if closing < 0 or stat.find("(") < 0:
        return None
    after = stat[closing + 1:].split()
    index = START_FIELD - 3  # after[0] is field 3 (the state)
    if len(after) <= index or after[0] == "Z" or not after[index].isdigit():
        return None
    return after[index]


def process_start(pid: int, proc_root: str = "/proc") -> str | None:
    """When process ``pid`` started (clock ticks since boot, as text); None when there is no
    such process now (or only its zombie) or this machine has no ``/proc`` to say."""
    return parse_start_ticks(read_text(os.path.join(proc_root, str(pid), "stat")) or "")


def boot_id(proc_root: str = "/proc") -> str | None:
    """This boot of the machine's id; None where the kernel does not say."""
    text = read_text(os.path.join(proc_root, "sys", "kernel", "random", "boot_id"))
    return (text or "").strip() or None
