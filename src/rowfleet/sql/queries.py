"""Named SQL queries and numbered migrations, read from package data.

Each dialect keeps its queries in ``rowfleet/sql/<dialect>/<entity>.sql`` as ``-- name:
NAME`` blocks, one file per part of the store (``core``, ``jobs``, ``runs``, ``schedules``,
``fleet``; the same files, holding the same names, for every dialect), and its migrations in
``rowfleet/sql/migrations/<dialect>/NNNN_title.sql``. Both are read with ``importlib.resources``
so they load from inside the ``.pyz`` too. A query's name is the name of the store method
that runs it (a composite method's further statements are named for their step).

A rule several queries share (which jobs a claim may take, whether a job fits the free
memory, in what order) is written once per dialect as a ``-- fragment: NAME`` block and
included with ``{{NAME}}``; the loader expands it when the file is read, so a fragment is
fixed text of the package, never a caller's, and is not itself a query anyone can run.
A fragment may include fragments in turn (so a small rule, such as the claim's candidate
rule, is written once and used inside every larger one); they are expanded recursively,
at most ``MAX_DEPTH`` deep, and a cycle or an unknown name is refused when the file is read.

A fragment may also have variants, ``-- fragment: NAME [VARIANT, ...]`` (one text may
serve several): every query whose expansion reaches a fragment with variant ``VARIANT``,
directly or through other fragments, is then also there as ``QUERY[VARIANT]``, expanded
with that variant of every fragment that has one (and the plain fragment elsewhere). So a
statement is written once and its cheap and general forms cannot drift apart (the claim: a
plain worker's ``claim``, a GPU worker's ``claim[routed]``, an overflow box's
``claim[newest]``).

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

MAX_DEPTH = 8
"""How deep fragments may include fragments: deeper nesting is refused as unreadable."""


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

    A fragment may include fragments, and a variant of an inner one makes a variant of
    every query that reaches it, here through ``ready``, which has no variant of its own:

    >>> parse_queries("-- fragment: due\\nrun_at <= :now\\n-- fragment: due [late]\\nrun_at > :now\\n"
    ...               "-- fragment: ready\\nstate = 'queued' AND {{due}}\\n"
    ...               "-- name: ready_jobs\\nSELECT id FROM jobs WHERE {{ready}};")  # doctest: +NORMALIZE_WHITESPACE
    {'ready_jobs': "SELECT id FROM jobs WHERE state = 'queued' AND run_at <= :now;",
     'ready_jobs[late]': "SELECT id FROM jobs WHERE state = 'queued' AND run_at > :now;"}
    >>> parse_queries("-- fragment: a\\n{{b}}\\n-- fragment: b\\nNOT {{a}}\\n-- name: one\\nSELECT 1;")
    Traceback (most recent call last):
    ...
    ValueError: fragments include each other in a cycle: a -> b -> a
    """
    named, fragments = _blocks(text)
    return _expand_all(named, fragments)


def parse_fragments(text: str) -> dict[str, str]:
    """The ``-- fragment:`` blocks of a SQL file, ``{name: text}``, each as it lands in a
    query (the fragments it includes written in; ``NAME[VARIANT]`` with that variant's).

    >>> parse_fragments("-- fragment: due\\n-- Due now.\\nrun_at <= :now\\n-- name: one\\nSELECT 1;")
    {'due': 'run_at <= :now'}
    >>> parse_fragments("-- fragment: due\\nrun_at <= :now\\n-- fragment: ready\\nstate = 'queued' AND {{due}}")
    {'due': 'run_at <= :now', 'ready': "state = 'queued' AND run_at <= :now"}
    """
    return _expanded_fragments(_blocks(text)[1])


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
    return text


def _expand_all(named: dict[str, str], fragments: dict[str, str]) -> dict[str, str]:
    """Every query with its fragments written in, plus its variants (see the module docstring)."""
    variants = _variants(fragments)
    _expanded_fragments(fragments)  # every fragment expands, even one no query reaches under a variant
    expanded = {}
    for name, sql in named.items():
        expanded[name] = _expand(f"query {name!r}", sql, fragments)[0]
        for variant in variants:
            text, varied = _expand(f"query {name!r}", sql, fragments, variant)
            if varied:
                expanded[f"{name}[{variant}]"] = text
    return expanded


def _variants(fragments: dict[str, str]) -> list[str]:
    """The variants the fragments define, in name order; each must vary a plain fragment.

    >>> _variants({"due": "TRUE", "due[late]": "run_at > :now", "pick[late]": "1"})
    Traceback (most recent call last):
    ...
    ValueError: fragment 'pick[late]' is a variant of 'pick', which no -- fragment: block defines
    """
    found = set()
    for key in fragments:
        if (match := _VARIANT.match(key)) is not None:
            if match.group(1) not in fragments:
                raise ValueError(f"fragment {key!r} is a variant of {match.group(1)!r}, which no -- fragment: block defines")
            found.add(match.group(2))
    return sorted(found)


def _expanded_fragments(fragments: dict[str, str]) -> dict[str, str]:
    """Each fragment as it lands in a query: a plain one under no variant, ``NAME[V]`` under
    ``V``. A plain fragment is also expanded under every variant, so that a cycle or an
    unknown name is refused wherever it hides."""
    variants = _variants(fragments)
    expanded = {}
    for key, text in fragments.items():
        match = _VARIANT.match(key)
        name, variant = (match.group(1), match.group(2)) if match else (key, None)
        expanded[key] = _expand(f"fragment {name!r}", text, fragments, variant, (name,))[0]
        for other in variants if match is None else ():
            _expand(f"fragment {name!r}", text, fragments, other, (name,))
    return expanded


def _expand(owner: str, sql: str, fragments: dict[str, str], variant: str | None = None,
            path: tuple[str, ...] = ()) -> tuple[str, bool]:
    """``sql`` with every ``{{NAME}}`` replaced by its fragment (``NAME[variant]`` where one
    exists), recursively; and whether any variant's text was used. ``path`` names the
    fragments being expanded around ``sql`` (a cycle's trail, and the depth).

    >>> _expand("query 'q'", "{{a}}", {"a": "x AND {{b}}", "b": "y", "b[v]": "z"}, "v")
    ('x AND z', True)
    >>> _expand("query 'q'", "{{a}}", {"a": "{{a}}"})
    Traceback (most recent call last):
    ...
    ValueError: fragments include each other in a cycle: a -> a
    """
    varied = False

    def include(match: re.Match[str]) -> str:
        nonlocal varied
        name = match.group(1)
        if name not in fragments:
            raise ValueError(f"{owner} includes {{{{{name}}}}}, which no -- fragment: block defines")
        if name in path:
            raise ValueError(f"fragments include each other in a cycle: {' -> '.join((*path[path.index(name):], name))}")
        if len(path) >= MAX_DEPTH:
            raise ValueError(f"fragments nest more than {MAX_DEPTH} deep: {' -> '.join((*path, name))}")
        text = fragments.get(f"{name}[{variant}]")
        varied = varied or text is not None
        inner, inner_varied = _expand(f"fragment {name!r}", fragments[name] if text is None else text,
                                      fragments, variant, (*path, name))
        varied = varied or inner_varied
        return inner

    return _INCLUDE.sub(include, sql), varied


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
    """The fragments one dialect's queries include, by name, each as it lands in a query
    (``parse_fragments``): to check, not to run."""
    return _expanded_fragments(merge_files(_sql_files(dialect))[1])


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
