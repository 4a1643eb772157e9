"""What rowfleet's two HTTP servers share (``/metrics`` in ``rowfleet.services.exporter``, the panel
in ``rowfleet.panel.server``): the stdlib ``ThreadingHTTPServer`` made quiet and safe, and
the small rules about tokens, addresses and which requests are read at all.

``Server`` binds without a DNS look-up, picks the address family its bind address needs,
and logs a broken connection as one debug line and anything else as a bug, never printing a
traceback to stderr. ``Handler`` answers every request with a body of its own (http.server's
own refusals, a malformed request line or a header too long, too), gives no Python version
in its ``Server`` header, and sends its access log to the debug level.

Before any route sees a request (before a body is read), ``Handler`` checks its head:

* ``Host`` must name this server (``answers_to``), or the answer is a 421 of one line
  saying how to allow a name. 421 Misdirected Request (RFC 9110 15.5.20) says exactly this:
  the request was meant for a server by another name, which this one does not speak for;
  a page on such a name that resolves here (DNS rebinding) reads nothing and changes
  nothing. The names it answers to: ``localhost`` and the address it was bound by (when a
  name) with its own port, any IP address in digits with its own port, and the names the
  operator allows (``allowed_hosts``: ``--allow-host NAME``, ``ROWFLEET_ALLOWED_HOSTS``)
  with any port (a reverse proxy's, an SSH tunnel's). Any IP literal is let in because a
  rebinding page needs a name of the attacker's: a browser that asks ``http://10.0.0.7:PORT``
  sends that address, and a page served from it is that machine's own. A
  request with no ``Host`` is answered when it is HTTP/1.0 (which has none: ``curl -0``,
  old probes; no browser sends one without it) and is a 400 in HTTP/1.1, as RFC 9112 asks;
  two ``Host`` headers are a 400, and so is a target that is not a path (an absolute URL
  names a host of its own).
* One body length: two ``Content-Length`` headers (even equal), one not in ASCII digits,
  or a ``Transfer-Encoding`` (no body here is chunked) are a 400 (RFC 9112 6.3: the shapes
  of request smuggling).
* Time: the head (request line and headers) has ``head_seconds`` in all to arrive and the
  body ``body_seconds`` (each read waits only for what is left of them, so a client that
  drips a header line every few seconds is cut off), else a 408 of one line; a body that
  ends before its length is a 400. Answers are written with ``REQUEST_TIMEOUT`` to go.
* Room: at most ``connections_most`` connections are served at once, each on a thread of
  its own; one past them is answered a 503 of one line and closed, without a thread.

Tokens: ``check_token`` says what a token may hold (what a header or a cookie carries
unchanged), ``same_secret`` compares two in constant time, ``bearer`` reads an
``Authorization: Bearer`` header. ``loopback`` says whether a bind address is reachable
from this machine only.

Imports only ``rowfleet.errors``, ``rowfleet.names`` and ``rowfleet.config`` (the
setting's name in a refusal); nothing of the store, the command line or the pages.
"""

from __future__ import annotations

import hmac
import http.server
import io
import ipaddress
import logging
import re
import socket
import socketserver
import sys
import threading
import time
from typing import Any, Callable, Collection

from rowfleet import names
from rowfleet.config import SETTING
from rowfleet.errors import ConfigError

TEXT = "text/plain; charset=utf-8"
REQUEST_TIMEOUT = 30.0  # seconds an answer may take to be written; a client that stops reading is dropped
HEAD_SECONDS = 10.0     # seconds a request's line and headers have, in all, to arrive
BODY_SECONDS = 10.0     # seconds its body has, once its head is in
CONNECTIONS_MOST = 64   # connections served at once (a thread each); more are turned away
DEFAULT_PORT = 80       # what a Host without a port means (http://)
OWN_NAMES = ("localhost",)
# host[:port] as a Host header gives it (RFC 9110 7.2): an IPv6 address in brackets, or a
# name (letters, digits, '.', '-', '_'), then an optional port of ASCII digits.
_HOST = re.compile(r"(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9._-]+))(?::([0-9]{1,5}))?")
TOKEN_MOST = 4096
# What a token may hold (RFC 6750's b64token): so it can travel in a header or cookie as given.
TOKEN_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=")

Headers = list[tuple[str, str]]
Answer = tuple[int, Headers, bytes]


def plain(status: int, line: str, headers: Headers = ()) -> Answer:
    """An answer of one line of text."""
    return status, [("Content-Type", TEXT), *headers], f"{line}\n".encode("utf-8")


def one_line(exc: BaseException) -> str:
    """An exception's message on one line.

    >>> one_line(ValueError("no\\n  such   file"))
    'no such file'
    """
    return " ".join(str(exc).split()) or type(exc).__name__


