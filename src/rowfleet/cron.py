"""When periodic jobs fire: cron expressions, fixed cadences, hour windows. Pure.

Owns the meaning of a schedule: ``Cron`` parses a standard 5-field expression (minute
hour day-of-month month day-of-week, or a macro such as ``@daily``) read in a time zone's
wall-clock time, and ``Every`` is a fixed cadence in seconds counted from an anchor. Both
answer one question, ``next_after(moment)``: the first fire time strictly after
``moment``. ``slots_between`` lists the fire times a catch-up policy must consider, and
``latest_at_or_before`` finds the slot due at a moment. The scheduler
(``rowfleet.services.scheduler``) persists schedules and fires each slot exactly once; nothing here
reads the clock, the database or the environment. Imports only the stdlib and
``rowfleet.errors``.

Every datetime taken must be timezone-aware (a naive one raises ``ValueError``: a bug, not
an input), and every fire time returned is in UTC, so fire times compare and store
without the traps of same-zone arithmetic around a DST change.
"""

from __future__ import annotations

import dataclasses
import math
import re
from bisect import bisect_left
from datetime import MAXYEAR, date, datetime, timedelta, timezone
from typing import NoReturn, Union
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from rowfleet.errors import ConfigError

FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))  # day-of-week 7 is Sunday, as is 0
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_NAMES = ({}, {}, {}, {name: i + 1 for i, name in enumerate(_MONTH_NAMES)},
          {name: i for i, name in enumerate(_WEEKDAY_NAMES)})
_LONGEST_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February as in a leap year

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

# February 29th can be 8 years away (2096 to 2104: 2100 is not a leap year), the longest
# wait any valid expression has; parse() rejects those that can never match at all.
HORIZON_YEARS = 8

_UTC = timezone.utc
_SMALLEST_STEP = timedelta(microseconds=1)
_PART = re.compile(r"(?P<base>\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/(?P<step>[^/]*))?")


class ScheduleError(ConfigError):
    """A schedule is invalid (a cron expression, time zone, hour window or cadence); the
    message names the field and the bad part."""


# --- parsing -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Fields:
    """A parsed cron expression: each field's allowed values, sorted.

    ``weekdays`` counts Sunday as 0 (a 7 in the expression becomes 0). ``any_day`` and
    ``any_weekday`` say whether day-of-month and day-of-week were written as ``*``: when
    neither was, a day matches if either field matches (the classic cron rule).
    """

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]
    any_day: bool
    any_weekday: bool

    def day_matches(self, day: date) -> bool:
        """Does ``day`` satisfy day-of-month and day-of-week (the month is checked apart)?

        >>> friday_13th = parse("0 0 13 * fri")
        >>> [friday_13th.day_matches(date(2025, 6, d)) for d in (6, 12, 13, 14)]
        [True, False, True, False]
        """
        weekday = (day.weekday() + 1) % 7  # Python counts from Monday, cron from Sunday
        in_days, in_weekdays = day.day in self.days, weekday in self.weekdays
        if not self.any_day and not self.any_weekday:
            return in_days or in_weekdays
        return in_days and in_weekdays


def parse(expression: str) -> Fields:
    """Parse a 5-field cron expression or a macro, or raise ``ScheduleError``.

    Each field takes ``*``, a number, a range ``a-b``, a step ``*/n``, ``a-b/n`` or ``a/n``
    (``a`` to the field's end), and comma-separated lists of those. Month and day-of-week
    also take three-letter English names, in any case. An expression that can never
    match (February 30th) is rejected here, so every accepted one fires.

    ``*/n`` counts as restricted for the day-of-month/day-of-week rule: only a bare ``*``
    makes a field unrestricted, as the cron manual says (Vixie cron's code also treats
    ``*/n`` as unrestricted; we do not copy that quirk).

    >>> parse("*/20 9-17/4 * jan,JUL mon-fri").minutes, parse("*/20 9-17/4 * jan,JUL mon-fri").hours
    ((0, 20, 40), (9, 13, 17))
    >>> parse("@weekly").weekdays, parse("0 0 * * 5-7").weekdays
    ((0,), (0, 5, 6))
    >>> parse("0 0 30 2 *")
    Traceback (most recent call last):
    ...
    rowfleet.cron.ScheduleError: cron expression '0 0 30 2 *' never fires: no day-of-month in it occurs in its months
    """
    if not isinstance(expression, str):
        raise ScheduleError(f"a cron expression must be a string, not {type(expression).__name__}")
    text = expression.strip()
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise ScheduleError(f"cron expression {expression!r}: unknown macro {text!r}; "
                                f"use one of {', '.join(MACROS)}")
        text = MACROS[text.lower()]
    parts = text.split()
    if len(parts) != len(FIELD_NAMES):
        raise ScheduleError(f"cron expression {expression!r} has {len(parts)} fields, needs 5: "
                            f"{' '.join(FIELD_NAMES)}")
    values = [_parse_field(expression, index, part) for index, part in enumerate(parts)]
    weekdays = tuple(sorted({0 if value == 7 else value for value in values[4]}))
    fields = Fields(*values[:4], weekdays, any_day=parts[2] == "*", any_weekday=parts[4] == "*")
    # Only day-of-month can rule out every day: each month holds every weekday.
    if fields.any_weekday and not any(day <= _LONGEST_MONTH[month - 1]
                                      for month in fields.months for day in fields.days):
        raise ScheduleError(f"cron expression {expression!r} never fires: no day-of-month in it "
                            f"occurs in its months")
    return fields


