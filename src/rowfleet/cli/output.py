"""How commands print: JSON for ``--json``, plain tables and lines for people, warnings,
and a user error as one line with the exit code it deserves.

Text for people goes through ``rowfleet.terminal.escaped``, whichever command prints it
(``table``, ``say``, ``warn``, ``report`` and the log lines): a value someone else wrote (a
queue, a task, a project, who switched a worker and why) may hold control characters, and
a terminal acts on those rather than showing them. JSON needs no more: ``json.dumps``
escapes them.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING, Any, Iterable

from rowfleet.terminal import escaped, report, say

if TYPE_CHECKING:  # only named: a command that prints no listing starts without the snapshot's imports
    from rowfleet.views.snapshot import Services, Worker

__all__ = ["EscapingFormatter", "escaped", "print_json", "report", "say", "seen_text", "services_table", "short", "table", "warn"]


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))



def warn(text: Any) -> None:
    """A warning for people, one line on stderr: the command goes on."""
    print(f"rowfleet: warning: {text}", file=sys.stderr)


def short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"



def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Rows under their headers in aligned columns, each cell escaped (see ``escaped``);
    "" for no rows.

    >>> print(table(["queue", "jobs"], [["q\\x1b[2J", 3]]))
    queue     jobs
    q\\x1b[2J  3
    """
    if not rows:
        return ""
    cells = [headers] + [[escaped(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in cells)


def services_table(found: Iterable[Services]) -> str:
    """Whether each project is served: an orchestrator drains its workflows' outbox and
    recovers its lost jobs; without one, both wait."""
    rows = [[s.project or "''", s.orchestrators or "NONE", s.outbox_waiting,
             "-" if s.outbox_oldest_age is None else f"{s.outbox_oldest_age:.1f}s"] for s in found]
    return table(["project", "orchestrators", "outbox waiting", "oldest"], rows)


def seen_text(worker: Worker) -> str:
    """How long ago a worker last beat, as the listings show it."""
    return "-" if worker.age is None else f"{worker.age:.1f}s ago"


class EscapingFormatter(logging.Formatter):
    """Log lines for people: a logged value (a task's name, an error a handler raised) is
    escaped as printed text is; a traceback keeps its lines."""

    def format(self, record: logging.LogRecord) -> str:
        return escaped(super().format(record), lines=True)
