"""Graph store port: the same portable Cypher runs on two executors (FalkorDB over the Redis
protocol, Neo4j over Bolt). Adapters differ only in how they run a query, map parameters and
results to plain values, and bootstrap the schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class CypherExecutor(Protocol):
    async def bootstrap(self) -> None:
        """Create indexes (FalkorDB) or uniqueness constraints (Neo4j). Idempotent."""
        ...

    async def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run one query; rows as dicts of plain values (nodes → dict of properties plus `_labels`,
        relationships → dict of properties plus `_type`, paths → list of those)."""
        ...

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...
