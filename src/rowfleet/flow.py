"""Flow control: the limits an operator sets on a (project, queue), and the rules a claim
applies under them, each written here once.

A limit is one row of ``flow_limits`` per (project, queue); its project ``*`` (``ANY``)
makes it span every project of the database. Every rule of every row that applies to a
claim must hold (a project's own row and the every-project row both count):

- ``concurrency``: at most N jobs of the queue running at once, fleet-wide.
- ``per_key``: at most N running jobs of one ``concurrency_key`` (a job without a key is
  held by no per-key rule).
- ``rate``: at most N starts in any W seconds for the queue; ``key_rate``: for each key.
  A sliding window, kept exactly: each window's row holds the times of its starts within
  the last W seconds (N at most) and, once it holds N, when the oldest leaves it
  (``ready_at``). Why not a token bucket: a bucket of N that refills at N/W lets 2N - 1
  starts into one window of W seconds (a full bucket, then its refill), and the API an
  operator guards with "10 a second" counts windows, not buckets. N starts may go at once,
  then the next when the oldest is W seconds old; a key whose window is full is found as
  ``ready_at > now`` without reading every key's row. The cost is a list of N times
  rewritten per start, so N is at most ``MAX_RATE_COUNT`` (use a shorter window for more).
- ``fair``: among the jobs of equal run-next and priority, a claim takes the key that
  started least recently (a key never started first), so one key's backlog cannot starve
  the others. Jobs without a key are one more key here.
- ``lost_first``: not a limit but the queue's choice for a job lost with its worker (a
  lapsed lease, a worker known dead or found gone by its host's next worker): back in the
  front band (run-next), so that it does not wait behind newer work. Off by default: such
  a job keeps its place (its due time and priority), ahead of fresh work of its priority.
  Holds no claim: a row with only this rule makes no queue limited.

The order of a claim, in one place (``ORDER``): run-next, then on a GPU worker the model
routing's terms (starved, warm, rank: ``rowfleet.claim``), then priority, then with fair
share the key that started least recently, then due time. So on a GPU worker routing
chooses the kind of job, its run-next and priority, and fair share the key within them.

A keyed claim (per-key rules or fair share) finds each key's best job by the ``jobs_flow``
index, one probe per key with due jobs; a job without a key is found among the first
``UNKEYED_LOOKAHEAD`` of claim order.

A job over a limit is simply not claimable: it is never claimed and handed back and never
spends an attempt. Running counts are read in the claim's transaction (a job held by a
dead worker counts until its lease is reclaimed). Pure: imports nothing of rowfleet's
below the leaves, and no driver.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

from rowfleet import names
from rowfleet.errors import ConfigError
from rowfleet.terminal import seconds_text

ANY = "*"  # a limit's project: every project of the database
KEY_LOOKAHEAD = 16  # jobs a keyed claim reads in claim order before probing key by key
# How far into claim order a keyed claim looks for a job without a key once it probes key by
# key: keyed jobs have an index by key (jobs_flow); jobs without one do not, so that a queue
# with no keyed rule pays nothing for it. Give every job of a keyed queue a key.
UNKEYED_LOOKAHEAD = 16
LIMIT_FIELDS = ("concurrency", "per_key", "rate", "key_rate", "fair", "lost_first")
ORDER = ("run_next", "routing", "priority", "fair_key", "due")
MAX_RATE_COUNT = 10_000  # starts one rate window may count (its row lists their times)


@dataclasses.dataclass(frozen=True)
class Rate:
    """At most ``count`` starts in any ``seconds``.

    >>> Rate.parse("--rate", "10/1"), str(Rate(100, 60.0))
    (Rate(count=10, seconds=1.0), '100/60s')
    >>> Rate.parse("--rate", "10")
    Traceback (most recent call last):
    rowfleet.errors.ConfigError: --rate must be N/SECONDS (starts per window), such as 10/1 or 100/60, got '10'
    """

    count: int
    seconds: float

    def __post_init__(self) -> None:
        if not names.RULES["count"].allows(self.count) or self.count > MAX_RATE_COUNT:
            raise ConfigError(f"a rate's count must be a whole number from 1 to {MAX_RATE_COUNT:,} "
                              f"(for more, a shorter window), got {self.count!r}")
        names.RULES["seconds"].check("a rate's window", self.seconds)

    @classmethod
    def of(cls, what: str, value: Any) -> "Rate | None":
        """A rate as an entry point was given one: ``"N/SECONDS"`` (a flag, a form field),
        ``(N, SECONDS)`` or a ``Rate`` (Python); None or empty text: none given.

        >>> Rate.of("rate", "10/1") == Rate.of("rate", (10, 1.0)), Rate.of("rate", "")
        (True, None)
        """
        if value is None or value == "" or isinstance(value, cls):
            return value or None
        if isinstance(value, str):
            return cls.parse(what, value)
        if isinstance(value, tuple) and len(value) == 2:
            return cls(*value)
        raise ConfigError(f"{what} must be 'N/SECONDS' or (N, SECONDS), got {value!r}")

    @classmethod
    def parse(cls, what: str, text: str) -> "Rate":
        count, slash, seconds = str(text).partition("/")
        if not slash:
            raise ConfigError(f"{what} must be N/SECONDS (starts per window), such as 10/1 or 100/60, got {text!r}")
        return cls(names.RULES["count"].parse(f"{what}'s count", count.strip()),
                   names.RULES["seconds"].parse(f"{what}'s window", seconds.strip()))

    def recent(self, starts: Iterable[float], now: float) -> tuple[float, ...]:
        """The starts that count at ``now``, oldest first: those of the last ``seconds`` (a
        time more than a second ahead of ``now``, left by a clock stepped back, counts no
        more), the newest ``count`` of them.

        >>> Rate(2, 1.0).recent([98.5, 99.2, 99.9, 100.0], 100.0)
        (99.9, 100.0)
        """
        return tuple(sorted(at for at in starts if now - self.seconds < at <= now + 1.0)[-self.count:])

    def allows(self, starts: Iterable[float], now: float) -> bool:
        """Whether a start at ``now`` fits the window.

        >>> r = Rate(2, 1.0)
        >>> r.allows([], 100.0), r.allows([99.5], 100.0), r.allows([99.5, 99.8], 100.0), r.allows([99.0, 99.8], 100.0)
        (True, True, False, True)
        """
        return len(self.recent(starts, now)) < self.count

    def ready_at(self, starts: Iterable[float], now: float) -> float:
        """When the window next allows a start (``now`` if it does now).

        >>> Rate(2, 1.0).ready_at([99.5, 99.8], 100.0), Rate(2, 1.0).ready_at([99.5], 100.0)
        (100.5, 100.0)
        """
        recent = self.recent(starts, now)
        return now if len(recent) < self.count else recent[0] + self.seconds

    def started(self, starts: Iterable[float], now: float) -> tuple[tuple[float, ...], float | None]:
        """The window after a start at ``now``: its starts, and when it next allows one once
        it is full (None while it is not).

        >>> Rate(2, 1.0).started([99.5], 100.0), Rate(2, 1.0).started([], 100.0)
        (((99.5, 100.0), 100.5), ((100.0,), None))
        """
        recent = self.recent((*starts, now), now)
        return recent, (recent[0] + self.seconds if len(recent) >= self.count else None)

    def per_second(self) -> str:
        """The rate as operators say it: ``10/s``, ``100/60s``."""
        return f"{self.count}/s" if self.seconds == 1 else str(self)

    def __str__(self) -> str:
        return f"{self.count}/{self.seconds:g}s"


@dataclasses.dataclass(frozen=True)
class Limit:
    """One ``flow_limits`` row: the rules on one queue of one project (``ANY``: every project)."""

    project: str
    queue: str
    concurrency: int | None = None
    per_key: int | None = None
    rate: Rate | None = None
    key_rate: Rate | None = None
    fair: bool = False
    lost_first: bool = False
    updated_at: float | None = None
    updated_by: str = ""

    def __post_init__(self) -> None:
        if self.project != ANY:
            names.RULES["project"].check("a limit's project", self.project)
        names.RULES["queue"].check("a limit's queue", self.queue)
        for field in ("concurrency", "per_key"):
            if getattr(self, field) is not None:
                names.RULES["count"].check(f"a limit's {field}", getattr(self, field))
        for flag in ("fair", "lost_first"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"a limit's {flag} is true or false, got {getattr(self, flag)!r}")

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Limit":
        """Build from a ``flow_limits`` row; ``ConfigError`` naming the bad column when plain
        SQL wrote one no rule allows (the claim then ignores the row, saying so)."""
        try:
            return cls(row["project"], row["queue"], row["concurrency"], row["per_key"],
                       _rate(row["rate_count"], row["rate_seconds"]),
                       _rate(row["key_rate_count"], row["key_rate_seconds"]),
                       _flag("fair", row["fair"]), _flag("lost_first", row["lost_first"]), row["updated_at"],
                       row["updated_by"] or "")
        except (ConfigError, TypeError, ValueError) as exc:
            raise ConfigError(f"limit row ({row['project']!r}, {row['queue']!r}) is unusable: {exc}") from None

    @property
    def keyed(self) -> bool:
        """Whether the rule looks at jobs' keys (so the claim picks key by key)."""
        return self.per_key is not None or self.key_rate is not None or self.fair

    @property
    def counts(self) -> bool:
        """Whether the rule counts running jobs or starts (all but fair share), so that its
        claims must count and start one at a time."""
        return any(rule is not None for rule in (self.concurrency, self.per_key, self.rate, self.key_rate))

    @property
    def empty(self) -> bool:
        return not (self.concurrency or self.per_key or self.rate or self.key_rate or self.fair or self.lost_first)

    def scope(self) -> str:
        """``queue api`` or ``queue gpu of every project``."""
        return f"queue {self.queue}" + (" of every project" if self.project == ANY else "")

    def rules(self) -> list[str]:
        """The rules in words, for lists.

        >>> Limit("", "api", concurrency=4, rate=Rate(10, 1.0), fair=True).rules()
        ['at most 4 running', 'rate 10/s', 'fair by key']
        """
        said = []
        if self.concurrency is not None:
            said.append(f"at most {self.concurrency} running")
        if self.per_key is not None:
            said.append(f"at most {self.per_key} running per key")
        if self.rate is not None:
            said.append(f"rate {self.rate.per_second()}")
        if self.key_rate is not None:
            said.append(f"rate {self.key_rate.per_second()} per key")
        if self.fair:
            said.append("fair by key")
        if self.lost_first:
            said.append("lost jobs first")
        return said

    def to_dict(self) -> dict[str, Any]:
        return {"project": self.project, "queue": self.queue, "all_projects": self.project == ANY,
                "concurrency": self.concurrency, "per_key": self.per_key,
                "rate": None if self.rate is None else str(self.rate),
                "key_rate": None if self.key_rate is None else str(self.key_rate), "fair": self.fair,
                "lost_first": self.lost_first,
                "updated_at": self.updated_at, "updated_by": self.updated_by}


