"""A power user's dense branch answered from memory after the vector (edge_passing.py): the window's
rows shortlist, a passing set taken by Edge while the query embeds decides which points pass. Real
Edge shards. Each search here starts with its query vector pending (as L0 runs) and is checked against
a brute-force search over the window's points with the filter applied in Python, and for whether it
asked Edge anything after the vector; writes come between searches and while a query embeds:
upserts, channel changes, deletes, expiries passing, recall counts."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from services.common.domain.owner import Owner
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.edge_window import WINDOW_TIME_FIELD
from services.common.stores.vector.fusion import FusionConfig
from services.common.stores.vector.port import EPISODES, HybridWeights, SearchFilter, SparseVector, VectorRecord
from tests.support.edge_calls import ShardCalls, search_with_vector_pending

pytestmark = [pytest.mark.integration]

DIM = 16
DAY = 86_400.0
NOW = 1_767_225_600.0  # 2026-01-01
WINDOW = 200
POWER = Owner("t1", "power")
DENSE_ONLY = HybridWeights(keyword=0.0, dense=1.0)
FUSION = FusionConfig(dense_floor=-1.0)  # dense scores from the whole cosine range: fused order = cosine order
LIMIT = 8
# Of the power user's points: expiring in a year, within 15 minutes, expired a day ago, never.
SHARES = [0.6, 0.2, 0.1, 0.1]


def _unit(rng: np.random.Generator) -> list[float]:
    vector = rng.normal(size=DIM)
    unit: list[float] = (vector / np.linalg.norm(vector)).tolist()
    return unit


def _record(owner: Owner, number: int, dense: list[float], occurred: float, **payload: Any) -> VectorRecord:
    return VectorRecord(
        id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"passing/{owner.user_id}/{number}")),
        dense=dense,
        sparse=SparseVector(indices=[number % 31], values=[1.0]),
        payload={"kind": "episode", "n": number, WINDOW_TIME_FIELD: occurred, **payload},
    )


def _power_records(rng: np.random.Generator, count: int) -> list[VectorRecord]:
    """Times 30 minutes apart (the newest at NOW); channels mixed; expiries by `SHARES`."""
    records = []
    for number in range(count):
        expiry = [NOW + 365 * DAY, NOW + float(rng.integers(1, 900)), NOW - DAY, None][rng.choice(4, p=SHARES)]
        channel = "group" if rng.random() < 0.7 else "private"
        records.append(_record(POWER, number, _unit(rng), NOW - 1800.0 * number, channel=channel, expires_at_ts=expiry))
    return records


def _tilted(vector: list[float]) -> list[float]:
    """Close to `vector` (cosine ~0.99), not equal: no tie with it."""
    tilted = np.asarray(vector) + 0.15 * np.roll(np.asarray(vector), 1)
    unit: list[float] = (tilted / np.linalg.norm(tilted)).tolist()
    return unit


def _passes(payload: Mapping[str, Any], now: float) -> bool:
    """L0's episode filter in a group conversation: stated in a group, not expired at `now`."""
    expiry = payload.get("expires_at_ts")
    return payload.get("channel") == "group" and isinstance(expiry, float) and expiry >= now


def _filter(now: float) -> SearchFilter:
    return SearchFilter(channels=["group"], after=datetime.fromtimestamp(now, UTC), time_field="expires_at_ts")


def _expected(points: dict[int, VectorRecord], query: list[float], now: float) -> list[int]:
    window = sorted(points.values(), key=lambda r: -float(r.payload[WINDOW_TIME_FIELD]))[:WINDOW]
    matching = [record for record in window if _passes(record.payload, now)]
    matrix = np.asarray([record.dense for record in matching], dtype=np.float32)
    order = np.argsort(-(matrix @ np.asarray(query, dtype=np.float32)), kind="stable")[:LIMIT]
    return [int(matching[i].payload["n"]) for i in order]


