"""rowfleet's task runner: ``python make.py TASK [ARGS...]``.

Owns the list of project tasks and nothing else: each task is a plain function that runs
one script under ``tools/`` or ``examples/`` with this interpreter, passing extra arguments
through, and exits with that script's code. ``python make.py`` lists the tasks.
Stdlib only; imports nothing from rowfleet (tasks run it in child processes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# Folders clean never looks inside: caches go whole, environments and dot-folders
# (.git, .venv) are not ours to tidy.
CLEAN_PRUNED = frozenset({"__pycache__", "venv", "node_modules"})
DB_SUFFIXES = (".db", ".db-wal", ".db-shm", ".db-journal")


def run_script(script: str, args: list[str]) -> int:
    """Run ``script`` (relative to the root) with this Python; return its exit code."""
    path = ROOT / script
    if not path.is_file():
        print(f"make: {script} does not exist yet, so there is nothing to run", file=sys.stderr)
        return 2
    code = subprocess.call([sys.executable, str(path), *args], cwd=ROOT)
    return 128 - code if code < 0 else code  # killed by a signal: report it as a shell would


def build(args: list[str]) -> int:
    """Build dist/rowfleet.pyz and run it once to prove it works."""
    return run_script("tools/build_pyz.py", args)


def test(args: list[str]) -> int:
    """Run the whole test suite (-k PATTERN, -v, module names pass through)."""
    return run_script("tools/run_tests.py", args)


def test_quick(args: list[str]) -> int:
    """Run the pure, contract and panel tests, without the classes that start a server or a browser."""
    return run_script("tools/run_tests.py", ["--quick", *args])


def check_deps(args: list[str]) -> int:
    """Fail if anything imports beyond the stdlib (lazy psycopg in the Postgres backend aside)."""
    return run_script("tools/check_deps.py", args)


def settings_table(args: list[str]) -> int:
    """Rewrite the README's settings tables from the settings' declarations (--check: only compare)."""
    return run_script("tools/settings_table.py", args)


def bench(args: list[str]) -> int:
    """Run the benchmarks (--section NAME for one section, --quick for a sanity run)."""
    # The bench is a package (tools/bench/), run with -m so its sections find their harness.
    code = subprocess.call([sys.executable, "-m", "tools.bench", *args], cwd=ROOT)
    return 128 - code if code < 0 else code


def chaos(args: list[str]) -> int:
    """Storm the built .pyz with kills, freezes and restarts; exit 1 on any lost or doubled job."""
    return run_script("tools/chaos.py", args)


def docs(args: list[str]) -> int:
    """Serve the docs site in web/ (--write regenerates its generated parts, --check compares)."""
    return run_script("tools/docs.py", args)


def demo(args: list[str]) -> int:
    """Run the end-to-end demo."""
    return run_script("examples/demo.py", args)


def clean(args: list[str]) -> int:
    """Remove build output, caches and database files left by runs."""
    tracked = _tracked_files()
    removed = [p for p in _clean_targets(tracked) if _remove(p)]
    for path in removed:
        print(f"removed {path.relative_to(ROOT)}")
    if not removed:
        print("clean: nothing to remove")
    return 0


def _clean_targets(tracked: set[Path]) -> list[Path]:
    targets = [ROOT / "dist", ROOT / "build", *sorted((ROOT / "src").glob("*.egg-info"))]
    for dirpath, dirnames, filenames in os.walk(ROOT):
        here = Path(dirpath)
        targets.extend(here / d for d in dirnames if d == "__pycache__")
        dirnames[:] = sorted(d for d in dirnames if d not in CLEAN_PRUNED and not d.startswith("."))
        # A database someone committed on purpose (a fixture) is not a leftover.
        targets.extend(here / f for f in sorted(filenames)
                       if f.endswith(DB_SUFFIXES) and here / f not in tracked)
    return targets


def _tracked_files() -> set[Path]:
    """Files git tracks under the root; empty when git is unavailable."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    return {ROOT / name for name in os.fsdecode(out).split("\0") if name}


def _remove(path: Path) -> bool:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    else:
        return False
    return True


TASKS = {
    "build": build,
    "test": test,
    "test-quick": test_quick,
    "check-deps": check_deps,
    "settings-table": settings_table,
    "bench": bench,
    "demo": demo,
    "chaos": chaos,
    "docs": docs,
    "clean": clean,
}


def usage() -> str:
    width = max(len(name) for name in TASKS)
    lines = ["usage: python make.py TASK [ARGS...]", "", "tasks:"]
    lines += [f"  {name:<{width}}  {task.__doc__.splitlines()[0]}" for name, task in TASKS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    task = TASKS.get(argv[0])
    if task is None:
        print(f"make: unknown task {argv[0]!r}; run `python make.py` to list the tasks", file=sys.stderr)
        return 2
    try:
        return task(argv[1:])
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
