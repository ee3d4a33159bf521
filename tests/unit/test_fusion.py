"""Score fusion: absolute [0, 1] parts, weighted mean, ordering."""

from __future__ import annotations

import math
import random

import pytest

from services.common.stores.vector.fusion import (
    FusionConfig,
    dense_part,
    fuse,
    keyword_part,
    unique_term_idf,
)
from services.common.stores.vector.port import HybridWeights

L0 = HybridWeights(keyword=0.7, dense=0.3)


def _idf(document_frequency: int, corpus_size: int) -> float:
    return math.log((corpus_size - document_frequency + 0.5) / (document_frequency + 0.5) + 1.0)


def test_dense_part_maps_floor_to_zero_and_one_to_one() -> None:
    assert dense_part(0.78, floor=0.78) == 0.0
    assert dense_part(1.0, floor=0.78) == 1.0
    assert dense_part(0.5, floor=0.78) == 0.0
    assert dense_part(0.89, floor=0.78) == pytest.approx(0.5)


def test_parts_are_monotonic_and_bounded() -> None:
    rng = random.Random(7)
    for _ in range(500):
        a, b = sorted(rng.uniform(-1.0, 1.0) for _ in range(2))
        assert 0.0 <= dense_part(a) <= dense_part(b) <= 1.0
        x, y = sorted(rng.uniform(0.0, 100.0) for _ in range(2))
        corpus = rng.randint(1, 1_000_000)
        assert 0.0 <= keyword_part(x, corpus) <= keyword_part(y, corpus) < 1.0


def test_keyword_part_is_zero_without_a_match() -> None:
    assert keyword_part(0.0, 1000) == 0.0
    assert keyword_part(-1.0, 1000) == 0.0


def test_keyword_unit_is_qdrants_idf_of_a_unique_term() -> None:
    for corpus in (1, 12, 100_000):
        assert unique_term_idf(corpus) == pytest.approx(_idf(1, corpus))
    assert unique_term_idf(0) == unique_term_idf(1) > 0


@pytest.mark.parametrize("corpus_size", [12, 1_000, 100_000, 10_000_000])
def test_one_unique_term_match_means_the_same_at_any_corpus_size(corpus_size: int) -> None:
    # A term found in one document, weight 1 in that document: half saturation by construction.
    assert keyword_part(_idf(1, corpus_size) * 1.0, corpus_size) == pytest.approx(0.5)


@pytest.mark.parametrize("corpus_size", [1_000, 100_000])
def test_common_terms_count_for_little(corpus_size: int) -> None:
    half_the_corpus = keyword_part(_idf(corpus_size // 2, corpus_size), corpus_size)
    assert half_the_corpus < 0.15
    # A match on two rare terms beats one rare term beats a common term.
    rare = _idf(1, corpus_size)
    assert keyword_part(2 * rare, corpus_size) > keyword_part(rare, corpus_size) > half_the_corpus


def test_unrelated_candidates_fall_below_the_l0_minimum() -> None:
    # Typical unrelated e5 cosine and no keyword match.
    hits = fuse({"a": 0.76, "b": 0.80}, {}, L0, corpus_size=1000, limit=10)
    assert all(hit.score < 0.3 for hit in hits)
    assert {hit.keyword_score for hit in hits} == {0.0}


def test_a_rare_keyword_match_passes_the_l0_minimum() -> None:
    rare = _idf(1, 10_000)
    hits = fuse({"a": 0.85}, {"a": rare}, L0, corpus_size=10_000, limit=10)
    assert hits[0].score > 0.3


def test_fused_score_is_the_weighted_mean_of_the_parts() -> None:
    config = FusionConfig(dense_floor=0.8, keyword_half_saturation=1.0)
    unit = unique_term_idf(100)
    (hit,) = fuse(
        {"a": 0.9}, {"a": unit}, HybridWeights(keyword=3.0, dense=1.0), corpus_size=100, limit=5, config=config
    )
    assert hit.dense_score == pytest.approx(0.5)
    assert hit.keyword_score == pytest.approx(0.5)
    assert hit.score == pytest.approx(0.5)
    (hit,) = fuse(
        {"a": 1.0}, {"a": 0.0}, HybridWeights(keyword=3.0, dense=1.0), corpus_size=100, limit=5, config=config
    )
    assert hit.score == pytest.approx(0.25)


def test_candidates_missing_from_a_branch_get_zero_for_it() -> None:
    unit = unique_term_idf(50)
    hits = {hit.id: hit for hit in fuse({"dense-only": 0.95}, {"keyword-only": unit}, L0, corpus_size=50, limit=5)}
    assert hits["dense-only"].keyword_score == 0.0
    assert hits["keyword-only"].dense_score == 0.0


def test_a_branch_that_did_not_run_has_no_part() -> None:
    (hit,) = fuse(None, {"a": unique_term_idf(10)}, HybridWeights(keyword=1.0, dense=0.0), corpus_size=10, limit=5)
    assert hit.dense_score is None
    assert hit.score == pytest.approx(0.5)
    (hit,) = fuse({"a": 1.0}, None, HybridWeights(keyword=0.0, dense=1.0), corpus_size=10, limit=5)
    assert hit.keyword_score is None
    assert hit.score == pytest.approx(1.0)


def test_results_are_sorted_limited_and_ties_break_by_id() -> None:
    dense = {"c": 0.9, "a": 0.9, "b": 0.95, "d": 0.5}
    hits = fuse(dense, None, HybridWeights(keyword=0.0, dense=1.0), corpus_size=1, limit=3)
    assert [hit.id for hit in hits] == ["b", "a", "c"]
    assert all(0.0 <= hit.score <= 1.0 for hit in hits)


@pytest.mark.parametrize(
    "weights",
    [HybridWeights(keyword=-0.1, dense=1.0), HybridWeights(keyword=0.0, dense=0.0), HybridWeights(math.nan, 1)],
)
def test_invalid_weights_are_rejected(weights: HybridWeights) -> None:
    with pytest.raises(ValueError):
        fuse({"a": 1.0}, None, weights, corpus_size=1, limit=1)


def test_invalid_config_is_rejected() -> None:
    with pytest.raises(ValueError):
        FusionConfig(dense_floor=1.0)
    with pytest.raises(ValueError):
        FusionConfig(keyword_half_saturation=0.0)
    with pytest.raises(ValueError):
        FusionConfig(candidate_factor=0)
    assert FusionConfig(candidate_factor=2).candidates(10) == 20
