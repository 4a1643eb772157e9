"""What a job is: its states, its row as a dataclass, what a handler's run decides, and
how long retries wait (a job's, and a workflow outbox event's drain).

Pure: no I/O, no database. The store turns rows into ``Job``; the worker turns a handler's
return or exception into an ``Outcome`` with ``decide_outcome``.

A row may come from anyone's plain SQL, and SQLite keeps whatever it is given, so
``Job.from_row`` and ``Event.from_row`` never raise on a value: one that cannot be decoded
is kept as stored and named in ``Job.unreadable``, and a worker fails such a job at once
(``unreadable_outcome``) instead of dying on it. Every row type reads its row by column
name (``by_name``), never by position, so a column added out of order shifts nothing; a
row lacking a column its type needs is a query's bug and raises ``MissingColumn``.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import random
import traceback as tb
from collections.abc import Mapping, Set
from typing import Any, Callable

from rowfleet import names
from rowfleet.errors import ConfigError, JobFailed, UnknownTask

QUEUED = "queued"
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
STATES = (QUEUED, RUNNING, COMPLETED, FAILED, CANCELLED)
TERMINAL = (COMPLETED, FAILED, CANCELLED)
UNIQUE_MODES = (None, QUEUED, "active")  # JobSpec.unique: off, while a duplicate waits, while it waits or runs
# Why a schedule fired a job (its ``fire_reason``, and its slot's record): on time, at a
# scheduler's boot, a missed slot made up for, or an operator's (``rowfleet.schedule``).
TICK, BOOT, CATCH_UP, MANUAL = "tick", "boot", "catch_up", "manual"
FIRE_REASONS = (TICK, BOOT, CATCH_UP, MANUAL)


class Retry(Exception):
    """Raised by a handler to run the job again after ``delay`` seconds.

    Not an error: it spends the attempt it ran in, and once attempts run out the job fails.
    """

    def __init__(self, delay: float = 0.0, reason: str = "") -> None:
        try:  # the one rule for a delay: finite, and short enough that now + delay is a time
            self.delay = names.check_seconds("Retry delay", delay, zero=True)
        except ConfigError as exc:  # a handler's mistake, raised in the handler
            raise ValueError(str(exc)) from None
        self.reason = reason
        super().__init__(reason or f"retry in {delay:g}s")


class Cancel(Exception):
    """Raised by a handler to stop the job for good, without retries: it ends ``cancelled``."""

    def __init__(self, reason: str = "cancelled by its handler") -> None:
        self.reason = reason
        super().__init__(reason)


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What an enqueue asks for, validated before anything is written."""

    task: str
    args: Any = None
    queue: str = "default"
    project: str = ""
    priority: int = 0
    run_next: bool = False
    delay: float = 0.0
    run_at: float | None = None
    key: str | None = None
    max_attempts: int = 5
    timeout: float | None = None
    model: str | None = None
    vram_mb: int | None = None  # GPU memory the job needs, in MiB; None: unknown (fits anywhere)
    # While a duplicate (same project, queue, task and args; or the same key) waits, or with
    # "active" waits or runs, the enqueue returns it instead of writing another.
    unique: str | None = None
    debounce: float = 0.0  # a duplicate pushes the waiting job's start this far (implies unique="queued")
    concurrency_key: str | None = None  # what per-key limits and fair share count by (rowfleet.flow)
    gpus: int | None = None  # GPUs of one host it needs (each with vram_mb); None: none asked for

    def __post_init__(self) -> None:
        rule = names.RULES
        rule["task"].check("task name", self.task)
        rule["queue"].check("queue", self.queue)  # '*' too: no worker could ever serve it
        rule["project"].check("project", self.project)
        rule["priority"].check("priority", self.priority)
        rule["max attempts"].check("max_attempts", self.max_attempts)
        object.__setattr__(self, "delay", rule["delay"].check("delay", self.delay))
        if self.run_at is not None:
            object.__setattr__(self, "run_at", rule["run at"].check("run_at", self.run_at))
        if self.key is not None:
            rule["key"].check("an idempotency key", self.key)
        if self.timeout is not None:
            object.__setattr__(self, "timeout", rule["seconds"].check("timeout", self.timeout))
        if self.model is not None:
            rule["model"].check("a required model", self.model)
        if self.concurrency_key is not None:
            rule["key"].check("a concurrency key", self.concurrency_key)
        if self.vram_mb is not None:
            rule["vram mb"].check("vram_mb", self.vram_mb)
        if self.gpus is not None:
            rule["gpus"].check("gpus", self.gpus)
        rule["args"].check("args", self.args)
        try:
            object.__setattr__(self, "_args_json", encode_json(self.args))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"args must be JSON-serialisable: {exc}") from None
        object.__setattr__(self, "debounce", rule["delay"].check("debounce", self.debounce))
        if self.unique is None and self.debounce > 0:
            object.__setattr__(self, "unique", QUEUED)
        if self.unique not in UNIQUE_MODES:
            raise ConfigError(f"unique must be one of {', '.join(map(repr, UNIQUE_MODES[1:]))}, got {self.unique!r}")

    def args_json(self) -> str:
        return self._args_json  # encoded once, when the spec was validated

    @property
    def idempotency_key(self) -> str | None:
        """The key that returns its job for as long as the job is kept: ``key``, unless the
        job is unique, whose key makes a duplicate only while the job waits or runs."""
        return self.key if self.unique is None else None

    def unique_key(self) -> str | None:
        """What makes another enqueue a duplicate of this one (with ``unique``): its
        idempotency key when it has one, else its task and args (the args with their keys in
        order, so that {"a": 1, "b": 2} and {"b": 2, "a": 1} are one job), as a digest.

        >>> first = JobSpec("t", {"a": 1, "b": 2}, unique="queued").unique_key()
        >>> first == JobSpec("t", {"b": 2, "a": 1}, unique="active").unique_key()
        True
        >>> JobSpec("t", key="order-7", unique="queued").unique_key(), JobSpec("t").unique_key()
        ('key:order-7', None)
        """
        if self.unique is None:
            return None
        if self.key is not None:
            return f"key:{self.key}"
        canonical = json.dumps([self.task, self.args], sort_keys=True, separators=(",", ":"))
        return "args:" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode_json(value: Any) -> str:
    """Compact JSON; NaN and infinities are refused (they are not JSON)."""
    return _ENCODER.encode(value)


