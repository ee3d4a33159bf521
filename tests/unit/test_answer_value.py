"""The kind of value a question asks for, and whether a memory states one (l0/answer_value.py)."""

from __future__ import annotations

import pytest

from services.recall_api.l0.answer_value import AskedValue, asked_value, stated_values, states_no_value


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("how old is Bori?", "number"),
        ("how much were the flights to Lisbon?", "number"),
        ("how many self-hosted runners did we have?", "number"),
        ("which minor version of postgres 16 are we running?", "number"),
        ("what's my bib number for berlin", "number"),
        ("what time is the vet for bori", "clock time"),
        ("콩이 이제 몇 살이지?", "number"),
        ("마사지건 얼마짜리야?", "number"),
        ("흑임자 라떼 하루에 몇 잔 나가?", "number"),
        ("배포 몇 시에 해?", "clock time"),
        ("what's the exact release day for pocket in Q3?", "date"),
        ("which date is the launch?", "date"),
        ("며칠에 이사해?", "date"),
        ("몇 월에 이사해?", "date"),
        ("무슨 요일에 배포해?", "date"),
        # Not typed: the answer can be any word, or the session's own date answers it.
        ("which database did we pick for Atlas?", None),
        ("when is pocket shipping now?", None),
        ("who fixed the SSO bug?", None),
        ("how is the project going?", None),
        ("which days do I run", None),
        ("what day did Melanie go camping?", None),
        ("몇 월에 이사했지?", None),
        ("what did you do that day?", None),
        ("what type of date is Andrew going on Sunday?", None),
        # Reckoned over sessions and their dates, never stated once.
        ("how long did James and Samantha date before moving in?", None),
        ("how many months passed between the two appointments?", None),
        ("How many times has Melanie gone to the beach in 2023?", None),
        ("how many tournaments has Nate won?", None),
        ("몇 번 갔어?", None),
        ("몇 년 됐지?", None),
        # A quantity noun outside the interrogative's own phrase, or an idiom.
        ("What is John's number one goal in his career?", None),
        ("what did Evan suggest to find his own version of love?", None),
        ("how many children does Melanie have?", "number"),
        ("which react native version were we on?", "number"),
        ("What time management techniques do Deborah and Jolene use?", None),
        ("what time of day is the Atlas launch?", "clock time"),
        ("the vet, what time", "clock time"),
        ("두부 사료 브랜드 뭐였지?", None),
    ],
)
def test_the_asked_kind_is_read_from_the_question_grammar(question: str, kind: str | None) -> None:
    asked = asked_value(question)
    assert (asked.kind if asked else None) == kind


def test_a_value_the_question_names_is_not_an_answer() -> None:
    asked = asked_value("which minor version of postgres 16 are we running?")
    assert asked == AskedValue("number", frozenset({"16"}))
    assert states_no_value(asked, "We chose PostgreSQL 16 for Atlas.")
    assert not states_no_value(asked, "Upgraded Atlas to 16.4 last night.")


@pytest.mark.parametrize(
    ("question", "text", "states"),
    [
        ("how old is Bori?", "my dog Bori turned 3 yesterday", True),
        ("how old is Bori?", "Bori is three now", True),
        ("how old is Bori?", "Bori loves the pup cup", False),
        # A calendar date says when, not how much.
        ("how much were the TAP flights?", "booked lisbon!! may 8-15, TAP direct", False),
        ("how much were the TAP flights?", "TAP direct, 420 eur each", True),
        ("what time is the vet?", "vet next tuesday for her shots", False),
        ("what time is the vet?", "vet next tuesday at 5pm", True),
        ("what time is the vet?", "vet tuesday, 17:30", True),
        ("콩이 이제 몇 살이지?", "콩이 이번 달에 세 살 됐어", True),
        ("콩이 이제 몇 살이지?", "콩이 산책을 좋아해", False),
        ("마사지건 얼마짜리야?", "엄마 생신 3월 15일, 무선 마사지건 사드리기로 함", False),
        ("마사지건 얼마짜리야?", "마사지건 십이만 원 줬어", True),
        ("배포 몇 시에 해?", "배포는 오후 세 시에 해", True),
        ("배포 몇 시에 해?", "배포는 목요일에 해, 3개 남음", False),
        ("요즘 가게 몇 시에 닫아?", "마감도 10시에서 9시로 당김", True),
        ("what's the exact release day for pocket?", "pocket ships in Q3 now", False),
        ("what's the exact release day for pocket?", "pocket ships on the 16th", True),
        ("what day is the vet?", "vet next tuesday for her shots", True),
        ("what day is the vet?", "vet 5/16 at 5pm", True),
        ("what day is the vet?", "vet is booked, 5pm", False),
        ("며칠에 이사해?", "이사 3월 15일로 잡았어", True),
        ("며칠에 이사해?", "이사 업체 아직 못 정함", False),
        ("무슨 요일에 배포해?", "배포는 금요일에 해", True),
    ],
)
def test_a_memory_states_a_value_of_the_asked_kind_or_not(question: str, text: str, states: bool) -> None:
    asked = asked_value(question)
    assert asked is not None
    assert states_no_value(asked, text) is not states, stated_values(text, asked.kind)
