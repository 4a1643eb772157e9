"""A workflow run's DAG as the panel draws it: a layered layout and its inline SVG, pure.

Owns ``layout`` (a simple Sugiyama-style drawing: each node's layer is its longest path
from a root, the order within each layer comes from a few barycentre sweeps that keep the
order with the fewest crossings, ties broken by id, and each layer is placed under its
parents without two boxes overlapping), the cut of a large graph to what a page can show
(``focus``: the nodes within some hops of one node; ``visible``: at most ``MAX_NODES``, with
the count left out), and ``dag_svg``, the drawing itself.

Long edges get no dummy nodes: an edge that skips layers is one curve, so every sweep
stays O(V + E) (with a sort per layer) however far edges reach; crossings are counted
between edges that join the same two layers.

The SVG carries no script, no ``style`` attribute, no ``id`` or ``data-`` attribute on a
node: the panel's stylesheet draws it through classes (``dag``, ``edge``, ``arrowhead``,
``dag-node``, ``kind-<kind>``, ``node``, ``state-<state>``, ``label``, ``detail``), since the
panel's Content-Security-Policy forbids inline style. The one ``id`` is the arrowhead
marker's in ``<defs>``. Every text is escaped with ``html.escape`` after characters XML
cannot hold and bidirectional controls are replaced, so a hostile node id (markup, quotes,
right-to-left overrides, 10,000 characters) is only ever text. Pure: takes ids, edges and
node views, returns values and text. Imports only the stdlib, the leaf ``rowfleet.names``
and ``rowfleet.panel.svg`` (its number formatter); never the store, the server or the CLI.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import html
import re
import urllib.parse
from typing import Any, Callable, Iterable, Mapping, Sequence

from rowfleet import names
from rowfleet.panel import svg

MAX_NODES = 200  # nodes one page draws; a larger run is shown in part, around a chosen node
SWEEPS = 4  # rounds of barycentre sweeps (one down, one up each)

NODE_WIDTH = 188
NODE_HEIGHT = 44
COLUMN_GAP = 24  # between two boxes of one layer
LAYER_GAP = 56  # between layers: room for the edges and their arrowheads
MARGIN = 12
LABEL_CHARS = 24  # characters of a node's id in its box; the whole id is in its title
TITLE_CHARS = 256  # characters of an id in a title: more than any valid id (64), less than a hostile one
ARROW = "dag-arrow"

Edge = tuple[str, str]  # (parent, child)

_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
_NOT_CLASS = re.compile("[^a-z_]")
_URL_BREAKING = re.compile("[\x00-\x20\x7f]")


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each node's box goes: ``positions`` maps an id to its box's top-left corner
    ``(x, y)`` (every box is ``node_width`` by ``node_height``); ``layers`` holds the ids of
    each layer, left to right; ``edges`` are the edges drawn (those between laid-out nodes
    that go forward in the given order); ``crossings`` counts those of them that cross."""

    positions: dict[str, tuple[float, float]]
    layers: tuple[tuple[str, ...], ...]
    edges: tuple[Edge, ...]
    width: float
    height: float
    crossings: int
    node_width: float = NODE_WIDTH
    node_height: float = NODE_HEIGHT


@dataclasses.dataclass(frozen=True)
class Visible:
    """The part of a graph one page draws: ``nodes`` (in the given order) and the ``edges``
    between them, out of ``total`` nodes, ``left_out`` of which are not drawn; ``focus`` is
    the node the part is centred on (None when none was asked for or the one asked for is
    not in the graph), ``hops`` how far from it the part reaches."""

    nodes: tuple[str, ...]
    edges: tuple[Edge, ...]
    total: int
    left_out: int
    focus: str | None
    hops: int