_DETAIL_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=lambda value: raw_text(value))


def encode_detail(detail: dict[str, Any]) -> str:
    """An event's detail as stored: compact JSON, a value JSON cannot hold (a column that
    plain SQL filled with bytes, copied into the detail) as its text (``raw_text``).

    >>> encode_detail({"holder": b"box", "attempt": 2})
    '{"holder":"box","attempt":2}'
    """
    return _DETAIL_ENCODER.encode(detail)


def decode_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Made once: json.loads with a keyword would build a decoder per call, on the claim's hot path.
_STRICT_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


# What each column of ``jobs`` must hold; every column not named here holds text.
_JSON_COLUMNS = frozenset({"args", "result"})
_INTEGER_COLUMNS = frozenset({"id", "priority", "run_next", "attempts", "max_attempts", "lease_token", "run_id",
                              "node_item", "node_generation", "watchdog_retries", "delayed", "vram_mb",
                              "warm_claim", "waited", "gpus"})
_TIME_COLUMNS = ("run_at", "lease_expires_at", "created_at", "updated_at", "started_at", "finished_at",
                 "progress_at", "cancel_requested_at", "unplaceable_at", "tallied_at", "schedule_slot")
_NUMBER_COLUMNS = frozenset(_TIME_COLUMNS + ("timeout", "progress"))


def column_kind(name: str) -> str:
    """How a ``jobs`` column is read: ``"json"``, ``"integer"``, ``"number"`` or ``"text"``.

    >>> column_kind("args"), column_kind("attempts"), column_kind("run_at"), column_kind("queue")
    ('json', 'integer', 'number', 'text')
    """
    return "json" if name in _JSON_COLUMNS else "integer" if name in _INTEGER_COLUMNS \
        else "number" if name in _NUMBER_COLUMNS else "text"


