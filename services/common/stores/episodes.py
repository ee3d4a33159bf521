"""The episodic tier: episodes (one per session) and their passages (chunks of the raw session),
as typed records in the `episodes` and `passages` collections.

This module is the only place that knows the point layout. The payload keys are those the
episodic summarizer has always written, so points written before this module existed read back;
a point missing a field added later reads with that field's default, and a point that cannot be
read at all is skipped with a log line (one bad point must not take recall down).

`stored_at_ts` is when the episode was first written (kept on a rewrite): the never-recalled pruning
rule counts from it, not from the session's date, so importing old conversations does not make them
prunable at the next pass. Points written before it existed read it as None.

`importance` (0–1, `domain/importance.py`) is scored when the episode is written; points written before
it existed read `DEFAULT_IMPORTANCE`. A compressed episode (the pruner folding several forgotten
episodes into one) lists the episodes and sessions it was made from in `source_episode_ids` /
`source_session_ids`: erasure and provenance follow them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, cast, get_args

from contracts.events import Channel, Scope
from services.common.domain.ids import deterministic_uuid
from services.common.domain.importance import DEFAULT_IMPORTANCE, clamp_importance
from services.common.domain.nicknames import aliases_from
from services.common.domain.owner import Owner
from services.common.gateways.embedder import Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.stores.maintenance import PointText, owners_of, point_text, record_recalls
from services.common.stores.passage_points import TURN_KIND, WITHOUT_TURN_POINTS, fold_turn_hits
from services.common.stores.passage_points import Passage as Passage
from services.common.stores.passage_points import PassageHit as PassageHit
from services.common.stores.passage_points import passage_id_for as passage_id_for
from services.common.stores.passage_points import turn_point_id_for as turn_point_id_for
from services.common.stores.payload_fields import MalformedPoint, read_int, read_metadata, read_str, read_time

# Pruning's view of a point lives beside it; named here too, where the pruner and tests import it.
from services.common.stores.point_times import PointTimes as PointTimes
from services.common.stores.point_times import read_importance
from services.common.stores.point_times import read_point_times as read_point_times
from services.common.stores.vector.port import (
    EPISODES,
    PASSAGES,
    HybridWeights,
    PreparedHybrid,
    SearchFilter,
    SparseVector,
    VectorIndex,
    VectorRecord,
)

log = logging.getLogger(__name__)

_SCAN_LIMIT = 10_000
_SCOPES: tuple[str, ...] = get_args(Scope)
_CHANNELS: tuple[str, ...] = get_args(Channel)


def episode_id_for(owner: Owner, session_id: str) -> str:
    """The episode id of a session: uuid5 of tenant, user and session (a replay maps to the same point)."""
    return str(deterministic_uuid("episode", owner.tenant_id, owner.user_id, session_id))


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """What producing the summary cost; the offline extractive summary costs nothing."""

    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class Episode:
    """One session, summarised. `recall_count` / `last_recalled_at_ts` are recall's record (the
    pruner's never-recalled signal); a rewrite of a stored episode keeps the stored values."""

    episode_id: str
    session_id: str
    agent_id: str
    occurred_at: datetime
    summary: str
    scope: Scope = "personal"
    channel: Channel = "private"
    expires_at: datetime | None = None
    language: str = ""
    abstract: str = ""
    entity_names: tuple[str, ...] = ()
    source_event_id: str | None = None
    raw_stream: str | None = None
    raw_stream_sequence: int | None = None
    passage_count: int = 0
    recall_count: int = 0
    last_recalled_at_ts: float | None = None
    stored_at_ts: float | None = None
    usage: ModelUsage = field(default_factory=ModelUsage)
    importance: float = DEFAULT_IMPORTANCE
    source_episode_ids: tuple[str, ...] = ()
    source_session_ids: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)  # the source session's
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)  # speaker → names they are called

    @property
    def is_compressed(self) -> bool:
        """Made by the pruner from several forgotten episodes (see `source_episode_ids`)."""
        return bool(self.source_episode_ids)

    @property
    def last_recalled_at(self) -> datetime | None:
        return None if self.last_recalled_at_ts is None else datetime.fromtimestamp(self.last_recalled_at_ts, UTC)

    def is_expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at < now

    def passage(self, index: int, text: str, *, first_turn: int, last_turn: int, within: int | None = None) -> Passage:
        """A passage of this episode (a turn point of its passage `within`, when given); it carries
        the episode's context (filters apply to both)."""
        return Passage(
            episode_id=self.episode_id,
            index=index,
            text=text,
            first_turn=first_turn,
            last_turn=last_turn,
            within=within,
            session_id=self.session_id,
            agent_id=self.agent_id,
            occurred_at=self.occurred_at,
            scope=self.scope,
            channel=self.channel,
            expires_at=self.expires_at,
            language=self.language,
            metadata=self.metadata,
        )


