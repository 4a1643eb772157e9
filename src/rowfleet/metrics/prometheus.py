"""What ``/metrics`` says: the fleet's snapshot, the finished jobs' tallies and each host's
newest sample, as Prometheus text (exposition format 0.0.4). Pure.

``exposition(snapshot, rows)`` is the whole text; ``families`` is the same as typed values
(``Family``), for a front end that shows them another way; ``render`` writes families as
text. Every family appears once, with its ``# HELP`` and ``# TYPE`` lines, when it has a
sample; families come in a fixed order and the samples of each sorted by their labels, so
two scrapes of the same rows read the same. Names carry the ``rowfleet_`` prefix and base
units (seconds, bytes, celsius, watts, hertz; shares as ratios 0..1), counters end in
``_total``. Label values are escaped (``escape_label``), as is help text (``escape_help``).

The counters (finished jobs, their run times, warm claims) come from ``rowfleet.metrics.tally``:
folded into the database by the orchestrator, so a restart of this process, or pruning
the jobs they counted, never takes them down. The snapshot's finished counts are capped
(``rowfleet.views.snapshot.COUNT_CAP``) and are not used. A host sample's readings are anyone's
JSON: a reading that is not a finite number is left out. A GPU's throttle seconds over one
sample's interval are no counter and are left out; the driver's running totals
(``gpu.N.throttle_total_s.REASON``) are one, and the last hour's seconds are a gauge when
the caller has them.

Imports the pure ``rowfleet.metrics.tally``, ``rowfleet.control`` and ``rowfleet.telemetry.readings``
(the names of readings) only. The snapshot and the store's rows come as arguments: their
types are named in annotations, never imported, since this module sits below them; nothing
of the store, the command line, the panel or the HTTP server.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Iterator, Mapping

from rowfleet import control
from rowfleet.metrics import tally
from rowfleet.names import is_finite_number
from rowfleet.telemetry import readings as readings_names

PREFIX = "rowfleet_"
GAUGE, COUNTER, HISTOGRAM = "gauge", "counter", "histogram"
MIB = 2 ** 20
# The job states the snapshot counts exactly (finished ones it counts only up to a cap).
LIVE_STATES = ("queued", "running")
# A worker's states in which it beats and holds its GPU (as ``snapshot.box_of`` judges live).
ALIVE = (control.SERVING, control.DRAINING, control.PARKED)

# Readings taken by name: reading -> (family, scale to the base unit).
HOST_READINGS = {
    "cpu.busy": ("host_cpu_busy_ratio", 0.01),
    "load.1": ("host_load1", 1),
    "load.5": ("host_load5", 1),
    "load.15": ("host_load15", 1),
    "mem.used": ("host_memory_used_bytes", 1),
    "mem.total": ("host_memory_total_bytes", 1),
    "mem.available": ("host_memory_available_bytes", 1),
    "temp.hottest": ("host_hottest_temperature_celsius", 1),
}
# Readings of one instance of a kind, named "<prefix><instance><suffix>": (prefix, suffix,
# family, the instance's label, scale). The first that matches takes the reading; an
# instance may hold dots (a path, a VLAN interface), so a name is matched at both ends.
INSTANCE_READINGS = (
    ("gpu.", ".util", "gpu_utilization_ratio", "gpu", 0.01),
    ("gpu.", ".vram_used_mib", "gpu_memory_used_bytes", "gpu", MIB),
    ("gpu.", ".vram_total_mib", "gpu_memory_total_bytes", "gpu", MIB),
    ("gpu.", ".temp", "gpu_temperature_celsius", "gpu", 1),
    ("gpu.", ".power_w", "gpu_power_watts", "gpu", 1),
    ("gpu.", ".power_limit_w", "gpu_power_limit_watts", "gpu", 1),
    ("gpu.", ".sm_mhz", "gpu_sm_clock_hertz", "gpu", 1e6),
    ("net.", ".rx_bps", "host_network_receive_bytes_per_second", "interface", 1),
    ("net.", ".tx_bps", "host_network_transmit_bytes_per_second", "interface", 1),
    ("disk.", ".used", "host_disk_used_bytes", "path", 1),
    ("disk.", ".total", "host_disk_total_bytes", "path", 1),
    ("temp.", "", "host_temperature_celsius", "sensor", 1),
)

# Every family: name (without the prefix) -> (type, help), in the order the text lists them.
FAMILIES: dict[str, tuple[str, str]] = {
    "jobs": (GAUGE, "Jobs queued or running now, per project and queue."),
    "jobs_unplaceable": (GAUGE, "Queued model jobs that no GPU worker of their queue can hold now."),
    "queue_oldest_age_seconds": (GAUGE, "Seconds the oldest queued job of a queue has been due "
                                        "(since it was enqueued, or since its run_at if later)."),
    "jobs_finished_total": (COUNTER, "Jobs that finished, by their final state; counted in the database, "
                                     "so pruning the jobs and restarts keep the count."),
    "job_run_seconds": (HISTOGRAM, "Run times of finished jobs that started, in seconds."),
    "model_claims_total": (COUNTER, "Finished jobs needing a model that ran, by whether their last claim "
                                    "found the model already warm on the worker."),
    "tallies_behind": (GAUGE, "1 when more finished jobs wait to be counted than one scrape reads: the "
                              "finished-job counters are partial until the orchestrator folds them in."),
    "jobs_awaiting_tally": (GAUGE, "Finished jobs not yet folded into the tallies, that this scrape "
                                   "counted itself (at most the scrape's read limit)."),
    "limit": (GAUGE, "A flow limit's value, by rule: concurrency and per_key in jobs, rate and key_rate in "
                     "starts per second; project \"*\" spans every project."),
    "limit_running": (GAUGE, "Running jobs a flow limit counts now (every project's, for project \"*\")."),
    "limit_keys_at_limit": (GAUGE, "Keys at their per-key concurrency limit now."),
    "limit_holding": (GAUGE, "1 when a rule of a flow limit holds its whole queue now (no job of it may start)."),
    "limit_next_start_seconds": (GAUGE, "Seconds until a rate that holds its queue lets the next job start."),
    "workers": (GAUGE, "Listed workers by what they are doing; a worker of several queues counts "
                       "under each."),
    "warm_workers": (GAUGE, "Live GPU workers holding a model warm, per host and GPU."),
    "orchestrators": (GAUGE, "Live orchestrators of a project."),
    "outbox_waiting": (GAUGE, "Workflow events waiting in a project's outbox to be drained."),
    "outbox_oldest_age_seconds": (GAUGE, "Seconds the oldest waiting outbox event has waited."),
    "host_sample_age_seconds": (GAUGE, "Seconds since a host's newest telemetry sample."),
    "host_cpu_busy_ratio": (GAUGE, "Share of the host's CPU time busy over the sample's interval."),
    "host_load1": (GAUGE, "The host's load average over 1 minute."),
    "host_load5": (GAUGE, "The host's load average over 5 minutes."),
    "host_load15": (GAUGE, "The host's load average over 15 minutes."),
    "host_memory_used_bytes": (GAUGE, "The host's memory in use."),
    "host_memory_total_bytes": (GAUGE, "The host's memory in all."),
    "host_memory_available_bytes": (GAUGE, "The host's memory available to new work."),
    "host_hottest_temperature_celsius": (GAUGE, "The hottest temperature the host's sensors read."),
    "host_temperature_celsius": (GAUGE, "A host's temperature sensor."),
    "host_network_receive_bytes_per_second": (GAUGE, "Bytes received per second over the sample's interval."),
    "host_network_transmit_bytes_per_second": (GAUGE, "Bytes sent per second over the sample's interval."),
    "host_disk_used_bytes": (GAUGE, "Disk space used on the filesystem holding a path."),
    "host_disk_total_bytes": (GAUGE, "Disk space in all on the filesystem holding a path."),
    "gpu_utilization_ratio": (GAUGE, "Share of time a GPU was busy."),
    "gpu_memory_used_bytes": (GAUGE, "GPU memory in use."),
    "gpu_memory_total_bytes": (GAUGE, "GPU memory in all."),
    "gpu_temperature_celsius": (GAUGE, "GPU temperature."),
    "gpu_power_watts": (GAUGE, "GPU power draw."),
    "gpu_power_limit_watts": (GAUGE, "GPU power limit in force."),
    "gpu_sm_clock_hertz": (GAUGE, "GPU streaming-multiprocessor clock."),
    "gpu_off": (GAUGE, "1 when a GPU is switched off for new claims, by who switched it (\"health gate\", or "
                       "an operator); 0 when on."),
    "gpu_failing": (GAUGE, "1 when the GPU health gate's last verdict on a GPU is failing (uncorrectable ECC "
                           "errors, failed or pending row remaps, a card-fault Xid...); 0 when healthy."),
    "gpu_throttle_seconds_total": (COUNTER, "Seconds a GPU's clocks were held back, by reason: the driver's "
                                            "own counter as last sampled, which restarts when the host boots."),
    "gpu_throttled_last_hour_seconds": (GAUGE, "Seconds a GPU was held back over the last hour, by reason."),
}

Labels = tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class Sample:
    """One line of a family: the family's name plus ``suffix`` (a histogram's ``_bucket``,
    ``_sum``, ``_count``), its labels in order, and its value."""

    suffix: str
    labels: Labels
    value: float


@dataclasses.dataclass(frozen=True)
class Family:
    """A metric family: its full name, type, help text and samples, in the order written."""

    name: str
    kind: str
    help: str
    samples: tuple[Sample, ...]

    def lines(self) -> Iterator[str]:
        """The family as text lines.

        >>> family = Family("rowfleet_x", GAUGE, "An x.", (Sample("", (("queue", "q"),), 2),))
        >>> list(family.lines())
        ['# HELP rowfleet_x An x.', '# TYPE rowfleet_x gauge', 'rowfleet_x{queue="q"} 2']
        """
        yield f"# HELP {self.name} {escape_help(self.help)}"
        yield f"# TYPE {self.name} {self.kind}"
        for sample in self.samples:
            yield f"{self.name}{sample.suffix}{label_text(sample.labels)} {value_text(sample.value)}"


def exposition(snapshot: "Snapshot", rows: "MetricsRows",
               throttle: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None, limits: Iterable[Any] = (),
               gpu_switches: Iterable[Any] = ()) -> str:
    """The Prometheus text of ``snapshot`` (``rowfleet.views.snapshot.Snapshot``) and ``rows``
    (``rowfleet.store.telemetry.MetricsRows``); ``throttle``: seconds each host's GPUs were
    held back over the last hour, host -> GPU index -> reason -> seconds (none: left out);
    ``limits``: the flow limits with their use (``Store.limits``); ``gpu_switches``: each
    judged or switched GPU (``Store.gpu_switches``).

    >>> from types import SimpleNamespace as Rows
    >>> fleet = Rows(at=100.0, counts=[Rows(project="", queue="q", state="queued", n=2)], unplaceable=[],
    ...              workers=[], services=[])
    >>> text = exposition(fleet, Rows(tallies=[], untallied=[], capped=False, oldest_queued={}, samples=[]))
    >>> print(text[:text.index("# HELP rowfleet_tallies")], end="")
    # HELP rowfleet_jobs Jobs queued or running now, per project and queue.
    # TYPE rowfleet_jobs gauge
    rowfleet_jobs{project="",queue="q",state="queued"} 2
    rowfleet_jobs{project="",queue="q",state="running"} 0
    """
    return render(families(snapshot, rows, throttle, limits, gpu_switches))


def render(found: Iterable[Family]) -> str:
    """Families as the text format: lines ending in a newline, the last one too."""
    return "".join(f"{line}\n" for family in found for line in family.lines())


def families(snapshot: "Snapshot", rows: "MetricsRows",
             throttle: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
             limits: Iterable[Any] = (), gpu_switches: Iterable[Any] = ()) -> list[Family]:
    """Every family that has a sample, in ``FAMILIES`` order (see ``exposition``)."""
    samples: dict[str, list[Sample]] = {name: [] for name in FAMILIES}
    _jobs(samples, snapshot, rows)
    _tallies(samples, tally.totals(rows.tallies, rows.untallied), rows)
    _limits(samples, limits)
    _fleet(samples, snapshot)
    _hosts(samples, rows.samples, snapshot.at)
    _throttle(samples, throttle or {})
    _gpu_switches(samples, gpu_switches)
    return [Family(PREFIX + name, kind, help_text, tuple(samples[name]))
            for name, (kind, help_text) in FAMILIES.items() if samples[name]]


# --- the families, from their sources ---------------------------------------------------


def _series(into: list[Sample], names: tuple[str, ...], values: Mapping[tuple[str, ...], float]) -> None:
    """Samples of ``values`` (label values -> value) with the labels ``names``, sorted."""
    for key in sorted(values):
        into.append(Sample("", tuple(zip(names, key)), values[key]))


def _jobs(samples: dict[str, list[Sample]], snapshot: Any, rows: Any) -> None:
    live: dict[tuple[str, ...], float] = {}
    for count in snapshot.counts:
        for state in LIVE_STATES:  # a queue shows 0 rather than vanish when it empties
            live.setdefault((count.project, count.queue, state), 0)
        if count.state in LIVE_STATES and _finite(count.n):
            live[count.project, count.queue, count.state] = count.n
    _series(samples["jobs"], ("project", "queue", "state"), live)
    _series(samples["jobs_unplaceable"], ("project", "queue"),
            {(count.project, count.queue): count.n for count in snapshot.unplaceable if _finite(count.n)})
    ages = {}
    for (project, queue), oldest in rows.oldest_queued.items():
        since = [value for value in (oldest.get("created_at"), oldest.get("run_at")) if _finite(value)]
        if since:
            ages[project, queue] = max(0.0, round(snapshot.at - max(since), 3))
    _series(samples["queue_oldest_age_seconds"], ("project", "queue"), ages)


def _tallies(samples: dict[str, list[Sample]], totals: list[tally.Tally], rows: Any) -> None:
    finished: dict[tuple[str, ...], float] = {}
    runs: dict[tuple[str, str, str], list[Any]] = {}  # -> [cumulative counts by le, sum, count]
    claims: dict[tuple[str, ...], float] = {}
    for each in totals:
        key = each.key
        slot = (key.project, key.queue, key.task, key.state)
        finished[slot] = finished.get(slot, 0) + each.jobs
        run = runs.setdefault((key.project, key.queue, key.task), [{}, 0.0, 0])
        for le, jobs in each.cumulative():
            run[0][le] = run[0].get(le, 0) + jobs
        run[1] += each.run_seconds
        run[2] += each.ran
        if key.model:
            for warm, n in (("true", each.warm), ("false", max(0, each.ran - each.warm))):
                claims[key.project, key.model, warm] = claims.get((key.project, key.model, warm), 0) + n
    _series(samples["jobs_finished_total"], ("project", "queue", "task", "state"), finished)
    histogram = samples["job_run_seconds"]
    for project, queue, task in sorted(runs):
        buckets, seconds, ran = runs[project, queue, task]
        labels = (("project", project), ("queue", queue), ("task", task))
        histogram.extend(Sample("_bucket", labels + (("le", le),), n) for le, n in buckets.items())
        histogram.append(Sample("_sum", labels, seconds))
        histogram.append(Sample("_count", labels, ran))
    _series(samples["model_claims_total"], ("project", "model", "warm"), claims)
    samples["tallies_behind"].append(Sample("", (), 1 if rows.capped else 0))
    samples["jobs_awaiting_tally"].append(Sample("", (), len(rows.untallied)))


def _limits(samples: dict[str, list[Sample]], limits: Iterable[Any]) -> None:
    """Each flow limit's rules, its use, and what holds its queue (a ``Store.limits`` entry)."""
    rules: dict[tuple[str, ...], float] = {}
    running: dict[tuple[str, ...], float] = {}
    keys: dict[tuple[str, ...], float] = {}
    holding: dict[tuple[str, ...], float] = {}
    next_start: dict[tuple[str, ...], float] = {}
    for use in limits:
        limit = use.limit
        scope = (limit.project, limit.queue)
        for rule, value in (("concurrency", limit.concurrency), ("per_key", limit.per_key),
                            ("rate", None if limit.rate is None else limit.rate.count / limit.rate.seconds),
                            ("key_rate", None if limit.key_rate is None else limit.key_rate.count / limit.key_rate.seconds)):
            if value is not None:
                rules[(*scope, rule)] = value
        running[scope] = use.running
        keys[scope] = use.keys_at_limit
        for rule in ("concurrency", "rate"):
            holding[(*scope, rule)] = 1 if any(hold.rule == rule for hold in use.holds) else 0
        if use.next_start_in is not None:
            next_start[scope] = use.next_start_in
    _series(samples["limit"], ("project", "queue", "rule"), rules)
    _series(samples["limit_running"], ("project", "queue"), running)
    _series(samples["limit_keys_at_limit"], ("project", "queue"), keys)
    _series(samples["limit_holding"], ("project", "queue", "rule"), holding)
    _series(samples["limit_next_start_seconds"], ("project", "queue"), next_start)


