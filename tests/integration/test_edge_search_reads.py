"""Qdrant Edge hybrid search: what it reads (edge.py, edge_search.py).

- Both branches go in one batch; a keyword hit that the dense branch did not return still gets its
  dense part, from Edge's own cosine (one more request, over those ids).
- Payloads are read by id, for the fused best only; never another owner's.

Real Edge shards; vectors and keyword terms are chosen by hand so every expected score is exact.
"""

from __future__ import annotations

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
    SparseVector,
    VectorRecord,
)
from tests.support.edge_calls import ShardCalls

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


def expected_needle_dense() -> float:
    expected = dense_part(float(np.dot(QUERY, NEEDLE_DENSE)), FusionConfig().dense_floor)
    assert expected > 0.5
    return expected


async def test_a_keyword_only_hit_gets_its_cosine(index: EdgeVectorIndex) -> None:
    calls = counting(index)
    results = await index.hybrid_query(EPISODES, ALICE, dense=QUERY, sparse=QUERY_TERMS, weights=L0, limit=1)
    # Keyword and dense branches in one batch, then the cosines of keyword hits the dense one missed.
    assert calls.batches == [2, 1]
    (needle,) = results
    assert needle.payload["key"] == "needle"
    assert needle.dense_score is not None and needle.keyword_score is not None
    assert needle.dense_score == pytest.approx(expected_needle_dense(), abs=1e-5)
    assert needle.keyword_score > 0
    assert needle.score == pytest.approx(0.7 * needle.keyword_score + 0.3 * needle.dense_score, abs=1e-6)


async def test_payloads_are_read_by_id_for_the_fused_best_only(index: EdgeVectorIndex) -> None:
    await index.hybrid_query(EPISODES, ALICE, dense=QUERY, sparse=QUERY_TERMS, weights=L0, limit=1)
    calls = counting(index)  # the owner's keyword statistics are read (and kept) by the first search
    (needle,) = await index.hybrid_query(EPISODES, ALICE, dense=QUERY, sparse=QUERY_TERMS, weights=L0, limit=1)
    assert needle.payload == {"key": "needle", "channel": "web", "tenant_id": "t1", "user_id": "alice"}
    # The owner's point count (is the dense window due? edge_window.py), the branches, their cosines,
    # the candidates' keyword vectors, then one read of payloads: no scroll through a filter.
    assert calls.calls == {"count": 1, "query_batch": 2, "retrieve": 2}


async def test_reading_by_id_returns_only_the_owners_points(index: EdgeVectorIndex) -> None:
    shard = index._collections[EPISODES].shard
    ids = [point_id(ALICE, "needle"), point_id(BOB, "needle"), point_id(ALICE, "never-written")]
    assert set(retrieve_payloads(shard, ALICE, ids)) == {point_id(ALICE, "needle")}
    assert set(retrieve_payloads(shard, BOB, ids)) == {point_id(BOB, "needle")}
    assert retrieve_payloads(shard, ALICE, []) == {}
