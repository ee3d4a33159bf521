"""Handlers of the dedup service."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from faststream.nats import NatsBroker

from contracts import EntityMerged, EntityRef, EntityUpserted, Subjects
from services.common.domain.ids import owned_uuid, owner_message_id
from services.common.domain.lru import LruCache
from services.common.domain.owner import Owner
from services.common.gateways.embedder import Embedder
from services.common.runtime.durable_consumer import Delivery, durable_subscriber
from services.common.runtime.provisioning import ConsumerSpec
from services.common.runtime.resources import ServiceContext
from services.common.runtime.service import PublishedEvent, ServiceDefinition
from services.dedup.logic import (
    EntityView,
    LLMDisambiguation,
    MatchDecision,
    apply_llm_decision,
    build_llm_disambiguation_prompt,
    choose_canonical,
    embedding_similarity_from_vectors,
    match_candidates,
    same_visibility,
)
from services.dedup.settings import DedupSettings

log = logging.getLogger(__name__)
NAME = "dedup"
Context = ServiceContext[DedupSettings]


def consumers(subjects: Subjects) -> Sequence[ConsumerSpec]:
    return [
        ConsumerSpec(
            durable=NAME,
            stream=subjects.derived_stream,
            filter_subjects=(subjects.all_of("entity.upserted"),),
            description="Merges duplicate entity nodes.",
        )
    ]


class NameEmbeddings:
    """Embeddings of entity names, cached (least recently used out first): the same names come back on
    every upsert."""

    def __init__(self, embedder: Callable[[], Embedder], capacity: int = 50_000) -> None:
        self._embedder = embedder
        self._cache: LruCache[str, list[float]] = LruCache(capacity)

    async def vectors(self, names: Sequence[str]) -> dict[str, list[float]]:
        found = {name: vector for name in dict.fromkeys(names) if (vector := self._cache.get(name)) is not None}
        missing = [name for name in dict.fromkeys(names) if name not in found]
        if missing:
            for name, vector in zip(missing, await self._embedder().embed_passages(missing), strict=True):
                found[name] = vector
                self._cache.put(name, vector)
        return found


async def decide(
    new: EntityView, candidates: Sequence[EntityView], ctx: Context, names: NameEmbeddings
) -> MatchDecision:
    settings = ctx.settings
    similarity = None
    if candidates and len(candidates) <= settings.embedding_max_candidates:
        all_names = [new.name, *(c.name for c in candidates)]
        similarity = embedding_similarity_from_vectors(await names.vectors(all_names))
    decision = match_candidates(
        new,
        candidates,
        fuzzy_threshold=settings.fuzzy_threshold,
        ambiguous_band=settings.ambiguous_band,
        embed_similarity=similarity,
        embedding_threshold=settings.embedding_threshold,
    )
    if not decision.needs_llm:
        return decision
    llm = ctx.resources.llm()
    if llm.offline:
        # Offline: an ambiguous pair stays apart. A wrong merge is worse than a duplicate.
        ctx.count("dedup_ambiguous_unresolved")
        return decision
    answer = await llm.complete_json(
        build_llm_disambiguation_prompt(new, decision.llm_candidates), LLMDisambiguation, purpose="entity_dedup"
    )
    return apply_llm_decision(decision, answer.value, min_confidence=settings.llm_min_confidence)


async def handle_entity(event: EntityUpserted, delivery: Delivery, ctx: Context, names: NameEmbeddings) -> None:
    owner = Owner(event.tenant_id, event.user_id)
    tombstones = await ctx.resources.tombstones()
    # A merge reads and rewrites the user's nodes and facts: it waits while the user's erasure runs
    # (and the erasure waits for a merge in flight), so nothing erased is rewritten afterwards.
    async with tombstones.guard(owner, NAME, None, on_wait=delivery.in_progress):
        await _dedup(event, owner, ctx, names)


async def _dedup(event: EntityUpserted, owner: Owner, ctx: Context, names: NameEmbeddings) -> None:
    graph = await ctx.resources.graph()
    record = await graph.get_entity(owner, event.entity.entity_id)
    if record is None:
        ctx.count("dedup_entity_gone")  # merged away or erased since the event was published
        return
    new = EntityView.from_record(record)
    candidates = [
        EntityView.from_record(other)
        for other in await graph.list_entities(owner, event.scope)
        if other.key != record.key and same_visibility(record, other)
    ]
    decision = await decide(new, candidates, ctx, names)
    if decision.target is None or decision.method is None:
        return
    canonical = choose_canonical(new, decision.target)
    duplicate = decision.target if canonical is new else new
    result = await graph.merge_entities(owner, canonical.entity_id, [duplicate.entity_id])
    # Re-keying runs even when the merge was already done (a redelivery after a crash, or another
    # worker): it is idempotent, and it is what finishes an interrupted merge.
    facts = await ctx.resources.facts()
    moved = await facts.rekey_subject(
        owner,
        from_subjects=[duplicate.name, *duplicate.aliases],
        to_subject=canonical.name,
        now=datetime.now(UTC),
    )
    ctx.count("facts_rekeyed", moved)
    if not result.changed:
        return  # another worker (or an earlier delivery) merged them: its EntityMerged is already out
    ctx.count("entities_merged")
    merged = EntityMerged(
        event_id=owned_uuid(owner, "entity-merged", result.canonical_key, *sorted(result.merged_keys)),
        tenant_id=event.tenant_id,
        user_id=event.user_id,
        scope=event.scope,
        canonical=EntityRef(entity_id=result.canonical_key, name=canonical.name, entity_type=canonical.entity_type),
        merged_entity_ids=list(result.merged_keys),
        aliases=list(result.aliases),
        method=decision.method,
        similarity=min(max(decision.similarity, 0.0), 1.0),
    )
    await ctx.publisher.publish(
        merged,
        ctx.subjects.entity_merged(event.tenant_id, event.user_id),
        msg_id=owner_message_id(owner, "entity-merged", merged.event_id),
        stream=ctx.subjects.derived_stream,
    )


def register(broker: NatsBroker, ctx: Context) -> None:
    (spec,) = consumers(ctx.subjects)
    names = NameEmbeddings(ctx.resources.embedder)

    async def _handler(event: EntityUpserted, delivery: Delivery) -> None:
        await handle_entity(event, delivery, ctx, names)

    durable_subscriber(broker, ctx.settings.nats, spec, EntityUpserted, _handler, ctx.dead_letters)


DEFINITION = ServiceDefinition(
    name=NAME,
    settings_type=DedupSettings,
    consumers=consumers,
    register=register,
    calls_llm=True,
    publishes=lambda subjects: (
        PublishedEvent(subjects.all_of("entity.merged"), EntityMerged, "dedup: duplicate entities were merged."),
    ),
)
