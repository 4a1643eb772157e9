"""Table-driven tests of ``rowfleet.gpu.routing``: need and fit, starvation, the cold pick, the
churn floor, the claim's inputs, unplaceable jobs, preloads, idle unloads, and a small fleet
driven through ``plan`` on a virtual clock.

Pure: no database, no processes, no clock. The module's docstring examples run here too,
through ``load_tests``.
"""

from __future__ import annotations

import dataclasses
import unittest

from rowfleet.errors import ConfigError
from rowfleet.gpu import routing
from rowfleet.gpu.routing import (ANY, MODEL, PLAIN, Backlog, Box, ClaimInputs, FleetView, ModelInfo, Unplaceable,
                              claim_inputs, claim_vram_free, churn_floor, fits, held_elsewhere, min_resident,
                              next_model, plan, preload_choice, preload_plan, rank, should_unload, starve_after,
                              starved, unplaceable_reason, vram_need)

CLAIM_FIELDS = ("models", "lane", "warm_model", "starved", "rank", "only_warm", "vram_free_mb", "newest_first")
SMALL, BIG = 24000, 80000
MODELS = {
    "llm": ModelInfo("llm", vram_mb=16000, load_seconds=30.0),   # starves after 90 s, stays 60 s
    "xl": ModelInfo("xl", vram_mb=60000, load_seconds=100.0),    # starves after 300 s
    "sd": ModelInfo("sd", vram_mb=8000, load_seconds=10.0),      # starves after 60 s (the floor)
}


def box(worker_id: str, size: int = SMALL, models=("llm", "xl", "sd"), **fields) -> Box:
    return Box(worker_id, host=worker_id, models=tuple(models), vram_total_mb=size, **fields)


def queued(model: str, count: int = 1, wait: float = 0.0, run: float | None = None) -> dict[str, Backlog]:
    return {model: Backlog(model, count, wait, run)}


class NeedAndFitTest(unittest.TestCase):
    def test_vram_need(self):
        cases = [  # (job's vram_mb, model info) -> need
            ((5000, ModelInfo("m", 16000, 14000)), 5000),       # the job's own figure wins
            ((None, ModelInfo("m", 16000, 14000)), 14000),      # measured replaces registered
            ((None, ModelInfo("m", 16000, None)), 16000),
            ((None, ModelInfo("m", None, 15000)), 15000),
            ((None, ModelInfo("m")), None),
            ((None, None), None),
            ((7000, None), 7000),
        ]
        for (job, info), need in cases:
            with self.subTest(job=job, info=info):
                self.assertEqual(vram_need(job, info), need)

    def test_fits_by_total_not_free(self):
        cases = [  # (need, total, free) -> fits
            (24000, 24000, 0, True),
            (24001, 24000, 24000, False),
            (None, 0, None, True),     # unknown need fits anywhere, even a box without a GPU
            (1, 0, None, False),
            (20000, 24000, 1000, True),  # free memory is the claim's check, not placement's
        ]
        for need, total, free, expected in cases:
            with self.subTest(need=need, total=total):
                self.assertIs(fits(need, Box("w", vram_total_mb=total, vram_free_mb=free)), expected)

    def test_capability_gate_drops_models_too_big_and_keeps_unknown(self):
        me = box("w", SMALL, models=("xl", "llm", "unregistered"))
        self.assertEqual(routing.capable(me, MODELS), ("llm", "unregistered"))
        self.assertEqual(routing.capable(dataclasses.replace(me, vram_total_mb=BIG), MODELS),
                         ("xl", "llm", "unregistered"))


