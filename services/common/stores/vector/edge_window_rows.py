"""A power user's dense window as a matrix in memory: a shortlist for Edge's dense search.

The window (edge_window.py) narrows a power user's dense branch to their most recent ~`size` points,
but Edge still iterates those points through the payload index and scores each one. Here the
window's unit vectors are one float32 matrix: numpy scores them all at once, and Edge then searches
only the `shortlist_factor × candidates` nearest of them (`HasId` first, so its planner iterates just
those) under the search's full filter.

Exact, and why. Let the shortlist be the K points of the matrix nearest the query and `threshold`
the best cosine of any row outside it (every point of the window that is not shortlisted is a row:
see Freshness). Edge returns the best `candidates` of the shortlisted points that pass the filter.
If it returns `candidates` of them and the worst scores at least `threshold + SCORE_MARGIN`, no point
outside the shortlist can outrank any of them: its Edge score is its matrix cosine (≤ `threshold`)
up to float rounding, and the margin is far above that rounding. So the answer equals Edge's own
filtered search over the window, up to ties among equal scores. Otherwise (fewer pass: another
channel, expired, deleted; or a near-tie at the cut) the caller runs the plain window search
(`Shortlist.settles`). When the shortlist holds every row there is nothing outside it, and any
number of hits is the whole answer.

Freshness. The rows are read with one Edge scroll (vectors only) under the owner's filter and the
window's condition, when the owner's first dense search after (re)finding the window needs them,
and tagged with the window's cutoff: a new cutoff (the window moved) reloads them. They must be the
window's points with their current vectors, except points since deleted (Edge never returns a
deleted point, nor one that another owner's write has taken over). So every write that can add a
point to the window, take one out of it other than by deleting it, or change a vector invalidates
them (`changed`): an upsert (edge.py calls it after each chunk it applies, so a load between two
chunks is dropped too) and a payload write that sets a point's time. Deletes, other payload writes
and the window key's backfill (which keys points already in the window) leave them as they are. The
shortlisted search therefore needs no window condition: the rows are the window. All of this runs on
the event loop with no await between the check and the use, so no write lands between them.

Memory: at most `max_owners` owners' rows (least recently searched dropped first) of at most
`max_rows` points each: `max_owners × max_rows × dim × 4` bytes at worst (8 × 10,000 × 384 × 4 B
≈ 123 MB); a window of 5,000 points at 384 dimensions is 7.7 MB. A window holding more than
`max_rows` points (a bulk import whose points share a minute) is not kept: Edge searches it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import qdrant_edge as qe

from services.common.domain.lru import LruCache
from services.common.domain.owner import Owner
from services.common.stores.vector.adapter_support import DENSE_VECTOR, BranchHit, owner_conditions
from services.common.stores.vector.edge_filters import edge_filter

# Far above float32 rounding of a cosine between unit vectors (~1e-6 at 384 dimensions), so a point
# outside the shortlist cannot overtake a hit by rounding.
SCORE_MARGIN = 1e-4
_SCROLL_PAGE = 1_000

Matrix = np.ndarray[Any, np.dtype[np.float32]]


@dataclass(frozen=True, slots=True)
class WindowVectorsConfig:
    """`max_owners`: owners whose rows are kept; `max_rows`: the largest window kept (points);
    `shortlist_factor`: the shortlist is this many × the branch's candidates."""

    max_owners: int = 8
    max_rows: int = 10_000
    shortlist_factor: int = 4

    def __post_init__(self) -> None:
        if min(self.max_owners, self.max_rows, self.shortlist_factor) < 1:
            raise ValueError("window vectors: max_owners, max_rows and shortlist_factor must be >= 1")


@dataclass(frozen=True, slots=True)
class Shortlist:
    """The ids of the rows nearest a query, and the best cosine of any row left out (None: none was)."""

    ids: list[str]
    threshold: float | None

    def settles(self, hits: Sequence[BranchHit], candidates: int) -> bool:
        """Whether Edge's best `candidates` hits among the shortlist are its answer over the whole
        window (module doc); `hits` best first."""
        if self.threshold is None:
            return True
        return len(hits) >= candidates and hits[candidates - 1].score >= self.threshold + SCORE_MARGIN


