"""The prompt of one turn, assembled within slot budgets of the model's context window.

Slots, as shares of the window: system prompt and procedural rules 10–20 %, retrieved memory (the
memory-instructions paragraph and the fenced `## Memory Context` section) 20–30 %, recent history
30–40 %; the rest is left for the answer. What does not fit is dropped and reported, never silently:
rules from the last one back, the memory section whole (cutting inside its fence would break it: ask
the recall API for `memory_budget()` tokens instead), history from the oldest turn on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from tiermem_client.models import ChatTurn
from tiermem_client.tokens import TokenCounter
from tiermem_client.working_memory import truncate_to_tokens

Slot = Literal["system", "memory", "history"]
MAX_SECTION_TOKENS = 8000  # the recall API's largest `token_budget`
RULES_HEADING = "## Working rules (follow them unless the user says otherwise)"
_SHARE_RANGES: dict[Slot, tuple[float, float]] = {
    "system": (0.10, 0.20),
    "memory": (0.20, 0.30),
    "history": (0.30, 0.40),
}


@dataclass(frozen=True)
class SlotShares:
    """Each slot's share of the window, within the ranges of the design."""

    system: float = 0.15
    memory: float = 0.25
    history: float = 0.40

    def __post_init__(self) -> None:
        for slot, (low, high) in _SHARE_RANGES.items():
            share = getattr(self, slot)
            if not low <= share <= high:
                raise ValueError(f"the {slot} share must be within {low:.0%}–{high:.0%}, not {share:.0%}")


@dataclass(frozen=True)
class Dropped:
    """Something left out of the prompt, and why."""

    slot: Slot
    what: str  # "rule", "system prompt (truncated)", "memory section", "memory instructions", "turn"
    tokens: int
    index: int | None = None  # position in the list it came from (rules, history)


@dataclass
class BuiltContext:
    messages: list[ChatTurn]
    tokens: dict[Slot, int]
    budgets: dict[Slot, int]
    dropped: list[Dropped] = field(default_factory=list)


class ContextBuilder:
    def __init__(self, counter: TokenCounter, window_tokens: int, shares: SlotShares | None = None) -> None:
        if window_tokens < 10:
            raise ValueError("window_tokens must be at least 10")
        self.counter = counter
        self.window_tokens = window_tokens
        self.shares = shares or SlotShares()

    def budget(self, slot: Slot) -> int:
        return int(self.window_tokens * getattr(self.shares, slot))

    def memory_budget(self, instructions: str = "") -> int:
        """Tokens left for the `## Memory Context` section: pass it as `token_budget` to `auto` (whose
        cap is 8000). Two tokens of margin: BPE may merge differently across the joining blank line."""
        if not instructions:
            return min(MAX_SECTION_TOKENS, self.budget("memory"))
        left = self.budget("memory") - self.counter.count_tokens(instructions + "\n\n") - 2
        return max(0, min(MAX_SECTION_TOKENS, left))

    def build(
        self,
        *,
        system_prompt: str,
        rules: Sequence[str] = (),
        memory_section: str = "",
        memory_instructions: str = "",
        history: Sequence[ChatTurn] = (),
    ) -> BuiltContext:
        dropped: list[Dropped] = []
        system_text = self._system_slot(system_prompt, rules, dropped)
        memory_text = self._memory_slot(memory_section, memory_instructions, dropped)
        turns = self._history_slot(history, dropped)
        system_content = "\n\n".join(part for part in (system_text, memory_text) if part)
        messages = ([ChatTurn(role="system", content=system_content)] if system_content else []) + turns
        count = self.counter.count_tokens
        tokens: dict[Slot, int] = {
            "system": count(system_text),
            "memory": count(memory_text),
            "history": sum(count(turn.content) for turn in turns),
        }
        budgets: dict[Slot, int] = {slot: self.budget(slot) for slot in _SHARE_RANGES}
        return BuiltContext(messages=messages, tokens=tokens, budgets=budgets, dropped=dropped)

    def _system_slot(self, system_prompt: str, rules: Sequence[str], dropped: list[Dropped]) -> str:
        budget, count = self.budget("system"), self.counter.count_tokens
        prompt = truncate_to_tokens(self.counter, system_prompt, budget)
        if prompt != system_prompt:
            dropped.append(Dropped("system", "system prompt (truncated)", count(system_prompt) - count(prompt)))
        kept: list[str] = []
        for index, rule in enumerate(rules):
            candidate = _with_rules(prompt, [*kept, rule])
            if count(candidate) <= budget:
                kept.append(rule)
            else:
                dropped.append(Dropped("system", "rule", count(rule), index))
        return _with_rules(prompt, kept)

    def _memory_slot(self, section: str, instructions: str, dropped: list[Dropped]) -> str:
        budget, count = self.budget("memory"), self.counter.count_tokens
        if count(instructions) > budget:
            dropped.append(Dropped("memory", "memory instructions", count(instructions)))
            instructions = ""
        text = "\n\n".join(part for part in (instructions, section) if part)
        if section and count(text) > budget:
            dropped.append(Dropped("memory", "memory section", count(section)))
            text = instructions
        return text

    def _history_slot(self, history: Sequence[ChatTurn], dropped: list[Dropped]) -> list[ChatTurn]:
        budget, count = self.budget("history"), self.counter.count_tokens
        kept: list[ChatTurn] = []
        used = 0
        oldest_kept = len(history)
        for index in range(len(history) - 1, -1, -1):  # newest first: the latest turns matter most
            tokens = count(history[index].content)
            if used + tokens > budget:
                break
            kept.append(history[index])
            used += tokens
            oldest_kept = index
        dropped += [Dropped("history", "turn", count(history[i].content), i) for i in range(oldest_kept)]
        return kept[::-1]


def _with_rules(prompt: str, rules: Sequence[str]) -> str:
    if not rules:
        return prompt
    block = RULES_HEADING + "\n" + "\n".join(f"- {rule}" for rule in rules)
    return f"{prompt}\n\n{block}" if prompt else block
