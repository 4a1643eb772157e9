"""The hosts' read model (``rowfleet.views.hosts``) and ``rowfleet hosts``: the pure views
table-tested (garbage readings, missing GPUs, stale samples, the hour's throttle rows),
the reads on SQLite and PostgreSQL with samples written through the store and by plain
SQL (``HostsContract``), and the command line in real processes.
"""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import unittest
from typing import Any

from rowfleet import names
from rowfleet.claim import Claim
from rowfleet.cli import hosts as hosts_cli
from rowfleet.errors import NotFound
from rowfleet.job import JobSpec
from rowfleet.store.telemetry import DETAIL, MINUTE, HostSample
from rowfleet.telemetry import readings
from rowfleet.telemetry.readings import MinuteFold, fold_minute, throttle_seconds
from rowfleet.views import hosts
from rowfleet.views.hosts import GpuView, gpu_views, host_view, hour_rows, is_stale
from rowfleet.views.snapshot import worker_of
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase
from contract.test_lifecycle import Clock
from contract.test_snapshot import worker_row

HOLDER = "box1:1:test"
TTL = 60.0
GPU0 = {"gpu.0.name": "H100", "gpu.0.util": 87, "gpu.0.vram_used_mib": 62668.8, "gpu.0.vram_total_mib": 81920,
        "gpu.0.temp": 71, "gpu.0.power_w": 305.2, "gpu.0.power_limit_w": 350, "gpu.0.sm_mhz": 1980,
        "gpu.0.reasons": ["gpu_idle", "sw_power_cap"]}
HOST = {"cpu.busy": 37.5, "load.1": 1.2, "mem.used": 13_000_000_000, "mem.total": 68_719_476_736,
        "temp.hottest": 64.5, "interval": 2.0, "samples": 1}


def sample(readings: Any, at: float = 100.0, error: str | None = None, host: str = "box1") -> HostSample:
    return HostSample(host, DETAIL, at, readings, error)


# --- pure -------------------------------------------------------------------------------------


