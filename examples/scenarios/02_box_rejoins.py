"""A box boots and rejoins

A worker may start before its database does: here box-a's worker is started in an empty
folder, waits for the schema, and serves as soon as `rowfleet init` creates it. Later the
box crashes and boots again, and the same command rejoins the fleet. The crashed worker's
row stops beating; the orchestrator recognises it as dead (three missed heartbeats of its
own cadence), while the fresh worker on the same box serves the next job.
"""

from __future__ import annotations

import sys

import _scenario

TASKS = '''\
import rowfleet


@rowfleet.task(queue="ingest")
def ingest(batch):
    return f"batch {batch} ingested"
'''
WORKER = ("worker", "--host", "box-a", "--queue", "ingest", "--app", "tasks", "--procs", "1", "--no-sampler",
          "--poll", "0.2", "--heartbeat", "0.5")


def workers_now(s: _scenario.Scenario, actual: str) -> set[str]:
    """The ids of the workers whose rows read ``actual`` now."""
    return {row["worker_id"] for row in s.json("workers")["workers"] if row["actual"] == actual}


def scenario(s: _scenario.Scenario) -> None:
    s.write("tasks.py", TASKS)
    s.note("the box boots before the database exists: its worker waits for the schema")
    s.spawn("box-a", *WORKER)
    s.wait_for(lambda: "waiting for the database" in s.log("box-a"), "box-a's worker to wait for the database")
    s.out("$ grep -m1 -o 'waiting for the database.*' box-a.log")
    s.out(s.log("box-a")[s.log("box-a").index("waiting for the database"):].split("\n")[0])
    s.rowfleet("init", show=False)
    crashed = s.wait_for(lambda: workers_now(s, "serving"), "box-a's worker to join once the schema exists")
    first = int(s.rowfleet("enqueue", "tasks:ingest", "--app", "tasks", "--args", '{"batch": 1}'))
    s.wait_job(first, "completed")
    s.show_job(first)
    s.note("the box crashes (every process of it dies at once), then boots and runs the same command")
    s.kill_group("box-a")
    s.wait_for(lambda: crashed <= workers_now(s, "SILENT"), "the crashed worker's row to fall silent")
    s.spawn("box-a", *WORKER)
    s.wait_for(lambda: workers_now(s, "serving") - crashed, "the rebooted worker to join")
    s.rowfleet("orchestrator", "--once", "--heartbeat", "0.5", show=False)
    second = int(s.rowfleet("enqueue", "tasks:ingest", "--app", "tasks", "--args", '{"batch": 2}'))
    s.wait_job(second, "completed")
    s.show_job(second)
    rows = s.show_workers()
    s.check([(row["actual"], bool(row["flagged_dead_at"])) for row in rows] == [("SILENT", True), ("serving", False)],
            f"box-a's rows are {[(row['actual'], row['flagged_dead_at']) for row in rows]}")
    s.note("the crashed worker's row is silent and flagged dead; the rebooted one serves")
    s.stop("box-a")


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
