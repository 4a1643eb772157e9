"""A throwaway PgBouncer in front of the test PostgreSQL server: started, handed out, torn down.

``start(server, pool_mode)`` runs Debian's ``pgbouncer`` in the foreground on a free
loopback port, in ``transaction`` or ``session`` pooling mode, in front of the server
``pg_harness`` started (any database name maps to the same name on the server). Its ini,
user list and log live in a temp dir of their own. As root it runs as the ``postgres``
user (PgBouncer refuses to run as root): the ini's ``user`` setting drops to it.

In transaction mode the pool is small on purpose (``POOL_SIZE``: server connections per
database and user): clients outnumber server connections, so one client's consecutive
transactions land on different server connections, as they do under load in production;
whatever a client left on a server connection (a prepared statement, a session setting, a
LISTEN) is then missing, or someone else's, on its next transaction. In session mode each
client holds a server connection from login to logout, so the pool holds every client.

A PgBouncer dies with the test process: ``stop()`` at exit (atexit), and ``pg_harness``'s
watchdog process for deaths atexit never sees (SIGKILL), as for the server.

``require_pgbouncer(test)`` is what tests call: the binary's path, or a loud skip (a
failure under ``ROWFLEET_REQUIRE_PGBOUNCER=1``). Imports only the stdlib and the harness
modules beside it; psycopg inside the functions that connect.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
import unittest
from urllib.parse import urlsplit, urlunsplit

from pg_harness import SERVER_USER, PgServer, free_port, start_watchdog, wait_accepting
from support import require_tool

ENV_REQUIRE = "ROWFLEET_REQUIRE_PGBOUNCER"
MODES = ("transaction", "session")
POOL_SIZE = {"transaction": 2, "session": 40}
START_TIMEOUT = 30
PORT_ATTEMPTS = 3
DEBIAN_BINARY = "/usr/sbin/pgbouncer"

def require_pgbouncer(test: unittest.TestCase) -> str:
    """The ``pgbouncer`` binary (PATH, then Debian's /usr/sbin), or skip ``test`` loudly."""
    if os.access(DEBIAN_BINARY, os.X_OK) and shutil.which("pgbouncer") is None:
        return DEBIAN_BINARY
    return require_tool(test, "pgbouncer", ENV_REQUIRE)


def ini_text(mode: str, port: int, server_port: int, directory: str, user: str | None) -> str:
    """PgBouncer's ini: every database passed through to the server on ``server_port``.

    >>> "pool_mode = session" in ini_text("session", 6001, 5432, "/tmp/x", None)
    True
    """
    if mode not in MODES:
        raise ValueError(f"pool mode {mode!r} is not one of {', '.join(MODES)}")
    lines = [
        "[databases]",
        f"* = host=127.0.0.1 port={server_port}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {os.path.join(directory, 'userlist.txt')}",
        f"pool_mode = {mode}",
        f"default_pool_size = {POOL_SIZE[mode]}",
        "max_client_conn = 500",
        f"logfile = {os.path.join(directory, 'pgbouncer.log')}",
        "server_reset_query = DISCARD ALL",
        "ignore_startup_parameters = extra_float_digits",
        f"admin_users = {SERVER_USER}",
    ]
    if user is not None:
        lines.append(f"user = {user}")
    return "\n".join(lines) + "\n"


class PgBouncer:
    """One PgBouncer process in ``mode`` in front of ``server``; ``url(db_url)`` is the URL of
    the same database through it."""

    def __init__(self, binary: str, server: PgServer, mode: str) -> None:
        self.mode = mode
        self.server = server
        self.directory = tempfile.mkdtemp(prefix=f"rowfleet-pgbouncer-{mode}-", dir="/tmp")
        self.process: subprocess.Popen | None = None
        self.watchdog: subprocess.Popen | None = None
        self.port = 0
        self._owner = os.getpid()
        as_user = self._server_user()
        with open(os.path.join(self.directory, "userlist.txt"), "w") as handle:
            handle.write(f'"{SERVER_USER}" ""\n')
        if as_user is not None:
            for name in ("", "userlist.txt"):
                os.chown(os.path.join(self.directory, name), *as_user)
        server_port = urlsplit(server.base_url).port
        atexit.register(self.stop)
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.port = free_port()
            ini = os.path.join(self.directory, "pgbouncer.ini")
            with open(ini, "w") as handle:
                handle.write(ini_text(mode, self.port, server_port, self.directory,
                                      SERVER_USER if as_user is not None else None))
            self.process = subprocess.Popen([binary, ini], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, cwd=self.directory)
            # Kills PgBouncer (and deletes its folder) should this process die unseen by atexit.
            self.watchdog = start_watchdog(self.directory, ["kill", "-KILL", str(self.process.pid)])
            try:
                self._await_ready()
                return
            except RuntimeError:
                self.stop(remove=False)
                if attempt == PORT_ATTEMPTS or "bind" not in self.log_tail():
                    raise
        raise AssertionError("unreachable")

    @staticmethod
    def _server_user() -> tuple[int, int] | None:
        if os.geteuid() != 0:
            return None
        import pwd

        account = pwd.getpwnam(SERVER_USER)
        return account.pw_uid, account.pw_gid

    def _await_ready(self) -> None:
        give_up = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited {self.process.returncode}: {self.log_tail()}")
            try:
                wait_accepting(self.url(self.server.admin_url()), timeout=1)
                return
            except Exception as exc:  # pg_harness.Unavailable: not listening yet
                if time.monotonic() >= give_up:
                    raise RuntimeError(f"pgbouncer did not accept connections: {exc}: {self.log_tail()}") from None
            time.sleep(0.05)

    def url(self, db_url: str) -> str:
        """``db_url`` (a database on the server) reached through this PgBouncer."""
        parts = urlsplit(db_url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(os.path.join(self.directory, "pgbouncer.log"), errors="replace") as handle:
                return "\n".join(handle.read().splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, remove: bool = True) -> None:
        """Stop PgBouncer (its clients' connections break) and, with ``remove``, delete its files."""
        if os.getpid() != self._owner:
            return
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.watchdog is not None:
            try:
                self.watchdog.communicate(b"stopped", timeout=10)
            except (OSError, subprocess.SubprocessError):
                self.watchdog.kill()
            self.watchdog = None
        if remove:
            shutil.rmtree(self.directory, ignore_errors=True)


def start(test: unittest.TestCase, server: PgServer, mode: str) -> PgBouncer:
    """A PgBouncer in ``mode`` in front of ``server`` for ``test`` (stopped at its cleanup),
    or a loud skip where there is no pgbouncer."""
    bouncer = PgBouncer(require_pgbouncer(test), server, mode)
    test.addCleanup(bouncer.stop)
    return bouncer
