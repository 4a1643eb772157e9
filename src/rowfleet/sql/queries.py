"""Named SQL queries and numbered migrations, read from package data.

Each dialect keeps its queries in ``rowfleet/sql/<dialect>/<entity>.sql`` as ``-- name:
NAME`` blocks, one file per part of the store (``core``, ``jobs``, ``runs``, ``schedules``,
``fleet``; the same files, holding the same names, for every dialect), and its migrations in
``rowfleet/sql/migrations/<dialect>/NNNN_title.sql``. Both are read with ``importlib.resources``
so they load from inside the ``.pyz`` too. A query's name is the name of the store method
that runs it (a composite method's further statements are named for their step).

A rule several queries share (which jobs a claim may take, and in what order) is written
once per dialect as a ``-- fragment: NAME`` block and included with ``{{NAME}}``; the
loader expands it when the file is read, so a fragment is fixed text of the package, never
a caller's, and is not itself a query anyone can run.

A fragment may also have variants, ``-- fragment: NAME [VARIANT, ...]`` (one text may
serve several): every query that includes a fragment with variant ``VARIANT`` is then
also there as ``QUERY[VARIANT]``, with that variant wherever one exists (and the plain
fragment elsewhere). So a statement is written once and its cheap and general forms cannot
drift apart (the claim: a plain worker's ``claim``, a GPU worker's ``claim[routed]``, an
overflow box's ``claim[newest]``).

Imports nothing of rowfleet's but ``errors``; knows nothing of any driver.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from importlib import resources

from rowfleet.errors import MigrationError

_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$")
_FRAGMENT_LINE = re.compile(r"^--\s*fragment:\s*([a-z_][a-z0-9_]*(?:\s*\[[a-z_][a-z0-9_, ]*\])?)\s*$")
_VARIANT = re.compile(r"^([a-z_][a-z0-9_]*)\[([a-z_][a-z0-9_]*)\]$")
_INCLUDE = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def parse_queries(text: str) -> dict[str, str]:
    """Split a ``-- name:`` annotated SQL file into ``{name: sql}``, with every
    ``{{fragment}}`` replaced by its ``-- fragment:`` block.

    >>> parse_queries("-- name: one\\nSELECT 1;\\n-- name: two\\nSELECT 2;")
    {'one': 'SELECT 1;', 'two': 'SELECT 2;'}
    >>> parse_queries("-- fragment: due\\nrun_at <= :now\\n-- name: due_jobs\\nSELECT id FROM jobs WHERE {{due}};")
    {'due_jobs': 'SELECT id FROM jobs WHERE run_at <= :now;'}
    >>> parse_queries("-- fragment: due\\nTRUE\\n-- fragment: due [late]\\nrun_at > :now\\n"
    ...               "-- name: due_jobs\\nSELECT id FROM jobs WHERE {{due}};")
    {'due_jobs': 'SELECT id FROM jobs WHERE TRUE;', 'due_jobs[late]': 'SELECT id FROM jobs WHERE run_at > :now;'}
    >>> parse_queries("-- name: one\\nSELECT 1 WHERE {{nowhere}};")
    Traceback (most recent call last):
    ...
    ValueError: query 'one' includes {{nowhere}}, which no -- fragment: block defines
    """
    named, fragments = _blocks(text)
    return _expand_all(named, fragments)


def parse_fragments(text: str) -> dict[str, str]:
    """The ``-- fragment:`` blocks of a SQL file, ``{name: text}``.

    >>> parse_fragments("-- fragment: due\\n-- Due now.\\nrun_at <= :now\\n-- name: one\\nSELECT 1;")
    {'due': 'run_at <= :now'}
    """
    return _blocks(text)[1]


def _blocks(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """Both kinds of block, ``(queries, fragments)``, each as written (nothing expanded)."""
    kinds: dict[str, dict[str, list[str]]] = {"query": {}, "fragment": {}}
    current: list[str] | None = None
    for line in text.splitlines():
        for kind, pattern in (("query", _NAME_LINE), ("fragment", _FRAGMENT_LINE)):
            match = pattern.match(line.strip())
            if match:
                current = []
                for name in _variant_names(match.group(1)):
                    if name in kinds[kind]:
                        raise ValueError(f"{kind} {name!r} is defined twice")
                    kinds[kind][name] = current
                break
        else:
            if current is not None:
                current.append(line)
    named = {name: _without_leading_comments(lines) for name, lines in kinds["query"].items()}
    return named, {name: _fragment_text(name, lines) for name, lines in kinds["fragment"].items()}


def _variant_names(header: str) -> list[str]:
    """The names one block header defines: ``NAME``, or ``NAME[V]`` for each variant of
    ``NAME [V1, V2]`` (one text serving several variants).

    >>> _variant_names("due"), _variant_names("due [late, early]")
    (['due'], ['due[late]', 'due[early]'])
    """
    name, _, variants = header.partition("[")
    if not variants:
        return [name.strip()]
    return [f"{name.strip()}[{variant.strip()}]" for variant in variants.rstrip("]").split(",") if variant.strip()]


def _fragment_text(name: str, lines: list[str]) -> str:
    """A fragment's SQL without its comment lines. It lands mid-line in a query, where a
    comment would swallow the rest of that line, so one left inside it is refused."""
    text = "\n".join(line for line in lines if not line.lstrip().startswith("--")).strip()
    if "--" in text:
        raise ValueError(f"fragment {name!r} has a comment inside it; put it on a line of its own above")
    if _INCLUDE.search(text):  # one level only: a fragment reads the same wherever it is used
        raise ValueError(f"fragment {name!r} includes another fragment; write it out instead")
    return text


def _expand_all(named: dict[str, str], fragments: dict[str, str]) -> dict[str, str]:
    """Every query with its fragments written in, plus its variants (see the module docstring)."""
    variants: dict[str, set[str]] = {}
    for key in fragments:
        if (match := _VARIANT.match(key)) is not None:
            if match.group(1) not in fragments:
                raise ValueError(f"fragment {key!r} is a variant of {match.group(1)!r}, which no -- fragment: block defines")
            variants.setdefault(match.group(2), set()).add(match.group(1))
    expanded = {}
    for name, sql in named.items():
        expanded[name] = _expand(name, sql, fragments)
        included = set(_INCLUDE.findall(sql))
        for variant, varied in sorted(variants.items()):
            if included & varied:
                expanded[f"{name}[{variant}]"] = _expand(name, sql, fragments, variant)
    return expanded


def _expand(name: str, sql: str, fragments: dict[str, str], variant: str | None = None) -> str:
    def fragment(match: re.Match[str]) -> str:
        if match.group(1) not in fragments:
            raise ValueError(f"query {name!r} includes {{{{{match.group(1)}}}}}, which no -- fragment: block defines")
        return fragments.get(f"{match.group(1)}[{variant}]", fragments[match.group(1)])

    return _INCLUDE.sub(fragment, sql)


def _without_leading_comments(lines: list[str]) -> str:
    """The statement alone: comment lines above it document it in the file, and stay there
    (so traces and logs show SQL that starts with its verb)."""
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines = lines[1:]
    return "\n".join(lines).strip()


@functools.cache
def queries(dialect: str) -> dict[str, str]:
    """All named queries of one dialect (``sqlite`` or ``postgres``), from all its files;
    a fragment serves every file of its dialect."""
    named, included = merge_files(_sql_files(dialect))
    return _expand_all(named, included)


@functools.cache
def fragments(dialect: str) -> dict[str, str]:
    """The fragments one dialect's queries include, by name (to check, not to run)."""
    return merge_files(_sql_files(dialect))[1]


