"""The ``/metrics`` endpoint: one scrape of the store as Prometheus text, and the small HTTP
server (stdlib ``http.server.ThreadingHTTPServer``) that answers Prometheus with it.

``scrape(store)`` reads the fleet's snapshot and the store's metrics rows and hands them to
the pure ``rowfleet.metrics``. ``metrics_response(store)`` is the whole answer as
(status, headers, body): 200 with the text, or 503 with one line when the database cannot
be read; a panel server mounts the same function on its own route. ``MetricsHandler``
answers ``GET`` and ``HEAD`` of ``/metrics`` and nothing else (404 for another path, 405
for another method, 401 without the bearer token when one is set), opening a store for
each request and closing it after: an open costs under a millisecond on SQLite and a
new connection (about 10 ms) on PostgreSQL, against a scrape every few seconds at most,
and then no connection outlives its request, crosses threads or outlives a server restart. ``serve(config, bind, port, stop)`` runs it until ``stop`` is set.

It binds where it is told (`rowfleet metrics`: 127.0.0.1 by default). The metrics name hosts, queues and tasks, so
binding any other address without a token logs one warning saying that anyone who can
reach the port can read them.

A database error is one line in the response (503) and one line in the log, never a
traceback; a bug is a 500 with one line in the response and its traceback in the log.

Imports the store, the snapshot and the pure metrics; nothing of the command line or the
panel. Below the command line, it reads no environment: the token is an argument.
"""

from __future__ import annotations

import hmac
import http.server
import ipaddress
import logging
import socket
import socketserver
import sys
import threading
from typing import Any, Callable
from urllib.parse import urlsplit

from rowfleet import config as configuration
from rowfleet import metrics, names
from rowfleet.errors import ConfigError, RowfleetError
from rowfleet.job import QUEUED
from rowfleet.snapshot import snapshot
from rowfleet.store import Store, open_store

log = logging.getLogger("rowfleet.metrics")

PATH = "/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TEXT = "text/plain; charset=utf-8"
ALLOWED = "GET, HEAD"
REQUEST_TIMEOUT = 30.0  # seconds a connection may take to send its request; a stalled one ends
TOKEN_MOST = 4096
# What a bearer token may hold (RFC 6750's b64token): so it can travel in a header as given.
TOKEN_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=")

Headers = list[tuple[str, str]]


def scrape(store: Store) -> str:
    """The Prometheus text of ``store`` now: the fleet's snapshot, then the tallies, the
    oldest job of each queue that has queued jobs, and each host's newest sample."""
    fleet = snapshot(store)
    queued = sorted({(count.project, count.queue) for count in fleet.counts if count.state == QUEUED and count.n})
    return metrics.exposition(fleet, store.metrics_rows(queues=queued))


def metrics_response(store: Store) -> tuple[int, Headers, bytes]:
    """The answer to a scrape of ``store``: 200 with the text, or 503 with one line when the
    database cannot be read (its schema missing or old, the file broken, the server away);
    the cause is logged as one line."""
    try:
        store.require_schema()
        text = scrape(store)
    except RowfleetError as exc:
        return unavailable(exc)
    return 200, [("Content-Type", CONTENT_TYPE)], text.encode("utf-8", "replace")


def unavailable(exc: RowfleetError) -> tuple[int, Headers, bytes]:
    """A 503 for a database error: one line in the response and one in the log. The
    response names no path or server (the log does), since anyone who reaches the port
    reads it."""
    log.warning("metrics scrape failed: %s", one_line(exc))
    return plain(503, "the database cannot be read now; the exporter's log says why")


def plain(status: int, line: str, headers: Headers = ()) -> tuple[int, Headers, bytes]:
    """An answer of one line of text."""
    return status, [("Content-Type", TEXT), *headers], f"{line}\n".encode("utf-8")


