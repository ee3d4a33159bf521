"""The LLM gateway over litellm's real HTTP path, against the OpenAI-compatible stub server."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr

from services.common.gateways.llm import (
    LlmConfig,
    LlmGateway,
    LlmNotConfigured,
    LlmOutputInvalid,
    LlmRequestRejected,
    LlmUnavailable,
    UsageRecorder,
    build_llm_gateway,
)
from services.common.runtime.settings import LlmSettings
from services.episodic_summarizer.logic import SummaryOutput, build_summary_prompt
from tests.fixtures.llm_stub import STUB_API_KEY, STUB_MODEL
from tests.support.llm_stub import LlmStubServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("drain_litellm")]


INPUT_COST = 0.000003
OUTPUT_COST = 0.000015
MESSAGES = [{"role": "system", "content": "You extract facts."}, {"role": "user", "content": "I live in Busan."}]


class Fact(BaseModel):
    model_config = ConfigDict(frozen=True)

    subject: str
    city: str


def gateway(stub: LlmStubServer, **overrides: Any) -> LlmGateway:
    config: dict[str, Any] = {
        "model": STUB_MODEL,
        "api_base": stub.api_base,
        "api_key": STUB_API_KEY,
        "timeout_s": 5.0,
        "max_attempts": 3,
        "backoff_initial_s": 0.01,
        "backoff_max_s": 0.05,
        "total_budget_s": 30.0,
        "input_cost_per_token": INPUT_COST,
        "output_cost_per_token": OUTPUT_COST,
    }
    config.update(overrides)
    return LlmGateway(LlmConfig.model_validate(config))


async def test_valid_json_is_parsed_and_usage_recorded(llm_stub: LlmStubServer) -> None:
    llm = gateway(llm_stub)
    llm_stub.push_chat_json({"subject": "user", "city": "Busan"}, prompt_tokens=120, completion_tokens=30)

    result = await llm.complete_json(MESSAGES, Fact, purpose="fact_extraction")

    assert result.value == Fact(subject="user", city="Busan")
    assert result.model == "stub-model"
    assert (result.prompt_tokens, result.completion_tokens, result.attempts) == (120, 30, 1)
    assert result.cost_usd == 120 * INPUT_COST + 30 * OUTPUT_COST
    assert result.latency_s > 0
    usage = llm.usage.get("fact_extraction")
    assert (usage.calls, usage.failures, usage.attempts) == (1, 0, 1)
    assert (usage.prompt_tokens, usage.completion_tokens) == (120, 30)
    assert usage.cost_usd == result.cost_usd

    (request,) = llm_stub.requests("chat")
    assert request.body["model"] == "stub-model"
    assert request.body["response_format"] == {"type": "json_object"}
    assert request.headers["authorization"] == f"Bearer {STUB_API_KEY}"
    # The schema is stated in the (single) system message; the caller's messages follow unchanged.
    assert [m["role"] for m in request.messages] == ["system", "user"]
    assert request.messages[0]["content"].startswith("You extract facts.")
    assert '"city"' in request.messages[0]["content"]
    assert request.messages[1] == MESSAGES[1]


async def test_fenced_or_wrapped_json_is_accepted(llm_stub: LlmStubServer) -> None:
    llm = gateway(llm_stub)
    llm_stub.push_chat_content('```json\n{"subject": "user", "city": "Seoul"}\n```')
    llm_stub.push_chat_content('Here is the JSON: {"subject": "user", "city": "Jeju"} Hope it helps.')
    assert (await llm.complete_json(MESSAGES, Fact, purpose="t")).value.city == "Seoul"
    assert (await llm.complete_json(MESSAGES, Fact, purpose="t")).value.city == "Jeju"
    assert len(llm_stub.requests("chat")) == 2


async def test_malformed_json_is_retried_then_reported(llm_stub: LlmStubServer) -> None:
    llm = gateway(llm_stub, max_attempts=3)
    llm_stub.push_chat_content("{not json", prompt_tokens=10, completion_tokens=2)
    llm_stub.push_chat_json({"subject": "user"}, prompt_tokens=10, completion_tokens=2)  # missing "city"
    llm_stub.push_chat_content("", prompt_tokens=10, completion_tokens=2)

    with pytest.raises(LlmOutputInvalid) as caught:
        await llm.complete_json(MESSAGES, Fact, purpose="fact_extraction")

    error = caught.value
    assert error.attempts == 3
    assert "fact_extraction" in error.reason
    assert "validation failed" in error.reason
    assert "Invalid JSON" in error.reason
    assert "city: Field required" in error.reason
    assert "no content" in error.reason
    assert not error.retryable_later
    assert len(llm_stub.requests("chat")) == 3
    usage = llm.usage.get("fact_extraction")
    # Failed attempts still cost tokens, and the recorder says so.
    assert (usage.calls, usage.failures, usage.attempts, usage.prompt_tokens) == (1, 1, 3, 30)
    assert usage.cost_usd == pytest.approx(3 * (10 * INPUT_COST + 2 * OUTPUT_COST))


async def test_invalid_output_then_valid_succeeds(llm_stub: LlmStubServer) -> None:
    llm = gateway(llm_stub)
    llm_stub.push_chat_content("sorry, I can't", prompt_tokens=5, completion_tokens=5)
    llm_stub.push_chat_json({"subject": "user", "city": "Busan"}, prompt_tokens=7, completion_tokens=3)
    result = await llm.complete_json(MESSAGES, Fact, purpose="t")
    assert result.attempts == 2
    assert (result.prompt_tokens, result.completion_tokens) == (12, 8)


async def test_rate_limit_then_success(llm_stub: LlmStubServer) -> None:
    llm = gateway(llm_stub)
    llm_stub.push_error(429, "Rate limit reached")
    llm_stub.push_chat_json({"subject": "user", "city": "Busan"})
    result = await llm.complete_json(MESSAGES, Fact, purpose="t")
    assert result.attempts == 2
    assert result.value.city == "Busan"
    assert len(llm_stub.requests("chat")) == 2


async def test_retry_after_of_a_429_is_honoured(llm_stub: LlmStubServer) -> None:
    llm = gateway(llm_stub, backoff_max_s=2.0)
    llm_stub.push_error(429, "slow down", headers={"Retry-After": "0.4"})
    llm_stub.push_chat_json({"subject": "user", "city": "Busan"})
    await llm.complete_json(MESSAGES, Fact, purpose="t")
    first, second = llm_stub.requests("chat")
    assert second.received_at - first.received_at >= 0.4


async def test_server_errors_are_retried_then_unavailable(llm_stub: LlmStubServer) -> None:
    llm = gateway(llm_stub, max_attempts=3)
    llm_stub.push_error(500, "boom")
    llm_stub.push_error(503, "overloaded")
    llm_stub.push_error(502, "bad gateway")
    with pytest.raises(LlmUnavailable) as caught:
        await llm.complete_json(MESSAGES, Fact, purpose="t")
    assert caught.value.attempts == 3
    assert caught.value.retryable_later
    assert "HTTP 500" in caught.value.reason
    assert "HTTP 503" in caught.value.reason
    assert len(llm_stub.requests("chat")) == 3
    assert llm.usage.get("t").failures == 1


async def test_timeouts_are_retried_then_unavailable(llm_stub: LlmStubServer) -> None:
    llm = gateway(llm_stub, timeout_s=0.3, max_attempts=2)
    for _ in range(2):
        llm_stub.push_chat_json({"subject": "user", "city": "Busan"}, delay_s=3.0)
    started = time.monotonic()
    with pytest.raises(LlmUnavailable) as caught:
        await llm.complete_json(MESSAGES, Fact, purpose="t")
    assert time.monotonic() - started < 2.5  # neither attempt waited for the slow answer
    assert caught.value.attempts == 2
    assert "Timeout" in caught.value.reason
    assert len(llm_stub.requests("chat")) == 2


async def test_total_budget_bounds_the_retry_loop(llm_stub: LlmStubServer) -> None:
    llm = gateway(llm_stub, max_attempts=50, backoff_initial_s=0.2, backoff_max_s=0.2, total_budget_s=1.0)
    for _ in range(50):
        llm_stub.push_error(500, "down")
    started = time.monotonic()
    with pytest.raises(LlmUnavailable) as caught:
        await llm.complete_json(MESSAGES, Fact, purpose="t")
    assert time.monotonic() - started < 1.5
    assert 2 <= caught.value.attempts < 10


@pytest.mark.parametrize("status", [400, 401, 404])
async def test_client_errors_are_not_retried(llm_stub: LlmStubServer, status: int) -> None:
    llm = gateway(llm_stub)
    llm_stub.push_error(status, "bad request: unknown parameter")
    with pytest.raises(LlmRequestRejected) as caught:
        await llm.complete_json(MESSAGES, Fact, purpose="t")
    assert caught.value.attempts == 1
    assert caught.value.status_code == status
    assert "unknown parameter" in caught.value.reason
    assert not caught.value.retryable_later
    assert len(llm_stub.requests("chat")) == 1


async def test_on_progress_ticks_during_a_slow_call(llm_stub: LlmStubServer) -> None:
    llm = gateway(llm_stub, timeout_s=10.0, progress_interval_s=0.1)
    llm_stub.push_chat_json({"subject": "user", "city": "Busan"}, delay_s=0.8)
    ticks: list[float] = []

    async def on_progress() -> None:
        ticks.append(time.monotonic())

    result = await llm.complete_json(MESSAGES, Fact, purpose="t", on_progress=on_progress)
    assert result.value.city == "Busan"
    assert len(ticks) >= 3


async def test_on_progress_ticks_during_backoff(llm_stub: LlmStubServer) -> None:
    llm = gateway(llm_stub, backoff_initial_s=0.6, backoff_max_s=0.6, progress_interval_s=0.1)
    llm_stub.push_error(503, "busy")
    llm_stub.push_chat_json({"subject": "user", "city": "Busan"})
    ticks = 0

    async def on_progress() -> None:
        nonlocal ticks
        ticks += 1

    await llm.complete_json(MESSAGES, Fact, purpose="t", on_progress=on_progress)
    assert ticks >= 3


async def test_offline_gateway_makes_no_call(llm_stub: LlmStubServer) -> None:
    llm = LlmGateway(LlmConfig())
    assert llm.offline
    assert not llm.online
    with pytest.raises(LlmNotConfigured):
        await llm.complete_json(MESSAGES, Fact, purpose="t")
    assert llm_stub.requests() == []


async def test_unknown_model_without_prices_costs_zero(llm_stub: LlmStubServer) -> None:
    llm = gateway(llm_stub, input_cost_per_token=None, output_cost_per_token=None)
    llm_stub.push_chat_json({"subject": "user", "city": "Busan"})
    result = await llm.complete_json(MESSAGES, Fact, purpose="t")
    assert result.cost_usd == 0.0


async def test_gateway_from_service_settings(llm_stub: LlmStubServer) -> None:
    usage = UsageRecorder()
    llm = build_llm_gateway(
        LlmSettings(model=STUB_MODEL, api_base=llm_stub.api_base, api_key=SecretStr(STUB_API_KEY), timeout_s=5), usage
    )
    assert llm.online
    assert llm.config.timeout_s == 5
    llm_stub.push_chat_json({"subject": "user", "city": "Busan"})
    await llm.complete_json(MESSAGES, Fact, purpose="from_settings")
    assert usage.get("from_settings").calls == 1


async def test_korean_summary_round_trip(llm_stub: LlmStubServer) -> None:
    from datetime import UTC, datetime
    from uuid import UUID

    from contracts.events import Message, SessionCompleted

    event = SessionCompleted(
        event_id=UUID("00000000-0000-4000-8000-000000000002"),
        tenant_id="t1",
        user_id="u1",
        agent_id="a1",
        session_id="s1",
        channel="private",
        started_at=datetime(2026, 5, 2, tzinfo=UTC),
        ended_at=datetime(2026, 5, 2, tzinfo=UTC),
        messages=[Message(role="user", content="온비서 배포는 김철수 팀장이 금요일까지 하기로 했어요.")],
    )
    answer = {"summary": "김철수 팀장이 금요일까지 온비서를 배포하기로 했다.", "entity_names": ["김철수", "온비서"]}
    llm_stub.push_chat_json(answer)
    result = await gateway(llm_stub).complete_json(
        build_summary_prompt(event, "ko"), SummaryOutput, purpose="episode_summary"
    )
    assert result.value == SummaryOutput.model_validate(answer)
    (request,) = llm_stub.requests("chat")
    assert "한국어로 작성하세요" in request.messages[0]["content"]
    assert '"entity_names":{' in request.messages[0]["content"]  # the JSON Schema the gateway appends