def _parse_field(expression: str, index: int, text: str) -> tuple[int, ...]:
    low, high = _RANGES[index]
    chosen: set[int] = set()
    for part in text.split(","):
        match = _PART.fullmatch(part.lower())
        if match is None:
            _fail(expression, index, part, "expected *, a number, a range a-b, or one of those /step")
        base, step_text = match["base"], match["step"]
        if base == "*":
            first, last = low, high
        elif "-" in base:
            first, last = (_value(expression, index, part, value) for value in base.split("-"))
            if first > last:
                _fail(expression, index, part, f"range {base} runs backwards")
        else:
            first = _value(expression, index, part, base)
            # "a/n" runs from a to the field's end; a plain "a" is that one value.
            last = high if step_text is not None else first
        step = 1
        if step_text is not None:
            step = _number(step_text) or 0
            if not 1 <= step <= high:
                _fail(expression, index, part, f"step must be a whole number from 1 to {high}")
        chosen.update(range(first, last + 1, step))
    return tuple(sorted(chosen))


def _value(expression: str, index: int, part: str, text: str) -> int:
    low, high = _RANGES[index]
    names = _NAMES[index]
    if text in names:
        return names[text]
    value = _number(text)
    if value is None:
        hint = f" or a name ({', '.join(names)})" if names else ""
        _fail(expression, index, part, f"{text!r} is not a number{hint}")
    if not low <= value <= high:
        _fail(expression, index, part, f"{text} is outside {low}-{high}")
    return value


def _number(text: str) -> int | None:
    """The value of a string of ASCII digits (``str.isdigit`` also takes "²"), else None.
    Past four digits the value need only be outside every field's range, and ``int()`` of
    a huge string is slow or refused."""
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text) if len(text) <= 4 else 10_000


def _fail(expression: str, index: int, part: str, why: str) -> NoReturn:
    raise ScheduleError(f"cron expression {expression!r}: {FIELD_NAMES[index]} field, {part!r}: {why}")


# --- zones and hour windows ----------------------------------------------------------


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ScheduleError(f"unknown time zone {name!r}: use an IANA name such as 'UTC' or "
                            f"'Europe/Berlin'") from None


def _window_hours(start: int, end: int) -> tuple[int, ...]:
    """The local hours inside the window that opens at ``start`` and closes at ``end``;
    (0, 24) is the whole day. Equal ends are refused: they could mean none of it or all.

    >>> _window_hours(9, 17), _window_hours(22, 2), _window_hours(0, 24) == tuple(range(24))
    ((9, 10, 11, 12, 13, 14, 15, 16), (0, 1, 22, 23), True)
    """
    ok = all(isinstance(hour, int) and not isinstance(hour, bool) for hour in (start, end))
    if not ok or not 0 <= start <= 23 or not 0 <= end <= 24 or start == end:
        raise ScheduleError(f"hour window ({start!r}, {end!r}): needs a start hour 0-23 and a different "
                            f"end hour 0-24, e.g. (9, 17), or (22, 6) across midnight")
    if start < end:
        return tuple(range(start, end))
    return tuple(range(0, end)) + tuple(range(start, 24))