@dataclass(frozen=True, slots=True)
class EpisodeHit:
    episode: Episode
    score: float  # fused score in [0, 1]
    dense_score: float | None = None  # the fused score's parts, for recall's agreement gate
    keyword_score: float | None = None


@dataclass(frozen=True, slots=True)
class DeletedEpisodes:
    episodes: int
    passages: int


@dataclass(frozen=True, slots=True)
class EpisodePage:
    """One page of the owner's episodes in point-id order; `next_id` starts the next page (None: the end)."""

    episodes: list[Episode]
    next_id: str | None


# --------------------------------------------------------------------------------------------------
# The point layout (the only place that knows it)


def _time_fields(name: str, value: datetime | None) -> dict[str, Any]:
    return {name: value.isoformat() if value else None, f"{name}_ts": value.timestamp() if value else None}


def _context_payload(record: Episode | Passage) -> dict[str, Any]:
    return {
        "agent_id": record.agent_id,
        "session_id": record.session_id,
        "scope": record.scope,
        "channel": record.channel,
        **_time_fields("occurred_at", record.occurred_at),
        **_time_fields("expires_at", record.expires_at),
        "episode_id": record.episode_id,
        "language": record.language,
        "metadata": dict(record.metadata),
    }


def episode_payload(episode: Episode) -> dict[str, Any]:
    """The stored payload of an episode. Public only for bulk loaders that write points with their
    own vectors (the recall benchmark); everything else writes through `EpisodeStore`."""
    return {
        **_context_payload(episode),
        "kind": "episode",
        "summary": episode.summary,
        "abstract": episode.abstract,
        "entity_names": list(episode.entity_names),
        "source_event_id": episode.source_event_id,
        "raw_stream": episode.raw_stream,
        "raw_stream_sequence": episode.raw_stream_sequence,
        "passage_count": episode.passage_count,
        "recall_count": episode.recall_count,
        "last_recalled_at_ts": episode.last_recalled_at_ts,
        "stored_at_ts": episode.stored_at_ts,
        "model": episode.usage.model,
        "prompt_tokens": episode.usage.prompt_tokens,
        "completion_tokens": episode.usage.completion_tokens,
        "cost_usd": episode.usage.cost_usd,
        "importance": clamp_importance(episode.importance),
        # Only chats where people call each other by other names carry aliases.
        **(
            {"aliases": {speaker: list(names) for speaker, names in episode.aliases.items()}} if episode.aliases else {}
        ),
        # Only compressed episodes carry their sources (erasure matches on them).
        **(
            {
                "source_episode_ids": list(episode.source_episode_ids),
                "source_session_ids": list(episode.source_session_ids),
            }
            if episode.source_episode_ids
            else {}
        ),
    }


def _passage_payload(passage: Passage) -> dict[str, Any]:
    return {
        **_context_payload(passage),
        "kind": "passage" if passage.within is None else TURN_KIND,
        "index": passage.index,
        "text": passage.text,
        "first_turn": passage.first_turn,
        "last_turn": passage.last_turn,
        **({} if passage.within is None else {"within": passage.within}),
    }


