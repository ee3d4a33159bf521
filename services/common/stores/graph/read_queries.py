"""The Cypher that reads the entity graph (see `model`): key resolution through merges, lookups,
search, neighbourhoods and per-user counts. Every query filters on the owner's visibility."""

from __future__ import annotations

from services.common.stores.graph.cypher import visible, visible_edge

RESOLVE_DIRECT = f"""
UNWIND $keys AS requested
MATCH (n:Entity {{key: requested}}) WHERE {visible("n")}
RETURN requested, n.key AS key
"""

RESOLVE_REDIRECT = f"""
UNWIND $keys AS requested
MATCH (n:Entity) WHERE {visible("n")} AND requested IN n.merged_keys
RETURN requested, n.key AS key
"""

GET_ENTITY = f"""
MATCH (n:Entity {{key: $key}}) WHERE {visible("n")}
RETURN n AS entity
"""

FIND_BY_NORM = f"""
MATCH (n:Entity) WHERE {visible("n")} AND n.scope = $scope
  AND (n.name_norm IN $norms OR any(a IN n.alias_norms WHERE a IN $norms))
RETURN n AS entity ORDER BY n.key
"""

LIST_ENTITIES = f"""
MATCH (n:Entity) WHERE {visible("n")} AND n.scope = $scope
  AND ($entity_type IS NULL OR n.entity_type = $entity_type)
RETURN n AS entity ORDER BY n.key LIMIT $limit
"""

SEARCH_ENTITIES = f"""
MATCH (n:Entity) WHERE {visible("n")} AND n.scope IN $scopes
  AND (n.name_norm CONTAINS $text OR any(a IN n.alias_norms WHERE a CONTAINS $text))
RETURN n AS entity
ORDER BY CASE WHEN n.name_norm = $text OR $text IN n.alias_norms THEN 0 ELSE 1 END, size(n.name_norm), n.key
LIMIT $limit
"""

START_BY_NAME = f"""
MATCH (n:Entity) WHERE {visible("n")} AND (n.name_norm = $norm OR $norm IN n.alias_norms)
RETURN n AS entity ORDER BY n.key
"""


def neighbourhood_query(hops: int, current_only: bool) -> str:
    # Variable-length bounds cannot be parameters; `hops` is a validated int. FalkorDB cannot filter a
    # path in the WHERE of its own MATCH, hence `WITH p WHERE`.
    current = " AND r.valid_to_ts IS NULL" if current_only else ""
    return f"""
MATCH (start:Entity) WHERE start.key IN $start_keys AND {visible("start")}
MATCH p = (start)-[:RELATED*1..{hops}]-(other:Entity)
WITH p, length(p) AS hops
WHERE all(n IN nodes(p) WHERE {visible("n")})
  AND all(r IN relationships(p) WHERE {visible_edge("r")}{current})
WITH p, hops ORDER BY hops LIMIT $path_limit
WITH collect(p) AS paths
UNWIND range(0, size(paths) - 1) AS position
UNWIND relationships(paths[position]) AS r
WITH r, min(position) AS first_seen
RETURN startNode(r) AS source, r AS relation, endNode(r) AS target, first_seen
ORDER BY first_seen
"""


# Operator statistics only (`tiermem stats`): entity nodes per tenant, no user and no content.
ENTITY_COUNTS_BY_TENANT = """
MATCH (n:Entity)
RETURN n.tenant_id AS tenant_id, count(n) AS entities
"""

COUNT = """
CALL {
  MATCH (n:Entity) WHERE n.tenant_id = $tenant_id AND $user_id IN n.user_ids
  RETURN count(n) AS nodes
}
CALL {
  MATCH (:Entity)-[r:RELATED]->(:Entity) WHERE r.tenant_id = $tenant_id AND $user_id IN r.user_ids
  RETURN count(r) AS edges
}
CALL {
  MATCH (ep:Episode {tenant_id: $tenant_id, user_id: $user_id})
  RETURN count(ep) AS episodes
}
RETURN nodes, edges, episodes
"""
