"""The panel's HTTP server: who may ask what, and the headers every answer carries.

It binds 127.0.0.1 by default; any other address needs a token (``make_server`` refuses
without one). Before anything else, every request's head passes the shared rules of
``rowfleet.services.webserver``: a ``Host`` this panel answers to (localhost, an IP address, the
names in ``allowed_hosts``; else a 421, so a page on another name that resolves here, DNS
rebinding, reads and changes nothing), one plain body length, a head and a body each on a
deadline, and a bound on the connections served at once. With a token, every page but
the login page and the static files needs it:
as the session cookie the login page sets (an HMAC of the token, never the token itself;
HttpOnly, SameSite=Strict) or as ``Authorization: Bearer``. Every mutation is a POST that

- comes from the panel's own pages: ``Sec-Fetch-Site: same-origin``, or for a browser too
  old to send that, an ``Origin`` naming this server's ``Host`` (neither: refused);
- carries the form's CSRF token (an HMAC of the panel's secret: the token, or a random one
  per start when there is none), compared in constant time;
- is a form of at most ``BODY_MOST`` bytes that arrives in time, whole;
- and is refused outright when the panel runs ``--read-only``.

Every answer carries a strict Content-Security-Policy (scripts, styles and everything else
only from this origin, no inline script, no framing), ``X-Content-Type-Options: nosniff``,
``Referrer-Policy: no-referrer`` and ``Cache-Control: no-store``. A bad request is a 4xx
page (or JSON under ``/api``) of one line; a database that cannot be read is a 503; a bug
is a 500 whose traceback goes to the log only. Each request has a store of its own: on
SQLite opened for it and closed after (under a millisecond); on PostgreSQL, where a
connection costs tens of milliseconds, one kept from an earlier request when one is idle
(at most ``IDLE_STORES``; a store that met a database error is closed, never kept).

Imports the panel's routes, the exporter (``/metrics`` is served here too) and the shared
HTTP base; pages are in ``panel.pages``.
"""

from __future__ import annotations

import gc
import hashlib
import hmac
import http.cookies
import importlib.resources
import logging
import secrets
import threading
import time
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit

from rowfleet import config as configuration
from rowfleet import names
from rowfleet.errors import ConfigError, RowfleetError
from rowfleet.panel import app, pages
from rowfleet.panel.html import Markup, page, tag
from rowfleet.services import exporter
from rowfleet.store import Store, open_store
from rowfleet.services.webserver import (Answer, Handler, Refusal, Server, bearer, check_token, loopback, one_line,
                                same_secret, serve_until)

log = logging.getLogger("rowfleet.panel")

PATH_MOST = 4096        # characters of a request's path and query
BODY_MOST = 64 * 1024   # bytes of a form
FIELDS_MOST = 64        # parameters of a query or a form
IDLE_STORES = 4         # open stores kept between requests (PostgreSQL: a connection costs ~10-30 ms)
COOKIE = "rowfleet_panel"
STATIC = {"/static/panel.css": ("panel.css", "text/css; charset=utf-8"),
          "/static/panel.js": ("panel.js", "text/javascript; charset=utf-8"),
          "/static/favicon.svg": ("favicon.svg", "image/svg+xml"),
          "/favicon.ico": ("favicon.svg", "image/svg+xml")}  # asked for by browsers that ignore the link
POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
          "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [("Content-Security-Policy", POLICY), ("X-Content-Type-Options", "nosniff"),
                    ("Referrer-Policy", "no-referrer"), ("X-Frame-Options", "DENY")]
OPEN_PATHS = frozenset({"/login", *STATIC})  # served without the token


