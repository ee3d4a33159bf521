"""L1, on demand: `memory_search` (ranked ids with one-line abstracts) and `memory_expand` (one
memory in full: an episode's summary, provenance and source messages, or a fact with its history)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from nats.aio.client import Client as NatsClient

from contracts import Subjects
from services.common.domain.ids import is_uuid
from services.common.domain.owner import Owner
from services.common.runtime.resources import Resources
from services.common.stores.episodes import Episode
from services.common.stores.facts import StoredFact
from services.common.stores.raw_sessions import read_raw_session
from services.common.stores.vector.port import HybridWeights, SearchFilter
from services.recall_api.retrieval import ranking
from services.recall_api.retrieval.alias_expansion import AliasExpander, widen_sparse
from services.recall_api.retrieval.candidates import (
    CandidateRetriever,
    CandidateSearch,
    Query,
    channel_filter,
    note_recalled,
)
from services.recall_api.retrieval.memory_records import episode_provenance, fact_provenance, memory_item
from services.recall_api.retrieval.metrics import RecallMetrics
from services.recall_api.retrieval.query_time import query_time_windows
from services.recall_api.retrieval.recall_counts import RecallCountUpdater
from services.recall_api.retrieval.session_evidence import EvidencePolicy, boost_in_time
from services.recall_api.schemas import ExpandedMemory, SearchRequest, SearchResponse, SourceMessage
from services.recall_api.settings import RecallApiSettings


class MemorySearch:
    def __init__(
        self,
        settings: RecallApiSettings,
        resources: Resources,
        retriever: CandidateRetriever,
        nats: Callable[[], Awaitable[NatsClient]],
        metrics: RecallMetrics,
        recall_counts: RecallCountUpdater,
    ) -> None:
        self.settings = settings
        self.resources = resources
        self.retriever = retriever
        self.subjects = Subjects(settings.nats.subject_root)
        self.nats = nats
        self.metrics = metrics
        self.recall_counts = recall_counts
        self.aliases = AliasExpander(resources, settings.l1_alias_timeout_ms / 1000)
        self.evidence = EvidencePolicy(
            mode=settings.l1_evidence,
            rrf_k=settings.l1_rrf_k,
            summary=settings.l1_summary_weight,
            second_passage=settings.l1_second_passage_weight,
            fact_vote=settings.l1_fact_vote_weight,
        )

    async def _query(self, owner: Owner, request: SearchRequest) -> Query:
        """The query embedded, its keyword form widened by the other names of the entities it names
        (looked up in the graph while the query embeds)."""
        if not self.settings.l1_alias_expansion:
            return await self.retriever.embed(request.query)
        query, names = await asyncio.gather(
            self.retriever.embed(request.query), self.aliases.extra_names(owner, request.query, request.channel)
        )
        if not names:
            return query
        extra = await asyncio.to_thread(self.resources.keywords().encode_query, " ".join(names))
        return dataclasses.replace(query, sparse=widen_sparse(query.sparse, extra))

    async def search(self, tenant_id: str, request: SearchRequest) -> SearchResponse:
        started = time.perf_counter()
        owner = Owner(tenant_id, request.user_id)
        now = datetime.now(UTC)
        query = await self._query(owner, request)
        search = CandidateSearch(
            weights=HybridWeights(keyword=self.settings.l1_keyword_weight, dense=self.settings.l1_dense_weight),
            fetch=max(request.limit * self.settings.fetch_factor, self.settings.l1_min_fetch),
            kinds=request.kinds or ("episode", "fact"),
            channel=request.channel,
            agent_id=request.agent_id,
            include_superseded=request.include_superseded,
            now=now,
            metadata=request.metadata,
            evidence=self.evidence,
            passage_turns=self.settings.l1_passage_turns,
        )
        candidates, top_score = await self.retriever.candidates(owner, query, search)
        windows = query_time_windows(request.query, now) if self.settings.l1_time_boost > 0 else []
        candidates = boost_in_time(candidates, windows, self.settings.l1_time_boost)
        ranked = ranking.rank_candidates(
            candidates,
            now=now,
            min_score=self.settings.l1_min_score,
            episode_half_life_days=self.settings.episode_half_life_days,
            episode_recency_weight=self.settings.episode_recency_weight,
            importance_weight=self.settings.importance_weight,
            include_superseded=request.include_superseded,
        )[: request.limit]
        note_recalled(self.recall_counts, owner, ranked)
        self.metrics.record(
            "search", injected=len(ranked), top_score=top_score, latency_ms=(time.perf_counter() - started) * 1000
        )
        return SearchResponse(
            items=[memory_item(r) for r in ranked], top_score=round(top_score, 4) if top_score is not None else None
        )

    async def expand(
        self, tenant_id: str, user_id: str, memory_id: str, *, channel: str = "private", count_recall: bool = True
    ) -> ExpandedMemory | None:
        """The full episode (summary, provenance, source messages) or fact; None when the owner has no
        such memory visible in this channel (another tenant's or user's id looks exactly like that).
        `count_recall=False` for a person inspecting memory (the memory browser): not a recall."""
        if not is_uuid(memory_id):
            return None
        owner = Owner(tenant_id, user_id)
        visible = SearchFilter(ids=[memory_id], channels=channel_filter(channel))
        episodes = await (await self.resources.episodes()).scroll(owner, visible, limit=1)
        if episodes:
            episode = episodes[0]
            if episode.is_expired(datetime.now(UTC)):
                return None
            result = await self._expand_episode(owner, episode)
            if count_recall:
                self.recall_counts.submit("episode", owner, [memory_id], time.time())
            return result
        facts = await (await self.resources.facts()).scroll(owner, visible, limit=1)
        if facts:
            return self._expand_fact(owner, facts[0], count_recall=count_recall)
        return None

    def _expand_fact(self, owner: Owner, stored: StoredFact, *, count_recall: bool = True) -> ExpandedMemory:
        if count_recall:
            self.recall_counts.submit("fact", owner, [stored.fact_id], time.time())
        return ExpandedMemory(
            id=stored.fact_id,
            kind="fact",
            abstract=stored.fact.text,
            fact=stored.fact.model_dump(mode="json"),
            provenance=fact_provenance(stored),
        )

    async def _expand_episode(self, owner: Owner, episode: Episode) -> ExpandedMemory:
        messages, available, truncated, note = await self._source_messages(owner, episode)
        return ExpandedMemory(
            id=episode.episode_id,
            kind="episode",
            summary=episode.summary,
            abstract=episode.abstract,
            provenance=episode_provenance(episode),
            messages=messages,
            messages_available=available,
            messages_truncated=truncated,
            messages_note=note,
        )

    async def _source_messages(
        self, owner: Owner, episode: Episode
    ) -> tuple[list[SourceMessage], bool, bool, str | None]:
        """The session's raw messages, read back from the JetStream session stream by sequence, and
        checked to be this owner's session (a stale sequence must never show someone else's chat)."""
        stream = episode.raw_stream
        sequence = episode.raw_stream_sequence
        if sequence is None or sequence < 1:
            return [], False, False, "the episode records no raw stream sequence"
        if stream != self.subjects.session_stream:
            return [], False, False, f"the raw session is kept in stream {stream!r}, not this deployment's"
        client = await self.nats()
        session = await read_raw_session(client.jetstream(), self.subjects.session_stream, sequence, owner)
        # Another owner's message at that sequence reads as missing: a stale sequence never shows it.
        if session is None or session.session_id != episode.session_id:
            return [], False, False, "the raw session is no longer available (erased or past retention)"
        limit = self.settings.expand_max_messages
        messages = [
            SourceMessage(role=m.role, content=m.content, ts=m.ts.isoformat() if m.ts else None, name=m.name)
            for m in session.messages[:limit]
        ]
        truncated = len(session.messages) > limit
        note = f"first {limit} of {len(session.messages)} messages" if truncated else None
        return messages, True, truncated, note
