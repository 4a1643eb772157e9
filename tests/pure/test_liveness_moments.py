"""``liveness.trust_sweep``: whether a dead-worker sweep may flag the stale workers it sees now,
or holds off one heartbeat because its moment is in doubt. Pure and table-driven: made-up
moments, no database, no clock.
"""

from __future__ import annotations

import unittest

from rowfleet.liveness import CLOCK_JUMP, LATE_SWEEPS, Beat, SweepMoment, Trust, trust_sweep

INTERVAL, HEARTBEAT = 5.0, 2.0  # a worker beating every 2 s is stale past 6 s
FRESH, STALE = Beat("", 1.0, HEARTBEAT), Beat("", 30.0, HEARTBEAT)
BEFORE = SweepMoment(monotonic=100.0, wall=5000.0)


def later(seconds: float, step: float = 0.0) -> SweepMoment:
    """A sweep ``seconds`` after BEFORE by the monotonic clock, the wall clock moved ``step`` more."""
    return SweepMoment(BEFORE.monotonic + seconds, BEFORE.wall + seconds + step)


class TrustSweepTest(unittest.TestCase):
    def test_the_verdicts(self):
        other = Beat("other", 1.0, HEARTBEAT)
        # (case, previous sweep, this one, beats, held since, flag now?, a hold begun at)
        table = [
            ("a normal sweep flags one stale worker among fresh ones at once",
             BEFORE, later(INTERVAL), [FRESH, STALE, FRESH], None, True, None),
            ("nothing stale: nothing to hold off", BEFORE, later(60.0, step=600.0), [FRESH, FRESH], None, True, None),
            ("a process's first sweep flags one stale worker among fresh ones",
             None, later(0.0), [FRESH, STALE], None, True, None),
            ("a lone worker of its project that went silent is flagged at once",
             BEFORE, later(INTERVAL), [STALE, other], None, True, None),
            ("every heartbeat of a project stale at once: hold",
             BEFORE, later(INTERVAL), [STALE, STALE, STALE, STALE], None, False, 105.0),
            ("... on a process's first sweep too", None, later(0.0), [STALE, STALE], None, False, 100.0),
            ("... while another project's workers are fresh", BEFORE, later(INTERVAL), [STALE, STALE, other],
             None, False, 105.0),
            ("a worker judged by its own cadence (20 s: stale past 60 s) is fresh at 30 s",
             BEFORE, later(INTERVAL), [STALE, Beat("", 30.0, 20.0)], None, True, None),
            ("a late sweep (monotonic gap) holds", BEFORE, later(LATE_SWEEPS * INTERVAL + 0.1), [FRESH, STALE],
             None, False, 110.1),
            ("a sweep just within its lateness does not", BEFORE, later(LATE_SWEEPS * INTERVAL), [FRESH, STALE],
             None, True, None),
            ("the wall clock jumped forward of the monotonic clock: hold",
             BEFORE, later(INTERVAL, step=600.0), [FRESH, STALE], None, False, 105.0),
            ("a step within the tolerance is no jump", BEFORE, later(INTERVAL, step=CLOCK_JUMP), [FRESH, STALE],
             None, True, None),
            ("a backward step makes no one look stale: no doubt", BEFORE, later(INTERVAL, step=-600.0),
             [FRESH, STALE], None, True, None),
            ("within the hold: still held, whatever this sweep looks like",
             BEFORE, later(INTERVAL), [FRESH, STALE], 104.0, False, 104.0),
            ("after holding one heartbeat with workers still stale: flag",
             BEFORE, later(INTERVAL), [FRESH, STALE], 105.0 - HEARTBEAT, True, None),
            ("... even when every heartbeat is still stale", BEFORE, later(INTERVAL), [STALE, STALE],
             105.0 - HEARTBEAT, True, None),
            ("the hold lasts the longest cadence among the stale", BEFORE, later(70.0),
             [Beat("", 70.0, 20.0), STALE], 170.0 - HEARTBEAT, False, 170.0 - HEARTBEAT),
            ("every worker beat again within the hold: it ends", BEFORE, later(INTERVAL), [FRESH, FRESH],
             104.0, True, None),
        ]
        for case, previous, now, beats, held_since, flag, hold in table:
            with self.subTest(case):
                trust = trust_sweep(previous, now, INTERVAL, beats, held_since)
                self.assertEqual((trust.flag, trust.held_since), (flag, hold))
                self.assertEqual(trust.why is None, flag, "a hold says why, a verdict to flag does not")

    def test_a_clock_step_held_then_judged_on_fresh_heartbeats(self):
        """Heartbeat 2 s, the clock +600 s: held at once, then nobody flagged once they beat."""
        step = trust_sweep(BEFORE, later(INTERVAL, step=600.0), INTERVAL, [Beat("", 601.0, 2.0)] * 4, None)
        self.assertEqual(step, Trust(False, 105.0, "the clock moved 600.0s further than the monotonic clock "
                                                   "since the last sweep"))
        again = trust_sweep(later(INTERVAL, step=600.0), later(INTERVAL + 2.0, step=600.0), INTERVAL,
                            [Beat("", 0.5, 2.0)] * 4, step.held_since)
        self.assertEqual(again, Trust(True))

    def test_the_reasons_read_as_one_log_line(self):
        self.assertEqual(trust_sweep(BEFORE, later(40.0), INTERVAL, [STALE], None).why,
                         "this sweep came 40.0s after the last, every 5s")
        self.assertEqual(trust_sweep(None, later(0.0), INTERVAL, [STALE, STALE, Beat("b", 9.0, 2.0)],
                                     None).why,
                         "every heartbeat of project '' is stale at once (2 workers)")


if __name__ == "__main__":
    unittest.main()
