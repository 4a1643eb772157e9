"""Raw HTTP as an attacker sends it, to both of rowfleet's servers (the panel, and
``rowfleet metrics``' ``/metrics``): a page on another name that resolves to this machine
(DNS rebinding), the shapes of request smuggling (two lengths, ``Transfer-Encoding``), a
body shorter than its length, heads that drip and connections that idle, and the panel's
switch form with values the command line refuses.

The cases are tables grouped by server: each row is the request's bytes (``{port}``,
``{csrf}``, ``{job}`` and ``{run}`` filled in, ``{length}`` the length of its body) -> the
status and a fragment of the one line answered. A new route or form joins by adding a row.
Every test also holds that no traceback reached a log of rowfleet's or stderr, and that a
refused request wrote nothing. The switch's rows run on PostgreSQL too, where its write
path differs.
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import logging
import re
import signal
import socket
import threading
import time
import unittest

from rowfleet import dag
from rowfleet.errors import ConfigError
from rowfleet.job import QUEUED, JobSpec
from rowfleet.panel import server as panel_server
from rowfleet.services import exporter
from pg_harness import PostgresDatabaseCase
from support import DEADLINE, TempDirTestCase, child_env, serve_in_background, wait_until

REBIND = "rebind.evil.example:{port}"
GOOD = "127.0.0.1:{port}"
FORM = "application/x-www-form-urlencoded"
SWITCH_ALL_OFF = "set=off-hard&host=*&queue=*&project=*&csrf={csrf}"
ALLOWED = ("panel.example",)  # the names the servers under test are told to answer to


def get(path: str, host: str | None = GOOD, *headers: str, version: str = "HTTP/1.1", method: str = "GET") -> str:
    """A request without a body, as its bytes' template."""
    lines = [f"{method} {path} {version}", *([f"Host: {host}"] if host is not None else []), *headers]
    return "\r\n".join(lines) + "\r\n\r\n"


