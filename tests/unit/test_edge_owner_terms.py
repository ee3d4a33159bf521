"""One owner's postings in memory (edge_owner_terms.py), pure numpy: BM25-IDF scores over the owner's
own points, rewrites, the load's pages and single writes giving the same postings, completeness."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.common.stores.vector.edge_owner_terms import OwnerTermIndex, OwnerTerms


def _points(seed: int, count: int) -> list[tuple[str, list[int], list[float]]]:
    rng = np.random.default_rng(seed)
    points = []
    for number in range(count):
        terms = sorted({int(t) % 50 for t in rng.zipf(1.4, size=6)})
        points.append((f"p{number}", terms, [float(v) for v in rng.uniform(0.1, 2.0, size=len(terms))]))
    return points


def _scores(points: list[tuple[str, list[int], list[float]]], query: list[int]) -> dict[str, float]:
    frequency = {term: sum(term in terms for _, terms, _ in points) for term in query}
    idf = {t: math.log((len(points) - f + 0.5) / (f + 0.5) + 1.0) for t, f in frequency.items()}
    scores = {}
    for point_id, terms, values in points:
        score = sum(idf[t] * v for t, v in zip(terms, values, strict=True) if t in idf)
        if score > 0:
            scores[point_id] = score
    return scores


def test_the_shortlist_is_the_best_by_the_owners_bm25_idf_whichever_way_points_came_in() -> None:
    points = _points(1, 400)
    paged, single = OwnerTerms(), OwnerTerms()
    paged.put_page(points[:250])
    paged.put_page(points[250:])
    for point in points:
        single.put(*point)
    query = [0, 3, 17]
    scores = _scores(points, query)
    best = sorted(scores, key=lambda point_id: -scores[point_id])[:20]
    for terms in (paged, single):
        shortlist, complete = terms.shortlist(query, [1.0] * 3, 20)
        assert set(shortlist) == set(best) and not complete
    everything, complete = paged.shortlist([49], [1.0], 400)
    assert complete and set(everything) == set(_scores(points, [49]))


def test_a_rewritten_point_is_scored_by_its_new_terms_only() -> None:
    terms = OwnerTerms()
    terms.put_page([("a", [1, 2], [1.0, 1.0]), ("b", [2], [1.0]), ("c", [3], [1.0])])
    terms.put("a", [3], [5.0])  # re-summarised: term 1 is gone
    assert len(terms) == 3
    assert terms.shortlist([1], [1.0], 5) == ([], True)
    shortlist, complete = terms.shortlist([3], [1.0], 1)
    assert shortlist == ["a"] and not complete


def test_the_index_refuses_meaningless_limits() -> None:
    with pytest.raises(ValueError):
        OwnerTermIndex(min_points=0)
    with pytest.raises(ValueError):
        OwnerTermIndex(max_owners=0)
