"""Run rowfleet's unittest suite: the one test command behind ``python make.py test``.

Owns test discovery and selection and the summary line ``N passed, N failed, N skipped``
that is always the last line printed. The tests live in folders by what they need
(``FOLDERS``): ``pure`` (no database, no process), ``contract`` (a real database in one
process, each contract on SQLite and PostgreSQL), ``panel`` (HTTP, a real browser, a real
Prometheus), ``process`` (real processes killed, frozen, cut off) and ``docs`` (what a reader
runs). ``--quick`` runs the first three, leaving out the test classes that set ``SLOW =
True`` (those that start PostgreSQL, Chromium or Prometheus); ``-k`` filters test names;
positional arguments name modules, with or without their folder (``test_claim``,
``contract.test_claim``, ``tests/contract/test_claim.py``).

With ``--jobs N`` (default: 4 where the machine has 2 cores or more, 2 for ``--quick``;
see ``default_lanes``) the modules run in N lanes: child processes that each take the next module, longest first, from the parent and
send back its counts and its report, which the parent prints whole, one module at a time.
Most of the suite waits on real worker processes and databases, so several lanes finish it in
well under the time of one; each lane is one process, so a module's tests still run one
after another and a PostgreSQL harness starts once per lane. The longest-first order comes
from the durations the last run recorded (``.test-times.json``, untracked), else file sizes.

Usage: ``python tools/run_tests.py [--quick] [-v] [-k PATTERN] [--jobs N] [--count] [test_module ...]``
(``--count`` runs nothing and prints ``N tests in M modules``).
Exit 0 only when at least one test ran and none failed. Stdlib only; imports nothing from
rowfleet itself (the test modules do).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import threading
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
TESTS = ROOT / "tests"
TIMES = ROOT / ".test-times.json"
# The folders of tests/, by what their tests need; --quick runs the first three.
FOLDERS = ("pure", "contract", "panel", "process", "docs")
QUICK_FOLDERS = ("pure", "contract", "panel")



def default_lanes(cores: int, quick: bool = False) -> int:
    """Lanes for ``cores``: 4 wherever there are 2 cores or more, else 1; 2 for the quick
    set. Most of the whole suite waits on the worker processes and databases its tests
    started, so on 2 cores more lanes than cores still gain (measured: 566 s in 2 lanes,
    531 s in 3 with 1,608 tests; 630 s in 3, 576 s in 4 with 1,661); the quick set is
    mostly CPU, which a third lane only contends for (50 s, 54 s).

    >>> default_lanes(1), default_lanes(2), default_lanes(16), default_lanes(2, quick=True)
    (1, 4, 4, 2)
    """
    if cores < 2:
        return 1
    return 2 if quick else 4

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


def module_name(arg: str, known: list[str] | None = None) -> str:
    """A test name given on the command line, as a dotted name under tests/; a module named
    without its folder is found in ``known`` (the discovered modules).

    >>> module_name("tests/contract/test_store.py"), module_name("test_store.StoreTests", ["contract.test_store"])
    ('contract.test_store', 'contract.test_store.StoreTests')
    """
    name = arg.removeprefix("tests/").removesuffix(".py").replace("/", ".")
    head, _, rest = name.partition(".")
    if head.startswith("test_"):
        folder = next((m.split(".")[0] for m in known or () if m.split(".")[-1] == head), None)
        if folder is not None:
            return f"{folder}.{name}"
    return name


def is_slow(name: str) -> bool:
    """Whether a test name lies outside the folders ``--quick`` runs.

    >>> is_slow("process.test_up"), is_slow("contract.test_claim.SQLiteClaimTest")
    (True, False)
    """
    return name.split(".")[0] not in QUICK_FOLDERS


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


def counts(result: CountingResult) -> dict[str, int]:
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    return {"passed": result.passed, "failed": failed, "skipped": len(result.skipped), "ran": result.testsRun}


def summary(totals: dict[str, int]) -> tuple[str, bool]:
    """The final ``N passed, N failed, N skipped`` line, and whether the run is a success.

    >>> summary({"passed": 3, "failed": 0, "skipped": 1, "ran": 4})
    ('3 passed, 0 failed, 1 skipped', True)
    >>> summary({"passed": 0, "failed": 0, "skipped": 0, "ran": 0})[1]
    False
    """
    line = f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped"
    return line, totals["failed"] == 0 and totals["ran"] > 0


def longest_first(names: list[str], recorded: dict[str, float]) -> list[str]:
    """Modules in the order lanes should take them: the longest (as last recorded, else by
    file size, a module never timed counting as long) first, so no lane is left with a long
    one at the end.

    >>> longest_first(["a", "b", "c"], {"a": 1.0, "b": 9.0})
    ['c', 'b', 'a']
    """
    unknown = float("inf")

    def cost(name: str) -> tuple[float, float]:
        path = TESTS / Path(*name.split(".")[:2]).with_suffix(".py")
        return recorded.get(name, unknown), path.stat().st_size if path.exists() else 0

    return sorted(names, key=cost, reverse=True)


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
                        help="only the pure, contract and panel folders, without the test classes that start "
                             "PostgreSQL, Chromium or Prometheus (SLOW = True)")
    parser.add_argument("-k", dest="patterns", action="append", default=[],
                        help="only test names matching this substring or glob (repeatable)")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per test")
    parser.add_argument("--jobs", type=int, default=None,
                        help="lanes of test modules run at once (default: 4 where there are 2 cores or more, "
                             "2 with --quick)")
    parser.add_argument("--count", action="store_true",
                        help="run nothing: print how many tests the selection holds (`N tests in M modules`)")
    parser.add_argument("--lane", nargs=2, type=int, metavar=("TASK_FD", "RESULT_FD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.jobs is None:
        args.jobs = default_lanes(os.cpu_count() or 1, args.quick)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    return args


def _loader(args: argparse.Namespace) -> unittest.TestLoader:
    loader = unittest.TestLoader()
    # Same rule as `python -m unittest -k`: a plain word matches as a substring.
    loader.testNamePatterns = [p if "*" in p else f"*{p}*" for p in args.patterns] or None
    return loader


def run_modules(names: list[str], args: argparse.Namespace, stream: io.TextIOBase) -> tuple[dict[str, int], list[str]]:
    """Run ``names`` in this process, reporting to ``stream``: the counts, and the modules left out as slow."""
    suite, left_out = build_suite(_loader(args), names, args.quick)
    runner = unittest.TextTestRunner(stream=stream, verbosity=2 if args.verbose else 1, buffer=True,
                                     resultclass=CountingResult)
    return counts(runner.run(suite)), left_out


def serve_lane(args: argparse.Namespace) -> int:
    """A lane: run each module the parent names on the task pipe, one at a time, and answer
    each with one JSON line on the result pipe (its counts, report and duration)."""
    task_fd, result_fd = args.lane
    with open(task_fd, encoding="utf-8") as tasks, open(result_fd, "w", encoding="utf-8") as results:
        for line in tasks:
            name, started, report = line.strip(), time.monotonic(), io.StringIO()
            totals, left_out = run_modules([name], args, report)
            results.write(json.dumps({"name": name, "report": report.getvalue(), "left_out": left_out,
                                      "seconds": time.monotonic() - started, **totals}) + "\n")
            results.flush()
    return 0


class Lanes:
    """The parent's side: N lane processes fed from one queue of modules."""

    def __init__(self, names: list[str], args: argparse.Namespace) -> None:
        self.queue = list(names)
        self.args = args
        self.lock = threading.Lock()
        self.totals = {"passed": 0, "failed": 0, "skipped": 0, "ran": 0}
        self.left_out: list[str] = []
        self.seconds: dict[str, float] = {}

    def run(self) -> dict[str, int]:
        threads = [threading.Thread(target=self._lane, daemon=True) for _ in range(min(self.args.jobs, len(self.queue)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return self.totals

    def _next(self) -> str | None:
        with self.lock:
            return self.queue.pop(0) if self.queue else None

    def _lane(self) -> None:
        task_read, task_write = os.pipe()
        result_read, result_write = os.pipe()
        command = [sys.executable, str(Path(__file__).resolve()), "--lane", str(task_read), str(result_write)]
        command += ["--quick"] * self.args.quick + ["-v"] * self.args.verbose
        command += [f"-k{pattern}" for pattern in self.args.patterns]
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, pass_fds=(task_read, result_write))
        os.close(task_read)
        os.close(result_write)
        with open(task_write, "w", encoding="utf-8") as tasks, open(result_read, encoding="utf-8") as results:
            while (name := self._next()) is not None:
                tasks.write(name + "\n")
                tasks.flush()
                answer = results.readline()
                self._record(name, json.loads(answer) if answer else None)
                if not answer:
                    break
        child.wait()

    def _record(self, name: str, answer: dict | None) -> None:
        with self.lock:
            if answer is None:  # the lane died: its module failed, the rest go to other lanes
                print(f"\n{name}: its test process ended without reporting", file=sys.stderr, flush=True)
                self.totals["failed"] += 1
                self.totals["ran"] += 1
                return
            for key in self.totals:
                self.totals[key] += answer[key]
            self.left_out += answer["left_out"]
            self.seconds[name] = answer["seconds"]
            sys.stderr.write(f"{name} ({answer['seconds']:.0f}s) {answer['report']}")
            sys.stderr.flush()


def recorded_times() -> dict[str, float]:
    try:
        return {str(name): float(seconds) for name, seconds in json.loads(TIMES.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def record_times(seconds: dict[str, float]) -> None:
    try:
        TIMES.write_text(json.dumps({**recorded_times(), **seconds}, indent=1, sort_keys=True))
    except OSError:
        pass  # a read-only checkout: the next run orders by file size


def print_count(names: list[str], args: argparse.Namespace) -> int:
    """``N tests in M modules``: what a run of this selection would count as passed, failed
    or skipped, found by loading the modules, not running them (the docs record it)."""
    suite, _ = build_suite(_loader(args), names, args.quick)
    print(f"{suite.countTestCases()} tests in {len(names)} modules")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    prepare_paths()
    if args.lane:
        return serve_lane(args)
    known = discover_module_names(TESTS)
    names = [module_name(a, known) for a in args.tests] or known
    if args.count:
        return print_count(names, args)
    started = time.monotonic()
    if args.jobs > 1 and len(names) > 1:
        lanes = Lanes(longest_first(names, recorded_times()), args)
        totals, left_out = lanes.run(), lanes.left_out
        record_times(lanes.seconds)
    else:
        totals, left_out = run_modules(names, args, sys.stderr)
    if left_out:
        print(f"--quick: left out the {', '.join(f for f in FOLDERS if f not in QUICK_FOLDERS)} folders "
              f"({len(left_out)} modules) and the test classes that start PostgreSQL, Chromium or Prometheus",
              file=sys.stderr)
    line, ok = summary(totals)
    print(f"{len(names)} module(s) in {time.monotonic() - started:.0f}s, {args.jobs} lane(s)", file=sys.stderr)
    sys.stderr.flush()  # the runner writes to stderr; the summary must come after all of it
    print(line, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
