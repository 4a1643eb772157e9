"""An answer written by another program's SQL

A release workflow waits for a person at an `input` node, and the person answers in another
program (here a small chat bot) that knows nothing of rowfleet: it inserts a row into the
`submissions` table of the shared database, naming the run, the node and the answer as JSON.
No orchestrator runs when it does, and nothing is lost: the rows wait, `pending`. The
orchestrator that starts next judges each as `rowfleet submit` would: the bot's first
answer is not one of the node's options and fails alone, with the reason on its row; the
second is applied in the transaction that marks it `processed`, the run moves on, and the
publish step runs once.
"""

from __future__ import annotations

import json
import subprocess
import sys

import _scenario

TASKS = '''\
import rowfleet


@rowfleet.task
def draft(version):
    return {"notes": f"Release notes for {version}", "channels": ["stable", "beta"]}


@rowfleet.task
def publish(notes, channel):
    return f"published {notes!r} to {channel}"
'''
FLOW = '''\
{"name": "release", "nodes": [
  {"id": "draft", "task": "release:draft", "args": {"version": {"$from": "$args.version"}}},
  {"id": "approve", "kind": "input", "prompt": "Publish to which channel?",
   "widget": "choose_one", "options": {"$from": "draft.channels"}, "depends_on": ["draft"]},
  {"id": "publish", "task": "release:publish", "depends_on": ["approve"],
   "args": {"notes": {"$from": "draft.notes"}, "channel": {"$from": "approve"}}}
]}
'''
BOT = '''\
# Another program's answer: one plain INSERT into the database rowfleet uses.
import json
import sqlite3
import sys

run_id, node, answer = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with sqlite3.connect("rowfleet.db") as db:
    db.execute("INSERT INTO submissions (project, run_id, node_id, value, submitted_by) "
               "VALUES ('', ?, ?, ?, 'chat-bot')", (run_id, node, json.dumps(answer)))
'''


def run_state(s: _scenario.Scenario, run_id: int) -> str:
    return s.json("runs", str(run_id))["state"]


def bot(s: _scenario.Scenario, *args: str) -> None:
    """Run the bot as a reader would, in the scenario's folder."""
    s.out(f"$ python bot.py {' '.join(args)}")
    result = subprocess.run([sys.executable, "bot.py", *args], cwd=s.dir, capture_output=True, text=True,
                            timeout=_scenario.DEADLINE)
    s.check(result.returncode == 0, f"the bot exited {result.returncode}: {result.stderr.strip()[-300:]}")


def show_submissions(s: _scenario.Scenario) -> list[dict]:
    """``rowfleet submissions --json``, digested: id, node, value, state, who, and the error."""
    s.out("$ rowfleet submissions --json")
    rows = s.json("submissions")
    for row in reversed(rows):
        error = f": {row['error']}" if row["error"] else ""
        s.out(f"submission {row['id']} run {row['run_id']} {row['node_id']} = {json.dumps(row['value'])} "
              f"by {row['submitted_by']}: {row['state']}{error}")
    return rows


def scenario(s: _scenario.Scenario) -> None:
    s.write("release.py", TASKS)
    s.write("release.json", FLOW)
    s.write("bot.py", BOT)
    s.rowfleet("init", show=False)
    run_id = int(s.rowfleet("run", "release.json", "--app", "release", "--args", '{"version": "2.5"}'))
    s.spawn("orchestrator", "orchestrator", "--interval", "0.2", "--poll", "0.2")
    s.spawn("worker", "worker", "--host", "box-a", "--app", "release", "--poll", "0.2")
    s.wait_for(lambda: run_state(s, run_id) == "awaiting_input", f"run {run_id} to wait for its reviewer")
    s.stop("orchestrator")
    s.note("the run waits for its answer, and no orchestrator runs")
    bot(s, str(run_id), "approve", "nightly")
    bot(s, str(run_id), "approve", "beta")
    rows = show_submissions(s)
    s.check([row["state"] for row in rows] == ["pending", "pending"], f"the bot's rows are {rows}")
    s.check(run_state(s, run_id) == "awaiting_input", "an answer was applied with no orchestrator")
    s.note("both answers wait in the table; the run has not moved")
    s.spawn("orchestrator", "orchestrator", "--interval", "0.2", "--poll", "0.2")
    s.wait_for(lambda: run_state(s, run_id) == "completed", f"run {run_id} to complete after the answer")
    rows = show_submissions(s)
    s.check([row["state"] for row in rows] == ["processed", "failed"], f"the bot's rows are {rows}")
    s.note("the answer that is no option failed alone, saying why; the next was applied")
    s.rowfleet("runs", str(run_id))
    publishes = [job for job in s.json("jobs") if job["task"] == "release:publish"]
    s.check([(job["state"], job["attempts"]) for job in publishes] == [("completed", 1)],
            f"publish ran as {publishes}")
    s.note("the run moved on and published once")
    s.stop("worker")
    s.stop("orchestrator")


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
