"""The panel's drawing of a workflow run's DAG (``rowfleet.panel.dag_layout``): layers by
longest path, boxes that never overlap, edges that always go down, crossings removed where
a known order has none, a large graph cut to a focus and a cap with the count left out,
and SVG that stays well-formed text whatever the node ids hold. Pure; no server."""

from __future__ import annotations

import itertools
import random
import unittest
import xml.etree.ElementTree as ElementTree

from rowfleet.names import InvalidValue
from rowfleet.panel import dag_layout
from rowfleet.panel.dag_layout import MAX_NODES, dag_svg, focus, layout, visible


class View:
    """A node as the store shows it (the fields of ``RunNode`` that the drawing reads)."""

    def __init__(self, state="pending", kind="task", attempts=0, items=None):
        self.state, self.kind, self.attempts, self.items = state, kind, attempts, items


def chain(count: int) -> tuple[list[str], list[tuple[str, str]]]:
    ids = [f"n{i:04d}" for i in range(count)]
    return ids, list(zip(ids, ids[1:]))


def random_dag(seed: int, count: int, parents: int = 2, reach: int | None = None):
    rng = random.Random(seed)
    ids = [f"n{i:04d}" for i in range(count)]
    edges = [(ids[rng.randrange(max(0, i - reach) if reach else 0, i)], ids[i])
             for i in range(1, count) for _ in range(rng.randint(1, parents))]
    return ids, edges


def layer_of(drawn) -> dict[str, int]:
    return {node: row for row, layer in enumerate(drawn.layers) for node in layer}


def brute_crossings(drawn) -> int:
    """Crossings counted from the drawn x positions, pair by pair: edges joining the same two
    layers cross when their ends swap sides (an independent count of what layout reports)."""
    rows, total = layer_of(drawn), 0
    for (a, b), (c, d) in itertools.combinations(drawn.edges, 2):
        if (rows[a], rows[b]) != (rows[c], rows[d]) or a == c or b == d:
            continue
        top = drawn.positions[a][0] - drawn.positions[c][0]
        bottom = drawn.positions[b][0] - drawn.positions[d][0]
        total += top * bottom < 0
    return total


def overlapping(drawn) -> list[tuple[str, str]]:
    return [(one, other) for (one, (x1, y1)), (other, (x2, y2)) in itertools.combinations(drawn.positions.items(), 2)
            if abs(x1 - x2) < drawn.node_width and abs(y1 - y2) < drawn.node_height]


