"""Procedural memory: the working rules that `GET /v1/procedures` and the MCP tool `memory_procedures`
answer with (services/recall_api/http/procedure_routes.py, mcp/procedure_tool.py).

A working rule is a fact with subject `procedure` and attribute `procedure_<topic>` (single-valued, so
a new rule on a topic supersedes the old one under the write policy; only current rules are read).
The rules of one turn are the user's own plus the tenant's shared ones (saved for the reserved user
`SHARED_RULES_USER` at team/org scope); on a topic both have, the user's own rule wins. While every
rule fits the token budget all are returned (a prompt should carry the user's rules every turn); past
the budget only the rules relevant to the turn's message are returned, best first, as many as fit,
and rules with no bearing on the message are left out rather than filling the budget. Relevance is
character-bigram overlap: deterministic, offline, and it works for Korean without a morphological
analyser (a rule about "보고서" matches "이번 주 보고서 작성해줘").
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from services.common.domain.fact_attributes import PROCEDURE_ATTRIBUTE_PREFIX, is_procedure_attribute
from services.common.domain.facts import Fact, normalise_subject
from services.common.domain.owner import Owner
from services.common.domain.tokens import TokenCounter
from services.common.runtime.resources import Resources
from services.recall_api.retrieval.candidates import fact_filter
from services.recall_api.retrieval.ranking import is_superseded
from services.recall_api.retrieval.recall_counts import RecallCountUpdater
from services.recall_api.settings import RecallApiSettings

PROCEDURE_SUBJECT = "procedure"
SHARED_RULES_USER = "_tenant"  # the reserved user holding the tenant's team/org rules
DEFAULT_TOKEN_BUDGET = 400
MAX_TOKEN_BUDGET = 8000
MIN_RELEVANCE = 0.15  # below this share of a rule's bigrams found in the message, the rule is off-topic


class ProcedureRule(BaseModel):
    id: str = Field(description="The rule's fact id (its history: GET /v1/facts/{id}/history).")
    topic: str = Field(description="What the rule governs; a new rule on the same topic supersedes this one.")
    text: str = Field(description="The rule as the user stated it.")
    owner: Literal["user", "tenant"] = Field(description="'user': the user's own rule; 'tenant': a shared one.")
    scope: str = Field(description="personal, team or org.")
    since: datetime = Field(description="When this version of the rule took effect.")
    relevance: float | None = Field(default=None, description="Bigram overlap with `query` (only when ranked).")


class ProceduresResponse(BaseModel):
    rules: list[ProcedureRule] = Field(description="The rules to load into this turn's system prompt, in order.")
    section: str = Field(description="The rules as '- rule' lines, ready for the system prompt ('' when none).")
    tokens: int = Field(description="Tokens of `section` (o200k_base).")
    ranked: bool = Field(description="False: every current rule fitted and all are here; True: narrowed to `query`.")
    total: int = Field(description="Current rules of the user and the tenant visible in the channel.")
    omitted: int = Field(description="Rules left out: not relevant to `query`, or past the budget.")
    left_out: list[ProcedureRule] = Field(default_factory=list, description="The rules left out, for reporting.")


def rule_line(text: str) -> str:
    return f"- {text}"


def _bigrams(text: str) -> set[str]:
    folded = re.sub(r"\s+", "", unicodedata.normalize("NFKC", text).casefold())
    return {folded[i : i + 2] for i in range(len(folded) - 1)}


def relevance(rule: str, query: str) -> float:
    """The share of the rule's character bigrams that occur in the query."""
    rule_grams, query_grams = _bigrams(rule), _bigrams(query)
    if not rule_grams or not query_grams:
        return 0.0
    return len(rule_grams & query_grams) / len(rule_grams)


@dataclass(frozen=True)
class Selection:
    chosen: list[ProcedureRule]
    tokens: int
    ranked: bool


