"""A fleet on PostgreSQL: many hosts over TCP, a database restart mid-run, a worker cut off
past its lease, and idle workers woken by NOTIFY.

Owns what only a networked database adds to the process contract (``test_processes``):
workers on several "hosts" sharing one server over TCP, connections that all break at
once and must be made again (LISTEN included), a single worker whose network goes away
while its job runs on elsewhere, and the push path that wakes idle workers. Every test
runs the real command line in child processes against a throwaway server from
``pg_harness`` and checks the outcome in the database and in the handlers' own logs.
Each child's ``PGAPPNAME`` names it, so the server's ``pg_stat_activity`` tells whose
connection is whose. psycopg is never imported here: the harness and the store talk to
the server.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
import unittest
import urllib.parse

from rowfleet.claim import Claim
from rowfleet.job import JobSpec
from support import DEADLINE, TempDirTestCase, child_env, wait_until
from process.test_processes import _blocked_in, _can_see

APP = "pgfleetapp"

# Every handler appends "job-id attempt pid" to ran.log (O_APPEND, one write per run) and
# returns its pid, so each run, and which process's result the row kept, can be told apart.
APP_SOURCE = '''\
import os
import time

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))
GIVE_UP = 120.0  # a handler never outlives a failed test by much


def _ran():
    job = rowfleet.current_job()
    fd = os.open(os.path.join(HERE, "ran.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job.id} {job.lease_token} {os.getpid()}\\n".encode())  # each claim raises the token
    finally:
        os.close(fd)
    return os.getpid()


def _mark(name, text):
    path = os.path.join(HERE, name)
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.replace(path + ".tmp", path)


def _wait_for(name):
    give_up = time.monotonic() + GIVE_UP
    while not os.path.exists(os.path.join(HERE, name)):
        if time.monotonic() > give_up:
            raise TimeoutError("the test never released this handler")
        time.sleep(0.005)


@rowfleet.task(name="gated")
def gated():
    """Waits for the file "go", then runs."""
    _wait_for("go")
    return _ran()


@rowfleet.task(name="note")
def note():
    return _ran()


@rowfleet.task(name="hold")
def hold():
    """Marks started-ID-CLAIM (its lease token), then waits for the file release-ID-CLAIM."""
    job = rowfleet.current_job()
    _mark(f"started-{job.id}-{job.lease_token}", str(os.getpid()))
    _wait_for(f"release-{job.id}-{job.lease_token}")
    return _ran()
'''

WORKER_LEASE = ("--lease", "3", "--renew", "0.5", "--heartbeat", "0.5", "--poll", "0.2")


class PostgresFleetTest(TempDirTestCase):
    def setUp(self) -> None:
        import pg_harness

        self.pg = pg_harness.require_pg(self)
        super().setUp()
        self.db = self.pg.create_database()
        self.addCleanup(self.pg.drop_database, self.db)
        self.address = urllib.parse.urlsplit(self.db)
        if not self.address.hostname or self.address.hostname.startswith("/"):
            self.skipTest("these tests need the server over TCP")
        self.write_module(APP, APP_SOURCE)
        self.store = self.open_store()

    # --- helpers -------------------------------------------------------------------------

    def launch(self, name: str, *args: str, db: str | None = None) -> subprocess.Popen:
        """Start ``rowfleet --db DB ARGS`` in its own process group as application ``name``."""
        process = self.launch_logged(name, *args, db=db, env=child_env(PGAPPNAME=name))
        process.name = name
        return process

    def worker(self, name: str, *args: str, db: str | None = None) -> subprocess.Popen:
        return self.launch(name, "worker", "--app", APP, "--host", name, *args, db=db)

    def stop(self, process: subprocess.Popen) -> None:
        """SIGTERM; it must exit 0."""
        process.send_signal(signal.SIGTERM)
        self.assert_exits(process)

    def assert_exits(self, process: subprocess.Popen, timeout: float = DEADLINE) -> None:
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.fail(f"{process.name} still running after {timeout:.0f}s:\n{self.output(process)}")
        self.assertEqual(process.returncode, 0,
                         f"{process.name} exited {process.returncode}:\n{self.output(process)}")

    def assert_alive(self, *processes: subprocess.Popen) -> None:
        for process in processes:
            self.assertIsNone(process.poll(), f"{process.name} exited:\n{self.output(process)}")

    def touch(self, name: str) -> None:
        open(os.path.join(self.dir, name), "w").close()

    def runs(self) -> dict[int, list[tuple[int, int]]]:
        """Each job's handler runs, in order, as (claim, pid): its lease token counts the claims."""
        found: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
        for line in (self.marker("ran.log") or "").splitlines():
            job_id, attempt, pid = map(int, line.split())
            found[job_id].append((attempt, pid))
        return found

    def enqueue(self, task: str, count: int = 1, **options) -> list[int]:
        """Enqueue ``count`` jobs in one transaction; their ids."""
        known = {job.id for job in self.store.reads.list_jobs("", limit=1_000_000)}
        self.store.enqueue_many(JobSpec(task=task, **options), [None] * count)
        ids = sorted(job.id for job in self.store.reads.list_jobs("", limit=1_000_000) if job.id not in known)
        self.assertEqual(len(ids), count)
        return ids

    def job(self, job_id: int):
        return self.store.get_job(job_id, "")

    def count(self, state: str) -> int:
        return sum(c["n"] for c in self.store.reads.counts() if c["state"] == state)

    def wait_for_state(self, job_id: int, state: str, timeout: float = DEADLINE):
        return wait_until(lambda: (job := self.job(job_id)).state == state and job, timeout=timeout,
                          message=f"job {job_id} to be {state}")

    def backends(self, name: str, since: float = 0.0) -> list[tuple]:
        """(client address, client port, last query) of application ``name``'s connections
        made after ``since`` (UNIX time)."""
        return self.pg.psql(self.db, "SELECT host(client_addr), client_port, query FROM pg_stat_activity "
                                     "WHERE application_name = %s AND datname = current_database() "
                                     "AND backend_start > to_timestamp(%s)", (name, since))

    def listening(self, name: str, since: float = 0.0) -> bool:
        return any(query.rstrip(";") == "LISTEN rowfleet_jobs" for _, _, query in self.backends(name, since))

    def await_idle(self, worker: subprocess.Popen, since: float = 0.0) -> None:
        """Wait until ``worker`` listens (on a connection made after ``since``) and sleeps."""
        wait_until(lambda: self.listening(worker.name, since), message=f"{worker.name} to LISTEN")
        if _can_see("select"):
            wait_until(lambda: _blocked_in(worker.pid, "select"),
                       message=f"{worker.name} to block in its wait")

    def assert_woken_by_push(self, job_id: int, worker: subprocess.Popen) -> None:
        done = self.wait_for_state(job_id, "completed", timeout=10.0)
        # Far sooner than the 30 s safety poll: the NOTIFY of the enqueue woke the worker.
        self.assertLess(done.started_at - done.created_at, 5.0)
        self.assertEqual(done.claimed_by, f"{worker.name}:{worker.pid}")

    def assert_each_completed_once(self, ids: list[int]) -> dict[int, list[tuple[int, int]]]:
        """Every job completed exactly once: one completion, written by its last holder.

        A job's handler ran once, or (its first holder cut off past its lease) twice: then
        it was reclaimed, ran again as attempt 2, and the first holder's outcome was fenced
        off. A claim lost with its connection counts an attempt that never ran. Returns the
        runs of the jobs that ran twice.
        """
        runs, twice = self.runs(), {}
        for job_id in ids:
            job = self.job(job_id)
            events = self.store.reads.events(job_id)
            kinds = collections.Counter(event.kind for event in events)
            ran = runs.get(job_id, [])
            with self.subTest(job=job_id):
                self.assertEqual(job.state, "completed")
                self.assertEqual(kinds["completed"], 1, "one completion written")
                self.assertEqual(kinds["failed"] + kinds["retried"], 0)
                self.assertIn(job.attempts, (1, 2))
                self.assertEqual((kinds["claimed"], job.lease_token), (job.attempts, job.attempts))
                self.assertEqual(kinds["reclaimed"], job.attempts - 1, "an attempt beyond the first "
                                                                       "came from anywhere but a reclaim")
                completed = next(event for event in events if event.kind == "completed")
                self.assertEqual(completed.detail["token"], job.lease_token, "written by a stale holder")
                self.assertIn(len(ran), (1, 2), f"handler runs: {ran}")
                self.assertEqual(ran[-1][0], job.attempts, "the last run is not the last attempt")
                self.assertEqual(job.result, ran[-1][1], "the row keeps another run's result")
                self.assertEqual(job.claimed_by.rsplit(":", 1)[1], str(ran[-1][1]))
                if len(ran) == 2:
                    self.assertEqual([attempt for attempt, _ in ran], [1, 2])
                    twice[job_id] = ran
        return twice

    # --- many hosts ----------------------------------------------------------------------

    def test_hosts_over_tcp_drain_1000_jobs_each_exactly_once(self):
        ids = self.enqueue("gated", 1000)
        hosts = ["alpha", "bravo", "charlie", "delta"]
        workers = {name: self.worker(name, "--burst") for name in hosts}
        # The gate holds every handler until each host holds a job, so the race is real.
        wait_until(lambda: self.count("running") == len(hosts), message="every host holding a job")
        for name in hosts:
            connections = self.backends(name)
            self.assertGreaterEqual(len(connections), 2, f"{name}: {connections}")
            for address, port, _ in connections:
                self.assertGreater(port, 0, f"{name} is not connected over TCP")
                if self.address.hostname == "127.0.0.1":  # the harness's own server
                    self.assertEqual(address, "127.0.0.1", f"{name} is not connected to 127.0.0.1")
        self.touch("go")
        for process in workers.values():
            self.assert_exits(process, timeout=2 * DEADLINE)

        runs = self.runs()
        self.assertEqual(sorted(runs), ids, "the handlers that ran are not exactly the jobs enqueued")
        self.assertEqual({job_id: len(ran) for job_id, ran in runs.items() if len(ran) > 1}, {},
                         "jobs whose handler ran more than once")
        self.assertEqual(self.count("completed"), len(ids))
        host_of = {process.pid: name for name, process in workers.items()}
        for job in self.store.reads.list_jobs("", limit=10_000):
            [(attempt, pid)] = runs[job.id]
            self.assertEqual((job.attempts, job.lease_token, attempt), (1, 1, 1), f"job {job.id}")
            self.assertEqual(job.claimed_by, f"{host_of[pid]}:{pid}", f"job {job.id}: holder is not its runner")
            self.assertEqual(job.result, pid)
        labels = {job.claimed_by.split(":")[0] for job in self.store.reads.list_jobs("", limit=10_000)}
        self.assertEqual(labels, set(hosts))

    # --- the database goes away ----------------------------------------------------------

    def test_an_orchestrator_started_before_its_server_answers_waits_for_it(self):
        """Nothing listens at this address: the service waits (as workers do) and stops
        cleanly on SIGTERM; the one-shot `--once` says what is wrong in one line instead."""
        import pg_harness

        nowhere = f"postgresql://postgres@127.0.0.1:{pg_harness.free_port()}/nowhere_test"
        orchestrator = self.launch("orchestrator", "orchestrator", "--poll", "0.1", db=nowhere)
        wait_until(lambda: "waiting for the database" in self.output(orchestrator) or orchestrator.poll() is not None,
                   message="the orchestrator to say it waits")
        self.assert_alive(orchestrator)
        self.stop(orchestrator)
        once = self.cli("--db", nowhere, "orchestrator", "--once", check=False)
        self.assertEqual(once.returncode, 2, once.stderr)
        self.assertEqual(len(once.stderr.strip().splitlines()), 1, once.stderr)

    def test_database_restart_mid_run_loses_nothing_and_listen_resumes(self):
        if self.pg.external:
            self.skipTest("cannot restart an external server")
        idle = self.worker("idle", "--queue", "idle", "--poll", "30")
        self.await_idle(idle)
        held_id = self.enqueue("hold", priority=-1)[0]  # claimed before any note
        note_ids = self.enqueue("note", 1000)
        orchestrator = self.launch("orchestrator", "orchestrator", "--interval", "0.2")
        # Up before the restart (its LISTEN for dispatch events is made once it has migrated),
        # so the restart lands on a running sweep loop rather than on its start.
        wait_until(lambda: any(query.rstrip(";") == "LISTEN rowfleet_dispatch"
                               for _, _, query in self.backends("orchestrator")),
                   message="the orchestrator to be up")
        drainers = [self.worker(f"w{n}", *WORKER_LEASE) for n in range(3)]
        wait_until(lambda: self.marker(f"started-{held_id}-1"), message="the held job to start")
        wait_until(lambda: self.count("completed") >= 100, message="the drain under way")

        restarted_at = time.time()
        self.pg.restart()  # every connection of every process breaks, this test's own too
        self.store = self.open_store()
        done_before = self.count("completed")
        self.assertLess(done_before, 1 + len(note_ids), "the drain ended before the restart")
        for attempt in (1, 2):  # the handler returns into a store whose connection broke
            self.touch(f"release-{held_id}-{attempt}")
        later_ids = [int(self.cli("enqueue", "note").stdout) for _ in range(3)]

        every = [held_id, *note_ids, *later_ids]
        wait_until(lambda: self.count("completed") == len(every), timeout=2 * DEADLINE,
                   message=f"all {len(every)} jobs completed after the restart")
        self.assert_alive(idle, orchestrator, *drainers)
        self.assertTrue(any("database unavailable (retrying in" in self.output(w) or
                            "cannot write its outcome yet" in self.output(w) for w in drainers),
                        "no worker saw the restart: it did not land mid-run")
        self.assertIn("sweep failed (will retry)", self.output(orchestrator))
        twice = self.assert_each_completed_once(every)
        # Only a handler that outlived its lease over the restart may have run twice.
        self.assertLessEqual(len(twice), len(drainers), f"jobs run twice: {twice}")

        # The orchestrator sweeps again: a lease lapsing now is reclaimed.
        orphan_id = self.enqueue("note", queue="nobody")[0]
        self.assertEqual(self.store.claim(Claim("", "nobody", "ghost:1", 0.2)).id, orphan_id)
        wait_until(lambda: "reclaimed" in [e.kind for e in self.store.reads.events(orphan_id)],
                   message="the orchestrator to reclaim a lease that lapsed after the restart")

        # The idle worker listens again, on a connection made after the restart.
        self.await_idle(idle, since=restarted_at)
        job_id = int(self.cli("enqueue", "note", "--queue", "idle").stdout)
        self.assert_woken_by_push(job_id, idle)
        for process in (*drainers, idle, orchestrator):
            self.stop(process)

    def test_a_worker_cut_off_stops_its_job_before_its_lease_lapses_and_another_runs_it_after(self):
        job_id = self.enqueue("hold")[0]
        partition = Partition(self.address.hostname, self.address.port or 5432)
        self.addCleanup(partition.close)
        lease = ("--lease", "2", "--renew", "0.5", "--poll", "0.2")
        victim = self.worker("victim", *lease, db=partition.url(self.db))
        self.assertEqual(int(wait_until(lambda: self.marker(f"started-{job_id}-1"),
                                        message="the victim to start the job")), victim.pid)
        held = self.job(job_id)
        wait_until(lambda: self.job(job_id).lease_expires_at > held.lease_expires_at,
                   message="the victim's keeper to renew the lease through the relay")

        partition.cut()
        last_lease = self.job(job_id).lease_expires_at  # no later renewal gets through
        # Its keeper cannot renew: the lease rule ends the process before the lease could lapse.
        self.assertEqual(victim.wait(DEADLINE), 81, self.output(victim))
        self.assertLess(time.time(), last_lease, "the victim outlived its lease")
        self.assertGreater(partition.refused, 0, "the victim never tried to reconnect during the cut")
        orchestrator = self.launch("orchestrator", "orchestrator", "--interval", "0.2")
        rescuer = self.worker("rescuer", *lease)
        self.assertEqual(int(wait_until(lambda: self.marker(f"started-{job_id}-2"),
                                        message="another worker to take the job over")), rescuer.pid)
        events = self.store.reads.events(job_id)
        self.assertEqual([e.kind for e in events], ["claimed", "reclaimed", "claimed"])
        self.assertGreater(events[1].at, last_lease, "reclaimed before the lease lapsed")
        self.assertEqual(events[1].detail["token"], 1)

        partition.heal()
        self.touch(f"release-{job_id}-2")
        done = self.wait_for_state(job_id, "completed")
        self.assertEqual((done.attempts, done.lease_token, done.result), (1, 2, rescuer.pid),
                         "a lost lease gives its attempt back")
        self.assertEqual(self.runs()[job_id], [(2, rescuer.pid)], "the victim's run was not stopped")
        for process in (rescuer, orchestrator):
            self.stop(process)

    # --- waking up -----------------------------------------------------------------------

    def test_idle_worker_wakes_within_5s_of_an_enqueue_from_another_process(self):
        idle = self.worker("idle", "--poll", "30")
        self.await_idle(idle)
        job_id = int(self.cli("enqueue", "note").stdout)  # rowfleet in another process
        self.assert_woken_by_push(job_id, idle)
        self.await_idle(idle)  # the wake-up re-arms after a job
        # Any program's plain INSERT: the trigger, not rowfleet, sends the NOTIFY.
        [(job_id,)] = self.pg.psql(
            self.db, "INSERT INTO jobs (queue, task, run_at, created_at, updated_at) "
                     "VALUES ('default', 'note', extract(epoch FROM now()), extract(epoch FROM now()), "
                     "extract(epoch FROM now())) RETURNING id")
        self.assert_woken_by_push(job_id, idle)
        self.stop(idle)


