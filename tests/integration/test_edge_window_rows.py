"""A power user's window kept as a matrix (edge_window_rows.py), on real Edge shards: the shortlisted
dense search answers what a brute-force search over the window answers, after the writes that change
what the window holds, and falls back to Edge's window search when the shortlist cannot settle it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from services.common.domain.owner import Owner
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.edge_search import BranchSearch
from services.common.stores.vector.edge_window import WINDOW_TIME_FIELD
from services.common.stores.vector.edge_window_rows import WindowVectorsConfig
from services.common.stores.vector.fusion import FusionConfig
from services.common.stores.vector.port import EPISODES, HybridWeights, SearchFilter, SparseVector, VectorRecord

pytestmark = [pytest.mark.integration]

DIM = 16
WINDOW = 40
POINTS = 100
NOW = 1_767_225_600.0
POWER = Owner("t1", "power")
DENSE_ONLY = HybridWeights(keyword=0.0, dense=1.0)
FUSION = FusionConfig(dense_floor=-1.0)  # the fused order of a dense-only search is the cosine order
LIMIT = 3  # 6 candidates, a shortlist of 24 of the window's ~40 rows


def _id(number: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"window-rows/{number}"))


def _unit(*seed: int) -> list[float]:
    vector = np.random.default_rng(list(seed)).normal(size=DIM)
    unit: list[float] = (vector / np.linalg.norm(vector)).tolist()
    return unit


class PowerUser:
    """The power user's points as written (id → vector, payload), and a brute-force search over them."""

    def __init__(self) -> None:
        self.points: dict[str, tuple[list[float], dict[str, Any]]] = {}

    def record(self, number: int, dense: list[float], minutes_ago: int, channel: str) -> VectorRecord:
        payload = {"n": number, "channel": channel, WINDOW_TIME_FIELD: NOW - 60.0 * minutes_ago}
        self.points[_id(number)] = (dense, payload)
        return VectorRecord(_id(number), dense, SparseVector([], []), payload)

    def nearest(self, query: list[float], since: float, channel: str | None = None) -> list[int]:
        passing = [
            (float(np.dot(dense, query)), int(payload["n"]))
            for dense, payload in self.points.values()
            if payload[WINDOW_TIME_FIELD] >= since and (channel is None or payload["channel"] == channel)
        ]
        return [number for _, number in sorted(passing, reverse=True)[:LIMIT]]


@pytest.fixture
async def index(tmp_path: Path) -> AsyncIterator[EdgeVectorIndex]:
    opened = EdgeVectorIndex(tmp_path / "edge", fusion=FUSION, dense_window=WINDOW, optimize_threshold=None)
    await opened.ensure_collection(EPISODES, DIM)
    try:
        yield opened
    finally:
        await opened.close()


async def _seed(index: EdgeVectorIndex) -> PowerUser:
    power = PowerUser()
    channels = ("web", "slack")
    records = [power.record(n, _unit(n), minutes_ago=10 + n, channel=channels[n % 2]) for n in range(POINTS)]
    await index.upsert(EPISODES, POWER, records)
    return power


async def _dense(index: EdgeVectorIndex, query: list[float], channel: str | None = None) -> list[int]:
    search_filter = None if channel is None else SearchFilter(channels=[channel])
    hits = await index.hybrid_query(
        EPISODES,
        POWER,
        dense=query,
        sparse=SparseVector([], []),
        weights=DENSE_ONLY,
        limit=LIMIT,
        search_filter=search_filter,
    )
    return [int(hit.payload["n"]) for hit in hits]


def _since(index: EdgeVectorIndex) -> float:
    since = index.dense_windows.window_since(EPISODES, POWER)
    assert since is not None
    return since


async def test_searches_over_the_rows_answer_as_the_window(index: EdgeVectorIndex) -> None:
    power = await _seed(index)
    for seed in range(10):
        query = _unit(seed, 999)
        assert await _dense(index, query) == power.nearest(query, _since(index))
    assert index.window_vectors.loaded(EPISODES, POWER)


async def test_a_rewritten_point_is_searched_with_its_new_vector_and_time(index: EdgeVectorIndex) -> None:
    power = await _seed(index)
    query = _unit(1, 999)
    assert await _dense(index, query) == power.nearest(query, _since(index))  # the rows are read
    since = _since(index)
    old = POINTS - 1  # far outside the window; rewritten as the newest point, its vector the query itself
    await index.upsert(EPISODES, POWER, [power.record(old, query, minutes_ago=0, channel="web")])
    assert _since(index) == since  # one point more or less: the same window, now holding the rewritten one
    found = await _dense(index, query)
    assert found[0] == old
    assert found == power.nearest(query, since)


async def test_a_payload_write_that_moves_a_point_into_the_window_is_searched(index: EdgeVectorIndex) -> None:
    power = await _seed(index)
    old = POINTS - 1
    query = power.points[_id(old)][0]  # the old point's own vector: it is the nearest once in the window
    assert old not in await _dense(index, query)
    await index.set_payload(EPISODES, POWER, [_id(old)], {WINDOW_TIME_FIELD: NOW})
    power.points[_id(old)][1][WINDOW_TIME_FIELD] = NOW
    found = await _dense(index, query)
    assert found[0] == old
    assert found == power.nearest(query, _since(index))


async def test_a_filter_the_shortlist_cannot_meet_falls_back_to_the_window(
    index: EdgeVectorIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    power = await _seed(index)
    window_searches: list[int] = []
    plain_window_dense = BranchSearch._window_dense

    def counted(search: BranchSearch, *args: Any) -> Any:
        window_searches.append(1)
        return plain_window_dense(search, *args)

    monkeypatch.setattr(BranchSearch, "_window_dense", counted)
    query = _unit(3, 999)
    assert await _dense(index, query) == power.nearest(query, _since(index))
    assert window_searches == []  # settled by the shortlist alone

    # The window's points nearest the query (as many as the shortlist holds) move to a third channel:
    # none of the shortlist passes a "slack" filter.
    since = _since(index)
    in_window = [point for point, (_, payload) in power.points.items() if payload[WINDOW_TIME_FIELD] >= since]
    shortlisted = WindowVectorsConfig().shortlist_factor * FUSION.candidates(LIMIT)
    near = sorted(in_window, key=lambda point: -float(np.dot(power.points[point][0], query)))[:shortlisted]
    await index.set_payload(EPISODES, POWER, near, {"channel": "email"})
    for point in near:
        power.points[point][1]["channel"] = "email"
    assert await _dense(index, query, channel="slack") == power.nearest(query, since, "slack")
    assert window_searches == [1]


async def test_off_keeps_no_rows_and_answers_the_same(tmp_path: Path) -> None:
    off = EdgeVectorIndex(
        tmp_path / "edge", fusion=FUSION, dense_window=WINDOW, optimize_threshold=None, window_vectors=None
    )
    await off.ensure_collection(EPISODES, DIM)
    try:
        power = await _seed(off)
        query = _unit(5, 999)
        assert await _dense(off, query) == power.nearest(query, _since(off))
        assert not off.window_vectors.loaded(EPISODES, POWER)
    finally:
        await off.close()


def test_the_config_refuses_an_empty_bound() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        WindowVectorsConfig(max_owners=0)
