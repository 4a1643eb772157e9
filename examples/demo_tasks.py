"""The task handlers ``examples/demo.py`` runs; a worker loads them with ``--app demo_tasks``.

Each is registered under a short name (``send_email``, ``charge_card``, ``build_report``,
``flaky_publish``) so the demo's commands read as a reader would type them. Paths in a
job's arguments are relative to the worker's current folder: the demo runs every worker in
its temporary folder. ``flaky_publish`` wraps the pipeline example's publish task, so the
demo puts ``examples/pipeline`` on the workers' path too.

Imports only the public ``rowfleet`` API.
"""

from __future__ import annotations

import os
import time

import digest_tasks  # examples/pipeline/digest_tasks.py
import rowfleet

# Long enough that only the demo's kill -9 ends a stuck run, short enough that a demo that
# died before killing its worker leaves no process behind for long.
HANG_LIMIT = 120.0


@rowfleet.task(name="send_email")
def send_email(subject: str) -> dict:
    """Pretend to send an email; the result says which one."""
    return {"sent": subject}


@rowfleet.task(name="charge_card")
def charge_card(order: int, card_file: str) -> dict:
    """Charge an order's card: declined until ``card_file`` exists (the customer updated it)."""
    if not os.path.exists(card_file):
        raise RuntimeError(f"card declined for order {order}: no {card_file} on file yet")
    return {"charged": order}


@rowfleet.task(name="build_report")
def build_report(started_file: str) -> dict:
    """Hang on the first claim, like a stuck machine; finish on any later one (its lease
    token counts the claims: a lost lease gives the attempt back).

    Creates ``started_file`` once the job is in hand, so the demo knows when to kill us.
    """
    job = rowfleet.current_job()
    if job.lease_token == 1:
        with open(started_file, "w") as handle:
            handle.write(f"{os.getpid()}\n")
        time.sleep(HANG_LIMIT)
        raise RuntimeError(f"nobody killed this worker within {HANG_LIMIT:.0f}s")
    return {"report": "ready", "attempt": job.attempts}


@rowfleet.task(name="flaky_publish")
def flaky_publish(summaries: list, out: str, crash_file: str) -> dict:
    """The pipeline's ``publish``, except that its first attempt kills the worker outright.

    Creates ``crash_file`` and then hard-exits the whole worker process mid-job, with no
    cleanup, as the kernel's OOM killer would (exit status 137 is how a shell reports a
    SIGKILL). Once ``crash_file`` exists, publishes as ``digest_tasks.publish`` does.
    """
    if not os.path.exists(crash_file):
        with open(crash_file, "w") as handle:
            handle.write(f"{os.getpid()}\n")
        os._exit(137)
    return digest_tasks.publish(summaries, out)