class HostViewTest(unittest.TestCase):
    def test_a_whole_sample(self):
        view = host_view(sample({**HOST, **GPU0}), {"0": {"sw_power_cap": 12.0}}, [], now=103.0)
        self.assertEqual((view.cpu_busy, view.load1, view.ram_used, view.ram_total, view.hottest, view.age),
                         (37.5, 1.2, 13_000_000_000, 68_719_476_736, 64.5, 3.0))
        self.assertFalse(view.stale)
        self.assertEqual(view.gpus, (GpuView(0, "H100", 87, 62668.8, 81920, 71, 305.2, 350, 1980, ("sw_power_cap",),
                                             {"sw_power_cap": 12.0}),))
        self.assertTrue(hosts_cli.hosts_table([view]).endswith(
            "  gpu0 87% 61.2/80.0 GiB 71°C 305/350 W 1980 MHz thr 12s [sw_power_cap]"))

    def test_garbage_readings_read_as_unknown(self):
        cases = [  # (reading, value) -> what the view shows of it
            ("cpu.busy", "37", "cpu_busy", None),
            ("cpu.busy", True, "cpu_busy", None),
            ("cpu.busy", float("nan"), "cpu_busy", None),
            ("load.1", float("inf"), "load1", None),
            ("mem.used", 10 ** 400, "ram_used", None),
            ("mem.total", [1], "ram_total", None),
            ("temp.hottest", {"c": 5}, "hottest", None),
            ("temp.hottest", None, "hottest", None),
            ("gpu.error", 7, "gpu_error", None),
            ("gpu.error", "NO_DRIVER", "gpu_error", "NO_DRIVER"),
            ("cpu.busy", 0, "cpu_busy", 0),
        ]
        for name, value, field, shown in cases:
            with self.subTest(name=name, value=value):
                view = host_view(sample({**HOST, name: value}), {}, [], now=101.0)
                self.assertEqual(getattr(view, field), shown)
                hosts_cli.hosts_table([view])  # and the listing prints it

    def test_garbage_gpu_readings(self):
        cases = [  # readings -> (index, name, util, slowdowns) of each GPU shown
            ({"gpu.0.util": "high"}, [(0, None, None, ())]),
            ({"gpu.0.name": 5, "gpu.0.util": 10 ** 400}, [(0, None, None, ())]),
            ({"gpu.0.reasons": [{"a": 1}, ["sw_power_cap"], "hw_slowdown", 7]}, [(0, None, None, ("hw_slowdown",))]),
            ({"gpu.0.reasons": "sw_power_cap"}, [(0, None, None, ())]),
            ({"gpu.x.util": 5, "gpu.-1.util": 5, "gpu.٣.util": 5}, []),
            ({"gpu.1.util": 5, "gpu.0.util": 6, "gpu.10.util": 7}, [(0, None, 6, ()), (1, None, 5, ()),
                                                                    (10, None, 7, ())]),
        ]
        for readings, shown in cases:
            with self.subTest(readings=readings):
                views = gpu_views(readings, {})
                self.assertEqual([(g.index, g.name, g.util, g.slowdowns) for g in views], shown)
                for gpu in views:
                    hosts_cli.gpu_text(gpu)

    def test_garbage_throttle_figures_are_left_out(self):
        views = gpu_views({"gpu.0.util": 5}, {"0": {"sw_power_cap": 3.0, "hw_slowdown": "x", "sync": -1.0,
                                                    "nan": float("nan")}})
        self.assertEqual(views[0].throttle_seconds, {"sw_power_cap": 3.0})
        self.assertEqual(gpu_views({"gpu.0.util": 5}, {"0": "x"})[0].throttle_seconds, {})

    def test_a_host_without_gpus(self):
        view = host_view(sample(HOST), {"0": {"sw_power_cap": 1.0}}, [], now=101.0)
        self.assertEqual(view.gpus, ())
        self.assertNotIn("gpu0", hosts_cli.hosts_table([view]))

    def test_readings_that_did_not_decode(self):
        view = host_view(sample({}, error="readings are not valid JSON"), {}, [], now=131.0)
        self.assertEqual((view.error, view.cpu_busy, view.gpus), ("readings are not valid JSON", None, ()))
        self.assertTrue(view.stale, "a sample that says no interval is judged by 30 s")
        self.assertIn("readings unreadable: readings are not valid JSON", hosts_cli.hosts_table([view]))

    def test_stale(self):
        cases = [  # (interval reading, age) -> stale
            (2.0, 5.9, False), (2.0, 6.1, True), (10.0, 29.0, False), (10.0, 31.0, True),
            (None, 29.0, False), (None, 31.0, True), ("2", 29.0, False), (0, 31.0, True), (-5.0, 29.0, False),
            (float("nan"), 31.0, True),
        ]
        for interval, age, stale in cases:
            with self.subTest(interval=interval, age=age):
                readings = {} if interval is None else {"interval": interval}
                self.assertEqual(is_stale(100.0, readings, 100.0 + age), stale)
                self.assertEqual(host_view(sample(readings), {}, [], now=100.0 + age).stale, stale)

    def test_jobs_of_live_workers_on_the_host(self):
        now = 100.0
        rows = [dict(worker_id="a", pid=11, current_job=42, queue="q"),
                dict(worker_id="b", pid=12, current_job=41, queue="gpu", models='["llm"]', warm_model="llm"),
                dict(worker_id="c", pid=13, current_job=None),
                dict(worker_id="d", pid=14, current_job=43, last_seen=50.0),  # silent
                dict(worker_id="e", pid=15, current_job=44, exit_code=-9),    # killed
                dict(worker_id="f", pid=16, current_job=45, host="box2")]
        workers = [worker_of(worker_row(**{"host": "box1", **row}), [], now) for row in rows]
        view = host_view(sample(HOST), {}, workers, now)
        self.assertEqual([(j.job_id, j.queue, j.pid, j.model) for j in view.jobs],
                         [(41, "gpu", 12, "llm"), (42, "q", 11, None)])
        self.assertTrue(hosts_cli.hosts_table([view]).endswith("jobs: 41 (gpu), 42 (q)"))

    def test_to_dict_is_json(self):
        view = host_view(sample({**HOST, **GPU0}, at=1_800_000_000.0), {"0": {"sw_power_cap": 1.5}}, [],
                         now=1_800_000_002.0)
        data = json.loads(json.dumps(view.to_dict()))
        self.assertEqual((data["at"], data["age"], data["gpus"][0]["throttle_seconds"], data["gpus"][0]["slowdowns"]),
                         ("2027-01-15T08:00:00.000Z", 2.0, {"sw_power_cap": 1.5}, ["sw_power_cap"]))


