"""One turn's prompt from the recall API: rules, recalled memory and history within the slot budgets.

`turn_context` (blocking) and `aturn_context` (asyncio) fetch the user's rules and the tenant's shared
rules, narrow them to the turn when they do not fit half the system slot, ask `auto` for a memory
section sized to the memory slot, and let `ContextBuilder` assemble and report what it dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tiermem_client.calls import Channel
from tiermem_client.client import AsyncTiermemClient, TiermemClient
from tiermem_client.context import BuiltContext, ContextBuilder, Dropped
from tiermem_client.models import AutoRecallResponse, ChatTurn
from tiermem_client.procedures import SHARED_RULES_USER, SelectedRules, select_rules


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


def _assemble(
    builder: ContextBuilder, request: TurnRequest, rules: list[str], instructions: str, recalled: AutoRecallResponse
) -> TurnContext:
    selected = select_rules(rules, request.message, builder.budget("system") // 2, builder.counter)
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


def _all_rules(personal: list[str], shared: list[str]) -> list[str]:
    # The user's own rules first: when a personal and a shared rule disagree, the personal one is seen first.
    return personal + [rule for rule in shared if rule not in personal]


def turn_context(client: TiermemClient, builder: ContextBuilder, request: TurnRequest) -> TurnContext:
    personal = [item.abstract for item in client.rules(request.user_id, channel=request.channel).items]
    shared = [item.abstract for item in client.rules(SHARED_RULES_USER, channel=request.channel).items]
    instructions = client.memory_instructions(request.lang).text
    recalled = client.auto(
        request.user_id,
        request.message,
        recent_messages=list(request.history)[-20:],
        channel=request.channel,
        token_budget=max(1, builder.memory_budget(instructions)),
    )
    return _assemble(builder, request, _all_rules(personal, shared), instructions, recalled)


async def aturn_context(client: AsyncTiermemClient, builder: ContextBuilder, request: TurnRequest) -> TurnContext:
    personal = [item.abstract for item in (await client.rules(request.user_id, channel=request.channel)).items]
    shared = [item.abstract for item in (await client.rules(SHARED_RULES_USER, channel=request.channel)).items]
    instructions = (await client.memory_instructions(request.lang)).text
    recalled = await client.auto(
        request.user_id,
        request.message,
        recent_messages=list(request.history)[-20:],
        channel=request.channel,
        token_budget=max(1, builder.memory_budget(instructions)),
    )
    return _assemble(builder, request, _all_rules(personal, shared), instructions, recalled)