def layout(nodes: Iterable[Any], edges: Iterable[tuple[Any, Any]]) -> Layout:
    """Lay out ``nodes`` (ids in topological order) joined by ``edges`` (``(parent, child)``
    pairs) in layers, top to bottom. An id is taken as its ``str``; a repeated id counts
    once; an edge to an unknown node, or one that does not go forward in ``nodes`` (a cycle
    written by plain SQL), is left out, so the layering always ends.

    >>> drawn = layout(["load", "left", "right", "join"],
    ...                [("load", "left"), ("load", "right"), ("left", "join"), ("right", "join")])
    >>> drawn.layers
    (('load',), ('left', 'right'), ('join',))
    >>> drawn.positions["load"], drawn.positions["left"], drawn.positions["right"], drawn.positions["join"]
    ((118.0, 12.0), (12.0, 112.0), (224.0, 112.0), (118.0, 212.0))
    >>> drawn.width, drawn.height, drawn.crossings
    (424.0, 268.0, 0)
    """
    order = list(dict.fromkeys(str(node) for node in nodes))
    index = {node: at for at, node in enumerate(order)}
    kept = []
    for parent, child in dict.fromkeys((str(parent), str(child)) for parent, child in edges):
        if parent in index and child in index and index[parent] < index[child]:
            kept.append((parent, child))
    kept.sort(key=lambda edge: (index[edge[0]], index[edge[1]]))  # the drawing does not depend on the edges' order
    parents: dict[str, list[str]] = {node: [] for node in order}
    children: dict[str, list[str]] = {node: [] for node in order}
    for parent, child in kept:
        parents[child].append(parent)
        children[parent].append(child)
    layer_of: dict[str, int] = {}
    for node in order:  # topological: every parent's layer is known before its child's
        layer_of[node] = max((layer_of[parent] + 1 for parent in parents[node]), default=0)
    layers: list[list[str]] = [[] for _ in range(max(layer_of.values(), default=-1) + 1)]
    for node in order:
        layers[layer_of[node]].append(node)
    for layer in layers:
        layer.sort()
    layers, crossings = _ordered(layers, parents, children, kept, layer_of)
    positions = _placed(layers, parents)
    width = max((x for x, _ in positions.values()), default=0.0) + NODE_WIDTH + MARGIN
    height = float(len(layers) * (NODE_HEIGHT + LAYER_GAP) - LAYER_GAP + 2 * MARGIN if layers else 2 * MARGIN)
    return Layout(positions, tuple(tuple(layer) for layer in layers), tuple(kept),
                  width if positions else 2.0 * MARGIN, height, crossings)


def _ordered(layers: list[list[str]], parents: Mapping[str, list[str]], children: Mapping[str, list[str]],
             edges: Sequence[Edge], layer_of: Mapping[str, int]) -> tuple[list[list[str]], int]:
    """The order within each layer after barycentre sweeps, one down and one up per round,
    until a round brings no fewer crossings or ``SWEEPS`` rounds are done: the first order
    seen with the fewest crossings, and that count."""
    between: dict[tuple[int, int], list[Edge]] = collections.defaultdict(list)
    for parent, child in edges:
        between[layer_of[parent], layer_of[child]].append((parent, child))
    groups = [group for group in between.values() if len(group) > 1]  # a lone edge crosses nothing
    best, fewest = [list(layer) for layer in layers], _crossings(layers, groups)
    sweeps = [(range(1, len(layers)), parents), (range(len(layers) - 2, -1, -1), children)]
    for _ in range(SWEEPS):
        before = fewest
        for rows, neighbours in sweeps:
            if fewest == 0:
                return best, 0
            place = _centred(layers)
            for row in rows:
                layer = layers[row]
                if len(layer) < 2:
                    continue
                layer.sort(key=lambda node: (_barycentre(node, neighbours[node], place), node))
                middle = (len(layer) - 1) / 2
                place.update((node, at - middle) for at, node in enumerate(layer))
            count = _crossings(layers, groups)
            if count < fewest:
                best, fewest = [list(layer) for layer in layers], count
        if fewest == before:
            break
    return best, fewest


def _centred(layers: Iterable[Sequence[str]]) -> dict[str, float]:
    """Each node's place in its layer, counted from the layer's middle, so that layers of
    different widths line up around one axis."""
    return {node: at - (len(layer) - 1) / 2 for layer in layers for at, node in enumerate(layer)}


def _barycentre(node: str, neighbours: Sequence[str], place: Mapping[str, float]) -> float:
    if not neighbours:  # nothing pulls it: it keeps its place
        return place[node]
    return sum([place[neighbour] for neighbour in neighbours]) / len(neighbours)


