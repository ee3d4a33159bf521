"""A power user's keyword branch shortlisted from memory.

Edge's keyword branch is an inverted index over the whole collection. For a normal user its planner
scores the owner's few points directly; for an owner with tens of thousands of points it walks the
query terms' postings of the WHOLE collection and checks the owner on each, so the cost grows with
everyone's memories: 6.7 ms p50 for one owner with 50k points among 150k (measured in-process,
while the query embeds on the same 2 cores, which it slows by about as much), more at 1M. The
dense branch has its own fix (edge_window_vectors.py); this is the keyword one.

For owners with more than `min_points` points in a collection, their own postings (term → rows,
weights: the stored document weights) are kept in memory. A search scores the query's terms over
them with the owner's own IDF (BM25's, as Edge's modifier computes it over the collection) in numpy,
and Edge scores exactly, with every condition of the search, only the best `count` (`HasId`).

Not exact in one case, by design measured rather than assumed: the shortlist is ranked with the
owner's IDF where Edge uses the collection's, so a point that Edge would rank in the top `limit`
but the owner's IDF ranks below `count` (4 × the candidates fetched) is missed. The scale benchmark
reports how often the top keyword hit changes (`keyword_top_hit_changed_share`). When every point
with any query term is in the shortlist nothing can be missed; when the shortlist is cut and fewer
than `limit` of it pass the search's filter, Edge's own search runs instead.

Loading: the first search of such an owner starts a background task that scrolls their points' sparse
vectors page by page (the event loop is free between pages); Edge answers until it is done. Writes of
the owner (edge.py hands each applied chunk to `put`) go into the postings, also during the load. A
delete drops the owner's postings (`forget`): erased words do not stay in memory, and the next search
loads them again. At most `max_owners` owners keep postings (least recently searched dropped first).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import qdrant_edge as qe

from services.common.domain.owner import Owner

DEFAULT_MIN_POINTS = 5_000
DEFAULT_MAX_OWNERS = 16
_SCROLL_PAGE = 250  # ~8 ms of the event loop per page at 50k points (1,000: ~31 ms)

log = logging.getLogger(__name__)

Rows = np.ndarray[Any, np.dtype[np.int32]]
Weights = np.ndarray[Any, np.dtype[np.float32]]


@dataclass(slots=True)
class _Posting:
    rows: Rows
    weights: Weights
    pending_rows: list[int] = field(default_factory=list)  # written since: merged at the next search
    pending_weights: list[float] = field(default_factory=list)

    def arrays(self) -> tuple[Rows, Weights]:
        if self.pending_rows:
            self.rows = np.concatenate([self.rows, np.asarray(self.pending_rows, dtype=np.int32)])
            self.weights = np.concatenate([self.weights, np.asarray(self.pending_weights, dtype=np.float32)])
            self.pending_rows, self.pending_weights = [], []
        return self.rows, self.weights


def _empty_posting() -> _Posting:
    return _Posting(np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32))


class OwnerTerms:
    """One owner's postings in a collection. A rewritten point gets a new row; its old row is dead."""

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._row_of: dict[str, int] = {}
        self._alive = np.zeros(0, dtype=np.bool_)
        self._dead = 0  # rows of rewritten points
        self._postings: dict[int, _Posting] = {}

    def __len__(self) -> int:
        return len(self._row_of)

    def _new_row(self, point_id: str) -> int:
        """A row for the point (its previous one, if any, is dead from now on), alive."""
        old = self._row_of.get(point_id)
        if old is not None:
            self._alive[old] = False
            self._dead += 1
        row = len(self._ids)
        self._ids.append(point_id)
        self._row_of[point_id] = row
        if row >= self._alive.shape[0]:  # grow geometrically
            self._alive = np.concatenate([self._alive, np.zeros(max(64, row), dtype=np.bool_)])
        self._alive[row] = True
        return row

    def put(self, point_id: str, indices: Sequence[int], values: Sequence[float]) -> None:
        row = self._new_row(point_id)
        for term, weight in zip(indices, values, strict=True):
            posting = self._postings.setdefault(int(term), _empty_posting())
            posting.pending_rows.append(row)
            posting.pending_weights.append(float(weight))

    def put_page(self, points: Sequence[tuple[str, Sequence[int], Sequence[float]]]) -> None:
        """Many points at once (the load): the postings grow by one array per term, not per weight."""
        terms: list[int] = []
        rows: list[int] = []
        weights: list[float] = []
        for point_id, indices, values in points:
            row = self._new_row(point_id)
            terms.extend(indices)
            rows.extend([row] * len(indices))
            weights.extend(values)
        term_array = np.asarray(terms, dtype=np.int64)
        order = np.argsort(term_array, kind="stable")
        sorted_terms, row_array, weight_array = (
            term_array[order],
            np.asarray(rows, dtype=np.int32)[order],
            np.asarray(weights, dtype=np.float32)[order],
        )
        if not sorted_terms.size:
            return
        starts = np.flatnonzero(np.r_[True, sorted_terms[1:] != sorted_terms[:-1]])
        bounds = [*map(int, starts), int(sorted_terms.size)]
        for begin, end in itertools.pairwise(bounds):
            posting = self._postings.setdefault(int(sorted_terms[begin]), _empty_posting())
            posting.arrays()
            posting.rows = np.concatenate([posting.rows, row_array[begin:end]])
            posting.weights = np.concatenate([posting.weights, weight_array[begin:end]])

    def shortlist(self, indices: Sequence[int], values: Sequence[float], count: int) -> tuple[list[str], bool]:
        """The ids of the (at most) `count` best points for the query, and whether they are all the
        points that hold any query term (then nothing can be missed)."""
        points = len(self._row_of)
        all_rows: list[Rows] = []
        all_weights: list[Weights] = []
        for term, value in zip(indices, values, strict=True):
            posting = self._postings.get(int(term))
            if posting is None:
                continue
            rows, weights = posting.arrays()
            frequency = rows.shape[0]
            all_rows.append(rows)
            all_weights.append(
                weights * np.float32(value * math.log((points - frequency + 0.5) / (frequency + 0.5) + 1.0))
            )
        if not all_rows:
            return [], True
        # One pass over every posting of the query (bincount sums a row's terms): ~3x faster than a
        # fancy-indexed add per term at 50k points.
        scores = np.bincount(np.concatenate(all_rows), weights=np.concatenate(all_weights), minlength=len(self._ids))
        if self._dead:
            scores[~self._alive[: scores.shape[0]]] = 0.0
        # The top among the matching rows only (a query's terms reach a fraction of the owner's points),
        # partitioned at the front: the power user's shortlist went from ~0.49 to ~0.19 ms (8k of 50k
        # points matching; numpy's partition at the back of these many-tied scores took 3x longer).
        matching = np.flatnonzero(scores > 0)
        if matching.shape[0] <= count:
            return [self._ids[row] for row in matching.tolist()], True
        top = matching[np.argpartition(-scores[matching], count - 1)[:count]]
        return [self._ids[row] for row in top.tolist()], False


