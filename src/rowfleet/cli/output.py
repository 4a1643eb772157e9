"""How commands print: JSON for ``--json``, plain tables for people, and a user error as
one line with the exit code it deserves."""

from __future__ import annotations

import json
import sys
from typing import Any

from rowfleet import exitcodes
from rowfleet.errors import Conflict, NotFound, RowfleetError


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))



def short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"



def table(headers: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return ""
    cells = [headers] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in cells)


def report(exc: RowfleetError) -> int:
    """One line on stderr for a user-facing error; the exit code it deserves."""
    if isinstance(exc, (NotFound, Conflict)):
        print(f"rowfleet: {exc}", file=sys.stderr)
        return exitcodes.REFUSED
    print(f"rowfleet: error: {exc}", file=sys.stderr)
    return exitcodes.USAGE
