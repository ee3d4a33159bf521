"""A small owner's search answered from rows read while the query embeds.

L0 starts its searches before the query vector exists (recall_api/l0_deadline.py): the keyword branch
runs meanwhile, and everything that needs the vector waits. For an owner with few points in a collection
(almost every owner: a few sessions' episodes, passages and facts) the wait need not end in Edge at all:
while the query embeds on its own core, `read_small_owner` reads every point of the owner that passes the
search's conditions, with its stored dense vector and its payload. Once the vector arrives, the dense branch
is one product over those rows (`SmallOwnerRows.dense_hits`) and the fused best's payloads are already
there. Measured in-process at 100k points (an owner with 10 episodes, L0 over three collections, 150 calls
a round, 2 rounds): the searches after the vector took 1.61-1.71 ms at p50 with Edge's dense requests and
payload reads (cache-cold after the embedding), 0.62-0.67 ms from the rows.

Exactness: the rows are the points Edge's own dense branch would score (the same filter, read in full), and
Edge stores cosine vectors normalised, so each row's score is the dot product with the normalised query,
as Edge computes it (to float32 rounding). The dense hits are the best `candidates` of them plus the cosine
of every keyword hit outside those, as `edge_power.run_branches` gives them. Rows read before
a write that changed points or a filtered field are not used (edge.py checks, then searches Edge as usual).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import qdrant_edge as qe

from services.common.stores.vector import edge_window
from services.common.stores.vector.adapter_support import DENSE_VECTOR, BranchHit, Conditions
from services.common.stores.vector.edge_filters import branch_hit, edge_filter, retrieve_payloads
from services.common.stores.vector.edge_power import BranchRequest, SearchScope

# At most this many points of the owner pass the search's conditions for the rows to be read. The read
# grows with the rows (each vector and payload becomes Python objects) while the dense request it saves
# does not, and it runs beside the embedding only while that is the longer of the two.
SMALL_OWNER_POINTS = 64


@dataclass(frozen=True, slots=True)
class SmallOwnerRows:
    """Every point that passed a search's conditions when read: ids, stored (normalised) dense vectors in
    the same order, payloads (the engine's window key stripped)."""

    ids: list[str]
    vectors: np.ndarray[Any, np.dtype[np.float32]]
    payloads: dict[str, dict[str, Any]]

    def dense_hits(
        self, query_vector: np.ndarray[Any, np.dtype[np.float32]], candidates: int, keyword_ids: Collection[str]
    ) -> list[BranchHit]:
        """The dense branch over the rows: the best `candidates` by cosine, then each keyword hit not among
        them with its cosine (edge.py leaves a zero query vector to Edge; here it gets no hits)."""
        norm = float(np.linalg.norm(query_vector))
        if not self.ids or norm == 0:
            return []
        scores = (self.vectors @ (query_vector / norm)).tolist()
        order = sorted(range(len(self.ids)), key=lambda row: -scores[row])
        best = order[:candidates]
        taken = {self.ids[row] for row in best}
        extra = [row for row in order[candidates:] if self.ids[row] in keyword_ids and self.ids[row] not in taken]
        return [BranchHit(id=self.ids[row], score=scores[row]) for row in [*best, *extra]]

    def branches(
        self,
        query_vector: np.ndarray[Any, np.dtype[np.float32]] | None,
        candidates: int,
        keyword_hits: list[BranchHit] | None,
    ) -> tuple[list[BranchHit] | None, list[BranchHit] | None]:
        """The dense hits (None without a query vector) and the keyword hits (None: that branch did not
        run), as `edge_power.run_branches` gives them."""
        if query_vector is None:
            return None, keyword_hits
        return self.dense_hits(query_vector, candidates, {hit.id for hit in keyword_hits or []}), keyword_hits


def read_small_owner(
    shard: qe.EdgeShard, conditions: Conditions, *, owner_points: int, dim: int, limit: int = SMALL_OWNER_POINTS
) -> SmallOwnerRows | None:
    """The rows of every point passing `conditions` (which hold the owner's), or None when the owner is
    not small: more than `limit` points by the collection's estimate, or by the read itself."""
    if owner_points > limit:
        return None
    records, _ = shard.scroll(
        qe.ScrollRequest(limit=limit + 1, filter=edge_filter(conditions), with_payload=True, with_vector=[DENSE_VECTOR])
    )
    if len(records) > limit:
        return None
    ids: list[str] = []
    vectors: list[list[float]] = []
    payloads: dict[str, dict[str, Any]] = {}
    for record in records:
        stored = record.vector.get(DENSE_VECTOR) if isinstance(record.vector, dict) else None
        if not isinstance(stored, list) or len(stored) != dim or record.payload is None:
            return None  # a point without its vector or payload: let Edge answer
        point = str(record.id)
        ids.append(point)
        vectors.append(cast("list[float]", stored))
        payloads[point] = edge_window.without_window_key(record.payload)
    matrix = np.asarray(vectors, dtype=np.float32).reshape(len(ids), dim)
    return SmallOwnerRows(ids, matrix, payloads)


@dataclass
class EarlyReads:
    """What a search read before its query vector arrived: the keyword branch's hits (None: it did not
    run; with their dense vectors when its request read them), the payloads of its best hits, and a small
    owner's rows (which hold those payloads too)."""

    keyword_hits: list[BranchHit] | None = None
    prefetched: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: SmallOwnerRows | None = None


def read_while_embedding(
    scope: SearchScope, keyword: BranchRequest | None, *, small: int, dim: int, limit: int
) -> EarlyReads:
    """The owner's rows if they have at most `small` points passing the conditions (0: none read), the
    keyword branch, and (without rows) the payloads of the keyword branch's best `limit`: the reads a
    search can make while its query embeds."""
    rows = None
    if small > 0:
        rows = read_small_owner(scope.shard, scope.conditions, owner_points=scope.owner_points, dim=dim, limit=small)
    if keyword is None:
        return EarlyReads(rows=rows)
    [found] = scope.shard.query_batch(qe.QueryBatchRequest([keyword.request]))
    hits = [_early_hit(point) for point in keyword.points(scope.shard, found)]
    prefetched = {} if rows is not None else retrieve_payloads(scope.shard, scope.owner, [h.id for h in hits[:limit]])
    return EarlyReads(hits, prefetched, rows)


def _early_hit(point: qe.ScoredPoint) -> BranchHit:
    """A keyword hit read while the query embeds; its dense vector (when the request read it) as float32
    now, once: Edge builds a new Python list each time `point.vector` is read, and the fusion's product
    takes an array without converting it again."""
    hit = branch_hit(point)
    if hit.dense_vector is None:
        return hit
    return BranchHit(hit.id, hit.score, np.asarray(hit.dense_vector, dtype=np.float32))