class PanelHandler(Handler):
    """Answers GET, HEAD and POST; any other method is a 405."""

    server: "PanelServer"
    server_version = "rowfleet-panel"
    log = log

    def do_GET(self) -> None:
        self._answer()

    def do_HEAD(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):
            return self._answer
        raise AttributeError(name)

    def refusal(self, code: int, line: str) -> Answer:
        status, headers, body = _page_answer(app.HttpError(code, line), as_json=False)
        return status, headers + SECURITY_HEADERS + [("Cache-Control", "no-store")], body

    def _answer(self) -> None:
        as_json = self.path.startswith("/api")
        try:
            status, headers, body = self._respond()
        except app.HttpError as error:
            status, headers, body = _page_answer(error, as_json)
            if error.status in (405,):
                headers.append(("Allow", "GET, HEAD, POST"))
        except Exception:
            log.exception("panel request %s %s failed", self.command, self.path[:200])
            status, headers, body = _page_answer(app.HttpError(500, "internal error; the panel's log says why"),
                                                 as_json)
        self.send(status, headers + SECURITY_HEADERS + [("Cache-Control", "no-store")], body,
                  send_body=self.command != "HEAD")

    def _respond(self) -> Answer:
        if self.command not in ("GET", "HEAD", "POST"):
            raise app.HttpError(405, f"{self.command[:20]} is not allowed: only GET, HEAD and POST")
        if len(self.path) > PATH_MOST:
            raise app.HttpError(414, f"the address is longer than {PATH_MOST} characters")
        parts = urlsplit(self.path)
        query = _fields(parts.query, "query string")
        as_json, path = app.api_path(parts.path)
        if path in STATIC and not as_json:
            return self._static(path)
        signed_in = self.server.signed_in(self.headers)
        form: dict[str, str] = {}
        if self.command == "POST":
            form = self._form()
        if path in ("/login", "/logout") and not as_json:
            return self._login(path, form, query)
        if not signed_in:
            if as_json or self.command == "POST" or path == "/metrics":
                raise app.HttpError(403, "a token is required: sign in at /login, or send Authorization: Bearer")
            return 303, [("Location", "/login"), ("Content-Type", app.HTML)], b""
        if path == "/metrics" and not as_json:
            return self._with_store(exporter.metrics_response)
        route, params = app.find(pages.ROUTES, "GET" if self.command == "HEAD" else self.command, path)
        if route.mutation:
            self._check_mutation(form)
        return self._with_store(lambda store: self._page(route, params, query, form, store, as_json))

    def _page(self, route: app.Route, params: dict[str, str], query: dict[str, str], form: dict[str, str],
              store: Store, as_json: bool) -> Answer:
        request = app.Request(self.command, urlsplit(self.path).path, query, form, store, store.clock(),
                              self.server.csrf, self.server.read_only, self.server.token is not None, params,
                              self.server.memo)
        result = app.call(route.handler, request)
        if isinstance(result, app.Redirect):
            if as_json:
                return 200, [("Content-Type", app.JSON)], app.dumps({"ok": True, "note": result.note,
                                                                     "data": result.data})
            return 303, [("Location", app.redirect_location(result)), ("Content-Type", app.HTML)], b""
        status, content_type, body = app.render(result, request, as_json, app.escape_note(query.get("note")))
        return status, [("Content-Type", content_type)], body

    def _with_store(self, answer: Callable[[Store], Answer]) -> Answer:
        try:
            store = self.server.borrow()
        except RowfleetError as exc:
            log.warning("panel cannot open the database: %s", one_line(exc))
            raise app.HttpError(503, "the database cannot be read now; the panel's log says why") from None
        healthy = False
        try:
            store.require_schema()
            result = answer(store)
            healthy = True
            return result
        except app.HttpError:
            healthy = True  # the page refused the request; the connection is fine
            raise
        except RowfleetError as exc:
            if isinstance(exc, ConfigError):
                healthy = True
                raise app.HttpError(400, one_line(exc)) from None
            log.warning("panel request failed on the database: %s", one_line(exc))
            raise app.HttpError(503, "the database cannot be read now; the panel's log says why") from None
        finally:
            self.server.give_back(store, healthy)

    def _static(self, path: str) -> Answer:
        name, content_type = STATIC[path]
        return 200, [("Content-Type", content_type)], asset(name)

    def _form(self) -> dict[str, str]:
        try:
            body = self.body(BODY_MOST)
        except Refusal as refused:
            raise app.HttpError(refused.status, refused.line) from None
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if body and kind != "application/x-www-form-urlencoded":
            raise app.HttpError(415, "a POST must be a form (application/x-www-form-urlencoded)")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise app.HttpError(400, "the form is not UTF-8") from None
        return _fields(text, "form")

    def _check_mutation(self, form: dict[str, str]) -> None:
        if not same_origin(self.headers.get("Sec-Fetch-Site"), self.headers.get("Origin"), self.headers.get("Host")):
            raise app.HttpError(403, "refused: a change must come from the panel's own page (same origin)")
        if self.server.read_only:
            raise app.HttpError(403, "the panel is read-only (started with --read-only)")
        if not same_secret(form.get("csrf"), self.server.csrf):
            raise app.HttpError(403, "refused: the form's token is missing or stale; reload the page and try again")

    def _login(self, path: str, form: dict[str, str], query: dict[str, str]) -> Answer:
        if self.command == "POST":
            if not same_origin(self.headers.get("Sec-Fetch-Site"), self.headers.get("Origin"),
                               self.headers.get("Host")):
                raise app.HttpError(403, "refused: sign in from the panel's own page (same origin)")
            if path == "/logout":
                return 303, [("Location", "/login"), ("Set-Cookie", f"{COOKIE}=; Max-Age=0; Path=/; HttpOnly; "
                                                                    "SameSite=Strict")], b""
            if self.server.token is None:
                return 303, [("Location", "/")], b""
            if not same_secret(form.get("token"), self.server.token):
                time.sleep(0.2)  # a guess costs a little time
                return _login_page("that token is not this panel's", status=403)
            return 303, [("Location", "/"), ("Set-Cookie", f"{COOKIE}={self.server.session}; Path=/; HttpOnly; "
                                                           "SameSite=Strict")], b""
        if path == "/logout":
            raise app.HttpError(405, "sign out with the button (a POST)")
        if self.server.token is None:
            return 303, [("Location", "/")], b""
        return _login_page(None)


