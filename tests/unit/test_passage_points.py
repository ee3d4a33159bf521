"""How a turn point's hit counts for its passage (stores/passage_points.py `fold_turn_hits`), pure."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.common.stores.passage_points import Passage, PassageHit, fold_turn_hits
from services.common.stores.vector.port import HybridWeights

WHEN = datetime(2026, 1, 9, tzinfo=UTC)
WEIGHTS = HybridWeights(keyword=0.3, dense=0.7)


def point(episode: str, index: int, within: int | None = None) -> Passage:
    return Passage(episode, index, f"{episode}/{index}/{within}", index, index, "s", "a", WHEN, within=within)


def hit(passage: Passage, dense: float, keyword: float | None) -> PassageHit:
    score = (WEIGHTS.dense * dense + WEIGHTS.keyword * (keyword or 0.0)) / (WEIGHTS.dense + WEIGHTS.keyword)
    return PassageHit(passage, score, dense, keyword)


def test_a_passage_is_as_close_in_meaning_as_its_closest_turn_and_keeps_its_words() -> None:
    passage = point("e1", 0)
    hits = [hit(passage, 0.2, 0.5), hit(point("e1", 3, within=0), 0.6, None), hit(point("e1", 4, within=0), 0.4, None)]
    (folded,) = fold_turn_hits(hits, WEIGHTS)
    assert folded.passage == passage
    assert (folded.dense_score, folded.keyword_score) == (0.6, 0.5)
    assert folded.score == pytest.approx(0.7 * 0.6 + 0.3 * 0.5)


def test_a_turn_reached_without_its_passage_stands_for_it_and_the_order_is_by_score() -> None:
    other = hit(point("e2", 1), 0.3, 0.6)  # 0.39
    turn = point("e1", 7, within=2)
    folded = fold_turn_hits([other, hit(turn, 0.7, None)], WEIGHTS)  # 0.49
    assert [h.passage for h in folded] == [turn, other.passage]
    assert folded[0].keyword_score is None and folded[0].score == pytest.approx(0.49)


def test_turns_of_two_passages_or_episodes_never_mix() -> None:
    hits = [
        hit(point("e1", 0), 0.1, 0.2),
        hit(point("e1", 1), 0.1, 0.2),
        hit(point("e2", 0), 0.1, 0.2),
        hit(point("e1", 5, within=1), 0.9, None),
    ]
    folded = {(h.passage.episode_id, h.passage.index): h.dense_score for h in fold_turn_hits(hits, WEIGHTS)}
    assert folded == {("e1", 1): 0.9, ("e1", 0): 0.1, ("e2", 0): 0.1}


def test_without_meaning_turn_points_add_nothing_and_without_them_nothing_changes() -> None:
    passage_hit = hit(point("e1", 0), 0.0, 0.5)
    assert fold_turn_hits([passage_hit, hit(point("e1", 1, within=0), 0.0, None)], None) == [passage_hit]
    plain = [hit(point("e1", 0), 0.5, 0.1), hit(point("e2", 0), 0.4, 0.9)]
    assert fold_turn_hits(plain, WEIGHTS) == plain  # as returned, even out of score order