def same_secret(given: str | None, secret: str) -> bool:
    """Whether ``given`` is ``secret``, compared in constant time.

    >>> same_secret("s3cret", "s3cret"), same_secret("s3cre", "s3cret"), same_secret(None, "s3cret")
    (True, False, False)
    """
    # http.server decodes headers as Latin-1, so this gives back the bytes that were sent.
    return given is not None and hmac.compare_digest(given.encode("latin-1", "replace"), secret.encode("ascii"))


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header (the scheme's case does not matter).

    >>> bearer("Bearer s3cret"), bearer("bearer  s3cret "), bearer("Basic s3cret"), bearer(None)
    ('s3cret', 's3cret', None, None)
    """
    scheme, _, given = (header or "").strip().partition(" ")
    return given.strip() if scheme.lower() == "bearer" else None


def check_token(what: str, token: str | None) -> str | None:
    """A token as given, or ``ConfigError``: letters, digits and ``-._~+/=`` only (what a
    header carries unchanged), at most ``TOKEN_MOST``; None or "" is no token.

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


def url_host(host: str) -> str:
    """An address as a URL names it (an IPv6 one in brackets).

    >>> url_host("127.0.0.1"), url_host("::1")
    ('127.0.0.1', '[::1]')
    """
    return f"[{host}]" if ":" in host else host


def host_and_port(header: str) -> tuple[str, int | None, bool] | None:
    """A ``Host`` header's name (lower case; an IPv6 address without its brackets), its port
    (None when it gives none) and whether the name is an IP address; None when the header
    is no host[:port] at all.

    >>> host_and_port("LocalHost:8465"), host_and_port("[::1]:8465"), host_and_port("10.0.0.7")
    (('localhost', 8465, False), ('::1', 8465, True), ('10.0.0.7', None, True))
    >>> [host_and_port(bad) for bad in ("", "a b", "[::1", "[box]:1", "h:", "h:99999", "::1", "h:8\u0663")]
    [None, None, None, None, None, None, None, None]
    """
    match = _HOST.fullmatch(header.strip(" \t"))
    if match is None:
        return None
    bracketed, name, port = match.groups()
    if port is not None and int(port) > 65535:
        return None
    if bracketed is not None:
        try:
            ipaddress.IPv6Address(bracketed)
        except ValueError:
            return None
        return bracketed.lower(), None if port is None else int(port), True
    return name.lower(), None if port is None else int(port), _is_ipv4(name)


def answers_to(header: str, port: int, own: Collection[str], allowed: Collection[str]) -> bool | None:
    """Whether a server on ``port`` answers a request whose ``Host`` is ``header``: any IP
    address or one of its ``own`` names with that port (none given: 80), or a name the
    operator ``allowed`` with any port; None when the header is no host[:port] at all.
    Names are compared without case and exactly (``localhost.`` is another name).

    >>> own, allowed = ("localhost",), ("panel.example",)
    >>> [answers_to(h, 8465, own, allowed) for h in ("127.0.0.1:8465", "[::1]:8465", "LOCALHOST:8465",
    ...                                             "10.0.0.7:8465", "panel.example", "panel.example:443")]
    [True, True, True, True, True, True]
    >>> [answers_to(h, 8465, own, allowed) for h in ("rebind.evil.example:8465", "localhost:80", "localhost",
    ...                                             "127.0.0.1:1", "localhost.:8465", "panel.example.evil")]
    [False, False, False, False, False, False]
    >>> answers_to("a b", 8465, own, allowed), answers_to("localhost", 80, own, allowed)
    (None, True)
    """
    parsed = host_and_port(header)
    if parsed is None:
        return None
    name, given, literal = parsed
    if name in allowed:
        return True
    return (literal or name in own) and (DEFAULT_PORT if given is None else given) == port


def content_length(values: list[str]) -> int | None:
    """The body length that a request's ``Content-Length`` headers give (None: none), or
    ``names.InvalidValue``: at most one header, in ASCII digits.

    >>> content_length([]), content_length(["42"])
    (None, 42)
    >>> content_length(["4", "4"])
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: Content-Length must be given once, got ['4', '4']
    """
    if not values:
        return None
    if len(values) > 1:
        raise names.InvalidValue("Content-Length", "given once", values)
    return names.parse_int("Content-Length", values[0].strip(" \t"), least=0)


def chosen_token(flag: str | None, env: str, configured: str) -> str | None:
    """The token a command serves with: its ``--token`` when given, else the setting
    (named by its variable ``env`` in a refusal); checked by ``check_token``.

    >>> chosen_token(None, "ROWFLEET_X_TOKEN", "abc"), chosen_token("def", "ROWFLEET_X_TOKEN", "abc")
    ('abc', 'def')
    """
    return check_token("--token", flag) if flag is not None else check_token(env, configured or None)


def serve_until(server: "Server", stop: threading.Event, name: str, listening: Callable[[str], None] | None,
                url: str) -> None:
    """Serve ``server`` on a thread called ``name`` until ``stop`` is set, then shut it
    down and close it; ``listening`` is told ``url`` once it serves."""
    worker = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, name=name)
    try:
        worker.start()
        if listening is not None:
            listening(url)
        stop.wait()
    finally:
        server.shutdown()
        worker.join()
        server.server_close()


