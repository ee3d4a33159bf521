"""CypherExecutor over the Redis protocol to FalkorDB (the `falkordb` asyncio client).

Never over FalkorDB's experimental Bolt port: ~100× slower, ignores `bind`, and answered without a
password when we tried it (DESIGN.md §6)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import date, datetime, time
from typing import Any

import redis.asyncio as redis_asyncio
from falkordb.asyncio.graph import AsyncGraph
from falkordb.edge import Edge
from falkordb.node import Node
from falkordb.path import Path as FalkorPath
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError, ResponseError

# Range indexes the repository's lookups use. Entity.key and Episode.key also get unique constraints;
# FalkorDB indexes array properties element-wise, which serves `key IN n.merged_keys`.
_INDEXES: tuple[str, ...] = (
    "CREATE INDEX FOR (n:Entity) ON (n.key)",
    "CREATE INDEX FOR (n:Entity) ON (n.tenant_id)",
    "CREATE INDEX FOR (n:Entity) ON (n.name_norm)",
    "CREATE INDEX FOR (n:Entity) ON (n.merged_keys)",
    "CREATE INDEX FOR (n:Episode) ON (n.key)",
    "CREATE INDEX FOR (n:Episode) ON (n.tenant_id)",
    "CREATE INDEX FOR (n:Episode) ON (n.user_id)",
    "CREATE INDEX FOR ()-[r:RELATED]-() ON (r.tenant_id)",
)
_UNIQUE_KEYS: tuple[str, ...] = ("Entity", "Episode")


class GraphParameterError(TypeError):
    """A query parameter has a type that cannot travel portably to both FalkorDB and Neo4j."""


def validate_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check that parameters are portable plain values: str, int, finite float, bool, None, lists and
    string-keyed maps of those. FalkorDB's client inlines parameters into the query text, so a
    datetime or NaN would otherwise turn into a syntax error far from its cause; times travel as
    epoch-second floats (`*_ts` properties) because `datetime()` does not exist in FalkorDB."""
    if params is None:
        return {}
    checked: dict[str, Any] = {}
    for name, value in params.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise GraphParameterError(f"parameter name {name!r} is not a plain identifier")
        _check_value(value, name)
        checked[name] = value
    return checked


def _check_value(value: object, where: str) -> None:
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise GraphParameterError(f"parameter {where} is {value}: only finite floats are allowed")
        return
    if isinstance(value, str):
        if "\x00" in value:
            raise GraphParameterError(f"parameter {where} contains a NUL character")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_value(item, f"{where}[{index}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or not key or "`" in key:
                raise GraphParameterError(f"parameter {where} has an unusable map key {key!r}")
            _check_value(item, f"{where}.{key}")
        return
    raise GraphParameterError(
        f"parameter {where} has type {type(value).__name__}; use str/int/float/bool/None, lists and maps "
        "(times as epoch-second floats)"
    )


def _plain(value: Any) -> Any:
    """FalkorDB result values → plain Python values (see CypherExecutor.run)."""
    if isinstance(value, Node):
        node = {key: _plain(item) for key, item in value.properties.items()}
        node["_labels"] = list(value.labels or [])
        return node
    if isinstance(value, Edge):
        edge = {key: _plain(item) for key, item in value.properties.items()}
        edge["_type"] = value.relation
        return edge
    if isinstance(value, FalkorPath):
        nodes, edges = value.nodes(), value.edges()
        items: list[Any] = []
        for index, node_value in enumerate(nodes):
            items.append(_plain(node_value))
            if index < len(edges):
                items.append(_plain(edges[index]))
        return items
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


class FalkorDBExecutor:
    """Runs portable Cypher on one FalkorDB graph. Safe to share between tasks: the Redis client
    keeps a connection pool, and FalkorDB runs the write queries of one graph one at a time."""

    def __init__(
        self,
        host: str,
        port: int,
        password: str | None,
        graph_name: str,
        *,
        socket_timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        max_connections: int | None = 16,
    ) -> None:
        if not graph_name:
            raise ValueError("graph_name must not be empty")
        self.graph_name = graph_name
        # `falkordb.asyncio.FalkorDB(...)` probes for cluster mode with a *synchronous* INFO call in its
        # constructor: blocking I/O on the event loop that also fails construction when the server is
        # down. The graph object only needs `execute_command`, so give it a lazily connecting async
        # Redis client configured the way FalkorDB configures its own (decoded RESP2 replies).
        self._connection = redis_asyncio.Redis(
            host=host,
            port=port,
            password=password,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=connect_timeout_s,
            max_connections=max_connections,
            decode_responses=True,
            protocol=2,
            # redis-py retries connection errors (a wrong password is one) three times with up to
            # seconds of backoff; a short retry still rides out a dropped pooled connection.
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
        )
        self._graph = AsyncGraph(self._connection, graph_name)

    async def bootstrap(self) -> None:
        for statement in _INDEXES:
            try:
                await self._graph.query(statement)
            except ResponseError as exc:
                if "already indexed" not in str(exc):
                    raise
        for label in _UNIQUE_KEYS:
            try:
                await self._graph._create_constraint("UNIQUE", "NODE", label, "key")
            except ResponseError as exc:
                if "already exists" not in str(exc).lower():
                    raise

    async def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        checked = validate_params(params)
        result = await self._graph.query(query, checked or None)
        names = [str(column[1]) for column in result.header]
        return [{name: _plain(value) for name, value in zip(names, row, strict=True)} for row in result.result_set]

    async def ping(self) -> bool:
        try:
            return bool(await self._connection.ping())
        except (RedisError, OSError):
            return False

    async def close(self) -> None:
        await self._connection.aclose()

    async def delete_graph(self) -> None:
        """Drop the whole graph (tests and resets); a graph that does not exist is fine."""
        try:
            await self._graph.delete()
        except ResponseError as exc:
            if "empty key" not in str(exc).lower() and "invalid graph" not in str(exc).lower():
                raise