class TimeBoundsTest(unittest.TestCase):
    def test_starve_after_clamps(self):
        cases = [(None, 60.0), (0.0, 60.0), (-5.0, 60.0), (20.0, 60.0), (21.0, 63.0), (100.0, 300.0),
                 (300.0, 900.0), (301.0, 900.0), (1e9, 900.0)]
        for load, bound in cases:
            with self.subTest(load=load):
                self.assertEqual(starve_after(load), bound)

    def test_min_resident(self):
        for load, floor in [(None, 40.0), (0.0, 0.0), (30.0, 60.0), (1000.0, 2000.0)]:
            with self.subTest(load=load):
                self.assertEqual(min_resident(load), floor)

    def test_churn_floor(self):
        warm = box("w", warm_model="llm", warm_since=1000.0)
        cases = [  # (box, models, now) -> the floor holds
            (warm, MODELS, 1000.0, True),
            (warm, MODELS, 1059.9, True),
            (warm, MODELS, 1060.0, False),               # 2 x 30 s load
            (warm, {}, 1039.0, True),                    # unmeasured load: 2 x 20 s
            (warm, {}, 1040.0, False),
            (dataclasses.replace(warm, warm_since=None), MODELS, 1000.0, False),  # no figure, no floor
            (box("w"), MODELS, 1000.0, False),          # nothing warm
        ]
        for me, models, now, expected in cases:
            with self.subTest(box=me, now=now, models=sorted(models)):
                self.assertIs(churn_floor(me, models, now), expected)

    def test_load_failing(self):
        cases = [(None, False), (ModelInfo("m"), False), (ModelInfo("m", failed_loads=2), False),
                 (ModelInfo("m", failed_loads=3), True), (ModelInfo("m", failed_loads=9), True)]
        for info, expected in cases:
            with self.subTest(info=info):
                self.assertIs(routing.load_failing(info), expected)


class HoldingTest(unittest.TestCase):
    def test_held_elsewhere(self):
        me = box("me", warm_model="llm")
        cases = [  # (other boxes) -> llm held elsewhere
            ((), False),
            ((box("o", warm_model="llm"),), True),
            ((box("o", loading="llm"),), True),                        # loading counts as holding
            ((box("o", warm_model="llm", live=False),), False),        # dead boxes are ignored
            ((box("o", warm_model="llm", serving=False),), False),     # draining or off: serves nothing new
            ((box("o", warm_model="llm", models=("sd",)),), False),    # does not list it
            ((box("o", 10000, warm_model="llm"),), False),             # too small for it
            ((box("o", warm_model="sd"),), False),
        ]
        for others, expected in cases:
            with self.subTest(others=others):
                self.assertIs(held_elsewhere("llm", me, (me, *others), 16000), expected)

    def test_the_box_itself_is_not_elsewhere(self):
        me = box("me", warm_model="llm")
        self.assertFalse(held_elsewhere("llm", me, [me], 16000))
        self.assertTrue(held_elsewhere("llm", box("me"), [box("twin", warm_model="llm"), box("me")], 16000))

    def test_idle(self):
        cases = [(box("w"), True), (box("w", busy=True), False), (box("w", loading="sd"), False),
                 (box("w", live=False), False), (box("w", serving=False), False),
                 (box("w", warm_model="sd"), True)]
        for me, expected in cases:
            with self.subTest(box=me):
                self.assertIs(routing.idle(me), expected)


