"""Scoring (pure): session recall@k per system and category, the L0 recall, contamination and
abstention rates, the threshold trade-off, comparisons against the baselines and the issue's targets;
`build_report` assembles them into the JSON report."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tiermem_lab.evaluation.baselines import BASELINES, DENSE_PASSAGES, OURS, PASSAGES, SYSTEMS
from tiermem_lab.evaluation.locomo import ADVERSARIAL

# Issue 50's bars (held out, both chat forms): L1 recall@5, its margin over the passage-level hybrid
# and over dense 4-turn passages (the baseline others measure on their own conversations); L0 recall
# with bounded contamination; abstention on category 5.
TARGET_L1_RECALL_AT_5 = 0.93
TARGET_MARGIN_OVER_PASSAGES = 0.02
TARGET_MARGIN_OVER_DENSE_PASSAGES = 0.03
TARGET_L0_ABSTENTION = 0.35
TARGET_L0_RECALL = 0.80
TARGET_L0_CONTAMINATION = 0.35


def ranking_for(rankings_by_limit: Mapping[int, Sequence[int]], k: int) -> Sequence[int]:
    """The ranking a system gave for the smallest request of at least k results (else its largest)."""
    if not rankings_by_limit:
        return ()
    fitting = [limit for limit in rankings_by_limit if limit >= k]
    return rankings_by_limit[min(fitting) if fitting else max(rankings_by_limit)]


def hit_at_k(rankings_by_limit: Mapping[int, Sequence[int]], evidence: frozenset[int], k: int) -> bool:
    """An evidence session among the first k sessions ranked."""
    return any(session in evidence for session in list(ranking_for(rankings_by_limit, k))[:k])


@dataclass(frozen=True, slots=True)
class InjectedItem:
    """One item L0 injected: the sessions it came from (a fact may have been said in several)."""

    kind: str
    sessions: frozenset[int]
    score: float


@dataclass
class QuestionResult:
    sample_id: str
    number: int
    question: str
    category: int
    evidence_sessions: frozenset[int]
    rankings: dict[str, dict[int, list[int]]]  # system → requested limit → sessions ranked
    l0_items: list[InjectedItem] = field(default_factory=list)
    l0_tokens: int = 0
    l0_top_score: float | None = None
    l0_latency_ms: float = 0.0
    l1_latency_ms: float = 0.0
    # What L0 injected with other minimum scores (the threshold trade-off), keyed by the minimum score.
    l0_by_threshold: dict[float, list[InjectedItem]] = field(default_factory=dict)
    # The same with the L0 gate off (minimum score only): the frontier before the gate.
    l0_ungated_by_threshold: dict[float, list[InjectedItem]] = field(default_factory=dict)

    @property
    def answerable(self) -> bool:
        return self.category != ADVERSARIAL

    @property
    def scored(self) -> bool:
        """Counted in recall: answerable and with evidence."""
        return self.answerable and bool(self.evidence_sessions)

    @property
    def l0_recalled(self) -> bool:
        return any(item.sessions & self.evidence_sessions for item in self.l0_items)

    @property
    def l0_contaminating(self) -> int:
        return sum(1 for item in self.l0_items if not item.sessions & self.evidence_sessions)


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def recall_table(results: Sequence[QuestionResult], systems: Sequence[str], ks: Sequence[int]) -> dict[str, Any]:
    """Session recall@k per system, overall (answerable questions with evidence) and per category."""
    scored = [r for r in results if r.scored]
    categories = sorted({r.category for r in scored})
    table: dict[str, Any] = {}
    for system in systems:

        def rate(group: Sequence[QuestionResult], k: int, system: str = system) -> float | None:
            hits = [hit_at_k(r.rankings.get(system, {}), r.evidence_sessions, k) for r in group]
            return _mean([1.0 if hit else 0.0 for hit in hits])

        table[system] = {
            "overall": {str(k): rate(scored, k) for k in ks},
            "by_category": {
                str(c): {str(k): rate([r for r in scored if r.category == c], k) for k in ks} for c in categories
            },
        }
    return table


def l0_stats(group: Sequence[QuestionResult]) -> dict[str, Any]:
    """Recall rate, contamination rate (pooled over injected items), empty rate, items and tokens per question."""
    injected = sum(len(r.l0_items) for r in group)
    contaminating = sum(r.l0_contaminating for r in group)
    return {
        "questions": len(group),
        "recall_rate": _mean([1.0 if r.l0_recalled else 0.0 for r in group]),
        "contamination_rate": (contaminating / injected) if injected else None,
        "empty_rate": _mean([0.0 if r.l0_items else 1.0 for r in group]),
        "items_mean": _mean([float(len(r.l0_items)) for r in group]),
        "tokens_mean": _mean([float(r.l0_tokens) for r in group]),
    }


def abstention_stats(group: Sequence[QuestionResult]) -> dict[str, Any]:
    injected = [r for r in group if r.l0_items]
    return {
        "questions": len(group),
        "abstention_rate": _mean([0.0 if r.l0_items else 1.0 for r in group]),
        # The session an adversarial question distorts (what really happened, often to the other
        # speaker) was injected: not an answer to the question, but what would correct its premise.
        "evidence_injected_rate": _mean([1.0 if r.l0_recalled else 0.0 for r in group if r.evidence_sessions]),
        "items_mean": _mean([float(len(r.l0_items)) for r in group]),
        "tokens_mean": _mean([float(r.l0_tokens) for r in group]),
        "top_score_mean_when_injected": _mean([r.l0_top_score or 0.0 for r in injected]),
    }


def l0_table(results: Sequence[QuestionResult]) -> dict[str, Any]:
    scored = [r for r in results if r.scored]
    adversarial = [r for r in results if r.category == ADVERSARIAL]
    return {
        "overall": l0_stats(scored),
        "by_category": {
            str(c): l0_stats([r for r in scored if r.category == c]) for c in sorted({r.category for r in scored})
        },
        "adversarial": abstention_stats(adversarial),
    }


def l0_tradeoff(results: Sequence[QuestionResult], *, ungated: bool = False) -> list[dict[str, Any]]:
    """L0 at each minimum score it was asked with: the recall rate and contamination (answerable
    questions with evidence), the abstention rate (category 5) and items per question. `ungated`: the
    same with the L0 gate off (the frontier before the gate)."""
    scored = [r for r in results if r.scored]
    adversarial = [r for r in results if r.category == ADVERSARIAL]

    def sweep(r: QuestionResult) -> dict[float, list[InjectedItem]]:
        return r.l0_ungated_by_threshold if ungated else r.l0_by_threshold

    thresholds = sorted({t for r in results for t in sweep(r)})
    rows: list[dict[str, Any]] = []
    for threshold in thresholds:

        def kept(r: QuestionResult, threshold: float = threshold) -> list[InjectedItem]:
            return sweep(r).get(threshold, [])

        injected = [(r, kept(r)) for r in scored]
        items = sum(len(k) for _, k in injected)
        contaminating = sum(1 for r, k in injected for item in k if not item.sessions & r.evidence_sessions)
        rows.append(
            {
                "min_score": threshold,
                "recall_rate": _mean(
                    [1.0 if any(i.sessions & r.evidence_sessions for i in k) else 0.0 for r, k in injected]
                ),
                "abstention_rate": _mean([0.0 if kept(r) else 1.0 for r in adversarial]),
                "contamination_rate": (contaminating / items) if items else None,
                "items_mean": _mean([float(len(k)) for _, k in injected]),
            }
        )
    return rows


def compare(ours: float | None, baseline: float | None) -> dict[str, float | None]:
    """Difference and ratio of our number against a baseline's (ratio None when the baseline is 0)."""
    if ours is None or baseline is None:
        return {"ours": ours, "baseline": baseline, "diff": None, "ratio": None}
    return {
        "ours": ours,
        "baseline": baseline,
        "diff": ours - baseline,
        "ratio": (ours / baseline) if baseline else None,
    }


