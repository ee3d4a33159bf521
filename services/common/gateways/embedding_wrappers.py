"""Wrappers around an `Embedder` that add one thing each: a cache of recent query vectors, or a span and
a histogram per call."""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Awaitable, Sequence

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from services.common.domain.lru import LruCache
from services.common.gateways.embedder import Embedder, begin_query
from services.common.gateways.instruments import EMBEDDING_SECONDS

_tracer = trace.get_tracer(__name__)


class DelegatingEmbedder:
    """Passes every call to `inner`; wrappers (recording, caching) override what they add."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner

    @property
    def model_name(self) -> str:
        return self._inner.model_name

    @property
    def dim(self) -> int:
        return self._inner.dim

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._inner.embed_passages(texts)

    async def embed_query(self, text: str) -> list[float]:
        return await self._inner.embed_query(text)


class CachedQueryEmbedder(DelegatingEmbedder):
    """Remembers the query vectors of recent turns (LRU, keyed by model and text): the L0 query repeats
    the user's previous turns, a client retries, and a late embedding that missed the L0 deadline
    still serves the next call. Concurrent requests for the same text share one embedding. Passages
    are not cached (each is embedded once, when stored)."""

    def __init__(self, inner: Embedder, *, max_entries: int = 2048) -> None:
        super().__init__(inner)
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        # Packed doubles (~3 KB a 384-d vector, exact), not lists of Python floats (~12 KB).
        self._vectors: LruCache[tuple[str, str], array[float]] = LruCache(max_entries)
        self._pending: dict[tuple[str, str], asyncio.Future[list[float]]] = {}

    async def embed_query(self, text: str) -> list[float]:
        cached = self._cached((self.model_name, text))
        if cached is not None:
            return cached
        # Shielded: a caller that stops waiting (the L0 deadline) leaves the embedding running for the next.
        return list(await asyncio.shield(self._shared((self.model_name, text), text)))

    def begin_query(self, text: str) -> asyncio.Future[list[float]]:
        """`embed_query`, with the inner embedding started before this returns (gateways/embedder.py)."""
        cached = self._cached((self.model_name, text))
        if cached is not None:
            done: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
            done.set_result(cached)
            return done
        return asyncio.ensure_future(_copy_of(asyncio.shield(self._shared((self.model_name, text), text))))

    def _cached(self, key: tuple[str, str]) -> list[float] | None:
        cached = self._vectors.get(key)
        return None if cached is None else cached.tolist()

    def _shared(self, key: tuple[str, str], text: str) -> asyncio.Future[list[float]]:
        """The embedding of `text` in progress, started now unless one already is (concurrent callers share it)."""
        task = self._pending.get(key)
        if task is None:
            task = begin_query(self._inner, text)
            self._pending[key] = task
            task.add_done_callback(lambda done: self._store(key, done))
        return task

    def _store(self, key: tuple[str, str], done: asyncio.Future[list[float]]) -> None:
        self._pending.pop(key, None)
        if done.cancelled() or done.exception() is not None:
            return  # not cached; the waiting callers see the error
        self._vectors.put(key, array("d", done.result()))


async def _copy_of(shared: asyncio.Future[list[float]]) -> list[float]:
    return list(await shared)  # each caller its own list: one may change it


class TracedEmbedder(DelegatingEmbedder):
    """One client span per embedding call (GenAI conventions: operation, model, how many texts) and
    its duration in the `tiermem_embedding_seconds` histogram; never the texts."""

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        with _tracer.start_as_current_span(f"embeddings {self.model_name}", kind=SpanKind.CLIENT) as span:
            span.set_attributes(self._attributes("passages", len(texts)))
            with EMBEDDING_SECONDS.labels(kind="passages").time():
                return await self._inner.embed_passages(texts)

    async def embed_query(self, text: str) -> list[float]:
        return await self._traced_query(self._inner.embed_query(text))  # the coroutine runs inside the span

    def begin_query(self, text: str) -> asyncio.Future[list[float]]:
        """`embed_query`, with the inner embedding started before this returns (gateways/embedder.py);
        the span and the histogram start a loop step later, when the task that waits for it first runs."""
        return asyncio.ensure_future(self._traced_query(begin_query(self._inner, text)))

    async def _traced_query(self, pending: Awaitable[list[float]]) -> list[float]:
        with _tracer.start_as_current_span(f"embeddings {self.model_name}", kind=SpanKind.CLIENT) as span:
            span.set_attributes(self._attributes("query", 1))
            with EMBEDDING_SECONDS.labels(kind="query").time():
                return await pending

    def _attributes(self, kind: str, count: int) -> dict[str, str | int]:
        return {
            "gen_ai.operation.name": "embeddings",
            "gen_ai.request.model": self.model_name,
            "tiermem.embedding.kind": kind,
            "tiermem.embedding.texts": count,
        }
