"""What a name and a number may be: the one rule every entry point calls.

The API, the command line, ``Config``, workflow and schedule files all check their
values here, so a value refused in one place is refused in all of them, with the same
words. Every check returns the value (floats as ``float``) or raises ``InvalidValue``, a
``ConfigError`` whose message names the field and says what is allowed.

The bounds are what both databases and ``datetime`` can hold:

* integers within 64-bit signed range (SQLite INTEGER, PostgreSQL bigint);
* seconds (delays, timeouts, leases, the busy timeout) finite and at most ``MAX_SECONDS``
  (100 years), so ``now + delay`` is still a time ``datetime`` and the databases hold;
* epoch times (``run_at``) finite, from year 1 to year 9999 UTC (``datetime``'s range);
* text valid UTF-8 (no lone surrogates, which is what non-UTF-8 bytes in argv or a file
  name become) and without NUL (PostgreSQL text cannot hold it);
* JSON nested at most ``MAX_JSON_DEPTH`` deep, its numbers finite;
* numbers read from text (flags, variables) in ASCII: Python's ``int()`` and ``float()``
  also take spaces, ``_`` and other scripts' digits, so ``' 3'`` and ``'٣'`` would be 3.

``RULES`` is the table of fields: each ``Rule`` holds a field's check with its bounds (the
worker processes one command forks, the floor of the idle poll, a port's range) and says
its requirement in words. The command line's argparse types, ``config``'s settings, the
API and the file readers look a field's rule up there rather than picking a check and
its bounds each on its own.

Pure; imports only ``rowfleet.errors``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from functools import partial
from typing import Any, Callable

from rowfleet.errors import ConfigError

INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1
INT32_MAX = 2 ** 31 - 1  # counts kept in 32-bit columns (attempts)
MAX_SECONDS = 100 * 365.25 * 24 * 3600.0  # 100 years: 3155760000 s
EPOCH_MIN = -62135596800.0  # 0001-01-01T00:00:00Z, the first moment datetime holds
EPOCH_MAX = 253402300799.0  # 9999-12-31T23:59:59Z, the last whole second it holds
MAX_NAME = 255  # characters of a queue, task, project, host or model name
MAX_TEXT = 4096  # characters of other text: idempotency keys, database paths
MAX_JSON_DEPTH = 100  # nesting of JSON values (args, results, definitions)
WILDCARD = "*"  # worker switches use it for "every project, host or queue"
MOST_PROCS = 256  # worker processes one command forks (worker --procs, up): beyond this is a typo, not a box
MOST_GPUS = 64  # GPUs of one host a job may ask for: the largest boxes have 8 to 16; beyond this is a typo
MOST_PREFETCHED = 1000  # jobs one claim takes (worker --prefetch): each held, its lease renewed, until it runs
LEAST_POLL = 0.05  # seconds: an idle worker's safety poll; faster only spins a core
MOST_PORT = 65535

_ASCII_INT = re.compile(r"-?[0-9]+")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1
_NODE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_SHOWN = 80  # characters of a refused value a message repeats
_DURATION = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?[smhd])+")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd])")
_PLAIN_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class InvalidValue(ConfigError):
    """A value is not allowed: ``what`` must be ``requirement``, and got ``value``."""

    def __init__(self, what: str, requirement: str, value: Any) -> None:
        self.what, self.requirement, self.value = what, requirement, value
        super().__init__(f"{what} must be {requirement}, got {shown(value)}")


def shown(value: Any) -> str:
    """A value as a one-line message may repeat it: its repr, cut short.

    >>> shown("x" * 100)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...(102 characters)"
    >>> shown(10 ** 5000)
    'an integer of 5001 digits'
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of {_digits(value)} digits"
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN - 2]}...({len(text)} characters)"


def _digits(value: int) -> int:
    return int(math.log10(abs(value))) + 1  # str() refuses integers of more than 4300 digits


# --- text ------------------------------------------------------------------------------