def select_procedures(
    rules: Sequence[ProcedureRule], query: str | None, budget: int, count_tokens: Callable[[str], int]
) -> Selection:
    """All rules while they fit `budget`; otherwise the relevant ones, best first, as many as fit.
    Without a query there is nothing to rank by: the newest rules that fit are kept."""
    costs = [count_tokens(rule_line(rule.text)) for rule in rules]
    if sum(costs) <= budget:
        return Selection(list(rules), sum(costs), ranked=False)
    if query:
        scores = [relevance(rule.text, query) for rule in rules]
        order = sorted(range(len(rules)), key=lambda i: scores[i], reverse=True)
        eligible = [i for i in order if scores[i] >= MIN_RELEVANCE]
    else:
        scores = [0.0] * len(rules)
        eligible = sorted(range(len(rules)), key=lambda i: rules[i].since, reverse=True)
    chosen: list[ProcedureRule] = []
    used = 0
    for index in eligible:
        if used + costs[index] <= budget:
            chosen.append(rules[index].model_copy(update={"relevance": round(scores[index], 4) if query else None}))
            used += costs[index]
    return Selection(chosen, used, ranked=True)


def _rule(fact: Fact, fact_id: str, owner: Literal["user", "tenant"]) -> ProcedureRule:
    return ProcedureRule(
        id=fact_id,
        topic=fact.attribute.removeprefix(PROCEDURE_ATTRIBUTE_PREFIX),
        text=fact.text,
        owner=owner,
        scope=fact.scope,
        since=fact.valid_from,
    )


class ProcedureMemory:
    """Reads the current rules of a user and of the tenant, and selects a turn's rules."""

    def __init__(
        self,
        settings: RecallApiSettings,
        resources: Resources,
        token_counter: Callable[[], TokenCounter],
        recall_counts: RecallCountUpdater,
    ) -> None:
        self.settings = settings
        self.resources = resources
        self.token_counter = token_counter
        self.recall_counts = recall_counts

    async def _current(self, owner: Owner, channel: str, who: Literal["user", "tenant"]) -> list[ProcedureRule]:
        store = await self.resources.facts()
        found = await store.scroll(owner, fact_filter(channel), limit=self.settings.facts_scan_limit)
        rules = [
            _rule(stored.fact, stored.fact.fact_id, who)
            for stored in found
            if normalise_subject(stored.fact.subject) == PROCEDURE_SUBJECT
            and is_procedure_attribute(stored.fact.attribute)
            and not is_superseded(stored.fact)
        ]
        return sorted(rules, key=lambda rule: (rule.since, rule.id))

    async def procedures(
        self,
        tenant_id: str,
        user_id: str,
        *,
        channel: str = "private",
        query: str | None = None,
        token_budget: int | None = None,
        include_shared: bool = True,
    ) -> ProceduresResponse:
        own = await self._current(Owner(tenant_id, user_id), channel, "user")
        shared: list[ProcedureRule] = []
        if include_shared and user_id != SHARED_RULES_USER:
            topics = {rule.topic for rule in own}
            shared = [
                rule
                for rule in await self._current(Owner(tenant_id, SHARED_RULES_USER), channel, "tenant")
                if rule.topic not in topics  # the user's own rule on a topic wins over the tenant's
            ]
        every = own + shared
        counter = self.token_counter()
        selection = select_procedures(every, query, token_budget or DEFAULT_TOKEN_BUDGET, counter.count_tokens)
        self._note_recalled(tenant_id, user_id, selection.chosen)
        section = "\n".join(rule_line(rule.text) for rule in selection.chosen)
        return ProceduresResponse(
            rules=selection.chosen,
            section=section,
            tokens=counter.count_tokens(section) if section else 0,
            ranked=selection.ranked,
            total=len(every),
            omitted=len(every) - len(selection.chosen),
            left_out=[rule for rule in every if rule.id not in {chosen.id for chosen in selection.chosen}],
        )

    def _note_recalled(self, tenant_id: str, user_id: str, chosen: Sequence[ProcedureRule]) -> None:
        # Loaded rules count as recalled, so the pruner never forgets a rule that is used every turn.
        now = time.time()
        for who, owner in (("user", Owner(tenant_id, user_id)), ("tenant", Owner(tenant_id, SHARED_RULES_USER))):
            self.recall_counts.submit("fact", owner, [rule.id for rule in chosen if rule.owner == who], now)
