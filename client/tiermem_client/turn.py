"""One turn's prompt from the recall API: rules, recalled memory and history within the slot budgets.

`turn_context` (blocking) and `aturn_context` (asyncio) ask `GET /v1/procedures` for the user's and the
tenant's rules within half the system slot (all while they fit, else the ones relevant to the turn:
the server ranks them), ask `auto` for a memory section sized to the memory slot, and let
`ContextBuilder` assemble and report what it dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tiermem_client.calls import Channel
from tiermem_client.client import AsyncTiermemClient, TiermemClient
from tiermem_client.context import BuiltContext, ContextBuilder, Dropped
from tiermem_client.models import AutoRecallResponse, ChatTurn, ProceduresResponse
from tiermem_client.procedures import SelectedRules

MAX_RULES_BUDGET = 8000  # the recall API's largest `token_budget` for procedures


@dataclass
class TurnContext:
    built: BuiltContext
    rules: SelectedRules
    recalled: AutoRecallResponse

    @property
    def messages(self) -> list[ChatTurn]:
        return self.built.messages


@dataclass(frozen=True)
class TurnRequest:
    user_id: str
    message: str
    system_prompt: str
    history: Sequence[ChatTurn] = ()
    channel: Channel = "private"
    lang: str = "en"


def _selected(response: ProceduresResponse) -> SelectedRules:
    return SelectedRules(
        rules=[rule.text for rule in response.rules],
        tokens=response.tokens,
        left_out=[rule.text for rule in response.left_out],
        ranked=response.ranked,
    )


def _assemble(
    builder: ContextBuilder,
    request: TurnRequest,
    procedures: ProceduresResponse,
    instructions: str,
    recalled: AutoRecallResponse,
) -> TurnContext:
    selected = _selected(procedures)
    built = builder.build(
        system_prompt=request.system_prompt,
        rules=selected.rules,
        memory_section=recalled.section,
        memory_instructions=instructions,
        history=request.history,
    )
    built.dropped += [
        Dropped("system", "rule (not relevant to this turn)", builder.counter.count_tokens(rule))
        for rule in selected.left_out
    ]
    return TurnContext(built=built, rules=selected, recalled=recalled)


def rules_budget(builder: ContextBuilder) -> int:
    """Rules may take half the system slot; the system prompt keeps the rest."""
    return max(1, min(builder.budget("system") // 2, MAX_RULES_BUDGET))


def turn_context(client: TiermemClient, builder: ContextBuilder, request: TurnRequest) -> TurnContext:
    procedures = client.procedures(
        request.user_id, query=request.message, token_budget=rules_budget(builder), channel=request.channel
    )
    instructions = client.memory_instructions(request.lang).text
    recalled = client.auto(
        request.user_id,
        request.message,
        recent_messages=list(request.history)[-20:],
        channel=request.channel,
        token_budget=max(1, builder.memory_budget(instructions)),
    )
    return _assemble(builder, request, procedures, instructions, recalled)


async def aturn_context(client: AsyncTiermemClient, builder: ContextBuilder, request: TurnRequest) -> TurnContext:
    procedures = await client.procedures(
        request.user_id, query=request.message, token_budget=rules_budget(builder), channel=request.channel
    )
    instructions = (await client.memory_instructions(request.lang)).text
    recalled = await client.auto(
        request.user_id,
        request.message,
        recent_messages=list(request.history)[-20:],
        channel=request.channel,
        token_budget=max(1, builder.memory_budget(instructions)),
    )
    return _assemble(builder, request, procedures, instructions, recalled)
