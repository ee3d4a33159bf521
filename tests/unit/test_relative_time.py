"""Relative time (domain/relative_time.py): deictic time words dated against the message's day."""

from __future__ import annotations

from datetime import date

import pytest

from services.common.domain.relative_time import annotate_relative_dates

MONDAY = date(2023, 5, 8)


@pytest.mark.parametrize(
    ("text", "dated"),
    [
        ("I went to a support group yesterday.", "I went to a support group yesterday [7 May 2023]."),
        ("Yesterday's game was fun", "Yesterday's [7 May 2023] game was fun"),
        ("the day before yesterday", "the day before yesterday [6 May 2023]"),
        ("see you tomorrow", "see you tomorrow [9 May 2023]"),
        ("Last week I painted", "Last week [week of 1 May 2023] I painted"),
        ("next Tuesday works", "next Tuesday [9 May 2023] works"),
        ("last Monday was fun", "last Monday [1 May 2023] was fun"),
        ("this weekend", "this weekend [13 May 2023]"),
        ("two weeks ago we met", "two weeks ago [24 April 2023] we met"),
        ("3 days ago", "3 days ago [5 May 2023]"),
        ("next month", "next month [June 2023]"),
        ("last year I ran", "last year [2022] I ran"),
        ("어제는 회의를 했어요", "어제는 [2023년 5월 7일] 회의를 했어요"),
        ("지난 주에 갔어", "지난 주에 [2023년 5월 1일 주간] 갔어"),
        ("다음주 월요일", "다음주 [2023년 5월 15일 주간] 월요일"),
        ("내일 봐", "내일 [2023년 5월 9일] 봐"),
        ("3일 전에 샀어", "3일 전에 [2023년 5월 5일] 샀어"),
    ],
)
def test_relative_time_is_dated_beside_the_phrase(text: str, dated: str) -> None:
    assert annotate_relative_dates(text, MONDAY) == dated


@pytest.mark.parametrize(
    "text",
    ["a few days ago", "recently", "the yesterdays of old", "오늘날 사람들은", "the last one", "next to me"],
)
def test_vague_time_and_lookalikes_are_left_alone(text: str) -> None:
    assert annotate_relative_dates(text, MONDAY) == text


def test_month_arithmetic_crosses_the_year() -> None:
    assert annotate_relative_dates("last month", date(2024, 1, 15)) == "last month [December 2023]"
    assert annotate_relative_dates("next month", date(2023, 12, 31)) == "next month [January 2024]"
