"""The text every probe reads, the kernel's files and ``nvidia-smi``'s CSV alike: one way to
read a file, one rule for an integer, one for a number with its unit and one for a
placeholder, so every probe agrees on what "not known" is.

Pure but for ``read_text``, which only opens and reads. Imports nothing from rowfleet.
"""

from __future__ import annotations

import math
import re

_UNSIGNED = re.compile(r"[0-9]{1,20}")
_SIGNED = re.compile(r"-?[0-9]{1,20}")
_UNIT_WORD = re.compile(r"^(?:%|[A-Za-z]{1,4})$")  # the "MiB" of "81559 MiB", "%", "W", "MHz", "us"
_BARE_PLACEHOLDERS = frozenset({"n/a", "na", "not supported", "unknown", "unknown error"})


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


def is_placeholder(value: str | None) -> bool:
    """Whether a CSV value stands for "no value": any ``[...]``, bare ``N/A``, or empty.

    >>> [is_placeholder(v) for v in ("[N/A]", "[Not Supported]", "[Insufficient Permissions]", "N/A", "", "0")]
    [True, True, True, True, True, False]
    """
    if value is None:
        return True
    value = value.strip()
    return not value or (value.startswith("[") and value.endswith("]")) or value.lower() in _BARE_PLACEHOLDERS


def parse_number(value: str | None) -> float | None:
    """A CSV value as a number, its unit dropped; ``None`` for placeholders and garbage.

    >>> parse_number("81559 MiB"), parse_number("69.85 W"), parse_number("0 %"), parse_number("42")
    (81559.0, 69.85, 0.0, 42.0)
    >>> parse_number("[N/A]"), parse_number("N/A"), parse_number("P0"), parse_number("nan"), parse_number("1 2 3")
    (None, None, None, None, None)
    """
    if is_placeholder(value):
        return None
    parts = value.split()
    if len(parts) == 2 and _UNIT_WORD.match(parts[1]):
        parts = parts[:1]
    if len(parts) != 1:
        return None
    try:
        number = float(parts[0])
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def parse_count(value: str | None) -> int | None:
    """A CSV value as a whole non-negative number (an index, MiB, percent), else ``None``.

    >>> parse_count("19818 MiB"), parse_count("100 %"), parse_count("[Unknown Error]"), parse_count("-1")
    (19818, 100, None, None)
    """
    number = parse_number(value)
    return None if number is None or number < 0 else round(number)


def text_value(value: str | None) -> str | None:
    """A text cell, stripped, or None for a placeholder (``[N/A]``, ``[Not Supported]``, ...)."""
    return None if is_placeholder(value) else value.strip()