def decode_column(name: str, value: Any, kind: str | None = None) -> tuple[Any, str | None]:
    """A column's stored value, decoded, and what is wrong with it (None: nothing). ``kind``
    (``"json"``, ``"integer"``, ``"number"``, ``"time"``: a finite number, or ``"text"``) is
    how it is read; by default a ``jobs`` column's (``column_kind``), so another table's row
    types pass their own.
    Never raises: a value that cannot be decoded comes back as stored (as text), to be shown.

    >>> decode_column("args", '{"a": 1}'), decode_column("run_at", 1.5), decode_column("result", None)
    (({'a': 1}, None), (1.5, None), (None, None))
    >>> decode_column("args", "[1,")
    ('[1,', 'column args is not valid JSON (Expecting value: line 1 column 4 (char 3))')
    >>> decode_column("run_at", "tomorrow")
    ('tomorrow', "column run_at is not a number: 'tomorrow'")
    >>> decode_column("attempts", 2.5)[1]
    'column attempts is not an integer: 2.5'
    >>> decode_column("last_slot", "soon", "number")[1]
    "column last_slot is not a number: 'soon'"
    >>> decode_column("last_slot", float("inf"), "time")
    ('inf', 'column last_slot is not a finite number (a time): inf')
    """
    if value is None:
        return None, None
    kind = column_kind(name) if kind is None else kind
    if kind == "json":
        return _json_column(name, value)
    if kind == "integer":
        fits, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif kind == "number":
        fits, what = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value, "a number"
    elif kind == "time":
        fits, what = names.is_finite_number(value), "a finite number (a time)"
    else:
        fits, what = isinstance(value, str), "text"
    if fits:
        return value, None
    return raw_text(value), f"column {name} is not {what}: {_shortened(value)}"


def decode_row(row: Any, table: str, kinds: Mapping[str, str]) -> tuple[dict[str, Any], str | None]:
    """A row of ``table`` by column name (``by_name``), each column of ``kinds`` decoded as
    its kind says (``decode_column``), and what could not be ("; " between columns), or None.
    The seam every row type but ``Job`` (which has a faster path of its own) reads through.

    >>> decode_row({"name": "t", "last_slot": "soon"}, "schedules", {"name": "text", "last_slot": "number"})
    ({'name': 't', 'last_slot': 'soon'}, "column last_slot is not a number: 'soon'")
    """
    stored = by_name(row, table, frozenset(kinds))
    values, problems = {}, []
    for name, kind in kinds.items():
        values[name], problem = decode_column(name, stored[name], kind)
        if problem is not None:
            problems.append(problem)
    return values, "; ".join(problems) or None


def attempts_problem(attempts: Any, max_attempts: Any) -> str | None:
    """What is wrong with a job's counts of attempts (None: nothing, or they are no integers,
    which ``decode_column`` names). rowfleet gives a job at least one attempt and queues it
    again only while it has one left, so a job it claims has spent at most all of them;
    plain SQL may write anything. A claim that takes such a row counts one more attempt past
    its last, and the worker fails it unrun, as any row it cannot read.

    >>> attempts_problem(0, 5), attempts_problem(5, 5), attempts_problem("x", 5)
    (None, None, None)
    >>> attempts_problem(1, 0)
    'column max_attempts is 0: a job has at least one attempt'
    >>> attempts_problem(6, 5)
    'column attempts is 6, past column max_attempts (5)'
    >>> attempts_problem(-3, 5)
    'column attempts is -3: no count of attempts is negative'
    """
    if not all(isinstance(count, int) and not isinstance(count, bool) for count in (attempts, max_attempts)):
        return None
    if max_attempts < 1:
        return f"column max_attempts is {max_attempts}: a job has at least one attempt"
    if attempts < 0:
        return f"column attempts is {attempts}: no count of attempts is negative"
    if attempts > max_attempts:
        return f"column attempts is {attempts}, past column max_attempts ({max_attempts})"
    return None


def _json_column(name: str, value: Any) -> tuple[Any, str | None]:
    """Strict JSON (no NaN or infinities, which our encoder never writes), or the value as
    stored with what is wrong with it. A nesting too deep to decode is wrong too."""
    try:
        text = bytes(value).decode() if isinstance(value, (bytes, bytearray, memoryview)) else value
        return _STRICT_DECODER.decode(text), None
    except (TypeError, ValueError, RecursionError) as exc:
        return raw_text(value), f"column {name} is not valid JSON ({exc})"


class MissingColumn(LookupError):
    """A row lacks a column its type is built from: the query that read it must select it.
    A bug in our SQL, not bad data, so it is raised rather than kept as unreadable."""


