"""Shared retrieval for every read level: the query embedded (dense and keyword), hybrid hits from
the episode, passage and fact collections under the owner's filters, and the candidates ranking
works on. Isolation: every store call takes the `Owner` it is given."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from services.common.domain.facts import Fact
from services.common.domain.owner import Owner
from services.common.gateways.embedder import begin_query
from services.common.runtime.resources import Resources
from services.common.stores.episodes import EpisodeHit, EpisodeStore, PassageHit
from services.common.stores.facts import FactHit, FactStore
from services.common.stores.passage_points import WITHOUT_TURN_POINTS
from services.common.stores.payload_fields import metadata_match
from services.common.stores.vector.port import HybridWeights, PreparedHybrid, SearchFilter, SparseVector
from services.recall_api.retrieval import ranking
from services.recall_api.retrieval.ranking import Candidate, Ranked
from services.recall_api.retrieval.recall_counts import RecallCountUpdater
from services.recall_api.retrieval.session_evidence import EvidencePolicy, aggregate_episode_evidence

LIVE_FACT_STATUSES = ["confirmed", "tentative"]


@dataclass(frozen=True, slots=True)
class Query:
    """`dense` None: the vector missed L0's deadline (l0/deadline.py), keywords alone answer."""

    text: str
    dense: Sequence[float] | None
    sparse: SparseVector


@dataclass(frozen=True, slots=True)
class ScoreParts:
    """The two halves of a candidate's fused relevance, each in [0, 1] (None: that branch did not
    run): what the L0 gate checks for keyword and dense agreement."""

    dense: float | None
    keyword: float | None


@dataclass(frozen=True, slots=True)
class CandidateSet:
    """Candidates with the best relevance seen and, per candidate id, the parts of its best hit."""

    candidates: list[Candidate]
    top_score: float | None
    parts: dict[str, ScoreParts]


def best_hit_parts(
    episode_hits: Sequence[EpisodeHit], passage_hits: Sequence[PassageHit], fact_hits: Sequence[FactHit]
) -> dict[str, ScoreParts]:
    """Memory id → the score parts of its best-scoring hit (a passage stands for its episode, as in
    `ranking.merge_episode_hits`)."""
    best: dict[str, tuple[float, ScoreParts]] = {}
    scored: list[tuple[str, float, ScoreParts]] = [
        *((h.episode.episode_id, h.score, ScoreParts(h.dense_score, h.keyword_score)) for h in episode_hits),
        *((h.passage.episode_id, h.score, ScoreParts(h.dense_score, h.keyword_score)) for h in passage_hits),
        *((h.stored.fact_id, h.score, ScoreParts(h.dense_score, h.keyword_score)) for h in fact_hits),
    ]
    for memory_id, score, parts in scored:
        if memory_id and (memory_id not in best or score > best[memory_id][0]):
            best[memory_id] = (score, parts)
    return {memory_id: parts for memory_id, (_, parts) in best.items()}


@dataclass(frozen=True, slots=True)
class CandidateSearch:
    """What to look for: the kinds of memory, the channel and agent they must belong to, and how many
    hits to fetch per collection before ranking."""

    weights: HybridWeights
    fetch: int
    kinds: Sequence[str]
    channel: str
    agent_id: str | None
    include_superseded: bool
    now: datetime
    metadata: Mapping[str, str] = field(default_factory=dict)  # session metadata every hit must carry
    # How an episode's summary, passage and fact hits combine (session_evidence.py); the default, the
    # best hit's score, is what L0's gate reads its score parts against.
    evidence: EvidencePolicy = field(default_factory=EvidencePolicy)
    # Whether a passage is as close as its closest turn (stores/passage_points.py). L1 only: L0's
    # decision was calibrated on passage scores alone.
    passage_turns: bool = False

    def passage_filter(self, episode_search: SearchFilter) -> SearchFilter:
        if self.passage_turns:
            return episode_search
        return dataclasses.replace(episode_search, exclude={**episode_search.exclude, **WITHOUT_TURN_POINTS})

    @property
    def fact_votes(self) -> bool:
        """Facts are searched only to vote for their sessions (episodes asked for, facts not)."""
        return "fact" not in self.kinds and "episode" in self.kinds and self.evidence.fact_vote > 0


@dataclass(frozen=True, slots=True)
class PreparedSearches:
    """The searches of a `CandidateSearch` begun before the query vector exists (their keyword
    branches read meanwhile: VectorIndex.prepare_hybrid); None for a kind not searched."""

    episodes: PreparedHybrid | None
    passages: PreparedHybrid | None
    facts: PreparedHybrid | None


