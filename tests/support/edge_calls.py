"""For tests of what a search asks of Qdrant Edge and when: a shard proxy that records the calls made
through it (the binding's methods cannot be patched), and a search started with its vector pending."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

from services.common.domain.owner import Owner
from services.common.stores.vector.port import HybridWeights, ScoredRecord, SearchFilter, SparseVector, VectorIndex


class ShardCalls:
    """Put in place of a collection's shard: `names` in call order, `calls` counted by name, and the
    number of requests in each `query_batch` (`batches`)."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self.names: list[str] = []
        self.batches: list[int] = []

    @property
    def calls(self) -> dict[str, int]:
        return dict(Counter(self.names))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.shard, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.names.append(name)
            if name == "query_batch":
                self.batches.append(len(args[0].queries))
            return method(*args, **kwargs)

        return recorded


async def search_with_vector_pending(
    index: VectorIndex,
    collection: str,
    owner: Owner,
    *,
    sparse: SparseVector,
    weights: HybridWeights,
    limit: int,
    search_filter: SearchFilter | None = None,
) -> tuple[asyncio.Future[Sequence[float] | None], asyncio.Future[list[ScoredRecord]]]:
    """A hybrid search started with its query vector still to come (as L0 searches while the query
    embeds), returned once it has done all it can without the vector: set the future to go on."""
    vector: asyncio.Future[Sequence[float] | None] = asyncio.get_running_loop().create_future()
    search = asyncio.ensure_future(
        index.hybrid_query(
            collection, owner, dense=vector, sparse=sparse, weights=weights, limit=limit, search_filter=search_filter
        )
    )
    for _ in range(5):
        await asyncio.sleep(0)
    assert not search.done(), "the search did not wait for its vector"
    return vector, search
