"""A power user's dense branch on Qdrant Edge searches their most recent points through a key the
planner can use (edge_window.py). Real Edge shards: many owners whose recent points share the time
range, so a bare time range would not narrow the search; the window's results are checked against a
brute-force search over the same points."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as qe

from services.common.domain.owner import Owner
from services.common.stores.vector.adapter_support import owner_conditions
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.edge_filters import edge_filter
from services.common.stores.vector.edge_window import WINDOW_KEY_FIELD, WINDOW_TIME_FIELD, BackfillWrites, window_key
from services.common.stores.vector.fusion import FusionConfig
from services.common.stores.vector.port import EPISODES, HybridWeights, SearchFilter, SparseVector, VectorRecord

pytestmark = [pytest.mark.integration]

DIM = 16
DAY = 86_400.0
NOW = 1_767_225_600.0  # 2026-01-01
POWER = Owner("t1", "power")
DENSE_ONLY = HybridWeights(keyword=0.0, dense=1.0)
# Dense scores mapped from the whole cosine range, so that the fused order is the cosine order.
FUSION = FusionConfig(dense_floor=-1.0)


def _no_backfill() -> BackfillWrites:
    raise AssertionError("a keyed window needs no backfill")


def _index(path: Path, window: int) -> EdgeVectorIndex:
    return EdgeVectorIndex(path, dense_window=window, fusion=FUSION)


def _vector(owner: Owner, number: int) -> list[float]:
    rng = np.random.default_rng([number, *f"{owner.tenant_id}/{owner.user_id}".encode()])
    vector = rng.normal(size=DIM).astype(np.float32)
    unit: list[float] = (vector / np.linalg.norm(vector)).tolist()
    return unit


def _records(owner: Owner, times: list[float]) -> list[VectorRecord]:
    return [
        VectorRecord(
            id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{owner.tenant_id}/{owner.user_id}/{number}")),
            dense=_vector(owner, number),
            sparse=SparseVector(indices=[number % 97], values=[1.0]),
            payload={"kind": "episode", "n": number, WINDOW_TIME_FIELD: occurred},
        )
        for number, occurred in enumerate(times)
    ]


def _spread(count: int, seed: int) -> list[float]:
    """`count` distinct times over the 90 days before NOW (every owner covers the same range)."""
    rng = np.random.default_rng(seed)
    return [NOW - DAY * 90 * float(share) for share in rng.permutation(count) / count]


def _nearest(records: list[VectorRecord], query: list[float], limit: int) -> list[int]:
    matrix = np.asarray([record.dense for record in records], dtype=np.float32)
    order = np.argsort(-(matrix @ np.asarray(query, dtype=np.float32)), kind="stable")[:limit]
    return [int(records[i].payload["n"]) for i in order]


async def _dense(index: EdgeVectorIndex, owner: Owner, query: list[float], limit: int) -> list[int]:
    hits = await index.hybrid_query(
        EPISODES, owner, dense=query, sparse=SparseVector([], []), weights=DENSE_ONLY, limit=limit
    )
    assert all(WINDOW_KEY_FIELD not in hit.payload for hit in hits)  # an Edge-internal field
    return [int(hit.payload["n"]) for hit in hits]


def _estimate(shard: qe.EdgeShard, *conditions: qe.FieldCondition | qe.Filter) -> int:
    """Edge's cardinality estimate: what its planner compares to pick the condition it iterates."""
    return int(shard.count(qe.CountRequest(exact=False, filter=qe.Filter(must=list(conditions)))))


def _newest(records: list[VectorRecord], count: int) -> list[VectorRecord]:
    return sorted(records, key=lambda record: -float(record.payload[WINDOW_TIME_FIELD]))[:count]


async def _index_with_owners(
    path: Path, window: int, power_times: list[float]
) -> tuple[EdgeVectorIndex, list[VectorRecord]]:
    index = _index(path, window)
    await index.ensure_collection(EPISODES, DIM)
    for number in range(200):  # 200 owners x 25 points over the same 90 days as the power user
        owner = Owner("t1", f"u{number}")
        await index.upsert(EPISODES, owner, _records(owner, _spread(25, number)))
    power = _records(POWER, power_times)
    await index.upsert(EPISODES, POWER, power)
    return index, power