class HourRowsTest(unittest.TestCase):
    def test_no_second_counts_twice(self):
        detail = [sample({"n": "d1"}, 300.0), sample({"n": "d2"}, 302.0)]
        minute = [HostSample("box1", MINUTE, at, {"n": f"m{at:.0f}"}) for at in (120.0, 180.0, 240.0, 270.0)]
        self.assertEqual([row["n"] for row in hour_rows(detail, minute)], ["m120", "m180", "m240", "d1", "d2"])
        self.assertEqual([row["n"] for row in hour_rows([], minute)], ["m120", "m180", "m240", "m270"])

    def test_an_integer_too_large_for_a_float_is_left_out(self):
        rows = hour_rows([sample({"gpu.0.throttle_s.sw_power_cap": 10 ** 400, "gpu.0.throttle_s.hw_slowdown": 2.0})],
                         [])
        self.assertEqual(throttle_seconds(rows), {"0": {"hw_slowdown": 2.0}})
        self.assertEqual(fold_minute(rows), {"gpu.0.throttle_s.hw_slowdown": 2.0})


def plain_fold(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``fold_minute`` written plainly, a reading at a time over its whole list of values:
    the definition the row-at-a-time fold must meet."""
    values: dict[str, list[Any]] = {}
    for row in rows:
        for name, value in row.items():
            if isinstance(name, str) and ":" not in name:
                values.setdefault(name, []).append(value)
    out: dict[str, Any] = {}
    for name, seen in values.items():
        numbers = [value for value in seen if names.is_finite_number(value)]
        if numbers and len(numbers) == len(seen):
            if readings.is_delta(name) or name in ("interval", "samples"):
                total = sum(numbers)
                out[name] = round(total, 3) if isinstance(total, float) else total
            elif ".throttle_total_s." in name:
                out[name] = numbers[-1]
            else:
                out[name] = round(sum(numbers) / len(numbers), 2)
                if name in ("cpu.busy", "gpu.0.util"):  # of PEAKS, the names the test writes
                    out[f"{name}:max"] = max(numbers)
                if name == "gpu.0.sm_mhz":              # of DIPS
                    out[f"{name}:min"] = min(numbers)
        elif all(isinstance(value, list) for value in seen):
            if all(isinstance(item, str) for items in seen for item in items):
                out[name] = list(dict.fromkeys(item for items in seen for item in items))
            elif len({len(items) for items in seen}) == 1 and all(
                    names.is_finite_number(item) for items in seen for item in items):
                out[name] = [round(sum(column) / len(column), 1) for column in zip(*seen)]
        else:
            texts = [value for value in seen if isinstance(value, str)]
            if texts:
                out[name] = texts[-1]
    return out


class MinuteFoldTest(unittest.TestCase):
    HOSTILE = (0, -3, 2.5, -0.0, 1e308, float("nan"), float("inf"), True, "x", ["a", "b"], [1.0, 2.0], [1, 2, 3],
               None, 10 ** 400, {"k": 1})
    NAMES = ("cpu.busy", "gpu.0.util", "gpu.0.sm_mhz", "gpu.0.throttle_s.hw_slowdown", "gpu.0.throttle_total_s.hw",
             "samples", "interval", "cpu.busy:max", "gpu.0.reasons", "other")

    def test_a_row_at_a_time_folds_as_the_whole_minute_at_once(self):
        # Rows as plain SQL may write them: any value under any name, in any order.
        rnd = random.Random(15)
        for trial in range(2000):
            rows = [{name: rnd.choice(self.HOSTILE) if rnd.random() < 0.3 else rnd.choice([rnd.random() * 100,
                                                                                              rnd.randint(0, 100)])
                     for name in rnd.sample(self.NAMES, rnd.randint(0, len(self.NAMES)))}
                    for _ in range(rnd.randint(1, 5))]
            fold = MinuteFold()
            for n, row in enumerate(rows, 1):
                fold.add(row)
                with self.subTest(trial=trial, rows=n):
                    self.assertEqual(repr(fold.folded()), repr(plain_fold(rows[:n])))
            self.assertIs(fold.folded(), fold.folded(), "the same fold until a row is added")


class TextTest(unittest.TestCase):
    def test_age(self):
        for seconds, text in ((0.0, "0s"), (59.9, "59s"), (60.0, "1m"), (3599.0, "59m"), (3600.0, "1h"),
                              (86400.0, "1d"), (-3.0, "0s")):
            with self.subTest(seconds=seconds):
                self.assertEqual(hosts_cli.age_text(seconds), text)

    def test_durations(self):
        for text, seconds in (("90s", 90.0), ("30m", 1800.0), ("1h", 3600.0), ("1h30m", 5400.0), ("7d", 604800.0),
                              ("2.5m", 150.0), ("45", 45.0)):
            with self.subTest(text=text):
                self.assertEqual(names.parse_duration("--since", text), seconds)
        for text in ("", "1x", "h", "-1h", "1 h", "1H", "0", "0s", "inf", "nan", "1e3", "h1", "1hh",
                     "9" * 400 + "d", "1h\n", None, 3600):
            with self.subTest(text=text), self.assertRaises(names.InvalidValue):
                names.parse_duration("--since", text)


# --- on both databases --------------------------------------------------------------------------


class HostsContract:
    """Every backend must pass these. Subclasses provide ``config()`` and ``plain_sql``."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.store = self.open_store(clock=self.clock)

    def write(self, readings: dict[str, Any], host: str = "box1", *, seconds: float = 2.0) -> float:
        """A detail row of ``host``, as its sampler writes it, then ``seconds`` later."""
        self.assertTrue(self.store.acquire_sampler(host, f"{host}:1:test", TTL))
        at = self.store.record_host_sample(host, f"{host}:1:test", TTL, readings)
        self.assertIsNotNone(at)
        self.clock.advance(seconds)
        return at

    def test_every_host_with_its_gpus_throttling_and_jobs(self):
        self.store.enqueue(JobSpec(task="t", queue="gpu"))
        job = self.store.claim(Claim("", "gpu", "box1:4242", 600.0))
        self.store.worker_beat("box1:4242:0", "", "box1", "gpu", 4242, job.id, models=("llm",), warm_model="llm")
        self.store.worker_beat("box2:7:0", "", "box2", "gpu", 7, None)
        for _ in range(3):
            self.write({**HOST, **GPU0, "gpu.0.throttle_s.sw_power_cap": 2.0, "gpu.0.throttle_s.sync_boost": 0.0})
        last = self.write({"cpu.busy": 5.0, "interval": 2.0}, host="box2", seconds=1.0)
        views = hosts.hosts(self.store)
        self.assertEqual([v.host for v in views], ["box1", "box2"])
        box1, box2 = views
        self.assertEqual((box1.cpu_busy, box1.age, box1.stale, box2.age), (37.5, 3.0, False, 1.0))
        self.assertEqual(box2.at, last)
        self.assertEqual(box1.gpus[0].throttle_seconds, {"sw_power_cap": 6.0})
        self.assertEqual(box1.gpus[0].slowdowns, ("sw_power_cap",))
        self.assertEqual([(j.job_id, j.queue, j.pid, j.model) for j in box1.jobs], [(job.id, "gpu", 4242, "llm")])
        self.assertEqual((box2.gpus, box2.jobs), ((), ()))
        self.clock.advance(10)
        self.assertEqual([v.stale for v in hosts.hosts(self.store)], [True, True])

    def test_folded_minutes_count_and_the_detail_rows_fill_the_minutes_not_folded_yet(self):
        start = self.clock.now
        throttle = {"gpu.0.util": 50, "gpu.0.throttle_s.hw_slowdown": 10.0}
        self.store.record_host_minute("box1", start - 3700.0, throttle)  # older than the hour
        self.store.record_host_minute("box1", start - 600.0, throttle)
        self.store.record_host_minute("box1", start - 60.0, throttle)
        self.write({**throttle, "gpu.0.throttle_s.hw_slowdown": 1.0})  # in the minute not folded yet
        self.write({**throttle, "gpu.0.throttle_s.hw_slowdown": 1.0})
        view, = hosts.hosts(self.store)
        self.assertEqual(view.gpus[0].throttle_seconds, {"hw_slowdown": 22.0})
        # Once that minute is folded, its row counts and its detail rows are not read again:
        # the sampler folded it from them (here it says 10 s, so the total shows which counted).
        self.store.record_host_minute("box1", start - 0.5, throttle)
        view, = hosts.hosts(self.store)
        self.assertEqual(view.gpus[0].throttle_seconds, {"hw_slowdown": 30.0})
        # An hour on, the detail rows are out of the window: the minute rows left in it count.
        self.store.record_host_minute("box1", start + 1800.0, throttle)
        view, = hosts.hosts(self.store, now=start + 3650.0)
        self.assertEqual((view.gpus[0].throttle_seconds, view.stale), ({"hw_slowdown": 10.0}, True))

    def test_rows_written_by_plain_sql(self):
        self.write({**HOST, **GPU0})
        at = self.clock.now
        for host, text in (("bad-json", "{not json"), ("not-object", "[1, 2]"), ("garbage", json.dumps(
                {"cpu.busy": "busy", "gpu.0.util": [1], "gpu.x.temp": 5, "gpu.0.reasons": [{"a": 1}, 3],
                 "gpu.0.throttle_s.hw_slowdown": "1", "interval": "2"}))):
            self.plain_sql("INSERT INTO host_samples (host, tier, at, readings) VALUES (?, 'detail', ?, ?)",
                           (host, at, text))
        self.plain_sql("INSERT INTO host_samples (host, tier, at, readings) VALUES (?, 'minute', ?, ?)",
                       ("garbage", at - 600.0, '{"gpu.0.throttle_s.hw_slowdown": 1' + "0" * 400 + "}"))
        views = {view.host: view for view in hosts.hosts(self.store)}
        self.assertEqual(set(views), {"box1", "bad-json", "not-object", "garbage"})
        self.assertEqual(views["bad-json"].error, "readings are not valid JSON")
        self.assertEqual(views["not-object"].error, "readings are not a JSON object")
        garbage = views["garbage"]
        self.assertEqual((garbage.error, garbage.cpu_busy, [(g.index, g.util, g.slowdowns, g.throttle_seconds)
                                                              for g in garbage.gpus]),
                         (None, None, [(0, None, (), {})]))
        hosts_cli.hosts_table(views.values())
        series = hosts.host_series(self.store, "bad-json", 60.0)
        self.assertEqual(series.rows, ({"at": at, "readings": {}, "error": "readings are not valid JSON"},))
        hosts_cli.series_table(series)

    def test_a_hosts_series(self):
        start = self.clock.now
        for minute in range(3):
            self.store.record_host_minute("box1", start - 7200.0 + 60 * minute, {"cpu.busy": float(minute)})
        first = self.write({**HOST, "cpu.busy": 1.0})
        second = self.write({**HOST, **GPU0, "cpu.busy": 2.0})
        series = hosts.host_series(self.store, "box1", 3600.0)
        self.assertEqual((series.tier, series.until, series.since), (DETAIL, self.clock.now, self.clock.now - 3600.0))
        self.assertEqual([(row["at"], row["readings"]["cpu.busy"]) for row in series.rows], [(first, 1.0), (second, 2.0)])
        series = hosts.host_series(self.store, "box1", 3 * 3600.0)
        self.assertEqual((series.tier, [row["readings"]["cpu.busy"] for row in series.rows]), (MINUTE, [0.0, 1.0, 2.0]))
        self.assertEqual([row["readings"]["cpu.busy"] for row in hosts.host_series(
            self.store, "box1", 3600.0, MINUTE).rows], [])
        self.assertEqual(hosts.host_series(self.store, "box1", 1.0).rows, ())  # known, nothing in the window
        lines = hosts_cli.series_table(hosts.host_series(self.store, "box1", 60.0)).splitlines()
        self.assertEqual(lines[0].split(), ["time", "cpu", "ram", "hottest", "gpu0"])
        self.assertEqual(lines[1].split()[1:], ["1%", "12.1/64.0", "GiB", "64°C", "-"])
        self.assertEqual(lines[2].split()[1:], ["2%", "12.1/64.0", "GiB", "64°C", "87%", "71°C", "305", "W"])
        json.dumps(series.to_dict())

    def test_a_host_known_only_by_its_minute_rows(self):
        self.store.record_host_minute("old", self.clock.now - 7200.0, {"cpu.busy": 1.0})
        self.assertEqual(hosts.host_series(self.store, "old", 60.0).rows, ())
        self.assertEqual(hosts.hosts(self.store), [])

    def test_an_unknown_host(self):
        self.write(HOST)
        with self.assertRaisesRegex(NotFound, "no samples of host 'box9'"):
            hosts.host_series(self.store, "box9", 3600.0)

    def test_the_command_line(self):
        self.store.enqueue(JobSpec(task="t", queue="gpu"))
        job = self.store.claim(Claim("", "gpu", "box1:4242", 600.0))
        live = self.open_store()  # the real clock, as the command's own store reads it
        live.worker_beat("box1:4242:0", "", "box1", "gpu", 4242, job.id)
        self.assertTrue(live.acquire_sampler("box1", HOLDER, TTL))
        for _ in range(2):
            live.record_host_sample("box1", HOLDER, TTL, {**HOST, **GPU0, "gpu.0.throttle_s.sw_power_cap": 6.0})
        shown, = self.cli_json("hosts")["hosts"]
        self.assertEqual((shown["host"], shown["cpu_busy"], shown["gpus"][0]["throttle_seconds"], shown["jobs"]),
                         ("box1", 37.5, {"sw_power_cap": 12.0}, [{"job_id": job.id, "queue": "gpu", "project": "",
                                                                  "pid": 4242, "model": None}]))
        header, line = self.cli("hosts").stdout.splitlines()
        self.assertEqual(header.split(), ["host", "age", "cpu", "load", "ram", "hottest", "gpus,", "jobs"])
        self.assertRegex(line, r"^box1\s+\d+[smhd]( stale)?\s+38%\s+1\.20\s+12\.1/64\.0 GiB\s+64°C\s+"
                               r"gpu0 87% 61\.2/80\.0 GiB 71°C 305/350 W 1980 MHz thr 12s \[sw_power_cap\]\s+"
                               rf"jobs: {job.id} \(gpu\)$")
        series = self.cli_json("hosts", "box1", "--since", "30m")
        self.assertEqual((series["host"], series["tier"], len(series["rows"]), series["rows"][0]["readings"]["cpu.busy"]),
                         ("box1", DETAIL, 2, 37.5))
        self.assertEqual(self.cli_json("hosts", "box1", "--since", "2h")["tier"], MINUTE)
        self.assertEqual(self.cli_json("hosts", "box1", "--tier", "minute")["rows"], [])
        self.assertEqual(len(self.cli("hosts", "box1").stdout.splitlines()), 3)
        self.assertIn("no samples of host box1 in the last 1h (minute tier)",
                      self.cli("hosts", "box1", "--tier", "minute").stdout)
        result = self.cli("hosts", "box9", check=False)
        self.assertEqual((result.returncode, result.stdout), (1, ""))
        self.assertEqual(result.stderr.strip().splitlines(),
                         ["rowfleet: no samples of host 'box9': `rowfleet hosts` lists the hosts that have sampled"])


class SQLiteHostsTest(HostsContract, TempDirTestCase):
    SLOW = True  # command-line processes: the full suite and CI

    def plain_sql(self, statement: str, params: tuple) -> None:
        with contextlib.closing(sqlite3.connect(self.db)) as conn, conn:
            conn.execute(statement, params)

    def test_no_host_has_sampled(self):
        self.assertEqual(self.cli_json("hosts"), {"hosts": []})
        self.assertEqual(self.cli("hosts").stdout.strip(), hosts_cli.NO_HOSTS)
        self.assertIn("rowfleet sampler", hosts_cli.NO_HOSTS)

    # Refused before any database is read: once is enough, on the default backend.
    def test_bad_command_lines_are_one_line_and_exit_2(self):
        self.write(HOST)
        for args in (("box1", "--since", "1x"), ("box1", "--since", "0"), ("box1", "--since", "-1h"),
                     ("box1", "--since", ""), ("box1", "--since", "9" * 400 + "d"), ("box1", "--tier", "hour"),
                     ("--since", "1h"), ("--tier", "detail"), ("two words",), ("*",)):
            with self.subTest(args=args):
                result = self.cli("hosts", *args, check=False)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertNotIn("Traceback", result.stderr)
                self.assertEqual(result.stdout, "")


class PostgresHostsTest(HostsContract, PostgresDatabaseCase, TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.db = self.url  # the command line's --db

    def plain_sql(self, statement: str, params: tuple) -> None:
        with contextlib.closing(self.caller_connection()) as conn, conn:
            conn.execute(statement.replace("?", "%s"), params)


if __name__ == "__main__":
    unittest.main()