class Refusal(Exception):
    """A request refused while its body is read: ``status`` and one ``line`` saying why."""

    def __init__(self, status: int, line: str) -> None:
        super().__init__(line)
        self.status, self.line = status, line


class Handler(http.server.BaseHTTPRequestHandler):
    """A request handler whose every answer goes through ``send``; ``log`` names its logger.
    Its head is checked (``head_refusal``) before any ``do_`` method runs; a route that
    takes a body reads it with ``body``."""

    server: "Server"
    timeout = REQUEST_TIMEOUT  # of each write; reads wait on the request's deadline instead
    log = logging.getLogger("rowfleet.http")
    # A request line too broken to name a version still gets a status line in its answer
    # (http.server would answer it as HTTP/0.9: the body alone).
    default_request_version = "HTTP/1.0"
    deadline = 0.0             # time.monotonic() by which what is being read must have come
    timed_out = False          # a read met the deadline
    answered = False           # an answer was started
    length: int | None = None  # the body's, from the head

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # reads go through the deadline instead
        self.rfile = io.BufferedReader(_DeadlineReader(self))

    def handle_one_request(self) -> None:
        self.deadline = time.monotonic() + self.server.head_seconds
        self.timed_out = self.answered = False
        self.requestline, self.command, self.request_version = "", "", self.default_request_version
        super().handle_one_request()  # a read past the deadline ends it, as one debug line
        if self.timed_out and not self.answered:
            self.close_connection = True
            try:
                self.send(*self.refusal(408, f"the request did not arrive within {self.server.head_seconds:g} s"))
            except OSError as exc:
                self.log.debug("%s: no answer for a request that timed out: %s", self.address_string(),
                               one_line(exc))

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        refused = self.head_refusal()
        if refused is not None:
            self.send_error(*refused)
            return False
        return True

    def head_refusal(self) -> tuple[int, str] | None:
        """Why this request's head is refused (status and one line), or None: its Host
        names this server, its target is a path, its body length is one and plain."""
        hosts = self.headers.get_all("Host") or []
        if len(hosts) > 1:
            return 400, "refused: more than one Host header"
        if not hosts:
            if self.request_version not in ("HTTP/1.0", "HTTP/0.9"):
                return 400, "refused: an HTTP/1.1 request needs a Host header"
        else:
            answered = answers_to(hosts[0], self.server.server_port, self.server.own_names,
                                  self.server.allowed_hosts)
            if answered is None:
                return 400, f"refused: the Host header {names.shown(hosts[0])} is not a host[:port]"
            if not answered:
                allow = SETTING["allowed_hosts"]
                return 421, (f"refused: this server does not answer to the host {names.shown(hosts[0])} (a page of "
                             f"another name must not reach it); use localhost or an IP address with port "
                             f"{self.server.server_port}, or allow the name with {allow.flag} NAME or {allow.env}")
        if not self.path.startswith("/"):
            return 400, "refused: the request's target must be a path starting with /"
        if self.headers.get_all("Transfer-Encoding"):
            return 400, "refused: a Transfer-Encoding is not accepted; send a body with one Content-Length"
        try:
            self.length = content_length(self.headers.get_all("Content-Length") or [])
        except names.InvalidValue as exc:
            return 400, f"refused: {exc}"
        return None

    def body(self, most: int) -> bytes:
        """The request's body, of the length its head gave, read within ``body_seconds``;
        ``Refusal`` when there is no length (411), it is over ``most`` bytes (413), the body
        does not come in time (408) or ends short (400)."""
        if self.length is None:
            raise Refusal(411, f"a {self.command} needs a Content-Length")
        if self.length > most:
            raise Refusal(413, f"a body may hold at most {most // 1024} KiB" if most >= 1024 else
                          f"a body may hold at most {most} bytes")
        self.deadline = time.monotonic() + self.server.body_seconds
        try:
            body = self.rfile.read(self.length)
        except TimeoutError:
            self.close_connection = True
            raise Refusal(408, f"the body did not arrive within {self.server.body_seconds:g} s") from None
        if len(body) < self.length:
            self.close_connection = True
            raise Refusal(400, f"the body is shorter than its Content-Length ({len(body)} of {self.length} bytes)")
        return body

    def version_string(self) -> str:
        return self.server_version  # not the Python version too

    def send(self, status: int, headers: Headers, body: bytes, send_body: bool = True) -> None:
        self.answered = True
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def refusal(self, code: int, line: str) -> Answer:
        """How this server answers one of http.server's own refusals; one line of text here."""
        return plain(code, line)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, a header too long) in this
        server's own form, like every other answer."""
        self.close_connection = True
        line = " ".join((message or self.responses.get(code, ("error",))[0]).split())
        self.send(*self.refusal(code, line),
                  send_body=self.command != "HEAD" and code >= 200 and code not in (204, 304))

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        self.log.debug("%s %s", self.address_string(), format % args)


