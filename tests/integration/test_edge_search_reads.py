"""Qdrant Edge hybrid search: what it reads and when (edge.py, edge_power.py).

- A keyword hit that the dense branch did not return still gets its dense part: from its stored
  vector, read with the hit while the query embeds (after the vector, one request: the dense branch);
  from Edge's own cosine when the keyword branch ran after the vector (no vectors cross into Python
  then), or for an owner small enough for its rows (test_edge_small_owner.py).
- Payloads are read by id when no write that may change which points pass the search's conditions
  came between the branches and the read (those of the keyword branch's best while the query
  embeds), and through the search's filter when one did; never another owner's. A recall count is not
  such a write.
- An owner's point count is remembered until points are added or deleted: a payload write (a recall
  count) does not make the next search count again, an upsert or a delete does.

Real Edge shards; vectors and keyword terms are chosen by hand so every expected score is exact.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from services.common.domain.owner import Owner
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.edge_filters import retrieve_payloads
from services.common.stores.vector.fusion import FusionConfig, dense_part
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

DIM = 8
L0 = HybridWeights(keyword=0.7, dense=0.3)
ALICE = Owner("t1", "alice")
BOB = Owner("t1", "bob")
TERM = 7  # the keyword term of the "needle" points


def point_id(owner: Owner, key: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"tiermem-test/{owner.tenant_id}/{owner.user_id}/{key}"))


def axis(i: int, j: int | None = None, mix: float = 0.0) -> list[float]:
    """A unit vector on axis i (tilted towards axis j by `mix`)."""
    vector = np.zeros(DIM, dtype=np.float64)
    vector[i] = math.cos(mix)
    if j is not None:
        vector[j] = math.sin(mix)
    return vector.tolist()


def record(owner: Owner, key: str, dense: Sequence[float], terms: Sequence[int], **payload: Any) -> VectorRecord:
    sparse = SparseVector(indices=list(terms), values=[1.0] * len(terms))
    return VectorRecord(id=point_id(owner, key), dense=dense, sparse=sparse, payload={"key": key, **payload})


# Alice: many points close to the query on axis 0 (the dense branch's candidates), and one "needle"
# that alone holds the keyword term and points elsewhere: it is a keyword hit only.
QUERY = axis(0)
# Cosine 0.9 with the query: a dense part well above 0, yet below all 20 close points (>= 0.98), so
# the dense branch (2 candidates for limit 1) never returns it.
NEEDLE_DENSE = axis(0, 1, mix=math.acos(0.9))


def alice_records() -> list[VectorRecord]:
    close = [record(ALICE, f"close{i}", axis(0, 2, mix=0.01 * i), [100 + i]) for i in range(20)]
    return [*close, record(ALICE, "needle", NEEDLE_DENSE, [TERM], channel="web")]


QUERY_TERMS = SparseVector(indices=[TERM], values=[1.0])


@pytest.fixture
async def index(tmp_path: Path) -> Any:
    opened = EdgeVectorIndex(tmp_path / "edge")
    opened.small_owner_points = 0  # Edge's own branches and reads (test_edge_small_owner.py has the rows')
    await opened.ensure_collection(EPISODES, DIM)
    await opened.upsert(EPISODES, ALICE, alice_records())
    await opened.upsert(EPISODES, BOB, [record(BOB, "needle", NEEDLE_DENSE, [TERM])])
    try:
        yield opened
    finally:
        await opened.close()


def counting(index: EdgeVectorIndex) -> ShardCalls:
    opened = index._collections[EPISODES]
    proxy = ShardCalls(opened.shard)
    opened.shard = proxy  # type: ignore[assignment]
    return proxy


async def search_while_embedding(
    index: EdgeVectorIndex, limit: int, search_filter: SearchFilter | None = None
) -> tuple[asyncio.Future[Sequence[float] | None], asyncio.Future[list[ScoredRecord]]]:
    """Alice's search for the needle's term, started with its query vector still to come (as L0 runs
    while the query embeds), after it has done all it can without the vector."""
    return await search_with_vector_pending(
        index, EPISODES, ALICE, sparse=QUERY_TERMS, weights=L0, limit=limit, search_filter=search_filter
    )


def expected_needle_dense() -> float:
    expected = dense_part(float(np.dot(QUERY, NEEDLE_DENSE)), FusionConfig().dense_floor)
    assert expected > 0.5
    return expected


@pytest.mark.parametrize("pending", [True, False], ids=["vector-pending", "vector-ready"])
async def test_a_keyword_only_hit_gets_its_cosine(index: EdgeVectorIndex, pending: bool) -> None:
    calls = counting(index)
    if pending:
        vector, search = await search_while_embedding(index, limit=1)
        # While the query embeds: the keyword branch (its hits with their vectors), and the payloads
        # of its best (`limit`) hits.
        assert calls.calls == {"count": 1, "query_batch": 1, "retrieve": 1}
        vector.set_result(QUERY)
        results = await search
        # Then one batch of one request, the dense branch: the keyword hit's cosine is a product with
        # its vector; the fused best is the keyword hit whose payload is read already.
        assert calls.calls == {"count": 1, "query_batch": 2, "retrieve": 1}
        assert calls.batches == [1, 1]
    else:
        results = await index.hybrid_query(EPISODES, ALICE, dense=QUERY, sparse=QUERY_TERMS, weights=L0, limit=1)
        # Keyword and dense branches in one batch, then the cosines of keyword hits the dense one missed.
        assert calls.batches == [2, 1]
    (needle,) = results
    assert needle.payload["key"] == "needle"
    assert needle.dense_score is not None and needle.keyword_score is not None
    assert needle.dense_score == pytest.approx(expected_needle_dense(), abs=1e-5)
    assert needle.keyword_score > 0
    assert needle.score == pytest.approx(0.7 * needle.keyword_score + 0.3 * needle.dense_score, abs=1e-6)


async def test_payloads_are_read_by_id_when_nothing_was_written_meanwhile(index: EdgeVectorIndex) -> None:
    calls = counting(index)
    (needle,) = await index.hybrid_query(EPISODES, ALICE, dense=QUERY, sparse=QUERY_TERMS, weights=L0, limit=1)
    assert needle.payload == {"key": "needle", "channel": "web", "tenant_id": "t1", "user_id": "alice"}
    assert calls.calls.get("retrieve") == 1 and "scroll" not in calls.calls


async def test_a_write_while_the_query_embeds_sends_the_read_through_the_filter(index: EdgeVectorIndex) -> None:
    calls = counting(index)
    vector, web_only = await search_while_embedding(
        index, limit=3, search_filter=SearchFilter(match={"channel": "web"})
    )
    # The keyword branch has found the needle; now it leaves the search's channel.
    await index.set_payload(EPISODES, ALICE, [point_id(ALICE, "needle")], {"channel": "slack"})
    vector.set_result(QUERY)
    # The needle's payload was read while the query embedded, then the write: it is read again
    # through the search's filter, which it no longer passes.
    assert await web_only == []
    assert calls.calls.get("retrieve") == 1 and calls.calls.get("scroll") == 1


@pytest.mark.parametrize(
    ("write", "through_the_filter"),
    [
        ({"recall_count": 3, "last_recalled_at_ts": 1.0}, False),  # a recall count: no search filters on it
        ({"scope": "work"}, False),  # a field this search (channel only) does not filter on
        ({"occurred_at_ts": 5.0}, True),  # the recent window's time (and key)
        (None, True),  # a point added
    ],
    ids=["recall-count", "unfiltered-field", "window-time", "upsert"],
)
async def test_only_a_write_that_may_change_the_result_sends_the_read_through_the_filter(
    index: EdgeVectorIndex, write: dict[str, Any] | None, through_the_filter: bool
) -> None:
    calls = counting(index)
    vector, web_only = await search_while_embedding(
        index, limit=1, search_filter=SearchFilter(match={"channel": "web"})
    )
    if write is None:
        await index.upsert(EPISODES, ALICE, [record(ALICE, "later", axis(3), [5], channel="web")])
    else:
        await index.set_payload(EPISODES, ALICE, [point_id(ALICE, "needle")], write)
    vector.set_result(QUERY)
    (needle,) = await web_only
    assert needle.payload["key"] == "needle"
    if through_the_filter:
        assert calls.calls.get("scroll") == 1, calls.calls
    else:  # the payload read while the query embedded stands: nothing more is read
        assert calls.calls.get("retrieve") == 1 and "scroll" not in calls.calls, calls.calls


async def test_reading_by_id_returns_only_the_owners_points(index: EdgeVectorIndex) -> None:
    shard = index._collections[EPISODES].shard
    ids = [point_id(ALICE, "needle"), point_id(BOB, "needle"), point_id(ALICE, "never-written")]
    assert set(retrieve_payloads(shard, ALICE, ids)) == {point_id(ALICE, "needle")}
    assert set(retrieve_payloads(shard, BOB, ids)) == {point_id(BOB, "needle")}
    assert retrieve_payloads(shard, ALICE, []) == {}


async def test_an_owners_point_count_is_taken_again_only_after_points_are_added_or_deleted(
    index: EdgeVectorIndex,
) -> None:
    calls = counting(index)

    async def search() -> int:
        before = calls.calls.get("count", 0)
        await index.hybrid_query(EPISODES, ALICE, dense=QUERY, sparse=QUERY_TERMS, weights=L0, limit=3)
        return calls.calls.get("count", 0) - before

    assert await search() == 1
    assert await search() == 0  # nothing written: the count is remembered
    await index.set_payload(EPISODES, ALICE, [point_id(ALICE, "close0")], {"recall_count": 3})
    assert await search() == 0  # a payload write moves no point
    await index.upsert(EPISODES, ALICE, [record(ALICE, "new", axis(3), [5])])
    assert await search() == 1
    await index.upsert(EPISODES, BOB, [record(BOB, "other", axis(3), [5])])
    assert await search() == 1  # any owner's new point: Alice's estimate may move with the collection
    await index.delete(EPISODES, ALICE, SearchFilter(ids=[point_id(ALICE, "new")]))
    assert await search() == 1
    assert await search() == 0
