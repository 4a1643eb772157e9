"""Input nodes' specs: what a person is asked, and whether an answer fits.

An input node of a workflow may carry a spec beside its ``prompt``: a ``widget`` (one of
``WIDGETS``), the ``options`` of the two choose widgets, bounds where they are natural
(``min`` and ``max`` of a number, ``max_length`` of text) and a ``default`` (what a form
offers first). ``parse_spec`` validates those fields as read from a workflow file; ``check``
decides whether a value answers the spec (the store calls it in ``submit_input``, which every
answer goes through); ``read_text`` turns what a person typed (``rowfleet submit --value``,
a panel form's field) into the value ``check`` then judges. A node without a spec takes any
JSON value, as before.

``options`` may be a reference to an earlier node's result, ``{"$from": PATH}``. It is kept
here as written: ``rowfleet.dag`` checks its path with the workflow's other references and
resolves it with its one resolver (``dag.input_options``) once the node is reached, and hands
``check`` the list it resolved to.

Pure: no I/O, no clock. A ``file_path`` answer is checked as text that can name a path, never
looked up on disk: the host that answers is seldom the host whose task reads the file, so the
task checks it where it runs. Imports only ``rowfleet.errors`` and ``rowfleet.names``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Mapping

from rowfleet import names
from rowfleet.errors import ConfigError

TEXT, NUMBER, CONFIRM, CHOOSE_ONE, CHOOSE_MANY, FILE_PATH = (
    "text", "number", "confirm", "choose_one", "choose_many", "file_path")
WIDGETS = (TEXT, NUMBER, CONFIRM, CHOOSE_ONE, CHOOSE_MANY, FILE_PATH)
CHOOSE = (CHOOSE_ONE, CHOOSE_MANY)
FIELDS = ("widget", "options", "min", "max", "max_length", "default")  # an input node's spec fields
# What each widget takes besides "widget": a field that means nothing to it is refused, not ignored.
TAKES = {TEXT: ("max_length", "default"), NUMBER: ("min", "max", "default"), CONFIRM: ("default",),
         CHOOSE_ONE: ("options", "default"), CHOOSE_MANY: ("options", "default"), FILE_PATH: ("default",)}
MOST_OPTIONS = 200  # a page of radio buttons, not a data set
MOST_LENGTH = 1_000_000  # the largest max_length of a text answer
MOST_PATH = 4096  # characters of a file path (PATH_MAX on Linux)
YES, NO = ("true", "yes"), ("false", "no")  # a confirm answer typed as text, in any case
_SHOWN = 80  # characters of a value a message repeats
_LISTED = 10  # options a message lists before "… (N in all)"
_UNREAD = object()  # no value: not JSON, or no repeat found


class SpecError(ConfigError):
    """An input node's spec is invalid (``rowfleet.dag`` reports it as a ``DefinitionError``)."""


class InvalidAnswer(ConfigError):
    """An answer does not fit its input node's spec: nothing was stored; answer again."""


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """What an input node asks for. ``options``: a choose widget's list, or the reference
    ``{"$from": PATH}`` it is resolved from; ``default``: None when there is none."""

    widget: str
    options: Any = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    max_length: int | None = None
    default: Any = None

    @property
    def refers(self) -> bool:
        """Whether its options come from an earlier result (known once the node is reached)."""
        return isinstance(self.options, dict)

    def to_dict(self) -> dict[str, Any]:
        """The spec's fields as a workflow file writes them, unset ones left out.

        >>> InputSpec(NUMBER, minimum=1).to_dict()
        {'widget': 'number', 'min': 1}
        """
        values = {"widget": self.widget, "options": self.options, "min": self.minimum, "max": self.maximum,
                  "max_length": self.max_length, "default": self.default}
        return {field: value for field, value in values.items() if value is not None}


# --- parsing a spec ----------------------------------------------------------------------


def parse_spec(raw: Mapping[str, Any], where: str) -> InputSpec | None:
    """The spec of an input node (its JSON object), or None when it has none; ``SpecError``
    naming ``where`` and the field for a bad one. A literal ``default`` must answer the spec.

    >>> parse_spec({"id": "q", "widget": "choose_one", "options": ["a", "b"]}, "node 'q'").options
    ['a', 'b']
    >>> parse_spec({"id": "q", "prompt": "Go?"}, "node 'q'") is None
    True
    >>> parse_spec({"widget": "number", "min": 5, "max": 1}, "node 'q'")
    Traceback (most recent call last):
    rowfleet.inputs.SpecError: node 'q': "min" (5) is above "max" (1)
    """
    present = [field for field in FIELDS if field in raw]
    if not present:
        return None
    widget = raw.get("widget")
    if "widget" not in raw:
        raise SpecError(f"{where}: \"{present[0]}\" needs a \"widget\" (one of {', '.join(WIDGETS)})")
    if widget not in WIDGETS:
        raise SpecError(f"{where}: \"widget\" must be one of {', '.join(WIDGETS)}, got {_shown(widget)}")
    for field in present:
        if field != "widget" and field not in TAKES[widget]:
            raise SpecError(f"{where}: a {widget} input takes no \"{field}\" (it takes: {', '.join(TAKES[widget])})")
    spec = InputSpec(widget, _options(raw, widget, where), _bound(raw, "min", where), _bound(raw, "max", where),
                     _max_length(raw, where), raw.get("default"))
    if spec.minimum is not None and spec.maximum is not None and spec.minimum > spec.maximum:
        raise SpecError(f"{where}: \"min\" ({spec.minimum}) is above \"max\" ({spec.maximum})")
    if spec.default is not None:
        try:
            check(spec, spec.default, where=f"{where}: \"default\"")
        except InvalidAnswer as exc:
            raise SpecError(str(exc)) from None
    return spec