def in_window(moment: datetime, start_hour: int, end_hour: int, zone: str = "UTC") -> bool:
    """Is ``moment``'s wall-clock hour in ``zone`` inside the window from ``start_hour``
    (included) to ``end_hour`` (excluded)? A window whose start is after its end wraps
    midnight: (22, 6) is 22:00 to 05:59.

    >>> noon = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)
    >>> in_window(noon, 9, 17), in_window(noon, 22, 6), in_window(noon, 13, 15, "Europe/Berlin")
    (True, False, True)
    """
    hours = _window_hours(start_hour, end_hour)
    return _aware(moment, "moment").astimezone(_zone(zone)).hour in hours


# --- local wall-clock time to instants ------------------------------------------------


def _aware(moment: datetime, what: str) -> datetime:
    if not isinstance(moment, datetime) or moment.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {moment!r}")
    return moment


def _instant(local: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant a local wall-clock slot fires at: its first occurrence when it
    occurs twice, and the end of the gap when it does not occur at all."""
    first = local.replace(tzinfo=zone, fold=0).astimezone(_UTC)
    if first.astimezone(zone).replace(tzinfo=None) == local:
        return first
    # A gap: fold=1 reads the slot with the offset after the change, fold=0 with the one
    # before, so the change itself lies between the two readings. Find its second.
    before = local.replace(tzinfo=zone, fold=1).astimezone(_UTC)
    after_offset = first.astimezone(zone).utcoffset()
    low, high = 0, int((first - before).total_seconds())
    while low < high:
        middle = (low + high) // 2
        if (before + timedelta(seconds=middle)).astimezone(zone).utcoffset() == after_offset:
            high = middle
        else:
            low = middle + 1
    return before + timedelta(seconds=low)


def _first_at_least(values: tuple[int, ...], wanted: int) -> int | None:
    position = bisect_left(values, wanted)
    return values[position] if position < len(values) else None


def _later(moment: datetime, delta: timedelta) -> datetime | None:
    """``moment + delta``, or None past the last datetime Python can hold."""
    try:
        return moment + delta
    except OverflowError:
        return None


def _next_local_slot(fields: Fields, start: datetime) -> datetime | None:
    """The first wall-clock minute at or after ``start`` (naive) that the fields match,
    within the horizon. Jumps field by field (month, day, hour, minute), so a search
    touches at most a few hundred candidates, never every minute."""
    last_year = min(start.year + HORIZON_YEARS, MAXYEAR)
    slot: datetime | None = start.replace(second=0, microsecond=0)
    while slot is not None and slot.year <= last_year:
        month = _first_at_least(fields.months, slot.month)
        if month is None:
            slot = datetime(slot.year + 1, fields.months[0], 1) if slot.year < MAXYEAR else None
            continue
        if month != slot.month:
            slot = datetime(slot.year, month, 1)
        hour = _first_at_least(fields.hours, slot.hour)
        if hour is None or not fields.day_matches(slot.date()):
            slot = _later(slot.replace(hour=0, minute=0), timedelta(days=1))
            continue
        if hour != slot.hour:
            slot = slot.replace(hour=hour, minute=0)
        minute = _first_at_least(fields.minutes, slot.minute)
        if minute is None:
            slot = _later(slot.replace(minute=0), timedelta(hours=1))
            continue
        return slot.replace(minute=minute)
    return None


# --- schedules -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Cron:
    """A cron expression read in a time zone's wall-clock time, optionally only inside
    an hour window.

    ``hours=(start, end)`` keeps only fire times whose local hour is from ``start``
    (included) to ``end`` (excluded); (22, 6) wraps midnight. The window narrows the hour
    field (so a slot moved out of a DST gap keeps its place in it), and a schedule whose
    hours all fall outside it is rejected when built.

    Daylight-saving changes, as Vixie cron and most schedulers handle them: each local
    wall-clock slot fires exactly once. A slot that does not exist (the spring-forward
    gap) fires at the first instant after the gap, and several slots in one gap fire
    once between them. A slot that occurs twice (the fall-back overlap) fires at its first
    occurrence only, so an hourly job has one run fewer on that night and ``*/15`` waits
    75 minutes across the repeated hour.

    >>> nightly = Cron("30 2 * * *", "Europe/Berlin")
    >>> nightly.next_after(datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc))
    datetime.datetime(2025, 6, 2, 0, 30, tzinfo=datetime.timezone.utc)
    >>> nightly.next_after(datetime(2025, 3, 29, 12, 0, tzinfo=timezone.utc))  # 02:30 is skipped: fires at 03:00 CEST
    datetime.datetime(2025, 3, 30, 1, 0, tzinfo=datetime.timezone.utc)
    >>> Cron("0 * * * *", hours=(22, 6)).next_after(datetime(2025, 6, 1, 5, 0, tzinfo=timezone.utc))
    datetime.datetime(2025, 6, 1, 22, 0, tzinfo=datetime.timezone.utc)
    """

    expression: str
    zone: str = "UTC"
    hours: tuple[int, int] | None = None
    fields: Fields = dataclasses.field(init=False, repr=False, compare=False)
    _tz: ZoneInfo = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fields = parse(self.expression)
        if self.hours is not None:
            if not isinstance(self.hours, tuple) or len(self.hours) != 2:
                raise ScheduleError(f"hour window {self.hours!r}: needs a (start, end) pair, e.g. (22, 6)")
            allowed = set(_window_hours(*self.hours))
            narrowed = tuple(hour for hour in fields.hours if hour in allowed)
            if not narrowed:
                raise ScheduleError(f"cron expression {self.expression!r} never fires inside the hour "
                                    f"window {self.hours[0]}-{self.hours[1]}")
            fields = dataclasses.replace(fields, hours=narrowed)
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "_tz", _zone(self.zone))

    def next_after(self, moment: datetime) -> datetime:
        """The first fire time strictly after ``moment``, in UTC.

        >>> Cron("0 9 * * mon").next_after(datetime(2025, 6, 2, 9, 0, tzinfo=timezone.utc))  # a Monday, 09:00
        datetime.datetime(2025, 6, 9, 9, 0, tzinfo=datetime.timezone.utc)
        """
        after = _aware(moment, "moment").astimezone(_UTC)
        slot = _next_local_slot(self.fields, after.astimezone(self._tz).replace(tzinfo=None, fold=0))
        # Slots come in wall-clock order and their instants never go backwards, so the
        # first one past ``after`` is the answer. Only slots at or before ``after`` are
        # passed over: at most an hour's worth when ``after`` is in a repeated hour.
        while slot is not None:
            fire = _instant(slot, self._tz)
            if fire > after:
                return fire
            following = _later(slot, timedelta(minutes=1))
            slot = None if following is None else _next_local_slot(self.fields, following)
        raise ValueError(f"cron expression {self.expression!r} has no fire time within {HORIZON_YEARS} "
                         f"years after {moment.isoformat()} (or before the year {MAXYEAR + 1})")


def every(seconds: float, anchor: datetime, after: datetime) -> datetime:
    """The next fire of a fixed cadence: the first ``anchor + k * seconds`` (k = 0, 1, ...)
    strictly after ``after``, in UTC. The anchor is the first fire, so a moment before it
    gets the anchor. Sub-minute cadences (and any others) that cron cannot express.

    >>> start = datetime(2025, 1, 1, 0, 0, tzinfo=timezone.utc)
    >>> every(30, start, start + timedelta(seconds=45)).time(), every(30, start, start + timedelta(seconds=60)).time()
    (datetime.time(0, 1), datetime.time(0, 1, 30))
    >>> every(0.25, start, start - timedelta(days=1)) == start
    True
    """
    step = _step(seconds)
    anchor = _aware(anchor, "anchor").astimezone(_UTC)
    after = _aware(after, "after").astimezone(_UTC)
    if after < anchor:
        return anchor
    # timedelta // timedelta is exact integer arithmetic on microseconds: no float drift.
    return anchor + ((after - anchor) // step + 1) * step


def _step(seconds: float) -> timedelta:
    valid = isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and math.isfinite(seconds)
    step = timedelta(seconds=seconds) if valid else timedelta(0)
    if step < _SMALLEST_STEP:
        raise ScheduleError(f"cadence of {seconds!r} seconds: needs a positive number of seconds")
    return step


@dataclasses.dataclass(frozen=True)
class Every:
    """A fixed cadence: every ``seconds`` from ``anchor``, optionally only inside an hour
    window of ``zone``'s wall-clock time (a fire outside it moves to the first slot of the
    cadence inside it).

    >>> start = datetime(2025, 6, 1, 0, 0, 10, tzinfo=timezone.utc)
    >>> Every(20, start).next_after(start)
    datetime.datetime(2025, 6, 1, 0, 0, 30, tzinfo=datetime.timezone.utc)
    >>> Every(20, start, hours=(9, 17)).next_after(start)
    datetime.datetime(2025, 6, 1, 9, 0, 10, tzinfo=datetime.timezone.utc)
    """

    seconds: float
    anchor: datetime
    hours: tuple[int, int] | None = None
    zone: str = "UTC"

    def __post_init__(self) -> None:
        _step(self.seconds)
        _aware(self.anchor, "anchor")
        _zone(self.zone)
        if self.hours is not None:
            if not isinstance(self.hours, tuple) or len(self.hours) != 2:
                raise ScheduleError(f"hour window {self.hours!r}: needs a (start, end) pair, e.g. (22, 6)")
            _window_hours(*self.hours)

    def next_after(self, moment: datetime) -> datetime:
        """The first fire time strictly after ``moment``, in UTC; see ``every``.

        >>> nightly = Every(3600, datetime(2025, 1, 1, 0, 30, tzinfo=timezone.utc), hours=(22, 6))
        >>> nightly.next_after(datetime(2025, 1, 1, 5, 30, tzinfo=timezone.utc)).time()  # 06:30 is past the window
        datetime.time(22, 30)
        """
        fire = every(self.seconds, self.anchor, moment)
        if self.hours is None:
            return fire
        # Windows open at the top of a local hour: jump to the next opening, then to the
        # cadence's first slot at or after it, until a slot lands inside the window.
        openings = Cron("0 * * * *", self.zone, self.hours)
        give_up = fire + timedelta(days=366 * HORIZON_YEARS)
        while fire <= give_up:
            if in_window(fire, *self.hours, self.zone):
                return fire
            fire = every(self.seconds, self.anchor, openings.next_after(fire) - _SMALLEST_STEP)
        raise ScheduleError(f"a cadence of {self.seconds!r} seconds from {self.anchor.isoformat()} never "
                            f"lands inside the hour window {self.hours[0]}-{self.hours[1]} ({self.zone})")


Schedule = Union[Cron, Every]


def slots_between(schedule: Schedule, start: datetime, end: datetime, limit: int) -> list[datetime]:
    """Every fire time in (``start``, ``end``], in order, but no more than ``limit`` of
    them: the earliest ones. To go on past a full list, call again with its last slot as
    ``start``.

    >>> hourly = Cron("@hourly")
    >>> noon = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)
    >>> [slot.hour for slot in slots_between(hourly, noon, noon + timedelta(hours=3), limit=10)]
    [13, 14, 15]
    >>> [slot.hour for slot in slots_between(hourly, noon, noon + timedelta(days=30), limit=2)]
    [13, 14]
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be a whole number 0 or more, got {limit!r}")
    start, end = _aware(start, "start"), _aware(end, "end")
    slots: list[datetime] = []
    while len(slots) < limit:
        fire = schedule.next_after(slots[-1] if slots else start)
        if fire > end:
            break
        slots.append(fire)
    return slots


