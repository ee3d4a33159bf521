"""pydantic-ai agents with tiermem memory, against the real stack: rules and recalled memory reach the
model's instructions through dependency injection, the tools read and write through the write policy,
the run's transcript becomes a session, and refusals are typed (ModelRetry for the model to fix, the
client's errors for everything else)."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from tiermem_client import AsyncTiermemClient, AuthenticationError
from tiermem_client.adapters.pydantic_ai import TiermemDeps, memory_instructions, memory_toolset, transcript

from scripts.pydantic_ai_agent_example import run_demo
from tests.integration.test_write_api import ACME_KEY, WriteStack
from tests.integration.test_write_api import embedder as embedder
from tests.integration.test_write_api import keywords as keywords
from tests.integration.test_write_api import write_stack as write_stack

pytestmark = pytest.mark.integration


async def test_the_example_agent_recalls_a_fact_loads_its_rules_and_a_new_rule_takes_effect(
    write_stack: WriteStack,
) -> None:
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        outcome = await run_demo(client, "acme", "pa-alice")
    assert outcome == {"rule_loaded": True, "fact_recalled": True, "new_rule_in_force": True}


async def test_every_tool_runs_with_the_test_model_and_only_for_the_deps_user(write_stack: WriteStack) -> None:
    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        agent = Agent(TestModel(), deps_type=TiermemDeps, instructions=memory_instructions, toolsets=[memory_toolset()])
        deps = TiermemDeps(client=client, user_id="pa-bob", tenant_id="acme")
        result = await agent.run("Remember things about me.", deps=deps)
        called = {p.tool_name for m in result.all_messages() if isinstance(m, ModelResponse) for p in m.parts
                  if isinstance(p, ToolCallPart)}  # fmt: skip
        assert called == {"memory_search", "memory_save", "memory_save_rule"}
        assert (await client.procedures("pa-bob")).total == 1  # TestModel's generated rule went through the policy
        assert (await client.procedures("pa-carol")).total == 0
        assert [m.role for m in transcript(result.all_messages())] == ["user", "assistant"]


async def test_a_refused_tool_call_is_a_model_retry_and_a_bad_key_a_typed_error(write_stack: WriteStack) -> None:
    attempts: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        retries = [part for part in last.parts if isinstance(part, RetryPromptPart | ToolReturnPart)]
        if retries:  # pydantic-ai 2.x hands a ModelRetry back as the tool's (failed) return
            attempts.append(f"retried: {'at most 1000 characters' in str(retries[0].content)}")
            return ModelResponse(parts=[TextPart("I could not save that.")])
        attempts.append("first")
        return ModelResponse(parts=[ToolCallPart("memory_save", {"fact": "x" * 1500})])  # over the 1000 chars

    async with AsyncTiermemClient(write_stack.base_url, ACME_KEY) as client:
        agent = Agent(FunctionModel(model), deps_type=TiermemDeps, toolsets=[memory_toolset()])
        result = await agent.run("Save this.", deps=TiermemDeps(client=client, user_id="pa-dave"))
        assert attempts == ["first", "retried: True"] and result.output == "I could not save that."
        assert (await client.list_memories("pa-dave")).items == []  # nothing half-written
    async with AsyncTiermemClient(write_stack.base_url, "not-a-key") as stranger:
        agent = Agent(TestModel(), deps_type=TiermemDeps, instructions=memory_instructions)
        with pytest.raises(AuthenticationError):
            await agent.run("Hi.", deps=TiermemDeps(client=stranger, user_id="pa-dave"))
