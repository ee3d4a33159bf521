"""Burst merging (domain/bursts.py): a speaker's run of short messages is one turn, its indexes kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from contracts.events import Message
from services.common.domain.bursts import merge_bursts

T0 = datetime(2026, 1, 9, 10, 0, tzinfo=UTC)
FIVE_MINUTES = timedelta(minutes=5)


def msg(role: str, content: str, name: str | None = None, minute: float | None = None) -> Message:
    ts = None if minute is None else T0 + timedelta(minutes=minute)
    return Message(role=role, content=content, name=name, ts=ts)  # type: ignore[arg-type]


def test_a_speakers_quick_messages_are_one_turn_with_the_original_indexes() -> None:
    messages = [
        msg("user", "ok", "Jo", 0),
        msg("user", "so the build", "Jo", 0.2),
        msg("user", "is  green now", "Jo", 0.5),
        msg("assistant", "great", "Sam", 1),
        msg("user", "cool", "Jo", 2),
    ]
    turns = merge_bursts(messages, max_gap=FIVE_MINUTES)
    assert [(t.first, t.last, t.text) for t in turns] == [
        (0, 2, "ok / so the build / is green now"),
        (3, 3, "great"),
        (4, 4, "cool"),
    ]


def test_a_long_pause_or_another_name_ends_the_burst() -> None:
    messages = [
        msg("user", "see you", "Jo", 0),
        msg("user", "back now", "Jo", 40),  # 40 minutes later: a new turn
        msg("user", "hi all", "Kim", 40.1),  # same role, another person
    ]
    assert [(t.first, t.last) for t in merge_bursts(messages, max_gap=FIVE_MINUTES)] == [(0, 0), (1, 1), (2, 2)]


def test_without_times_adjacency_decides_and_system_turns_end_a_burst() -> None:
    messages = [msg("user", "a"), msg("user", "  "), msg("user", "b"), msg("system", "note"), msg("user", "c")]
    assert [(t.first, t.last, t.text) for t in merge_bursts(messages, max_gap=FIVE_MINUTES)] == [
        (0, 2, "a / b"),
        (4, 4, "c"),
    ]


def test_off_keeps_every_message_and_a_cap_stops_a_burst_outgrowing_a_passage() -> None:
    messages = [msg("user", "x" * 30), msg("user", "y" * 30), msg("user", "z" * 30)]
    assert len(merge_bursts(messages, max_gap=None)) == 3
    capped = merge_bursts(messages, max_gap=FIVE_MINUTES, max_chars=70)
    assert [(t.first, t.last) for t in capped] == [(0, 1), (2, 2)]