def check_text(what: str, value: Any, *, most: int = MAX_TEXT, empty: bool = False) -> str:
    """Any text: a string of valid UTF-8 without NUL, at most ``most`` characters,
    non-empty unless ``empty``.

    >>> check_text("key", "order 42")
    'order 42'
    >>> check_text("key", "caf\\udcc3")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: key must be valid UTF-8 text (non-UTF-8 bytes cannot be stored), got 'caf\\udcc3'
    """
    if not isinstance(value, str) or (not value and not empty):
        raise InvalidValue(what, "a non-empty string", value)
    if "\x00" in value:
        raise InvalidValue(what, "text without NUL characters", value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: undecodable bytes, via surrogateescape
        raise InvalidValue(what, "valid UTF-8 text (non-UTF-8 bytes cannot be stored)", value) from None
    if len(value) > most:
        raise InvalidValue(what, f"at most {most} characters", value)
    return value


def check_name(what: str, value: Any, *, empty: bool = False) -> str:
    """A queue, task, project, host or model name: a word (no whitespace, no control
    characters) of valid UTF-8, at most ``MAX_NAME`` characters, not ``*`` (which switches
    use for every one); the empty name only where ``empty`` allows it (the default project).

    >>> check_name("queue", "gpu-large")
    'gpu-large'
    >>> check_name("queue", "two words")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: queue must be a non-empty word, got 'two words'
    >>> check_name("queue", "*")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: queue must be a name other than '*', which worker switches use for every one, got '*'
    >>> check_name("queue", "q\\x1b[2J")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: queue must be a name without control characters, got 'q\\x1b[2J'
    """
    if isinstance(value, str) and value == "" and empty:
        return value
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise InvalidValue(what, "a non-empty word", value)
    if value == WILDCARD:
        raise InvalidValue(what, "a name other than '*', which worker switches use for every one", value)
    if _CONTROL.search(value):  # a terminal would act on them (ESC, BEL): see cli.output
        raise InvalidValue(what, "a name without control characters", value)
    return check_text(what, value, most=MAX_NAME)


def check_node_id(what: str, value: Any) -> str:
    """A workflow node's id: letters, digits, ``_`` or ``-``, starting with a letter or ``_``.

    >>> check_node_id("id", "load_2")
    'load_2'
    >>> check_node_id("id", "2load")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: id must be letters, digits, _ or - (starting with a letter or _, at most 64), got '2load'
    """
    if not isinstance(value, str) or not _NODE_ID.fullmatch(value):
        raise InvalidValue(what, "letters, digits, _ or - (starting with a letter or _, at most 64)", value)
    return value


def check_module(what: str, value: Any) -> str:
    """A Python module's name, as ``--app`` and ``--allow-module`` take it: identifiers
    joined by dots.

    >>> check_module("--app", "pkg.tasks")
    'pkg.tasks'
    >>> check_module("--app", "")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: --app must be a module name (identifiers joined by dots, such as app or pkg.tasks), got ''
    """
    if not isinstance(value, str) or not all(part.isidentifier() for part in value.split(".")):
        raise InvalidValue(what, "a module name (identifiers joined by dots, such as app or pkg.tasks)", value)
    return check_text(what, value)


# --- numbers ---------------------------------------------------------------------------


def check_int(what: str, value: Any, least: int | None = None, most: int = INT64_MAX) -> int:
    """An integer (not a bool) from ``least`` (default: the 64-bit minimum) to ``most``
    (default: the 64-bit maximum).

    >>> check_int("priority", -3)
    -3
    >>> check_int("priority", 2 ** 63)
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: priority must be an integer from -9223372036854775808 to 9223372036854775807, got 9223372036854775808
    >>> check_int("max_attempts", 0, least=1)
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: max_attempts must be an integer of at least 1, got 0
    """
    floor = INT64_MIN if least is None else max(least, INT64_MIN)
    at_least = "" if least is None else f" of at least {least}"
    if isinstance(value, bool) or not isinstance(value, int) or (least is not None and value < least):
        raise InvalidValue(what, f"an integer{at_least}", value)
    if not floor <= value <= most:
        bounds = f" from {floor} to {most}" if least is None else f"{at_least} and at most {most}"
        raise InvalidValue(what, f"an integer{bounds}", value)
    return value


def parse_int(what: str, text: Any, least: int | None = None, most: int = INT64_MAX) -> int:
    """An integer written as people and programs write one: ASCII digits with an optional
    leading ``-``, nothing else (Python's ``int()`` also takes spaces, ``_`` and other
    scripts' digits, so ``' 3'`` and ``'٣'`` would be job 3); then as ``check_int``.

    >>> parse_int("id", "42"), parse_int("id", "-7")
    (42, -7)
    >>> parse_int("id", " 3")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: id must be a whole number in ASCII digits, got ' 3'
    >>> parse_int("id", "\u0663")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: id must be a whole number in ASCII digits, got '\u0663'
    """
    if not isinstance(text, str) or not _ASCII_INT.fullmatch(text):
        raise InvalidValue(what, "a whole number in ASCII digits", text)
    if len(text) > 25:  # far past 64 bits: refuse before int() meets thousands of digits
        raise InvalidValue(what, f"an integer from {INT64_MIN if least is None else least} to {most}", text)
    return check_int(what, int(text), least, most)


def read_int(text: Any) -> int:
    """An integer from text in ASCII digits, with an optional leading ``-``; else
    ``ValueError``, as ``int()`` raises it (which also takes ``' 3'``, ``'1_0'`` and ``'\u0663'``).

    >>> read_int("42"), read_int("-7")
    (42, -7)
    >>> read_int("\u0663")
    Traceback (most recent call last):
    ValueError: not a whole number in ASCII digits: '\u0663'
    """
    if not isinstance(text, str) or not _ASCII_INT.fullmatch(text):
        raise ValueError(f"not a whole number in ASCII digits: {shown(text)}")
    return int(text)  # ValueError past 4300 digits


def read_float(text: Any) -> float:
    """A number from text, as ``float()`` reads it less its leniency: ASCII only, without
    spaces or ``_`` (``inf`` and ``nan`` are read, for the checks to refuse by name).

    >>> read_float("1.5"), read_float("1e-6"), read_float("inf")
    (1.5, 1e-06, inf)
    >>> read_float(" 1")
    Traceback (most recent call last):
    ValueError: not a number in ASCII: ' 1'
    """
    if not isinstance(text, str) or not text.isascii() or any(c.isspace() or c == "_" for c in text):
        raise ValueError(f"not a number in ASCII: {shown(text)}")
    return float(text)


def check_number(what: str, value: Any, *, positive: bool = False, most: float | None = None) -> float:
    """A finite number (int or float, not a bool), above 0 if ``positive``, at most ``most``.

    >>> check_number("idle_gpu", 5)
    5.0
    >>> check_number("idle_gpu", float("nan"), positive=True)
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: idle_gpu must be a positive finite number, got nan
    """
    requirement = "a positive finite number" if positive else "a finite number"
    if most is not None:
        requirement += f" of at most {most:g}"
    if not _is_real(value) or not math.isfinite(value) or (positive and not value > 0) \
            or (most is not None and value > most):
        raise InvalidValue(what, requirement, value)
    return float(value)


def check_seconds(what: str, value: Any, *, zero: bool = False, least: float = 0.0,
                  most: float = MAX_SECONDS) -> float:
    """A duration: a finite number of seconds above 0 (or 0 too, with ``zero``), at least
    ``least`` where one is given, at most ``most`` (default 100 years, so ``now + value``
    still fits ``datetime`` and the databases).

    >>> check_seconds("delay", 0, zero=True), check_seconds("timeout", 1.5)
    (0.0, 1.5)
    >>> check_seconds("busy_timeout", float("inf"))
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: busy_timeout must be a positive number of seconds, at most 3155760000 (100 years), got inf
    >>> check_seconds("poll", 1e-06, least=0.05)
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: poll must be a number of seconds of at least 0.05, got 1e-06
    """
    requirement = "a non-negative number of seconds" if zero else "a positive number of seconds"
    if not _is_real(value) or value != value or value < 0 or (value == 0 and not zero):
        raise InvalidValue(what, requirement, value)
    if value < least:
        raise InvalidValue(what, f"a number of seconds of at least {least:g}", value)
    if value > most:
        cap = f"{most:.0f} (100 years)" if most == MAX_SECONDS else f"{most:g}"
        raise InvalidValue(what, f"{requirement}, at most {cap}", value)
    return float(value)


def parse_duration(what: str, text: Any) -> float:
    """A span of time as people write it, in seconds: a plain number of seconds, or
    numbers each followed by a unit ``s``, ``m``, ``h`` or ``d``; then as ``check_seconds``
    (above 0, at most ``MAX_SECONDS``).

    >>> parse_duration("--since", "90s"), parse_duration("--since", "30m"), parse_duration("--since", "1h30m")
    (90.0, 1800.0, 5400.0)
    >>> parse_duration("--since", "7d"), parse_duration("--since", "1.5h"), parse_duration("--since", "45")
    (604800.0, 5400.0, 45.0)
    >>> parse_duration("--since", "1x")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: --since must be a duration such as 90s, 30m, 1h, 1h30m or 7d, got '1x'
    >>> parse_duration("--since", "0h")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: --since must be a positive number of seconds, got 0.0
    """
    requirement = "a duration such as 90s, 30m, 1h, 1h30m or 7d"
    if not isinstance(text, str):
        raise InvalidValue(what, requirement, text)
    if _PLAIN_SECONDS.fullmatch(text):
        seconds = float(text)
    elif _DURATION.fullmatch(text):
        seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(text))
    else:
        raise InvalidValue(what, requirement, text)
    return check_seconds(what, seconds)


