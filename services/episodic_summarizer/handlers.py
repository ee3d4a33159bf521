"""Handlers of the episodic-summarizer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from faststream.nats import NatsBroker

from contracts import EpisodeCreated, SessionCompleted, SizeLimitExceeded, Subjects, check_session_size
from services.common.domain.ids import deterministic_uuid
from services.common.domain.owner import Owner
from services.common.domain.text import detect_language
from services.common.runtime.broker import ConsumerSpec, Delivery, PoisonMessage, durable_subscriber
from services.common.runtime.resources import ServiceContext
from services.common.runtime.service import ServiceDefinition
from services.common.stores.vector.port import EPISODES, PASSAGES, SearchFilter, VectorRecord
from services.episodic_summarizer.logic import (
    SummaryOutput,
    build_summary_prompt,
    chunk_passages,
    extractive_summary,
    is_trivial_session,
    make_abstract,
)
from services.episodic_summarizer.settings import EpisodicSummarizerSettings

log = logging.getLogger(__name__)
NAME = "episodic-summarizer"


def consumers(subjects: Subjects) -> Sequence[ConsumerSpec]:
    return [
        ConsumerSpec(
            durable=NAME,
            stream=subjects.session_stream,
            filter_subjects=(subjects.all_session_completed(),),
            description="Summarises finished sessions into episodes.",
        )
    ]


def episode_id_for(tenant_id: str, user_id: str, session_id: str) -> str:
    return str(deterministic_uuid("episode", tenant_id, user_id, session_id))


def passage_id_for(episode_id: str, index: int) -> str:
    return str(deterministic_uuid("passage", episode_id, str(index)))


async def handle_session(
    event: SessionCompleted, delivery: Delivery, ctx: ServiceContext[EpisodicSummarizerSettings]
) -> None:
    try:
        check_session_size(event, ctx.settings.limits)
    except SizeLimitExceeded as exc:
        raise PoisonMessage(f"session over the size limits: {exc}") from exc
    if is_trivial_session(event.messages):
        ctx.count("sessions_trivial")
        log.info("trivial session %s/%s/%s: no episode", event.tenant_id, event.user_id, event.session_id)
        return

    owner = Owner(event.tenant_id, event.user_id)
    language = (event.locale or "").split("-")[0].lower() or detect_language(
        " ".join(m.content for m in event.messages)
    )
    summary, usage = await _summarise(event, language, delivery, ctx)
    abstract = make_abstract(summary.summary) or make_abstract(
        " ".join(m.content for m in event.messages if m.role == "user")
    )
    passages = chunk_passages(event.messages, max_chars=ctx.settings.passage_max_chars)

    episode_id = episode_id_for(event.tenant_id, event.user_id, event.session_id)
    embedder = ctx.resources.embedder()
    keywords = ctx.resources.keywords()
    index = await ctx.resources.vector_index()

    texts = [summary.summary, *(p.text for p in passages)]
    vectors = await embedder.embed_passages(texts)
    sparse = await asyncio.to_thread(keywords.encode_documents, texts)

    occurred_at = event.ended_at
    expires_at = occurred_at + timedelta(days=ctx.settings.episode_ttl_days)
    existing = await index.get(EPISODES, owner, [episode_id])
    kept: dict[str, Any] = {}
    if existing:
        # A replay must not reset what recall has recorded.
        kept = {k: existing[0].payload.get(k) for k in ("recall_count", "last_recalled_at_ts")}
    common = {
        "agent_id": event.agent_id,
        "session_id": event.session_id,
        "scope": event.scope,
        "channel": event.channel,
        "occurred_at": occurred_at.isoformat(),
        "occurred_at_ts": occurred_at.timestamp(),
        "expires_at": expires_at.isoformat(),
        "expires_at_ts": expires_at.timestamp(),
        "episode_id": episode_id,
        "language": language,
    }
    episode_payload = {
        **common,
        "kind": "episode",
        "summary": summary.summary,
        "abstract": abstract,
        "entity_names": list(summary.entity_names),
        "source_event_id": str(event.event_id),
        "raw_stream": ctx.subjects.session_stream,
        "raw_stream_sequence": delivery.stream_sequence,
        "passage_count": len(passages),
        "recall_count": kept.get("recall_count") or 0,
        "last_recalled_at_ts": kept.get("last_recalled_at_ts"),
        **usage,
    }
    records = [VectorRecord(id=episode_id, dense=vectors[0], sparse=sparse[0], payload=episode_payload)]
    passage_records = [
        VectorRecord(
            id=passage_id_for(episode_id, p.index),
            dense=vectors[i + 1],
            sparse=sparse[i + 1],
            payload={
                **common,
                "kind": "passage",
                "index": p.index,
                "text": p.text,
                "first_turn": p.first_turn,
                "last_turn": p.last_turn,
            },
        )
        for i, p in enumerate(passages)
    ]
    # A session re-sent with fewer turns must not leave stale passages behind.
    current_ids = [r.id for r in passage_records]
    stale = [
        r.id
        for r in await index.scroll(PASSAGES, owner, SearchFilter(match={"episode_id": episode_id}), limit=10_000)
        if r.id not in current_ids
    ]
    if stale:
        await index.delete(PASSAGES, owner, SearchFilter(ids=stale))
    if passage_records:
        await index.upsert(PASSAGES, owner, passage_records)
    await index.upsert(EPISODES, owner, records)

    created = EpisodeCreated(
        event_id=deterministic_uuid("episode-created", str(event.event_id)),
        source_event_id=event.event_id,
        episode_id=episode_id,
        tenant_id=event.tenant_id,
        user_id=event.user_id,
        agent_id=event.agent_id,
        session_id=event.session_id,
        channel=event.channel,
        scope=event.scope,
        occurred_at=occurred_at,
        language=language,
        summary=summary.summary,
        abstract=abstract,
        entity_names=list(summary.entity_names),
        raw_stream_sequence=delivery.stream_sequence,
    )
    await ctx.publisher.publish(
        created,
        ctx.subjects.episode_created(event.tenant_id, event.user_id),
        msg_id=str(created.event_id),
        stream=ctx.subjects.derived_stream,
    )
    ctx.count("episodes_created")


async def _summarise(
    event: SessionCompleted, language: str, delivery: Delivery, ctx: ServiceContext[EpisodicSummarizerSettings]
) -> tuple[SummaryOutput, dict[str, Any]]:
    llm = ctx.resources.llm()
    if not llm.online:
        summary = extractive_summary(event.messages, language, max_sentences=ctx.settings.summary_max_sentences)
        return summary, {"model": "offline-extractive", "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
    result = await llm.complete_json(
        build_summary_prompt(event, language),
        SummaryOutput,
        on_progress=delivery.in_progress,
        purpose="episode_summary",
    )
    return result.value, {
        "model": result.model,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "cost_usd": result.cost_usd,
    }


def register(broker: NatsBroker, ctx: ServiceContext[EpisodicSummarizerSettings]) -> None:
    (spec,) = consumers(ctx.subjects)

    async def _handler(event: SessionCompleted, delivery: Delivery) -> None:
        await handle_session(event, delivery, ctx)

    durable_subscriber(broker, ctx.settings.nats, spec, SessionCompleted, _handler, ctx.dead_letters)


DEFINITION = ServiceDefinition(
    name=NAME, settings_type=EpisodicSummarizerSettings, consumers=consumers, register=register
)
