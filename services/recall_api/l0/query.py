"""The L0 query, pure: the query text built from the current message and the user's previous turns
(trivial ones, services/common/domain/trivial.py, add nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.common.domain.graphemes import keep_tail_codepoints
from services.common.domain.trivial import is_trivial_message

# --------------------------------------------------------------------------------------------------
# The L0 query


@dataclass(frozen=True, slots=True)
class Turn:
    role: str
    content: str


def build_l0_query(
    message: str,
    recent_messages: Sequence[Turn],
    *,
    previous_user_turns: int = 2,
    max_codepoints: int = 300,
) -> str:
    """The current message plus at most `previous_user_turns` earlier user turns (oldest first,
    newest last), cut to `max_codepoints` code points keeping the newest end. Earlier turns are what
    resolve a pronoun follow-up ("그거 어떻게 됐어?"); trivial ones ("ok") add nothing and are skipped,
    as is a copy of the current message at the end of `recent_messages`."""
    current = message.strip()
    previous: list[str] = []
    history = list(recent_messages)
    if history and history[-1].role == "user" and history[-1].content.strip() == current:
        history = history[:-1]
    for turn in reversed(history):
        if len(previous) >= previous_user_turns:
            break
        if turn.role != "user":
            continue
        content = turn.content.strip()
        if content and not is_trivial_message(content):
            previous.append(content)
    parts = [*reversed(previous), current]
    joined = "\n".join(part for part in parts if part)
    return keep_tail_codepoints(joined, max_codepoints).strip()