def channel_filter(channel: str) -> list[str] | None:
    """A group conversation only sees memories stated in a group; a private one sees both."""
    return ["group"] if channel == "group" else None


def episode_filter(
    channel: str, agent_id: str | None, now: datetime, metadata: Mapping[str, str] | None = None
) -> SearchFilter:
    # Expired episodes may still be stored until the pruner's next run; never return them.
    return SearchFilter(
        agent_id=agent_id,
        channels=channel_filter(channel),
        after=now,
        time_field="expires_at_ts",
        match=metadata_match(metadata or {}),
    )


def fact_filter(
    channel: str, include_superseded: bool = False, metadata: Mapping[str, str] | None = None
) -> SearchFilter:
    match: dict[str, str | int | bool | Sequence[str]] = dict(metadata_match(metadata or {}))
    if not include_superseded:
        match["status"] = LIVE_FACT_STATUSES
    return SearchFilter(channels=channel_filter(channel), match=match)


def note_recalled(recall_counts: RecallCountUpdater, owner: Owner, ranked: Sequence[Ranked]) -> None:
    """Count what was returned, off the response path (the pruner keeps what is recalled)."""
    now = time.time()
    episodes = [r.candidate.id for r in ranked if r.candidate.kind == "episode"]
    facts = [r.candidate.id for r in ranked if r.candidate.kind == "fact"]
    if episodes:
        recall_counts.submit("episode", owner, episodes, now)
    if facts:
        recall_counts.submit("fact", owner, facts, now)


