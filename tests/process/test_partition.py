"""A real network partition on PostgreSQL: a box cut off from the database mid-job, past its
lease, then back.

Owns the fleet's promise under a partition, checked from what the handlers themselves
wrote: one box (a supervised worker, ``--procs 1``) runs inside a Linux network namespace
(``netns``) and reaches the database over a veth pair; the orchestrator and a second
worker run in this namespace. The box claims a long job, then its link is cut for longer
than the lease, then healed. Whatever the fleet does meanwhile, no job may run twice at
once (each handler appends "start"/"end" lines with its pid and the monotonic clock, and
a run without an "end" lasts until its process dies, which a thread here watches), no job
may be lost or completed twice, and the box must serve again soon after the heal.

The database is a server of this test's own: the shared one listens on 127.0.0.1 only,
and the namespace reaches this one at the veth's address, allowed by an hba file of ours.
Needs root, ``ip`` and ``iptables`` (skipped loudly without them; required in CI by
``ROWFLEET_REQUIRE_NETNS=1``) and PostgreSQL (``ROWFLEET_REQUIRE_PG=1``).
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

import netns
import pg_harness
from rowfleet.job import JobSpec
from support import DEADLINE, TempDirTestCase, child_env, kill_group, process_alive, wait_until

APP = "partitionapp"

# Short settings for every process, so that a cut of CUT seconds outlasts the lease.
LEASE, RENEW, HEARTBEAT = 6.0, 1.0, 1.0
SETTINGS = {"ROWFLEET_LEASE": str(LEASE), "ROWFLEET_RENEW": str(RENEW), "ROWFLEET_HEARTBEAT": str(HEARTBEAT),
            "ROWFLEET_POLL": "0.5", "ROWFLEET_INTERVAL": "0.5", "ROWFLEET_RESTART_DELAY": "0.5",
            "ROWFLEET_RESTART_DELAY_MAX": "2"}
CUT = 25.0         # seconds the link stays cut: four leases
FIRST_RUN = 20.0   # the held job's first run sleeps this long, so the cut lands mid-job
LATER_RUN = 2.0    # any later run of it (on the other box) is short
SERVE_AGAIN = 20.0  # the box must run a job enqueued after the heal within this many seconds
BOX, OTHER = "cutoff", "steady"  # the worker labels (--host) of the box inside and the one here

# Each handler appends "start|end JOB ATTEMPT PID MONOTONIC" to records.log, one write each
# (O_APPEND, fsync), so a run's record survives the hard exit of its process.
APP_SOURCE = '''\
import os
import time

import rowfleet

RECORDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "records.log")


def _record(kind):
    job = rowfleet.current_job()
    line = f"{kind} {job.id} {job.attempts} {os.getpid()} {time.monotonic():.3f}\\n"
    fd = os.open(RECORDS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _ran_before():
    try:
        with open(RECORDS) as handle:
            return any(line.startswith(f"start {rowfleet.current_job().id} ") for line in handle)
    except FileNotFoundError:
        return False


@rowfleet.task(name="long")
def long(first, later):
    """Sleeps ``first`` seconds on its first run, ``later`` on any other."""
    again = _ran_before()
    _record("start")
    time.sleep(later if again else first)
    _record("end")
    return os.getpid()


@rowfleet.task(name="note")
def note():
    _record("start")
    _record("end")
    return os.getpid()
'''

Run = collections.namedtuple("Run", "job attempt pid start end")  # end: None while it may still run


class Deaths:
    """Watches the pid of every run started (from records.log) and notes, on the monotonic
    clock, when each is first seen dead: the end of a run that wrote no "end"."""

    def __init__(self, records: str) -> None:
        self.records = records
        self.died: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="partition-deaths")
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            for pid in {int(fields[3]) for fields in _lines(self.records) if fields[0] == "start"}:
                if pid not in self.died and not process_alive(pid):
                    self.died[pid] = time.monotonic()


def _lines(path: str) -> list[list[str]]:
    try:
        with open(path) as handle:
            return [line.split() for line in handle.read().splitlines() if line.endswith(tuple("0123456789"))]
    except FileNotFoundError:
        return []


def runs(records: str, died: dict[int, float]) -> list[Run]:
    """Every handler run, its end the "end" record's time, else its process's death, else None."""
    ends = {(f[1], f[2], f[3]): float(f[4]) for f in _lines(records) if f[0] == "end"}
    found = []
    for kind, job, attempt, pid, at in _lines(records):
        if kind == "start":
            end = ends.get((job, attempt, pid), died.get(int(pid)))
            found.append(Run(int(job), int(attempt), int(pid), float(at), end))
    return found


def overlaps(found: list[Run]) -> list[tuple[Run, Run]]:
    """Pairs of runs of one job whose start..end intervals overlap (an open end runs on).

    >>> overlaps([Run(1, 1, 10, 0.0, 5.0), Run(1, 2, 11, 4.0, 6.0), Run(2, 1, 10, 5.0, 5.5)])
    [(Run(job=1, attempt=1, pid=10, start=0.0, end=5.0), Run(job=1, attempt=2, pid=11, start=4.0, end=6.0))]
    >>> overlaps([Run(1, 1, 10, 0.0, None), Run(1, 2, 11, 9.0, 9.5)])[0][1].pid
    11
    >>> overlaps([Run(1, 1, 10, 0.0, 5.0), Run(1, 2, 11, 5.5, 6.0)])
    []
    """
    pairs = []
    by_job = collections.defaultdict(list)
    for run in found:
        by_job[run.job].append(run)
    for job_runs in by_job.values():
        job_runs.sort(key=lambda run: run.start)
        for i, earlier in enumerate(job_runs):
            for later in job_runs[i + 1:]:
                if earlier.end is None or later.start < earlier.end:
                    pairs.append((earlier, later))
    return pairs


class PartitionServer:
    """A PostgreSQL server of this test's own, reachable on 127.0.0.1 and, from inside the
    namespace, on its veth address (an hba file of ours allows its subnet)."""

    def __init__(self, namespace: netns.NetNamespace) -> None:
        self.folder = tempfile.mkdtemp(prefix="rowfleet-partition-hba-", dir="/tmp")
        os.chmod(self.folder, 0o755)  # the server runs as another user when we are root
        hba = os.path.join(self.folder, "pg_hba.conf")
        with open(hba, "w") as handle:
            handle.write("local all all trust\n"
                         "host all all 127.0.0.1/32 trust\n"
                         f"host all all {namespace.subnet} trust\n")
        os.chmod(hba, 0o644)
        settings = tuple(s for s in pg_harness.SERVER_SETTINGS if not s.startswith("listen_addresses="))
        settings += (f"listen_addresses=127.0.0.1,{namespace.root_address}", f"hba_file={hba}")
        self.namespace = namespace
        try:
            self.pg = pg_harness.start_local(settings)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def inner_url(self, url: str) -> str:
        """``url`` as a box inside the namespace reaches it: at the veth's address."""
        parts = urllib.parse.urlsplit(url)
        netloc = f"{parts.username}@{self.namespace.root_address}:{parts.port}"
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))

    def close(self) -> None:
        self.pg.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def require_own_server(namespace: netns.NetNamespace) -> PartitionServer:
    """Our server, or a loud skip (a failure under ROWFLEET_REQUIRE_PG=1)."""
    try:
        return PartitionServer(namespace)
    except pg_harness.Unavailable as exc:
        if os.environ.get(pg_harness.ENV_REQUIRE) == "1":
            raise pg_harness.PostgresRequired(f"PostgreSQL required by {pg_harness.ENV_REQUIRE}=1 "
                                              f"but unavailable: {exc}") from None
        pg_harness._announce_skip(str(exc))
        raise unittest.SkipTest(str(exc)) from None


