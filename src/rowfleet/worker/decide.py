"""What a worker's claim loop does next: a pure decision over what the loop knows. Pure.

The worker's main thread is a loop of ``Worker.step()``: it builds a ``Moment`` (stopping?
the switch in force, a job in hand, what the last claim found, parked?) and performs the
one action ``next_action`` names:

* ``DONE``: leave the loop (stopped; or a burst worker found nothing left to claim);
* ``DONE_SWITCHED_OFF``: a burst worker under an off switch leaves instead of parking;
* ``EXIT_HARD``: an operator's hard switch ends a worker that has run jobs (exit 79);
* ``READ_SWITCH``: read the switch once, before the first claim, so a worker started while
  off never claims;
* ``RUN``: run the job in hand (its outcome is written with the claim of the next job);
* ``PARK``, ``WAIT_SWITCH``, ``RESUME``: announce parked, wait for the switch to move,
  announce serving again;
* ``AWAIT``: the last claim found nothing: wait for something to be due;
* ``CLAIM``: claim a job.

And how long an idle worker may wait after a wake-up before it looks (``next_stagger``), so
that one job woken into a hundred idle workers is not raced for by all of them. Also the
wording of a switch in the worker's log lines (``describe_switch``, ``stop_reason``), shared
by the main thread and the keeper. Imports only ``rowfleet.control``.
"""

from __future__ import annotations

import dataclasses
import enum

from rowfleet import control
from rowfleet.control import Switch

# A wake-up reaches every idle worker of a channel at once (NOTIFY, a doorbell). A worker that
# lost the race for what woke it (nothing due when it looked, or its claim came back empty)
# waits up to twice as long, plus a step, before its next look; one that won, half as long.
# Among many idle workers a few then answer at once and the rest stand back; a lone worker
# never loses, so it never waits. The most a look is put off: a tenth of a second.
STAGGER_STEP = 0.001
STAGGER_MOST = 0.1

class Action(enum.StrEnum):
    """What the claim loop does next (the list above says what each means)."""

    DONE = enum.auto()
    DONE_SWITCHED_OFF = enum.auto()
    EXIT_HARD = enum.auto()
    READ_SWITCH = enum.auto()
    RUN = enum.auto()
    PARK = enum.auto()
    WAIT_SWITCH = enum.auto()
    RESUME = enum.auto()
    AWAIT = enum.auto()
    CLAIM = enum.auto()


@dataclasses.dataclass(frozen=True)
class Moment:
    """What the claim loop knows when it decides its next action."""

    stopping: bool = False        # request_stop() was called: finish the job in hand, then leave
    switch_read: bool = False     # the switch was read once, before the first claim
    switch: Switch | None = None  # the off switch in force (control.in_force); None: on
    holding_job: bool = False     # a job is in hand, claimed alone or with the last outcome
    has_run_jobs: bool = False    # since the process started (a hard switch then ends it)
    burst: bool = False           # drain what is due, then leave; never wait, never park
    idle: bool = False            # the last claim found nothing: wait for work before the next
    drained: bool = False         # a claim of its own found nothing: a burst worker is done
    parked: bool = False          # its heartbeat says parked


def next_action(moment: Moment) -> Action:
    """The one action the claim loop performs next.

    >>> next_action(Moment(switch_read=True)).value, next_action(Moment(switch_read=True, idle=True)).value
    ('claim', 'await')
    >>> hard = Switch("", "box", "q", control.OFF, control.HARD)
    >>> next_action(Moment(switch_read=True, switch=hard, has_run_jobs=True)).value
    'exit_hard'
    >>> next_action(Moment(switch_read=True, switch=hard)).value, next_action(Moment(switch_read=True, burst=True, drained=True)).value
    ('park', 'done')
    """
    if moment.stopping:
        return Action.DONE
    if not moment.switch_read:
        return Action.READ_SWITCH
    if moment.holding_job:
        return Action.RUN
    if moment.burst and moment.drained:
        return Action.DONE
    step = control.next_step(moment.switch, holding_job=False, has_run_jobs=moment.has_run_jobs)
    if step == control.STOP:
        return Action.EXIT_HARD
    if step == control.PARK:
        if moment.burst:  # it would wait, not drain
            return Action.DONE_SWITCHED_OFF
        return Action.WAIT_SWITCH if moment.parked else Action.PARK
    if moment.parked:
        return Action.RESUME
    if moment.idle and not moment.burst:
        return Action.AWAIT
    return Action.CLAIM


def stop_reason(switch: Switch) -> str:
    """Why a hard switch stopped the job in hand, as its events record it.

    >>> stop_reason(Switch("", "box", "q", control.OFF, control.HARD, changed_by="ops"))
    'switched off (hard) by ops'
    """
    return f"switched off ({switch.policy}) by {switch.changed_by or 'an operator'}"


def describe_switch(switch: Switch | None, step: str) -> str:
    """A switch and what the worker does about it (``control.next_step``), for its log.

    >>> describe_switch(Switch("", "box", "q", control.OFF), control.PARK)
    "switched off (drain) by an operator for queue q of host box in project '': park"
    >>> describe_switch(control.GpuSwitch("box", 1, control.OFF, "fan", "ops").holding(), control.PARK)
    'switched off (drain) by ops for every queue of host box in every project (GPU 1 of box: fan): park'
    """
    if switch is None:
        return "switched on"
    by = switch.changed_by or "an operator"
    why = f" ({switch.reason})" if switch.reason else ""
    return f"switched off ({switch.policy}) by {by} for {switch.scope()}{why}: {step}"


def next_stagger(spread: float, won: bool) -> float:
    """The longest wait, in seconds, before an idle worker's next look after a wake-up (the
    wait itself is drawn from 0 to it), given this one's and whether the worker won the job
    that woke it.

    >>> [round(next_stagger(spread, won=False), 6) for spread in (0.0, 0.004, 0.08)]
    [0.001, 0.009, 0.1]
    >>> next_stagger(0.004, won=True), next_stagger(0.0004, won=True), next_stagger(0.0, won=True)
    (0.002, 0.0, 0.0)
    """
    if won:
        return spread / 2 if spread / 2 >= STAGGER_STEP / 2 else 0.0
    return min(STAGGER_MOST, spread * 2 + STAGGER_STEP)