def _rate(count: Any, seconds: Any) -> Rate | None:
    if count is None and seconds is None:
        return None
    if count is None or seconds is None:
        raise ValueError("a rate needs both its count and its window")
    return Rate(count, float(seconds) if isinstance(seconds, int) and not isinstance(seconds, bool) else seconds)


def _flag(name: str, value: Any) -> bool:
    if value in (0, 1, True, False):
        return bool(value)
    raise ValueError(f"{name} must be 0 or 1, got {value!r}")


def changed(limit: Limit | None, project: str, queue: str, *, clear: bool = False, **given: Any) -> Limit | None:
    """The limit after an operator's change: ``given`` fields set (a field not given keeps
    its value; ``--clear`` starts from none); None when no rule is left (the row goes).

    >>> changed(None, "", "api", concurrency=4).rules()
    ['at most 4 running']
    >>> changed(Limit("", "api", concurrency=4), "", "api", rate=Rate(5, 1.0)).rules()
    ['at most 4 running', 'rate 5/s']
    >>> changed(Limit("", "api", concurrency=4), "", "api", clear=True) is None
    True
    """
    unknown = set(given) - set(LIMIT_FIELDS)
    if unknown:
        raise ConfigError(f"a limit has no {', '.join(sorted(unknown))}; its rules are {', '.join(LIMIT_FIELDS)}")
    base = Limit(project, queue) if clear or limit is None else limit
    fields = {name: value for name, value in given.items() if value is not None}
    new = dataclasses.replace(base, **fields)
    return None if new.empty else new


