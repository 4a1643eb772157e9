"""``/metrics``: the pure builder (``rowfleet.metrics.prometheus``) table-tested from constructed
snapshots and rows, its text checked by ``promtool check metrics``; the counters of
finished jobs on SQLite and PostgreSQL, which neither a fold nor pruning takes down
(``MetricsStoreContract``); and the HTTP side (``rowfleet.services.exporter``) on a real socket,
with the ``rowfleet metrics`` command in a real process.

A real Prometheus server scraping the exporter is test_prometheus.py.
"""

from __future__ import annotations

import dataclasses
import http.client
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import unittest
from typing import Any

from rowfleet import control, flow
from rowfleet.claim import Claim
from rowfleet.errors import ConfigError, StoreUnavailable
from rowfleet.job import COMPLETED, FAILED, JobSpec, Outcome
from rowfleet.metrics import prometheus
from rowfleet.services import exporter, webserver
from rowfleet.store.flow import LimitUse
from rowfleet.store.telemetry import HostSample, MetricsRows
from rowfleet.views.snapshot import Count, Services, Snapshot, worker_of
from pg_harness import PostgresDatabaseCase
from support import DEADLINE, TempDirTestCase, child_env, require_tool, serve_in_background, wait_until
from contract.test_snapshot import worker_row

PROMETHEUS_ENV = "ROWFLEET_REQUIRE_PROMETHEUS"
NOW = 1000.0


# --- reading the text back ------------------------------------------------------------------

SAMPLE_LINE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)\Z')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|\Z)')


def unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}[m.group(1)], value)


