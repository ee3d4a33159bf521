"""tiermem for pydantic-ai agents: memory as dependency-injected instructions and tools.

`pip install 'tiermem-client[pydantic-ai]'`, then:

    agent = Agent(model, deps_type=TiermemDeps, instructions=memory_instructions, toolsets=[memory_toolset()])
    deps = TiermemDeps(client=AsyncTiermemClient(url, key), user_id="alice")
    result = await agent.run("Draft this week's 보고서", deps=deps)
    await record_session(deps, result.all_messages(), session_id="s-42")   # the transcript into memory

- `memory_instructions` (an instructions function: it runs every turn with the turn's prompt): the user's
  working rules from `GET /v1/procedures` (all while few, the relevant ones when many) and the L0
  `## Memory Context` section of `POST /v1/recall/auto`, fenced as data, with the memory-usage paragraph.
- `memory_toolset()`: `memory_search` (L1 over facts and episodes), `memory_save` (a fact through the
  write policy) and `memory_save_rule` (a working rule; a new rule on a topic supersedes the old one).
  A request the recall API refuses as invalid becomes `ModelRetry` (the model can fix its arguments);
  anything else stays the client's typed error (`UnavailableError`, `AuthenticationError`, ...).
- `record_session`: the run's messages as a `SessionCompleted` (user prompts and the model's text; the
  injected memory is not part of the transcript, so memory never feeds on itself).

The tenant is the API key's; `user_id` and `channel` come from the deps, so one agent serves many users
and a group conversation never sees private memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic_ai import ModelRetry, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.toolsets import FunctionToolset

from tiermem_client.calls import Channel
from tiermem_client.client import AsyncTiermemClient
from tiermem_client.context import RULES_HEADING
from tiermem_client.errors import InvalidRequestError
from tiermem_client.events import Message, SessionCompleted
from tiermem_client.models import SessionAccepted


@dataclass
class TiermemDeps:
    """The run's dependencies: who is talking, where, and the budgets of the injected memory."""

    client: AsyncTiermemClient
    user_id: str
    tenant_id: str | None = None  # needed only by `record_session` (the API key decides the tenant anyway)
    agent_id: str = "pydantic-ai"
    channel: Channel = "private"
    lang: str = "en"
    rules_token_budget: int = 400
    memory_token_budget: int = 600
    loaded_rules: list[str] = field(default_factory=list)  # what the last turn's instructions carried
    _usage_paragraph: dict[str, str] = field(default_factory=dict, repr=False)  # per language, fetched once


def _prompt_text(prompt: object) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        return " ".join(part for part in prompt if isinstance(part, str))
    return ""


async def memory_instructions(ctx: RunContext[TiermemDeps]) -> str:
    """This turn's working rules and recalled memory, as instructions (re-evaluated every run)."""
    deps = ctx.deps
    message = _prompt_text(ctx.prompt) or "(no message)"
    rules = await deps.client.procedures(
        deps.user_id, query=message, token_budget=deps.rules_token_budget, channel=deps.channel
    )
    deps.loaded_rules = [rule.text for rule in rules.rules]
    recalled = await deps.client.auto(
        deps.user_id, message, channel=deps.channel, token_budget=deps.memory_token_budget
    )
    parts: list[str] = []
    if rules.section:
        parts.append(f"{RULES_HEADING}\n{rules.section}")
    if recalled.section:
        if deps.lang not in deps._usage_paragraph:
            deps._usage_paragraph[deps.lang] = (await deps.client.memory_instructions(deps.lang)).text
        parts += [deps._usage_paragraph[deps.lang], recalled.section]
    return "\n\n".join(parts)


def memory_toolset() -> FunctionToolset[TiermemDeps]:
    """The memory tools, bound to each run's `TiermemDeps`."""
    toolset: FunctionToolset[TiermemDeps] = FunctionToolset()

    @toolset.tool
    async def memory_search(ctx: RunContext[TiermemDeps], query: str, limit: int = 5) -> list[str]:
        """Search the user's long-term memory (facts and past conversations) for `query`."""
        try:
            found = await ctx.deps.client.search(
                query, user_id=ctx.deps.user_id, limit=max(1, min(limit, 20)), channel=ctx.deps.channel
            )
        except InvalidRequestError as exc:
            raise ModelRetry(f"memory_search refused: {exc}") from exc
        return [item.abstract for item in found.items]

    @toolset.tool
    async def memory_save(ctx: RunContext[TiermemDeps], fact: str) -> str:
        """Remember one fact about the user, as one sentence (e.g. "Alice moved to Busan in May")."""
        try:
            saved = await ctx.deps.client.save_fact(ctx.deps.user_id, fact, channel=ctx.deps.channel)
        except InvalidRequestError as exc:
            raise ModelRetry(f"memory_save refused: {exc}") from exc
        return f"{saved.outcome} ({saved.status or 'stored'})"

    @toolset.tool
    async def memory_save_rule(ctx: RunContext[TiermemDeps], rule: str, topic: str | None = None) -> str:
        """Remember a standing rule the user gave ("always answer in Korean"); it replaces an older rule on
        the same topic."""
        try:
            saved = await ctx.deps.client.save_rule(ctx.deps.user_id, rule, topic=topic, channel=ctx.deps.channel)
        except InvalidRequestError as exc:
            raise ModelRetry(f"memory_save_rule refused: {exc}") from exc
        return saved.outcome

    return toolset


def transcript(messages: Sequence[ModelMessage]) -> list[Message]:
    """What the user said and what the model answered, in order (instructions and tool traffic left out)."""
    turns: list[Message] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            turns += [
                Message(role="user", content=_prompt_text(part.content))
                for part in message.parts
                if isinstance(part, UserPromptPart) and _prompt_text(part.content).strip()
            ]
        elif isinstance(message, ModelResponse):
            text = "".join(part.content for part in message.parts if isinstance(part, TextPart)).strip()
            if text:
                turns.append(Message(role="assistant", content=text))
    return turns


async def record_session(
    deps: TiermemDeps,
    messages: Sequence[ModelMessage],
    *,
    session_id: str,
    started_at: datetime | None = None,
    ended_at: datetime | None = None,
) -> SessionAccepted:
    """Send the run's conversation to memory (idempotent: the event id is derived from the session)."""
    if deps.tenant_id is None:
        raise ValueError("record_session needs TiermemDeps.tenant_id (the tenant of the API key)")
    turns = transcript(messages)
    if not turns:
        raise ValueError("the run has no user or assistant text to remember")
    ended = ended_at or datetime.now(UTC)
    event = SessionCompleted(
        event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"tiermem:pydantic-ai:{deps.tenant_id}:{deps.user_id}:{session_id}"),
        tenant_id=deps.tenant_id,
        user_id=deps.user_id,
        agent_id=deps.agent_id,
        session_id=session_id,
        channel=deps.channel,
        started_at=started_at or ended,
        ended_at=ended,
        messages=turns,
    )
    return await deps.client.add_session(event)
