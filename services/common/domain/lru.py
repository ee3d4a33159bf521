"""A bounded mapping that forgets the least recently used entry first: the one LRU behind the
process-local caches and tables (query and passage vectors, entity-name embeddings, the recall API's
wrong-key throttle).

`functools.lru_cache` memoises a function; these caches are filled from outside (a vector computed
elsewhere, stored once it arrives), so they need `get` and `put`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """At most `max_entries` entries (0: stores nothing); `get` and `put` make an entry the most recent."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        self.max_entries = max_entries
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def keys_oldest_first(self) -> list[K]:
        """The keys, least recently used first (a copy: safe to pop while walking it)."""
        return list(self._entries)

    def pop(self, key: K) -> V | None:
        return self._entries.pop(key, None)

    def put(self, key: K, value: V) -> None:
        if self.max_entries == 0:
            return
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
