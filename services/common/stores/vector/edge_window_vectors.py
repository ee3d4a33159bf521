"""A power user's dense window in memory: the dense branch of their searches without Edge's scan.

The window (edge_window.py) narrows a power user's dense branch to their most recent ~`size` points,
but Edge still iterates those points through the payload index and scores them one by one: ~4.8 ms
p50 for a window of 5,000 (one owner with 50k points, in-process, measured). The same window as a
unit-length float32 matrix scores all 5,000 in ~0.5 ms in numpy; Edge then scores only that
shortlist (`HasId` plus every condition of the search) in ~0.6 ms, and returns the same hits.

Exactness: the rows are the window's points, no others (below), and the shortlist is their `count`
nearest by cosine (Edge's distance; it stores dense vectors normalised, so do the rows). Edge applies
the search's filter to those and returns the best `limit`; not the window's own range, which the rows
already are (checking it again on each shortlisted point cost ~0.2 ms warm, ~0.7 ms cache-cold at 1M
points, measured, against ~0.1 / 0.3 ms for the rest of the query). A point outside the shortlist
scores lower than every point in it, so whenever at least `limit` of the shortlist pass the filter
they are exactly Edge's own answer over the window. When fewer pass (expired, another channel,
superseded, deleted meanwhile) the caller runs Edge's windowed search instead (edge.py): never fewer
hits than without the rows. With a passing set (edge_passing.py: the window's points that pass the
search's conditions, as Edge found them ahead of time) the shortlist is filtered here instead, by the
same argument, and its best `limit` scored by the rows' cosines (float32, as Edge's; the order of two
hits within float rounding of each other may differ from Edge's).

Freshness: an owner's rows are loaded (one scroll with vectors, ~27 ms at 5,000 points) by their
first dense search after their window is found, then kept current by the writes: edge.py hands each
upserted chunk to `RecentWindows.note_upsert` right after applying it, synchronously, so a load
between two chunks misses nothing; a point rewritten with a time before the window leaves the rows
the same way. Deleted points may stay in the rows: the filtered search never returns them. A new
window (the owner's point count moved by half a window), a set_payload that moves a point's time, or
a window that no longer applies drops the rows (`forget`).

Memory: 4 bytes per dimension per point (1.5 KB at 384), at most `load_limit` points per owner and
collection; only the `max_owners` most recently searched windows keep rows (the least recently
searched is dropped first and reloaded if searched again).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, cast

import numpy as np
import qdrant_edge as qe

from services.common.domain.owner import Owner
from services.common.stores.vector.adapter_support import BranchHit, Conditions
from services.common.stores.vector.edge_passing import MovingRange, PassingSet, PassingSets, split_conditions

DEFAULT_MAX_OWNERS = 16
_SCROLL_PAGE = 1_000
_MIN_CAPACITY = 64

Matrix = np.ndarray[Any, np.dtype[np.float32]]


class Shortlist(NamedTuple):
    """The ids of a window's nearest rows (unordered) and their cosines to the query, in the same order."""

    ids: list[str]
    cosines: Matrix


def unit(vector: Sequence[float] | Matrix) -> Matrix | None:
    """The vector scaled to length 1 (as Edge stores a cosine vector); None for a zero or non-finite one."""
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    if not math.isfinite(norm) or norm == 0.0:
        return None
    return array / norm


class WindowRows:
    """The unit dense vectors of one owner's window, by point id (a put replaces the id's row)."""

    def __init__(self, dim: int) -> None:
        self._matrix: Matrix = np.zeros((_MIN_CAPACITY, dim), dtype=np.float32)
        self._ids: list[str] = []
        self._row_of: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def put(self, point_id: str, vector: Sequence[float] | Matrix) -> None:
        row = self._row_of.get(point_id)
        scaled = unit(vector)
        if scaled is None or scaled.shape != (self._matrix.shape[1],):
            if row is not None:
                self._matrix[row] = 0.0  # scores 0: Edge decides about it if it is ever shortlisted
            return
        if row is None:
            row = len(self._ids)
            if row == self._matrix.shape[0]:  # grow geometrically: a put copies nothing most of the time
                self._matrix = np.concatenate([self._matrix, np.zeros_like(self._matrix)])
            self._ids.append(point_id)
            self._row_of[point_id] = row
        self._matrix[row] = scaled

    def discard(self, point_id: str) -> None:
        """The point is no longer in the window: its row goes (the last row takes its place)."""
        row = self._row_of.pop(point_id, None)
        if row is None:
            return
        last = len(self._ids) - 1
        if row != last:
            moved = self._ids[last]
            self._ids[row] = moved
            self._row_of[moved] = row
            self._matrix[row] = self._matrix[last]
        self._ids.pop()

    def nearest(self, query: Matrix, count: int) -> list[str]:
        """The ids of the `count` rows closest to `query` (unordered)."""
        return self.shortlist(query, count).ids

    def shortlist(self, query: Matrix, count: int) -> Shortlist:
        """The `count` rows closest to `query` (unordered), with their cosines (the rows and `query`
        are unit-length)."""
        rows = len(self._ids)
        scores = self._matrix[:rows] @ query
        if count >= rows:
            return Shortlist(list(self._ids), scores)
        top = np.argpartition(-scores, count - 1)[:count]
        return Shortlist([self._ids[int(row)] for row in top], scores[top])


