"""Periodic jobs: what a schedule is, the two ways to declare one, and which slot is due.

Owns what a schedule is (``Schedule``, validated when built), the two ways to declare one
(``@rowfleet.periodic`` on a function, ``load_schedule_file`` for a JSON list; ``schedules_of``
gathers both, ``vet_schedules`` checks their tasks as ``enqueue`` would), and the pure
decision of which slot is due, and why (``due``). The service that fires them is
``rowfleet.services.scheduler``; when schedules fire is ``rowfleet.cron``'s business; storing
a fired slot exactly once is the store's (``ScheduleStore.fire_slot``). No database, no clock:
every decision takes ``now``.

When a slot fires. A slot is a fire time of the schedule (epoch seconds). At each tick the
*due slot* is the latest slot at or before now; at most one slot per schedule fires per
tick, and only a slot newer than the newest one fired (``last_slot``, kept in the
database, shared by every scheduler of the project):

* on time: the due slot fires when it is at most ``grace`` seconds old (by default
  ``max(2 * tick, 60)``), whatever the policy, on a scheduler's first tick too;
* ``missed="skip"`` (the default): a due slot older than that was missed, because every
  scheduler was down or stuck; it and the slots before it are skipped, and the schedule
  waits for its next slot;
* ``missed="catch_up"``: once a schedule has fired at least once, a missed due slot still
  fires, however late: one job makes up for the whole gap (the latest missed slot; the
  ones before it never fire), then the schedule goes on as normal;
* ``at_boot=True``: on a scheduler's first tick the due slot fires however old it is,
  unless it has fired already. With no ``last_slot`` (a schedule that never fired) only
  ``at_boot`` fires a slot that is not on time.

Why a slot fired is kept with it, on its job and its record (``due`` says it): ``tick``
(on time), ``boot`` (not on time, fired by ``at_boot`` on a scheduler's first tick),
``catch_up`` (a missed slot made up for), or ``manual``: an operator fired the schedule
(``rowfleet fire NAME``), and the slot is the moment it was fired. A manual slot is fired
as the others are, exactly once, and counts as the schedule's newest: a slot due before
it that had not fired yet (every scheduler down, or a hair behind) no longer fires, since
the operator's job stands for it, nor does an ``at_boot`` or a catch-up slot before it.

Exactly once: the slot is the key of its record (``schedule_slots``), written in the
transaction that enqueues its job, and a scheduler that finds the slot (or a later one)
fired enqueues nothing. Two schedulers deciding alike (they read the same ``last_slot``
and compute the same slots) therefore make one job between them.

``every`` cadences count from the Unix epoch (an ``every: 900`` fires at :00, :15, :30,
:45 UTC), so every scheduler computes the same slots.
"""


from __future__ import annotations

import dataclasses
import json
import threading
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from rowfleet import names, tasks
from rowfleet.cron import Cron, Every, ScheduleError, latest_at_or_before
from rowfleet.errors import ConfigError, UnknownTask
from rowfleet.files import read_declaration
from rowfleet.job import BOOT, CATCH_UP, MANUAL, TICK, JobSpec, encode_json

SKIP = "skip"
MISSED_POLICIES = (SKIP, CATCH_UP)  # catch_up is also the reason its slots fire for (job.FIRE_REASONS)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # where every cadence counts from
SHORTEST_GRACE = 60.0  # seconds a slot may be late and still be on time, at the least


class InvalidSchedule(ScheduleError):
    """A schedule's field is invalid; the message names the schedule and the field."""

    def __init__(self, schedule: Any, field: str, problem: str) -> None:
        self.schedule, self.field, self.problem = schedule, field, problem
        super().__init__(f"schedule {schedule!r}: {field}: {problem}")


