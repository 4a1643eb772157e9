"""The wheel as ``pip install`` gets it: every file of ``src/rowfleet`` inside, and the panel
of a fresh virtual environment serving its static files.

Built offline with the build backend already installed (``pip wheel --no-build-isolation``,
else ``setuptools.build_meta`` called directly) from a copy of the checkout, so the build
leaves no ``build/`` or ``*.egg-info`` behind. The expected files come from walking the tree,
never from a list, so a file that moves between subfolders is still checked. Skipped loudly
without pip, venv or the build backend; required under ``ROWFLEET_REQUIRE_WHEEL=1``.
"""

from __future__ import annotations

import fnmatch
import glob
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import unittest
import urllib.error
import urllib.request
import zipfile

from rowfleet.panel import server
from support import DEADLINE, ROOT, SRC, TempDirTestCase, read_fixture, unavailable, wait_until

REQUIRE_ENV = "ROWFLEET_REQUIRE_WHEEL"  # "1": a missing builder or venv fails the tests
PACKAGE = os.path.join(SRC, "rowfleet")
IGNORED = ("__pycache__", "*.egg-info")  # made by running or building, never shipped
BUILD_SECONDS = 180  # a cold setuptools on a loaded 2-core machine; a build here takes ~3 s
# setuptools before 70.1 makes wheels through the separate ``wheel`` distribution.
SETUPTOOLS_OWN_BDIST_WHEEL = (70, 1)


def clean_env() -> dict[str, str]:
    """No PYTHONPATH, no ROWFLEET_*: only the installed wheel may answer ``import rowfleet``."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("ROWFLEET_")}


def tree_files() -> set[str]:
    """Every file under ``src/rowfleet`` (``/``-separated, from ``src``), caches left out."""
    found = set()
    for folder, subfolders, files in os.walk(PACKAGE):
        subfolders[:] = [name for name in subfolders if not any(fnmatch.fnmatch(name, p) for p in IGNORED)]
        found.update(os.path.relpath(os.path.join(folder, name), SRC).replace(os.sep, "/") for name in files)
    return found


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def missing_builder() -> str | None:
    """Why a wheel cannot be built and installed offline here, or None when it can."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        requires = tomllib.load(file)["build-system"]["requires"]
    needed = {re.match(r"[A-Za-z0-9_.-]+", spec).group(0): spec for spec in requires}
    for module in ("venv", "ensurepip"):
        if importlib.util.find_spec(module) is None:
            return f"the {module} module is missing (Debian: apt-get install python3-venv)"
    try:
        setuptools_version = _version(importlib.metadata.version("setuptools"))
    except importlib.metadata.PackageNotFoundError:
        setuptools_version = ()
    if setuptools_version and setuptools_version < SETUPTOOLS_OWN_BDIST_WHEEL:
        needed.setdefault("wheel", "wheel (setuptools < 70.1 builds wheels through it)")
    for name, spec in needed.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return f"the build needs {spec}, which is not installed"
        least = re.search(r">=\s*([\d.]+)", spec)
        if least and _version(installed) < _version(least.group(1)):
            return f"the build needs {spec}; {installed} is installed"
    return None


def build_wheel(workdir: str) -> tuple[str | None, str]:
    """Build a wheel from a copy of the checkout in ``workdir``: (its path or None, the output)."""
    copy = os.path.join(workdir, "checkout")
    shutil.copytree(SRC, os.path.join(copy, "src"), ignore=shutil.ignore_patterns(*IGNORED))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), copy)
    out = os.path.join(workdir, "dist")
    if importlib.util.find_spec("pip") is not None:
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                   "-w", out, "."]
    else:
        command = [sys.executable, "-c", "import sys, setuptools.build_meta as backend; "
                                         "backend.build_wheel(sys.argv[1])", out]
    done = subprocess.run(command, cwd=copy, capture_output=True, text=True, timeout=BUILD_SECONDS,
                          env=clean_env())
    wheels = glob.glob(os.path.join(out, "rowfleet-*.whl"))
    return (wheels[0] if done.returncode == 0 and len(wheels) == 1 else None), done.stdout + done.stderr


