"""What the answer-level evaluation measured (`answers.py`), scored into the report's `answers` section
and shown on the console and as markdown.

J-score: CORRECT / (CORRECT + WRONG) per condition (with memory, without), per category and over
categories 1-4; category 5 (adversarial) separately, where CORRECT means the answer declined. Answers
the judge did not label validly are `unjudged`, calls that failed for good are `failed`; both are
counted and shown, neither is scored. Reflection rate: the share of with-memory answers, among those
given an injected memory and judged by the rubric, that use an injected item (`failed`: the answer
itself failed; `unjudged`: the rubric call failed or never gave valid output).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tiermem_lab.evaluation.locomo import ADVERSARIAL, CATEGORY_NAMES

if TYPE_CHECKING:
    from rich.console import Console

    from services.common.gateways.llm import PurposeUsage

Label = Literal["correct", "wrong", "unjudged", "failed"]
Reflection = Literal["used", "not_used", "unjudged", "failed", "no_memory"]
CONDITIONS = ("with_memory", "without_memory")
ANSWERABLE = (1, 2, 3, 4)


@dataclass(frozen=True)
class JudgedAnswer:
    """One generated answer and its label; `answer` is None when the answer call itself failed."""

    answer: str | None
    label: Label
    note: str = ""  # the judge's reason, or why it is unjudged / failed


@dataclass(frozen=True)
class AnswerOutcome:
    sample_id: str
    number: int
    category: int
    question: str
    gold: str
    injected: int  # memory items the with-memory answer was given
    with_memory: JudgedAnswer
    without_memory: JudgedAnswer
    reflection: Reflection
    used_items: tuple[int, ...] = ()
    reflection_note: str = ""

    def condition(self, name: str) -> JudgedAnswer:
        return self.with_memory if name == "with_memory" else self.without_memory


@dataclass
class LabelCounts:
    questions: int = 0
    correct: int = 0
    wrong: int = 0
    unjudged: int = 0
    failed: int = 0

    def add(self, label: Label) -> None:
        self.questions += 1
        setattr(self, label, getattr(self, label) + 1)

    def as_dict(self) -> dict[str, Any]:
        judged = self.correct + self.wrong
        return {
            "questions": self.questions,
            "judged": judged,
            "correct": self.correct,
            "wrong": self.wrong,
            "unjudged": self.unjudged,
            "failed": self.failed,
            "j_score": self.correct / judged if judged else None,
        }


@dataclass
class RoleUsage:
    """LLM usage of one role (answering or judging), from the gateway's per-purpose counters."""

    model: str
    purposes: dict[str, PurposeUsage] = field(default_factory=dict)
    cost_source: str = ""

    def as_dict(self) -> dict[str, Any]:
        usages = list(self.purposes.values())
        return {
            "model": self.model,
            "calls": sum(u.calls for u in usages),
            "attempts": sum(u.attempts for u in usages),
            "failed_calls": sum(u.failures for u in usages),
            "prompt_tokens": sum(u.prompt_tokens for u in usages),
            "completion_tokens": sum(u.completion_tokens for u in usages),
            "cost_usd": round(sum(u.cost_usd for u in usages), 8),
            "cost_source": self.cost_source,
            "by_purpose": {
                purpose: {
                    "calls": u.calls,
                    "prompt_tokens": u.prompt_tokens,
                    "completion_tokens": u.completion_tokens,
                    "cost_usd": round(u.cost_usd, 8),
                }
                for purpose, u in sorted(self.purposes.items())
            },
        }


def j_table(outcomes: Sequence[AnswerOutcome], condition: str) -> dict[str, Any]:
    """J per category 1-4 and overall for one condition."""
    by_category: dict[int, LabelCounts] = {}
    overall = LabelCounts()
    for outcome in outcomes:
        if outcome.category == ADVERSARIAL:
            continue
        label = outcome.condition(condition).label
        by_category.setdefault(outcome.category, LabelCounts()).add(label)
        overall.add(label)
    return {
        "by_category": {str(c): counts.as_dict() for c, counts in sorted(by_category.items())},
        "overall": overall.as_dict(),
    }


def adversarial_table(outcomes: Sequence[AnswerOutcome]) -> dict[str, Any]:
    """Category 5 per condition: CORRECT means the answer declined the false premise."""
    counts = {condition: LabelCounts() for condition in CONDITIONS}
    for outcome in outcomes:
        if outcome.category == ADVERSARIAL:
            for condition in CONDITIONS:
                counts[condition].add(outcome.condition(condition).label)
    return {condition: c.as_dict() for condition, c in counts.items()}


