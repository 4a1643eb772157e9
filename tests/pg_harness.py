"""A throwaway PostgreSQL server for the test suite: found, started, handed out, torn down.

Owns the one PostgreSQL server a test process uses. ``server()`` starts it on first call
(``initdb`` into a fresh temp dir, ``pg_ctl start`` on a free loopback port, a private
unix-socket dir) or, when ``ROWFLEET_TEST_PG`` names one, uses that server instead.
``require_pg()`` is what tests call: the server, or a skip (a failure under
``ROWFLEET_REQUIRE_PG=1``). Every database it creates, connects to or drops must be
named ``*_test``, so that a mistyped ``ROWFLEET_TEST_PG`` cannot touch real data.

A started server dies with the test process: at exit (atexit), and through a small
watchdog process for deaths atexit never sees (SIGKILL, SIGTERM). The watchdog matters
because ``pg_ctl`` puts the postmaster in a session of its own, so nothing else would.

Imports only the stdlib when loaded: psycopg is imported inside the functions that talk
to the server (tools/check_deps.py allows that only in files named ``*pg*``), so a
machine without it gets skips, not import errors. Imports nothing from rowfleet at load
(the TestCase mixins import it when a test asks them for a Config or a connection): it
serves every backend's tests and must not depend on the code under test.
"""

from __future__ import annotations

import atexit
import glob
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from urllib.parse import quote, urlsplit, urlunsplit

ENV_URL = "ROWFLEET_TEST_PG"
ENV_REQUIRE = "ROWFLEET_REQUIRE_PG"
TEST_SUFFIX = "_test"
SERVER_USER = "postgres"  # initdb and postgres refuse to run as root; this user runs them
ADMIN_DATABASE = "postgres"
BINARIES = ("initdb", "pg_ctl", "postgres")
BINARY_GLOBS = ("/usr/lib/postgresql/*/bin",)
# Generous on a loaded 2-core machine; a healthy start takes about a second.
START_TIMEOUT = 60
COMMAND_TIMEOUT = 120
CONNECT_TIMEOUT = 10
PORT_ATTEMPTS = 3  # a free port found by binding port 0 can be taken before postgres binds it
SERVER_SETTINGS = (
    "listen_addresses=127.0.0.1",
    "fsync=off",
    "full_page_writes=off",
    "synchronous_commit=off",
    "max_connections=200",
)
# A server as users run it: every commit waits for its WAL to reach the disk (the bench's
# stock-durability rows).
STOCK_SETTINGS = ("listen_addresses=127.0.0.1", "max_connections=200")
LOG_TAIL_LINES = 15
PREFIX_PATTERN = re.compile(r"[a-z_][a-z0-9_]{0,39}\Z")
INSTALL_PSYCOPG = 'pip install "psycopg[binary]>=3.1"'

# The watchdog: waits for its stdin to close. "stopped" first means the test process
# stopped the server itself; a bare EOF means it died, so stop the server and tidy up.
WATCHDOG_SOURCE = """\
import shutil, subprocess, sys
directory, stop_command = sys.argv[1], sys.argv[2:]
if sys.stdin.buffer.read() != b"stopped":
    try:
        subprocess.run(stop_command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60, cwd="/")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
"""


class Unavailable(Exception):
    """PostgreSQL cannot be used here; the message says why (it becomes the skip reason)."""


class UnsafeDatabase(ValueError):
    """Refused: the harness only touches databases whose names end in ``_test``."""


class PostgresRequired(AssertionError):
    """PostgreSQL was required by ROWFLEET_REQUIRE_PG=1 but is unavailable."""


# --- names and URLs ---------------------------------------------------------------


def check_test_database(name: str) -> str:
    """``name`` if it is a test database's name; raise UnsafeDatabase otherwise.

    >>> check_test_database("rowfleet_0a1b2c3d4e5f_test")
    'rowfleet_0a1b2c3d4e5f_test'
    """
    if not name or not name.endswith(TEST_SUFFIX):
        raise UnsafeDatabase(
            f"refusing to use database {name!r}: test databases must be named *{TEST_SUFFIX} "
            f"(set {ENV_URL} to a URL whose database ends in {TEST_SUFFIX})"
        )
    return name