class StarvedTest(unittest.TestCase):
    def starved_for(self, me: Box, others=(), backlogs=None, models=MODELS) -> tuple[str, ...]:
        return starved(me, (me, *others), models, backlogs if backlogs is not None else {})

    def test_bound_and_orphans(self):
        me = box("me", warm_model="sd")
        cases = [  # (other boxes, backlogs) -> starved for me
            ((), queued("llm", 3, 90.0), ()),                     # exactly at the bound: not yet
            ((), queued("llm", 3, 90.1), ("llm",)),
            ((), queued("llm", 0, 500.0), ()),                    # nothing queued
            ((box("o", warm_model="llm"),), queued("llm", 3, 500.0), ()),   # someone is serving it
            ((box("o", loading="llm"),), queued("llm", 3, 500.0), ()),      # someone is loading it
            ((box("o", warm_model="llm", live=False),), queued("llm", 3, 500.0), ("llm",)),
            ((box("o", warm_model="llm", serving=False),), queued("llm", 3, 500.0), ("llm",)),
            ((box("o", 10000, models=("llm",), warm_model="llm"),), queued("llm", 3, 500.0), ("llm",)),
            ((), queued("unregistered", 1, 60.1), ("unregistered",)),  # unknown load: 60 s floor
            ((), queued("unregistered", 1, 60.0), ()),
            ((), queued("elsewhere", 1, 1e6), ()),                # a model this box does not list
        ]
        me = dataclasses.replace(me, models=("llm", "xl", "sd", "unregistered"))
        for others, backlogs, expected in cases:
            with self.subTest(others=others, backlogs=backlogs):
                self.assertEqual(self.starved_for(me, others, backlogs), expected)

    def test_ceiling(self):
        slow = {"big": ModelInfo("big", load_seconds=600.0)}  # 3 x 600 s, clamped to 900 s
        me = box("me", models=("big",))
        self.assertEqual(self.starved_for(me, backlogs=queued("big", 1, 899.0), models=slow), ())
        self.assertEqual(self.starved_for(me, backlogs=queued("big", 1, 901.0), models=slow), ("big",))

    def test_never_for_what_the_box_holds_cannot_fit_or_keeps_failing(self):
        old = queued("llm", 3, 1000.0)
        self.assertEqual(self.starved_for(box("me", warm_model="llm"), backlogs=old), ())
        self.assertEqual(self.starved_for(box("me", loading="llm"), backlogs=old), ())
        self.assertEqual(self.starved_for(box("me", 10000), backlogs=old), ())
        failing = dict(MODELS, llm=dataclasses.replace(MODELS["llm"], failed_loads=3))
        self.assertEqual(self.starved_for(box("me"), backlogs=old, models=failing), ())

    def test_most_overdue_first_then_id(self):
        backlogs = {"llm": Backlog("llm", 1, 190.0),   # 100 s past its 90 s bound
                    "sd": Backlog("sd", 1, 260.0),     # 200 s past its 60 s bound
                    "xl": Backlog("xl", 1, 400.0),     # 100 s past its 300 s bound
                    }
        self.assertEqual(self.starved_for(box("me", BIG), backlogs=backlogs), ("sd", "llm", "xl"))

    def test_a_deep_backlog_on_a_busy_holder_is_not_starvation(self):
        # An aging timer would call every model starved under a backlog and turn the fleet FIFO.
        holder = box("o", warm_model="llm", busy=True)
        self.assertEqual(self.starved_for(box("me", warm_model="sd"), (holder,), queued("llm", 500, 3600.0)), ())


