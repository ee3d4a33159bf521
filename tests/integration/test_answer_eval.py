"""`tiermem eval locomo --answer-model ...` end to end: the real CLI in a subprocess ingests a small
LoCoMo sample into the embedded stack (nats-server, FalkorDB, Qdrant Edge, the consolidation services,
the recall API), then answers and judges every question through litellm's HTTP path against the local
stub. The stub's answers are derived from each request (so concurrency cannot reorder them) and are
planned per question: the J-scores, reflection rate, tokens and cost the command prints must be the
ones that follow from that plan, a transient 503 must be retried, and a judge that never returns a
valid label must be counted as unjudged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.llm_stub import STUB_API_KEY, STUB_MODEL
from tests.support.llm_stub import LlmStubServer, ScriptedResponse, chat_completion_body, error_body

# The whole eval (servers, ingest, consolidation, questions, answers) runs in the subprocess: on a busy
# machine it takes minutes; the subprocess has its own 600 s limit.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

TIERMEM = [sys.executable, "-m", "services.cli"]


def _turn(speaker: str, dia_id: str, text: str) -> dict[str, str]:
    return {"speaker": speaker, "dia_id": dia_id, "text": text}


SAMPLE: dict[str, Any] = {
    "sample_id": "stub-conv",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "10:00 am on 8 May, 2023",
        "session_1": [
            _turn("Ann", "D1:1", "I adopted a grey cat named Pixel yesterday, she is tiny."),
            _turn("Bo", "D1:2", "Congratulations! How is Pixel settling in?"),
            _turn("Ann", "D1:3", "Pixel sleeps on my keyboard all day long."),
        ],
        "session_2_date_time": "6:00 pm on 20 June, 2023",
        "session_2": [
            _turn("Bo", "D2:1", "I ran my first marathon in Berlin last Sunday."),
            _turn("Ann", "D2:2", "Wow, how long did the marathon take you?"),
            _turn("Bo", "D2:3", "Four hours and ten minutes, my legs still hurt."),
        ],
        "session_3_date_time": "9:00 am on 2 August, 2023",
        "session_3": [
            _turn("Ann", "D3:1", "I started learning the cello at a music school in Lyon."),
            _turn("Bo", "D3:2", "What made you pick the cello?"),
            _turn("Ann", "D3:3", "My grandmother played the cello when I was little."),
        ],
    },
    "qa": [
        {"question": "What is the name of Ann's cat?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
        {
            "question": "When did Bo run the Berlin marathon?",
            "answer": "June 2023",
            "evidence": ["D2:1"],
            "category": 2,
        },
        {
            "question": "Which instrument does Ann learn and who in her family played it?",
            "answer": "the cello; her grandmother",
            "evidence": ["D3:1", "D3:3"],
            "category": 1,
        },
        {
            "question": "Would Ann enjoy a concert of classical cello music?",
            "answer": "yes",
            "evidence": ["D3:1"],
            "category": 3,
        },
        {
            "question": "What is the name of Bo's grey cat?",
            "adversarial_answer": "Pixel",
            "evidence": ["D1:1"],
            "category": 5,
        },
        {
            "question": "How long did Bo's marathon in Berlin take?",
            "answer": "Four hours and ten minutes",
            "evidence": ["D2:3"],
            "category": 4,
        },
    ],
}
QUESTIONS = [qa["question"] for qa in SAMPLE["qa"]]
CATEGORIES = [qa["category"] for qa in SAMPLE["qa"]]

# The plan: the judge's label for each question's answer with and without memory ("malformed": never
# a valid label), and whether the reflection judge says the with-memory answer used an item.
WITH_MEMORY_LABEL = ["CORRECT", "CORRECT", "WRONG", "CORRECT", "CORRECT", "CORRECT"]
WITHOUT_MEMORY_LABEL = ["WRONG", "WRONG", "WRONG", "CORRECT", "WRONG", "malformed"]
USES_MEMORY = [True, True, False, True, False, True]
TRANSIENT_ON = 1  # the first without-memory answer of this question gets a 503 (then it is retried)
ATTEMPTS = 3  # the gateway's default max_attempts: a malformed judge is asked this often

TOKENS = {  # (prompt, completion) per call the stub answers
    "answer_with": (120, 12),
    "answer_without": (80, 8),
    "judge": (50, 5),
    "reflection": (60, 4),
}
PRICE_IN, PRICE_OUT = 1000.0, 2000.0  # USD per million tokens, given with --answer-price


def _question_index(text: str) -> int:
    # The longest match first: no question text is inside another, but stay safe.
    for index, question in sorted(enumerate(QUESTIONS), key=lambda pair: -len(pair[1])):
        if f"Question: {question}" in text:
            return index
    raise AssertionError(f"no known question in {text[:300]!r}")


def _kind(body: dict[str, Any]) -> tuple[str, int, str]:
    """(call kind, question index, user message) of a chat request the answer stage sent."""
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    index = _question_index(user)
    if '"title":"GeneratedAnswer"' in system:
        return ("answer_with" if "## Memory Context" in user else "answer_without"), index, user
    if '"title":"JudgeVerdict"' in system:
        return "judge", index, user
    if '"title":"ReflectionVerdict"' in system:
        return "reflection", index, user
    raise AssertionError(f"unexpected chat request: {system[:200]!r}")


class PlannedModel:
    """The stub's responder: every answer follows from the request and the plan above."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.transient_sent = False

    def __call__(self, body: dict[str, Any]) -> ScriptedResponse:
        kind, index, user = _kind(body)
        prompt, completion = TOKENS[kind]
        if kind.startswith("answer"):
            with self._lock:
                transient = kind == "answer_without" and index == TRANSIENT_ON and not self.transient_sent
                self.transient_sent = self.transient_sent or transient
            if transient:
                return ScriptedResponse(status=503, body=error_body(503, "overloaded, try again"))
            answer = f"{'memory' if kind == 'answer_with' else 'plain'} answer {index}"
            content = json.dumps({"answer": answer})
        elif kind == "judge":
            with_memory = "Generated answer: memory answer" in user
            label = (WITH_MEMORY_LABEL if with_memory else WITHOUT_MEMORY_LABEL)[index]
            content = (
                "CORRECT or WRONG, hard to say"
                if label == "malformed"
                else json.dumps({"reason": "planned", "label": label})
            )
        else:
            content = json.dumps({"reason": "planned", "used_items": [1], "uses_memory": USES_MEMORY[index]})
        body_out = chat_completion_body(content, prompt_tokens=prompt, completion_tokens=completion)
        return ScriptedResponse(status=200, body=body_out)