def database_of(url: str) -> str:
    """The database a libpq URL or ``key=value`` string names, as libpq would read it.

    Parsed by psycopg, so a ``?dbname=`` override cannot slip past the ``_test`` check.
    """
    from psycopg.conninfo import conninfo_to_dict

    return str(conninfo_to_dict(url).get("dbname") or "")


def redacted(url: str) -> str:
    """``url`` with any password hidden, for messages.

    >>> redacted("postgresql://ci:s3cret@db:5432/x_test")
    'postgresql://ci:***@db:5432/x_test'
    """
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def with_database(url: str, name: str) -> str:
    """``url`` pointed at database ``name`` (URLs stay URLs, ``key=value`` strings stay so).

    >>> with_database("postgresql://ci@db:5432/ci_test?sslmode=disable", "other_test")
    'postgresql://ci@db:5432/other_test?sslmode=disable'
    """
    if "://" not in url:
        from psycopg.conninfo import make_conninfo

        return make_conninfo(url, dbname=name)
    parts = urlsplit(url)
    query = "&".join(p for p in parts.query.split("&") if p and not p.startswith("dbname="))
    return urlunsplit(parts._replace(path="/" + quote(name, safe=""), query=query))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- finding and running the server binaries ----------------------------------------


def find_binaries(path: str | None = None, patterns: tuple[str, ...] | None = None) -> str:
    """The first folder holding initdb, pg_ctl and postgres: PATH, then the Debian layout.

    ``path`` defaults to $PATH, ``patterns`` to BINARY_GLOBS, whose folders are tried newest
    version first. Raises Unavailable.
    """
    path = os.environ.get("PATH", "") if path is None else path
    patterns = BINARY_GLOBS if patterns is None else patterns
    folders = [p for p in path.split(os.pathsep) if p]
    for pattern in patterns:
        found = glob.glob(pattern)
        folders.extend(sorted(found, key=_version_key, reverse=True))
    for folder in folders:
        if all(os.access(os.path.join(folder, b), os.X_OK) for b in BINARIES):
            return folder
    where = " or ".join(["PATH", *patterns])
    raise Unavailable(
        f"no PostgreSQL server binaries ({', '.join(BINARIES)}) on {where}; "
        f"install the server or set {ENV_URL}"
    )


