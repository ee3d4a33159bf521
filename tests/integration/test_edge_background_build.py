"""Qdrant Edge's automatic HNSW build runs in a child process on a copy of the shard and is swapped in:
the request process keeps answering during the build, and no write made during it is lost.

Real Qdrant Edge shards and a real child process; vectors are deterministic random unit vectors (the
engine's behaviour, not the embedding model, is under test)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import qdrant_edge as qe

from services.common.domain.owner import Owner
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import EPISODES, SearchFilter, VectorRecord
from tests.support.vectors import nearest_id, numbered_record

pytestmark = [pytest.mark.integration]

DIM = 32
ALICE = Owner("t1", "alice")
BOB = Owner("t1", "bob")


def _record(owner: Owner, number: int) -> VectorRecord:
    return numbered_record(owner, number, DIM)


def _indexed_vectors(path: Path) -> int:
    shard = qe.EdgeShard.load(str(path))
    try:
        return int(shard.info().indexed_vectors_count)
    finally:
        shard.close()


async def _nearest(index: EdgeVectorIndex, owner: Owner, record: VectorRecord) -> str:
    return await nearest_id(index, EPISODES, owner, record)


async def test_the_build_runs_beside_the_process_and_keeps_every_write(tmp_path: Path) -> None:
    data_dir = tmp_path / "edge"
    index = EdgeVectorIndex(data_dir, optimize_threshold=200, indexing_threshold_kb=1, index_builds="background")
    first = [_record(ALICE, n) for n in range(300)]
    added: list[VectorRecord] = []
    deleted: list[str] = []
    relabelled: list[str] = []
    try:
        await index.ensure_collection(EPISODES, DIM)
        await index.upsert(EPISODES, BOB, [_record(BOB, n) for n in range(5)])
        await index.upsert(EPISODES, ALICE, first)  # 305 pending ≥ 200: a build starts
        # Inline, the build would be over before upsert returned; here the process goes on meanwhile:
        # it writes (upsert, delete, payload change) and answers queries until the swap.
        assert index.build_running(EPISODES)
        # Fewer writes than the next threshold (max(200, 305 indexed)), so exactly one build runs.
        while index.build_running(EPISODES) and len(added) < 150:
            await asyncio.sleep(0)  # these calls never suspend by themselves; let the build task run
            step = len(added)
            record = _record(ALICE, 1000 + step)
            await index.upsert(EPISODES, ALICE, [record])
            added.append(record)
            if step < 100:
                deleted.append(first[step].id)
                await index.delete(EPISODES, ALICE, SearchFilter(ids=[first[step].id]))
                relabelled.append(first[150 + step].id)
                await index.set_payload(EPISODES, ALICE, [first[150 + step].id], {"label": "changed"})
            probe = first[299 - step % 50]
            assert await _nearest(index, ALICE, probe) == probe.id
        await index.wait_for_builds()
        assert not index.build_running(EPISODES)
        pointer = data_dir / f"{EPISODES}.current"
        assert pointer.exists()  # the built generation is current
        current = data_dir / pointer.read_text().strip()
        assert not (data_dir / EPISODES).exists()  # the replaced generation was removed
        await _assert_every_write_kept(index, first, added, deleted, relabelled)
    finally:
        await index.close()
    assert _indexed_vectors(current) > 0  # the swapped-in generation carries the HNSW index
    reopened = EdgeVectorIndex(data_dir)
    try:
        await reopened.ensure_collection(EPISODES, DIM)
        await _assert_every_write_kept(reopened, first, added, deleted, relabelled)
    finally:
        await reopened.close()


async def _assert_every_write_kept(
    index: EdgeVectorIndex,
    first: list[VectorRecord],
    added: list[VectorRecord],
    deleted: list[str],
    relabelled: list[str],
) -> None:
    assert await index.count(EPISODES, ALICE) == len(first) + len(added) - len(deleted)
    assert await index.count(EPISODES, BOB) == 5
    assert await index.get(EPISODES, ALICE, deleted) == []
    changed = await index.get(EPISODES, ALICE, relabelled)
    assert [record.payload.get("label") for record in changed] == ["changed"] * len(relabelled)
    assert await _nearest(index, ALICE, added[-1]) == added[-1].id


async def test_closing_during_a_build_stops_it_and_loses_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "edge"
    index = EdgeVectorIndex(data_dir, optimize_threshold=100, indexing_threshold_kb=1, index_builds="background")
    records = [_record(ALICE, n) for n in range(150)]
    await index.ensure_collection(EPISODES, DIM)
    await index.upsert(EPISODES, ALICE, records)
    assert index.build_running(EPISODES)
    await asyncio.sleep(0)  # let the build start copying
    await index.close()  # cancels the build (kills the child if it runs)
    reopened = EdgeVectorIndex(data_dir)
    try:
        await reopened.ensure_collection(EPISODES, DIM)
        assert await reopened.count(EPISODES, ALICE) == len(records)
        assert await _nearest(reopened, ALICE, records[7]) == records[7].id
    finally:
        await reopened.close()
    # Only the current generation is left: the interrupted copy was removed.
    assert sorted(entry.name for entry in data_dir.iterdir() if entry.is_dir()) == [EPISODES]