def _sparse(record: Any, vector_name: str) -> tuple[list[int], list[float]] | None:
    vectors = record.vector
    sparse = vectors.get(vector_name) if isinstance(vectors, dict) else None
    if sparse is None:
        return None
    return list(sparse.indices), list(sparse.values)


class OwnerTermIndex:
    """Per (collection, owner): the postings of owners with more than `min_points` points (loading
    them in the background on their first search), for the `max_owners` most recently searched."""

    def __init__(self, min_points: int | None = DEFAULT_MIN_POINTS, max_owners: int = DEFAULT_MAX_OWNERS) -> None:
        if min_points is not None and min_points < 1:
            raise ValueError("min_points must be >= 1 or None")
        if max_owners < 1:
            raise ValueError("max_owners must be >= 1")
        self.min_points = min_points
        self.max_owners = max_owners
        self._terms: OrderedDict[tuple[str, Owner], OwnerTerms] = OrderedDict()
        self._loading: dict[tuple[str, Owner], asyncio.Task[None]] = {}

    def shortlist(
        self,
        shard: qe.EdgeShard,
        key: tuple[str, Owner],
        owner_filter: qe.Filter,
        query: tuple[Sequence[int], Sequence[float]],
        *,
        owner_points: int,
        vector_name: str,
        count: int,
        alive: Callable[[], bool],
    ) -> tuple[list[str], bool] | None:
        """`OwnerTerms.shortlist` for a loaded owner; None: let Edge search (a normal owner, or one
        whose postings are still loading, which this call starts for an owner past `min_points`: their
        `owner_points` in the shard)."""
        if self.min_points is None:
            return None
        terms = self._terms.get(key)
        if terms is not None and key not in self._loading:
            self._terms.move_to_end(key)
            return terms.shortlist(query[0], query[1], count)
        if key not in self._loading and owner_points > self.min_points:
            self._start_load(shard, key, owner_filter, vector_name, alive)
        return None

    def put(self, key: tuple[str, Owner], points: Iterable[tuple[str, Sequence[int], Sequence[float]]]) -> None:
        """Written points of the owner (ignored unless their postings are loaded or loading)."""
        terms = self._terms.get(key)
        if terms is not None:
            for point_id, indices, values in points:
                terms.put(point_id, indices, values)

    def forget(self, key: tuple[str, Owner]) -> None:
        self._terms.pop(key, None)
        task = self._loading.pop(key, None)
        if task is not None:
            task.cancel()

    def loaded(self, key: tuple[str, Owner]) -> bool:
        """Whether the owner's searches are shortlisted from memory (tests, benchmarks)."""
        return key in self._terms and key not in self._loading

    async def wait_for_loads(self) -> None:
        """Wait until no load runs (tests, benchmarks)."""
        while running := [task for task in self._loading.values() if not task.done()]:
            await asyncio.gather(*running, return_exceptions=True)

    def close(self) -> None:
        for key in list(self._terms):
            self.forget(key)

    def _start_load(
        self,
        shard: qe.EdgeShard,
        key: tuple[str, Owner],
        owner_filter: qe.Filter,
        vector_name: str,
        alive: Callable[[], bool],
    ) -> None:
        terms = OwnerTerms()
        self._terms[key] = terms
        while len(self._terms) > self.max_owners:
            self.forget(next(iter(self._terms)))
        task = asyncio.create_task(self._load(shard, key, terms, owner_filter, vector_name, alive))
        self._loading[key] = task
        task.add_done_callback(lambda done: self._loaded(key, done))

    async def _load(
        self,
        shard: qe.EdgeShard,
        key: tuple[str, Owner],
        terms: OwnerTerms,
        owner_filter: qe.Filter,
        vector_name: str,
        alive: Callable[[], bool],
    ) -> None:
        offset: Any = None
        try:
            while True:
                await asyncio.sleep(0)  # a page per event-loop turn: searches go on meanwhile
                if not alive() or self._terms.get(key) is not terms:
                    raise asyncio.CancelledError  # the shard closed, or the owner was forgotten meanwhile
                records, offset = shard.scroll(
                    qe.ScrollRequest(
                        offset=offset,
                        limit=_SCROLL_PAGE,
                        filter=owner_filter,
                        with_payload=False,
                        with_vector=[vector_name],
                    )
                )
                page = [(str(record.id), *sparse) for record in records if (sparse := _sparse(record, vector_name))]
                if page:
                    terms.put_page(page)
                if offset is None:
                    return
        except BaseException:  # partial postings must never answer: Edge does until the next load
            if self._terms.get(key) is terms:
                del self._terms[key]
            raise

    def _loaded(self, key: tuple[str, Owner], task: asyncio.Task[None]) -> None:
        if self._loading.get(key) is task:
            del self._loading[key]
        if not task.cancelled() and task.exception() is not None:  # e.g. its shard was swapped out meanwhile
            log.warning("loading the keyword postings of a power user failed", exc_info=task.exception())
