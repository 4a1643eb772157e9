"""Flow control over named queries: an operator's limits, and the claim of a limited queue.

A worker whose queue has limit rows (``limited_queues``, which it re-reads each poll) marks
its ``Claim`` ``limited``; the claim then runs here, in its own transaction: the limit rows
are read (and when a rule counts, locked on PostgreSQL, so that the count and the start are
one claim's at a time across every box; SQLite's BEGIN IMMEDIATE already serializes
writers; fair share alone takes no lock, its probes skip locked rows), the running jobs
counted and the rate buckets read, and the rules of ``rowfleet.flow`` decide what holds the
queue or which keys. Only then is a job picked and claimed, and its start written to the
buckets. ``has_due`` asks the same rules without writing, so that an idle worker never takes
a held queue for work. A limit row that plain SQL made unusable is ignored, said once in the
log; it never wedges the queue.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from typing import Callable

from rowfleet import flow, names
from rowfleet.claim import Claim
from rowfleet.config import Config
from rowfleet.errors import ConfigError
from rowfleet.job import Job, encode_json
from rowfleet.store.core import StoreCore, Tx
from rowfleet.store.jobs import claim_forms, claim_params

log = logging.getLogger("rowfleet.flow")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a claim of one (project, queue) is under now: its limits (each with its use),
    what holds the whole queue, and the keys held (key -> why)."""

    now: float
    limits: tuple[tuple[flow.Limit, flow.Use], ...]
    queue_held: tuple[flow.Hold, ...]
    keys_held: dict[str, list[flow.Hold]]

    @property
    def keyed(self) -> bool:
        return any(limit.keyed for limit, _ in self.limits)

    @property
    def fair(self) -> bool:
        return any(limit.fair and limit.project != flow.ANY for limit, _ in self.limits)


@dataclasses.dataclass(frozen=True)
class LimitUse:
    """A limit with its current use, as ``rowfleet limits`` lists it."""

    limit: flow.Limit
    running: int
    keys_at_limit: int
    holds: tuple[flow.Hold, ...]
    next_start_in: float | None = None  # seconds until a rate that holds the queue lets a job start

    def to_dict(self) -> dict[str, Any]:
        return {**self.limit.to_dict(), "running": self.running, "keys_at_limit": self.keys_at_limit,
                "held": [hold.text for hold in self.holds], "next_start_in": self.next_start_in}