class WheelTest(TempDirTestCase):
    SLOW = True  # builds a wheel and a virtual environment: the full suite and CI

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.reason = missing_builder()
        if cls.reason is None:  # built once for the class: the tests only read it
            cls.build_dir = tempfile.mkdtemp(prefix="rowfleet-wheel-test-")
            cls.addClassCleanup(shutil.rmtree, cls.build_dir, ignore_errors=True)
            cls.wheel, cls.build_output = build_wheel(cls.build_dir)

    def setUp(self):
        super().setUp()
        if self.reason is not None:
            unavailable(self, "wheel", self.reason, REQUIRE_ENV)
        self.assertIsNotNone(self.wheel, f"the wheel did not build:\n{self.build_output}")

    def test_every_file_of_the_package_is_in_the_wheel(self):
        expected = tree_files()
        self.assertTrue(any(not name.endswith(".py") for name in expected), "no data file found in the tree")
        with zipfile.ZipFile(self.wheel) as archive:
            shipped = set(archive.namelist())
        missing = sorted(expected - shipped)
        self.assertEqual(missing, [], f"{len(missing)} files of src/rowfleet are not in the wheel: data "
                                      f"{[n for n in missing if not n.endswith('.py')]}, code "
                                      f"{[n for n in missing if n.endswith('.py')]}")

    def test_the_installed_panel_serves_its_static_files(self):
        venv = os.path.join(self.dir, "venv")
        bin_dir = os.path.join(venv, "bin")
        self.run_ok([sys.executable, "-m", "venv", venv])
        self.run_ok([os.path.join(bin_dir, "python"), "-m", "pip", "install", "--no-index", "--no-deps",
                     "--disable-pip-version-check", "--quiet", self.wheel])
        where = self.run_ok([os.path.join(bin_dir, "python"), "-c", "import rowfleet; print(rowfleet.__file__)"])
        self.assertTrue(where.strip().startswith(venv + os.sep), f"rowfleet imported from {where.strip()}")

        rowfleet = os.path.join(bin_dir, "rowfleet")
        self.run_ok([rowfleet, "--db", self.db, "init"])  # the migrations, read from the wheel
        url = self.start_panel(rowfleet)
        self.assertEqual(self.fetch(url + "jobs")[0], 200)  # the SQL fragments, read from the wheel
        for path, (name, _type) in server.STATIC.items():
            with self.subTest(path=path):
                status, body = self.fetch(url + path.lstrip("/"))
                self.assertEqual(status, 200)
                self.assertTrue(body, f"{path}: an empty body")
                self.assertEqual(body, server.asset(name), f"{path}: not the file of the checkout")

    def run_ok(self, command: list[str]) -> str:
        """Run ``command`` from the test's folder (not the checkout); its stdout, or fail."""
        done = subprocess.run(command, cwd=self.dir, capture_output=True, text=True, timeout=BUILD_SECONDS,
                              env=clean_env())
        self.assertEqual(done.returncode, 0, f"{command}:\n{done.stdout}{done.stderr}")
        return done.stdout

    def start_panel(self, rowfleet: str) -> str:
        """Start the installed ``rowfleet panel`` on any free port until the test ends; its URL."""
        log_path = os.path.join(self.dir, "panel.log")
        with open(log_path, "w") as log:
            panel = subprocess.Popen([rowfleet, "--db", self.db, "panel", "--port", "0"], cwd=self.dir,
                                     stdout=log, stderr=subprocess.STDOUT, env=clean_env())
        self.addCleanup(panel.wait, timeout=DEADLINE)
        self.addCleanup(panel.terminate)

        def announced() -> str | None:
            if panel.poll() is not None:
                raise AssertionError(f"the panel exited {panel.returncode}:\n{read_fixture(log_path)}")
            lines = [line for line in read_fixture(log_path).splitlines() if line.startswith("panel at ")]
            return lines[0].removeprefix("panel at ").strip() if lines else None
        return wait_until(announced, message="the panel's 'panel at URL' line")

    @staticmethod
    def fetch(url: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(url, timeout=DEADLINE) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()


if __name__ == "__main__":
    unittest.main()