@dataclasses.dataclass(frozen=True)
class Use:
    """What a claim reads under one limit: its queue's running jobs (all projects' for an
    every-project limit), by key (None: jobs without a key), and its queue window's starts."""

    running_by_key: Mapping[str | None, int] = dataclasses.field(default_factory=dict)
    queue_starts: tuple[float, ...] = ()

    @property
    def running(self) -> int:
        return sum(self.running_by_key.values())


@dataclasses.dataclass(frozen=True)
class Hold:
    """Why a job may not start now: the rule (``concurrency``, ``per_key``, ``rate``,
    ``key_rate``), in words, and when it may (None: when a running job ends)."""

    rule: str
    text: str
    ready_at: float | None = None


def queue_holds(limit: Limit, use: Use, now: float) -> list[Hold]:
    """The rules of ``limit`` that hold every job of its queue now.

    >>> [h.text for h in queue_holds(Limit("", "api", concurrency=2), Use({None: 1, "a": 1}), 0.0)]
    ['queue api at its limit 2 of 2']
    >>> [h.text for h in queue_holds(Limit("", "api", rate=Rate(2, 1.0)), Use(queue_starts=(-0.7, -0.1)), 0.0)]
    ['rate 2/s on queue api: next start in 0.3 s']
    """
    holds = []
    if limit.concurrency is not None and use.running >= limit.concurrency:
        holds.append(Hold("concurrency", f"{limit.scope()} at its limit {use.running} of {limit.concurrency}"))
    if limit.rate is not None and not limit.rate.allows(use.queue_starts, now):
        ready = limit.rate.ready_at(use.queue_starts, now)
        holds.append(Hold("rate", f"rate {limit.rate.per_second()} on {limit.scope()}: "
                                  f"next start in {seconds_text(ready - now)} s", ready))
    return holds


