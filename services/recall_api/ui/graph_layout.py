"""The entity graph around an entity, laid out on the server (a small force-directed layout with a
fixed seed), so the page is plain SVG: the same picture on every load, with or without scripts."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from services.recall_api.schemas import GraphSearchResponse

WIDTH = 720
# The canvas is as tall as the drawing needs (a pair of nodes is a short strip, not a tall empty box).
MIN_HEIGHT = 160
MAX_HEIGHT = 480
# Room for the labels: beside (centred on the node, about 70 px each way) and below it.
_MARGIN_X = 80
_MARGIN_TOP = 30
_MARGIN_BOTTOM = 45
_MAX_WIDEN = 1.5
_ITERATIONS = 300


@dataclass(slots=True)
class GraphNode:
    key: str
    name: str
    entity_type: str
    aliases: list[str]
    sessions: list[str]
    x: float = 0.0
    y: float = 0.0


@dataclass(frozen=True, slots=True)
class GraphEdge:
    source: GraphNode
    target: GraphNode
    relation: str
    current: bool
    valid_from: str | None
    valid_to: str | None


@dataclass(slots=True)
class GraphView:
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    width: int = WIDTH
    height: int = MIN_HEIGHT


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def graph_view(found: GraphSearchResponse) -> GraphView:
    nodes: dict[str, GraphNode] = {}
    for row in found.entities:
        key = _text(row.get("key"))
        if not key:
            continue
        name = _text(row.get("name")) or key
        aliases = [a for a in row.get("aliases") or [] if isinstance(a, str) and a != name]
        provenance = row.get("provenance") or []
        sessions = sorted({_text(p.get("session_id")) for p in provenance if isinstance(p, dict)} - {""})
        nodes[key] = GraphNode(key, name, _text(row.get("entity_type")), aliases, sessions)
    edges = [
        GraphEdge(
            nodes[_text(r.get("source_key"))],
            nodes[_text(r.get("target_key"))],
            _text(r.get("type")),
            bool(r.get("current", True)),
            r.get("valid_from") if isinstance(r.get("valid_from"), str) else None,
            r.get("valid_to") if isinstance(r.get("valid_to"), str) else None,
        )
        for r in found.relations
        if _text(r.get("source_key")) in nodes and _text(r.get("target_key")) in nodes
    ]
    view = GraphView(nodes=sorted(nodes.values(), key=lambda n: n.key), edges=edges)
    _lay_out(view)
    return view


def _lay_out(view: GraphView) -> None:
    """Fruchterman-Reingold: nodes repel, edges pull, the step cools; then scaled into the box."""
    count = len(view.nodes)
    if count == 0:
        return
    generator = random.Random(7)  # a fixed seed: the same graph gives the same picture
    for node in view.nodes:
        node.x, node.y = generator.uniform(-1, 1), generator.uniform(-1, 1)
    ideal = 1.0 / math.sqrt(count)
    step = 0.1
    for _ in range(_ITERATIONS):
        moves = {id(n): [0.0, 0.0] for n in view.nodes}
        for i, a in enumerate(view.nodes):
            for b in view.nodes[i + 1 :]:
                dx, dy = a.x - b.x, a.y - b.y
                distance = max(math.hypot(dx, dy), 1e-3)
                push = ideal * ideal / distance
                moves[id(a)][0] += dx / distance * push
                moves[id(a)][1] += dy / distance * push
                moves[id(b)][0] -= dx / distance * push
                moves[id(b)][1] -= dy / distance * push
        for edge in view.edges:
            dx, dy = edge.source.x - edge.target.x, edge.source.y - edge.target.y
            distance = max(math.hypot(dx, dy), 1e-3)
            pull = distance * distance / ideal
            moves[id(edge.source)][0] -= dx / distance * pull
            moves[id(edge.source)][1] -= dy / distance * pull
            moves[id(edge.target)][0] += dx / distance * pull
            moves[id(edge.target)][1] += dy / distance * pull
        for node in view.nodes:
            mx, my = moves[id(node)]
            length = max(math.hypot(mx, my), 1e-9)
            node.x += mx / length * min(length, step)
            node.y += my / length * min(length, step)
        step *= 0.985
    _fit(view)


def _along_widest(view: GraphView) -> None:
    """Turn the drawing so its longest spread runs along the canvas's width (the principal axis), so
    a pair or a chain lies across the page instead of corner to corner."""
    count = len(view.nodes)
    mean_x = sum(n.x for n in view.nodes) / count
    mean_y = sum(n.y for n in view.nodes) / count
    sxx = sum((n.x - mean_x) ** 2 for n in view.nodes)
    syy = sum((n.y - mean_y) ** 2 for n in view.nodes)
    sxy = sum((n.x - mean_x) * (n.y - mean_y) for n in view.nodes)
    angle = 0.5 * math.atan2(2 * sxy, sxx - syy)
    cos, sin = math.cos(-angle), math.sin(-angle)
    for node in view.nodes:
        dx, dy = node.x - mean_x, node.y - mean_y
        node.x, node.y = dx * cos - dy * sin, dx * sin + dy * cos


def _fit(view: GraphView) -> None:
    """Scale the drawing evenly (no stretching) to the canvas's width, and make the canvas as tall as
    the drawing then is, within MIN_HEIGHT..MAX_HEIGHT; a drawing taller than that fits the height
    instead and is widened towards the sides. One node sits in the middle."""
    if len(view.nodes) > 1:
        _along_widest(view)
    xs, ys = [n.x for n in view.nodes], [n.y for n in view.nodes]
    span_x, span_y = max(xs) - min(xs), max(ys) - min(ys)
    inner_w = view.width - 2 * _MARGIN_X
    scale = inner_w / span_x if span_x > 1e-9 else 0.0
    inner_h = min(
        max(span_y * scale, MIN_HEIGHT - _MARGIN_TOP - _MARGIN_BOTTOM), MAX_HEIGHT - _MARGIN_TOP - _MARGIN_BOTTOM
    )
    if span_y * scale > inner_h:
        scale = inner_h / span_y
    view.height = round(inner_h + _MARGIN_TOP + _MARGIN_BOTTOM)
    # A round drawing that fits the height leaves the sides empty: widen it, by at most half again
    # (more would distort the picture).
    scale_x = min(inner_w / span_x, scale * _MAX_WIDEN) if span_x > 1e-9 else 0.0
    centre_x, centre_y = (max(xs) + min(xs)) / 2, (max(ys) + min(ys)) / 2
    for node in view.nodes:
        node.x = view.width / 2 + (node.x - centre_x) * scale_x
        node.y = _MARGIN_TOP + inner_h / 2 + (node.y - centre_y) * scale