@dataclasses.dataclass
class Parsed:
    """An exposition read back strictly: each family's type and help, and every sample by
    (name, labels); a second HELP or TYPE, or a sample twice, is an error."""

    types: dict[str, str]
    helps: dict[str, str]
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    order: list[str]  # families in the order written

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, tuple(sorted(labels.items()))))

    def of(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        return {labels: value for (found, labels), value in self.samples.items() if found == name}


def parse(text: str) -> Parsed:
    assert text.endswith("\n"), "the text must end with a newline"
    parsed = Parsed({}, {}, {}, [])
    family = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[len("# HELP "):].partition(" ")
            assert name not in parsed.helps, f"second HELP of {name}"
            parsed.helps[name] = help_text
            parsed.order.append(name)
            family = name
        elif line.startswith("# TYPE "):
            name, _, kind = line[len("# TYPE "):].partition(" ")
            assert name not in parsed.types and name == family, f"TYPE of {name} out of place"
            parsed.types[name] = kind
        else:
            match = SAMPLE_LINE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, label_text, value = match.groups()
            suffixes = ("_bucket", "_sum", "_count") if parsed.types.get(family) == "histogram" else ()
            assert name == family or name in (family + suffix for suffix in suffixes), \
                f"{name} is not of the family {family} above it"
            labels = []
            rest = label_text or ""
            while rest:
                found = LABEL.match(rest)
                assert found, f"bad labels in {line!r}"
                labels.append((found.group(1), unescape(found.group(2))))
                rest = rest[found.end():]
            key = (name, tuple(sorted(labels)))
            assert key not in parsed.samples, f"sample twice: {line!r}"
            parsed.samples[key] = float(value)
    return parsed


# --- constructed inputs ---------------------------------------------------------------------


def fleet(counts=(), workers=(), services=(), unplaceable=(), at=NOW) -> Snapshot:
    return Snapshot(at=at, cap=10_000, counts=tuple(counts), workers=tuple(workers), switches=(),
                    services=tuple(services), unplaceable=tuple(unplaceable))


def rows(tallies=(), untallied=(), capped=False, oldest=None, samples=()) -> MetricsRows:
    return MetricsRows(tallies=list(tallies), untallied=list(untallied), capped=capped,
                       oldest_queued=dict(oldest or {}), samples=list(samples))


def tally_row(state="completed", le="0.5", jobs=1, warm=0, seconds=0.3, queue="q", task="t", model="", project=""):
    return dict(project=project, queue=queue, task=task, model=model, state=state, le=le, jobs=jobs, warm=warm,
                run_seconds=seconds)


def finished_row(state="completed", started=0.0, finished=0.2, warm=0, queue="q", task="t", model=None):
    return dict(project="", queue=queue, task=task, required_model=model, state=state, started_at=started,
                finished_at=finished, warm_claim=warm)


def worker(**columns: Any):
    return worker_of(worker_row(**{"last_seen": NOW, **columns}), [], NOW)


def host(readings: dict[str, Any], name="box", at=NOW - 2.0) -> HostSample:
    return HostSample(host=name, tier="detail", at=at, readings=readings)


def exposed(snapshot: Snapshot, metrics_rows: MetricsRows, **more: Any) -> Parsed:
    return parse(prometheus.exposition(snapshot, metrics_rows, **more))


class NamesTest(unittest.TestCase):
    def test_every_family_is_named_typed_and_helped_as_prometheus_wants(self):
        for name, (kind, help_text) in prometheus.FAMILIES.items():
            with self.subTest(name=name):
                self.assertRegex(name, r"\A[a-z][a-z0-9_]*[a-z0-9]\Z")
                self.assertEqual(name.endswith("_total"), kind == prometheus.COUNTER)
                self.assertIn(kind, (prometheus.GAUGE, prometheus.COUNTER, prometheus.HISTOGRAM))
                self.assertNotRegex(name, r"_(ms|mb|mib|mhz|percent|celsius_|bps)(_|\Z)")
                self.assertTrue(help_text and help_text.endswith("."))
        places = {prometheus.reading_place(name) for name in ("cpu.busy", "gpu.0.util", "net.eth0.rx_bps", "disk./.used")}
        self.assertLessEqual({place[0] for place in places}, set(prometheus.FAMILIES),
                             "a reading goes to a family that is not declared")
        self.assertLessEqual({family for family, _ in prometheus.HOST_READINGS.values()}
                             | {row[2] for row in prometheus.INSTANCE_READINGS}, set(prometheus.FAMILIES))

    def test_escaping_of_label_values_and_help_text(self):
        for value, text in (('plain', 'plain'), ('a\\b', 'a\\\\b'), ('say "hi"', 'say \\"hi\\"'),
                            ('two\nlines', 'two\\nlines'), ('\\n', '\\\\n'), ('é✓', 'é✓')):
            with self.subTest(value=value):
                self.assertEqual(prometheus.escape_label(value), text)
        self.assertEqual(prometheus.escape_help('a\\b\n"c"'), 'a\\\\b\\n"c"')
        family = prometheus.Family("rowfleet_x", prometheus.GAUGE, "two\nlines \\ here", ())
        self.assertEqual(next(family.lines()), "# HELP rowfleet_x two\\nlines \\\\ here")

    def test_hostile_names_round_trip_through_the_text(self):
        queue, task, host_name = 'q"}\n{x="1', "mod:fn\\\\", "box\nevil 1"
        text = prometheus.exposition(
            fleet(counts=[Count("", queue, "queued", 3)], workers=[worker(host=host_name, queue=queue)]),
            rows(tallies=[tally_row(queue=queue, task=task)], samples=[host({"cpu.busy": 50}, name=host_name)]))
        parsed = parse(text)
        self.assertEqual(parsed.value("rowfleet_jobs", project="", queue=queue, state="queued"), 3)
        self.assertEqual(parsed.value("rowfleet_jobs_finished_total", project="", queue=queue, task=task,
                                      state="completed"), 1)
        self.assertEqual(parsed.value("rowfleet_host_cpu_busy_ratio", host=host_name), 0.5)
        self.assertEqual(parsed.value("rowfleet_workers", project="", host=host_name, queue=queue, state="serving"), 1)


class JobsTest(unittest.TestCase):
    def test_live_counts_are_exact_and_every_queue_shows_both_live_states(self):
        parsed = exposed(fleet(counts=[Count("", "q", "queued", 7), Count("", "q", "completed", 10_000, True),
                                       Count("a", "r", "failed", 3), Count("a", "r", "running", 2)]), rows())
        self.assertEqual(parsed.of("rowfleet_jobs"), {
            (("project", ""), ("queue", "q"), ("state", "queued")): 7,
            (("project", ""), ("queue", "q"), ("state", "running")): 0,
            (("project", "a"), ("queue", "r"), ("state", "queued")): 0,
            (("project", "a"), ("queue", "r"), ("state", "running")): 2}, "finished counts are capped: never shown")

    def test_the_oldest_queued_jobs_age(self):
        for oldest, age in (({"created_at": NOW - 30, "run_at": NOW - 30}, 30.0),
                            ({"created_at": NOW - 30, "run_at": NOW - 10}, 10.0),  # delayed: due since run_at
                            ({"created_at": NOW - 30, "run_at": NOW + 60}, 0.0),   # not yet due: never negative
                            ({"created_at": NOW - 5, "run_at": "soon"}, 5.0),     # plain SQL: the number that is one
                            ({"created_at": None, "run_at": "x"}, None)):
            with self.subTest(oldest=oldest):
                parsed = exposed(fleet(), rows(oldest={("", "q"): oldest}))
                self.assertEqual(parsed.value("rowfleet_queue_oldest_age_seconds", project="", queue="q"), age)

    def test_unplaceable_and_services(self):
        parsed = exposed(fleet(unplaceable=[Count("", "gpu", "unplaceable", 4)],
                               services=[Services("b", 2, 5, 12.5), Services("a", 0, 0, None)]), rows())
        self.assertEqual(parsed.value("rowfleet_jobs_unplaceable", project="", queue="gpu"), 4)
        self.assertEqual(parsed.of("rowfleet_orchestrators"), {(("project", "a"),): 0, (("project", "b"),): 2})
        self.assertEqual(parsed.value("rowfleet_outbox_waiting", project="b"), 5)
        self.assertEqual(parsed.of("rowfleet_outbox_oldest_age_seconds"), {(("project", "b"),): 12.5})


class TalliesTest(unittest.TestCase):
    def test_counters_add_the_stored_tallies_and_the_jobs_not_yet_folded(self):
        stored = [tally_row("completed", "0.5", 3, seconds=1.2), tally_row("completed", "+Inf", 1, seconds=4000.0),
                  tally_row("failed", "", 2, seconds=0.0), tally_row("completed", "0.5", 2, model="llm", warm=1,
                                                                     seconds=0.8)]
        late = [finished_row("completed", 0.0, 2.0), finished_row("completed", 0.0, 0.1, model="llm", warm=1)]
        parsed = exposed(fleet(), rows(stored, late))
        self.assertEqual(parsed.of("rowfleet_jobs_finished_total"), {
            (("project", ""), ("queue", "q"), ("state", "completed"), ("task", "t")): 3 + 1 + 2 + 2,
            (("project", ""), ("queue", "q"), ("state", "failed"), ("task", "t")): 2})
        labels = (("project", ""), ("queue", "q"), ("task", "t"))
        bucket = lambda le: parsed.value("rowfleet_job_run_seconds_bucket", project="", queue="q", task="t", le=le)
        self.assertEqual([bucket(le) for le in ("0.05", "0.1", "0.5", "2.5", "3600", "+Inf")], [0, 1, 6, 7, 7, 8],
                         "cumulative over every state and model; the 2 that never ran are in none")
        self.assertEqual(parsed.of("rowfleet_job_run_seconds_count"), {labels: 8})
        self.assertAlmostEqual(parsed.of("rowfleet_job_run_seconds_sum")[labels], 1.2 + 4000 + 0.8 + 2.0 + 0.1)
        self.assertEqual(parsed.of("rowfleet_model_claims_total"), {
            (("model", "llm"), ("project", ""), ("warm", "true")): 2,
            (("model", "llm"), ("project", ""), ("warm", "false")): 1})
        self.assertEqual(parsed.value("rowfleet_tallies_behind"), 0)
        self.assertEqual(parsed.value("rowfleet_jobs_awaiting_tally"), 2)

    def test_a_histogram_lists_its_buckets_in_order_then_sum_and_count(self):
        text = prometheus.exposition(fleet(), rows([tally_row()]))
        lines = [line.split("{")[0] for line in text.splitlines() if line.startswith("rowfleet_job_run_seconds")]
        self.assertEqual(lines, ["rowfleet_job_run_seconds_bucket"] * 14 + ["rowfleet_job_run_seconds_sum",
                                                                            "rowfleet_job_run_seconds_count"])
        les = re.findall(r'le="([^"]+)"', text)
        self.assertEqual(les[-1], "+Inf")
        self.assertEqual([float(le) for le in les[:-1]], sorted(float(le) for le in les[:-1]))

    def test_a_capped_read_says_the_counters_are_partial(self):
        self.assertEqual(exposed(fleet(), rows(capped=True)).value("rowfleet_tallies_behind"), 1)

    def test_tallies_written_by_plain_sql_that_are_no_numbers_count_as_nothing(self):
        parsed = exposed(fleet(), rows([tally_row(jobs="many", seconds="slow"), tally_row(jobs=2, le="bogus")]))
        self.assertEqual(parsed.value("rowfleet_jobs_finished_total", project="", queue="q", task="t",
                                      state="completed"), 2)


class FleetTest(unittest.TestCase):
    def test_workers_count_by_actual_state_under_every_queue_they_serve(self):
        parsed = exposed(fleet(workers=[
            worker(worker_id="box:1:0", pid=1, queues='["gpu", "cpu"]', queue="gpu"),
            worker(worker_id="box:2:0", pid=2, queue="gpu"),
            worker(worker_id="box:3:0", pid=3, queue="gpu", exit_code=-9),
            worker(worker_id="box:4:0", pid=4, queue="gpu", last_seen=NOW - 3600)]), rows())
        self.assertEqual(parsed.of("rowfleet_workers"), {
            (("host", "box"), ("project", ""), ("queue", "cpu"), ("state", "serving")): 1,
            (("host", "box"), ("project", ""), ("queue", "gpu"), ("state", "serving")): 2,
            (("host", "box"), ("project", ""), ("queue", "gpu"), ("state", "killed by SIGKILL")): 1,
            (("host", "box"), ("project", ""), ("queue", "gpu"), ("state", "SILENT")): 1})

    def test_warm_workers_are_the_live_ones_holding_a_model(self):
        warm = '["llm", "vit"]'
        parsed = exposed(fleet(workers=[
            worker(worker_id="a", models=warm, gpu_index=1, warm_model="llm"),
            worker(worker_id="b", models=warm, gpu_index=0, warm_model="vit", state="parked"),
            worker(worker_id="c", models=warm, gpu_index=2, warm_model="llm", exit_code=0),
            worker(worker_id="d", models=warm, gpu_index=3)]), rows())
        self.assertEqual(parsed.of("rowfleet_warm_workers"), {
            (("gpu", "0"), ("host", "box"), ("model", "vit"), ("project", "")): 1,
            (("gpu", "1"), ("host", "box"), ("model", "llm"), ("project", "")): 1})


class HostsTest(unittest.TestCase):
    def test_readings_in_base_units(self):
        readings = {"cpu.busy": 37.5, "load.1": 1.25, "mem.used": 1000, "mem.total": 4000, "temp.hottest": 71.5,
                    "gpu.0.util": 90, "gpu.0.vram_used_mib": 1024, "gpu.0.vram_total_mib": 81559, "gpu.0.temp": 60,
                    "gpu.0.power_w": 300.5, "gpu.0.power_limit_w": 700, "gpu.0.sm_mhz": 1980,
                    "gpu.1.util": 0, "net.eth0.100.rx_bps": 1234, "net.eth0.100.tx_bps": 5,
                    "disk./srv/data.v2.used": 10, "disk./srv/data.v2.total": 100, "temp.coretemp/Core 0": 50,
                    "gpu.0.throttle_total_s.sw_power_cap": 1234.5, "gpu.0.throttle_total_s.hw_slowdown": 0}
        parsed = exposed(fleet(), rows(samples=[host(readings)]))
        expected = {
            ("rowfleet_host_sample_age_seconds", ()): 2.0,
            ("rowfleet_host_cpu_busy_ratio", ()): 0.375,
            ("rowfleet_host_load1", ()): 1.25,
            ("rowfleet_host_memory_used_bytes", ()): 1000,
            ("rowfleet_host_memory_total_bytes", ()): 4000,
            ("rowfleet_host_hottest_temperature_celsius", ()): 71.5,
            ("rowfleet_host_temperature_celsius", (("sensor", "coretemp/Core 0"),)): 50,
            ("rowfleet_gpu_utilization_ratio", (("gpu", "0"),)): 0.9,
            ("rowfleet_gpu_utilization_ratio", (("gpu", "1"),)): 0,
            ("rowfleet_gpu_memory_used_bytes", (("gpu", "0"),)): 1024 * 2 ** 20,
            ("rowfleet_gpu_memory_total_bytes", (("gpu", "0"),)): 81559 * 2 ** 20,
            ("rowfleet_gpu_temperature_celsius", (("gpu", "0"),)): 60,
            ("rowfleet_gpu_power_watts", (("gpu", "0"),)): 300.5,
            ("rowfleet_gpu_power_limit_watts", (("gpu", "0"),)): 700,
            ("rowfleet_gpu_sm_clock_hertz", (("gpu", "0"),)): 1.98e9,
            ("rowfleet_host_network_receive_bytes_per_second", (("interface", "eth0.100"),)): 1234,
            ("rowfleet_host_network_transmit_bytes_per_second", (("interface", "eth0.100"),)): 5,
            ("rowfleet_host_disk_used_bytes", (("path", "/srv/data.v2"),)): 10,
            ("rowfleet_host_disk_total_bytes", (("path", "/srv/data.v2"),)): 100,
            ("rowfleet_gpu_throttle_seconds_total", (("gpu", "0"), ("reason", "sw_power_cap"))): 1234.5,
            ("rowfleet_gpu_throttle_seconds_total", (("gpu", "0"), ("reason", "hw_slowdown"))): 0,
        }
        got = {(name, tuple(label for label in labels if label[0] != "host")): value
               for (name, labels), value in parsed.samples.items() if "_host_" in name or "_gpu_" in name}
        self.assertEqual(got, expected)
        self.assertTrue(all(dict(labels)["host"] == "box" for (name, labels) in parsed.samples
                            if "_host_" in name or "_gpu_" in name))

    def test_readings_that_are_no_finite_numbers_or_not_gauges_are_left_out(self):
        garbage = {"cpu.busy": "high", "load.1": True, "mem.used": None, "mem.total": [1], "gpu.0.util": {"a": 1},
                   "gpu.0.temp": float("nan"), "gpu.0.power_w": float("inf"), "temp.hottest:max": 90,
                   "gpu.0.throttle_s.sw_power_cap": 1.5, "gpu.0.name": "H100", "gpu.0.reasons": ["gpu_idle"],
                   "gpu.0.throttle_total_s.": 1, "gpu..throttle_total_s.x": 1, "gpu.0.x.throttle_total_s.y": 1,
                   "gpu.0.throttle_total_s.hw_slowdown": "lots", "gpu..util": 5, "net..rx_bps": 5, "disk..used": 1, "temp.": 3, "samples": 1, "interval": 2.0,
                   "mystery": 4, "load.5": 10 ** 400}  # JSON from plain SQL may hold an integer no float holds
        parsed = exposed(fleet(), rows(samples=[host(garbage)]))
        self.assertEqual([name for name, _ in parsed.samples if "_host_" in name or "_gpu_" in name],
                         ["rowfleet_host_sample_age_seconds"])

    def test_a_sample_with_no_time_shows_no_age_and_hosts_are_sorted(self):
        parsed = exposed(fleet(), rows(samples=[host({"load.1": 2}, name="b"), host({"load.1": 1}, name="a",
                                                                                     at=float("nan"))]))
        self.assertEqual(parsed.of("rowfleet_host_sample_age_seconds"), {(("host", "b"),): 2.0})
        text = prometheus.exposition(fleet(), rows(samples=[host({"load.1": 2}, name="b"), host({"load.1": 1}, name="a")]))
        self.assertLess(text.index('host="a"'), text.index('host="b"'))

    def test_throttle_seconds_only_when_given(self):
        sample = host({"gpu.0.throttle_s.sw_power_cap": 3.0})
        self.assertEqual(exposed(fleet(), rows(samples=[sample])).of("rowfleet_gpu_throttled_last_hour_seconds"), {})
        parsed = exposed(fleet(), rows(samples=[sample]),
                         throttle={"box": {"0": {"sw_power_cap": 12.5, "hw_slowdown": float("nan")}}})
        self.assertEqual(parsed.of("rowfleet_gpu_throttled_last_hour_seconds"),
                         {(("gpu", "0"), ("host", "box"), ("reason", "sw_power_cap")): 12.5})


def rich() -> tuple[Snapshot, MetricsRows, dict]:
    """A snapshot and rows that fill every family."""
    snapshot = fleet(counts=[Count("", "q", "queued", 4), Count("a", "gpu", "running", 1)],
                     workers=[worker(queues='["q", "gpu"]'), worker(worker_id="g", models='["llm"]', warm_model="llm"),
                              worker(worker_id="x", exit_code=75)],
                     services=[Services("", 1, 2, 3.0)], unplaceable=[Count("a", "gpu", "unplaceable", 1)])
    readings = {"cpu.busy": 5, "load.1": 1, "load.5": 1, "load.15": 1, "mem.used": 1, "mem.total": 2,
                "mem.available": 1, "temp.hottest": 40, "temp.cpu": 40, "gpu.0.util": 1, "gpu.0.vram_used_mib": 1,
                "gpu.0.vram_total_mib": 2, "gpu.0.temp": 30, "gpu.0.power_w": 50, "gpu.0.power_limit_w": 300,
                "gpu.0.sm_mhz": 1000, "gpu.0.throttle_total_s.sw_power_cap": 2.5, "net.eth0.rx_bps": 1, "net.eth0.tx_bps": 1, "disk./.used": 1, "disk./.total": 2}
    metrics_rows = rows([tally_row(model="llm", warm=1), tally_row("failed", "")], [finished_row(task='a"b')],
                        oldest={("", "q"): {"created_at": NOW - 1, "run_at": NOW - 1}},
                        samples=[host(readings), host({"cpu.busy": 1}, name="other")])
    return snapshot, metrics_rows, {"box": {"0": {"sw_power_cap": 1.0}}}


# Two flow limits, one held by its rate (Store.limits's entries).
LIMITS = [LimitUse(flow.Limit("", "api", concurrency=4, per_key=2, rate=flow.Rate(10, 1.0)), 3, 1,
                   (flow.Hold("rate", "rate 10/s on queue api: next start in 0.3 s", NOW + 0.3),), 0.3),
          LimitUse(flow.Limit(flow.ANY, "gpu", concurrency=2, key_rate=flow.Rate(1, 60.0)), 2, 0,
                   (flow.Hold("concurrency", "queue gpu of every project at its limit 2 of 2"),))]


# Two GPUs' switches: one the health gate switched off, one an operator cleared (GpuSwitch rows).
GPU_SWITCHES = [control.GpuSwitch("box", 0, control.OFF, "row remapping failed", control.HEALTH_GATE, NOW,
                                  "row remapping failed", NOW),
                control.GpuSwitch("box", 1, control.ON, "", "ops", NOW, "", NOW)]


class ExpositionTest(unittest.TestCase):
    def test_flow_limits_show_their_rules_use_and_what_holds_them(self):
        text = prometheus.exposition(fleet(), rows(), limits=LIMITS)
        for line in ('rowfleet_limit{project="",queue="api",rule="concurrency"} 4',
                     'rowfleet_limit{project="",queue="api",rule="rate"} 10.0',
                     'rowfleet_limit{project="*",queue="gpu",rule="key_rate"} 0.016666666666666666',
                     'rowfleet_limit_running{project="*",queue="gpu"} 2',
                     'rowfleet_limit_keys_at_limit{project="",queue="api"} 1',
                     'rowfleet_limit_holding{project="",queue="api",rule="rate"} 1',
                     'rowfleet_limit_holding{project="",queue="api",rule="concurrency"} 0',
                     'rowfleet_limit_holding{project="*",queue="gpu",rule="concurrency"} 1',
                     'rowfleet_limit_next_start_seconds{project="",queue="api"} 0.3'):
            self.assertIn(line + "\n", text)
        self.assertNotIn('rowfleet_limit_next_start_seconds{project="*"', text)


    def test_every_family_once_in_the_declared_order(self):
        snapshot, metrics_rows, throttle = rich()
        parsed = exposed(snapshot, metrics_rows, throttle=throttle, limits=LIMITS, gpu_switches=GPU_SWITCHES)
        self.assertEqual(parsed.order, [prometheus.PREFIX + name for name in prometheus.FAMILIES],
                         "rich() must fill every family, each once, in FAMILIES order")
        self.assertEqual(parsed.types, {prometheus.PREFIX + name: kind for name, (kind, _) in prometheus.FAMILIES.items()})

    def test_the_text_does_not_depend_on_the_order_of_its_inputs(self):
        snapshot, metrics_rows, throttle = rich()
        text = prometheus.exposition(snapshot, metrics_rows, throttle, LIMITS)
        shuffle = lambda items: random.Random(7).sample(list(items), len(items))
        again = prometheus.exposition(
            dataclasses.replace(snapshot, counts=tuple(shuffle(snapshot.counts)), workers=tuple(shuffle(snapshot.workers))),
            dataclasses.replace(metrics_rows, tallies=shuffle(metrics_rows.tallies), samples=shuffle(metrics_rows.samples)),
            throttle, LIMITS[::-1])
        self.assertEqual(again, text)

    def test_an_empty_fleet_still_says_whether_the_counters_are_whole(self):
        parsed = exposed(fleet(), rows())
        self.assertEqual(parsed.order, ["rowfleet_tallies_behind", "rowfleet_jobs_awaiting_tally"])


class PromtoolTest(unittest.TestCase):
    def check(self, text: str) -> subprocess.CompletedProcess:
        promtool = require_tool(self, "promtool", PROMETHEUS_ENV)
        return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                              timeout=DEADLINE)

    def test_promtool_lints_the_text_clean(self):
        snapshot, metrics_rows, throttle = rich()
        result = self.check(prometheus.exposition(snapshot, metrics_rows, throttle, LIMITS))
        self.assertEqual((result.returncode, result.stdout + result.stderr), (0, ""))

    def test_promtool_would_catch_a_bad_family(self):
        bad = "# HELP rowfleet_job_ms x\n# TYPE rowfleet_job_ms counter\nrowfleet_job_ms 1\n"
        result = self.check(bad)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("_total", result.stdout + result.stderr)


