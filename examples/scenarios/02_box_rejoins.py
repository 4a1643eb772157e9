"""A box boots and rejoins

A worker may start before its database does: here box-a's worker is started in an empty
folder, waits for the schema, and serves as soon as `rowfleet init` creates it. Later the
box crashes in the middle of a long job and boots again, and the same command rejoins the
fleet. No orchestrator runs: before its first heartbeat, the fresh worker finds that the
worker holding the job is gone from this host (its pid names no process, or a later one)
and hands the job back at once, listing the crashed worker as dead; then it runs the job.
"""

from __future__ import annotations

import sys

import _scenario

TASKS = '''\
import os
import time

import rowfleet


@rowfleet.task(queue="ingest")
def ingest(batch):
    if batch == 2 and not os.path.exists("batch-2-started"):
        open("batch-2-started", "w").close()
        time.sleep(600)  # long: the box crashes in here
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
    s.wait_for(lambda: workers_now(s, "serving"), "box-a's worker to join once the schema exists")
    first = int(s.rowfleet("enqueue", "tasks:ingest", "--app", "tasks", "--args", '{"batch": 1}'))
    s.wait_job(first, "completed")
    s.show_job(first)
    second = int(s.rowfleet("enqueue", "tasks:ingest", "--app", "tasks", "--args", '{"batch": 2}'))
    s.wait_for(lambda: s.path("batch-2-started").exists(), "box-a to be in the middle of batch 2")
    s.note("the box crashes in the middle of batch 2 (every process of it dies at once), then boots and runs "
           "the same command; no orchestrator runs")
    s.kill_group("box-a")
    s.spawn("box-a", *WORKER)
    s.wait_job(second, "completed")
    job = s.show_job(second)
    s.check(s.history(second) == ["claimed", "worker_gone", "claimed", "completed"],
            f"batch 2's history is {s.history(second)}")
    gone = [event for event in job["events"] if event["kind"] == "worker_gone"][0]
    s.check("handed back by worker box-a:" in gone["detail"]["reason"], f"the hand-back says {gone['detail']}")
    s.note("the rebooted worker handed batch 2 back before its first heartbeat: its predecessor's process was gone")
    rows = s.show_workers()
    s.check([(row["actual"], bool(row["flagged_dead_at"])) for row in rows] == [("SILENT", True), ("serving", False)],
            f"box-a's rows are {[(row['actual'], row['flagged_dead_at']) for row in rows]}")
    s.note("the crashed worker's row is flagged dead; the rebooted one serves")
    s.stop("box-a")


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
