"""L2, on demand: the knowledge graph around an entity, with each entity's and relation's provenance
limited to the requesting user's own episodes."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from services.common.domain.ids import is_uuid
from services.common.domain.owner import Owner
from services.common.gateways.keywords import FALLBACK_MARKS
from services.common.runtime.resources import Resources
from services.common.stores.episodes import Episode
from services.common.stores.graph.repository import (
    EntityRecord,
    GraphRepository,
    RelationRecord,
    channel_view,
    matches_text,
    normalise_entity_name,
)
from services.recall_api.errors import StoreUnavailable
from services.recall_api.retrieval.memory_records import graph_provenance
from services.recall_api.schemas import GraphSearchRequest, GraphSearchResponse
from services.recall_api.settings import RecallApiSettings

log = logging.getLogger(__name__)

_MAX_STARTS = 5  # entities whose neighbourhood is read
_MAX_KEYWORDS = 12  # keywords of a free-text query tried as entity names


class GraphSearch:
    def __init__(self, settings: RecallApiSettings, resources: Resources) -> None:
        self.settings = settings
        self.resources = resources

    async def graph_search(self, tenant_id: str, request: GraphSearchRequest) -> GraphSearchResponse:
        """Entities and relations around the entity named by `entity` (key or exact name) or found in
        `query`, `hops` deep. Provenance lists only the requesting user's own episodes; in a group
        channel only what a group session of the user supports is returned."""
        if not request.entity and not request.query:
            raise ValueError("give `query` or `entity`")
        owner = Owner(tenant_id, request.user_id)
        limit = request.limit or self.settings.graph_default_limit
        graph = await self._graph()
        if request.entity:
            starts = await self._named_entity(graph, owner, request.entity, request.channel)
        else:
            assert request.query is not None
            starts = await self._entities_in_text(graph, owner, request.query, request.channel)
        entities: dict[str, EntityRecord] = {s.key: s for s in starts}
        relations: list[RelationRecord] = []
        seen: set[tuple[str, str, str, str]] = set()
        for start in starts[:_MAX_STARTS]:
            result = await graph.neighbourhood(owner, entity_key=start.key, hops=request.hops, limit=limit)
            for entity in result.entities:
                entities.setdefault(entity.key, entity)
            for relation in result.relations:
                identity = (relation.source_key, relation.relation_type, relation.scope, relation.target_key)
                if identity not in seen:
                    seen.add(identity)
                    relations.append(relation)
        relations = relations[:limit]
        return await self._graph_response(owner, list(entities.values()), relations, request.channel)

    async def _graph(self) -> GraphRepository:
        try:
            return await self.resources.graph()
        except Exception as exc:
            log.error("the graph store is not reachable: %s: %s", type(exc).__name__, exc)
            raise StoreUnavailable("the graph store is not reachable") from exc

    @staticmethod
    async def _named_entity(graph: GraphRepository, owner: Owner, entity: str, channel: str) -> list[EntityRecord]:
        """The entity with this key, else those with exactly this name, else the best name match;
        in a group channel only by the names a group session used."""
        starts: list[EntityRecord] = []
        if is_uuid(entity):
            record = await graph.get_entity(owner, entity)
            starts = _in_channel([record] if record else [], channel)
        if not starts:
            starts = _in_channel(await graph.search_entities(owner, entity, limit=5), channel, entity)
            starts = [s for s in starts if s.name_norm == normalise_entity_name(entity)] or starts[:1]
        return starts

    async def _entities_in_text(
        self, graph: GraphRepository, owner: Owner, text: str, channel: str
    ) -> list[EntityRecord]:
        """Entities whose name the text is, or contains: the whole text first, then its keywords
        (Korean morphemes too, so "온비서에서" finds "온비서"); in a group channel only by the names a
        group session used."""
        found: dict[str, EntityRecord] = {}
        for record in _in_channel(await graph.search_entities(owner, text, limit=5), channel, text):
            found.setdefault(record.key, record)
        if found:
            return list(found.values())
        terms = [t for t in self.resources.keywords().tokens(text) if not t.startswith(FALLBACK_MARKS) and len(t) >= 2]
        seen: set[str] = set()
        for term in terms:
            if term in seen:
                continue
            seen.add(term)
            for record in _in_channel(await graph.search_entities(owner, term, limit=3), channel, term):
                if _keyword_names(term, record):
                    found.setdefault(record.key, record)
            if len(seen) >= _MAX_KEYWORDS:
                break
        return list(found.values())

    async def _graph_response(
        self, owner: Owner, entities: list[EntityRecord], relations: list[RelationRecord], channel: str
    ) -> GraphSearchResponse:
        episode_ids = sorted(
            {e for entity in entities for e in entity.episode_ids} | {e for rel in relations for e in rel.episode_ids}
        )
        # Only the owner's own episodes come back: other users' episode ids on shared nodes stay hidden.
        store = await self.resources.episodes()
        own = {episode.episode_id: episode for episode in await store.get(owner, episode_ids)}
        entities = _in_channel(entities, channel)
        entity_rows = _entity_rows(entities, own, channel)
        visible_keys = {row["key"] for row in entity_rows}
        names = {entity.key: entity.name for entity in entities}
        return GraphSearchResponse(
            entities=entity_rows, relations=_relation_rows(relations, names, visible_keys, own, channel)
        )


def _in_channel(records: Sequence[EntityRecord], channel: str, text: str | None = None) -> list[EntityRecord]:
    """The records as `channel` may see them (a group channel: only names and aliases from group
    sessions), and, for a search, only those still matching `text` by such a name."""
    viewed = [view for record in records if (view := channel_view(record, channel)) is not None]
    return [record for record in viewed if text is None or channel != "group" or matches_text(record, text)]


def _keyword_names(term: str, record: EntityRecord) -> bool:
    """A keyword matches an entity when it is the name (or alias) or a large part of it."""
    names = [record.name_norm, *(normalise_entity_name(a) for a in record.aliases)]
    return any(term == name or (len(term) >= 3 and term in name and len(term) * 2 >= len(name)) for name in names)


def _provenance(ids: Sequence[str], own: Mapping[str, Episode], channel: str) -> list[dict[str, Any]]:
    """The owner's own episodes among `ids` that are visible in `channel`."""
    out = []
    for episode_id in ids:
        episode = own.get(episode_id)
        entry = graph_provenance(episode, channel) if episode is not None else None
        if entry is not None:
            out.append(entry)
    return out