def check_epoch(what: str, value: Any) -> float:
    """A moment in UNIX epoch seconds that ``datetime`` can show: year 1 to year 9999 UTC.

    >>> check_epoch("run_at", 1_750_000_000)
    1750000000.0
    >>> check_epoch("run_at", "x")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: run_at must be a time in UNIX epoch seconds from -62135596800 (year 1) to 253402300799 (year 9999), got 'x'
    """
    if not _is_real(value) or not EPOCH_MIN <= value <= EPOCH_MAX:  # NaN fails both comparisons
        raise InvalidValue(what, f"a time in UNIX epoch seconds from {EPOCH_MIN:.0f} (year 1) to "
                                 f"{EPOCH_MAX:.0f} (year 9999)", value)
    return float(value)


_LARGEST_FLOAT = sys.float_info.max


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """Whether a decoded value (a JSON reading, a column) is a number to compute with: an
    int or a finite float, not a bool, and not an int too large to become a float (JSON
    text from plain SQL may hold one; arithmetic with floats would overflow on it).

    >>> [is_finite_number(v) for v in (3, 2.5, float("nan"), True, "4", 10 ** 400)]
    [True, True, False, False, False, False]
    """
    kind = type(value)
    if kind is float:  # nearly every reading: the one cheap test first
        return value - value == 0.0
    if kind is int:
        return -_LARGEST_FLOAT <= value <= _LARGEST_FLOAT
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -_LARGEST_FLOAT <= value <= _LARGEST_FLOAT
    return isinstance(value, float) and math.isfinite(value)


