"""L0 and L1 start the query embedding before they encode the query's keyword form: the keyword work
holds the GIL, which the local model's query thread needs to begin (gateways/embedder.py)."""

from __future__ import annotations

import asyncio
import time
from typing import cast

from services.common.domain.sparse import SparseVector
from services.common.runtime.resources import Resources
from services.recall_api.l0.deadline import start_query
from services.recall_api.retrieval.candidates import CandidateRetriever


class OrderedEmbedder:
    """Starts a query embedding inside `begin_query` and notes when; the test completes it."""

    def __init__(self, order: list[str]) -> None:
        self.order = order
        self.pending: asyncio.Future[list[float]] | None = None

    @property
    def model_name(self) -> str:
        return "m"

    @property
    def dim(self) -> int:
        return 2

    async def embed_passages(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("no passages here")

    async def embed_query(self, text: str) -> list[float]:
        raise AssertionError("begin_query, not embed_query")

    def begin_query(self, text: str) -> asyncio.Future[list[float]]:
        self.order.append("embedding")
        self.pending = asyncio.get_running_loop().create_future()
        return self.pending


class OrderedKeywords:
    def __init__(self, order: list[str]) -> None:
        self.order = order

    def encode_query(self, text: str) -> SparseVector:
        self.order.append("keywords")
        return SparseVector([1], [1.0])


class FakeResources:
    def __init__(self) -> None:
        self.order: list[str] = []
        self.embedding = OrderedEmbedder(self.order)
        self.encoder = OrderedKeywords(self.order)

    def embedder(self) -> OrderedEmbedder:
        return self.embedding

    def keywords(self) -> OrderedKeywords:
        return self.encoder


async def test_l0_starts_the_query_embedding_before_the_keyword_form() -> None:
    resources = FakeResources()
    pending = await start_query(cast(Resources, resources), "q", deadline=time.perf_counter() + 60)
    assert resources.order == ["embedding", "keywords"]
    assert pending.sparse == SparseVector([1], [1.0])
    assert resources.embedding.pending is not None
    resources.embedding.pending.set_result([0.6, 0.8])
    assert await pending.dense == [0.6, 0.8]


async def test_l1_starts_the_query_embedding_before_the_keyword_form() -> None:
    resources = FakeResources()
    embedding = asyncio.ensure_future(CandidateRetriever(cast(Resources, resources)).embed("q"))
    await asyncio.sleep(0)  # one loop step: `embed` begins the embedding, then encodes on a worker thread
    assert resources.embedding.pending is not None
    resources.embedding.pending.set_result([0.6, 0.8])
    query = await embedding
    assert resources.order == ["embedding", "keywords"]
    assert query.dense == [0.6, 0.8] and query.sparse == SparseVector([1], [1.0])
