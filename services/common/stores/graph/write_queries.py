"""The Cypher that writes the entity graph (see `model` for what nodes and edges hold): upserts of
entities and relations with their episode provenance, closing a relation, and merging duplicates."""

from __future__ import annotations

from services.common.stores.graph.cypher import concat_lists, union, visible, visible_edge
from services.common.stores.graph.model import DEFAULT_ENTITY_TYPE

EPISODE_MERGE = """
MERGE (ep:Episode {key: $episode_id, tenant_id: $tenant_id, user_id: $user_id})
ON CREATE SET ep.session_id = $session_id, ep.occurred_at_ts = $occurred_at_ts, ep.created_at_ts = $now
WITH ep
"""


def upsert_entities_query(with_episode: bool) -> str:
    ep = "ep, " if with_episode else ""
    return (
        (EPISODE_MERGE if with_episode else "")
        + f"""
UNWIND $rows AS row
OPTIONAL MATCH (redirect:Entity)
  WHERE redirect.tenant_id = $tenant_id AND redirect.scope = $scope AND row.key IN redirect.merged_keys
WITH {ep}row, head(collect(redirect.key)) AS redirect_key
WITH {ep}row, coalesce(redirect_key, row.key) AS target_key
OPTIONAL MATCH (existing:Entity {{key: target_key}})
WITH {ep}row, target_key, existing IS NOT NULL AS existed
MERGE (n:Entity {{key: target_key}})
ON CREATE SET n.tenant_id = $tenant_id, n.scope = $scope, n.name = row.name, n.name_norm = row.name_norm,
  n.entity_type = row.entity_type, n.aliases = [], n.alias_norms = [], n.alias_sources = [], n.group_sources = [],
  n.user_ids = [],
  n.episode_ids = [], n.merged_keys = [], n.canonical = true, n.created_at_ts = $now, n.updated_at_ts = $now
WITH {ep}row, n, existed,
  [s IN row.alias_sources WHERE NOT s IN n.alias_sources] AS new_sources,
  [a IN row.aliases WHERE NOT a IN n.aliases] AS new_aliases,
  [a IN row.alias_norms WHERE NOT a IN n.alias_norms] AS new_norms,
  [s IN row.group_sources WHERE NOT s IN coalesce(n.group_sources, [])] AS new_group,
  CASE WHEN $user_id IN n.user_ids THEN [] ELSE [$user_id] END AS new_users,
  CASE WHEN $episode_id IS NULL OR $episode_id IN n.episode_ids THEN [] ELSE [$episode_id] END AS new_episodes,
  CASE WHEN n.entity_type = '{DEFAULT_ENTITY_TYPE}' AND row.entity_type <> '{DEFAULT_ENTITY_TYPE}'
       THEN row.entity_type ELSE n.entity_type END AS entity_type
WITH {ep}row, n, existed, new_sources, new_aliases, new_norms, new_group, new_users, new_episodes, entity_type,
  (size(new_sources) + size(new_aliases) + size(new_norms) + size(new_group) + size(new_users)
   + size(new_episodes) > 0 OR entity_type <> n.entity_type) AS changed
SET n.alias_sources = n.alias_sources + new_sources, n.aliases = n.aliases + new_aliases,
  n.group_sources = coalesce(n.group_sources, []) + new_group,
  n.alias_norms = n.alias_norms + new_norms, n.user_ids = n.user_ids + new_users,
  n.episode_ids = n.episode_ids + new_episodes, n.entity_type = entity_type,
  n.updated_at_ts = CASE WHEN changed THEN $now ELSE n.updated_at_ts END
"""
        + ("MERGE (ep)-[:MENTIONS]->(n)\n" if with_episode else "")
        + "RETURN row.idx AS idx, n AS entity, NOT existed AS created, changed\n"
    )


