"""The zipapp as a user gets it: built, copied to another folder, run with no install."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile
import zipimport

from rowfleet.sql import queries
from support import DEADLINE, ROOT, TempDirTestCase


def clean_env() -> dict[str, str]:
    """No PYTHONPATH, no ROWFLEET_*: the archive must stand on its own."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("ROWFLEET_")}


class ZipappTest(TempDirTestCase):
    SLOW = True  # builds the .pyz and runs it: the full suite and CI

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # Built once for the class: every test only reads it (one writes a copy of its own).
        cls.build_dir = tempfile.mkdtemp(prefix="rowfleet-pyz-test-")
        cls.addClassCleanup(shutil.rmtree, cls.build_dir, ignore_errors=True)
        cls.built_pyz = os.path.join(cls.build_dir, "rowfleet.pyz")
        cls.built = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build_pyz.py"),
                                    "--output", cls.built_pyz],
                                   capture_output=True, text=True, timeout=DEADLINE, env=clean_env())

    def setUp(self):
        super().setUp()
        self.assertEqual(self.built.returncode, 0, self.built.stdout + self.built.stderr)
        self.pyz = self.built_pyz
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
        job_id = self.run_pyz("enqueue", "edge_tasks:double", "--app", "edge_tasks", "--args", "[21]").stdout.strip()
        self.run_pyz("worker", "--burst", "--app", "edge_tasks")
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

    def test_imports_its_bytecode(self):
        with zipfile.ZipFile(self.pyz) as archive:
            names = set(archive.namelist())
        sources = {name for name in names if name.startswith("rowfleet/") and name.endswith(".py")}
        self.assertGreater(len(sources), 30)
        self.assertEqual({name for name in sources if name[:-3] + ".pyc" not in names}, set(),
                         "modules without bytecode in the archive")
        found = zipimport.zipimporter(os.path.join(self.pyz, "rowfleet") + os.sep).get_filename("rowfleet.dag")
        self.assertTrue(found.endswith("dag.pyc"), f"the archive's import of rowfleet.dag read {found}")

    def test_runs_from_source_when_its_bytecode_is_another_pythons(self):
        with zipfile.ZipFile(self.pyz) as archive:
            entries = [(info, archive.read(info)) for info in archive.infolist()]
        foreign = os.path.join(self.dir, "foreign.pyz")
        with open(self.pyz, "rb") as handle:
            shebang = handle.readline()
        with open(foreign, "wb") as handle:
            handle.write(shebang)
        with zipfile.ZipFile(foreign, "a", zipfile.ZIP_DEFLATED) as archive:
            for info, data in entries:  # the magic number of no Python there is
                archive.writestr(info, b"\0\0\r\n" + data[4:] if info.filename.endswith(".pyc") else data)
        self.pyz = foreign
        self.test_runs_a_job_from_another_folder()


if __name__ == "__main__":
    unittest.main()
