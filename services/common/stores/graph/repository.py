"""The entity graph: every Cypher query tiermem sends, portable across FalkorDB and Neo4j.

Model
- `(:Entity {key, tenant_id, scope, name, name_norm, entity_type, aliases, alias_norms, alias_sources,
  user_ids, episode_ids, merged_keys, canonical, created_at_ts, updated_at_ts})`. The key is a uuid5 of
  (tenant, owner part, normalised name): the owner part is "user:<id>" for personal entities and the
  scope for team/org entities, which all users of the tenant share. `user_ids` says which users
  contributed; `alias_sources` holds "<user_id>:<alias_norm>:<alias>" so erasing a user removes the
  surface forms only that user contributed (`aliases` and `alias_norms` are derived from it).
  `merged_keys` lists the keys folded into this node, so a later upsert of a merged name lands here
  instead of re-creating the duplicate.
- `(:Episode {key: episode_id, tenant_id, user_id, session_id, occurred_at_ts})-[:MENTIONS]->(:Entity)`.
- `(:Entity)-[:RELATED {type, scope, tenant_id, user_ids, episode_ids, valid_from_ts, valid_to_ts,
  last_asserted_ts, created_at_ts, updated_at_ts}]->(:Entity)`, one edge per (source, type, scope,
  target); the type is a property because relationship types cannot be parameters. `valid_to_ts` null =
  current.
- Invariant: every user in an edge's `user_ids` is in both endpoints' `user_ids`, so a shared node
  that loses its last user has no edge anybody still needs.

Times are epoch-second floats (`*_ts`): `datetime()` does not exist in FalkorDB.

Visibility: an owner sees personal nodes they contributed to and every team/org node of their tenant;
never another tenant's, never another user's personal nodes. Edges are visible when they are in the
tenant, are not another user's personal edge, and both endpoints are visible.
"""

from __future__ import annotations

import time
import unicodedata
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from contracts.events import Scope
from services.common.domain.owner import Owner
from services.common.stores.graph.port import CypherExecutor

ENTITY_KEY_NAMESPACE = uuid.UUID("5b0c7d3e-8f6a-5d2b-9c41-7e3a2f1d0b64")
DEFAULT_ENTITY_TYPE = "other"
_SCOPES: frozenset[str] = frozenset({"personal", "team", "org"})
# Punctuation that distinguishes names people actually use (C#, F#); '+' is a symbol and kept anyway.
_KEPT_PUNCTUATION = frozenset("#")


class EntityNotFoundError(LookupError):
    """No entity with that key is visible to the owner."""


class RelationNotFoundError(LookupError):
    """No relation with that source, type and target is visible to the owner."""


def normalise_entity_name(name: str) -> str:
    """NFKC + casefold, then drop whitespace, punctuation and control characters, so "온비서" and
    "온 비서", or "DGIA", "dgia" and "D.G.I.A.", normalise alike. Letters, digits, marks and symbols
    stay ("C++" ≠ "C"), as does '#' ("C#" ≠ "C")."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    kept = []
    for char in folded:
        category = unicodedata.category(char)
        if category[0] in "ZC":
            continue
        if category[0] == "P" and char not in _KEPT_PUNCTUATION:
            continue
        kept.append(char)
    # casefold can produce sequences NFKC would compose differently; normalise once more.
    return unicodedata.normalize("NFKC", "".join(kept))


def normalise_relation_type(relation_type: str) -> str:
    """ "Works on", "works-on" and "WORKS_ON" → "works_on"."""
    folded = unicodedata.normalize("NFKC", relation_type).casefold().strip()
    words = "".join(char if char.isalnum() else " " for char in folded).split()
    if not words:
        raise ValueError(f"relation type {relation_type!r} has no letters or digits")
    return "_".join(words)


def _check_scope(scope: str) -> None:
    if scope not in _SCOPES:
        raise ValueError(f"scope must be one of personal, team, org; got {scope!r}")


def entity_key(owner: Owner, scope: Scope, name: str) -> str:
    """Deterministic key of the entity `name` in `scope` for `owner`: personal entities are per user,
    team/org entities are shared by the tenant. The entity type plays no part, so "Kim (person)" and
    "Kim (other)" are one node."""
    _check_scope(scope)
    norm = normalise_entity_name(name)
    if not norm:
        raise ValueError(f"entity name {name!r} has nothing left after normalisation")
    owner_part = f"user:{owner.user_id}" if scope == "personal" else scope
    return str(uuid.uuid5(ENTITY_KEY_NAMESPACE, f"{owner.tenant_id}\x1f{owner_part}\x1f{norm}"))


def _alias_source(user_id: str, alias: str) -> str:
    # user ids and normalised names contain no ':' (normalisation drops punctuation), so both splits
    # are unambiguous even when the alias itself contains ':'.
    return f"{user_id}:{normalise_entity_name(alias)}:{alias}"


@dataclass(frozen=True, slots=True)
class EntityInput:
    """An entity as extracted from an episode."""

    name: str
    entity_type: str = DEFAULT_ENTITY_TYPE
    aliases: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class EpisodeRef:
    """The episode a write came from: provenance on nodes and edges."""

    episode_id: str
    session_id: str
    occurred_at_ts: float


@dataclass(frozen=True, slots=True)
class RelationInput:
    """`source -[relation_type]-> target`; keys as returned by `upsert_entities` or `entity_key`.
    `valid_from_ts` defaults to the episode's time, else now."""

    source_key: str
    relation_type: str
    target_key: str
    valid_from_ts: float | None = None