def by_name(row: Any, table: str, columns: Set[str]) -> dict[str, Any]:
    """A row of ``table`` keyed by column name, in whatever order its query listed them: a
    dict as it is, a ``sqlite3.Row`` by its own keys, any other mapping copied. Reading
    by position would shift every value after a column added out of order, so a row
    without names is refused. Raises ``MissingColumn`` when one of ``columns`` is absent.

    >>> by_name({"kind": "note", "id": 1}, "job_events", frozenset({"id", "kind"}))
    {'kind': 'note', 'id': 1}
    >>> by_name({"id": 1}, "job_events", frozenset({"id", "kind"}))
    Traceback (most recent call last):
    ...
    rowfleet.job.MissingColumn: a row of job_events lacks column kind: the query that read it must select it
    """
    if isinstance(row, dict):
        stored = row
    elif isinstance(row, Mapping):
        stored = dict(row)
    elif callable(getattr(row, "keys", None)):  # sqlite3.Row: its names and values, in one order
        stored = dict(zip(row.keys(), row))
    else:
        raise TypeError(f"a row of {table} must be keyed by column name, not a {type(row).__name__}")
    if not stored.keys() >= columns:
        missing = sorted(columns - stored.keys())
        raise MissingColumn(f"a row of {table} lacks column{'s' if len(missing) > 1 else ''} {', '.join(missing)}: "
                            f"the query that read it must select {'them' if len(missing) > 1 else 'it'}")
    return stored


def raw_text(value: Any) -> str:
    """A stored value that is not what its column should hold, as text to show.

    >>> raw_text("soon"), raw_text(b"\\xff{"), raw_text(2.5)
    ('soon', '\\ufffd{', '2.5')
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return repr(value)


def _shortened(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 1] + "…"


@dataclasses.dataclass(frozen=True)
class Job:
    """One row of ``jobs``. Times are UNIX epoch seconds."""

    id: int
    project: str
    queue: str
    task: str
    args: Any
    state: str
    priority: int
    run_next: bool
    run_at: float
    attempts: int
    max_attempts: int
    idempotency_key: str | None
    lease_token: int
    claimed_by: str | None
    lease_expires_at: float | None
    result: Any
    error: str | None
    traceback: str | None
    created_at: float
    updated_at: float
    started_at: float | None
    finished_at: float | None
    # A workflow node's job: its run, node, map item and node generation (None otherwise).
    run_id: int | None = None
    node_id: str | None = None
    node_item: int | None = None
    node_generation: int | None = None
    timeout: float | None = None  # seconds of wall clock the job may take
    required_model: str | None = None
    watchdog_retries: int = 0  # times a watchdog stopped it
    progress: float | None = None  # 0..1, as its handler last reported
    progress_message: str | None = None
    progress_at: float | None = None
    cancel_requested_at: float | None = None  # an operator asked its worker to stop it
    cancel_reason: str | None = None
    # Queued with its run_at ahead when written: out of the claim's index until a claim
    # promotes it once due. Still queued to every reader.
    delayed: bool = False
    vram_mb: int | None = None  # GPU memory it needs, in MiB; None: unknown, so it fits anywhere
    # Why no worker of the fleet can place it (its model is listed nowhere, it fits no GPU),
    # and since when; None while it is placeable.
    unplaceable: str | None = None
    unplaceable_at: float | None = None
    warm_claim: bool = False  # its last claim was by a worker that already held its model
    host: str | None = None  # the host it last ran on (kept when it is requeued or ends)
    unique_key: str | None = None  # enqueued unique: what makes another enqueue its duplicate
    waited: bool = False  # somebody waits for its end (rowfleet.wait): on PostgreSQL the end notifies
    concurrency_key: str | None = None  # what per-key limits and fair share count it by
    gpus: int | None = None  # GPUs of one host it needs; None: none asked for (any worker runs it)
    # A scheduled job: the schedule that fired it, the slot (epoch seconds) and why it fired
    # (``boot``, ``tick``, ``catch_up``, ``manual``); None for every other job.
    schedule: str | None = None
    schedule_slot: float | None = None
    fire_reason: str | None = None
    # The finish /metrics' tallies counted (its finished_at then): their bookkeeping, not the
    # job's state, so two reads of a job the orchestrator tallied between are still equal.
    tallied_at: float | None = dataclasses.field(default=None, compare=False)
    # Not a column: what in the row could not be decoded (each such column is kept as
    # stored, as text), e.g. "column args is not valid JSON (...)"; None for a sound row.
    unreadable: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> "Job":
        """Build from a row of ``jobs`` keyed by column name (see ``by_name``), its columns
        in any order. Never raises on a stored value (see ``decode_column``); a column the
        row lacks raises ``MissingColumn``."""
        stored = by_name(row, "jobs", _JOB_COLUMN_SET)
        values, problems = {}, []
        for name, fits in _JOB_COLUMN_TYPES:  # the claim's hot path: a sound value is only type-checked
            value = stored[name]
            if value is None or (type(value) in fits and value == value):  # NaN is no number
                values[name] = value
                continue
            values[name], problem = decode_column(name, value)
            if problem is not None:
                problems.append(problem)
        counted = attempts_problem(values["attempts"], values["max_attempts"])
        if counted is not None:
            problems.append(counted)
        for flag in ("run_next", "delayed", "warm_claim", "waited"):
            if isinstance(values[flag], int):
                values[flag] = bool(values[flag])
        return cls(**values, unreadable="; ".join(problems) or None)

    def wait(self, timeout: float | None = None) -> Any:
        """Wait for this job to end, as ``rowfleet.wait`` does, on the configured database."""
        if _waiter is None:
            raise ConfigError("Job.wait() waits through rowfleet's API: import rowfleet first")
        return _waiter(self.id, timeout=timeout, project=self.project)

    def ended_result(self) -> Any:
        """What waiting for this ended job gives: its result once completed, else
        ``JobFailed`` carrying its last error (failed or cancelled)."""
        if self.state == COMPLETED:
            return self.result
        raise JobFailed(self)

    def undecoded(self, column: str) -> bool:
        """Whether ``column`` could not be decoded, so that its field holds the text as stored."""
        return self.unreadable is not None and any(problem.startswith(f"column {column} ")
                                                   for problem in self.unreadable.split("; "))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO-8601 UTC strings (a value that is no time, as stored)."""
        data = dataclasses.asdict(self)
        for name in _TIME_COLUMNS:
            data[name] = iso(data[name])
        return data