# --- what a schedule is --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A periodic job: ``task`` with ``args`` enqueued on ``queue`` at each slot of exactly
    one of ``cron`` (a 5-field expression or a macro, read in ``zone``) or ``every``
    (seconds). ``hours=(start, end)`` keeps only slots from local hour ``start`` to
    ``end`` (excluded; (22, 6) wraps midnight). ``missed`` and ``at_boot``: see the module
    docstring. ``queue`` and ``timeout`` default to the task's own when it is registered
    (when the schedule is built), else "default" and the worker's budget.

    >>> Schedule("refresh", "app:refresh", cron="*/15 * * * *", hours=[8, 18]).hours
    (8, 18)
    >>> Schedule("refresh", "app:refresh", every=0)
    Traceback (most recent call last):
    ...
    rowfleet.schedule.InvalidSchedule: schedule 'refresh': every: must be a positive number of seconds, at most 100 years, got 0
    """

    name: str
    task: str
    cron: str | None = None
    every: float | None = None
    args: Any = None
    queue: str | None = None
    zone: str = "UTC"
    hours: tuple[int, int] | None = None
    missed: str = SKIP
    at_boot: bool = False
    priority: int = 0
    max_attempts: int = 5
    timeout: float | None = None
    model: str | None = None     # the GPU model its jobs need: the task's unless it says
    vram_mb: int | None = None   # their GPU memory (MiB): its own, else the model's registration
    gpus: int | None = None      # GPUs of one host their jobs need: its own, else the task's
    timing: Cron | Every = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not names.RULES["schedule name"].allows(self.name):
            raise InvalidSchedule(self.name, "name", "must be a non-empty word without spaces")
        if not names.RULES["task"].allows(self.task):
            raise InvalidSchedule(self.name, "task", f"must be a registered task name or module:function, "
                                                     f"got {self.task!r}")
        self._check_options()
        if self.hours is not None:
            if not isinstance(self.hours, (list, tuple)) or len(self.hours) != 2:
                raise InvalidSchedule(self.name, "hours", f"needs [start, end] local hours, e.g. [8, 18], "
                                                          f"got {self.hours!r}")
            object.__setattr__(self, "hours", tuple(self.hours))
        stamp = tasks.stamp(self.task, self.queue, self.timeout, self.model, self.vram_mb,
                            self.gpus)  # a fired job reads no registry
        for field in ("queue", "timeout", "model", "vram_mb", "gpus"):
            object.__setattr__(self, field, getattr(stamp, field))
        object.__setattr__(self, "timing", self._timing())
        try:
            self.spec("")
        except ConfigError as exc:  # what JobSpec refuses that the checks above let by
            raise InvalidSchedule(self.name, "job", str(exc)) from None

    def _check_options(self) -> None:
        checks = [
            ("queue", self.queue is None or names.RULES["queue"].allows(self.queue),
             "must be a non-empty word without spaces, other than '*' (which no worker serves)"),
            ("zone", isinstance(self.zone, str), "must be an IANA time zone name such as 'Europe/Berlin'"),
            ("missed", self.missed in MISSED_POLICIES, f"must be {' or '.join(map(repr, MISSED_POLICIES))}"),
            ("at_boot", isinstance(self.at_boot, bool), "must be true or false"),
            ("priority", names.RULES["priority"].allows(self.priority), "must be a whole number within 64 bits (lower runs sooner)"),
            ("max_attempts", names.RULES["max attempts"].allows(self.max_attempts),
             "must be a whole number of at least 1"),
            ("timeout", self.timeout is None or names.RULES["seconds"].allows(self.timeout),
             "must be a positive number of seconds, at most 100 years"),
            ("model", self.model is None or names.RULES["model"].allows(self.model), "must be a model id: a word without spaces"),
            ("vram_mb", self.vram_mb is None or names.RULES["vram mb"].allows(self.vram_mb),
             "must be a whole number of MiB, at least 1"),
            ("gpus", self.gpus is None or names.RULES["gpus"].allows(self.gpus),
             f"must be a whole number of GPUs from 1 to {names.MOST_GPUS}"),
            ("args", _is_json(self.args), "must be a JSON value (an object, a list, a string, a number ...)"),
        ]
        for field, ok, requirement in checks:
            if not ok:
                raise InvalidSchedule(self.name, field, f"{requirement}, got {getattr(self, field)!r}")

    def _timing(self) -> Cron | Every:
        if (self.cron is None) == (self.every is None):
            raise InvalidSchedule(self.name, "cron/every", "needs exactly one of cron (an expression such as "
                                                           "'*/15 * * * *') or every (seconds)")
        self._built("zone", lambda: Cron("* * * * *", self.zone))
        self._built("hours", lambda: Cron("* * * * *", hours=self.hours))
        if self.cron is not None:
            if not isinstance(self.cron, str):
                raise InvalidSchedule(self.name, "cron", f"must be a string such as '*/15 * * * *', got {self.cron!r}")
            return self._built("cron", lambda: Cron(self.cron, self.zone, self.hours))
        if not names.RULES["seconds"].allows(self.every):
            raise InvalidSchedule(self.name, "every", f"must be a positive number of seconds, at most 100 years, "
                                                      f"got {names.shown(self.every)}")
        cadence = self._built("every", lambda: Every(self.every, EPOCH, self.hours, self.zone))
        if self.hours is not None:  # a cadence can miss a window for ever: find out now, not at a tick
            self._built("every", lambda: cadence.next_after(EPOCH))
        return cadence

    def _built(self, field: str, build: Callable[[], Any]) -> Any:
        try:
            return build()
        except ScheduleError as exc:
            raise InvalidSchedule(self.name, field, str(exc)) from None

    def spec(self, project: str) -> JobSpec:
        """The job each slot enqueues, in ``project``."""
        return JobSpec(task=self.task, args=self.args, queue=self.queue, project=project, priority=self.priority,
                       max_attempts=self.max_attempts, timeout=self.timeout, model=self.model, vram_mb=self.vram_mb,
                       gpus=self.gpus)

    def to_dict(self) -> dict[str, Any]:
        """As a schedule file writes it."""
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self) if field.init}
        data["hours"] = None if self.hours is None else list(self.hours)
        return data


def _is_json(value: Any) -> bool:
    try:
        encode_json(names.check_json("args", value))
    except (TypeError, ValueError, ConfigError):
        return False
    return True


# --- declaring schedules: a JSON file, or @rowfleet.periodic ----------------------------

FILE_KEYS = tuple(field.name for field in dataclasses.fields(Schedule) if field.init)
REQUIRED_KEYS = ("name", "task")
def load_schedule_file(path: str) -> list[Schedule]:
    """The schedules of a JSON file: a list of objects with ``FILE_KEYS``, e.g.
    ``[{"name": "refresh", "task": "app:refresh", "cron": "*/15 * * * *"}]``.

    Any problem (unreadable, not a regular file, larger than ``rowfleet.files.DECLARATION_MOST``, not JSON,
    an unknown key, a bad value, a name given twice) is one ``ConfigError`` line naming the
    file, the entry (counted from 1) and the key.
    Tasks named in it are looked up for their queue and timeout, so import the apps first.
    """
    where = f"schedule file {path}"
    text = read_declaration(path, where)  # a regular file of at most files.DECLARATION_MOST bytes
    try:
        data = names.parse_json(where, text)  # NaN, huge numbers, deep nesting: one line too
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(data, list):
        raise ConfigError(f"{where}: needs a JSON list of schedules, e.g. "
                          f'[{{"name": "refresh", "task": "app:refresh", "cron": "*/15 * * * *"}}], '
                          f"not {_json_type(data)}")
    schedules: list[Schedule] = []
    first_entry: dict[str, int] = {}
    for number, entry in enumerate(data, start=1):
        schedule = _file_entry(where, number, entry)
        if schedule.name in first_entry:
            raise ConfigError(f"{where}: entry {number}: name {schedule.name!r} is taken by entry "
                              f"{first_entry[schedule.name]}; schedule names must be unique")
        first_entry[schedule.name] = number
        schedules.append(schedule)
    return schedules


def _file_entry(where: str, number: int, entry: Any) -> Schedule:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: entry {number}: needs an object with a name, a task and a cron or every, "
                          f"not {_json_type(entry)}")
    label = f"entry {number}" + (f" ({entry['name']!r})" if isinstance(entry.get("name"), str) else "")
    unknown = sorted(set(entry) - set(FILE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: {label}: unknown key {unknown[0]!r}; the keys are {', '.join(FILE_KEYS)}")
    for key in REQUIRED_KEYS:
        if key not in entry:
            raise ConfigError(f"{where}: {label}: missing key {key!r}")
    try:
        return Schedule(**entry)
    except InvalidSchedule as exc:
        raise ConfigError(f"{where}: {label}: {exc.field}: {exc.problem}") from None


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true or false", type(None): "null"}
    return names.get(type(value), "a number")


_schedules: dict[str, Schedule] = {}
_lock = threading.Lock()


def periodic(cron: str | None = None, *, every: float | None = None, name: str | None = None, args: Any = None,
             queue: str = "default", zone: str = "UTC", hours: Sequence[int] | None = None, missed: str = SKIP,
             at_boot: bool = False, priority: int = 0, max_attempts: int = 5,
             timeout: float | None = None, model: str | None = None, kind: type[tasks.Task] = tasks.Task,
             ) -> Callable[[Callable[..., Any]], tasks.Task]:
    """Register a function as a task and as a schedule that enqueues it at each slot of
    ``cron`` or ``every`` seconds. ``name`` names both (default ``module:qualname``); the
    other options are ``Schedule``'s, ``timeout``, ``model`` and ``kind`` the task's (see
    ``tasks.task``). A scheduler started with
    ``--app MODULE`` fires the schedules that module declares.

    >>> @periodic("0 3 * * *", name="doc.nightly", args={"full": True}, zone="Europe/Berlin")
    ... def nightly(full):
    ...     return full
    >>> [s.cron for s in registered_schedules() if s.name == "doc.nightly"], nightly(full=False)
    (['0 3 * * *'], False)
    """
    if callable(cron):
        raise ConfigError("@periodic needs a cron expression or every=SECONDS, e.g. @rowfleet.periodic('*/15 * * * *')")

    def register(function: Callable[..., Any]) -> tasks.Task:
        registered = tasks.task(function, name=name, queue=queue, timeout=timeout, model=model, kind=kind)
        schedule = Schedule(name=registered.name, task=registered.name, cron=cron, every=every, args=args,
                            queue=registered.queue, timeout=registered.timeout, zone=zone, hours=hours,
                            missed=missed, at_boot=at_boot, priority=priority, max_attempts=max_attempts)
        with _lock:
            _schedules[schedule.name] = schedule  # a module imported again registers again, as tasks do
        return registered

    return register


def registered_schedules() -> list[Schedule]:
    """The schedules ``@periodic`` registered in this process, in registration order."""
    with _lock:
        return list(_schedules.values())


def schedules_of(files: Sequence[str], apps: Sequence[str]) -> list[Schedule]:
    """The schedules of ``files`` and of the ``apps`` modules' ``@periodic``."""
    tasks.import_apps(apps)  # first: a file's schedules take their task's queue from the registry
    return [schedule for path in files for schedule in load_schedule_file(path)] + registered_schedules()


