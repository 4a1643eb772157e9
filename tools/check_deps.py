"""Check that rowfleet stays stdlib-only: every import in the repository is judged here.

Owns the rule "rowfleet has no dependencies": it parses (never imports) every ``.py``
file under ``src/``, ``tests/``, ``tools/``, ``examples/`` and the top-level ``make.py``,
collects each import, and gives every imported top-level module a verdict:

* stdlib       -- the name is in ``sys.stdlib_module_names``;
* first-party  -- ``rowfleet``, a relative import, or a module or package that lives in
  the scanned folders themselves (a sibling test helper, an example module, a tool);
* allowed-lazy psycopg -- ``psycopg``/``psycopg_pool``/``psycopg_binary`` imported inside a
  function body of the Postgres backend (``src/rowfleet/store/postgres.py``) or of a
  tests/tools file whose name has ``pg`` or ``postgres`` as a word part;
* VIOLATION    -- anything else, and any file that does not parse.

It also owns "no import cycle inside rowfleet": among the modules under ``src/``, the
imports that run when a module loads (not those inside function bodies, which wait until
called) must not form a cycle, since then whichever module is imported first decides
whether its partner is found half-initialised. Each cycle is one violation.

And it owns "no module imports back up the layers": every module under ``src/rowfleet``
belongs to one of ``LAYERS`` (leaves, rules, storage, the engine, services, the surface: the
API, the command line, the panel), stated as files and folders of ``src/rowfleet``, and any
import of it, at load time or inside a function, names only modules of its own layer or below. A module in no layer is a violation too,
so a new module's place is decided when it is written.

Usage: ``python tools/check_deps.py [ROOT]``; exit 0 when clean, 1 on violations.
Imports nothing from rowfleet (it must judge a tree it does not trust) and nothing
outside the stdlib.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

SCANNED_FOLDERS = ("src", "tests", "tools", "examples")
TOP_LEVEL_FILES = ("make.py",)
SKIPPED_DIRS = frozenset({"__pycache__", "dist", "build"})
PSYCOPG_NAMES = frozenset({"psycopg", "psycopg_pool", "psycopg_binary"})
POSTGRES_BACKEND = "src/rowfleet/store/postgres.py"
PG_WORD_PARTS = frozenset({"pg", "postgres", "postgresql"})
RELATIVE = "(relative)"
SHOWN_FILES = 3

# Bottom to top, as paths under src/rowfleet/: a folder (``store/``) holds every module inside
# it, a file (``job.py``) itself; the package's own ``__init__.py`` is the API's face. A module
# may import only modules of its own layer and of those below.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("leaves", ("errors.py", "names.py", "exitcodes.py", "config.py", "files.py", "terminal.py")),
    ("rules", ("job.py", "claim.py", "flow.py", "inputs.py", "dag.py", "cron.py", "schedule.py", "control.py", "liveness.py", "tasks.py",
               "models.py", "metrics/", "telemetry/")),
    ("storage", ("sql/", "store/")),
    ("engine", ("worker/", "gpu/", "views/")),
    ("services", ("services/",)),
    ("surface", ("api.py", "panel/", "cli/", "__init__.py", "__main__.py")),
)

STDLIB = "stdlib"
FIRST_PARTY = "first-party"
LAZY_PSYCOPG = "allowed-lazy psycopg"
VIOLATION = "VIOLATION"


@dataclass(frozen=True)
class Import:
    """One import found in a syntax tree.

    ``name`` is the dotted module name as written (``""`` for ``from . import x``),
    ``level`` the number of leading dots, ``top_level`` whether it runs when the file
    is imported (anywhere outside a function body, class bodies included), ``names``
    what a ``from`` import takes (``()`` for a plain import or a dynamic one).
    """

    line: int
    name: str
    top_level: bool
    level: int = 0
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    reason: str


@dataclass
class ModuleUse:
    """Everything known about one imported top-level module across the tree."""

    verdict: str = ""
    files: set[str] = field(default_factory=set)
    violations: list[Violation] = field(default_factory=list)


@dataclass
class Report:
    files: int = 0
    modules: dict[str, ModuleUse] = field(default_factory=dict)
    parse_errors: list[Violation] = field(default_factory=list)
    cycles: list[Violation] = field(default_factory=list)
    layering: list[Violation] = field(default_factory=list)

    def violations(self) -> list[Violation]:
        found = list(self.parse_errors) + list(self.cycles) + list(self.layering)
        for use in self.modules.values():
            found.extend(use.violations)
        return sorted(found, key=lambda v: (v.path, v.line))


# --- finding imports in one tree (pure) ---------------------------------------------


class _ImportCollector(ast.NodeVisitor):
    """Walks a tree, tracking whether the current node runs at import time."""

    def __init__(self, importlib_names: set[str], import_module_names: set[str]):
        self.importlib_names = importlib_names
        self.import_module_names = import_module_names
        self.in_function = False
        self.found: list[Import] = []

    def _add(self, node: ast.AST, name: str, level: int = 0, names: tuple[str, ...] = ()) -> None:
        self.found.append(Import(node.lineno, name, not self.in_function, level, names))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self._add(node, node.module or "", node.level, tuple(alias.name for alias in node.names))

    def visit_Call(self, node: ast.Call) -> None:
        target = _literal_import_target(node, self.importlib_names, self.import_module_names)
        if target is not None:
            name = target.lstrip(".")
            self._add(node, name, len(target) - len(name))
        self.generic_visit(node)

    def _visit_function(self, node, body) -> None:
        # Decorators, defaults and annotations run when the def runs; only the body waits.
        outer = self.in_function
        for child in ast.iter_child_nodes(node):
            if child not in body:
                self.visit(child)
        self.in_function = True
        for child in body:
            self.visit(child)
        self.in_function = outer

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_function(node, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_function(node, [node.body])


def _importlib_bindings(tree: ast.AST) -> tuple[set[str], set[str]]:
    """Names bound to the importlib module and to importlib.import_module.

    >>> modules, functions = _importlib_bindings(
    ...     ast.parse("import importlib as il; from importlib import import_module as im"))
    >>> sorted(modules), functions
    (['il', 'importlib'], {'im'})
    """
    modules, functions = {"importlib"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "importlib" and alias.asname:
                    modules.add(alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.module == "importlib" and not node.level:
            for alias in node.names:
                if alias.name == "import_module":
                    functions.add(alias.asname or alias.name)
    return modules, functions


def _literal_import_target(call: ast.Call, importlib_names, import_module_names) -> str | None:
    """The string literal a dynamic-import call names, or None if it is not one.

    >>> _literal_import_target(ast.parse('__import__("numpy")').body[0].value, set(), set())
    'numpy'
    """
    func = call.func
    is_dunder = isinstance(func, ast.Name) and func.id == "__import__"
    is_import_module = (isinstance(func, ast.Name) and func.id in import_module_names) or (
        isinstance(func, ast.Attribute)
        and func.attr == "import_module"
        and isinstance(func.value, ast.Name)
        and func.value.id in importlib_names
    )
    if not (is_dunder or is_import_module):
        return None
    arg = call.args[0] if call.args else next(
        (k.value for k in call.keywords if k.arg == "name"), None
    )
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return None  # a computed name (e.g. a user's --app module) cannot be judged statically
    level = next((k.value for k in call.keywords if k.arg == "level"), None)
    if is_dunder and isinstance(level, ast.Constant) and isinstance(level.value, int):
        return "." * level.value + arg.value
    return arg.value


def imports_of(tree: ast.AST) -> list[Import]:
    """Every import in a parsed module, in source order.

    >>> [(i.line, i.name, i.top_level) for i in imports_of(ast.parse("import os\\ndef f():\\n    import json"))]
    [(1, 'os', True), (3, 'json', False)]
    """
    collector = _ImportCollector(*_importlib_bindings(tree))
    collector.visit(tree)
    return sorted(collector.found, key=lambda imp: imp.line)


# --- judging imports (pure) ---------------------------------------------------------


def local_module_names(paths: list[str]) -> set[str]:
    """Top-level names that resolve to code in the scanned folders themselves.

    Scripts and tests put their own folder (and tests/, src/) on sys.path, so any module
    or package directory under tests/, tools/, examples/ or at the root is importable by
    its bare name; under src/ only the direct children are (the rest are dotted names).

    >>> sorted(local_module_names(["tests/helpers.py", "src/rowfleet/cli.py", "make.py"]))
    ['helpers', 'make', 'rowfleet']
    """
    names = set()
    for path in paths:
        parts = path.split("/")
        if parts[0] == "src":
            names.add(parts[1].removesuffix(".py"))
        else:
            names.update(parts[1:-1] if parts[0] in SCANNED_FOLDERS else ())
            names.add(parts[-1].removesuffix(".py"))
    return names


def is_pg_file(path: str) -> bool:
    """Whether a tests/ or tools/ file is named as Postgres-specific.

    >>> (is_pg_file("tests/test_postgres_store.py"), is_pg_file("tools/bench/postgres.py"),
    ...  is_pg_file("tests/process/test_pgbouncer.py"))
    (True, True, False)
    """
    parts = path.split("/")
    stem_words = re.split(r"[_\-.]", parts[-1].removesuffix(".py").lower())
    return parts[0] in ("tests", "tools") and bool(PG_WORD_PARTS.intersection(stem_words))


def top_name(imp: Import, path: str) -> str:
    """The top-level module an import resolves to, seen from the file at ``path``.

    >>> top_name(Import(1, "", True, 1), "src/rowfleet/store/sqlite.py")
    'rowfleet'
    """
    if imp.level:
        parts = path.split("/")
        return parts[1] if parts[0] == "src" and len(parts) > 2 else RELATIVE
    return imp.name.split(".")[0]


def verdict(imp: Import, path: str, local_names: set[str]) -> tuple[str, str | None]:
    """(verdict, reason) for one import in the file at ``path`` (a root-relative posix path).

    >>> verdict(Import(3, "requests", True), "src/rowfleet/worker/loop.py", set())[0]
    'VIOLATION'
    """
    name = top_name(imp, path)
    if name in PSYCOPG_NAMES:
        return _psycopg_verdict(imp, path, name)
    if name in sys.stdlib_module_names:
        return STDLIB, None
    if name in ("rowfleet", RELATIVE) or name in local_names:
        return FIRST_PARTY, None
    return VIOLATION, f"'{imp.name}' is neither stdlib nor first-party (rowfleet is stdlib-only)"


def _psycopg_verdict(imp: Import, path: str, name: str) -> tuple[str, str | None]:
    if path != POSTGRES_BACKEND and not is_pg_file(path):
        return VIOLATION, (
            f"'{name}' is allowed only in {POSTGRES_BACKEND} and in tests/tools files "
            "named *pg*/*postgres*, so the SQLite path never needs the driver"
        )
    if imp.top_level:
        return VIOLATION, (
            f"'{name}' imported when the module loads; import it inside the function "
            "that needs it, so rowfleet imports without the driver installed"
        )
    return LAZY_PSYCOPG, None


# --- import cycles among the modules under src/ (pure) ------------------------------


def module_of(path: str) -> str | None:
    """The dotted module a file under ``src/`` is, or None for a file elsewhere.

    >>> module_of("src/rowfleet/store/__init__.py"), module_of("src/rowfleet/api.py"), module_of("tests/t.py")
    ('rowfleet.store', 'rowfleet.api', None)
    """
    parts = path.removesuffix(".py").split("/")
    if parts[0] != "src" or len(parts) < 2:
        return None
    return ".".join(parts[1:-1] if parts[-1] == "__init__" else parts[1:])


def imported_modules(imp: Import, path: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that an import in the file at ``path`` loads by name. The
    packages above that file are left out, as are those Python loads on the way to a
    submodule: a package is loading before anything below it, so naming it starts nothing.

    >>> known = {"rowfleet", "rowfleet.api", "rowfleet.tasks", "rowfleet.store"}
    >>> sorted(imported_modules(Import(1, "rowfleet", True, 0, ("tasks", "__version__")), "src/rowfleet/api.py", known))
    ['rowfleet.tasks']
    >>> imported_modules(Import(1, "tasks", True, 1, ("task",)), "src/rowfleet/api.py", known)
    {'rowfleet.tasks'}
    >>> imported_modules(Import(1, "rowfleet", True, 0, ("store",)), "src/rowfleet/store/sqlite.py", known)
    set()
    """
    module = module_of(path) or ""
    if imp.level:
        package = module.split(".") if path.endswith("/__init__.py") else module.split(".")[:-1]
        package = package[:len(package) - (imp.level - 1)]
        base = ".".join(package + ([imp.name] if imp.name else []))
    else:
        base = imp.name
    found = {f"{base}.{name}" for name in imp.names if f"{base}.{name}" in known}
    if base in known and (not imp.names or len(found) < len(imp.names)):
        found.add(base)  # a plain import, or a name that is no submodule: from the module itself
    parts = module.split(".")
    return found - {".".join(parts[:end]) for end in range(1, len(parts) + 1)}


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Each cycle of ``graph`` (module -> {module it imports: line}) as a closed path that
    starts at its smallest module; one per group of modules that reach each other.

    >>> import_cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}})
    [['a', 'b', 'c', 'a']]
    >>> import_cycles({"a": {"b": 1}, "b": {}})
    []
    """
    cycles = []
    seen: set[str] = set()
    for start in sorted(graph):
        if start in seen or start not in _reach(graph, start, strict=True):
            continue
        group = {node for node in _reach(graph, start) if start in _reach(graph, node)}
        seen |= group
        cycles.append(_path(graph, start, group))
    return cycles


def _reach(graph: dict[str, dict[str, int]], start: str, strict: bool = False) -> set[str]:
    """The modules ``start`` imports, directly or not (itself too unless ``strict``)."""
    found: set[str] = set()
    frontier = list(graph.get(start, {})) if strict else [start]
    while frontier:
        node = frontier.pop()
        if node not in found:
            found.add(node)
            frontier.extend(graph.get(node, {}))
    return found


def _path(graph: dict[str, dict[str, int]], start: str, group: set[str]) -> list[str]:
    """A shortest closed path from ``start`` back to itself through ``group``."""
    came_from = {start: start}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, {})):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target in group and target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    return [start, start]


def cycle_violations(graph: dict[str, dict[str, int]], files: dict[str, str]) -> list[Violation]:
    """One violation per import cycle, at the first module's import of the next."""
    return [Violation(files[cycle[0]], graph[cycle[0]][cycle[1]], (
                f"import cycle when modules load: {' -> '.join(cycle)}; import one of them inside "
                "the function that needs it, or move what both need into a module of its own"))
            for cycle in import_cycles(graph)]