@dataclass(frozen=True, slots=True)
class EntityUpsertResult:
    key: str
    name: str
    entity_type: str
    aliases: tuple[str, ...]
    created: bool
    changed: bool
    """True when the node was created or any property changed; replays leave it False."""

    @property
    def status(self) -> Literal["created", "changed", "unchanged"]:
        if self.created:
            return "created"
        return "changed" if self.changed else "unchanged"


@dataclass(frozen=True, slots=True)
class RelationUpsertResult:
    source_key: str
    relation_type: str
    target_key: str
    created: bool
    changed: bool


@dataclass(frozen=True, slots=True)
class EntityRecord:
    key: str
    tenant_id: str
    scope: str
    name: str
    name_norm: str
    entity_type: str
    aliases: tuple[str, ...]
    user_ids: tuple[str, ...]
    episode_ids: tuple[str, ...]
    merged_keys: tuple[str, ...]
    created_at_ts: float | None
    updated_at_ts: float | None


@dataclass(frozen=True, slots=True)
class RelationRecord:
    source_key: str
    relation_type: str
    target_key: str
    scope: str
    user_ids: tuple[str, ...]
    episode_ids: tuple[str, ...]
    valid_from_ts: float | None
    valid_to_ts: float | None
    """None while the relation holds."""
    last_asserted_ts: float | None

    @property
    def is_current(self) -> bool:
        return self.valid_to_ts is None


@dataclass(frozen=True, slots=True)
class GraphResult:
    entities: list[EntityRecord] = field(default_factory=list)
    relations: list[RelationRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class MergeResult:
    canonical_key: str
    merged_keys: tuple[str, ...]
    """Duplicates folded into the canonical node by this call (empty on a re-run)."""
    already_merged_keys: tuple[str, ...]
    """Requested duplicates that an earlier merge already folded into the canonical node."""
    not_found_keys: tuple[str, ...]
    """Requested duplicates that are not visible to the owner or not in the canonical node's scope."""
    aliases: tuple[str, ...]
    relations_repointed: int
    self_loops_dropped: int

    @property
    def changed(self) -> bool:
        return bool(self.merged_keys)


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in value) if isinstance(value, list) else ()


def _float_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _entity_record(node: Mapping[str, Any]) -> EntityRecord:
    return EntityRecord(
        key=str(node["key"]),
        tenant_id=str(node.get("tenant_id", "")),
        scope=str(node.get("scope", "")),
        name=str(node.get("name", "")),
        name_norm=str(node.get("name_norm", "")),
        entity_type=str(node.get("entity_type", DEFAULT_ENTITY_TYPE)),
        aliases=_strings(node.get("aliases")),
        user_ids=_strings(node.get("user_ids")),
        episode_ids=_strings(node.get("episode_ids")),
        merged_keys=_strings(node.get("merged_keys")),
        created_at_ts=_float_or_none(node.get("created_at_ts")),
        updated_at_ts=_float_or_none(node.get("updated_at_ts")),
    )


def _relation_record(source_key: str, edge: Mapping[str, Any], target_key: str) -> RelationRecord:
    return RelationRecord(
        source_key=source_key,
        relation_type=str(edge.get("type", "")),
        target_key=target_key,
        scope=str(edge.get("scope", "")),
        user_ids=_strings(edge.get("user_ids")),
        episode_ids=_strings(edge.get("episode_ids")),
        valid_from_ts=_float_or_none(edge.get("valid_from_ts")),
        valid_to_ts=_float_or_none(edge.get("valid_to_ts")),
        last_asserted_ts=_float_or_none(edge.get("last_asserted_ts")),
    )


def _visible(var: str) -> str:
    """Owner may see node `var`: same tenant, and shared or their own personal node."""
    return f"({var}.tenant_id = $tenant_id AND ({var}.scope <> 'personal' OR $user_id IN {var}.user_ids))"


def _visible_edge(var: str) -> str:
    """Owner may see edge `var` (endpoints must be checked with `_visible` as well)."""
    return f"({var}.tenant_id = $tenant_id AND ({var}.scope <> 'personal' OR $user_id IN {var}.user_ids))"


