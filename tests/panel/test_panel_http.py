"""The panel over HTTP against a real server on loopback: every page and its JSON twin on
both databases over hostile rows, every action writing what the command line writes, the
token and same-origin rules, read-only mode, and a bounded flood of bad requests after
which the server still serves."""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import socket
import unittest
import urllib.request
from urllib.parse import quote, urlencode

from rowfleet import dag
from rowfleet.claim import Claim
from rowfleet.errors import ConfigError
from rowfleet.job import CANCELLED, COMPLETED, FAILED, QUEUED, JobSpec, Outcome
from rowfleet.panel import server
from rowfleet.panel.pages import overview
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase, serve_in_background

HOSTILE_TASK = 'tasks:"><script>alert(1)</script>'
HOSTILE_ARGS = {"password": "hunter2", "note": "<img src=x onerror=alert(1)>", "rtl": "\u202egnp.exe",
                "long": "x" * 10_000, "quote": "it's \"quoted\""}
SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}


class PanelClient:
    """Requests to a panel server, each on a connection of its own."""

    def __init__(self, panel: server.PanelServer) -> None:
        self.port = panel.server_address[1]
        self.csrf = panel.csrf

    def request(self, method: str, path: str, body: bytes | str | None = None, headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode("utf-8")
        finally:
            conn.close()

    def get(self, path: str, **headers: str):
        return self.request("GET", path, headers=headers)

    def post(self, path: str, fields: dict, headers: dict | None = SAME_ORIGIN, csrf: bool = True):
        form = {**fields, **({"csrf": self.csrf} if csrf else {})}
        return self.request("POST", path, urlencode(form),
                            {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})})


