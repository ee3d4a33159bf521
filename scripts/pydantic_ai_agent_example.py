"""A pydantic-ai agent with tiermem memory, offline, against a running `tiermem up`.

The agent gets memory through dependency injection: `memory_instructions` puts the user's working rules
and the recalled `## Memory Context` into its instructions every run, and `memory_toolset()` gives it
`memory_search`, `memory_save` and `memory_save_rule`. No LLM is called: the model is pydantic-ai's
`FunctionModel` running a scripted policy (a stated rule → `memory_save_rule`, a question →
`memory_search`, otherwise a canned reply) and recording the instructions it was given.

It shows: a fact said in session 1 recalled in session 2 without being named (in the instructions' memory
context, and through the search tool the model calls), a rule saved by the agent's tool in session 1
loaded in session 2, and a rule saved in session 3 in force in its next turn.

    tiermem up &                                    # writes .tiermem/dev-api-key, tenant "local"
    .venv/bin/python scripts/pydantic_ai_agent_example.py  # the dev .venv has the client and pydantic-ai

or, elsewhere: `pip install './client[pydantic-ai]'` first. It reads TIERMEM_RECALL_URL and
TIERMEM_API_KEY as the CLI does.

It prints what happens and, last, one JSON line with the outcome; the exit code is 0 when all held.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tiermem_client import DEFAULT_URL, AsyncTiermemClient, extract_rules
from tiermem_client.adapters.pydantic_ai import TiermemDeps, memory_instructions, memory_toolset, record_session


class ScriptedModel:
    """The offline stand-in for an LLM: decides from the last request, remembers what it was told."""

    def __init__(self) -> None:
        self.instructions: list[str] = []
        self.tool_results: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        returns = [part for part in last.parts if isinstance(part, ToolReturnPart)]
        if returns:
            self.tool_results += [str(part.content) for part in returns]
            return ModelResponse(parts=[TextPart(f"Done: {'; '.join(str(part.content) for part in returns)}")])
        self.instructions.append(info.instructions or "")
        prompt = _last_prompt(messages)
        rules = extract_rules(prompt)
        if rules:
            calls = [ToolCallPart("memory_save_rule", {"rule": rule.text, "topic": rule.topic}) for rule in rules]
            return ModelResponse(parts=list(calls))
        if "?" in prompt:
            return ModelResponse(parts=[ToolCallPart("memory_search", {"query": prompt, "limit": 3})])
        return ModelResponse(parts=[TextPart("(offline reply) Got it.")])


def _last_prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if part.part_kind == "user-prompt" and isinstance(part.content, str):
                    return part.content
    return ""


def build_agent(model: ScriptedModel) -> Agent[TiermemDeps, str]:
    return Agent(
        FunctionModel(model),
        deps_type=TiermemDeps,
        instructions=memory_instructions,
        toolsets=[memory_toolset()],
    )


async def wait_until(what: str, check: Callable[[], Awaitable[bool]], timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.5)
    raise SystemExit(f"gave up waiting for {what} after {timeout_s:.0f}s")


async def session(deps: TiermemDeps, model: ScriptedModel, said: list[str], *, hours_ago: float) -> None:
    """One conversation through the agent, then its transcript into memory."""
    agent = build_agent(model)
    history: list[ModelMessage] = []
    for message in said:
        result = await agent.run(message, deps=deps, message_history=history)
        history = result.all_messages()
        print(f"  user: {message}\n  agent: {result.output}")
    ended = datetime.now(UTC) - timedelta(hours=hours_ago)
    session_id = f"pa-{uuid.uuid4().hex[:8]}"
    accepted = await record_session(deps, history, session_id=session_id, ended_at=ended)
    await deps.client.wait(accepted.event_id, user_id=deps.user_id, timeout=180)


async def run_demo(client: AsyncTiermemClient, tenant: str, user: str) -> dict[str, bool]:
    deps = TiermemDeps(client=client, user_id=user, tenant_id=tenant)
    model = ScriptedModel()
    print("session 1: the user says where they live and states a rule")
    await session(
        deps, model, ["I moved to Busan last month, the sea view is great.", "보고서는 표부터 보여줘."], hours_ago=3
    )

    async def fact_extracted() -> bool:
        return any("Busan" in item.abstract for item in (await client.facts(user)).items)

    await wait_until("the pipeline to extract where the user lives", fact_extracted)

    print("session 2: the user asks without naming either")
    model.instructions.clear()
    model.tool_results.clear()
    await session(deps, model, ["Where do I live now? Also draft this week's 보고서."], hours_ago=2)
    told = model.instructions[0]
    print("  instructions the model got:\n" + "\n".join("    " + line for line in told.splitlines()))
    in_context = "Busan" in told  # L0; under load it may answer from keywords alone and miss it
    by_tool = any("Busan" in result for result in model.tool_results)
    print(f"  Busan in the memory context: {in_context}; found by memory_search: {by_tool}")
    outcome = {"rule_loaded": "보고서는 표부터 보여줘" in told, "fact_recalled": in_context or by_tool}

    print("session 3: a new rule, in force from the next turn")
    model.instructions.clear()
    await session(deps, model, ["Always answer in Korean.", "Plan my weekend."], hours_ago=1)
    outcome["new_rule_in_force"] = "Always answer in Korean." in model.instructions[-1]
    return outcome


def api_key(data_dir: Path) -> str:
    if os.environ.get("TIERMEM_API_KEY"):
        return os.environ["TIERMEM_API_KEY"]
    key_file = data_dir / "dev-api-key"
    if not key_file.is_file():
        raise SystemExit(f"no API key: set TIERMEM_API_KEY or start `tiermem up` (it writes {key_file})")
    return key_file.read_text(encoding="utf-8").strip()


async def amain(url: str, key: str, tenant: str, user: str) -> int:
    async with AsyncTiermemClient(url, key) as client:
        outcome = await run_demo(client, tenant, user)
    print(json.dumps({"ok": all(outcome.values()), **outcome}))
    return 0 if all(outcome.values()) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default=os.environ.get("TIERMEM_RECALL_URL", DEFAULT_URL), help="TIERMEM_RECALL_URL")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("TIERMEM_DATA_DIR", ".tiermem")))
    parser.add_argument("--tenant", default="local", help="the tenant of the key (`tiermem up`: local)")
    parser.add_argument("--user", default=f"pa-{uuid.uuid4().hex[:6]}", help="a fresh user by default")
    args = parser.parse_args(argv)
    return asyncio.run(amain(args.url, api_key(args.data_dir), args.tenant, args.user))


if __name__ == "__main__":
    sys.exit(main())