class LayeringTest(unittest.TestCase):
    def test_a_node_sits_on_its_longest_path_from_a_root(self):
        cases = [  # name, nodes, edges -> layers (each in drawn order)
            ("one", ["a"], [], [["a"]]),
            ("chain", ["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("c", "d")], [["a"], ["b"], ["c"], ["d"]]),
            ("diamond", ["top", "l", "r", "bottom"], [("top", "l"), ("top", "r"), ("l", "bottom"), ("r", "bottom")],
             [["top"], ["l", "r"], ["bottom"]]),
            ("fan-out", ["root"] + [f"c{i}" for i in range(6)], [("root", f"c{i}") for i in range(6)],
             [["root"], [f"c{i}" for i in range(6)]]),
            ("fan-in", [f"p{i}" for i in range(3)] + ["sink"], [(f"p{i}", "sink") for i in range(3)],
             [["p0", "p1", "p2"], ["sink"]]),
            ("skip edge", ["a", "b", "c"], [("a", "b"), ("b", "c"), ("a", "c")], [["a"], ["b"], ["c"]]),
            ("two roots, one deeper", ["a", "b", "x", "c"], [("a", "b"), ("b", "c"), ("x", "c")],
             [["a", "x"], ["b"], ["c"]]),
            ("unknown ends and repeats left out", ["a", "b", "a"], [("a", "b"), ("a", "ghost"), ("a", "b")],
             [["a"], ["b"]]),
            ("an edge against the order (a cycle) left out", ["a", "b"], [("a", "b"), ("b", "a"), ("a", "a")],
             [["a"], ["b"]]),
            ("ids taken as text", [1, 2], [(1, 2)], [["1"], ["2"]]),
            ("empty", [], [], []),
        ]
        for name, nodes, edges, expected in cases:
            with self.subTest(name):
                drawn = layout(nodes, edges)
                self.assertEqual([list(layer) for layer in drawn.layers], expected)
                self.assertEqual(sorted(drawn.positions), sorted(node for layer in expected for node in layer))

    def test_only_edges_between_known_nodes_going_forward_are_drawn(self):
        drawn = layout(["a", "b", "c"], [("b", "c"), ("a", "b"), ("c", "a"), ("a", "zz"), ("b", "c")])
        self.assertEqual(drawn.edges, (("a", "b"), ("b", "c")))

    def test_no_two_boxes_overlap_and_every_edge_goes_down(self):
        graphs = {
            "chain": chain(30),
            "diamond": (["a", "b", "c", "d"], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]),
            "fan-out": (["r"] + [f"c{i:02d}" for i in range(40)], [("r", f"c{i:02d}") for i in range(40)]),
            "random": random_dag(7, 150),
            "local": random_dag(8, 150, parents=3, reach=6),
        }
        for name, (nodes, edges) in graphs.items():
            with self.subTest(name):
                drawn = layout(nodes, edges)
                self.assertEqual(overlapping(drawn), [])
                rows = layer_of(drawn)
                for parent, child in drawn.edges:
                    self.assertLess(rows[parent], rows[child])
                    self.assertGreaterEqual(drawn.positions[child][1],
                                            drawn.positions[parent][1] + drawn.node_height)
                for x, y in drawn.positions.values():
                    self.assertGreaterEqual(min(x, y), 0)
                    self.assertLessEqual(x + drawn.node_width, drawn.width)
                    self.assertLessEqual(y + drawn.node_height, drawn.height)

    def test_a_single_child_sits_under_its_parent(self):
        drawn = layout(["r", "a", "b", "c", "below"], [("r", "a"), ("r", "b"), ("r", "c"), ("c", "below")])
        self.assertEqual(drawn.positions["below"][0], drawn.positions["c"][0])
        self.assertEqual(drawn.positions["r"][0], drawn.positions["b"][0])  # a fan-out centred under its root


class CrossingTest(unittest.TestCase):
    def test_the_sweeps_find_the_fewest_crossings_on_known_cases(self):
        cases = [  # name, nodes, edges -> fewest crossings any order allows
            ("twisted pair", ["a", "b", "c", "d"], [("a", "d"), ("b", "c")], 0),
            ("twisted three", ["a", "b", "c", "x", "y", "z"], [("a", "z"), ("b", "y"), ("c", "x")], 0),
            ("K2,2", ["a", "b", "c", "d"], [("a", "c"), ("a", "d"), ("b", "c"), ("b", "d")], 1),
            ("K2,2 and a twisted pair", ["a", "b", "e", "f", "c", "d", "g", "h"],
             [("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("e", "h"), ("f", "g")], 1),
            ("K3,3", ["a", "b", "c", "x", "y", "z"], [(p, q) for p in "abc" for q in "xyz"], 9),
            ("a twist two layers deep", ["a", "b", "m", "n", "p", "q"],
             [("a", "n"), ("b", "m"), ("m", "p"), ("n", "q"), ("a", "q")], 0),
        ]
        for name, nodes, edges, fewest in cases:
            with self.subTest(name):
                drawn = layout(nodes, edges)
                self.assertEqual(drawn.crossings, fewest)
                self.assertEqual(brute_crossings(drawn), fewest)

    def test_the_reported_count_is_the_drawings_count(self):
        for seed in range(5):
            with self.subTest(seed=seed):
                drawn = layout(*random_dag(seed, 60, parents=3, reach=8))
                self.assertEqual(drawn.crossings, brute_crossings(drawn))

    def test_the_sweeps_never_leave_more_crossings_than_the_first_order(self):
        nodes, edges = random_dag(3, 200, parents=3, reach=10)
        first = dag_layout.SWEEPS
        try:
            dag_layout.SWEEPS = 0
            unswept = layout(nodes, edges).crossings
        finally:
            dag_layout.SWEEPS = first
        self.assertLess(layout(nodes, edges).crossings, unswept)


class DeterminismTest(unittest.TestCase):
    def test_the_same_graph_draws_the_same_whatever_the_edges_order(self):
        nodes, edges = random_dag(11, 120, parents=3)
        shuffled = list(edges)
        random.Random(5).shuffle(shuffled)
        info = {node: View("completed") for node in nodes}
        first = dag_svg(layout(nodes, edges), info)
        self.assertEqual(dag_svg(layout(nodes, edges), info), first)
        self.assertEqual(dag_svg(layout(nodes, shuffled), info), first)

    def test_ties_are_broken_by_id(self):
        drawn = layout(["r", "zeta", "alpha", "mid"], [("r", "zeta"), ("r", "alpha"), ("r", "mid")])
        self.assertEqual(drawn.layers[1], ("alpha", "mid", "zeta"))


class FocusTest(unittest.TestCase):
    NODES = ["a", "b", "c", "d", "e", "side"]
    EDGES = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("side", "c")]

    def test_the_nodes_within_some_hops_both_ways(self):
        cases = [  # center, hops -> nodes
            ("c", 0, ["c"]),
            ("c", 1, ["b", "c", "d", "side"]),
            ("c", 2, ["a", "b", "c", "d", "e", "side"]),
            ("a", 2, ["a", "b", "c"]),
            ("e", 1, ["d", "e"]),
            ("side", 1, ["c", "side"]),
            ("side", 2, ["b", "c", "d", "side"]),
            ("a", 50, self.NODES[:5] + ["side"]),
            ("ghost", 3, []),
        ]
        for center, hops, expected in cases:
            with self.subTest(center=center, hops=hops):
                self.assertEqual(focus(self.NODES, self.EDGES, center, hops), expected)

    def test_hops_that_are_no_count_are_refused(self):
        for hops in (-1, True, 1.5, "2", None):
            with self.subTest(hops=hops):
                with self.assertRaises(InvalidValue):
                    focus(self.NODES, self.EDGES, "c", hops)
                with self.assertRaises(InvalidValue):
                    visible(self.NODES, self.EDGES, hops=hops)


class VisibleTest(unittest.TestCase):
    def test_a_small_graph_is_drawn_whole(self):
        nodes, edges = chain(12)
        shown = visible(nodes, edges)
        self.assertEqual((shown.nodes, shown.edges, shown.total, shown.left_out, shown.focus),
                         (tuple(nodes), tuple(edges), 12, 0, None))

    def test_a_large_graph_is_capped_with_the_count_left_out(self):
        cases = [  # name, nodes, edges, focus, hops -> shown, left out, focus, first nodes shown
            ("chain", *chain(5000), None, 2, MAX_NODES, 5000 - MAX_NODES, None, ["n0000", "n0001"]),
            ("chain around a node", *chain(5000), "n2500", 3, 7, 4993, "n2500", ["n2497", "n2498"]),
            ("an unknown focus", *chain(5000), "ghost", 2, MAX_NODES, 5000 - MAX_NODES, None, ["n0000", "n0001"]),
            ("a fan-out around its root", ["root"] + [f"c{i:04d}" for i in range(5000)],
             [("root", f"c{i:04d}") for i in range(5000)], "root", 1, MAX_NODES, 5001 - MAX_NODES, "root",
             ["root", "c0000"]),
        ]
        for name, nodes, edges, focus_node, hops, count, left_out, centred, first in cases:
            with self.subTest(name):
                shown = visible(nodes, edges, focus_node=focus_node, hops=hops)
                self.assertEqual(len(shown.nodes), count)
                self.assertEqual((shown.total, shown.left_out, shown.focus), (len(nodes), left_out, centred))
                self.assertEqual(list(shown.nodes[:2]), first)
                kept = set(shown.nodes)
                self.assertEqual(len(kept), count)
                self.assertTrue(all(parent in kept and child in kept for parent, child in shown.edges))
                self.assertEqual(len(shown.edges), sum(parent in kept and child in kept for parent, child in edges))

    def test_the_cap_around_a_focus_keeps_the_nearest(self):
        # a chain whose every node also has 30 leaves: 219 nodes are within 4 hops of the middle
        nodes, edges = [], []
        for i in range(40):
            nodes.append(f"s{i:02d}")
            if i:
                edges.append((f"s{i - 1:02d}", f"s{i:02d}"))
            for leaf in range(30):
                nodes.append(f"s{i:02d}_{leaf:02d}")
                edges.append((f"s{i:02d}", f"s{i:02d}_{leaf:02d}"))
        shown = visible(nodes, edges, focus_node="s20", hops=4)
        self.assertEqual(len(shown.nodes), MAX_NODES)
        distance = {}
        for hops in range(5):
            for node in focus(nodes, edges, "s20", hops):
                distance.setdefault(node, hops)
        drawn = {distance[node] for node in shown.nodes}
        left = {distance[node] for node in focus(nodes, edges, "s20", 4) if node not in shown.nodes}
        self.assertLessEqual(max(drawn), min(left))  # nothing nearer was left out for something further
        self.assertIn("s20", shown.nodes)
        self.assertEqual(list(shown.nodes), [node for node in nodes if node in set(shown.nodes)])


HOSTILE = [
    "<script>alert(1)</script>",
    "\"quoted' & <b>bold</b>",
    "\u202eevil\u2066 right-to-left",
    "x" * 10_000,
    "nul\x00and\x07bell",
    "]]><!-- -->",
    "lone\udc80surrogate",
    "  ",
]


class SvgTest(unittest.TestCase):
    def draw(self, nodes, edges, info, link=lambda node_id: None):
        text = dag_svg(layout(nodes, edges), info, link=link)
        text.encode("utf-8")  # the page is sent as UTF-8: no lone surrogate may reach it
        return text, ElementTree.fromstring(text)

    def test_hostile_ids_and_states_are_text_only(self):
        nodes = list(HOSTILE)
        edges = list(zip(nodes, nodes[1:]))
        info = {node: View(state='failed" onload="x', kind="<map>", attempts=10 ** 5000, items=True) for node in nodes}
        text, root = self.draw(nodes, edges, info, link=lambda node_id: f"/runs/1/nodes?id={node_id}")
        self.assertNotIn("<script", text.lower())
        self.assertNotIn("\u202e", text)
        for element in root.iter():
            with self.subTest(tag=element.tag):
                for name in element.attrib:
                    self.assertFalse(name.lower().startswith(("on", "data-")), name)
                    self.assertNotEqual(name, "style")
                if "id" in element.attrib:
                    self.assertEqual(element.tag, "marker")
        rects = root.findall(".//rect")
        self.assertEqual(len(rects), len(nodes))
        self.assertEqual({rect.get("class") for rect in rects}, {"node state-failedonloadx"})
        self.assertEqual(len(root.findall("g")), len(nodes))
        self.assertEqual(len(root.findall(".//path[@class='edge']")), len(edges))
        for label in root.iter("text"):
            self.assertLessEqual(len(label.text or ""), dag_layout.LABEL_CHARS + 4)
        titles = [title.text for title in root.iter("title")]
        self.assertIn('<script>alert(1)</script>: failed" onload="x', titles)
        self.assertTrue(any(title.startswith("x" * 256 + "… (10,000 characters)") for title in titles))
        self.assertFalse(any("attempts" in title or "items" in title for title in titles))  # no count: left out

    def test_a_node_is_a_link_only_to_a_safe_url_and_the_url_is_escaped(self):
        cases = [  # url -> href drawn (None: no link)
            ('/runs/7?node="a"&x=<b>', '/runs/7?node="a"&x=<b>'),
            ("https://panel.example/runs/7", "https://panel.example/runs/7"),
            ("nodes/a", "nodes/a"),
            ("javascript:alert(1)", None),
            ("JavaScript:alert(1)", None),
            (" javascript:alert(1)", None),
            ("java\tscript:alert(1)", None),
            ("data:text/html,<script>", None),
            ("", None),
            (None, None),
            (42, None),
        ]
        for url, href in cases:
            with self.subTest(url=url):
                text, root = self.draw(["a"], [], {"a": View()}, link=lambda node_id: url)
                links = root.findall(".//a")
                self.assertEqual([link.get("href") for link in links], [] if href is None else [href])
                if links:
                    self.assertEqual(links[0].find("rect").get("class"), "node state-pending")

    def test_a_map_node_shows_its_item_count(self):
        cases = [  # items -> detail text
            (12, "queued · × 12"),
            (1200, "queued · × 1,200"),
            (0, "queued · × 0"),
            (None, "queued"),
            (True, "queued"),
            ("12", "queued"),
            (-3, "queued"),
        ]
        for items, detail in cases:
            with self.subTest(items=items):
                _, root = self.draw(["each"], [], {"each": View("queued", "map", 2, items)})
                self.assertEqual(root.find(".//text[@class='detail']").text, detail)
                self.assertEqual(root.find("g").get("class"), "dag-node kind-map")

    def test_a_node_without_a_view_is_drawn_as_unknown(self):
        _, root = self.draw(["a", "b"], [("a", "b")], {"a": View("running")})
        self.assertEqual([rect.get("class") for rect in root.iter("rect")],
                         ["node state-running", "node state-unknown"])

    def test_the_arrowhead_is_defined_once_and_every_edge_uses_it(self):
        _, root = self.draw(["a", "b", "c"], [("a", "b"), ("a", "c")], {})
        markers = root.findall("defs/marker")
        self.assertEqual([marker.get("id") for marker in markers], [dag_layout.ARROW])
        self.assertEqual({path.get("marker-end") for path in root.findall("path")}, {f"url(#{dag_layout.ARROW})"})

    def test_an_empty_graph_is_still_an_svg(self):
        _, root = self.draw([], [], {})
        self.assertEqual(root.tag, "svg")
        self.assertEqual(root.findall("g"), [])


class LargeGraphTest(unittest.TestCase):
    def test_two_thousand_nodes_lay_out(self):
        for name, (nodes, edges) in {"random": random_dag(1, 2000), "local": random_dag(2, 2000, 3, 30),
                                     "chain": chain(2000)}.items():
            with self.subTest(name):
                drawn = layout(nodes, edges)
                self.assertEqual(len(drawn.positions), 2000)
                rows = layer_of(drawn)
                self.assertTrue(all(rows[parent] < rows[child] for parent, child in drawn.edges))
                for layer in drawn.layers:  # within a layer, boxes left to right a box's width apart
                    xs = [drawn.positions[node][0] for node in layer]
                    self.assertTrue(all(b - a >= drawn.node_width for a, b in zip(xs, xs[1:])))
                ElementTree.fromstring(dag_svg(drawn, {}))


if __name__ == "__main__":
    unittest.main()
