"""Enqueue the storm's work through the built archive's own API: one script, one process.

Run by the chaos tool as ``python seed.py DB JOBS RUNS WIDTH MS WORKFLOW [QUEUE FIRST_MS]``
with the archive and the storm's folder (for ``chaos_tasks``) on PYTHONPATH, so the enqueue
path tested is the one users get; QUEUE and FIRST_MS add one ``chaos.hold`` job there, first
in line, long on its first execution (the partition's box holds it when it is cut off).
Prints one JSON line: the run ids and the held job's id (the jobs' ids are read back from
the database). Imports rowfleet (from the archive), the storm's handlers and the stdlib.
"""

from __future__ import annotations

import json
import sys

import chaos_tasks  # noqa: F401 - registers the chaos.* tasks the runs' nodes name
import rowfleet

# A storm kills workers holding jobs again and again; those deaths are not the job's fault,
# so a job may be taken many times before its attempts run out (a lost job would show).
MAX_ATTEMPTS = 50


def main(argv: list[str]) -> int:
    db, jobs, runs, width, ms, workflow, *held = argv
    rowfleet.configure(db=db)
    rowfleet.enqueue_many("chaos.work", ({"n": n, "ms": float(ms)} for n in range(int(jobs))),
                          max_attempts=MAX_ATTEMPTS)
    hold = None
    if held:
        queue, first_ms = held
        hold = rowfleet.enqueue("chaos.hold", {"first_ms": float(first_ms), "ms": float(ms)}, queue=queue,
                                run_next=True, max_attempts=MAX_ATTEMPTS).id
    flow = rowfleet.load_workflow(workflow)
    run_ids = [rowfleet.start_run(flow, {"width": int(width), "ms": float(ms)}) for _ in range(int(runs))]
    print(json.dumps({"runs": run_ids, "hold": hold}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
