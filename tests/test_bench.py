"""The benchmark still runs: its numbers are never asserted, but a bench that no longer
starts (a renamed import, a moved query) must fail the suite, not the next release."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unittest

from support import DEADLINE, ROOT, child_env

BENCH = os.path.join(ROOT, "tools", "bench.py")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=child_env(), capture_output=True,
                          text=True, timeout=DEADLINE * 4)


class BenchSmokeTest(unittest.TestCase):
    def test_a_quick_section_prints_its_table(self):
        result = run(BENCH, "--quick", "--only", "batch")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.stdout.startswith("benchmark"), result.stdout)
        self.assertIn("batch enqueue", result.stdout)

    def test_the_dag_section_prints_its_rows_with_numbers(self):
        result = run(BENCH, "--quick", "--only", "dag")
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = {line.split("  ")[0]: re.split(r"\s{2,}", line) for line in result.stdout.splitlines()}
        for label in ("dag fan-out, 2 workers (nodes/s)", "dag map, 2 workers (nodes/s)"):
            with self.subTest(label):
                self.assertIn(label, rows, result.stdout)
                _, durability, ours, baseline, ratio, note = rows[label]
                self.assertEqual(durability, "FULL")
                self.assertRegex(ours, r"^[0-9][0-9,]*$")
                self.assertRegex(baseline, r"^[0-9][0-9,]*$")
                self.assertRegex(ratio, r"^[0-9]+\.[0-9]{2}x$")
                self.assertIn("N=100", note)
                self.assertRegex(note, r"orchestrator CPU us/node [0-9][0-9,]*")
        self.assertIn("pg dag fan-out", result.stdout)  # not run with --quick, but named

    def test_the_postgres_rows_import(self):
        code = f"import sys; sys.path.insert(0, {os.path.join(ROOT, 'tools')!r}); import bench_pg"
        result = run("-c", code)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_a_bad_section_is_one_line(self):
        result = run(BENCH, "--only", "nonsense")
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)


if __name__ == "__main__":
    unittest.main()
