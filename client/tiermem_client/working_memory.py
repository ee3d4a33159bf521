"""Working memory: the conversation as the model sees it, within its context window.

The full transcript is kept as it was said (it becomes the `SessionCompleted` at the end); what goes
into the prompt is a running summary plus the recent turns. When the prompt passes `trigger_ratio`
(80 %) of the window, every turn but the last `keep_raw` (4) is folded into the summary by the
summariser: an LLM call you pass in, or the deterministic offline fallback `extractive_summary`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from tiermem_client.events import Channel, Message, MessageRole, Scope, SessionCompleted
from tiermem_client.models import ChatTurn
from tiermem_client.tokens import TokenCounter

Summariser = Callable[[str | None, Sequence[Message]], str]
"""(the summary so far or None, the turns to fold in, oldest first) -> the new summary."""

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
_EVENT_NAMESPACE = uuid.UUID("3f0d7d8e-52a7-4c39-9a1e-8d1f6f3b2c10")


def _first_sentence(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    for mark in (". ", "? ", "! ", "。", "다. "):
        cut = line.find(mark)
        if 0 < cut < limit:
            return line[: cut + len(mark)].strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def extractive_summary(previous: str | None, turns: Sequence[Message]) -> str:
    """The offline fallback: the first sentence of each folded turn, after the previous summary."""
    lines = [previous] if previous else []
    lines += [f"- {turn.role}: {_first_sentence(turn.content)}" for turn in turns if turn.content.strip()]
    return "\n".join(lines)


def truncate_to_tokens(counter: TokenCounter, text: str, budget: int) -> str:
    """The longest prefix of `text` with at most `budget` tokens (binary search on characters)."""
    if counter.count_tokens(text) <= budget:
        return text
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count_tokens(text[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return text[:low]


@dataclass(frozen=True)
class Compression:
    """What one compression did."""

    folded_turns: int
    tokens_before: int
    tokens_after: int


class WorkingMemory:
    """One conversation's turns, compressed past `trigger_ratio` of `window_tokens`."""

    def __init__(
        self,
        counter: TokenCounter,
        window_tokens: int,
        *,
        summariser: Summariser | None = None,
        trigger_ratio: float = 0.8,
        keep_raw: int = 4,
        summary_ratio: float = 0.15,
    ) -> None:
        if window_tokens < 1 or not 0 < trigger_ratio <= 1 or keep_raw < 0:
            raise ValueError("window_tokens must be positive, trigger_ratio in (0, 1], keep_raw >= 0")
        self.counter = counter
        self.window_tokens = window_tokens
        self.trigger_ratio = trigger_ratio
        self.keep_raw = keep_raw
        self.summary_budget = max(1, int(window_tokens * summary_ratio))
        self.summariser = summariser or extractive_summary
        self.transcript: list[Message] = []
        self.summary: str | None = None
        self.recent: list[Message] = []
        self.compressions: list[Compression] = []

    @property
    def trigger_tokens(self) -> float:
        return self.window_tokens * self.trigger_ratio

    def tokens(self) -> int:
        """Tokens of what would go into the prompt now (the summary and the recent turns)."""
        return sum(self.counter.count_tokens(turn.content) for turn in self.prompt_turns())

    def add(self, role: MessageRole, content: str, *, name: str | None = None) -> Compression | None:
        """Record a turn; compress when the prompt is now past the trigger. Returns what was compressed."""
        turn = Message(role=role, content=content, ts=datetime.now(UTC), name=name)
        self.transcript.append(turn)
        self.recent.append(turn)
        return self.compress_if_needed()

    def compress_if_needed(self) -> Compression | None:
        before = self.tokens()
        if before <= self.trigger_tokens or len(self.recent) <= self.keep_raw:
            return None
        cut = len(self.recent) - self.keep_raw
        folded, self.recent = self.recent[:cut], self.recent[cut:]
        summary = self.summariser(self.summary, folded)
        self.summary = truncate_to_tokens(self.counter, summary, self.summary_budget)
        done = Compression(folded_turns=len(folded), tokens_before=before, tokens_after=self.tokens())
        self.compressions.append(done)
        return done

    def prompt_turns(self) -> list[ChatTurn]:
        """The summary (as a system turn) and the recent turns, verbatim, oldest first."""
        turns = [ChatTurn(role="system", content=SUMMARY_PREFIX + self.summary)] if self.summary else []
        return turns + [ChatTurn(role=turn.role, content=turn.content) for turn in self.recent]

    def session_completed(
        self,
        *,
        tenant_id: str,
        user_id: str,
        agent_id: str,
        session_id: str,
        channel: Channel = "private",
        scope: Scope = "personal",
        locale: str | None = None,
        event_id: uuid.UUID | None = None,
    ) -> SessionCompleted:
        """The whole conversation, uncompressed, as the event the pipeline consumes. The default event id
        is derived from the session, so sending it twice is one session."""
        if not self.transcript:
            raise ValueError("the conversation has no turns yet")
        started, ended = self.transcript[0].ts, self.transcript[-1].ts
        return SessionCompleted(
            event_id=event_id or uuid.uuid5(_EVENT_NAMESPACE, f"{tenant_id}/{user_id}/{session_id}"),
            tenant_id=tenant_id,
            user_id=user_id,
            agent_id=agent_id,
            session_id=session_id,
            channel=channel,
            scope=scope,
            started_at=started or datetime.now(UTC),
            ended_at=ended or datetime.now(UTC),
            locale=locale,
            messages=list(self.transcript),
        )
