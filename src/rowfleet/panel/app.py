"""The panel's routes: which function answers which path, what a page hands back, and how
a request's parameters are read and checked.

A page function takes a ``Request`` and returns a ``View`` (its title, the data its JSON
twin under ``/api/...`` serves, and its HTML body) or, for an action, a ``Redirect`` back
to a page with a note saying what was done. ``respond`` turns either into the answer: the
same view is the page at ``/jobs`` and the JSON at ``/api/jobs``. Bad parameters raise
``HttpError`` (a 4xx with one line), which ``respond`` renders as a page or as JSON.

The server (``panel.server``) decides who may ask (token, same-origin, read-only); this
module only maps what they asked to a page. It holds no SQL: pages read through the store.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Callable, Mapping

from rowfleet import names
from rowfleet.errors import ConfigError, Conflict, NotFound
from rowfleet.panel.html import Markup, esc, page, tag, url

PARAM_MOST = 500  # characters of one query or form value
ID_MOST = 2 ** 62


class HttpError(Exception):
    """A request the panel refuses: ``status`` and one line saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclasses.dataclass(frozen=True)
class View:
    """What a page shows: ``data`` is its JSON twin (or a function making it, for a page
    whose twin costs more than its HTML: called only when the JSON is asked for), ``body``
    its HTML."""

    title: str
    data: Any
    body: Markup
    active: str = ""

    def twin(self) -> Any:
        """The JSON twin, made now when ``data`` is a function."""
        return self.data() if callable(self.data) else self.data


@dataclasses.dataclass(frozen=True)
class Redirect:
    """After an action: go to ``location``, with ``note`` saying what was done."""

    location: str
    note: str
    data: Any = None


@dataclasses.dataclass
class Request:
    """One request as a page sees it: its parameters, the store, and what the server decided
    about it (whether mutations are allowed, the CSRF token forms carry)."""

    method: str
    path: str
    query: Mapping[str, str]
    form: Mapping[str, str]
    store: Any
    now: float
    csrf: str
    read_only: bool
    signed_in: bool = False
    params: Mapping[str, str] = dataclasses.field(default_factory=dict)  # from the path
    memo: dict[str, Any] = dataclasses.field(default_factory=dict)  # the server's, shared by its requests

    def text(self, name: str, *, source: str = "query") -> str | None:
        """A parameter as text, or None when absent or empty."""
        value = (self.query if source == "query" else self.form).get(name)
        return value if value else None

    def word(self, name: str, *, source: str = "query") -> str | None:
        """A parameter that names something (a queue, a host, a task): checked as rowfleet
        checks names, or 400."""
        value = self.text(name, source=source)
        if value is None:
            return None
        try:
            return names.check_name(name, value)
        except ConfigError as exc:
            raise HttpError(400, str(exc)) from None

    def choice(self, name: str, choices: tuple[str, ...], *, source: str = "query",
               default: str | None = None) -> str | None:
        value = self.text(name, source=source)
        if value is None:
            return default
        if value not in choices:
            raise HttpError(400, f"{name} must be one of {', '.join(choices)}")
        return value

    def number(self, name: str, *, least: int = 0, most: int = ID_MOST, source: str = "query",
               default: int | None = None) -> int | None:
        """A parameter that is a whole number from ``least`` to ``most``, in ASCII digits
        (``names.parse_int``: not ``' 3'`` nor ``'٣'``), or 400."""
        value = self.text(name, source=source)
        if value is None:
            return default
        try:
            return names.parse_int(name, value, least, most)
        except ConfigError:
            raise HttpError(400, f"{name} must be a whole number from {least} to {most}, in ASCII digits") from None

    def path_id(self, name: str = "id") -> int:
        """The id in the path (a job's, a run's), by ``names.parse_int``; 404 for one no row can have."""
        value = self.params[name]
        try:
            return names.parse_int(name, value, 1, ID_MOST)
        except ConfigError:
            raise HttpError(404, f"no such {name}: {value[:40]}") from None

    def mutating(self) -> None:
        """Refuse a mutation in read-only mode (the server refuses it first; pages ask too)."""
        if self.read_only:
            raise HttpError(403, "the panel is read-only (started with --read-only)")