def _version_key(folder: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", folder)]


def _run_as_server_user() -> tuple[list[str], tuple[int, int] | None]:
    """(command prefix, (uid, gid) to chown to): how to run server commands from here.

    As root, initdb and postgres refuse to run, so they run as the ``postgres`` user.
    """
    if getattr(os, "geteuid", lambda: 1)() != 0:
        return [], None
    import pwd

    try:
        account = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise Unavailable(
            f"running as root and there is no {SERVER_USER!r} user to run PostgreSQL as"
        ) from None
    ids = (account.pw_uid, account.pw_gid)
    runuser = shutil.which("runuser") or _first_executable("/sbin/runuser", "/usr/sbin/runuser")
    if runuser:
        return [runuser, "-u", SERVER_USER, "--"], ids
    su = shutil.which("su") or _first_executable("/bin/su", "/usr/bin/su")
    if su:
        return [su, SERVER_USER, "-s", "/bin/sh", "-c"], ids
    raise Unavailable(f"running as root and neither runuser nor su exists to become {SERVER_USER!r}")


def _first_executable(*paths: str) -> str | None:
    return next((p for p in paths if os.access(p, os.X_OK)), None)


def _temp_parent(as_other_user: bool) -> str:
    """Where to make the server's temp dir: the usual temp dir unless the server can't use it.

    The socket path must stay under the ~107-byte unix limit, and the server user must be
    able to reach the folder when that user is not us.
    """
    base = tempfile.gettempdir()
    reachable = not as_other_user or _traversable_by_all(base)
    if (not reachable or len(base) > 60) and os.path.isdir("/tmp"):
        return "/tmp"
    return base


def _traversable_by_all(folder: str) -> bool:
    folder = os.path.realpath(folder)
    while True:
        if not os.stat(folder).st_mode & 0o001:
            return False
        parent = os.path.dirname(folder)
        if parent == folder:
            return True
        folder = parent


def start_watchdog(directory: str, stop_command: list[str]) -> subprocess.Popen | None:
    """A process that, should this one die without writing ``b"stopped"`` to its stdin and
    closing it, runs ``stop_command`` and deletes ``directory``; None where it cannot start
    (atexit still tidies up after an ordinary exit)."""
    try:
        # Its own session, so the Ctrl-C that kills the test run does not kill it too.
        return subprocess.Popen(
            [sys.executable, "-I", "-c", WATCHDOG_SOURCE, directory, *stop_command],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, cwd="/",
        )
    except OSError:
        return None


class _Cluster:
    """One data directory and the postgres server running on it, owned by this process."""

    def __init__(self, bindir: str, settings: tuple[str, ...] = SERVER_SETTINGS):
        self.bindir = bindir
        self.settings = settings
        self.prefix, ids = _run_as_server_user()
        self.directory = tempfile.mkdtemp(prefix="rowfleet-pg-", dir=_temp_parent(ids is not None))
        self.data = os.path.join(self.directory, "data")
        self.sockets = os.path.join(self.directory, "sockets")
        self.log = os.path.join(self.directory, "postgres.log")
        try:
            os.mkdir(self.sockets, 0o700)
            if ids is not None:
                for folder in (self.directory, self.sockets):
                    os.chown(folder, *ids)
        except OSError as exc:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise Unavailable(f"could not prepare {self.directory} for the server: {exc}") from None
        self.port = 0
        self.owner_pid = os.getpid()
        self.stopped = False
        self.watchdog = self._start_watchdog()

    def command(self, *argv: str) -> list[str]:
        """``argv`` (a server binary and its arguments) as run by the server user."""
        argv = (os.path.join(self.bindir, argv[0]),) + argv[1:]
        if self.prefix and self.prefix[-1] == "-c":  # su takes one shell string
            return self.prefix + [shlex.join(argv)]
        return self.prefix + list(argv)

    def pg_ctl(self, action: str, *extra: str) -> list[str]:
        return self.command("pg_ctl", action, "-D", self.data, *extra)

    def run(self, argv: list[str], what: str) -> None:
        """Run a server command to completion; raise Unavailable with its output on failure."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        try:
            done = subprocess.run(
                argv, cwd=self.directory, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                errors="replace", timeout=COMMAND_TIMEOUT,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise Unavailable(f"{what} could not run: {exc}{self.log_tail()}") from None
        if done.returncode != 0:
            output = done.stdout.strip()[-2000:]
            raise Unavailable(
                f"{what} failed (exit {done.returncode}): {output}{self.log_tail()}"
            )

    def start_options(self) -> str:
        settings = " ".join(f"-c {shlex.quote(s)}" for s in self.settings)
        return f"-k {shlex.quote(self.sockets)} -p {self.port} {settings}"

    def start(self) -> None:
        """initdb, then start on a free port, trying another port if one was taken."""
        self.run(
            self.command("initdb", "-D", self.data, "-A", "trust", "-U", "postgres",
                         "--no-sync", "-E", "UTF8", "--locale=C"),
            "initdb",
        )
        self.launch()

    def launch(self) -> None:
        """Start the server on the data directory already there (made by initdb, or copied
        from another server by pg_basebackup) on a free port, trying another if one was taken."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.port = free_port()
            try:
                self.run(self.pg_ctl("start", *self.wait_options()), "pg_ctl start")
                return
            except Unavailable as exc:
                if attempt == PORT_ATTEMPTS or "could not bind" not in str(exc):
                    raise

    def wait_options(self) -> tuple[str, ...]:
        return ("-w", "-t", str(START_TIMEOUT), "-l", self.log, "-o", self.start_options())

    def restart(self, mode: str = "fast") -> None:
        self.run(self.pg_ctl("restart", "-m", mode, *self.wait_options()), "pg_ctl restart")

    def stop(self) -> None:
        """Stop the server at once and delete its files; a forked child never does."""
        if self.stopped or os.getpid() != self.owner_pid:
            return
        self.stopped = True
        try:
            self.run(self.pg_ctl("stop", "-m", "immediate", "-w", "-t", "30"), "pg_ctl stop")
        except Unavailable:
            self._kill_postmaster()  # not started, already gone, or pg_ctl stuck
        shutil.rmtree(self.directory, ignore_errors=True)
        if self.watchdog is not None:
            try:
                self.watchdog.communicate(b"stopped", timeout=10)
            except (OSError, subprocess.SubprocessError):
                self.watchdog.kill()

    def _kill_postmaster(self) -> None:
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as handle:
                os.kill(int(handle.readline()), signal.SIGKILL)
        except (OSError, ValueError):
            pass  # no pid file, or no such process: nothing left to kill

    def _start_watchdog(self) -> subprocess.Popen | None:
        return start_watchdog(self.directory, self.pg_ctl("stop", "-m", "immediate", "-w", "-t", "30"))

    def log_tail(self) -> str:
        try:
            with open(self.log, errors="replace") as handle:
                lines = handle.read().splitlines()[-LOG_TAIL_LINES:]
        except OSError:
            return ""
        return f"\n--- last lines of {self.log} ---\n" + "\n".join(lines) if lines else ""


# --- the server handed to tests ---------------------------------------------------


class PgServer:
    """A PostgreSQL server tests may create ``*_test`` databases on.

    Local (started here, ``directory`` is its temp dir) or external (``ROWFLEET_TEST_PG``,
    ``directory`` is None; ``restart()`` then skips the test).
    """

    def __init__(self, base_url: str, cluster: _Cluster | None = None):
        self.base_url = base_url
        self._cluster = cluster
        self._created: set[str] = set()
        self._lock = threading.Lock()
        self._owner_pid = os.getpid()

    @property
    def directory(self) -> str | None:
        return self._cluster.directory if self._cluster else None

    @property
    def external(self) -> bool:
        return self._cluster is None

    def __repr__(self) -> str:
        return f"PgServer({redacted(self.base_url)!r})"

    def url(self, dbname: str) -> str:
        """The URL of database ``dbname`` (which must end in ``_test``) on this server."""
        return with_database(self.base_url, check_test_database(dbname))

    def admin_url(self) -> str:
        """Where CREATE/DROP DATABASE run: ``postgres`` locally, the given database otherwise."""
        return self.base_url if self.external else with_database(self.base_url, ADMIN_DATABASE)

    def create_database(self, prefix: str = "rowfleet") -> str:
        """Create a fresh, empty database ``PREFIX_<random>_test``; return its URL."""
        if not PREFIX_PATTERN.match(prefix):
            raise ValueError(f"database prefix {prefix!r} must match {PREFIX_PATTERN.pattern}")
        from psycopg import sql

        name = check_test_database(f"{prefix}_{secrets.token_hex(6)}{TEST_SUFFIX}")
        with _connect(self.admin_url()) as conn:
            # From PostgreSQL 15, WAL_LOG (the default) logs every block of the template;
            # copying its files is about ten times faster for an empty database.
            create = "CREATE DATABASE {} STRATEGY = FILE_COPY" if conn.info.server_version >= 150000 \
                else "CREATE DATABASE {}"
            conn.execute(sql.SQL(create).format(sql.Identifier(name)))
        with self._lock:
            self._created.add(name)
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the ``*_test`` database ``url`` names, disconnecting anyone still in it."""
        from psycopg import sql

        name = check_test_database(database_of(url))
        with _connect(self.admin_url()) as conn:
            if conn.info.server_version >= 130000:
                drop = "DROP DATABASE IF EXISTS {} WITH (FORCE)"
            else:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()", (name,),
                )
                drop = "DROP DATABASE IF EXISTS {}"
            conn.execute(sql.SQL(drop).format(sql.Identifier(name)))
        with self._lock:
            self._created.discard(name)

    def open_transactions(self, url: str) -> int:
        """How many other sessions of the ``*_test`` database at ``url`` are inside a transaction."""
        return self.psql(url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                              "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL")[0][0]

    def psql(self, url: str, sql: str, params: object = None) -> list[tuple]:
        """Run ``sql`` on the ``*_test`` database at ``url`` (autocommit); return its rows.

        Without ``params`` several ``;``-separated statements may run at once; the rows are
        those of the last statement (``[]`` when it returns none).
        """
        check_test_database(database_of(url))
        with _connect(url) as conn:
            cursor = conn.execute(sql, params) if params is not None else conn.execute(sql)
            while True:
                rows = cursor.fetchall() if cursor.description else []
                if not cursor.nextset():
                    return rows

    def restart(self, mode: str = "fast") -> None:
        """Restart the server (``pg_ctl restart -m MODE``: ``fast``, or ``immediate``, which
        kills every backend without a checkpoint, as a crash does, so the server replays its
        WAL) and wait until it accepts connections.

        Every open connection breaks, as in a real database restart.
        """
        if self._cluster is None:
            raise unittest.SkipTest("cannot restart an external server")
        try:
            self._cluster.restart(mode)
            wait_accepting(self.admin_url())
        except Unavailable as exc:
            raise RuntimeError(f"PostgreSQL did not come back after a restart: {exc}") from None

    def stop(self) -> None:
        """Stop a local server and delete its files; on an external one, drop what we created.

        The next ``server()`` call starts a fresh server. A forked child's call (its
        inherited atexit) does nothing: the server belongs to the process that made it.
        """
        if os.getpid() != self._owner_pid:
            return
        _forget(self)
        if self._cluster is not None:
            self._cluster.stop()
            return
        with self._lock:
            created, self._created = sorted(self._created), set()
        for name in created:
            try:
                self.drop_database(self.url(name))
            except Exception:  # best effort at exit: the server may be gone already
                pass


def _connect(url: str):
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)


def wait_accepting(url: str, timeout: float = START_TIMEOUT) -> None:
    """Wait until ``SELECT 1`` works on ``url``; raise Unavailable at the deadline."""
    import psycopg

    give_up = time.monotonic() + timeout
    while True:
        try:
            with _connect(url) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError as exc:
            if time.monotonic() >= give_up:
                raise Unavailable(f"{redacted(url)} does not accept connections: {exc}") from None
        time.sleep(0.05)


def start_local(settings: tuple[str, ...] = SERVER_SETTINGS) -> PgServer:
    """Start a new private server (not the shared one) with ``settings`` (the fast test ones,
    or ``STOCK_SETTINGS``); raise Unavailable if it can't be done.

    The caller owns it and should ``stop()`` it; it is also stopped at exit.
    """
    _require_psycopg()
    cluster = _Cluster(find_binaries(), settings)
    atexit.register(cluster.stop)
    try:
        cluster.start()
        found = PgServer(f"postgresql://postgres@127.0.0.1:{cluster.port}/{ADMIN_DATABASE}", cluster)
        wait_accepting(found.admin_url())
    except BaseException:
        cluster.stop()
        raise
    return found


def connect_external(url: str) -> PgServer:
    """The server at ``url`` (its database must end in ``_test``); raise Unavailable if down."""
    _require_psycopg()
    check_test_database(database_of(url))
    found = PgServer(url)
    wait_accepting(url, timeout=CONNECT_TIMEOUT)
    atexit.register(found.stop)
    return found


def _require_psycopg() -> None:
    try:
        import psycopg  # noqa: F401  (only whether it imports)
    except ImportError as exc:
        raise Unavailable(f"psycopg is not importable ({exc}); {INSTALL_PSYCOPG}") from None


# --- the process-wide server ------------------------------------------------------

_state_lock = threading.RLock()
_server: PgServer | None = None
_reason: str | None = None
_skip_announced = False


def server() -> PgServer | None:
    """The process-wide server, started on first call; None if PostgreSQL is unavailable.

    Uses ``ROWFLEET_TEST_PG`` when set (raising UnsafeDatabase if its database is not
    ``*_test``). A failed start is remembered, so later calls answer at once.
    """
    global _server, _reason
    with _state_lock:
        if _server is None and _reason is None:
            external = os.environ.get(ENV_URL)
            try:
                _server = connect_external(external) if external else start_local()
            except Unavailable as exc:
                _reason = (f"{ENV_URL} is set, but " if external else "") + str(exc)
            except (OSError, subprocess.SubprocessError) as exc:
                _reason = f"could not start PostgreSQL: {exc!r}"
        return _server


def unavailable_reason() -> str | None:
    """Why ``server()`` returned None, or None if it has not (or has not been asked yet)."""
    with _state_lock:
        return _reason


def _forget(stopped: PgServer) -> None:
    global _server
    with _state_lock:
        if _server is stopped:
            _server = None


def require_pg(testcase_or_none: unittest.TestCase | None = None) -> PgServer:
    """The server, or skip the test (fail it, under ``ROWFLEET_REQUIRE_PG=1``).

    Pass the TestCase when calling from a test method so its ``skipTest``/``fail`` are
    used; from ``setUpClass`` or ``setUpModule`` call it bare.
    """
    found = server()
    if found is not None:
        return found
    reason = unavailable_reason() or "unknown reason"
    testcase = testcase_or_none if isinstance(testcase_or_none, unittest.TestCase) else None
    if os.environ.get(ENV_REQUIRE) == "1":
        message = f"PostgreSQL required by {ENV_REQUIRE}=1 but unavailable: {reason}"
        if testcase is not None:
            testcase.fail(message)
        raise PostgresRequired(message)
    _announce_skip(reason)
    if testcase is not None:
        testcase.skipTest(reason)
    raise unittest.SkipTest(reason)


class PostgresServerCase:
    """A TestCase mixin: the harness's server as ``self.pg`` (skipped loudly without one),
    and ``empty_database()``, a fresh ``*_test`` database's URL, dropped at cleanup."""

    # A server to start and a database per test: the full suite runs these, ``--quick``
    # (the SQLite and pure tests of the same contracts) leaves them out.
    SLOW = True

    def setUp(self) -> None:
        self.pg = require_pg(self)
        super().setUp()

    def empty_database(self) -> str:
        url = self.pg.create_database()
        self.addCleanup(self.pg.drop_database, url)
        return url

    def await_rollbacks(self) -> None:
        """After a client process died: wait until the server has rolled its transaction back
        (``self.db`` names the database). It does so when it sees the connection close, a
        moment after the exit; until then the dead client's row locks hold (a recovery's
        SKIP LOCKED claim passes its jobs by, a lock on a row makes others wait) and what it
        wrote is not yet undone."""
        from support import wait_until

        wait_until(lambda: not self.pg.open_transactions(self.db),
                   message="the server to roll back the dead client's transaction")


