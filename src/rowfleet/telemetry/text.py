"""The kernel's text files as the telemetry readers take them: one way to read a file and
one rule for the integers in it, so every module agrees on what "not known" is.

Pure but for ``read_text``, which only opens and reads. Imports nothing from rowfleet.
"""

from __future__ import annotations

import re

_UNSIGNED = re.compile(r"[0-9]{1,20}")
_SIGNED = re.compile(r"-?[0-9]{1,20}")


def read_text(path: str, limit: int | None = None) -> str | None:
    """The text of ``path``, or None: a file that vanished, a process that exited mid-read
    (ENOENT, ESRCH), a driver that answered with an error (EIO, ENODATA), a link that
    dangles, a file root may read only, or one longer than ``limit`` characters. Undecodable
    bytes (a command name may be any bytes) are replaced, never an error."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            text = file.read() if limit is None else file.read(limit + 1)
    except (OSError, ValueError):
        return None
    return text if limit is None or len(text) <= limit else None


def parse_integer(text: str | None, *, signed: bool = False) -> int | None:
    """One decimal integer of ASCII digits (at most 20, a u64's width; a leading ``-`` only
    when ``signed``), surrounding whitespace allowed, as an int; None if the text is not one.
    Not a float parse: counters pass 2**53, where a float loses units. Not ``str.isdigit``:
    it takes other scripts' digits and superscripts, which ``int`` then refuses.

    >>> parse_integer("240422366267\\n"), parse_integer("-5"), parse_integer("-5", signed=True)
    (240422366267, None, -5)
    >>> parse_integer("²"), parse_integer("١٢"), parse_integer("5.5"), parse_integer("9" * 21), parse_integer(None)
    (None, None, None, None, None)
    """
    if text is None:
        return None
    text = text.strip()
    return int(text) if (_SIGNED if signed else _UNSIGNED).fullmatch(text) else None