def vet_schedules(schedules: Iterable[Schedule], allow_modules: Iterable[str], strict: bool) -> list[str]:
    """What a worker trusting ``allow_modules`` would refuse of the schedules' tasks, checked
    as ``enqueue`` checks one (``tasks.vet``): a warning per schedule, or, with ``strict``
    (the apps are loaded here, so this process knows what a worker would run), ``UnknownTask``
    naming the first schedule whose task no app registers or no prefix allows."""
    warnings = []
    for schedule in schedules:
        try:
            warning = tasks.vet(schedule.task, allow_modules, strict=strict)
        except UnknownTask as exc:
            raise type(exc)(f"schedule {schedule.name!r}: {exc}") from None
        if warning:
            warnings.append(f"schedule {schedule.name!r}: {warning}")
    return warnings


# --- when a slot fires (pure) -------------------------------------------------------------


class Due(NamedTuple):
    """A slot to fire (epoch seconds) and why (one of ``job.FIRE_REASONS``)."""

    slot: float
    reason: str


def due(schedule: Schedule, last_slot: float | None, now: float, grace: float,
        booting: bool = False) -> Due | None:
    """The slot ``schedule`` should fire at ``now`` (epoch seconds) and why, or None.
    ``last_slot`` is the newest slot fired (None: never), ``grace`` how late a slot may be
    and still be on time, ``booting`` whether this is a scheduler's first tick. See the
    module docstring.

    >>> nightly = Schedule("n", "app:n", cron="0 3 * * *", at_boot=True, missed=CATCH_UP)
    >>> three = datetime(2025, 6, 2, 3, tzinfo=timezone.utc).timestamp()
    >>> due(nightly, three - 86400, three + 5, grace=60).reason           # on time
    'tick'
    >>> due(nightly, None, three + 3600, grace=60, booting=True).reason   # late, at boot
    'boot'
    >>> due(nightly, three - 86400, three + 3600, grace=60).reason        # late, made up for
    'catch_up'
    >>> due(nightly, three, three + 3600, grace=60, booting=True) is None  # fired already
    True
    >>> hourly = Schedule("h", "app:h", cron="@hourly")
    >>> noon = datetime(2025, 6, 1, 12, tzinfo=timezone.utc).timestamp()
    >>> due(hourly, noon - 7200, noon + 600, grace=60) is None       # missed: skipped
    True
    """
    latest = latest_at_or_before(schedule.timing, datetime.fromtimestamp(now, timezone.utc))
    if latest is None:
        return None
    slot = latest.timestamp()
    if last_slot is not None and slot <= last_slot:
        return None
    if now - slot <= grace:
        return Due(slot, TICK)
    if booting and schedule.at_boot:
        return Due(slot, BOOT)
    if schedule.missed == CATCH_UP and last_slot is not None:
        return Due(slot, CATCH_UP)
    return None


