"""A shared queue keeps each customer to its share

Two customers share the `api` queue of a fleet with three worker processes. The operator
limits the queue to two running jobs and each customer (the jobs' `--concurrency-key`) to
one, by one row that every worker reads at its next poll. The third worker stays idle while
acme's second job waits: `rowfleet job` says which limit holds it, `rowfleet limits` shows
the queue at its limit. The handlers' own records show that no more ran at once than the
limits allow, and no job was claimed and handed back.
"""

from __future__ import annotations

import sys

import _scenario

TASKS = '''\
import os
import time

import rowfleet


@rowfleet.task(queue="api")
def call(customer):
    job = rowfleet.current_job()
    with open("calls.log", "a") as log:
        log.write(f"{time.time()} start {customer} {job.id}\\n")
    give_up = time.monotonic() + 120
    while not os.path.exists("go") and time.monotonic() < give_up:
        time.sleep(0.01)  # the scenario opens this gate once it has looked
    with open("calls.log", "a") as log:
        log.write(f"{time.time()} end {customer} {job.id}\\n")
'''


def enqueue(s: _scenario.Scenario, customer: str) -> int:
    return int(s.rowfleet("enqueue", "tasks:call", "--app", "tasks", "--args", f'{{"customer": "{customer}"}}',
                          "--concurrency-key", customer))


def most_at_once(lines: list[str], customer: str | None = None) -> int:
    running = most = 0
    for line in lines:
        _, what, who, _ = line.split()
        if customer is None or who == customer:
            running += 1 if what == "start" else -1
            most = max(most, running)
    return most


def scenario(s: _scenario.Scenario) -> None:
    s.write("tasks.py", TASKS)
    s.rowfleet("init", show=False)
    s.rowfleet("limit", "api", "--concurrency", "2", "--per-key", "1", "--by", "ops")
    jobs = [enqueue(s, customer) for customer in ("acme", "acme", "globex", "acme")]
    s.spawn("box-a", "worker", "--host", "box-a", "--queue", "api", "--app", "tasks", "--procs", "3",
            "--no-sampler", "--poll", "0.2")
    s.wait_for(lambda: s.job_in(jobs[0], "running") and s.job_in(jobs[2], "running"), "acme's and globex's first jobs")
    s.note("two run: acme's first and globex's; acme's second waits, though a worker is idle")
    s.rowfleet("job", str(jobs[1]), show=lambda text: "\n".join(line for line in text.splitlines()
                                                                  if "not running" in line or "key" in line))
    s.rowfleet("limits", show=lambda text: "\n".join(line.rsplit("  ", 1)[0].rstrip() for line in text.splitlines()))
    s.out("$ touch go    # the calls may end")
    s.path("go").touch()
    for job_id in jobs:
        s.wait_job(job_id, "completed")
    lines = sorted(s.path("calls.log").read_text().splitlines(), key=lambda line: float(line.split()[0]))
    s.check(most_at_once(lines) <= 2 and most_at_once(lines, "acme") == 1, f"calls: {lines}")
    attempts = [s.job(job_id)["attempts"] for job_id in jobs]
    s.check(attempts == [1, 1, 1, 1], f"attempts {attempts}")
    s.note(f"all {len(jobs)} completed, each on its first attempt; at most 2 calls ran at once, "
           f"at most {most_at_once(lines, 'acme')} of acme's")
    s.stop("box-a")


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
