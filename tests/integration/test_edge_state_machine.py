"""Qdrant Edge under interleaved writes and searches (hypothesis.stateful), on real Edge shards.

Three indexes receive the same upserts, payload writes and deletes: the plain one (`dense_window=None`:
every dense search exhaustive), one with the recent window on (edge_window.py, a window of 4 so that
one owner crosses it often), and one with the window and its rows in memory (edge_window_rows.py, a
shortlist of just the branch's candidates, so that it often cannot settle the answer and falls back).
A simple model holds what each owner wrote. After every search:
- every answer is sound: only the owner's live points, passing the filter, with their current payloads;
- dense-only searches are exact: the nearest by cosine among the points passing the filter (the
  windowed indexes: among those in their current window, when the owner has one);
- keyword-only searches (a weight of 0, or no query vector) agree between the plain and the windowed
  index, as do hybrid searches of an owner without a window, and a keyword search finds every matching
  point when few do; the index with rows answers every search as the windowed one does, up to ties;
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
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from services.common.domain.owner import Owner
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.edge_window import WINDOW_TIME_FIELD
from services.common.stores.vector.edge_window_rows import WindowVectorsConfig
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
FUSION = FusionConfig(dense_floor=-1.0, candidate_factor=1)
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
    """A search begun on every index (prepare_hybrid) and not yet finished: the query vector is pending."""

    owner: Owner
    channel: str | None
    query: np.ndarray[Any, np.dtype[np.float64]]
    prepared: tuple[PreparedHybrid, ...]  # one per index, in `Indexes.all` order


@dataclass
class Indexes:
    """The indexes under test and the loop they run on: opening a shard takes about a second, so
    every example reuses them, starting from no points (`EdgeSearchMachine.__init__`)."""

    loop: asyncio.AbstractEventLoop
    directory: Path
    plain: EdgeVectorIndex
    windowed: EdgeVectorIndex
    shortlisted: EdgeVectorIndex

    @property
    def all(self) -> tuple[EdgeVectorIndex, ...]:
        return (self.plain, self.windowed, self.shortlisted)

    @classmethod
    def open(cls) -> Indexes:
        loop = asyncio.new_event_loop()
        directory = Path(tempfile.mkdtemp(prefix="edge-state-"))
        # No automatic compaction: what runs is what the machine asks for.
        plain = EdgeVectorIndex(directory / "plain", fusion=FUSION, dense_window=None, optimize_threshold=None)
        windowed = EdgeVectorIndex(
            directory / "windowed", fusion=FUSION, dense_window=WINDOW, optimize_threshold=None, window_vectors=None
        )
        shortlisted = EdgeVectorIndex(
            directory / "shortlisted",
            fusion=FUSION,
            dense_window=WINDOW,
            optimize_threshold=None,
            window_vectors=WindowVectorsConfig(shortlist_factor=1),
        )
        opened = cls(loop, directory, plain, windowed, shortlisted)
        for index in opened.all:
            loop.run_until_complete(index.ensure_collection(EPISODES, DIM))
        return opened

    def close(self) -> None:
        try:
            for index in self.all:
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
        self.plain, self.windowed, self.shortlisted = self.indexes.all
        self.model: dict[str, Point] = {}
        self.begun: list[TwoStep] = []
        for owner in POOLS:
            self.each("delete", EPISODES, owner)

    def run(self, coroutine: Any) -> Any:
        return self.indexes.loop.run_until_complete(coroutine)

    def each(self, call: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """The answers of every index (plain, windowed, shortlisted) to one call."""
        return tuple(self.run(getattr(index, call)(*args, **kwargs)) for index in self.indexes.all)

    # -- writes ------------------------------------------------------------------------------------

    @initialize(seed=st.integers(min_value=0, max_value=1000), minute=minutes, terms=term_sets)
    def power_user(self, seed: int, minute: int, terms: set[int]) -> None:
        """Every run starts with a power user (twice the window, in both channels): the windowed
        searches, and the rows kept for them, are in play from the first step."""
        self.upsert(POWER, set(range(WINDOW)), seed, minute, CHANNELS[0], terms)
        self.upsert(POWER, set(range(WINDOW, 2 * WINDOW)), seed, minute, CHANNELS[1], terms)

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
            # A weight of its own per point: no two keyword scores tie, so which points make a branch's
            # cut never depends on Edge's storage order (which differs between shards).
            sparse = SparseVector(indices=sorted(terms), values=[1.0 + number / 16] * len(terms))
            records.append(VectorRecord(point_id(owner, number), dense.tolist(), sparse, payload))
            self.model[point_id(owner, number)] = Point(owner, dense, frozenset(terms), dict(payload))
        self.each("upsert", EPISODES, owner, records)

    @rule(
        number=st.integers(min_value=0, max_value=POOLS[POWER] - 1),
        seed=st.integers(min_value=0, max_value=1000),
        channel=st.sampled_from(CHANNELS),
    )
    def rewrite(self, number: int, seed: int, channel: str) -> None:
        """One of the power user's points written again, new vector and newest time: their point count
        (so their window) does not move, but what the window holds does."""
        self.upsert(POWER, {number}, seed, 0, channel, set())

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
        self.each("set_payload", EPISODES, owner, ids, update)
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
        assert self.each("delete", EPISODES, owner, search_filter) == (len(gone),) * 3
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
        answers = self.each("hybrid_query", EPISODES, owner, search_filter=search_filter, **arguments)
        plain, windowed, shortlisted = answers
        for found in answers:
            self.check_sound(found, owner, channel)
        since = self.windowed.dense_windows.window_since(EPISODES, owner)
        shortlisted_since = self.shortlisted.dense_windows.window_since(EPISODES, owner)
        if dense is not None and weights.dense > 0 and shortlisted_since is not None:
            assert self.shortlisted.window_vectors.loaded(EPISODES, owner)  # the rows were searched
        if since == shortlisted_since:
            assert scores(shortlisted) == pytest.approx(scores(windowed), abs=1e-6)
            assert tied_groups(shortlisted) == tied_groups(windowed)
        if dense is not None and weights == DENSE_ONLY:
            assert ids(plain) == self.nearest(query, owner, channel, limit, since=None)
            assert ids(windowed) == self.nearest(query, owner, channel, limit, since=since)
            assert ids(shortlisted) == self.nearest(query, owner, channel, limit, since=shortlisted_since)
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
        prepared = self.each("prepare_hybrid", EPISODES, owner, **arguments)
        self.begun.append(TwoStep(owner, channel, unit_vector(seed, 10_000), prepared))

    @precondition(lambda self: bool(self.begun))
    @rule(vector_came=st.booleans())
    def finish_search(self, vector_came: bool) -> None:
        begun = self.begun.pop(0)
        dense = begun.query.tolist() if vector_came else None
        for index, prepared in zip(self.indexes.all, begun.prepared, strict=True):
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
        assert self.each("count", EPISODES, owner, search_filter) == (expected,) * 3

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
