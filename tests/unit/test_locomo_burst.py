"""The burst form of the LoCoMo eval (`tiermem eval locomo --form burst`), pure: a turn split into its
sentences and lines, a photo kept with the sentence it follows, Korean and full-width punctuation, no
empty message, every message keeping its turn's dia_id and speaker, the message times, the events it
publishes, and the option's validation. The chat and group forms must send what they always sent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from tiermem_lab.evaluation.baselines import corpus_texts, passage_texts
from tiermem_lab.evaluation.locomo import LocomoTurn, dia_session, parse_locomo, session_events
from tiermem_lab.evaluation.locomo_burst import (
    SECONDS_BETWEEN_MESSAGES,
    SECONDS_BETWEEN_TURNS,
    burst_sample,
    ingest_form,
    locomo_form,
    sample_form,
    split_sentences,
    turn_messages,
)

START = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def _sample(turns: list[dict[str, Any]], second: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    conversation: dict[str, Any] = {
        "speaker_a": "Caroline",
        "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": turns,
    }
    if second is not None:
        conversation |= {"session_2_date_time": "10:00 am on 9 May, 2023", "session_2": second}
    qa = [{"question": "Where did Caroline go?", "answer": "a support group", "category": 4, "evidence": ["D1:1"]}]
    return {"sample_id": "conv-x", "conversation": conversation, "qa": qa}


TURNS: list[dict[str, Any]] = [
    {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hey Mel! I went to a support group yesterday. It was great."},
    {"speaker": "Melanie", "dia_id": "D1:2", "text": "Wow, Dr. Kim's group? Look at this.", "blip_caption": "a dog."},
    {"speaker": "Caroline", "dia_id": "D1:3", "text": "", "blip_caption": "a photo of a cake"},
    {"speaker": "Melanie", "dia_id": "D1:4", "text": "Sounds fun"},
]


def test_a_turn_is_sent_as_its_sentences_with_the_photo_after_the_sentence_it_follows() -> None:
    (sample,) = parse_locomo([_sample(TURNS)])
    burst = burst_sample(sample)
    assert [(t.dia_id, t.speaker, t.text) for t in burst.sessions[0].turns] == [
        ("D1:1", "Caroline", "Hey Mel!"),
        ("D1:1", "Caroline", "I went to a support group yesterday."),
        ("D1:1", "Caroline", "It was great."),
        # "Dr." is a title, not a sentence's end; the caption's own period does not split it.
        ("D1:2", "Melanie", "Wow, Dr. Kim's group?"),
        ("D1:2", "Melanie", "Look at this. [shares a photo: a dog.]"),
        ("D1:3", "Caroline", "[shares a photo: a photo of a cake]"),
        ("D1:4", "Melanie", "Sounds fun"),
    ]
    # Questions, session numbers and dates are the sample's own: evidence still maps to its sessions.
    assert burst.questions == sample.questions
    assert [(s.number, s.occurred_at) for s in burst.sessions] == [(1, START)]
    assert {dia_session(t.dia_id) for t in burst.sessions[0].turns} == {1}


def test_each_message_has_its_time_a_few_seconds_within_a_turn_a_minute_between_turns() -> None:
    (sample,) = parse_locomo([_sample(TURNS, second=[{"speaker": "Melanie", "dia_id": "D2:1", "text": "Hi. Bye."}])])
    burst = burst_sample(sample)
    within, between = timedelta(seconds=SECONDS_BETWEEN_MESSAGES), timedelta(seconds=SECONDS_BETWEEN_TURNS)
    assert [t.sent_at for t in burst.sessions[0].turns] == [
        START,
        START + within,
        START + 2 * within,
        START + 2 * within + between,
        START + 3 * within + between,
        START + 3 * within + 2 * between,
        START + 3 * within + 3 * between,
    ]
    second = datetime(2023, 5, 9, 10, 0, tzinfo=UTC)
    assert [t.sent_at for t in burst.sessions[1].turns] == [second, second + within]


def test_the_published_messages_carry_their_times_and_the_session_ends_at_the_last() -> None:
    (sample,) = parse_locomo([_sample(TURNS)])
    (event,) = session_events(burst_sample(sample), tenant_id="t", form=ingest_form("burst"))
    turns = burst_sample(sample).sessions[0].turns
    assert [(m.role, m.name, m.content, m.ts) for m in event.messages] == [
        ("user" if t.speaker == "Caroline" else "assistant", t.speaker, t.text, t.sent_at) for t in turns
    ]
    assert event.started_at == START
    assert event.ended_at == turns[-1].sent_at


def test_the_chat_and_group_forms_send_what_they_always_sent() -> None:
    (sample,) = parse_locomo([_sample(TURNS)])
    assert sample_form(sample, "chat") is sample and sample_form(sample, "group") is sample
    for form in ("chat", "group"):
        (event,) = session_events(sample, tenant_id="t", form=form)
        assert event.ended_at == event.started_at == START
        assert all(m.ts is None for m in event.messages)
        assert len(event.messages) == len(TURNS)


def test_the_baselines_rank_the_same_short_messages() -> None:
    (sample,) = parse_locomo([_sample(TURNS)])
    texts, _ = corpus_texts(burst_sample(sample))
    assert texts[:2] == ["Caroline: Hey Mel!", "Caroline: I went to a support group yesterday."]
    windows, _ = passage_texts(burst_sample(sample))
    assert windows[0].count("\n") == 3 and windows[0].startswith("Caroline: Hey Mel!\n")
    assert len(windows) == 2  # 7 messages in 4-message windows


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("어제 모임에 갔어. 정말 좋았어! 너는 어땠어?", ["어제 모임에 갔어.", "정말 좋았어!", "너는 어땠어?"]),
        ("今日は雨。明日は晴れ！本当？", ["今日は雨。", "明日は晴れ！", "本当？"]),
        ("ｏｋ？ sure．", ["ｏｋ？", "sure．"]),
        ("Wait... what?! Really.", ["Wait...", "what?!", "Really."]),
        ('He said "go." Then left.', ['He said "go."', "Then left."]),
        (
            "It costs 3.5 dollars, e.g. a coffee. See example.com now",
            ["It costs 3.5 dollars, e.g. a coffee.", "See example.com now"],
        ),
        ("lol ok", ["lol ok"]),
        ("  . ! ", [".", "!"]),
        ("   ", []),
    ],
)
def test_sentences_split_on_final_punctuation_of_every_script(text: str, sentences: list[str]) -> None:
    assert split_sentences(text) == sentences


def test_line_breaks_split_too_and_the_photo_stays_with_the_last_line() -> None:
    turn = {"speaker": "Caroline", "dia_id": "D1:1", "text": "omg\n\nlook at this\nso cute", "blip_caption": "a cat"}
    (sample,) = parse_locomo([_sample([turn])])
    (parsed,) = sample.sessions[0].turns
    assert parsed.text == "omg look at this so cute [shares a photo: a cat]"  # the chat form's text is unchanged
    assert turn_messages(parsed) == ["omg", "look at this", "so cute [shares a photo: a cat]"]


def test_no_message_is_ever_empty() -> None:
    for text in ("", "   ", " \n \n ", "...", "!"):
        messages = turn_messages(LocomoTurn("D1:1", "Caroline", text))
        assert all(message.strip() for message in messages)
    (sample,) = parse_locomo([_sample(TURNS)])
    emptied = burst_sample(type(sample)(sample.sample_id, sample.speaker_a, sample.speaker_b, (), sample.questions))
    assert emptied.sessions == ()


def test_the_form_option_accepts_the_three_forms_and_names_them_otherwise() -> None:
    assert [locomo_form(value) for value in ("chat", "group", "burst")] == ["chat", "group", "burst"]
    assert [ingest_form(form) for form in ("chat", "group", "burst")] == ["chat", "group", "chat"]
    with pytest.raises(ValueError, match="--form must be 'chat', 'group' or 'burst', not 'voice'"):
        locomo_form("voice")
    result = CliRunner().invoke(app, ["eval", "locomo", "missing.json", "--form", "voice"])
    assert result.exit_code == 2
    assert "--form must be 'chat', 'group' or 'burst'" in " ".join(result.output.split())
