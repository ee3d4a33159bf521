"""L0, auto-inject: before each turn, the few memories that matter for the current message, as a
fenced `## Memory Context` section within a token budget. Trivial messages ("ok", "ㅋㅋ") are not
searched at all."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from services.common.domain.fact_attributes import is_procedure_attribute
from services.common.domain.owner import Owner
from services.common.domain.tokens import TokenCounter
from services.common.domain.trivial import is_trivial_message
from services.common.stores.vector.port import HybridWeights
from services.recall_api.l0.deadline import start_query
from services.recall_api.l0.decision import shipped_model
from services.recall_api.l0.detail import prepare_query
from services.recall_api.l0.gate import L0GatePolicy
from services.recall_api.l0.query import Turn, build_l0_query
from services.recall_api.l0.reasons import NOTHING_TO_SEARCH, TRIVIAL, CutReasons, EmptyAnswer, narrowed_to
from services.recall_api.l0.select import L0Policy, select_injection
from services.recall_api.retrieval import memory_section, ranking
from services.recall_api.retrieval.candidates import CandidateRetriever, CandidateSearch, ScoreParts, note_recalled
from services.recall_api.retrieval.memory_records import memory_item
from services.recall_api.retrieval.metrics import RecallMetrics
from services.recall_api.retrieval.ranking import Ranked
from services.recall_api.retrieval.recall_counts import RecallCountUpdater
from services.recall_api.schemas import AutoRecallRequest, AutoRecallResponse, CutCandidate, MemoryItem
from services.recall_api.settings import RecallApiSettings

log = logging.getLogger(__name__)


def l0_policy(settings: RecallApiSettings) -> L0Policy:
    """The L0 decision as configured (see the `l0_*` settings): the shipped model, or the hand rules."""
    return L0Policy(
        gate=L0GatePolicy(
            relative_margin=settings.l0_relative_margin if settings.l0_relative_margin < 1 else None,
            min_dense=settings.l0_min_dense,
            min_dense_share=settings.l0_min_dense_share,
            min_keyword=settings.l0_min_keyword,
            one_per_session=settings.l0_one_per_session,
        ),
        subject_attribution=settings.l0_subject_attribution,
        detail_max_dense=settings.l0_detail_max_dense if settings.l0_detail_max_dense > 0 else None,
        value_check=settings.l0_value_check,
        model=shipped_model() if settings.l0_decision == "model" else None,
    )


class AutoRecall:
    def __init__(
        self,
        settings: RecallApiSettings,
        retriever: CandidateRetriever,
        token_counter: Callable[[], TokenCounter],
        metrics: RecallMetrics,
        recall_counts: RecallCountUpdater,
    ) -> None:
        self.settings = settings
        self.retriever = retriever
        self.token_counter = token_counter
        self.metrics = metrics
        self.recall_counts = recall_counts

    def _query_text(self, request: AutoRecallRequest) -> str:
        turns = [Turn(t.role, t.content) for t in request.recent_messages]
        return build_l0_query(
            request.message,
            turns,
            previous_user_turns=self.settings.l0_previous_user_turns,
            max_codepoints=self.settings.l0_query_max_codepoints,
        )

    async def auto(self, tenant_id: str, request: AutoRecallRequest) -> AutoRecallResponse:
        started = time.perf_counter()
        owner = Owner(tenant_id, request.user_id)
        max_entries = request.max_entries or self.settings.l0_default_max_entries
        budget = request.token_budget or self.settings.l0_default_token_budget
        # The trivial check comes before anything touches a store or a model.
        if is_trivial_message(request.message):
            return self._skipped("trivial", TRIVIAL, started, owner)
        text = self._query_text(request)
        if not text:
            return self._skipped("empty", NOTHING_TO_SEARCH, started, owner)
        now = datetime.now(UTC)
        deadline = started + self.settings.l0_embedding_deadline_ms / 1000
        # The keyword form is encoded while the query embeds; the vector arrives by the deadline or not at all.
        pending = await start_query(self.retriever.resources, text, deadline=deadline)
        prepare_query(text)  # while the query embeds
        search = CandidateSearch(
            weights=HybridWeights(keyword=self.settings.l0_keyword_weight, dense=self.settings.l0_dense_weight),
            fetch=max_entries * self.settings.fetch_factor,
            kinds=("episode", "fact"),
            channel=request.channel,
            agent_id=request.agent_id,
            include_superseded=False,
            now=now,
            metadata=request.metadata,
        )
        try:
            # The searches' keyword branches run while the query embeds; they finish with its vector.
            prepared = await self.retriever.prepare(owner, pending.sparse, search)
            found = await self.retriever.candidate_set(owner, await pending.ready(), search, prepared)
        finally:
            pending.settle()
        # Working rules come through GET /v1/procedures into the system prompt every turn; here they would be
        # duplicates taking the section's few entries from the facts and episodes it is for.
        candidates = [c for c in found.candidates if not (c.fact and is_procedure_attribute(c.fact.attribute))]
        top_score = found.top_score
        ranked = ranking.rank_candidates(
            candidates,
            now=now,
            min_score=self.settings.l0_min_score,
            episode_half_life_days=self.settings.episode_half_life_days,
            episode_recency_weight=self.settings.episode_recency_weight,
            importance_weight=self.settings.importance_weight,
        )
        decision = self._decide(ranked, found.parts, text, max_entries=max_entries, budget=budget)
        injected = decision.injected
        note_recalled(self.recall_counts, owner, injected)
        latency_ms = (time.perf_counter() - started) * 1000
        self.metrics.record("auto", injected=len(injected), top_score=top_score, latency_ms=latency_ms)
        log.info(
            "recall.auto tenant=%s user=%s injected=%d top_score=%s candidates=%d tokens=%d latency_ms=%.1f",
            owner.tenant_id,
            owner.user_id,
            len(injected),
            f"{top_score:.3f}" if top_score is not None else "none",
            len(candidates),
            decision.fitted.tokens,
            latency_ms,
        )
        empty = EmptyAnswer(
            found=len(found.candidates),
            eligible=len(candidates),
            best=max((c.relevance for c in candidates), default=None),
            floor=self.settings.l0_min_score,
            best_cut=decision.cut[0].reason if decision.cut else None,
            deadline_ms=self.settings.l0_embedding_deadline_ms if pending.degraded else None,
            narrowed=narrowed_to(request.channel, request.agent_id),
        )
        return AutoRecallResponse(
            section=decision.fitted.text,
            items=decision.items,
            injected=len(injected),
            top_score=round(top_score, 4) if top_score is not None else None,
            tokens=decision.fitted.tokens,
            skipped_reason=None if injected else empty.reason(),
            cut=decision.cut,
            degraded=pending.degraded,
        )

    def _decide(
        self, ranked: list[Ranked], parts: dict[str, ScoreParts], text: str, *, max_entries: int, budget: int
    ) -> _Decision:
        """What goes into the section, and why each other candidate past the floor does not."""
        keywords = self.retriever.resources.keywords()
        selection = select_injection(ranked, parts, text, keywords.tokens, l0_policy(self.settings), limit=max_entries)
        chosen = selection.chosen
        items = [memory_item(r) for r in chosen]
        lines = [
            memory_section.render_item(item.abstract, r.provenance_date) for item, r in zip(items, chosen, strict=True)
        ]
        counter = self.token_counter()
        fitted = memory_section.fit_section(lines, token_budget=budget, count_tokens=counter.count_tokens_cached)
        injected = [chosen[i] for i in fitted.included]
        injected_ids = {r.candidate.id for r in injected}
        why = CutReasons(
            self.settings.l0_min_score, max_entries, budget, {r.candidate.id for r in chosen}, selection.dropped
        )
        cut = [
            CutCandidate(
                id=r.candidate.id,
                kind=r.candidate.kind,
                score=round(r.candidate.relevance, 4),
                reason=why.reason(r, injected_ids),
            )
            for r in ranked
            if r.candidate.id not in injected_ids
        ]
        return _Decision(fitted, [items[i] for i in fitted.included], injected, cut)

    def _skipped(self, code: str, reason: str, started: float, owner: Owner) -> AutoRecallResponse:
        """The answer to a message that is not searched; `code` labels the metric, `reason` is said."""
        latency_ms = (time.perf_counter() - started) * 1000
        self.metrics.record("auto", injected=0, top_score=None, latency_ms=latency_ms, skipped=code)
        log.info("recall.auto tenant=%s user=%s skipped=%s", owner.tenant_id, owner.user_id, code)
        return AutoRecallResponse(section="", items=[], injected=0, top_score=None, tokens=0, skipped_reason=reason)


@dataclass(frozen=True, slots=True)
class _Decision:
    fitted: memory_section.FittedSection
    items: list[MemoryItem]  # the injected ones, in section order
    injected: list[Ranked]
    cut: list[CutCandidate]
