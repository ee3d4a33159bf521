"""The L0 deadline over real HTTP: a query embedding that is late makes L0 answer from keyword search,
flagged degraded, instead of late; the late vector is kept for the next turn.

The slow embedder is injected through the composition root (Resources) and is not merely slow: its
query embedding waits for the test to release it, after the response has arrived. So the answer
provably came without a dense vector, and no assertion depends on timing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from services.common.gateways.embedder import Embedder
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.embedding_wrappers import CachedQueryEmbedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.settings import NatsSettings
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import ALICE, build_stack, embedder, keywords

pytestmark = pytest.mark.integration

__all__ = ["embedder", "keywords"]  # module fixtures shared with test_recall_api

QUESTION = "which restaurant in Busan did Minsu book for the dinner?"


class HeldQueryEmbedder:
    """The real model, except that the query embedding of `held_text` waits until `release` is set
    (other texts, such as the service's warm-up, pass)."""

    def __init__(self, inner: Embedder, held_text: str) -> None:
        self._inner = inner
        self._held_text = held_text
        self.release = asyncio.Event()
        self.queries_started = 0
        self.queries_finished = 0
        self.finished = asyncio.Event()

    @property
    def model_name(self) -> str:
        return self._inner.model_name

    @property
    def dim(self) -> int:
        return self._inner.dim

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._inner.embed_passages(texts)

    async def embed_query(self, text: str) -> list[float]:
        if text != self._held_text:
            return await self._inner.embed_query(text)
        self.queries_started += 1
        await self.release.wait()
        vector = await self._inner.embed_query(text)
        self.queries_finished += 1
        self.finished.set()
        return vector


async def test_a_late_query_embedding_gives_a_keyword_answer_flagged_degraded(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> None:
    held = HeldQueryEmbedder(embedder, QUESTION)
    cached = CachedQueryEmbedder(held)
    async with build_stack(
        tmp_path, nats_settings, falkordb_graph, cached, keywords, over_http=True, l0_embedding_deadline_ms=50
    ) as stack:
        busan = await stack.episode(ALICE, "s-busan", "Minsu booked the Busan seafood restaurant for the team dinner.")
        await stack.episode(ALICE, "s-rust", "The payment module rewrite moves to Rust next quarter.")

        late = await stack.http.post("/v1/recall/auto", json={"user_id": ALICE.user_id, "message": QUESTION})
        assert late.status_code == 200
        body = late.json()
        # Answered while the query embedding was still held: from keyword search alone, and it says so.
        assert held.queries_started == 1 and held.queries_finished == 0
        assert body["degraded"] == "embedding_deadline"
        assert [item["id"] for item in body["items"]] == [busan]
        assert "Busan" in body["section"]

        # The late embedding finishes in the background and is kept: the next turn with the same
        # text gets the full hybrid answer without embedding again.
        held.release.set()
        await asyncio.wait_for(held.finished.wait(), timeout=60)
        on_time = await stack.http.post("/v1/recall/auto", json={"user_id": ALICE.user_id, "message": QUESTION})
        assert on_time.status_code == 200
        assert on_time.json()["degraded"] is None
        assert [item["id"] for item in on_time.json()["items"]][:1] == [busan]
        assert held.queries_started == 1


async def test_an_embedding_within_the_deadline_is_not_degraded(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> None:
    held = HeldQueryEmbedder(embedder, QUESTION)
    held.release.set()  # never held: the deadline (an hour) cannot be what decides
    async with build_stack(
        tmp_path, nats_settings, falkordb_graph, held, keywords, over_http=True, l0_embedding_deadline_ms=3_600_000
    ) as stack:
        busan = await stack.episode(ALICE, "s-busan", "Minsu booked the Busan seafood restaurant for the team dinner.")
        response = await stack.http.post("/v1/recall/auto", json={"user_id": ALICE.user_id, "message": QUESTION})
        assert response.status_code == 200
        assert response.json()["degraded"] is None
        assert [item["id"] for item in response.json()["items"]][:1] == [busan]
        assert held.queries_finished == 1
