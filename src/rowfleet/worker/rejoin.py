"""What a worker does as it joins its host's fleet, before its first heartbeat: hand back
the jobs still held by workers of this host that are gone.

A box that crashed and restarted (kill -9, a power cut, the OOM killer taking a whole
supervisor) left its jobs ``running`` under holders that no longer exist; without this they
wait for an orchestrator's sweep to find the silent heartbeat or the lapsed lease. On the
same host this is decided at once and safely: a holder is gone when no process has its pid,
or the process that has it started later (the pid was reused), or the host has booted since
(``liveness.gone_from_host``). A holder that may be alive (its pid's process started when it
did, or nothing recorded says otherwise) is left to its lease: a worker cut off from the
database stops its job before the lease lapses, and fencing refuses it if it wakes late.

A host is its label (``--host``): one label, one machine's processes (containers sharing
a label share a pid space only if they share the machine's). Only this worker's project.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from rowfleet import liveness
from rowfleet.errors import RowfleetError
from rowfleet.telemetry import pids
from rowfleet.worker.keeper import Identity

log = logging.getLogger("rowfleet.worker")


def identity_readings() -> dict[str, str | None]:
    """This process's boot id and start time, for ``Identity.of``."""
    return {"boot_id": pids.boot_id(), "pid_started": pids.process_start(os.getpid())}


def gone(me: Identity, worker: Mapping[str, Any]) -> str | None:
    """Why the worker of this ``workers`` row (of ``me``'s host) is gone, or None."""
    pid = worker["pid"]
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None  # plain SQL's: no process to look at, so the lease decides
    return liveness.gone_from_host(worker["boot_id"], worker["pid_started"], me.boot_id,
                                   pids.process_start(pid), own_pid=pid == me.pid)


def hand_back_gone(store: Any, me: Identity) -> list[dict[str, Any]]:
    """Hand back the jobs of ``me``'s host's gone workers (``Store.hand_back_gone``),
    saying so in the log; what was done. A database error is logged: the sweep still
    finds those jobs later."""
    try:
        done = store.hand_back_gone(me.host, me.project, me.holder, lambda worker: gone(me, worker))
    except RowfleetError as exc:
        log.warning("could not look for jobs of this host's gone workers: %s", exc)
        return []
    for item in done:
        what = "handed back" if item["action"] == "reclaimed" else item["action"]
        log.warning("job %d %s: its worker %s is gone (%s)", item["id"], what, item["worker"], item["why"])
    return done
