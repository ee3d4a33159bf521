"""The answer-level evaluation's pure parts on hand-made outcomes with known scores: J per condition
and category (unjudged and failed counted, never scored), category 5 apart, the reflection rate, the
question spread of --answer-limit, prices, and the judge's label parsing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.common.gateways.llm import PurposeUsage
from tiermem_lab.evaluation.answer_prompts import (
    NO_MEMORY,
    JudgeVerdict,
    answer_messages,
    judge_messages,
    reflection_messages,
)
from tiermem_lab.evaluation.answer_report import (
    AnswerOutcome,
    JudgedAnswer,
    Label,
    Reflection,
    RoleUsage,
    answers_markdown,
    build_answers_section,
    summary_lines,
)
from tiermem_lab.evaluation.answers import AnswerSetupError, TokenPrice, spread_over_categories
from tiermem_lab.evaluation.locomo import LocomoQuestion, LocomoSample


def outcome(
    number: int, category: int, with_label: Label, without_label: Label, reflection: Reflection = "no_memory"
) -> AnswerOutcome:
    return AnswerOutcome(
        sample_id="s",
        number=number,
        category=category,
        question=f"q{number}",
        gold="g",
        injected=0 if reflection == "no_memory" else 2,
        with_memory=JudgedAnswer(answer="a", label=with_label),
        without_memory=JudgedAnswer(answer="b", label=without_label),
        reflection=reflection,
    )


OUTCOMES = [
    outcome(0, 4, "correct", "wrong", "used"),
    outcome(1, 4, "correct", "correct", "not_used"),
    outcome(2, 2, "wrong", "wrong", "used"),
    outcome(3, 2, "unjudged", "wrong", "unjudged"),
    outcome(4, 1, "failed", "failed", "failed"),
    outcome(5, 5, "correct", "wrong", "used"),
    outcome(6, 5, "wrong", "wrong"),
]


def usage() -> dict[str, RoleUsage]:
    return {
        "answer": RoleUsage(
            "m",
            {
                "eval_answer_with_memory": PurposeUsage(calls=3, attempts=4, prompt_tokens=300, cost_usd=0.5),
                "eval_answer_without_memory": PurposeUsage(calls=2, attempts=2, completion_tokens=20, cost_usd=0.25),
            },
            "price given",
        ),
        "judge": RoleUsage("j", {"eval_reflection": PurposeUsage(calls=1, attempts=1, prompt_tokens=7)}, "unknown"),
    }


def test_j_scores_count_only_judged_answers_and_keep_category_5_apart() -> None:
    section = build_answers_section(OUTCOMES, usage(), meta={"answer_model": "m", "judge_model": "j", "memory": "L0"})
    with_memory = section["j_score"]["with_memory"]
    assert with_memory["overall"] == {
        "questions": 5,
        "judged": 3,
        "correct": 2,
        "wrong": 1,
        "unjudged": 1,
        "failed": 1,
        "j_score": pytest.approx(2 / 3),
    }
    assert with_memory["by_category"]["4"]["j_score"] == 1.0
    assert with_memory["by_category"]["2"]["j_score"] == 0.0
    assert with_memory["by_category"]["1"]["j_score"] is None  # nothing judged: no score, not 0
    without = section["j_score"]["without_memory"]["overall"]
    assert (without["correct"], without["judged"]) == (1, 4)
    assert section["j_score"]["lift"] == pytest.approx(2 / 3 - 1 / 4)
    assert section["adversarial"]["with_memory"]["j_score"] == 0.5
    assert section["adversarial"]["without_memory"]["j_score"] == 0.0


def test_reflection_rate_is_over_answers_given_memory_and_judged() -> None:
    section = build_answers_section(OUTCOMES, usage(), meta={"answer_model": "m", "judge_model": "j", "memory": "L0"})
    reflection = section["reflection"]["overall"]
    assert (reflection["used"], reflection["judged"], reflection["no_memory"]) == (3, 4, 1)
    assert reflection["rate"] == 0.75
    assert section["reflection"]["by_category"]["5"]["rate"] == 1.0


def test_usage_is_reported_per_role_with_totals() -> None:
    section = build_answers_section(OUTCOMES, usage(), meta={"answer_model": "m", "judge_model": "j", "memory": "L0"})
    answer, judge = section["usage"]["answer"], section["usage"]["judge"]
    assert (answer["calls"], answer["attempts"], answer["prompt_tokens"], answer["completion_tokens"]) == (
        5,
        6,
        300,
        20,
    )
    assert answer["cost_usd"] == 0.75 and judge["cost_usd"] == 0.0 and judge["cost_source"] == "unknown"
    assert section["usage"]["total"] == {"prompt_tokens": 307, "completion_tokens": 20, "cost_usd": 0.75}
    lines = summary_lines({**section, "aborted": None})
    assert lines[0] == "J-score (categories 1-4): with memory 66.7, without memory 25.0, lift +41.7 points"
    assert lines[1].startswith("reflection rate: 75.0% (3/4 ")
    assert "answer tokens (m): 300 prompt + 20 completion in 5 calls (6 attempts), cost $0.750000" in lines[2]
    markdown = answers_markdown({**section, "aborted": "refused"})
    assert "| overall 1-4 | 5 | 66.7 (2/3; 1 unjudged; 1 failed) | 25.0 (1/4; 1 failed) |" in markdown
    assert "| 5 adversarial (declined) | 2 | 50.0 (1/2) | 0.0 (0/2) |" in markdown
    assert "ABORTED: refused" in markdown


def _sample(categories: list[int]) -> LocomoSample:
    questions = tuple(
        LocomoQuestion(number=i, question=f"q{i}", answer="a", category=c, evidence=(), evidence_sessions=frozenset())
        for i, c in enumerate(categories)
    )
    return LocomoSample("s", "A", "B", (), questions)


def test_a_question_limit_spreads_over_categories_in_file_order() -> None:
    sample = _sample([2, 2, 2, 4, 4, 1, 5, 2])
    pairs = [(sample, q) for q in sample.questions]
    assert spread_over_categories(pairs, None) == list(range(8))
    assert spread_over_categories(pairs, 100) == list(range(8))
    assert spread_over_categories(pairs, 4) == [0, 3, 5, 6]  # the first of each category
    assert spread_over_categories(pairs, 6) == [0, 1, 3, 4, 5, 6]
    assert spread_over_categories(pairs, 1) == [5]  # category 1 comes first


def test_prices_are_per_million_tokens_and_bad_ones_are_refused() -> None:
    price = TokenPrice.per_million("0.15, 0.6")
    assert price.input_per_token == pytest.approx(1.5e-7) and price.output_per_token == pytest.approx(6e-7)
    for bad in ("0.15", "a,b", "1,-2", "1,2,3"):
        with pytest.raises(AnswerSetupError):
            TokenPrice.per_million(bad)


def test_judge_labels_parse_case_insensitively_and_nothing_else() -> None:
    assert JudgeVerdict.model_validate({"label": " correct "}).label == "CORRECT"
    assert JudgeVerdict.model_validate({"reason": "x", "label": "Wrong"}).label == "WRONG"
    for bad in ("CORRECT or WRONG", "", "yes"):
        with pytest.raises(ValidationError):
            JudgeVerdict.model_validate({"label": bad})


def test_prompts_differ_only_by_the_memory() -> None:
    with_memory = answer_messages("When?", "## Memory Context\n- x", ("Ann", "Bo"))
    without = answer_messages("When?", None, ("Ann", "Bo"))
    assert with_memory[0] == without[0] and "Ann" in without[0]["content"]
    assert without[1]["content"] == f"{NO_MEMORY}\n\nQuestion: When?"
    assert with_memory[1]["content"] == "## Memory Context\n- x\n\nQuestion: When?"
    assert "Gold answer: g" in judge_messages("q", "g", "a", adversarial=False)[1]["content"]
    assert "Distractor answer: g" in judge_messages("q", "g", "a", adversarial=True)[1]["content"]
    assert (
        "1. first (2023-05-08)\n2. second"
        in reflection_messages(["- first (2023-05-08)", "- second"], "q", "a")[1]["content"]
    )
