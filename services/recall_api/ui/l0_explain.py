""" "What would L0 inject for this message?": the same query, candidates, gate, ranking and token
budget as `AutoRecall.auto`, with every candidate kept and the reason each one was left out. A
preview is not a recall: nothing here counts towards recall counts or the L0 metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from services.common.domain.fact_attributes import is_procedure_attribute
from services.common.domain.owner import Owner
from services.common.domain.trivial import is_trivial_message
from services.common.stores.vector.port import HybridWeights
from services.recall_api.l0.auto_recall import l0_policy
from services.recall_api.l0.query import Turn, build_l0_query
from services.recall_api.l0.reasons import NOTHING_TO_SEARCH, TRIVIAL, CutReasons, EmptyAnswer, narrowed_to
from services.recall_api.l0.select import select_injection
from services.recall_api.retrieval import memory_section, ranking
from services.recall_api.retrieval.candidates import CandidateRetriever, CandidateSearch
from services.recall_api.retrieval.memory_records import memory_item
from services.recall_api.schemas import AutoRecallRequest, MemoryItem
from services.recall_api.service import RecallService


@dataclass(frozen=True, slots=True)
class ExplainedItem:
    item: MemoryItem
    injected: bool
    reason: str  # why it was left out ("" when injected)


@dataclass(frozen=True, slots=True)
class L0Explanation:
    section: str
    tokens: int
    threshold: float
    max_entries: int
    token_budget: int
    top_score: float | None
    skipped_reason: str | None  # why nothing is injected (None when something is)
    items: list[ExplainedItem]
    query_text: str


async def explain_auto(service: RecallService, tenant_id: str, request: AutoRecallRequest) -> L0Explanation:
    settings = service.settings
    owner = Owner(tenant_id, request.user_id)
    max_entries = request.max_entries or settings.l0_default_max_entries
    budget = request.token_budget or settings.l0_default_token_budget
    threshold = settings.l0_min_score

    def skipped(reason: str, text: str = "") -> L0Explanation:
        return L0Explanation("", 0, threshold, max_entries, budget, None, reason, [], text)

    if is_trivial_message(request.message):
        return skipped(TRIVIAL)
    turns = [Turn(t.role, t.content) for t in request.recent_messages]
    text = build_l0_query(
        request.message,
        turns,
        previous_user_turns=settings.l0_previous_user_turns,
        max_codepoints=settings.l0_query_max_codepoints,
    )
    if not text:
        return skipped(NOTHING_TO_SEARCH)
    retriever = CandidateRetriever(service.resources)
    now = datetime.now(UTC)
    search = CandidateSearch(
        weights=HybridWeights(keyword=settings.l0_keyword_weight, dense=settings.l0_dense_weight),
        fetch=max_entries * settings.fetch_factor,
        kinds=("episode", "fact"),
        channel=request.channel,
        agent_id=request.agent_id,
        include_superseded=False,
        now=now,
    )
    found = await retriever.candidate_set(owner, await retriever.embed(text), search)
    top_score = found.top_score
    # Working rules are left out as AutoRecall leaves them out (they reach the prompt through procedures).
    candidates = [c for c in found.candidates if not (c.fact and is_procedure_attribute(c.fact.attribute))]
    # Ranked without the gate, so the ones it would drop can be shown with their score; the order of
    # those that pass is the same as with the gate (the gate only removes).
    ranked = ranking.rank_candidates(
        candidates,
        now=now,
        min_score=-math.inf,
        episode_half_life_days=settings.episode_half_life_days,
        episode_recency_weight=settings.episode_recency_weight,
        importance_weight=settings.importance_weight,
    )
    passing = [r for r in ranked if r.candidate.relevance >= threshold]
    tokens = service.resources.keywords().tokens
    selection = select_injection(passing, found.parts, text, tokens, l0_policy(settings), limit=max_entries)
    offered = selection.chosen[:max_entries]
    lines = [memory_section.render_item(memory_item(r).abstract, r.provenance_date) for r in offered]
    fitted = memory_section.fit_section(
        lines, token_budget=budget, count_tokens=service.token_counter().count_tokens_cached
    )
    injected = {offered[i].candidate.id for i in fitted.included}
    cut = CutReasons(threshold, max_entries, budget, {r.candidate.id for r in offered}, selection.dropped)
    explained = [ExplainedItem(memory_item(r), r.candidate.id in injected, cut.reason(r, injected)) for r in ranked]
    # What is injected first, in section order; then what was cut, best score first.
    explained.sort(key=lambda e: (not e.injected, 0.0 if e.injected else -e.item.score))
    # The same sentence the API answers: the best candidate past the floor is the first of `passing`.
    empty = EmptyAnswer(
        found=len(found.candidates),
        eligible=len(candidates),
        best=max((c.relevance for c in candidates), default=None),
        floor=threshold,
        best_cut=cut.reason(passing[0], injected) if passing else None,
        narrowed=narrowed_to(request.channel, request.agent_id),
    )
    return L0Explanation(
        section=fitted.text,
        tokens=fitted.tokens,
        threshold=threshold,
        max_entries=max_entries,
        token_budget=budget,
        top_score=round(top_score, 4) if top_score is not None else None,
        skipped_reason=None if injected else empty.reason(),
        items=explained,
        query_text=text,
    )
