"""The answer stage when the model misbehaves, through litellm's HTTP path to the local stub: a
reflection judge that never returns valid JSON is counted as unjudged (after the gateway's retries),
a provider that refuses the request (401) stops the stage after the first refusal with the reason in
the report and a non-zero exit, and nothing raises. The recall side is a fixed in-memory answer here
(the whole path, stack included, is `test_answer_eval.py`)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer
from rich.console import Console

from services.recall_api.schemas import AutoRecallResponse, MemoryItem, SearchResponse
from tests.fixtures.llm_stub import STUB_API_KEY, STUB_MODEL
from tests.support.llm_stub import LlmStubServer, ScriptedResponse, chat_completion_body, error_body
from tiermem_lab.evaluation.answer_options import finish_answers
from tiermem_lab.evaluation.answers import AnswerEvalConfig, run_answer_eval
from tiermem_lab.evaluation.locomo import LocomoQuestion, LocomoSample

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drain_litellm")]

SECTION = (
    "## Memory Context\nRecalled.\n```memory\n- Ann adopted a cat named Pixel (2023-05-08)\n- Bo ran (2023-06-20)\n```"
)


def memory_item(item_id: str, abstract: str) -> MemoryItem:
    return MemoryItem(
        id=item_id,
        kind="episode",
        abstract=abstract,
        score=0.8,
        weight=0.8,
        occurred_at="2023-06-20T18:00:00+00:00",
        session_id="s2",
    )


class FixedRecall:
    """Answers every L0 request with the same two-item section; L1 with one item L0 also gave and one new."""

    def __init__(self) -> None:
        self.search_limits: list[int] = []

    async def auto(self, user_id: str, message: str, **options: Any) -> AutoRecallResponse:
        items = [memory_item("e1", "Ann adopted a cat named Pixel")]
        return AutoRecallResponse(
            section=SECTION, items=items, injected=2, top_score=0.9, tokens=30, skipped_reason=None
        )

    async def search(self, user_id: str, query: str, *, limit: int) -> SearchResponse:
        self.search_limits.append(limit)
        items = [memory_item("e1", "Ann adopted a cat named Pixel"), memory_item("e9", "Bo ran the Berlin marathon")]
        return SearchResponse(items=items[:limit], top_score=0.8)


def sample(n: int) -> LocomoSample:
    questions = tuple(
        LocomoQuestion(
            number=i,
            question=f"Question number {i}?",
            answer="Pixel",
            category=4,
            evidence=(),
            evidence_sessions=frozenset(),
        )
        for i in range(n)
    )
    return LocomoSample("s1", "Ann", "Bo", (), questions)


def config(api_base: str, concurrency: int = 2) -> AnswerEvalConfig:
    return AnswerEvalConfig(answer_model=STUB_MODEL, api_base=api_base, concurrency=concurrency, max_attempts=3)


def ok(content: dict[str, Any]) -> ScriptedResponse:
    return ScriptedResponse(status=200, body=chat_completion_body(json.dumps(content)))


async def test_a_malformed_reflection_is_unjudged_and_the_rest_is_scored(
    llm_stub: LlmStubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", STUB_API_KEY)

    def respond(body: dict[str, Any]) -> ScriptedResponse:
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        if '"title":"GeneratedAnswer"' in system:
            return ok({"answer": "Pixel" if "## Memory Context" in user else "I don't know"})
        if '"title":"JudgeVerdict"' in system:
            return ok({"reason": "r", "label": "CORRECT" if "Generated answer: Pixel" in user else "WRONG"})
        if "Question number 0?" in user:
            return ScriptedResponse(status=200, body=chat_completion_body('{"uses_memory": "perhaps"}'))
        return ok({"reason": "r", "used_items": [1, 7], "uses_memory": True})

    llm_stub.respond_with(respond)
    stack: Any = SimpleNamespace(recall=FixedRecall())
    section = await run_answer_eval(stack, [sample(3)], config(llm_stub.api_base))

    assert section["aborted"] is None
    assert section["j_score"]["with_memory"]["overall"]["j_score"] == 1.0
    assert section["j_score"]["without_memory"]["overall"]["j_score"] == 0.0
    reflection = section["reflection"]["overall"]
    assert (reflection["used"], reflection["unjudged"], reflection["rate"]) == (2, 1, 1.0)
    # Item 7 does not exist (two were shown): only item 1 is kept.
    assert [q["reflection"]["used_items"] for q in section["per_question"]] == [[], [1], [1]]
    reflections = [r for r in llm_stub.requests("chat") if '"title":"ReflectionVerdict"' in r.messages[0]["content"]]
    assert len(reflections) == 2 + 3  # the malformed one was asked max_attempts times
    assert section["usage"]["judge"]["calls"] == 6 + 3


async def test_a_refusing_provider_stops_the_stage_and_says_why(
    llm_stub: LlmStubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", STUB_API_KEY)
    llm_stub.respond_with(lambda body: ScriptedResponse(status=401, body=error_body(401, "invalid api key")))
    stack: Any = SimpleNamespace(recall=FixedRecall())
    section = await run_answer_eval(stack, [sample(20)], config(llm_stub.api_base, concurrency=1))

    assert section["aborted"] and "refused" in section["aborted"] and "invalid api key" in section["aborted"]
    assert section["questions"]["answered"] == 0
    # One refusal is enough: a 401 is not retried and no other question is asked.
    assert len(llm_stub.requests("chat")) == 1

    out = tmp_path / "report.json"
    with pytest.raises(typer.Exit) as exited:
        finish_answers({"answers": section}, Console(file=io.StringIO()), out)
    assert exited.value.exit_code == 1
    assert "ABORTED" in (tmp_path / "report.answers.md").read_text(encoding="utf-8")


async def test_l1_episodes_follow_the_l0_section_when_asked_for(
    llm_stub: LlmStubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", STUB_API_KEY)

    def respond(body: dict[str, Any]) -> ScriptedResponse:
        system = body["messages"][0]["content"]
        if '"title":"GeneratedAnswer"' in system:
            return ok({"answer": "Berlin"})
        if '"title":"JudgeVerdict"' in system:
            return ok({"reason": "r", "label": "WRONG"})
        return ok({"reason": "r", "used_items": [3], "uses_memory": True})

    llm_stub.respond_with(respond)
    recall = FixedRecall()
    stack: Any = SimpleNamespace(recall=recall)
    answer_config = AnswerEvalConfig(answer_model=STUB_MODEL, api_base=llm_stub.api_base, l1_k=2)
    section = await run_answer_eval(stack, [sample(1)], answer_config)

    assert recall.search_limits == [2]
    shown = [
        r.messages[-1]["content"] for r in llm_stub.requests("chat") if "## Memory Context" in r.messages[-1]["content"]
    ]
    assert len(shown) == 1
    # L0's section unchanged, then only the L1 episode L0 did not already hold, dated.
    assert shown[0].startswith(SECTION + "\n\n## Related episodes (search)\n```memory\n")
    assert "- Bo ran the Berlin marathon (2023-06-20)\n```" in shown[0]
    assert shown[0].count("Pixel") == 1
    (question,) = section["per_question"]
    assert question["injected"] == 3 and question["reflection"]["used_items"] == [3]
    assert section["memory"] == "L0 recall/auto section + L1 memory_search top 2 episodes"


@pytest.mark.slow  # four CLI start-ups with a litellm import each
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--answer-model", "nosuch/model"], "litellm does not know its provider"),
        (["--answer-model", "openai/gpt-4o-mini"], "needs OPENAI_API_KEY in the environment"),
        (["--judge-model", "openai/gpt-4o-mini"], "--judge-model need --answer-model"),
        (["--answer-model", STUB_MODEL, "--answer-price", "0.15"], "two non-negative numbers IN,OUT"),
    ],
    ids=["unknown-provider", "missing-key", "judge-without-answer-model", "bad-price"],
)
def test_an_unusable_answer_model_is_refused_before_the_run(options: list[str], message: str, tmp_path: Path) -> None:
    data = tmp_path / "locomo.json"
    data.write_text("[]", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE")}
    command = [sys.executable, "-m", "services.cli", "eval", "locomo", str(data), "--work-dir", str(tmp_path), *options]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "nats").exists()  # refused before any server started
