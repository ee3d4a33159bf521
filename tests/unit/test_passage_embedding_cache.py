"""The passage-vector cache of the local embedder and the de-duplication of a call's texts: each
distinct text is embedded once, vectors come back in input order, exact, and the cache stays bounded."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.gateways.embedding_local import PassageVectorCache, unique_texts


def test_unique_texts_keeps_first_seen_order_and_maps_every_input() -> None:
    distinct, order = unique_texts(["b", "a", "b", "c", "a"])
    assert distinct == ["b", "a", "c"]
    assert order == [0, 1, 0, 2, 1]
    assert [distinct[i] for i in order] == ["b", "a", "b", "c", "a"]
    assert unique_texts([]) == ([], [])


def test_cache_returns_exactly_the_float32_vector_it_was_given() -> None:
    cache = PassageVectorCache(8)
    vector = [0.1, -0.25, 1 / 3]  # 0.1 and 1/3 are not float32-exact: stored and returned as float32
    cache.put("text", vector)

    assert cache.get("text") == np.asarray(vector, dtype=np.float32).tolist()
    assert cache.get("other") is None
    assert (cache.hits, cache.misses) == (1, 1)


def test_cache_is_a_bounded_lru() -> None:
    cache = PassageVectorCache(2)
    cache.put("a", [1.0])
    cache.put("b", [2.0])
    assert cache.get("a") == [1.0]  # "a" is now the most recent
    cache.put("c", [3.0])  # evicts "b", the least recently used
    assert len(cache) == 2
    assert cache.get("b") is None
    assert cache.get("a") == [1.0]
    assert cache.get("c") == [3.0]


def test_a_zero_sized_cache_stores_nothing() -> None:
    cache = PassageVectorCache(0)
    cache.put("a", [1.0])
    assert len(cache) == 0
    assert cache.get("a") is None
    with pytest.raises(ValueError, match="max_entries"):
        PassageVectorCache(-1)


def test_keys_tell_apart_texts_that_differ_in_one_character() -> None:
    assert PassageVectorCache.key("passage: 김민수") != PassageVectorCache.key("passage: 김민수.")
    assert len(PassageVectorCache.key("x" * 10_000)) == 16
