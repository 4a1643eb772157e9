"""An operator stops and parks a worker

`rowfleet control` writes one row that a worker reads at its next look. Switched off with
the default drain policy, box-a's worker finishes the job in hand, then parks: it keeps
beating but claims nothing, so new work waits. Switched on, the same process resumes. A
hard switch does not wait: the job in hand goes back to the queue at once (its attempt
given back, an `operator_stop` in its history), the worker process exits 79 to free its
memory, and its supervisor starts a fresh one that parks until the switch is on again.
"""

from __future__ import annotations

import sys

import _scenario

TASKS = '''\
import os
import time

import rowfleet


@rowfleet.task(queue="train")
def train(epoch):
    job = rowfleet.current_job()
    open(f"started-{job.id}-{job.attempts}", "w").close()
    give_up = time.monotonic() + 120
    while not os.path.exists(f"go-{job.id}") and time.monotonic() < give_up:
        time.sleep(0.01)  # the scenario opens this gate when it has seen the job running
    return f"epoch {epoch} trained"
'''
WORKER = ("worker", "--host", "box-a", "--queue", "train", "--app", "tasks", "--procs", "1", "--no-sampler",
          "--poll", "0.2", "--heartbeat", "0.5", "--restart-delay", "0.1")
SWITCH = ("control", "--host", "box-a", "--queue", "train", "--by", "ops")


def actual(s: _scenario.Scenario, state: str) -> bool:
    """Whether box-a's newest worker process now reads ``state``."""
    rows = sorted(s.json("workers")["workers"], key=lambda row: row["started_at"])
    return bool(rows) and rows[-1]["actual"] == state


def enqueue(s: _scenario.Scenario, epoch: int) -> int:
    return int(s.rowfleet("enqueue", "tasks:train", "--app", "tasks", "--args", f'{{"epoch": {epoch}}}'))


def open_gate(s: _scenario.Scenario, job_id: int) -> None:
    s.out(f"$ touch go-{job_id}    # the job's work is done")
    s.path(f"go-{job_id}").touch()


def drain(s: _scenario.Scenario) -> None:
    first = enqueue(s, 1)
    s.wait_for(lambda: s.path(f"started-{first}-1").exists(), f"box-a to start job {first}")
    s.rowfleet(*SWITCH, "--off", "--reason", "kernel upgrade")
    s.wait_for(lambda: actual(s, "draining"), "box-a's worker to drain")
    s.show_workers()
    open_gate(s, first)
    s.wait_for(lambda: actual(s, "parked"), "box-a's worker to park")
    s.show_job(first)
    waiting = enqueue(s, 2)
    s.show_workers()
    s.check(s.job(waiting)["state"] == "queued", f"a parked worker took job {waiting}")
    s.note(f"job {first} finished; the worker parked, and job {waiting} waits")
    s.rowfleet(*SWITCH, "--on")
    s.wait_for(lambda: s.path(f"started-{waiting}-1").exists(), f"the resumed worker to start job {waiting}")
    open_gate(s, waiting)
    s.wait_job(waiting, "completed")
    s.show_job(waiting)
    s.note("switched on, the same worker took the waiting job")


def hard_stop(s: _scenario.Scenario) -> None:
    job_id = enqueue(s, 3)
    s.wait_for(lambda: s.path(f"started-{job_id}-1").exists(), f"box-a to start job {job_id}")
    s.rowfleet(*SWITCH, "--off", "--policy", "hard", "--reason", "GPU swap")
    s.wait_job(job_id, "queued")
    s.wait_for(lambda: actual(s, "parked"), "the restarted worker to park")
    s.show_job(job_id)
    rows = s.show_workers()
    s.check(s.history(job_id) == ["claimed", "operator_stop"], f"job {job_id} history is {s.history(job_id)}")
    s.check(rows[0]["exit_code"] == 79, f"the stopped worker process exited {rows[0]['exit_code']}, expected 79")
    s.note(f"job {job_id} went back at once, its attempt given back; the worker exited 79 and its fresh "
           f"process parks")
    s.rowfleet(*SWITCH, "--on")
    s.wait_for(lambda: s.path(f"started-{job_id}-1").exists(), f"the worker to start job {job_id} again")
    open_gate(s, job_id)
    s.wait_job(job_id, "completed")
    s.show_job(job_id)


def scenario(s: _scenario.Scenario) -> None:
    s.write("tasks.py", TASKS)
    s.rowfleet("init", show=False)
    s.spawn("box-a", *WORKER)
    s.wait_for(lambda: actual(s, "serving"), "box-a's worker to serve")
    drain(s)
    hard_stop(s)
    s.stop("box-a")


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