def _options(raw: Mapping[str, Any], widget: str, where: str) -> Any:
    if widget not in CHOOSE:
        return None
    options = raw.get("options")
    if isinstance(options, dict):
        return options  # a reference: rowfleet.dag checks its path, and resolves it
    if not isinstance(options, list):
        raise SpecError(f"{where}: a {widget} input needs \"options\": a list, or {{\"$from\": PATH}} "
                        f"naming an upstream list")
    problem = options_problem(options)
    if problem:
        raise SpecError(f"{where}: \"options\" {problem}")
    return list(options)


def _bound(raw: Mapping[str, Any], field: str, where: str) -> int | float | None:
    value = raw.get(field)
    if value is not None and not _is_number(value):
        raise SpecError(f"{where}: \"{field}\" must be a finite number, got {_shown(value)}")
    return value


def _max_length(raw: Mapping[str, Any], where: str) -> int | None:
    value = raw.get("max_length")
    if value is not None and (type(value) is not int or not 1 <= value <= MOST_LENGTH):
        raise SpecError(f"{where}: \"max_length\" must be a whole number from 1 to {MOST_LENGTH}, got {_shown(value)}")
    return value


def options_problem(options: Any) -> str | None:
    """What is wrong with a list of options (from a file, or resolved from a result), as
    the end of a sentence about them; None for a good one: a list of 1 to ``MOST_OPTIONS``
    distinct JSON values.

    >>> options_problem(["a", "b"]), options_problem([]), options_problem([1, 1.0])
    (None, 'must list at least one option', 'lists 1.0 twice')
    """
    if not isinstance(options, list):
        return f"must be a list, got {_shown(options)}"
    if not options:
        return "must list at least one option"
    if len(options) > MOST_OPTIONS:
        return f"lists {len(options)} options; at most {MOST_OPTIONS} are allowed"
    twice = _twice(options)
    return None if twice is _UNREAD else f"lists {_shown(twice)} twice"


def _twice(values: list[Any]) -> Any:
    """The first value of ``values`` that an earlier one equals (as JSON), else ``_UNREAD``."""
    for index, value in enumerate(values):
        if any(names.same_json(value, earlier) for earlier in values[:index]):
            return value
    return _UNREAD


# --- checking an answer ----------------------------------------------------------------


def check(spec: InputSpec, value: Any, options: list[Any] | None = None, *, where: str = "the answer") -> Any:
    """``value`` when it answers ``spec``, else ``InvalidAnswer``: one line saying what
    ``where`` expects and what it got. ``options``: a choose widget's list as resolved
    (default: the spec's own; while that is an unresolved reference, any option passes).

    >>> spec = InputSpec(CHOOSE_ONE, options=["red", "green"])
    >>> check(spec, "green")
    'green'
    >>> check(spec, "blue", where="node 'colour'")
    Traceback (most recent call last):
    rowfleet.inputs.InvalidAnswer: node 'colour' expects one of "red", "green"; got "blue"
    >>> check(InputSpec(NUMBER, minimum=1, maximum=5), 6)
    Traceback (most recent call last):
    rowfleet.inputs.InvalidAnswer: the answer expects a number from 1 to 5; got 6
    """
    if options is None:
        options = None if spec.refers else spec.options
    if not _fits(spec, value, options):
        raise InvalidAnswer(f"{where} expects {expectation(spec, options)}; got {_shown(value)}")
    return value


def _fits(spec: InputSpec, value: Any, options: list[Any] | None) -> bool:
    if spec.widget == TEXT:
        return _is_text(value) and (spec.max_length is None or len(value) <= spec.max_length)
    if spec.widget == NUMBER:
        return _is_number(value) and (spec.minimum is None or value >= spec.minimum) and \
            (spec.maximum is None or value <= spec.maximum)
    if spec.widget == CONFIRM:
        return isinstance(value, bool)
    if spec.widget == FILE_PATH:
        return _is_text(value) and 0 < len(value) <= MOST_PATH and not any(_is_control(ch) for ch in value)
    if spec.widget == CHOOSE_ONE:
        return options is None or _is_option(value, options)
    # Distinct options, each at most once; choosing none is an answer too.
    return isinstance(value, list) and (options is None or all(_is_option(item, options) for item in value)) \
        and _twice(value) is _UNREAD


