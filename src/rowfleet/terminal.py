"""What a person's terminal is shown: text with its control characters escaped, a wait in
seconds (``seconds_text``), and a user-facing error as one line with the exit code it deserves.

Whoever writes for people goes through here: the command line's tables and lines, the log
lines, and a long-running process (a worker, the orchestrator, a box's children) that ends
on an error with no command line above it to report it. A value someone else wrote (a
queue, a task, a project, who switched a worker and why) may hold control characters, and
a terminal acts on those rather than showing them.

A leaf: imports only ``rowfleet.errors`` and ``rowfleet.exitcodes``.
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

from rowfleet import exitcodes
from rowfleet.errors import Conflict, JobFailed, NotFound, RowfleetError

# What a terminal acts on rather than shows: the C0 controls (ESC starts the sequences that
# move the cursor, clear the screen or retitle the window; BEL rings), DEL, the C1 controls
# (0x9b is a one-character CSI), the line and paragraph separators, and the bidirectional
# embeddings, overrides and isolates that reorder what is shown.
_CONTROLS = "\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_IN_LINE = re.compile(f"[\x00-\x1f{_CONTROLS}]")
_IN_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_CONTROLS}]")  # keeps tab and newline


def escaped(text: Any, *, lines: bool = False) -> str:
    """``text`` as a terminal may be shown it: each control character as its escape
    (``\\x1b``), so that a value cannot move the cursor, clear the screen or retitle the
    window. With ``lines``, tabs and newlines stay (a traceback's layout); without, they
    are escaped too (a table's cell, a field's line).

    >>> print(escaped("q\\x1b[2J\\x07"), escaped("a\\tb\\nc"), escaped("\\u202egnp.exe"))
    q\\x1b[2J\\x07 a\\x09b\\x0ac \\u202egnp.exe
    >>> escaped("line 1\\n\\tline 2\\x9b", lines=True)
    'line 1\\n\\tline 2\\\\x9b'
    """
    return (_IN_LINES if lines else _IN_LINE).sub(_escape, str(text))


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def seconds_text(value: float) -> str:
    """A wait in seconds as people read it: one decimal, so that a sub-second wait reads as
    itself, never as 0 (nor 0.0, for a wait that is not over).

    >>> seconds_text(0.2), seconds_text(0.31), seconds_text(0.01), seconds_text(12.0)
    ('0.2', '0.3', '0.1', '12.0')
    """
    return f"{max(value, 0.1):.1f}"


def say(text: Any = "", *, lines: bool = False, file: TextIO | None = None) -> None:
    """Print ``text`` for people, escaped (see ``escaped``)."""
    print(escaped(text, lines=lines), file=file or sys.stdout)


def report(exc: RowfleetError) -> int:
    """One line on stderr for a user-facing error; the exit code it deserves."""
    if isinstance(exc, (NotFound, Conflict, JobFailed)):
        say(f"rowfleet: {exc}", file=sys.stderr)
        return exitcodes.REFUSED
    say(f"rowfleet: error: {exc}", file=sys.stderr)
    return exitcodes.USAGE
