"""A real Prometheus server scrapes the exporter: it must accept our text and the bearer
token, and its query API must return the finished-job counter we produced.

Starts Debian's ``prometheus`` (a temp folder for its data, a free loopback port, a 1 s
scrape interval) against ``rowfleet.services.exporter`` serving a SQLite database on 127.0.0.1.
Skipped loudly without ``prometheus``; failed instead under ``ROWFLEET_REQUIRE_PROMETHEUS=1``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import unittest
import urllib.parse
import urllib.request

from rowfleet.claim import Claim
from rowfleet.job import COMPLETED, JobSpec, Outcome
from rowfleet.services import exporter
from support import DEADLINE, TempDirTestCase, require_tool, serve_in_background, wait_until

PROMETHEUS_ENV = "ROWFLEET_REQUIRE_PROMETHEUS"
TOKEN = "pr0metheus-scrapes"
START_ATTEMPTS = 3  # a free port found by binding port 0 can be taken before prometheus binds it
CONFIG = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: rowfleet
    authorization:
      credentials: {token}
    static_configs:
      - targets: ["{target}"]
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PrometheusScrapeTest(TempDirTestCase):
    SLOW = True  # a real Prometheus to start: --quick leaves it out

    def setUp(self) -> None:
        super().setUp()
        self.prometheus = require_tool(self, "prometheus", PROMETHEUS_ENV)
        self.store = self.open_store()

    def serve(self) -> exporter.MetricsServer:
        return serve_in_background(self, exporter.make_server(self.config(), "127.0.0.1", 0, token=TOKEN))

    def start_prometheus(self, target: str) -> tuple[subprocess.Popen, str]:
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as handle:
            handle.write(CONFIG.format(token=TOKEN, target=target))
        for attempt in range(START_ATTEMPTS):
            port = free_port()
            self.log_path = os.path.join(self.dir, f"prometheus-{attempt}.log")
            with open(self.log_path, "w") as log:
                process = subprocess.Popen(
                    [self.prometheus, f"--config.file={config}",
                     f"--storage.tsdb.path={os.path.join(self.dir, f'data-{attempt}')}",
                     f"--web.listen-address=127.0.0.1:{port}"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
            self.addCleanup(self.kill, process)
            url = f"http://127.0.0.1:{port}"
            self.wait(lambda: process.poll() is not None or self.answers(f"{url}/-/ready"), "prometheus to be ready")
            if process.poll() is None:
                return process, url
            if "address already in use" not in self.log_tail():
                self.fail(f"prometheus exited {process.returncode}:\n{self.log_tail()}")
        self.fail(f"prometheus found no free port in {START_ATTEMPTS} attempts:\n{self.log_tail()}")

    def wait(self, condition, what: str):
        """``wait_until``, failing with prometheus' own last lines."""
        try:
            return wait_until(condition, timeout=60, message=what)
        except AssertionError as exc:
            self.fail(f"{exc}; prometheus' log ends:\n{self.log_tail()}")

    def answers(self, url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    def query(self, url: str, expression: str) -> list[dict]:
        try:
            with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expression})}",
                                        timeout=5) as response:
                answer = json.load(response)
        except OSError:
            return []
        return answer["data"]["result"] if answer.get("status") == "success" else []

    def log_tail(self) -> str:
        with open(self.log_path) as log:
            return "".join(log.readlines()[-15:])

    def kill(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            process.kill()
        process.wait(DEADLINE)

    def test_prometheus_scrapes_the_finished_jobs_counter(self):
        for _ in range(3):
            self.store.enqueue(JobSpec(task="app:work", queue="q"))
            self.store.finish(self.store.claim(Claim("", "q", "box:1", lease=60)), Outcome(COMPLETED, result=None))
        self.store.fold_tallies()
        server = self.serve()
        process, url = self.start_prometheus(f"127.0.0.1:{server.server_address[1]}")

        def counted() -> list[dict]:
            found = self.query(url, 'rowfleet_jobs_finished_total{queue="q",task="app:work",state="completed"}')
            return found if found and found[0]["value"][1] == "3" else []

        found = self.wait(counted, "prometheus to hold the counter we produced")
        self.assertEqual(found[0]["metric"]["job"], "rowfleet")
        health = self.query(url, 'up{job="rowfleet"}')
        self.assertEqual(health[0]["value"][1], "1", "the scrape itself succeeded")
        samples = self.query(url, 'scrape_samples_scraped{job="rowfleet"}')
        self.assertGreater(int(samples[0]["value"][1]), 0)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            self.fail(f"prometheus still running {DEADLINE:.0f}s after SIGTERM:\n{self.log_tail()}")
        self.assertEqual(process.returncode, 0, self.log_tail())


if __name__ == "__main__":
    unittest.main()
