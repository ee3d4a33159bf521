"""CypherExecutor over Bolt to Neo4j 5 (the `neo4j` async driver), running the same portable Cypher
as the FalkorDB adapter."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, time
from typing import Any

from neo4j import AsyncGraphDatabase, AsyncManagedTransaction
from neo4j.exceptions import ClientError, DriverError, Neo4jError
from neo4j.graph import Node, Path, Relationship
from neo4j.time import Date, DateTime, Duration, Time

from services.common.stores.graph.falkordb import validate_params

# Uniqueness constraints back every MERGE on a key (and make concurrent MERGEs safe); plain indexes
# serve the tenant/user filters.
_SCHEMA: tuple[str, ...] = (
    "CREATE CONSTRAINT tiermem_entity_key IF NOT EXISTS FOR (n:Entity) REQUIRE n.key IS UNIQUE",
    "CREATE CONSTRAINT tiermem_episode_key IF NOT EXISTS FOR (n:Episode) REQUIRE n.key IS UNIQUE",
    "CREATE INDEX tiermem_entity_tenant IF NOT EXISTS FOR (n:Entity) ON (n.tenant_id)",
    "CREATE INDEX tiermem_entity_name_norm IF NOT EXISTS FOR (n:Entity) ON (n.name_norm)",
    "CREATE INDEX tiermem_episode_tenant IF NOT EXISTS FOR (n:Episode) ON (n.tenant_id)",
    "CREATE INDEX tiermem_episode_user IF NOT EXISTS FOR (n:Episode) ON (n.user_id)",
    "CREATE INDEX tiermem_related_tenant IF NOT EXISTS FOR ()-[r:RELATED]-() ON (r.tenant_id)",
)

_ENTITY_GONE = "Neo.ClientError.Statement.EntityNotFound"
_ENTITY_GONE_ATTEMPTS = 3


def _plain(value: Any) -> Any:
    """Neo4j result values → plain Python values (see CypherExecutor.run)."""
    if isinstance(value, Node):
        node = {key: _plain(item) for key, item in value.items()}
        node["_labels"] = sorted(value.labels)
        return node
    if isinstance(value, Relationship):
        edge = {key: _plain(item) for key, item in value.items()}
        edge["_type"] = value.type
        return edge
    if isinstance(value, Path):
        items: list[Any] = [_plain(value.start_node)]
        for relationship, next_node in zip(value.relationships, value.nodes[1:], strict=True):
            items.append(_plain(relationship))
            items.append(_plain(next_node))
        return items
    if isinstance(value, DateTime | Date | Time):
        return value.iso_format()
    if isinstance(value, Duration):
        return value.iso_format()
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


class Neo4jExecutor:
    """Runs portable Cypher on one Neo4j database. Every query runs in a managed write transaction,
    which the driver retries on transient errors (deadlocks between concurrent MERGEs, leader
    changes), so every query the repository sends is written to be idempotent."""

    def __init__(
        self,
        uri: str,
        user: str,
        password: str,
        database: str = "neo4j",
        *,
        max_transaction_retry_time_s: float = 30.0,
        connection_timeout_s: float = 5.0,
    ) -> None:
        self.database = database
        self._driver = AsyncGraphDatabase.driver(
            uri,
            auth=(user, password),
            max_transaction_retry_time=max_transaction_retry_time_s,
            connection_timeout=connection_timeout_s,
        )

    async def bootstrap(self) -> None:
        async with self._driver.session(database=self.database) as session:
            for statement in _SCHEMA:
                # Schema statements cannot share a transaction with data writes: auto-commit each.
                result = await session.run(statement)
                await result.consume()

    async def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        checked = validate_params(params)

        async def work(tx: AsyncManagedTransaction) -> list[dict[str, Any]]:
            # The driver types queries as LiteralString to discourage string building (mypy treats it as
            # str); these are the repository's constant queries and parameters travel separately.
            result = await tx.run(query, checked)
            return [
                {key: _plain(value) for key, value in zip(record.keys(), record.values(), strict=True)}
                async for record in result
            ]

        for attempt in range(1, _ENTITY_GONE_ATTEMPTS + 1):
            try:
                async with self._driver.session(database=self.database) as session:
                    return await session.execute_write(work)
            except ClientError as exc:
                # A concurrent transaction deleted a node this one had already matched (two merges
                # sharing a duplicate). Not transient to the driver, but every repository query is
                # idempotent, so running it again on the committed state is correct.
                if exc.code != _ENTITY_GONE or attempt == _ENTITY_GONE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    async def ping(self) -> bool:
        try:
            await self._driver.verify_connectivity()
        except (Neo4jError, DriverError, OSError):
            return False
        return True

    async def close(self) -> None:
        await self._driver.close()
