"""Qdrant Edge under interleaved writes and searches (hypothesis.stateful), on real Edge shards.

Two indexes receive the same upserts, payload writes and deletes: the plain one (`dense_window=None`:
every dense search exhaustive) and one with the recent window on (edge_window.py, a window of 4 so
that one owner crosses it often). A simple model holds what each owner wrote. After every search:
- both answers are sound: only the owner's live points, passing the filter, with their current payloads;
- dense-only searches are exact: the nearest by cosine among the points passing the filter (the
  windowed index: among those in its current window, when the owner has one);
- keyword-only searches (a weight of 0, or no query vector) agree between the two indexes, as do hybrid
  searches of an owner without a window, and a keyword search finds every matching point when few do;
- counts agree with the model;
- a two-step search (prepare_hybrid, then finish_hybrid, with any writes between the steps) answers
  exactly what the one-step hybrid_query answers on the index as it is when it finishes.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from services.common.domain.owner import Owner
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.edge_window import WINDOW_TIME_FIELD
from services.common.stores.vector.fusion import FusionConfig
from services.common.stores.vector.port import (
    EPISODES,
    HybridWeights,
    PreparedHybrid,
    ScoredRecord,
    SearchFilter,
    SparseVector,
    VectorRecord,
)

pytestmark = pytest.mark.integration

DIM = 4
WINDOW = 4
NOW = 1_767_225_600.0
# Dense scores over the whole cosine range: the fused order of a dense-only search is the cosine order.
FUSION = FusionConfig(dense_floor=-1.0)
POWER = Owner("t1", "power")  # up to 12 points: crosses the window of 4
SMALL = Owner("t1", "small")  # up to 4 points: never windowed
POOLS = {POWER: 12, SMALL: 4}
CHANNELS = ("web", "slack")
TERMS = (1, 2, 3, 4, 5)
DENSE_ONLY = HybridWeights(keyword=0.0, dense=1.0)
KEYWORD_ONLY = HybridWeights(keyword=1.0, dense=0.0)
HYBRID = HybridWeights(keyword=0.7, dense=0.3)

owners = st.sampled_from(list(POOLS))
minutes = st.integers(min_value=0, max_value=40)
term_sets = st.sets(st.sampled_from(TERMS), min_size=0, max_size=3)


def point_id(owner: Owner, number: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"state-machine/{owner.user_id}/{number}"))


def unit_vector(*seed: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    vector = np.random.default_rng(list(seed)).normal(size=DIM)
    return vector / np.linalg.norm(vector)


@dataclass
class Point:
    owner: Owner
    dense: np.ndarray[Any, np.dtype[np.float64]]
    terms: frozenset[int]
    payload: dict[str, Any] = field(default_factory=dict)

    def passes(self, owner: Owner, channel: str | None) -> bool:
        return self.owner == owner and (channel is None or self.payload["channel"] == channel)


@dataclass(frozen=True)
class TwoStep:
    """A search begun on both indexes (prepare_hybrid) and not yet finished: the query vector is pending."""

    owner: Owner
    channel: str | None
    query: np.ndarray[Any, np.dtype[np.float64]]
    plain: PreparedHybrid
    windowed: PreparedHybrid


@dataclass
class Indexes:
    """The two indexes under test and the loop they run on: opening a shard takes about a second, so
    every example reuses them, starting from no points (`EdgeSearchMachine.__init__`)."""

    loop: asyncio.AbstractEventLoop
    directory: Path
    plain: EdgeVectorIndex
    windowed: EdgeVectorIndex

    @classmethod
    def open(cls) -> Indexes:
        loop = asyncio.new_event_loop()
        directory = Path(tempfile.mkdtemp(prefix="edge-state-"))
        # No automatic compaction: what runs is what the machine asks for.
        plain = EdgeVectorIndex(directory / "plain", fusion=FUSION, dense_window=None, optimize_threshold=None)
        windowed = EdgeVectorIndex(directory / "windowed", fusion=FUSION, dense_window=WINDOW, optimize_threshold=None)
        for index in (plain, windowed):
            loop.run_until_complete(index.ensure_collection(EPISODES, DIM))
        return cls(loop, directory, plain, windowed)

    def close(self) -> None:
        try:
            for index in (self.plain, self.windowed):
                self.loop.run_until_complete(index.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.directory, ignore_errors=True)


_opened: list[Indexes] = []


@pytest.fixture(scope="module", autouse=True)
def _close_indexes() -> Iterator[None]:
    yield
    while _opened:
        _opened.pop().close()


class EdgeSearchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        if not _opened:
            _opened.append(Indexes.open())
        self.indexes = _opened[0]
        self.plain, self.windowed = self.indexes.plain, self.indexes.windowed
        self.model: dict[str, Point] = {}
        self.begun: list[TwoStep] = []
        for owner in POOLS:
            self.both("delete", EPISODES, owner)

    def run(self, coroutine: Any) -> Any:
        return self.indexes.loop.run_until_complete(coroutine)

    def both(self, call: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        plain = self.run(getattr(self.plain, call)(*args, **kwargs))
        windowed = self.run(getattr(self.windowed, call)(*args, **kwargs))
        return plain, windowed

    # -- writes ------------------------------------------------------------------------------------

    @rule(
        owner=owners,
        numbers=st.sets(st.integers(min_value=0, max_value=11), min_size=1, max_size=4),
        seed=st.integers(min_value=0, max_value=1000),
        minute=minutes,
        channel=st.sampled_from(CHANNELS),
        terms=term_sets,
    )
    def upsert(self, owner: Owner, numbers: set[int], seed: int, minute: int, channel: str, terms: set[int]) -> None:
        records = []
        for number in sorted(n for n in numbers if n < POOLS[owner]):
            dense = unit_vector(seed, number)
            payload = {"n": number, "channel": channel, WINDOW_TIME_FIELD: NOW - 60.0 * (minute + number)}
            sparse = SparseVector(indices=sorted(terms), values=[1.0] * len(terms))
            records.append(VectorRecord(point_id(owner, number), dense.tolist(), sparse, payload))
            self.model[point_id(owner, number)] = Point(owner, dense, frozenset(terms), dict(payload))
        self.both("upsert", EPISODES, owner, records)

    @rule(
        owner=owners,
        numbers=st.sets(st.integers(min_value=0, max_value=11), min_size=1, max_size=4),
        channel=st.none() | st.sampled_from(CHANNELS),
        minute=st.none() | minutes,
    )
    def set_payload(self, owner: Owner, numbers: set[int], channel: str | None, minute: int | None) -> None:
        update: dict[str, Any] = {"channel": channel} if channel is not None else {}
        if minute is not None:
            update[WINDOW_TIME_FIELD] = NOW - 60.0 * minute
        if not update:
            return
        ids = [point_id(owner, number) for number in sorted(numbers)]
        self.both("set_payload", EPISODES, owner, ids, update)
        for point in ids:
            if point in self.model:
                self.model[point].payload.update(update)

    @rule(owner=owners, numbers=st.none() | st.sets(st.integers(0, 11), max_size=4), channel=st.sampled_from(CHANNELS))
    def delete(self, owner: Owner, numbers: set[int] | None, channel: str) -> None:
        if numbers is None:  # by filter: the owner's points in one channel
            search_filter = SearchFilter(channels=[channel])
            gone = [i for i, point in self.model.items() if point.passes(owner, channel)]
        else:
            search_filter = SearchFilter(ids=[point_id(owner, number) for number in sorted(numbers)])
            gone = [point_id(owner, n) for n in numbers if point_id(owner, n) in self.model]
        plain, windowed = self.both("delete", EPISODES, owner, search_filter)
        assert plain == windowed == len(gone)
        for point in gone:
            del self.model[point]

    # -- reads -------------------------------------------------------------------------------------

    @precondition(lambda self: bool(self.model))
    @rule(
        owner=owners,
        seed=st.integers(min_value=0, max_value=1000),
        terms=term_sets,
        weights=st.sampled_from([DENSE_ONLY, KEYWORD_ONLY, HYBRID]),
        vector_came=st.booleans(),
        channel=st.none() | st.sampled_from(CHANNELS),
        limit=st.integers(min_value=1, max_value=5),
    )
    def search(
        self,
        owner: Owner,
        seed: int,
        terms: set[int],
        weights: HybridWeights,
        vector_came: bool,
        channel: str | None,
        limit: int,
    ) -> None:
        query = unit_vector(seed, 10_000)
        dense = query.tolist() if vector_came else None  # None: the vector missed L0's deadline
        sparse = SparseVector(indices=sorted(terms), values=[1.0] * len(terms))
        search_filter = None if channel is None else SearchFilter(channels=[channel])
        arguments = {"dense": dense, "sparse": sparse, "weights": weights, "limit": limit}
        plain, windowed = self.both("hybrid_query", EPISODES, owner, search_filter=search_filter, **arguments)
        for found in (plain, windowed):
            self.check_sound(found, owner, channel)
        since = self.windowed.dense_windows.window_since(EPISODES, owner)
        if dense is not None and weights == DENSE_ONLY:
            assert ids(plain) == self.nearest(query, owner, channel, limit, since=None)
            assert ids(windowed) == self.nearest(query, owner, channel, limit, since=since)
        elif dense is None or weights == KEYWORD_ONLY or since is None:
            assert scores(plain) == pytest.approx(scores(windowed), abs=1e-6)
            assert tied_groups(plain) == tied_groups(windowed)
        if dense is None or weights == KEYWORD_ONLY:
            matching = {i for i, p in self.model.items() if p.passes(owner, channel) and p.terms & terms}
            if weights.keyword <= 0:  # no vector, and keywords weigh nothing: nothing to search
                assert plain == []
            elif len(matching) <= limit:
                assert set(ids(plain)) == matching

    @rule(
        owner=owners,
        seed=st.integers(min_value=0, max_value=1000),
        terms=term_sets,
        weights=st.sampled_from([DENSE_ONLY, KEYWORD_ONLY, HYBRID]),
        channel=st.none() | st.sampled_from(CHANNELS),
        limit=st.integers(min_value=1, max_value=5),
    )
    def begin_search(
        self, owner: Owner, seed: int, terms: set[int], weights: HybridWeights, channel: str | None, limit: int
    ) -> None:
        """The first step of a two-step search, while the query vector is pending: writes may follow."""
        sparse = SparseVector(indices=sorted(terms), values=[1.0] * len(terms))
        search_filter = None if channel is None else SearchFilter(channels=[channel])
        arguments = {"sparse": sparse, "weights": weights, "limit": limit, "search_filter": search_filter}
        plain, windowed = self.both("prepare_hybrid", EPISODES, owner, **arguments)
        self.begun.append(TwoStep(owner, channel, unit_vector(seed, 10_000), plain, windowed))

    @precondition(lambda self: bool(self.begun))
    @rule(vector_came=st.booleans())
    def finish_search(self, vector_came: bool) -> None:
        begun = self.begun.pop(0)
        dense = begun.query.tolist() if vector_came else None
        for index, prepared in ((self.plain, begun.plain), (self.windowed, begun.windowed)):
            two_step = self.run(index.finish_hybrid(prepared, dense))
            self.check_sound(two_step, begun.owner, begun.channel)
            one_step = self.run(
                index.hybrid_query(
                    EPISODES,
                    prepared.owner,
                    dense=dense,
                    sparse=prepared.sparse,
                    weights=prepared.weights,
                    limit=prepared.limit,
                    search_filter=prepared.search_filter,
                )
            )
            assert [(hit.id, hit.score, hit.payload) for hit in two_step] == [
                (hit.id, hit.score, hit.payload) for hit in one_step
            ]

    @rule(owner=owners, channel=st.none() | st.sampled_from(CHANNELS))
    def count(self, owner: Owner, channel: str | None) -> None:
        search_filter = None if channel is None else SearchFilter(channels=[channel])
        expected = sum(point.passes(owner, channel) for point in self.model.values())
        assert self.both("count", EPISODES, owner, search_filter) == (expected, expected)

    def check_sound(self, found: list[ScoredRecord], owner: Owner, channel: str | None) -> None:
        assert scores(found) == sorted(scores(found), reverse=True)
        for hit in found:
            point = self.model.get(hit.id)
            assert point is not None and point.passes(owner, channel), hit
            assert hit.payload == {**point.payload, "tenant_id": owner.tenant_id, "user_id": owner.user_id}
            assert 0.0 <= hit.score <= 1.0 and math.isfinite(hit.score)

    def nearest(
        self,
        query: np.ndarray[Any, np.dtype[np.float64]],
        owner: Owner,
        channel: str | None,
        limit: int,
        *,
        since: float | None,
    ) -> list[str]:
        """The ids of the `limit` points nearest `query` among those passing the filter (and, with
        `since`, in the window: their time at or after it)."""
        passing = [
            (float(point.dense @ query), point_id)
            for point_id, point in self.model.items()
            if point.passes(owner, channel) and (since is None or point.payload[WINDOW_TIME_FIELD] >= since)
        ]
        return [point_id for _, point_id in sorted(passing, key=lambda pair: -pair[0])[:limit]]


def ids(found: list[ScoredRecord]) -> list[str]:
    return [hit.id for hit in found]


def scores(found: list[ScoredRecord]) -> list[float]:
    return [hit.score for hit in found]


def tied_groups(found: list[ScoredRecord]) -> list[frozenset[str] | int]:
    """The ranking up to ties: the ids of each group of equal scores, in order. Points tied at the cut
    may be any of the tied ones (Edge breaks such ties by its own storage order), so the last group
    is compared by size only."""
    groups: list[list[str]] = []
    last: float | None = None
    for hit in found:
        if last is None or abs(hit.score - last) > 1e-6:
            groups.append([])
        groups[-1].append(str(hit.id))
        last = hit.score
    return [frozenset(group) for group in groups[:-1]] + [len(group) for group in groups[-1:]]


EdgeSearchMachine.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestEdgeSearchMachine = EdgeSearchMachine.TestCase