# --- layers (pure) -------------------------------------------------------------------


def layer_of(module: str) -> int | None:
    """The index in ``LAYERS`` of the layer ``module`` belongs to, or None when none claims it.

    >>> layer_of("rowfleet.names"), layer_of("rowfleet.store.jobs"), layer_of("rowfleet.cli.fleet")
    (0, 2, 5)
    >>> layer_of("rowfleet"), layer_of("rowfleet.nowhere") is None
    (5, True)
    """
    parts = module.split(".")
    if parts[0] != "rowfleet":
        return None
    for index, (_, places) in enumerate(LAYERS):
        for place in places:
            if place.endswith("/") and len(parts) > 1 and parts[1] == place[:-1]:
                return index
            if place == "__init__.py" and len(parts) == 1:
                return index
            if place.endswith(".py") and parts[1:] == [place[:-3]]:
                return index
    return None


def layers_table() -> str:
    """The layers, bottom first, one line each, as the report prints them."""
    return "\n".join(f"  {index}. {name:<9} src/rowfleet/{{{', '.join(places)}}}" if len(places) > 1
                     else f"  {index}. {name:<9} src/rowfleet/{places[0]}"
                     for index, (name, places) in enumerate(LAYERS))


def layer_violations(imports: dict[str, dict[str, int]], files: dict[str, str]) -> list[Violation]:
    """Each import (``module -> {module it imports: line}``, load-time and lazy alike) of a
    module in a higher layer, and each module in no layer.

    >>> files = {"rowfleet.names": "n.py", "rowfleet.api": "a.py", "rowfleet.odd": "o.py"}
    >>> [v.reason[:40] for v in layer_violations({"rowfleet.names": {"rowfleet.api": 3}}, files)]
    ['rowfleet.odd is in no layer of tools/che', 'rowfleet.names (leaves) imports rowfleet']
    """
    found = [Violation(path, 1, f"{module} is in no layer of tools/check_deps.py LAYERS: add it to the "
                                f"layer it belongs to") for module, path in sorted(files.items())
             if module.startswith("rowfleet") and layer_of(module) is None]
    for module, targets in sorted(imports.items()):
        own = layer_of(module)
        for target, line in sorted(targets.items()):
            theirs = layer_of(target)
            if own is not None and theirs is not None and theirs > own:
                found.append(Violation(files[module], line, (
                    f"{module} ({LAYERS[own][0]}) imports {target} ({LAYERS[theirs][0]}), a layer above it: "
                    "pass what it needs down as a value or a callable, or move the code up")))
    return found