class Partition:
    """A TCP relay to the database that a test can cut, as if the network between one
    worker and the server went away: ``cut()`` drops every relayed connection and closes
    new ones as they arrive (counted in ``refused``) until ``heal()``."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.refused = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # how soon close() is noticed
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._cut = False
        self._closed = threading.Event()
        self._start(self._accept, "partition-accept")

    def url(self, url: str) -> str:
        """``url`` pointed at this relay."""
        parts = urllib.parse.urlsplit(url)
        credentials, at, _ = parts.netloc.rpartition("@")
        port = self._listener.getsockname()[1]
        return urllib.parse.urlunsplit(parts._replace(netloc=f"{credentials}{at}127.0.0.1:{port}"))

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            doomed, self._sockets = self._sockets, []
        for sock in doomed:
            _drop(sock)

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed.set()
        self._threads[0].join(DEADLINE)  # the acceptor: no relay starts after this
        self.cut()
        for thread in self._threads[1:]:
            thread.join(DEADLINE)
        self._listener.close()

    def _start(self, target, name: str, *args) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            client.settimeout(None)
            with self._lock:
                refuse = self._cut or self._closed.is_set()
                if refuse:
                    self.refused += 1
            if refuse:
                _drop(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=DEADLINE)
                server.settimeout(None)
            except OSError:
                _drop(client)
                continue
            with self._lock:
                self._sockets += [client, server]
            self._start(_pump, f"partition-up-{client.fileno()}", client, server)
            self._start(_pump, f"partition-down-{client.fileno()}", server, client)


def _pump(source: socket.socket, target: socket.socket) -> None:
    """Copy bytes one way until either side closes; then close both."""
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            target.sendall(chunk)
    _drop(source)
    _drop(target)


def _drop(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


if __name__ == "__main__":
    unittest.main()