def same_origin(fetch_site: str | None, origin: str | None, host: str | None) -> bool:
    """Whether a request comes from a page of this server: the browser says so
    (``Sec-Fetch-Site``), or, where it does not send that, its ``Origin`` is this host.

    >>> same_origin("same-origin", None, "h:1"), same_origin("cross-site", "http://h:1", "h:1")
    (True, False)
    >>> same_origin(None, "http://h:1", "h:1"), same_origin(None, "http://evil", "h:1"), same_origin(None, None, "h:1")
    (True, False, False)
    """
    if fetch_site is not None:
        return fetch_site == "same-origin"
    return origin is not None and host is not None and origin in (f"http://{host}", f"https://{host}")


class PanelServer(Server):
    """The panel's server: ``opener`` gives a store per request; ``token`` (None: none, on
    loopback only) guards every page; ``read_only`` refuses every change."""

    log = log

    def __init__(self, address: tuple[str, int], opener: Callable[[], Store], token: str | None,
                 read_only: bool, allowed_hosts: tuple[str, ...] = ()) -> None:
        self.opener = opener
        self.token = token
        self.read_only = read_only
        secret = (token or secrets.token_hex(32)).encode("ascii")
        self.csrf = hmac.new(secret, b"rowfleet-panel-csrf", hashlib.sha256).hexdigest()
        self.session = hmac.new(secret, b"rowfleet-panel-session", hashlib.sha256).hexdigest()
        self.memo: dict[str, Any] = {}  # what pages keep between requests (see Request.memo)
        self._idle: list[Store] = []
        self._idle_lock = threading.Lock()
        super().__init__(address, PanelHandler, allowed_hosts)

    def borrow(self) -> Store:
        """A store for one request: an idle one kept from an earlier request, else a new one."""
        with self._idle_lock:
            if self._idle:
                return self._idle.pop()
        return self.opener()

    def give_back(self, store: Store, healthy: bool) -> None:
        """Keep ``store`` for the next request (at most ``IDLE_STORES``, and only a store that
        may pass between threads and met no database error), else close it."""
        if healthy and store.passes_between_threads:
            with self._idle_lock:
                if len(self._idle) < IDLE_STORES:
                    self._idle.append(store)
                    return
        store.close()

    def server_close(self) -> None:
        super().server_close()
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for store in idle:
            store.close()

    def signed_in(self, headers: Any) -> bool:
        """Whether a request carries the token (always true without one)."""
        if self.token is None:
            return True
        given = bearer(headers.get("Authorization"))
        if given is not None:
            return same_secret(given, self.token)
        return same_secret(_cookie(headers.get("Cookie")), self.session)

    @property
    def url(self) -> str:
        return self.base_url + "/"