# How ``Job.wait`` waits: ``rowfleet.wait``, which the API (a layer above) installs as it loads.
_waiter: Callable[..., Any] | None = None


def install_waiter(wait: Callable[..., Any]) -> None:
    global _waiter
    _waiter = wait


_JOB_COLUMNS = tuple(field.name for field in dataclasses.fields(Job) if field.name != "unreadable")
_JOB_COLUMN_SET = frozenset(_JOB_COLUMNS)
JOB_COLUMNS = _JOB_COLUMN_SET  # the columns of ``jobs``, as the current schema has them
# Each column with the exact types a sound value of it has; JSON columns are always decoded.
_JOB_COLUMN_TYPES = tuple((name, () if name in _JSON_COLUMNS else (int,) if name in _INTEGER_COLUMNS
                           else (int, float) if name in _NUMBER_COLUMNS else (str,)) for name in _JOB_COLUMNS)


@dataclasses.dataclass(frozen=True)
class Event:
    """One moment of a job's history: a row of ``job_events``, or (``id`` None) the claim or
    completion of the attempt the job's row holds (``attempt_events``)."""

    id: int | None
    job_id: int
    at: float
    kind: str
    detail: dict[str, Any]

    @classmethod
    def from_row(cls, row: Any) -> "Event":
        """Build from a row of ``job_events``. Never raises: a detail that is not a JSON
        object is shown as ``{"raw": <as stored>, "unreadable": <why>}``.

        >>> Event.from_row({"id": 1, "job_id": 2, "at": 0.0, "kind": "note", "detail": "{bad"}).detail["raw"]
        '{bad'
        """
        row = by_name(row, "job_events", _EVENT_COLUMNS)
        stored = row["detail"]
        detail, problem = (None, None) if stored is None else _json_column("detail", stored)
        if problem is None and not isinstance(detail, (dict, type(None))):
            detail, problem = raw_text(stored), "column detail is not a JSON object"
        detail = {"raw": detail, "unreadable": problem} if problem is not None else detail or {}
        return cls(row["id"], row["job_id"], row["at"], row["kind"], detail)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "job_id": self.job_id, "at": iso(self.at), "kind": self.kind,
                "detail": self.detail}


_EVENT_COLUMNS = frozenset(field.name for field in dataclasses.fields(Event))
EVENT_COLUMNS = _EVENT_COLUMNS  # the columns of ``job_events``


