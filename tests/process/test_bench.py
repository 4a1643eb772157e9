"""The benchmark still runs: its numbers are never asserted, but a bench that no longer
starts (a renamed import, a moved query) must fail the suite, not the next release.
Also holds the package's layering (tools/bench/: the command line imports the sections,
each section imports only the harness) and its registry (every section module is run)."""

from __future__ import annotations

import ast
import json
import os
import re
import secrets
import subprocess
import sys
import unittest

from support import DEADLINE, ROOT, child_env, unavailable

PACKAGE = os.path.join(ROOT, "tools", "bench")
FRAME = {"__init__", "__main__", "harness", "yardstick"}  # the package's modules that are not sections


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=child_env(), capture_output=True,
                          text=True, timeout=DEADLINE * 4)


def table_rows(output: str) -> dict[str, list[str]]:
    """The bench's table as printed: each row's cells by its label."""
    return {line.split("  ")[0]: re.split(r"\s{2,}", line) for line in output.splitlines()}


def bench(*args: str) -> subprocess.CompletedProcess:
    return run("-m", "tools.bench", *args)


def run_marked(mark: str, *args: str) -> subprocess.CompletedProcess:
    """As ``run``, with ``mark`` (NAME=VALUE) in the child's environment, which every process
    it starts inherits (the PostgreSQL server's too), so that ``processes_marked`` finds them."""
    name, value = mark.split("=", 1)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=child_env(**{name: value}), capture_output=True,
                          text=True, timeout=DEADLINE * 10)