def upsert_relations_query(with_episode: bool) -> str:
    ep = "ep, " if with_episode else ""
    return (
        (EPISODE_MERGE if with_episode else "")
        + f"""
UNWIND $rows AS row
MATCH (s:Entity {{key: row.source_key}}) WHERE {visible("s")}
MATCH (t:Entity {{key: row.target_key}}) WHERE {visible("t")}
OPTIONAL MATCH (s)-[existing:RELATED {{type: row.type, scope: $scope}}]->(t)
WITH {ep}row, s, t, count(existing) > 0 AS existed
MERGE (s)-[r:RELATED {{type: row.type, scope: $scope}}]->(t)
ON CREATE SET r.tenant_id = $tenant_id, r.user_ids = [], r.episode_ids = [], r.valid_from_ts = row.valid_from_ts,
  r.last_asserted_ts = row.valid_from_ts, r.created_at_ts = $now, r.updated_at_ts = $now
WITH {ep}row, s, t, r, existed,
  CASE WHEN $user_id IN r.user_ids THEN [] ELSE [$user_id] END AS new_users,
  CASE WHEN $episode_id IS NULL OR $episode_id IN r.episode_ids THEN [] ELSE [$episode_id] END AS new_episodes,
  (r.valid_to_ts IS NOT NULL AND row.valid_from_ts > r.valid_to_ts) AS reopen,
  row.valid_from_ts < r.valid_from_ts AS earlier,
  row.valid_from_ts > r.last_asserted_ts AS later
WITH {ep}row, s, t, r, existed, new_users, new_episodes, reopen, earlier, later,
  (size(new_users) + size(new_episodes) > 0 OR reopen OR earlier OR later) AS changed
SET r.user_ids = r.user_ids + new_users, r.episode_ids = r.episode_ids + new_episodes,
  r.valid_to_ts = CASE WHEN reopen THEN null ELSE r.valid_to_ts END,
  r.valid_from_ts = CASE WHEN earlier THEN row.valid_from_ts ELSE r.valid_from_ts END,
  r.last_asserted_ts = CASE WHEN later THEN row.valid_from_ts ELSE r.last_asserted_ts END,
  r.updated_at_ts = CASE WHEN changed THEN $now ELSE r.updated_at_ts END
FOREACH (n IN [x IN [s, t] WHERE NOT $user_id IN x.user_ids] |
  SET n.user_ids = n.user_ids + $user_id,
      n.alias_sources = n.alias_sources + ($user_id + ':' + n.name_norm + ':' + n.name),
      n.updated_at_ts = $now)
RETURN row.idx AS idx, NOT existed AS created, changed
"""
    )


CLOSE_RELATION = f"""
MATCH (s:Entity {{key: $source_key}})-[r:RELATED {{type: $type, scope: $scope}}]->(t:Entity {{key: $target_key}})
WHERE {visible("s")} AND {visible("t")} AND {visible_edge("r")}
WITH r, (r.valid_to_ts IS NULL AND $valid_to_ts >= r.last_asserted_ts) AS closing
SET r.valid_to_ts = CASE WHEN closing THEN $valid_to_ts ELSE r.valid_to_ts END,
  r.episode_ids = CASE WHEN closing AND $episode_id IS NOT NULL AND NOT $episode_id IN r.episode_ids
                       THEN r.episode_ids + $episode_id ELSE r.episode_ids END,
  r.updated_at_ts = CASE WHEN closing THEN $now ELSE r.updated_at_ts END
RETURN closing
"""


