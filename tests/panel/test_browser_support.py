"""The browser test support (tests/browser.py) against a real headless Chromium and a tiny
page server on 127.0.0.1: pages load, evaluate answers and raises, clicks (scripted and
real mouse) reach the server, console messages, exceptions and CSP violations are recorded,
a screenshot decodes and shows the red box, and nothing of the browser outlives it.

Its PNG decoder and WebSocket framing are tested without a browser, on a PNG built here
with zlib (every filter type) and over a socket pair. The browser tests skip loudly without
Chromium, and fail instead under ``ROWFLEET_REQUIRE_CHROMIUM=1``.
"""

from __future__ import annotations

import doctest
import http.server
import os
import random
import shutil
import socket
import struct
import threading
import unittest
import zlib

import browser
from browser import (OP_BINARY, OP_CLOSE, OP_CONTINUATION, OP_PING, OP_PONG, OP_TEXT, Browser, BrowserError,
                     JavaScriptError, WebSocket, WebSocketClosed, WebSocketError, browser_processes, colour_share,
                     distinct_colours, encode_frame, png_chunk, png_pixels, require_chromium)
from support import DEADLINE, process_alive, serve_in_background

RED = (255, 0, 0)
TITLE = "rowfleet browser test"
INDEX = ("""<!doctype html>
<html><head><title>%s</title></head>
<body style="margin: 0; background: #ffffff">
<div id="red" style="background: #ff0000; width: 200px; height: 200px"></div>
<button id="go" style="width: 120px; height: 40px">go</button>
<script>
  console.log("panel ready", 42);
  document.getElementById("go").addEventListener("click", () =>
    fetch("/hit").then(answer => answer.text()).then(text => { document.body.dataset.hit = text; }));
</script>
</body></html>
""" % TITLE).encode()
CSP_PAGE = b"""<!doctype html>
<html><head><title>csp</title></head><body>
<script>document.title = "inline ran";</script>
<script src="/allowed.js"></script>
</body></html>
"""
ALLOWED_SCRIPT = b'document.body.dataset.external = "ran";'


