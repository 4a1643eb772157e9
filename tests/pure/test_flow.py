"""The rules of flow control (``rowfleet.flow``), table by table, with no database: a rate's
sliding window, what holds a queue and a key, which keys are saturated, how an operator's
change makes a new limit, and the limit rows plain SQL may have written."""

from __future__ import annotations

import unittest

from rowfleet import flow
from rowfleet.errors import ConfigError
from rowfleet.flow import Hold, Limit, Rate, Use


class RateTest(unittest.TestCase):
    def test_a_window_allows_its_count_and_no_more(self):
        rate = Rate(3, 10.0)
        cases = [  # (starts so far, now, allowed, when the next may start)
            ((), 100.0, True, 100.0),
            ((95.0, 99.0), 100.0, True, 100.0),
            ((95.0, 99.0, 100.0), 100.0, False, 105.0),
            ((90.0, 99.0, 100.0), 100.0, True, 100.0),  # exactly W old: out of the window
            ((80.0, 85.0, 89.9, 95.0), 100.0, True, 100.0),  # older starts never count
            ((99.0, 99.5, 100.0, 100.0), 100.0, False, 109.5),  # only the newest count are kept
            ((200.0, 201.0, 202.0), 100.0, True, 100.0),  # a clock stepped back: far-future starts count no more
        ]
        for starts, now, allowed, ready in cases:
            with self.subTest(starts=starts):
                self.assertEqual(rate.allows(starts, now), allowed)
                self.assertEqual(rate.ready_at(starts, now), ready)

    def test_a_start_keeps_the_window_and_says_when_it_is_full(self):
        rate = Rate(2, 1.0)
        self.assertEqual(rate.started((), 5.0), ((5.0,), None))
        self.assertEqual(rate.started((5.0,), 5.2), ((5.0, 5.2), 6.0))
        self.assertEqual(rate.started((3.0, 5.0, 5.2), 5.5), ((5.2, 5.5), 6.2))

    def test_any_sequence_of_allowed_starts_keeps_every_window_within_the_count(self):
        rate, window, starts = Rate(4, 1.0), (), []
        now = 0.0
        while now < 10.0:
            while rate.allows(window, now):  # as claims at one moment would
                window = rate.started(window, now)[0]
                starts.append(now)
            now = round(now + 0.07, 2)
        self.assertGreaterEqual(len(starts), 36)
        for at in starts:
            self.assertLessEqual(sum(1 for other in starts if at <= other < at + 1.0), 4, at)

    def test_rates_are_read_as_operators_write_them(self):
        cases = [("10/1", Rate(10, 1.0)), ("100/60", Rate(100, 60.0)), (" 5 / 0.5 ", Rate(5, 0.5))]
        for text, expected in cases:
            with self.subTest(text=text):
                self.assertEqual(Rate.parse("--rate", text), expected)
        for text in ("10", "/1", "10/", "0/1", "1/0", "-1/1", "1/-1", "x/1", "1/nan", "1/inf", "10001/1", "1e3/1"):
            with self.subTest(text=text), self.assertRaises(ConfigError):
                Rate.parse("--rate", text)
        self.assertEqual([Rate(10, 1.0).per_second(), Rate(100, 60.0).per_second()], ["10/s", "100/60s"])


