"""The two branches of a search on Qdrant Edge as requests, with what power users get (owners with
more points than the window in a collection): the dense branch over their recent window
(edge_window.py), shortlisted from the window's vectors in memory (edge_window_vectors.py) and, once
Edge has said which window points pass the search's conditions (a passing set, taken while the query
embeds: edge_passing.py), answered from memory with no request after the vector; the keyword branch
shortlisted from their postings in memory (edge_owner_terms.py). Each shortlisted request comes with
the request to run instead when the shortlist may have fallen short. Normal owners get the plain
requests: for them Edge's planner already scores just the owner's few points. Branch requests read ids
and scores, no payloads (edge.py reads the payloads of the fused best); a keyword branch that runs while
the query embeds also reads its hits' dense vectors, for their cosines after (`run_branches`)."""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import qdrant_edge as qe

from services.common.domain.owner import Owner
from services.common.stores.vector import port
from services.common.stores.vector.adapter_support import (
    DENSE_VECTOR,
    SPARSE_VECTOR,
    BranchHit,
    Conditions,
    owner_conditions,
)
from services.common.stores.vector.edge_filters import branch_hit, edge_filter, filtered_fields
from services.common.stores.vector.edge_owner_terms import OwnerTermIndex
from services.common.stores.vector.edge_passing import DEFAULT_HORIZON_SECONDS, MovingRange, PassingSet
from services.common.stores.vector.edge_window import (
    WINDOW_TIME_FIELD,
    BackfillWrites,
    RecentWindows,
    scroll_field_values,
)

# A shortlist from memory: this many times the candidates asked for, so that some may fail the search's
# filter (expired, another channel) without falling back to Edge's own search.
_SHORTLIST_FACTOR = 4
_MIN_SHORTLIST = 40
_SCROLL_PAGE = 10_000


@dataclass(frozen=True, slots=True)
class BranchRequest:
    """A branch's request and, when it is a shortlist, the one to run if it returns fewer than `wanted`."""

    request: qe.QueryRequest
    fallback: qe.QueryRequest | None = None
    wanted: int = 0

    def points(self, shard: qe.EdgeShard, found: list[qe.ScoredPoint]) -> list[qe.ScoredPoint]:
        """`found` (this request's result), or the fallback's when the shortlist fell short."""
        if self.fallback is not None and len(found) < self.wanted:
            [found] = shard.query_batch(qe.QueryBatchRequest([self.fallback]))
        return found


@dataclass(frozen=True, slots=True)
class SearchScope:
    """Where a search runs: the shard, the collection's name, the owner, the search's conditions, and
    the owner's point count in the collection (Edge's estimate, taken once per search: both branches
    decide on it)."""

    shard: qe.EdgeShard
    collection: str
    owner: Owner
    conditions: Conditions
    candidates: int
    owner_points: int

    @property
    def key(self) -> tuple[str, Owner]:
        return (self.collection, self.owner)

    def owner_filter(self) -> qe.Filter:
        return edge_filter(owner_conditions(self.owner))


def load_passing(
    shard: qe.EdgeShard,
    conditions: Conditions,
    window: Sequence[qe.FieldCondition],
    moving: MovingRange | None,
    horizon: float = DEFAULT_HORIZON_SECONDS,
) -> PassingSet | None:
    """The passing set (edge_passing.py) for `conditions` over the window's points (`window`: its
    conditions, edge_window.py), taken by Edge; None when a value of the moving range's field below
    the horizon is not a plain number (how a range treats it is Edge's to say: Edge answers)."""
    passing = scroll_field_values(shard, edge_filter(conditions, *window), None, _SCROLL_PAGE)
    fields = frozenset(filtered_fields(conditions))
    if moving is None:
        return PassingSet(frozenset(passing), -math.inf, math.inf, {}, fields)
    until = moving.lower + horizon
    if moving.upper is not None:
        until = min(until, moving.upper)
    soon: dict[str, float] = {}
    if passing and until > moving.lower:
        narrow = qe.FieldCondition(moving.field, range=qe.RangeFloat(gte=moving.lower, lt=until))
        for point_id, value in scroll_field_values(
            shard, edge_filter(conditions, *window, narrow), moving.field, _SCROLL_PAGE
        ).items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                return None
            soon[point_id] = float(value)
    return PassingSet(frozenset(passing), moving.lower, until, soon, fields)


def _shortlist_size(candidates: int) -> int:
    return max(_MIN_SHORTLIST, _SHORTLIST_FACTOR * candidates)


def _cosines(scope: SearchScope, query: list[float], ids: Sequence[str]) -> qe.QueryRequest:
    """The cosine of each of `ids` (keyword hits, which passed the search's conditions) to the query."""
    nearest = qe.Query.Nearest(query, using=DENSE_VECTOR)
    return qe.QueryRequest(
        limit=len(ids), query=nearest, filter=edge_filter(scope.conditions, shortlist=ids), with_payload=False
    )