def reflection_table(outcomes: Sequence[AnswerOutcome]) -> dict[str, Any]:
    """Reflection rate over all categories and per category (5 included: using a distractor memory)."""

    def stats(group: Iterable[AnswerOutcome]) -> dict[str, Any]:
        tally = {kind: 0 for kind in ("used", "not_used", "unjudged", "failed", "no_memory")}
        for outcome in group:
            tally[outcome.reflection] += 1
        judged = tally["used"] + tally["not_used"]
        return {**tally, "judged": judged, "rate": tally["used"] / judged if judged else None}

    categories = sorted({o.category for o in outcomes})
    return {
        "by_category": {str(c): stats(o for o in outcomes if o.category == c) for c in categories},
        "overall": stats(outcomes),
    }


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def build_answers_section(
    outcomes: Sequence[AnswerOutcome],
    usage: Mapping[str, RoleUsage],
    *,
    meta: Mapping[str, Any],
) -> dict[str, Any]:
    """The report's `answers` section."""
    j = {condition: j_table(outcomes, condition) for condition in CONDITIONS}
    roles = {role: role_usage.as_dict() for role, role_usage in usage.items()}
    total_cost = sum(r["cost_usd"] for r in roles.values())
    return {
        **meta,
        "questions": {
            "answered": len(outcomes),
            "with_memory_injected": sum(1 for o in outcomes if o.injected),
            "by_category": {str(c): sum(1 for o in outcomes if o.category == c) for c in sorted(CATEGORY_NAMES)},
        },
        "j_score": {
            **j,
            "lift": _difference(j["with_memory"]["overall"]["j_score"], j["without_memory"]["overall"]["j_score"]),
        },
        "adversarial": adversarial_table(outcomes),
        "reflection": reflection_table(outcomes),
        "usage": {
            **roles,
            "total": {
                "prompt_tokens": sum(r["prompt_tokens"] for r in roles.values()),
                "completion_tokens": sum(r["completion_tokens"] for r in roles.values()),
                "cost_usd": round(total_cost, 8),
            },
        },
        "per_question": [
            {
                "sample_id": o.sample_id,
                "number": o.number,
                "category": o.category,
                "question": o.question,
                "gold": o.gold,
                "injected": o.injected,
                **{
                    condition: {
                        "answer": o.condition(condition).answer,
                        "label": o.condition(condition).label,
                        "note": o.condition(condition).note,
                    }
                    for condition in CONDITIONS
                },
                "reflection": {"label": o.reflection, "used_items": list(o.used_items), "note": o.reflection_note},
            }
            for o in outcomes
        ],
    }


# ---- console and markdown -------------------------------------------------------------------------


def percent(value: float | None) -> str:
    """A share as a J-score is published: percent with one decimal."""
    return "—" if value is None else f"{100 * value:.1f}"


def _j_cell(stats: Mapping[str, Any]) -> str:
    extra = [f"{stats[k]} {k}" for k in ("unjudged", "failed") if stats[k]]
    return (
        f"{percent(stats['j_score'])} ({stats['correct']}/{stats['judged']}{'; ' if extra else ''}{'; '.join(extra)})"
    )


def j_rows(section: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(label, n, with memory, without memory) rows: categories 1-4, overall, then category 5."""
    with_memory, without = section["j_score"]["with_memory"], section["j_score"]["without_memory"]
    rows = [
        (
            f"{category} {CATEGORY_NAMES.get(int(category), '')}",
            str(stats["questions"]),
            _j_cell(stats),
            _j_cell(without["by_category"][category]),
        )
        for category, stats in with_memory["by_category"].items()
    ]
    overall = with_memory["overall"]
    rows.append(("overall 1-4", str(overall["questions"]), _j_cell(overall), _j_cell(without["overall"])))
    adversarial = section["adversarial"]
    if adversarial["with_memory"]["questions"]:
        rows.append(
            (
                "5 adversarial (declined)",
                str(adversarial["with_memory"]["questions"]),
                _j_cell(adversarial["with_memory"]),
                _j_cell(adversarial["without_memory"]),
            )
        )
    return rows


def summary_lines(section: Mapping[str, Any]) -> list[str]:
    """The headline numbers as plain lines (console and markdown)."""
    j = section["j_score"]
    reflection = section["reflection"]["overall"]
    lift = "—" if j["lift"] is None else f"{100 * j['lift']:+.1f}"
    lines = [
        f"J-score (categories 1-4): with memory {percent(j['with_memory']['overall']['j_score'])}, "
        f"without memory {percent(j['without_memory']['overall']['j_score'])}, "
        f"lift {lift} points",
        f"reflection rate: {percent(reflection['rate'])}% ({reflection['used']}/{reflection['judged']} answers given "
        f"memory used an injected item; {reflection['no_memory']} had nothing injected, "
        f"{reflection['unjudged']} unjudged, {reflection['failed']} failed)",
    ]
    for role in ("answer", "judge"):
        usage = section["usage"][role]
        lines.append(
            f"{role} tokens ({usage['model']}): {usage['prompt_tokens']} prompt + {usage['completion_tokens']} "
            f"completion in {usage['calls']} calls ({usage['attempts']} attempts), cost ${usage['cost_usd']:.6f} "
            f"({usage['cost_source']})"
        )
    total = section["usage"]["total"]
    lines.append(f"total: {total['prompt_tokens'] + total['completion_tokens']} tokens, cost ${total['cost_usd']:.6f}")
    if section.get("aborted"):
        lines.append(f"ABORTED: {section['aborted']}")
    return lines


def render_answers(section: Mapping[str, Any], console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"Answer accuracy, J-score % ({section['answer_model']}, judged by {section['judge_model']})")
    table.add_column("category")
    for column in ("n", "with memory", "without memory"):
        table.add_column(column, justify="right")
    for row in j_rows(section):
        table.add_row(*row)
    console.print(table)
    for line in summary_lines(section):
        style = "red" if line.startswith("ABORTED") else ""
        console.print(f"[{style}]{escape(line)}[/]" if style else escape(line), soft_wrap=True)


def answers_markdown(section: Mapping[str, Any]) -> str:
    """The answer-level results as a markdown fragment (for notes and PR descriptions)."""
    out = [
        "## LoCoMo answer accuracy",
        "",
        f"Answer model `{section['answer_model']}`, judge `{section['judge_model']}`; memory: {section['memory']}; "
        f"{section['questions']['answered']} questions.",
        "",
        "| category | n | J with memory | J without memory |",
        "|---|---:|---:|---:|",
        *(f"| {label} | {n} | {with_memory} | {without} |" for label, n, with_memory, without in j_rows(section)),
        "",
        *(f"- {line}" for line in summary_lines(section)),
        "",
    ]
    return "\n".join(out)
