"""Run rowfleet's unittest suite: the one test command behind ``python make.py test``.

Owns test discovery and selection (``--quick`` leaves out modules and test classes that
set ``SLOW = True``, the PostgreSQL ones among them, ``-k`` filters test names, positional
arguments name modules) and the summary line
``N passed, N failed, N skipped`` that is always the last line printed.

Usage: ``python tools/run_tests.py [--quick] [-v] [-k PATTERN] [test_module ...]``.
Exit 0 only when at least one test ran and none failed. Stdlib only; imports nothing from
rowfleet itself (the test modules do).
"""

from __future__ import annotations

import argparse
import os
import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
TESTS = ROOT / "tests"


class CountingResult(unittest.TextTestResult):
    """A text result that also counts whole tests that passed.

    Counted directly rather than derived from testsRun, so a test with several failing
    subtests, or a failed setUpClass, cannot push the passed count off.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed = 0

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed += 1


def discover_module_names(tests_dir: Path) -> list[str]:
    """Dotted names of every ``test_*.py`` module, relative to ``tests_dir``, sorted.

    Descends only into packages (folders with ``__init__.py``), as unittest discovery does.
    """
    names = []
    for dirpath, dirnames, filenames in os.walk(tests_dir):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if (here / d / "__init__.py").is_file())
        package = here.relative_to(tests_dir).parts
        names.extend(
            ".".join(package + (f[:-3],))
            for f in filenames
            if f.startswith("test_") and f.endswith(".py")
        )
    return sorted(names)


def module_name(arg: str) -> str:
    """A test name given on the command line, as a dotted name under tests/.

    >>> module_name("tests/test_store.py"), module_name("test_store.StoreTests")
    ('test_store', 'test_store.StoreTests')
    """
    arg = arg.removeprefix("tests/").removesuffix(".py")
    return arg.replace("/", ".")


def is_slow(name: str) -> bool:
    """Whether the loaded module behind a test name sets ``SLOW = True``.

    Checks every dotted prefix, so ``test_x.SomeTests`` still finds module ``test_x``.
    """
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        module = sys.modules.get(".".join(parts[:end]))
        if module is not None and getattr(module, "SLOW", False) is True:
            return True
    return False


def _import_problem(name: str, exc: Exception) -> unittest.TestCase:
    """A test that re-raises what importing ``name`` raised: an error, or a skip for SkipTest."""

    def reraise():
        raise exc

    reraise.__name__ = reraise.__qualname__ = name
    return unittest.FunctionTestCase(reraise, description=f"import {name}")


def build_suite(loader: unittest.TestLoader, names: list[str], quick: bool) -> tuple[unittest.TestSuite, list[str]]:
    """The suite for ``names``, and the names left out as slow."""
    suite, left_out = unittest.TestSuite(), []
    for name in names:
        try:
            tests = loader.loadTestsFromName(name)
        except Exception as exc:  # the loader turns only ImportError into a failing test
            tests = _import_problem(name, exc)
        if quick and is_slow(name):
            left_out.append(name)
        elif quick:
            suite.addTests(test for test in _flatten(tests) if getattr(test, "SLOW", False) is not True)
        else:
            suite.addTest(tests)
    return suite, left_out


def _flatten(tests: unittest.TestSuite | unittest.TestCase) -> list[unittest.TestCase]:
    """The test cases of a suite, however nested (a class may set ``SLOW = True`` too)."""
    if isinstance(tests, unittest.TestSuite):
        return [case for inner in tests for case in _flatten(inner)]
    return [tests]


def summary(result: CountingResult) -> tuple[str, bool]:
    """The final ``N passed, N failed, N skipped`` line, and whether the run is a success."""
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    line = f"{result.passed} passed, {failed} failed, {len(result.skipped)} skipped"
    return line, failed == 0 and result.testsRun > 0


def prepare_paths() -> None:
    """Make src/ and tests/ importable here and in any child process a test spawns."""
    for path in (str(TESTS), str(SRC)):
        if path not in sys.path:
            sys.path.insert(0, path)
    existing = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SRC)] + ([existing] if existing else []))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="run_tests.py", description="Run rowfleet's tests.")
    parser.add_argument("tests", nargs="*", help="test modules (e.g. test_store) or names in them")
    parser.add_argument("--quick", action="store_true",
                        help="leave out modules and test classes with SLOW = True (the PostgreSQL ones among them)")
    parser.add_argument("-k", dest="patterns", action="append", default=[],
                        help="only test names matching this substring or glob (repeatable)")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per test")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    prepare_paths()
    loader = unittest.TestLoader()
    # Same rule as `python -m unittest -k`: a plain word matches as a substring.
    loader.testNamePatterns = [p if "*" in p else f"*{p}*" for p in args.patterns] or None
    names = [module_name(a) for a in args.tests] or discover_module_names(TESTS)
    suite, left_out = build_suite(loader, names, args.quick)
    if left_out:
        print(f"--quick: left out slow modules: {', '.join(left_out)}, and the PostgreSQL test classes",
              file=sys.stderr)
    runner = unittest.TextTestRunner(
        verbosity=2 if args.verbose else 1, buffer=True, resultclass=CountingResult
    )
    result = runner.run(suite)
    line, ok = summary(result)
    sys.stderr.flush()  # the runner writes to stderr; the summary must come after all of it
    print(line, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
