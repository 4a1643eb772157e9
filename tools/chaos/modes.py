"""The storm's modes: faults ``kill -9`` cannot make, each staged on real parts and undone.

Owns what each flag adds to a storm: where its database lives, what its processes' clocks
and network are, the ``Episode`` it stages mid-storm, and its teardown (always run, in
reverse). ``--disk-full``: the SQLite file on a small tmpfs filled by a ballast file, then
freed. ``--clock-step S``: every fleet process under libfaketime with an offset file read at
each call, stepped by S seconds. ``--failover [stop|vanish]``: a primary and a synchronous
streaming standby (``tests/pg_standby.py``), the fleet on the multi-host URL, the primary
stopped (``-m immediate``) or made to vanish (iptables), the standby promoted.
``--partition``: a second worker box in a network namespace (``tests/netns.py``), cut off
silently (iptables DROP) for three leases, then healed; its server is one of our own that
listens on the veth's address too.

A mode that cannot run here raises ``Skip`` with the reason (not root, a tool missing);
the command line says it in one line and exits 3. The servers and the namespace come from
the test suite's harnesses, so there is one way to stage each fault in this repository.
Imports nothing from rowfleet.
"""

from __future__ import annotations

import argparse
import errno
import glob
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Callable

from .storm import Episode, Fleet, Timing, child_pids, holds_a_job

TESTS = Path(__file__).resolve().parent.parent.parent / "tests"
DISK = "disk"
DISK_SIZE_MIB = 64
FAKETIME_LIBRARIES = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
                      "/usr/local/lib/faketime/libfaketime.so.1")
# libfaketime 0.9.10 misreads an absolute sleep on the real monotonic clock (Python's
# time.sleep: EINVAL); a relative select() timeout passes through untouched.
SITECUSTOMIZE = '''\
import select
import time


def _sleep(seconds):
    select.select([], [], [], max(0.0, seconds))


time.sleep = _sleep
'''
BOX_HOST = "chaos-box"
BOX_QUEUE = "chaos-box"
BOX_PROCS = 2
CUT_AT = 0.25  # of the storm's length
HOLD_WAIT = 10.0  # seconds the cut waits for the box to be running the held job
COMMAND_TIMEOUT = 60


class Skip(Exception):
    """This mode cannot run here; the message says why and what would let it."""


def _tests_on_path() -> None:
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))


def _root(what: str) -> None:
    if os.geteuid() != 0:
        raise Skip(f"{what} needs root (this is uid {os.geteuid()})")


class Mode:
    """What a mode adds to a storm; the base adds nothing."""

    name = ""

    def database(self, folder: Path) -> str | None:
        """The database the fleet uses, where the mode decides it (else None)."""
        return None

    def reader(self, db: str) -> str:
        """The URL or path the tool reads the evidence from, now."""
        return db

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        return env

    def seed_args(self, timing: Timing) -> list[str]:
        """What the mode adds to ``seed.py``'s command line (a held job: queue, first ms)."""
        return []

    def started(self, fleet: Fleet, seeded: dict) -> None:
        """The fleet is up (``seeded``: what seed.json says): start what else the mode runs."""

    def episodes(self, fleet: Fleet, timing: Timing) -> list[Episode]:
        return []

    def stopped(self, folder: Path) -> None:
        """The fleet is stopped; keep what the judge reads before ``close``."""

    def close(self) -> None:
        """Undo everything, whatever state the storm left; safe to call twice."""


# --- a full disk ---------------------------------------------------------------------------


class DiskFull(Mode):
    """The SQLite file on a tmpfs of its own, filled a third into the storm for a third of it."""

    name = "disk-full"

    def __init__(self, folder: Path) -> None:
        _root("--disk-full (mount -t tmpfs)")
        self.path = folder / DISK
        self.path.mkdir(parents=True, exist_ok=True)
        self.ballast = self.path / "ballast"
        self.mounted = False
        try:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE_MIB}m", "tmpfs", str(self.path)],
                                  capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
        except OSError as exc:
            raise Skip(f"--disk-full: mount cannot run: {exc}") from None
        if done.returncode != 0:
            raise Skip(f"--disk-full: mount -t tmpfs failed: {done.stderr.strip()}")
        self.mounted = True

    def database(self, folder: Path) -> str:
        return str(self.path / "jobs.db")

    def episodes(self, fleet: Fleet, timing: Timing) -> list[Episode]:
        third = timing.seconds / 3
        return [Episode("disk-full", third, self.fill, self.make_room, hold=third, undo_kind="disk-freed")]

    def fill(self) -> str:
        """Take every free byte of the disk with one file."""
        written = 0
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (1 << 20, 1 << 16, 4096, 512, 1):
                block = bytes(size)
                try:
                    while True:
                        written += os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
        finally:
            os.close(fd)
        free = shutil.disk_usage(self.path).free
        return f"ballast of {written / 2**20:.1f} MiB filled the {DISK_SIZE_MIB} MiB disk ({free} bytes free)"

    def make_room(self) -> str:
        if self.ballast.exists():
            self.ballast.unlink()
        return f"ballast removed ({shutil.disk_usage(self.path).free / 2**20:.1f} MiB free)"

    def stopped(self, folder: Path) -> None:
        """Copy the database off the tmpfs (WAL folded in), so the judge and ``--recheck``
        read it after the disk is gone."""
        self.make_room()
        source = sqlite3.connect(self.path / "jobs.db")
        target = sqlite3.connect(folder / "jobs.db")
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()

    def close(self) -> None:
        if self.mounted:
            self.mounted = False
            if subprocess.run(["umount", str(self.path)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(self.path)], capture_output=True)  # a straggler holds a file


