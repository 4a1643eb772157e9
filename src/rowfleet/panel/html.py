"""The panel's markup: every page is built from these few pure functions, so escaping is
decided in one place.

``Markup`` is text that is already HTML; anything else handed to ``join``, ``tag``,
``table`` or ``page`` is escaped (``esc``) on the way in, so a task name, an argument or a
host label holding ``<script>`` reaches the browser as text. Attribute values are always
quoted and escaped too. Pages link one stylesheet and one script (``/static/...``) and
hold no inline script or style, as the Content-Security-Policy demands.

Pure: imports only the standard library, ``rowfleet.job`` (for ``iso``) and ``rowfleet.names``.
"""

from __future__ import annotations

import html
import json
import time
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import urlencode

from rowfleet.job import iso
from rowfleet.names import is_finite_number

NAV = (("/", "Overview"), ("/deck", "Flight Deck"), ("/jobs", "Jobs"), ("/runs", "Runs"),
       ("/workers", "Workers"), ("/limits", "Limits"), ("/schedules", "Schedules"), ("/models", "Models"))
REFRESH_CHOICES = (0, 2, 5, 10, 30)  # seconds; 0: off
TEXT_MOST = 2000  # characters of one value shown in a table cell before "… (N characters)"
OWN_PATH_MOST = 2000  # characters of a path a form names to go back to (``own_path``)


class Markup(str):
    """Text that is already HTML: passed through as it is."""


def esc(value: Any) -> Markup:
    """``value`` as HTML text: Markup as it is, None as "-", anything else escaped.

    >>> esc("<b>&'\\""), esc(Markup("<i>x</i>")), esc(None), esc(3)
    ('&lt;b&gt;&amp;&#x27;&quot;', '<i>x</i>', '-', '3')
    """
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup("-")
    return Markup(html.escape(str(value), quote=True))


def clipped(text: Any, most: int = TEXT_MOST) -> str:
    """``text`` cut to ``most`` characters, saying how long it was.

    >>> clipped("abcdef", 3)
    'abc… (6 characters)'
    """
    text = str(text)
    return text if len(text) <= most else f"{text[:most]}… ({len(text):,} characters)"


def pretty(value: Any) -> str:
    """A JSON value as a page shows it: indented, non-ASCII text as it is.

    >>> print(pretty({"name": "Zoë", "n": [1]}))
    {
      "name": "Zoë",
      "n": [
        1
      ]
    }
    """
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def join(*parts: Any) -> Markup:
    """The parts one after another, each escaped unless it is Markup."""
    return Markup("".join(esc(part) for part in parts))


def tag(name: str, content: Any = "", **attributes: Any) -> Markup:
    """``<name attributes>content</name>``; an attribute whose value is None or False is
    left out, True writes it bare, a trailing ``_`` is dropped (``class_``).

    >>> tag("a", "<x>", href="/jobs?q=1&s=2", class_="k", hidden=False)
    '<a href="/jobs?q=1&amp;s=2" class="k">&lt;x&gt;</a>'
    """
    return Markup(f"<{name}{attrs(**attributes)}>{esc(content)}</{name}>")


def attrs(**attributes: Any) -> str:
    """Escaped, quoted attributes, as ``tag`` writes them."""
    written = []
    for key, value in attributes.items():
        if value is None or value is False:
            continue
        key = key.rstrip("_").replace("_", "-")
        written.append(f" {key}" if value is True else f' {key}="{html.escape(str(value), quote=True)}"')
    return "".join(written)


def link(href: str, text: Any, **attributes: Any) -> Markup:
    return tag("a", text, href=href, **attributes)


def url(path: str, **query: Any) -> str:
    """``path`` with the query parameters that are set (None and "" are left out).

    >>> url("/jobs", state="failed", queue=None, before=12)
    '/jobs?state=failed&before=12'
    """
    kept = {key: value for key, value in query.items() if value is not None and value != ""}
    return f"{path}?{urlencode(kept)}" if kept else path