MERGE_ENTITIES = f"""
MATCH (c:Entity) WHERE {visible("c")} AND (c.key = $canonical_key OR $canonical_key IN c.merged_keys)
WITH c ORDER BY c.key LIMIT 1
// Write-lock the canonical node before reading the duplicates (Neo4j takes the lock on SET; FalkorDB
// runs a graph's writes one at a time anyway): concurrent merges into one node then run one after
// the other, and the later one finds the duplicates gone.
SET c.merge_lock = true
REMOVE c.merge_lock
WITH c
OPTIONAL MATCH (d:Entity)
  WHERE d.key IN $duplicate_keys AND d.key <> c.key AND d.scope = c.scope AND {visible("d")}
WITH c, collect(d) AS ds
WITH c, ds, [d IN ds | d.key] AS dkeys
CALL {{
  WITH c, dkeys
  OPTIONAL MATCH (d:Entity)-[r:RELATED]->(x:Entity) WHERE d.key IN dkeys
  WITH c, r, CASE WHEN x.key IN dkeys OR x.key = c.key THEN c ELSE x END AS target
  FOREACH (_ IN CASE WHEN r IS NULL OR target.key = c.key THEN [] ELSE [1] END |
    MERGE (c)-[nr:RELATED {{type: r.type, scope: r.scope}}]->(target)
    ON CREATE SET nr.tenant_id = r.tenant_id, nr.user_ids = r.user_ids, nr.episode_ids = r.episode_ids,
      nr.valid_from_ts = r.valid_from_ts, nr.valid_to_ts = r.valid_to_ts, nr.last_asserted_ts = r.last_asserted_ts,
      nr.created_at_ts = r.created_at_ts, nr.updated_at_ts = $now
    ON MATCH SET nr.user_ids = {union("nr.user_ids", "r.user_ids")},
      nr.episode_ids = {union("nr.episode_ids", "r.episode_ids")},
      nr.valid_from_ts = CASE WHEN r.valid_from_ts < nr.valid_from_ts THEN r.valid_from_ts ELSE nr.valid_from_ts END,
      nr.valid_to_ts = CASE WHEN nr.valid_to_ts IS NULL OR r.valid_to_ts IS NULL THEN null
                            WHEN r.valid_to_ts > nr.valid_to_ts THEN r.valid_to_ts ELSE nr.valid_to_ts END,
      nr.last_asserted_ts = CASE WHEN r.last_asserted_ts > nr.last_asserted_ts
                                 THEN r.last_asserted_ts ELSE nr.last_asserted_ts END,
      nr.updated_at_ts = $now)
  RETURN sum(CASE WHEN r IS NOT NULL AND target.key <> c.key THEN 1 ELSE 0 END) AS moved_out,
         sum(CASE WHEN r IS NOT NULL AND target.key = c.key THEN 1 ELSE 0 END) AS loops_out
}}
CALL {{
  WITH c, dkeys
  OPTIONAL MATCH (x:Entity)-[r:RELATED]->(d:Entity) WHERE d.key IN dkeys AND NOT x.key IN dkeys
  WITH c, r, CASE WHEN x.key = c.key THEN c ELSE x END AS source
  FOREACH (_ IN CASE WHEN r IS NULL OR source.key = c.key THEN [] ELSE [1] END |
    MERGE (source)-[nr:RELATED {{type: r.type, scope: r.scope}}]->(c)
    ON CREATE SET nr.tenant_id = r.tenant_id, nr.user_ids = r.user_ids, nr.episode_ids = r.episode_ids,
      nr.valid_from_ts = r.valid_from_ts, nr.valid_to_ts = r.valid_to_ts, nr.last_asserted_ts = r.last_asserted_ts,
      nr.created_at_ts = r.created_at_ts, nr.updated_at_ts = $now
    ON MATCH SET nr.user_ids = {union("nr.user_ids", "r.user_ids")},
      nr.episode_ids = {union("nr.episode_ids", "r.episode_ids")},
      nr.valid_from_ts = CASE WHEN r.valid_from_ts < nr.valid_from_ts THEN r.valid_from_ts ELSE nr.valid_from_ts END,
      nr.valid_to_ts = CASE WHEN nr.valid_to_ts IS NULL OR r.valid_to_ts IS NULL THEN null
                            WHEN r.valid_to_ts > nr.valid_to_ts THEN r.valid_to_ts ELSE nr.valid_to_ts END,
      nr.last_asserted_ts = CASE WHEN r.last_asserted_ts > nr.last_asserted_ts
                                 THEN r.last_asserted_ts ELSE nr.last_asserted_ts END,
      nr.updated_at_ts = $now)
  RETURN sum(CASE WHEN r IS NOT NULL AND source.key <> c.key THEN 1 ELSE 0 END) AS moved_in,
         sum(CASE WHEN r IS NOT NULL AND source.key = c.key THEN 1 ELSE 0 END) AS loops_in
}}
CALL {{
  WITH c, dkeys
  OPTIONAL MATCH (ep:Episode)-[m:MENTIONS]->(d:Entity) WHERE d.key IN dkeys
  FOREACH (_ IN CASE WHEN m IS NULL THEN [] ELSE [1] END | MERGE (ep)-[:MENTIONS]->(c))
  RETURN count(m) AS mentions_moved
}}
SET c.alias_sources = {union("c.alias_sources", concat_lists("ds", "alias_sources"))},
  c.group_sources = {union("coalesce(c.group_sources, [])", concat_lists("ds", "group_sources"))},
  c.aliases = {union("c.aliases", concat_lists("ds", "aliases"))},
  c.alias_norms = {union("c.alias_norms", concat_lists("ds", "alias_norms"))},
  c.user_ids = {union("c.user_ids", concat_lists("ds", "user_ids"))},
  c.episode_ids = {union("c.episode_ids", concat_lists("ds", "episode_ids"))},
  c.merged_keys = {union("c.merged_keys", "reduce(all_items = [], d IN ds | all_items + d.key + d.merged_keys)")},
  c.entity_type = CASE WHEN c.entity_type = '{DEFAULT_ENTITY_TYPE}'
      THEN coalesce(head([d IN ds WHERE d.entity_type <> '{DEFAULT_ENTITY_TYPE}' | d.entity_type]), c.entity_type)
      ELSE c.entity_type END,
  c.created_at_ts = reduce(earliest = c.created_at_ts, d IN ds |
      CASE WHEN d.created_at_ts < earliest THEN d.created_at_ts ELSE earliest END),
  c.updated_at_ts = CASE WHEN size(ds) > 0 THEN $now ELSE c.updated_at_ts END
WITH c, ds, dkeys, moved_out + moved_in AS repointed, loops_out + loops_in AS loops
CALL {{
  WITH ds
  UNWIND ds AS d
  DETACH DELETE d
  RETURN count(*) AS deleted
}}
RETURN c AS canonical, dkeys AS merged_keys, repointed, loops
"""
