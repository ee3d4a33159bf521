"""The two branches of a hybrid search on Qdrant Edge (edge.py): Edge's own requests, exact.

Both branches go in one batch under the search's conditions (the dense one, for a power user, also
under their recent window: edge_window.py, or over a shortlist of it: edge_window_rows.py). A keyword
hit the dense branch did not return still gets its cosine, as fusion counts it: from Edge, with one
request over those ids. Branch requests read ids and scores, no payloads: edge.py reads the payloads
of the fused best only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import qdrant_edge as qe

from services.common.domain.sparse import SparseVector
from services.common.stores.vector.adapter_support import DENSE_VECTOR, SPARSE_VECTOR, BranchHit, Conditions
from services.common.stores.vector.edge_filters import branch_hit, edge_filter
from services.common.stores.vector.edge_window_rows import Shortlist


@dataclass(frozen=True, slots=True)
class BranchSearch:
    """One search's shard, conditions (the owner's and the search's) and candidates per branch."""

    shard: qe.EdgeShard
    conditions: Conditions
    candidates: int

    def branches(
        self,
        query_vector: np.ndarray[Any, np.dtype[np.float32]] | None,
        sparse: SparseVector | None,
        window: Sequence[qe.FieldCondition] = (),
        keyword_read: Sequence[BranchHit] | None = None,
        shortlist: Shortlist | None = None,
    ) -> tuple[list[BranchHit] | None, list[BranchHit] | None]:
        """The dense hits (None: no `query_vector`, the branch does not run) and the keyword hits (None:
        no `sparse`; empty for a query without keyword terms; `keyword_read` when already read), each best first.
        With a `shortlist` of the window, the dense branch searches it, and the window only when the
        shortlist's answer may not be the window's (edge_window_rows.py)."""
        requests: list[qe.QueryRequest] = []
        if query_vector is not None:
            if shortlist is None:
                dense_filter = edge_filter(self.conditions, *window)
            else:  # the rows are the window: no window condition (edge_window_rows.py)
                dense_filter = edge_filter(self.conditions, shortlist=shortlist.ids)
            requests.append(self._dense(query_vector.tolist(), dense_filter, self.candidates))
        keyword_terms = sparse is not None and bool(sparse.indices)
        if sparse is not None and keyword_terms and keyword_read is None:
            requests.append(self._keyword(sparse))
        found = iter(self.shard.query_batch(qe.QueryBatchRequest(requests)) if requests else [])
        dense_hits = None if query_vector is None else [branch_hit(point) for point in next(found)]
        if (
            query_vector is not None
            and shortlist is not None
            and not shortlist.settles(dense_hits or [], self.candidates)
        ):
            dense_hits = self._window_dense(query_vector, window)
        keyword_hits = None if sparse is None else [branch_hit(point) for point in next(found, [])]
        if sparse is not None and keyword_read is not None:
            keyword_hits = list(keyword_read)
        if dense_hits is not None and keyword_hits and query_vector is not None and np.any(query_vector):
            dense_hits += self._cosines(query_vector, dense_hits, keyword_hits)
        return dense_hits, keyword_hits

    def _window_dense(
        self, query_vector: np.ndarray[Any, np.dtype[np.float32]], window: Sequence[qe.FieldCondition]
    ) -> list[BranchHit]:
        """The dense branch over the whole window (a shortlist did not settle it)."""
        search_filter = edge_filter(self.conditions, *window)
        [found] = self.shard.query_batch(
            qe.QueryBatchRequest([self._dense(query_vector.tolist(), search_filter, self.candidates)])
        )
        return [branch_hit(point) for point in found]

    def _cosines(
        self,
        query_vector: np.ndarray[Any, np.dtype[np.float32]],
        dense_hits: Sequence[BranchHit],
        keyword_hits: Sequence[BranchHit],
    ) -> list[BranchHit]:
        """The cosine of each keyword hit the dense branch did not return (they passed the search's
        conditions; a zero query vector has no cosine, and fusion gives it 0)."""
        dense_ids = {hit.id for hit in dense_hits}
        missing = [hit.id for hit in keyword_hits if hit.id not in dense_ids]
        if not missing:
            return []
        only = edge_filter(self.conditions, shortlist=missing)
        [found] = self.shard.query_batch(qe.QueryBatchRequest([self._dense(query_vector.tolist(), only, len(missing))]))
        return [branch_hit(point) for point in found]

    @staticmethod
    def _dense(query: list[float], search_filter: qe.Filter, limit: int) -> qe.QueryRequest:
        nearest = qe.Query.Nearest(query, using=DENSE_VECTOR)
        return qe.QueryRequest(limit=limit, query=nearest, filter=search_filter, with_payload=False)

    def _keyword(self, sparse: SparseVector) -> qe.QueryRequest:
        return qe.QueryRequest(
            limit=self.candidates,
            query=qe.Query.Nearest(qe.SparseVector(list(sparse.indices), list(sparse.values)), using=SPARSE_VECTOR),
            filter=edge_filter(self.conditions),
            with_payload=False,
        )
