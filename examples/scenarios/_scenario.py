"""The plumbing every operational scenario shares: a fresh folder, the real command line in
child processes, the transcript it prints, waits on conditions, and the recorded ``.out``.

A scenario is a script ``NN_slug.py`` beside this module whose ``main`` hands a function of
one ``Scenario`` to ``run``. Its transcript (stdout) is deterministic, so the recording
``NN_slug.out`` beside it can be compared exactly (``tests/docs/test_scenarios.py``) and shown on
the docs site. The transcript's lines are of three kinds:

* ``$ rowfleet ...`` (or ``$ cat``, ``$ kill``): a command, as a reader would type it in the
  scenario's folder, where the database is the default ``rowfleet.db``;
* ``# ...``: narration, what the scenario has just checked or is about to do;
* anything else: the output of the command above it, or the digest of its ``--json``
  (states, attempts, histories: never times, pids or temp paths).

The module docstring of a scenario is its page: the first line its title, the rest a short
paragraph. Flags of every scenario: ``--pyz PATH`` runs ``python PATH`` (a built
``dist/rowfleet.pyz``) instead of ``python -m rowfleet`` with ``src/`` on the path;
``--write`` also records the transcript into the ``.out``; ``--keep`` leaves the folder
for a post-mortem (its path on stderr). Exit 0 when the scenario held, 1 with one line on
stderr naming what did not.

Stdlib only, and nothing of rowfleet: a scenario must run against a ``.pyz`` too, so its
checks read the command line's ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent.parent
SRC = ROOT / "src"
FAKE_NVIDIA_SMI = ROOT / "tests" / "fixtures" / "bin" / "nvidia-smi"
DEADLINE = 30.0  # seconds one wait may take: generous on a loaded 2-core machine
POLL = 0.05      # seconds between looks at a condition
PLACEHOLDER = "<tmp>"  # the scenario's folder wherever a path would show it
# Children keep their bytecode outside the tree (as the tests' children do), so that a
# scenario's dozens of commands do not each compile rowfleet.
BYTECODE = Path(tempfile.gettempdir()) / f"rowfleet-scenario-bytecode-{os.getuid()}"


class ScenarioFailed(Exception):
    """What the scenario expected did not hold; the message says what was seen."""


class Scenario:
    """One scenario's run: its folder, its children, its transcript."""

    def __init__(self, pyz: str | None) -> None:
        self.pyz = os.path.abspath(pyz) if pyz else None
        self.dir = tempfile.mkdtemp(prefix="rowfleet-scenario-")
        self.transcript: list[str] = []
        self.children: dict[str, subprocess.Popen] = {}

    # --- the transcript --------------------------------------------------------------

    def out(self, text: str = "") -> None:
        """Print lines into the transcript, the folder's path replaced by the placeholder."""
        for line in self.redact(text).rstrip("\n").split("\n"):
            self.transcript.append(line.rstrip())
            print(line.rstrip(), flush=True)

    def note(self, text: str) -> None:
        """A narration line: what was checked, or what comes next."""
        self.out(f"# {text}")

    def redact(self, text: str) -> str:
        for path in {os.path.realpath(self.dir), self.dir}:
            text = text.replace(path, PLACEHOLDER)
        return text

    # --- commands --------------------------------------------------------------------

    def argv(self, args: tuple[str, ...]) -> list[str]:
        program = [self.pyz] if self.pyz else ["-m", "rowfleet"]
        return [sys.executable, *program, *args]

    def env(self, **extra: str) -> dict[str, str]:
        """The children's environment: no ROWFLEET_* of the caller's shell, quiet logs."""
        env = {key: value for key, value in os.environ.items() if not key.startswith("ROWFLEET_")}
        if not self.pyz:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.setdefault("PYTHONPYCACHEPREFIX", str(BYTECODE))
        env["ROWFLEET_LOG_LEVEL"] = "WARNING"
        env.update(extra)
        return env

    def rowfleet(self, *args: str, code: int = 0, show: bool | Callable[[str], str] = True,
                 env: dict[str, str] | None = None) -> str:
        """Print ``$ rowfleet ARGS``, run it, print its output (all of it, what ``show`` makes
        of stdout, or nothing); its stdout. Fails unless it exits ``code``."""
        self.out(f"$ {shlex.join(['rowfleet', *args])}")
        result = self.complete(args, env)
        if callable(show):
            self.out(show(result.stdout))
        elif show and (result.stdout + result.stderr).strip():
            self.out(result.stdout + result.stderr)
        self.check(result.returncode == code, f"`rowfleet {shlex.join(args)}` exited {result.returncode}, "
                                              f"expected {code}: {result.stderr.strip()[-300:]}")
        return result.stdout

    def json(self, *args: str) -> Any:
        """A read command's ``--json``, quietly, for the scenario's own checks."""
        result = self.complete((*args, "--json"), None)
        self.check(result.returncode == 0, f"`rowfleet {shlex.join(args)} --json` exited {result.returncode}: "
                                           f"{result.stderr.strip()[-300:]}")
        return json.loads(result.stdout)

    def complete(self, args: tuple[str, ...], env: dict[str, str] | None) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(self.argv(args), cwd=self.dir, env=env or self.env(), capture_output=True,
                                  text=True, timeout=DEADLINE, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ScenarioFailed(f"`rowfleet {shlex.join(args)}` still running after {DEADLINE:.0f}s") from None

    def spawn(self, label: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``rowfleet ARGS`` in the background, in a process group of its own (a box),
        its output in ``LABEL.log``; printed as the shell's ``... &``."""
        self.check(label not in self.children or self.children[label].poll() is not None,
                   f"{label} is already running")
        self.out(f"$ {shlex.join(['rowfleet', *args])} > {label}.log 2>&1 &")
        with open(os.path.join(self.dir, f"{label}.log"), "w") as log:
            process = subprocess.Popen(self.argv(args), cwd=self.dir, env=env or self.env(), stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.children[label] = process
        return process

    def kill_group(self, label: str, sig: signal.Signals = signal.SIGKILL) -> int:
        """Send ``sig`` to the whole process group of the child ``label`` (its supervisor and
        every worker it forked), printed with a placeholder for the group id; its exit status."""
        process = self.children[label]
        self.out(f"$ kill -{sig.name.removeprefix('SIG')} -- -<{label}>")
        os.killpg(process.pid, sig)
        return self.wait_exit(label)

    def stop(self, label: str) -> int:
        """SIGTERM the child ``label`` (the process, not its group: a supervisor stops its
        own) and wait for it to exit 0."""
        self.out(f"$ kill -TERM <{label}>")
        self.children[label].send_signal(signal.SIGTERM)
        code = self.wait_exit(label)
        self.check(code == 0, f"{label} exited {code} after SIGTERM, expected 0: {self.log(label)[-300:]}")
        return code

    def wait_exit(self, label: str) -> int:
        try:
            return self.children[label].wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            raise ScenarioFailed(f"{label} still running {DEADLINE:.0f}s after it was told to stop") from None

    def log(self, label: str) -> str:
        return Path(self.dir, f"{label}.log").read_text()

    def close(self) -> None:
        for process in self.children.values():
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()

    # --- files -----------------------------------------------------------------------

    def write(self, name: str, text: str, show: bool = True) -> Path:
        """Write a file into the folder, shown as a here-document unless ``show`` is false."""
        if show:
            self.out(f"$ cat > {name} <<'EOF'\n{text.rstrip()}\nEOF")
        path = Path(self.dir, name)
        path.write_text(text)
        return path

    def path(self, name: str) -> Path:
        return Path(self.dir, name)

    # --- checks and waits ------------------------------------------------------------

    def check(self, condition: Any, message: str) -> None:
        if not condition:
            raise ScenarioFailed(message)

    def wait_for(self, condition: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
        """Look at ``condition`` until it is truthy (its value); fail at the deadline."""
        give_up = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() >= give_up:
                raise ScenarioFailed(f"gave up after {timeout:.0f}s waiting for {what}")
            time.sleep(POLL)

    def job(self, job_id: int) -> dict[str, Any]:
        return self.json("job", str(job_id))

    def job_in(self, job_id: int, *states: str) -> dict[str, Any] | None:
        job = self.job(job_id)
        return job if job["state"] in states else None

    def wait_job(self, job_id: int, *states: str) -> dict[str, Any]:
        return self.wait_for(lambda: self.job_in(job_id, *states), f"job {job_id} to be {' or '.join(states)}")

    def show_job(self, job_id: int, *extra: str) -> dict[str, Any]:
        """``rowfleet job ID --json``, digested: state, attempts, result or error, history."""
        self.out(f"$ rowfleet job {job_id} --json")
        job = self.job(job_id)
        self.out(job_digest(job, *extra))
        return job

    def history(self, job_id: int) -> list[str]:
        return [event["kind"] for event in self.job(job_id)["events"]]

    def show_workers(self, *flags: str) -> list[dict[str, Any]]:
        """``rowfleet workers --json``, digested: each worker's host, queue, and what it is
        told (wanted) and does (actual), oldest first; the rows."""
        self.out(f"$ {shlex.join(['rowfleet', 'workers', *flags, '--json'])}")
        rows = sorted(self.json("workers", *flags)["workers"], key=lambda row: row["started_at"])
        for row in rows:
            dead = ", flagged dead" if row["flagged_dead_at"] else ""
            self.out(f"{row['host']} {row['queue']}: wanted {row['desired']}, actual {row['actual']}{dead}")
        return rows

    def holders(self, job: dict[str, Any]) -> list[str]:
        """The hosts that claimed ``job``, attempt by attempt (holders are ``host:pid``)."""
        return [event["detail"]["holder"].rsplit(":", 1)[0] for event in job["events"] if event["kind"] == "claimed"]


def job_digest(job: dict[str, Any], *extra: str) -> str:
    """A job's --json as the lines a reader checks: nothing that changes from run to run."""
    lines = [f"job {job['id']} {job['task']}: {job['state']}, attempt {job['attempts']} of {job['max_attempts']}"]
    if job["state"] == "completed":
        lines.append(f"result: {json.dumps(job['result'])}")
    elif job["error"]:
        lines.append(f"error: {job['error'].splitlines()[0]}")
    lines.extend(f"{key}: {json.dumps(job[key])}" for key in extra)
    history = []
    for event in job["events"]:
        holder = (event.get("detail") or {}).get("holder")
        history.append(f"{event['kind']} ({holder.rsplit(':', 1)[0]})" if holder else event["kind"])
    lines.append("history: " + ", ".join(history))
    return "\n".join(lines)


def timestamp(text: str) -> float:
    """A time as the command line's --json writes it (ISO 8601, UTC), in Unix seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def out_path(script: str) -> Path:
    """The recording beside a scenario script."""
    return Path(script).with_suffix(".out")


def run(script: str, body: Callable[[Scenario], None], argv: list[str] | None = None) -> int:
    """Run one scenario: ``body`` in a fresh folder, its children stopped and the folder
    removed at the end, the transcript recorded with ``--write``; the exit status."""
    parser = argparse.ArgumentParser(description=(sys.modules["__main__"].__doc__ or "").split("\n")[0])
    parser.add_argument("--pyz", metavar="PATH", help="run this rowfleet.pyz instead of python -m rowfleet")
    parser.add_argument("--write", action="store_true", help="record the transcript into the .out beside it")
    parser.add_argument("--keep", action="store_true", help="keep the scenario's folder (its path on stderr)")
    options = parser.parse_args(argv)
    scenario = Scenario(options.pyz)
    scenario.out("$ cd \"$(mktemp -d)\"")
    try:
        body(scenario)
    except ScenarioFailed as failure:
        print(f"scenario {Path(script).stem} FAILED: {failure}", file=sys.stderr)
        return 1
    finally:
        scenario.close()
        if options.keep:
            print(f"kept {scenario.dir}", file=sys.stderr)
        else:
            shutil.rmtree(scenario.dir, ignore_errors=True)
    if options.write:
        out_path(script).write_text("\n".join(scenario.transcript) + "\n")
    return 0
