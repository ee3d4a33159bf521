"""Handlers of the episodic-summarizer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from faststream.nats import NatsBroker

from contracts import EpisodeCreated, SessionCompleted, SizeLimitExceeded, Subjects, check_session_size
from services.common.domain.ids import owned_uuid, owner_message_id
from services.common.domain.importance import messages_importance
from services.common.domain.language import detect_language
from services.common.domain.nicknames import speaker_aliases
from services.common.domain.owner import Owner
from services.common.domain.relative_time import format_day
from services.common.domain.speakers import attribute_speakers
from services.common.runtime.durable_consumer import Delivery, PoisonMessage, durable_subscriber
from services.common.runtime.provisioning import ConsumerSpec
from services.common.runtime.resources import ServiceContext
from services.common.runtime.service import PublishedEvent, ServiceDefinition
from services.common.stores.episodes import Episode, ModelUsage, episode_id_for
from services.common.stores.tombstones import WriteGuard
from services.episodic_summarizer.logic import Passage as PassageChunk
from services.episodic_summarizer.logic import (
    SummaryOutput,
    build_summary_prompt,
    chunk_passages,
    episode_expiry,
    extractive_summary,
    is_trivial_session,
    make_abstract,
)
from services.episodic_summarizer.passages import ChatShape
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
    tombstones = await ctx.resources.tombstones()
    # The session's stream sequence is its lineage: a session at or below an erasure's cut, or removed
    # from the stream by a fact or episode erasure, is erased data.
    async with tombstones.guard(
        owner, NAME, delivery.stream_sequence, on_wait=delivery.in_progress, from_session=True
    ) as guard:
        if guard.erased:
            ctx.count("sessions_erased")
            log.info("session %s/%s/%s was erased: no episode", event.tenant_id, event.user_id, event.session_id)
            return
        await _consolidate(event, owner, delivery, ctx, guard)


def _chat_shape(
    event: SessionCompleted,
    language: str,
    settings: EpisodicSummarizerSettings,
    aliases: Mapping[str, tuple[str, ...]],
) -> ChatShape:
    """How this session's chat is read into passages, from the settings."""
    return ChatShape(
        burst_gap=settings.burst_gap,
        segment_gap=settings.segment_gap,
        max_turns=settings.passage_max_turns or None,
        dates_from=event.started_at if settings.relative_dates else None,
        aliases=aliases,
        header=format_day(event.started_at.date(), language) if settings.passage_date_header else None,
    )


async def _consolidate(
    event: SessionCompleted,
    owner: Owner,
    delivery: Delivery,
    ctx: ServiceContext[EpisodicSummarizerSettings],
    guard: WriteGuard,
) -> None:
    language = (event.locale or "").split("-")[0].lower() or detect_language(
        " ".join(m.content for m in event.messages)
    )
    settings = ctx.settings
    aliases = speaker_aliases(attribute_speakers(event.messages)) if settings.speaker_aliases else {}
    shape = _chat_shape(event, language, settings, aliases)
    chunks = chunk_passages(
        event.messages, max_chars=settings.passage_max_chars, shape=shape, turn_points=settings.passage_turn_points
    )
    # The passages do not depend on the summary: embed them while the LLM writes it.
    embedding = asyncio.ensure_future(ctx.resources.embedder().embed_passages([c.text for c in chunks]))
    try:
        await _write_episode(event, owner, language, chunks, aliases, embedding, delivery, ctx, guard)
    finally:
        # Not awaited when the summary failed (embedded again on redelivery): drop it, and mark an
        # embedding failure as seen, since the summary's error is the one that is raised.
        if not embedding.cancel() and not embedding.cancelled():
            embedding.exception()


