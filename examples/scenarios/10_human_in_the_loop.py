"""A human in the loop

A release workflow drafts its notes, then waits for a person: an `input` node parks the run
in `awaiting_input`, holding no worker, for as long as the decision takes. The node asks with
a spec: a prompt and a `choose_one` widget whose options are the channels the draft step
returned, resolved when the run reached the node. `rowfleet runs` shows the question and its
options; `rowfleet submit` refuses an answer that is not one of them (one line, nothing
stored) and takes one that is; the run moves on, and the publish step reads the reviewer's
choice like any upstream result. A second answer for the same node is refused.
"""

from __future__ import annotations

import sys

import _scenario

TASKS = '''\
import rowfleet


@rowfleet.task
def draft(version):
    return {"notes": f"Release notes for {version}", "channels": ["stable", "beta", "hold"]}


@rowfleet.task
def publish(notes, channel):
    return f"published {notes!r} to {channel}"
'''
FLOW = '''\
{"name": "release", "nodes": [
  {"id": "draft", "task": "release:draft", "args": {"version": {"$from": "$args.version"}}},
  {"id": "approve", "kind": "input", "prompt": "Publish these notes to which channel?",
   "widget": "choose_one", "options": {"$from": "draft.channels"}, "depends_on": ["draft"]},
  {"id": "publish", "task": "release:publish", "depends_on": ["approve"],
   "skip_if": {"$from": "approve", "equals": "hold"},
   "args": {"notes": {"$from": "draft.notes"}, "channel": {"$from": "approve"}}}
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
    approve = next(node for node in s.json("runs", str(run_id))["nodes"] if node["id"] == "approve")
    s.check(approve["options"] == ["stable", "beta", "hold"], f"the options shown are {approve['options']}")
    s.note("the run waits for a person, and holds no worker meanwhile; it asks with the draft's channels")
    s.rowfleet("submit", str(run_id), "approve", "--value", "nightly", code=2)
    s.check(run_in(s, run_id, "awaiting_input"), "a refused answer moved the run")
    s.note("not one of the options: refused in one line, and nothing was stored")
    s.rowfleet("submit", str(run_id), "approve", "--value", "beta")
    s.wait_for(lambda: run_in(s, run_id, "completed"), f"run {run_id} to complete after the review")
    s.rowfleet("runs", str(run_id))
    s.rowfleet("submit", str(run_id), "approve", "--value", "stable", code=1)
    s.note("the second answer was refused: the node has its result")
    s.stop("worker")
    s.stop("orchestrator")


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
