"""Test support: a real headless Chromium driven over the DevTools protocol, standard library only.

Owns finding Chromium (``find_chromium``, ``require_chromium``), starting it with a fresh
profile and killing every process it started (``Browser``), a small RFC 6455 WebSocket
client over ``socket`` (``connect_websocket``), a DevTools session on it (``DevToolsSession``:
commands with ids, events recorded meanwhile), the page helpers the panel's browser tests use
(``Page``: goto, evaluate, click, wait_for, screenshot, with the console messages, exceptions,
log entries and request URLs the page produced), and a PNG decoder to read screenshots
(``png_pixels``, ``colour_share``, ``distinct_colours``).

Every wait has a deadline. Test support only: not shipped in the package, and it must not
import rowfleet (it drives any page on 127.0.0.1) or anything outside the standard library.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import itertools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import urllib.request
import zlib
from typing import Any, Callable, NamedTuple

from support import DEADLINE, require_tool

CHROMIUM_ENV = "ROWFLEET_CHROMIUM"  # the browser to use, a path or a command name
REQUIRE_CHROMIUM_ENV = "ROWFLEET_REQUIRE_CHROMIUM"  # "1": a missing browser fails the tests
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-extensions", "--no-proxy-server", "--remote-debugging-port=0")
WINDOW = (1280, 900)
POLL = 0.02  # seconds between looks at something that cannot be waited on (a file appearing)


class BrowserError(RuntimeError):
    """The browser, or the protocol to it, did not do what was asked (it did not start, a
    command got no answer in time or an error answer, a navigation failed)."""


class JavaScriptError(BrowserError):
    """An expression evaluated in the page threw; the message is the page's description."""


class WebSocketError(BrowserError):
    """The WebSocket peer broke the protocol, or refused the handshake."""


class WebSocketClosed(WebSocketError):
    """The WebSocket is closed (a close frame came, or the connection ended)."""


def find_chromium() -> str | None:
    """The Chromium to run: ``ROWFLEET_CHROMIUM`` (a path or a command on PATH) when set,
    else the first of chromium, chromium-browser, google-chrome on PATH; None when none is."""
    chosen = os.environ.get(CHROMIUM_ENV)
    if chosen:
        return shutil.which(chosen)
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    return None


def require_chromium(test: unittest.TestCase | type[unittest.TestCase]) -> str:
    """The Chromium to run, or skip loudly (``support.require_tool``) when there is none;
    under ``ROWFLEET_REQUIRE_CHROMIUM=1`` its absence fails instead. Takes a test, or a test
    class from ``setUpClass`` (a skip there skips the class, a failure errors it)."""
    if isinstance(test, type):
        test = test()  # require_tool needs an instance only for skipTest/fail
    return require_tool(test, find_chromium() or os.environ.get(CHROMIUM_ENV) or CHROMIUM_NAMES[0],
                        REQUIRE_CHROMIUM_ENV)


# --- WebSocket (RFC 6455, client side) ---------------------------------------------------

OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
CLOSE_NORMAL = 1000
WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_HANDSHAKE = 64 * 1024
RECEIVE_CHUNK = 1 << 20


class Frame(NamedTuple):
    """One WebSocket frame as received: its FIN bit, opcode and (unmasked) payload."""
    fin: bool
    opcode: int
    payload: bytes


def accept_key(key: str) -> str:
    """The Sec-WebSocket-Accept a server must answer to ``key`` (RFC 6455 section 4.2.2).

    >>> accept_key("dGhlIHNhbXBsZSBub25jZQ==")
    's3pPLMBiTxaQ9kYGzzhZRbK+xOo='
    """
    return base64.b64encode(hashlib.sha1((key + WEBSOCKET_GUID).encode("ascii")).digest()).decode("ascii")


