"""Pure logic of the memory browser's new panels: the graph fills its canvas for one, two or many
nodes; the list is newest first; the add-session form's lines become turns (or a clear reason)."""

from __future__ import annotations

import pytest

from services.recall_api.schemas import GraphSearchResponse
from services.recall_api.ui.add_session import FormProblem, parse_turns
from services.recall_api.ui.graph_layout import MAX_HEIGHT, MIN_HEIGHT, WIDTH, GraphView, graph_view
from services.recall_api.ui.overview import newest_first
from services.recall_api.write_schemas import MemoryRecord


def _graph(count: int, *, star: bool = False) -> GraphView:
    entities = [{"key": f"k{i}", "name": f"Entity {i}", "entity_type": "Thing"} for i in range(count)]
    pairs = [(0, i) for i in range(1, count)] if star else [(i, i + 1) for i in range(count - 1)]
    relations = [{"source_key": f"k{a}", "target_key": f"k{b}", "type": "KNOWS"} for a, b in pairs]
    return graph_view(GraphSearchResponse(entities=entities, relations=relations))


def _spread(view: GraphView) -> tuple[float, float]:
    xs, ys = [n.x for n in view.nodes], [n.y for n in view.nodes]
    return max(xs) - min(xs), max(ys) - min(ys)


def test_one_node_sits_in_the_middle_of_a_short_canvas() -> None:
    view = _graph(1)
    assert view.height == MIN_HEIGHT
    (node,) = view.nodes
    assert (node.x, node.y) == pytest.approx((WIDTH / 2, view.height / 2), abs=25)


def test_two_nodes_lie_across_the_canvas_not_corner_to_corner() -> None:
    view = _graph(2)
    width, height = _spread(view)
    assert width >= 0.75 * WIDTH, "the pair spans the canvas's width"
    assert height < 1, "side by side, on one line"
    assert view.height == MIN_HEIGHT, "a short strip, not a tall empty box"
    assert all(0 < n.y < view.height for n in view.nodes)


def test_many_nodes_fill_the_canvas_both_ways() -> None:
    view = _graph(12, star=True)
    width, height = _spread(view)
    assert MIN_HEIGHT < view.height <= MAX_HEIGHT
    assert width >= 0.75 * WIDTH
    assert height >= 0.75 * view.height
    assert all(0 < n.x < WIDTH and 0 < n.y < view.height for n in view.nodes)


def test_the_layout_is_the_same_on_every_load() -> None:
    assert [(n.x, n.y) for n in _graph(6).nodes] == [(n.x, n.y) for n in _graph(6).nodes]


def _record(item_id: str, occurred_at: str | None) -> MemoryRecord:
    return MemoryRecord(id=item_id, kind="fact", text=item_id, occurred_at=occurred_at, scope="personal", channels=[])


def test_the_list_is_newest_first_across_offsets_with_undated_last() -> None:
    items = [
        _record("a", "2026-11-25T10:00:00+09:00"),  # 01:00 UTC
        _record("b", "2026-11-25T02:00:00+00:00"),
        _record("c", None),
        _record("d", "2026-11-24T23:00:00-05:00"),  # 04:00 UTC on the 25th: the newest
        _record("e", "2026-11-25T01:00:00+00:00"),  # the same instant as a: by id
    ]
    assert [m.id for m in newest_first(items)] == ["d", "b", "a", "e", "c"]


def test_typed_lines_become_turns() -> None:
    typed = "user: I moved to Busan.\nAssistant: Noted, Busan.\n  And the office?\n\nplain line"
    assert parse_turns(typed) == [
        {"role": "user", "content": "I moved to Busan."},
        {"role": "assistant", "content": "Noted, Busan.\nAnd the office?"},
        {"role": "user", "content": "plain line"},
    ]


@pytest.mark.parametrize(("typed", "reason"), [("", "at least one turn"), ("user: hi\nassistant:", "turn 2")])
def test_a_form_without_turns_says_why(typed: str, reason: str) -> None:
    with pytest.raises(FormProblem, match=reason):
        parse_turns(typed)
