"""The README's quickstart, executed exactly as written, so it cannot rot."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import unittest

from support import DEADLINE, ROOT, TempDirTestCase, child_env


def quickstart_block(marker: str) -> str:
    """The fenced code block that follows ``<!-- quickstart:MARKER -->`` in the README."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        text = handle.read()
    match = re.search(rf"<!-- quickstart:{marker} -->\s*```\w*\n(.*?)```", text, re.S)
    if match is None:
        raise AssertionError(f"README has no quickstart:{marker} block")
    return match.group(1)


class ReadmeQuickstartTest(TempDirTestCase):
    def test_the_first_commands_are_demo_and_test(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
            commands = re.findall(r"^python make\.py \S+", handle.read(), re.M)
        self.assertEqual(commands[:2], ["python make.py demo", "python make.py test"])

    def test_cli_quickstart(self):
        script = ('rowfleet() { "$PYTHON" -m rowfleet "$@"; }\nset -e\n'
                  + quickstart_block("cli")
                  + '\nrowfleet job 1 --json > job.json\n')
        result = subprocess.run(["bash", "-c", script], cwd=self.dir, capture_output=True, text=True,
                                timeout=DEADLINE, env=child_env(PYTHON=sys.executable))
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(self.dir, "job.json")) as handle:
            job = json.load(handle)
        self.assertEqual((job["state"], job["result"]), ("completed", "welcomed user 42"))
        self.assertIn("completed", result.stdout)

    def test_workflow_quickstart(self):
        script = ('rowfleet() { "$PYTHON" -m rowfleet "$@"; }\nset -e\n'
                  + quickstart_block("workflow")
                  + '\nrowfleet runs 1 --json > run.json\n')
        result = subprocess.run(["bash", "-c", script], cwd=self.dir, capture_output=True, text=True,
                                timeout=DEADLINE, env=child_env(PYTHON=sys.executable))
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(self.dir, "run.json")) as handle:
            run = json.load(handle)
        self.assertEqual(run["state"], "completed")
        nodes = {node["id"]: node for node in run["nodes"]}
        self.assertEqual(nodes["summarise"]["result"], [f"LOCAL STORY {n}" for n in range(3)])
        self.assertEqual(nodes["publish"]["result"], "LOCAL STORY 0 | LOCAL STORY 1 | LOCAL STORY 2")
        self.assertIn("completed", result.stdout)

    def test_python_quickstart(self):
        path = self.write_module("quickstart", quickstart_block("python"))
        result = subprocess.run([sys.executable, path], cwd=self.dir, capture_output=True, text=True,
                                timeout=DEADLINE, env=child_env())
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip().splitlines()[-1], "receipt for order 1")


if __name__ == "__main__":
    unittest.main()
