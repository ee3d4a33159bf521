"""Burst merging, pure. On a messaging app people write one thought as several short messages in a
row ("ok" / "so the build" / "is green now"). Kept as separate turns, each repeats the speaker's
label and a size-capped passage holds little of the conversation; merged into one turn
("Jo: ok / so the build / is green now") a passage holds more and reads as it was meant.

A burst is consecutive non-empty messages of one speaker (same role and same display name), each
sent within `max_gap` of the one before; when either time is unknown, adjacency alone decides.
System turns are left out and end a burst. A turn keeps the indexes of the original messages it
covers (`first` / `last`), so expansion and provenance still point at the raw session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from contracts.events import Message

SEPARATOR = " / "


@dataclass(frozen=True, slots=True)
class Turn:
    """One speaker's turn: one message, or a burst of them. `first` / `last` index the original
    messages, inclusive; `parts` are their whitespace-collapsed contents in order."""

    first: int
    last: int
    message: Message  # the first message of the turn (role, name, time)
    parts: tuple[str, ...]
    last_ts: datetime | None

    @property
    def text(self) -> str:
        return SEPARATOR.join(self.parts)

    @property
    def ts(self) -> datetime | None:
        return self.message.ts


def same_speaker(a: Message, b: Message) -> bool:
    """Same role and same display name (case and spacing aside)."""
    return (
        a.role == b.role and " ".join((a.name or "").split()).casefold() == " ".join((b.name or "").split()).casefold()
    )


def gap_between(earlier: datetime | None, later: datetime | None) -> timedelta | None:
    """The time between two messages, None when either time is unknown."""
    return None if earlier is None or later is None else later - earlier


def _continues(turn: Turn, message: Message, text: str, max_gap: timedelta, max_chars: int | None) -> bool:
    if not same_speaker(turn.message, message):
        return False
    gap = gap_between(turn.last_ts, message.ts)
    if gap is not None and gap > max_gap:
        return False
    # A burst that outgrows a passage would be cut mid-turn: start a new turn instead.
    return max_chars is None or len(turn.text) + len(SEPARATOR) + len(text) <= max_chars


def merge_bursts(messages: Sequence[Message], *, max_gap: timedelta | None, max_chars: int | None = None) -> list[Turn]:
    """The session's turns, bursts merged (see the module doc). `max_gap` None merges nothing: every
    non-empty, non-system message is its own turn. `max_chars` caps a merged turn's text (a single
    message longer than that is still one turn)."""
    turns: list[Turn] = []
    previous_kept = -2
    for index, message in enumerate(messages):
        if message.role == "system":
            previous_kept = -2  # a system turn ends a burst
            continue
        text = " ".join(message.content.split())
        if not text:
            continue
        last = turns[-1] if turns else None
        if (
            max_gap is not None
            and last is not None
            and previous_kept == last.last
            and _continues(last, message, text, max_gap, max_chars)
        ):
            turns[-1] = Turn(last.first, index, last.message, (*last.parts, text), message.ts or last.last_ts)
        else:
            turns.append(Turn(index, index, message, (text,), message.ts))
        previous_kept = index
    return turns