def one_line(exc: BaseException) -> str:
    """An exception's message on one line.

    >>> one_line(ValueError("no\\n  such   file"))
    'no such file'
    """
    return " ".join(str(exc).split()) or type(exc).__name__


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries the bearer ``token`` (always, without a
    token). The scheme's case does not matter; the token is compared in constant time.

    >>> authorized("Bearer s3cret", "s3cret"), authorized("bearer s3cret", "s3cret"), authorized(None, None)
    (True, True, True)
    >>> authorized("Bearer s3cre", "s3cret"), authorized(None, "s3cret"), authorized("Basic s3cret", "s3cret")
    (False, False, False)
    """
    if token is None:
        return True
    scheme, _, given = (header or "").strip().partition(" ")
    # http.server decodes headers as Latin-1, so this gives back the bytes that were sent.
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode("latin-1", "replace"),
                                                             token.encode("ascii"))


def check_token(what: str, token: str | None) -> str | None:
    """A bearer token as given, or ``ConfigError``: letters, digits and ``-._~+/=`` only
    (what a header carries unchanged), at most ``TOKEN_MOST``; None or "" is no token.

    >>> check_token("--token", "k3y-_.~+/="), check_token("--token", "")
    ('k3y-_.~+/=', None)
    """
    if not token:
        return None
    if len(token) > TOKEN_MOST or not set(token) <= TOKEN_CHARACTERS:
        raise ConfigError(f"{what} must be letters, digits and -._~+/= only (at most {TOKEN_MOST}), "
                          f"e.g. the output of `openssl rand -hex 32`")
    return token


def loopback(bind: str) -> bool:
    """Whether ``bind`` is reachable from this machine only.

    >>> loopback("127.0.0.1"), loopback("::1"), loopback("localhost"), loopback("0.0.0.0"), loopback("box")
    (True, True, True, False, False)
    """
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


class MetricsHandler(http.server.BaseHTTPRequestHandler):
    """Answers ``GET`` and ``HEAD`` of ``/metrics`` (a query string is ignored) from a store
    opened for the request; every answer has a body of its own, never http.server's page."""

    server: "MetricsServer"
    timeout = REQUEST_TIMEOUT
    server_version = "rowfleet-metrics"

    def version_string(self) -> str:
        return self.server_version  # not the Python version too

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def __getattr__(self, name: str) -> Any:
        # http.server answers a method it finds no do_<METHOD> for with 501; every method
        # but GET and HEAD is a method this resource does not allow.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        if self._refused():
            return
        self._send(*plain(405, f"{self.command} is not allowed: only {ALLOWED}", [("Allow", ALLOWED)]))

    def _answer(self, send_body: bool) -> None:
        if self._refused():
            return
        if urlsplit(self.path).path != PATH:
            self._send(*plain(404, f"not found: metrics are at {PATH}"), send_body=send_body)
            return
        self._send(*self.server.respond(), send_body=send_body)

    def _refused(self) -> bool:
        """Answer 401 and say so, when the request lacks the token."""
        if authorized(self.headers.get("Authorization"), self.server.token):
            return False
        self._send(*plain(401, "a bearer token is required: Authorization: Bearer <token>",
                          [("WWW-Authenticate", 'Bearer realm="rowfleet metrics"')]),
                   send_body=self.command != "HEAD")
        return True

    def _send(self, status: int, headers: Headers, body: bytes, send_body: bool = True) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, a header too long) as one
        line of text, like every other answer."""
        self.close_connection = True
        line = " ".join((message or self.responses.get(code, ("error",))[0]).split())
        self._send(*plain(code, line), send_body=self.command != "HEAD" and code >= 200 and code not in (204, 304))

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        log.debug("%s %s", self.address_string(), format % args)


class MetricsServer(http.server.ThreadingHTTPServer):
    """The HTTP server of ``/metrics``: ``opener`` gives a store per request (closed after),
    ``token`` is the bearer token every request needs (None: none)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], opener: Callable[[], Store], token: str | None = None) -> None:
        self.opener = opener
        self.token = token
        self.address_family = _family(address[0])
        super().__init__(address, MetricsHandler)

    def server_bind(self) -> None:
        # HTTPServer would look its address's name up (socket.getfqdn): a DNS wait for nothing.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints a traceback to stderr for any error: a connection that breaks
        # (a client gone mid-answer) is one debug line; anything else is a bug, logged whole.
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            log.debug("connection from %s ended: %s", client_address[0], one_line(error))
        else:
            log.error("metrics request from %s failed", client_address[0], exc_info=True)

    def respond(self) -> tuple[int, Headers, bytes]:
        """A scrape with a store of its own: 503 when it cannot be opened either."""
        try:
            store = self.opener()
        except RowfleetError as exc:
            return unavailable(exc)
        try:
            return metrics_response(store)
        except Exception:
            log.exception("metrics scrape failed")  # a bug: its traceback, in the log only
            return plain(500, "internal error; the exporter's log says why")
        finally:
            store.close()

    @property
    def url(self) -> str:
        """Where the metrics are served, as Prometheus' target would name them."""
        host, port = self.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}{PATH}"


def make_server(config: configuration.Config, bind: str, port: int,
                token: str | None = None) -> MetricsServer:
    """A server of ``config``'s database on ``bind``:``port`` (0: a free one), listening but
    not yet serving; ``ConfigError`` when it cannot listen there (the port taken, no such
    address). Warns once when the address is reachable from elsewhere and no token is set."""
    token = check_token("the metrics token", token)
    try:
        server = MetricsServer((bind, port), lambda: open_store(config), token)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {names.shown(bind)} port {port}: {exc.strerror or one_line(exc)} "
                          f"(choose another --port or --bind)") from None
    if not loopback(bind) and token is None:
        log.warning("metrics on %s:%d can be read by anyone who can reach it (host, queue and task names): "
                    "set a token (--token or ROWFLEET_METRICS_TOKEN) or bind 127.0.0.1", bind, port)
    return server


def serve(config: configuration.Config, bind: str, port: int, stop: threading.Event, *, token: str | None = None,
          listening: Callable[[str], None] | None = None) -> None:
    """Serve ``/metrics`` of ``config``'s database on ``bind``:``port`` until ``stop`` is set;
    ``listening`` is told the URL once the server listens."""
    server = make_server(config, bind, port, token)
    worker = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, name="metrics-http")
    try:
        worker.start()
        if listening is not None:
            listening(server.url)
        stop.wait()
    finally:
        server.shutdown()
        worker.join()
        server.server_close()


def _family(host: str) -> socket.AddressFamily:
    """The address family a bind address needs (an IPv6 one, ``::``, binds AF_INET6)."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET
