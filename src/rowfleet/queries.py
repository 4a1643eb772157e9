"""Named SQL queries and numbered migrations, read from package data.

Each dialect keeps its queries in ``rowfleet/sql/<dialect>.sql`` as ``-- name: NAME``
blocks and its migrations in ``rowfleet/migrations/<dialect>/NNNN_title.sql``. Both are
read with ``importlib.resources`` so they load from inside the ``.pyz`` too.

Imports nothing of rowfleet's but ``errors``; knows nothing of any driver.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from importlib import resources

from rowfleet.errors import MigrationError

_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$")
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def parse_queries(text: str) -> dict[str, str]:
    """Split a ``-- name:`` annotated SQL file into ``{name: sql}``.

    >>> parse_queries("-- name: one\\nSELECT 1;\\n-- name: two\\nSELECT 2;")
    {'one': 'SELECT 1;', 'two': 'SELECT 2;'}
    """
    queries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        match = _NAME_LINE.match(line.strip())
        if match:
            name = match.group(1)
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice")
            current = queries[name] = []
        elif current is not None:
            current.append(line)
    return {name: _without_leading_comments(lines) for name, lines in queries.items()}


def _without_leading_comments(lines: list[str]) -> str:
    """The statement alone: comment lines above it document it in the file, and stay there
    (so traces and logs show SQL that starts with its verb)."""
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines = lines[1:]
    return "\n".join(lines).strip()


@functools.cache
def queries(dialect: str) -> dict[str, str]:
    """All named queries of one dialect (``sqlite`` or ``postgres``)."""
    text = resources.files("rowfleet.sql").joinpath(f"{dialect}.sql").read_text("utf-8")
    return parse_queries(text)


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@functools.cache
def migrations(dialect: str) -> tuple[Migration, ...]:
    """The dialect's migrations in version order; versions must run 1, 2, 3, ..."""
    folder = resources.files("rowfleet.migrations").joinpath(dialect)
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise MigrationError(f"{dialect} migrations skip from {expected - 1} to {migration.version}")
    return tuple(found)


def latest_version(dialect: str) -> int:
    return len(migrations(dialect))