# --- a step of the clock -------------------------------------------------------------------


class ClockStep(Mode):
    """Every fleet process under libfaketime; the offset file stepped at half time."""

    name = "clock-step"

    def __init__(self, folder: Path, seconds: int) -> None:
        if shutil.which("faketime") is None:
            raise Skip("--clock-step needs libfaketime (Debian's faketime: apt-get install faketime)")
        found = [path for pattern in FAKETIME_LIBRARIES for path in sorted(glob.glob(pattern))]
        if not found:
            raise Skip(f"--clock-step: faketime is installed but libfaketime.so.1 is in none of "
                       f"{', '.join(FAKETIME_LIBRARIES)}")
        self.library, self.seconds = found[0], seconds
        self.offset_file = folder / "clock-offset"
        self.shim = folder / "faketime-shim"
        self.shim.mkdir(parents=True, exist_ok=True)
        (self.shim / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self._offset("+0")
        self.env: dict[str, str] = {}

    def _offset(self, text: str) -> None:
        """Every process's clock moves at once: libfaketime rereads the file at each call."""
        temporary = self.offset_file.with_suffix(".tmp")
        temporary.write_text(text + "\n")
        os.replace(temporary, self.offset_file)

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        self.env = {**env, "LD_PRELOAD": self.library, "FAKETIME_TIMESTAMP_FILE": str(self.offset_file),
                    "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1", "PYTHONPATH": str(self.shim)}
        offset = self.child_offset()
        if abs(offset) > 2.0:
            raise Skip(f"--clock-step: a child under libfaketime reads {offset:+.1f}s with offset +0")
        return self.env

    def child_offset(self) -> float:
        """How far a fresh child's clock is from ours, in seconds (it must also be able to sleep)."""
        probe = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.01); print(time.time())"],
                               env=self.env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
        if probe.returncode != 0:
            raise Skip(f"--clock-step: a child under libfaketime failed: {probe.stderr.strip()[-300:]}")
        return float(probe.stdout) - time.time()

    def episodes(self, fleet: Fleet, timing: Timing) -> list[Episode]:
        return [Episode("clock-step", timing.seconds / 2, self.step)]

    def step(self) -> str:
        self._offset(f"{self.seconds:+d}s")
        return f"every fleet process's clock stepped {self.seconds:+d}s (a new child reads {self.child_offset():+.1f}s)"


# --- PostgreSQL: failover and partition ----------------------------------------------------


class Failover(Mode):
    """A primary and a synchronous standby; the fleet on both; the primary gone at half time."""

    name = "failover"

    def __init__(self, how: str) -> None:
        _tests_on_path()
        import pg_harness
        import pg_standby

        if how == "vanish" and (reason := pg_standby.iptables_unavailable()) is not None:
            raise Skip(f"--failover vanish: {reason}")
        self.how = how
        try:
            self.pair = pg_standby.StandbyPair(synchronous=True)
        except pg_harness.Unavailable as exc:
            raise Skip(f"--failover: cannot start a primary and a standby: {exc}") from None
        self.url = self.pair.create_database("chaos")
        self.dbname = pg_harness.database_of(self.url)
        self.promoted = False

    def database(self, folder: Path) -> str:
        return self.url

    def reader(self, db: str) -> str:
        # After the failover the tool reads the promoted server directly: a vanished primary
        # first in the list would cost each of its reads a connect timeout.
        return self.pair.standby_url(self.dbname) if self.promoted else db

    def episodes(self, fleet: Fleet, timing: Timing) -> list[Episode]:
        return [Episode("failover", timing.seconds / 2, self.fail_over)]

    def fail_over(self) -> str:
        started = time.monotonic()
        if self.how == "vanish":
            self.pair.vanish_primary()
        else:
            self.pair.stop_primary("immediate")
        self.pair.promote()
        self.promoted = True
        gone = "vanished (iptables DROP)" if self.how == "vanish" else "stopped (pg_ctl stop -m immediate)"
        return f"primary {gone}, synchronous standby promoted in {time.monotonic() - started:.1f}s"

    def close(self) -> None:
        self.pair.stop()