# --- walking the tree (I/O) ---------------------------------------------------------


def python_files(root: Path) -> list[str]:
    """Root-relative posix paths of every scanned .py file, sorted."""
    found = [name for name in TOP_LEVEL_FILES if (root / name).is_file()]
    for folder in SCANNED_FOLDERS:
        for dirpath, dirnames, filenames in os.walk(root / folder):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
            rel = Path(dirpath).relative_to(root).as_posix()
            found.extend(f"{rel}/{f}" for f in filenames if f.endswith(".py"))
    return sorted(found)


def parse_file(root: Path, path: str) -> ast.AST | Violation:
    """The file's syntax tree, or a Violation saying why it could not be parsed."""
    try:
        # Bytes, so ast honours a PEP 263 coding line instead of our locale.
        return ast.parse((root / path).read_bytes(), filename=path)
    except SyntaxError as exc:
        return Violation(path, exc.lineno or 1, f"syntax error: {exc.msg}")
    except (ValueError, OSError) as exc:  # null bytes, unreadable file
        return Violation(path, 1, f"cannot parse: {exc}")


def check(root: Path) -> Report:
    """Parse and judge every scanned file under ``root``."""
    paths = python_files(root)
    local_names = local_module_names(paths)
    report = Report(files=len(paths))
    files = {module: path for path in paths if (module := module_of(path))}
    graph: dict[str, dict[str, int]] = {module: {} for module in files}
    every_import: dict[str, dict[str, int]] = {module: {} for module in files}
    for path in paths:
        tree = parse_file(root, path)
        if isinstance(tree, Violation):
            report.parse_errors.append(tree)
            continue
        module = module_of(path)
        for imp in imports_of(tree):
            _record(report, imp, path, local_names)
            if module is None:
                continue
            for target in imported_modules(imp, path, set(files)):
                every_import[module].setdefault(target, imp.line)
                if imp.top_level:
                    graph[module].setdefault(target, imp.line)
    report.cycles = cycle_violations(graph, files)
    report.layering = layer_violations(every_import, files)
    return report


