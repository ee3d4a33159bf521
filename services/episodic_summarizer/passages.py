"""Passages, pure: a session's raw turns cut into the chunks L1 and L0 search (DESIGN §3).

A chat is read the way it is written (`ChatShape`): a speaker's burst of messages is one turn
(`domain/bursts.py`), a long silence starts a new passage (a new conversation in the same session),
relative time is dated against the message's own time (`domain/relative_time.py`), and the names
people call each other appear beside the speaker's label once per passage ("Jonathan (Jonny): ..."),
so a question using the nickname finds the passages where that person speaks.

A passage of several turns also gives a turn point per turn (`turn_points`; a speaker's run of
messages is one turn): the turn's own meaning vector, searched by L1 in place of the passage's when it
is closer. A passage of ten exchanges embeds as their blend, so a question about one of them sits far
from it; its closest turn does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from contracts.events import Message
from services.common.domain.bursts import Turn, gap_between, merge_bursts
from services.common.domain.graphemes import truncate_codepoints
from services.common.domain.relative_time import annotate_relative_dates
from services.common.domain.speakers import attribute_speakers
from services.episodic_summarizer.labels import speaker_label

# Room left for a speaker's label when a burst is capped to fit a passage.
_LABEL_ALLOWANCE = 42


@dataclass(frozen=True)
class Passage:
    """Consecutive turns of a session, embedded and searched on their own (L1 source context).
    `first_turn` / `last_turn` are indexes into the session's messages, inclusive."""

    index: int
    text: str
    first_turn: int
    last_turn: int
    within: int | None = None  # a turn point: the index of its passage


@dataclass(frozen=True)
class ChatShape:
    """How a chat is read into passages; the defaults read every message as its own turn.

    `burst_gap`: a speaker's consecutive messages this close together are one turn (None: never merged).
    `segment_gap`: a silence longer than this between turns starts a new passage (None: size alone).
    `max_turns`: most turns in a passage (None: size alone).
    `dates_from`: when set, relative time is dated, against each message's time or else this one.
    `aliases`: display name → other names the speaker is called, written beside the label once per passage.
    `header`: a first line of every passage (the session's date), counted in its size.
    """

    burst_gap: timedelta | None = None
    segment_gap: timedelta | None = None
    max_turns: int | None = None
    dates_from: datetime | None = None
    aliases: Mapping[str, Sequence[str]] = field(default_factory=dict)
    header: str | None = None


@dataclass(frozen=True)
class _Unit:
    first: int
    last: int
    speaker: str
    body: str
    whole_turn: bool
    ts: datetime | None
    last_ts: datetime | None


def _split_long(text: str, max_chars: int) -> list[str]:
    pieces: list[str] = []
    rest = text
    while len(rest) > max_chars:
        head = truncate_codepoints(rest, max_chars)
        space = head.rfind(" ")
        if space >= max_chars // 2:
            head = head[:space]
        pieces.append(head.rstrip())
        rest = rest[len(head) :].lstrip()
    if rest:
        pieces.append(rest)
    return pieces


def _dated(messages: Sequence[Message], fallback: datetime | None) -> list[Message]:
    if fallback is None:
        return list(messages)
    return [
        m.model_copy(update={"content": annotate_relative_dates(m.content, (m.ts or fallback).date())})
        for m in messages
    ]


def _units(turns: Sequence[Turn], max_chars: int, language: str) -> list[_Unit]:
    units: list[_Unit] = []
    for turn in turns:
        speaker = speaker_label(turn.message, language)
        line = f"{speaker}: {turn.text}"
        if len(line) <= max_chars:
            units.append(_Unit(turn.first, turn.last, speaker, turn.text, True, turn.ts, turn.last_ts))
            continue
        prefix = f"{speaker}: "
        for number, piece in enumerate(_split_long(line, max_chars)):
            # The first piece starts with the label; the others continue the turn without one.
            labelled = number == 0 and piece.startswith(prefix)
            body = piece[len(prefix) :] if labelled else piece
            units.append(_Unit(turn.first, turn.last, speaker if labelled else "", body, False, turn.ts, turn.last_ts))
    return units


