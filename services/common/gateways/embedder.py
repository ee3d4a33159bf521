"""Gateway protocols shared by every service (implementations in llm.py, embedding_local.py and
embedding_litellm.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, runtime_checkable


class Embedder(Protocol):
    """Text → dense vector. Query and passage texts are embedded differently (e5 prefixes)."""

    @property
    def model_name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def embed_query(self, text: str) -> list[float]: ...


@runtime_checkable
class QueryStarter(Protocol):
    """An embedder that can start a query embedding before the caller's next step (`begin_query`)."""

    def begin_query(self, text: str) -> asyncio.Future[list[float]]: ...


def begin_query(embedder: Embedder, text: str) -> asyncio.Future[list[float]]:
    """The query vector of `text`, being computed: started by the time this returns where the embedder
    can (`QueryStarter`: the local model's query thread is inside the model call), else at the caller's
    next await. Why it matters: a caller that embeds and meanwhile works in Python (L0's keyword searches)
    would otherwise hold the GIL the query thread needs to begin, and the embedding would start only when
    that work pauses (embedding_local.py, `LocalE5Embedder.begin_query`)."""
    if isinstance(embedder, QueryStarter):
        return embedder.begin_query(text)
    return asyncio.ensure_future(embedder.embed_query(text))
