"""Gateway protocols shared by every service (implementations in llm.py and embedding.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Embedder(Protocol):
    """Text → dense vector. Query and passage texts are embedded differently (e5 prefixes)."""

    @property
    def model_name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def embed_query(self, text: str) -> list[float]: ...