def _crossings(layers: Sequence[Sequence[str]], groups: Iterable[Sequence[Edge]]) -> int:
    """How many pairs of edges cross among each group of edges that join the same two
    layers: two cross when one starts left of the other and ends right of it (edges that
    share an end do not cross).

    >>> _crossings([["a", "b"], ["c", "d"]], [[("a", "d"), ("b", "c"), ("a", "c")]])
    1
    >>> _crossings([["a", "b"], ["c", "d"]], [[("a", "d"), ("b", "c"), ("a", "c"), ("b", "d")]])
    1
    """
    place = {node: at for layer in layers for at, node in enumerate(layer)}
    wide = 1 + max(map(len, layers), default=0)  # (start, end) as one integer, which sorts faster than a pair
    total = 0
    for group in groups:
        ends: list[int] = []  # lower ends of the edges seen so far (those starting further left), sorted
        for both in sorted([place[parent] * wide + place[child] for parent, child in group]):
            end = both % wide
            total += len(ends) - bisect.bisect_right(ends, end)
            bisect.insort(ends, end)
    return total


def _placed(layers: Sequence[Sequence[str]], parents: Mapping[str, list[str]]) -> dict[str, tuple[float, float]]:
    """Boxes' corners: the first layer side by side, each later box as near the middle of
    its parents as its layer's order and spacing allow (the mean of a packing from the left
    and one from the right, which both keep the spacing, so their mean does too)."""
    step = NODE_WIDTH + COLUMN_GAP
    x: dict[str, float] = {}
    for row, layer in enumerate(layers):
        if row == 0:
            wanted = [float(at * step) for at in range(len(layer))]
        else:
            wanted = [sum([x[parent] for parent in parents[node]]) / len(parents[node]) for node in layer]
        left, right = wanted, list(wanted)
        for at in range(1, len(layer)):
            left[at] = max(left[at], left[at - 1] + step)
        for at in range(len(layer) - 2, -1, -1):
            right[at] = min(right[at], right[at + 1] - step)
        x.update(zip(layer, [(one + other) / 2 for one, other in zip(left, right)]))
    shift = MARGIN - min(x.values(), default=0.0)
    return {node: (x[node] + shift, float(MARGIN + row * (NODE_HEIGHT + LAYER_GAP)))
            for row, layer in enumerate(layers) for node in layer}


def focus(nodes: Iterable[Any], edges: Iterable[tuple[Any, Any]], center: Any, hops: int) -> list[str]:
    """The ids of ``nodes`` (in their order) within ``hops`` edges of ``center``, following
    edges both ways; empty when ``center`` is not one of them. ``hops`` is checked by
    ``names.check_int`` (at least 0), so a bad value is refused with the one message.

    >>> chain = ["a", "b", "c", "d", "e"]
    >>> focus(chain, [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")], "c", 1)
    ['b', 'c', 'd']
    >>> focus(chain, [], "z", 3)
    []
    """
    return [node for node, _ in _near(nodes, edges, center, hops)]


def _near(nodes: Iterable[Any], edges: Iterable[tuple[Any, Any]], center: Any,
          hops: int) -> list[tuple[str, int]]:
    """``(id, distance)`` of the nodes within ``hops`` of ``center``, in the given order."""
    names.check_int("hops", hops, least=0)
    order = list(dict.fromkeys(str(node) for node in nodes))
    center = str(center)
    if center not in order:
        return []
    known = set(order)
    around: dict[str, list[str]] = {node: [] for node in order}
    for parent, child in edges:
        parent, child = str(parent), str(child)
        if parent in known and child in known:
            around[parent].append(child)
            around[child].append(parent)
    distance, frontier = {center: 0}, [center]
    for step in range(1, hops + 1):
        reached = []
        for node in frontier:
            for neighbour in around[node]:
                if neighbour not in distance:
                    distance[neighbour] = step
                    reached.append(neighbour)
        if not reached:
            break
        frontier = reached
    return [(node, distance[node]) for node in order if node in distance]