def _distinct(expression: str, acc: str = "acc", item: str = "item") -> str:
    """Cypher: `expression` (a list) without repeats, first occurrence kept."""
    return f"reduce({acc} = [], {item} IN {expression} | CASE WHEN {item} IN {acc} THEN {acc} ELSE {acc} + {item} END)"


def _union(existing: str, extra: str) -> str:
    """Cypher: `existing` followed by the items of `extra` it lacks (no repeats if neither has any)."""
    return f"reduce(acc = {existing}, item IN {extra} | CASE WHEN item IN acc THEN acc ELSE acc + item END)"


def _concat_lists(list_of_nodes: str, attribute: str) -> str:
    return f"reduce(all_items = [], d IN {list_of_nodes} | all_items + coalesce(d.{attribute}, []))"


_EPISODE_MERGE = """
MERGE (ep:Episode {key: $episode_id, tenant_id: $tenant_id, user_id: $user_id})
ON CREATE SET ep.session_id = $session_id, ep.occurred_at_ts = $occurred_at_ts, ep.created_at_ts = $now
WITH ep
"""


def _upsert_entities_query(with_episode: bool) -> str:
    ep = "ep, " if with_episode else ""
    return (
        (_EPISODE_MERGE if with_episode else "")
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
  n.entity_type = row.entity_type, n.aliases = [], n.alias_norms = [], n.alias_sources = [], n.user_ids = [],
  n.episode_ids = [], n.merged_keys = [], n.canonical = true, n.created_at_ts = $now, n.updated_at_ts = $now
WITH {ep}row, n, existed,
  [s IN row.alias_sources WHERE NOT s IN n.alias_sources] AS new_sources,
  [a IN row.aliases WHERE NOT a IN n.aliases] AS new_aliases,
  [a IN row.alias_norms WHERE NOT a IN n.alias_norms] AS new_norms,
  CASE WHEN $user_id IN n.user_ids THEN [] ELSE [$user_id] END AS new_users,
  CASE WHEN $episode_id IS NULL OR $episode_id IN n.episode_ids THEN [] ELSE [$episode_id] END AS new_episodes,
  CASE WHEN n.entity_type = '{DEFAULT_ENTITY_TYPE}' AND row.entity_type <> '{DEFAULT_ENTITY_TYPE}'
       THEN row.entity_type ELSE n.entity_type END AS entity_type
WITH {ep}row, n, existed, new_sources, new_aliases, new_norms, new_users, new_episodes, entity_type,
  (size(new_sources) + size(new_aliases) + size(new_norms) + size(new_users) + size(new_episodes) > 0
   OR entity_type <> n.entity_type) AS changed
SET n.alias_sources = n.alias_sources + new_sources, n.aliases = n.aliases + new_aliases,
  n.alias_norms = n.alias_norms + new_norms, n.user_ids = n.user_ids + new_users,
  n.episode_ids = n.episode_ids + new_episodes, n.entity_type = entity_type,
  n.updated_at_ts = CASE WHEN changed THEN $now ELSE n.updated_at_ts END
"""
        + ("MERGE (ep)-[:MENTIONS]->(n)\n" if with_episode else "")
        + "RETURN row.idx AS idx, n AS entity, NOT existed AS created, changed\n"
    )


def _upsert_relations_query(with_episode: bool) -> str:
    ep = "ep, " if with_episode else ""
    return (
        (_EPISODE_MERGE if with_episode else "")
        + f"""
UNWIND $rows AS row
MATCH (s:Entity {{key: row.source_key}}) WHERE {_visible("s")}
MATCH (t:Entity {{key: row.target_key}}) WHERE {_visible("t")}
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


_CLOSE_RELATION = f"""
MATCH (s:Entity {{key: $source_key}})-[r:RELATED {{type: $type, scope: $scope}}]->(t:Entity {{key: $target_key}})
WHERE {_visible("s")} AND {_visible("t")} AND {_visible_edge("r")}
WITH r, (r.valid_to_ts IS NULL AND $valid_to_ts >= r.last_asserted_ts) AS closing
SET r.valid_to_ts = CASE WHEN closing THEN $valid_to_ts ELSE r.valid_to_ts END,
  r.episode_ids = CASE WHEN closing AND $episode_id IS NOT NULL AND NOT $episode_id IN r.episode_ids
                       THEN r.episode_ids + $episode_id ELSE r.episode_ids END,
  r.updated_at_ts = CASE WHEN closing THEN $now ELSE r.updated_at_ts END
RETURN closing
"""

_RESOLVE_DIRECT = f"""
UNWIND $keys AS requested
MATCH (n:Entity {{key: requested}}) WHERE {_visible("n")}
RETURN requested, n.key AS key
"""

_RESOLVE_REDIRECT = f"""
UNWIND $keys AS requested
MATCH (n:Entity) WHERE {_visible("n")} AND requested IN n.merged_keys
RETURN requested, n.key AS key
"""

_GET_ENTITY = f"""
MATCH (n:Entity {{key: $key}}) WHERE {_visible("n")}
RETURN n AS entity
"""

_FIND_BY_NORM = f"""
MATCH (n:Entity) WHERE {_visible("n")} AND n.scope = $scope
  AND (n.name_norm IN $norms OR any(a IN n.alias_norms WHERE a IN $norms))
RETURN n AS entity ORDER BY n.key
"""

_LIST_ENTITIES = f"""
MATCH (n:Entity) WHERE {_visible("n")} AND n.scope = $scope
  AND ($entity_type IS NULL OR n.entity_type = $entity_type)
RETURN n AS entity ORDER BY n.key LIMIT $limit
"""

_SEARCH_ENTITIES = f"""
MATCH (n:Entity) WHERE {_visible("n")} AND n.scope IN $scopes
  AND (n.name_norm CONTAINS $text OR any(a IN n.alias_norms WHERE a CONTAINS $text))
RETURN n AS entity
ORDER BY CASE WHEN n.name_norm = $text OR $text IN n.alias_norms THEN 0 ELSE 1 END, size(n.name_norm), n.key
LIMIT $limit
"""

_START_BY_NAME = f"""
MATCH (n:Entity) WHERE {_visible("n")} AND (n.name_norm = $norm OR $norm IN n.alias_norms)
RETURN n AS entity ORDER BY n.key
"""


def _neighbourhood_query(hops: int, current_only: bool) -> str:
    # Variable-length bounds cannot be parameters; `hops` is a validated int. FalkorDB cannot filter a
    # path in the WHERE of its own MATCH, hence `WITH p WHERE`.
    current = " AND r.valid_to_ts IS NULL" if current_only else ""
    return f"""
MATCH (start:Entity) WHERE start.key IN $start_keys AND {_visible("start")}
MATCH p = (start)-[:RELATED*1..{hops}]-(other:Entity)
WITH p, length(p) AS hops
WHERE all(n IN nodes(p) WHERE {_visible("n")})
  AND all(r IN relationships(p) WHERE {_visible_edge("r")}{current})
WITH p, hops ORDER BY hops LIMIT $path_limit
WITH collect(p) AS paths
UNWIND range(0, size(paths) - 1) AS position
UNWIND relationships(paths[position]) AS r
WITH r, min(position) AS first_seen
RETURN startNode(r) AS source, r AS relation, endNode(r) AS target, first_seen
ORDER BY first_seen
"""


_MERGE_ENTITIES = f"""
MATCH (c:Entity) WHERE {_visible("c")} AND (c.key = $canonical_key OR $canonical_key IN c.merged_keys)
WITH c ORDER BY c.key LIMIT 1
// Write-lock the canonical node before reading the duplicates (Neo4j takes the lock on SET; FalkorDB
// runs a graph's writes one at a time anyway): concurrent merges into one node then run one after
// the other, and the later one finds the duplicates gone.
SET c.merge_lock = true
REMOVE c.merge_lock
WITH c
OPTIONAL MATCH (d:Entity)
  WHERE d.key IN $duplicate_keys AND d.key <> c.key AND d.scope = c.scope AND {_visible("d")}
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
    ON MATCH SET nr.user_ids = {_union("nr.user_ids", "r.user_ids")},
      nr.episode_ids = {_union("nr.episode_ids", "r.episode_ids")},
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
    ON MATCH SET nr.user_ids = {_union("nr.user_ids", "r.user_ids")},
      nr.episode_ids = {_union("nr.episode_ids", "r.episode_ids")},
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
SET c.alias_sources = {_union("c.alias_sources", _concat_lists("ds", "alias_sources"))},
  c.aliases = {_union("c.aliases", _concat_lists("ds", "aliases"))},
  c.alias_norms = {_union("c.alias_norms", _concat_lists("ds", "alias_norms"))},
  c.user_ids = {_union("c.user_ids", _concat_lists("ds", "user_ids"))},
  c.episode_ids = {_union("c.episode_ids", _concat_lists("ds", "episode_ids"))},
  c.merged_keys = {_union("c.merged_keys", "reduce(all_items = [], d IN ds | all_items + d.key + d.merged_keys)")},
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
       ELSE n.alias_sources END AS sources
WITH n, episodes, users, sources, [s IN sources | split(s, ':')] AS parts
WITH n, episodes, users, sources,
  [i IN range(0, size(sources) - 1) |
     substring(sources[i], size(parts[i][0]) + size(parts[i][1]) + 2)] AS source_aliases,
  [p IN parts | p[1]] AS source_norms
WITH n, episodes, users, sources, source_norms,
  """
        + _distinct("source_aliases")
        + """ AS aliases,
  """
        + _distinct("source_norms")
        + """ AS norms,
  (size(source_aliases) = 0 OR n.name IN source_aliases) AS keep_name
SET n.episode_ids = episodes, n.user_ids = users, n.alias_sources = sources, n.aliases = aliases,
  n.alias_norms = norms,
  n.name = CASE WHEN keep_name THEN n.name ELSE head(aliases) END,
  n.name_norm = CASE WHEN keep_name THEN n.name_norm ELSE head(source_norms) END,
  n.updated_at_ts = $now
WITH n, size(users) = 0 AS orphan
FOREACH (_ IN CASE WHEN orphan THEN [1] ELSE [] END | DETACH DELETE n)
RETURN sum(CASE WHEN orphan THEN 1 ELSE 0 END) AS deleted, sum(CASE WHEN orphan THEN 0 ELSE 1 END) AS updated
"""
    )
    return edges, nodes


