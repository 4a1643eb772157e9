"""A network namespace joined to this one by a veth pair, for network-partition tests.

Owns one throwaway Linux network namespace per ``NetNamespace``: a veth pair with
``10.77.N.1/30`` on the side in this (the root) namespace and ``10.77.N.2/30`` inside,
loopback up inside. A process started with ``run_inside`` is a box on the far side of a
link the test can break: ``cut()`` drops every packet in both directions (iptables INPUT
DROP on each side, so neither end gets an error, as when a switch dies or a cable is
pulled far away), ``cut(silent=False)`` takes the root side of the link down, ``heal()``
undoes either. tc netem is not used: not every kernel has it.

Needs root and the ``ip`` and ``iptables`` commands. ``require_netns()`` is what tests
call: nothing, or a loud skip naming what is missing (a failure under
``ROWFLEET_REQUIRE_NETNS=1``). N is chosen under a lock file among the slots that no
interface, address or namespace uses, so parallel test runs do not collide.

Teardown always happens: ``close()``, at exit (atexit), and through a small watchdog
process for deaths atexit never sees (SIGKILL): it removes the root side's DROP rule (a
rule naming an interface outlives it), the veth pair and the namespace.

Imports only the stdlib, and nothing from rowfleet: it serves the tests and must not
depend on the code under test.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import subprocess
import sys
import threading
import unittest

ENV_REQUIRE = "ROWFLEET_REQUIRE_NETNS"
TOOLS = ("ip", "iptables")
SUBNET = "10.77"  # 10.77.N.0/30, N in 0..255
SLOTS = 256
LOCK_FILE = "/run/lock/rowfleet-netns.lock" if os.path.isdir("/run/lock") else "/tmp/rowfleet-netns.lock"
COMMAND_TIMEOUT = 30
INSTALL = "apt-get install iptables iproute2"

# The watchdog: waits for its stdin to close. "closed" first means the test process tore
# the namespace down itself; a bare EOF means it died, so run the teardown commands.
WATCHDOG_SOURCE = """\
import json, subprocess, sys
commands = json.loads(sys.argv[1])
if sys.stdin.buffer.read() != b"closed":
    for argv in commands:
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30, cwd="/")
"""


class Unavailable(Exception):
    """A network namespace cannot be made here; the message says why (the skip reason)."""


class NetnsRequired(AssertionError):
    """Network namespaces were required by ROWFLEET_REQUIRE_NETNS=1 but are unavailable."""


def missing() -> str | None:
    """Why this process cannot make a namespace (not root, a tool not installed), or None."""
    if os.geteuid() != 0:
        return "network namespaces and iptables need root"
    absent = [tool for tool in TOOLS if _which(tool) is None]
    if absent:
        return f"{' and '.join(absent)} not installed ({INSTALL})"
    return None


def _which(tool: str) -> str | None:
    # root's tools live in sbin, which a test runner's PATH may leave out
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")


_announced = False


def require_netns(test: unittest.TestCase | None = None) -> None:
    """Return if namespaces can be made here; else skip ``test`` (or raise SkipTest, from
    ``setUpClass``) with one loud line on the real stderr, or fail under
    ``ROWFLEET_REQUIRE_NETNS=1``."""
    global _announced
    reason = missing()
    if reason is None:
        return
    if os.environ.get(ENV_REQUIRE) == "1":
        message = f"network namespaces required by {ENV_REQUIRE}=1 but unavailable: {reason}"
        if test is not None:
            test.fail(message)
        raise NetnsRequired(message)
    if not _announced:
        _announced = True
        # The real stderr: the runner buffers sys.stderr and drops it for skipped tests.
        print(f"*** network partition tests SKIPPED: {reason} ***", file=sys.__stderr__ or sys.stderr, flush=True)
    raise unittest.SkipTest(reason)


class NetNamespace:
    """A namespace and the veth pair to it; ``close()`` (or exit) removes both.

    ``root_address`` is this namespace's end (listen there to be reachable from inside),
    ``inner_address`` the far end, ``subnet`` both (for an allow list such as pg_hba).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[tuple[str, ...]] = []  # iptables rules in place: (namespace or "", *rule)
        self._link_down = False
        self.closed = False
        self._owner_pid = os.getpid()
        with open(LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # chosen and made under one lock: no two runs pick one slot
            self.slot = self._free_slot()
            self.name = f"rowfleet-net{self.slot}"
            self.root_veth, self.inner_veth = f"rfn{self.slot}root", f"rfn{self.slot}ns"
            self.root_address, self.inner_address = f"{SUBNET}.{self.slot}.1", f"{SUBNET}.{self.slot}.2"
            self.subnet = f"{SUBNET}.{self.slot}.0/30"
            self._watchdog = self._start_watchdog()
            atexit.register(self.close)
            try:
                self._create()
            except BaseException:
                self.close()
                raise

    def __repr__(self) -> str:
        return f"NetNamespace({self.name!r}, {self.root_address} <-> {self.inner_address})"

    # --- what tests use -------------------------------------------------------------

    def run_inside(self, argv: list[str], **popen_options) -> subprocess.Popen:
        """Start ``argv`` inside the namespace (``ip netns exec``, which execs it: the Popen's
        pid is the command's own); ``popen_options`` go to ``subprocess.Popen``."""
        return subprocess.Popen([_which("ip"), "netns", "exec", self.name, *argv], **popen_options)

    def cut(self, silent: bool = True) -> None:
        """Break the link. Silent: every packet in either direction is dropped and nobody is
        told (connections hang until their own timeouts). Not silent: the root side of the
        link goes down, so this side loses its route to the far end."""
        if silent:
            self._add_rule("", "-i", self.root_veth)
            self._add_rule(self.name)
        else:
            self._ip("link", "set", self.root_veth, "down")
            self._link_down = True

    def heal(self) -> None:
        """Undo every cut: the DROP rules go, the link comes back up."""
        with self._lock:
            rules, self._rules = self._rules, []
        for namespace, *rule in rules:
            self._iptables(namespace, "-D", "INPUT", *rule, "-j", "DROP")
        if self._link_down:
            self._ip("link", "set", self.root_veth, "up")
            self._link_down = False

    def close(self) -> None:
        """Remove the rules, the veth pair and the namespace (idempotent; a forked child's
        inherited atexit does nothing)."""
        if self.closed or os.getpid() != self._owner_pid:
            return
        self.closed = True
        try:
            self.heal()
        except (Unavailable, OSError, subprocess.SubprocessError):
            pass  # the commands below remove what heal could not
        for argv in self._teardown_commands():
            subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=COMMAND_TIMEOUT)
        if self._watchdog is not None:
            try:
                self._watchdog.communicate(b"closed", timeout=COMMAND_TIMEOUT)
            except (OSError, subprocess.SubprocessError):
                self._watchdog.kill()

    # --- making and unmaking --------------------------------------------------------

    def _free_slot(self) -> int:
        """The first N from one picked by our pid that no interface, address or namespace
        uses (leftovers of a killed run included)."""
        addresses = _output([_which("ip"), "-4", "-o", "address", "show"])
        namespaces = set(_output([_which("ip"), "netns", "list"]).split())
        start = os.getpid() % SLOTS
        for offset in range(SLOTS):
            slot = (start + offset) % SLOTS
            if (f" {SUBNET}.{slot}." not in addresses and f"rowfleet-net{slot}" not in namespaces
                    and not os.path.exists(f"/sys/class/net/rfn{slot}root")):
                return slot
        raise Unavailable(f"all {SLOTS} subnets {SUBNET}.N.0/30 are in use")

    def _create(self) -> None:
        self._ip("netns", "add", self.name)
        self._ip("link", "add", self.root_veth, "type", "veth", "peer", "name", self.inner_veth, "netns", self.name)
        self._ip("address", "add", f"{self.root_address}/30", "dev", self.root_veth)
        self._ip("link", "set", self.root_veth, "up")
        self._ip("-n", self.name, "address", "add", f"{self.inner_address}/30", "dev", self.inner_veth)
        self._ip("-n", self.name, "link", "set", self.inner_veth, "up")
        self._ip("-n", self.name, "link", "set", "lo", "up")

    def _teardown_commands(self) -> list[list[str]]:
        # Deleting the namespace deletes its end of the pair, and so the pair, and its own
        # rules; the root side's rule names an interface and would outlive it.
        return [[_which("iptables"), "-D", "INPUT", "-i", self.root_veth, "-j", "DROP"],
                [_which("ip"), "link", "delete", self.root_veth],
                [_which("ip"), "netns", "delete", self.name]]

    def _start_watchdog(self) -> subprocess.Popen | None:
        import json

        try:
            # Its own session, so the Ctrl-C that kills the test run does not kill it too.
            return subprocess.Popen(
                [sys.executable, "-I", "-c", WATCHDOG_SOURCE, json.dumps(self._teardown_commands())],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, cwd="/",
            )
        except OSError:
            return None  # atexit still tears down on an ordinary exit

    def _add_rule(self, namespace: str, *rule: str) -> None:
        # Inserted first, so no ACCEPT rule already in the chain lets packets by.
        self._iptables(namespace, "-I", "INPUT", "1", *rule, "-j", "DROP")
        with self._lock:
            self._rules.append((namespace, *rule))

    def _iptables(self, namespace: str, *args: str) -> None:
        prefix = [_which("ip"), "netns", "exec", namespace] if namespace else []
        _run([*prefix, _which("iptables"), "-w", *args])

    def _ip(self, *args: str) -> None:
        _run([_which("ip"), *args])


def _run(argv: list[str]) -> None:
    """Run a setup command; raise Unavailable with its output when it fails."""
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    if done.returncode != 0:
        raise Unavailable(f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()}")


def _output(argv: list[str]) -> str:
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    if done.returncode != 0:
        raise Unavailable(f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout
