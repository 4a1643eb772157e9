"""The demo as a smoke test: ``examples/demo.py`` runs end to end and shows each step's result.

The demo is run once, as a user runs it: from an unrelated folder, with no PYTHONPATH (it
must find ``src/`` itself) and with a ``ROWFLEET_*`` setting that would break every
command if the demo let it through. Slow (real processes, a lease that must lapse).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import unittest

from support import ROOT

SLOW = True

DEMO = os.path.join(ROOT, "examples", "demo.py")
TIMEOUT = 180.0  # the demo takes ~10 s; its own waits give up after 30 s each

# What each step must show: a line of its narration or of the real command output.
KEY_RESULTS = (
    (1, "$ rowfleet --db demo.db enqueue send_email --args '{\"subject\": \"security alert\"}' "
        "--priority 10 --run-next"),
    (1, "$ rowfleet --db demo.db jobs"),
    (2, "=> run order 4 (run-next), 3 (priority -5), 1 (priority 0), 2 (priority 10)"),
    (2, '=> job 4 result: {"sent": "security alert"}'),
    (3, "=> failed after 3 attempts (claimed, retried, claimed, retried, claimed, failed)"),
    (3, "card declined for order 7"),
    (3, "job 5 re-queued"),
    (3, '=> revived job 5 completed on attempt 4: {"charged": 7}'),
    (4, "=> same key, same job: both enqueues returned job 6"),
    (5, '"reclaimed": 1'),
    (5, "=> reclaimed, then completed on attempt 2 (claimed, reclaimed, claimed, completed)"),
    (6, "rowfleet: no job 8"),
    (6, "=> rolled back: no order row and no job 8"),
    (6, "=> committed: the order row and job 8 both exist"),
    (7, "$ rowfleet --db demo.db status"),
    (7, "=> all 8 jobs completed; the worker killed in step 5"),
)


class DemoTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["ROWFLEET_LEASE"] = "1"  # shorter than the default renew: a ConfigError if it leaks in
        with tempfile.TemporaryDirectory(prefix="rowfleet-demo-cwd-") as elsewhere:
            cls.result = subprocess.run([sys.executable, DEMO], cwd=elsewhere, env=env,
                                        capture_output=True, text=True, timeout=TIMEOUT)
        cls.out = cls.result.stdout

    def steps(self) -> dict[int, str]:
        """The narration split at its numbered headings: {step number: its text}."""
        parts = re.split(r"^(\d+)\. ", self.out, flags=re.M)
        return {int(number): text for number, text in zip(parts[1::2], parts[2::2])}

    def test_exits_zero_and_says_every_step_held(self):
        self.assertEqual(self.result.returncode, 0, f"{self.out}\n{self.result.stderr}")
        self.assertEqual(self.result.stderr, "")
        self.assertIn("every step held", self.out.strip().splitlines()[-1])

    def test_steps_are_numbered_one_to_seven_in_order(self):
        numbers = [int(n) for n in re.findall(r"^(\d+)\. ", self.out, flags=re.M)]
        self.assertEqual(numbers, list(range(1, 8)), self.out)

    def test_each_step_shows_its_key_result(self):
        steps = self.steps()
        for number, expected in KEY_RESULTS:
            with self.subTest(step=number, expected=expected):
                self.assertIn(expected, steps.get(number, ""), self.out)

    def test_the_temporary_folder_is_removed(self):
        match = re.search(r"demo in (\S+) \(removed at the end\)", self.out)
        self.assertIsNotNone(match, self.out)
        self.assertTrue(os.path.basename(match.group(1)).startswith("rowfleet-demo-"), match.group(1))
        self.assertFalse(os.path.exists(match.group(1)))


if __name__ == "__main__":
    unittest.main()