class CandidateRetriever:
    """Embeds queries and reads candidates from the episode and fact stores."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources

    async def embed(self, text: str) -> Query:
        embedding = begin_query(self.resources.embedder(), text)  # started before the keyword form takes the GIL
        try:
            sparse = await asyncio.to_thread(self.resources.keywords().encode_query, text)
        except BaseException:
            if not embedding.cancel() and not embedding.cancelled():  # done: its error is retrieved, not logged lost
                embedding.exception()
            raise
        return Query(text=text, dense=await embedding, sparse=sparse)

    async def prepare(self, owner: Owner, sparse: SparseVector, search: CandidateSearch) -> PreparedSearches:
        """Each search's first step, for a query whose vector is still coming (L0: while it embeds)."""
        episodes = await self.resources.episodes()
        facts = await self.resources.facts()
        episode_search = episode_filter(search.channel, search.agent_id, search.now, search.metadata)
        found: dict[str, PreparedHybrid | None] = {"episodes": None, "passages": None, "facts": None}
        if "episode" in search.kinds:
            for name, passages in (("episodes", False), ("passages", True)):
                found[name] = await episodes.prepare_search(
                    owner,
                    passages=passages,
                    sparse=sparse,
                    weights=search.weights,
                    limit=search.fetch,
                    search_filter=search.passage_filter(episode_search) if passages else episode_search,
                )
        if "fact" in search.kinds:
            found["facts"] = await facts.prepare_search(
                owner,
                sparse=sparse,
                weights=search.weights,
                limit=search.fetch,
                search_filter=fact_filter(search.channel, search.include_superseded, search.metadata),
            )
        return PreparedSearches(**found)

    async def candidates(
        self, owner: Owner, query: Query, search: CandidateSearch
    ) -> tuple[list[Candidate], float | None]:
        """Episodes (directly or through a passage) and facts matching the query, scope conflicts
        resolved; plus the best relevance seen."""
        found = await self.candidate_set(owner, query, search)
        return found.candidates, found.top_score

    async def candidate_set(
        self, owner: Owner, query: Query, search: CandidateSearch, prepared: PreparedSearches | None = None
    ) -> CandidateSet:
        """`candidates`, with the keyword and dense parts of each candidate's best hit; the searches
        `prepared` began (with `query.sparse`, `search`) finish with `query.dense`."""
        episodes = await self.resources.episodes()
        facts = await self.resources.facts()
        episode_search = episode_filter(search.channel, search.agent_id, search.now, search.metadata)
        (episode_hits, passage_hits), fact_hits = await asyncio.gather(
            self._episode_hits(episodes, owner, query, search, episode_search, prepared),
            self._fact_hits(facts, owner, query, search, prepared),
        )
        returned_facts = [] if search.fact_votes else fact_hits
        all_scores = [hit.score for found in (episode_hits, passage_hits, returned_facts) for hit in found]
        top_score = max(all_scores) if all_scores else None

        candidates: list[Candidate] = []
        if "episode" in search.kinds:
            candidates.extend(
                await self._episodes(
                    episodes, owner, (episode_hits, passage_hits, fact_hits), episode_search, search.evidence
                )
            )
        if "fact" in search.kinds:
            candidates.extend(await self._facts(facts, owner, fact_hits, search))
        return CandidateSet(candidates, top_score, best_hit_parts(episode_hits, passage_hits, returned_facts))

    @staticmethod
    async def _episode_hits(
        store: EpisodeStore,
        owner: Owner,
        query: Query,
        search: CandidateSearch,
        episode_search: SearchFilter,
        prepared: PreparedSearches | None,
    ) -> tuple[list[EpisodeHit], list[PassageHit]]:
        if "episode" not in search.kinds:
            return [], []
        if prepared is not None and prepared.episodes is not None and prepared.passages is not None:
            return await asyncio.gather(
                store.finish_search(prepared.episodes, query.dense),
                store.finish_passage_search(prepared.passages, query.dense),
            )
        return await asyncio.gather(
            store.search(
                owner,
                dense=query.dense,
                sparse=query.sparse,
                weights=search.weights,
                limit=search.fetch,
                search_filter=episode_search,
            ),
            store.search_passages(
                owner,
                dense=query.dense,
                sparse=query.sparse,
                weights=search.weights,
                limit=search.fetch,
                search_filter=search.passage_filter(episode_search),
            ),
        )

    @staticmethod
    async def _fact_hits(
        store: FactStore, owner: Owner, query: Query, search: CandidateSearch, prepared: PreparedSearches | None
    ) -> list[FactHit]:
        if "fact" not in search.kinds and not search.fact_votes:
            return []
        if prepared is not None and prepared.facts is not None:
            return await store.finish_search(prepared.facts, query.dense)
        return await store.search(
            owner,
            dense=query.dense,
            sparse=query.sparse,
            weights=search.weights,
            limit=search.fetch,
            search_filter=fact_filter(search.channel, search.include_superseded, search.metadata),
        )

    @staticmethod
    async def _episodes(
        store: EpisodeStore,
        owner: Owner,
        hits: tuple[Sequence[EpisodeHit], Sequence[PassageHit], Sequence[FactHit]],
        episode_search: SearchFilter,
        evidence: EvidencePolicy,
    ) -> list[Candidate]:
        episode_hits, passage_hits, fact_hits = hits
        merged = aggregate_episode_evidence(episode_hits, passage_hits, fact_hits, evidence)
        found = {hit.episode.episode_id: hit.episode for hit in episode_hits}
        missing = [episode_id for episode_id in merged if episode_id not in found]
        if missing:
            # Episodes found only through a passage: read them with the same owner and filters.
            passage_only = dataclasses.replace(episode_search, ids=missing)
            found.update((e.episode_id, e) for e in await store.scroll(owner, passage_only, limit=len(missing)))
        reached: dict[str, list[str]] = {}
        for passage_hit in sorted(passage_hits, key=lambda h: -h.score):
            reached.setdefault(passage_hit.passage.episode_id, []).append(passage_hit.passage.text)
        candidates: list[Candidate] = []
        for episode_id, evidence_of in merged.items():
            stored = found.get(episode_id)
            if stored is None:
                continue  # passage left behind by an episode that expired or was erased
            text = evidence_of.passage_text if evidence_of.via_passage else None
            candidates.append(
                ranking.episode_candidate(
                    stored, evidence_of.relevance, passage_text=text, reached=reached.get(episode_id, ())
                )
            )
        return candidates

    async def _facts(
        self, store: FactStore, owner: Owner, fact_hits: Sequence[FactHit], search: CandidateSearch
    ) -> list[Candidate]:
        fact_candidates = [
            ranking.fact_candidate(hit.stored, hit.score)
            for hit in fact_hits
            if search.include_superseded or not ranking.is_superseded(hit.stored.fact)
        ]
        context = await self._narrower_facts(store, owner, fact_candidates, search.channel)
        return ranking.resolve_scope_conflicts(fact_candidates, context)

    @staticmethod
    async def _narrower_facts(
        store: FactStore, owner: Owner, candidates: Sequence[Candidate], channel: str
    ) -> list[Fact]:
        """Current facts in narrower scopes on the same subject and single-valued attribute as a
        team/org candidate: they win the conflict even when the search did not return them."""
        broader = ranking.broader_single_valued(candidates)
        if not broader:
            return []
        found: list[Fact] = []
        for attribute in sorted({fact.attribute for fact in broader}):
            scopes = sorted(
                {s for fact in broader if fact.attribute == attribute for s in ranking.narrower_scopes(fact.scope)}
            )
            stored = await store.scroll(
                owner,
                SearchFilter(
                    scopes=scopes,
                    channels=channel_filter(channel),
                    match={"attribute": attribute, "status": LIVE_FACT_STATUSES},
                ),
                limit=200,
            )
            found.extend(s.fact for s in stored)
        return found
