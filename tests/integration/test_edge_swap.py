"""The swap of a built (or compacted) Edge shard: writes that land while it catches up with the
journal reach the new shard, writes held at the gate land after the switch, and the replay gives
the event loop back between slices instead of running the whole journal in one step.

Real Qdrant Edge shards and a real child process; the swap's catch-up is wrapped (not replaced) to
write at the exact moments that matter: after the built copy is loaded and while the final replay
holds the write gate."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.common.domain.owner import Owner
from services.common.stores.vector import edge_builds
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import EPISODES, SearchFilter, VectorRecord
from tests.support.vectors import nearest_id, numbered_record

pytestmark = [pytest.mark.integration]

DIM = 16
ALICE = Owner("t1", "alice")


def _record(number: int) -> VectorRecord:
    return numbered_record(ALICE, number, DIM)


@pytest.mark.parametrize("mode", ["never", "background"])
async def test_writes_during_the_swap_reach_the_new_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    data_dir = tmp_path / "edge"
    index = EdgeVectorIndex(data_dir, optimize_threshold=500, indexing_threshold_kb=1, index_builds=mode)  # type: ignore[arg-type]
    records = [_record(n) for n in range(2500)]
    during_catch_up = _record(9001)
    held_at_gate = _record(9002)
    phases: list[str] = []
    gate_writer: list[asyncio.Task[None]] = []
    real_catch_up = edge_builds.catch_up

    async def catch_up_with_writes(shard: object, journal: list[object], start: int, *, left: int) -> int:
        if left > 0:  # after the load, before the gate: writes go on and must be journaled
            phases.append("catch-up")
            await index.upsert(EPISODES, ALICE, [during_catch_up])
            await index.delete(EPISODES, ALICE, SearchFilter(ids=[records[2000].id]))
            await index.set_payload(EPISODES, ALICE, [records[2001].id], {"label": "during catch-up"})
        else:  # the final replay, behind the write gate: a write waits and lands after the switch
            phases.append("gated")
            gate_writer.append(asyncio.create_task(index.upsert(EPISODES, ALICE, [held_at_gate])))
            await asyncio.sleep(0)
            assert not gate_writer[0].done()  # it waits at the gate: it cannot land on the old shard
            # Reads go on meanwhile, on the old shard, and see every write made so far.
            assert await nearest_id(index, EPISODES, ALICE, during_catch_up) == during_catch_up.id
        return await real_catch_up(shard, journal, start, left=left)  # type: ignore[arg-type]

    monkeypatch.setattr(edge_builds, "catch_up", catch_up_with_writes)
    try:
        await index.ensure_collection(EPISODES, DIM)
        await index.upsert(EPISODES, ALICE, records)
        if mode == "never":  # compaction: deleting 20% starts it
            await index.delete(EPISODES, ALICE, SearchFilter(ids=[record.id for record in records[:1000]]))
        assert index.build_running(EPISODES)
        # Written while the child builds: replayed from the journal by the catch-up.
        await index.delete(EPISODES, ALICE, SearchFilter(ids=[records[1999].id]))
        await index.wait_for_builds()
        await asyncio.gather(*gate_writer)
        assert phases == ["catch-up", "gated"]
        assert edge_builds.current_dir(data_dir, EPISODES) != data_dir / EPISODES  # the swap happened
        removed = {records[1999].id, records[2000].id} | ({r.id for r in records[:1000]} if mode == "never" else set())
        await _assert_swapped_state(index, records, removed, [during_catch_up, held_at_gate])
    finally:
        await index.close()
    reopened = EdgeVectorIndex(data_dir)  # the current generation on disk holds the same
    try:
        await reopened.ensure_collection(EPISODES, DIM)
        await _assert_swapped_state(reopened, records, removed, [during_catch_up, held_at_gate])
    finally:
        await reopened.close()


async def _assert_swapped_state(
    index: EdgeVectorIndex, records: list[VectorRecord], removed: set[str], added: list[VectorRecord]
) -> None:
    assert await index.count(EPISODES, ALICE) == len(records) - len(removed) + len(added)
    assert await index.get(EPISODES, ALICE, sorted(removed)) == []
    [relabelled] = await index.get(EPISODES, ALICE, [records[2001].id])
    assert relabelled.payload.get("label") == "during catch-up"
    for record in added:
        assert await nearest_id(index, EPISODES, ALICE, record) == record.id


class _SlowShard:
    """Stands in for a shard whose every update takes 1 ms of (fake) time."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.applied: list[int] = []

    def update(self, operation: int) -> None:
        self.clock[0] += 0.001
        self.applied.append(operation)


async def test_the_catch_up_yields_between_slices_and_follows_a_growing_journal() -> None:
    clock = [0.0]
    shard = _SlowShard(clock)
    journal = list(range(100))
    turns = 0

    async def other_coroutine() -> None:  # counts how often the loop got back to others
        nonlocal turns
        while True:
            turns += 1
            if len(journal) < 130:
                journal.append(len(journal))  # a write journaled while the catch-up runs
            await asyncio.sleep(0)

    other = asyncio.create_task(other_coroutine())
    await asyncio.sleep(0)
    try:
        done = await edge_builds.catch_up(shard, journal, 0, left=10, clock=lambda: clock[0])  # type: ignore[arg-type]
    finally:
        other.cancel()
    assert shard.applied == list(range(done))  # in order, none skipped or repeated
    assert len(journal) - done <= 10  # only the tail is left for the gated replay
    assert done >= 100  # operations journaled during the catch-up were replayed too
    # 1 ms per update and 5 ms slices: the loop ran something else at least every 5 updates.
    assert turns >= done // 5
