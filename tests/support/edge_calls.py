"""A Qdrant Edge shard proxy that records the calls made through it (the binding's methods cannot be
patched), for tests of what a search asks of Edge and when."""

from __future__ import annotations

from collections import Counter
from typing import Any


class ShardCalls:
    """Put in place of a collection's shard: `names` in call order, `calls` counted by name."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self.names: list[str] = []

    @property
    def calls(self) -> dict[str, int]:
        return dict(Counter(self.names))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.shard, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.names.append(name)
            return method(*args, **kwargs)

        return recorded
