"""Failover: a fleet on a multi-host URL serves from the promoted standby, within seconds,
when its primary stops, crashes or vanishes.

Owns what a real streaming standby adds to the PostgreSQL process tests: every long-running
process (workers with their keepers, an idle worker on LISTEN, the orchestrator, the
scheduler, the sampler, the panel and the exporter) runs on
``postgresql://h1,h2/db?target_session_attrs=read-write`` with short settings (lease 8 s,
renew 1 s, heartbeat 1 s); the primary is stopped (``pg_ctl stop -m fast``), crashes
(``-m immediate``) or vanishes silently (iptables drops its packets, so a statement in
flight gets no answer and no reset), and the standby is promoted at once, as a failover
manager would. From the fault, each role must be back on the promoted server within
``BACK_WITHIN``: the first job claimed and the first completed, each worker's heartbeat and
next claim, the keeper's renewal of a job held across the failover, an orchestrator sweep,
a schedule slot fired, a sampler row, the panel answering with a job only the new primary
has, ``/metrics`` counting it, and the idle worker's LISTEN made again; later connections
go to the promoted server first (a scrape does not wait on the vanished primary again).
With synchronous replication nothing acknowledged is lost and no job completes twice. A URL
that names no ``target_session_attrs`` still waits for the promotion rather than settle on
the hot standby. With asynchronous replication what the standby had not received is lost:
that test records what happens (enqueues gone; finished jobs run again, under the same
lease token numbers), the price of commits that do not wait for the standby.

Each figure is printed on the real stderr (``failover figures: ...``). The servers come from
``pg_standby`` (skipped loudly without PostgreSQL, pg_basebackup, root or iptables; required
under ``ROWFLEET_REQUIRE_PG=1``). psycopg is never imported here: ``pg_standby`` talks to the
servers.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

import pg_harness
import pg_standby
from rowfleet.claim import Claim
from rowfleet.job import JobSpec
from support import DEADLINE, TempDirTestCase, child_env, wait_until

APP = "failoverapp"

# Every handler appends "job-id attempt token pid" to ran.log (O_APPEND, one write per run)
# and returns its pid: each run, and which run's result the row kept, can be told apart.
APP_SOURCE = '''\
import os
import time

import rowfleet

HERE = os.path.dirname(os.path.abspath(__file__))
GIVE_UP = 180.0  # a handler never outlives a failed test by much


def _ran():
    job = rowfleet.current_job()
    fd = os.open(os.path.join(HERE, "ran.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job.id} {job.attempts} {job.lease_token} {os.getpid()}\\n".encode())
    finally:
        os.close(fd)
    return os.getpid()


@rowfleet.task(name="note")
def note():
    time.sleep(0.05)  # a drain that lasts past the failover
    return _ran()


@rowfleet.task(name="tick")
def tick():
    return os.getpid()


@rowfleet.task(name="hold")
def hold():
    """Marks started-ID-ATTEMPT, then waits for the file release-ID."""
    job = rowfleet.current_job()
    with open(os.path.join(HERE, f"started-{job.id}-{job.attempts}"), "w") as handle:
        handle.write(str(os.getpid()))
    give_up = time.monotonic() + GIVE_UP
    while not os.path.exists(os.path.join(HERE, f"release-{job.id}")):
        if time.monotonic() > give_up:
            raise TimeoutError("the test never released this handler")
        time.sleep(0.01)
    return _ran()
'''

# A job held across a silent vanish keeps its lease when the lease outlasts the gap between
# renewals (renew), a renewal lost on the dead path (tcp_user_timeout = renew), a reconnect
# that tries the vanished primary first (connect_timeout: 2 s) and some slack for a loaded
# machine: 1 + 1 + 2 + 2 s. (Measured: the renewal landed 4.6 s after the fault.)
LEASE, RENEW, HEARTBEAT = 8.0, 1.0, 1.0
# Every process's settings (its PostgreSQL connections' bounds follow them), then those of the
# commands that read them.
SETTINGS = ("--lease", str(LEASE), "--renew", str(RENEW), "--heartbeat", str(HEARTBEAT))
OWN_SETTINGS = {"worker": ("--poll", "0.2"), "orchestrator": ("--poll", "0.2", "--interval", "0.5"),
                "scheduler": ("--poll", "0.2"), "sampler": ("--poll", "0.2")}
SCHEDULES = [{"name": "tick", "task": "tick", "every": 1, "queue": "ticks"}]
NOTES = 400
BUSY_WORKERS = ("w1", "w2")
# From the fault to every role back on the promoted server. What it is made of, with these
# settings: a statement in flight on a vanished path fails within one renew (tcp_user_timeout);
# an idle connection within about 4 s (keepalives: idle 1 s, then 3 probes 1 s apart); each
# reconnect tries the vanished primary for connect_timeout (2 s, libpq's floor) before the
# standby; a process that failed meanwhile backs off (the worker and the scheduler double
# their pause). Measured here: see the figures printed. TCP's own retransmissions would take
# about 15 minutes.
BACK_WITHIN = 20.0
LISTEN_JOBS = "LISTEN rowfleet_jobs"


class FailoverCase(TempDirTestCase):
    """A pair, a database on it, the app, and the fleet's processes on the multi-host URL."""

    SYNCHRONOUS = True

    def start_pair(self, vanishing: bool = False) -> None:
        self.pair = pg_standby.require_pair(self, synchronous=self.SYNCHRONOUS, vanishing=vanishing)
        self.db = self.pair.create_database()
        self.dbname = pg_harness.database_of(self.db)
        self.write_module(APP, APP_SOURCE)
        self.schedule_path = os.path.join(self.dir, "schedules.json")
        with open(self.schedule_path, "w") as handle:
            json.dump(SCHEDULES, handle)
        self.store = self.open_store()

    def session(self, url: str) -> pg_standby.Session:
        session = self.pair.session(url)
        self.addCleanup(session.close)
        return session

    def launch(self, name: str, *args: str) -> subprocess.Popen:
        """``rowfleet --db <multi-host URL> ARGS`` in its own process group, as application ``name``."""
        process = self.launch_logged(name, *args, *SETTINGS, *OWN_SETTINGS.get(args[0], ()),
                                     env=child_env(PGAPPNAME=name))
        process.name = name
        return process

    def worker(self, name: str, *args: str) -> subprocess.Popen:
        return self.launch(name, "worker", "--app", APP, "--host", name, *args)

    def assert_alive(self, *processes: subprocess.Popen) -> None:
        for process in processes:
            self.assertIsNone(process.poll(), f"{process.name} exited {process.returncode}:\n{self.output(process)}")

    def stop(self, *processes: subprocess.Popen) -> None:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                self.fail(f"{process.name} still running {DEADLINE:.0f}s after SIGTERM:\n{self.output(process)}")
            self.assertEqual(process.returncode, 0, f"{process.name} exited {process.returncode}:\n"
                                                    f"{self.output(process)}")

    def served_url(self, process: subprocess.Popen, prefix: str) -> str:
        """The address a panel or exporter printed (``prefix`` URL)."""
        def printed():
            self.assert_alive(process)
            lines = [line for line in self.output(process).splitlines() if line.startswith(prefix)]
            return lines[0].removeprefix(prefix).split()[0] if lines else None
        return wait_until(printed, message=f"{process.name} to listen")

    def enqueue(self, task: str, count: int = 1, **options) -> list[int]:
        """``count`` jobs in one transaction; their ids (the fleet's scheduler may enqueue
        between the two reads: its jobs are of another task)."""
        spec = JobSpec(task=task, **options)
        known = {job.id for job in self.store.reads.list_jobs("", limit=1_000_000)}
        self.store.enqueue_many(spec, [None] * count)
        return sorted(job.id for job in self.store.reads.list_jobs("", limit=1_000_000)
                      if job.id not in known and (job.task, job.queue) == (spec.task, spec.queue))

    def runs(self) -> dict[int, list[tuple[int, int, int]]]:
        """Each job's handler runs, in order, as (attempt, token, pid)."""
        found: dict[int, list[tuple[int, int, int]]] = collections.defaultdict(list)
        for line in (self.marker("ran.log") or "").splitlines():
            job_id, attempt, token, pid = map(int, line.split())
            found[job_id].append((attempt, token, pid))
        return found

    def touch(self, name: str) -> None:
        open(os.path.join(self.dir, name), "w").close()

    def listening(self, db: pg_standby.Session, name: str, channel: str = LISTEN_JOBS) -> bool:
        return bool(db.value("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                             "AND datname = current_database() AND rtrim(query, ';') = %s", (name, channel)))


class HttpProbe:
    """Asks ``url`` again and again on a thread of its own until ``good(status, body)``;
    ``back_after``: seconds from ``since`` (UNIX time) to the good answer's arrival."""

    def __init__(self, role: str, url: str, good, since: float) -> None:
        self.role, self.back_after = role, None
        self.statuses: list[int] = []  # every answer's, in order
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._ask, args=(url, good, since), name=f"probe-{role}")
        self._thread.start()

    def _ask(self, url: str, good, since: float) -> None:
        while not self._stop.is_set():
            status, body = http_get(url)
            self.statuses.append(status)
            if good(status, body):
                self.back_after = time.time() - since
                return
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (OSError, urllib.error.URLError):
        return 0, ""


class FleetFailover(FailoverCase):
    """The whole fleet through a failover, synchronous replication: every role back on the
    promoted server within ``BACK_WITHIN`` of the fault, nothing acknowledged lost, nothing
    completed twice."""

    def test_primary_stopped_then_standby_promoted(self):
        self.fail_over(lambda pair: pair.stop_primary("fast"), "primary stopped (fast)")

    def test_primary_crashes_then_standby_promoted(self):
        self.fail_over(lambda pair: pair.stop_primary("immediate"), "primary crashed (stopped immediate)")

    def test_primary_vanishes_silently_then_standby_promoted(self):
        self.fail_over(lambda pair: pair.vanish_primary(), "primary vanished (packets dropped)", vanishing=True)

    def fail_over(self, fault, label: str, vanishing: bool = False) -> None:
        self.start_pair(vanishing=vanishing)
        fleet = self.start_fleet()
        primary = self.session(self.pair.primary_url(self.dbname))
        wait_until(lambda: primary.value("SELECT count(*) FROM jobs WHERE task = 'note' AND state = 'completed'")
                   >= 20, message="the drain under way")
        acknowledged = {row[0] for row in primary.rows("SELECT id FROM jobs WHERE state = 'completed'")}
        primary.close()
        self.store.close()  # this test's own connection goes the way of the others

        faulted_at = time.time()
        fault(self.pair)
        self.pair.promote()
        promoted_at = time.time()
        figures = self.watch_roles_come_back(fleet, faulted_at, promoted_at)
        figures["promoted"] = promoted_at - faulted_at
        print(f"\nfailover figures ({label}, {'sync' if self.SYNCHRONOUS else 'async'} replication, lease {LEASE:g}s, "
              f"renew {RENEW:g}s, heartbeat {HEARTBEAT:g}s), seconds after the fault: "
              + ", ".join(f"{role} {seconds:.1f}" for role, seconds in sorted(figures.items(), key=lambda kv: kv[1])),
              file=sys.__stderr__ or sys.stderr, flush=True)
        slowest = max(figures, key=figures.get)
        self.assertLess(figures[slowest], BACK_WITHIN, f"{slowest} came back {figures[slowest]:.1f}s after the fault")
        self.assert_alive(*fleet.values())
        # The exporter opens a connection per scrape: it tries the host that last took writes
        # first, not the vanished primary first in the URL (TCP's timeout, a renew, each time).
        started = time.monotonic()
        self.assertEqual(http_get(self.metrics_url)[0], 200)
        scrape = time.monotonic() - started
        print(f"a scrape after the failover: {scrape:.2f}s", file=sys.__stderr__ or sys.stderr, flush=True)
        self.assertLess(scrape, 0.9 * RENEW, "the scrape tried the vanished primary first again")

        self.store = self.open_store()  # the multi-host URL: the promoted standby now
        self.finish_and_check(fleet, acknowledged)

    # --- the fleet -----------------------------------------------------------------------

    def start_fleet(self) -> dict[str, subprocess.Popen]:
        """Every long-running process on the multi-host URL, each seen at work on the primary;
        a job held across the failover (queue ``held``) and a drain of ``NOTES`` short jobs."""
        self.held_id = self.enqueue("hold", queue="held")[0]
        self.note_ids = self.enqueue("note", NOTES)
        fleet = {"orchestrator": self.launch("orchestrator", "orchestrator")}
        fleet["holder"] = self.worker("holder", "--queue", "held")
        fleet["idle"] = self.worker("idle", "--queue", "idle", "--poll", "30")
        for name in BUSY_WORKERS:
            fleet[name] = self.worker(name)
        fleet["scheduler"] = self.launch("scheduler", "scheduler", "--app", APP, "--schedule", self.schedule_path)
        fleet["sampler"] = self.launch("sampler", "sampler", "--every", "0.5", "--host", "sampler-box")
        fleet["panel"] = self.launch("panel", "panel", "--port", "0")
        fleet["exporter"] = self.launch("exporter", "metrics", "--port", "0")
        self.panel_url = self.served_url(fleet["panel"], "panel at ")
        self.metrics_url = self.served_url(fleet["exporter"], "serving metrics on ")

        primary = self.session(self.pair.primary_url(self.dbname))
        wait_until(lambda: self.marker(f"started-{self.held_id}-1"), message="the held job to start")
        up = {
            "orchestrator": lambda: primary.value("SELECT count(*) FROM orchestrators"),
            "heartbeats": lambda: primary.value("SELECT count(DISTINCT host) FROM workers") == 2 + len(BUSY_WORKERS),
            "scheduler": lambda: primary.value("SELECT count(*) FROM schedule_slots"),
            "sampler": lambda: primary.value("SELECT count(*) FROM host_samples WHERE host = 'sampler-box'"),
            "idle worker's LISTEN": lambda: self.listening(primary, "idle"),
            "panel": lambda: http_get(f"{self.panel_url.rstrip('/')}/api/jobs/{self.held_id}")[0] == 200,
            "exporter": lambda: http_get(self.metrics_url)[0] == 200,
        }
        for role, looks_up in up.items():
            wait_until(lambda: (self.assert_alive(*fleet.values()), looks_up())[1], message=f"{role} up on the primary")
        primary.close()
        return fleet

    def watch_roles_come_back(self, fleet: dict[str, subprocess.Popen], faulted_at: float,
                              promoted_at: float) -> dict[str, float]:
        """Seconds from the fault until each role is seen at work on the promoted server.
        Where a row records when (a claim, a finish, a heartbeat, a renewal, a sweep, a slot,
        a sample) that time is taken, if after the promotion (before it, the row was written
        on the old primary as it shut down, and replicated); for the panel, the exporter and
        LISTEN, when it was seen."""
        standby = self.session(self.pair.standby_url(self.dbname))
        marker = self.enqueue_after_promotion()
        after = (promoted_at,)
        stamped = {
            "first claim": ("SELECT min(started_at) FROM jobs WHERE started_at > %s", after),
            "first completion": ("SELECT min(finished_at) FROM jobs WHERE state = 'completed' AND finished_at > %s",
                                 after),
            "keeper renewal": ("SELECT lease_expires_at - %s FROM jobs WHERE id = %s AND lease_expires_at - %s > %s",
                               (LEASE, self.held_id, LEASE, promoted_at)),
            "orchestrator sweep": ("SELECT max(last_seen) FROM orchestrators WHERE last_seen > %s", after),
            "scheduler slot": ("SELECT min(fired_at) FROM schedule_slots WHERE fired_at > %s", after),
            "sampler row": ("SELECT min(at) FROM host_samples WHERE host = 'sampler-box' AND at > %s", after),
        }
        for name in ("holder", "idle", *BUSY_WORKERS):
            stamped[f"{name} heartbeat"] = ("SELECT max(last_seen) FROM workers WHERE host = %s AND last_seen > %s",
                                            (name, promoted_at))
        for name in BUSY_WORKERS:
            stamped[f"{name} claim"] = ("SELECT min(started_at) FROM jobs WHERE started_at > %s AND claimed_by LIKE %s",
                                        (promoted_at, f"{name}:%"))
        figures: dict[str, float] = {}
        # Each request the panel and the exporter answer opens a connection of its own (about
        # 2 s while the vanished primary is tried first): asked on threads of their own, so
        # neither waits on the other's answers.
        probes = [HttpProbe("panel", f"{self.panel_url.rstrip('/')}/api/jobs/{marker}",
                            lambda status, body: status == 200, faulted_at),
                  HttpProbe("exporter", self.metrics_url,
                            lambda status, body: status == 200 and 'queue="after-failover"' in body, faulted_at)]
        for probe in probes:
            self.addCleanup(probe.stop)

        def all_back() -> bool:
            self.assert_alive(*fleet.values())
            for role, (sql, params) in stamped.items():
                if role not in figures and (at := standby.value(sql, params)) is not None:
                    figures[role] = at - faulted_at
            if "idle worker's LISTEN" not in figures and self.listening(standby, "idle"):
                figures["idle worker's LISTEN"] = time.time() - faulted_at
            figures.update({probe.role: probe.back_after for probe in probes if probe.back_after is not None})
            return len(figures) == len(stamped) + 1 + len(probes)

        try:
            wait_until(all_back, timeout=DEADLINE + BACK_WITHIN, interval=0.1, message="every role back")
        except AssertionError:
            missing = sorted((set(stamped) | {"idle worker's LISTEN"} | {p.role for p in probes}) - set(figures))
            logs = "\n".join(f"--- {name}\n{self.output(process)[-3000:]}" for name, process in fleet.items())
            raise AssertionError(f"not back on the promoted server: {missing}; back: {figures}\n{logs}") from None
        # Asked only once the standby was promoted: the panel's connection kept from before
        # the failover fails one request (503: it is then dropped), the next is answered.
        self.assertLessEqual(probes[0].statuses.count(503), 1, f"the panel's answers: {probes[0].statuses}")
        return figures

    def enqueue_after_promotion(self) -> int:
        """A job only the new primary has (queue ``after-failover``, which nobody serves),
        enqueued straight to it, so that the test's own reconnect is no part of the figures."""
        [(job_id,)] = self.pair.query(
            self.pair.standby_url(self.dbname),
            "INSERT INTO jobs (queue, task, run_at, created_at, updated_at) VALUES ('after-failover', 'note', "
            "extract(epoch FROM now()), extract(epoch FROM now()), extract(epoch FROM now())) RETURNING id")
        return job_id

    # --- after the failover ----------------------------------------------------------------

    def finish_and_check(self, fleet: dict[str, subprocess.Popen], acknowledged: set[int]) -> None:
        """The drain and the held job complete on the promoted server; nothing acknowledged
        was lost and nothing completed twice; the idle worker wakes by push, the orchestrator
        reclaims a lapsed lease; every process stops cleanly."""
        self.touch(f"release-{self.held_id}")
        every = [self.held_id, *self.note_ids]
        wait_until(lambda: sum(job.state == "completed" for job in self.store.reads.list_jobs("", limit=10_000)
                               if job.id in set(every)) == len(every),
                   timeout=2 * DEADLINE, message=f"all {len(every)} jobs completed on the promoted server")
        jobs = {job.id: job for job in self.store.reads.list_jobs("", state="completed", limit=10_000)}
        self.assertLessEqual(acknowledged, set(jobs), "a completion acknowledged by the primary was lost")
        runs = self.runs()
        for job_id in every:
            job, events = jobs[job_id], self.store.reads.events(job_id)
            kinds = collections.Counter(event.kind for event in events)
            with self.subTest(job=job_id):
                self.assertEqual(kinds["completed"], 1, "completed twice, or never")
                completed = next(event for event in events if event.kind == "completed")
                self.assertEqual(completed.detail["token"], job.lease_token, "written by a stale holder")
                tokens = [token for _, token, _ in runs[job_id]]
                self.assertEqual(len(tokens), len(set(tokens)), f"two runs under one token: {runs[job_id]}")
                # Each run but the last was cut off and its job reclaimed; a claim whose reply
                # died with the primary is reclaimed without ever running, so fewer runs is sound.
                self.assertTrue(1 <= len(runs[job_id]) <= kinds["reclaimed"] + 1,
                                f"runs {runs[job_id]} but reclaims {kinds['reclaimed']}")
        twice = sorted(job_id for job_id in every if len(runs[job_id]) > 1)
        print(f"{len(every)} jobs through the failover: each completed once; run twice (a lease lapsed, the first "
              f"run fenced off): {len(twice)}", file=sys.__stderr__ or sys.stderr, flush=True)
        held = jobs[self.held_id]
        self.assertEqual((held.attempts, held.lease_token), (1, 1), "the held job's lease lapsed over the failover")

        idle = fleet["idle"]
        standby = self.session(self.pair.standby_url(self.dbname))
        wait_until(lambda: self.listening(standby, "idle"), message="the idle worker to LISTEN again")
        job_id = self.store.enqueue(JobSpec(task="note", queue="idle")).id
        done = wait_until(lambda: (job := self.store.get_job(job_id, "")).state == "completed" and job,
                          timeout=10.0, message="the idle worker to run a job enqueued after the failover")
        self.assertLess(done.started_at - done.created_at, 5.0, "woken by its 30 s poll, not by NOTIFY")
        self.assertEqual(done.claimed_by, f"idle:{idle.pid}")

        orphan_id = self.enqueue("note", queue="nobody")[0]
        self.assertEqual(self.store.claim(Claim("", "nobody", "ghost:1", 0.2)).id, orphan_id)
        wait_until(lambda: "reclaimed" in [e.kind for e in self.store.reads.events(orphan_id)],
                   message="the orchestrator to reclaim a lease that lapsed on the promoted server")
        self.stop(*fleet.values())


class UrlWithoutSessionAttributes(FailoverCase):
    """A multi-host URL that names no ``target_session_attrs``: rowfleet asks for a
    read-write session anyway (every process writes), so a worker waits for the promotion
    instead of landing on the hot standby, where its first write would end it."""

    def test_a_worker_waits_for_the_promotion_instead_of_using_the_standby(self):
        self.start_pair()
        self.db = self.pair.url(self.dbname, target_session_attrs=None)
        worker = self.worker("w1")
        first = self.enqueue("note")[0]
        wait_until(lambda: self.store.get_job(first, "").state == "completed", message="a job done on the primary")
        self.store.close()
        self.pair.stop_primary("fast")
        standby = self.session(self.pair.standby_url(self.dbname))
        # The standby refused a read-write session (libpq's words), or w1 took a session there.
        def sessions() -> set[int]:
            return {pid for (pid,) in standby.rows("SELECT pid FROM pg_stat_activity WHERE application_name = 'w1'")}
        wait_until(lambda: worker.poll() is not None or "session is read-only" in self.output(worker)
                   or sessions(), message="w1 to try the standby")
        self.assertIsNone(worker.poll(), f"w1 exited on the standby:\n{self.output(worker)}")
        # libpq's read-write check opens a session and closes it at once when the server is
        # read-only, so one may be seen for a moment; a session w1 kept would stay.
        seen = sessions()
        wait_until(lambda: not seen & sessions(), timeout=5.0,
                   message=f"w1 holds a session on the standby, where it cannot write: {seen & sessions()}")
        self.pair.promote()
        self.store = self.open_store()
        second = self.store.enqueue(JobSpec(task="note")).id
        wait_until(lambda: self.store.get_job(second, "").state == "completed",
                   message="w1 to serve from the promoted standby")
        self.stop(worker)


class AsynchronousFailover(FailoverCase):
    """Asynchronous replication: what the primary acknowledged and the standby had not
    received is gone after the promotion. Recorded, not a defect: the price of commits that
    do not wait for the standby."""

    SYNCHRONOUS = False

    def test_the_lag_window_is_lost_and_its_jobs_run_again_under_the_same_tokens(self):
        self.start_pair()
        replicated = self.enqueue("note", 10)
        self.pair.wait_replayed()
        self.pair.detach_standby()  # the lag window opens, and stays open until the failover
        unreplicated = self.enqueue("note", 5)
        worker = self.worker("w1")
        every = [*replicated, *unreplicated]
        wait_until(lambda: all(self.store.get_job(job_id, "").state == "completed" for job_id in every),
                   message="the worker to run every job on the primary")
        first_runs = self.runs()
        self.assertEqual({job_id: [(attempt, token) for attempt, token, _ in first_runs[job_id]] for job_id in every},
                         {job_id: [(1, 1)] for job_id in every})
        self.store.close()

        self.pair.stop_primary("fast")
        self.pair.promote()
        self.store = self.open_store()  # the multi-host URL: the promoted standby now
        # Enqueued and acknowledged on the old primary, never received by the standby: gone.
        self.assertEqual([job.id for job in self.store.reads.list_jobs("", limit=1000) if job.id in unreplicated], [])
        # Their claims and completions lost, the replicated jobs were queued again on the new
        # primary, with the tokens they had before the lag window: each ran a second time,
        # and its second claim handed out the token number of the first, lost, one.
        wait_until(lambda: all(self.store.get_job(job_id, "").state == "completed" for job_id in replicated),
                   message="the worker, reconnected to the promoted standby, to run the replicated jobs again")
        runs = self.runs()
        for job_id in replicated:
            job = self.store.get_job(job_id, "")
            self.assertEqual([(attempt, token) for attempt, token, _ in runs[job_id]], [(1, 1), (1, 1)],
                             f"job {job_id}")
            self.assertEqual((job.attempts, job.lease_token), (1, 1), "the record shows one run, not two")
        print(f"\nfailover figures (asynchronous replication, standby detached): {len(unreplicated)} acknowledged "
              f"enqueues lost; {len(replicated)} acknowledged completions lost, their jobs run again under the "
              f"same token (1) and attempt (1)", file=sys.__stderr__ or sys.stderr, flush=True)
        self.assertIsNone(worker.poll(), f"w1 exited:\n{self.output(worker)}")
        self.stop(worker)


class StandbyHarness(unittest.TestCase):
    """The pair itself: its rules go with a test process that dies unseen."""

    SLOW = True

    def test_rules_removed_when_the_test_process_is_killed(self):
        if (reason := pg_standby.iptables_unavailable()) is not None:
            pg_standby.skip_or_fail(self, reason)
        script = ("import os, signal, sys, pg_standby\n"
                  "pair = pg_standby.StandbyPair(synchronous=False)\n"
                  "pair.vanish_primary()\n"
                  "print(pair.primary.port, pair.primary.directory, pair.standby.directory, flush=True)\n"
                  "os.kill(os.getpid(), signal.SIGKILL)\n")
        tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        done = subprocess.run([sys.executable, "-c", script], cwd=tests, env=child_env(PYTHONPATH=tests),
                              capture_output=True, text=True, timeout=DEADLINE)
        if done.returncode != -signal.SIGKILL:
            pg_standby.skip_or_fail(self, f"the pair could not start: {done.stderr.strip()[-2000:]}")
        port, *directories = done.stdout.split()
        def rules() -> str:
            return subprocess.run(["iptables", "-w", "-S", "INPUT"], capture_output=True, text=True).stdout

        wait_until(lambda: f"--dport {port} " not in rules() and f"--sport {port} " not in rules(),
                   message="the watchdog to remove the rules of the killed process")
        for directory in directories:
            wait_until(lambda: not os.path.exists(directory), message=f"{directory} removed")


if __name__ == "__main__":
    unittest.main()
