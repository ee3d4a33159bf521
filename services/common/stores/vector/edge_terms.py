"""Each owner's keyword statistics on Qdrant Edge (owner_terms.py), and the keyword scores they give a
search's candidates (edge.py's finish step)."""

from __future__ import annotations

from collections.abc import Sequence

import qdrant_edge as qe

from services.common.domain.owner import Owner
from services.common.domain.sparse import SparseVector
from services.common.stores.vector.adapter_support import BranchHit, owner_keyword_hits
from services.common.stores.vector.edge_filters import retrieve_sparse
from services.common.stores.vector.edge_points import read_owner_terms
from services.common.stores.vector.owner_terms import DEFAULT_SAMPLE, OwnerTerms, OwnerTermsCache, checked_sample


class EdgeOwnerTerms:
    """The statistics of each (collection, owner), read from the shard on the first search after a write
    for that owner. Only this process writes the shards, and each write drops its owner's entry (`drop`),
    so an entry is never stale. `sample`: the owner's points read at most."""

    def __init__(self, sample: int = DEFAULT_SAMPLE) -> None:
        self._sample = checked_sample(sample)
        self._cache = OwnerTermsCache(ttl=float("inf"))

    def terms(self, collection: str, shard: qe.EdgeShard, owner: Owner) -> OwnerTerms:
        cached = self._cache.lookup(collection, owner)
        if cached is not None:
            return cached
        return self._cache.keep(collection, owner, read_owner_terms(shard, owner, self._sample))

    def drop(self, collection: str, owner: Owner | None = None) -> None:
        self._cache.drop(collection, owner)

    def rescored(
        self,
        collection: str,
        shard: qe.EdgeShard,
        owner: Owner,
        query: SparseVector,
        dense_hits: Sequence[BranchHit] | None,
        keyword_hits: Sequence[BranchHit] | None,
    ) -> tuple[list[BranchHit] | None, int]:
        """The candidates holding a query term with their keyword scores over the owner's points, and the
        owner's corpus size for fusion's calibration. No keyword hit: no point of the owner holds a query
        term, and nothing is read."""
        if not keyword_hits:
            return None if keyword_hits is None else list(keyword_hits), 1
        terms = self.terms(collection, shard, owner)
        stored = retrieve_sparse(shard, [hit.id for hit in (*(dense_hits or ()), *keyword_hits)])
        return owner_keyword_hits(query, dense_hits, keyword_hits, stored, terms), terms.corpus_size