def own_path(text: Any) -> str | None:
    """``text`` when it is a path on this panel (with its query), as a form may name the
    page to go back to after an action; else None. One leading ``/`` and not ``//`` nor
    ``/\\`` (which a browser takes for another host), printable ASCII (what ``url``
    writes; no line break can reach a header), no backslash and no fragment.

    >>> own_path("/deck?host=box"), own_path("//evil.example/"), own_path("/\\\\evil.example")
    ('/deck?host=box', None, None)
    >>> own_path("https://evil.example/"), own_path("/deck\\r\\nSet-Cookie: x=1"), own_path(None), own_path("")
    (None, None, None, None)
    """
    if not isinstance(text, str) or not 0 < len(text) <= OWN_PATH_MOST:
        return None
    if not text.startswith("/") or text[1:2] in ("/", "\\"):
        return None
    if any(not "!" <= ch <= "~" or ch in "\\#" for ch in text):
        return None
    return text


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, empty: str = "nothing to show",
          class_: str = "grid") -> Markup:
    """A table; each cell escaped unless it is Markup; ``empty`` when there are no rows."""
    body = "".join("<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    if not body:
        return tag("p", empty, class_="empty")
    head = "".join(f'<th scope="col">{esc(header)}</th>' for header in headers)
    return Markup(f'<div class="scroll"><table class="{class_}"><thead><tr>{head}</tr></thead>'
                  f"<tbody>{body}</tbody></table></div>")


def definitions(pairs: Iterable[tuple[str, Any]]) -> Markup:
    """A ``<dl>`` of label and value pairs."""
    return Markup('<dl class="facts">' + "".join(f"<dt>{esc(label)}</dt><dd>{esc(value)}</dd>"
                                                 for label, value in pairs) + "</dl>")


def state_badge(state: Any) -> Markup:
    """A state in its colour (the class is the state, cut to letters and ``_``)."""
    css = "".join(ch for ch in str(state).lower() if ch.isascii() and (ch.isalpha() or ch == "_"))[:24]
    return tag("span", state, class_=f"badge state-{css or 'unknown'}")


def when(at: Any, now: float) -> Markup:
    """A time as "12 s ago" with the ISO time as its title; "-" for none; a value that is no
    moment (text, an infinity: plain SQL may store either) as stored.

    >>> str(when(float("inf"), 0.0)), str(when("soon", 0.0))
    ('inf', 'soon')
    """
    if not is_finite_number(at):
        return esc(iso(at))
    return tag("time", ago(at, now), datetime=iso(at), title=iso(at))


def ago(at: float, now: float) -> str:
    """How long before ``now`` (or after, "in ...") ``at`` is, in one short phrase.

    >>> ago(90, 100), ago(100 - 125, 100), ago(100 + 7200, 100), ago(100 - 3 * 86400, 100)
    ('10 s ago', '2 min ago', 'in 2 h', '3 d ago')
    """
    seconds = now - at
    span = abs(seconds)
    if span < 1:
        return "now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if span >= size:
            amount = int(span // size)
            return f"{amount} {unit} ago" if seconds > 0 else f"in {amount} {unit}"
    return "now"  # not reached


def hidden_fields(fields: Mapping[str, Any]) -> Markup:
    return Markup("".join(f'<input type="hidden"{attrs(name=key, value=value)}>'
                          for key, value in fields.items() if value is not None))


def post_form(action: str, button: str, csrf: str, fields: Mapping[str, Any] = {}, *,
              class_: str = "", extra: Markup = Markup("")) -> Markup:
    """A form that POSTs ``fields`` (hidden) and the CSRF token to ``action``."""
    return Markup(f'<form method="post"{attrs(action=action, class_=class_ or None)}>'
                  f"{hidden_fields({**fields, 'csrf': csrf})}{extra}"
                  f'<button type="submit">{esc(button)}</button></form>')


def select(name: str, label: str, choices: Iterable[tuple[str, str]], chosen: str | None) -> Markup:
    options = "".join(f'<option{attrs(value=value, selected=value == chosen)}>{esc(text)}</option>'
                      for value, text in choices)
    return Markup(f'<label>{esc(label)} <select{attrs(name=name)}>{options}</select></label>')


def text_input(name: str, label: str, value: str | None, *, size: int = 16, placeholder: str = "") -> Markup:
    return Markup(f'<label>{esc(label)} <input type="text"{attrs(name=name, value=value or "", size=size, maxlength=500, placeholder=placeholder or None)}></label>')


def page(title: str, body: Markup, *, active: str = "", now: float | None = None, note: str | None = None,
         refresh: bool = True, signed_in: bool = False) -> Markup:
    """A whole page: the navigation, the refresh picker (the script reads it; without the
    script it does nothing), an optional note (after an action), and ``body``."""
    now = time.time() if now is None else now
    nav = "".join(f'<a href="{href}"{attrs(aria_current="page" if href == active else None)}>{esc(text)}</a>'
                  for href, text in NAV)
    picker = ""
    if refresh:
        options = "".join(f'<option value="{n}">{"off" if n == 0 else f"{n} s"}</option>' for n in REFRESH_CHOICES)
        picker = (f'<div class="refresh" id="refresh" hidden><label>Refresh <select id="refresh-every">'
                  f'{options}</select></label> <button type="button" id="refresh-pause">Pause</button>'
                  f'<span id="refresh-state" class="muted" aria-live="polite"></span></div>')
    flash = tag("p", note, class_="note", role="status") if note else ""
    logout = ('<form method="post" action="/logout" class="logout"><button type="submit">Sign out</button></form>'
              if signed_in else "")
    return Markup(
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="light dark">'
        f"<title>{esc(title)} · rowfleet</title>"
        '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'
        '<link rel="stylesheet" href="/static/panel.css"><script src="/static/panel.js" defer></script>'
        '</head><body><header><a class="brand" href="/">rowfleet</a>'
        f'<nav aria-label="pages">{nav}</nav>{picker}{logout}</header>'
        f'<main id="main"><h1>{esc(title)}</h1>{flash}{body}'
        f'<p class="muted stamp">read at {esc(iso(now))}</p></main></body></html>')
