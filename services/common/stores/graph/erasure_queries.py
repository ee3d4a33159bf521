"""The Cypher that erases from the entity graph (see `model`): a user's or one episode's contribution
leaves edges and nodes, and their Episode nodes go."""

from __future__ import annotations

from services.common.stores.graph.cypher import distinct


def _remove_contribution_queries() -> tuple[str, str]:
    """Remove a user's (or one episode's) contribution from edges, then from nodes; delete what no
    user supports any more. Used by erasure of a user (`$match_user` true, no episode kept) and of one
    episode (`$match_user` false, the user's other episodes kept). Edges first: a node that loses its
    last user then has no edge left that anybody needs (see the module invariant)."""
    edges = """
MATCH (:Entity)-[r:RELATED]->(:Entity)
WHERE r.tenant_id = $tenant_id
  AND (($match_user AND $user_id IN r.user_ids) OR any(e IN r.episode_ids WHERE e IN $drop_episode_ids))
WITH r, [e IN r.episode_ids WHERE NOT e IN $drop_episode_ids] AS episodes
WITH r, episodes, NOT any(e IN episodes WHERE e IN $keep_episode_ids) AS drop_user
WITH r, episodes, CASE WHEN drop_user THEN [u IN r.user_ids WHERE u <> $user_id] ELSE r.user_ids END AS users
SET r.episode_ids = episodes, r.user_ids = users, r.updated_at_ts = $now
WITH r, size(users) = 0 AS orphan
FOREACH (_ IN CASE WHEN orphan THEN [1] ELSE [] END | DELETE r)
RETURN sum(CASE WHEN orphan THEN 1 ELSE 0 END) AS deleted, sum(CASE WHEN orphan THEN 0 ELSE 1 END) AS updated
"""
    nodes = (
        """
MATCH (n:Entity)
WHERE n.tenant_id = $tenant_id
  AND (($match_user AND ($user_id IN n.user_ids OR any(s IN n.alias_sources WHERE s STARTS WITH $source_prefix)))
       OR any(e IN n.episode_ids WHERE e IN $drop_episode_ids))
WITH n, [e IN n.episode_ids WHERE NOT e IN $drop_episode_ids] AS episodes
WITH n, episodes, NOT any(e IN episodes WHERE e IN $keep_episode_ids) AS drop_user
WITH n, episodes,
  CASE WHEN drop_user THEN [u IN n.user_ids WHERE u <> $user_id] ELSE n.user_ids END AS users,
  CASE WHEN drop_user THEN [s IN n.alias_sources WHERE NOT s STARTS WITH $source_prefix]
       ELSE n.alias_sources END AS sources,
  CASE WHEN drop_user THEN [s IN coalesce(n.group_sources, []) WHERE NOT s STARTS WITH $source_prefix]
       ELSE coalesce(n.group_sources, []) END AS group_sources
WITH n, episodes, users, sources, group_sources, [s IN sources | split(s, ':')] AS parts
WITH n, episodes, users, sources, group_sources,
  [i IN range(0, size(sources) - 1) |
     substring(sources[i], size(parts[i][0]) + size(parts[i][1]) + 2)] AS source_aliases,
  [p IN parts | p[1]] AS source_norms
WITH n, episodes, users, sources, group_sources, source_norms,
  """
        + distinct("source_aliases")
        + """ AS aliases,
  """
        + distinct("source_norms")
        + """ AS norms,
  (size(source_aliases) = 0 OR n.name IN source_aliases) AS keep_name
SET n.episode_ids = episodes, n.user_ids = users, n.alias_sources = sources, n.aliases = aliases,
  n.alias_norms = norms, n.group_sources = group_sources,
  n.name = CASE WHEN keep_name THEN n.name ELSE head(aliases) END,
  n.name_norm = CASE WHEN keep_name THEN n.name_norm ELSE head(source_norms) END,
  n.updated_at_ts = $now
WITH n, size(users) = 0 AS orphan
FOREACH (_ IN CASE WHEN orphan THEN [1] ELSE [] END | DETACH DELETE n)
RETURN sum(CASE WHEN orphan THEN 1 ELSE 0 END) AS deleted, sum(CASE WHEN orphan THEN 0 ELSE 1 END) AS updated
"""
    )
    return edges, nodes


REMOVE_FROM_EDGES, REMOVE_FROM_NODES = _remove_contribution_queries()

USER_EPISODES = """
MATCH (ep:Episode {tenant_id: $tenant_id, user_id: $user_id})
RETURN collect(ep.key) AS episode_ids
"""

DELETE_USER_EPISODES = """
MATCH (ep:Episode {tenant_id: $tenant_id, user_id: $user_id})
DETACH DELETE ep
RETURN count(ep) AS deleted
"""

DELETE_EPISODE = """
MATCH (ep:Episode {key: $episode_id, tenant_id: $tenant_id, user_id: $user_id})
DETACH DELETE ep
RETURN count(ep) AS deleted
"""