def post(path: str, form: str, host: str = GOOD, *headers: str, length: str = "Content-Length: {length}") -> str:
    """A form POST as the panel's own page sends it (same origin), as its bytes' template."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", "Sec-Fetch-Site: same-origin", f"Origin: http://{host}",
             f"Content-Type: {FORM}", *([length] if length else []), *headers]
    return "\r\n".join(lines) + "\r\n\r\n" + form


# --- the panel: request -> status and a fragment of its one line ----------------------------
PANEL_REFUSED = [
    # A page on another name that resolves here: every route, before anything else.
    ("rebinding: workers page", get("/workers", REBIND), 421, "--allow-host"),
    ("rebinding: overview", get("/", REBIND), 421, "--allow-host"),
    ("rebinding: api", get("/api/jobs", REBIND), 421, "--allow-host"),
    ("rebinding: a job's args", get("/jobs/{job}?reveal=secrets", REBIND), 421, "--allow-host"),
    ("rebinding: a run", get("/runs/{run}", REBIND), 421, "--allow-host"),
    ("rebinding: metrics", get("/metrics", REBIND), 421, "--allow-host"),
    ("rebinding: static file", get("/static/panel.js", REBIND), 421, "--allow-host"),
    ("rebinding: the switch", post("/workers/switch", SWITCH_ALL_OFF, REBIND), 421, "ROWFLEET_ALLOWED_HOSTS"),
    ("rebinding: cancel", post("/jobs/{job}/cancel", "csrf={csrf}", REBIND), 421, "--allow-host"),
    ("rebinding: answer", post("/runs/{run}/answer", "node=ask&value=true&csrf={csrf}", REBIND), 421,
     "--allow-host"),
    ("rebinding: sign in", post("/login", "token=x", REBIND), 421, "--allow-host"),
    ("rebinding: a body never sent", post("/workers/switch", "", REBIND, length="Content-Length: 100"), 421,
     "--allow-host"),
    ("localhost on another port", get("/workers", "localhost:1"), 421, "--allow-host"),
    ("localhost without the port", get("/workers", "localhost"), 421, "--allow-host"),
    ("a name ending in ours", get("/workers", "127.0.0.1.evil.example:{port}"), 421, "--allow-host"),
    ("localhost with a dot", get("/workers", "localhost.:{port}"), 421, "--allow-host"),
    ("an allowed name's look-alike", get("/workers", "panel.example.evil:{port}"), 421, "--allow-host"),
    # A Host that is no host[:port], or not one.
    ("two Host headers", get("/workers", GOOD, f"Host: {REBIND}"), 400, "Host"),
    ("HTTP/1.1 without Host", get("/workers", None), 400, "Host"),
    ("a Host with a space", get("/workers", "evil example"), 400, "Host"),
    ("an unclosed IPv6 Host", get("/workers", "[::1"), 400, "Host"),
    ("a port past 65535", get("/workers", "localhost:99999"), 400, "Host"),
    ("an empty port", get("/workers", "localhost:"), 400, "Host"),
    ("an empty Host", get("/workers", ""), 400, "Host"),
    ("an absolute target naming another host", get(f"http://{REBIND}/workers"), 400, "path"),
    # Framing: one body length, said once, in ASCII digits.
    ("two different lengths", post("/workers/switch", SWITCH_ALL_OFF, GOOD, "Content-Length: 3"), 400,
     "Content-Length"),
    ("the same length twice", post("/workers/switch", SWITCH_ALL_OFF, GOOD, "Content-Length: {length}"), 400,
     "Content-Length"),
    ("chunked", post("/workers/switch", "0\r\n\r\n", GOOD, "Transfer-Encoding: chunked", length=""), 400,
     "Transfer-Encoding"),
    ("chunked and a length", post("/workers/switch", SWITCH_ALL_OFF, GOOD, "Transfer-Encoding: chunked"), 400,
     "Transfer-Encoding"),
    ("a length in another script's digits", post("/workers/switch", "", GOOD, length="Content-Length: \xb2"), 400,
     "Content-Length"),
    ("a signed length", post("/workers/switch", "", GOOD, length="Content-Length: +5"), 400, "Content-Length"),
    ("a length in exponent form", post("/workers/switch", "", GOOD, length="Content-Length: 1e3"), 400,
     "Content-Length"),
    ("a length past any form", post("/workers/switch", "", GOOD, length="Content-Length: 99999999"), 413, "at most"),
    ("a length past 64 bits", post("/workers/switch", "", GOOD, length="Content-Length: " + "9" * 30), 400,
     "Content-Length"),
    ("a POST without a length", post("/workers/switch", "", GOOD, length=""), 411, "Content-Length"),
    # Integers of the address: ASCII digits only.
    ("a query id with a space", get("/jobs?before=%203"), 400, "before"),
    ("a query id in Arabic-Indic digits", get("/jobs?id=%D9%A3"), 400, "id"),
    ("a query id with an underscore", get("/runs?before=1_0"), 400, "before"),
    ("a hops count with a plus", get("/runs/{run}?hops=%2B2"), 400, "hops"),
]
PANEL_ANSWERED = [
    ("the loopback address", get("/workers", GOOD), 200, "Workers"),
    ("localhost", get("/workers", "localhost:{port}"), 200, "Workers"),
    ("localhost in capitals", get("/workers", "LOCALHOST:{port}"), 200, "Workers"),
    ("the IPv6 loopback", get("/workers", "[::1]:{port}"), 200, "Workers"),
    ("another IP address, the right port", get("/workers", "10.0.0.7:{port}"), 200, "Workers"),
    ("an allowed name, no port", get("/workers", "panel.example"), 200, "Workers"),
    ("an allowed name behind a proxy's port", get("/workers", "Panel.Example:443"), 200, "Workers"),
    ("HTTP/1.0 without Host", get("/workers", None, version="HTTP/1.0"), 200, "Workers"),
]

# --- /metrics of `rowfleet metrics` ---------------------------------------------------------
METRICS_REFUSED = [
    ("rebinding", get("/metrics", REBIND), 421, "--allow-host"),
    ("rebinding, another path", get("/", REBIND), 421, "--allow-host"),
    ("rebinding, another method", get("/metrics", REBIND, method="DELETE"), 421, "--allow-host"),
    ("localhost on another port", get("/metrics", "localhost:1"), 421, "--allow-host"),
    ("two Host headers", get("/metrics", GOOD, f"Host: {REBIND}"), 400, "Host"),
    ("HTTP/1.1 without Host", get("/metrics", None), 400, "Host"),
    ("an absolute target naming another host", get(f"http://{REBIND}/metrics"), 400, "path"),
    ("two lengths", get("/metrics", GOOD, "Content-Length: 0", "Content-Length: 5"), 400, "Content-Length"),
    ("chunked", get("/metrics", GOOD, "Transfer-Encoding: chunked", method="POST"), 400, "Transfer-Encoding"),
]
METRICS_ANSWERED = [
    ("the loopback address", get("/metrics", GOOD), 200, "rowfleet_jobs"),
    ("localhost", get("/metrics", "localhost:{port}"), 200, "rowfleet_jobs"),
    ("an allowed name, Prometheus' port", get("/metrics", "panel.example:9090"), 200, "rowfleet_jobs"),
    ("HTTP/1.0 without Host", get("/metrics", None, version="HTTP/1.0"), 200, "rowfleet_jobs"),
]

# --- the panel's switch form: what the command line refuses, refused here too -----------------
SWITCH_REFUSED = [
    ("a project of 1,999 characters", "set=off-hard&host=box&queue=q&project=" + "p" * 1999, "project"),
    ("a project with a space", "set=off-hard&host=box&queue=q&project=two+words", "project"),
    ("a host with a space", "set=off-hard&host=two+words&queue=q&project=", "host"),
    ("a host of a line break", "set=off-hard&host=box%0Aevil&queue=q&project=", "host"),
    ("a queue of 256 characters", "set=off-hard&host=box&queue=" + "q" * 256 + "&project=", "queue"),
    ("a queue with a next-line character", "set=off-hard&host=box&queue=q%C2%85x&project=", "queue"),
    ("an empty host", "set=off-hard&host=&queue=q&project=", "host"),
    ("an empty queue", "set=off-hard&host=box&queue=&project=", "queue"),
]
# Slow requests, with deadlines shortened for the test (the servers' own are 10 s).
HEAD_SECONDS, BODY_SECONDS = 0.5, 0.5
SHORT_BODIES = [  # request, whether the client then closes its side -> status, fragment
    ("a body that never comes", post("/workers/switch", SWITCH_ALL_OFF[:10], length="Content-Length: 200"), False,
     408, "did not arrive"),
    ("a body cut short", post("/workers/switch", SWITCH_ALL_OFF[:10], length="Content-Length: 200"), True, 400,
     "shorter than its Content-Length"),
]


def fill(template: str, **values: object) -> bytes:
    """A row's request as bytes: placeholders filled, then ``{length}`` as its body's length."""
    text = template
    for name, value in values.items():
        text = text.replace("{" + name + "}", str(value))
    head, _, body = text.partition("\r\n\r\n")
    raw_body = body.encode("utf-8")
    return head.replace("{length}", str(len(raw_body))).encode("latin-1") + b"\r\n\r\n" + raw_body


def exchange(port: int, request: bytes, half_close: bool = False) -> tuple[int, bytes]:
    """Send ``request`` on a connection of its own; the answer's status and body, read to its end."""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = read_all(sock)
    return parse(answer)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def parse(answer: bytes) -> tuple[int, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    match = re.match(rb"HTTP/1\.[01] (\d{3}) ", head)
    if match is None:
        raise AssertionError(f"no status line in {answer[:200]!r}")
    return int(match.group(1)), body


def the_line(body: bytes) -> str:
    """The one line a refusal says: a text body's, a JSON one's ``error``, or an HTML page's error paragraph."""
    text = body.decode("utf-8")
    if text.lstrip().startswith("<"):
        lines = re.findall(r'<p class="error">(.*?)</p>', text, re.S)
        if len(lines) != 1:
            raise AssertionError(f"not one error line in the page: {text[:500]}")
        return html.unescape(lines[0])
    if text.startswith("{"):
        return json.loads(text)["error"]
    if text.count("\n") != 1 or not text.endswith("\n"):
        raise AssertionError(f"not one line: {text[:500]!r}")
    return text[:-1]


class Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class HostileHttp(TempDirTestCase):
    """A store and the captured logs of rowfleet and stderr, which must hold no traceback."""

    def setUp(self) -> None:
        super().setUp()
        self.collected = Collected()
        root = logging.getLogger("rowfleet")
        level = root.level
        root.addHandler(self.collected)
        root.setLevel(logging.DEBUG)
        self.addCleanup(root.setLevel, level)
        self.addCleanup(root.removeHandler, self.collected)
        self.stderr = io.StringIO()
        redirect = contextlib.redirect_stderr(self.stderr)
        redirect.__enter__()
        self.addCleanup(redirect.__exit__, None, None, None)
        self.store = self.open_store()

    def assert_quiet(self) -> None:
        """No traceback, error or warning in a log of rowfleet's, none on stderr."""
        for record in self.collected.records:
            shown = self.collected.format(record)
            self.assertIsNone(record.exc_info, shown)
            self.assertLess(record.levelno, logging.WARNING, shown)
            self.assertNotIn("Traceback", shown)
        self.assertNotIn("Traceback", self.stderr.getvalue())

    def assert_rows(self, port: int, rows: list, **values: object) -> None:
        for label, template, status, fragment in rows:
            with self.subTest(label):
                got, body = exchange(port, fill(template, port=port, **values))
                self.assertEqual(got, status, body[:400])
                if status >= 400:
                    line = the_line(body)
                    self.assertIn(fragment, line)
                    self.assertNotIn("Traceback", line)
                else:
                    self.assertIn(fragment.encode(), body)

    def handler_threads(self) -> int:
        return sum(1 for thread in threading.enumerate() if "process_request_thread" in thread.name)


class PanelTest(HostileHttp):
    def setUp(self) -> None:
        super().setUp()
        self.job = self.store.enqueue(JobSpec("tasks:x", args={"password": "hunter2"}, queue="q")).id
        flow = dag.parse_workflow({"name": "flow", "nodes": [{"id": "ask", "kind": "input", "prompt": "go?"}]})
        self.run_id = self.store.start_run(flow, {}, "")
        self.panel = serve_in_background(self, panel_server.make_server(self.config(allowed_hosts=ALLOWED),
                                                                        "127.0.0.1", 0))
        self.port = self.panel.server_address[1]
        self.values = {"csrf": self.panel.csrf, "job": self.job, "run": self.run_id}

    def assert_nothing_written(self) -> None:
        self.assertEqual(self.store.reads.switches(), [])
        self.assertEqual(self.store.reads.switch_log(), [])
        self.assertEqual(self.store.reads.find_job(self.job).state, QUEUED)
        self.assertEqual(self.store.reads.find_run(self.run_id).node("ask").state, dag.AWAITING_INPUT)

    def test_refused_requests_get_one_line_and_change_nothing(self):
        self.assert_rows(self.port, PANEL_REFUSED, **self.values)
        self.assert_nothing_written()
        self.assert_quiet()

    def test_requests_by_the_names_it_answers_to_are_served(self):
        self.assert_rows(self.port, PANEL_ANSWERED, **self.values)
        self.assert_quiet()

    def test_a_body_shorter_than_its_length_is_refused_at_its_deadline(self):
        self.panel.body_seconds = BODY_SECONDS
        for label, template, half_close, status, fragment in SHORT_BODIES:
            with self.subTest(label):
                started = time.monotonic()
                got, body = exchange(self.port, fill(template, port=self.port, **self.values), half_close)
                self.assertEqual(got, status, body[:400])
                self.assertIn(fragment, the_line(body))
                self.assertLess(time.monotonic() - started, DEADLINE / 3)
        self.assert_nothing_written()
        self.assert_quiet()

    def test_a_head_dripping_header_lines_is_cut_off_at_its_deadline(self):
        self.panel.head_seconds = HEAD_SECONDS
        assert_cut_off(self, self.port, b"GET /workers HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % self.port)
        self.assert_quiet()

    def test_idle_connections_do_not_take_a_thread_past_the_bound(self):
        assert_bounded(self, self.panel, fill(get("/workers"), port=self.port), b"Workers")
        self.assert_quiet()


class MetricsTest(HostileHttp):
    def setUp(self) -> None:
        super().setUp()
        self.store.enqueue(JobSpec("tasks:x", queue="q"))
        self.server = serve_in_background(self, exporter.make_server(self.config(allowed_hosts=ALLOWED),
                                                                     "127.0.0.1", 0))
        self.port = self.server.server_address[1]

    def test_refused_requests_get_one_line(self):
        self.assert_rows(self.port, METRICS_REFUSED)
        self.assert_quiet()

    def test_requests_by_the_names_it_answers_to_are_served(self):
        self.assert_rows(self.port, METRICS_ANSWERED)
        self.assert_quiet()

    def test_a_head_dripping_header_lines_is_cut_off_at_its_deadline(self):
        self.server.head_seconds = HEAD_SECONDS
        assert_cut_off(self, self.port, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % self.port)
        self.assert_quiet()

    def test_idle_connections_do_not_take_a_thread_past_the_bound(self):
        assert_bounded(self, self.server, fill(get("/metrics"), port=self.port), b"rowfleet_jobs")
        self.assert_quiet()


def assert_cut_off(test: HostileHttp, port: int, head: bytes) -> None:
    """A client that sends ``head`` and then a header line every 0.1 s is answered 408 and
    cut off at the head's deadline, long before it would stop."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        sock.sendall(head)
        sock.settimeout(0.1)
        answer = b""
        for drip in range(100):  # 10 s of drips at most
            try:
                sock.sendall(b"X-Drip-%d: 1\r\n" % drip)
            except OSError:  # the server closed its side
                break
            try:
                answer += sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                continue
            if answer:
                break
        took = time.monotonic() - started
        sock.settimeout(DEADLINE)
        with contextlib.suppress(OSError):
            answer += read_all(sock)
    test.assertLess(took, HEAD_SECONDS + 3.0, "the dripping client was not cut off at the head's deadline")
    status, body = parse(answer)
    test.assertEqual(status, 408, body[:300])
    test.assertIn("did not arrive", the_line(body))


def assert_bounded(test: HostileHttp, server, request: bytes, served: bytes) -> None:
    """With room for 3 connections at once, 3 idle ones hold 3 threads; 5 more are turned
    away at once (503, one line) without a thread; once the idle ones go, it serves again."""
    server.connections_most = 3
    server.head_seconds = 20.0  # the idle ones stay for the length of the test
    port = server.server_address[1]
    before = test.handler_threads()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) for _ in range(3)]
    try:
        wait_until(lambda: test.handler_threads() == before + 3, message="a thread for each idle connection")
        for _ in range(5):
            started = time.monotonic()
            with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as extra:
                status, body = parse(read_all(extra))
            test.assertEqual(status, 503, body)
            test.assertIn("busy", the_line(body))
            test.assertLess(time.monotonic() - started, 5.0)
            test.assertEqual(test.handler_threads(), before + 3, "no thread for a connection past the bound")
    finally:
        for sock in idle:
            sock.close()
    wait_until(lambda: test.handler_threads() == before, message="the idle connections' threads to end")
    status, body = exchange(port, request)
    test.assertEqual(status, 200, body[:300])
    test.assertIn(served, body)


class CommandTest(HostileHttp):
    """The commands take the names to answer to from ``--allow-host`` or the environment;
    a bad one is one line and exit 2."""

    SLOW = True  # command-line processes

    def serve(self, *args: str, env: dict[str, str] | None = None) -> int:
        process = self.spawn(*args, "--port", "0", env=child_env(**(env or {})))
        line = process.stdout.readline()
        self.assertIn("http://127.0.0.1:", line, process.stderr.read() if not line else line)

        def stop() -> None:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=DEADLINE)
            self.assertEqual(process.returncode, 0, err)
            self.assertNotIn("Traceback", err)
        self.addCleanup(stop)
        return int(line.split("http://127.0.0.1:", 1)[1].split("/", 1)[0])

    def test_allowed_names_come_from_the_flag_or_the_environment(self):
        for command, path, env in (("metrics", "/metrics", {}), ("panel", "/workers",
                                                                 {"ROWFLEET_ALLOWED_HOSTS": "box.example"})):
            with self.subTest(command):
                port = self.serve(command, *(() if env else ("--allow-host", "Box.Example")), env=env)
                self.assertEqual(exchange(port, fill(get(path, "box.example:8080"), port=port))[0], 200)
                status, body = exchange(port, fill(get(path, REBIND), port=port))
                self.assertEqual(status, 421, body[:300])
                self.assertIn("--allow-host", the_line(body))

    def test_a_bad_name_is_one_line_and_exit_2(self):
        for args, env in ((("metrics", "--allow-host", "two words"), {}), (("panel", "--allow-host", "box:8465"), {}),
                          (("panel",), {"ROWFLEET_ALLOWED_HOSTS": "ok.example,*"}),
                          (("up", "--allow-host", "box.example"), {})):
            with self.subTest(args=args, env=env):
                result = self.cli(*args, "--port", "0", check=False, env=child_env(**env))
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertNotIn("Traceback", result.stderr)


class SwitchRows:
    """The switch form with values the command line refuses, on the class's database: a
    one-line 400 and nothing written; the store itself refuses them too."""

    def serve(self):
        self.store = self.open_store()
        panel = serve_in_background(self, panel_server.make_server(self.config(), "127.0.0.1", 0))
        return panel.server_address[1], panel.csrf

    def test_values_the_command_line_refuses_are_refused_and_nothing_is_written(self):
        port, csrf = self.serve()
        for label, form, fragment in SWITCH_REFUSED:
            with self.subTest(label):
                status, body = exchange(port, fill(post("/workers/switch", form + "&csrf={csrf}"), port=port,
                                                   csrf=csrf))
                self.assertEqual(status, 400, body[:300])
                self.assertIn(fragment, the_line(body))
        self.assertEqual((self.store.reads.switches(), self.store.reads.switch_log()), ([], []))
        status, body = exchange(port, fill(post("/workers/switch", SWITCH_ALL_OFF, REBIND), port=port, csrf=csrf))
        self.assertEqual(status, 421, body[:300])
        self.assertEqual((self.store.reads.switches(), self.store.reads.switch_log()), ([], []))
        # The same form from the panel's own address is written: the refusals above were the values'.
        status, body = exchange(port, fill(post("/workers/switch", SWITCH_ALL_OFF), port=port, csrf=csrf))
        self.assertEqual(status, 303, body[:300])
        self.assertEqual([(s.project, s.host, s.queue, s.desired, s.policy) for s in self.store.reads.switches()],
                         [("*", "*", "*", "off", "hard")])

    def test_the_store_refuses_what_the_form_refuses(self):
        self.store = self.open_store()
        for project, host, queue in (("two words", "box", "q"), ("p" * 1999, "box", "q"), ("", "a b", "q"),
                                     ("", "box", "q" * 256), ("", "box", ""), ("", "", "q"), (None, "box", "q")):
            with self.subTest(project=str(project)[:20], host=host, queue=queue[:20]), \
                    self.assertRaises(ConfigError):
                self.store.set_switch(project, host, queue, "off", "hard")
        self.assertEqual(self.store.reads.switches(), [])
        self.assertEqual(self.store.set_switch("*", "*", "*", "off", "drain").queue, "*")


class SQLiteSwitchTest(SwitchRows, TempDirTestCase):
    pass


class PostgresSwitchTest(SwitchRows, PostgresDatabaseCase, TempDirTestCase):
    SLOW = True  # a PostgreSQL server


if __name__ == "__main__":
    unittest.main()
