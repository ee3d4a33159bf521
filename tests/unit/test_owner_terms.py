"""Keyword statistics per owner (owner_terms.py) and the candidates they rescore (adapter_support.py)."""

from __future__ import annotations

import math
import time

import pytest

from services.common.domain.owner import Owner
from services.common.domain.sparse import SparseVector
from services.common.stores.vector.adapter_support import BranchHit, owner_keyword_hits
from services.common.stores.vector.owner_terms import OwnerTermsCache, keyword_scores, owner_terms

ALICE = Owner("t1", "alice")
BOB = Owner("t1", "bob")


def _engine_idf(documents: float, corpus: int) -> float:
    """Qdrant's IDF modifier, as its documentation gives it."""
    return math.log((corpus - documents + 0.5) / (documents + 0.5) + 1.0)


def test_idf_is_the_engines_over_the_owners_points() -> None:
    vectors = [SparseVector([1, 2], [1.0, 1.0]), SparseVector([1], [0.8]), SparseVector([3, 3], [1.0, 1.0])]
    terms = owner_terms(3, vectors)
    assert terms.corpus_size == terms.sampled == 3
    assert terms.idf(1) == pytest.approx(_engine_idf(2, 3))
    assert terms.idf(2) == pytest.approx(_engine_idf(1, 3))
    assert terms.idf(3) == pytest.approx(_engine_idf(1, 3))  # a term repeated in one vector counts once
    assert terms.idf(99) == pytest.approx(_engine_idf(0, 3))


def test_a_sample_scales_document_frequencies_to_the_owners_size() -> None:
    sampled = [SparseVector([7], [1.0])] * 10 + [SparseVector([8], [1.0])] * 30
    terms = owner_terms(400, sampled)
    assert terms.idf(7) == pytest.approx(_engine_idf(100, 400))
    assert terms.idf(8) == pytest.approx(_engine_idf(300, 400))
    # A count smaller than what was read (points written meanwhile) never yields a negative frequency.
    assert owner_terms(5, sampled).corpus_size == 40


def test_keyword_scores_weigh_shared_terms_by_the_owners_idf() -> None:
    terms = owner_terms(4, [SparseVector([1], [1.0]), SparseVector([1, 2], [1.0, 1.0]), SparseVector([3], [1.0])] * 1)
    query = SparseVector([1, 2], [1.0, 0.5])
    stored = {
        "a": SparseVector([1, 5], [0.9, 1.0]),
        "b": SparseVector([1, 2], [1.0, 2.0]),
        "c": SparseVector([3], [1.0]),
    }
    scores = keyword_scores(query, stored, terms)
    assert set(scores) == {"a", "b"}  # c holds no query term
    assert scores["a"] == pytest.approx(0.9 * terms.idf(1))
    assert scores["b"] == pytest.approx(terms.idf(1) + 0.5 * 2.0 * terms.idf(2))


def test_every_candidate_holding_a_query_term_is_scored_and_keeps_its_dense_vector() -> None:
    terms = owner_terms(3, [SparseVector([1], [1.0]), SparseVector([2], [1.0]), SparseVector([9], [1.0])])
    query = SparseVector([1, 2], [1.0, 1.0])
    dense_hits = [BranchHit("dense-only", 0.9), BranchHit("no-terms", 0.8)]
    keyword_hits = [BranchHit("keyword", 3.0, dense_vector=[0.1, 0.2])]
    stored = {
        "dense-only": SparseVector([2], [1.0]),  # the engine's keyword branch cut it; it holds a term
        "no-terms": SparseVector([9], [1.0]),
        "keyword": SparseVector([1], [1.0]),
    }
    hits = {hit.id: hit for hit in owner_keyword_hits(query, dense_hits, keyword_hits, stored, terms)}
    assert set(hits) == {"dense-only", "keyword"}
    assert hits["dense-only"].score == pytest.approx(terms.idf(2))
    assert hits["keyword"].score == pytest.approx(terms.idf(1))  # the engine's score is replaced
    assert hits["keyword"].dense_vector == [0.1, 0.2]
    assert hits["dense-only"].dense_vector is None


def test_the_cache_keeps_an_owner_until_a_write_or_its_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    cache = OwnerTermsCache(ttl=10.0, owners=2)
    alice = owner_terms(1, [SparseVector([1], [1.0])])
    cache.keep("episodes", ALICE, alice)
    cache.keep("facts", ALICE, alice)
    assert cache.lookup("episodes", ALICE) is alice
    assert cache.lookup("episodes", BOB) is None
    now[0] += 9.9
    assert cache.lookup("facts", ALICE) is alice
    now[0] += 0.1
    assert cache.lookup("facts", ALICE) is None  # another process may have written meanwhile
    cache.keep("facts", ALICE, alice)
    cache.drop("facts", ALICE)
    assert cache.lookup("facts", ALICE) is None
    cache.keep("facts", ALICE, alice)
    cache.keep("facts", BOB, alice)
    cache.drop("facts")
    assert cache.lookup("facts", ALICE) is None and cache.lookup("facts", BOB) is None


def test_the_cache_forgets_the_least_recently_used_owner_first() -> None:
    cache = OwnerTermsCache(owners=2)
    terms = owner_terms(1, [SparseVector([1], [1.0])])
    cache.keep("episodes", ALICE, terms)
    cache.keep("episodes", BOB, terms)
    assert cache.lookup("episodes", ALICE) is terms  # now the most recent
    cache.keep("facts", ALICE, terms)
    assert cache.lookup("episodes", BOB) is None
    assert cache.lookup("episodes", ALICE) is terms
    with pytest.raises(ValueError, match="ttl"):
        OwnerTermsCache(ttl=0)
