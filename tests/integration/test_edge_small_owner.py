"""A small owner's search answered from rows read while the query embeds (edge_small.py), on real Edge
shards: the same hits, scores and payloads as Edge's own branches; nothing asked of Edge once the vector
is there; an owner above the limit, or a write while the query embeds, goes to Edge as before; never
another owner's point."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from services.common.domain.owner import Owner
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import (
    EPISODES,
    HybridWeights,
    ScoredRecord,
    SearchFilter,
    SparseVector,
    VectorRecord,
)
from tests.support.edge_calls import ShardCalls, search_with_vector_pending

pytestmark = pytest.mark.integration

ALICE, BOB = Owner("t1", "alice"), Owner("t1", "bob")  # Alice searches; Bob shares the shard
DIM = 16
L0 = HybridWeights(keyword=0.7, dense=0.3)


CENTRE = np.eye(DIM)[0]


def unit(rng: random.Random) -> list[float]:
    """Near one direction, so cosines between them (~0.85-0.97) clear the fusion's dense floor (0.78): a keyword hit
    outside the dense candidates then changes the fused order by its cosine."""
    vector = CENTRE + 0.08 * np.asarray([rng.gauss(0, 1) for _ in range(DIM)])
    return [float(value) for value in vector / np.linalg.norm(vector)]


def records(owner: Owner, count: int, rng: random.Random) -> list[VectorRecord]:
    out = []
    for number in range(count):
        terms = sorted(rng.sample(range(40), 3))
        out.append(
            VectorRecord(
                id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"small/{owner.user_id}/{number}")),
                dense=unit(rng),
                sparse=SparseVector(indices=terms, values=[1.0] * len(terms)),
                payload={"key": f"{owner.user_id}-{number}", "channel": rng.choice(["web", "slack", "group"])},
            )
        )
    return out


@pytest.fixture
async def index(tmp_path: Path) -> Any:
    opened = EdgeVectorIndex(tmp_path / "edge")
    await opened.ensure_collection(EPISODES, DIM)
    rng = random.Random(5)
    await opened.upsert(EPISODES, ALICE, records(ALICE, 60, rng))
    await opened.upsert(EPISODES, BOB, records(BOB, 30, rng))
    try:
        yield opened
    finally:
        await opened.close()


async def pending_search(
    index: EdgeVectorIndex,
    sparse: SparseVector,
    *,
    limit: int,
    search_filter: SearchFilter | None,
    weights: HybridWeights = L0,
) -> tuple[asyncio.Future[Sequence[float] | None], asyncio.Future[list[ScoredRecord]]]:
    """Alice's search, with its query vector still to come."""
    return await search_with_vector_pending(
        index, EPISODES, ALICE, sparse=sparse, weights=weights, limit=limit, search_filter=search_filter
    )


def summary(results: list[ScoredRecord]) -> list[tuple[str, float, float | None, float | None, dict[str, Any]]]:
    return [(r.id, r.score, r.dense_score, r.keyword_score, r.payload) for r in results]


@pytest.mark.parametrize("search_filter", [None, SearchFilter(channels=["web", "slack"])], ids=["all", "channels"])
async def test_rows_answer_as_edge_does(index: EdgeVectorIndex, search_filter: SearchFilter | None) -> None:
    rng = random.Random(11)
    compared = 0
    for _ in range(25):
        # Not of unit length (Edge normalises a cosine query), and few candidates: keyword hits outside them.
        query, terms = [2.5 * value for value in unit(rng)], sorted(rng.sample(range(40), 2))
        sparse = SparseVector(indices=terms, values=[1.0, 0.5])
        limit = rng.choice([1, 2, 5])
        index.small_owner_points = 64
        vector, search = await pending_search(index, sparse, limit=limit, search_filter=search_filter)
        vector.set_result(query)
        from_rows = await search
        index.small_owner_points = 0
        vector, search = await pending_search(index, sparse, limit=limit, search_filter=search_filter)
        vector.set_result(query)
        from_edge = await search
        assert [r.id for r in from_rows] == [r.id for r in from_edge]
        for mine, edges in zip(summary(from_rows), summary(from_edge), strict=True):
            assert mine[1:4] == pytest.approx(edges[1:4], abs=1e-5)
            assert mine[4] == edges[4]
            assert mine[4]["user_id"] == "alice"
            if search_filter is not None:
                assert mine[4]["channel"] in ("web", "slack")
        compared += len(from_rows)
    assert compared > 50


async def test_a_small_owner_asks_nothing_of_edge_once_the_vector_arrives(index: EdgeVectorIndex) -> None:
    calls = ShardCalls(index._collections[EPISODES].shard)
    index._collections[EPISODES].shard = calls  # type: ignore[assignment]
    query = unit(random.Random(3))
    vector, search = await pending_search(index, SparseVector([1, 2], [1.0, 1.0]), limit=3, search_filter=None)
    before = list(calls.names)
    assert "scroll" in before and "query_batch" in before  # the rows and the keyword branch, meanwhile
    vector.set_result(query)
    assert len(await search) == 3
    assert calls.names == before


async def test_an_owner_over_the_limit_is_searched_by_edge(index: EdgeVectorIndex) -> None:
    index.small_owner_points = 10  # Alice has 60 points
    calls = ShardCalls(index._collections[EPISODES].shard)
    index._collections[EPISODES].shard = calls  # type: ignore[assignment]
    query = unit(random.Random(4))
    vector, search = await pending_search(index, SparseVector([1], [1.0]), limit=3, search_filter=None)
    before = len(calls.names)
    vector.set_result(query)
    assert len(await search) == 3
    assert "query_batch" in calls.names[before:]  # the dense branch came from Edge


async def test_a_point_written_while_the_query_embeds_is_found(index: EdgeVectorIndex) -> None:
    query = unit(random.Random(6))
    dense_only = HybridWeights(keyword=0.0, dense=1.0)
    vector, search = await pending_search(
        index, SparseVector([1], [1.0]), limit=1, search_filter=None, weights=dense_only
    )
    # The rows were read; now a point identical to the query arrives: it must be the best hit.
    newest = VectorRecord(
        id=str(uuid.uuid5(uuid.NAMESPACE_URL, "small/alice/newest")),
        dense=query,
        sparse=SparseVector([1], [1.0]),
        payload={"key": "newest", "channel": "web"},
    )
    await index.upsert(EPISODES, ALICE, [newest])
    vector.set_result(query)
    (best,) = await search
    assert best.payload["key"] == "newest"


async def test_a_zero_query_vector_is_left_to_edge(index: EdgeVectorIndex) -> None:
    """Every point is at cosine 0 from a zero vector, and which of them Edge's dense branch returns (as
    candidates at score 0) is Edge's choice: the rows do not guess it."""
    zero, sparse = [0.0] * DIM, SparseVector([1], [1.0])
    answers = []
    for small in (64, 0):
        index.small_owner_points = small
        vector, search = await pending_search(index, sparse, limit=8, search_filter=None)
        vector.set_result(zero)
        answers.append(summary(await search))
    assert answers[0] == answers[1]
    assert any(score == 0 for _, score, *_ in answers[0])  # Edge's zero-score dense candidates are there