def _render(group: Sequence[_Unit], shape: ChatShape) -> str:
    lines: list[str] = [shape.header] if shape.header else []
    named: set[str] = set()
    for unit in group:
        if not unit.speaker:
            lines.append(unit.body)
            continue
        label = unit.speaker
        known = shape.aliases.get(unit.speaker)
        # Whole turns only: a piece of a split turn already fills its passage.
        if known and unit.whole_turn and unit.speaker not in named:
            label = f"{unit.speaker} ({', '.join(known)})"
            named.add(unit.speaker)
        lines.append(f"{label}: {unit.body}")
    return "\n".join(lines)


def _starts_segment(previous: _Unit, unit: _Unit, segment_gap: timedelta | None) -> bool:
    if segment_gap is None:
        return False
    gap = gap_between(previous.last_ts, unit.ts)
    return gap is not None and gap > segment_gap


def _groups(units: Sequence[_Unit], max_chars: int, overlap_turns: int, shape: ChatShape) -> list[list[_Unit]]:
    groups: list[list[_Unit]] = []
    current: list[_Unit] = []
    for unit in units:
        new_segment = bool(current) and _starts_segment(current[-1], unit, shape.segment_gap)
        full = shape.max_turns is not None and len(current) >= shape.max_turns
        if current and (new_segment or full or len(_render([*current, unit], shape)) > max_chars):
            groups.append(current)
            # After a silence the earlier talk is another conversation: nothing is carried over.
            carried = (
                [u for u in current[-overlap_turns:] if u.whole_turn] if overlap_turns > 0 and not new_segment else []
            )
            if shape.max_turns is not None:
                carried = carried[len(carried) - min(len(carried), shape.max_turns - 1) :]
            while carried and len(_render([*carried, unit], shape)) > max_chars:
                carried = carried[1:]
            current = carried
        current.append(unit)
    if current:
        groups.append(current)
    return groups


def _speaker_runs(units: Sequence[_Unit]) -> list[list[_Unit]]:
    """Consecutive whole turns of one speaker, together: a burst of short messages is one thought."""
    runs: list[list[_Unit]] = []
    for unit in units:
        if runs and runs[-1][-1].speaker == unit.speaker:
            runs[-1].append(unit)
        else:
            runs.append([unit])
    return runs


def _turn_points(groups: Sequence[Sequence[_Unit]], shape: ChatShape) -> list[Passage]:
    """One point per speaker's run of whole turns in a passage of several runs, under that passage; a
    turn carried over from the previous passage is pointed at once, in the passage it was first in."""
    points: list[Passage] = []
    for number, group in enumerate(groups):
        carried = groups[number - 1] if number else ()
        runs = _speaker_runs([unit for unit in group if unit.whole_turn])
        if len(runs) < 2:
            continue
        for run in runs:
            fresh = [unit for unit in run if unit not in carried]
            if fresh:
                text = _render(fresh, shape)
                points.append(
                    Passage(len(points), text, first_turn=fresh[0].first, last_turn=fresh[-1].last, within=number)
                )
    return points


def chunk_passages(
    messages: Sequence[Message],
    *,
    max_chars: int = 1_200,
    overlap_turns: int = 1,
    language: str = "en",
    shape: ChatShape | None = None,
    turn_points: bool = False,
) -> list[Passage]:
    """Group consecutive turns ("speaker: content", one per line) into passages of at most `max_chars`
    code points, repeating the last `overlap_turns` whole turns of a passage at the start of the next
    when they fit. A turn longer than `max_chars` is split on cluster boundaries into its own passages.
    System turns and empty turns are left out. `shape` says how the chat is read (see `ChatShape`).
    With `turn_points`, the turn points of the passages (`within` set) follow them."""
    shape = shape or ChatShape()
    # A turn split into pieces fills a passage: leave room for the header line.
    room = max_chars - (len(shape.header) + 1 if shape.header else 0)
    if room < 20:
        raise ValueError("max_chars must be at least 20, beside the header when there is one")
    attributed = _dated(attribute_speakers(messages), shape.dates_from)
    turns = merge_bursts(attributed, max_gap=shape.burst_gap, max_chars=max(room - _LABEL_ALLOWANCE, 20))
    groups = _groups(_units(turns, room, language), max_chars, overlap_turns, shape)
    passages = [
        Passage(index=i, text=_render(group, shape), first_turn=group[0].first, last_turn=group[-1].last)
        for i, group in enumerate(groups)
    ]
    return [*passages, *_turn_points(groups, shape)] if turn_points else passages