def key_holds(limit: Limit, use: Use, key: str | None, key_starts: tuple[float, ...], now: float) -> list[Hold]:
    """The rules of ``limit`` that hold the jobs of ``key`` now (none for a job without one).

    >>> [h.text for h in key_holds(Limit("", "api", per_key=4), Use({"customer:42": 4}), "customer:42", (), 0.0)]
    ['customer:42 at its limit 4 of 4']
    """
    if key is None:
        return []
    holds = []
    running = use.running_by_key.get(key, 0)
    if limit.per_key is not None and running >= limit.per_key:
        holds.append(Hold("per_key", f"{key} at its limit {running} of {limit.per_key}"
                                     + ("" if limit.project != ANY else " across every project")))
    if limit.key_rate is not None and not limit.key_rate.allows(key_starts, now):
        ready = limit.key_rate.ready_at(key_starts, now)
        holds.append(Hold("key_rate", f"rate {limit.key_rate.per_second()} for {key} on {limit.scope()}: "
                                      f"next start in {seconds_text(ready - now)} s", ready))
    return holds


def saturated_keys(limit: Limit, use: Use) -> set[str]:
    """The keys at their per-key concurrency limit.

    >>> sorted(saturated_keys(Limit("", "q", per_key=2), Use({"a": 2, "b": 1, None: 5})))
    ['a']
    """
    if limit.per_key is None:
        return set()
    return {key for key, running in use.running_by_key.items() if key is not None and running >= limit.per_key}


def ready_at(holds: Iterable[Hold]) -> float | None:
    """When the queue may start a job again, as far as rates say: the latest of the rates'
    times (None when a concurrency limit holds it too, or nothing does)."""
    times = []
    for hold in holds:
        if hold.ready_at is None:
            return None
        times.append(hold.ready_at)
    return max(times) if times else None