def _j(labels: list[str]) -> tuple[int, int, int]:
    """(correct, judged, unjudged) of a list of planned labels."""
    return labels.count("CORRECT"), labels.count("CORRECT") + labels.count("WRONG"), labels.count("malformed")


def _pct(correct: int, judged: int) -> str:
    return f"{100 * correct / judged:.1f}"


def test_answer_eval_through_the_cli_prints_what_the_stub_answers(llm_stub: LlmStubServer, tmp_path: Path) -> None:
    data = tmp_path / "locomo-tiny.json"
    data.write_text(json.dumps([SAMPLE]), encoding="utf-8")
    out = tmp_path / "report.json"
    model = PlannedModel()
    llm_stub.respond_with(model)
    env = {**os.environ, "OPENAI_API_KEY": STUB_API_KEY, "TIERMEM_DATA_DIR": str(tmp_path / "data")}
    env.pop("TIERMEM_LLM__MODEL", None)  # consolidation stays offline: only the answer stage talks to the stub
    command = [
        *TIERMEM,
        "eval",
        "locomo",
        str(data),
        "--k",
        "5",
        "--out",
        str(out),
        "--work-dir",
        str(tmp_path / "work"),
        "--answer-model",
        STUB_MODEL,
        "--answer-api-base",
        llm_stub.api_base,
        "--answer-price",
        f"{PRICE_IN:g},{PRICE_OUT:g}",
        "--answer-concurrency",
        "3",
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    output = result.stdout
    assert result.returncode == 0, output[-3000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr

    # Which questions L0 gave memory: those whose with-memory answer was asked (the rest reuse the
    # without-memory answer for both conditions). The memory must be the injected section, and the
    # answer model must see none of it without memory.
    calls = [_kind(r.body) for r in llm_stub.requests("chat")]
    injected = {index for kind, index, _ in calls if kind == "answer_with"}
    assert injected, "L0 injected nothing for any question: the with-memory path was not exercised"
    # Every expected number below follows from `injected`, whatever L0 chose; two keep both paths honest.
    assert len(injected) >= 2, f"L0 injected memory for {sorted(injected)} only"
    for kind, _, user in calls:
        if kind == "answer_with":
            assert "```memory" in user and "Question:" in user
        if kind == "answer_without":
            assert "## Memory Context" not in user and "No memory of earlier conversations" in user
    assert model.transient_sent

    with_labels = [WITH_MEMORY_LABEL[i] if i in injected else WITHOUT_MEMORY_LABEL[i] for i in range(len(QUESTIONS))]
    without_labels = list(WITHOUT_MEMORY_LABEL)
    answerable = [i for i, c in enumerate(CATEGORIES) if c != 5]
    adversarial = [i for i, c in enumerate(CATEGORIES) if c == 5]
    w_correct, w_judged, w_unjudged = _j([with_labels[i] for i in answerable])
    n_correct, n_judged, n_unjudged = _j([without_labels[i] for i in answerable])
    assert n_unjudged == 1  # the plan makes one judge malformed

    # Exactly the calls the plan implies (no hidden extra call, a retry only where planned).
    answer_calls = {
        "answer_with": len(injected),
        "answer_without": len(QUESTIONS) + 1,  # + the 503
    }
    judge_calls = sum(ATTEMPTS if label == "malformed" else 1 for label in without_labels) + sum(
        ATTEMPTS if WITH_MEMORY_LABEL[i] == "malformed" else 1 for i in injected
    )
    seen = {kind: sum(1 for k, _, _ in calls if k == kind) for kind in TOKENS}
    assert seen == {**answer_calls, "judge": judge_calls, "reflection": len(injected)}

    answer_prompt = len(injected) * TOKENS["answer_with"][0] + len(QUESTIONS) * TOKENS["answer_without"][0]
    answer_completion = len(injected) * TOKENS["answer_with"][1] + len(QUESTIONS) * TOKENS["answer_without"][1]
    judge_prompt = judge_calls * TOKENS["judge"][0] + len(injected) * TOKENS["reflection"][0]
    judge_completion = judge_calls * TOKENS["judge"][1] + len(injected) * TOKENS["reflection"][1]
    answer_cost = (answer_prompt * PRICE_IN + answer_completion * PRICE_OUT) / 1e6
    judge_cost = (judge_prompt * PRICE_IN + judge_completion * PRICE_OUT) / 1e6
    used = sum(1 for i in injected if USES_MEMORY[i])

    flat = " ".join(output.split())
    lift = 100 * (w_correct / w_judged - n_correct / n_judged)
    assert (
        f"J-score (categories 1-4): with memory {_pct(w_correct, w_judged)}, without memory "
        f"{_pct(n_correct, n_judged)}, lift {lift:+.1f} points" in flat
    ), flat[-2500:]
    assert f"reflection rate: {_pct(used, len(injected))}% ({used}/{len(injected)} " in flat
    assert (
        f"answer tokens ({STUB_MODEL}): {answer_prompt} prompt + {answer_completion} completion in "
        f"{len(injected) + len(QUESTIONS)} calls ({len(injected) + len(QUESTIONS) + 1} attempts), "
        f"cost ${answer_cost:.6f}" in flat
    )
    assert f"judge tokens ({STUB_MODEL}): {judge_prompt} prompt + {judge_completion} completion" in flat
    assert f"cost ${judge_cost:.6f}" in flat
    total_tokens = answer_prompt + answer_completion + judge_prompt + judge_completion
    assert f"total: {total_tokens} tokens, cost ${answer_cost + judge_cost:.6f}" in flat

    section = json.loads(out.read_text(encoding="utf-8"))["answers"]
    overall_with = section["j_score"]["with_memory"]["overall"]
    overall_without = section["j_score"]["without_memory"]["overall"]
    assert (overall_with["correct"], overall_with["judged"], overall_with["unjudged"]) == (
        w_correct,
        w_judged,
        w_unjudged,
    )
    assert (overall_without["correct"], overall_without["judged"], overall_without["unjudged"]) == (
        n_correct,
        n_judged,
        n_unjudged,
    )
    # Category 5 is scored apart: the plan says the with-memory answer declined.
    adv_with = section["adversarial"]["with_memory"]
    assert adv_with["correct"] == sum(1 for i in adversarial if with_labels[i] == "CORRECT")
    assert section["questions"]["answered"] == len(QUESTIONS)
    assert section["reflection"]["overall"]["no_memory"] == len(QUESTIONS) - len(injected)
    assert section["usage"]["answer"]["cost_usd"] == pytest.approx(answer_cost)
    assert section["usage"]["judge"]["cost_usd"] == pytest.approx(judge_cost)
    assert section["aborted"] is None
    by_question = {q["number"]: q for q in section["per_question"]}
    assert by_question[0]["without_memory"]["answer"] == "plain answer 0"
    markdown = (tmp_path / "report.answers.md").read_text(encoding="utf-8")
    assert "| overall 1-4 |" in markdown and f"{_pct(w_correct, w_judged)} ({w_correct}/{w_judged})" in markdown
