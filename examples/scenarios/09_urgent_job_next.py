"""An urgent job runs next

A queue holds a backlog of routine reports when a customer escalates. A job enqueued with a
lower `--priority` runs before the backlog; an operator's `rowfleet prioritize ID` goes
further and makes a job already queued run next, ahead of every priority. The worker then
takes them in that order: run-next first, then the lowest priority, then oldest first.
"""

from __future__ import annotations

import sys

import _scenario

TASKS = '''\
import rowfleet


@rowfleet.task(queue="reports")
def report(customer):
    with open("ran.log", "a") as log:  # the order the worker ran them in
        log.write(f"job {rowfleet.current_job().id}: report for {customer}\\n")
    return f"report for {customer}"
'''


def enqueue(s: _scenario.Scenario, customer: str, *flags: str) -> int:
    return int(s.rowfleet("enqueue", "tasks:report", "--app", "tasks", "--args", f'{{"customer": "{customer}"}}',
                          *flags))


def scenario(s: _scenario.Scenario) -> None:
    s.write("tasks.py", TASKS)
    s.rowfleet("init", show=False)
    backlog = [enqueue(s, customer) for customer in ("acme", "globex", "initech")]
    escalated = enqueue(s, "umbrella", "--priority", "-5")
    outage = enqueue(s, "hooli")
    s.note(f"job {outage} is an outage report: the operator makes it run next")
    s.rowfleet("prioritize", str(outage))
    s.rowfleet("worker", "--host", "box-a", "--queue", "reports", "--app", "tasks", "--burst")
    jobs = [s.job(job_id) for job_id in (*backlog, escalated, outage)]
    s.check(all(job["state"] == "completed" for job in jobs), f"states {[job['state'] for job in jobs]}")
    s.out("$ cat ran.log")
    ran = s.path("ran.log").read_text()
    s.out(ran)
    order = [int(line.split(":")[0].removeprefix("job ")) for line in ran.splitlines()]
    s.check(order == [outage, escalated, *backlog], f"run order {order}")
    s.note("run-next first, then the lower priority, then the backlog oldest first")
    s.show_job(outage)


if __name__ == "__main__":
    sys.exit(_scenario.run(__file__, scenario))