def seconds_of(value: Any) -> float | None:
    """A time or a duration read from a row as a number, or None when the row holds something
    else (plain SQL's text, a bool).

    >>> seconds_of(2.5), seconds_of(3), seconds_of("4"), seconds_of(True)
    (2.5, 3, None, None)
    """
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# --- JSON ------------------------------------------------------------------------------


def check_json(what: str, value: Any) -> Any:
    """A value that may travel as JSON: nested at most ``MAX_JSON_DEPTH`` deep, every
    float finite. (Whether its types encode is the encoder's business.)

    >>> check_json("args", {"items": [1, 2.5, None]})
    {'items': [1, 2.5, None]}
    >>> check_json("args", [float("nan")])
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: args must be JSON with finite numbers (no NaN or Infinity), got nan
    """
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise InvalidValue(what, "JSON with finite numbers (no NaN or Infinity)", item)
        if isinstance(item, (dict, list, tuple)):
            if depth > MAX_JSON_DEPTH:
                raise InvalidValue(what, f"JSON nested at most {MAX_JSON_DEPTH} deep", _Nested(depth))
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return value


class _Nested:
    def __init__(self, depth: int) -> None:
        self.depth = depth

    def __repr__(self) -> str:
        return f"deeper than {self.depth - 1} levels"