# --- the store: counters that only go up ----------------------------------------------------


class MetricsStoreContract:
    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()

    def run_jobs(self, n: int, state: str = COMPLETED, queue: str = "q") -> None:
        for _ in range(n):
            self.store.enqueue(JobSpec(task="app:work", queue=queue))
            job = self.store.claim(Claim("", queue, "box:1", lease=60))
            self.store.finish(job, Outcome(state, result=None) if state == COMPLETED else Outcome(state, error="no"))

    def finished(self, state: str = COMPLETED) -> float | None:
        return parse(exporter.scrape(self.store)).value("rowfleet_jobs_finished_total", project="", queue="q",
                                                          task="app:work", state=state)

    def test_finished_counters_survive_the_fold_and_pruning_and_only_go_up(self):
        self.run_jobs(3)
        self.run_jobs(1, FAILED)
        self.store.enqueue(JobSpec(task="app:work", queue="q"))
        seen = [self.finished()]
        self.assertEqual((seen[0], self.finished(FAILED)), (3, 1), "counted before any fold")
        self.assertEqual(self.store.fold_tallies(), 4)
        seen.append(self.finished())
        newest = max(job.finished_at for job in self.store.reads.list_jobs("", state=COMPLETED))
        wait_until(lambda: self.store.clock() > newest, message="the store's clock to pass the last finish")
        self.assertEqual(self.store.prune(retention=0), 4)
        self.assertEqual(self.store.reads.list_jobs("", state=COMPLETED), [], "the finished jobs are gone")
        seen.append(self.finished())
        self.run_jobs(2)
        seen.append(self.finished())
        self.assertEqual(seen, [3, 3, 3, 5])
        self.assertEqual(self.finished(FAILED), 1)
        parsed = parse(exporter.scrape(self.store))
        self.assertEqual(parsed.value("rowfleet_jobs", project="", queue="q", state="queued"), 1)
        self.assertIsNotNone(parsed.value("rowfleet_queue_oldest_age_seconds", project="", queue="q"))
        self.assertEqual(parsed.value("rowfleet_job_run_seconds_count", project="", queue="q", task="app:work"), 6)

    def test_a_hosts_newest_sample_is_shown(self):
        self.assertTrue(self.store.acquire_sampler("box", "box:1:x", 60.0))
        self.store.record_host_sample("box", "box:1:x", 60.0, {"cpu.busy": 10.0, "gpu.0.vram_used_mib": 2})
        self.store.record_host_sample("box", "box:1:x", 60.0, {"cpu.busy": 20.0, "gpu.0.vram_used_mib": 3})
        parsed = parse(exporter.scrape(self.store))
        self.assertEqual(parsed.value("rowfleet_host_cpu_busy_ratio", host="box"), 0.2)
        self.assertEqual(parsed.value("rowfleet_gpu_memory_used_bytes", host="box", gpu="0"), 3 * 2 ** 20)