def _read_context(point_id: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    occurred_at = read_time(payload, "occurred_at")
    if occurred_at is None:
        raise MalformedPoint("no occurred_at")
    scope = payload.get("scope") or "personal"
    channel = payload.get("channel") or "private"
    if scope not in _SCOPES or channel not in _CHANNELS:
        raise MalformedPoint(f"scope {scope!r} / channel {channel!r}")
    return {
        "episode_id": read_str(payload, "episode_id", point_id),
        "session_id": read_str(payload, "session_id"),
        "agent_id": read_str(payload, "agent_id", ""),
        "occurred_at": occurred_at,
        "scope": cast(Scope, scope),
        "channel": cast(Channel, channel),
        "expires_at": read_time(payload, "expires_at"),
        "language": read_str(payload, "language", ""),
        "metadata": read_metadata(payload),
    }


def _read_episode(point_id: str, payload: Mapping[str, Any]) -> Episode:
    summary = read_str(payload, "summary", "")
    last_recalled = payload.get("last_recalled_at_ts")
    stored_at = payload.get("stored_at_ts")
    source_event_id = payload.get("source_event_id")
    raw_stream = payload.get("raw_stream")
    return Episode(
        **_read_context(point_id, payload),
        summary=summary,
        abstract=read_str(payload, "abstract", summary),
        entity_names=tuple(str(name) for name in payload.get("entity_names") or ()),
        source_event_id=None if source_event_id is None else str(source_event_id),
        raw_stream=None if raw_stream is None else str(raw_stream),
        raw_stream_sequence=read_int(payload, "raw_stream_sequence"),
        passage_count=read_int(payload, "passage_count") or 0,
        recall_count=read_int(payload, "recall_count") or 0,
        last_recalled_at_ts=float(last_recalled) if isinstance(last_recalled, int | float) else None,
        stored_at_ts=float(stored_at) if isinstance(stored_at, int | float) else None,
        usage=ModelUsage(
            model=read_str(payload, "model", ""),
            prompt_tokens=read_int(payload, "prompt_tokens") or 0,
            completion_tokens=read_int(payload, "completion_tokens") or 0,
            cost_usd=float(payload.get("cost_usd") or 0.0),
        ),
        importance=read_importance(payload),
        source_episode_ids=tuple(str(i) for i in payload.get("source_episode_ids") or ()),
        source_session_ids=tuple(str(i) for i in payload.get("source_session_ids") or ()),
        aliases=aliases_from(payload.get("aliases")),
    )


def _read_passage(point_id: str, payload: Mapping[str, Any]) -> Passage:
    index = read_int(payload, "index")
    if index is None:
        raise MalformedPoint("no index")
    first_turn = read_int(payload, "first_turn")
    last_turn = read_int(payload, "last_turn")
    return Passage(
        **_read_context(point_id, payload),
        index=index,
        text=read_str(payload, "text"),
        first_turn=index if first_turn is None else first_turn,
        last_turn=index if last_turn is None else last_turn,
        within=read_int(payload, "within") if payload.get("kind") == TURN_KIND else None,
    )


def _episode_or_none(point_id: str, payload: Mapping[str, Any]) -> Episode | None:
    try:
        return _read_episode(point_id, payload)
    except (MalformedPoint, ValueError, TypeError) as exc:
        log.warning("skipping episode point %s with an unreadable payload: %s", point_id, exc)
        return None


def _passage_or_none(point_id: str, payload: Mapping[str, Any]) -> Passage | None:
    try:
        return _read_passage(point_id, payload)
    except (MalformedPoint, ValueError, TypeError) as exc:
        log.warning("skipping passage point %s with an unreadable payload: %s", point_id, exc)
        return None


# --------------------------------------------------------------------------------------------------
# The store


class EpisodeStore:
    """Episodes and passages of one vector index; every call is scoped to an `Owner`."""

    def __init__(self, index: VectorIndex, embedder: Embedder, keywords: KeywordEncoder) -> None:
        self._index = index
        self._embedder = embedder
        self._keywords = keywords

    async def write(
        self,
        owner: Owner,
        episode: Episode,
        passages: Sequence[Passage],
        *,
        passage_vectors: Sequence[list[float]] | None = None,
    ) -> Episode:
        """Store the episode with exactly these passages; returns the episode as stored.

        `passage_vectors`, when given, are the passages' dense vectors embedded ahead (the summarizer
        embeds them while the LLM writes the summary); only the summary is embedded here then.

        Idempotent: a replay rewrites the same points, keeps what recall recorded on the stored
        episode, and removes passages the new version no longer has (a session re-sent with fewer
        turns). Passages are written before the episode, so a crash in between leaves no episode
        pointing at missing passages. The first write stamps `stored_at_ts`; a rewrite keeps it."""
        strangers = [p.index for p in passages if p.episode_id != episode.episode_id]
        if strangers:
            raise ValueError(f"passages {strangers} belong to another episode than {episode.episode_id}")
        stored = await self.get(owner, [episode.episode_id])
        if stored:
            kept = stored[0]
            episode = replace(
                episode,
                recall_count=kept.recall_count,
                last_recalled_at_ts=kept.last_recalled_at_ts,
                stored_at_ts=kept.stored_at_ts or episode.stored_at_ts,
            )
        if episode.stored_at_ts is None:
            episode = replace(episode, stored_at_ts=datetime.now(UTC).timestamp())
        episode = replace(episode, passage_count=sum(1 for p in passages if p.within is None))
        texts = [episode.summary, *(p.text for p in passages)]
        if passage_vectors is None:
            vectors = await self._embedder.embed_passages(texts)
        elif len(passage_vectors) != len(passages):
            raise ValueError(f"{len(passage_vectors)} passage vectors for {len(passages)} passages")
        else:
            vectors = [*await self._embedder.embed_passages(texts[:1]), *passage_vectors]
        # A turn point adds meaning only: its words are its passage's, and counted there.
        worded = [texts[0], *(p.text for p in passages if p.within is None)]
        encoded = iter(await asyncio.to_thread(self._keywords.encode_documents, worded))
        no_words = SparseVector([], [])
        sparse = [next(encoded), *(next(encoded) if p.within is None else no_words for p in passages)]
        passage_records = [
            VectorRecord(id=p.passage_id, dense=dense, sparse=keyword_vector, payload=_passage_payload(p))
            for p, dense, keyword_vector in zip(passages, vectors[1:], sparse[1:], strict=True)
        ]
        current = {record.id for record in passage_records}
        existing = await self._index.scroll(
            PASSAGES, owner, SearchFilter(match={"episode_id": episode.episode_id}), limit=_SCAN_LIMIT
        )
        stale = [record.id for record in existing if record.id not in current]
        if stale:
            await self._index.delete(PASSAGES, owner, SearchFilter(ids=stale))
        if passage_records:
            await self._index.upsert(PASSAGES, owner, passage_records)
        await self._index.upsert(
            EPISODES,
            owner,
            [VectorRecord(id=episode.episode_id, dense=vectors[0], sparse=sparse[0], payload=episode_payload(episode))],
        )
        return episode

    async def get(self, owner: Owner, episode_ids: Sequence[str]) -> list[Episode]:
        """The owner's episodes among `episode_ids` (other owners' ids read as absent)."""
        if not episode_ids:
            return []
        records = await self._index.get(EPISODES, owner, episode_ids)
        return [e for r in records if (e := _episode_or_none(r.id, r.payload)) is not None]

    async def scroll(self, owner: Owner, search_filter: SearchFilter | None = None, limit: int = 1000) -> list[Episode]:
        """The owner's episodes matching the filter (ids, channels, time windows...), up to `limit`."""
        records = await self._index.scroll(EPISODES, owner, search_filter, limit)
        return [e for r in records if (e := _episode_or_none(r.id, r.payload)) is not None]

    async def page(
        self, owner: Owner, search_filter: SearchFilter | None = None, *, limit: int, start_id: str | None = None
    ) -> EpisodePage:
        """Up to `limit` of the owner's episodes in point-id order from `start_id` (inclusive). The
        order is stable while episodes are added or removed: paging never repeats or skips one that
        exists throughout (an unreadable point is skipped, but still moves the cursor on)."""
        records = await self._index.scroll(EPISODES, owner, search_filter, limit + 1, start_id=start_id)
        next_id = records[limit].id if len(records) > limit else None
        episodes = [e for r in records[:limit] if (e := _episode_or_none(r.id, r.payload)) is not None]
        return EpisodePage(episodes=episodes, next_id=next_id)

    async def passages(self, owner: Owner, episode_id: str) -> list[Passage]:
        """The episode's passages in order (not its turn points)."""
        found = await self.scroll_passages(
            owner, SearchFilter(match={"episode_id": episode_id}, exclude=WITHOUT_TURN_POINTS), _SCAN_LIMIT
        )
        return sorted(found, key=lambda p: p.index)

    async def scroll_passages(
        self, owner: Owner, search_filter: SearchFilter | None = None, limit: int = 1000
    ) -> list[Passage]:
        records = await self._index.scroll(PASSAGES, owner, search_filter, limit)
        return [p for r in records if (p := _passage_or_none(r.id, r.payload)) is not None]

    async def search(
        self,
        owner: Owner,
        *,
        dense: Sequence[float] | None,
        sparse: SparseVector,
        weights: HybridWeights,
        limit: int,
        search_filter: SearchFilter | None = None,
    ) -> list[EpisodeHit]:
        """Hybrid search over the owner's episodes (summaries), best first."""
        prepared = PreparedHybrid(EPISODES, owner, sparse, weights, limit, search_filter)
        return await self.finish_search(prepared, dense)  # nothing read ahead

    async def prepare_search(
        self,
        owner: Owner,
        *,
        passages: bool,
        sparse: SparseVector,
        weights: HybridWeights,
        limit: int,
        search_filter: SearchFilter | None = None,
    ) -> PreparedHybrid:
        """The first step of `search` (`search_passages` with `passages`), run before the query vector
        exists (VectorIndex.prepare_hybrid): L0 runs it while the query embeds."""
        collection = PASSAGES if passages else EPISODES
        return await self._index.prepare_hybrid(
            collection, owner, sparse=sparse, weights=weights, limit=limit, search_filter=search_filter
        )

    async def finish_search(self, prepared: PreparedHybrid, dense: Sequence[float] | None) -> list[EpisodeHit]:
        hits = await self._index.finish_hybrid(prepared, dense)
        return [
            EpisodeHit(e, h.score, h.dense_score, h.keyword_score)
            for h in hits
            if (e := _episode_or_none(h.id, h.payload)) is not None
        ]

    async def search_passages(
        self,
        owner: Owner,
        *,
        dense: Sequence[float] | None,
        sparse: SparseVector,
        weights: HybridWeights,
        limit: int,
        search_filter: SearchFilter | None = None,
    ) -> list[PassageHit]:
        """Hybrid search over the owner's passages (raw session text), best first."""
        prepared = PreparedHybrid(PASSAGES, owner, sparse, weights, limit, search_filter)
        return await self.finish_passage_search(prepared, dense)  # nothing read ahead

    async def finish_passage_search(self, prepared: PreparedHybrid, dense: Sequence[float] | None) -> list[PassageHit]:
        hits = await self._index.finish_hybrid(prepared, dense)
        found = [
            PassageHit(p, h.score, h.dense_score, h.keyword_score)
            for h in hits
            if (p := _passage_or_none(h.id, h.payload)) is not None
        ]
        return fold_turn_hits(found, prepared.weights if dense is not None else None)

    async def delete(self, owner: Owner, episode_ids: Sequence[str]) -> DeletedEpisodes:
        """Delete episodes with their passages. Passages first, the episode last: a crash in between
        leaves the episode to be found (and deleted) again."""
        if not episode_ids:
            return DeletedEpisodes(episodes=0, passages=0)
        passages = await self._index.delete(PASSAGES, owner, SearchFilter(match={"episode_id": list(episode_ids)}))
        episodes = await self._index.delete(EPISODES, owner, SearchFilter(ids=list(episode_ids)))
        return DeletedEpisodes(episodes=episodes, passages=passages)

    async def delete_passages(self, owner: Owner, passage_ids: Sequence[str]) -> int:
        if not passage_ids:
            return 0
        return await self._index.delete(PASSAGES, owner, SearchFilter(ids=list(passage_ids)))

    async def delete_owner(self, owner: Owner) -> DeletedEpisodes:
        """Every episode and passage of the owner (an erased user), passages first."""
        passages = await self._index.delete(PASSAGES, owner)
        episodes = await self._index.delete(EPISODES, owner)
        return DeletedEpisodes(episodes=episodes, passages=passages)

    async def count(self, owner: Owner, search_filter: SearchFilter | None = None) -> int:
        """Episode points matching the filter, readable or not."""
        return await self._index.count(EPISODES, owner, search_filter)

    async def count_passages(self, owner: Owner, search_filter: SearchFilter | None = None) -> int:
        """Passage points matching the filter, readable or not."""
        return await self._index.count(PASSAGES, owner, search_filter)

    # ---------------------------------------------------------------------------------------------
    # Maintenance: recall counts, pruning and erasure reach every point, readable or not

    async def record_recalls(self, owner: Owner, recalls: Mapping[str, tuple[int, float]]) -> int:
        """Add to the episodes' recall counts: per episode id, (times recalled, latest epoch time).
        Ids the owner does not have are skipped; returns the episodes updated."""
        return await record_recalls(self._index, EPISODES, owner, recalls)

    async def owners(self) -> set[Owner]:
        """Every owner with an episode or a passage."""
        return await owners_of(self._index, (EPISODES, PASSAGES))

    async def scroll_times(self, owner: Owner, search_filter: SearchFilter | None, limit: int) -> list[PointTimes]:
        """The times of the owner's episode points matching the filter, one per point."""
        records = await self._index.scroll(EPISODES, owner, search_filter, limit)
        return [read_point_times(r.id, r.payload) for r in records]

    async def scroll_passage_times(
        self, owner: Owner, search_filter: SearchFilter | None, limit: int
    ) -> list[PointTimes]:
        """The times of the owner's passage points matching the filter, one per point."""
        records = await self._index.scroll(PASSAGES, owner, search_filter, limit)
        return [read_point_times(r.id, r.payload) for r in records]

    async def episode_texts(self, owner: Owner, limit: int) -> list[PointText]:
        """The searchable text of every episode point of the owner (up to `limit`)."""
        return [point_text(r.id, r.payload) for r in await self._index.scroll(EPISODES, owner, None, limit)]

    async def passage_texts(self, owner: Owner, limit: int) -> list[PointText]:
        """The searchable text of every passage point of the owner (up to `limit`)."""
        return [point_text(r.id, r.payload) for r in await self._index.scroll(PASSAGES, owner, None, limit)]