def parse_json(what: str, text: str) -> Any:
    """Decode JSON text, as flags and files give it, refusing (``InvalidValue``) what
    ``check_json`` refuses and what the decoder would choke on: NaN and Infinity (which
    ``json.loads`` accepts), numbers too large for a float, integers of more than 4300
    digits, nesting so deep it would exhaust the stack. Text that is not JSON at all
    raises ``json.JSONDecodeError``, for the caller to word.

    >>> parse_json("--args", '{"n": [1, 2]}')
    {'n': [1, 2]}
    >>> parse_json("--value", "NaN")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: --value must be JSON with finite numbers (no NaN or Infinity), got 'NaN'
    >>> parse_json("--args", "[1e999]")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: --args must be JSON with finite numbers (no NaN or Infinity), got '1e999'
    """
    def constant(name: str) -> Any:
        raise InvalidValue(what, "JSON with finite numbers (no NaN or Infinity)", name)

    def finite(literal: str) -> float:
        number = float(literal)
        if not math.isfinite(number):
            constant(literal)
        return number

    try:
        value = json.loads(text, parse_constant=constant, parse_float=finite)
    except json.JSONDecodeError:
        raise  # a syntax error: each caller words it with its position, as its users expect
    except RecursionError:
        raise InvalidValue(what, f"JSON nested at most {MAX_JSON_DEPTH} deep", _Nested(MAX_JSON_DEPTH + 1)) from None
    except ValueError:  # the decoder refuses to convert integers of more than 4300 digits
        raise ConfigError(f"{what} holds an integer of more than 4300 digits; JSON numbers must be smaller") from None
    return check_json(what, value)


def same_json(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: ``true`` is not ``1``, ``1`` is ``1.0``. The one rule for
    comparing JSON values: a workflow's ``skip_if`` and an input node's options both use it.

    >>> same_json(True, 1), same_json(1, 1.0), same_json([True], [1]), same_json({"a": 0}, {"a": False})
    (False, True, False, False)
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[key], b[key]) for key in a)
    return a == b


# --- the table of fields ---------------------------------------------------------------

INT, FLOAT, TEXT = "int", "float", "text"  # how a rule's values are written as text
_READERS: dict[str, Callable[[Any], Any]] = {INT: read_int, FLOAT: read_float}


@dataclasses.dataclass(frozen=True)
class Rule:
    """What the values of one field may be, written once, in ``RULES``.

    ``check(what, value)`` returns the value as it is held or raises ``InvalidValue``
    naming ``what`` (an entry point's own word for the field: ``--queue``, ``queue``,
    ``ROWFLEET_POLL``). ``requirement`` says what is allowed, in words. ``kind`` says how
    the value is written as text (``INT``, ``FLOAT``, or ``TEXT``: the text is the value),
    for the entry points that receive text: flags, variables, files' strings.
    """

    field: str
    requirement: str
    check: Callable[[str, Any], Any]
    kind: str = TEXT

    def read(self, what: str, text: Any) -> Any:
        """The value ``text`` writes, not yet checked; ``InvalidValue`` when it writes no
        value of the rule's kind.

        >>> RULES["procs"].read("--procs", "0")
        0
        >>> RULES["job id"].read("id", " 3")
        Traceback (most recent call last):
        rowfleet.names.InvalidValue: id must be a whole number within 64 bits, in ASCII digits, got ' 3'
        """
        reader = _READERS.get(self.kind)
        if reader is None:
            return text
        try:
            return reader(text)
        except ValueError:
            raise InvalidValue(what, self.requirement, text) from None

    def allows(self, value: Any) -> bool:
        """Whether ``value`` passes ``check``: for an entry point whose own message says what
        is allowed, in its own words.

        >>> RULES["procs"].allows(8), RULES["procs"].allows(0)
        (True, False)
        """
        try:
            self.check("value", value)
        except ConfigError:
            return False
        return True

    def parse(self, what: str, text: Any) -> Any:
        """The value ``text`` writes, checked.

        >>> RULES["procs"].parse("--procs", "8")
        8
        >>> RULES["procs"].parse("--procs", "100000")
        Traceback (most recent call last):
        rowfleet.names.InvalidValue: --procs must be an integer of at least 1 and at most 256, got 100000
        """
        return self.check(what, self.read(what, text))