def load_rows(
    shard: qe.EdgeShard, window_filter: qe.Filter, vector_name: str, dim: int, limit: int
) -> WindowRows | None:
    """The rows of every point matching `window_filter`; None when more than `limit` do (a bulk import
    whose points share the window's first minute: Edge searches those itself)."""
    rows = WindowRows(dim)
    offset: Any = None
    while True:
        records, offset = shard.scroll(
            qe.ScrollRequest(
                offset=offset, limit=_SCROLL_PAGE, filter=window_filter, with_payload=False, with_vector=[vector_name]
            )
        )
        for record in records:
            vectors = record.vector
            dense = vectors.get(vector_name) if isinstance(vectors, dict) else None
            if isinstance(dense, list) and all(isinstance(value, float) for value in dense[:1]):
                rows.put(str(record.id), cast("list[float]", dense))
        if len(rows) > limit:
            return None
        if offset is None:
            return rows


class WindowVectors:
    """Per (collection, owner): the window's rows, for the `max_owners` most recently searched."""

    def __init__(self, max_owners: int = DEFAULT_MAX_OWNERS) -> None:
        if max_owners < 1:
            raise ValueError("max_owners must be >= 1")
        self.max_owners = max_owners
        # None: the window holds more than the load limit; Edge searches it (until the window changes).
        self._rows: OrderedDict[tuple[str, Owner], WindowRows | None] = OrderedDict()
        # Which window points pass which conditions (edge_passing.py), for windows with rows only.
        self._passing: dict[tuple[str, Owner], PassingSets] = {}

    def shortlist(
        self,
        shard: qe.EdgeShard,
        key: tuple[str, Owner],
        window_filter: qe.Filter,
        query: Sequence[float] | Matrix,
        *,
        vector_name: str,
        count: int,
        load_limit: int,
    ) -> Shortlist | None:
        """The ids of the window's `count` nearest points (loading its rows on first use); None: no
        rows, or no more rows than `count` (nothing to narrow), so Edge searches the window itself."""
        scaled = unit(query)
        if scaled is None:
            return None
        if key in self._rows:
            self._rows.move_to_end(key)
            rows = self._rows[key]
        else:
            rows = load_rows(shard, window_filter, vector_name, scaled.shape[0], load_limit)
            self._rows[key] = rows
            while len(self._rows) > self.max_owners:
                evicted, _ = self._rows.popitem(last=False)
                self._passing.pop(evicted, None)
        if rows is None or len(rows) <= count:
            return None
        return rows.shortlist(scaled, count)

    def put(
        self, key: tuple[str, Owner], points: Sequence[tuple[str, Sequence[float]]], gone: Sequence[str] = ()
    ) -> None:
        """New or rewritten points of the window, and rewritten points now outside it (`gone`);
        ignored when its rows are not loaded."""
        rows = self._rows.get(key)
        if rows is not None:
            for point_id in gone:
                rows.discard(point_id)
            for point_id, dense in points:
                rows.put(point_id, dense)

    def loaded(self, key: tuple[str, Owner]) -> bool:
        """Whether the window's rows are in memory (tests, benchmarks)."""
        return self._rows.get(key) is not None

    def forget(self, key: tuple[str, Owner]) -> None:
        self._rows.pop(key, None)
        self._passing.pop(key, None)

    def prepare_passing(
        self,
        key: tuple[str, Owner],
        conditions: Conditions,
        load: Callable[[MovingRange | None], PassingSet | None],
    ) -> None:
        """Make sure the window has a passing set serving `conditions` (edge_passing.py), when its rows
        are loaded; `load` (Edge's scroll) only when it has none yet. Run while the query embeds."""
        split = split_conditions(conditions)
        if split is None or self._rows.get(key) is None:
            return
        signature, moving = split
        sets = self._passing.setdefault(key, PassingSets())
        known = sets.get(signature)
        if known is None or not known.serves(moving):
            taken = load(moving)
            if taken is not None:
                sets.put(signature, taken)

    def passing_hits(
        self, key: tuple[str, Owner], conditions: Conditions, shortlist: Shortlist, limit: int
    ) -> list[BranchHit] | None:
        """The best `limit` of `shortlist` passing `conditions`, best first, scored by their cosines:
        what Edge returns for the shortlist (Exactness, above); None when the window has no passing set
        serving `conditions` (a write since it was prepared), or fewer than `limit` pass: Edge answers."""
        split = split_conditions(conditions)
        sets = self._passing.get(key)
        passing = sets.get(split[0]) if sets is not None and split is not None else None
        if passing is None or split is None or not passing.serves(split[1]):
            return None
        moving = split[1]
        hits: list[BranchHit] = []
        for row in np.argsort(-shortlist.cosines, kind="stable"):
            point_id = shortlist.ids[int(row)]
            if passing.passes(point_id, moving):
                hits.append(BranchHit(point_id, float(shortlist.cosines[row])))
                if len(hits) == limit:
                    return hits
        return None

    def drop_passing(self, key: tuple[str, Owner], fields: Iterable[str] | None = None) -> None:
        """A write of the owner's points: the window's passing sets go (`fields`: it set only these
        payload fields, so only the sets filtering on one of them go)."""
        sets = self._passing.get(key)
        if sets is not None and fields is not None:
            sets.drop_fields(fields)
        elif sets is not None:
            del self._passing[key]
