"""Speaker attribution: a transcript's in-text labels become the turn's name, so a labelled chat and
the same conversation as a group chat / imported transcript consolidate alike."""

from __future__ import annotations

from contracts.events import Message
from services.common.domain.speakers import attribute_speakers, speaker_label_in
from services.episodic_summarizer.logic import chunk_passages, extractive_summary, make_abstract

TURNS = [
    ("Caroline", "Hey Mel! I went to a LGBTQ support group yesterday and it was so powerful."),
    ("Melanie", "Wow, that's great! I painted a lake sunrise last week, my kids loved it."),
    ("Caroline", "I'm planning to apply to adoption agencies next month."),
    ("Melanie", "That is wonderful. We are going camping in the mountains in June."),
]


def chat_form() -> list[Message]:
    roles = {"Caroline": "user", "Melanie": "assistant"}
    return [Message(role=roles[name], content=text, name=name) for name, text in TURNS]  # type: ignore[arg-type]


def group_form() -> list[Message]:
    return [Message(role="user", content=f"{name}: {text}") for name, text in TURNS]


def test_a_label_is_a_short_name_before_a_colon() -> None:
    assert speaker_label_in("Caroline: I went") == ("Caroline", "I went")
    assert speaker_label_in("김민수: 내일 배포해요") == ("김민수", "내일 배포해요")
    assert speaker_label_in("Dr. Kim：  hello") == ("Dr. Kim", "hello")
    assert speaker_label_in("see https://example.com/x") is None
    assert speaker_label_in("12:30 works for me") is None
    assert speaker_label_in("The thing I wanted to say to everyone here: it works") is None


def test_a_transcript_gets_its_names_moved_out_of_the_text() -> None:
    attributed = attribute_speakers(group_form())
    assert [(m.name, m.content) for m in attributed] == TURNS
    assert all(m.role == "user" for m in attributed)


def test_named_turns_and_ordinary_chats_are_left_alone() -> None:
    chat = chat_form()
    assert attribute_speakers(chat) == chat
    ordinary = [
        Message(role="user", content="Note: the build is green now."),
        Message(role="assistant", content="Great, shall I deploy?"),
        Message(role="user", content="Yes please, after lunch."),
    ]
    assert attribute_speakers(ordinary) == ordinary
    # Colons in prose with a different "label" every turn are not speakers.
    prose = [Message(role="user", content=f"Item {word}: detail {i}") for i, word in enumerate("abcdef")]
    assert attribute_speakers(prose) == prose


def test_both_chat_forms_give_the_same_passages_and_summary() -> None:
    assert [p.text for p in chunk_passages(chat_form())] == [p.text for p in chunk_passages(group_form())]
    assert chunk_passages(group_form())[0].text.startswith("Caroline: Hey Mel!")
    assert "User: Caroline" not in chunk_passages(group_form())[0].text
    assert extractive_summary(chat_form(), "en") == extractive_summary(group_form(), "en")


def test_abstracts_drop_role_labels_but_keep_names() -> None:
    assert make_abstract("User: I am allergic to peanuts and cats.") == "I am allergic to peanuts and cats."
    assert make_abstract("어시스턴트: 금요일까지 배포를 끝내야 합니다.") == "금요일까지 배포를 끝내야 합니다."
    named = "Caroline: I prefer rescue dogs over puppies."
    assert make_abstract(named) == named
    summary = extractive_summary([Message(role="user", content="I decided to move to Lisbon next spring.")], "en")
    assert not make_abstract(summary.summary).startswith("User")