def query_files(dialect: str) -> dict[str, tuple[str, ...]]:
    """Which names (queries and fragments) each of a dialect's files holds: ``{entity: names}``."""
    return {entity: tuple({**named, **included}) for entity, (named, included) in
            ((entity, _blocks(text)) for entity, text in _sql_files(dialect).items())}


def merge_files(files: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The blocks of several files, each file read on its own (so one file's opening comment
    never trails the last query of another), as ``(queries, fragments)``.

    >>> merge_files({"a": "-- name: one\\nSELECT 1;", "b": "-- b's header\\n-- name: two\\nSELECT 2;"})[0]
    {'one': 'SELECT 1;', 'two': 'SELECT 2;'}
    >>> merge_files({"a": "-- name: one\\nSELECT 1;", "b": "-- name: one\\nSELECT 2;"})
    Traceback (most recent call last):
    ...
    ValueError: query 'one' is defined in both a.sql and b.sql
    """
    merged: tuple[dict[str, str], dict[str, str]] = ({}, {})
    where: dict[tuple[int, str], str] = {}
    for entity, text in files.items():
        for kind, (found, into) in enumerate(zip(_blocks(text), merged)):
            for name, sql in found.items():
                if (kind, name) in where:
                    raise ValueError(f"{('query', 'fragment')[kind]} {name!r} is defined in both "
                                     f"{where[kind, name]}.sql and {entity}.sql")
                where[kind, name] = entity
                into[name] = sql
    return merged


def _sql_files(dialect: str) -> dict[str, str]:
    folder = resources.files("rowfleet.sql").joinpath(dialect)
    return {entry.name[:-len(".sql")]: entry.read_text("utf-8")
            for entry in sorted(folder.iterdir(), key=lambda entry: entry.name) if entry.name.endswith(".sql")}


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@functools.cache
def migrations(dialect: str) -> tuple[Migration, ...]:
    """The dialect's migrations in version order; versions must run 1, 2, 3, ..."""
    folder = resources.files("rowfleet.sql.migrations").joinpath(dialect)
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
