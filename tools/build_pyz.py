"""Build dist/rowfleet.pyz, the single-file distribution, and prove it runs.

Owns packaging rowfleet as a zipapp: it stages a clean copy of ``src/rowfleet`` (no
``__pycache__``, no stray ``*.pyc``) with a root ``__main__.py`` that calls ``rowfleet.cli.main``,
compiles every module beside its source, archives it with the stdlib ``zipapp``, then runs ``<python> rowfleet.pyz --version`` from
an unrelated directory without ``PYTHONPATH``, so the archive cannot borrow from ``src/``.
Success is reported only after that run exits 0 and prints a version; a build that fails
it is deleted, so ``dist/`` never holds an archive that has not run.

Why the bytecode: Python cannot cache bytecode for modules imported from a zip, so without
it every command compiles every module again before it starts.
``zipimport`` prefers ``module.pyc`` beside ``module.py``, and falls back to the source when
the bytecode is another Python version's (its magic number differs), so the archive still
runs anywhere; the hashes are left unchecked because the sources inside never change.

Usage: ``python tools/build_pyz.py [--output PATH]``. Stdlib only; imports nothing from
rowfleet (the archive is tested by running it, in a separate process).
"""

from __future__ import annotations

import argparse
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
import zipapp
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "rowfleet"
DEFAULT_OUTPUT = ROOT / "dist" / "rowfleet.pyz"
INTERPRETER = "/usr/bin/env python3"
ENTRY_POINT = "import sys\nfrom rowfleet.cli import main\nsys.exit(main())\n"
SMOKE_TIMEOUT_S = 60


def stage(package: Path, staging: Path) -> None:
    """Copy the package into ``staging``, each module with its bytecode beside it, and the
    archive's ``__main__.py``."""
    shutil.copytree(package, staging / package.name,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for source in sorted((staging / package.name).rglob("*.py")):
        # dfile: the path inside the archive, not the staging folder's random name, so that
        # tracebacks name the module and the same sources always make the same archive size
        py_compile.compile(str(source), cfile=str(source.with_suffix(".pyc")), dfile=str(source.relative_to(staging)),
                           doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    (staging / "__main__.py").write_text(ENTRY_POINT)


def smoke_run(archive: Path) -> subprocess.CompletedProcess:
    """Run ``archive --version`` from an empty directory with no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory(prefix="rowfleet-smoke-") as cwd:
        return subprocess.run(
            [sys.executable, str(archive.resolve()), "--version"],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S,
        )


def build(package: Path, output: Path) -> None:
    """Write the archive at ``output`` from the package folder."""
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rowfleet-pyz-") as staging:
        stage(package, Path(staging))
        zipapp.create_archive(staging, output, interpreter=INTERPRETER, compressed=True)


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build_pyz.py", description="Build and smoke-run rowfleet.pyz.")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                        help=f"where to write the archive (default: {_shown(DEFAULT_OUTPUT)})")
    output = parser.parse_args(argv).output.resolve()
    if not (PACKAGE / "__init__.py").is_file():
        print(f"build: no package at {PACKAGE}; nothing to build", file=sys.stderr)
        return 1
    build(PACKAGE, output)
    try:
        run = smoke_run(output)
    except subprocess.TimeoutExpired:
        run = subprocess.CompletedProcess([], 1, "", f"no answer within {SMOKE_TIMEOUT_S}s")
    version = run.stdout.strip().splitlines()[0] if run.stdout.strip() else ""
    if run.returncode != 0 or not version:
        output.unlink()
        detail = (run.stderr or run.stdout).strip().splitlines()[-5:] or ["(no output)"]
        print(f"build: FAILED: `{_shown(output)} --version` exited {run.returncode}"
              f"{'' if version else ' without printing a version'}, so the archive was "
              "removed. Its last lines:", file=sys.stderr)
        print("\n".join(f"    {line}" for line in detail), file=sys.stderr)
        return 1
    print(f"build: OK {_shown(output)} ({output.stat().st_size:,} bytes); --version says: {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
