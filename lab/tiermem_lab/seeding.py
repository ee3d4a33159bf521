"""Writing memories straight into the stores, exactly as the episodic summarizer and the fact write
policy store them: for recall tests and the benchmarks, where the ingestion pipeline (tested
on its own) is not the subject."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from contracts.events import Channel, Scope
from services.common.domain.facts import FactCandidate, FactProvenance, FactWritePlan, Volatility
from services.common.domain.ids import deterministic_uuid
from services.common.domain.owner import Owner
from services.common.gateways.embedder import Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.stores.episodes import Episode, EpisodeStore, ModelUsage, episode_id_for, passage_id_for
from services.common.stores.facts import FactStore
from services.common.stores.vector.port import VectorIndex

__all__ = ["episode_id_for", "passage_id_for", "seed_episode", "seed_fact", "seeded_episode"]


def seeded_episode(
    owner: Owner,
    *,
    session_id: str,
    summary: str,
    abstract: str | None = None,
    occurred_at: datetime,
    agent_id: str = "agent-1",
    channel: Channel = "private",
    scope: Scope = "personal",
    ttl_days: float = 180.0,
    language: str = "en",
    entity_names: Sequence[str] = (),
    raw_stream: str | None = None,
    raw_stream_sequence: int | None = None,
    passage_count: int = 0,
) -> Episode:
    """An episode as the summarizer would have stored it for this session."""
    return Episode(
        episode_id=episode_id_for(owner, session_id),
        session_id=session_id,
        agent_id=agent_id,
        occurred_at=occurred_at,
        expires_at=occurred_at + timedelta(days=ttl_days),
        scope=scope,
        channel=channel,
        language=language,
        summary=summary,
        abstract=abstract if abstract is not None else summary,
        entity_names=tuple(entity_names),
        source_event_id=str(deterministic_uuid("seed-session", owner.tenant_id, owner.user_id, session_id)),
        raw_stream=raw_stream,
        raw_stream_sequence=raw_stream_sequence,
        passage_count=passage_count,
        usage=ModelUsage(model="seed"),
    )


async def seed_episode(
    index: VectorIndex,
    embedder: Embedder,
    keywords: KeywordEncoder,
    owner: Owner,
    *,
    session_id: str,
    summary: str,
    occurred_at: datetime,
    abstract: str | None = None,
    passages: Sequence[str] = (),
    **episode_options: Any,
) -> str:
    """Embed and write one episode (and its passages, one turn each); returns the episode id."""
    episode = seeded_episode(
        owner, session_id=session_id, summary=summary, abstract=abstract, occurred_at=occurred_at, **episode_options
    )
    chunks = [episode.passage(i, text, first_turn=i, last_turn=i) for i, text in enumerate(passages)]
    stored = await EpisodeStore(index, embedder, keywords).write(owner, episode, chunks)
    return stored.episode_id


async def seed_fact(
    index: VectorIndex,
    embedder: Embedder,
    keywords: KeywordEncoder,
    owner: Owner,
    *,
    text: str,
    attribute: str,
    value: str,
    occurred_at: datetime,
    subject: str = "user",
    scope: Scope = "personal",
    channel: Channel = "private",
    volatility: Volatility | None = None,
    source_episode: str | None = None,
    language: str = "en",
    now: datetime | None = None,
) -> FactWritePlan:
    """One extraction-style observation through the fact write policy (so statuses, supersession,
    ids and payloads are exactly what extraction stores)."""
    episode = source_episode or str(deterministic_uuid("seed-fact", owner.tenant_id, owner.user_id, text))
    candidate = FactCandidate(
        tenant_id=owner.tenant_id,
        user_id=owner.user_id,
        scope=scope,
        subject=subject,
        attribute=attribute,
        value=value,
        text=text,
        language=language,
        volatility=volatility,
        provenance=FactProvenance(episode_id=episode, occurred_at=occurred_at, source="extraction"),
    )
    result = await FactStore(index, embedder, keywords).write(owner, candidate, channel=channel, now=now or occurred_at)
    return result.plan
