"""The examples as smoke tests: ``examples/demo.py`` runs end to end and shows each step's
result, and the commands of ``examples/pipeline/README.md`` work exactly as written.

The demo is run once, as a user runs it: from an unrelated folder, with no PYTHONPATH (it
must find ``src/`` itself) and with a ``ROWFLEET_*`` setting that would break every
command if the demo let it through. Slow (real processes, leases that must lapse).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

from support import DEADLINE, ROOT, TempDirTestCase, child_env

DEMO = os.path.join(ROOT, "examples", "demo.py")
TIMEOUT = 180.0  # the demo takes ~10-15 s; its own waits give up after 30 s each
PIPELINE_README = os.path.join(ROOT, "examples", "pipeline", "README.md")

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
    (5, "=> reclaimed, then completed on its second claim, still attempt 1: a lost lease is no fault of the "
        "job's (claimed, reclaimed, claimed, completed)"),
    (6, "rowfleet: no job 8"),
    (6, "=> rolled back: no order row and no job 8"),
    (6, "=> committed: the order row and job 8 both exist"),
    (7, "$ rowfleet --db demo.db run digest.json --app demo_tasks --args "
        "'{\"feeds\": \"feeds\", \"out\": \"digest.md\"}'"),
    (7, "=> started: fetch is queued; summarise and publish wait for the nodes they depend on"),
    (7, "but summarise stays pending: moving a run on is the orchestrator's job"),
    (7, "exited 137 in the middle of publish"),
    (7, "missed its heartbeats; flagged"),
    (7, "reclaimed"),
    (7, "=> fetch and the 5 summaries keep their results; publish is queued again"),
    (7, "run 1 digest: completed"),
    (7, "publish    completed  "),
    (7, "- [A kettle that listens](https://lab.example/kettle) (22 words): "
        "Does water sound different just before it boils?"),
    (7, "=> run 1 completed: publish ran twice (the first died with its worker), "
        "and digest.md lists all 5 articles"),
    (8, "publish    skipped    0"),
    (8, "=> run 2 completed with no summaries and publish skipped: nothing was written"),
    (8, "=> the orchestrator stopped cleanly (exit 0)"),
    (9, "$ rowfleet --db demo.db control --queue mail --off --by demo"),
    (9, "=> parked: pid "),
    (9, "=> switched on: the same pid "),
    (10, "$ rowfleet --db demo.db status"),
    (10, "=> all 17 jobs completed; the workers that died in step 5"),
    (11, "$ rowfleet --db demo.db panel --port 0 > panel.log 2>&1 &"),
    (11, "=> the panel answers at http://127.0.0.1:"),
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

    def test_no_step_prints_a_warning(self):
        # A newcomer running the demo meets no warning it cannot act on (each enqueue names
        # the module that registers its task).
        self.assertNotIn("warning", self.out, self.out)

    def test_steps_are_numbered_one_to_eleven_in_order(self):
        numbers = [int(n) for n in re.findall(r"^(\d+)\. ", self.out, flags=re.M)]
        self.assertEqual(numbers, list(range(1, 12)), self.out)

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


def readme_block(marker: str) -> str:
    """The fenced code block after ``<!-- pipeline:MARKER -->`` in the pipeline's README."""
    with open(PIPELINE_README, encoding="utf-8") as handle:
        match = re.search(rf"<!-- pipeline:{marker} -->\s*```\w*\n(.*?)```", handle.read(), re.S)
    if match is None:
        raise AssertionError(f"{PIPELINE_README} has no pipeline:{marker} block")
    return match.group(1)


class PipelineReadmeTest(TempDirTestCase):
    """The pipeline README's step-by-step commands, run exactly as written from the root."""

    def test_the_steps_complete_a_run_and_skip_publishing_on_no_feeds(self):
        script = ('rowfleet() { "$PYTHON" -m rowfleet "$@"; }\nset -e\n'
                  + readme_block("steps") + readme_block("empty")
                  + 'rowfleet runs 1 --json > "$TMPDIR/run1.json"\n'
                  + 'rowfleet runs 2 --json > "$TMPDIR/run2.json"\n'
                  + 'test ! -e empty.md\n')
        result = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                                timeout=DEADLINE * 2, env=child_env(PYTHON=sys.executable, TMPDIR=self.dir))
        self.assertEqual(result.returncode, 0, result.stderr)
        runs = []
        for name in ("run1.json", "run2.json"):
            with open(os.path.join(self.dir, name)) as handle:
                runs.append(json.load(handle))
        first, empty = ({node["id"]: node for node in run["nodes"]} for run in runs)
        self.assertEqual(runs[0]["state"], "completed", runs[0])
        self.assertEqual({n: first[n]["state"] for n in first},
                         {"fetch": "completed", "summarise": "completed", "publish": "completed"})
        self.assertEqual(len(first["summarise"]["result"]), 5)
        self.assertEqual(first["publish"]["result"]["articles"], 5)
        with open(first["publish"]["result"]["path"], encoding="utf-8") as handle:
            digest = handle.read()
        self.assertIn("## Lab Notes", digest)
        self.assertEqual(digest.count("\n- ["), 5, digest)
        self.assertIn(digest.strip(), result.stdout)  # the block's `cat digest.md`
        self.assertEqual(runs[1]["state"], "completed", runs[1])
        self.assertEqual((empty["summarise"]["state"], empty["summarise"]["result"]), ("completed", []))
        self.assertEqual(empty["publish"]["state"], "skipped")


if __name__ == "__main__":
    unittest.main()