def _entity_rows(entities: Sequence[EntityRecord], own: Mapping[str, Episode], channel: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for entity in entities:
        sources = _provenance(entity.episode_ids, own, channel)
        if channel == "group" and not sources:
            continue
        rows.append(
            {
                "key": entity.key,
                "name": entity.name,
                "entity_type": entity.entity_type,
                "aliases": list(entity.aliases),
                "scope": entity.scope,
                "provenance": sources,
            }
        )
    return rows


def _relation_rows(
    relations: Sequence[RelationRecord],
    names: Mapping[str, str],
    visible_keys: set[str],
    own: Mapping[str, Episode],
    channel: str,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for relation in relations:
        sources = _provenance(relation.episode_ids, own, channel)
        if channel == "group" and not sources:
            continue
        if relation.source_key not in visible_keys or relation.target_key not in visible_keys:
            continue
        rows.append(
            {
                "source_key": relation.source_key,
                "source": names.get(relation.source_key),
                "type": relation.relation_type,
                "target_key": relation.target_key,
                "target": names.get(relation.target_key),
                "scope": relation.scope,
                "current": relation.is_current,
                "valid_from": _iso(relation.valid_from_ts),
                "valid_to": _iso(relation.valid_to_ts),
                "provenance": sources,
            }
        )
    return rows


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat() if ts is not None else None