def manual(now: float) -> Due:
    """An operator's fire at ``now``: the slot is that moment (see the module docstring).

    >>> manual(1750000000.25)
    Due(slot=1750000000.25, reason='manual')
    """
    return Due(now, MANUAL)


NAMES_SHOWN = 20  # schedules an unknown name's message lists, at most


def named(schedules: Iterable[Schedule], name: str) -> Schedule:
    """The schedule called ``name`` among ``schedules``; ``ConfigError`` naming those there are.

    >>> named([Schedule("pull", "app:pull", every=60)], "pull").every
    60
    >>> named([Schedule("pull", "app:pull", every=60)], "push")
    Traceback (most recent call last):
    ...
    rowfleet.errors.ConfigError: no schedule is named 'push'; the schedules given are: pull
    """
    found = {schedule.name: schedule for schedule in schedules}
    if name in found:
        return found[name]
    listed = sorted(found)[:NAMES_SHOWN]
    more = f" and {len(found) - len(listed)} more" if len(found) > len(listed) else ""
    given = f"the schedules given are: {', '.join(listed)}{more}" if found else "no schedule was given"
    raise ConfigError(f"no schedule is named {name!r}; {given}")


def next_slot(schedules: Iterable[Schedule], now: float) -> float:
    """The earliest slot of any of ``schedules`` strictly after ``now``: when to look again."""
    moment = datetime.fromtimestamp(now, timezone.utc)
    return min(schedule.timing.next_after(moment).timestamp() for schedule in schedules)
