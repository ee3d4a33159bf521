"""A query's relative times are read by the same parser ingest dates passages with
(services/common/domain/relative_time.py), toward the past: session times are never later than now."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from services.common.domain.relative_time import annotate_relative_dates
from services.recall_api.retrieval.query_time import TimeWindow, query_time_windows

MONDAY = datetime(2023, 5, 8, 9, 0, tzinfo=UTC)
SUNDAY = datetime(2026, 12, 6, 16, 0, tzinfo=UTC)


def _days(start: date, days: int = 1) -> TimeWindow:
    first = datetime(start.year, start.month, start.day, tzinfo=UTC)
    return TimeWindow(first, first + timedelta(days=days))


@pytest.mark.parametrize(
    ("phrase", "day"),
    [
        ("yesterday", date(2023, 5, 7)),
        ("the day before yesterday", date(2023, 5, 6)),
        ("last Monday", date(2023, 5, 1)),
        ("two days ago", date(2023, 5, 6)),
        ("그저께", date(2023, 5, 6)),
        ("3일 전에", date(2023, 5, 5)),
    ],
)
def test_a_query_reads_a_day_phrase_as_the_day_ingest_writes_beside_it(phrase: str, day: date) -> None:
    assert annotate_relative_dates(phrase, MONDAY.date()) == f"{phrase} [{_written(day, phrase)}]"
    assert query_time_windows(f"what did we do {phrase}?", MONDAY) == [_days(day)]


def _written(day: date, phrase: str) -> str:
    if phrase.isascii():
        return f"{day.day} {day.strftime('%B')} {day.year}"
    return f"{day.year}년 {day.month}월 {day.day}일"


@pytest.mark.parametrize(
    "query",
    ["what is on next Saturday?", "plans for tomorrow", "다음주 금요일에 뭐 해?", "오늘날 사람들은 뭘 먹지?"],
)
def test_a_later_time_or_a_lookalike_names_no_time(query: str) -> None:
    assert query_time_windows(query, SUNDAY) == []


def test_a_weekend_is_its_saturday_and_sunday() -> None:
    assert query_time_windows("지난 주말에 뭐 했지?", SUNDAY) == [_days(date(2026, 11, 28), days=2)]
    assert query_time_windows("what did we do last weekend", SUNDAY) == [_days(date(2026, 11, 28), days=2)]


def test_a_weekday_after_a_week_is_that_weeks_day() -> None:
    assert query_time_windows("last week Saturday", SUNDAY) == [_days(date(2026, 11, 28))]
    assert query_time_windows("지난   주 토요일에", SUNDAY) == [_days(date(2026, 11, 28))]
