"""A wedged GPU job recovers itself

A GPU job hangs in a native call: its process is alive, but the GPU sits idle and its
memory never moves. The worker's GPU watchdog reads nvidia-smi (here the fake one the
tests use, answering as an idle H100) and, once the whole window shows an idle GPU, writes
its decision and ends the process with exit 78, the only way to free a wedged job's
memory. The job is re-queued with one watchdog retry spent, the supervisor starts a fresh
worker process, and the second attempt completes.
"""

from __future__ import annotations

import os
import sys

import _scenario

TASKS = '''\
import time

import rowfleet


@rowfleet.task(queue="gpu")
def embed(shard):
    if rowfleet.current_job().attempts == 1:
        time.sleep(120)  # wedged: a CUDA call that never returns, the GPU idle meanwhile
    return f"shard {shard} embedded"
'''
# The GPU window is 1.5 s (read every 0.2 s) instead of 20 minutes, and the retry's backoff short.
WORKER = ("worker", "--host", "gpu-box", "--queue", "gpu", "--app", "tasks", "--procs", "1", "--no-sampler",
          "--gpu", "--gpu-first-window", "1.5", "--gpu-sample", "0.2", "--backoff-base", "0.1",
          "--restart-delay", "0.1", "--poll", "0.2", "--heartbeat", "0.5")


def scenario(s: _scenario.Scenario) -> None:
    s.write("tasks.py", TASKS)
    s.out("$ mkdir bin && ln -s <repo>/tests/fixtures/bin/nvidia-smi bin/nvidia-smi")
    s.path("bin").mkdir()
    os.symlink(_scenario.FAKE_NVIDIA_SMI, s.path("bin") / "nvidia-smi")
    s.out('$ export PATH="$PWD/bin:$PATH" FAKE_NVIDIA_SMI=idle    # an idle H100, to the watchdog')
    env = s.env(PATH=os.pathsep.join([str(s.path("bin")), os.environ.get("PATH", "")]), FAKE_NVIDIA_SMI="idle")
    s.rowfleet("init", show=False)
    job_id = int(s.rowfleet("enqueue", "tasks:embed", "--app", "tasks", "--args", '{"shard": 3}'))
    s.spawn("gpu-box", *WORKER, env=env)
    job = s.wait_for(lambda: s.history(job_id)[-2:] == ["claimed", "completed"] and s.job(job_id),
                     f"job {job_id} to complete after the watchdog's trip")
    s.show_job(job_id, "watchdog_retries")
    trip = next(event for event in job["events"] if event["kind"] == "watchdog_trip")
    readings = trip["detail"]["readings"]
    s.check(s.history(job_id) == ["claimed", "watchdog_trip", "retried", "claimed", "completed"],
            f"job {job_id} history is {s.history(job_id)}")
    s.check(len(readings) > 1 and {r["gpu_percent"] for r in readings} == {0}, f"the trip's readings: {readings}")
    s.out(f"watchdog_trip: the {trip['detail']['watchdog']} watchdog, exit {trip['detail']['code']}, "
          f"the GPU at 0% in every reading of the window")
    rows = s.show_workers()
    s.check(rows[0]["exit_code"] == 78, f"the wedged worker process exited {rows[0]['exit_code']}, expected 78")
    s.note("the watchdog ended the wedged process with 78; a fresh one ran attempt 2")
    s.stop("gpu-box")


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