def expectation(spec: InputSpec, options: list[Any] | None = None) -> str:
    """What an answer to ``spec`` must be, in words (for messages, and shown beside a form).

    >>> expectation(InputSpec(TEXT, max_length=20)), expectation(InputSpec(NUMBER, maximum=9))
    ('text of at most 20 characters', 'a number of at most 9')
    """
    if spec.widget == TEXT:
        return "text" + (f" of at most {spec.max_length} characters" if spec.max_length else "")
    if spec.widget == NUMBER:
        if spec.minimum is not None and spec.maximum is not None:
            return f"a number from {spec.minimum} to {spec.maximum}"
        if spec.minimum is not None or spec.maximum is not None:
            return f"a number of at {'least' if spec.maximum is None else 'most'} " \
                   f"{spec.minimum if spec.maximum is None else spec.maximum}"
        return "a number"
    if spec.widget == CONFIRM:
        return "true or false (yes or no)"
    if spec.widget == FILE_PATH:
        return f"a file path: text of 1 to {MOST_PATH} characters, no control characters"
    listed = "the options" if options is None else _listed(options)
    return f"one of {listed}" if spec.widget == CHOOSE_ONE else f"a list of distinct options among {listed}"


def _is_option(value: Any, options: list[Any]) -> bool:
    return any(names.same_json(value, option) for option in options)


def _is_text(value: Any) -> bool:
    """A string that can be stored: no NUL, no lone surrogate (undecodable bytes)."""
    if not isinstance(value, str) or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_control(ch: str) -> bool:
    """C0, DEL and C1: what a terminal acts on, and no file name a person means holds."""
    return ch < " " or "\x7f" <= ch <= "\x9f"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# --- reading what a person typed -----------------------------------------------------------


def read_text(spec: InputSpec, text: str, options: list[Any] | None = None) -> Any:
    """The value a person means by ``text`` for ``spec`` (``check`` then judges it): text
    and a file path as typed; a number as JSON writes it; a confirm as true, false, yes or no
    (any case); a choose_one's option as JSON (``2``, ``"2"``) or, failing that, as the text
    itself; a choose_many's as a JSON list, or else its comma-separated items, each read as a
    choose_one's. What cannot be read is handed on as typed, for ``check`` to refuse.

    >>> read_text(InputSpec(CONFIRM), " Yes"), read_text(InputSpec(NUMBER), "2.5")
    (True, 2.5)
    >>> read_text(InputSpec(CHOOSE_MANY), "red, 2", ["red", 2, "blue"])
    ['red', 2]
    """
    if spec.widget in (TEXT, FILE_PATH):
        return text
    if spec.widget == NUMBER:
        value = _json(text)
        return value if _is_number(value) else text
    if spec.widget == CONFIRM:
        word = text.strip().lower()
        return True if word in YES else False if word in NO else text
    known = options if options is not None else ([] if spec.refers else spec.options)
    if spec.widget == CHOOSE_ONE:
        return _pick(text, known)
    if text.strip().startswith("["):
        return _json(text, text)
    return [_pick(item.strip(), known) for item in text.split(",") if item.strip()]


def _pick(text: str, options: list[Any]) -> Any:
    """The option ``text`` names: read as JSON first (so ``2`` is the number where both
    ``2`` and ``"2"`` are offered), then as plain text; else the text read as well as it can be."""
    value = _json(text, text)
    if _is_option(value, options) or not _is_option(text, options):
        return value
    return text


def _json(text: str, otherwise: Any = _UNREAD) -> Any:
    """``text`` as JSON, with every guard of ``names.parse_json``; ``otherwise`` when it is
    not JSON (the text itself, unless a caller says)."""
    try:
        return names.parse_json("the answer", text)
    except (json.JSONDecodeError, ConfigError):
        return text if otherwise is _UNREAD else otherwise


# --- showing -----------------------------------------------------------------------------


def label(option: Any) -> str:
    """An option as a person reads it: text as itself, anything else as JSON.

    >>> label("red"), label(2), label({"id": 7})
    ('red', '2', '{"id": 7}')
    """
    return option if isinstance(option, str) else json.dumps(option, ensure_ascii=False, default=str)


def _listed(options: list[Any]) -> str:
    shown = ", ".join(_shown(option) for option in options[:_LISTED])
    return shown if len(options) <= _LISTED else f"{shown}, … ({len(options)} in all)"


def _shown(value: Any) -> str:
    """A value as one line of a message repeats it: its JSON, cut short."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return names.shown(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN - 2]}...({len(text)} characters)"
