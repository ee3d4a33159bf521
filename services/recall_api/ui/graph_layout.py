"""The entity graph around an entity, laid out on the server (a small force-directed layout with a
fixed seed), so the page is plain SVG: the same picture on every load, with or without scripts."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from services.recall_api.schemas import GraphSearchResponse

WIDTH = 720
HEIGHT = 460
_MARGIN = 60
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
    height: int = HEIGHT


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


def _fit(view: GraphView) -> None:
    xs, ys = [n.x for n in view.nodes], [n.y for n in view.nodes]
    span_x, span_y = max(xs) - min(xs) or 1.0, max(ys) - min(ys) or 1.0
    for node in view.nodes:
        node.x = _MARGIN + (node.x - min(xs)) / span_x * (view.width - 2 * _MARGIN) if len(xs) > 1 else view.width / 2
        node.y = _MARGIN + (node.y - min(ys)) / span_y * (view.height - 2 * _MARGIN) if len(ys) > 1 else view.height / 2