async def test_the_window_key_is_the_selective_condition_among_many_owners(tmp_path: Path) -> None:
    index, power = await _index_with_owners(tmp_path / "edge", 300, _spread(3000, 7))
    try:
        queries = [_vector(Owner("q", "q"), n) for n in range(10)]
        window = _newest(power, 300)
        for query in queries:
            assert await _dense(index, POWER, query, 10) == _nearest(window, query, 10)
        assert index.dense_windows.keyed(EPISODES, POWER)  # written with the key: used at once

        # The planner iterates the condition it estimates smallest: the key's range must be it, close
        # to the window's size, while the bare time range also matches everyone's recent points.
        shard = index._collections[EPISODES].shard
        owner_filter = edge_filter(owner_conditions(POWER))
        [key_range] = index.dense_windows.dense_conditions(shard, EPISODES, POWER, _no_backfill)
        assert key_range.key == WINDOW_KEY_FIELD
        cutoff = float(window[-1].payload[WINDOW_TIME_FIELD])
        since = qe.FieldCondition(WINDOW_TIME_FIELD, range=qe.RangeFloat(gte=cutoff))  # the bare time range
        key_estimate, since_estimate = _estimate(shard, key_range), _estimate(shard, since)
        owner_estimate = _estimate(shard, owner_filter)
        assert key_estimate < 2 * 300 < since_estimate and owner_estimate == 3000  # ~250, ~900 measured
        assert shard.count(qe.CountRequest(exact=True, filter=qe.Filter(must=[key_range]))) == 300

        # Normal owners are searched exactly as without a window.
        other = Owner("t1", "u3")
        assert await _dense(index, other, queries[0], 5) == _nearest(_records(other, _spread(25, 3)), queries[0], 5)

    finally:
        await index.close()
    exhaustive = EdgeVectorIndex(tmp_path / "edge", dense_window=None, fusion=FUSION)  # the same shard
    try:
        await exhaustive.ensure_collection(EPISODES, DIM)
        for query in queries[:3]:
            assert await _dense(exhaustive, POWER, query, 10) == _nearest(power, query, 10)
    finally:
        await exhaustive.close()
    index = _index(tmp_path / "edge", 300)
    try:
        await index.ensure_collection(EPISODES, DIM)
        # Erasure reaches every point, inside the window or not.
        assert await index.delete(EPISODES, POWER) == 3000
        assert await _dense(index, POWER, queries[0], 10) == []
    finally:
        await index.close()


async def test_points_written_before_the_key_are_found_and_backfilled(tmp_path: Path) -> None:
    index, power = await _index_with_owners(tmp_path / "edge", 300, _spread(3000, 8))
    # What an older version wrote: the same points without the key.
    opened = index._collections[EPISODES]
    opened.shard.update(qe.UpdateOperation.delete_payload_by_filter(qe.Filter(must=[]), [WINDOW_KEY_FIELD]))
    await index.close()

    index = _index(tmp_path / "edge", 300)
    try:
        await index.ensure_collection(EPISODES, DIM)
        window = _newest(power, 300)
        query = _vector(Owner("q", "q"), 1)
        # Not yet keyed: the window searches with the bare time range, the same points.
        assert await _dense(index, POWER, query, 10) == _nearest(window, query, 10)
        assert not index.dense_windows.keyed(EPISODES, POWER)
        await index.dense_windows.wait_for_backfills()
        assert index.dense_windows.keyed(EPISODES, POWER)
        shard = index._collections[EPISODES].shard
        unkeyed = qe.Filter(
            must=[
                edge_filter(owner_conditions(POWER)),
                qe.FieldCondition(
                    WINDOW_TIME_FIELD, range=qe.RangeFloat(gte=float(window[-1].payload[WINDOW_TIME_FIELD]))
                ),
                qe.IsEmptyCondition(WINDOW_KEY_FIELD),
            ]
        )
        assert shard.count(qe.CountRequest(exact=True, filter=unkeyed)) == 0
        for number in range(5):
            query = _vector(Owner("q", "q"), number)
            assert await _dense(index, POWER, query, 10) == _nearest(window, query, 10)
        [stored] = await index.get(EPISODES, POWER, [window[0].id])
        assert WINDOW_KEY_FIELD not in stored.payload
    finally:
        await index.close()

    # Reopened: the window is keyed from the first search (nothing left to backfill).
    index = _index(tmp_path / "edge", 300)
    try:
        await index.ensure_collection(EPISODES, DIM)
        assert await _dense(index, POWER, query, 10) == _nearest(window, query, 10)
        assert index.dense_windows.keyed(EPISODES, POWER)
    finally:
        await index.close()


