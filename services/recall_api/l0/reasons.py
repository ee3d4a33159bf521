"""Why L0 injected nothing, or left a candidate out, pure: one sentence per decision, shared by
`AutoRecall.auto` (the API's `skipped_reason` and `cut`) and the memory browser's L0 preview, so
the two never explain the same decision differently. An empty answer without a reason cannot be
told apart from a bug, by a person or by an agent deciding whether to search further."""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field

from services.recall_api.retrieval.ranking import Ranked

TRIVIAL = "trivial message (not searched)"
NOTHING_TO_SEARCH = "nothing to search (the message has no searchable text)"
ONLY_WORKING_RULES = "only working rules matched (they come through GET /v1/procedures, not L0)"


@dataclass(frozen=True, slots=True)
class CutReasons:
    """Why L0 leaves a ranked candidate out, in the order its steps drop them: the floor, the
    selection (gate, subject, detail and redundancy checks: `dropped`), the entry limit, the token
    budget."""

    threshold: float
    max_entries: int
    budget: int
    offered: Set[str]
    dropped: dict[str, str] = field(default_factory=dict)  # id → why select_injection left it out

    def reason(self, ranked: Ranked, injected: Set[str]) -> str:
        """Why `ranked` is not injected ("" when it is)."""
        candidate = ranked.candidate
        if candidate.id in injected:
            return ""
        if candidate.relevance < self.threshold:
            return f"score {candidate.relevance:.3f} is below the threshold {self.threshold:.3f}"
        if candidate.id in self.dropped:
            return self.dropped[candidate.id]
        if candidate.id not in self.offered:
            return f"ranked below the first {self.max_entries} entries"
        return f"does not fit the {self.budget}-token budget"


@dataclass(frozen=True, slots=True)
class EmptyAnswer:
    """What an L0 search that injected nothing saw. `found`: candidates the stores returned for the
    owner (within the channel and agent asked); `eligible`: those left after working rules are set
    aside; `best`: the best relevance among the eligible; `best_cut`: why the best candidate past
    the floor was cut (None when none passed it); `deadline_ms`: set when the query embedding
    missed the L0 deadline and keywords alone answered."""

    found: int
    eligible: int
    best: float | None
    floor: float
    best_cut: str | None = None
    deadline_ms: float | None = None
    narrowed: str = ""  # " in group conversations", " for agent X": what the search was limited to

    def reason(self) -> str:
        """The `skipped_reason` of the empty answer: always a sentence, never empty."""
        why = self._why()
        if self.deadline_ms is None:
            return why
        return f"deadline: the query embedding missed the {self.deadline_ms:g} ms L0 deadline, keywords alone: {why}"

    def _why(self) -> str:
        if self.found == 0:
            return f"no memory for this user{self.narrowed}"
        if self.eligible == 0:
            return ONLY_WORKING_RULES
        if self.best_cut is None:
            top = self.best if self.best is not None else 0.0
            return f"nothing scored above the floor (top {top:.2f} < {self.floor:.2f})"
        return f"every candidate cut: {self.best_cut}"


def narrowed_to(channel: str, agent_id: str | None) -> str:
    """What a search was limited to, as the end of "no memory for this user…"."""
    parts = [" in group conversations"] if channel == "group" else []
    if agent_id is not None:
        parts.append(f" for agent {agent_id}")
    return "".join(parts)