def _fleet(samples: dict[str, list[Sample]], snapshot: Any) -> None:
    workers: dict[tuple[str, ...], float] = {}
    warm: dict[tuple[str, ...], float] = {}
    for worker in snapshot.workers:
        for queue in dict.fromkeys(worker.queues or (worker.queue,)):
            key = (worker.project, worker.host, queue, str(worker.actual))
            workers[key] = workers.get(key, 0) + 1
        advert = worker.gpu
        if advert is not None and advert.warm_model is not None and worker.actual in ALIVE:
            key = (worker.project, worker.host, str(advert.gpu_index or 0), advert.warm_model)
            warm[key] = warm.get(key, 0) + 1
    _series(samples["workers"], ("project", "host", "queue", "state"), workers)
    _series(samples["warm_workers"], ("project", "host", "gpu", "model"), warm)
    services = sorted(snapshot.services, key=lambda served: served.project)
    for name, field in (("orchestrators", "orchestrators"), ("outbox_waiting", "outbox_waiting"),
                        ("outbox_oldest_age_seconds", "outbox_oldest_age")):
        _series(samples[name], ("project",), {(served.project,): getattr(served, field) for served in services
                                              if _finite(getattr(served, field))})


def _hosts(samples: dict[str, list[Sample]], newest: Iterable[Any], now: float) -> None:
    for sample in sorted(newest, key=lambda each: each.host):
        host = (("host", sample.host),)
        if _finite(sample.at):
            samples["host_sample_age_seconds"].append(Sample("", host, max(0.0, round(now - sample.at, 3))))
        found: dict[str, list[Sample]] = {}
        for name, value in sample.readings.items():
            place = reading_place(name) if isinstance(name, str) else None
            if place is not None and _finite(value):
                family, label, scale = place
                found.setdefault(family, []).append(Sample("", host + label, _scaled(value, scale)))
        for family, lines in found.items():
            samples[family].extend(sorted(lines, key=lambda line: line.labels))


