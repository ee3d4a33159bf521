"""The query-vector cache of recent turns: LRU by model and text, one embedding for concurrent callers,
a caller that stops waiting leaves the embedding to finish for the next one, failures not cached."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from services.common.gateways.embedding import CachedQueryEmbedder


class CountingEmbedder:
    def __init__(self, model: str = "m1") -> None:
        self.model = model
        self.calls: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False

    @property
    def model_name(self) -> str:
        return self.model

    @property
    def dim(self) -> int:
        return 2

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        return [[float(len(text)), 0.0] for text in texts]

    async def embed_query(self, text: str) -> list[float]:
        self.calls.append(text)
        await self.gate.wait()
        if self.fail:
            raise RuntimeError("provider down")
        return [float(len(text)), 1.0]


async def test_repeated_queries_are_embedded_once_and_the_oldest_is_evicted() -> None:
    inner = CountingEmbedder()
    cached = CachedQueryEmbedder(inner, max_entries=2)
    assert await cached.embed_query("a") == [1.0, 1.0]
    assert await cached.embed_query("a") == [1.0, 1.0]
    await cached.embed_query("bb")
    await cached.embed_query("a")  # refreshes "a": "bb" is now the oldest
    await cached.embed_query("ccc")  # evicts "bb"
    await cached.embed_query("a")
    await cached.embed_query("bb")
    assert inner.calls == ["a", "bb", "ccc", "bb"]
    assert await cached.embed_passages(["xy"]) == [[2.0, 0.0]]  # passages pass through, uncached


async def test_concurrent_callers_share_one_embedding_and_a_caller_may_stop_waiting() -> None:
    inner = CountingEmbedder()
    inner.gate.clear()
    cached = CachedQueryEmbedder(inner)
    first = asyncio.ensure_future(cached.embed_query("same"))
    second = asyncio.ensure_future(cached.embed_query("same"))
    await asyncio.sleep(0)
    first.cancel()  # e.g. the L0 deadline gave up on it
    inner.gate.set()
    assert await second == [4.0, 1.0]
    assert await cached.embed_query("same") == [4.0, 1.0]
    assert inner.calls == ["same"]
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_failed_embedding_is_not_cached() -> None:
    inner = CountingEmbedder()
    inner.fail = True
    cached = CachedQueryEmbedder(inner)
    with pytest.raises(RuntimeError, match="provider down"):
        await cached.embed_query("q")
    inner.fail = False
    assert await cached.embed_query("q") == [1.0, 1.0]
    assert inner.calls == ["q", "q"]


async def test_the_model_is_part_of_the_key() -> None:
    inner = CountingEmbedder()
    cached = CachedQueryEmbedder(inner)
    await cached.embed_query("q")
    inner.model = "m2"
    await cached.embed_query("q")
    assert inner.calls == ["q", "q"]
