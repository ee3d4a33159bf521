"""For tests of what a search asks of Qdrant Edge: a shard proxy that records the calls made through it
(the binding's methods cannot be patched)."""

from __future__ import annotations

from collections import Counter
from typing import Any


class ShardCalls:
    """Put in place of a collection's shard: `names` in call order, `calls` counted by name, and the
    number of requests in each `query_batch` (`batches`)."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self.names: list[str] = []
        self.batches: list[int] = []

    @property
    def calls(self) -> dict[str, int]:
        return dict(Counter(self.names))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.shard, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.names.append(name)
            if name == "query_batch":
                self.batches.append(len(args[0].queries))
            return method(*args, **kwargs)

        return recorded