_REMOVE_FROM_EDGES, _REMOVE_FROM_NODES = _remove_contribution_queries()

_USER_EPISODES = """
MATCH (ep:Episode {tenant_id: $tenant_id, user_id: $user_id})
RETURN collect(ep.key) AS episode_ids
"""

_DELETE_USER_EPISODES = """
MATCH (ep:Episode {tenant_id: $tenant_id, user_id: $user_id})
DETACH DELETE ep
RETURN count(ep) AS deleted
"""

_DELETE_EPISODE = """
MATCH (ep:Episode {key: $episode_id, tenant_id: $tenant_id, user_id: $user_id})
DETACH DELETE ep
RETURN count(ep) AS deleted
"""

_COUNT = """
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


class GraphRepository:
    """All reads and writes of the entity graph. Every method takes an `Owner`; every query filters on
    its tenant and user. Writes are idempotent (MERGE, list unions), so redelivered events are safe."""

    def __init__(self, executor: CypherExecutor, *, clock: Callable[[], float] = time.time) -> None:
        self._executor = executor
        self._clock = clock

    @property
    def executor(self) -> CypherExecutor:
        """The executor underneath (bootstrap at start-up, close at shutdown)."""
        return self._executor

    def _params(self, owner: Owner, **extra: Any) -> dict[str, Any]:
        return {"tenant_id": owner.tenant_id, "user_id": owner.user_id, "now": float(self._clock()), **extra}

    @staticmethod
    def _episode_params(episode: EpisodeRef | None) -> dict[str, Any]:
        if episode is None:
            return {"episode_id": None}
        if not episode.episode_id:
            raise ValueError("episode_id must not be empty")
        return {
            "episode_id": episode.episode_id,
            "session_id": episode.session_id,
            "occurred_at_ts": float(episode.occurred_at_ts),
        }

    # ----------------------------------------------------------------- writes

    async def upsert_entities(
        self, owner: Owner, scope: Scope, entities: Sequence[EntityInput], episode: EpisodeRef | None = None
    ) -> list[EntityUpsertResult]:
        """Create or extend one node per distinct normalised name (inputs that normalise alike are
        folded together). Results come in the order of first appearance; `changed` is False on a
        replay, so callers publish EntityUpserted only for real changes."""
        _check_scope(scope)
        rows: dict[str, dict[str, Any]] = {}
        for entity in entities:
            name = entity.name.strip()
            key = entity_key(owner, scope, name)
            entity_type = entity.entity_type.strip().casefold() or DEFAULT_ENTITY_TYPE
            row = rows.get(key)
            if row is None:
                row = {
                    "idx": len(rows),
                    "key": key,
                    "name": name,
                    "name_norm": normalise_entity_name(name),
                    "entity_type": entity_type,
                    "aliases": [],
                    "alias_norms": [],
                    "alias_sources": [],
                }
                rows[key] = row
            elif row["entity_type"] == DEFAULT_ENTITY_TYPE:
                row["entity_type"] = entity_type
            for alias in (name, *entity.aliases):
                alias = alias.strip()
                alias_norm = normalise_entity_name(alias)
                if not alias_norm:
                    continue
                if alias not in row["aliases"]:
                    row["aliases"].append(alias)
                    row["alias_sources"].append(_alias_source(owner.user_id, alias))
                if alias_norm not in row["alias_norms"]:
                    row["alias_norms"].append(alias_norm)
        if not rows:
            return []
        params = self._params(owner, scope=scope, rows=list(rows.values()), **self._episode_params(episode))
        records = await self._executor.run(_upsert_entities_query(episode is not None), params)
        if len(records) != len(rows):
            raise RuntimeError(f"entity upsert wrote {len(records)} of {len(rows)} entities; nothing may be dropped")
        results: list[EntityUpsertResult] = []
        for record in sorted(records, key=lambda item: int(item["idx"])):
            node = _entity_record(record["entity"])
            results.append(
                EntityUpsertResult(
                    key=node.key,
                    name=node.name,
                    entity_type=node.entity_type,
                    aliases=node.aliases,
                    created=bool(record["created"]),
                    changed=bool(record["changed"]),
                )
            )
        return results

    async def resolve_keys(self, owner: Owner, keys: Sequence[str]) -> dict[str, str]:
        """Requested key → key of the live node visible to the owner, following merges. Keys that
        resolve to nothing are absent from the result."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        resolved: dict[str, str] = {}
        for record in await self._executor.run(_RESOLVE_DIRECT, self._params(owner, keys=wanted)):
            resolved[str(record["requested"])] = str(record["key"])
        missing = [key for key in wanted if key not in resolved]
        if missing:
            for record in await self._executor.run(_RESOLVE_REDIRECT, self._params(owner, keys=missing)):
                resolved.setdefault(str(record["requested"]), str(record["key"]))
        return resolved

    async def upsert_relations(
        self,
        owner: Owner,
        scope: Scope,
        relations: Sequence[RelationInput],
        episode: EpisodeRef | None = None,
    ) -> list[RelationUpsertResult]:
        """MERGE one edge per (source, type, scope, target). An assertion newer than the edge's
        `valid_to_ts` reopens it; replays change nothing. Raises EntityNotFoundError (before writing
        anything) when an endpoint is not visible to the owner."""
        _check_scope(scope)
        if not relations:
            return []
        resolved = await self.resolve_keys(
            owner, [key for rel in relations for key in (rel.source_key, rel.target_key)]
        )
        missing = sorted({key for rel in relations for key in (rel.source_key, rel.target_key)} - resolved.keys())
        if missing:
            raise EntityNotFoundError(f"relation endpoints not found for tenant {owner.tenant_id}: {missing}")
        default_ts = episode.occurred_at_ts if episode is not None else self._clock()
        rows: dict[tuple[str, str, str], dict[str, Any]] = {}
        for relation in relations:
            source, target = resolved[relation.source_key], resolved[relation.target_key]
            if source == target:
                raise ValueError(
                    f"relation {relation.relation_type!r} would connect entity {source} to itself "
                    f"(requested {relation.source_key} → {relation.target_key})"
                )
            relation_type = normalise_relation_type(relation.relation_type)
            valid_from = float(relation.valid_from_ts if relation.valid_from_ts is not None else default_ts)
            row_key = (source, relation_type, target)
            row = rows.get(row_key)
            if row is None:
                rows[row_key] = {
                    "idx": len(rows),
                    "source_key": source,
                    "type": relation_type,
                    "target_key": target,
                    "valid_from_ts": valid_from,
                }
            else:
                row["valid_from_ts"] = min(row["valid_from_ts"], valid_from)
        params = self._params(owner, scope=scope, rows=list(rows.values()), **self._episode_params(episode))
        records = await self._executor.run(_upsert_relations_query(episode is not None), params)
        if len(records) != len(rows):
            raise EntityNotFoundError(
                f"relation upsert wrote {len(records)} of {len(rows)} relations: an endpoint disappeared "
                "(merged or erased) while writing; retry"
            )
        by_index = {int(record["idx"]): record for record in records}
        return [
            RelationUpsertResult(
                source_key=row["source_key"],
                relation_type=row["type"],
                target_key=row["target_key"],
                created=bool(by_index[row["idx"]]["created"]),
                changed=bool(by_index[row["idx"]]["changed"]),
            )
            for row in rows.values()
        ]

    async def close_relation(
        self,
        owner: Owner,
        scope: Scope,
        source_key: str,
        relation_type: str,
        target_key: str,
        *,
        valid_to_ts: float | None = None,
        episode: EpisodeRef | None = None,
    ) -> bool:
        """Mark a relation as ended at `valid_to_ts` (default: the episode's time, else now). True when
        this call closed it; False when it was already closed or was re-asserted after that time (a
        replayed close never undoes a newer assertion). Raises RelationNotFoundError."""
        _check_scope(scope)
        resolved = await self.resolve_keys(owner, [source_key, target_key])
        if source_key not in resolved or target_key not in resolved:
            raise RelationNotFoundError(f"no visible relation {source_key} -[{relation_type}]-> {target_key}")
        if valid_to_ts is None:
            valid_to_ts = episode.occurred_at_ts if episode is not None else self._clock()
        params = self._params(
            owner,
            scope=scope,
            source_key=resolved[source_key],
            target_key=resolved[target_key],
            type=normalise_relation_type(relation_type),
            valid_to_ts=float(valid_to_ts),
            episode_id=episode.episode_id if episode is not None else None,
        )
        records = await self._executor.run(_CLOSE_RELATION, params)
        if not records:
            raise RelationNotFoundError(f"no visible relation {source_key} -[{relation_type}]-> {target_key}")
        return any(bool(record["closing"]) for record in records)

    async def merge_entities(self, owner: Owner, canonical_key: str, duplicate_keys: Sequence[str]) -> MergeResult:
        """Fold duplicates into the canonical node in ONE query (FalkorDB runs a graph's writes one at a
        time, Neo4j in one transaction): aliases, users, episodes and merged keys are unioned; every
        RELATED edge (in and out) and MENTIONS edge is re-pointed and merged with an existing edge of
        the same (type, scope, other end); edges that would become self-loops are dropped; the
        duplicates are DETACH DELETEd. Only duplicates in the canonical node's scope and visible to
        the owner are merged. Re-running, or running concurrently, is a no-op for keys already merged.
        Raises EntityNotFoundError when the canonical node is not visible."""
        duplicates = [key for key in dict.fromkeys(duplicate_keys) if key != canonical_key]
        records = await self._executor.run(
            _MERGE_ENTITIES, self._params(owner, canonical_key=canonical_key, duplicate_keys=duplicates)
        )
        if not records:
            raise EntityNotFoundError(f"canonical entity {canonical_key} is not visible to {owner.tenant_id}")
        record = records[0]
        canonical = _entity_record(record["canonical"])
        merged = tuple(str(key) for key in record["merged_keys"])
        already = tuple(key for key in duplicates if key not in merged and key in canonical.merged_keys)
        not_found = tuple(
            key for key in duplicates if key not in merged and key not in already and key != canonical.key
        )
        return MergeResult(
            canonical_key=canonical.key,
            merged_keys=merged,
            already_merged_keys=already,
            not_found_keys=not_found,
            aliases=canonical.aliases,
            relations_repointed=int(record["repointed"] or 0),
            self_loops_dropped=int(record["loops"] or 0),
        )

    async def delete_user_data(self, owner: Owner) -> dict[str, int]:
        """Erase the user from the tenant's graph: their personal nodes and edges go; shared (team/org)
        nodes and edges lose the user, the user's episodes and the aliases only they contributed, and
        go when no user remains; the user's Episode nodes go. Idempotent."""
        base = self._params(owner)
        episodes = await self._executor.run(_USER_EPISODES, base)
        episode_ids = [str(key) for key in episodes[0]["episode_ids"]] if episodes else []
        params = {
            **base,
            "match_user": True,
            "drop_episode_ids": episode_ids,
            "keep_episode_ids": [],
            "source_prefix": f"{owner.user_id}:",
        }
        edges = await self._executor.run(_REMOVE_FROM_EDGES, params)
        nodes = await self._executor.run(_REMOVE_FROM_NODES, params)
        deleted_episodes = await self._executor.run(_DELETE_USER_EPISODES, base)
        return {
            "relations_deleted": int(edges[0]["deleted"] or 0) if edges else 0,
            "relations_updated": int(edges[0]["updated"] or 0) if edges else 0,
            "entities_deleted": int(nodes[0]["deleted"] or 0) if nodes else 0,
            "entities_updated": int(nodes[0]["updated"] or 0) if nodes else 0,
            "episodes_deleted": int(deleted_episodes[0]["deleted"] or 0) if deleted_episodes else 0,
        }

    async def delete_episode(self, owner: Owner, episode_id: str) -> dict[str, int]:
        """Erase what one episode of the owner contributed: its id leaves every node and edge; the
        owner leaves those no other episode of theirs supports; nodes and edges left without users go;
        the Episode node goes last (so a crashed run is redone in full). Other users' episodes are
        untouchable: the episode must belong to the owner."""
        base = self._params(owner)
        episodes = await self._executor.run(_USER_EPISODES, base)
        owned = {str(key) for key in episodes[0]["episode_ids"]} if episodes else set()
        counts = {
            "relations_deleted": 0,
            "relations_updated": 0,
            "entities_deleted": 0,
            "entities_updated": 0,
            "episodes_deleted": 0,
        }
        if episode_id not in owned:
            return counts
        params = {
            **base,
            "match_user": False,
            "drop_episode_ids": [episode_id],
            "keep_episode_ids": sorted(owned - {episode_id}),
            "source_prefix": f"{owner.user_id}:",
        }
        edges = await self._executor.run(_REMOVE_FROM_EDGES, params)
        nodes = await self._executor.run(_REMOVE_FROM_NODES, params)
        deleted = await self._executor.run(_DELETE_EPISODE, {**base, "episode_id": episode_id})
        counts["relations_deleted"] = int(edges[0]["deleted"] or 0) if edges else 0
        counts["relations_updated"] = int(edges[0]["updated"] or 0) if edges else 0
        counts["entities_deleted"] = int(nodes[0]["deleted"] or 0) if nodes else 0
        counts["entities_updated"] = int(nodes[0]["updated"] or 0) if nodes else 0
        counts["episodes_deleted"] = int(deleted[0]["deleted"] or 0) if deleted else 0
        return counts

    # ------------------------------------------------------------------ reads

    async def get_entity(self, owner: Owner, key: str) -> EntityRecord | None:
        """The node with `key`, or the node it was merged into; None when not visible."""
        resolved = await self.resolve_keys(owner, [key])
        if key not in resolved:
            return None
        records = await self._executor.run(_GET_ENTITY, self._params(owner, key=resolved[key]))
        return _entity_record(records[0]["entity"]) if records else None

    async def find_entities_by_norm(self, owner: Owner, scope: Scope, name_norms: Sequence[str]) -> list[EntityRecord]:
        """Visible nodes in `scope` whose name or an alias normalises to one of `name_norms`."""
        _check_scope(scope)
        norms = sorted({norm for norm in name_norms if norm})
        if not norms:
            return []
        records = await self._executor.run(_FIND_BY_NORM, self._params(owner, scope=scope, norms=norms))
        return [_entity_record(record["entity"]) for record in records]

    async def list_entities(
        self, owner: Owner, scope: Scope, *, entity_type: str | None = None, limit: int = 10_000
    ) -> list[EntityRecord]:
        """Visible nodes in `scope` (dedup candidate search), ordered by key."""
        _check_scope(scope)
        if limit < 1:
            raise ValueError("limit must be at least 1")
        params = self._params(owner, scope=scope, entity_type=entity_type, limit=int(limit))
        return [_entity_record(record["entity"]) for record in await self._executor.run(_LIST_ENTITIES, params)]

    async def search_entities(
        self, owner: Owner, text: str, limit: int = 10, *, scopes: Sequence[Scope] = ("personal", "team", "org")
    ) -> list[EntityRecord]:
        """Visible nodes whose normalised name or alias contains the normalised `text`; exact matches
        first, then shorter names."""
        for scope in scopes:
            _check_scope(scope)
        norm = normalise_entity_name(text)
        if not norm or limit < 1:
            return []
        params = self._params(owner, text=norm, limit=int(limit), scopes=list(scopes))
        return [_entity_record(record["entity"]) for record in await self._executor.run(_SEARCH_ENTITIES, params)]

    async def neighbourhood(
        self,
        owner: Owner,
        *,
        entity_key: str | None = None,
        name: str | None = None,
        hops: int = 2,
        limit: int = 50,
        current_only: bool = False,
    ) -> GraphResult:
        """Entities and relations within `hops` (1-3) of the start entity (by key, or every visible
        entity whose name or alias normalises like `name`), nearest first, at most `limit` relations.
        Relations carry their provenance (users, episode ids) and validity (valid_from/valid_to)."""
        if not 1 <= hops <= 3:
            raise ValueError(f"hops must be 1, 2 or 3; got {hops}")
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if (entity_key is None) == (name is None):
            raise ValueError("give exactly one of entity_key or name")
        if entity_key is not None:
            start = await self.get_entity(owner, entity_key)
            starts = [start] if start is not None else []
        else:
            assert name is not None
            norm = normalise_entity_name(name)
            if not norm:
                return GraphResult()
            records = await self._executor.run(_START_BY_NAME, self._params(owner, norm=norm))
            starts = [_entity_record(record["entity"]) for record in records]
        if not starts:
            return GraphResult()
        params = self._params(owner, start_keys=[start.key for start in starts], path_limit=int(limit) * hops)
        records = await self._executor.run(_neighbourhood_query(hops, current_only), params)
        entities: dict[str, EntityRecord] = {start.key: start for start in starts}
        relations: list[RelationRecord] = []
        seen: set[tuple[str, str, str, str]] = set()
        for record in records:
            source, target = _entity_record(record["source"]), _entity_record(record["target"])
            relation = _relation_record(source.key, record["relation"], target.key)
            identity = (relation.source_key, relation.relation_type, relation.scope, relation.target_key)
            if identity in seen:
                continue
            seen.add(identity)
            relations.append(relation)
            entities.setdefault(source.key, source)
            entities.setdefault(target.key, target)
            if len(relations) >= limit:
                break
        return GraphResult(entities=list(entities.values()), relations=relations)

    async def count(self, owner: Owner) -> dict[str, int]:
        """Nodes and edges the user contributed to, and their Episode nodes, in their tenant."""
        records = await self._executor.run(_COUNT, self._params(owner))
        record = records[0] if records else {}
        return {name: int(record.get(name) or 0) for name in ("nodes", "edges", "episodes")}
