"""What rowfleet's two HTTP servers share (``/metrics`` in ``rowfleet.exporter``, the panel
in ``rowfleet.panel.server``): the stdlib ``ThreadingHTTPServer`` made quiet and safe, and
the small rules about tokens and addresses.

``Server`` binds without a DNS look-up, picks the address family its bind address needs,
and logs a broken connection as one debug line and anything else as a bug, never printing a
traceback to stderr. ``Handler`` answers every request with a body of its own (http.server's
own refusals, a malformed request line or a header too long, too), gives no Python version
in its ``Server`` header, and sends its access log to the debug level.

Tokens: ``check_token`` says what a token may hold (what a header or a cookie carries
unchanged), ``same_secret`` compares two in constant time, ``bearer`` reads an
``Authorization: Bearer`` header. ``loopback`` says whether a bind address is reachable
from this machine only.

Imports only ``rowfleet.errors``; nothing of the store, the command line or the pages.
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

from rowfleet.errors import ConfigError

TEXT = "text/plain; charset=utf-8"
REQUEST_TIMEOUT = 30.0  # seconds a connection may take to send its request; a stalled one ends
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


class Handler(http.server.BaseHTTPRequestHandler):
    """A request handler whose every answer goes through ``send``; ``log`` names its logger."""

    timeout = REQUEST_TIMEOUT
    log = logging.getLogger("rowfleet.http")
    # A request line too broken to name a version still gets a status line in its answer
    # (http.server would answer it as HTTP/0.9: the body alone).
    default_request_version = "HTTP/1.0"

    def version_string(self) -> str:
        return self.server_version  # not the Python version too

    def send(self, status: int, headers: Headers, body: bytes, send_body: bool = True) -> None:
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


class Server(http.server.ThreadingHTTPServer):
    """A threading HTTP server on ``address`` that never prints a traceback."""

    daemon_threads = True
    log = logging.getLogger("rowfleet.http")

    def __init__(self, address: tuple[str, int], handler: type[Handler]) -> None:
        self.address_family = _family(address[0])
        super().__init__(address, handler)

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


def _family(host: str) -> socket.AddressFamily:
    """The address family a bind address needs (an IPv6 one, ``::``, binds AF_INET6)."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET
