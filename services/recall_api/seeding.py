"""Writing memories straight into the vector index, with the same point layout the episodic
summarizer and the fact write policy produce: for recall tests, the benchmark and demos, where the
ingestion pipeline (tested on its own) is not the subject."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from contracts.events import Channel, Scope
from services.common.domain.facts import FactCandidate, FactProvenance, FactWritePlan, Volatility
from services.common.domain.ids import deterministic_uuid
from services.common.domain.owner import Owner
from services.common.gateways.embedder import Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.stores.fact_store import write_fact
from services.common.stores.vector.port import EPISODES, PASSAGES, SparseVector, VectorIndex, VectorRecord


def episode_id_for(owner: Owner, session_id: str) -> str:
    """The summarizer's episode id (uuid5 of tenant, user and session)."""
    return str(deterministic_uuid("episode", owner.tenant_id, owner.user_id, session_id))


def passage_id_for(episode_id: str, index: int) -> str:
    return str(deterministic_uuid("passage", episode_id, str(index)))


def episode_payload(
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
) -> dict[str, Any]:
    episode_id = episode_id_for(owner, session_id)
    expires_at = occurred_at + timedelta(days=ttl_days)
    return {
        "kind": "episode",
        "episode_id": episode_id,
        "agent_id": agent_id,
        "session_id": session_id,
        "scope": scope,
        "channel": channel,
        "occurred_at": occurred_at.isoformat(),
        "occurred_at_ts": occurred_at.timestamp(),
        "expires_at": expires_at.isoformat(),
        "expires_at_ts": expires_at.timestamp(),
        "language": language,
        "summary": summary,
        "abstract": abstract if abstract is not None else summary,
        "entity_names": list(entity_names),
        "source_event_id": str(deterministic_uuid("seed-session", owner.tenant_id, owner.user_id, session_id)),
        "raw_stream": raw_stream,
        "raw_stream_sequence": raw_stream_sequence,
        "passage_count": passage_count,
        "recall_count": 0,
        "last_recalled_at_ts": None,
        "model": "seed",
    }


def passage_payload(episode: dict[str, Any], index: int, text: str) -> dict[str, Any]:
    common = (
        "episode_id",
        "agent_id",
        "session_id",
        "scope",
        "channel",
        "occurred_at",
        "occurred_at_ts",
        "expires_at",
        "expires_at_ts",
        "language",
    )
    return {
        **{key: episode[key] for key in common},
        "kind": "passage",
        "index": index,
        "text": text,
        "first_turn": index,
        "last_turn": index,
    }


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
    **payload_options: Any,
) -> str:
    """Embed and write one episode (and its passages); returns the episode id."""
    payload = episode_payload(
        owner,
        session_id=session_id,
        summary=summary,
        abstract=abstract,
        occurred_at=occurred_at,
        passage_count=len(passages),
        **payload_options,
    )
    texts = [summary, *passages]
    vectors = await embedder.embed_passages(texts)
    sparse: list[SparseVector] = await asyncio.to_thread(keywords.encode_documents, texts)
    episode_id = str(payload["episode_id"])
    if passages:
        await index.upsert(
            PASSAGES,
            owner,
            [
                VectorRecord(
                    id=passage_id_for(episode_id, i),
                    dense=vectors[i + 1],
                    sparse=sparse[i + 1],
                    payload=passage_payload(payload, i, text),
                )
                for i, text in enumerate(passages)
            ],
        )
    await index.upsert(
        EPISODES, owner, [VectorRecord(id=episode_id, dense=vectors[0], sparse=sparse[0], payload=payload)]
    )
    return episode_id


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
    """One extraction-style observation through the shared fact write path (so statuses,
    supersession, ids and payloads are exactly what extraction stores)."""
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
    result = await write_fact(index, embedder, keywords, candidate, channel=channel, now=now or occurred_at)
    return result.plan