class PostgresDatabaseCase(PostgresServerCase):
    """Also a database made before the test (``self.url``), with ``config()`` naming it and
    ``caller_connection()``, a psycopg connection of the application's own to it."""

    def setUp(self) -> None:
        self.pg = require_pg(self)
        self.url = self.empty_database()
        super().setUp()

    def config(self, **settings: object):
        from rowfleet.config import Config  # rowfleet only when a test asks for it

        return Config(db=self.url, **settings)

    def caller_connection(self):
        from rowfleet.store.postgres import driver

        return driver().connect(self.url)


def rows_read(node: dict) -> int:
    """Rows every scan of an EXPLAIN (ANALYZE, FORMAT JSON) plan produced or filtered out,
    over all its loops: what a statement read, to hold a plan test to."""
    own = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * node.get("Actual Loops", 1) \
        if "Scan" in node["Node Type"] else 0
    return own + sum(rows_read(child) for child in node.get("Plans", ()))


def _announce_skip(reason: str) -> None:
    global _skip_announced
    with _state_lock:
        if _skip_announced:
            return
        _skip_announced = True
    # The real stderr: the test runner buffers sys.stderr and drops it for skipped tests.
    stream = sys.__stderr__ or sys.stderr
    one_line = " ".join(reason.split())
    print(f"*** PostgreSQL tests SKIPPED: {one_line} ***", file=stream, flush=True)