def attempt_events(job_id: int, stored: list[Event], attempt: Mapping[str, Any]) -> list[Event]:
    """A job's history: its event rows (``stored``, in time order) and the claim and the
    completion of the attempt its row holds (``attempt``: its state, attempts, lease_token,
    claimed_by, started_at and finished_at), which are no rows: a busy worker's happy path
    writes none, and the ``jobs_attempt_history`` trigger writes them from the old row once
    the attempt is over. Either is made here unless an event row holds its moment already
    (a database from before that trigger logged every claim). In time order, and at one
    moment by attempt, an attempt's claim first (a claim's event row is written after the
    events of its attempt); a time that is no number (plain SQL) sorts last.

    >>> row = {"state": "completed", "attempts": 2, "lease_token": 2, "claimed_by": "box:7",
    ...        "started_at": 10.0, "finished_at": 12.0}
    >>> retried = [Event(5, 3, 1.0, "claimed", {}), Event(6, 3, 2.0, "retried", {})]
    >>> [(e.kind, e.at, e.detail) for e in attempt_events(3, retried, row)][2:]
    [('claimed', 10.0, {'token': 2, 'holder': 'box:7', 'attempt': 2}), ('completed', 12.0, {'token': 2, 'attempt': 2})]
    >>> [e.kind for e in attempt_events(3, [Event(9, 3, 10.0, "claimed", {"token": 2})], {**row, "state": "running"})]
    ['claimed']
    >>> attempt_events(3, [], {**row, "started_at": None, "state": "queued"})
    []
    """
    events = list(stored)
    started, finished, token = attempt.get("started_at"), attempt.get("finished_at"), attempt.get("lease_token")
    held = {(event.kind, event.at, _hashable(event.detail.get("token"))) for event in stored
            if isinstance(event.detail, dict)}
    if names.is_finite_number(started) and ("claimed", started, token) not in held:
        events.append(Event(None, job_id, float(started), "claimed", {
            "token": attempt.get("lease_token"), "holder": attempt.get("claimed_by"), "attempt": attempt.get("attempts")}))
    if attempt.get("state") == COMPLETED and names.is_finite_number(finished) \
            and ("completed", finished, token) not in held:
        events.append(Event(None, job_id, float(finished), "completed",
                            {"token": attempt.get("lease_token"), "attempt": attempt.get("attempts")}))
    return sorted(events, key=_history_order)


def _hashable(value: Any) -> Any:
    """A detail's value as a set can hold it (plain SQL may have written a list there)."""
    return value if isinstance(value, (int, float, str, type(None))) else repr(value)


def _history_order(event: Event) -> tuple[Any, ...]:
    """Where an event goes in a job's history: by time, then claim (its lease token, which
    every claim raises, then its attempt, which a lost lease gives back; an event that names
    none after those that do), its claim first, then as written (one made from the row last)."""
    at = (0, float(event.at)) if names.is_finite_number(event.at) else (1, 0.0)
    detail = event.detail if isinstance(event.detail, dict) else {}
    token, attempt = (((0, value) if names.is_finite_number(value) else (1, 0))
                      for value in (detail.get("token"), detail.get("attempt")))
    written = (0, event.id) if isinstance(event.id, int) else (1, 0)
    return at, token, attempt, event.kind != "claimed", written