def _gpu_switches(samples: dict[str, list[Sample]], switches: Iterable[Any]) -> None:
    """Each GPU's switch (a ``control.GpuSwitch``) and the health gate's last verdict on it."""
    off = {(str(s.host), str(s.gpu_index), str(s.changed_by)): 1 if s.off else 0 for s in switches}
    failing = {(str(s.host), str(s.gpu_index)): 1 if s.health else 0 for s in switches if s.health_at is not None}
    _series(samples["gpu_off"], ("host", "gpu", "changed_by"), off)
    _series(samples["gpu_failing"], ("host", "gpu"), failing)


def _throttle(samples: dict[str, list[Sample]], throttle: Mapping[str, Mapping[str, Mapping[str, float]]]) -> None:
    held = {(str(host), str(gpu), str(reason)): seconds for host, gpus in throttle.items()
            for gpu, reasons in gpus.items() for reason, seconds in reasons.items() if _finite(seconds)}
    _series(samples["gpu_throttled_last_hour_seconds"], ("host", "gpu", "reason"), held)


@functools.lru_cache(maxsize=4096)  # every scrape asks again for the same few hundred names
def reading_place(name: Any) -> tuple[str, Labels, float] | None:
    """Where a sample's reading goes: its family (without the prefix), the labels that name
    its instance, and the scale to the family's unit; None for a reading not exposed (a
    minute row's peak, a counter's delta over one interval, which Prometheus could not add
    up, a name of no known kind). A counter's running total is a counter.

    >>> reading_place("gpu.1.vram_used_mib"), reading_place("disk./srv/a.b.used")
    (('gpu_memory_used_bytes', (('gpu', '1'),), 1048576), ('host_disk_used_bytes', (('path', '/srv/a.b'),), 1))
    >>> reading_place("cpu.busy"), reading_place("gpu.0.throttle_s.hw_slowdown"), reading_place("temp.hottest:max")
    (('host_cpu_busy_ratio', (), 0.01), None, None)
    >>> reading_place("gpu.0.throttle_total_s.sw_power_cap")
    ('gpu_throttle_seconds_total', (('gpu', '0'), ('reason', 'sw_power_cap')), 1)
    """
    if not isinstance(name, str) or ":" in name:
        return None
    if name in HOST_READINGS:
        family, scale = HOST_READINGS[name]
        return family, (), scale
    for infix in readings_names.TOTAL_INFIXES:  # gpu.<index>.throttle_total_s.<reason>
        if name.startswith("gpu.") and infix in name:
            index, _, reason = name[len("gpu."):].partition(infix)
            if index and reason and "." not in index:
                return "gpu_throttle_seconds_total", (("gpu", index), ("reason", reason)), 1
            return None
    for prefix, suffix, family, label, scale in INSTANCE_READINGS:
        instance = name[len(prefix):len(name) - len(suffix)]
        if name.startswith(prefix) and name.endswith(suffix) and instance \
                and len(name) > len(prefix) + len(suffix):
            if label == "gpu" and "." in instance:
                continue  # a GPU's other readings, e.g. gpu.0.throttle_s.<reason>
            return family, ((label, instance),), scale
    return None


