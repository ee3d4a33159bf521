"""Reads of the entity graph: lookups by key or normalised name, listing and search, neighbourhoods
with provenance and validity, and per-user counts. Only what the owner may see is returned."""

from __future__ import annotations

from collections.abc import Sequence

from contracts.events import Scope
from services.common.domain.owner import Owner
from services.common.stores.graph.model import (
    EntityRecord,
    GraphResult,
    RelationRecord,
    check_scope,
    entity_record,
    normalise_entity_name,
    relation_record,
)
from services.common.stores.graph.read_queries import (
    COUNT,
    ENTITY_COUNTS_BY_TENANT,
    FIND_BY_NORM,
    GET_ENTITY,
    LIST_ENTITIES,
    SEARCH_ENTITIES,
    START_BY_NAME,
    neighbourhood_query,
)
from services.common.stores.graph.repository_base import GraphRepositoryBase


class GraphReads(GraphRepositoryBase):
    """The reading half of `GraphRepository`."""

    async def get_entity(self, owner: Owner, key: str) -> EntityRecord | None:
        """The node with `key`, or the node it was merged into; None when not visible."""
        resolved = await self.resolve_keys(owner, [key])
        if key not in resolved:
            return None
        records = await self._executor.run(GET_ENTITY, self._params(owner, key=resolved[key]))
        return entity_record(records[0]["entity"]) if records else None

    async def find_entities_by_norm(self, owner: Owner, scope: Scope, name_norms: Sequence[str]) -> list[EntityRecord]:
        """Visible nodes in `scope` whose name or an alias normalises to one of `name_norms`."""
        check_scope(scope)
        norms = sorted({norm for norm in name_norms if norm})
        if not norms:
            return []
        records = await self._executor.run(FIND_BY_NORM, self._params(owner, scope=scope, norms=norms))
        return [entity_record(record["entity"]) for record in records]

    async def list_entities(
        self, owner: Owner, scope: Scope, *, entity_type: str | None = None, limit: int = 10_000
    ) -> list[EntityRecord]:
        """Visible nodes in `scope` (dedup candidate search), ordered by key."""
        check_scope(scope)
        if limit < 1:
            raise ValueError("limit must be at least 1")
        params = self._params(owner, scope=scope, entity_type=entity_type, limit=int(limit))
        return [entity_record(record["entity"]) for record in await self._executor.run(LIST_ENTITIES, params)]

    async def search_entities(
        self, owner: Owner, text: str, limit: int = 10, *, scopes: Sequence[Scope] = ("personal", "team", "org")
    ) -> list[EntityRecord]:
        """Visible nodes whose normalised name or alias contains the normalised `text`; exact matches
        first, then shorter names."""
        for scope in scopes:
            check_scope(scope)
        norm = normalise_entity_name(text)
        if not norm or limit < 1:
            return []
        params = self._params(owner, text=norm, limit=int(limit), scopes=list(scopes))
        return [entity_record(record["entity"]) for record in await self._executor.run(SEARCH_ENTITIES, params)]

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
            records = await self._executor.run(START_BY_NAME, self._params(owner, norm=norm))
            starts = [entity_record(record["entity"]) for record in records]
        if not starts:
            return GraphResult()
        params = self._params(owner, start_keys=[start.key for start in starts], path_limit=int(limit) * hops)
        records = await self._executor.run(neighbourhood_query(hops, current_only), params)
        entities: dict[str, EntityRecord] = {start.key: start for start in starts}
        relations: list[RelationRecord] = []
        seen: set[tuple[str, str, str, str]] = set()
        for record in records:
            source, target = entity_record(record["source"]), entity_record(record["target"])
            relation = relation_record(source.key, record["relation"], target.key)
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

    async def entity_counts_by_tenant(self) -> dict[str, int]:
        """Entity nodes per tenant, across users: an operator's aggregate (like the vector index's
        `list_owners`), never a read on behalf of a user; no names, only counts."""
        records = await self._executor.run(ENTITY_COUNTS_BY_TENANT, {})
        return {str(r["tenant_id"]): int(r["entities"] or 0) for r in records if r.get("tenant_id") is not None}

    async def count(self, owner: Owner) -> dict[str, int]:
        """Nodes and edges the user contributed to, and their Episode nodes, in their tenant."""
        records = await self._executor.run(COUNT, self._params(owner))
        record = records[0] if records else {}
        return {name: int(record.get(name) or 0) for name in ("nodes", "edges", "episodes")}
