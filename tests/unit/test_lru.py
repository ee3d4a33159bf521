"""The one LRU behind the process-local caches (services/common/domain/lru.py) and the caches built on it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from services.common.domain.lru import LruCache
from services.dedup.handlers import NameEmbeddings


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: LruCache[str, int] = LruCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recent
    cache.put("c", 3)
    assert len(cache) == 2
    assert "b" not in cache
    assert (cache.get("a"), cache.get("c")) == (1, 3)
    assert (cache.pop("a"), cache.pop("a")) == (1, None)
    assert len(cache) == 1


def test_a_zero_sized_cache_stores_nothing_and_a_negative_size_is_refused() -> None:
    cache: LruCache[str, int] = LruCache(0)
    cache.put("a", 1)
    assert cache.get("a") is None
    with pytest.raises(ValueError, match="max_entries"):
        LruCache(-1)


class _CountingEmbedder:
    """Counts the names it is asked to embed (the cache logic under test needs no model)."""

    model_name = "counting"
    dim = 1

    def __init__(self) -> None:
        self.embedded: list[str] = []

    async def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        self.embedded += texts
        return [[float(len(text))] for text in texts]

    async def embed_query(self, text: str) -> list[float]:
        return [float(len(text))]


async def test_entity_name_embeddings_keep_the_names_that_keep_coming_back() -> None:
    embedder = _CountingEmbedder()
    names = NameEmbeddings(lambda: embedder, capacity=2)
    await names.vectors(["Seoul", "Busan"])
    await names.vectors(["Seoul"])  # a hit: Seoul is the most recent now
    await names.vectors(["Jeju"])  # evicts Busan, the least recently used
    assert await names.vectors(["Seoul", "Jeju", "Seoul"]) == {"Seoul": [5.0], "Jeju": [4.0]}
    assert embedder.embedded == ["Seoul", "Busan", "Jeju"]


async def test_a_batch_larger_than_the_cache_still_gets_every_vector() -> None:
    names = NameEmbeddings(lambda: _CountingEmbedder(), capacity=1)
    assert await names.vectors(["a", "bb", "ccc"]) == {"a": [1.0], "bb": [2.0], "ccc": [3.0]}
