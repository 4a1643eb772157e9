"""Periodic ingest

A schedule file asks for a price pull every second (a real one would say `"cron": "*/5 *
* * *"`) and a weekly index rebuild that also runs when a scheduler boots after missing
it (`at_boot`). Two `rowfleet scheduler` processes run them, for availability, on two
hosts; a slot is a unique key written in the same transaction as its job, so each slot
fires exactly one job however many schedulers see it. An operator fires a pull by hand
(`rowfleet fire`), recorded the same way. Each job carries why it fired (`tick`: on time,
`boot`, `catch_up`, `manual`), which its handler reads from `rowfleet.current_job()` and
`rowfleet schedules` shows. A worker runs the jobs as they come.
"""

from __future__ import annotations

import json
import sys

import _scenario

TASKS = '''\
import rowfleet


@rowfleet.task(queue="ingest")
def pull(source):
    return f"pulled {source} ({rowfleet.current_job().fire_reason})"


@rowfleet.task(queue="ingest")
def rebuild_index():
    return f"rebuilt the index ({rowfleet.current_job().fire_reason})"
'''
SCHEDULES = '''\
[{"name": "pull-prices", "task": "feeds:pull", "every": 1, "args": {"source": "prices"}},
 {"name": "rebuild-index", "task": "feeds:rebuild_index", "cron": "0 3 * * 0", "at_boot": true}]
'''
SLOTS = 3  # how many slots of the pull to watch fire


def fired(s: _scenario.Scenario) -> dict[str, list[dict]]:
    """The slots fired so far, each with its job and why, by schedule."""
    return {schedule["name"]: schedule["recent"] for schedule in s.json("schedules", "--limit", "1000")}


def scenario(s: _scenario.Scenario) -> None:
    s.write("feeds.py", TASKS)
    s.write("schedules.json", SCHEDULES)
    s.rowfleet("init", show=False)
    for host in ("sched-a", "sched-b"):
        s.spawn(host, "scheduler", "--host", host, "--schedule", "schedules.json", "--app", "feeds")
    s.spawn("worker", "worker", "--host", "box-a", "--queue", "ingest", "--app", "feeds", "--poll", "0.2")
    s.wait_for(lambda: len(fired(s).get("pull-prices", [])) >= SLOTS and fired(s).get("rebuild-index"),
               f"{SLOTS} slots of the pull and the rebuild at boot to fire")
    by_hand = int(s.rowfleet("fire", "pull-prices", "--schedule", "schedules.json", "--app", "feeds", show=False))
    s.note("it printed the id of the job it enqueued, for this moment")
    s.stop("sched-a")
    s.stop("sched-b")
    slots = fired(s)
    jobs = s.wait_for(lambda: all_completed(s.json("jobs", "--limit", "1000")), "the worker to run every job")
    s.out("$ rowfleet schedules --json")
    pulls, rebuilds = slots["pull-prices"], slots["rebuild-index"]
    s.check(len({slot["slot"] for slot in pulls}) == len(pulls), f"a slot fired twice: {pulls}")
    s.check(sorted(slot["job_id"] for slot in pulls + rebuilds) == sorted(job["id"] for job in jobs),
            f"slots {slots} against jobs {[job['id'] for job in jobs]}")
    s.check([slot["job_id"] for slot in pulls if slot["reason"] == "manual"] == [by_hand], f"by hand: {pulls}")
    on_time = [slot for slot in pulls if slot["job_id"] != by_hand]
    s.check({slot["reason"] for slot in on_time} == {"tick"}, f"reasons of {pulls}")
    s.check({slot["fired_by"].rsplit(":", 1)[0] for slot in on_time + rebuilds} <= {"sched-a", "sched-b"},
            f"fired by {slots}")
    s.out("pull-prices: every slot fired once, each with a job of its own: on time (tick) by sched-a or sched-b, "
          "one by hand (manual)")
    s.check([slot["reason"] for slot in rebuilds] == ["boot"], f"the rebuild: {rebuilds}")
    s.out("rebuild-index: its missed weekly slot fired once, when the schedulers booted (boot)")
    s.out("$ rowfleet jobs --state completed --json")
    results = {job["id"]: job["result"] for job in jobs}
    s.check(all(job["fire_reason"] in job["result"] for job in jobs), f"results of {jobs}")
    s.check(results[by_hand] == "pulled prices (manual)", f"the pull by hand: {jobs}")
    s.check(results[rebuilds[0]["job_id"]] == "rebuilt the index (boot)", f"the rebuild: {jobs}")
    s.check({results[slot["job_id"]] for slot in on_time} == {"pulled prices (tick)"}, f"results of {jobs}")
    s.out('as many completed jobs as slots fired, each handler saying why its job fired: "pulled prices (tick)", '
          '"pulled prices (manual)", "rebuilt the index (boot)"')
    s.note("two schedulers, one job per slot: no slot fired twice and none without its job; each job knows why")
    s.stop("worker")


def all_completed(jobs: list[dict]) -> list[dict]:
    """``jobs`` when every one has completed, else nothing."""
    return jobs if all(job["state"] == "completed" for job in jobs) else []


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
