"""A box powers off mid-job

A worker on box-a is running a render when the box loses power: its whole process group
dies at once (SIGKILL), so nothing hands the job back. The job's lease lapses unrenewed,
the orchestrator's sweep re-queues it, and a worker on box-b runs it to completion. The
job's history keeps both claims: who claimed it, the reclaim, and who finished it. A lost
lease is no fault of the job's, so it still ran as attempt 1.
"""

from __future__ import annotations

import sys
import time

import _scenario

TASKS = '''\
import os
import time

import rowfleet


@rowfleet.task(queue="render")
def render(frame):
    job = rowfleet.current_job()
    open(f"started-{job.lease_token}", "w").close()  # each claim raises the lease token
    if job.lease_token == 1:
        time.sleep(120)  # the first box never gets to finish: it loses power
    return f"frame {frame} rendered"
'''
# A short lease, renewed often, so the lapse comes seconds after the power cut.
LEASE = ("--lease", "2", "--renew", "0.5", "--heartbeat", "0.5")


def scenario(s: _scenario.Scenario) -> None:
    s.write("tasks.py", TASKS)
    s.rowfleet("init", show=False)
    job_id = int(s.rowfleet("enqueue", "tasks:render", "--app", "tasks", "--args", '{"frame": 7}'))
    s.spawn("box-a", "worker", "--host", "box-a", "--queue", "render", "--app", "tasks", "--procs", "1",
            "--no-sampler", *LEASE)
    s.wait_for(lambda: s.path("started-1").exists(), f"box-a to start job {job_id}")
    s.note(f"box-a is running job {job_id}; now it loses power: its whole process group dies")
    s.kill_group("box-a")
    s.show_job(job_id)
    lease_ends = _scenario.timestamp(s.job(job_id)["lease_expires_at"])
    s.wait_for(lambda: time.time() > lease_ends + 0.1, f"the lease of job {job_id} to lapse")
    s.note("its 2 s lease lapses, unrenewed; the orchestrator's sweep re-queues the job")
    s.spawn("orchestrator", "orchestrator", "--interval", "0.2", "--heartbeat", "0.5")
    s.wait_job(job_id, "queued")
    s.spawn("box-b", "worker", "--host", "box-b", "--queue", "render", "--app", "tasks", *LEASE)
    job = s.wait_job(job_id, "completed")
    s.show_job(job_id)
    s.check(s.holders(job) == ["box-a", "box-b"], f"job {job_id} was claimed by {s.holders(job)}")
    s.check(s.history(job_id) == ["claimed", "reclaimed", "claimed", "completed"],
            f"job {job_id} history is {s.history(job_id)}")
    s.check(job["attempts"] == 1, f"job {job_id} ran as attempt {job['attempts']}")
    s.note("claimed by box-a, reclaimed when its lease lapsed, completed by box-b: still attempt 1, the lost "
           "lease's attempt given back")
    s.stop("box-b")
    s.stop("orchestrator")


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
