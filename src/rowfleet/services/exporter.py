"""The ``/metrics`` endpoint: one scrape of the store as Prometheus text, and the small HTTP
server (stdlib ``http.server.ThreadingHTTPServer``) that answers Prometheus with it.

``scrape(store)`` reads the fleet's snapshot and the store's metrics rows and hands them to
the pure ``rowfleet.metrics.prometheus``. ``metrics_response(store)`` is the whole answer as
(status, headers, body): 200 with the text, or 503 with one line when the database cannot
be read; a panel server mounts the same function on its own route. ``MetricsHandler``
answers ``GET`` and ``HEAD`` of ``/metrics`` and nothing else (404 for another path, 405
for another method, 401 without the bearer token when one is set), opening a store for
each request and closing it after: an open costs under a millisecond on SQLite and a
new connection (about 10 ms) on PostgreSQL, against a scrape every few seconds at most,
and then no connection outlives its request, crosses threads or outlives a server restart. ``serve(config, bind, port, stop)`` runs it until ``stop`` is set.

Every request's head passes the shared rules of ``rowfleet.services.webserver`` first: a ``Host``
it answers to (localhost, an IP address, the names in ``allowed_hosts``; else a 421, so a
page on another name that resolves here reads nothing), one plain body length, a deadline
for the head, a bound on the connections served at once.

It binds where it is told (`rowfleet metrics`: 127.0.0.1 by default). The metrics name hosts, queues and tasks, so
binding any other address without a token logs one warning saying that anyone who can
reach the port can read them.

A database error is one line in the response (503) and one line in the log, never a
traceback; a bug is a 500 with one line in the response and its traceback in the log.

Imports the store, the snapshot, the pure metrics and the shared HTTP server base
(``rowfleet.services.webserver``); nothing of the command line or the panel. Below the command line, it reads no environment: the token is an argument.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable
from urllib.parse import urlsplit

from rowfleet import config as configuration
from rowfleet import names
from rowfleet.errors import ConfigError, RowfleetError
from rowfleet.job import QUEUED
from rowfleet.metrics import prometheus
from rowfleet.store import Store, open_store
from rowfleet.views.snapshot import snapshot
from rowfleet.services.webserver import (Answer, Handler, Server, bearer, check_token, loopback, one_line, plain, same_secret,
                                serve_until)

log = logging.getLogger("rowfleet.metrics")

PATH = "/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ALLOWED = "GET, HEAD"


def scrape(store: Store) -> str:
    """The Prometheus text of ``store`` now: the fleet's snapshot, then the tallies, the
    oldest job of each queue that has queued jobs, and each host's newest sample."""
    fleet = snapshot(store)
    queued = sorted({(count.project, count.queue) for count in fleet.counts if count.state == QUEUED and count.n})
    return prometheus.exposition(fleet, store.metrics_rows(queues=queued), limits=store.limits(),
                                 gpu_switches=store.gpu_switches())


def metrics_response(store: Store) -> Answer:
    """The answer to a scrape of ``store``: 200 with the text, or 503 with one line when the
    database cannot be read (its schema missing or old, the file broken, the server away);
    the cause is logged as one line."""
    try:
        store.require_schema()
        text = scrape(store)
    except RowfleetError as exc:
        return unavailable(exc)
    return 200, [("Content-Type", CONTENT_TYPE)], text.encode("utf-8", "replace")


def unavailable(exc: RowfleetError) -> Answer:
    """A 503 for a database error: one line in the response and one in the log. The
    response names no path or server (the log does), since anyone who reaches the port
    reads it."""
    log.warning("metrics scrape failed: %s", one_line(exc))
    return plain(503, "the database cannot be read now; the exporter's log says why")


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries the bearer ``token`` (always, without a
    token).

    >>> authorized("Bearer s3cret", "s3cret"), authorized("bearer s3cret", "s3cret"), authorized(None, None)
    (True, True, True)
    >>> authorized("Bearer s3cre", "s3cret"), authorized(None, "s3cret"), authorized("Basic s3cret", "s3cret")
    (False, False, False)
    """
    return token is None or same_secret(bearer(header), token)


class MetricsHandler(Handler):
    """Answers ``GET`` and ``HEAD`` of ``/metrics`` (a query string is ignored) from a store
    opened for the request; every answer has a body of its own, never http.server's page."""

    server: "MetricsServer"
    server_version = "rowfleet-metrics"
    log = log

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
        self.send(*plain(405, f"{self.command} is not allowed: only {ALLOWED}", [("Allow", ALLOWED)]))

    def _answer(self, send_body: bool) -> None:
        if self._refused():
            return
        if urlsplit(self.path).path != PATH:
            self.send(*plain(404, f"not found: metrics are at {PATH}"), send_body=send_body)
            return
        self.send(*self.server.respond(), send_body=send_body)

    def _refused(self) -> bool:
        """Answer 401 and say so, when the request lacks the token."""
        if authorized(self.headers.get("Authorization"), self.server.token):
            return False
        self.send(*plain(401, "a bearer token is required: Authorization: Bearer <token>",
                         [("WWW-Authenticate", 'Bearer realm="rowfleet metrics"')]),
                  send_body=self.command != "HEAD")
        return True


class MetricsServer(Server):
    """The HTTP server of ``/metrics``: ``opener`` gives a store per request (closed after),
    ``token`` is the bearer token every request needs (None: none)."""

    log = log

    def __init__(self, address: tuple[str, int], opener: Callable[[], Store], token: str | None = None,
                 allowed_hosts: tuple[str, ...] = ()) -> None:
        self.opener = opener
        self.token = token
        super().__init__(address, MetricsHandler, allowed_hosts)

    def respond(self) -> Answer:
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
        return self.base_url + PATH


def make_server(config: configuration.Config, bind: str, port: int,
                token: str | None = None) -> MetricsServer:
    """A server of ``config``'s database on ``bind``:``port`` (0: a free one), answering to
    ``config.allowed_hosts`` too, listening but not yet serving; ``ConfigError`` when it
    cannot listen there (the port taken, no such address). Warns once when the address is
    reachable from elsewhere and no token is set."""
    token = check_token("the metrics token", token)
    try:
        server = MetricsServer((bind, port), lambda: open_store(config), token, config.allowed_hosts)
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
    serve_until(server, stop, "metrics-http", listening, server.url)