class HoldTest(unittest.TestCase):
    def test_what_holds_a_queue(self):
        cases = [  # (limit, use, now, texts)
            (Limit("", "q", concurrency=2), Use({None: 1}), 0.0, []),
            (Limit("", "q", concurrency=2), Use({None: 1, "a": 1}), 0.0, ["queue q at its limit 2 of 2"]),
            (Limit("*", "gpu", concurrency=1), Use({None: 3}), 0.0, ["queue gpu of every project at its limit 3 of 1"]),
            (Limit("", "q", rate=Rate(1, 60.0)), Use(queue_starts=(30.0,)), 60.0, ["rate 1/60s on queue q: next start in 30.0 s"]),
            (Limit("", "q", rate=Rate(1, 60.0)), Use(queue_starts=(0.0,)), 60.0, []),
            (Limit("", "q", per_key=1), Use({"a": 5}), 0.0, []),  # a key's rule holds its key, not the queue
        ]
        for limit, use, now, texts in cases:
            with self.subTest(limit=limit.rules(), use=use):
                self.assertEqual([hold.text for hold in flow.queue_holds(limit, use, now)], texts)

    def test_what_holds_a_key(self):
        limit = Limit("", "q", per_key=2, key_rate=Rate(1, 10.0))
        cases = [  # (key, running by key, its window, texts)
            ("a", {"a": 1}, (), []),
            ("a", {"a": 2}, (), ["a at its limit 2 of 2"]),
            ("a", {"b": 2}, (), []),
            ("a", {}, (95.0,), ["rate 1/10s for a on queue q: next start in 5.0 s"]),
            (None, {None: 9}, (99.0,), []),  # a job without a key is held by no per-key rule
        ]
        for key, running, starts, texts in cases:
            with self.subTest(key=key, running=running):
                self.assertEqual([hold.text for hold in flow.key_holds(limit, Use(running), key, starts, 100.0)], texts)
        every = Limit("*", "q", per_key=1)
        self.assertEqual([hold.text for hold in flow.key_holds(every, Use({"a": 1}), "a", (), 0.0)],
                         ["a at its limit 1 of 1 across every project"])

    def test_saturated_keys_and_when_a_queue_may_start_again(self):
        self.assertEqual(flow.saturated_keys(Limit("", "q", per_key=2), Use({"a": 2, "b": 1, "c": 3, None: 7})),
                         {"a", "c"})
        self.assertEqual(flow.saturated_keys(Limit("", "q", concurrency=2), Use({"a": 9})), set())
        self.assertEqual(flow.ready_at([Hold("rate", "", 5.0), Hold("rate", "", 7.0)]), 7.0)
        self.assertIsNone(flow.ready_at([Hold("rate", "", 5.0), Hold("concurrency", "")]))
        self.assertIsNone(flow.ready_at([]))


class LimitTest(unittest.TestCase):
    def test_an_operators_change_keeps_what_it_does_not_name(self):
        base = Limit("", "api", concurrency=4, rate=Rate(10, 1.0), fair=True)
        cases = [
            (dict(per_key=2), ["at most 4 running", "at most 2 running per key", "rate 10/s", "fair by key"]),
            (dict(fair=False), ["at most 4 running", "rate 10/s"]),
            (dict(clear=True, concurrency=1), ["at most 1 running"]),
            (dict(concurrency=None), ["at most 4 running", "rate 10/s", "fair by key"]),
        ]
        for change, rules in cases:
            with self.subTest(change=change):
                self.assertEqual(flow.changed(base, "", "api", **change).rules(), rules)
        self.assertIsNone(flow.changed(base, "", "api", clear=True))
        self.assertIsNone(flow.changed(None, "", "api", fair=False))  # no rule left: no row
        self.assertEqual(flow.changed(None, "", "api", lost_first=True).rules(), ["lost jobs first"])
        self.assertIsNone(flow.changed(Limit("", "api", lost_first=True), "", "api", lost_first=False))
        for bad in (dict(concurrency=0), dict(per_key=-1), dict(speed=3), dict(concurrency=True),
                    dict(lost_first="yes")):
            with self.subTest(bad=bad), self.assertRaises(ConfigError):
                flow.changed(None, "", "api", **bad)
        for project, queue in (("two words", "q"), ("", "*"), ("", "")):
            with self.subTest(project=project, queue=queue), self.assertRaises(ConfigError):
                Limit(project, queue, concurrency=1)

    def test_rows_plain_sql_wrote_are_read_or_refused_with_the_column_named(self):
        row = {"project": "", "queue": "q", "concurrency": 2, "per_key": None, "rate_count": 5, "rate_seconds": 1,
               "key_rate_count": None, "key_rate_seconds": None, "fair": 1, "lost_first": 0, "updated_at": 1.0,
               "updated_by": None}
        self.assertEqual(Limit.from_row(row).rules(), ["at most 2 running", "rate 5/s", "fair by key"])
        self.assertEqual(Limit.from_row({**row, "lost_first": 1}).rules()[-1], "lost jobs first")
        for change in (dict(concurrency=0), dict(concurrency="2"), dict(rate_seconds=None), dict(rate_count=5.5),
                       dict(fair=7), dict(lost_first="yes"), dict(queue="a b"), dict(key_rate_count=3), dict(rate_seconds=float("nan"))):
            with self.subTest(change=change), self.assertRaises(ConfigError) as raised:
                Limit.from_row({**row, **change})
            self.assertIn("limit row ('', ", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