class RankTest(unittest.TestCase):
    def test_order(self):
        small_models = {"a": ModelInfo("a", 10000), "b": ModelInfo("b", 20000), "c": ModelInfo("c", 20000),
                        "u": ModelInfo("u"), "f": ModelInfo("f", 20000, failed_loads=3)}
        me = box("me", BIG, models=("u", "a", "b", "c", "f"))
        cases = [  # (other boxes) -> my rank
            ((), ("b", "c", "a", "u", "f")),                               # bigger need first, ties by id, unknown last
            ((box("o", BIG, models=("b",), warm_model="b"),), ("c", "a", "u", "b", "f")),   # held elsewhere: later
            ((box("o", BIG, models=("b",), loading="b"),), ("c", "a", "u", "b", "f")),
            ((box("o", BIG, models=("b",), warm_model="b", live=False),), ("b", "c", "a", "u", "f")),
            ((box("s", SMALL, models=("a",)),), ("b", "c", "u", "a", "f")),                 # a smaller idle box takes a
            ((box("s", SMALL, models=("a",), busy=True),), ("b", "c", "a", "u", "f")),      # ... not a busy one
            ((box("s", SMALL, models=("a",), serving=False),), ("b", "c", "a", "u", "f")),  # ... nor one switched off
            ((box("s", BIG, models=("a",)),), ("b", "c", "a", "u", "f")),                   # an equal box: no deferring
            ((box("s", 5000, models=("a", "b")),), ("b", "c", "a", "u", "f")),              # too small for a or b
        ]
        for others, expected in cases:
            with self.subTest(others=others):
                self.assertEqual(rank(me, (me, *others), small_models), expected)

    def test_small_box_takes_small_model_big_box_keeps_big(self):
        small, large = box("s", SMALL), box("l", BIG)
        fleet = [small, large]
        self.assertEqual(rank(large, fleet, MODELS), ("xl", "llm", "sd"))   # smaller box takes llm and sd
        self.assertEqual(rank(small, fleet, MODELS), ("llm", "sd"))         # xl does not fit it
        self.assertEqual(rank(large, [large], MODELS), ("xl", "llm", "sd"))

    def test_held_elsewhere_outranks_headroom(self):
        large = box("l", BIG)
        fleet = [large, box("s", SMALL), box("o", BIG, warm_model="xl")]
        self.assertEqual(rank(large, fleet, MODELS), ("llm", "sd", "xl"))


class ClaimInputsTest(unittest.TestCase):
    def test_fields_are_the_claims(self):
        self.assertEqual(tuple(f.name for f in dataclasses.fields(ClaimInputs)), CLAIM_FIELDS)
        inputs = claim_inputs(box("w"), [], MODELS, {}, now=0.0)
        self.assertEqual(tuple(inputs.fields()), CLAIM_FIELDS)
        self.assertIsInstance(inputs.fields()["rank"], tuple)

    def test_splats_into_claim_once_claim_has_the_fields(self):
        from rowfleet import claim
        names = {f.name for f in dataclasses.fields(claim.Claim)}
        if not set(CLAIM_FIELDS) <= names:
            self.skipTest("Claim has no routing fields yet")
        inputs = claim_inputs(box("w"), [], MODELS, {}, now=0.0)
        made = claim.Claim("", "default", "box:1", 600.0, **inputs.fields())
        self.assertEqual({name: getattr(made, name) for name in CLAIM_FIELDS}, inputs.fields())

    def test_churn_floor_gives_way_to_starvation(self):
        me = box("me", warm_model="sd", warm_since=1000.0, vram_free_mb=3000)
        cases = [  # (now, backlogs) -> (starved, only_warm)
            (1010.0, {}, ((), True)),                                  # sd loaded 10 s ago: stays 20 s
            (1020.0, {}, ((), False)),
            (1010.0, queued("llm", 2, 80.0), ((), True)),
            (1010.0, queued("llm", 2, 91.0), (("llm",), False)),       # starvation fires through the floor
        ]
        for now, backlogs, expected in cases:
            with self.subTest(now=now, backlogs=backlogs):
                inputs = claim_inputs(me, [me], MODELS, backlogs, now)
                self.assertEqual((inputs.starved, inputs.only_warm), expected)

    def test_lanes(self):
        me = box("me", warm_model="sd", warm_since=1000.0)
        starving = queued("llm", 2, 500.0)
        for lane in (ANY, MODEL):
            with self.subTest(lane=lane):
                inputs = claim_inputs(me, [me], MODELS, starving, 1000.0, lane)
                self.assertEqual((inputs.lane, inputs.starved, inputs.rank), (lane, ("llm",), ("llm", "sd")))
        plain = claim_inputs(me, [me], MODELS, starving, 1000.0, PLAIN)
        self.assertEqual((plain.lane, plain.starved, plain.rank, plain.only_warm), (PLAIN, (), (), False))
        for bad in ("gpu", "", "ANY", None, 1):
            with self.subTest(lane=bad), self.assertRaises(ConfigError) as caught:
                claim_inputs(me, [me], MODELS, {}, 0.0, bad)
            self.assertIn("lane must be one of 'any', 'model', 'plain'", str(caught.exception))

    def test_free_memory_counts_the_warm_model(self):
        cases = [  # (free, warm model) -> the claim's free memory
            (None, "llm", None),        # not measured: no free-memory check
            (2000, None, 2000),
            (2000, "llm", 18000),       # 16000 registered
            (2000, "unregistered", 2000),  # what it holds is unknown: count nothing
            (20000, "llm", SMALL),      # never more than the GPU has
        ]
        models = dict(MODELS, llm=ModelInfo("llm", 16000))
        for free, warm, expected in cases:
            with self.subTest(free=free, warm=warm):
                self.assertEqual(claim_vram_free(box("w", vram_free_mb=free, warm_model=warm), models), expected)
        measured = dict(models, llm=ModelInfo("llm", 16000, footprint_mb=12000))
        self.assertEqual(claim_vram_free(box("w", vram_free_mb=2000, warm_model="llm"), measured), 14000)

    def test_overflow_host_takes_newest_first(self):
        for priority, expected in [(-1, True), (0, False), (5, False)]:
            with self.subTest(priority=priority):
                self.assertIs(claim_inputs(box("w", host_priority=priority), [], {}, {}, 0.0).newest_first, expected)


