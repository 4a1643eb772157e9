"""Periodic ingest

A schedule file asks for a price pull every second (a real one would say `"cron": "*/5 *
* * *"`). Two `rowfleet scheduler` processes run it, for availability, on two hosts; a
slot is a unique key written in the same transaction as its job, so each slot fires
exactly one job however many schedulers see it. A worker runs the pulls as they come.
"""

from __future__ import annotations

import json
import sys

import _scenario

TASKS = '''\
import rowfleet


@rowfleet.task(queue="ingest")
def pull(source):
    return f"pulled {source}"
'''
SCHEDULES = '''\
[{"name": "pull-prices", "task": "feeds:pull", "every": 1, "args": {"source": "prices"}}]
'''
SLOTS = 3  # how many slots to watch fire


def fired(s: _scenario.Scenario) -> list[dict]:
    """The slots fired so far, each with its job."""
    return [slot for schedule in s.json("schedules", "--limit", "1000") for slot in schedule["recent"]]


def scenario(s: _scenario.Scenario) -> None:
    s.write("feeds.py", TASKS)
    s.write("schedules.json", SCHEDULES)
    s.rowfleet("init", show=False)
    for host in ("sched-a", "sched-b"):
        s.spawn(host, "scheduler", "--host", host, "--schedule", "schedules.json", "--app", "feeds")
    s.spawn("worker", "worker", "--host", "box-a", "--queue", "ingest", "--app", "feeds", "--poll", "0.2")
    s.wait_for(lambda: len(fired(s)) >= SLOTS, f"{SLOTS} slots to fire")
    s.stop("sched-a")
    s.stop("sched-b")
    slots = fired(s)
    jobs = s.wait_for(lambda: all_completed(s.json("jobs", "--limit", "1000")), "the worker to run every pull")
    s.out("$ rowfleet schedules --json")
    s.check(len({slot["slot"] for slot in slots}) == len(slots), f"a slot fired twice: {slots}")
    s.check(sorted(slot["job_id"] for slot in slots) == sorted(job["id"] for job in jobs),
            f"slots {slots} against jobs {[job['id'] for job in jobs]}")
    s.check({slot["fired_by"].rsplit(":", 1)[0] for slot in slots} <= {"sched-a", "sched-b"}, f"fired by {slots}")
    s.out("pull-prices: every slot fired once, each with a job of its own, by sched-a or sched-b")
    s.out("$ rowfleet jobs --state completed --json")
    s.check({json.dumps(job["result"]) for job in jobs} == {'"pulled prices"'}, f"results of {jobs}")
    s.out('as many completed pulls as slots fired, each with the result "pulled prices"')
    s.note("two schedulers, one job per slot: no slot fired twice and none without its job")
    s.stop("worker")


def all_completed(jobs: list[dict]) -> list[dict]:
    """``jobs`` when every one has completed, else nothing."""
    return jobs if all(job["state"] == "completed" for job in jobs) else []


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
