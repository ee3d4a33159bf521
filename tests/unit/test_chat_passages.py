"""Passages of real chat (episodic_summarizer/passages.py, `ChatShape`): bursts are one line, a silence
starts a passage, relative time carries its date and nicknames sit beside the speaker once per passage."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from contracts.events import Message, SessionCompleted
from services.episodic_summarizer.logic import build_summary_prompt
from services.episodic_summarizer.passages import ChatShape, chunk_passages

T0 = datetime(2026, 1, 9, 10, 0, tzinfo=UTC)


def msg(role: str, name: str, content: str, minute: float | None = None) -> Message:
    ts = None if minute is None else T0 + timedelta(minutes=minute)
    return Message(role=role, name=name, content=content, ts=ts)  # type: ignore[arg-type]


BURSTY = [
    msg("user", "Maria", "hey Jonny!", 0),
    msg("user", "Maria", "how was the concert yesterday?", 0.2),
    msg("assistant", "Jonathan", "amazing", 1),
    msg("assistant", "Jonathan", "Sam loved it too", 1.1),
    msg("user", "Maria", "did you get the tickets for next week?", 90),
    msg("assistant", "Jonathan", "yes", 91),
]


def test_a_burst_is_one_labelled_line_and_keeps_the_message_indexes() -> None:
    shape = ChatShape(burst_gap=timedelta(minutes=5))
    (passage,) = chunk_passages(BURSTY, shape=shape)
    assert passage.text.splitlines()[:2] == [
        "Maria: hey Jonny! / how was the concert yesterday?",
        "Jonathan: amazing / Sam loved it too",
    ]
    assert (passage.first_turn, passage.last_turn) == (0, 5)
    # Off (the default shape), every message is its own line, as before.
    assert len(chunk_passages(BURSTY)[0].text.splitlines()) == 6


def test_a_silence_starts_a_new_passage_without_carrying_a_turn_over() -> None:
    shape = ChatShape(burst_gap=timedelta(minutes=5), segment_gap=timedelta(minutes=30))
    passages = chunk_passages(BURSTY, shape=shape)
    assert [(p.first_turn, p.last_turn) for p in passages] == [(0, 3), (4, 5)]
    assert passages[1].text.startswith("Maria: did you get the tickets")


def test_a_turn_cap_splits_and_carries_the_overlap() -> None:
    passages = chunk_passages(BURSTY, shape=ChatShape(max_turns=2), overlap_turns=1)
    assert [(p.first_turn, p.last_turn) for p in passages] == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]


def test_relative_time_is_dated_from_the_message_and_aliases_appear_once_per_passage() -> None:
    shape = ChatShape(
        burst_gap=timedelta(minutes=5),
        segment_gap=timedelta(minutes=30),
        dates_from=T0 - timedelta(days=30),  # only for messages without a time
        aliases={"Jonathan": ("Jonny",)},
    )
    first, second = chunk_passages([*BURSTY, msg("assistant", "Jonathan", "see you", 99)], shape=shape)
    assert "yesterday [8 January 2026]" in first.text
    assert "next week [week of 12 January 2026]" in second.text
    assert first.text.splitlines()[1].startswith("Jonathan (Jonny): amazing")
    assert [line.split(":")[0] for line in second.text.splitlines()] == ["Maria", "Jonathan (Jonny)", "Jonathan"]


def test_a_message_without_a_time_is_dated_from_the_session() -> None:
    undated = [msg("user", "Maria", "I went hiking yesterday"), msg("assistant", "Jonathan", "nice")]
    (passage,) = chunk_passages(undated, shape=ChatShape(dates_from=T0))
    assert "yesterday [8 January 2026]" in passage.text


def test_aliases_never_push_a_passage_over_its_size() -> None:
    long_chat = [
        msg("user" if i % 2 else "assistant", "Maria" if i % 2 else "Jonathan", "word " * 20) for i in range(20)
    ]
    passages = chunk_passages(long_chat, max_chars=300, shape=ChatShape(aliases={"Jonathan": ("Jonny",)}))
    assert all(len(p.text) <= 300 for p in passages)
    assert all("Jonathan (Jonny):" in p.text for p in passages if "Jonathan" in p.text)


def test_a_date_header_starts_every_passage_within_the_size() -> None:
    long_turn = [msg("user", "Maria", "word " * 100), msg("assistant", "Jonathan", "ok")]
    passages = chunk_passages(long_turn, max_chars=200, shape=ChatShape(header="9 January 2026"))
    assert len(passages) > 2
    assert all(p.text.startswith("9 January 2026\n") and len(p.text) <= 200 for p in passages)


def test_the_summary_prompt_writes_a_burst_as_one_numbered_line() -> None:
    session = SessionCompleted(
        event_id=uuid.uuid4(),
        tenant_id="acme",
        user_id="alice",
        agent_id="agent-1",
        session_id="s-1",
        channel="private",
        started_at=T0,
        ended_at=T0 + timedelta(minutes=99),
        messages=BURSTY,
    )
    prompt = build_summary_prompt(session, "en", burst_gap=timedelta(minutes=5))[1]["content"]
    assert "[1-2] Maria (user): hey Jonny! / how was the concert yesterday?" in prompt
    assert "[3-4] Jonathan (assistant): amazing / Sam loved it too" in prompt
    assert "[5] Maria (user): did you get the tickets" in prompt


def test_every_turn_of_a_passage_of_several_is_a_point_once() -> None:
    talk = [
        msg("user" if n % 2 else "assistant", "Maria" if n % 2 else "Jo", f"message number {n} here") for n in range(9)
    ]
    found = chunk_passages(talk, max_chars=120, overlap_turns=1, turn_points=True)
    passages = [p for p in found if p.within is None]
    points = [p for p in found if p.within is not None]
    assert passages == chunk_passages(talk, max_chars=120, overlap_turns=1)  # the passages are as before, first
    assert found[: len(passages)] == passages and len(passages) >= 3
    assert [p.index for p in points] == list(range(len(points)))
    # Each message once, under the first passage that holds it (a turn carried over is not repeated).
    assert [p.first_turn for p in points] == list(range(9))
    for turn_point in points:
        home = passages[turn_point.within or 0]
        assert home.first_turn <= turn_point.first_turn <= home.last_turn
        assert turn_point.text in home.text.splitlines()


def test_a_passage_of_one_turn_or_of_pieces_of_one_gives_no_point() -> None:
    assert chunk_passages([msg("user", "Maria", "just one message")], turn_points=True) == chunk_passages(
        [msg("user", "Maria", "just one message")]
    )
    long_turn = [msg("user", "Maria", "word " * 60)]  # split into pieces: each fills its own passage
    found = chunk_passages(long_turn, max_chars=100, overlap_turns=0, turn_points=True)
    assert len(found) >= 3 and all(p.within is None for p in found)


def test_a_speakers_run_of_messages_is_one_point() -> None:
    found = chunk_passages(BURSTY[:4], turn_points=True)  # Maria twice, then Jonathan twice
    points = [p for p in found if p.within is not None]
    assert [p.text for p in points] == [
        "Maria: hey Jonny!\nMaria: how was the concert yesterday?",
        "Jonathan: amazing\nJonathan: Sam loved it too",
    ]
    assert [(p.first_turn, p.last_turn) for p in points] == [(0, 1), (2, 3)]
    # One speaker alone: the passage is the run, and no point repeats it.
    assert all(p.within is None for p in chunk_passages(BURSTY[:2], turn_points=True))