class NextModelTest(unittest.TestCase):
    def test_order(self):
        base = ClaimInputs(("a", "b", "c", "w"), ANY, "w", ("c",), ("a", "b", "c", "w"), False, None, False)
        cases = [  # (changes, queued) -> model
            ({}, {"a", "b", "c", "w"}, "c"),           # starved outranks warm
            ({}, {"a", "b", "w"}, "w"),                # warm outranks cold
            ({}, {"b", "a"}, "a"),                     # cold by rank
            ({}, set(), None),
            ({"only_warm": True}, {"a", "b"}, None),   # churn floor: no switch
            ({"only_warm": True}, {"a", "w"}, "w"),
            ({"lane": PLAIN}, {"a", "w"}, None),
            ({"models": ("a",)}, {"c", "w"}, None),   # the gate holds over every list
            ({"warm_model": None}, {"w"}, "w"),
        ]
        for changes, models, expected in cases:
            with self.subTest(changes=changes, queued=models):
                self.assertEqual(next_model(dataclasses.replace(base, **changes), models), expected)


class UnplaceableTest(unittest.TestCase):
    def test_reasons_and_precedence(self):
        failing = ModelInfo("llm", failed_loads=3)
        off = box("off", BIG, serving=False)
        cases = [  # (need, boxes, info) -> reason
            (16000, [box("w")], None, None),
            (None, [box("w", 1000)], None, None),                                   # unknown need fits
            (16000, [box("w", models=("sd",))], None, Unplaceable.MODEL_UNKNOWN),
            (16000, [], failing, Unplaceable.MODEL_UNKNOWN),                         # unknown beats all
            (90000, [box("w"), box("l", BIG)], None, Unplaceable.NO_BOX_BIG_ENOUGH),
            (90000, [box("w", live=False)], failing, Unplaceable.NO_BOX_BIG_ENOUGH),  # too big beats failing and off
            (30000, [box("w"), box("l", BIG, models=("sd",))], None,
             Unplaceable.NO_BOX_BIG_ENOUGH),  # l is big enough but does not list it
            (16000, [box("w")], failing, Unplaceable.LOAD_FAILING),
            (16000, [off], failing, Unplaceable.LOAD_FAILING),                        # failing beats off
            (16000, [box("w")], ModelInfo("llm", failed_loads=2), None),
            (16000, [off], None, Unplaceable.FITTING_BOXES_OFF),
            (16000, [box("d", live=False)], None, Unplaceable.FITTING_BOXES_OFF),
            (60000, [box("w"), box("d", BIG, live=False)], None, Unplaceable.FITTING_BOXES_OFF),  # restart d
            (60000, [box("w"), box("l", BIG)], None, None),
        ]
        for need, boxes, info, expected in cases:
            with self.subTest(need=need, boxes=[b.worker_id for b in boxes], info=info):
                self.assertEqual(unplaceable_reason("llm", need, boxes, info), expected)

    def test_reasons_are_their_words(self):
        self.assertEqual(sorted(reason.value for reason in Unplaceable),
                         ["fitting_boxes_off", "load_failing", "model_unknown", "no_box_big_enough"])