def run_branches(
    scope: SearchScope,
    dense: BranchRequest | list[BranchHit] | None,
    keyword: BranchRequest | None,
    early_keyword_hits: list[BranchHit] | None,
    query_vector: np.ndarray[Any, np.dtype[np.float32]],
) -> tuple[list[BranchHit] | None, list[BranchHit] | None]:
    """The dense and keyword hits of a search (None: that branch did not run), in one batch when it can.

    `dense`: the dense branch's request, or its hits when memory answered it (`PowerUserSearch.dense`).
    `early_keyword_hits`: the keyword branch's hits when it ran already (while the query embedded, its
    hits read with their dense vectors: `read_while_embedding`); else `keyword` runs here, beside
    `dense`. A keyword hit the dense branch did not return still gets its cosine: from its vector in
    the fusion (`fuse_branches`) when it came with one, else from Edge (a request over those ids, in
    the dense branch's batch once the keyword hits are known), counted as a dense hit as fusion counts
    it. Fetching the vectors here, after the query vector, cost ~0.3-0.4 ms a search for 12 hits, most
    of it turning 384 floats a hit into Python and back (measured); beside the embedding it costs the
    turn nothing."""
    shard = scope.shard
    query = query_vector.tolist() if dense is not None else []
    cosines = dense is not None and bool(np.any(query_vector))  # a zero vector has no cosine (fusion: 0)
    cosine_ids = [hit.id for hit in early_keyword_hits or [] if hit.dense_vector is None] if cosines else []
    ran_keyword = keyword is not None and early_keyword_hits is None
    asked = dense if isinstance(dense, BranchRequest) else None
    answered = dense if isinstance(dense, list) else None  # the dense hits memory answered with
    branches = [b for b in (asked, keyword if ran_keyword else None) if b is not None]
    requests = [b.request for b in branches] + ([_cosines(scope, query, cosine_ids)] if cosine_ids else [])
    found = iter(shard.query_batch(qe.QueryBatchRequest(requests)) if requests else [])
    dense_hits = [branch_hit(point) for point in asked.points(shard, next(found))] if asked is not None else answered
    keyword_hits = early_keyword_hits
    if keyword is not None and ran_keyword:
        keyword_hits = [branch_hit(point) for point in keyword.points(shard, next(found))]
    cosine_points = next(found, [])
    dense_ids = {hit.id for hit in dense_hits or []}
    if ran_keyword and cosines:  # the keyword hits are known only now: their cosines after
        missing = [hit.id for hit in keyword_hits or [] if hit.id not in dense_ids]
        cosine_points = shard.query_batch(qe.QueryBatchRequest([_cosines(scope, query, missing)]))[0] if missing else []
    if dense_hits is not None:
        dense_hits = [*dense_hits, *(branch_hit(point) for point in cosine_points if str(point.id) not in dense_ids)]
    return dense_hits, None if keyword is None else keyword_hits or []