class PanelContract:
    """Pages and actions, on the database of the class."""

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()
        self.store.migrate()
        self.store.enqueue(JobSpec(HOSTILE_TASK, args=HOSTILE_ARGS, queue="gpu"))
        claimed = self.store.claim(Claim("", "gpu", "box-<b>:1", 60.0))
        self.store.finish(claimed, Outcome(FAILED, error="boom <script>alert(2)</script>"))
        self.failed = claimed.id
        self.queued = self.store.enqueue(JobSpec(HOSTILE_TASK, args=HOSTILE_ARGS, queue="gpu")).id
        self.other = self.store.enqueue(JobSpec("tasks:plain", args={"i": 1}, queue="gpu")).id
        self.assertTrue(self.store.acquire_sampler("box-<b>", "box-<b>:test", 60.0))
        self.store.record_host_sample("box-<b>", "box-<b>:test", 60.0, {"cpu.busy": 12.0, "gpu.0.util": 50.0,
                                                                       "gpu.0.name": "<script>alert(3)</script>"})
        flow = dag.parse_workflow({"name": "flow<script>", "nodes": [
            {"id": "a", "task": "tasks:a"}, {"id": "b", "task": "tasks:b", "depends_on": ["a"]},
            {"id": "ask", "kind": "input", "prompt": "go <b>on</b>?"}]})
        self.run_id = self.store.start_run(flow, {"x": 1}, "")
        self.panel = serve_in_background(self, server.make_server(self.config(), "127.0.0.1", 0))
        self.client = PanelClient(self.panel)

    def pages(self) -> list[str]:
        return ["/", "/deck", f"/deck?host=box-<b>", "/jobs", "/jobs?state=failed&queue=gpu", f"/jobs?id={self.failed}",
                f"/jobs?args={'<img'}", f"/jobs/{self.queued}", f"/jobs/{self.failed}",
                f"/jobs/{self.failed}?reveal=secrets", f"/jobs/{self.queued}/cancel", f"/jobs/{self.failed}/retry",
                "/jobs/bulk?action=retry&state=failed", "/runs", "/runs?state=running", f"/runs/{self.run_id}",
                f"/runs/{self.run_id}?focus=a&hops=1", f"/runs/{self.run_id}/cancel", "/workers", "/schedules",
                "/models"]

    def test_every_page_and_its_json_twin_answer_with_everything_escaped(self):
        for path in self.pages():
            with self.subTest(path=path):
                status, headers, body = self.client.get(path)
                self.assertEqual(status, 200, body[:500])
                self.assertTrue(headers["content-type"].startswith("text/html"))
                self.assertNotIn("<script>alert", body)
                self.assertNotIn("<img src=x", body)
                self.assertNotIn("Traceback", body)
                status, headers, body = self.client.get("/api" + path)
                self.assertEqual(status, 200, body[:500])
                self.assertTrue(headers["content-type"].startswith("application/json"))
                json.loads(body)
                self.assertNotIn("<script>", body, "JSON escapes < so no text closes a tag")

    def test_secrets_are_redacted_unless_asked(self):
        _, _, body = self.client.get(f"/jobs/{self.queued}")
        self.assertNotIn("hunter2", body)
        self.assertIn("redacted", body)
        _, _, body = self.client.get(f"/api/jobs/{self.queued}")
        self.assertNotIn("hunter2", body)
        _, _, body = self.client.get(f"/jobs/{self.queued}?reveal=secrets")
        self.assertIn("hunter2", body)

    def test_why_isnt_it_running_is_said_in_words(self):
        _, _, body = self.client.get(f"/api/jobs/{self.queued}")
        why = json.loads(body)["why"]
        self.assertTrue(why and all(reason["text"] for reason in why), why)
        self.assertIn("no live worker", " ".join(reason["text"] for reason in why).lower())

    def test_job_actions_write_what_the_command_line_writes(self):
        status, headers, _ = self.client.post(f"/jobs/{self.failed}/retry", {})
        self.assertEqual(status, 303)
        self.assertTrue(headers["location"].startswith(f"/jobs/{self.failed}?note="))
        self.assertEqual(self.store.reads.find_job(self.failed).state, QUEUED)
        self.client.post(f"/jobs/{self.other}/run-next", {})
        self.assertTrue(self.store.reads.find_job(self.other).run_next)
        self.client.post(f"/jobs/{self.queued}/cancel", {})
        self.assertEqual(self.store.reads.find_job(self.queued).state, CANCELLED)
        status, _, body = self.client.post(f"/jobs/{self.queued}/run-next", {})
        self.assertEqual(status, 409, "an action the state no longer allows is a conflict")
        self.assertEqual(self.client.post(f"/jobs/{self.queued}/explode", {})[0], 404)

    def test_bulk_actions_show_the_count_and_apply_to_what_matches(self):
        _, _, body = self.client.get("/api/jobs/bulk?action=cancel&state=queued&queue=gpu")
        self.assertEqual(json.loads(body)["matching"], 2)
        self.assertEqual(self.client.get("/jobs/bulk?action=cancel&state=failed")[0], 400, "cancel takes queued jobs")
        status, _, _ = self.client.post("/jobs/bulk", {"action": "cancel", "state": "queued", "queue": "gpu"})
        self.assertEqual(status, 303)
        self.assertEqual({self.store.reads.find_job(i).state for i in (self.queued, self.other)}, {CANCELLED})
        self.assertEqual(self.store.reads.find_job(self.failed).state, FAILED, "a job outside the filter is untouched")

    def test_run_actions_and_an_input_answer(self):
        status, _, body = self.client.post(f"/runs/{self.run_id}/answer", {"node": "ask", "value": '{"go": true}'})
        self.assertEqual(status, 303, body[:300])
        self.assertEqual(self.store.reads.find_run(self.run_id).node("ask").state, COMPLETED)
        self.assertEqual(self.client.post(f"/runs/{self.run_id}/answer", {"node": "ask", "value": "{bad"})[0], 400)
        self.client.post(f"/runs/{self.run_id}/cancel", {})
        self.assertEqual(self.store.reads.find_run(self.run_id).state, CANCELLED)
        self.client.post(f"/runs/{self.run_id}/restart", {})
        self.assertEqual(self.store.reads.find_run(self.run_id).state, dag.RUNNING)

    def test_an_input_spec_is_answered_with_its_widgets_form_and_checked_where_every_answer_is(self):
        hostile = "<img src=x onerror=alert(1)>"
        flow = dag.parse_workflow({"name": "widgets", "nodes": [
            {"id": "pick", "kind": "input", "prompt": "Which <i>one</i>?", "widget": "choose_one",
             "options": {"$from": "$args.tags"}},
            {"id": "sure", "kind": "input", "widget": "confirm", "depends_on": ["pick"]},
            {"id": "count", "kind": "input", "widget": "number", "min": 1, "max": 3, "depends_on": ["sure"]},
            {"id": "many", "kind": "input", "widget": "choose_many", "options": ["a", "b", "c"], "depends_on": ["count"]},
            {"id": "path", "kind": "input", "widget": "file_path", "depends_on": ["many"]}]})
        run_id = self.store.start_run(flow, {"tags": ["small", hostile]}, "")

        def page() -> str:
            status, _, body = self.client.get(f"/runs/{run_id}")
            self.assertEqual(status, 200)
            self.assertNotIn("<img src=x", body)
            return body

        def refused(node: str, fields: dict, says: str) -> None:
            before = self.store.reads.find_run(run_id)
            status, _, body = self.client.post(f"/runs/{run_id}/answer", {"node": node, **fields})
            self.assertEqual(status, 400, body[:500])
            self.assertIn(says, body)
            self.assertNotIn("<img src=x", body, "the error line is escaped")
            self.assertEqual(self.store.reads.find_run(run_id), before, "a refused answer changed the run")

        def answered(node: str, fields: dict, result) -> None:
            status, headers, body = self.client.post(f"/runs/{run_id}/answer", {"node": node, **fields})
            self.assertEqual(status, 303, body[:500])
            self.assertTrue(headers["location"].startswith(f"/runs/{run_id}?note="), headers["location"])
            self.assertEqual(self.store.reads.find_run(run_id).node(node).result, result)

        body = page()
        self.assertIn("Which &lt;i&gt;one&lt;/i&gt;?", body)
        self.assertIn('<input type="radio" name="choice" value="0" required>small</label>', body)
        self.assertIn('value="1" required>&lt;img src=x onerror=alert(1)&gt;</label>', body)
        refused("pick", {}, "expects one of &quot;small&quot;, &quot;&lt;img src=x")
        refused("pick", {"choice": "2"}, "choice must be a whole number from 0 to 1")
        answered("pick", {"choice": "1"}, hostile)
        self.assertIn('<button type="submit" name="value" value="no">No</button>', page())
        refused("sure", {"value": "maybe"}, "expects true or false")
        answered("sure", {"value": "no"}, False)
        self.assertIn('<input type="number" name="value" step="any" min="1" max="3" required>', page())
        refused("count", {"value": "7"}, "expects a number from 1 to 3; got 7")
        answered("count", {"value": "2"}, 2)
        self.assertIn('<input type="checkbox" name="choice-2" value="2">c</label>', page())
        answered("many", {"choice-2": "2", "choice-0": "0", "choice-9": "9"}, ["a", "c"])
        self.assertIn('placeholder="/path/to/file or relative/path" required>', page())
        refused("path", {"value": ""}, "expects a file path")
        answered("path", {"value": "data/in put.csv"}, "data/in put.csv")
        self.assertEqual(self.store.reads.find_run(run_id).state, dag.COMPLETED)

    def test_a_switch_from_the_panel_is_the_row_the_command_line_writes(self):
        status, headers, _ = self.client.post("/workers/switch", {"project": "", "host": "box", "queue": "gpu",
                                                                  "set": "off-hard", "reason": "fan <loud>"})
        self.assertEqual(status, 303)
        held = self.store.switches_in_force("", "box", ("gpu",))["gpu"]
        self.assertEqual((held.desired, held.policy, held.reason, held.changed_by), ("off", "hard", "fan <loud>", "panel"))
        self.client.post("/workers/switch", {"project": "", "host": "box", "queue": "*", "set": "on"})
        self.assertEqual([(s.queue, s.desired) for s in self.store.reads.switch_log()], [("*", "on"), ("gpu", "off")])
        _, _, body = self.client.get("/workers")
        self.assertIn("fan &lt;loud&gt;", body)
        for bad in ({"host": "box", "queue": "gpu", "set": "sideways"}, {"host": "", "queue": "gpu", "set": "on"},
                    {"host": "box", "queue": "", "set": "on"}):
            with self.subTest(bad=bad):
                self.assertEqual(self.client.post("/workers/switch", bad)[0], 400)
        self.assertEqual(len(self.store.reads.switch_log()), 2, "a refused switch writes nothing")

    def test_limits_are_shown_with_their_use_and_changed_as_the_command_line_changes_them(self):
        status, _, _ = self.client.post("/limits", {"queue": "api", "concurrency": "4", "per_key": "2",
                                                    "rate": "10/1", "fair": "on", "by": "ops <b>"})
        self.assertEqual(status, 303)
        [use] = self.store.limits()
        self.assertEqual((use.limit.rules(), use.limit.updated_by),
                         (["at most 4 running", "at most 2 running per key", "rate 10/s", "fair by key"], "ops <b>"))
        self.assertIn("ops &lt;b&gt;", self.client.get("/limits")[2])
        self.client.post("/limits", {"queue": "gpu", "all_projects": "on", "concurrency": "2"})
        self.client.post("/limits", {"project": "", "queue": "api", "rate": "5/1", "fair": "off"})
        _, _, body = self.client.get("/limits")
        self.assertIn("at most 4 running, at most 2 running per key, rate 5/s</td>", body)
        self.assertIn("every project", body)
        _, _, data = self.client.get("/api/limits")
        self.assertEqual(sorted((row["queue"], row["all_projects"]) for row in json.loads(data)["limits"]),
                         [("api", False), ("gpu", True)])
        before = [use.limit for use in self.store.limits()]
        for bad in ({"queue": "api", "concurrency": "0"}, {"queue": "api", "rate": "10"}, {"queue": "", "rate": "1/1"},
                    {"queue": "a b", "concurrency": "1"}, {"queue": "api", "per_key": "x"},
                    {"queue": "api", "project": "two words", "concurrency": "1"}):
            with self.subTest(bad=bad):
                status, _, text = self.client.post("/limits", bad)
                self.assertEqual(status, 400, text[:200])
                self.assertNotIn("Traceback", text)
        self.assertEqual([use.limit for use in self.store.limits()], before, "a refused change writes nothing")
        self.client.post("/limits", {"project": "", "queue": "api", "clear": "clear"})
        self.assertEqual([use.limit.queue for use in self.store.limits()], ["gpu"])
        self.client.post("/limits", {"project": "", "queue": "lost", "lost_first": "on"})
        self.assertIn("lost jobs first</td>", self.client.get("/limits")[2])
        self.client.post("/limits", {"project": "", "queue": "lost", "lost_first": "off"})
        self.assertEqual([use.limit.queue for use in self.store.limits()], ["gpu"], "no rule left: no row")