def comparison_table(recall: Mapping[str, Any], ks: Sequence[int]) -> dict[str, Any]:
    return {
        baseline: {str(k): compare(recall[OURS]["overall"][str(k)], recall[baseline]["overall"][str(k)]) for k in ks}
        for baseline in BASELINES
        if baseline in recall
    }


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def target_checks(recall: Mapping[str, Any], l0: Mapping[str, Any], form: str = "chat") -> list[dict[str, Any]]:
    """The issue's targets, each with the measured value, the bar and by how much it is met or missed
    (positive `by`: met with room; for contamination, lower is better and `by` is bar − value)."""
    checks: list[dict[str, Any]] = []

    def check(name: str, value: float | None, bar: float, *, at_most: bool = False, strict: bool = False) -> None:
        by = None if value is None else (bar - value if at_most else value - bar)
        met = by is not None and (by > 1e-12 if strict else by >= -1e-12)
        checks.append({"target": name, "value": value, "bar": bar, "met": met, "by": by})

    ours_at_5 = recall.get(OURS, {}).get("overall", {}).get("5")
    check(f"L1 session recall@5 ({form} form)", ours_at_5, TARGET_L1_RECALL_AT_5)
    for baseline, margin in (
        (PASSAGES, TARGET_MARGIN_OVER_PASSAGES),
        (DENSE_PASSAGES, TARGET_MARGIN_OVER_DENSE_PASSAGES),
    ):
        theirs = recall.get(baseline, {}).get("overall", {}).get("5")
        if ours_at_5 is not None and theirs is not None:
            check(f"L1 recall@5 minus {baseline}", ours_at_5 - theirs, margin)
    check("L0 abstention on category 5", l0["adversarial"]["abstention_rate"], TARGET_L0_ABSTENTION)
    check("L0 recall rate (categories 1-4)", l0["overall"]["recall_rate"], TARGET_L0_RECALL)
    check(
        "L0 contamination (categories 1-4)",
        l0["overall"].get("contamination_rate"),
        TARGET_L0_CONTAMINATION,
        at_most=True,
    )
    return checks


