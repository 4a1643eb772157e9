"""Many projects on one broker

Two applications share one database, each under its own `--project`: billing and search.
Every row carries its project, so billing's worker never claims search's jobs, even on the
same host and queue, and a project whose workers are down simply waits. `rowfleet broker`
is the one view of the whole shared database: every project's queues and counts.
"""

from __future__ import annotations

import sys

import _scenario

BILLING = '''\
import rowfleet


@rowfleet.task(queue="default")
def send_invoice(customer):
    return f"invoice sent to {customer}"
'''
SEARCH = '''\
import rowfleet


@rowfleet.task(queue="default")
def rebuild_index(shard):
    return f"index shard {shard} rebuilt"
'''


def counts(broker_text: str) -> str:
    """The broker's first table (each project's queues and counts); the rest shows times."""
    return broker_text.split("\n\n")[0]


def scenario(s: _scenario.Scenario) -> None:
    s.write("billing.py", BILLING)
    s.write("search.py", SEARCH)
    s.rowfleet("init", show=False)
    invoices = [int(s.rowfleet("--project", "billing", "enqueue", "billing:send_invoice", "--app", "billing",
                               "--args", f'{{"customer": "{name}"}}')) for name in ("ada", "grace")]
    shard = int(s.rowfleet("--project", "search", "enqueue", "search:rebuild_index", "--app", "search",
                           "--args", '{"shard": 4}'))
    s.spawn("billing-worker", "--project", "billing", "worker", "--host", "box-a", "--app", "billing", "--poll", "0.2")
    for job_id in invoices:
        s.wait_for(lambda: s.json("--project", "billing", "job", str(job_id))["state"] == "completed",
                   f"billing's job {job_id} to complete")
    s.rowfleet("broker", show=counts)
    s.check(s.json("--project", "search", "job", str(shard))["state"] == "queued",
            f"search's job {shard} was taken by billing's worker")
    s.note(f"billing's worker ran both invoices and left search's job {shard} alone, on the same host and queue")
    s.spawn("search-worker", "--project", "search", "worker", "--host", "box-a", "--app", "search", "--poll", "0.2")
    s.wait_for(lambda: s.json("--project", "search", "job", str(shard))["state"] == "completed",
               f"search's job {shard} to complete")
    s.stop("billing-worker")
    s.stop("search-worker")
    s.rowfleet("broker", show=counts)
    s.rowfleet("--project", "search", "jobs", show=lambda text: "\n".join(
        line.rsplit("  ", 1)[0].rstrip() for line in text.splitlines()))
    s.note("each project's worker ran its own project's jobs only")


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
