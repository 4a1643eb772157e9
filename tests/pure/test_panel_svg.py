"""The panel's inline SVG charts (``rowfleet.panel.svg``): gaps are never bridged, every
label is escaped, and values that are no numbers are never drawn. Pure; no server."""

from __future__ import annotations

import re
import unittest
import xml.dom.minidom

from rowfleet.panel.svg import Series, segments, sparkline, time_chart


def polylines(text: str) -> list[list[tuple[float, float]]]:
    return [[tuple(float(n) for n in pair.split(",")) for pair in found.split()]
            for found in re.findall(r'<polyline points="([^"]*)"', text)]


class SegmentsTest(unittest.TestCase):
    def test_a_run_breaks_where_samples_are_missing(self):
        cases = [  # points, gap -> runs' times
            ([(0, 1), (2, 1), (4, 1)], 3, [[0, 2, 4]]),
            ([(0, 1), (2, 1), (9, 1), (11, 1)], 3, [[0, 2], [9, 11]]),
            ([(4, 1), (0, 1), (2, 1)], 3, [[0, 2, 4]]),             # out of order: sorted first
            ([(0, 1), (2, None), (4, 1)], 3, [[0], [4]]),           # a value no number is a gap
            ([(0, 1), (2, float("inf")), (3, 1)], 3, [[0], [3]]),
            ([(0, 1), (2, True), (3, 1)], 3, [[0], [3]]),
            ([(0, 1), (2, 10 ** 400), (3, 1)], 3, [[0], [3]]),      # JSON may hold a huge integer
            ([(float("nan"), 1), (1, 1)], 3, [[1]]),
            ([(0, 1), (3, 1)], 3, [[0, 3]]),                        # exactly the gap: still one run
        ]
        for points, gap, expected in cases:
            with self.subTest(points=points):
                self.assertEqual([[at for at, _ in run] for run in segments(points, gap)], expected)


class ChartTest(unittest.TestCase):
    def test_no_line_is_drawn_across_a_gap(self):
        points = [(0, 10), (10, 20), (20, 30), (200, 40), (210, 50)]
        chart = time_chart([Series("cpu", points)], 0, 300, gap=15, high=100, width=300, height=100)
        lines = polylines(chart)
        self.assertEqual(len(lines), 2, chart)
        self.assertEqual([x for x, _ in lines[0]], [0, 10, 20])
        self.assertEqual([x for x, _ in lines[1]], [200, 210])

    def test_a_lone_sample_is_a_dot(self):
        chart = time_chart([Series("cpu", [(0, 10), (100, 20)])], 0, 100, gap=15, high=100, width=100, height=100)
        self.assertEqual(polylines(chart), [])
        self.assertEqual(len(re.findall(r'<circle class="line"', chart)), 2)

    def test_every_label_and_title_is_escaped_and_the_svg_is_well_formed(self):
        hostile = '<script>alert("x")</script> & \' "'
        chart = time_chart([Series(hostile, [(0, 1), (1, 2)], css='line" onload="x', unit="<b>")], 0, 1, gap=5,
                           ticks=[(0.5, hostile)])
        spark = sparkline([(0, 1), (1, 2)], 0, 1, gap=5, label=hostile)
        for text in (chart, spark):
            with self.subTest(text[:20]):
                self.assertNotIn("<script>", text)
                self.assertNotIn('onload="x', text)
                xml.dom.minidom.parseString(text)  # escaped text keeps it one well-formed element

    def test_values_are_clipped_to_the_range_and_points_outside_the_window_left_out(self):
        chart = time_chart([Series("t", [(-10, 5), (0, -5), (5, 50), (10, 500), (20, 5)])], 0, 10, gap=100,
                           low=0, high=100, width=10, height=100)
        self.assertEqual(polylines(chart), [[(0, 100), (5, 50), (10, 0)]])

    def test_a_chart_without_numbers_draws_nothing_and_still_parses(self):
        for series in ([], [Series("empty", [])], [Series("junk", [(0, "high"), (1, None)])]):
            with self.subTest(series=series):
                chart = time_chart(series, 0, 60, gap=5)
                self.assertEqual(polylines(chart), [])
                xml.dom.minidom.parseString(chart)
        xml.dom.minidom.parseString(sparkline([], 0, 60, gap=5))

    def test_hover_titles_give_the_time_and_every_line_value_and_unit(self):
        chart = time_chart([Series("gpu0 temp", [(0, 61.25), (100, 62.0)], unit="°C"),
                            Series("gpu1 temp", [(100, 70.0)], unit="°C")], 0, 100, gap=500, width=100)
        self.assertEqual(re.findall(r"<title>([^<]*)</title>", chart),
                         ["00:00:00 UTC · gpu0 temp 61.25 °C", "00:01:40 UTC · gpu0 temp 62 °C; gpu1 temp 70 °C"])

    def test_hover_targets_are_one_per_column_however_many_points(self):
        points = [(float(t), 1.0) for t in range(3600)]
        chart = time_chart([Series("cpu", points), Series("gpu", points)], 0, 3600, gap=5, width=600)
        self.assertEqual(len(re.findall(r'<rect class="hover"', chart)), 60)


if __name__ == "__main__":
    unittest.main()
