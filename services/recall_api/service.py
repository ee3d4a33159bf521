"""The recall service: every read (L0, L1, L2), `memory_save`, erasure requests and readiness, for one
tenant at a time. HTTP routes and MCP tools are thin shells over these methods, so both behave the
same. Isolation: every store call takes an `Owner` built from the authenticated tenant and the
requested user; nothing here can query without one."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nats.aio.client import Client as NatsClient

from contracts import Channel, ErasureRequested, ErasureTarget, Subjects
from services.common.domain.facts import Fact, FactCandidate, FactProvenance, normalise_subject, normalise_text_key
from services.common.domain.ids import deterministic_uuid
from services.common.domain.owner import Owner
from services.common.domain.text import TokenCounter, detect_language
from services.common.runtime.broker import connect_nats
from services.common.runtime.resources import Resources
from services.common.stores.fact_store import write_fact
from services.common.stores.graph.repository import EntityRecord, GraphRepository, RelationRecord, normalise_entity_name
from services.common.stores.raw_sessions import read_raw_session
from services.common.stores.vector.port import (
    EPISODES,
    FACTS,
    PASSAGES,
    HybridWeights,
    ScoredRecord,
    SearchFilter,
    SparseVector,
    VectorIndex,
)
from services.recall_api import logic
from services.recall_api.logic import Candidate, Hit, Ranked
from services.recall_api.metrics import RecallMetrics
from services.recall_api.recall_counts import RecallCountUpdater
from services.recall_api.schemas import (
    AutoRecallRequest,
    AutoRecallResponse,
    ErasureAccepted,
    ExpandedMemory,
    FactsResponse,
    GraphSearchRequest,
    GraphSearchResponse,
    MemoryItem,
    SaveFactRequest,
    SaveFactResponse,
    SearchRequest,
    SearchResponse,
    SourceMessage,
)
from services.recall_api.settings import RecallApiSettings

log = logging.getLogger(__name__)

_LIVE_FACT_STATUSES = ["confirmed", "tentative"]
_CHANNELS: dict[str, Channel] = {"private": "private", "group": "group"}


class StoreUnavailable(RuntimeError):
    """A store or the broker could not be reached; the API answers 503."""


class FactRejected(ValueError):
    """The write policy refused a fact (two sentences, a passing state, ...)."""


@dataclass(frozen=True, slots=True)
class _Query:
    text: str
    dense: list[float]
    sparse: SparseVector


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class RecallService:
    """Holds the shared resources, the metrics and the background recall-count updater."""

    def __init__(self, settings: RecallApiSettings, resources: Resources) -> None:
        self.settings = settings
        self.resources = resources
        self.subjects = Subjects(settings.nats.subject_root)
        self.metrics = RecallMetrics()
        self.recall_counts = RecallCountUpdater(resources, max_pending=settings.recall_count_queue_size)
        self._nats: NatsClient | None = None
        self._nats_lock = asyncio.Lock()
        self._token_counter: TokenCounter | None = None

    # ------------------------------------------------------------------------------ lifecycle

    async def start(self, *, warm_up: bool = True) -> None:
        """Start the background updater and load models now, so the first turn is not the slow one."""
        self.recall_counts.start()
        if not warm_up:
            return
        await asyncio.to_thread(self.token_counter)  # the tokenizer is required: fail start-up without it
        try:
            keywords = self.resources.keywords()
            await asyncio.to_thread(keywords.warm_up)
            await self.resources.embedder().embed_query("warm up")
        except Exception as exc:  # a remote embedder may be down now and fine later: serve, and say so
            log.warning("recall-api warm-up failed (the first requests will be slow or fail): %s", exc)

    async def stop(self) -> None:
        await self.recall_counts.stop()
        if self._nats is not None:
            client, self._nats = self._nats, None
            if not client.is_closed:
                await client.close()

    def token_counter(self) -> TokenCounter:
        if self._token_counter is None:
            self._token_counter = TokenCounter()
        return self._token_counter

    async def nats(self) -> NatsClient:
        if self._nats is None or self._nats.is_closed:
            async with self._nats_lock:
                if self._nats is None or self._nats.is_closed:
                    try:
                        self._nats = await asyncio.wait_for(
                            connect_nats(self.settings.nats, "tiermem-recall-api"),
                            timeout=self.settings.nats.connect_timeout_s + 1,
                        )
                    except Exception as exc:
                        raise StoreUnavailable(f"cannot connect to NATS at {self.settings.nats.url}: {exc}") from exc
        return self._nats

    # ------------------------------------------------------------------------------ shared pieces

    async def _embed(self, text: str) -> _Query:
        keywords = self.resources.keywords()
        dense, sparse = await asyncio.gather(
            self.resources.embedder().embed_query(text), asyncio.to_thread(keywords.encode_query, text)
        )
        return _Query(text=text, dense=dense, sparse=sparse)

    async def _hits(
        self,
        index: VectorIndex,
        collection: str,
        owner: Owner,
        query: _Query,
        weights: HybridWeights,
        limit: int,
        search_filter: SearchFilter,
    ) -> list[ScoredRecord]:
        return await index.hybrid_query(
            collection,
            owner,
            dense=query.dense,
            sparse=query.sparse,
            weights=weights,
            limit=limit,
            search_filter=search_filter,
        )

    @staticmethod
    def _episode_filter(channel: str, agent_id: str | None, now: datetime) -> SearchFilter:
        # Expired episodes may still be stored until the pruner's next run; never return them.
        return SearchFilter(
            agent_id=agent_id,
            channels=["group"] if channel == "group" else None,
            after=now,
            time_field="expires_at_ts",
        )

    @staticmethod
    def _fact_filter(channel: str, include_superseded: bool = False) -> SearchFilter:
        match: dict[str, str | int | bool | Sequence[str]] = {}
        if not include_superseded:
            match["status"] = _LIVE_FACT_STATUSES
        return SearchFilter(channels=["group"] if channel == "group" else None, match=match)

    async def _candidates(
        self,
        owner: Owner,
        query: _Query,
        *,
        weights: HybridWeights,
        fetch: int,
        kinds: Sequence[str],
        channel: str,
        agent_id: str | None,
        include_superseded: bool,
        now: datetime,
    ) -> tuple[list[Candidate], float | None]:
        """Episodes (directly or through a passage) and facts matching the query, scope conflicts
        resolved; plus the best relevance seen."""
        index = await self.resources.vector_index()
        episode_filter = self._episode_filter(channel, agent_id, now)
        searches: dict[str, Any] = {}
        if "episode" in kinds:
            searches["episodes"] = self._hits(index, EPISODES, owner, query, weights, fetch, episode_filter)
            searches["passages"] = self._hits(index, PASSAGES, owner, query, weights, fetch, episode_filter)
        if "fact" in kinds:
            fact_filter = self._fact_filter(channel, include_superseded)
            searches["facts"] = self._hits(index, FACTS, owner, query, weights, fetch, fact_filter)
        results = dict(zip(searches, await asyncio.gather(*searches.values()), strict=True))
        all_scores = [hit.score for hits in results.values() for hit in hits]
        top_score = max(all_scores) if all_scores else None

        candidates: list[Candidate] = []
        if "episode" in kinds:
            episode_hits = [Hit(h.id, h.payload, h.score) for h in results["episodes"]]
            passage_hits = [Hit(h.id, h.payload, h.score) for h in results["passages"]]
            merged = logic.merge_episode_hits(episode_hits, passage_hits)
            payloads = {h.id: h.payload for h in results["episodes"]}
            missing = [episode_id for episode_id in merged if episode_id not in payloads]
            if missing:
                # Episodes found only through a passage: read them with the same owner and filters.
                for record in await index.scroll(
                    EPISODES, owner, dataclasses.replace(episode_filter, ids=missing), limit=len(missing)
                ):
                    payloads[record.id] = record.payload
            for episode_id, (relevance, via_passage, text) in merged.items():
                payload = payloads.get(episode_id)
                if payload is None:
                    continue  # passage left behind by an episode that expired or was erased
                candidates.append(
                    Candidate(
                        id=episode_id,
                        kind="episode",
                        relevance=relevance,
                        payload=payload,
                        via_passage=via_passage,
                        matched_text=text,
                    )
                )
        if "fact" in kinds:
            fact_candidates = []
            for hit in results["facts"]:
                fact = logic.fact_from_payload(hit.payload)
                if fact is None:
                    continue
                if not include_superseded and logic.is_superseded(fact):
                    continue
                fact_candidates.append(
                    Candidate(id=hit.id, kind="fact", relevance=hit.score, payload=hit.payload, fact=fact)
                )
            context = await self._narrower_facts(index, owner, fact_candidates, channel)
            candidates.extend(logic.resolve_scope_conflicts(fact_candidates, context))
        return candidates, top_score

    async def _narrower_facts(
        self, index: VectorIndex, owner: Owner, candidates: Sequence[Candidate], channel: str
    ) -> list[Fact]:
        """Current facts in narrower scopes on the same subject and single-valued attribute as a
        team/org candidate: they win the conflict even when the search did not return them."""
        broader = logic.broader_single_valued(candidates)
        if not broader:
            return []
        found: list[Fact] = []
        for attribute in sorted({fact.attribute for fact in broader}):
            scopes = sorted(
                {s for fact in broader if fact.attribute == attribute for s in logic.narrower_scopes(fact.scope)}
            )
            records = await index.scroll(
                FACTS,
                owner,
                SearchFilter(
                    scopes=scopes,
                    channels=["group"] if channel == "group" else None,
                    match={"attribute": attribute, "status": _LIVE_FACT_STATUSES},
                ),
                limit=200,
            )
            for record in records:
                fact = logic.fact_from_payload(record.payload)
                if fact is not None:
                    found.append(fact)
        return found

    @staticmethod
    def _item(ranked: Ranked) -> MemoryItem:
        candidate = ranked.candidate
        payload = candidate.payload
        fact = candidate.fact
        if fact is not None:
            latest = max(fact.provenance, key=lambda p: p.occurred_at)
            channels = _channels(payload)
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
                channel="group" if "group" in channels else "private" if channels else None,
                channels=channels,
            )
        abstract = payload.get("abstract") or payload.get("summary") or ""
        return MemoryItem(
            id=candidate.id,
            kind="episode",
            abstract=str(abstract),
            score=round(candidate.relevance, 4),
            weight=round(ranked.weight, 4),
            occurred_at=ranked.occurred_at.isoformat() if ranked.occurred_at else None,
            session_id=str(payload["session_id"]) if payload.get("session_id") else None,
            scope=payload.get("scope") if payload.get("scope") in ("personal", "team", "org") else None,
            channel="group" if "group" in _channels(payload) else "private" if _channels(payload) else None,
            channels=_channels(payload),
            matched_passage=candidate.matched_text if candidate.via_passage else None,
        )

    def _note_recalled(self, owner: Owner, ranked: Sequence[Ranked]) -> None:
        now = time.time()
        episodes = [r.candidate.id for r in ranked if r.candidate.kind == "episode"]
        facts = [r.candidate.id for r in ranked if r.candidate.kind == "fact"]
        if episodes:
            self.recall_counts.submit(EPISODES, owner, episodes, now)
        if facts:
            self.recall_counts.submit(FACTS, owner, facts, now)

    # ------------------------------------------------------------------------------ L0

    async def auto(self, tenant_id: str, request: AutoRecallRequest) -> AutoRecallResponse:
        started = time.perf_counter()
        owner = Owner(tenant_id, request.user_id)
        max_entries = request.max_entries or self.settings.l0_default_max_entries
        budget = request.token_budget or self.settings.l0_default_token_budget
        # The trivial check comes before anything touches a store or a model.
        if logic.is_trivial_message(request.message):
            return self._skipped("trivial", started, owner)
        turns = [logic.Turn(t.role, t.content) for t in request.recent_messages]
        text = logic.build_l0_query(
            request.message,
            turns,
            previous_user_turns=self.settings.l0_previous_user_turns,
            max_codepoints=self.settings.l0_query_max_codepoints,
        )
        if not text:
            return self._skipped("empty", started, owner)
        now = datetime.now(UTC)
        query = await self._embed(text)
        weights = HybridWeights(keyword=self.settings.l0_keyword_weight, dense=self.settings.l0_dense_weight)
        candidates, top_score = await self._candidates(
            owner,
            query,
            weights=weights,
            fetch=max_entries * self.settings.fetch_factor,
            kinds=("episode", "fact"),
            channel=request.channel,
            agent_id=request.agent_id,
            include_superseded=False,
            now=now,
        )
        ranked = logic.rank_candidates(
            candidates,
            now=now,
            min_score=self.settings.l0_min_score,
            episode_half_life_days=self.settings.episode_half_life_days,
            episode_recency_weight=self.settings.episode_recency_weight,
        )[:max_entries]
        lines = [logic.render_item(self._item(r).abstract, r.provenance_date) for r in ranked]
        counter = self.token_counter()
        fitted = logic.fit_section(lines, token_budget=budget, count_tokens=counter.count_tokens)
        injected = [ranked[i] for i in fitted.included]
        self._note_recalled(owner, injected)
        latency_ms = (time.perf_counter() - started) * 1000
        self.metrics.record("auto", injected=len(injected), top_score=top_score, latency_ms=latency_ms)
        log.info(
            "recall.auto tenant=%s user=%s injected=%d top_score=%s candidates=%d tokens=%d latency_ms=%.1f",
            owner.tenant_id,
            owner.user_id,
            len(injected),
            f"{top_score:.3f}" if top_score is not None else "none",
            len(candidates),
            fitted.tokens,
            latency_ms,
        )
        return AutoRecallResponse(
            section=fitted.text,
            items=[self._item(r) for r in injected],
            injected=len(injected),
            top_score=round(top_score, 4) if top_score is not None else None,
            tokens=fitted.tokens,
            skipped_reason=None,
        )

    def _skipped(self, reason: str, started: float, owner: Owner) -> AutoRecallResponse:
        latency_ms = (time.perf_counter() - started) * 1000
        self.metrics.record("auto", injected=0, top_score=None, latency_ms=latency_ms, skipped=reason)
        log.info("recall.auto tenant=%s user=%s skipped=%s", owner.tenant_id, owner.user_id, reason)
        return AutoRecallResponse(section="", items=[], injected=0, top_score=None, tokens=0, skipped_reason=reason)

    # ------------------------------------------------------------------------------ L1

    async def search(self, tenant_id: str, request: SearchRequest) -> SearchResponse:
        started = time.perf_counter()
        owner = Owner(tenant_id, request.user_id)
        now = datetime.now(UTC)
        query = await self._embed(request.query)
        weights = HybridWeights(keyword=self.settings.l1_keyword_weight, dense=self.settings.l1_dense_weight)
        candidates, top_score = await self._candidates(
            owner,
            query,
            weights=weights,
            fetch=request.limit * self.settings.fetch_factor,
            kinds=request.kinds or ("episode", "fact"),
            channel=request.channel,
            agent_id=request.agent_id,
            include_superseded=request.include_superseded,
            now=now,
        )
        ranked = logic.rank_candidates(
            candidates,
            now=now,
            min_score=self.settings.l1_min_score,
            episode_half_life_days=self.settings.episode_half_life_days,
            episode_recency_weight=self.settings.episode_recency_weight,
            include_superseded=request.include_superseded,
        )[: request.limit]
        self._note_recalled(owner, ranked)
        self.metrics.record(
            "search", injected=len(ranked), top_score=top_score, latency_ms=(time.perf_counter() - started) * 1000
        )
        return SearchResponse(
            items=[self._item(r) for r in ranked], top_score=round(top_score, 4) if top_score is not None else None
        )

    async def expand(
        self, tenant_id: str, user_id: str, memory_id: str, *, channel: str = "private"
    ) -> ExpandedMemory | None:
        """The full episode (summary, provenance, source messages) or fact; None when the owner has no
        such memory visible in this channel (another tenant's or user's id looks exactly like that)."""
        if not _is_uuid(memory_id):
            return None
        owner = Owner(tenant_id, user_id)
        index = await self.resources.vector_index()
        channels = ["group"] if channel == "group" else None
        episodes = await index.scroll(EPISODES, owner, SearchFilter(ids=[memory_id], channels=channels), limit=1)
        if episodes:
            payload = episodes[0].payload
            if self._expired(payload):
                return None
            result = await self._expand_episode(owner, memory_id, payload)
            self.recall_counts.submit(EPISODES, owner, [memory_id], time.time())
            return result
        facts = await index.scroll(FACTS, owner, SearchFilter(ids=[memory_id], channels=channels), limit=1)
        if facts:
            fact = logic.fact_from_payload(facts[0].payload)
            if fact is None:
                return None
            self.recall_counts.submit(FACTS, owner, [memory_id], time.time())
            return ExpandedMemory(
                id=memory_id,
                kind="fact",
                abstract=fact.text,
                fact=fact.model_dump(mode="json"),
                provenance={
                    "status": fact.status,
                    "scope": fact.scope,
                    "channel": facts[0].payload.get("channel"),
                    "evidence_count": fact.evidence_count,
                    "valid_from": fact.valid_from.isoformat(),
                    "valid_to": fact.valid_to.isoformat() if fact.valid_to else None,
                    "superseded_by": fact.superseded_by,
                    "observations": [p.model_dump(mode="json") for p in fact.provenance],
                },
            )
        return None

    @staticmethod
    def _expired(payload: dict[str, Any]) -> bool:
        expires = payload.get("expires_at_ts")
        return isinstance(expires, int | float) and expires < time.time()

    async def _expand_episode(self, owner: Owner, episode_id: str, payload: dict[str, Any]) -> ExpandedMemory:
        provenance_keys = (
            "session_id",
            "agent_id",
            "channel",
            "scope",
            "occurred_at",
            "expires_at",
            "language",
            "source_event_id",
            "raw_stream",
            "raw_stream_sequence",
            "passage_count",
            "entity_names",
            "model",
        )
        provenance = {key: payload.get(key) for key in provenance_keys if key in payload}
        messages, available, truncated, note = await self._source_messages(owner, payload)
        return ExpandedMemory(
            id=episode_id,
            kind="episode",
            summary=str(payload.get("summary") or ""),
            abstract=str(payload.get("abstract") or ""),
            provenance=provenance,
            messages=messages,
            messages_available=available,
            messages_truncated=truncated,
            messages_note=note,
        )

    async def _source_messages(
        self, owner: Owner, payload: dict[str, Any]
    ) -> tuple[list[SourceMessage], bool, bool, str | None]:
        """The session's raw messages, read back from the JetStream session stream by sequence, and
        checked to be this owner's session (a stale sequence must never show someone else's chat)."""
        stream = payload.get("raw_stream")
        sequence = payload.get("raw_stream_sequence")
        if not isinstance(sequence, int) or sequence < 1:
            return [], False, False, "the episode records no raw stream sequence"
        if stream != self.subjects.session_stream:
            return [], False, False, f"the raw session is kept in stream {stream!r}, not this deployment's"
        client = await self.nats()
        session = await read_raw_session(client.jetstream(), self.subjects.session_stream, sequence, owner)
        # Another owner's message at that sequence reads as missing: a stale sequence never shows it.
        if session is None or session.session_id != payload.get("session_id"):
            return [], False, False, "the raw session is no longer available (erased or past retention)"
        limit = self.settings.expand_max_messages
        messages = [
            SourceMessage(role=m.role, content=m.content, ts=m.ts.isoformat() if m.ts else None, name=m.name)
            for m in session.messages[:limit]
        ]
        truncated = len(session.messages) > limit
        note = f"first {limit} of {len(session.messages)} messages" if truncated else None
        return messages, True, truncated, note

    # ------------------------------------------------------------------------------ L2

    async def graph_search(self, tenant_id: str, request: GraphSearchRequest) -> GraphSearchResponse:
        """Entities and relations around the entity named by `entity` (key or exact name) or found in
        `query`, `hops` deep. Provenance lists only the requesting user's own episodes; in a group
        channel only what a group session of the user supports is returned."""
        if not request.entity and not request.query:
            raise ValueError("give `query` or `entity`")
        owner = Owner(tenant_id, request.user_id)
        limit = request.limit or self.settings.graph_default_limit
        graph = await self._graph()
        starts: list[EntityRecord] = []
        if request.entity:
            if _is_uuid(request.entity):
                record = await graph.get_entity(owner, request.entity)
                starts = [record] if record else []
            if not starts:
                starts = await graph.search_entities(owner, request.entity, limit=5)
                starts = [s for s in starts if s.name_norm == normalise_entity_name(request.entity)] or starts[:1]
        else:
            assert request.query is not None
            starts = await self._entities_in_text(graph, owner, request.query)
        entities: dict[str, EntityRecord] = {s.key: s for s in starts}
        relations: list[RelationRecord] = []
        seen: set[tuple[str, str, str, str]] = set()
        for start in starts[:5]:
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
            raise StoreUnavailable(f"the graph store is not reachable: {exc}") from exc

    async def _entities_in_text(self, graph: GraphRepository, owner: Owner, text: str) -> list[EntityRecord]:
        """Entities whose name the text is, or contains: the whole text first, then its keywords
        (Korean morphemes too, so "온비서에서" finds "온비서")."""
        found: dict[str, EntityRecord] = {}
        for record in await graph.search_entities(owner, text, limit=5):
            found.setdefault(record.key, record)
        if found:
            return list(found.values())
        terms = [t for t in self.resources.keywords().tokens(text) if not t.startswith("#") and len(t) >= 2]
        seen: set[str] = set()
        for term in terms:
            if term in seen:
                continue
            seen.add(term)
            for record in await graph.search_entities(owner, term, limit=3):
                # A keyword matches an entity when it is the name (or alias) or a large part of it.
                names = [record.name_norm, *(normalise_entity_name(a) for a in record.aliases)]
                if any(
                    term == name or (len(term) >= 3 and term in name and len(term) * 2 >= len(name)) for name in names
                ):
                    found.setdefault(record.key, record)
            if len(seen) >= 12:
                break
        return list(found.values())

    async def _graph_response(
        self, owner: Owner, entities: list[EntityRecord], relations: list[RelationRecord], channel: str
    ) -> GraphSearchResponse:
        index = await self.resources.vector_index()
        episode_ids = sorted(
            {e for entity in entities for e in entity.episode_ids} | {e for rel in relations for e in rel.episode_ids}
        )
        own: dict[str, dict[str, Any]] = {}
        if episode_ids:
            # Only the owner's own episodes come back: other users' episode ids on shared nodes stay hidden.
            for record in await index.get(EPISODES, owner, episode_ids):
                own[record.id] = record.payload

        def provenance(ids: Sequence[str]) -> list[dict[str, Any]]:
            out = []
            for episode_id in ids:
                payload = own.get(episode_id)
                if payload is None or (channel == "group" and payload.get("channel") != "group"):
                    continue
                out.append(
                    {
                        "episode_id": episode_id,
                        "session_id": payload.get("session_id"),
                        "occurred_at": payload.get("occurred_at"),
                        "channel": payload.get("channel"),
                    }
                )
            return out

        names = {entity.key: entity.name for entity in entities}
        entity_out: list[dict[str, Any]] = []
        visible_keys: set[str] = set()
        for entity in entities:
            sources = provenance(entity.episode_ids)
            if channel == "group" and not sources:
                continue
            visible_keys.add(entity.key)
            entity_out.append(
                {
                    "key": entity.key,
                    "name": entity.name,
                    "entity_type": entity.entity_type,
                    "aliases": list(entity.aliases),
                    "scope": entity.scope,
                    "provenance": sources,
                }
            )
        relation_out: list[dict[str, Any]] = []
        for relation in relations:
            sources = provenance(relation.episode_ids)
            if channel == "group" and not sources:
                continue
            if relation.source_key not in visible_keys or relation.target_key not in visible_keys:
                continue
            relation_out.append(
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
        return GraphSearchResponse(entities=entity_out, relations=relation_out)

    # ------------------------------------------------------------------------------ facts

    async def save_fact(self, tenant_id: str, request: SaveFactRequest) -> SaveFactResponse:
        owner = Owner(tenant_id, request.user_id)
        now = datetime.now(UTC)
        text = request.text.strip()
        subject = (request.subject or "user").strip() or "user"
        attribute = (request.attribute or "note").strip() or "note"
        value = (request.value or text).strip() or text
        # Idempotency: one observation per request id; without one, the same statement saved again on
        # the same day is the same observation (an agent repeating itself is no new evidence).
        request_key = request.request_id or "\x1f".join(
            (
                request.scope,
                normalise_text_key(subject),
                normalise_text_key(attribute),
                normalise_text_key(value),
                now.date().isoformat(),
            )
        )
        observation_id = str(deterministic_uuid("memory-save", tenant_id, request.user_id, request_key))
        candidate = FactCandidate(
            tenant_id=tenant_id,
            user_id=request.user_id,
            scope=request.scope,
            subject=subject,
            attribute=attribute,
            value=value,
            text=text,
            language=request.language or detect_language(text),
            volatility=request.volatility,
            provenance=FactProvenance(episode_id=observation_id, occurred_at=now, source="api"),
        )
        index = await self.resources.vector_index()
        written = await write_fact(
            index,
            self.resources.embedder(),
            self.resources.keywords(),
            candidate,
            channel=request.channel,
            now=now,
        )
        plan = written.plan
        if plan.outcome == "rejected":
            raise FactRejected(plan.rejected_reason or "rejected by the write policy")
        status = next((f.status for f in plan.upserts if f.fact_id == plan.fact_id), None)
        if status is None and plan.fact_id:
            stored = await index.get(FACTS, owner, [plan.fact_id])
            fact = logic.fact_from_payload(stored[0].payload) if stored else None
            status = fact.status if fact else None
        log.info(
            "memory_save tenant=%s user=%s outcome=%s fact=%s", tenant_id, request.user_id, plan.outcome, plan.fact_id
        )
        return SaveFactResponse(
            outcome=plan.outcome, fact_id=plan.fact_id, status=status, written=[f.fact_id for f in plan.upserts]
        )

    async def recall_facts(
        self,
        tenant_id: str,
        user_id: str,
        *,
        token_budget: int | None = None,
        channel: str = "private",
        subject: str | None = None,
    ) -> FactsResponse:
        """memory_recall: the user's current facts, confirmed before tentative, newest-weighted first,
        superseded never, narrowest scope winning conflicts, fenced, within the budget."""
        started = time.perf_counter()
        owner = Owner(tenant_id, user_id)
        now = datetime.now(UTC)
        index = await self.resources.vector_index()
        records = await index.scroll(FACTS, owner, self._fact_filter(channel), limit=self.settings.facts_scan_limit)
        wanted_subject = normalise_subject(subject) if subject else None
        candidates = []
        for record in records:
            fact = logic.fact_from_payload(record.payload)
            if fact is None or logic.is_superseded(fact):
                continue
            if wanted_subject is not None and normalise_subject(fact.subject) != wanted_subject:
                continue
            candidates.append(Candidate(id=record.id, kind="fact", relevance=1.0, payload=record.payload, fact=fact))
        candidates = logic.resolve_scope_conflicts(candidates)
        ranked = logic.rank_candidates(candidates, now=now, min_score=0.0, episode_half_life_days=1.0)
        lines = [
            logic.render_item(r.candidate.fact.text if r.candidate.fact else "", r.provenance_date) for r in ranked
        ]
        budget = token_budget or self.settings.facts_default_token_budget
        fitted = logic.fit_section(lines, token_budget=budget, count_tokens=self.token_counter().count_tokens)
        included = [ranked[i] for i in fitted.included]
        self._note_recalled(owner, included)
        self.metrics.record(
            "facts", injected=len(included), top_score=None, latency_ms=(time.perf_counter() - started) * 1000
        )
        return FactsResponse(
            section=fitted.text,
            items=[self._item(r) for r in included],
            tokens=fitted.tokens,
            omitted=len(ranked) - len(included),
        )

    # ------------------------------------------------------------------------------ erasure

    async def request_erasure(
        self, tenant_id: str, user_id: str, *, idempotency_key: str | None = None, reason: str | None = None
    ) -> ErasureAccepted:
        """Publish ErasureRequested for the whole user; the pruner carries it out. With an
        idempotency key a retried request is the same event (dropped by the stream's duplicate window)."""
        Owner(tenant_id, user_id)  # validates the ids before anything is published
        event_id = (
            deterministic_uuid("erasure-request", tenant_id, user_id, idempotency_key)
            if idempotency_key
            else uuid.uuid4()
        )
        event = ErasureRequested(
            event_id=event_id,
            tenant_id=tenant_id,
            user_id=user_id,
            target=ErasureTarget(kind="user"),
            requested_at=datetime.now(UTC),
            reason=reason,
        )
        client = await self.nats()
        try:
            ack = await client.jetstream().publish(
                self.subjects.erasure_requested(tenant_id, user_id),
                event.model_dump_json().encode("utf-8"),
                stream=self.subjects.derived_stream,
                headers={"Nats-Msg-Id": str(event_id), "content-type": "application/json"},
                timeout=10.0,
            )
        except Exception as exc:
            raise StoreUnavailable(f"could not publish the erasure request: {exc}") from exc
        log.warning("erasure requested tenant=%s user=%s event=%s", tenant_id, user_id, event_id)
        return ErasureAccepted(event_id=str(event_id), duplicate=bool(ack.duplicate))

    # ------------------------------------------------------------------------------ health

    async def readiness(self) -> dict[str, str]:
        """'ok' or the error, per dependency: broker, vector index, graph."""
        probe = Owner("readyz", "readyz")
        timeout = self.settings.readiness_timeout_s

        async def broker() -> None:
            client = await self.nats()
            await client.flush(timeout=max(1, int(timeout)))

        async def vectors() -> None:
            index = await self.resources.vector_index()
            await index.count(EPISODES, probe)

        async def graph() -> None:
            repository = await self.resources.graph()
            await repository.search_entities(probe, "readyz", limit=1)

        checks = {"broker": broker, "vector_index": vectors, "graph": graph}
        results: dict[str, str] = {}
        for name, check in checks.items():
            try:
                await asyncio.wait_for(check(), timeout=timeout)
                results[name] = "ok"
            except TimeoutError:
                results[name] = f"no answer within {timeout:g}s"
            except Exception as exc:  # readiness reports every failure, whatever its type
                results[name] = f"{type(exc).__name__}: {exc}"[:300]
        return results


def _channels(payload: Mapping[str, Any]) -> list[Channel]:
    """The channel(s) a memory was stated in: one for an episode, a list for a fact (said in private
    and in a group: both)."""
    value = payload.get("channel")
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return sorted({_CHANNELS[v] for v in values if isinstance(v, str) and v in _CHANNELS})


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat() if ts is not None else None
