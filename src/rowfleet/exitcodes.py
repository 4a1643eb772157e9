"""Process exit codes, defined once. The README's exit-code tables are this module.

The 75-81 band is a worker's own way out of a job it should not go on running; the
supervisor reads it back with ``meaning()``. A leaf: imports nothing but ``signal``.
"""

import signal

OK = 0
REFUSED = 1       # the command ran and the answer is no: no such job, or not in a state that allows it
USAGE = 2         # bad flags, bad JSON, bad configuration, a database that cannot be used
INTERRUPTED = 130  # stopped by Ctrl-C before it finished
BROKEN_PIPE = 141  # its output's reader went away (`rowfleet jobs | head`), as a shell reports SIGPIPE
TIMED_OUT = 124   # `rowfleet wait`: the job had not ended within --timeout (as timeout(1) exits)

# Watchdog exits: os._exit, because a wedged native call ignores cooperative cancels and
# only the death of the process frees its memory and VRAM.
BUDGET = 75         # the job ran past its wall-clock budget                      (a fault)
STALLED = 76        # no progress beat for the stall window, confirmed hung      (a fault)
REASSIGNED = 77     # the job's row was taken by another holder: exit, write nothing (not a fault)
GPU_IDLE = 78       # GPU idle and memory static for a whole window on a GPU job   (a fault)
OPERATOR_STOP = 79  # an operator turned this worker off, hard                     (not a fault)
CANCELLED = 80      # an operator cancelled the job, and its handler did not stop in the grace (not a fault)
CUT_OFF = 81        # its lease could not be renewed in time: stopped before the lease could lapse (not a fault)

WATCHDOG_FAULTS = (BUDGET, STALLED, GPU_IDLE)

_MEANINGS = {
    OK: "done",
    REFUSED: "refused",
    USAGE: "bad input or configuration",
    BUDGET: "wall-clock budget exceeded",
    STALLED: "stalled: no progress, confirmed",
    REASSIGNED: "its job was reassigned to another worker",
    GPU_IDLE: "GPU idle and memory static past the window",
    OPERATOR_STOP: "stopped by an operator",
    CANCELLED: "its job was cancelled by an operator",
    CUT_OFF: "cut off: its job's lease could not be renewed in time",
    INTERRUPTED: "interrupted",
    BROKEN_PIPE: "its output was closed",
    TIMED_OUT: "timed out",
    137: "killed (SIGKILL, or out of memory)",
}


def meaning(code: int) -> str:
    """What a worker's exit code says, for logs.

    >>> meaning(75), meaning(3)
    ('wall-clock budget exceeded', 'exit code 3')
    """
    return _MEANINGS.get(code, f"exit code {code}")


def describe(code: int) -> str:
    """How a process ended, in words: its exit code as ``os.waitstatus_to_exitcode`` gives
    it, negative for the signal that killed it.

    >>> describe(-9), describe(75), describe(0)
    ('killed by SIGKILL', 'exited 75 (wall-clock budget exceeded)', 'exited 0 (done)')
    """
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited {code} ({meaning(code)})"
