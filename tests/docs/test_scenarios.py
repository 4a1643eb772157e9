"""The operational scenarios of examples/scenarios/: each script runs, holds, and prints
exactly its recorded transcript (``NN_slug.out``), which the docs site shows.

One test per scenario, generated from the scripts found, so a new scenario is tested
without an edit here. A drift fails with a diff and the command that re-records it.
"""

from __future__ import annotations

import difflib
import subprocess
import sys
import unittest
from pathlib import Path

from support import ROOT, child_env

SCENARIOS = Path(ROOT) / "examples" / "scenarios"
TIMEOUT = 120.0  # one scenario's whole run, on a loaded 2-core machine


def scripts() -> list[Path]:
    return sorted(path for path in SCENARIOS.glob("[0-9][0-9]_*.py"))


class ScenarioTest(unittest.TestCase):
    """Each scenario exits 0 and prints its recording, line for line."""

    SLOW = True

    def check_scenario(self, script: Path) -> None:
        recorded = script.with_suffix(".out")
        self.assertTrue(recorded.exists(), f"{recorded.name} is missing: record it with "
                                           f"`python {script.relative_to(ROOT)} --write`")
        result = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=child_env(), capture_output=True,
                                text=True, timeout=TIMEOUT)
        self.assertEqual(result.returncode, 0, f"{script.name} exited {result.returncode}:\n{result.stderr}")
        expected = recorded.read_text()
        if result.stdout != expected:
            diff = "".join(difflib.unified_diff(expected.splitlines(True), result.stdout.splitlines(True),
                                                f"{recorded.name} (recorded)", f"{script.name} (this run)"))
            self.fail(f"{script.name} printed something else than {recorded.name}:\n{diff}\n"
                      f"if the change is intended, re-record with `python {script.relative_to(ROOT)} --write`")

    def test_every_scenario_has_a_title_and_a_paragraph(self):
        for script in scripts():
            with self.subTest(script.name):
                source = script.read_text()
                self.assertTrue(source.startswith('"""'), f"{script.name} opens without a docstring")
                title, blank, *paragraph = source[3:source.index('"""', 3)].split("\n")
                self.assertTrue(title.strip() and not blank.strip() and "".join(paragraph).strip(),
                                f"{script.name}: its docstring is not a title, a blank line and a paragraph")


def _add_tests() -> None:
    for script in scripts():
        name = "test_" + script.stem.split("_", 1)[1] + "_" + script.stem.split("_", 1)[0]

        def test(self, script=script):
            self.check_scenario(script)
        test.__doc__ = f"examples/scenarios/{script.name} holds and prints {script.with_suffix('.out').name}"
        setattr(ScenarioTest, name, test)


_add_tests()

if __name__ == "__main__":
    unittest.main()