class SQLiteMetricsStoreTest(MetricsStoreContract, TempDirTestCase):
    def test_readings_written_by_plain_sql_are_skipped_not_fatal(self):
        with sqlite3.connect(self.db) as conn:
            conn.executemany("INSERT INTO host_samples (host, tier, at, readings) VALUES (?, 'detail', ?, ?)",
                             [("a", 1.0, '{"cpu.busy": "x", "load.1": NaN, "mem.used": 5}'), ("b", 1.0, "[1"),
                              ("c", "soon", '{"load.1": 1e999}')])
        conn.close()
        parsed = parse(exporter.scrape(self.store))
        self.assertEqual(parsed.of("rowfleet_host_memory_used_bytes"), {(("host", "a"),): 5})
        self.assertEqual({labels for labels in parsed.of("rowfleet_host_sample_age_seconds")},
                         {(("host", "a"),), (("host", "b"),), (("host", "c"),)})
        self.assertEqual(parsed.of("rowfleet_host_load1"), {})


class PostgresMetricsStoreTest(MetricsStoreContract, PostgresDatabaseCase, TempDirTestCase):
    pass


# --- the HTTP side -------------------------------------------------------------------------


class FailingStore:
    """A real store whose ``fails`` call (its own, or one of ``store.reads``) raises ``error``."""

    def __init__(self, store: Any, fails: str, error: BaseException) -> None:
        self._store, self._fails, self._error = store, fails, error

    def __getattr__(self, name: str) -> Any:
        if name == self._fails:
            def fail(*args: Any, **kwargs: Any) -> Any:
                raise self._error
            return fail
        if name == "reads":  # the operator's reads (store.reads) fail by name as well
            return FailingStore(self._store.reads, self._fails, self._error)
        return getattr(self._store, name)


class ServerTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()
        self.store.enqueue(JobSpec(task="app:work", queue="q"))

    def serve(self, token: str | None = None, db: str | None = None, opener: Any = None) -> exporter.MetricsServer:
        server = exporter.make_server(self.config().replace(db=db or self.db), "127.0.0.1", 0, token)
        if opener is not None:
            server.opener = opener
        return serve_in_background(self, server)

    def request(self, server: exporter.MetricsServer, method: str = "GET", path: str = "/metrics",
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(*server.server_address[:2], timeout=DEADLINE)
        try:
            conn.request(method, path, headers=headers or {})
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def assertOneLine(self, body: bytes) -> None:
        self.assertEqual(body.count(b"\n"), 1, body)
        self.assertTrue(body.endswith(b"\n"))
        self.assertNotIn(b"Traceback", body)
        self.assertNotIn(b"<!DOCTYPE", body, "http.server's HTML page")

    def test_get_and_head(self):
        server = self.serve()
        status, headers, body = self.request(server)
        self.assertEqual((status, headers["content-type"]), (200, exporter.CONTENT_TYPE))
        self.assertEqual(int(headers["content-length"]), len(body))
        self.assertEqual(parse(body.decode()).value("rowfleet_jobs", project="", queue="q", state="queued"), 1)
        status, headers, body = self.request(server, "HEAD")
        self.assertEqual((status, headers["content-type"], body), (200, exporter.CONTENT_TYPE, b""))
        self.assertGreater(int(headers["content-length"]), 0)
        self.assertEqual(self.request(server, path="/metrics?from=prometheus")[0], 200)
        self.assertTrue(server.url.startswith("http://127.0.0.1:") and server.url.endswith("/metrics"))

    def test_other_paths_are_404_and_other_methods_405(self):
        server = self.serve()
        for path in ("/", "/metrics/", "/metricsx", "/../metrics"):
            with self.subTest(path=path):
                status, _, body = self.request(server, path=path)
                self.assertEqual(status, 404)
                self.assertOneLine(body)
        self.assertEqual(self.request(server, "HEAD", "/nope")[::2], (404, b""))
        for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"):
            with self.subTest(method=method):
                status, headers, body = self.request(server, method)
                self.assertEqual((status, headers.get("allow")), (405, "GET, HEAD"))
                self.assertOneLine(body)

    def test_a_malformed_request_gets_one_line_too(self):
        server = self.serve()
        with socket.create_connection(server.server_address[:2], timeout=DEADLINE) as conn:
            conn.sendall(b"GET /metrics extra HTTP/1.0\r\n\r\n")
            answer = conn.makefile("rb").read()
        head, _, body = answer.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.0 400 "), head)
        self.assertOneLine(body)

    def test_a_token_is_needed_on_every_request_when_set(self):
        server = self.serve(token="s3cret-t0ken")
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-t0ken"},
                        {"Authorization": "Bearer s3cret-t0ken-longer"}, {"Authorization": "Bearer s3cret-t0ke"},
                        {"Authorization": "Bearer s3cret-t0kén"}):
            with self.subTest(headers=headers):
                status, answer, body = self.request(server, headers=headers)
                self.assertEqual(status, 401)
                self.assertIn("Bearer", answer["www-authenticate"])
                self.assertOneLine(body)
        self.assertEqual(self.request(server, "HEAD")[::2], (401, b""))
        self.assertEqual(self.request(server, "POST")[0], 401, "no method or path is told apart without the token")
        self.assertEqual(self.request(server, path="/x")[0], 401)
        good = {"Authorization": "Bearer s3cret-t0ken"}
        self.assertEqual(self.request(server, headers=good)[0], 200)
        self.assertEqual(self.request(server, headers={"Authorization": "bearer s3cret-t0ken"})[0], 200)

    def test_a_database_that_cannot_be_read_is_503_and_one_log_line(self):
        not_a_database = os.path.join(self.dir, "notes.txt")
        with open(not_a_database, "w") as handle:
            handle.write("these are not the rows you are looking for\n" * 100)
        empty = os.path.join(self.dir, "empty.db")
        sqlite3.connect(empty).close()
        for db in (not_a_database, empty, os.path.join(self.dir, "missing.db")):
            with self.subTest(db=os.path.basename(db)):
                server = self.serve(db=db)
                with self.assertLogs("rowfleet.metrics", "DEBUG") as logged:
                    status, headers, body = self.request(server)
                self.assertEqual(status, 503)
                self.assertOneLine(body)
                self.assertNotIn(self.dir.encode(), body, "the response names no path; the log does")
                failures = [record for record in logged.records if record.levelname == "WARNING"]
                self.assertEqual(len(failures), 1, logged.output)
                self.assertIsNone(failures[0].exc_info)
                self.assertEqual(len(failures[0].getMessage().splitlines()), 1)

    def test_the_panels_function_answers_503_for_a_store_error(self):
        for call in ("fleet_rows", "metrics_rows", "require_schema"):
            with self.subTest(call=call), self.assertLogs("rowfleet.metrics", "WARNING") as logged:
                status, headers, body = exporter.metrics_response(
                    FailingStore(self.store, call, StoreUnavailable("the server\nwent away")))
                self.assertEqual((status, dict(headers)["Content-Type"]), (503, webserver.TEXT))
                self.assertOneLine(body)
                self.assertEqual(logged.output, ["WARNING:rowfleet.metrics:metrics scrape failed: the server went away"])
        status, headers, body = exporter.metrics_response(self.store)
        self.assertEqual((status, headers), (200, [("Content-Type", exporter.CONTENT_TYPE)]))

    def test_a_bug_is_500_with_its_traceback_in_the_log_only(self):
        from rowfleet.store import open_store

        server = self.serve(opener=lambda: FailingStore(open_store(self.config()), "metrics_rows",
                                                        RuntimeError("a bug")))
        with self.assertLogs("rowfleet.metrics", "ERROR") as logged:
            status, _, body = self.request(server)
        self.assertEqual(status, 500)
        self.assertOneLine(body)
        self.assertIn("RuntimeError: a bug", logged.output[0])

    def test_binding_beyond_this_machine_without_a_token_warns_once(self):
        with self.assertLogs("rowfleet.metrics", "WARNING") as logged:
            exporter.make_server(self.config(), "0.0.0.0", 0).server_close()
        self.assertEqual(len(logged.output), 1)
        self.assertIn("anyone who can reach it", logged.output[0])
        with self.assertNoLogs("rowfleet.metrics", "WARNING"):
            exporter.make_server(self.config(), "0.0.0.0", 0, token="t").server_close()
            exporter.make_server(self.config(), "127.0.0.1", 0).server_close()

    def test_a_port_in_use_or_a_bad_address_or_token_is_a_config_error(self):
        server = self.serve()
        with self.assertRaisesRegex(ConfigError, "choose another --port"):
            exporter.make_server(self.config(), "127.0.0.1", server.server_address[1])
        with self.assertRaises(ConfigError):
            exporter.make_server(self.config(), "no such host.invalid", 0)
        for token in ("two words", "ünï", "x" * 5000, "a\nb"):
            with self.subTest(token=token[:10]), self.assertRaises(ConfigError):
                exporter.make_server(self.config(), "127.0.0.1", 0, token=token)


