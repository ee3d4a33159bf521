"""The query-vector cache of recent turns: LRU by model and text, one embedding for concurrent callers,
a caller that stops waiting leaves the embedding to finish for the next one, failures not cached."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from prometheus_client import REGISTRY

from services.common.gateways.embedder import begin_query
from services.common.gateways.embedding_wrappers import CachedQueryEmbedder, TracedEmbedder


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


class StartingEmbedder(CountingEmbedder):
    """Starts each query embedding inside `begin_query`, as the local model does (its thread is in the
    model call when the call returns); the test completes it through `pending`."""

    def __init__(self) -> None:
        super().__init__()
        self.begun: list[str] = []
        self.pending: dict[str, asyncio.Future[list[float]]] = {}

    def begin_query(self, text: str) -> asyncio.Future[list[float]]:
        self.begun.append(text)
        self.pending[text] = asyncio.get_running_loop().create_future()
        return self.pending[text]


async def test_begin_query_starts_the_inner_embedding_at_once_and_shares_it() -> None:
    inner = StartingEmbedder()
    cached = CachedQueryEmbedder(inner)
    first = cached.begin_query("same")
    assert inner.begun == ["same"]  # started inside the call, not at the caller's next await
    second = cached.begin_query("same")
    waiting = asyncio.ensure_future(cached.embed_query("same"))
    await asyncio.sleep(0)  # one loop step: `waiting` reaches the shared embedding
    assert inner.begun == ["same"] and inner.calls == []
    inner.pending["same"].set_result([4.0, 1.0])
    one, two, three = await first, await second, await waiting
    assert one == two == three == [4.0, 1.0]
    assert one is not two  # each caller its own list
    again = cached.begin_query("same")
    assert again.done() and again.result() == [4.0, 1.0] and inner.begun == ["same"]


async def test_a_caller_that_stops_waiting_for_a_begun_query_leaves_it_for_the_next() -> None:
    inner = StartingEmbedder()
    cached = CachedQueryEmbedder(inner)
    cached.begin_query("late").cancel()
    inner.pending["late"].set_result([2.0, 2.0])
    await asyncio.sleep(0)  # the done callback stores it
    assert await cached.embed_query("late") == [2.0, 2.0] and inner.begun == ["late"]


def _query_embeddings_timed() -> float:
    return REGISTRY.get_sample_value("tiermem_embedding_seconds_count", {"kind": "query"}) or 0.0


async def test_a_traced_begun_query_starts_at_once_and_is_timed() -> None:
    inner = StartingEmbedder()
    before = _query_embeddings_timed()
    pending = TracedEmbedder(inner).begin_query("q")
    assert inner.begun == ["q"]
    inner.pending["q"].set_result([1.0, 2.0])
    assert await pending == [1.0, 2.0]
    assert _query_embeddings_timed() == before + 1


async def test_begin_query_on_an_embedder_without_it_embeds_at_the_next_await() -> None:
    inner = CountingEmbedder()
    pending = begin_query(inner, "abc")
    assert inner.calls == []
    assert await pending == [3.0, 1.0] and inner.calls == ["abc"]
