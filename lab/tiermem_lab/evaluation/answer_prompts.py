"""The fixed prompts and output schemas of the answer-level LoCoMo evaluation (`answers.py`).

Answering. One prompt for both conditions: the question with the memory tiermem injects (the L0
`## Memory Context` section, optionally followed by the L1 top-k episodes), or the same prompt with
"no memory" in its place. Answers are short phrases, as the LoCoMo gold answers are.

Judging: the LLM-as-a-judge "J" protocol of the Mem0 paper (Chhikara et al., 2025, "Mem0: Building
Production-Ready AI Agents with Scalable Long-Term Memory", arXiv:2504.19413, §4.1 and the prompt in
mem0ai/mem0 `evaluation/metrics/llm_judge.py`), which the Zep comparison re-ran with the same judge:
given the question, the gold answer and the generated answer, the judge writes a one-sentence reason
and then a single label CORRECT or WRONG as JSON `{"label": ...}` at temperature 0; it is generous
with form (length, wording, date formats, relative time expressions that resolve to the gold date)
and the J-score is the share labelled CORRECT over categories 1-4 (category 5 is left out of J). The
wording below is ours; it keeps the protocol and states its two implicit rules explicitly so the
judge applies them the same way every time: an answer naming a different fact (person, thing, place,
number, date) is WRONG, and "I don't know" is WRONG.

Category 5 (adversarial: the conversations do not answer the question; LoCoMo gives a distractor
answer) is judged separately with its own fixed rubric: CORRECT when the answer declines or points
out the false premise, WRONG when it answers anything specific (the distractor above all).

Reflection: did the with-memory answer use an injected item? A fixed rubric over the numbered items
the answerer saw; correctness does not matter, only whether a specific detail of an item (not of the
question) is in the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

NO_MEMORY = "No memory of earlier conversations is available."
I_DONT_KNOW = "I don't know"

ANSWER_INSTRUCTIONS = (
    "You are an assistant with a long-term memory of many earlier conversations between {speaker_a} and "
    "{speaker_b}. Answer the question about them in as few words as possible: a short phrase, not a sentence.\n"
    "- The memory given with the question is the only record of those conversations; you may infer from it, "
    "but do not invent details it does not support.\n"
    "- Memory items end with the date they were said: turn relative times in them (yesterday, last week, "
    "last year) into calendar dates based on that date.\n"
    "- When two items disagree, the newer one holds.\n"
    f"- When the memory does not answer the question, answer exactly: {I_DONT_KNOW}."
)

JUDGE_INSTRUCTIONS = (
    "You grade a generated answer against a gold answer and label it CORRECT or WRONG.\n"
    "The question asks about something one person should know about another from their earlier "
    "conversations. The gold answer is short and names the thing asked about.\n"
    "- Be generous with form: the generated answer may be much longer, worded differently or add context; "
    "it is CORRECT as long as it refers to the same thing as the gold answer.\n"
    "- For time questions the gold answer is a date, month, year or period: the answer is CORRECT when it "
    "names the same date or period in any format (May 7th = 7 May 2023), or a relative expression "
    "that resolves to it.\n"
    "- Be strict with facts: an answer naming a different person, thing, place, number, date or period is "
    "WRONG, and so is an answer that says it does not know.\n"
    'First give a one-sentence reason, then the label: reply as JSON {"reason": "...", "label": "CORRECT"} '
    'or {"reason": "...", "label": "WRONG"}, never both labels.'
)

ADVERSARIAL_JUDGE_INSTRUCTIONS = (
    "You grade a generated answer to a trick question and label it CORRECT or WRONG.\n"
    "The earlier conversations between two people do NOT answer this question: it has a false premise "
    "(often it attributes to one person what the other said or did). A distractor answer is given: the "
    "answer someone would give if fooled by the premise.\n"
    "- CORRECT: the generated answer declines (says it does not know, that it was not mentioned) or "
    "points out the false premise.\n"
    "- WRONG: the generated answer gives the distractor or any other specific answer.\n"
    'First give a one-sentence reason, then the label: reply as JSON {"reason": "...", "label": "CORRECT"} '
    'or {"reason": "...", "label": "WRONG"}, never both labels.'
)

REFLECTION_INSTRUCTIONS = (
    "An assistant answered a question with numbered memory items in front of it. Decide whether the "
    "answer USES at least one of the items.\n"
    "- An answer uses an item when it states a specific detail (a name, date, number, place, object, event "
    "or preference) that the item contains and the question does not.\n"
    "- It does not use any item when it only repeats the question, says it does not know, or gives details "
    "that no item contains.\n"
    "- Whether the answer is correct does not matter.\n"
    'Reply as JSON {"reason": "<one sentence>", "used_items": [<numbers of the items used>], '
    '"uses_memory": true|false}.'
)


class GeneratedAnswer(BaseModel):
    """What the answering model returns."""

    model_config = ConfigDict(extra="ignore")

    answer: str = Field(description="The short answer (a phrase), or I don't know.")


class JudgeVerdict(BaseModel):
    """The J judge's output: a reason first, then exactly one label."""

    model_config = ConfigDict(extra="ignore")

    reason: str = Field(default="", description="One sentence.")
    label: Literal["CORRECT", "WRONG"]

    @field_validator("label", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        # "correct" and " WRONG " mean the label; anything else ("CORRECT or WRONG") does not validate.
        return value.strip().upper() if isinstance(value, str) else value


class ReflectionVerdict(BaseModel):
    """The reflection judge's output."""

    model_config = ConfigDict(extra="ignore")

    reason: str = Field(default="", description="One sentence.")
    used_items: list[int] = Field(default_factory=list, description="Numbers of the items the answer uses.")
    uses_memory: bool


def answer_messages(question: str, memory: str | None, speakers: tuple[str, str]) -> list[dict[str, str]]:
    """The answer prompt; `memory` None asks the same question without any memory."""
    system = ANSWER_INSTRUCTIONS.format(speaker_a=speakers[0], speaker_b=speakers[1])
    user = f"{memory if memory else NO_MEMORY}\n\nQuestion: {question}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def judge_messages(question: str, gold: str, answer: str, *, adversarial: bool) -> list[dict[str, str]]:
    """The J judge prompt (categories 1-4) or the adversarial rubric (category 5)."""
    if adversarial:
        system = ADVERSARIAL_JUDGE_INSTRUCTIONS
        user = f"Question: {question}\nDistractor answer: {gold}\nGenerated answer: {answer}"
    else:
        system = JUDGE_INSTRUCTIONS
        user = f"Question: {question}\nGold answer: {gold}\nGenerated answer: {answer}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def reflection_messages(items: Sequence[str], question: str, answer: str) -> list[dict[str, str]]:
    """The reflection rubric over the items the answerer saw, numbered from 1."""
    numbered = "\n".join(f"{number}. {item.removeprefix('- ')}" for number, item in enumerate(items, start=1))
    user = f"Memory items:\n{numbered}\n\nQuestion: {question}\nAnswer: {answer}"
    return [{"role": "system", "content": REFLECTION_INSTRUCTIONS}, {"role": "user", "content": user}]
