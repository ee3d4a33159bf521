"""A canonical snapshot of everything the stores hold, owner by owner: episodes, passages and facts
(vector payloads) and the graph (entities, relations, episode nodes and their mentions).

Canonical: the same memory gives the same JSON, whatever order the work was done in and however
often it was retried. Keys and lists of ids are sorted, and the fields that record *when the
pipeline did something* rather than *what it knows* (write and recall times, recall counts) are
left out. Operators use it through `tiermem dump`; the fault tests compare a faulted run's snapshot
with a fault-free one's."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from services.common.domain.owner import Owner
from services.common.stores.graph.port import CypherExecutor
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES, VectorIndex

COLLECTIONS = (EPISODES, PASSAGES, FACTS)

VOLATILE_FIELDS = frozenset(
    {
        # when the pipeline wrote or rewrote a record
        "stored_at_ts",
        "created_at",
        "created_at_ts",
        "updated_at",
        "updated_at_ts",
        "last_asserted_ts",
        # an episode's expiry counts from when its session reached the stream (for a session that
        # ended earlier: an import), so two ingests of the same sessions differ in it by their gap
        "expires_at",
        "expires_at_ts",
        # what recall did with it since
        "recall_count",
        "last_recalled_at_ts",
    }
)

_PAGE = 500

_GRAPH_OWNERS = """
MATCH (n:Entity) UNWIND n.user_ids AS user_id RETURN DISTINCT n.tenant_id AS tenant_id, user_id
UNION
MATCH (ep:Episode) RETURN DISTINCT ep.tenant_id AS tenant_id, ep.user_id AS user_id
"""
_ENTITIES = """
MATCH (n:Entity) WHERE n.tenant_id = $tenant_id AND $user_id IN n.user_ids
RETURN n AS node ORDER BY n.key
"""
_RELATIONS = """
MATCH (a:Entity)-[r:RELATED]->(b:Entity) WHERE r.tenant_id = $tenant_id AND $user_id IN r.user_ids
RETURN a.key AS source, b.key AS target, r AS edge ORDER BY a.key, b.key, r.type, r.scope
"""
_EPISODE_NODES = """
MATCH (ep:Episode {tenant_id: $tenant_id, user_id: $user_id})
OPTIONAL MATCH (ep)-[:MENTIONS]->(e:Entity)
RETURN ep AS node, collect(e.key) AS mentions ORDER BY ep.key
"""


def canonical(value: Any) -> Any:
    """Volatile fields dropped, mappings with sorted keys, lists of plain values sorted (the order
    in which ids and aliases were appended depends on processing order, not on what is known)."""
    if isinstance(value, Mapping):
        return {str(key): canonical(item) for key, item in sorted(value.items()) if key not in VOLATILE_FIELDS}
    if isinstance(value, list | tuple):
        items = [canonical(item) for item in value]
        if all(isinstance(item, str | int | float | bool) or item is None for item in items):
            return sorted(items, key=lambda item: (str(type(item)), str(item)))
        return items
    return value


async def owners(index: VectorIndex, graph: CypherExecutor) -> list[Owner]:
    """Every (tenant, user) with anything in the vector collections or the graph."""
    found: set[Owner] = set()
    for collection in COLLECTIONS:
        found.update(await index.list_owners(collection))
    for row in await graph.run(_GRAPH_OWNERS):
        if row.get("tenant_id") and row.get("user_id"):
            found.add(Owner(str(row["tenant_id"]), str(row["user_id"])))
    return sorted(found, key=lambda owner: (owner.tenant_id, owner.user_id))


async def _points(index: VectorIndex, collection: str, owner: Owner) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    start: str | None = None
    while True:
        page = await index.scroll(collection, owner, limit=_PAGE + 1, start_id=start)
        points.extend({"id": record.id, **record.payload} for record in page[:_PAGE])
        if len(page) <= _PAGE:
            return points
        start = page[_PAGE].id


def _graph_record(row_value: Any) -> dict[str, Any]:
    record = dict(row_value) if isinstance(row_value, Mapping) else {}
    record.pop("_labels", None)
    record.pop("_type", None)
    return record


async def owner_snapshot(index: VectorIndex, graph: CypherExecutor, owner: Owner) -> dict[str, Any]:
    """What the stores hold for one owner, canonical."""
    params = {"tenant_id": owner.tenant_id, "user_id": owner.user_id}
    vectors = {collection: await _points(index, collection, owner) for collection in COLLECTIONS}
    entities = [_graph_record(row["node"]) for row in await graph.run(_ENTITIES, params)]
    relations = [
        {"source": row["source"], "target": row["target"], **_graph_record(row["edge"])}
        for row in await graph.run(_RELATIONS, params)
    ]
    episode_nodes = [
        {**_graph_record(row["node"]), "mentions": list(row.get("mentions") or [])}
        for row in await graph.run(_EPISODE_NODES, params)
    ]
    snapshot = {
        **vectors,
        "graph": {"entities": entities, "relations": relations, "episodes": episode_nodes},
    }
    result = canonical(snapshot)
    for collection in COLLECTIONS:
        result[collection] = sorted(result[collection], key=lambda point: str(point["id"]))
    return dict(result)


async def snapshot(
    index: VectorIndex, graph: CypherExecutor, only: Sequence[Owner] | None = None
) -> dict[str, dict[str, Any]]:
    """`{"tenant/user": owner snapshot}` for every owner (or `only` those)."""
    selected = list(only) if only is not None else await owners(index, graph)
    return {f"{owner.tenant_id}/{owner.user_id}": await owner_snapshot(index, graph, owner) for owner in selected}


def to_json(dump: Mapping[str, Any]) -> str:
    """Deterministic text: equal snapshots give byte-equal files (diffable)."""
    return json.dumps(dump, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