@dataclass(frozen=True, slots=True)
class _Rows:
    cutoff: float  # the window's cutoff when the rows were read
    ids: list[str]  # empty with `matrix` None: the window held more than max_rows points
    matrix: Matrix | None  # one unit row per id


def unit(vector: Sequence[float] | Matrix) -> Matrix | None:
    """The vector scaled to length 1 (as Edge keeps a cosine vector); None when zero or not finite."""
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    if not math.isfinite(norm) or norm == 0.0:
        return None
    return array / norm


def nearest(ids: list[str], matrix: Matrix, query: Matrix, count: int) -> Shortlist:
    """The `count` rows nearest `query` (unordered), and the best score of the rows left out."""
    scores = matrix @ query
    if count >= len(ids):
        return Shortlist(list(ids), None)
    order = np.argpartition(-scores, count)  # position `count`: the best of the rest
    return Shortlist([ids[int(row)] for row in order[:count]], float(scores[order[count]]))


def read_rows(shard: qe.EdgeShard, window_filter: qe.Filter, cutoff: float, dim: int, max_rows: int) -> _Rows:
    """The unit vectors of the points matching `window_filter` (the owner's window), read by scroll."""
    ids: list[str] = []
    vectors: list[Sequence[float]] = []
    offset: Any = None
    while True:
        records, offset = shard.scroll(
            qe.ScrollRequest(
                offset=offset, limit=_SCROLL_PAGE, filter=window_filter, with_payload=False, with_vector=[DENSE_VECTOR]
            )
        )
        for record in records:
            dense = record.vector.get(DENSE_VECTOR) if isinstance(record.vector, dict) else None
            if isinstance(dense, list) and len(dense) == dim and isinstance(dense[0], float):
                ids.append(str(record.id))
                vectors.append(dense)
        if len(ids) > max_rows:
            return _Rows(cutoff, [], None)
        if offset is None:
            break
    matrix = np.asarray(vectors, dtype=np.float32).reshape(len(ids), dim)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    # Edge keeps cosine vectors unit-length already; a zero row (norm 0) stays zero and scores 0.
    return _Rows(cutoff, ids, np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0))


class WindowVectors:
    """Per (collection, owner): the window's rows, for the `max_owners` most recently searched.
    `config` None: off (no rows are kept; every windowed dense search is Edge's over the window)."""

    def __init__(self, config: WindowVectorsConfig | None) -> None:
        self.config = config
        self._rows: LruCache[tuple[str, Owner], _Rows] = LruCache(0 if config is None else config.max_owners)

    def changed(self, collection: str, owner: Owner) -> None:
        """A write that may add a point to the owner's window or change a vector (module doc)."""
        self._rows.pop((collection, owner))

    def clear(self) -> None:
        """Forget every owner's rows (the index closed: its shards may be written by another)."""
        self._rows = LruCache(self._rows.max_entries)

    def loaded(self, collection: str, owner: Owner) -> bool:
        """Whether the owner's rows are kept now (tests)."""
        return (collection, owner) in self._rows

    def shortlist(
        self,
        shard: qe.EdgeShard,
        key: tuple[str, Owner],
        cutoff: float | None,
        window: Sequence[qe.FieldCondition],
        query: Matrix,
        candidates: int,
    ) -> Shortlist | None:
        """The rows nearest `query` for a search of `candidates` dense hits over the owner's window
        (`cutoff` and `window`: its lower time bound and conditions, edge_window.py), reading the rows
        when they are not kept for that cutoff; None: no window, no rows (too many points) or a zero
        query: Edge searches the window itself."""
        scaled = unit(query)
        if self.config is None or scaled is None or cutoff is None or not window:
            return None
        rows = self._rows.get(key)
        if rows is None or rows.cutoff != cutoff:
            window_filter = edge_filter(owner_conditions(key[1]), *window)
            rows = read_rows(shard, window_filter, cutoff, scaled.shape[0], self.config.max_rows)
            self._rows.put(key, rows)
        if rows.matrix is None or not rows.ids:
            return None
        return nearest(rows.ids, rows.matrix, scaled, self.config.shortlist_factor * candidates)
