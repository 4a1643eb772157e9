"""A multi-step DAG

A nightly ETL as a workflow file: `extract` feeds two branches, `clean` and `profile`, and
`report` waits for both. `rowfleet run` snapshots the definition and queues the first node;
a worker runs each node's job and the orchestrator drains the outbox, enqueueing a node
once everything it depends on is done, with the upstream results resolved into its args.
`profile` fails its first attempt and is retried like any job; the run still completes,
and `rowfleet runs ID` shows every node with its attempts and result.
"""

from __future__ import annotations

import sys

import _scenario

TASKS = '''\
import rowfleet


@rowfleet.task
def extract(day):
    return {"day": day, "rows": [3, 1, 2]}


@rowfleet.task
def clean(rows):
    return sorted(rows)


@rowfleet.task
def profile(rows):
    if rowfleet.current_job().attempts == 1:
        raise ConnectionError("stats service timed out")  # a transient fault: retried
    return {"count": len(rows), "total": sum(rows)}


@rowfleet.task
def report(day, rows, stats):
    return f"{day}: {stats['count']} rows, total {stats['total']}, sorted {rows}"
'''
FLOW = '''\
{"name": "nightly-etl", "nodes": [
  {"id": "extract", "task": "etl:extract", "args": {"day": {"$from": "$args.day"}}},
  {"id": "clean", "task": "etl:clean", "depends_on": ["extract"],
   "args": {"rows": {"$from": "extract.rows"}}},
  {"id": "profile", "task": "etl:profile", "depends_on": ["extract"],
   "args": {"rows": {"$from": "extract.rows"}}},
  {"id": "report", "task": "etl:report", "depends_on": ["clean", "profile"],
   "args": {"day": {"$from": "$args.day"}, "rows": {"$from": "clean"}, "stats": {"$from": "profile"}}}
]}
'''


def scenario(s: _scenario.Scenario) -> None:
    s.write("etl.py", TASKS)
    s.write("nightly.json", FLOW)
    s.rowfleet("init", show=False)
    run_id = int(s.rowfleet("run", "nightly.json", "--app", "etl", "--args", '{"day": "2024-05-01"}'))
    s.rowfleet("runs", str(run_id))
    s.spawn("orchestrator", "orchestrator", "--interval", "0.2")
    s.spawn("worker", "worker", "--host", "box-a", "--app", "etl", "--poll", "0.2", "--backoff-base", "0.1")
    run = s.wait_for(lambda: (run := s.json("runs", str(run_id)))["state"] in ("completed", "failed") and run,
                     f"run {run_id} to finish")
    s.rowfleet("runs", str(run_id))
    nodes = {node["id"]: node for node in run["nodes"]}
    s.check(run["state"] == "completed", f"run {run_id} ended {run['state']}: {run['error']}")
    s.check(nodes["profile"]["attempts"] == 2, f"profile took {nodes['profile']['attempts']} attempts")
    jobs = {name: s.job(node["jobs"][0]) for name, node in nodes.items()}
    report_start = _scenario.timestamp(jobs["report"]["started_at"])
    s.check(all(_scenario.timestamp(jobs[name]["finished_at"]) <= report_start for name in ("clean", "profile")),
            "report started before both of its dependencies finished")
    s.note("report started only after clean and profile had both completed")
    s.show_job(nodes["profile"]["jobs"][0])
    s.stop("worker")
    s.stop("orchestrator")


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