class PartitionTest(TempDirTestCase):
    SLOW = True

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        netns.require_netns()
        cls.namespace = netns.NetNamespace()
        cls.addClassCleanup(cls.namespace.close)
        cls.server = require_own_server(cls.namespace)
        cls.addClassCleanup(cls.server.close)

    def setUp(self) -> None:
        super().setUp()
        self.addCleanup(self.namespace.heal)  # a failed test leaves no cut for the next
        self.db = self.server.pg.create_database("partition")
        self.addCleanup(self.server.pg.drop_database, self.db)
        self.write_module(APP, APP_SOURCE)
        self.records = os.path.join(self.dir, "records.log")
        self.store = self.open_store()

    # --- processes ---------------------------------------------------------------------

    def launch(self, label: str, *args: str, inside: bool = False, **env: str) -> subprocess.Popen:
        """``rowfleet --db URL ARGS`` in its own process group, here or inside the namespace
        (there at the veth address), its output in a log file; the group is killed at cleanup."""
        db = self.server.inner_url(self.db) if inside else self.db
        argv = [sys.executable, "-m", "rowfleet", "--db", db, *args]
        start = self.namespace.run_inside if inside else subprocess.Popen
        log_path = os.path.join(self.dir, f"{label}.log")
        with open(log_path, "w") as log:
            process = start(argv, cwd=self.dir, env=child_env(PGAPPNAME=label, **SETTINGS, **env),
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        process.log_path, process.label = log_path, label
        self.addCleanup(kill_group, process)
        return process

    def enqueue(self, task: str, queue: str = "default", **args: object) -> int:
        return self.store.enqueue(JobSpec(task=task, queue=queue, args=args or None)).id

    def first_run(self, job_id: int) -> Run | None:
        return next((run for run in runs(self.records, {}) if run.job == job_id), None)

    def stop(self, *processes: subprocess.Popen) -> None:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                kill_group(process)

    # --- the scenario ------------------------------------------------------------------

    def partition(self, silent: bool) -> dict[str, float]:
        """Cut the box off mid-job for CUT seconds, heal, and check the outcome; the
        figures measured, in seconds."""
        deaths = Deaths(self.records)
        self.addCleanup(deaths.close)
        orchestrator = self.launch("orchestrator", "orchestrator")
        # The box serves a queue of its own besides the shared one, so that a job there
        # shows when the box serves again whatever the other worker does.
        box = self.launch("box", "worker", "--app", APP, "--host", BOX, "--procs", "1", "--no-sampler",
                          "--queue", "default", "--queue", BOX, inside=True, ROWFLEET_LOG_LEVEL="INFO")
        held = self.enqueue("long", first=FIRST_RUN, later=LATER_RUN)
        wait_until(lambda: self.first_run(held), message="the box to start the long job")
        self.assertEqual(self.store.get_job(held, "").claimed_by.split(":")[0], BOX,
                         "the job did not start on the box inside the namespace")
        other = self.launch("other", "worker", "--app", APP, "--host", OTHER)
        renewed = self.store.get_job(held, "").lease_expires_at
        wait_until(lambda: self.store.get_job(held, "").lease_expires_at > renewed,
                   message="the box to renew its lease over the veth")

        cut_at = time.monotonic()
        self.namespace.cut(silent=silent)
        notes = [self.enqueue("note") for _ in range(5)]  # the rest of the fleet goes on
        wait_until(lambda: time.monotonic() >= cut_at + CUT, timeout=CUT + DEADLINE, interval=0.2,
                   message="the end of the cut")
        heal_at = time.monotonic()
        self.namespace.heal()
        probe = self.enqueue("note", queue=BOX)

        every = [held, *notes, probe]
        wait_until(lambda: all(self.store.get_job(j, "").state == "completed" for j in every),
                   timeout=SERVE_AGAIN + 2 * DEADLINE, interval=0.2, message="every job to complete")
        self.assertEqual([p.label for p in (orchestrator, other, box) if p.poll() is not None], [],
                         "a process exited: it should have waited the partition out")
        self.stop(other, box, orchestrator)
        deaths.close()

        found = runs(self.records, deaths.died)
        figures = self.figures(found, held, probe, cut_at, heal_at, self.output(box))
        timeline = "\n".join(f"  {run}" for run in sorted(found, key=lambda run: run.start))
        self.assertEqual(overlaps(found), [], f"runs of one job at once ({figures}); runs "
                                              f"(monotonic, cut at {cut_at:.3f}, heal at {heal_at:.3f}):\n{timeline}")
        for job_id in every:
            job = self.store.get_job(job_id, "")
            kinds = collections.Counter(event.kind for event in self.store.reads.events(job_id))
            with self.subTest(job=job_id):
                self.assertEqual(job.state, "completed")
                self.assertEqual(kinds["completed"], 1, "one completion written")
                self.assertEqual(kinds["failed"], 0)
        done = self.store.get_job(probe, "")
        self.assertEqual(done.claimed_by.split(":")[0], BOX)
        # Not stranded for the whole partition: the lease lapsed and the other box ran it.
        self.assertLess(figures["other box started it after the cut"], CUT, figures)
        self.assertLess(figures["served again after the heal"], SERVE_AGAIN, figures)
        return figures

    def figures(self, found: list[Run], held: int, probe: int, cut_at: float, heal_at: float,
                box_log: str) -> dict[str, object]:
        first = next(run for run in found if run.job == held)
        holder_exit = re.search(rf"child {first.pid} (exited \d+|killed by \w+)", box_log)
        taken = [run for run in found if run.job == held and run.pid != first.pid]
        served = next(run for run in found if run.job == probe)
        figures = {"holder stopped after the cut": round((first.end or float("inf")) - cut_at, 2),
                   "other box started it after the cut": round(taken[0].start - cut_at, 2) if taken else float("nan"),
                   "served again after the heal": round(served.start - heal_at, 2),
                   "holder": holder_exit.group(1) if holder_exit else "did not exit"}
        print(f"\n*** partition figures: {figures} ***", file=sys.__stderr__ or sys.stderr, flush=True)
        return figures

    def test_silent_cut_past_the_lease_runs_no_job_twice_at_once(self):
        self.partition(silent=True)

    def test_link_down_past_the_lease_runs_no_job_twice_at_once(self):
        self.partition(silent=False)


if __name__ == "__main__":
    unittest.main()
