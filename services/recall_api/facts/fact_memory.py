"""Facts on demand: `memory_save` (one fact through the write policy, idempotent per request) and
`memory_recall` (the user's current facts as a fenced, dated list within a token budget)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from services.common.domain.facts import FactCandidate, FactProvenance, normalise_subject, normalise_text_key
from services.common.domain.ids import deterministic_uuid
from services.common.domain.language import detect_language
from services.common.domain.owner import Owner
from services.common.domain.tokens import TokenCounter
from services.common.runtime.resources import Resources
from services.common.stores.tombstones import UserBeingErased
from services.recall_api.errors import FactRejected, StoreUnavailable
from services.recall_api.retrieval import memory_section, ranking
from services.recall_api.retrieval.candidates import fact_filter, note_recalled
from services.recall_api.retrieval.memory_records import memory_item
from services.recall_api.retrieval.metrics import RecallMetrics
from services.recall_api.retrieval.ranking import Candidate
from services.recall_api.retrieval.recall_counts import RecallCountUpdater
from services.recall_api.schemas import FactsResponse, SaveFactRequest, SaveFactResponse
from services.recall_api.settings import RecallApiSettings

log = logging.getLogger(__name__)


def fact_candidate(tenant_id: str, request: SaveFactRequest, now: datetime) -> FactCandidate:
    """The fact a `memory_save` request states, with its observation id.

    Idempotency: one observation per request id; without one, the same statement saved again on the
    same day is the same observation (an agent repeating itself is no new evidence)."""
    text = request.text.strip()
    subject = (request.subject or "user").strip() or "user"
    attribute = (request.attribute or "note").strip() or "note"
    value = (request.value or text).strip() or text
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
    return FactCandidate(
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


class FactMemory:
    def __init__(
        self,
        settings: RecallApiSettings,
        resources: Resources,
        token_counter: Callable[[], TokenCounter],
        metrics: RecallMetrics,
        recall_counts: RecallCountUpdater,
    ) -> None:
        self.settings = settings
        self.resources = resources
        self.token_counter = token_counter
        self.metrics = metrics
        self.recall_counts = recall_counts

    async def save_fact(self, tenant_id: str, request: SaveFactRequest) -> SaveFactResponse:
        owner = Owner(tenant_id, request.user_id)
        now = datetime.now(UTC)
        candidate = fact_candidate(tenant_id, request, now)
        store = await self.resources.facts()
        tombstones = await self.resources.tombstones()
        try:
            # Recorded as in flight for the user: a concurrent erasure waits for this write, then removes it.
            async with tombstones.guard(owner, "recall-api", None, wait=False):
                written = await store.write(owner, candidate, channel=request.channel, now=now)
        except UserBeingErased as exc:
            raise StoreUnavailable(str(exc)) from exc
        plan = written.plan
        if plan.outcome == "rejected":
            raise FactRejected(plan.rejected_reason or "rejected by the write policy")
        status = next((f.status for f in plan.upserts if f.fact_id == plan.fact_id), None)
        if status is None and plan.fact_id:
            # A repeated observation left the fact unchanged: its status is the stored one.
            stored = await store.get(owner, [plan.fact_id])
            status = stored[0].fact.status if stored else None
        log.info(
            "memory_save tenant=%s user=%s outcome=%s fact=%s", tenant_id, request.user_id, plan.outcome, plan.fact_id
        )
        return SaveFactResponse(
            outcome=plan.outcome, fact_id=plan.fact_id, status=status, written=[f.fact_id for f in plan.upserts]
        )

    async def _current_facts(self, owner: Owner, channel: str, subject: str | None) -> list[Candidate]:
        """The owner's current facts visible in `channel` (about `subject`, when given)."""
        store = await self.resources.facts()
        found = await store.scroll(owner, fact_filter(channel), limit=self.settings.facts_scan_limit)
        wanted_subject = normalise_subject(subject) if subject else None
        return [
            ranking.fact_candidate(stored, 1.0)
            for stored in found
            if not ranking.is_superseded(stored.fact)
            and (wanted_subject is None or normalise_subject(stored.fact.subject) == wanted_subject)
        ]

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
        candidates = ranking.resolve_scope_conflicts(await self._current_facts(owner, channel, subject))
        ranked = ranking.rank_candidates(candidates, now=now, min_score=0.0, episode_half_life_days=1.0)
        lines = [
            memory_section.render_item(r.candidate.fact.text if r.candidate.fact else "", r.provenance_date)
            for r in ranked
        ]
        budget = token_budget or self.settings.facts_default_token_budget
        fitted = memory_section.fit_section(
            lines, token_budget=budget, count_tokens=self.token_counter().count_tokens_cached
        )
        included = [ranked[i] for i in fitted.included]
        note_recalled(self.recall_counts, owner, included)
        self.metrics.record(
            "facts", injected=len(included), top_score=None, latency_ms=(time.perf_counter() - started) * 1000
        )
        return FactsResponse(
            section=fitted.text,
            items=[memory_item(r) for r in included],
            tokens=fitted.tokens,
            omitted=len(ranked) - len(included),
        )