# --- the text format ---------------------------------------------------------------------


def escape_label(value: Any) -> str:
    r"""A label value as the text format quotes it: backslash, double quote and newline
    escaped.

    >>> print(escape_label('a\\b "c"\nd'))
    a\\b \"c\"\nd
    """
    text = str(value)
    if "\\" not in text and '"' not in text and "\n" not in text:
        return text
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    r"""Help text as the text format writes it: backslash and newline escaped.

    >>> print(escape_help('a\\b "c"\nd'))
    a\\b "c"\nd
    """
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def label_text(labels: Labels) -> str:
    """
    >>> label_text((("host", "box"), ("gpu", "0"))), label_text(())
    ('{host="box",gpu="0"}', '')
    """
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{escape_label(value)}"' for name, value in labels) + "}"


def value_text(value: float) -> str:
    """A sample's value: a whole number without a point, else Python's shortest float.

    >>> value_text(3), value_text(0.25), value_text(1e21), value_text(2.0)
    ('3', '0.25', '1e+21', '2.0')
    """
    if isinstance(value, bool):
        return str(int(value))
    return str(value) if isinstance(value, int) else repr(float(value))


def _scaled(value: float, scale: float) -> float:
    if scale == 1:
        return value
    scaled = value * scale
    return round(scaled, 6) if isinstance(scaled, float) else scaled


_finite = is_finite_number  # one rule for a number read from a row
