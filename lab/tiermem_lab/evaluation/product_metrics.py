"""Scoring the product question set (pure). Every question was put, as the user's message with no
earlier turns, to L0 `recall/auto` and to L1 `memory_search` (episodes, limit 5); the raw-turn
baselines ranked the same user's sessions. The measures, per group of questions:

- **L1 session recall@5** (answerable questions): an evidence session is among the sessions of the
  first 5 episodes L1 returned. The baselines' recall@5 is the same test on their session rankings.
  A user holds about a dozen sessions, so recall@1 (the first session is an evidence session) is
  reported beside it, for L1 and every baseline.
- **L0 recall** (answerable): at least one injected item comes from an evidence session (an episode's
  session, or any session a fact's provenance names).
- **L0 contamination** (answerable): injected items from no evidence session, over all items injected
  for the group's answerable questions (pooled; None when nothing was injected).
- **L0 abstention** (not answerable): nothing was injected. An item from a topic session is still an
  injection: the asked detail is not in it, so the agent would be handed a memory that cannot answer.
- **L0 topic injected** (not answerable): an item from a topic session was injected (the share of
  questions; what abstention loses to the topic's own memories rather than to unrelated ones).
- **stale injected** (answerable questions with a `stale` session): an item from the session with the
  older, revised answer was injected.
- **empty without reason**: of the questions L0 answered with nothing, the share whose response had no
  `skipped_reason` (an empty answer should say why).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tiermem_lab.evaluation.product_set import QUESTION_KINDS, SPLITS

RECALL_K = 5
NOT_IN_MEMORY = "not_in_memory"  # the by-kind group of the questions whose answer was never said
# The bars for the held-out split (issue 50).
TARGET_L0_RECALL = 0.90
TARGET_L0_ABSTENTION = 0.80
TARGET_EMPTY_WITHOUT_REASON = 0.0


@dataclass(frozen=True)
class ProductOutcome:
    """What one question got back, by session id."""

    user_id: str
    split: str
    language: str
    question_id: str
    question: str
    kind: str
    answerable: bool
    sessions: tuple[str, ...]  # evidence (answerable) or topic (not answerable)
    stale: tuple[str, ...]
    l1_sessions: tuple[str, ...]  # sessions of L1's episodes, best first, each once
    injected: tuple[tuple[str, ...], ...]  # per injected item, the sessions it came from
    skipped_reason: str | None
    top_score: float | None
    tokens: int
    baselines: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # system → sessions ranked

    def _hits(self, ranking: Sequence[str], k: int) -> bool:
        return bool(set(ranking[:k]) & set(self.sessions))

    @property
    def l1_hit(self) -> bool:
        return self._hits(self.l1_sessions, RECALL_K)

    def l1_hit_at(self, k: int) -> bool:
        return self._hits(self.l1_sessions, k)

    def baseline_hit(self, system: str, k: int = RECALL_K) -> bool:
        return self._hits(self.baselines.get(system, ()), k)

    @property
    def l0_recalled(self) -> bool:
        return any(set(item) & set(self.sessions) for item in self.injected)

    @property
    def contaminating(self) -> int:
        return sum(1 for item in self.injected if not set(item) & set(self.sessions))

    @property
    def stale_injected(self) -> bool:
        return any(set(item) & set(self.stale) for item in self.injected)

    @property
    def empty(self) -> bool:
        return not self.injected


def _rate(group: Sequence[ProductOutcome], test: Callable[[ProductOutcome], bool]) -> float | None:
    return statistics.fmean(1.0 if test(o) else 0.0 for o in group) if group else None


def _baseline_test(system: str, k: int) -> Callable[[ProductOutcome], bool]:
    return lambda outcome: outcome.baseline_hit(system, k)


def summarize(group: Sequence[ProductOutcome], systems: Sequence[str] = ()) -> dict[str, Any]:
    """Every measure of the module docstring over `group` (None where it has no question to count)."""
    answerable = [o for o in group if o.answerable]
    unanswerable = [o for o in group if not o.answerable]
    injected = sum(len(o.injected) for o in answerable)
    empty = [o for o in group if o.empty]
    revised = [o for o in answerable if o.stale]
    return {
        "questions": len(group),
        "answerable": len(answerable),
        "not_in_memory": len(unanswerable),
        "l1_recall_at_1": _rate(answerable, lambda o: o.l1_hit_at(1)),
        "l1_recall_at_5": _rate(answerable, lambda o: o.l1_hit),
        "baselines_recall_at_1": {system: _rate(answerable, _baseline_test(system, 1)) for system in systems},
        "baselines_recall_at_5": {system: _rate(answerable, _baseline_test(system, RECALL_K)) for system in systems},
        "l0_recall": _rate(answerable, lambda o: o.l0_recalled),
        "l0_contamination": (sum(o.contaminating for o in answerable) / injected) if injected else None,
        "l0_abstention": _rate(unanswerable, lambda o: o.empty),
        "l0_topic_injected": _rate(unanswerable, lambda o: o.l0_recalled),
        "stale_injected": _rate(revised, lambda o: o.stale_injected),
        "empty_answers": len(empty),
        "empty_without_reason": _rate(empty, lambda o: o.skipped_reason is None),
        "items_mean": statistics.fmean(len(o.injected) for o in group) if group else None,
    }


def summary_tables(outcomes: Sequence[ProductOutcome], systems: Sequence[str]) -> dict[str, Any]:
    """The summary overall, per split, per language, per split and language, and per question kind
    (answerable questions by kind; the others together under NOT_IN_MEMORY)."""
    splits = [s for s in SPLITS if any(o.split == s for o in outcomes)]
    languages = sorted({o.language for o in outcomes})
    by_kind: dict[str, Any] = {
        kind: summarize([o for o in outcomes if o.answerable and o.kind == kind], systems)
        for kind in QUESTION_KINDS
        if any(o.answerable and o.kind == kind for o in outcomes)
    }
    if any(not o.answerable for o in outcomes):
        by_kind[NOT_IN_MEMORY] = summarize([o for o in outcomes if not o.answerable], systems)
    return {
        "all": summarize(outcomes, systems),
        "by_split": {s: summarize([o for o in outcomes if o.split == s], systems) for s in splits},
        "by_language": {lang: summarize([o for o in outcomes if o.language == lang], systems) for lang in languages},
        "by_split_language": {
            f"{s}/{lang}": summarize([o for o in outcomes if o.split == s and o.language == lang], systems)
            for s in splits
            for lang in languages
            if any(o.split == s and o.language == lang for o in outcomes)
        },
        "by_kind": by_kind,
    }


def target_checks(by_split: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The issue's bars, on each split in the run (only 'test', the held-out split, counts)."""
    checks: list[dict[str, Any]] = []
    for split, stats in by_split.items():
        for name, value, bar, at_most in (
            ("L0 recall (answerable)", stats["l0_recall"], TARGET_L0_RECALL, False),
            ("L0 abstention (not in memory)", stats["l0_abstention"], TARGET_L0_ABSTENTION, False),
            ("empty answers without a reason", stats["empty_without_reason"], TARGET_EMPTY_WITHOUT_REASON, True),
        ):
            by = None if value is None else (bar - value if at_most else value - bar)
            checks.append(
                {
                    "split": split,
                    "held_out": split == "test",
                    "target": name,
                    "value": value,
                    "bar": bar,
                    "met": by is not None and by >= -1e-12,
                    "by": by,
                }
            )
    return checks


def per_question(outcomes: Sequence[ProductOutcome]) -> list[dict[str, Any]]:
    return [
        {
            "user_id": o.user_id,
            "split": o.split,
            "language": o.language,
            "id": o.question_id,
            "question": o.question,
            "kind": o.kind,
            "answerable": o.answerable,
            "sessions": list(o.sessions),
            "stale": list(o.stale),
            "l1_top5": list(o.l1_sessions[:RECALL_K]),
            "l1_hit": o.l1_hit if o.answerable else None,
            "l0": {
                "injected": [list(item) for item in o.injected],
                "recalled": o.l0_recalled,
                "skipped_reason": o.skipped_reason,
                "top_score": o.top_score,
                "tokens": o.tokens,
            },
            "baselines_top5": {system: list(ranking[:RECALL_K]) for system, ranking in o.baselines.items()},
        }
        for o in outcomes
    ]
