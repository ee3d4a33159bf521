"""A power user's keyword branch shortlisted from their postings in memory (edge_owner_terms.py) on
real Edge shards: the same hits as Edge's own search over the whole collection, through a background
load, writes, filters and deletes; a normal owner never gets postings."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest

from services.common.domain.owner import Owner
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import EPISODES, HybridWeights, SearchFilter, SparseVector, VectorRecord

pytestmark = [pytest.mark.integration]

DIM = 8
WINDOW = 300
VOCABULARY = 400
POWER = Owner("t1", "power")
KEYWORDS_ONLY = HybridWeights(keyword=1.0, dense=0.0)


def _sparse(rng: np.random.Generator) -> SparseVector:
    # Zipf-like: a few terms in most points (long postings), most terms rare.
    terms = sorted({int(term) % VOCABULARY for term in rng.zipf(1.3, size=int(rng.integers(3, 12)))})
    return SparseVector(indices=terms, values=[float(v) for v in rng.uniform(0.2, 1.5, size=len(terms))])


def _records(owner: Owner, count: int, seed: int, *, first: int = 0) -> list[VectorRecord]:
    rng = np.random.default_rng(seed)
    return [
        VectorRecord(
            id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{owner.tenant_id}/{owner.user_id}/{number}")),
            dense=[float(v) for v in rng.normal(size=DIM)],
            sparse=_sparse(rng),
            payload={"kind": "episode", "n": number, "even": number % 2 == 0, "occurred_at_ts": 1e9 + number},
        )
        for number in range(first, first + count)
    ]


async def _index(path: Path) -> tuple[EdgeVectorIndex, list[VectorRecord]]:
    index = EdgeVectorIndex(path, dense_window=WINDOW)
    await index.ensure_collection(EPISODES, DIM)
    for number in range(100):  # other owners share the vocabulary (the collection's IDF ~ the owner's)
        owner = Owner("t1", f"u{number}")
        await index.upsert(EPISODES, owner, _records(owner, 20, 1000 + number))
    power = _records(POWER, 3000, 1)
    await index.upsert(EPISODES, POWER, power)
    return index, power


async def _keyword(
    index: EdgeVectorIndex, owner: Owner, terms: list[int], limit: int = 10, search_filter: SearchFilter | None = None
) -> list[int]:
    hits = await index.hybrid_query(
        EPISODES,
        owner,
        dense=[0.0] * DIM,
        sparse=SparseVector(terms, [1.0] * len(terms)),
        weights=KEYWORDS_ONLY,
        limit=limit,
        search_filter=search_filter,
    )
    return [int(hit.payload["n"]) for hit in hits]


async def _edge_alone(index: EdgeVectorIndex, owner: Owner, terms: list[int], **kwargs: object) -> list[int]:
    saved, index.owner_terms.min_points = index.owner_terms.min_points, None
    try:
        return await _keyword(index, owner, terms, **kwargs)  # type: ignore[arg-type]
    finally:
        index.owner_terms.min_points = saved


QUERIES = [[0, 1, 7], [2, 3], [5, 40, 41], [1, 9, 120], [4, 6, 8, 10], [11, 13], [0, 2, 17, 33], [3, 77]]


async def test_a_power_users_keyword_hits_from_memory_are_edges_own(tmp_path: Path) -> None:
    index, _ = await _index(tmp_path / "edge")
    key = (EPISODES, POWER)
    try:
        expected = [await _edge_alone(index, POWER, query) for query in QUERIES]
        assert await _keyword(index, POWER, QUERIES[0]) == expected[0]  # Edge answers while the load runs
        await index.owner_terms.wait_for_loads()
        assert index.owner_terms.loaded(key)
        assert [await _keyword(index, POWER, query) for query in QUERIES] == expected
        # A normal owner never gets postings.
        assert await _keyword(index, Owner("t1", "u3"), [0, 1]) == await _edge_alone(index, Owner("t1", "u3"), [0, 1])
        assert not index.owner_terms.loaded((EPISODES, Owner("t1", "u3")))

        # A filter that most of the shortlist fails: Edge's own search answers, the same hits.
        even = SearchFilter(match={"even": True})
        assert await _keyword(index, POWER, [0, 1], search_filter=even) == await _edge_alone(
            index, POWER, [0, 1], search_filter=even
        )
        # A rare term: every point holding it is shortlisted, all of them come back.
        rare = max(range(VOCABULARY), key=lambda term: (0 < len(_points_holding(index, term)) <= 5, term))
        assert sorted(await _keyword(index, POWER, [rare], limit=50)) == sorted(
            await _edge_alone(index, POWER, [rare], limit=50)
        )
    finally:
        await index.close()


def _points_holding(index: EdgeVectorIndex, term: int) -> list[str]:
    """The power user's points holding `term`, from the postings (loaded)."""
    terms = index.owner_terms._terms[(EPISODES, POWER)]
    shortlist, _ = terms.shortlist([term], [1.0], 10_000)
    return shortlist


async def test_writes_reach_the_postings_and_a_delete_drops_them(tmp_path: Path) -> None:
    index, power = await _index(tmp_path / "edge")
    key = (EPISODES, POWER)
    try:
        await _keyword(index, POWER, [0])
        await index.owner_terms.wait_for_loads()
        assert index.owner_terms.loaded(key)
        newer = _records(POWER, 3, 99, first=5000)
        newer[0] = VectorRecord(newer[0].id, newer[0].dense, SparseVector([VOCABULARY + 1], [1.0]), newer[0].payload)
        await index.upsert(EPISODES, POWER, newer)
        assert index.owner_terms.loaded(key)  # kept: the write went into the postings
        assert await _keyword(index, POWER, [VOCABULARY + 1]) == [5000]
        for query in QUERIES[:3]:
            assert await _keyword(index, POWER, query) == await _edge_alone(index, POWER, query)

        # Erased: the postings go with the points, and come back without them.
        top = await _keyword(index, POWER, QUERIES[1])
        gone = [record.id for record in power if record.payload["n"] in top[:2]]
        assert await index.delete(EPISODES, POWER, SearchFilter(ids=gone)) == 2
        assert not index.owner_terms.loaded(key)
        assert await _keyword(index, POWER, QUERIES[1]) == await _edge_alone(index, POWER, QUERIES[1])
        await index.owner_terms.wait_for_loads()
        assert index.owner_terms.loaded(key)
        after = await _keyword(index, POWER, QUERIES[1])
        assert after == await _edge_alone(index, POWER, QUERIES[1]) and not set(top[:2]) & set(after)
    finally:
        await index.close()
