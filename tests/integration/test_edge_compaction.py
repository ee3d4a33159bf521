"""Deleted points are compacted away beside the request process, also with HNSW builds off (the default).

Erasure and pruning delete points; Qdrant Edge keeps them as tombstones in the segment until
optimize() rewrites it, and optimize() holds the GIL (1.5 s at 100k points). So once enough points
were deleted, the same child-process path as the background build runs optimize() on a copy, with
indexing off in "never" mode, and swaps the compacted copy in. Real Qdrant Edge shards and a real
child process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import qdrant_edge as qe

from services.common.domain.owner import Owner
from services.common.stores.vector import edge_builds
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import EPISODES, SearchFilter, VectorRecord
from tests.support.vectors import nearest_id, numbered_record

pytestmark = [pytest.mark.integration]

DIM = 16
ALICE = Owner("t1", "alice")
BOB = Owner("t1", "bob")


def _record(owner: Owner, number: int) -> VectorRecord:
    return numbered_record(owner, number, DIM)


def _segments(generation: Path) -> set[str]:
    return {entry.name for entry in (generation / "segments").iterdir() if entry.is_dir()}


def _dense_indexed(generation: Path) -> int:
    shard = qe.EdgeShard.load(str(generation))
    try:
        info = shard.info()
        return int(info.indexed_vectors_count - info.points_count)  # the sparse index is always built
    finally:
        shard.close()


async def _nearest(index: EdgeVectorIndex, owner: Owner, record: VectorRecord) -> str:
    return await nearest_id(index, EPISODES, owner, record)


async def test_deletes_are_compacted_in_a_child_without_building_hnsw(tmp_path: Path) -> None:
    data_dir = tmp_path / "edge"
    # indexing_threshold_kb=1: a build that indexed at all would index these segments.
    index = EdgeVectorIndex(data_dir, optimize_threshold=100, indexing_threshold_kb=1, index_builds="never")
    alice = [_record(ALICE, n) for n in range(2500)]
    doomed = [record.id for record in alice[:1200]]
    try:
        await index.ensure_collection(EPISODES, DIM)
        await index.upsert(EPISODES, BOB, [_record(BOB, n) for n in range(10)])
        await index.upsert(EPISODES, ALICE, alice)
        assert not index.build_running(EPISODES)  # "never": writes alone start nothing
        await index.delete(EPISODES, ALICE, SearchFilter(ids=doomed[:500]))
        assert not index.build_running(EPISODES)  # 500 deleted: below what the engine would vacuum
        before = _segments(data_dir / EPISODES)
        await index.delete(EPISODES, ALICE, SearchFilter(ids=doomed[500:]))  # 1200 of 2510: due
        assert index.build_running(EPISODES)
        # The process goes on writing meanwhile; these writes are replayed into the compacted copy.
        late = _record(ALICE, 9000)
        await index.upsert(EPISODES, ALICE, [late])
        await index.set_payload(EPISODES, ALICE, [alice[2000].id], {"label": "changed"})
        await index.delete(EPISODES, ALICE, SearchFilter(ids=[alice[2001].id]))
        await index.wait_for_builds()
        current = edge_builds.current_dir(data_dir, EPISODES)
        assert current != data_dir / EPISODES and not (data_dir / EPISODES).exists()
        assert await index.count(EPISODES, ALICE) == 2500 - 1200 + 1 - 1
        assert await index.count(EPISODES, BOB) == 10
        assert await index.get(EPISODES, ALICE, [doomed[0], doomed[-1], alice[2001].id]) == []
        [changed] = await index.get(EPISODES, ALICE, [alice[2000].id])
        assert changed.payload.get("label") == "changed"
        assert await _nearest(index, ALICE, late) == late.id
        assert await _nearest(index, ALICE, alice[1500]) == alice[1500].id
    finally:
        await index.close()
    # The segment that held the tombstones was rewritten, and no HNSW index was built.
    assert _segments(current).isdisjoint(before)
    assert _dense_indexed(current) == 0
    # The parent's own optimizer settings are back in the generation's config (a later build indexes).
    config = json.loads((current / "edge_config.json").read_text(encoding="utf-8"))
    assert config["optimizers"]["indexing_threshold"] == 1


async def test_compaction_is_not_started_without_automatic_maintenance(tmp_path: Path) -> None:
    data_dir = tmp_path / "edge"
    index = EdgeVectorIndex(data_dir, optimize_threshold=None)  # offline tools: nothing automatic
    try:
        await index.ensure_collection(EPISODES, DIM)
        records = [_record(ALICE, n) for n in range(1500)]
        await index.upsert(EPISODES, ALICE, records)
        await index.delete(EPISODES, ALICE, SearchFilter(ids=[record.id for record in records[:1200]]))
        assert not index.build_running(EPISODES)
    finally:
        await index.close()


@pytest.mark.parametrize(
    ("points", "deleted", "due"),
    [(100_000, 999, False), (1_000, 1_000, True), (100_000, 24_999, False), (100_000, 25_000, True)],
)
def test_compaction_is_due_when_the_engine_would_vacuum(points: int, deleted: int, due: bool) -> None:
    # 25k deleted of 125k = 20%, the engine's deleted_threshold; fewer than 1000 never.
    assert edge_builds.compaction_due(points, deleted) is due


async def test_a_failed_compaction_keeps_the_collection_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def failing(shard_dir: Path, *, vacuum_only: bool = False) -> None:
        raise edge_builds.BuildFailed(f"simulated failure of {shard_dir} (vacuum_only={vacuum_only})")

    monkeypatch.setattr(edge_builds, "build_in_child", failing)
    data_dir = tmp_path / "edge"
    index = EdgeVectorIndex(data_dir, optimize_threshold=100, index_builds="never")
    records = [_record(ALICE, n) for n in range(1500)]
    try:
        await index.ensure_collection(EPISODES, DIM)
        await index.upsert(EPISODES, ALICE, records)
        await index.delete(EPISODES, ALICE, SearchFilter(ids=[record.id for record in records[:1000]]))
        assert index.build_running(EPISODES)
        await index.wait_for_builds()
        assert edge_builds.current_dir(data_dir, EPISODES) == data_dir / EPISODES
        # The copy was removed (edge.lock: this process's claim on the data, edge.py).
        assert [entry.name for entry in data_dir.iterdir() if entry.name != "edge.lock"] == [EPISODES]
        assert await index.count(EPISODES, ALICE) == 500
        # Not retried on the next small delete: only once as many more points are deleted.
        await index.delete(EPISODES, ALICE, SearchFilter(ids=[records[1000].id]))
        assert not index.build_running(EPISODES)
    finally:
        await index.close()