Handler = Callable[[Request], "View | Redirect"]


@dataclasses.dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    mutation: bool = False


def route(method: str, path: str, handler: Handler) -> Route:
    """A route; ``{id}`` in ``path`` matches a number, ``{name}`` any one path segment."""
    pattern = re.escape(path).replace(r"\{id\}", r"(?P<id>[0-9]+)")
    pattern = re.sub(r"\\\{([a-z_]+)\\\}", r"(?P<\1>[^/]+)", pattern)
    return Route(method, re.compile(pattern + r"\Z"), handler, mutation=method == "POST")


def find(routes: tuple[Route, ...], method: str, path: str) -> tuple[Route, dict[str, str]]:
    """The route for ``method`` and ``path`` (``/api`` stripped), or HttpError: 404 for no
    such path, 405 for a method that path does not take."""
    allowed = []
    for candidate in routes:
        matched = candidate.pattern.match(path)
        if matched:
            if candidate.method == method or (method == "HEAD" and candidate.method == "GET"):
                return candidate, matched.groupdict()
            allowed.append(candidate.method)
    if allowed:
        raise HttpError(405, f"{method} is not allowed here: only {', '.join(sorted(set(allowed)))}")
    raise HttpError(404, "no such page")


def api_path(path: str) -> tuple[bool, str]:
    """Whether ``path`` asks for JSON, and the page path it names.

    >>> api_path("/api/jobs/4"), api_path("/api"), api_path("/jobs")
    ((True, '/jobs/4'), (True, '/'), (False, '/jobs'))
    """
    if path == "/api" or path.startswith("/api/"):
        return True, path[4:] or "/"
    return False, path


def call(handler: Handler, request: Request) -> "View | Redirect":
    """Run a page, turning the store's refusals into 4xx answers."""
    try:
        return handler(request)
    except NotFound as exc:
        raise HttpError(404, str(exc)) from None
    except Conflict as exc:
        raise HttpError(409, str(exc)) from None
    except ConfigError as exc:
        raise HttpError(400, str(exc)) from None


def render(view: View, request: Request, as_json: bool, note: str | None) -> tuple[int, str, bytes]:
    """A view as (status, content type, body)."""
    if as_json:
        return 200, JSON, dumps(view.twin())
    body = page(view.title, view.body, active=view.active, now=request.now, note=note, signed_in=request.signed_in)
    return 200, HTML, body.encode("utf-8")


def error_page(error: HttpError, as_json: bool, signed_in: bool = False) -> tuple[int, str, bytes]:
    if as_json:
        return error.status, JSON, dumps({"error": error.message, "status": error.status})
    body = tag("p", error.message, class_="error") + Markup('<p><a href="/">Back to the overview</a></p>')
    return error.status, HTML, page(f"{error.status}: {_REASONS.get(error.status, 'refused')}", body,
                                     refresh=False, signed_in=signed_in).encode("utf-8")


def redirect_location(result: Redirect) -> str:
    """Where an action sends the browser: its page, with its note."""
    separator = "&" if "?" in result.location else "?"
    return result.location + separator + url("", note=result.note).lstrip("?")


def dumps(data: Any) -> bytes:
    """JSON as the API writes it: UTF-8, no NaN, ``<`` escaped so no text can close a tag."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, default=str).replace("<", "\\u003c").encode("utf-8")


HTML = "text/html; charset=utf-8"
JSON = "application/json; charset=utf-8"
_REASONS = {400: "bad request", 403: "forbidden", 404: "not found", 405: "method not allowed",
            408: "request timeout", 409: "conflict", 411: "length required", 413: "too large",
            414: "address too long", 415: "unsupported form", 421: "misdirected request",
            503: "database unavailable"}


def escape_note(note: str | None) -> str | None:
    """A note from the address bar, as a page shows it: one line, at most 300 characters."""
    if not note:
        return None
    return " ".join(note.split())[:300]

