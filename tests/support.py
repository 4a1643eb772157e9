"""Shared test helpers: temp databases, real CLI subprocesses, waiting on conditions.

Tests never sleep and hope: they wait for a condition with a deadline (``wait_until``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock
from typing import Any, Callable, NoReturn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")

# Generous on a loaded 2-core machine; a passing run waits only as long as it must.
DEADLINE = 30.0


def wait_until(condition: Callable[[], Any], timeout: float = DEADLINE, interval: float = 0.02,
               message: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy; fail the test at the deadline."""
    give_up = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= give_up:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {message}")
        time.sleep(interval)


# Children keep their bytecode here, outside the source tree: a suite that starts the
# command line hundreds of times would otherwise compile every module each time (where
# PYTHONDONTWRITEBYTECODE is set) or litter src/ with __pycache__.
BYTECODE_CACHE = os.path.join(tempfile.gettempdir(), f"rowfleet-test-bytecode-{os.getuid()}")


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child process: our src first on PYTHONPATH, quiet logs,
    bytecode cached outside the tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH", "")) if p)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", BYTECODE_CACHE)
    env.setdefault("ROWFLEET_LOG_LEVEL", "WARNING")
    for key in list(env):
        if key.startswith("ROWFLEET_") and key not in ("ROWFLEET_LOG_LEVEL",) and key not in extra:
            del env[key]  # the caller's shell settings must not leak into a test
    env.update(extra)
    return env


def fake_gpu_env(**extra: str) -> dict[str, str]:
    """``child_env`` with the fake ``nvidia-smi`` of tests/fixtures/bin first on PATH: the
    machine it plays is ``FAKE_NVIDIA_SMI`` or ``FAKE_NVIDIA_SMI_FILE`` in ``extra``."""
    path = os.pathsep.join([os.path.join(ROOT, "tests", "fixtures", "bin"), os.environ.get("PATH", "")])
    return child_env(PATH=path, **extra)


_skips_announced: set[str] = set()


def require_tool(test: unittest.TestCase, name: str, env_var: str) -> str:
    """The path of the command ``name``, or skip ``test`` loudly when it is not installed
    (one ``*** ... SKIPPED ***`` line on the real stderr per tool, which the runner does
    not swallow); under ``env_var=1`` its absence fails the test instead."""
    found = shutil.which(name)
    if found is not None:
        return found
    unavailable(test, name, f"{name} is not installed (not found on PATH)", env_var)


def unavailable(test: unittest.TestCase, name: str, reason: str, env_var: str) -> NoReturn:
    """Skip ``test`` loudly because ``name`` (a tool, a module) is missing for ``reason``:
    one ``*** ... SKIPPED ***`` line on the real stderr per name; under ``env_var=1`` fail it."""
    if os.environ.get(env_var) == "1":
        test.fail(f"{name} required by {env_var}=1 but unavailable: {reason}")
    if name not in _skips_announced:
        _skips_announced.add(name)
        print(f"*** {name} tests SKIPPED: {reason} ***", file=sys.__stderr__ or sys.stderr, flush=True)
    test.skipTest(reason)


def serve_in_background(test: unittest.TestCase, server: Any) -> Any:
    """Run an ``http.server`` server on a thread until ``test`` ends (then shut down, joined
    and closed); the server."""
    import threading

    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="test-server")
    thread.start()

    def stop() -> None:
        server.shutdown()
        thread.join()
        server.server_close()
    test.addCleanup(stop)
    return server


def read_fixture(*parts: str) -> str:
    """A fixture file's text (UTF-8), by its path parts."""
    with open(os.path.join(*parts), encoding="utf-8") as file:
        return file.read()


# The failing machines of the fake nvidia-smi (tests/fixtures/bin) and the kind of unknown
# each must read as (the rowfleet.telemetry.gpu names).
NVIDIA_SMI_FAILURES = (("error", "NO_DRIVER"), ("mismatch", "VERSION_MISMATCH"), ("no-devices", "NO_DEVICES"),
                       ("gpu-lost", "GPU_LOST"))