def build_report(
    results: Sequence[QuestionResult],
    ks: Sequence[int],
    curve_ks: Sequence[int],
    *,
    meta: Mapping[str, Any],
) -> dict[str, Any]:
    """The JSON report: recall per system and category, L0 rates, comparisons, targets, per question."""
    recall = recall_table(results, SYSTEMS, ks)
    curve = recall_table(results, SYSTEMS, curve_ks)
    l0 = l0_table(results)
    l0_latencies = [r.l0_latency_ms for r in results]
    l1_latencies = [r.l1_latency_ms for r in results]
    return {
        **meta,
        "ks": list(ks),
        "questions": {
            "total": len(results),
            "scored": sum(1 for r in results if r.scored),
            "adversarial": sum(1 for r in results if r.category == ADVERSARIAL),
            "answerable_without_evidence": sum(1 for r in results if r.answerable and not r.evidence_sessions),
            "by_category": {str(c): n for c, n in sorted(Counter(r.category for r in results).items())},
        },
        "session_recall": recall,
        "recall_curve": {system: curve[system]["overall"] for system in SYSTEMS},
        "comparison": comparison_table(recall, ks),
        "l0": l0,
        "l0_tradeoff": l0_tradeoff(results),
        "l0_frontier": {"gated": l0_tradeoff(results), "ungated": l0_tradeoff(results, ungated=True)},
        "latency_ms": {
            "l0_auto": {"p50": percentile(l0_latencies, 0.5), "p95": percentile(l0_latencies, 0.95)},
            "l1_search": {"p50": percentile(l1_latencies, 0.5), "p95": percentile(l1_latencies, 0.95)},
        },
        "targets": target_checks(recall, l0, str(meta.get("form", "chat"))),
        "per_question": [
            {
                "sample_id": r.sample_id,
                "number": r.number,
                "question": r.question,
                "category": r.category,
                "evidence_sessions": sorted(r.evidence_sessions),
                "rankings": {
                    system: {str(k): v for k, v in by_limit.items()} for system, by_limit in r.rankings.items()
                },
                "l0": {
                    "items": [
                        {"kind": item.kind, "sessions": sorted(item.sessions), "score": item.score}
                        for item in r.l0_items
                    ],
                    "tokens": r.l0_tokens,
                    "top_score": r.l0_top_score,
                    "recalled": r.l0_recalled,
                },
            }
            for r in results
        ],
    }