def _record(report: Report, imp: Import, path: str, local_names: set[str]) -> None:
    kind, reason = verdict(imp, path, local_names)
    use = report.modules.setdefault(top_name(imp, path), ModuleUse())
    use.files.add(path)
    if reason:
        use.violations.append(Violation(path, imp.line, reason))
    # One bad use makes the whole module a violation; otherwise the verdict is shared.
    use.verdict = VIOLATION if use.violations else kind


# --- the report ---------------------------------------------------------------------


def _shortened(files: set[str]) -> str:
    shown = sorted(files)[:SHOWN_FILES]
    more = len(files) - len(shown)
    return ", ".join(shown) + (f" (+{more} more)" if more else "")


def format_report(report: Report) -> str:
    """The human-readable report; its last line is the OK/FAILED summary."""
    width = max([len(name) for name in report.modules] + [8])
    lines = []
    for name in sorted(report.modules):
        use = report.modules[name]
        lines.append(f"{name:<{width}}  {use.verdict:<20}  {_shortened(use.files)}")
        lines.extend(f"    {v.path}:{v.line}: {v.reason}" for v in use.violations)
    for cycle in report.cycles:
        lines.append(f"{'(cycle)':<{width}}  {VIOLATION:<20}  {cycle.path}")
        lines.append(f"    {cycle.path}:{cycle.line}: {cycle.reason}")
    for wrong in report.layering:
        lines.append(f"{'(layer)':<{width}}  {VIOLATION:<20}  {wrong.path}")
        lines.append(f"    {wrong.path}:{wrong.line}: {wrong.reason}")
    for error in report.parse_errors:
        lines.append(f"{'(unparsable)':<{width}}  {VIOLATION:<20}  {error.path}")
        lines.append(f"    {error.path}:{error.line}: {error.reason}")
    lines.append("layers, bottom first (a module imports only its own layer and those below):")
    lines.append(layers_table())
    found = report.violations()
    if found:
        lines.append(f"check-deps: FAILED ({len(found)} violations)")
    else:
        lines.append(f"check-deps: OK ({report.files} files, {len(report.modules)} modules)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="check_deps.py", description="Fail if rowfleet imports anything outside the stdlib."
    )
    default_root = Path(__file__).resolve().parent.parent
    parser.add_argument("root", nargs="?", type=Path, default=default_root,
                        help="repository root (default: the folder above tools/)")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"check-deps: {args.root} is not a directory", file=sys.stderr)
        return 2
    report = check(args.root)
    print(format_report(report))
    return 1 if report.violations() else 0


if __name__ == "__main__":
    sys.exit(main())