def processes_marked(mark: str) -> list[str]:
    """The command lines of the running processes whose environment holds ``mark``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if mark.encode() not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                found.append(f"{pid}: " + cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip())
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


def sibling_imports(module: str) -> set[str]:
    """The package's own modules that ``module`` imports (relative imports), wherever they run."""
    with open(os.path.join(PACKAGE, module + ".py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module] if node.module else [alias.name for alias in node.names])
    return found


def package_modules() -> set[str]:
    return {name.removesuffix(".py") for name in os.listdir(PACKAGE) if name.endswith(".py")}


class BenchSmokeTest(unittest.TestCase):
    SLOW = True  # runs bench sections: the full suite and CI

    def test_a_quick_section_prints_its_table(self):
        result = bench("--quick", "--section", "batch")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.stdout.startswith("benchmark"), result.stdout)
        self.assertIn("batch enqueue", result.stdout)
        self.assertIn("  baselines   enqueue, batch, round trip and claim latency", result.stdout)  # its legend lines ...
        self.assertNotIn("  pg rows", result.stdout)  # ... and no other section's

    def test_the_make_task_runs_a_section_named_positionally(self):
        result = run("make.py", "bench", "--quick", "batch")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("batch enqueue", result.stdout)
        self.assertNotIn("enqueue, 1 job/transaction", result.stdout)

    def assert_measured(self, rows: dict[str, list[str]], label: str, durability: str, output: str) -> str:
        """The row ``label`` is there with ``durability``, two whole figures and a ratio; its note."""
        self.assertIn(label, rows, output)
        _, printed, ours, baseline, ratio, note = rows[label]
        self.assertEqual(printed, durability)
        self.assertRegex(ours, r"^[0-9][0-9,]*$")
        self.assertRegex(baseline, r"^[0-9][0-9,]*$")
        self.assertRegex(ratio, r"^[0-9]+\.[0-9]{2}x$")
        return note

    def test_the_dag_section_prints_its_rows_with_numbers(self):
        result = bench("--quick", "--section", "dag")
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = table_rows(result.stdout)
        for label in ("dag fan-out, 2 workers (nodes/s)", "dag map, 2 workers (nodes/s)"):
            with self.subTest(label):
                note = self.assert_measured(rows, label, "FULL", result.stdout)
                self.assertIn("N=100", note)
                self.assertRegex(note, r"orchestrator CPU us/node [0-9][0-9,]*")
        self.assertIn("pg dag fan-out", result.stdout)  # not run with --quick, but named

    def test_the_cpu_section_prints_cpu_per_job_and_a_profile_that_adds_up(self):
        result = bench("--quick", "--section", "cpu")
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = table_rows(result.stdout)
        for label in ("cpu per job, worker (us)", "cpu per job, worker, batch=10 (us)"):
            with self.subTest(label):
                self.assert_measured(rows, label, "NORMAL", result.stdout)
        profile = {label: cells for label, cells in rows.items() if label.startswith("profile: ")}
        self.assertIn("profile: SQLite: statements, commits, fetches (us/job)", profile, result.stdout)
        shares = [int(re.match(r"(\d+)%", cells[-1]).group(1)) for cells in profile.values()]
        self.assertTrue(95 <= sum(shares) <= 105, shares)  # whole percentages of one thread's time

    def test_the_wait_section_times_a_real_workers_jobs_against_polling(self):
        result = bench("--quick", "--section", "wait")
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = table_rows(result.stdout)
        for label in ("wait() after the job's commit, p50 (ms)", "wait() after the job's commit, p95 (ms)"):
            with self.subTest(label):
                self.assertIn(label, rows, result.stdout)
                _, durability, ours, baseline, ratio, _ = rows[label]
                self.assertEqual(durability, "FULL")
                # Pushed, not polled: well under the 30 s poll the worker and the waiter run with.
                self.assertLess(float(ours), 5000.0, result.stdout)
                self.assertGreater(float(baseline), 0.0)
                self.assertRegex(ratio, r"^[0-9]+\.[0-9]{2}x$")

    def test_the_gpu_section_compares_the_policies_with_verdicts(self):
        result = bench("--quick", "--only", "gpu")
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = table_rows(result.stdout)
        for label in ("gpu bursty: reloads", "gpu skewed: makespan (s)", "gpu skewed: warm-hit rate (%)"):
            with self.subTest(label):
                self.assertIn(label, rows, result.stdout)
                _, _, ours, fifo, ratio, note = rows[label]
                self.assertRegex(ours, r"^[0-9][0-9,.]*$")
                self.assertRegex(fifo, r"^[0-9][0-9,.]*$")
                self.assertRegex(ratio, r"^[0-9]+\.[0-9]{2}x$")
        self.assertRegex(rows["gpu bursty: reloads"][-1], r"target <= 10% of FIFO's: (met|not met)$")
        self.assertRegex(rows["gpu skewed: rare C's worst wait (s)"][-1], r"= 265 s: (met|not met)$")
        self.assertRegex(rows["gpu bursty: wait B, mean/worst (s)"][2], r"^[0-9]+/[0-9]+$")
        self.assertRegex(rows["claim latency with model affinity, 10k queued (us)"][-1],
                         r"target < 1\.10x: (met|not met)$")
        self.assertIn("  gpu sim     ", result.stdout)  # its legend lines

    def test_the_pgfleet_section_measures_a_small_fleet_and_leaves_no_process(self):
        mark = f"BENCH_FLEET_MARK={secrets.token_hex(8)}"  # inherited by the workers and the server
        result = run_marked(mark, "-m", "tools.bench", "--quick", "--fleet-size", "5", "pgfleet")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(processes_marked(mark), [], "processes outlived the section")
        if "skipped, PostgreSQL unavailable" in result.stdout:
            unavailable(self, "PostgreSQL", result.stdout.split("unavailable: ", 1)[1].splitlines()[0],
                        "ROWFLEET_REQUIRE_PG")
        rows = table_rows(result.stdout)
        number = r"^[0-9][0-9,]*(\.[0-9]+)?$"
        for label in ("pg fleet idle, server CPU, 5 workers (% of a core)", "pg fleet wake of one job, 5 workers, "
                      "p50 (ms)", "pg fleet wake of one job, 5 workers, claims per job",
                      "pg fleet burst of 200, 5 workers (jobs/s)"):
            with self.subTest(label):
                self.assertIn(label, rows, result.stdout)
                _, durability, ours, baseline, _, _ = rows[label]
                self.assertEqual(durability, "pg fsync=off")
                self.assertRegex(ours, number)
                self.assertRegex(baseline, number)
        _, _, ours, baseline, _, _ = rows["pg fleet idle, connections, 5 workers"]
        self.assertEqual((int(ours), int(baseline)), (5 * int(baseline), int(baseline)))
        self.assertEqual(float(rows["pg fleet wake of one job, 5 workers, claims per job"][3]), 1.0)
        self.assertIn("  pg fleet    ", result.stdout)  # its legend lines

    def test_the_postgres_rows_import(self):
        result = run("-c", "import tools.bench.postgres")
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_a_bad_section_is_one_line(self):
        for args in (["--only", "nonsense"], ["--section", "nonsense"], ["nonsense"]):
            with self.subTest(args=args):
                result = bench(*args)
                self.assertEqual(result.returncode, 2)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertIn("nonsense", result.stderr)


class BenchPackageTest(unittest.TestCase):
    def test_the_fleet_sections_baseline_child_runs_the_command_line(self):
        # Its child is source text, which no import checks: it named a module that had moved.
        # Read from the module's source, as the bench is not a package the tests import.
        with open(os.path.join(ROOT, "tools", "bench", "fleet.py"), encoding="utf-8") as handle:
            child = next(ast.literal_eval(node.value) for node in ast.parse(handle.read()).body
                         if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "NO_BELLS")
        result = subprocess.run([sys.executable, "-c", child, "--version"], env=child_env(),
                                capture_output=True, text=True, timeout=DEADLINE)
        self.assertEqual((result.returncode, result.stdout.split()[:1]), (0, ["rowfleet"]), result.stderr)

    def test_sections_import_the_frame_only_and_the_frame_no_section(self):
        sections = package_modules() - FRAME
        self.assertIn("dag", sections)
        self.assertEqual(sibling_imports("harness"), set())
        self.assertEqual(sibling_imports("yardstick"), set())
        for section in sorted(sections):
            with self.subTest(section):
                self.assertLessEqual(sibling_imports(section), {"harness", "yardstick"})
        self.assertLessEqual(sibling_imports("__main__"), sections | {"harness"})

    def test_every_section_module_is_in_the_registry_with_its_legend(self):
        code = ("import json; from tools.bench.__main__ import SECTIONS; "
                "print(json.dumps({name: [s.run.__module__, s.legend] for name, s in SECTIONS.items()}))")
        result = run("-c", code)
        self.assertEqual(result.returncode, 0, result.stderr)
        registry = json.loads(result.stdout)
        table_order = ["enqueue", "batch", "roundtrip", "wake", "claim", "dag", "gpu", "postgres"]
        self.assertEqual([name for name in registry if name in table_order], table_order)
        modules = {module.removeprefix("tools.bench.") for module, _ in registry.values()}
        self.assertEqual(modules, package_modules() - FRAME)
        for name, (_, legend) in registry.items():
            with self.subTest(name):
                self.assertRegex(legend, r"^  \S")  # indented as the legend's frame is


if __name__ == "__main__":
    unittest.main()
