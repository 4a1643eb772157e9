"""The zipapp as a user gets it: built, copied to another folder, run with no install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest

from rowfleet import queries
from support import DEADLINE, ROOT, TempDirTestCase


def clean_env() -> dict[str, str]:
    """No PYTHONPATH, no ROWFLEET_*: the archive must stand on its own."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("ROWFLEET_")}


class ZipappTest(TempDirTestCase):
    def setUp(self):
        super().setUp()
        self.pyz = os.path.join(self.dir, "rowfleet.pyz")
        built = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build_pyz.py"), "--output", self.pyz],
                               capture_output=True, text=True, timeout=DEADLINE, env=clean_env())
        self.assertEqual(built.returncode, 0, built.stdout + built.stderr)
        self.elsewhere = os.path.join(self.dir, "elsewhere")
        os.mkdir(self.elsewhere)

    def run_pyz(self, *args: str) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, self.pyz, "--db", "edge.db", "--log-level", "WARNING", *args],
                                cwd=self.elsewhere, capture_output=True, text=True, timeout=DEADLINE,
                                env=clean_env())
        self.assertEqual(result.returncode, 0, result.stderr)
        return result

    def test_runs_a_job_from_another_folder(self):
        with open(os.path.join(self.elsewhere, "edge_tasks.py"), "w") as handle:
            handle.write("def double(n):\n    return 2 * n\n")
        self.assertIn("usage", self.run_pyz("--help").stdout)
        latest = str(queries.latest_version("sqlite"))
        self.assertEqual(self.run_pyz("init").stdout.strip(), latest)  # migrations read from inside the zip
        job_id = self.run_pyz("enqueue", "edge_tasks:double", "--args", "[21]").stdout.strip()
        self.run_pyz("worker", "--burst")
        job = json.loads(self.run_pyz("job", job_id, "--json").stdout)
        self.assertEqual((job["state"], job["result"]), ("completed", 42))

    def test_is_importable(self):
        code = ("import sys; sys.path.insert(0, sys.argv[1]);"
                "import rowfleet; rowfleet.configure(db='lib.db'); print(rowfleet.init(), rowfleet.__file__)")
        result = subprocess.run([sys.executable, "-c", code, self.pyz], cwd=self.elsewhere, capture_output=True,
                                text=True, timeout=DEADLINE, env=clean_env())
        self.assertEqual(result.returncode, 0, result.stderr)
        version, location = result.stdout.split()
        self.assertEqual(version, str(queries.latest_version("sqlite")))
        self.assertIn("rowfleet.pyz", location)


if __name__ == "__main__":
    unittest.main()
