"""A full disk is weather, not configuration: on SQLite, a process started on a full disk
waits for room (one log line, not one per try) and then serves; a dispatch event whose drain
meets a full disk is retried without counting against its run.

The disk is real: a small tmpfs mounted for the test (root only), filled by a file, then
emptied by deleting it. Where nothing can be mounted the tests skip loudly, and under
``ROWFLEET_REQUIRE_TMPFS=1`` (CI, which runs as root) they fail instead. The classification
of SQLite's result codes and the waiting loop's log lines are tested without a disk.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
import unittest
from unittest import mock

from rowfleet import dag
from rowfleet.claim import Claim
from rowfleet.store import waiting
from rowfleet.errors import (DatabaseBroken, DatabaseBusy, DiskFull, SchemaMissing,
                             StoreUnavailable)
from rowfleet.job import COMPLETED, Outcome
from rowfleet.store import open_store
from rowfleet.store import sqlite as sqlite_store
from rowfleet.store.runs import POISON_AFTER
from support import DEADLINE, TempDirTestCase, wait_until
from contract.test_lifecycle import Clock

REQUIRE_ENV = "ROWFLEET_REQUIRE_TMPFS"
DISK_SIZE = "4m"
WAITING = "waiting for the database"
_skip_announced = False

TASKS = '''
import rowfleet

@rowfleet.task
def add(a, b):
    return a + b
'''


def _skip_loudly(test: unittest.TestCase, reason: str) -> None:
    """Skip ``test``, saying so once on the real stderr (the runner swallows a skipped test's
    own output); under ``ROWFLEET_REQUIRE_TMPFS=1`` fail it instead."""
    global _skip_announced
    if os.environ.get(REQUIRE_ENV) == "1":
        test.fail(f"a tmpfs is required by {REQUIRE_ENV}=1 but cannot be mounted: {reason}")
    if not _skip_announced:
        _skip_announced = True
        print(f"*** full-disk tests SKIPPED: {' '.join(reason.split())} ***", file=sys.__stderr__ or sys.stderr,
              flush=True)
    test.skipTest(reason)


class SmallDisk:
    """A tmpfs of ``DISK_SIZE`` mounted at ``path`` (unmounted at the test's cleanup), which
    ``fill()`` fills with one file and ``make_room()`` empties again."""

    def __init__(self, test: unittest.TestCase, path: str) -> None:
        os.makedirs(path)
        self.path = path
        self.filler = os.path.join(path, "filler")
        try:
            mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", path],
                                     capture_output=True, text=True, timeout=DEADLINE)
        except OSError as exc:
            _skip_loudly(test, f"mount cannot be run: {exc}")
        if mounted.returncode != 0:
            _skip_loudly(test, f"mount -t tmpfs failed (it needs root): {mounted.stderr.strip()}")
        test.addCleanup(self._unmount)

    def _unmount(self) -> None:
        if subprocess.run(["umount", self.path], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", self.path], capture_output=True)  # a straggler holds a file

    def fill(self, leave: int = 0) -> None:
        """Take every free byte of the disk, then give back ``leave`` bytes (whole pages)."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (1 << 20, 1 << 16, 4096, 512, 1):
                block = bytes(size)
                try:
                    while os.write(fd, block):
                        pass
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
            if leave:
                os.ftruncate(fd, os.fstat(fd).st_size - leave)
        finally:
            os.close(fd)

    def make_room(self) -> None:
        os.remove(self.filler)


class FullDiskCase(TempDirTestCase):
    """The test's database on its own small disk (``self.disk``)."""

    def setUp(self) -> None:
        super().setUp()
        self.disk = SmallDisk(self, os.path.join(self.dir, "disk"))
        self.db = os.path.join(self.disk.path, "jobs.db")

    def read(self, sql: str, params: tuple = ()) -> list:
        with sqlite3.connect(self.db) as conn:
            return conn.execute(sql, params).fetchall()


def _waiting_lines(text: str) -> dict[str, int]:
    """How many "waiting for the database" lines each process (by pid) logged."""
    counts: dict[str, int] = {}
    for pid in re.findall(r"\[(\d+)\] " + WAITING, text):
        counts[pid] = counts.get(pid, 0) + 1
    return counts


class StartedOnAFullDiskTest(FullDiskCase):
    def test_orchestrator_and_supervised_worker_wait_for_room_then_serve(self):
        self.write_module("fulldisk_tasks", TASKS)
        self.cli("init")
        job_id = int(self.cli("enqueue", "fulldisk_tasks:add", "--app", "fulldisk_tasks",
                              "--args", '{"a": 2, "b": 3}').stdout)
        self.assertFalse(os.path.exists(self.db + "-shm"), "every connection closed: the next opens it afresh")
        self.disk.fill()
        quick = ("--poll", "0.05", "--heartbeat", "0.5", "--log-level", "INFO")
        orchestrator = self.launch_logged("orchestrator", "orchestrator", *quick, "--interval", "0.2")
        worker = self.launch_logged("worker", "worker", "--procs", "1", "--app", "fulldisk_tasks", *quick)
        # The orchestrator, and the supervised worker and the host's sampler, each say it once.
        wait_until(lambda: orchestrator.poll() is not None or worker.poll() is not None or (
            _waiting_lines(self.output(orchestrator)) and len(_waiting_lines(self.output(worker))) >= 2),
            message="each process to say it waits")
        # Each tries again every poll (0.05 s): held full for 1.5 s, that is some thirty tries.
        held_until = time.monotonic() + 1.5
        wait_until(lambda: orchestrator.poll() is not None or worker.poll() is not None
                   or time.monotonic() >= held_until, message="the disk held full")
        for process in (orchestrator, worker):
            self.assertIsNone(process.poll(), f"{process.args[4:]} exited {process.returncode} on a full disk:\n"
                                              f"{self.output(process)}")
        for process, expected in ((orchestrator, 1), (worker, 2)):
            lines = _waiting_lines(self.output(process))
            self.assertEqual((len(lines), set(lines.values())), (expected, {1}),
                             f"one line per process, not one per try:\n{self.output(process)}")
            self.assertIn("the disk holding the database is full", self.output(process))

        self.disk.make_room()
        wait_until(lambda: self.read("SELECT state, result FROM jobs WHERE id = ?", (job_id,))
                   == [(COMPLETED, "5")], message="the enqueued job to complete once there is room")
        wait_until(lambda: self.read("SELECT count(*) FROM orchestrators WHERE stopped_at IS NULL") == [(1,)],
                   message="the orchestrator's first sweep")
        self.assertIn("the database is ready after", self.output(orchestrator))
        self.stop_all(worker, orchestrator)
        for process in (orchestrator, worker):
            self.assertNotIn("Traceback", self.output(process))
            self.assertNotIn("exited 2", self.output(process))

    def test_init_on_a_full_disk_is_one_clear_line(self):
        self.disk.fill()
        result = self.cli("init", check=False)
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
        self.assertIn("the disk holding the database is full", result.stderr)
        self.assertNotIn("Traceback", result.stdout + result.stderr)
        self.disk.make_room()
        self.cli("init")  # room made, the same command succeeds
        self.assertEqual(self.read("SELECT count(*) FROM jobs"), [(0,)])


# A run whose second step's job carries the first's result: writing it takes far more room
# than the few pages a failed drain's bookkeeping does.
FLOW = dag.parse_workflow({"name": "fulldisk", "nodes": [
    {"id": "a", "task": "fulldisk.a"},
    {"id": "b", "task": "fulldisk.b", "depends_on": ["a"], "args": {"x": {"$from": "a"}}}]})
BIG = "x" * (512 * 1024)
ROOM_LEFT = 64 * 1024  # a failed drain's row fits; the next step's job does not


class DispatchOnAFullDiskTest(FullDiskCase):
    def test_a_full_disk_counts_against_no_event_and_the_run_completes_once_there_is_room(self):
        clock = Clock()
        store = open_store(self.config(interval=30.0, poll=0.05), create=True, clock=clock)
        self.addCleanup(store.close)
        store.migrate()
        run_id = store.start_run(FLOW, None, "")
        first = store.claim(Claim("", "default", "test:1", 60.0))
        store.finish(first, Outcome(COMPLETED, result=BIG))  # writes the dispatch event
        with sqlite3.connect(self.db) as conn:  # the WAL emptied: its pages are no room to reuse
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.disk.fill(leave=ROOM_LEFT)

        met = []
        for _ in range(POISON_AFTER + 3):
            clock.advance(10 ** 7)  # past any backoff a counted failure would have set
            try:
                store.drain("")
            except StoreUnavailable as exc:
                met.append(exc)
        [event] = store.reads.dispatch_events(run_id)
        self.assertEqual((event["attempts"], event["poisoned_at"]), (0, None),
                         f"a full disk counted against the event: {event['last_error']}")
        self.assertNotIn(store.get_run(run_id, "").state, dag.RUN_TERMINAL)
        self.assertEqual([type(exc) for exc in met], [DiskFull] * (POISON_AFTER + 3), "each drain met a full disk")

        self.disk.make_room()
        self.assertEqual(store.drain(""), {"applied": 1, "failed": 0})
        second = store.claim(Claim("", "default", "test:1", 60.0))
        self.assertEqual((second.node_id, second.args), ("b", {"x": BIG}))
        store.finish(second, Outcome(COMPLETED, result=1))
        store.drain("")
        self.assertEqual(store.get_run(run_id, "").state, dag.COMPLETED)


class ResultCodeTest(unittest.TestCase):
    """What each SQLite result code is taken for: a full disk is waited out, never broken."""

    def test_table(self):
        cases = [  # (extended) result code, the driver's words -> the error raised
            (13, "database or disk is full", DiskFull),
            (10 | (19 << 8), "disk I/O error", DiskFull),  # SQLITE_IOERR_SHMSIZE: the -shm cannot grow
            (10, "disk I/O error", StoreUnavailable),
            (10 | (3 << 8), "disk I/O error", StoreUnavailable),  # SQLITE_IOERR_WRITE
            (5, "database is locked", DatabaseBusy),
            (1, "no such table: jobs", SchemaMissing),
            (11, "database disk image is malformed", DatabaseBroken),
            (8, "attempt to write a readonly database", DatabaseBroken),
            (26, "file is not a database", DatabaseBroken),
        ]
        for code, text, expected in cases:
            with self.subTest(code=code):
                exc = sqlite3.OperationalError(text)
                exc.sqlite_errorcode = code
                error = sqlite_store.translate(exc, " committing")
                self.assertIs(type(error), expected)
                self.assertEqual(sqlite_store.no_room(code), expected is DiskFull)

    def test_a_full_disk_is_transient(self):
        self.assertTrue(issubclass(DiskFull, StoreUnavailable))
        self.assertFalse(issubclass(DiskFull, DatabaseBroken))
        self.assertIn(DiskFull, waiting.TRANSIENT)


class WaitLinesTest(unittest.TestCase):
    """``open_when_ready`` says it waits once, then once per ``remind_every``, not per try."""

    def test_one_line_then_one_per_interval(self):
        log = logging.getLogger("rowfleet.test.fulldisk")
        now = [0.0]
        tries = [DiskFull("no room")] * 8 + [None]  # one try each 25 s: 200 s of waiting

        def connect():
            now[0] += 25.0
            failure = tries.pop(0)
            if failure is not None:
                raise failure
            return mock.Mock()

        with self.assertLogs(log, "INFO") as logged:
            store = waiting.open_when_ready(connect, threading.Event(), 0, log, remind_every=60.0,
                                            clock=lambda: now[0])
        self.assertIsNotNone(store)
        self.assertEqual([line.split(":", 2)[2] for line in logged.output], [
            "waiting for the database: no room",                       # at 25 s
            "still waiting for the database after 75s: no room",       # at 100 s
            "still waiting for the database after 150s: no room",      # at 175 s
            "the database is ready after 200s of waiting"])


if __name__ == "__main__":
    unittest.main()
