"""How finished jobs are counted for ``/metrics``: run-time buckets, and the fold of finished
jobs into tallies that only go up. Pure.

A counter that a restart must not reset cannot live in a process, and one counted by
``count(*)`` over the jobs table would fall when old jobs are pruned. So the orchestrator
folds each finished job, once per finish, into ``job_tallies`` rows keyed by
``TallyKey`` and a run-time bucket (``bucket_of``), and a scrape adds the few jobs
finished since the last fold (``totals``). Bucket bounds are Prometheus ``le`` labels.

Imports only the leaf ``rowfleet.names``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

from rowfleet.names import is_finite_number

# Upper bounds of the run-time histogram, in seconds: from a quick task to an hour-long
# GPU job. A stored tally keeps the label it was counted under, so changing these later
# moves old counts into the next bound that still exists (``Tally.cumulative``).
RUN_SECONDS_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
INFINITY = "+Inf"
NEVER_RAN = ""  # the bucket of a job that finished without starting (cancelled while queued)


@dataclasses.dataclass(frozen=True, order=True)
class TallyKey:
    """What a tally counts finished jobs by; ``model`` is ``""`` for a job needing none."""

    project: str
    queue: str
    task: str
    model: str
    state: str


@dataclasses.dataclass
class Tally:
    """Finished jobs of one key: how many, how many were claimed warm, their run times
    added up, and how many fell in each bucket (by ``le`` label, not cumulative)."""

    key: TallyKey
    jobs: int = 0
    warm: int = 0
    run_seconds: float = 0.0
    buckets: dict[str, int] = dataclasses.field(default_factory=dict)

    def add(self, le: str, jobs: int, warm: int, run_seconds: float) -> None:
        self.jobs += jobs
        self.warm += warm
        self.run_seconds += run_seconds
        self.buckets[le] = self.buckets.get(le, 0) + jobs

    @property
    def ran(self) -> int:
        """The jobs that started, and so have a run time."""
        return self.jobs - self.buckets.get(NEVER_RAN, 0)

    def cumulative(self) -> list[tuple[str, int]]:
        """The histogram's buckets as Prometheus wants them: for each bound and ``+Inf``,
        the jobs that ran at most that long.

        >>> tally = Tally(TallyKey("", "q", "t", "", "completed"))
        >>> tally.add("0.5", 2, 0, 0.6); tally.add("+Inf", 1, 0, 4000.0); tally.add("", 1, 0, 0.0)
        >>> [pair for pair in tally.cumulative() if pair[0] in ("0.25", "0.5", "3600", "+Inf")]
        [('0.25', 0), ('0.5', 2), ('3600', 2), ('+Inf', 3)]
        """
        labels = [bound_label(bound) for bound in RUN_SECONDS_BOUNDS]
        counts = dict.fromkeys(labels, 0)
        for le, jobs in self.buckets.items():
            if le == NEVER_RAN or le == INFINITY:
                continue
            holding = _bucket_holding(le, labels)
            if holding is not None:  # past every bound: it counts under +Inf alone
                counts[holding] += jobs
        running, pairs = 0, []
        for label in labels:
            running += counts.get(label, 0)
            pairs.append((label, running))
        pairs.append((INFINITY, self.ran))
        return pairs


def bound_label(bound: float) -> str:
    """A bound as Prometheus writes an ``le`` label.

    >>> bound_label(0.05), bound_label(1.0), bound_label(3600.0)
    ('0.05', '1', '3600')
    """
    return f"{bound:g}"


def bucket_of(started_at: Any, finished_at: Any) -> tuple[str, float]:
    """The bucket label of a job that ran from ``started_at`` to ``finished_at``, with its
    run time (0.0 for a job that never started, or whose times are not numbers).

    >>> bucket_of(10.0, 10.5), bucket_of(0.0, 4000.0), bucket_of(None, 5.0), bucket_of(9.0, 8.0)
    (('0.5', 0.5), ('+Inf', 4000.0), ('', 0.0), ('0.05', 0.0))
    """
    if not is_finite_number(started_at) or not is_finite_number(finished_at):
        return NEVER_RAN, 0.0
    seconds = max(0.0, float(finished_at) - float(started_at))  # hosts' clocks may disagree
    for bound in RUN_SECONDS_BOUNDS:
        if seconds <= bound:
            return bound_label(bound), seconds
    return INFINITY, seconds


def increments(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[TallyKey, str], tuple[int, int, float]]:
    """What a fold adds: finished jobs' rows (project, queue, task, required_model, state,
    started_at, finished_at, warm_claim) summed per (key, bucket) as (jobs, warm, seconds).

    >>> rows = [dict(project="", queue="q", task="t", required_model=None, state="completed",
    ...              started_at=1.0, finished_at=1.2, warm_claim=0)] * 2
    >>> increments(rows)
    {(TallyKey(project='', queue='q', task='t', model='', state='completed'), '0.25'): (2, 0, 0.3999999999999999)}
    """
    added: dict[tuple[TallyKey, str], tuple[int, int, float]] = {}
    for row in rows:
        le, seconds = bucket_of(row["started_at"], row["finished_at"])
        slot = (key_of(row), le)
        jobs, warm, total = added.get(slot, (0, 0, 0.0))
        added[slot] = (jobs + 1, warm + (1 if row.get("warm_claim") == 1 else 0), total + seconds)
    return added


def key_of(row: Mapping[str, Any]) -> TallyKey:
    """A finished job's tally key; text that plain SQL left out reads as ``""``."""
    return TallyKey(project=_text(row.get("project")), queue=_text(row.get("queue")), task=_text(row.get("task")),
                    model=_text(row.get("required_model", row.get("model"))), state=_text(row.get("state")))


def totals(tallies: Iterable[Mapping[str, Any]], untallied: Iterable[Mapping[str, Any]]) -> list[Tally]:
    """Every key's tally: the stored ``job_tallies`` rows, plus the finished jobs not yet
    folded in (read in the same snapshot, so none is counted twice), by key.

    >>> stored = [dict(project="", queue="q", task="t", model="", state="failed", le="1", jobs=3, warm=0,
    ...                run_seconds=2.0)]
    >>> late = [dict(project="", queue="q", task="t", required_model=None, state="failed", started_at=0.0,
    ...              finished_at=0.7, warm_claim=0)]
    >>> [(t.key.state, t.jobs, t.buckets) for t in totals(stored, late)]
    [('failed', 4, {'1': 4})]
    """
    by_key: dict[TallyKey, Tally] = {}
    for row in tallies:
        jobs, warm, seconds = _whole(row.get("jobs")), _whole(row.get("warm")), row.get("run_seconds")
        key = key_of(row)
        by_key.setdefault(key, Tally(key)).add(_text(row.get("le")), jobs, warm,
                                               float(seconds) if is_finite_number(seconds) else 0.0)
    for (key, le), (jobs, warm, seconds) in increments(untallied).items():
        by_key.setdefault(key, Tally(key)).add(le, jobs, warm, seconds)
    return [by_key[key] for key in sorted(by_key)]


def _bucket_holding(le: str, labels: list[str]) -> str | None:
    """The smallest current bound at or above a stored label (one counted under older
    bounds, or by plain SQL); None past the last bound, or for a label that is no number."""
    try:
        value = float(le)
    except ValueError:
        return None
    return next((label for label in labels if float(label) >= value), None)


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