class SQLitePanelTest(PanelContract, TempDirTestCase):
    def test_no_sqlite_store_outlives_its_request(self):
        self.assertEqual(self.client.get("/")[0], 200)
        self.assertEqual(self.panel._idle, [], "a SQLite connection stays in the thread that opened it")


class PostgresPanelTest(PanelContract, PostgresDatabaseCase, TempDirTestCase):
    def test_a_connection_is_kept_for_the_next_request_and_dropped_when_the_server_restarts(self):
        self.assertEqual(self.client.get("/")[0], 200)
        kept = list(self.panel._idle)
        self.assertEqual(len(kept), 1)
        self.assertEqual(self.client.get("/jobs")[0], 200)
        self.assertEqual(self.panel._idle, kept, "the same connection served the next request")
        connection = kept[0]._conn
        self.pg.restart()  # the kept connection breaks
        # A read that finds its connection broken is asked again at once on a new one: the
        # panel answers the first request after a restart (or a failover) too.
        self.assertEqual([self.client.get("/")[0] for _ in range(3)], [200, 200, 200])
        self.assertTrue(all(store._conn is not connection for store in self.panel._idle),
                        "a connection that broke is kept")


class PanelSecurityTest(TempDirTestCase):
    """Who may ask what: same-origin, CSRF, the token, read-only, and bad requests."""

    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()
        self.store.migrate()
        self.job = self.store.enqueue(JobSpec("tasks:x", queue="q")).id

    def serve(self, **options):
        panel = serve_in_background(self, server.make_server(self.config(), "127.0.0.1", 0, **options))
        return panel, PanelClient(panel)

    def test_every_answer_carries_the_security_headers(self):
        _, client = self.serve()
        for path in ("/", "/nope", "/static/panel.css", "/api/jobs"):
            _, headers, _ = client.get(path)
            policy = headers["content-security-policy"]
            self.assertIn("script-src 'self'", policy)
            self.assertIn("frame-ancestors 'none'", policy)
            self.assertNotIn("unsafe-inline", policy)
            self.assertEqual(headers["x-content-type-options"], "nosniff")
            self.assertEqual(headers["referrer-policy"], "no-referrer")

    def test_a_mutation_from_another_origin_or_without_the_form_token_is_refused(self):
        _, client = self.serve()
        cases = [({"Sec-Fetch-Site": "cross-site"}, True), ({"Sec-Fetch-Site": "same-site"}, True),
                 ({"Origin": "http://evil.example"}, True), ({}, True), (SAME_ORIGIN, False)]
        for headers, with_csrf in cases:
            with self.subTest(headers=headers, csrf=with_csrf):
                status, _, body = client.post(f"/jobs/{self.job}/cancel", {}, headers=headers, csrf=with_csrf)
                self.assertEqual(status, 403, body[:300])
        self.assertEqual(self.store.reads.find_job(self.job).state, QUEUED)
        host = f"127.0.0.1:{client.port}"
        status, _, _ = client.post(f"/jobs/{self.job}/cancel", {}, headers={"Origin": f"http://{host}", "Host": host})
        self.assertEqual(status, 303, "an old browser's Origin naming this host is same-origin")

    def test_with_a_token_every_page_needs_it_and_the_login_sets_a_cookie(self):
        panel, client = self.serve(token="s3cret-token")
        status, headers, _ = client.get("/")
        self.assertEqual((status, headers["location"]), (303, "/login"))
        self.assertEqual(client.get("/api/jobs")[0], 403)
        self.assertEqual(client.get("/metrics")[0], 403)
        self.assertEqual(client.get("/login")[0], 200)
        self.assertEqual(client.get("/static/panel.js")[0], 200)
        self.assertEqual(client.get("/api/jobs", Authorization="Bearer s3cret-token")[0], 200)
        self.assertEqual(client.get("/api/jobs", Authorization="Bearer wrong")[0], 403)
        status, _, _ = client.post("/login", {"token": "wrong"}, csrf=False)
        self.assertEqual(status, 403)
        status, headers, _ = client.post("/login", {"token": "s3cret-token"}, csrf=False)
        self.assertEqual(status, 303)
        cookie = headers["set-cookie"]
        self.assertIn("HttpOnly", cookie)
        self.assertIn("SameSite=Strict", cookie)
        self.assertNotIn("s3cret-token", cookie, "the cookie holds an HMAC of the token, not the token")
        session = cookie.split(";")[0]
        self.assertEqual(client.get("/", Cookie=session)[0], 200)
        # A mutation needs the session too, besides same-origin and the form token.
        self.assertEqual(client.post(f"/jobs/{self.job}/cancel", {})[0], 403)
        self.assertEqual(self.store.reads.find_job(self.job).state, QUEUED)
        status, _, _ = client.post(f"/jobs/{self.job}/cancel", {}, headers={**SAME_ORIGIN, "Cookie": session})
        self.assertEqual(status, 303)
        self.assertEqual(self.store.reads.find_job(self.job).state, CANCELLED)
        status, headers, _ = client.post("/logout", {}, headers={**SAME_ORIGIN, "Cookie": session}, csrf=False)
        self.assertEqual((status, headers["location"]), (303, "/login"))
        self.assertIn("Max-Age=0", headers["set-cookie"], "signing out clears the cookie")

    def test_binding_beyond_loopback_needs_a_token(self):
        with self.assertRaisesRegex(ConfigError, "needs a token"):
            server.make_server(self.config(), "0.0.0.0", 0)
        result = self.cli("panel", "--bind", "0.0.0.0", "--port", "0", check=False)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertIn("token", result.stderr)

    def test_the_command_serves_with_its_schedule_files_and_stops_on_sigterm(self):
        path = os.path.join(self.dir, "schedules.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump([{"name": "nightly", "task": "tasks:x", "every": 900}], handle)
        panel = self.spawn("panel", "--port", "0", "--schedule", path, "--read-only")
        line = panel.stdout.readline()
        self.assertTrue(line.startswith("panel at http://127.0.0.1:"), line)
        self.assertIn("(read-only)", line)
        url = line.split()[2]
        with urllib.request.urlopen(url + "api/schedules", timeout=10) as response:
            shown = json.load(response)
        self.assertEqual([(s["name"], bool(s["next_fire"])) for s in shown["schedules"]], [("nightly", True)])
        panel.send_signal(signal.SIGTERM)
        self.assertEqual(panel.wait(timeout=30), 0)
        self.assertNotIn("Traceback", panel.stderr.read())

    def test_read_only_offers_no_change_and_takes_none(self):
        _, client = self.serve(read_only=True)
        _, _, body = client.get(f"/jobs/{self.job}")
        self.assertNotIn("Cancel…", body)
        _, _, body = client.get("/workers")
        self.assertNotIn('method="post"', body)
        self.assertEqual(client.post(f"/jobs/{self.job}/cancel", {})[0], 403)
        self.assertEqual(client.post("/workers/switch", {"host": "box", "queue": "q", "set": "off-hard"})[0], 403)
        self.assertEqual(self.store.reads.find_job(self.job).state, QUEUED)
        self.assertEqual(self.store.reads.switches(), [])

    def test_a_flood_of_bad_requests_gets_4xx_pages_and_the_server_keeps_serving(self):
        _, client = self.serve()
        bad = [("GET", "/nope", None, {}, 404), ("GET", "/jobs/abc", None, {}, 404),
               ("GET", "/jobs/0", None, {}, 404), ("GET", "/jobs/" + "9" * 30, None, {}, 404),
               ("GET", "/jobs/" + "9" * 15, None, {}, 404), ("GET", "/jobs?state=bogus", None, {}, 400),
               ("GET", "/jobs?before=-1", None, {}, 400), ("GET", "/jobs?before=1e9", None, {}, 400),
               ("GET", "/jobs?queue=" + "q" * 300, None, {}, 400), ("GET", "/jobs?" + "a=1&" * 100, None, {}, 400),
               ("GET", "/jobs?task=%ff%fe", None, {}, 400), ("GET", "/" + "x" * 5000, None, {}, 414),
               ("GET", "/runs/1/explode", None, {}, 404), ("GET", "/jobs/1/answer", None, {}, 404),
               ("PUT", "/jobs", None, {}, 405), ("DELETE", f"/jobs/{self.job}", None, {}, 405),
               ("PATCH", "/", None, {}, 405), ("POST", "/", "", SAME_ORIGIN, 405),
               ("POST", "/workers/switch", "x" * (70 * 1024),
                {**SAME_ORIGIN, "Content-Type": "application/x-www-form-urlencoded"}, 413),
               ("POST", "/workers/switch", '{"a": 1}', {**SAME_ORIGIN, "Content-Type": "application/json"}, 415),
               ("POST", "/workers/switch", b"csrf=\xff", {**SAME_ORIGIN, "Content-Type":
                                                          "application/x-www-form-urlencoded"}, 400),
               ("GET", "/api/nope", None, {}, 404), ("GET", "/api/jobs?state=bogus", None, {}, 400)]
        for _ in range(3):
            for method, path, body, headers, expected in bad:
                with self.subTest(method=method, path=path[:60]):
                    status, _, text = client.request(method, path, body, headers)
                    self.assertEqual(status, expected, text[:300])
                    self.assertNotIn("Traceback", text)
        for raw in (b"GARBAGE\r\n\r\n", b"GET /" + b"x" * 70000 + b" HTTP/1.1\r\n\r\n", b"\x00\x01\x02\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", client.port), timeout=10) as sock:
                sock.sendall(raw)
                answer = sock.recv(65536)
            self.assertRegex(answer, rb"^HTTP/1\.[01] 4\d\d ", raw[:20])
            self.assertNotIn(b"Traceback", answer)
        # A POST without a length: 411, not a hang.
        with socket.create_connection(("127.0.0.1", client.port), timeout=10) as sock:
            sock.sendall(b"POST /workers/switch HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nSec-Fetch-Site: same-origin\r\n\r\n"
                         % client.port)
            self.assertIn(b" 411 ", sock.recv(65536))
        self.assertEqual(client.get("/")[0], 200, "still serving")
        self.assertEqual(self.store.reads.find_job(self.job).state, QUEUED)
        self.assertEqual(self.store.reads.switches(), [])

    def test_random_requests_never_get_a_5xx_nor_change_anything(self):
        _, client = self.serve()
        rng = random.Random(15)  # seeded: a failure replays
        paths = ["/", "/jobs", f"/jobs/{self.job}", f"/jobs/{self.job}/cancel", "/jobs/bulk", "/runs", "/runs/1",
                 "/runs/1/answer", "/workers", "/workers/switch", "/deck", "/schedules", "/models", "/api/jobs",
                 "/login", "/logout", "/static/panel.css", "/metrics"]
        keys = ["state", "queue", "task", "host", "model", "args", "id", "before", "action", "focus", "hops",
                "project", "set", "node", "value", "reveal", "note", "csrf"]
        alphabet = "ab09_-:*%<>\"' /\\\u202e\u00e9\x7f"
        for _ in range(150):
            query = "&".join(f"{rng.choice(keys)}={''.join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))}"
                             for _ in range(rng.randint(0, 4)))
            path = rng.choice(paths) + (("?" + query) if query else "")
            method = rng.choice(["GET", "GET", "POST", "HEAD"])
            body = query.encode("utf-8") if method == "POST" else None
            headers = {"Content-Type": "application/x-www-form-urlencoded", **SAME_ORIGIN} if method == "POST" else {}
            with self.subTest(method=method, path=path):
                # Sent as a browser would: what an address cannot hold raw is %-escaped.
                status, _, text = client.request(method, quote(path, safe="/?&=%'*:<>\"\\-_"), body, headers)
                self.assertLess(status, 500, text[:300])
                self.assertNotIn("Traceback", text)
        self.assertEqual(self.store.reads.find_job(self.job).state, QUEUED, "no random request carried the form token")
        self.assertEqual(self.store.reads.switches(), [])