class FlowStore(StoreCore):
    """The limits and the limited claim; the rules live in ``rowfleet.flow``."""

    def __init__(self, config: Config, clock: Callable[[], float]) -> None:
        super().__init__(config, clock)
        self._unusable_said: set[tuple[Any, Any]] = set()  # limit rows said unusable, once each
        # When a rate lets each limited (project, queue) start a job, as its last look found.
        self._flow_ready: dict[tuple[str, str], float | None] = {}

    # --- the operator's limits ---------------------------------------------------------

    def set_limit(self, project: str, queue: str, by: str = "", *, clear: bool = False,
                  **rules: Any) -> flow.Limit | None:
        """Change the limits of (project, queue) (``flow.ANY``: every project): the rules
        given set, the others kept (``clear``: dropped first). The new limit, or None when no
        rule is left (the row is deleted). Workers read it at their next poll."""
        with self.transaction() as tx:
            row = tx.one("limit_of", project=project, queue=queue)
            current = None
            if row is not None and not clear:
                try:
                    current = flow.Limit.from_row(row)
                except ConfigError:
                    current = None  # an unusable row is replaced by what the operator says now
            new = flow.changed(current, project, queue, clear=clear, **rules)
            if new is None:
                tx.run("clear_limit", project=project, queue=queue)
                return None
            stored = tx.one("set_limit", **_limit_params(new), by=by)
            return flow.Limit.from_row(stored)

    def limits(self) -> list[LimitUse]:
        """Every limit row of the database with its use now (an unusable row is left out)."""
        with self._one_read() as tx:
            found = []
            for row in tx.all("all_limits"):
                limit = self._usable(row)
                if limit is None:
                    continue
                now = row["now"]
                use = self._use(tx, limit, limit.project, now)
                holds = flow.queue_holds(limit, use, now)
                ready = flow.ready_at(hold for hold in holds if hold.rule == "rate")
                found.append(LimitUse(limit, use.running, len(flow.saturated_keys(limit, use)), tuple(holds),
                                      None if ready is None else round(max(ready - now, 0.0), 3)))
            return found

    def limited_queues(self, project: str) -> frozenset[str]:
        """The queues of ``project`` some limit rows hold: what a worker marks ``limited``."""
        return frozenset(row["queue"] for row in self.reader().all("limited_queues", project=project))

    def flow_holds(self, project: str, queue: str, key: str | None) -> list[flow.Hold]:
        """What holds a queued job of (project, queue) with ``key`` now: why it is not running."""
        with self._one_read() as tx:
            verdict = self._verdict(tx, project, queue, lock=False)
            if verdict is None:
                return []
            counted = [hold for hold in verdict.keys_held.get(key, []) if hold.rule != "key_rate"] if key else []
            return [*verdict.queue_held, *counted, *self._key_rate_holds(tx, verdict, queue, key)]

    # --- the limited claim -------------------------------------------------------------

    def _flow_take(self, tx: Tx, claim: Claim) -> Job | None:
        """A limited claim in ``tx``: None when a rule holds the queue or no job's key is free."""
        verdict = self._verdict(tx, claim.project, claim.queue, lock=True)
        if verdict is None:
            return self._plain_take(tx, claim, None)
        self._note_ready(claim, verdict)
        if verdict.queue_held:
            return None
        if claim.routed and verdict.fair:
            job = self._routed_fair_take(tx, claim, verdict)
        elif claim.routed or not verdict.keyed:
            job = self._plain_take(tx, claim, sorted(verdict.keys_held) if verdict.keyed else None)
        else:
            picked = self._pick(tx, claim, verdict)
            row = None if picked is None else tx.one("claim_job", id=picked, **claim_params(claim))
            job = None if row is None else Job.from_row(row)
        if job is not None:
            self._started(tx, verdict, job)
        return job

    def _routed_fair_take(self, tx: Tx, claim: Claim, verdict: Verdict) -> Job | None:
        """A GPU worker's claim under fair share (``flow.ORDER``): its routing picks the kind
        of job, run-next and priority (the routed pick, the held keys' jobs left out); fair
        share then picks the key within them."""
        held = sorted(verdict.keys_held)
        params = claim_params(claim, held)
        routed = next((row for form in claim_forms("flow_routed_pick", claim)
                       if (row := tx.one(form, **params)) is not None), None)
        if routed is None:
            return None
        fair = tx.one("flow_pick[kind]", **params, held=encode_json(held), fair=1, limit=flow.UNKEYED_LOOKAHEAD,
                      model=routed["required_model"], run_next=routed["run_next"], priority=routed["priority"])
        row = tx.one("claim_job", id=routed["id"] if fair is None else fair["id"], **params)
        return None if row is None else Job.from_row(row)

    def _flow_due(self, tx: Tx, claim: Claim) -> bool:
        """``has_due`` for a limited claim: the claim's rules, read without writing."""
        verdict = self._verdict(tx, claim.project, claim.queue, lock=False)
        if verdict is None:
            return self._plain_due(tx, claim, None)
        self._note_ready(claim, verdict)
        if verdict.queue_held:
            return False
        if tx.one("flow_promotable", project=claim.project, queue=claim.queue) is not None:
            return True
        if claim.routed or not verdict.keyed:
            return self._plain_due(tx, claim, sorted(verdict.keys_held) if verdict.keyed else None)
        return self._pick(tx, claim, verdict, look=True) is not None

    def flow_ready_at(self, project: str, queue: str) -> float | None:
        """When a rate that held (project, queue) at this store's last look lets a job start
        (in this store's clock), or None: the worker's wait ends no later."""
        return self._flow_ready.get((project, queue))

    def _note_ready(self, claim: Claim, verdict: Verdict) -> None:
        held = [*verdict.queue_held, *(hold for holds in verdict.keys_held.values() for hold in holds)]
        ready = flow.ready_at(hold for hold in held if hold.rule in ("rate", "key_rate"))
        local = None if ready is None else self.local_clock() + (ready - verdict.now)
        self._flow_ready[(claim.project, claim.queue)] = local

    def _pick(self, tx: Tx, claim: Claim, verdict: Verdict, look: bool = False) -> int | None:
        """A keyed claim's job: the first of the claim order whose key is free, else (all of
        the first ``KEY_LOOKAHEAD`` held, or fair share) one probe per key."""
        held = verdict.keys_held
        if not verdict.fair:
            ahead = tx.all("flow_ahead", project=claim.project, queue=claim.queue, gpus_free=claim.gpus_free,
                           limit=flow.KEY_LOOKAHEAD)
            for row in ahead:
                if row["concurrency_key"] is None or row["concurrency_key"] not in held:
                    return row["id"]
            if len(ahead) < flow.KEY_LOOKAHEAD:
                return None
        params = {"project": claim.project, "queue": claim.queue, "gpus_free": claim.gpus_free,
                  "held": encode_json(sorted(held)), "fair": int(verdict.fair), "limit": flow.UNKEYED_LOOKAHEAD}
        row = tx.one("flow_pick[look]", **params) if look else tx.one("flow_pick", **params)
        return None if row is None else row["id"]

    def _verdict(self, tx: Tx, project: str, queue: str, lock: bool) -> Verdict | None:
        """The rules a claim of (project, queue) is under now; None when no usable row holds it."""
        rows = tx.all("flow_limits_read", project=project, queue=queue)
        limits = [limit for limit in map(self._usable, rows) if limit is not None]
        if lock and any(limit.counts for limit in limits):  # fair share alone orders, counts nothing
            rows = tx.all("flow_limits_lock", project=project, queue=queue)
            limits = [limit for limit in map(self._usable, rows) if limit is not None]
        if not limits:
            return None
        now = max(row["now"] for row in rows)  # the last row's: read after every lock was taken
        # The claim that follows starts its job at the time its windows count.
        if lock and tx.now is None and any(limit.counts for limit in limits):
            tx.now = now
        measured, queue_held, keys_held = [], [], {}
        for limit in limits:
            use = self._use(tx, limit, project, now)
            measured.append((limit, use))
            queue_held += flow.queue_holds(limit, use, now)
            for key in flow.saturated_keys(limit, use):
                counted = flow.key_holds(limit, use, key, (), now)  # its window is read below, by ready_at
                keys_held.setdefault(key, []).extend(hold for hold in counted if hold.rule == "per_key")
            if limit.key_rate is not None:
                for row in tx.all("flow_spent_keys", scope=limit.project, queue=queue):
                    if isinstance(row["key"], str):
                        full = flow.Hold("key_rate", "its key's rate window is full")
                        keys_held.setdefault(row["key"], []).append(full)
        return Verdict(now, tuple(measured), tuple(queue_held), keys_held)

    def _key_rate_holds(self, tx: Tx, verdict: Verdict, queue: str, key: str | None) -> list[flow.Hold]:
        """A key's rate holds in full words (when its next start may come), for ``flow_holds``."""
        if key is None:
            return []
        holds = []
        for limit, use in verdict.limits:
            if limit.key_rate is not None:
                window = tx.one("flow_window", scope=limit.project, queue=queue, key=key)
                holds += [hold for hold in flow.key_holds(limit, use, key, _starts(window),
                                                           verdict.now) if hold.rule == "key_rate"]
        return holds

    def _use(self, tx: Tx, limit: flow.Limit, project: str, now: float) -> flow.Use:
        """What ``limit`` counts now: the queue's running jobs by key (when a concurrency rule
        needs them) and its queue window's time (when it has a rate)."""
        running: dict[str | None, int] = {}
        if limit.concurrency is not None or limit.per_key is not None:
            rows = (tx.all("flow_running_every", queue=limit.queue) if limit.project == flow.ANY
                    else tx.all("flow_running", project=project, queue=limit.queue))
            for row in rows:  # a key plain SQL wrote as no text counts for the queue, as no key
                key = row["concurrency_key"] if isinstance(row["concurrency_key"], str) else None
                running[key] = running.get(key, 0) + row["running"]
        starts: tuple[float, ...] = ()
        if limit.rate is not None:
            starts = _starts(tx.one("flow_window", scope=limit.project, queue=limit.queue, key=""))
        return flow.Use(running, starts)

    def _started(self, tx: Tx, verdict: Verdict, job: Job) -> None:
        """Write a start to the rate windows it counts in and, for fair share, its key's
        last start."""
        key = job.concurrency_key if isinstance(job.concurrency_key, str) else None  # plain SQL's number: no key
        now = verdict.now
        for limit, use in verdict.limits:
            if limit.rate is not None:
                self._write_window(tx, limit.project, job.queue, "", limit.rate.started(use.queue_starts, now), now)
            if limit.key_rate is not None and key is not None:
                window = tx.one("flow_window", scope=limit.project, queue=job.queue, key=key)
                self._write_window(tx, limit.project, job.queue, key, limit.key_rate.started(_starts(window), now), now)
        if verdict.fair:
            tx.run("flow_started", scope=job.project, queue=job.queue, key=key or "", starts=None, ready_at=None,
                   windowed=0, started_at=now)

    @staticmethod
    def _write_window(tx: Tx, scope: str, queue: str, key: str, window: tuple[tuple[float, ...], float | None],
                now: float) -> None:
        starts, ready = window
        tx.run("flow_started", scope=scope, queue=queue, key=key, starts=encode_json(list(starts)), ready_at=ready,
               windowed=1, started_at=now)

    def _usable(self, row: Any) -> flow.Limit | None:
        """A limit row as a ``Limit``; None (said once per row in this process) when plain
        SQL wrote values no rule allows."""
        try:
            return flow.Limit.from_row(row)
        except ConfigError as exc:
            said = (row["project"], row["queue"])
            if said not in self._unusable_said:
                self._unusable_said.add(said)
                log.error("%s; it is ignored until an operator sets the limit again (rowfleet limit)", exc)
            return None


def _starts(window: Any) -> tuple[float, ...]:
    """A window's starts as stored; what plain SQL made no JSON list of finite numbers reads
    as an empty window (said nowhere: the next start writes it whole again)."""
    text = None if window is None else window["starts"]
    try:
        starts = json.loads(text) if isinstance(text, str) else []
    except ValueError:
        return ()
    return tuple(float(at) for at in starts if names.is_finite_number(at)) if isinstance(starts, list) else ()


def _limit_params(limit: flow.Limit) -> dict[str, Any]:
    rate, key_rate = limit.rate, limit.key_rate
    return {"project": limit.project, "queue": limit.queue, "concurrency": limit.concurrency,
            "per_key": limit.per_key, "rate_count": None if rate is None else rate.count,
            "rate_seconds": None if rate is None else rate.seconds,
            "key_rate_count": None if key_rate is None else key_rate.count,
            "key_rate_seconds": None if key_rate is None else key_rate.seconds, "fair": int(limit.fair),
            "lost_first": int(limit.lost_first)}