def _whole(least: int | None, most: int) -> str:
    if least is None:
        return "a whole number within 64 bits, in ASCII digits"
    return f"a whole number from {least} to {most}, in ASCII digits"


def _int_rule(field: str, least: int | None = None, most: int = INT64_MAX) -> Rule:
    return Rule(field, _whole(least, most), partial(check_int, least=least, most=most), INT)


_NAME = f"a word (no whitespace) of at most {MAX_NAME} characters, other than '*'"
_YEARS = f"at most {MAX_SECONDS:.0f} (100 years)"

RULES: dict[str, Rule] = {rule.field: rule for rule in (
    # Names: what rows are filed under.
    Rule("queue", _NAME, check_name),
    Rule("project", _NAME + ", or empty (the default project)", partial(check_name, empty=True)),
    Rule("host", _NAME, check_name),
    Rule("task", _NAME + ": a registered name or module:function", check_name),
    Rule("model", _NAME, check_name),
    Rule("schedule name", _NAME, check_name),
    Rule("node id", "letters, digits, _ or - (starting with a letter or _, at most 64)", check_node_id),
    Rule("module", "a module name (identifiers joined by dots, such as app or pkg.tasks)", check_module),
    # Other text.
    Rule("key", f"text of 1 to {MAX_TEXT} characters", check_text),
    Rule("workflow name", f"text of 1 to {MAX_NAME} characters", partial(check_text, most=MAX_NAME)),
    Rule("by", f"text of at most {MAX_NAME} characters", partial(check_text, most=MAX_NAME, empty=True)),
    Rule("reason", f"text of at most {MAX_TEXT} characters", partial(check_text, empty=True)),
    Rule("path", f"a path of 1 to {MAX_TEXT} characters", check_text),
    Rule("duration", "a duration such as 90s, 30m, 1h, 1h30m or 7d", parse_duration),
    Rule("args", f"JSON nested at most {MAX_JSON_DEPTH} deep, with finite numbers", check_json),
    # Whole numbers.
    _int_rule("job id"),
    _int_rule("run id"),
    _int_rule("priority"),
    _int_rule("limit", 1),
    _int_rule("max attempts", 1, INT32_MAX),
    _int_rule("count", 1, INT32_MAX),
    _int_rule("count or zero", 0, INT32_MAX),
    _int_rule("procs", 1, MOST_PROCS),
    _int_rule("prefetch", 1, MOST_PREFETCHED),
    _int_rule("vram mb", 1, INT32_MAX),
    _int_rule("gpu index", 0, INT32_MAX),
    _int_rule("gpus", 1, MOST_GPUS),
    _int_rule("host priority", -INT32_MAX, INT32_MAX),
    _int_rule("port", 0, MOST_PORT),
    # Numbers and times.
    Rule("seconds", f"a positive number of seconds, {_YEARS}", check_seconds, FLOAT),
    Rule("delay", f"a non-negative number of seconds, {_YEARS}", partial(check_seconds, zero=True), FLOAT),
    Rule("poll", f"a number of seconds from {LEAST_POLL:g} to {MAX_SECONDS:.0f} (100 years)",
         partial(check_seconds, least=LEAST_POLL), FLOAT),
    Rule("positive number", "a positive finite number", partial(check_number, positive=True), FLOAT),
    Rule("run at", f"a time in UNIX epoch seconds from {EPOCH_MIN:.0f} (year 1) to {EPOCH_MAX:.0f} (year 9999)",
         check_epoch, FLOAT),
)}
