"""A human in the loop

A release workflow drafts its notes, then waits for a person: an `input` node parks the run
in `awaiting_input`, holding no worker, for as long as the decision takes. `rowfleet submit`
gives the node its result; the orchestrator moves the run on, and the publish step reads
the reviewer's answer like any upstream result. A second answer for the same node is
refused.
"""

from __future__ import annotations

import sys

import _scenario

TASKS = '''\
import rowfleet


@rowfleet.task
def draft(version):
    return f"Release notes for {version}"


@rowfleet.task
def publish(notes, review):
    return f"published {notes!r}, approved by {review['by']}"
'''
FLOW = '''\
{"name": "release", "nodes": [
  {"id": "draft", "task": "release:draft", "args": {"version": {"$from": "$args.version"}}},
  {"id": "approve", "kind": "input", "prompt": "Publish these notes?", "depends_on": ["draft"]},
  {"id": "publish", "task": "release:publish", "depends_on": ["approve"],
   "skip_if": {"$from": "approve.approved", "equals": false},
   "args": {"notes": {"$from": "draft"}, "review": {"$from": "approve"}}}
]}
'''


def run_in(s: _scenario.Scenario, run_id: int, state: str) -> bool:
    return s.json("runs", str(run_id))["state"] == state


def scenario(s: _scenario.Scenario) -> None:
    s.write("release.py", TASKS)
    s.write("release.json", FLOW)
    s.rowfleet("init", show=False)
    run_id = int(s.rowfleet("run", "release.json", "--app", "release", "--args", '{"version": "2.4"}'))
    s.spawn("orchestrator", "orchestrator", "--interval", "0.2")
    s.spawn("worker", "worker", "--host", "box-a", "--app", "release", "--poll", "0.2")
    s.wait_for(lambda: run_in(s, run_id, "awaiting_input"), f"run {run_id} to wait for its reviewer")
    s.rowfleet("runs", str(run_id))
    s.check(s.json("jobs") and all(job["state"] == "completed" for job in s.json("jobs")), "a job still holds a worker")
    s.note("the run waits for a person, and holds no worker meanwhile")
    value = '{"approved": true, "by": "ana"}'
    s.rowfleet("submit", str(run_id), "approve", "--value", value)
    s.wait_for(lambda: run_in(s, run_id, "completed"), f"run {run_id} to complete after the review")
    s.rowfleet("runs", str(run_id))
    s.rowfleet("submit", str(run_id), "approve", "--value", '{"approved": false, "by": "bob"}', code=1)
    s.note("the second answer was refused: the node has its result")
    s.stop("worker")
    s.stop("orchestrator")


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