class _DeadlineReader(io.RawIOBase):
    """A connection's reading side, each read waiting only for what is left of its
    handler's deadline (the socket's own timeout is per read, which a client that drips a
    byte at a time renews for ever)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connection: socket.socket = handler.connection

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.handler.deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError("the request's deadline passed")
            self.connection.settimeout(left)
            return self.connection.recv_into(buffer)
        except TimeoutError:
            self.handler.timed_out = True
            raise
        finally:
            self.connection.settimeout(self.handler.timeout)


BUSY_LINE = "busy: this server serves {most} connections at once; try again shortly\n"


class Server(http.server.ThreadingHTTPServer):
    """A threading HTTP server on ``address`` that never prints a traceback, answers to
    the names of ``answers_to`` (``allowed_hosts``: the operator's) and serves at most
    ``connections_most`` connections at once, each request within ``head_seconds`` and
    ``body_seconds`` (attributes, so a test may shorten them)."""

    daemon_threads = True
    log = logging.getLogger("rowfleet.http")
    head_seconds = HEAD_SECONDS
    body_seconds = BODY_SECONDS
    connections_most = CONNECTIONS_MOST

    def __init__(self, address: tuple[str, int], handler: type[Handler], allowed_hosts: Collection[str] = ()) -> None:
        self.address_family = _family(address[0])
        bound = address[0].lower()
        self.own_names = frozenset(OWN_NAMES) | ({bound} if bound and not _is_ip(bound) else set())
        self.allowed_hosts = frozenset(name.lower() for name in allowed_hosts)
        self._open = 0
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            room = self._open < self.connections_most
            if room:
                self._open += 1
        if not room:
            self._turn_away(request, client_address)
            return
        try:
            super().process_request(request, client_address)  # a thread for it
        except BaseException:
            self._closed()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed()

    def _closed(self) -> None:
        with self._open_lock:
            self._open -= 1

    def _turn_away(self, request: socket.socket, client_address: Any) -> None:
        """A 503 of one line, written without waiting (a fresh connection's send buffer
        holds it), and the connection closed: no thread for it."""
        body = BUSY_LINE.format(most=self.connections_most).encode("utf-8")
        answer = (f"HTTP/1.0 503 Service Unavailable\r\nContent-Type: {TEXT}\r\nContent-Length: {len(body)}\r\n"
                  f"Retry-After: 1\r\nConnection: close\r\n\r\n").encode("ascii") + body
        try:
            request.setblocking(False)
            request.send(answer)
        except OSError as exc:
            self.log.debug("connection from %s turned away unanswered: %s", client_address[0], one_line(exc))
        self.log.debug("connection from %s turned away: %d open", client_address[0], self.connections_most)
        self.shutdown_request(request)

    def server_bind(self) -> None:
        # HTTPServer would look its address's name up (socket.getfqdn): a DNS wait for nothing.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints a traceback to stderr for any error: a connection that breaks
        # (a client gone mid-answer) is one debug line; anything else is a bug, logged whole.
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            self.log.debug("connection from %s ended: %s", client_address[0], one_line(error))
        else:
            self.log.error("request from %s failed", client_address[0], exc_info=True)

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{url_host(host)}:{port}"


def _is_ipv4(text: str) -> bool:
    return _is_ip(text, ipaddress.IPv4Address)


def _is_ip(text: str, parse: Callable[[str], Any] = ipaddress.ip_address) -> bool:
    """Whether ``parse`` (an ``ipaddress`` constructor) reads ``text`` as an address."""
    try:
        parse(text)
    except ValueError:
        return False
    return True


def _family(host: str) -> socket.AddressFamily:
    """The address family a bind address needs (an IPv6 one, ``::``, binds AF_INET6)."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET
