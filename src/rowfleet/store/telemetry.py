"""Telemetry over named queries: each host's samples in two tiers, the lease that lets one
sampler per host write them, and the tallies of finished jobs that ``/metrics`` counts.
Written once for both dialects as the telemetry part of ``Store``.

A sample's readings are a JSON object that anyone's plain SQL may have written: a row
that does not decode reads as empty readings with ``error`` saying why, never an
exception (``decode_readings``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from typing import Any, Iterable, Mapping

from rowfleet.errors import ConfigError
from rowfleet.metrics import tally
from rowfleet.names import is_finite_number
from rowfleet.store.core import StoreCore

DETAIL = "detail"
MINUTE = "minute"
TIERS = (DETAIL, MINUTE)
FOLD_BATCH = 5000          # finished jobs tallied per transaction
UNTALLIED_READ_CAP = 200_000  # a scrape reads at most this many jobs not yet tallied
READINGS_KEPT = 8192  # decoded rows kept for the next read: 20 hosts' last hour, a point a minute, many times over


@dataclasses.dataclass(frozen=True, slots=True)  # slots: a panel keeps an hour of them
class HostSample:
    """One row of ``host_samples``: a host's readings at ``at`` (a minute row: the minute's
    start), decoded; ``error`` when the stored text was no JSON object."""

    host: str
    tier: str
    at: float
    readings: dict[str, Any]
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class MetricsRows:
    """What ``/metrics`` reads besides the fleet's snapshot, in one read: the stored tallies
    and the finished jobs not yet folded into them (so that no job is in both; ``capped``:
    more were waiting than were read), each asked (project, queue)'s oldest queued job
    (``created_at``, ``run_at``), and each host's newest sample."""

    tallies: list[dict[str, Any]]
    untallied: list[dict[str, Any]]
    capped: bool = False
    oldest_queued: dict[tuple[str, str], dict[str, Any]] = dataclasses.field(default_factory=dict)
    samples: list[HostSample] = dataclasses.field(default_factory=list)


def decode_readings(text: Any) -> tuple[dict[str, Any], str | None]:
    """A stored readings column as a dict, and why not when it is none. The same text
    decodes to the same dict, kept for the next read (``READINGS_KEPT`` of them): a panel
    refreshing every few seconds reads the same hour of rows each time, and decoding them
    is most of its work. So the dict is shared: read it, never change it.

    >>> decode_readings('{"cpu.busy": 5}'), decode_readings('[1]')[1], decode_readings(None)[1]
    (({'cpu.busy': 5}, None), 'readings are not a JSON object', 'readings are not JSON text')
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    if not isinstance(text, str):
        return {}, "readings are not JSON text"
    return _decoded(text)


@functools.lru_cache(maxsize=READINGS_KEPT)
def _decoded(text: str) -> tuple[dict[str, Any], str | None]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}, "readings are not valid JSON"
    if not isinstance(value, dict):
        return {}, "readings are not a JSON object"
    return value, None


def sample_of(row: Mapping[str, Any]) -> HostSample:
    readings, error = decode_readings(row["readings"])
    at = row["at"]
    return HostSample(host=str(row["host"]), tier=str(row["tier"]), at=float(at) if is_finite_number(at) else 0.0,
                      readings=readings, error=error)


def encode_readings(readings: Mapping[str, Any]) -> str:
    """Readings as stored: compact JSON; a value JSON cannot hold is a programming error."""
    return json.dumps(readings, separators=(",", ":"), allow_nan=False, sort_keys=False)


class TelemetryStore(StoreCore):
    # --- the one sampler of a host ------------------------------------------------------

    def acquire_sampler(self, host: str, holder: str, ttl: float) -> bool:
        """Take (or keep) the lease of ``host``'s sampler for ``ttl`` seconds; False while
        another live sampler holds it."""
        with self.transaction(durable=False) as tx:
            return tx.one("acquire_sampler", host=host, holder=holder, ttl=float(ttl)) is not None

    def release_sampler(self, host: str, holder: str) -> None:
        """Let the lease lapse now, so a waiting sampler takes over at once."""
        with self.transaction(durable=False) as tx:
            tx.run("release_sampler", host=host, holder=holder)

    def record_host_sample(self, host: str, holder: str, ttl: float, readings: Mapping[str, Any]) -> float | None:
        """Write a detail row of ``readings`` if ``holder`` still holds the host's lease,
        renewing it for ``ttl`` in the same transaction; the row's time (the database's
        clock on PostgreSQL), or None when the lease is another's now (nothing written)."""
        with self.transaction(durable=False) as tx:
            if tx.one("renew_sampler", host=host, holder=holder, ttl=float(ttl)) is None:
                return None
            return float(tx.one("record_host_sample", host=host, readings=encode_readings(readings))["at"])

    def record_host_minute(self, host: str, at: float, readings: Mapping[str, Any]) -> bool:
        """Write the minute row starting at ``at``; False if that minute was folded before."""
        with self.transaction(durable=False) as tx:
            return tx.run("record_host_minute", host=host, at=float(at), readings=encode_readings(readings)) > 0

    # --- reading the recorder -------------------------------------------------------------

    def host_samples(self, host: str, tier: str = DETAIL, since: float = 0.0,
                     until: float = math.inf) -> list[HostSample]:
        """``host``'s rows of ``tier`` from ``since`` up to ``until``, oldest first."""
        _check_tier(tier)
        until = min(until, 1e300)  # a bound parameter must be a finite double on both databases
        return [sample_of(row) for row in self.reader().all("host_samples", host=host, tier=tier,
                                                            since=float(since), until=float(until))]

    def sample_times(self, host: str, tier: str, since: float) -> list[float]:
        """When ``host``'s rows of ``tier`` since ``since`` were taken, oldest first."""
        _check_tier(tier)
        rows = self.reader().all("host_sample_times", host=host, tier=tier, since=float(since))
        return [float(row["at"]) for row in rows if is_finite_number(row["at"])]  # plain SQL may write text

    def prune_host_samples(self, detail_keep: float, minute_keep: float) -> int:
        """Delete detail rows older than ``detail_keep`` seconds and minute rows older than
        ``minute_keep``; how many."""
        with self.transaction(durable=False) as tx:
            return (tx.run("prune_host_samples", tier=DETAIL, keep=float(detail_keep))
                    + tx.run("prune_host_samples", tier=MINUTE, keep=float(minute_keep)))

    # --- tallies of finished jobs ---------------------------------------------------------

    def fold_tallies(self, batch: int = FOLD_BATCH) -> int:
        """Count every finished job not yet counted into ``job_tallies``, ``batch`` per
        transaction (each marks its jobs and adds their counts together, so a crash
        between two counts nothing twice); how many jobs."""
        total = 0
        while True:
            with self.transaction() as tx:
                rows = [dict(row) for row in tx.all("tally_finished", limit=batch)]
                for (key, le), (jobs, warm, seconds) in tally.increments(rows).items():
                    tx.run("add_tally", project=key.project, queue=key.queue, task=key.task, model=key.model,
                           state=key.state, le=le, jobs=jobs, warm=warm, run_seconds=seconds)
            total += len(rows)
            if len(rows) < batch:
                return total

    def metrics_rows(self, queues: Iterable[tuple[str, str]] = (), cap: int = UNTALLIED_READ_CAP) -> MetricsRows:
        """The tallies and the finished jobs not yet in them (at most ``cap``), the oldest
        queued job of each (project, queue) of ``queues``, and the newest samples, in one
        read."""
        with self._one_read() as tx:
            tallies = [dict(row) for row in tx.all("job_tallies")]
            untallied = [dict(row) for row in tx.all("untallied_jobs", limit=cap + 1)]
            oldest = oldest_queued(tx, queues)
            samples = [sample_of(row) for row in tx.all("latest_host_samples")]
        return MetricsRows(tallies=tallies, untallied=untallied[:cap], capped=len(untallied) > cap,
                         oldest_queued=oldest, samples=samples)


def oldest_queued(tx: Any, queues: Iterable[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (project, queue) of ``queues`` that has queued jobs, its oldest one's
    ``created_at`` and ``run_at``: one index seek each."""
    oldest = {}
    for project, queue in queues:
        row = tx.one("oldest_queued", project=project, queue=queue)
        if row is not None:
            oldest[project, queue] = dict(row)
    return oldest


def _check_tier(tier: str) -> None:
    if tier not in TIERS:
        raise ConfigError(f"a sample tier is one of {', '.join(TIERS)}, not {tier!r}")