def latest_at_or_before(schedule: Schedule, moment: datetime) -> datetime | None:
    """The last fire time at or before ``moment``, in UTC: the slot that is due at
    ``moment``. None when there is none within the horizon before it.

    Built on ``next_after`` alone, which never goes backwards as its argument grows: look
    back in doubling steps until a window holds a fire time, then bisect between that fire
    time and ``moment``. A few dozen calls however dense the schedule, never one per slot.

    >>> hourly = Cron("@hourly")
    >>> latest_at_or_before(hourly, datetime(2025, 6, 1, 12, 59, 59, tzinfo=timezone.utc)).hour
    12
    >>> latest_at_or_before(hourly, datetime(2025, 6, 1, 13, 0, tzinfo=timezone.utc)).hour  # "at" counts
    13
    """
    moment = _aware(moment, "moment").astimezone(_UTC)
    reach, farthest = timedelta(seconds=1), timedelta(days=366 * (HORIZON_YEARS + 1))
    while True:
        try:
            low = schedule.next_after(moment - reach)
        except OverflowError:  # looking back past the first datetime Python can hold
            return None
        if low <= moment:
            break
        if reach >= farthest:
            return None
        reach *= 2
    # ``low`` fires at or before ``moment``; nothing fires in (high, moment].
    high = moment
    while True:
        following = schedule.next_after(low)
        if following > moment:
            return low
        low = following
        middle = low + (high - low) / 2
        probe = schedule.next_after(middle)
        if probe <= moment:
            low = probe
        else:
            high = middle
