"""The offline importance heuristic (services/common/domain/importance.py) on a labelled handful, in
English and Korean, and how a model's rating is read."""

from __future__ import annotations

import math

import pytest

from services.common.domain.importance import (
    DEFAULT_IMPORTANCE,
    clamp_importance,
    coerce_importance,
    messages_importance,
    text_importance,
)

# (text, label): "high" = decisions, commitments, dates, preferences, health, errors, "remember this";
# "low" = greetings, thanks, small talk.
LABELLED: list[tuple[str, str]] = [
    ("We decided to use Postgres instead of MySQL.", "high"),
    ("I prefer dark mode in every editor.", "high"),
    ("I'm allergic to peanuts.", "high"),
    ("Remember that my flight is on March 3.", "high"),
    ("The deploy failed with a timeout error.", "high"),
    ("I'll send the report by Friday.", "high"),
    ("우리는 포스트그레스를 쓰기로 결정했어요.", "high"),
    ("저는 매운 음식을 좋아해요.", "high"),
    ("저 땅콩 알레르기 있어요.", "high"),
    ("이거 꼭 기억해 줘: 회의는 3월 5일이야.", "high"),
    ("배포가 타임아웃 오류로 실패했어요.", "high"),
    ("금요일까지 보고서 보낼게요.", "high"),
    ("hi!", "low"),
    ("thanks a lot", "low"),
    ("How are you today?", "low"),
    ("Nice weather today, isn't it?", "low"),
    ("haha that's funny", "low"),
    ("안녕하세요!", "low"),
    ("고마워요", "low"),
    ("잘 지내? 오늘 날씨 좋다", "low"),
    ("ㅋㅋㅋ", "low"),
    ("좋아요", "low"),
]


def test_every_decision_and_preference_ranks_above_every_bit_of_chit_chat() -> None:
    high = {text: text_importance(text) for text, label in LABELLED if label == "high"}
    low = {text: text_importance(text) for text, label in LABELLED if label == "low"}
    assert min(high.values()) > max(low.values()), (high, low)
    # And on an absolute scale: the important ones above the default, chit-chat well below it.
    assert all(score >= 0.6 for score in high.values()), high
    assert all(score <= 0.2 for score in low.values()), low


@pytest.mark.parametrize("language", ["en", "ko"])
def test_each_language_separates_on_its_own(language: str) -> None:
    def is_korean(text: str) -> bool:
        return any("\uac00" <= ch <= "\ud7a3" or "\u3131" <= ch <= "\u318e" for ch in text)

    subset = [(t, label) for t, label in LABELLED if is_korean(t) == (language == "ko")]
    ranked = sorted(subset, key=lambda item: text_importance(item[0]), reverse=True)
    labels = [label for _, label in ranked]
    assert labels == sorted(labels), ranked  # every "high" before every "low"


def test_explicit_remember_beats_an_ordinary_statement_and_cues_add_up() -> None:
    plain = text_importance("I watched a movie yesterday.")
    assert text_importance("Please remember this: I watched a movie yesterday.") > 0.9 > plain
    assert text_importance("I'm allergic to peanuts and I decided to see a doctor on May 2.") > text_importance(
        "I'm allergic to peanuts."
    )


def test_one_decision_in_a_chatty_session_keeps_the_session_important() -> None:
    chat = ["hi!", "how are you?", "haha", "thanks"]
    assert messages_importance(chat) <= 0.1
    with_decision = messages_importance([*chat, "Okay, we decided to ship on June 1.", "bye"])
    assert with_decision == pytest.approx(text_importance("Okay, we decided to ship on June 1."))
    assert with_decision > 0.6
    # More than one important sentence counts a little more, never above 1.
    assert messages_importance(["We decided to ship on June 1.", "I prefer tea."]) > with_decision
    assert messages_importance(["Remember this: deadline is Friday."] * 30) == 1.0


def test_importance_is_pure_and_bounded() -> None:
    for text, _ in LABELLED:
        score = text_importance(text)
        assert 0.0 <= score <= 1.0
        assert text_importance(text) == score
    assert text_importance("") == 0.0
    assert messages_importance([]) == 0.0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (0.7, 0.7),
        (0, 0.0),
        (1, 1.0),
        ("0.35", 0.35),
        (8, 0.8),  # a 1–10 rating, as Generative Agents asks for
        ("high", 0.9),
        ("LOW", 0.2),
        (None, None),
        (True, None),
        (-0.1, None),
        (11, None),
        (math.nan, None),
        ("very", None),
        ([0.5], None),
    ],
)
def test_a_models_rating_is_read_leniently(raw: object, expected: float | None) -> None:
    assert coerce_importance(raw) == (pytest.approx(expected) if expected is not None else None)


def test_clamp_gives_the_default_for_nothing() -> None:
    assert clamp_importance(None) == DEFAULT_IMPORTANCE
    assert clamp_importance(math.nan) == DEFAULT_IMPORTANCE
    assert clamp_importance(3.0) == 1.0
    assert clamp_importance(-1.0) == 0.0