class PowerUser:
    """The index with a power user among 100 normal ones, the power user's points as written, and a
    search whose calls to Edge after its vector are recorded."""

    def __init__(self, index: EdgeVectorIndex, points: dict[int, VectorRecord]) -> None:
        self.index = index
        self.points = points
        self.calls = ShardCalls(index._collections[EPISODES].shard)
        index._collections[EPISODES].shard = self.calls  # type: ignore[assignment]

    async def search(
        self, query: list[float], now: float, meanwhile: Callable[[], Any] | None = None
    ) -> tuple[list[int], dict[str, int]]:
        """The hits' numbers, and Edge's calls after the vector (`meanwhile`: awaited while it embeds)."""
        vector, search = await search_with_vector_pending(
            self.index, EPISODES, POWER, sparse=SparseVector([], []), weights=DENSE_ONLY, limit=LIMIT,
            search_filter=_filter(now),
        )  # fmt: skip
        if meanwhile is not None:
            await meanwhile()
        before = len(self.calls.names)
        vector.set_result(query)
        hits = await search
        after = self.calls.names[before:]
        return [int(hit.payload["n"]) for hit in hits], {name: after.count(name) for name in set(after)}


@pytest.fixture
async def power(tmp_path: Path) -> Any:
    index = EdgeVectorIndex(tmp_path / "edge", dense_window=WINDOW, fusion=FUSION)
    await index.ensure_collection(EPISODES, DIM)
    rng = np.random.default_rng(5)
    for number in range(100):
        owner = Owner("t1", f"u{number}")
        records = [_record(owner, n, _unit(rng), NOW - 3600.0 * n, channel="group") for n in range(10)]
        await index.upsert(EPISODES, owner, records)
    records = _power_records(rng, 3 * WINDOW)
    await index.upsert(EPISODES, POWER, records)
    try:
        yield PowerUser(index, {int(r.payload["n"]): r for r in records})
    finally:
        await index.close()


def _queries(count: int, seed: int) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [_unit(rng) for _ in range(count)]


# Only the payloads of the fused best are read after the vector: by id, no search request.
FROM_MEMORY = {"retrieve": 1}


async def test_the_dense_branch_answers_from_memory_as_edge_would(power: PowerUser) -> None:
    queries = _queries(12, 1)
    hits, calls = await power.search(queries[0], NOW)  # the first search loads the rows after its vector
    assert hits == _expected(power.points, queries[0], NOW)
    assert calls.get("query_batch", 0) >= 1
    for query in queries:  # then a passing set is taken while each query embeds, once
        hits, calls = await power.search(query, NOW)
        assert hits == _expected(power.points, query, NOW)
        assert calls == FROM_MEMORY
    assert power.calls.names.count("scroll") <= 4  # rows, window, passing set: not one scroll a search


async def test_a_later_now_leaves_out_what_expired_meanwhile(power: PowerUser) -> None:
    query = _queries(1, 2)[0]
    expiring = [r for r in power.points.values() if _passes(r.payload, NOW) and r.payload["expires_at_ts"] < NOW + DAY]
    assert len(expiring) > 10  # the soon-expiring points are many of those that pass
    # The nearest passing points of the query are made to expire 100 s and 400 s from now.
    nearest = _expected(power.points, query, NOW)[:2]
    for number, expiry, dense in zip(nearest, (100.0, 400.0), (query, _tilted(query)), strict=True):
        payload = {**power.points[number].payload, "expires_at_ts": NOW + expiry}
        power.points[number] = dataclasses.replace(power.points[number], dense=dense, payload=payload)
    await power.index.upsert(EPISODES, POWER, [power.points[n] for n in nearest])
    await power.search(query, NOW)  # after the write: the rows follow it, the passing set is taken again
    for now in (NOW, NOW + 50.0, NOW + 101.0, NOW + 500.0, NOW + 599.0):
        hits, calls = await power.search(query, now)
        assert hits == _expected(power.points, query, now)
        assert calls == FROM_MEMORY, now
    assert _expected(power.points, query, NOW)[:2] == nearest
    assert nearest[0] not in _expected(power.points, query, NOW + 101.0)
    assert nearest[1] not in _expected(power.points, query, NOW + 500.0)
    # Past the set's horizon, or before its bound: Edge takes the set again, and answers the same.
    for now in (NOW + 3 * DAY, NOW - 10.0):
        hits, _ = await power.search(query, now)
        assert hits == _expected(power.points, query, now)