class PreloadTest(unittest.TestCase):
    def choice(self, me: Box, backlogs, others=(), models=MODELS, now=1000.0):
        return preload_choice(me, backlogs, (me, *others), models, now)

    def test_when_a_box_preloads(self):
        work = queued("llm", 2, 5.0, 20.0)  # 40 s of work against a 30 s load
        cases = [  # (me, backlogs, other boxes) -> the model it preloads
            (box("me"), work, (), "llm"),
            (box("me"), queued("llm", 3, 5.0, 10.0), (), None),      # 30 s of work: not more than the load
            (box("me"), queued("llm", 2, 5.0, None), (), None),      # unknown run time
            (box("me"), queued("llm", 0, 5.0, 20.0), (), None),
            (box("me"), work, (box("o", warm_model="llm"),), None),  # held elsewhere
            (box("me"), work, (box("o", loading="llm"),), None),
            (box("me"), work, (box("o", warm_model="llm", live=False),), "llm"),  # dead holders hold nothing
            (box("me", busy=True), work, (), None),
            (box("me", loading="sd"), work, (), None),
            (box("me", serving=False), work, (), None),
            (box("me", warm_model="sd"), work, (), "llm"),           # warm, but no warm work
            (box("me", warm_model="sd"), {**work, **queued("sd", 1)}, (), None),  # warm work waits
            (box("me", warm_model="sd", warm_since=990.0), work, (), None),      # churn floor: 20 s
            (box("me", warm_model="sd", warm_since=980.0), work, (), "llm"),
            (box("me", 10000), work, (), None),                      # too small
            (box("me", models=("sd",)), work, (), None),             # does not list it
            (box("me", models=("new",)), queued("new", 1, 5.0, 21.0), (), "new"),  # unknown load: 20 s
            (box("me", models=("new",)), queued("new", 1, 5.0, 20.0), (), None),
        ]
        for me, backlogs, others, expected in cases:
            with self.subTest(me=me, backlogs=backlogs, others=others):
                self.assertEqual(self.choice(me, backlogs, others), expected)

    def test_failing_loads_are_not_preloaded(self):
        failing = dict(MODELS, llm=dataclasses.replace(MODELS["llm"], failed_loads=3))
        self.assertIsNone(self.choice(box("me"), queued("llm", 9, 5.0, 60.0), models=failing))

    def test_one_box_per_model_the_smallest_that_fits(self):
        backlogs = queued("llm", 5, 5.0, 60.0)
        fleet = [box("l", BIG), box("s2", SMALL), box("s1", SMALL)]
        self.assertEqual(preload_plan(fleet, backlogs, MODELS, 1000.0), {"s1": "llm"})  # ties by worker id
        self.assertIsNone(preload_choice(fleet[0], backlogs, fleet, MODELS, 1000.0))

    def test_most_work_first_and_big_boxes_for_big_models(self):
        backlogs = {**queued("xl", 2, 5.0, 200.0), **queued("llm", 10, 5.0, 60.0), **queued("sd", 20, 5.0, 1.0)}
        fleet = [box("l", BIG), box("s", SMALL)]
        self.assertEqual(preload_plan(fleet, backlogs, MODELS, 1000.0), {"s": "llm", "l": "xl"})
        self.assertEqual(preload_plan(fleet[:1], backlogs, MODELS, 1000.0), {"l": "llm"})

    def test_the_box_joins_a_view_that_lacks_it(self):
        self.assertEqual(preload_choice(box("me"), queued("llm", 2, 5.0, 20.0), [], MODELS, 0.0), "llm")