def visible(nodes: Iterable[Any], edges: Iterable[tuple[Any, Any]], focus_node: Any = None,
            hops: int = 2) -> Visible:
    """What one page draws of a graph: the nodes within ``hops`` of ``focus_node`` when it
    is given and in the graph, else all of them; at most ``MAX_NODES`` of those (the
    first in topological order, which keeps every drawn node's ancestors; around a focus,
    the nearest), with the edges between them and how many nodes are left out.

    >>> ids = [f"n{i}" for i in range(500)]
    >>> shown = visible(ids, [(f"n{i}", f"n{i + 1}") for i in range(499)])
    >>> len(shown.nodes), shown.left_out, shown.nodes[-1], len(shown.edges)
    (200, 300, 'n199', 199)
    >>> around = visible(ids, [(f"n{i}", f"n{i + 1}") for i in range(499)], focus_node="n250", hops=2)
    >>> around.nodes, around.left_out, around.focus
    (('n248', 'n249', 'n250', 'n251', 'n252'), 495, 'n250')
    """
    order = list(dict.fromkeys(str(node) for node in nodes))
    pairs = [(str(parent), str(child)) for parent, child in edges]
    near = _near(order, pairs, focus_node, hops) if focus_node is not None else []
    if near:
        nearest = sorted(range(len(near)), key=lambda at: (near[at][1], at))[:MAX_NODES]
        chosen = [near[at][0] for at in sorted(nearest)]
        centred_on: str | None = str(focus_node)
    else:
        names.check_int("hops", hops, least=0)
        chosen, centred_on = order[:MAX_NODES], None
    kept = set(chosen)
    shown_edges = tuple(dict.fromkeys((parent, child) for parent, child in pairs
                                      if parent in kept and child in kept))
    return Visible(tuple(chosen), shown_edges, len(order), len(order) - len(chosen), centred_on, hops)


def dag_svg(drawn: Layout, nodes_info: Mapping[str, Any],
            link: Callable[[str], str | None] = lambda node_id: None) -> str:
    """``drawn`` as an ``<svg>``: the edges as curves with an arrowhead, then one ``<g>`` per
    node with a rounded box of class ``node state-<state>``, its id (cut to
    ``LABEL_CHARS``), its state and, for a map node, its item count (``× 12``), and a
    ``<title>`` with the whole id (one longer than ``TITLE_CHARS``, which no valid id is,
    cut there with its length), state, attempts and items. ``nodes_info`` maps an id to
    the node as the store shows it (``RunNode``: ``state``, ``kind``, ``attempts``,
    ``items``; any of them missing or of the wrong type is left out). When ``link(id)``
    gives a relative or http(s) URL the node is a link to it; any other URL is not used.

    >>> class Node:
    ...     def __init__(self, state, kind="task", attempts=1, items=None):
    ...         self.state, self.kind, self.attempts, self.items = state, kind, attempts, items
    >>> drawn = layout(["fetch", "each"], [("fetch", "each")])
    >>> text = dag_svg(drawn, {"fetch": Node("completed"), "each": Node("queued", "map", 2, 12)},
    ...                link=lambda node_id: f"/runs/7/nodes/{node_id}")
    >>> text.startswith('<svg class="dag" viewBox="0 0 212 168"')
    True
    >>> '<a href="/runs/7/nodes/each"><rect class="node state-queued"' in text, "× 12" in text
    (True, True)
    >>> '<path class="edge" d="M106,56 C106,84 106,84 106,112" marker-end="url(#dag-arrow)"/>' in text
    True
    """
    width, height = svg.coordinate(drawn.width), svg.coordinate(drawn.height)
    half = drawn.node_width / 2
    parts = [f'<svg class="dag" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="workflow graph">',
             f'<defs><marker id="{ARROW}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" '
             f'orient="auto"><path class="arrowhead" d="M0,0 L10,5 L0,10 z"/></marker></defs>']
    for parent, child in drawn.edges:
        (x1, y1), (x2, y2) = drawn.positions[parent], drawn.positions[child]
        x1, y1, x2 = x1 + half, y1 + drawn.node_height, x2 + half
        middle = (y1 + y2) / 2
        parts.append(f'<path class="edge" d="M{_xy(x1, y1)} C{_xy(x1, middle)} {_xy(x2, middle)} {_xy(x2, y2)}" '
                     f'marker-end="url(#{ARROW})"/>')
    for layer in drawn.layers:
        for node_id in layer:
            parts.append(_node_svg(node_id, drawn, nodes_info.get(node_id), link(node_id)))
    parts.append("</svg>")
    return "".join(parts)