class CommandTest(TempDirTestCase):
    SLOW = True  # command-line processes: the full suite and CI

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()
        self.store.enqueue(JobSpec(task="app:work", queue="q"))

    def test_once_prints_one_scrape_that_promtool_accepts(self):
        text = self.cli("metrics", "--once").stdout
        self.assertEqual(parse(text).value("rowfleet_jobs", project="", queue="q", state="queued"), 1)
        promtool = require_tool(self, "promtool", PROMETHEUS_ENV)
        result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                                timeout=DEADLINE)
        self.assertEqual((result.returncode, result.stdout + result.stderr), (0, ""))

    def test_bad_flags_and_a_missing_database_are_one_line(self):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        self.addCleanup(taken.close)
        for args, env in ((("metrics", "--port", "70000"), {}), (("metrics", "--port", "x"), {}),
                          (("metrics", "--token", "two words"), {}), (("metrics",), {"ROWFLEET_METRICS_TOKEN": "a b"}),
                          (("metrics", "--port", str(taken.getsockname()[1])), {}),
                          (("--db", os.path.join(self.dir, "missing.db"), "metrics", "--once"), {})):
            with self.subTest(args=args, env=env):
                result = self.cli(*args, check=False, env=child_env(**env))
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertNotIn("Traceback", result.stderr)

    def test_the_server_answers_until_sigterm(self):
        process = self.spawn("metrics", "--port", "0", env=child_env(ROWFLEET_METRICS_TOKEN="env-t0ken"))
        line = process.stdout.readline()
        self.assertTrue(line.startswith("serving metrics on http://127.0.0.1:"), repr(line))
        address = line.split("http://", 1)[1].split("/", 1)[0]
        host_name, port = address.rsplit(":", 1)

        def get(headers: dict[str, str]) -> tuple[int, bytes]:
            conn = http.client.HTTPConnection(host_name, int(port), timeout=DEADLINE)
            try:
                conn.request("GET", "/metrics", headers=headers)
                response = conn.getresponse()
                return response.status, response.read()
            finally:
                conn.close()

        self.assertEqual(get({})[0], 401)
        status, body = get({"Authorization": "Bearer env-t0ken"})
        self.assertEqual(status, 200)
        self.assertIn(b'rowfleet_jobs{project="",queue="q",state="queued"} 1', body)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=DEADLINE)
        self.assertEqual(process.returncode, 0, err)
        self.assertNotIn("Traceback", err)


if __name__ == "__main__":
    unittest.main()