def iso(epoch: Any) -> str | None:
    """An epoch time as ISO-8601 UTC; a value that is no time (text, or out of range) as stored.

    >>> iso(0), iso(1e300), iso("soon"), iso(None)
    ('1970-01-01T00:00:00.000Z', '1e+300', 'soon', None)
    """
    if epoch is None:
        return None
    if isinstance(epoch, bool) or not isinstance(epoch, (int, float)):
        return raw_text(epoch)
    try:
        moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return repr(epoch)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What to write when a run ends. ``state`` is the job's next state.

    ``delay`` (seconds from now) is set when the job goes back to ``queued``; the store
    turns it into an absolute ``run_at`` with its own clock, once.
    """

    state: str
    result: Any = None
    error: str | None = None
    traceback: str | None = None
    delay: float = 0.0
    event: str = ""
    result_json: str | None = None

    def __post_init__(self) -> None:
        if self.state == COMPLETED and self.result_json is None:
            object.__setattr__(self, "result_json", encode_json(self.result))


# The longest wait between two drains of a workflow's failing outbox event (unless the
# sweep interval is longer): from the interval up, doubling, the waits add up to about
# twenty minutes at the default interval before the event is set aside.
DRAIN_RETRY_MAX = 300.0


def exponential(attempt: int, base: float, cap: float) -> float:
    """The nominal wait after attempt ``attempt``: ``base * 2**(attempt-1)``, at most ``cap``.

    >>> [exponential(n, 5.0, 60.0) for n in (0, 1, 2, 3, 5, 99)]
    [5.0, 5.0, 10.0, 20.0, 60.0, 60.0]
    """
    return min(cap, base * 2.0 ** min(max(attempt - 1, 0), 62))


def backoff(attempt: int, base: float, cap: float, rng: Callable[[], float]) -> float:
    """Seconds to wait before attempt ``attempt + 1``: exponential, capped, half jittered.

    ``rng`` returns a float in [0, 1). The delay lies in [d/2, d) where d = exponential(attempt, base, cap),
    so retries spread out but never come sooner than half the nominal wait.

    >>> backoff(1, 2.0, 3600.0, lambda: 0.0), backoff(3, 2.0, 3600.0, lambda: 0.0)
    (1.0, 4.0)
    >>> backoff(30, 2.0, 60.0, lambda: 0.5)
    45.0
    """
    nominal = exponential(attempt, base, cap)
    return nominal / 2 + nominal / 2 * rng()


def drain_retry_delay(attempts: int, interval: float) -> float:
    """Seconds before an event whose drain has failed ``attempts`` times is drained again:
    the sweep interval, doubling per failure, capped at ``DRAIN_RETRY_MAX`` (or the interval,
    if that is longer), so a transient fault gets real time to clear.

    >>> [drain_retry_delay(n, 5.0) for n in (1, 2, 3, 7, 9)]
    [5.0, 10.0, 20.0, 300.0, 300.0]
    >>> drain_retry_delay(3, 600.0)
    600.0
    """
    return exponential(attempts, interval, max(DRAIN_RETRY_MAX, interval))


def decide_outcome(job: Job, result: Any = None, raised: BaseException | None = None, *,
                   backoff_base: float = 2.0, backoff_max: float = 3600.0,
                   rng: Callable[[], float] = random.random) -> Outcome:
    """Turn a handler's return value or exception into the job's next state.

    >>> from types import SimpleNamespace as J
    >>> decide_outcome(J(attempts=1, max_attempts=5), result=3).state
    'completed'
    >>> decide_outcome(J(attempts=5, max_attempts=5), raised=ValueError("x")).state
    'failed'
    """
    if raised is None:
        try:
            encoded = encode_json(result)
        except (TypeError, ValueError) as exc:
            return _fail_or_retry(job, f"result is not JSON-serialisable: {exc}", None,
                                  backoff_base, backoff_max, rng, retryable=False)
        return Outcome(COMPLETED, result=result, event="completed", result_json=encoded)
    if isinstance(raised, Cancel):
        return Outcome(CANCELLED, error=raised.reason, event="cancelled")
    if isinstance(raised, Retry):
        if job.attempts >= job.max_attempts:
            return Outcome(FAILED, error=f"retry requested after the last attempt "
                           f"({job.attempts} of {job.max_attempts}): {raised}", event="failed")
        return Outcome(QUEUED, error=str(raised), delay=raised.delay, event="retried")
    text = "".join(tb.format_exception(raised))
    message = f"{type(raised).__name__}: {raised}"
    return _fail_or_retry(job, message, text, backoff_base, backoff_max, rng,
                          retryable=not isinstance(raised, UnknownTask))


def unreadable_outcome(job: Any) -> Outcome:
    """A claimed job whose row cannot be decoded fails at once: no handler can be given it,
    and running it again cannot mend its row.

    >>> from types import SimpleNamespace as J
    >>> unreadable_outcome(J(unreadable="column args is not valid JSON (...)")).error
    'its row cannot be decoded, so it was not run: column args is not valid JSON (...)'
    """
    return Outcome(FAILED, error=f"its row cannot be decoded, so it was not run: {job.unreadable}", event="failed")


def _fail_or_retry(job: Any, error: str, trace: str | None, base: float, cap: float,
                   rng: Callable[[], float], retryable: bool) -> Outcome:
    if retryable and job.attempts < job.max_attempts:
        return Outcome(QUEUED, error=error, traceback=trace, delay=backoff(job.attempts, base, cap, rng),
                       event="retried")
    return Outcome(FAILED, error=error, traceback=trace, event="failed")