class FinishedPerMinuteTest(unittest.TestCase):
    """The Overview's minute counts read each minute once it is over, and still add up to
    what one read of the whole hour gives."""

    class Store:
        def __init__(self) -> None:
            self.finished: list[tuple[float, str]] = []  # (finished_at, state)
            self.asked: list[float] = []

        @property
        def reads(self) -> "FinishedPerMinuteTest.Store":  # its operator's reads (store.reads) are itself
            return self

        def finished_per_minute(self, since: float) -> list[dict]:
            self.asked.append(since)
            counts: dict = {}
            for at, state in self.finished:
                if at >= since:
                    key = ("", "q", state, int(at // 60))
                    counts[key] = counts.get(key, 0) + 1
            return [{"project": p, "queue": q, "state": s, "minute": m, "n": n} for (p, q, s, m), n in counts.items()]

    def test_each_minute_is_read_once_it_is_over_and_the_totals_match(self):
        store, memo = self.Store(), overview.FinishedPerMinute()
        now = 100_000.0
        for step in range(200):  # a job every 13 s over 43 minutes, read every 13 s
            now += 13.0
            store.finished.append((now - 0.5, "completed" if step % 7 else "failed"))
            got = overview.minute_counts(memo.rows(store, now))
            if step:
                self.assertGreaterEqual(store.asked[-1], now - 120, "a later read starts at the minute not yet over")
            fresh = self.Store()
            fresh.finished = store.finished
            self.assertEqual(got, overview.minute_counts(fresh.reads.finished_per_minute(now - overview.HOUR)), step)