def _node_svg(node_id: str, drawn: Layout, info: Any, url: str | None) -> str:
    x, y = drawn.positions[node_id]
    state = getattr(info, "state", None)
    state = state if isinstance(state, str) and state else "unknown"
    kind = getattr(info, "kind", None)
    kind = kind if isinstance(kind, str) else "unknown"
    attempts, items = _count(getattr(info, "attempts", None)), _count(getattr(info, "items", None))
    facts = [state]
    if attempts is not None:
        facts.append(f"attempts {attempts}")
    if items is not None:
        facts.append(f"items {items}")
    detail = _clipped(state, LABEL_CHARS) + (f" · × {items}" if items is not None else "")
    box = (f'<rect class="node state-{_css(state)}" x="{svg.coordinate(x)}" y="{svg.coordinate(y)}" '
           f'width="{svg.coordinate(drawn.node_width)}" height="{svg.coordinate(drawn.node_height)}" rx="6" ry="6"/>'
           f'<text class="label" x="{svg.coordinate(x + 8)}" y="{svg.coordinate(y + 18)}">'
           f'{_text(_clipped(node_id, LABEL_CHARS))}</text>'
           f'<text class="detail" x="{svg.coordinate(x + 8)}" y="{svg.coordinate(y + 35)}">{_text(detail)}</text>')
    href = _safe_url(url)
    if href is not None:
        box = f'<a href="{_text(href)}">{box}</a>'
    title = f"{_clipped(node_id, TITLE_CHARS, counted=True)}: {', '.join(facts)}"
    return f'<g class="dag-node kind-{_css(kind)}"><title>{_text(title)}</title>{box}</g>'


def _xy(x: float, y: float) -> str:
    return f"{svg.coordinate(x)},{svg.coordinate(y)}"


def _count(value: Any) -> str | None:
    """A count from a row, written with thousands separators; None for anything that is no
    count (a bool, a negative, text, an integer past 64 bits).

    >>> _count(1200), _count(True), _count(-1), _count("12"), _count(10 ** 5000)
    ('1,200', None, None, None, None)
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= names.INT64_MAX:
        return None
    return f"{value:,}"


def _css(value: str) -> str:
    """A value as a class name's tail: lower case, only ``a-z`` and ``_``, never empty.

    >>> _css("awaiting_input"), _css('Failed" onload="x'), _css("<>")
    ('awaiting_input', 'failedonloadx', 'unknown')
    """
    return _NOT_CLASS.sub("", value.lower())[:32] or "unknown"


def _clipped(value: str, most: int, *, counted: bool = False) -> str:
    """``value`` cut to ``most`` characters, the cut marked with an ellipsis (and, when
    ``counted``, the whole length).

    >>> _clipped("short", 24), _clipped("x" * 30, 24)
    ('short', 'xxxxxxxxxxxxxxxxxxxxxxx…')
    >>> _clipped("y" * 10000, 256, counted=True)[-24:]
    'yyy… (10,000 characters)'
    """
    if len(value) <= most:
        return value
    if counted:
        return f"{value[:most]}… ({len(value):,} characters)"
    return value[:most - 1] + "…"


def _text(value: str) -> str:
    """``value`` as SVG text or an attribute: characters XML cannot hold and bidirectional
    controls (which would reorder what follows them) become U+FFFD, then it is escaped.

    >>> _text('<script>"\\u202e\\x00')
    '&lt;script&gt;&quot;\\ufffd\\ufffd'
    """
    return html.escape(_UNSHOWN.sub("\ufffd", value), quote=True)


def _safe_url(url: Any) -> str | None:
    """``url`` when it is a relative or http(s) URL with no space or control character (so no
    ``javascript:`` link hides behind one), else None.

    >>> _safe_url("/runs/7?node=a&b"), _safe_url("javascript:alert(1)"), _safe_url(" javascript:x")
    ('/runs/7?node=a&b', None, None)
    """
    if not isinstance(url, str) or not url or _URL_BREAKING.search(url):
        return None
    try:
        scheme = urllib.parse.urlsplit(url).scheme.lower()
    except ValueError:
        return None
    return url if scheme in ("", "http", "https") else None
