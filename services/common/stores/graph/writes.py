"""Writes to the entity graph: upserting entities and relations with their episode provenance,
closing relations, merging duplicate entities. All idempotent, so redelivered events are safe."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contracts.events import Channel, Scope
from services.common.domain.owner import Owner
from services.common.stores.graph.model import (
    DEFAULT_ENTITY_TYPE,
    EntityInput,
    EntityNotFoundError,
    EntityUpsertResult,
    EntityUpserts,
    EpisodeRef,
    MergeResult,
    RelationInput,
    RelationNotFoundError,
    RelationUpsertResult,
    alias_source,
    check_scope,
    entity_key,
    entity_record,
    group_source,
    normalise_entity_name,
    normalise_relation_type,
)
from services.common.stores.graph.repository_base import GraphRepositoryBase
from services.common.stores.graph.write_queries import (
    CLOSE_RELATION,
    MERGE_ENTITIES,
    upsert_entities_query,
    upsert_relations_query,
)


def _entity_rows(
    owner: Owner, scope: Scope, entities: Sequence[EntityInput], channel: Channel
) -> dict[str, dict[str, Any]]:
    """One `$rows` entry per entity key, in order of first appearance: inputs that normalise alike
    are folded together (aliases unioned, the first specific type wins over the default). Surface
    forms seen in a group session are recorded in `group_sources` (see `model`)."""
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
                "group_sources": [],
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
                row["alias_sources"].append(alias_source(owner.user_id, alias))
            if alias_norm not in row["alias_norms"]:
                row["alias_norms"].append(alias_norm)
            source = group_source(owner.user_id, alias)
            if channel == "group" and source not in row["group_sources"]:
                row["group_sources"].append(source)
    return rows


def _relation_rows(
    relations: Sequence[RelationInput], resolved: Mapping[str, str], default_ts: float
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """One `$rows` entry per (live source, normalised type, live target), in order of first
    appearance; repeats keep the earliest `valid_from_ts`. Raises ValueError for a self-loop."""
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
    return rows


class GraphWrites(GraphRepositoryBase):
    """The writing half of `GraphRepository`."""

    async def upsert_entities(
        self,
        owner: Owner,
        scope: Scope,
        entities: Sequence[EntityInput],
        episode: EpisodeRef | None = None,
        *,
        channel: Channel = "private",
    ) -> EntityUpserts:
        """Create or extend one node per distinct normalised name (inputs that normalise alike are
        folded together). Results come in the order of first appearance, with each input name's live
        key; `changed` is False on a replay, so callers publish EntityUpserted only for real changes.
        `channel` is the session's: only names from a group session are visible in group channels."""
        check_scope(scope)
        rows = _entity_rows(owner, scope, entities, channel)
        if not rows:
            return EntityUpserts([], {})
        params = self._params(owner, scope=scope, rows=list(rows.values()), **self._episode_params(episode))
        records = await self._executor.run(upsert_entities_query(episode is not None), params)
        if len(records) != len(rows):
            raise RuntimeError(f"entity upsert wrote {len(records)} of {len(rows)} entities; nothing may be dropped")
        results: list[EntityUpsertResult] = []
        for record in sorted(records, key=lambda item: int(item["idx"])):
            node = entity_record(record["entity"])
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
        # rows and results are both in order of first appearance, one per input key.
        live_keys = {row["name_norm"]: result.key for row, result in zip(rows.values(), results, strict=True)}
        return EntityUpserts(results, live_keys)

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
        check_scope(scope)
        if not relations:
            return []
        resolved = await self.resolve_keys(
            owner, [key for rel in relations for key in (rel.source_key, rel.target_key)]
        )
        missing = sorted({key for rel in relations for key in (rel.source_key, rel.target_key)} - resolved.keys())
        if missing:
            raise EntityNotFoundError(f"relation endpoints not found for tenant {owner.tenant_id}: {missing}")
        default_ts = episode.occurred_at_ts if episode is not None else self._clock()
        rows = _relation_rows(relations, resolved, default_ts)
        params = self._params(owner, scope=scope, rows=list(rows.values()), **self._episode_params(episode))
        records = await self._executor.run(upsert_relations_query(episode is not None), params)
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
        check_scope(scope)
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
        records = await self._executor.run(CLOSE_RELATION, params)
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
            MERGE_ENTITIES, self._params(owner, canonical_key=canonical_key, duplicate_keys=duplicates)
        )
        if not records:
            raise EntityNotFoundError(f"canonical entity {canonical_key} is not visible to {owner.tenant_id}")
        record = records[0]
        canonical = entity_record(record["canonical"])
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