class Partition(Mode):
    """A second worker box in a network namespace, cut off silently for three leases."""

    name = "partition"

    def __init__(self) -> None:
        _tests_on_path()
        import netns
        import pg_harness

        if (reason := netns.missing()) is not None:
            raise Skip(f"--partition: {reason}")
        self.namespace = netns.NetNamespace()
        self.folder = tempfile.mkdtemp(prefix="rowfleet-chaos-hba-", dir="/tmp")
        self.server = None
        try:
            os.chmod(self.folder, 0o755)  # the server runs as another user when we are root
            hba = os.path.join(self.folder, "pg_hba.conf")
            with open(hba, "w") as handle:
                handle.write("local all all trust\nhost all all 127.0.0.1/32 trust\n"
                             f"host all all {self.namespace.subnet} trust\n")
            os.chmod(hba, 0o644)
            settings = tuple(s for s in pg_harness.SERVER_SETTINGS if not s.startswith("listen_addresses="))
            settings += (f"listen_addresses=127.0.0.1,{self.namespace.root_address}", f"hba_file={hba}")
            self.server = pg_harness.start_local(settings)
            self.url = self.server.create_database("chaos")
        except pg_harness.Unavailable as exc:
            self.close()
            raise Skip(f"--partition: cannot start a PostgreSQL server: {exc}") from None
        except BaseException:
            self.close()
            raise
        self.box = None
        self.records = Path()
        self.hold = 0

    def database(self, folder: Path) -> str:
        return self.url

    def inner_url(self) -> str:
        """The URL as the box inside the namespace reaches the server: at the veth's address."""
        parts = urllib.parse.urlsplit(self.url)
        return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username}@{self.namespace.root_address}:{parts.port}"))

    def seed_args(self, timing: Timing) -> list[str]:
        # Held on the box's own queue, first in line, long enough to span the cut and a lease
        # (the box's child is stopped before then: exit 81); short when it runs again.
        first = timing.seconds * CUT_AT + 3 * timing.lease + 10.0
        return [BOX_QUEUE, str(first * 1000.0)]

    def started(self, fleet: Fleet, seeded: dict) -> None:
        self.records = fleet.folder / "records"
        self.hold = seeded["hold"]
        self.box = fleet.start_workers(BOX_PROCS, label="box", db=self.inner_url(),
                                       prefix=("ip", "netns", "exec", self.namespace.name),
                                       host=("--host", BOX_HOST, "--queue", BOX_QUEUE, "--queue", "default"))  # its own first
        fleet.others.append(self.box)

    def episodes(self, fleet: Fleet, timing: Timing) -> list[Episode]:
        self.timing = timing
        return [Episode("partition", timing.seconds * CUT_AT, self.cut, self.heal, hold=3 * timing.lease,
                        undo_kind="heal")]

    def cut(self) -> str:
        """Cut the box off once one of its children runs the held job (a few seconds at most)."""
        give_up = time.monotonic() + HOLD_WAIT
        while time.monotonic() < give_up and not (holder := self._holder()):
            time.sleep(0.02)
        self.namespace.cut(silent=True)
        held = f"its child {holder} running job {self.hold}" if holder else f"job {self.hold} not started on it"
        return (f"box {BOX_HOST} ({BOX_PROCS} children; {held}) cut off silently (iptables DROP both ways) "
                f"for {3 * self.timing.lease:.1f}s, lease {self.timing.lease:.1f}s")

    def _holder(self) -> int | None:
        """The box child inside the held job's handler now, if any."""
        mark = f'"job": {self.hold}, '.encode()
        for pid in child_pids(self.box.pid):
            try:
                lines = (self.records / f"{pid}.jsonl").read_bytes().splitlines()
            except OSError:
                continue
            if lines and mark in lines[-1] and holds_a_job(self.records, pid):
                return pid
        return None

    def heal(self) -> str:
        self.namespace.heal()
        return "link healed"

    def close(self) -> None:
        self.namespace.close()
        if self.server is not None:
            self.server.stop()
            self.server = None
        shutil.rmtree(self.folder, ignore_errors=True)


def build(args: argparse.Namespace, folder: Path) -> list[Mode]:
    """The modes the command line asked for, each set up (or ``Skip``), in order."""
    made: list[Mode] = []
    factories: list[Callable[[], Mode]] = []
    if args.disk_full:
        factories.append(lambda: DiskFull(folder))
    if args.clock_step is not None:
        factories.append(lambda: ClockStep(folder, args.clock_step))
    if args.failover:
        factories.append(lambda: Failover(args.failover))
    if args.partition:
        factories.append(Partition)
    try:
        for factory in factories:
            made.append(factory())
    except BaseException:
        for mode in reversed(made):
            mode.close()
        raise
    return made