def make_server(config: configuration.Config, bind: str, port: int, token: str | None = None, *,
                read_only: bool = False) -> PanelServer:
    """A panel of ``config``'s database on ``bind``:``port`` (0: a free one), answering to
    ``config.allowed_hosts`` too, listening but not yet serving. ``ConfigError`` when
    ``bind`` is not loopback and there is no token, or when it cannot listen there."""
    token = check_bind(bind, token)
    try:
        return PanelServer((bind, port), lambda: open_store(config), token, read_only, config.allowed_hosts)
    except OSError as exc:
        raise ConfigError(f"cannot serve the panel on {names.shown(bind)} port {port}: "
                          f"{exc.strerror or one_line(exc)} (choose another --port or --bind)") from None


def check_bind(bind: str, token: str | None) -> str | None:
    """The token checked, or ``ConfigError``: beyond loopback the panel needs one."""
    token = check_token("the panel token", token)
    if not loopback(bind) and token is None:
        raise ConfigError(f"the panel can switch workers off: binding {names.shown(bind)} (reachable from other "
                          f"machines) needs a token (--token or ROWFLEET_PANEL_TOKEN), or bind 127.0.0.1")
    return token


def serve(config: configuration.Config, bind: str, port: int, stop: threading.Event, *, token: str | None = None,
          read_only: bool = False, listening: Callable[[str], None] | None = None) -> None:
    """Serve the panel until ``stop`` is set; ``listening`` is told its URL once it listens.

    A panel runs for days with what its pages keep between refreshes (``Request.memo``:
    the Flight Deck's drawn slices, rows and folds); Python's collector walks every object
    it tracks at each full collection, some every few seconds under refreshes. What exists
    once the server is made (the modules, their functions and classes, which live as long
    as the process) is frozen out of those walks (``gc.freeze``), so a full collection
    walks only what serving made (those pauses were the Flight Deck's slowest refreshes)."""
    serve_made(make_server(config, bind, port, token, read_only=read_only), stop, listening)


def serve_made(server: PanelServer, stop: threading.Event, listening: Callable[[str], None] | None = None) -> None:
    """Serve a panel ``make_server`` made (in this process, or in the parent it was forked
    from: ``rowfleet up`` binds before it forks, so a taken port stops it at once)."""
    gc.freeze()
    serve_until(server, stop, "panel-http", listening, server.url)


def asset(name: str) -> bytes:
    """A file of the panel's static folder, from the package (inside the ``.pyz`` too)."""
    return importlib.resources.files("rowfleet.panel").joinpath("static", name).read_bytes()


def _fields(text: str, what: str) -> dict[str, str]:
    """The parameters of a query string or form; a repeated name keeps its last value."""
    if len(text) > BODY_MOST:
        raise app.HttpError(414, f"the {what} is too long")
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=False, max_num_fields=FIELDS_MOST,
                          errors="strict")
    except ValueError:
        raise app.HttpError(400, f"the {what} is malformed or has more than {FIELDS_MOST} fields") from None
    fields = {}
    for key, value in pairs:
        if len(key) > 40 or len(value) > app.PARAM_MOST * 4 or "\x00" in value:
            raise app.HttpError(400, f"the {what} has a field that is too long or holds a NUL")
        fields[key] = value
    return fields


def _cookie(header: str | None) -> str | None:
    if not header:
        return None
    jar = http.cookies.SimpleCookie()
    try:
        jar.load(header)
    except http.cookies.CookieError:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None else None


def _page_answer(error: app.HttpError, as_json: bool) -> Answer:
    status, content_type, body = app.error_page(error, as_json)
    return status, [("Content-Type", content_type)], body


def _login_page(problem: str | None, status: int = 200) -> Answer:
    body = Markup("")
    if problem:
        body += tag("p", problem, class_="error", role="alert")
    body += Markup('<form method="post" action="/login" class="login"><label>Panel token '
                   '<input type="password" name="token" autocomplete="current-password" required autofocus></label>'
                   '<button type="submit">Sign in</button></form>'
                   '<p class="muted">The token is the one the panel was started with (--token or '
                   'ROWFLEET_PANEL_TOKEN).</p>')
    return status, [("Content-Type", app.HTML)], page("Sign in", body, refresh=False).encode("utf-8")