class ShouldUnloadTest(unittest.TestCase):
    def test_table(self):
        warm = box("w", warm_model="llm")
        cases = [  # (box, idle seconds, ttl, pinned) -> unload
            (warm, 600.0, 600.0, (), True),
            (warm, 599.9, 600.0, (), False),
            (warm, 1e9, None, (), False),            # no ttl: never
            (warm, 600.0, 600.0, ("llm",), False),   # pinned
            (warm, 600.0, 600.0, ("sd",), True),
            (box("w"), 600.0, 600.0, (), False),     # nothing to unload
            (dataclasses.replace(warm, busy=True), 600.0, 600.0, (), False),
            (dataclasses.replace(warm, loading="sd"), 600.0, 600.0, (), False),
        ]
        for me, idle_seconds, ttl, pinned, expected in cases:
            with self.subTest(box=me, idle=idle_seconds, ttl=ttl, pinned=pinned):
                self.assertIs(should_unload(me, idle_seconds, ttl, pinned), expected)


class PlanTest(unittest.TestCase):
    def test_plan_covers_the_fleet(self):
        view = FleetView(
            (box("s", SMALL), box("l", BIG, models=("llm", "xl", "sd", "huge")), box("dead", BIG, live=False),
             box("off", BIG, serving=False)),
            dict(MODELS, huge=ModelInfo("huge", 200000)),
            {**queued("llm", 4, 5.0, 60.0), **queued("xl", 1, 5.0, 10.0), **queued("huge", 1),
             **queued("ghost", 1), **queued("sd", 0)})
        result = plan(view, 0.0, lanes={"s": MODEL})
        self.assertEqual(sorted(result.inputs), ["l", "s"])
        self.assertEqual(result.inputs["s"].lane, MODEL)
        self.assertEqual(result.preloads, {"s": "llm"})  # xl's 10 s of work is not worth a 100 s load
        self.assertEqual(result.unplaceable, {"ghost": Unplaceable.MODEL_UNKNOWN,
                                              "huge": Unplaceable.NO_BOX_BIG_ENOUGH})

    def test_a_fleet_on_a_virtual_clock_drains_without_thrashing(self):
        # Two boxes and two models' jobs arriving together: each box settles on one model,
        # every job runs, and no box loads more than the models it ends up serving.
        jobs = {"llm": 12, "sd": 12}
        boxes = {"a": box("a", SMALL), "b": box("b", SMALL)}
        busy_until = {"a": 0.0, "b": 0.0}
        loads = {"a": 0, "b": 0}
        now = 0.0
        while any(jobs.values()) and now < 10000.0:
            backlogs = {model: Backlog(model, count, now, 20.0) for model, count in jobs.items()}
            for worker_id in sorted(boxes):
                if busy_until[worker_id] > now:
                    continue
                view = FleetView(tuple(dataclasses.replace(b, busy=busy_until[w] > now) for w, b in boxes.items()),
                                 MODELS, backlogs)
                inputs = plan(view, now).inputs[worker_id]
                model = next_model(inputs, {m for m, count in jobs.items() if count})
                if model is None:
                    continue
                me = boxes[worker_id]
                took = 20.0
                if me.warm_model != model:
                    loads[worker_id] += 1
                    took += MODELS[model].load_seconds
                    boxes[worker_id] = dataclasses.replace(me, warm_model=model, warm_since=now + took - 20.0)
                busy_until[worker_id] = now + took
                jobs[model] -= 1
            now += 1.0
        self.assertEqual(jobs, {"llm": 0, "sd": 0})
        self.assertEqual(loads, {"a": 1, "b": 1})
        self.assertEqual({b.warm_model for b in boxes.values()}, {"llm", "sd"})


if __name__ == "__main__":
    unittest.main()
