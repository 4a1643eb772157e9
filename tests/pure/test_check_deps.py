"""Tests for tools/check_deps.py: planted trees with known violations, and the real repository.

Owns nothing but these tests; imports the checker by file path (tools/ is not a package)
and nothing from rowfleet.
"""

import ast
import contextlib
import importlib.util
import io
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def _load_checker():
    spec = importlib.util.spec_from_file_location("check_deps", REPO_ROOT / "tools" / "check_deps.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


check_deps = _load_checker()

# A tree with one planted violation per rule; the line numbers below are where they sit.
PLANTED = {
    "src/rowfleet/__init__.py": "__version__ = '0'\n",
    "src/rowfleet/worker/loop.py": """\
        import os
        from . import store
        import requests

        def run():
            import psycopg
            return psycopg
        """,
    "src/rowfleet/store/__init__.py": "",
    "src/rowfleet/store/postgres.py": """\
        import psycopg

        class PostgresStore:
            import psycopg_pool

            def connect(self):
                import psycopg
                from psycopg_pool import ConnectionPool
                return psycopg, ConnectionPool
        """,
    "src/rowfleet/plugin.py": """\
        import importlib
        from importlib import import_module as load

        def find(name):
            importlib.import_module(name)
            load("rowfleet.store")
            return importlib.import_module("requests")
        """,
    "src/rowfleet/numeric.py": """\
        def mean(xs):
            return __import__("numpy").mean(xs)
        """,
    "tests/test_config.py": """\
        import unittest
        from yaml import safe_load
        import helpers as support
        """,
    "tests/helpers.py": "import json\n",
    "tests/test_postgres_store.py": """\
        import psycopg_pool

        def connect():
            import psycopg
        """,
    "tools/broken.py": """\
        def f(:
            pass
        """,
    "examples/demo.py": "import greeting\n",
    "examples/greeting.py": "",
}

EXPECTED = {
    ("src/rowfleet/worker/loop.py", 3),          # import requests
    ("src/rowfleet/worker/loop.py", 6),          # psycopg outside the Postgres backend
    ("src/rowfleet/store/postgres.py", 1),  # psycopg at module level
    ("src/rowfleet/store/postgres.py", 4),  # psycopg_pool in a class body still runs at import
    ("src/rowfleet/plugin.py", 7),          # importlib.import_module("requests")
    ("src/rowfleet/numeric.py", 2),         # __import__("numpy")
    ("src/rowfleet/plugin.py", 1),          # a module in no layer
    ("src/rowfleet/numeric.py", 1),         # a module in no layer
    ("tests/test_config.py", 2),            # from yaml import ...
    ("tests/test_postgres_store.py", 1),    # psycopg_pool at module level, even in a pg test
    ("tools/broken.py", 1),                 # syntax error
}


def plant(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def run_main(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = check_deps.main(argv)
    return code, out.getvalue()


class PlantedTreeTests(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.root = Path(tmp.name)
        plant(self.root, PLANTED)
        self.report = check_deps.check(self.root)
        self.found = {(v.path, v.line): v.reason for v in self.report.violations()}

    def test_catches_exactly_the_planted_violations(self):
        self.assertEqual(set(self.found), EXPECTED)

    def test_third_party_reasons_name_the_module(self):
        self.assertIn("'requests'", self.found[("src/rowfleet/worker/loop.py", 3)])
        self.assertIn("'yaml'", self.found[("tests/test_config.py", 2)])
        self.assertIn("'requests'", self.found[("src/rowfleet/plugin.py", 7)])
        self.assertIn("'numpy'", self.found[("src/rowfleet/numeric.py", 2)])

    def test_psycopg_reasons_say_where_and_when(self):
        self.assertIn("allowed only in", self.found[("src/rowfleet/worker/loop.py", 6)])
        self.assertIn("inside the function", self.found[("src/rowfleet/store/postgres.py", 1)])

    def test_syntax_error_is_reported_with_its_line(self):
        self.assertIn("syntax error", self.found[("tools/broken.py", 1)])

    def test_lazy_psycopg_in_the_backend_and_pg_tests_is_allowed(self):
        self.assertNotIn(("src/rowfleet/store/postgres.py", 7), self.found)
        self.assertNotIn(("src/rowfleet/store/postgres.py", 8), self.found)
        self.assertNotIn(("tests/test_postgres_store.py", 4), self.found)

    def test_module_verdicts(self):
        verdicts = {name: use.verdict for name, use in self.report.modules.items()}
        self.assertEqual(verdicts["os"], "stdlib")
        self.assertEqual(verdicts["rowfleet"], "first-party")
        self.assertEqual(verdicts["helpers"], "first-party")
        self.assertEqual(verdicts["greeting"], "first-party")
        self.assertEqual(verdicts["psycopg"], "VIOLATION")
        self.assertEqual(verdicts["requests"], "VIOLATION")

    def test_main_fails_and_lists_each_violation(self):
        code, out = run_main([str(self.root)])
        self.assertEqual(code, 1)
        self.assertEqual(out.splitlines()[-1], f"check-deps: FAILED ({len(EXPECTED)} violations)")
        for path, line in EXPECTED:
            self.assertIn(f"{path}:{line}:", out)


class CleanTreeTests(unittest.TestCase):
    def test_clean_tree_passes(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            plant(root, {
                "make.py": "import subprocess\n",
                "src/rowfleet/__init__.py": "from .config import Config\n",
                "src/rowfleet/config.py": "import os\n",
                "src/rowfleet/store/postgres.py": "def connect():\n    import psycopg\n",
                "tests/test_x.py": "import unittest\nimport rowfleet\n",
                "tools/bench/postgres.py": "def main():\n    import psycopg\n",
                "src/rowfleet/__pycache__/junk.py": "import requests\n",
                "tools/build/x.py": "import requests\n",
                "examples/dist/x.py": "import requests\n",
            })
            code, out = run_main([str(root)])
        self.assertEqual(code, 0, out)
        self.assertEqual(out.splitlines()[-1], "check-deps: OK (6 files, 5 modules)")

    def test_missing_root_is_a_usage_error(self):
        code, out = run_main(["/nonexistent/rowfleet-root"])
        self.assertEqual(code, 2)
        self.assertIn("not a directory", out)


class ImportCycleTests(unittest.TestCase):
    """Modules under src/ whose load-time imports form a cycle fail the check; an import
    inside a function body (run when called) or of a package on the way does not count."""

    TREE = {
        "src/rowfleet/__init__.py": "from rowfleet.api import enqueue\n",
        "src/rowfleet/api.py": "import os\nfrom rowfleet.worker import loop\n",
        "src/rowfleet/worker/loop.py": "from . import watchdog\n",
        "src/rowfleet/worker/watchdog.py": "from rowfleet.tasks import timeout_of\n",
        "src/rowfleet/tasks.py": "import rowfleet\n\ndef enqueue():\n    from rowfleet import api\n",
    }

    def check(self, files: dict[str, str]):
        with tempfile.TemporaryDirectory() as tmp:
            plant(Path(tmp), files)
            return check_deps.check(Path(tmp)).cycles

    def test_a_load_time_cycle_is_one_violation_naming_the_path(self):
        cyclic = {**self.TREE, "src/rowfleet/tasks.py": "import rowfleet.api\n"}
        found = self.check(cyclic)
        self.assertEqual([(v.path, v.line) for v in found], [("src/rowfleet/api.py", 2)])
        self.assertIn("rowfleet.api -> rowfleet.worker.loop -> rowfleet.worker.watchdog -> rowfleet.tasks -> rowfleet.api",
                      found[0].reason)

    def test_a_function_level_import_and_the_package_on_the_way_are_no_cycle(self):
        self.assertEqual(self.check(self.TREE), [])

    def test_cycle_paths(self):
        cases = [
            ({"a": {"b": 1}, "b": {"a": 2}}, [["a", "b", "a"]]),
            ({"a": {"b": 1, "c": 1}, "b": {"c": 1}, "c": {"a": 1}}, [["a", "c", "a"]]),  # the shortest
            ({"a": {"b": 1}, "b": {"a": 1}, "x": {"y": 1}, "y": {"x": 1}}, [["a", "b", "a"], ["x", "y", "x"]]),
            ({"a": {"b": 1}, "b": {"c": 1}, "c": {}}, []),
        ]
        for graph, expected in cases:
            with self.subTest(graph=graph):
                self.assertEqual(check_deps.import_cycles(graph), expected)


class LayerTests(unittest.TestCase):
    """An import up the layers fails the check, at load time or inside a function; so does a
    module that no layer claims. Imports down or within a layer pass."""

    def violations(self, files: dict[str, str]):
        with tempfile.TemporaryDirectory() as tmp:
            plant(Path(tmp), files)
            return check_deps.check(Path(tmp)).violations()

    def test_imports_down_and_within_a_layer_pass(self):
        self.assertEqual(self.violations({
            "src/rowfleet/__init__.py": "from rowfleet.api import enqueue\n",
            "src/rowfleet/api.py": "from rowfleet import names\nfrom rowfleet.worker import loop\n",
            "src/rowfleet/worker/loop.py": "from rowfleet import tasks\nfrom rowfleet.store import open_store\n",
            "src/rowfleet/tasks.py": "from rowfleet import names\n",
            "src/rowfleet/store/__init__.py": "def open_store():\n    from rowfleet.store import sqlite\n",
            "src/rowfleet/store/sqlite.py": "from rowfleet import job\n",
            "src/rowfleet/job.py": "from rowfleet import names\n",
            "src/rowfleet/names.py": "import re\n",
        }), [])

    def test_a_lazy_import_up_the_layers_is_a_violation(self):
        found = self.violations({
            "src/rowfleet/__init__.py": "",
            "src/rowfleet/api.py": "from rowfleet import tasks\n",
            "src/rowfleet/tasks.py": "def enqueue():\n    from rowfleet import api\n",
        })
        self.assertEqual([(v.path, v.line) for v in found], [("src/rowfleet/tasks.py", 2)])
        self.assertIn("rowfleet.tasks (rules) imports rowfleet.api (surface)", found[0].reason)

    def test_a_pure_module_importing_the_store_is_a_violation(self):
        found = self.violations({"src/rowfleet/__init__.py": "", "src/rowfleet/job.py": "import rowfleet.store\n",
                                 "src/rowfleet/store/__init__.py": ""})
        self.assertEqual(len(found), 1)
        self.assertIn("rowfleet.job (rules) imports rowfleet.store (storage)", found[0].reason)

    def test_a_module_in_no_layer_is_a_violation(self):
        found = self.violations({"src/rowfleet/__init__.py": "", "src/rowfleet/gadget.py": "import os\n"})
        self.assertEqual([v.path for v in found], ["src/rowfleet/gadget.py"])
        self.assertIn("in no layer", found[0].reason)


class ImportsOfTests(unittest.TestCase):
    def test_table(self):
        cases = [
            ("import os.path", [(1, "os.path", True, 0)]),
            ("from . import x", [(1, "", True, 1)]),
            ("from ..store import y", [(1, "store", True, 2)]),
            ("if True:\n    import json", [(2, "json", True, 0)]),
            ("class C:\n    import json", [(2, "json", True, 0)]),
            ("def f():\n    import json", [(2, "json", False, 0)]),
            ("async def f():\n    import json", [(2, "json", False, 0)]),
            ("f = lambda: __import__('json')", [(1, "json", False, 0)]),
            ("def f(x=__import__('json')):\n    pass", [(1, "json", True, 0)]),
            ("import importlib\nimportlib.import_module('a.b')", [(1, "importlib", True, 0), (2, "a.b", True, 0)]),
            ("import importlib as il\nil.import_module('.x', 'pkg')", [(1, "importlib", True, 0), (2, "x", True, 1)]),
            ("importlib.import_module(name)", []),
            ("import_module('requests')", []),  # not bound to importlib's function here
        ]
        for source, expected in cases:
            with self.subTest(source=source):
                got = [(i.line, i.name, i.top_level, i.level) for i in check_deps.imports_of(ast.parse(source))]
                self.assertEqual(got, expected)

    def test_local_module_names(self):
        paths = [
            "make.py",
            "src/rowfleet/store/postgres.py",
            "tests/helpers.py",
            "tests/support/fake_store.py",
            "tools/bench/harness.py",
            "examples/greeting.py",
        ]
        # Modules inside src/rowfleet are only importable by dotted name, so a
        # src/rowfleet/store/yaml.py must never excuse a bare `import yaml`.
        self.assertEqual(
            check_deps.local_module_names(paths),
            {"make", "rowfleet", "helpers", "support", "fake_store", "bench", "harness", "greeting"},
        )

    def test_pg_file_names(self):
        cases = [
            ("tests/test_postgres_store.py", True),
            ("tests/pg_harness.py", True),
            ("tools/bench/postgres.py", True),
            ("tests/process/test_pgbouncer.py", False),
            ("src/rowfleet/pg_tools.py", False),
            ("examples/pg_demo.py", False),
        ]
        for path, expected in cases:
            with self.subTest(path=path):
                self.assertEqual(check_deps.is_pg_file(path), expected)


class RealRepositoryTests(unittest.TestCase):
    def test_repository_is_stdlib_only(self):
        code, out = run_main([str(REPO_ROOT)])
        self.assertEqual(code, 0, out)
        self.assertTrue(out.splitlines()[-1].startswith("check-deps: OK"), out)


if __name__ == "__main__":
    unittest.main()