async def test_writes_between_searches_and_while_a_query_embeds_are_never_missed(power: PowerUser) -> None:
    queries = _queries(6, 3)
    for query in queries:  # warm: rows and passing set
        await power.search(query, NOW)
    query = queries[0]
    best = _expected(power.points, query, NOW)

    # A channel change of the best hit, between searches: it no longer passes.
    await power.index.set_payload(EPISODES, POWER, [power.points[best[0]].id], {"channel": "private"})
    power.points[best[0]] = dataclasses.replace(
        power.points[best[0]], payload={**power.points[best[0]].payload, "channel": "private"}
    )
    hits, _ = await power.search(query, NOW)
    assert best[0] not in hits and hits == _expected(power.points, query, NOW)

    # A recall count (a field no search filters on) keeps the set: still answered from memory.
    await power.index.set_payload(EPISODES, POWER, [power.points[best[1]].id], {"recall_count": 3})
    hits, calls = await power.search(query, NOW)
    assert hits == _expected(power.points, query, NOW) and calls == FROM_MEMORY

    # A delete of the next best: gone from the answer.
    await power.index.delete(EPISODES, POWER, SearchFilter(ids=[power.points[best[1]].id]))
    del power.points[best[1]]
    for _ in range(2):
        hits, _ = await power.search(query, NOW)
        assert best[1] not in hits and hits == _expected(power.points, query, NOW)

    # Written while the query embeds, each in its own search: a new point nearest the query, then a
    # channel change that lets an old one pass. The set this search prepared is gone by its vector:
    # Edge answers, and finds it.
    newest = _record(POWER, 10_000, query, NOW + 60.0, channel="group", expires_at_ts=NOW + 365 * DAY)
    power.points[10_000] = newest
    hits, calls = await power.search(query, NOW, meanwhile=lambda: power.index.upsert(EPISODES, POWER, [newest]))
    assert hits[0] == 10_000 and hits == _expected(power.points, query, NOW)
    assert calls.get("query_batch", 0) >= 1  # Edge answered

    private = next(
        r
        for r in power.points.values()
        if r.payload["channel"] == "private" and _passes({**r.payload, "channel": "group"}, NOW)
    )
    tilted = dataclasses.replace(private, dense=_tilted(query))
    await power.index.upsert(EPISODES, POWER, [tilted])  # near the query, still private
    await power.search(query, NOW)
    power.points[int(private.payload["n"])] = dataclasses.replace(
        tilted, payload={**private.payload, "channel": "group"}
    )

    async def to_group() -> None:
        await power.index.set_payload(EPISODES, POWER, [private.id], {"channel": "group"})

    hits, calls = await power.search(query, NOW, meanwhile=to_group)
    assert hits[:2] == [10_000, private.payload["n"]] and hits == _expected(power.points, query, NOW)
    assert calls.get("query_batch", 0) >= 1
    hits, calls = await power.search(query, NOW)  # and the next search has a set again
    assert hits == _expected(power.points, query, NOW) and calls == FROM_MEMORY


async def test_a_delete_that_moves_the_window_takes_a_new_set(power: PowerUser) -> None:
    queries = _queries(4, 4)
    for query in queries:
        await power.search(query, NOW)
    newest = sorted(power.points.values(), key=lambda r: -float(r.payload[WINDOW_TIME_FIELD]))[: WINDOW * 3 // 4]
    await power.index.delete(EPISODES, POWER, SearchFilter(ids=[r.id for r in newest]))
    for record in newest:
        del power.points[int(record.payload["n"])]
    for query in queries:  # the window reaches further back now: its older points pass too
        hits, _ = await power.search(query, NOW)
        assert hits == _expected(power.points, query, NOW)
    hits, calls = await power.search(queries[0], NOW)
    assert hits == _expected(power.points, queries[0], NOW) and calls == FROM_MEMORY