async def test_a_new_time_moves_a_point_into_the_window(tmp_path: Path) -> None:
    index, power = await _index_with_owners(tmp_path / "edge", 300, _spread(3000, 9))
    try:
        oldest = _newest(power, 3000)[-1]
        query = oldest.dense  # the point itself: first wherever it is searched
        assert (await _dense(index, POWER, list(query), 1)) != [oldest.payload["n"]]  # outside the window
        await index.set_payload(EPISODES, POWER, [oldest.id], {WINDOW_TIME_FIELD: NOW + 60})
        assert (await _dense(index, POWER, list(query), 1)) == [oldest.payload["n"]]
        assert index.dense_windows.keyed(EPISODES, POWER)
    finally:
        await index.close()


async def test_a_bulk_import_at_one_time_is_searched_whole(tmp_path: Path) -> None:
    # 1000 memories stamped with the same time (an import): no window can narrow them, all are searched.
    index, power = await _index_with_owners(tmp_path / "edge", 100, [NOW - DAY] * 1000)
    try:
        for number in range(3):
            query = _vector(Owner("q", "q"), number)
            assert await _dense(index, POWER, query, 10) == _nearest(power, query, 10)
        # The keyword branch covers everything as well.
        hits = await index.hybrid_query(
            EPISODES,
            POWER,
            dense=_vector(Owner("q", "q"), 0),
            sparse=SparseVector([5], [1.0]),
            weights=HybridWeights(keyword=1.0, dense=0.0),
            limit=20,
            search_filter=SearchFilter(match={"kind": "episode"}),
        )
        assert {int(hit.payload["n"]) for hit in hits} == {n for n in range(1000) if n % 97 == 5}
    finally:
        await index.close()


def test_window_keys_order_by_owner_then_time() -> None:
    alice, bob = Owner("t1", "alice"), Owner("t1", "bob")
    times = [0.0, 59.0, 60.0, NOW, NOW + 60, 4e9]
    keys = [window_key(alice, moment) for moment in times]
    assert keys == sorted(keys) and keys[0] == keys[1] < keys[2]  # minute resolution
    assert all(key == int(key) and key < 2**53 for key in keys)  # exact float64 integers
    assert window_key(alice, -5e9) == keys[0]  # clamped, still ordered
    assert {window_key(bob, moment) for moment in times}.isdisjoint(keys)


async def test_the_window_answers_through_writes_filters_and_deletes(tmp_path: Path) -> None:
    index, power = await _index_with_owners(tmp_path / "edge", 300, _spread(3000, 10))
    try:
        queries = [_vector(Owner("q", "q"), n) for n in range(8)]
        window = _newest(power, 300)
        for query in queries:
            assert await _dense(index, POWER, query, 10) == _nearest(window, query, 10)

        # Written after the window was found: in it at once (stamped with the key).
        newer = [
            VectorRecord(
                id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"new/{number}")),
                dense=_vector(Owner("new", "new"), number),
                sparse=SparseVector(indices=[1], values=[1.0]),
                payload={"kind": "episode", "n": 10_000 + number, WINDOW_TIME_FIELD: NOW + 60 * number},
            )
            for number in range(5)
        ]
        await index.upsert(EPISODES, POWER, newer)
        for record in newer:
            assert await _dense(index, POWER, list(record.dense), 1) == [record.payload["n"]]
        window = _newest([*power, *newer], 305)

        # Rewritten with a time before the window: out of it (its key moved with its time).
        moved = dataclasses.replace(newer[0], payload={**newer[0].payload, WINDOW_TIME_FIELD: NOW - 200 * DAY})
        await index.upsert(EPISODES, POWER, [moved])
        window = [record for record in window if record.id != moved.id]
        assert await _dense(index, POWER, list(moved.dense), 10) == _nearest(window, list(moved.dense), 10)

        # A filter most of the window fails: the nearest of those that pass.
        rare = {int(record.payload["n"]) for record in window[::15]}
        await index.set_payload(EPISODES, POWER, [r.id for r in window if r.payload["n"] in rare], {"tag": "rare"})
        only_rare = SearchFilter(match={"tag": "rare"})
        for query in queries[:3]:
            hits = await index.hybrid_query(
                EPISODES,
                POWER,
                dense=query,
                sparse=SparseVector([], []),
                weights=DENSE_ONLY,
                limit=10,
                search_filter=only_rare,
            )
            expected = _nearest([r for r in window if r.payload["n"] in rare], query, 10)
            assert [int(hit.payload["n"]) for hit in hits] == expected

        # Deleted points are never returned.
        nearest = _nearest(window, queries[0], 3)
        gone = [r.id for r in window if r.payload["n"] in nearest]
        assert await index.delete(EPISODES, POWER, SearchFilter(ids=gone)) == 3
        left = [r for r in window if r.payload["n"] not in nearest]
        assert await _dense(index, POWER, queries[0], 10) == _nearest(left, queries[0], 10)
    finally:
        await index.close()