class TempDirTestCase(unittest.TestCase):
    """A fresh folder per test (``self.dir``) with a database path (``self.db``) in it."""

    def setUp(self) -> None:
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="rowfleet-test-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.db = os.path.join(self.dir, "jobs.db")

    def patch_environ(self, **env: str) -> None:
        """Set these environment variables (a fake nvidia-smi's, say) until the test ends."""
        patched = mock.patch.dict(os.environ, env)
        patched.start()
        self.addCleanup(patched.stop)

    def config(self, **settings: Any):
        from rowfleet.config import Config

        return Config(db=self.db, **settings)

    def open_store(self, create: bool = True, migrate: bool = True, clock: Any = None, **settings: Any):
        """A store on this test's database (closed at cleanup), migrated unless told not to;
        ``clock`` (a test clock) stands in for the store's own."""
        from rowfleet.store import open_store

        store = open_store(self.config(**settings), create=create, **({} if clock is None else {"clock": clock}))
        self.addCleanup(store.close)
        if migrate:
            store.migrate()
        return store

    def write_module(self, name: str, source: str) -> str:
        path = os.path.join(self.dir, f"{name}.py")
        with open(path, "w") as handle:
            handle.write(source)
        return path

    def cli(self, *args: str, check: bool = True, cwd: str | None = None, timeout: float = DEADLINE,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run ``python -m rowfleet --db self.db ARGS`` in ``self.dir``; text output."""
        result = subprocess.run([sys.executable, "-m", "rowfleet", "--db", self.db, *args],
                                cwd=cwd or self.dir, env=env or child_env(), capture_output=True,
                                text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"rowfleet {' '.join(args)} exited {result.returncode}:\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def cli_json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "--json").stdout)

    def spawn(self, *args: str, cwd: str | None = None, env: dict[str, str] | None = None
              ) -> subprocess.Popen:
        """Start ``python -m rowfleet --db self.db ARGS`` in the background; killed at cleanup."""
        process = subprocess.Popen([sys.executable, "-m", "rowfleet", "--db", self.db, *args],
                                   cwd=cwd or self.dir, env=env or child_env(),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(_reap, process)
        return process


    def launch_logged(self, label: str, *args: str, db: str | None = None,
                      env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``python -m rowfleet --db DB ARGS`` in its own process group, its output in a
        log file (``process.log_path``, read with ``output``). At cleanup the whole group is
        killed, so a supervisor's children go too."""
        self._launched = getattr(self, "_launched", 0) + 1
        log_path = os.path.join(self.dir, f"process-{self._launched}-{label}.log")
        with open(log_path, "w") as log:
            process = subprocess.Popen([sys.executable, "-m", "rowfleet", "--db", db or self.db, *args],
                                       cwd=self.dir, env=env or child_env(), stdin=subprocess.DEVNULL,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        process.log_path = log_path
        self.addCleanup(kill_group, process)
        return process

    def output(self, process: subprocess.Popen) -> str:
        with open(process.log_path) as log:
            return log.read()

    def stop_all(self, *processes: subprocess.Popen) -> None:
        """SIGTERM each process started by ``launch_logged``; each must exit 0 in time."""
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                self.fail(f"{process.args[4:]} still running {DEADLINE:.0f}s after SIGTERM:\n{self.output(process)}")
            self.assertEqual(process.returncode, 0, f"{process.args[4:]} exited {process.returncode}:\n"
                                                    f"{self.output(process)}")

    def marker(self, name: str) -> str | None:
        """The text of the file ``name`` in the test's folder (a handler's marker), or None."""
        try:
            with open(os.path.join(self.dir, name)) as handle:
                return handle.read()
        except FileNotFoundError:
            return None


class LibraryOnEmptyDatabase:
    """A contract's frame for the library API: ``rowfleet`` configured on the subclass's
    ``empty_database()`` and initialised, and a store of its own on the same database."""

    def setUp(self) -> None:
        super().setUp()
        import rowfleet
        from rowfleet.config import Config
        from rowfleet.store import open_store

        self.db = self.empty_database()
        rowfleet.configure(db=self.db)
        self.addCleanup(rowfleet.configure)
        rowfleet.init()
        self.store = open_store(Config(db=self.db))
        self.addCleanup(self.store.close)

    def row(self, job_id: int):
        return self.store.get_job(job_id, "")


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2:].split()


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not reaped, does not)."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL a process started by ``launch_logged`` and its group (stopped ones too), and reap it."""
    if process.poll() is None:  # not reaped, so its pid (the group id) is still ours
        try:
            os.killpg(process.pid, signal.SIGCONT)  # a stopped process dies of SIGKILL anyway; this is plainer
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(DEADLINE)


def _reap(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.communicate(timeout=DEADLINE)