class PowerUserSearch:
    """Builds the branch requests (module doc). `windows.size` is also the keyword postings' threshold."""

    def __init__(self, windows: RecentWindows, terms: OwnerTermIndex, *, remembered_counts: int = 4096) -> None:
        self.windows = windows
        self.terms = terms
        # (collection, owner) -> (the collection's count stamp, the estimate then), least recent first.
        self._counts: OrderedDict[tuple[str, Owner], tuple[int, int]] = OrderedDict()
        self._remembered_counts = remembered_counts

    def owner_points(self, shard: qe.EdgeShard, collection: str, owner: Owner, *, stamp: int) -> int:
        """The owner's points in the shard, estimated; 0 when neither branch has a power-user path.
        Remembered until points are next added to or deleted from the collection (`stamp`, its count
        stamp: edge.py): three counts per L0 turn cost ~0.1-0.4 ms, mostly cache-cold (measured), for
        a number that only such a write moves."""
        if self.windows.size is None and self.terms.min_points is None:
            return 0
        key = (collection, owner)
        known = self._counts.get(key)
        if known is not None and known[0] == stamp:
            self._counts.move_to_end(key)
            return known[1]
        points = shard.count(qe.CountRequest(exact=False, filter=edge_filter(owner_conditions(owner))))
        self._counts[key] = (stamp, points)
        self._counts.move_to_end(key)
        if len(self._counts) > self._remembered_counts:
            self._counts.popitem(last=False)
        return points

    def keyword(
        self, scope: SearchScope, sparse: port.SparseVector, *, alive: Callable[[], bool], with_vectors: bool = False
    ) -> BranchRequest:
        """The keyword branch's request. `with_vectors`: its hits come with their stored dense vectors, for
        a search that runs it while the query embeds (their cosines are then a product after the vector,
        `run_branches`); otherwise ids and scores only, and a hit's cosine comes from Edge."""

        def request(search_filter: qe.Filter) -> qe.QueryRequest:
            return qe.QueryRequest(
                limit=scope.candidates,
                query=qe.Query.Nearest(qe.SparseVector(sparse.indices, sparse.values), using=SPARSE_VECTOR),
                filter=search_filter,
                with_payload=False,
                with_vector=[DENSE_VECTOR] if with_vectors else False,
            )

        matching = edge_filter(scope.conditions)
        found = self.terms.shortlist(
            scope.shard,
            scope.key,
            scope.owner_filter(),
            (sparse.indices, sparse.values),
            owner_points=scope.owner_points,
            vector_name=SPARSE_VECTOR,
            count=_shortlist_size(scope.candidates),
            alive=alive,
        )
        if found is None:
            return BranchRequest(request(matching))
        shortlist, complete = found
        narrowed = request(edge_filter(scope.conditions, shortlist=shortlist))
        # Every point holding a query term is in a complete shortlist: Edge's own search finds no more.
        return BranchRequest(narrowed, None if complete else request(matching), scope.candidates)

    def prepare(self, scope: SearchScope) -> None:
        """While the query embeds: a power user's window, and the passing set of its dense branch
        (edge_passing.py), so that after the vector memory answers it."""
        if self.windows.size is None or scope.owner_points <= self.windows.size:
            return
        owner_filter = scope.owner_filter()
        window = self.windows.conditions(
            scope.shard, scope.collection, scope.owner, owner_filter, owner_points=scope.owner_points
        )
        if window:
            load = functools.partial(load_passing, scope.shard, scope.conditions, window)
            self.windows.vectors.prepare_passing(scope.key, scope.conditions, load)

    def dense(
        self,
        scope: SearchScope,
        query_vector: np.ndarray[Any, np.dtype[np.float32]],
        writes: Callable[[], BackfillWrites],
    ) -> BranchRequest | list[BranchHit]:
        """The dense branch's request, or its hits when the window's rows and passing set answer it."""
        owner_filter = scope.owner_filter()
        window = self.windows.conditions(
            scope.shard, scope.collection, scope.owner, owner_filter, owner_points=scope.owner_points
        )
        if self.windows.take_backfill(scope.collection, scope.owner):  # in the background, like any write
            self.windows.start_backfill(scope.shard, scope.collection, scope.owner, owner_filter, writes())
        shortlist = self.windows.shortlist(
            scope.shard,
            scope.collection,
            owner_filter,
            window,
            query_vector,
            owner=scope.owner,
            vector_name=DENSE_VECTOR,
            count=_shortlist_size(scope.candidates),
        )
        if shortlist is not None:
            hits = self.windows.vectors.passing_hits(scope.key, scope.conditions, shortlist, scope.candidates)
            if hits is not None:
                return hits
        nearest = qe.Query.Nearest(query_vector.tolist(), using=DENSE_VECTOR)
        search = qe.QueryRequest(
            limit=scope.candidates, query=nearest, filter=edge_filter(scope.conditions, *window), with_payload=False
        )
        if shortlist is None:
            return BranchRequest(search)
        # Not the window's range: the shortlist is of its points only (edge_window_vectors.py, Exactness).
        narrowed = edge_filter(scope.conditions, shortlist=shortlist.ids)
        return BranchRequest(
            qe.QueryRequest(limit=scope.candidates, query=nearest, filter=narrowed, with_payload=False),
            search,
            scope.candidates,
        )

    def note_upsert(
        self, collection: str, owner: Owner, records: Sequence[port.VectorRecord], ids: Sequence[str]
    ) -> None:
        """Points just written (ids canonical): into the owner's rows and postings in memory. Lazy: a
        normal owner's write (every write but a power user's) builds nothing."""
        self.windows.note_upsert(
            collection, owner, ((i, r.payload, r.dense) for i, r in zip(ids, records, strict=True))
        )
        self.terms.put(
            (collection, owner), ((i, r.sparse.indices, r.sparse.values) for i, r in zip(ids, records, strict=True))
        )
        self.windows.vectors.drop_passing((collection, owner))

    def note_payload(self, collection: str, owner: Owner, fields: Iterable[str]) -> None:
        """A payload write of the owner's points set `fields`: a new time may move a point into the
        window (found again), any other filtered field changes which points pass (edge_passing.py)."""
        fields = list(fields)
        if WINDOW_TIME_FIELD in fields:
            self.windows.forget(collection, owner)
        self.windows.vectors.drop_passing((collection, owner), fields)

    def forget(self, collection: str, owner: Owner) -> None:
        """The owner's points changed in a way memory cannot follow (deleted, moved in time)."""
        self.windows.forget(collection, owner)
        self.terms.forget((collection, owner))
