"""A PostgreSQL primary and its streaming standby, for failover tests: started, promoted,
stopped or made to vanish, torn down.

Owns ``StandbyPair``: a primary (``wal_level=replica``) and a hot standby copied from it by
``pg_basebackup -R`` through a replication slot, so the primary keeps every WAL segment the
standby has not received yet. Replication is synchronous (``synchronous_standby_names='*'``,
``synchronous_commit=on``: a commit is acknowledged once the standby has flushed it) or
asynchronous (the primary does not wait; what the standby has not received is lost when it
is promoted). Both listen on 127.0.0.1, each on a port of its own, and ``url()`` names them
in one libpq multi-host URL, the primary first, with ``target_session_attrs=read-write``.

Faults: ``stop_primary(mode)`` stops the primary (``fast``: clients are told and the
connections close; ``immediate``: the postmaster kills every backend, as a crash does), and
``vanish_primary()`` makes it disappear silently: iptables drops every packet to and from its
port, so a connection with a statement in flight gets no answer and no reset, as when a host
or its network goes away. ``promote()`` turns the standby into the new primary. The rules are
removed at teardown, at exit, and by a watchdog process if this one dies unseen; the vanished
primary is stopped before them, so nobody reaches the old primary once the rules go.

Reuses ``pg_harness`` for the binaries, the server user, ports, the watchdog and the
``*_test`` rule. Imports only the stdlib at load (psycopg inside functions), nothing from
rowfleet. ``require_pair(test)`` is what tests call: a pair, or a loud skip (a failure under
``ROWFLEET_REQUIRE_PG=1``) where PostgreSQL, ``pg_basebackup``, root or iptables is missing.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import pg_harness
from pg_harness import ADMIN_DATABASE, ENV_REQUIRE, PREFIX_PATTERN, TEST_SUFFIX, Unavailable

SLOT = "rowfleet_standby"
RULE_COMMENT = "rowfleet-test-vanish"
COMMAND_TIMEOUT = pg_harness.COMMAND_TIMEOUT
# The harness's fast settings, but commits wait for their WAL (locally, and on a synchronous
# standby) instead of ``synchronous_commit=off``, which would acknowledge a commit before the
# standby has it and so make a synchronous pair lose what it promised to keep.
PAIR_SETTINGS = tuple(s for s in pg_harness.SERVER_SETTINGS if not s.startswith("synchronous_commit=")) + (
    "synchronous_commit=on",
    "wal_level=replica",
    "max_wal_senders=10",
    "max_replication_slots=10",
    "hot_standby=on",
    # The standby notices a silent primary soon (its walreceiver would otherwise wait 60 s);
    # only its own log cares, the failover is the test's to order.
    "wal_receiver_timeout=5s",
    "wal_sender_timeout=5s",
)
# The standby's own: after promotion it is a primary with no standby of its own, so it must
# not wait for one (its commits would hang).
STANDBY_WAITS_FOR_NONE = "synchronous_standby_names="
SYNCHRONOUS = "synchronous_standby_names=*"
DEADLINE = 60.0


class StandbyPair:
    """A primary and a streaming standby, started now; ``stop()`` tears both down."""

    def __init__(self, synchronous: bool = True) -> None:
        pg_harness._require_psycopg()
        self.synchronous = synchronous
        bindir = pg_harness.find_binaries()
        self.basebackup = find_basebackup(bindir)
        self._rules: list[list[str]] = []
        self._rules_watchdog: subprocess.Popen | None = None
        self._rules_directory = ""
        self.primary = pg_harness._Cluster(bindir, PAIR_SETTINGS + ((SYNCHRONOUS,) if synchronous else ()))
        self.standby = pg_harness._Cluster(bindir, PAIR_SETTINGS + (STANDBY_WAITS_FOR_NONE,))
        atexit.register(self.stop)
        try:
            self.primary.start()
            self._wait_accepting(self.primary)
            self._copy_primary_to_standby()
            self.standby.launch()
            self._wait_accepting(self.standby)
            self._wait_streaming()
        except BaseException:
            self.stop()
            raise

    # --- addresses -----------------------------------------------------------------------

    def url(self, dbname: str, target_session_attrs: str | None = "read-write") -> str:
        """The multi-host URL of ``dbname`` (a ``*_test`` name): the primary, then the
        standby; libpq takes the first that accepts writes (the first that answers, with
        ``target_session_attrs=None``: the parameter left out)."""
        pg_harness.check_test_database(dbname)
        query = "" if target_session_attrs is None else f"?target_session_attrs={target_session_attrs}"
        return f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}/{dbname}{query}"

    def primary_url(self, dbname: str = ADMIN_DATABASE) -> str:
        return _single_url(self.primary.port, dbname)

    def standby_url(self, dbname: str = ADMIN_DATABASE) -> str:
        return _single_url(self.standby.port, dbname)

    def create_database(self, prefix: str = "rowfleet") -> str:
        """A fresh ``PREFIX_<random>_test`` database on the primary, there on the standby
        too when this returns; its multi-host URL."""
        if not PREFIX_PATTERN.match(prefix):
            raise ValueError(f"database prefix {prefix!r} must match {PREFIX_PATTERN.pattern}")
        from psycopg import sql

        name = pg_harness.check_test_database(f"{prefix}_{secrets.token_hex(6)}{TEST_SUFFIX}")
        with pg_harness._connect(self.primary_url()) as conn:
            # As the harness does: from PostgreSQL 15, copying the template's files is faster.
            create = "CREATE DATABASE {} STRATEGY = FILE_COPY" if conn.info.server_version >= 150000 \
                else "CREATE DATABASE {}"
            conn.execute(sql.SQL(create).format(sql.Identifier(name)))
        self.wait_replayed()
        return self.url(name)

    # --- reading either server -----------------------------------------------------------

    def query(self, url: str, sql: str, params: object = None) -> list[tuple]:
        """``sql``'s rows on the server (and ``*_test`` database) ``url`` names, autocommit."""
        pg_harness.check_test_database(pg_harness.database_of(url))
        with pg_harness._connect(url) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def session(self, url: str) -> "Session":
        """A connection of the test's own to the ``*_test`` database ``url`` names, kept open
        for repeated reads (``Session.rows``); the caller closes it."""
        return Session(url)

    def wait_replayed(self, timeout: float = DEADLINE) -> None:
        """Wait until the standby has replayed everything the primary has written so far."""
        [(target,)] = self._admin(self.primary, "SELECT pg_current_wal_lsn()::text")
        _wait(lambda: self._admin(self.standby, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,))[0][0],
              timeout, "the standby to replay the primary's WAL")

    def standby_state(self) -> str | None:
        """The primary's view of the standby: ``sync``, ``async``, or None when not streaming."""
        rows = self._admin(self.primary, "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'")
        return rows[0][0] if rows else None

    # --- faults and the failover ---------------------------------------------------------

    def stop_primary(self, mode: str = "fast") -> None:
        """Stop the primary: ``fast`` (sessions told and closed, a shutdown checkpoint sent to
        the standby) or ``immediate`` (every backend killed, no checkpoint, as a crash)."""
        if mode not in ("fast", "immediate"):
            raise ValueError(f"mode must be 'fast' or 'immediate', got {mode!r}")
        self.primary.run(self.primary.pg_ctl("stop", "-m", mode, "-w", "-t", str(COMMAND_TIMEOUT)),
                         f"pg_ctl stop -m {mode} (the primary)")

    def vanish_primary(self) -> None:
        """Drop every packet to and from the primary's port, silently: connections to it get
        neither answers nor resets, new ones are never accepted nor refused. The primary
        itself runs on, as a host cut off by its network does."""
        port = str(self.primary.port)
        rules = [["-p", "tcp", "--dport", port, "-m", "comment", "--comment", RULE_COMMENT, "-j", "DROP"],
                 ["-p", "tcp", "--sport", port, "-m", "comment", "--comment", RULE_COMMENT, "-j", "DROP"]]
        self._start_rules_watchdog(rules)
        for rule in rules:
            _iptables("-I", "INPUT", *rule)
            self._rules.append(rule)

    def detach_standby(self) -> None:
        """Stop the standby's streaming (its ``primary_conninfo`` emptied, the setting
        reloaded): from now on nothing the primary commits reaches it, a standby lagging
        without bound. An asynchronous primary goes on acknowledging every commit; a
        synchronous one would make each commit wait, so only an asynchronous pair may."""
        if self.synchronous:
            raise ValueError("a synchronous primary would wait for its detached standby forever")
        self._admin(self.standby, "ALTER SYSTEM SET primary_conninfo = ''")
        self._admin(self.standby, "SELECT pg_reload_conf()")
        _wait(lambda: self.standby_state() is None, DEADLINE, "the standby to stop streaming")

    def promote(self, timeout: float = DEADLINE) -> None:
        """Promote the standby and wait until it takes writes."""
        self.standby.run(self.standby.pg_ctl("promote", "-w", "-t", str(int(timeout))), "pg_ctl promote")
        _wait(lambda: not self._admin(self.standby, "SELECT pg_is_in_recovery()")[0][0], timeout,
              "the promoted standby to leave recovery")

    # --- teardown ------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop both servers and remove the rules, the vanished primary first (so nobody
        reaches it again once its packets flow). Safe to call twice; a forked child's call
        does nothing."""
        if os.getpid() != self.primary.owner_pid:
            return
        self.primary.stop()
        self._remove_rules()
        self.standby.stop()

    def _remove_rules(self) -> None:
        while self._rules:
            rule = self._rules.pop()
            try:
                _iptables("-D", "INPUT", *rule)
            except Unavailable as exc:  # at exit too: say so, and go on with the rest
                print(f"*** could not remove iptables rule {' '.join(rule)}: {exc} ***",
                      file=sys.__stderr__ or sys.stderr, flush=True)
        if self._rules_watchdog is not None:
            watchdog, self._rules_watchdog = self._rules_watchdog, None
            try:
                watchdog.communicate(b"stopped", timeout=10)
            except (OSError, subprocess.SubprocessError):
                watchdog.kill()
            shutil.rmtree(self._rules_directory, ignore_errors=True)

    def _start_rules_watchdog(self, rules: list[list[str]]) -> None:
        if self._rules_watchdog is not None:
            return
        iptables = shutil.which("iptables") or "iptables"
        deletions = "; ".join(" ".join([iptables, "-w", "-D", "INPUT", *rule]) for rule in rules)
        # The harness's watchdog deletes a directory as it stops: an empty one of the rules' own.
        self._rules_directory = tempfile.mkdtemp(prefix="rowfleet-vanish-")
        self._rules_watchdog = pg_harness.start_watchdog(self._rules_directory, ["/bin/sh", "-c", deletions])

    # --- starting ------------------------------------------------------------------------

    def _copy_primary_to_standby(self) -> None:
        """``pg_basebackup -R``: the primary's files, streamed WAL, a slot that keeps what the
        standby has yet to receive, and the settings that make the copy a standby of it."""
        self.standby.run(self.standby.command(
            self.basebackup, "-D", self.standby.data, "-h", "127.0.0.1", "-p", str(self.primary.port),
            "-U", "postgres", "-R", "-X", "stream", "-C", "-S", SLOT, "--no-sync", "--checkpoint=fast"),
            "pg_basebackup")

    def _wait_accepting(self, cluster: pg_harness._Cluster) -> None:
        pg_harness.wait_accepting(_single_url(cluster.port, ADMIN_DATABASE))

    def _wait_streaming(self) -> None:
        wanted = "sync" if self.synchronous else "async"
        try:
            _wait(lambda: self.standby_state() == wanted, DEADLINE, f"the standby to stream ({wanted})")
        except AssertionError as exc:
            raise Unavailable(f"{exc}{self.standby.log_tail()}") from None

    def _admin(self, cluster: pg_harness._Cluster, sql: str, params: object = None) -> list[tuple]:
        with pg_harness._connect(_single_url(cluster.port, ADMIN_DATABASE)) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []


def find_basebackup(bindir: str) -> str:
    """The pg_basebackup of the server in ``bindir``: beside it, beside the file its
    ``initdb`` links to (a PATH of symlinks), or on PATH. Raises Unavailable."""
    real = os.path.dirname(os.path.realpath(os.path.join(bindir, "initdb")))
    for folder in dict.fromkeys((bindir, real)):
        if os.access(path := os.path.join(folder, "pg_basebackup"), os.X_OK):
            return path
    found = shutil.which("pg_basebackup")
    if found is None:
        raise Unavailable(f"no pg_basebackup beside initdb ({bindir}, {real}) or on PATH: install the "
                          f"PostgreSQL client tools")
    return found


class Session:
    """One autocommit connection to a ``*_test`` database, for a test that reads often."""

    def __init__(self, url: str) -> None:
        pg_harness.check_test_database(pg_harness.database_of(url))
        self._conn = pg_harness._connect(url)

    def rows(self, sql: str, params: object = None) -> list[tuple]:
        cursor = self._conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []

    def value(self, sql: str, params: object = None) -> object:
        """The first column of the first row, or None when there is none."""
        found = self.rows(sql, params)
        return found[0][0] if found else None

    def close(self) -> None:
        self._conn.close()


def _single_url(port: int, dbname: str) -> str:
    return f"postgresql://postgres@127.0.0.1:{port}/{dbname}"


def _iptables(*args: str) -> None:
    """Run ``iptables -w ARGS``; Unavailable with its output when it fails."""
    try:
        done = subprocess.run(["iptables", "-w", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        raise Unavailable(f"iptables could not run: {exc}") from None
    if done.returncode != 0:
        raise Unavailable(f"iptables {' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()}")


def _wait(condition, timeout: float, what: str) -> None:
    give_up = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= give_up:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def iptables_unavailable() -> str | None:
    """Why silent vanishing cannot be staged here, or None when it can: it takes root and a
    working iptables (a rule added and removed on a port nobody uses)."""
    if getattr(os, "geteuid", lambda: 1)() != 0:
        return "making a server vanish takes root (iptables), and this is not root"
    if shutil.which("iptables") is None:
        return "iptables is not installed (not found on PATH)"
    probe = ["-p", "tcp", "--dport", "9", "-m", "comment", "--comment", RULE_COMMENT, "-j", "DROP"]
    try:
        _iptables("-I", "INPUT", *probe)
        _iptables("-D", "INPUT", *probe)
    except Unavailable as exc:
        return str(exc)
    return None


_announced: set[str] = set()


def skip_or_fail(test: unittest.TestCase, reason: str) -> None:
    """Skip ``test`` loudly (one ``*** ... SKIPPED ***`` line per reason on the real stderr),
    or fail it under ``ROWFLEET_REQUIRE_PG=1``."""
    if os.environ.get(ENV_REQUIRE) == "1":
        test.fail(f"a primary and standby required by {ENV_REQUIRE}=1 but unavailable: {reason}")
    if reason not in _announced:
        _announced.add(reason)
        print(f"*** PostgreSQL failover tests SKIPPED: {' '.join(reason.split())} ***",
              file=sys.__stderr__ or sys.stderr, flush=True)
    test.skipTest(reason)


def require_pair(test: unittest.TestCase, synchronous: bool = True, vanishing: bool = False) -> StandbyPair:
    """A started pair, stopped at ``test``'s cleanup, or a loud skip (a failure under
    ``ROWFLEET_REQUIRE_PG=1``); ``vanishing``: the test also needs ``vanish_primary``."""
    if vanishing and (reason := iptables_unavailable()) is not None:
        skip_or_fail(test, reason)
    try:
        pair = StandbyPair(synchronous)
    except Unavailable as exc:
        skip_or_fail(test, str(exc))
    test.addCleanup(pair.stop)
    return pair