class PageServer(http.server.ThreadingHTTPServer):
    """Serves the test pages; remembers each /hit and each request's Cookie header."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), PageHandler)
        self.lock = threading.Lock()
        self.hits = 0
        self.cookies: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class PageHandler(http.server.BaseHTTPRequestHandler):
    server: PageServer

    def log_message(self, format: str, *args: object) -> None:
        pass  # the test reads what it needs from the server's fields

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.cookies.append(self.headers.get("Cookie", ""))
        headers = {}
        if self.path == "/":
            body, kind = INDEX, "text/html; charset=utf-8"
        elif self.path == "/hit":
            with self.server.lock:
                self.server.hits += 1
                body, kind = f"hit {self.server.hits}".encode(), "text/plain"
        elif self.path == "/csp":
            body, kind = CSP_PAGE, "text/html; charset=utf-8"
            headers["Content-Security-Policy"] = "script-src 'self'"
        elif self.path == "/allowed.js":
            body, kind = ALLOWED_SCRIPT, "text/javascript"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class BrowserPageTest(unittest.TestCase):
    SLOW = True  # a real browser: the full suite and CI
    """One Chromium for the class; a fresh page and page server per test."""

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.browser = cls.enterClassContext(Browser(require_chromium(cls)))

    def setUp(self) -> None:
        self.server = serve_in_background(self, PageServer())
        self.page = self.browser.new_page()
        self.addCleanup(self.page.close)

    def test_a_page_loads_and_evaluate_answers(self) -> None:
        self.page.goto(self.server.url + "/")
        self.assertEqual(self.page.evaluate("document.title"), TITLE)
        self.assertEqual(self.page.evaluate("[1 + 2, 'text', null, {a: [true]}]"), [3, "text", None, {"a": [True]}])
        self.assertIsNone(self.page.evaluate("undefined"))
        self.assertEqual(self.page.evaluate("Promise.resolve(7)"), 7)
        self.assertIn(self.server.url + "/", self.page.requests)

    def test_evaluate_raises_what_the_page_threw(self) -> None:
        with self.assertRaises(JavaScriptError) as caught:
            self.page.evaluate("no_such_name.field")
        self.assertIn("no_such_name is not defined", str(caught.exception))

    def test_a_large_answer_arrives_whole(self) -> None:
        # Several MB in one message, as a screenshot of a busy page is: a 64-bit length.
        self.assertEqual(self.page.evaluate("'ab'.repeat(1500000)"), "ab" * 1500000)

    def test_a_failed_navigation_raises(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            closed_port = probe.getsockname()[1]  # bound but not listening: connections are refused
            with self.assertRaises(BrowserError) as caught:
                self.page.goto(f"http://127.0.0.1:{closed_port}/")
        self.assertIn("ERR_CONNECTION_REFUSED", str(caught.exception))

    def test_clicks_reach_the_server(self) -> None:
        self.page.goto(self.server.url + "/")
        self.page.click("#go")
        self.assertEqual(self.page.wait_for("document.body.dataset.hit"), "hit 1")
        x, y = self.page.mouse_click("#go")
        self.assertEqual(self.page.wait_for("document.body.dataset.hit === 'hit 2' && document.body.dataset.hit"),
                         "hit 2")
        self.assertEqual(self.server.hits, 2)
        self.assertEqual(self.page.requests.count(self.server.url + "/hit"), 2)
        self.assertGreater(y, 200)  # below the red box: the button's own centre
        with self.assertRaises(BrowserError):
            self.page.click("#absent")
        with self.assertRaises(BrowserError):
            self.page.mouse_click("#absent")

    def test_wait_for_fails_at_its_deadline(self) -> None:
        with self.assertRaises(AssertionError) as caught:
            self.page.wait_for("window.never_set", timeout=0.2)
        self.assertIn("window.never_set", str(caught.exception))

    def test_console_messages_and_exceptions_are_recorded(self) -> None:
        self.page.goto(self.server.url + "/")
        self.page.session.wait_event("Runtime.consoleAPICalled")
        self.assertIn({"type": "log", "text": "panel ready 42"}, self.page.console)
        self.assertEqual(self.page.exceptions, [])
        self.page.evaluate("setTimeout(() => { throw new Error('thrown from a timer'); }, 0)")
        self.page.session.wait_event("Runtime.exceptionThrown")
        self.assertTrue(any("thrown from a timer" in text for text in self.page.exceptions), self.page.exceptions)

    def test_a_csp_violation_is_recorded(self) -> None:
        self.page.goto(self.server.url + "/csp")
        self.assertEqual(self.page.wait_for("document.body.dataset.external"), "ran")
        self.assertEqual(self.page.evaluate("document.title"), "csp")  # the inline script was blocked
        self.page.session.wait_event("Log.entryAdded", match=lambda params: "Content Security Policy"
                                     in params.get("entry", {}).get("text", ""))
        violations = [entry for entry in self.page.log_entries if "Content Security Policy" in entry.get("text", "")]
        self.assertTrue(violations, self.page.log_entries)
        self.assertEqual((violations[0]["source"], violations[0]["level"]), ("security", "error"))

    def test_a_cookie_set_is_sent(self) -> None:
        self.page.set_cookie("panel_session", "s3cret", url=self.server.url + "/")
        self.page.goto(self.server.url + "/")
        self.assertIn("panel_session=s3cret", self.server.cookies[0])

    def test_a_screenshot_shows_the_red_box(self) -> None:
        self.page.goto(self.server.url + "/")
        png = self.page.screenshot()
        width, height, rows = png_pixels(png)
        self.assertEqual((width, height), browser.WINDOW)
        self.assertEqual(self.page.evaluate("[innerWidth, innerHeight]"), list(browser.WINDOW))
        self.assertEqual(rows[100][100 * 4:100 * 4 + 3], bytes(RED))  # inside the box
        self.assertEqual(rows[100][300 * 4:300 * 4 + 3], b"\xff\xff\xff")  # right of it
        self.assertAlmostEqual(colour_share(png, RED, tolerance=8), 200 * 200 / (width * height), delta=0.002)
        colours = distinct_colours(png)
        self.assertEqual(colours.most_common(1)[0][0], (255, 255, 255))
        self.assertGreater(len(colours), 2)  # white, red, and the button's shades


class BrowserLifecycleTest(unittest.TestCase):
    SLOW = True
    def test_nothing_outlives_a_browser_even_when_the_test_fails(self) -> None:
        executable = require_chromium(self)
        with self.assertRaises(ZeroDivisionError):
            with Browser(executable) as started:
                pid, folder = started.pid, started.folder
                started.new_page().evaluate("1")
                processes = browser_processes(pid, folder)
                self.assertGreater(len(processes), 1)  # the browser and its helpers: renderer, GPU, zygote
                1 / 0
        self.assertFalse(os.path.exists(folder))
        self.assertEqual([p for p in processes if process_alive(p)], [])
        self.assertEqual(browser_processes(pid, folder), [])

    def test_a_browser_that_cannot_start_says_so_and_leaves_nothing(self) -> None:
        exits_at_once = shutil.which("false")
        self.assertIsNotNone(exits_at_once)
        failing = Browser(exits_at_once, timeout=DEADLINE)
        with self.assertRaises(BrowserError) as caught:
            failing.start()
        self.assertIn("before it listened", str(caught.exception))
        self.assertFalse(os.path.exists(failing.folder))
        self.assertIsNotNone(failing.process.returncode)  # reaped


def png(width: int, height: int, colour_type: int, pixels: list[bytes], filters: list[int],
        interlace: int = 0, depth: int = 8) -> bytes:
    """A PNG of ``pixels`` (one bytes per row), each row filtered with its filter type,
    encoded here independently of the decoder under test."""
    bpp = {2: 3, 6: 4}[colour_type]
    raw, previous = bytearray(), bytes(width * bpp)
    for row, kind in zip(pixels, filters):
        raw.append(kind)
        for i, value in enumerate(row):
            left = row[i - bpp] if i >= bpp else 0
            up = previous[i]
            corner = previous[i - bpp] if i >= bpp else 0
            if kind == 0:
                predicted = 0
            elif kind == 1:
                predicted = left
            elif kind == 2:
                predicted = up
            elif kind == 3:
                predicted = (left + up) // 2
            else:
                estimate = left + up - corner
                distances = [abs(estimate - left), abs(estimate - up), abs(estimate - corner)]
                predicted = (left, up, corner)[distances.index(min(distances))]
            raw.append((value - predicted) % 256)
        previous = row
    header = struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, interlace)
    compressed = zlib.compress(bytes(raw))
    # Image data split over two IDAT chunks, as encoders may write it.
    return (browser.PNG_SIGNATURE + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", compressed[:7])
            + png_chunk(b"IDAT", compressed[7:]) + png_chunk(b"IEND", b""))


def varied_rows(width: int, height: int, bpp: int) -> list[bytes]:
    """Rows of bytes drawn from a few values near 0 and 255: Paeth's predictor often ties
    (which it must break in the standard's order) and sums wrap around."""
    pick = random.Random(f"{width}x{height}x{bpp}").choice
    values = (0, 1, 2, 3, 4, 5, 128, 252, 253, 254, 255)
    return [bytes(pick(values) for _ in range(width * bpp)) for _ in range(height)]


class PngTest(unittest.TestCase):
    def test_every_filter_type_decodes_rgb_and_rgba(self) -> None:
        for colour_type, bpp in ((2, 3), (6, 4)):
            with self.subTest(colour_type=colour_type):
                filters = [0, 1, 2, 3, 4] * 8
                pixels = varied_rows(9, len(filters), bpp)
                width, height, rows = png_pixels(png(9, len(filters), colour_type, pixels, filters))
                self.assertEqual((width, height), (9, len(filters)))
                expected = pixels if bpp == 4 else [
                    b"".join(row[x * 3:x * 3 + 3] + b"\xff" for x in range(9)) for row in pixels]
                self.assertEqual(rows, expected)

    def test_colours_are_counted(self) -> None:
        red, white = bytes(RED), b"\xff\xff\xff"
        pixels = [red * 2 + white * 2, bytes((250, 6, 0)) + white * 3]
        image = png(4, 2, 2, pixels, [1, 4])
        self.assertEqual(distinct_colours(image), {RED: 2, (255, 255, 255): 5, (250, 6, 0): 1})
        self.assertEqual(colour_share(image, RED), 2 / 8)
        self.assertEqual(colour_share(image, RED, tolerance=6), 3 / 8)
        self.assertEqual(colour_share(image, (0, 0, 255), tolerance=6), 0.0)

    def test_what_it_cannot_read_is_refused_with_a_reason(self) -> None:
        good = png(2, 2, 2, varied_rows(2, 2, 3), [0, 0])
        corrupt = bytearray(good)
        corrupt[len(browser.PNG_SIGNATURE) + 10] ^= 1  # inside IHDR's body: its CRC no longer matches
        cases = {
            "signature": b"GIF89a" + good[6:],
            "CRC": bytes(corrupt),
            "before its IEND": good[:-12],
            "interlace 1": png(2, 2, 2, varied_rows(2, 2, 3), [0, 0], interlace=1),
            "bit depth 16": png(2, 2, 2, varied_rows(2, 2, 3), [0, 0], depth=16),
        }
        raw = zlib.compress(b"\x07" + bytes(6) + b"\x00" + bytes(6))
        header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
        cases["filter type 7"] = (browser.PNG_SIGNATURE + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", raw)
                                  + png_chunk(b"IEND", b""))
        for reason, data in cases.items():
            with self.subTest(reason=reason), self.assertRaises(ValueError) as caught:
                png_pixels(data)
            self.assertIn(reason, str(caught.exception))

    def test_the_doctests_pass(self) -> None:
        self.assertEqual(doctest.testmod(browser).failed, 0)


def server_frames(sock: socket.socket, count: int) -> list[tuple[int, bool, bytes]]:
    """Read ``count`` client frames on the server's end: opcode, whether masked, payload."""
    sock.settimeout(DEADLINE)
    data, frames = bytearray(), []

    def need(size: int) -> None:
        while len(data) < size:
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError("the client closed the connection")
            data.extend(chunk)

    for _ in range(count):
        need(2)
        size, offset = data[1] & 0x7F, 2
        if size == 126:
            need(4)
            size, offset = struct.unpack_from("!H", data, 2)[0], 4
        elif size == 127:
            need(10)
            size, offset = struct.unpack_from("!Q", data, 2)[0], 10
        masked = bool(data[1] & 0x80)
        end = offset + 4 * masked + size
        need(end)
        key, payload = bytes(data[offset:offset + 4 * masked]), bytes(data[offset + 4 * masked:end])
        frames.append((data[0] & 0x0F, masked, browser.mask(payload, key) if masked else payload))
        del data[:end]
    return frames


class WebSocketTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client_end, self.server_end = socket.socketpair()
        self.addCleanup(self.server_end.close)
        self.addCleanup(self.client_end.close)
        self.server_end.settimeout(DEADLINE)  # a test that stops reading must fail, not hang
        self.client = WebSocket(self.client_end)

    def send(self, *frames: bytes) -> None:
        """Send from a thread (joined at cleanup): more than a socket buffer holds waits for
        the client to read it."""
        sender = threading.Thread(target=self.server_end.sendall, args=(b"".join(frames),), name="test-sender")
        sender.start()
        self.addCleanup(sender.join, DEADLINE)
        self.addCleanup(self.client_end.close)  # first: a sender the test left blocked fails at once

    def test_fragments_join_and_a_ping_between_them_is_answered(self) -> None:
        self.send(encode_frame(OP_TEXT, "frag".encode(), b"", fin=False),
                  encode_frame(OP_PING, b"are you there", b""),
                  encode_frame(OP_CONTINUATION, "mént".encode(), b"", fin=False),
                  encode_frame(OP_CONTINUATION, "ed".encode(), b""))
        self.assertEqual(self.client.receive(DEADLINE), "fragménted")
        self.assertEqual(server_frames(self.server_end, 1), [(OP_PONG, True, b"are you there")])

    def test_lengths_of_every_size_arrive_whole(self) -> None:
        sizes = (0, 125, 126, 65535, 65536, 3_000_000)
        self.send(*(encode_frame(OP_BINARY, bytes([size % 251]) * size, b"") for size in sizes))
        for size in sizes:
            self.assertEqual(self.client.receive(DEADLINE), bytes([size % 251]) * size)

    def test_client_frames_are_masked(self) -> None:
        text = "x" * 70000
        self.client.send_text("hello")
        self.client.send_text(text)
        self.assertEqual(server_frames(self.server_end, 2), [(OP_TEXT, True, b"hello"),
                                                              (OP_TEXT, True, text.encode())])

    def test_receive_gives_up_at_its_deadline(self) -> None:
        self.assertIsNone(self.client.receive(0.05))
        self.send(encode_frame(OP_TEXT, b"late", b""))
        self.assertEqual(self.client.receive(DEADLINE), "late")

    def test_a_close_frame_is_answered_and_ends_the_socket(self) -> None:
        self.send(encode_frame(OP_CLOSE, struct.pack("!H", 1001) + b"going away", b""))
        with self.assertRaises(WebSocketClosed):
            self.client.receive(DEADLINE)
        self.assertEqual(self.client.close_code, 1001)
        self.assertEqual(server_frames(self.server_end, 1), [(OP_CLOSE, True, struct.pack("!H", 1001))])
        with self.assertRaises(WebSocketClosed):
            self.client.send_text("after close")

    def test_what_a_server_must_not_send_is_refused(self) -> None:
        cases = {
            "masked": encode_frame(OP_TEXT, b"hi", b"abcd"),
            "reserved bits": bytes([0xC1, 0x00]),
            "unknown opcode": bytes([0x83, 0x00]),
            "control frame": encode_frame(OP_PING, b"x" * 126, b""),
            "continuation frame with no message": encode_frame(OP_CONTINUATION, b"x", b""),
            "not UTF-8": encode_frame(OP_TEXT, b"\xff\xfe", b""),
        }
        for reason, frame in cases.items():
            with self.subTest(reason=reason):
                client_end, server_end = socket.socketpair()
                with client_end, server_end:
                    server_end.sendall(frame)
                    with self.assertRaises(WebSocketError) as caught:
                        WebSocket(client_end).receive(DEADLINE)
                    self.assertIn(reason, str(caught.exception))

    def test_a_handshake_with_the_wrong_accept_is_refused(self) -> None:
        head = ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Accept: {browser.accept_key('some other key')}")
        with self.assertRaises(WebSocketError) as caught:
            browser.check_handshake(head, "dGhlIHNhbXBsZSBub25jZQ==")
        self.assertIn("wrong Sec-WebSocket-Accept", str(caught.exception))

    def test_the_connection_ending_without_a_close_frame_is_reported(self) -> None:
        self.server_end.shutdown(socket.SHUT_WR)
        with self.assertRaises(WebSocketClosed) as caught:
            self.client.receive(DEADLINE)
        self.assertIn("without a close frame", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