def mask(payload: bytes, key: bytes) -> bytes:
    """``payload`` XORed with the 4-byte ``key`` repeated (masking and unmasking alike).

    >>> mask(b"Hello", b"\\x37\\xfa\\x21\\x3d")
    b'\\x7f\\x9fMQX'
    >>> mask(mask(b"Hello", b"abcd"), b"abcd")
    b'Hello'
    """
    size = len(payload)
    if size == 0:
        return b""
    repeated = (key * (size // 4 + 1))[:size]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(size, "big")


def encode_frame(opcode: int, payload: bytes, mask_key: bytes, fin: bool = True) -> bytes:
    """One frame: masked with ``mask_key`` (4 bytes; a client must mask), or unmasked when it
    is empty (as a server sends). Lengths past 125 take 16 bits, past 65535 take 64.

    >>> encode_frame(OP_TEXT, b"Hi", b"")
    b'\\x81\\x02Hi'
    >>> encode_frame(OP_TEXT, b"Hi", b"\\x00\\x00\\x00\\x00", fin=False)
    b'\\x01\\x82\\x00\\x00\\x00\\x00Hi'
    >>> encode_frame(OP_BINARY, bytes(70000), b"")[:10]
    b'\\x82\\x7f\\x00\\x00\\x00\\x00\\x00\\x01\\x11p'
    """
    first = (0x80 if fin else 0) | opcode
    mask_bit = 0x80 if mask_key else 0
    size = len(payload)
    if size < 126:
        header = struct.pack("!BB", first, mask_bit | size)
    elif size < 1 << 16:
        header = struct.pack("!BBH", first, mask_bit | 126, size)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, size)
    if not mask_key:
        return header + payload
    return header + mask_key + mask(payload, mask_key)


def parse_frame(buffer: bytes | bytearray) -> tuple[Frame, int] | None:
    """The first whole frame a server sent at the start of ``buffer`` and the bytes it took,
    or None while more bytes are needed. Raises ``WebSocketError`` for what a server must not
    send: reserved bits (no extension was agreed), a masked frame, an unknown opcode, a
    control frame that is fragmented or longer than 125 bytes.

    >>> parse_frame(b"\\x81\\x05Hello, and more")
    (Frame(fin=True, opcode=1, payload=b'Hello'), 7)
    >>> parse_frame(b"\\x81\\x05Hel") is None
    True
    >>> parse_frame(b"\\x89\\x00")[0]
    Frame(fin=True, opcode=9, payload=b'')
    """
    if len(buffer) < 2:
        return None
    first, second = buffer[0], buffer[1]
    fin, opcode = bool(first & 0x80), first & 0x0F
    if first & 0x70:
        raise WebSocketError(f"frame with reserved bits set ({first:#04x}) though no extension was agreed")
    if second & 0x80:
        raise WebSocketError("the server sent a masked frame")
    if opcode not in (OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG):
        raise WebSocketError(f"frame with unknown opcode {opcode:#x}")
    size, offset = second & 0x7F, 2
    if size == 126:
        if len(buffer) < 4:
            return None
        (size,), offset = struct.unpack_from("!H", buffer, 2), 4
    elif size == 127:
        if len(buffer) < 10:
            return None
        (size,), offset = struct.unpack_from("!Q", buffer, 2), 10
    if opcode >= OP_CLOSE and (not fin or size > 125):
        raise WebSocketError(f"control frame {opcode:#x} fragmented or longer than 125 bytes")
    end = offset + size
    if len(buffer) < end:
        return None
    return Frame(fin, opcode, bytes(buffer[offset:end])), end


class WebSocket:
    """The client side of an open WebSocket: send text, receive whole messages (fragments
    joined, pings answered with pongs), close. Made by ``connect_websocket``, or on any
    connected socket whose handshake is done (``leftover``: bytes already read past it)."""

    def __init__(self, sock: socket.socket, leftover: bytes = b"", send_timeout: float = DEADLINE) -> None:
        self._sock = sock
        self.send_timeout = send_timeout
        self._buffer = bytearray(leftover)
        self._message: tuple[int, list[bytes]] | None = None  # opcode and fragments so far
        self.closed = False
        self.close_code: int | None = None

    def send_text(self, text: str) -> None:
        """Send one text message (one masked frame)."""
        self._send(OP_TEXT, text.encode("utf-8"))

    def _send(self, opcode: int, payload: bytes) -> None:
        if self.closed:
            raise WebSocketClosed("the WebSocket is closed")
        self._sock.settimeout(self.send_timeout)  # not the last receive's remainder
        self._sock.sendall(encode_frame(opcode, payload, os.urandom(4)))

    def receive(self, timeout: float) -> str | bytes | None:
        """The next whole message (text as str, binary as bytes), or None when ``timeout``
        seconds pass first. Raises ``WebSocketClosed`` once the peer closes (answering its
        close frame first)."""
        deadline = time.monotonic() + timeout
        while True:
            parsed = parse_frame(self._buffer)
            if parsed is None:
                if not self._fill(deadline):
                    return None
                continue
            frame, used = parsed
            del self._buffer[:used]
            message = self._take(frame)
            if message is not None:
                return message

    def _fill(self, deadline: float) -> bool:
        """Read what has come (bytes appended to the buffer); False once the deadline passes."""
        if self.closed:
            raise WebSocketClosed("the WebSocket is closed")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self._sock.settimeout(remaining)
        try:
            chunk = self._sock.recv(RECEIVE_CHUNK)
        except socket.timeout:
            return False
        if not chunk:
            self.closed = True
            raise WebSocketClosed("the connection ended without a close frame")
        self._buffer += chunk
        return True

    def _take(self, frame: Frame) -> str | bytes | None:
        """The message ``frame`` completes, if any; control frames are answered here."""
        if frame.opcode == OP_PING:
            self._send(OP_PONG, frame.payload)
            return None
        if frame.opcode == OP_PONG:
            return None
        if frame.opcode == OP_CLOSE:
            self.close_code = struct.unpack("!H", frame.payload[:2])[0] if len(frame.payload) >= 2 else None
            if not self.closed:
                self._send(OP_CLOSE, frame.payload[:2])
                self.closed = True
            raise WebSocketClosed(f"the peer closed the WebSocket (code {self.close_code})")
        if frame.opcode == OP_CONTINUATION:
            if self._message is None:
                raise WebSocketError("continuation frame with no message to continue")
            self._message[1].append(frame.payload)
        elif self._message is not None:
            raise WebSocketError("a new message began before the fragmented one ended")
        else:
            self._message = (frame.opcode, [frame.payload])
        if not frame.fin:
            return None
        opcode, parts = self._message
        self._message = None
        payload = b"".join(parts)
        if opcode == OP_BINARY:
            return payload
        try:
            return payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WebSocketError(f"text message is not UTF-8: {exc}") from None

    def close(self, timeout: float = 2.0) -> None:
        """Send a close frame, wait (at most ``timeout`` seconds) for the peer's, and close
        the socket. Safe to call twice."""
        try:
            if not self.closed:
                self._send(OP_CLOSE, struct.pack("!H", CLOSE_NORMAL))
                self.closed = True
                deadline = time.monotonic() + timeout
                while self._drain_until_close(deadline):
                    pass
        except OSError:
            pass  # the peer is gone already: nothing left to close politely
        finally:
            self.closed = True
            self._sock.close()

    def _drain_until_close(self, deadline: float) -> bool:
        """Whether to keep reading: False once the peer's close frame, the end of the
        connection or the deadline has come."""
        parsed = parse_frame(self._buffer)
        if parsed is not None:
            frame, used = parsed
            del self._buffer[:used]
            return frame.opcode != OP_CLOSE
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self._sock.settimeout(remaining)
        try:
            chunk = self._sock.recv(RECEIVE_CHUNK)
        except socket.timeout:
            return False
        self._buffer += chunk
        return bool(chunk)


def connect_websocket(url: str, timeout: float = DEADLINE) -> WebSocket:
    """Open ``ws://host:port/path``: the HTTP upgrade handshake, its Sec-WebSocket-Accept
    checked. No Origin header is sent (DevTools refuses unknown origins, not their absence)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "ws" or not parts.hostname or parts.port is None:
        raise WebSocketError(f"not a ws://host:port URL: {url!r}")
    deadline = time.monotonic() + timeout
    sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
    try:
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
                      f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                      f"Sec-WebSocket-Version: 13\r\n\r\n").encode("ascii"))
        received = bytearray()
        while b"\r\n\r\n" not in received:
            if len(received) > MAX_HANDSHAKE:
                raise WebSocketError(f"handshake answer from {url} longer than {MAX_HANDSHAKE} bytes")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WebSocketError(f"no handshake answer from {url} within {timeout:.0f}s")
            sock.settimeout(remaining)
            chunk = sock.recv(4096)
            if not chunk:
                raise WebSocketError(f"{url} closed the connection during the handshake")
            received += chunk
        head, leftover = bytes(received).split(b"\r\n\r\n", 1)
        check_handshake(head.decode("latin-1"), key, url)
        return WebSocket(sock, leftover, send_timeout=timeout)
    except BaseException:
        sock.close()
        raise


def check_handshake(head: str, key: str, url: str = "the server") -> None:
    """Raise ``WebSocketError`` unless ``head`` (status line and headers) accepts the upgrade
    asked for with ``key``.

    >>> check_handshake("HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\n"
    ...                 "Connection: Upgrade\\r\\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
    ...                 "dGhlIHNhbXBsZSBub25jZQ==")
    >>> check_handshake("HTTP/1.1 403 Forbidden", "dGhlIHNhbXBsZSBub25jZQ==")
    Traceback (most recent call last):
    ...
    browser.WebSocketError: the server refused the WebSocket upgrade: HTTP/1.1 403 Forbidden
    """
    status, *lines = head.split("\r\n")
    fields = status.split(" ", 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/1.") or fields[1] != "101":
        raise WebSocketError(f"{url} refused the WebSocket upgrade: {status}")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("upgrade", "").lower() != "websocket":
        raise WebSocketError(f"{url} answered 101 without 'Upgrade: websocket'")
    if "upgrade" not in [token.strip().lower() for token in headers.get("connection", "").split(",")]:
        raise WebSocketError(f"{url} answered 101 without 'Connection: Upgrade'")
    if headers.get("sec-websocket-accept") != accept_key(key):
        raise WebSocketError(f"{url} answered a wrong Sec-WebSocket-Accept: {headers.get('sec-websocket-accept')!r}")
    for unasked in ("sec-websocket-extensions", "sec-websocket-protocol"):
        if headers.get(unasked):
            raise WebSocketError(f"{url} chose {unasked} {headers[unasked]!r}, which was not offered")


# --- DevTools protocol ----------------------------------------------------------------


class DevToolsSession:
    """DevTools messages over one WebSocket: ``call`` sends a command with a fresh id and
    waits (``timeout`` seconds at most) for its answer; every event that arrives meanwhile
    is appended to ``events`` as ``(method, params)`` and handed to each listener."""

    def __init__(self, websocket: WebSocket, timeout: float = DEADLINE) -> None:
        self.websocket = websocket
        self.timeout = timeout
        self.events: list[tuple[str, dict]] = []
        self._listeners: list[Callable[[str, dict], None]] = []
        self._ids = itertools.count(1)

    def listen(self, listener: Callable[[str, dict], None]) -> None:
        """Call ``listener(method, params)`` for every event from now on."""
        self._listeners.append(listener)

    def call(self, method: str, /, **params: Any) -> dict:
        """Run the command ``method`` with ``params``; its result. Raises ``BrowserError``
        on an error answer or none within ``self.timeout``."""
        ident = next(self._ids)
        self.websocket.send_text(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._next(deadline)
            if message is None:
                raise BrowserError(f"{method}: no answer within {self.timeout:.0f}s")
            if message.get("id") == ident:
                if "error" in message:
                    error = message["error"]
                    raise BrowserError(f"{method} failed: {error.get('message')} {error.get('data', '')}".rstrip())
                return message.get("result", {})
            # an answer to an earlier call that gave up waiting is dropped

    def pump(self, seconds: float) -> None:
        """Record the events that arrive in the next ``seconds`` (a wait that keeps listening)."""
        deadline = time.monotonic() + seconds
        while self._next(deadline) is not None:
            pass

    def wait_event(self, method: str, since: int = 0, timeout: float | None = None,
                   match: Callable[[dict], bool] = lambda params: True) -> int:
        """The index in ``events`` of the first ``method`` event at ``since`` or later whose
        params ``match``, waiting for it at most ``timeout`` seconds (``self.timeout``)."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        position = since
        while True:
            for index in range(position, len(self.events)):
                name, params = self.events[index]
                if name == method and match(params):
                    return index
            position = len(self.events)
            if time.monotonic() >= deadline:
                raise BrowserError(f"no {method} event within {timeout:.0f}s")
            self._next(deadline)

    def _next(self, deadline: float) -> dict | None:
        """The next message (an event is recorded and handed to the listeners first), or
        None at the deadline."""
        text = self.websocket.receive(max(0.0, deadline - time.monotonic()))
        if text is None:
            return None
        message = json.loads(text)
        if "method" in message:
            params = message.get("params", {})
            self.events.append((message["method"], params))
            for listener in self._listeners:
                listener(message["method"], params)
        return message

    def close(self) -> None:
        """Close the WebSocket (the target stays open)."""
        self.websocket.close()


def _remote_text(value: dict) -> str:
    """How the console shows one argument (a DevTools RemoteObject)."""
    if "value" in value:
        return value["value"] if isinstance(value["value"], str) else json.dumps(value["value"])
    return value.get("description") or value.get("unserializableValue") or value.get("type", "")


class Page:
    """One page target: helpers to drive it, and what it produced since it opened
    (``console``: ``{"type", "text"}``, ``exceptions``: descriptions, ``log_entries``: Log
    entries with ``source``, ``level``, ``text``, ``url``, where CSP violations appear;
    ``requests``: every request URL). Made by ``Browser.new_page``."""

    def __init__(self, session: DevToolsSession, target_id: str, browser: Browser | None = None) -> None:
        self.session = session
        self.target_id = target_id
        self.browser = browser
        self.console: list[dict] = []
        self.exceptions: list[str] = []
        self.log_entries: list[dict] = []
        self.requests: list[str] = []
        session.listen(self._record)
        for domain in ("Page", "Runtime", "Log", "Network"):
            session.call(f"{domain}.enable")

    def _record(self, method: str, params: dict) -> None:
        if method == "Runtime.consoleAPICalled":
            self.console.append({"type": params.get("type"),
                                 "text": " ".join(_remote_text(arg) for arg in params.get("args", []))})
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.exceptions.append(details.get("exception", {}).get("description") or details.get("text", ""))
        elif method == "Log.entryAdded":
            self.log_entries.append(params.get("entry", {}))
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))

    def goto(self, url: str, timeout: float | None = None) -> None:
        """Navigate to ``url`` and wait for its load event. Raises ``BrowserError`` when the
        navigation fails (a refused connection, say) or does not load in time."""
        mark = len(self.session.events)
        result = self.session.call("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"navigating to {url} failed: {result['errorText']}")
        loader = result.get("loaderId")
        if loader is None:
            return  # a same-document navigation (a #fragment) loads nothing
        # The load event carries no loader id, so a late one from the page before could be
        # taken for ours: wait for our document to commit first, then for a load after it.
        committed = self.session.wait_event(
            "Page.frameNavigated", since=mark, timeout=timeout,
            match=lambda params: params.get("frame", {}).get("loaderId") == loader)
        self.session.wait_event("Page.loadEventFired", since=committed + 1, timeout=timeout)

    def evaluate(self, expression: str) -> Any:
        """The value of the JavaScript ``expression`` in the page (a promise is awaited),
        as JSON gives it (undefined reads None). Raises ``JavaScriptError`` when it throws."""
        result = self.session.call("Runtime.evaluate", expression=expression, returnByValue=True,
                                   awaitPromise=True, userGesture=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            description = details.get("exception", {}).get("description") or details.get("text", "")
            raise JavaScriptError(f"{expression!r} threw: {description}")
        return result.get("result", {}).get("value")

    def click(self, selector: str) -> None:
        """``element.click()`` on the first element matching the CSS ``selector``; raises
        ``BrowserError`` when none does."""
        found = self.evaluate(f"(() => {{ const element = document.querySelector({json.dumps(selector)});"
                              f" if (!element) return false; element.click(); return true; }})()")
        if not found:
            raise BrowserError(f"no element matches {selector!r}")

    def mouse_click(self, selector: str) -> tuple[float, float]:
        """A real left click (mouse moved, pressed, released) at the centre of the first
        element matching ``selector``, scrolled into view; the point clicked. Raises
        ``BrowserError`` when no element matches or it has no size."""
        box = self.evaluate(f"(() => {{ const element = document.querySelector({json.dumps(selector)});"
                            f" if (!element) return null; element.scrollIntoView({{block: 'center'}});"
                            f" const r = element.getBoundingClientRect();"
                            f" return {{x: r.left, y: r.top, width: r.width, height: r.height}}; }})()")
        if box is None:
            raise BrowserError(f"no element matches {selector!r}")
        if box["width"] <= 0 or box["height"] <= 0:
            raise BrowserError(f"{selector!r} has no size to click ({box['width']}x{box['height']})")
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        self.session.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.session.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
        return x, y

    def wait_for(self, condition: str, timeout: float = DEADLINE, interval: float = 0.05) -> Any:
        """The value of the JavaScript ``condition`` once it is truthy, evaluated again every
        ``interval`` seconds (events are recorded meanwhile); fails the test (AssertionError,
        as ``support.wait_until``) after ``timeout`` seconds."""
        give_up = time.monotonic() + timeout
        while True:
            value = self.evaluate(condition)
            if value:
                return value
            if time.monotonic() >= give_up:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {condition}")
            self.session.pump(interval)

    def screenshot(self) -> bytes:
        """The viewport as a PNG."""
        return base64.b64decode(self.session.call("Page.captureScreenshot", format="png")["data"])

    def set_cookie(self, name: str, value: str, url: str, **attributes: Any) -> None:
        """Set a cookie for ``url`` (``attributes``: httpOnly, sameSite... as Network.setCookie
        takes them)."""
        self.session.call("Network.setCookie", name=name, value=value, url=url, **attributes)

    def close(self) -> None:
        """Close this page's connection and its target."""
        self.session.close()
        if self.browser is not None:
            self.browser.http(f"/json/close/{self.target_id}", method="GET", as_json=False)

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# --- the browser process ----------------------------------------------------------------


def _process_state(pid: int) -> tuple[str, int, int] | None:
    """State letter, parent pid and process group of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def browser_processes(pgid: int, marker: str) -> list[int]:
    """Pids of the live processes (zombies do not count) in process group ``pgid`` or whose
    command line names ``marker`` (Chromium's crash handler leaves the group but names the
    folder it was given)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        state = _process_state(int(entry))
        if state is None or state[0] in ("Z", "X"):
            continue
        if state[2] == pgid or marker in _cmdline(int(entry)):
            found.append(int(entry))
    return found


class Browser:
    """A headless Chromium of its own: a fresh profile in a temp folder, a free debugging
    port (read from DevToolsActivePort), its own process group. On exit (context manager),
    or ``close()``, every process it started is killed and reaped and the folder removed,
    whether or not the test failed. ``new_page()`` opens a page target."""

    def __init__(self, executable: str | None = None, window: tuple[int, int] = WINDOW,
                 timeout: float = DEADLINE) -> None:
        self.executable = executable or find_chromium()
        self.window = window
        self.timeout = timeout
        self.process: subprocess.Popen | None = None
        self.folder: str | None = None
        self.port: int | None = None
        self.websocket_path: str | None = None
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy

    @property
    def pid(self) -> int | None:
        """The browser's process id (its process group's too), None before it starts."""
        return None if self.process is None else self.process.pid

    def __enter__(self) -> Browser:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start Chromium and wait (``timeout``) for its debugging port; on any failure
        everything started is cleaned up before ``BrowserError`` is raised."""
        if self.executable is None:
            raise BrowserError(f"no Chromium found: set {CHROMIUM_ENV} or install chromium")
        self.folder = tempfile.mkdtemp(prefix="rowfleet-chromium-")
        profile = os.path.join(self.folder, "profile")
        os.mkdir(profile)
        # Crash reports and caches go under the folder too (not ~/.config), so the crash
        # handler's command line names it and nothing outlives close().
        env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(self.folder, "config"),
                   XDG_CACHE_HOME=os.path.join(self.folder, "cache"))
        command = [self.executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                   f"--window-size={self.window[0]},{self.window[1]}", "about:blank"]
        try:
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
            self.port, self.websocket_path = self._wait_for_port(os.path.join(profile, "DevToolsActivePort"))
        except BaseException:
            self.close()
            raise

    @property
    def log_path(self) -> str:
        """Where Chromium's output goes (inside the folder, so removed with it)."""
        return os.path.join(self.folder or "", "chromium.log")

    def log_tail(self, lines: int = 20) -> str:
        """The last lines Chromium printed (for a failure message)."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as log:
                return "".join(log.readlines()[-lines:])
        except OSError:
            return ""

    def _wait_for_port(self, path: str) -> tuple[int, str]:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                with open(path) as handle:
                    port, _, browser_path = handle.read().partition("\n")
                if port.strip().isdigit() and browser_path.strip():
                    return int(port), browser_path.strip()
            except FileNotFoundError:
                pass
            if self.process.poll() is not None:
                raise BrowserError(f"{self.executable} exited {self.process.returncode} before it listened:\n"
                                   f"{self.log_tail()}")
            if time.monotonic() >= deadline:
                raise BrowserError(f"{self.executable} wrote no DevToolsActivePort within {self.timeout:.0f}s:\n"
                                   f"{self.log_tail()}")
            time.sleep(POLL)

    def http(self, path: str, method: str = "GET", as_json: bool = True) -> Any:
        """A request to the DevTools HTTP endpoint (``/json/version``, ``/json/new?...``)."""
        if self.port is None:
            raise BrowserError("the browser is not running")
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method)
        with self._opener.open(request, timeout=self.timeout) as answer:
            body = answer.read()
        return json.loads(body) if as_json else body

    def new_page(self, url: str | None = None) -> Page:
        """A new page target with Page, Runtime, Log and Network enabled and a viewport of
        exactly ``window`` (the window's own is smaller: headless keeps room for a frame),
        at ``url`` when given (its load waited for), else blank."""
        target = self.http("/json/new?about:blank", method="PUT")
        session = DevToolsSession(connect_websocket(target["webSocketDebuggerUrl"], self.timeout), self.timeout)
        try:
            page = Page(session, target["id"], self)
            session.call("Emulation.setDeviceMetricsOverride", width=self.window[0], height=self.window[1],
                         deviceScaleFactor=1, mobile=False)
            if url is not None:
                page.goto(url)
        except BaseException:
            session.close()
            raise
        return page

    def close(self) -> None:
        """Kill every process this browser started, reap it, remove its folder. Safe to call
        twice; raises ``BrowserError`` when a process outlives the deadline."""
        try:
            if self.process is not None:
                self._kill()
        finally:
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
            self.port = None

    def _kill(self) -> None:
        process, marker = self.process, self.folder or "\0"
        deadline = time.monotonic() + self.timeout
        while True:
            remaining = browser_processes(process.pid, marker)
            if process.poll() is None:
                remaining.append(process.pid)
            if not remaining:
                return
            if time.monotonic() >= deadline:
                raise BrowserError(f"Chromium processes {sorted(set(remaining))} still alive "
                                   f"{self.timeout:.0f}s after SIGKILL")
            for pid in set(remaining):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                process.wait(POLL)  # reaps the browser itself; the rest are not our children
            except subprocess.TimeoutExpired:
                pass


# --- PNG -----------------------------------------------------------------------------

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_CHANNELS = {2: 3, 6: 4}  # colour type -> bytes per pixel at 8 bits: RGB, RGBA


def png_chunk(kind: bytes, body: bytes) -> bytes:
    """One PNG chunk: length, type, body, CRC.

    >>> png_chunk(b"IEND", b"")
    b'\\x00\\x00\\x00\\x00IEND\\xaeB`\\x82'
    """
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def solid_png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A PNG of one colour (8-bit RGB, filter None): a known image for examples.

    >>> png_pixels(solid_png(2, 1, (255, 0, 0)))
    (2, 1, [b'\\xff\\x00\\x00\\xff\\xff\\x00\\x00\\xff'])
    """
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    raw = (b"\x00" + bytes(rgb) * width) * height
    return PNG_SIGNATURE + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b"")


def unfilter(filter_type: int, line: bytes, previous: bytes, bpp: int) -> bytes:
    """One scanline's bytes from its filtered form (PNG filters 0 None, 1 Sub, 2 Up,
    3 Average, 4 Paeth), given the previous row's (zeros for the first) and bytes per pixel.

    >>> unfilter(1, bytes([10, 1, 1]), bytes(3), 1)
    b'\\n\\x0b\\x0c'
    >>> unfilter(2, bytes([1, 255]), bytes([1, 2]), 1)
    b'\\x02\\x01'
    >>> unfilter(4, bytes([5, 0]), bytes([3, 9]), 1)
    b'\\x08\\t'
    """
    size = len(line)
    if filter_type == 0:
        return bytes(line)
    if filter_type == 1:  # each channel is a running sum, modulo 256
        out = bytearray(size)
        for channel in range(bpp):
            out[channel::bpp] = bytes(map((255).__and__, itertools.accumulate(line[channel::bpp])))
        return bytes(out)
    if filter_type == 2:  # bytewise addition of two rows at once: the low 7 bits add, the top bits XOR
        low, high = int.from_bytes(b"\x7f" * size, "big"), int.from_bytes(b"\x80" * size, "big")
        a, b = int.from_bytes(line, "big"), int.from_bytes(previous, "big")
        return (((a & low) + (b & low)) ^ ((a ^ b) & high)).to_bytes(size, "big")
    if filter_type not in (3, 4):
        raise ValueError(f"unknown PNG filter type {filter_type}")
    out = bytearray(size)
    for i in range(size):
        left = out[i - bpp] if i >= bpp else 0
        up = previous[i]
        if filter_type == 3:
            out[i] = (line[i] + ((left + up) >> 1)) & 255
            continue
        corner = previous[i - bpp] if i >= bpp else 0
        estimate = left + up - corner
        to_left, to_up, to_corner = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
        if to_left <= to_up and to_left <= to_corner:
            predictor = left
        elif to_up <= to_corner:
            predictor = up
        else:
            predictor = corner
        out[i] = (line[i] + predictor) & 255
    return bytes(out)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode a PNG (8-bit RGB or RGBA, not interlaced): width, height and its rows, each
    ``width * 4`` bytes of RGBA (alpha 255 where the image has none). Chunk CRCs are checked;
    anything else raises ``ValueError`` saying what.

    >>> png_pixels(solid_png(1, 2, (0, 128, 255)))
    (1, 2, [b'\\x00\\x80\\xff\\xff', b'\\x00\\x80\\xff\\xff'])
    """
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG: the signature is missing")
    position, header, compressed = len(PNG_SIGNATURE), None, []
    while True:
        if position + 8 > len(data):
            raise ValueError("PNG ends before its IEND chunk")
        length, kind = struct.unpack_from(">I4s", data, position)
        body = data[position + 8:position + 8 + length]
        crc = data[position + 8 + length:position + 12 + length]
        if len(crc) < 4:
            raise ValueError(f"PNG ends inside its {kind!r} chunk")
        if zlib.crc32(kind + body) != int.from_bytes(crc, "big"):
            raise ValueError(f"PNG chunk {kind!r} fails its CRC")
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            compressed.append(body)
        elif kind == b"IEND":
            break
        position += 12 + length
    if header is None:
        raise ValueError("PNG has no IHDR chunk")
    width, height, depth, colour_type, compression, filter_method, interlace = header
    if depth != 8 or colour_type not in PNG_CHANNELS:
        raise ValueError(f"PNG is bit depth {depth}, colour type {colour_type}: "
                         f"only 8-bit RGB (2) and RGBA (6) are read")
    if compression != 0 or filter_method != 0 or interlace != 0:
        raise ValueError(f"PNG uses compression {compression}, filter method {filter_method}, interlace {interlace}: "
                         f"only 0, 0, 0 are read")
    bpp = PNG_CHANNELS[colour_type]
    stride = width * bpp
    raw = zlib.decompress(b"".join(compressed))
    if len(raw) != height * (stride + 1):
        raise ValueError(f"PNG image data holds {len(raw)} bytes, not the {height * (stride + 1)} of {width}x{height}")
    rows, previous = [], bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        previous = unfilter(raw[start], raw[start + 1:start + 1 + stride], previous, bpp)
        rows.append(previous if bpp == 4 else _rgba(previous, width))
    return width, height, rows


def _rgba(row: bytes, width: int) -> bytes:
    out = bytearray(b"\xff" * (width * 4))
    for channel in range(3):
        out[channel::4] = row[channel::3]
    return bytes(out)


def distinct_colours(png: bytes) -> collections.Counter:
    """How many pixels of the PNG have each ``(r, g, b)`` colour (alpha is not counted: a
    screenshot is opaque).

    >>> distinct_colours(solid_png(3, 2, (255, 0, 0)))
    Counter({(255, 0, 0): 6})
    """
    counts: collections.Counter = collections.Counter()
    for row, repeats in collections.Counter(png_pixels(png)[2]).items():  # a page has many identical rows
        for colour, count in collections.Counter(zip(row[0::4], row[1::4], row[2::4])).items():
            counts[colour] += count * repeats
    return counts


def colour_share(png: bytes, rgb: tuple[int, int, int], tolerance: int = 0) -> float:
    """The fraction of the PNG's pixels within ``tolerance`` of ``rgb`` on every channel.

    >>> colour_share(solid_png(2, 2, (250, 4, 0)), (255, 0, 0), tolerance=5)
    1.0
    >>> colour_share(solid_png(2, 2, (250, 4, 0)), (255, 0, 0))
    0.0
    """
    counts = distinct_colours(png)
    near = sum(count for colour, count in counts.items()
               if all(abs(have - want) <= tolerance for have, want in zip(colour, rgb)))
    return near / max(1, sum(counts.values()))