async def _write_episode(
    event: SessionCompleted,
    owner: Owner,
    language: str,
    chunks: Sequence[PassageChunk],
    aliases: Mapping[str, tuple[str, ...]],
    embedding: asyncio.Future[list[list[float]]],
    delivery: Delivery,
    ctx: ServiceContext[EpisodicSummarizerSettings],
    guard: WriteGuard,
) -> None:
    summary, usage = await _summarise(event, language, delivery, ctx)
    abstract = make_abstract(summary.summary) or make_abstract(
        " ".join(m.content for m in event.messages if m.role == "user")
    )
    # The model's rating when it gave a usable one (same call as the summary), else the offline heuristic.
    importance = summary.importance
    if importance is None:
        importance = messages_importance(m.content for m in event.messages if m.role in ("user", "assistant"))
    episode = Episode(
        episode_id=episode_id_for(owner, event.session_id),
        session_id=event.session_id,
        agent_id=event.agent_id,
        occurred_at=event.ended_at,
        expires_at=episode_expiry(event.ended_at, delivery.stored_at, ctx.settings.episode_ttl_days),
        scope=event.scope,
        channel=event.channel,
        language=language,
        summary=summary.summary,
        abstract=abstract,
        entity_names=tuple(summary.entity_names),
        source_event_id=str(event.event_id),
        raw_stream=ctx.subjects.session_stream,
        raw_stream_sequence=delivery.stream_sequence,
        usage=usage,
        importance=importance,
        metadata=dict(event.metadata),
        aliases=dict(aliases),
    )
    passages = [
        episode.passage(p.index, p.text, first_turn=p.first_turn, last_turn=p.last_turn, within=p.within)
        for p in chunks
    ]
    if not await guard.still_allowed():
        ctx.count("sessions_erased")  # the user was erased while the summary was being written
        return
    await (await ctx.resources.episodes()).write(owner, episode, passages, passage_vectors=await embedding)

    created = EpisodeCreated(
        event_id=owned_uuid(owner, "episode-created", str(event.event_id)),
        source_event_id=event.event_id,
        episode_id=episode.episode_id,
        tenant_id=event.tenant_id,
        user_id=event.user_id,
        agent_id=event.agent_id,
        session_id=event.session_id,
        channel=event.channel,
        scope=event.scope,
        occurred_at=episode.occurred_at,
        language=language,
        summary=summary.summary,
        abstract=abstract,
        entity_names=list(summary.entity_names),
        raw_stream_sequence=delivery.stream_sequence,
        importance=importance,
        metadata=dict(event.metadata),
    )
    await ctx.publisher.publish(
        created,
        ctx.subjects.episode_created(event.tenant_id, event.user_id),
        msg_id=owner_message_id(owner, "episode-created", created.event_id),
        stream=ctx.subjects.derived_stream,
    )
    ctx.count("episodes_created")


async def _summarise(
    event: SessionCompleted, language: str, delivery: Delivery, ctx: ServiceContext[EpisodicSummarizerSettings]
) -> tuple[SummaryOutput, ModelUsage]:
    llm = ctx.resources.llm()
    if not llm.online:
        summary = extractive_summary(event.messages, language, max_sentences=ctx.settings.summary_max_sentences)
        return summary, ModelUsage(model="offline-extractive")
    result = await llm.complete_json(
        build_summary_prompt(event, language, burst_gap=ctx.settings.burst_gap),
        SummaryOutput,
        on_progress=delivery.in_progress,
        purpose="episode_summary",
    )
    return result.value, ModelUsage(
        model=result.model,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        cost_usd=result.cost_usd,
    )


def register(broker: NatsBroker, ctx: ServiceContext[EpisodicSummarizerSettings]) -> None:
    (spec,) = consumers(ctx.subjects)

    async def _handler(event: SessionCompleted, delivery: Delivery) -> None:
        await handle_session(event, delivery, ctx)

    durable_subscriber(broker, ctx.settings.nats, spec, SessionCompleted, _handler, ctx.dead_letters)


DEFINITION = ServiceDefinition(
    name=NAME,
    settings_type=EpisodicSummarizerSettings,
    consumers=consumers,
    register=register,
    calls_llm=True,
    publishes=lambda subjects: (
        PublishedEvent(
            subjects.all_of("episode.created"), EpisodeCreated, "episodic-summarizer: an episode was stored."
        ),
    ),
)
