"""What recall shows of a stored episode or fact: the `MemoryItem` a ranked candidate becomes, the
provenance `memory_expand` and the graph search list. Conversions from the stores' typed records."""

from __future__ import annotations

from typing import Any

from contracts.events import Channel
from services.common.stores.episodes import Episode
from services.common.stores.facts import StoredFact
from services.recall_api.retrieval.ranking import Ranked
from services.recall_api.schemas import MemoryItem

_CHANNELS: dict[str, Channel] = {"private": "private", "group": "group"}


def _channels(values: tuple[str, ...]) -> list[Channel]:
    """The channel(s) a memory was stated in: one for an episode; for a fact, every channel it was
    said in (private and a group: both)."""
    return sorted({_CHANNELS[v] for v in values if v in _CHANNELS})


def episode_provenance(episode: Episode) -> dict[str, Any]:
    """What `memory_expand` shows of an episode besides its summary: where and when it was said, and
    where its raw session is kept."""
    return {
        "session_id": episode.session_id,
        "agent_id": episode.agent_id,
        "channel": episode.channel,
        "scope": episode.scope,
        "occurred_at": episode.occurred_at.isoformat(),
        "expires_at": episode.expires_at.isoformat() if episode.expires_at else None,
        "language": episode.language,
        "source_event_id": episode.source_event_id,
        "raw_stream": episode.raw_stream,
        "raw_stream_sequence": episode.raw_stream_sequence,
        "passage_count": episode.passage_count,
        "entity_names": list(episode.entity_names),
        "model": episode.usage.model,
        "importance": episode.importance,
        "metadata": dict(episode.metadata),
        # A compressed episode (the pruner folded forgotten episodes into it): every source, oldest first.
        **(
            {
                "source_session_ids": list(episode.source_session_ids),
                "source_episode_ids": list(episode.source_episode_ids),
            }
            if episode.is_compressed
            else {}
        ),
    }


def graph_provenance(episode: Episode, channel: str) -> dict[str, Any] | None:
    """One provenance entry of a graph entity or relation; None when the episode is not visible in
    `channel` (a group channel sees only episodes from group sessions)."""
    if channel == "group" and episode.channel != "group":
        return None
    return {
        "episode_id": episode.episode_id,
        "session_id": episode.session_id,
        "occurred_at": episode.occurred_at.isoformat(),
        "channel": episode.channel,
    }


def fact_provenance(stored: StoredFact) -> dict[str, Any]:
    """What `memory_expand` shows of a fact besides its text: status, scope, evidence and history."""
    fact = stored.fact
    return {
        "status": fact.status,
        "scope": fact.scope,
        "channel": list(stored.channels),
        "evidence_count": fact.evidence_count,
        "valid_from": fact.valid_from.isoformat(),
        "valid_to": fact.valid_to.isoformat() if fact.valid_to else None,
        "superseded_by": fact.superseded_by,
        "observations": [p.model_dump(mode="json") for p in fact.provenance],
    }


def _channel_label(channels: list[Channel]) -> Channel | None:
    return "group" if "group" in channels else "private" if channels else None


def memory_item(ranked: Ranked) -> MemoryItem:
    """The response item of a ranked episode or fact."""
    candidate = ranked.candidate
    fact = candidate.fact
    if fact is not None:
        latest = max(fact.provenance, key=lambda p: p.occurred_at)
        channels = _channels(candidate.fact_channels)
        return MemoryItem(
            id=candidate.id,
            kind="fact",
            abstract=fact.text,
            score=round(candidate.relevance, 4),
            weight=round(ranked.weight, 4),
            occurred_at=latest.occurred_at.isoformat(),
            session_id=latest.session_id,
            status=fact.status,
            scope=fact.scope,
            channel=_channel_label(channels),
            channels=channels,
            metadata=fact.metadata_values,
        )
    episode = candidate.episode
    if episode is None:
        raise ValueError(f"candidate {candidate.id} holds neither a fact nor an episode")
    episode_channels = _channels((episode.channel,))
    return MemoryItem(
        id=candidate.id,
        kind="episode",
        abstract=episode.abstract or episode.summary,
        score=round(candidate.relevance, 4),
        weight=round(ranked.weight, 4),
        occurred_at=ranked.occurred_at.isoformat() if ranked.occurred_at else None,
        session_id=episode.session_id or None,
        scope=episode.scope,
        channel=_channel_label(episode_channels),
        channels=episode_channels,
        matched_passage=candidate.matched_text if candidate.via_passage else None,
        metadata={key: [value] for key, value in sorted(episode.metadata.items())},
    )
