"""The times a query names (services/recall_api/retrieval/query_time.py), resolved against the
request time: dates, months, years, weekdays and relative times in English and Korean."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.recall_api.retrieval.query_time import TimeWindow, in_windows, query_time_windows

# A Sunday.
NOW = datetime(2026, 12, 6, 16, 0, tzinfo=UTC)


def _day(year: int, month: int, day: int) -> TimeWindow:
    start = datetime(year, month, day, tzinfo=UTC)
    return TimeWindow(start, datetime.fromordinal(start.toordinal() + 1).replace(tzinfo=UTC))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What happened on May 8, 2023?", _day(2023, 5, 8)),
        ("what did we do on 8 May 2023", _day(2023, 5, 8)),
        ("the plan for 2023-05-08", _day(2023, 5, 8)),
        ("2023년 5월 8일에 뭐 했지?", _day(2023, 5, 8)),
        (
            "What did Caroline do in May 2023?",
            TimeWindow(datetime(2023, 5, 1, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC)),
        ),
        ("where am I going in May?", TimeWindow(month=5)),
        ("5월에 뭐 샀어?", TimeWindow(month=5)),
        ("What did we cook last Saturday?", _day(2026, 12, 5)),
        ("토요일에 뭐 했어?", _day(2026, 12, 5)),
        ("지난주 토요일에 뭐 했지?", _day(2026, 11, 28)),
        ("what did I eat yesterday", _day(2026, 12, 5)),
        ("어제 뭐 먹었지", _day(2026, 12, 5)),
        (
            "what did we decide last week?",
            TimeWindow(datetime(2026, 11, 23, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC)),
        ),
        ("지난주에 뭐 결정했지?", TimeWindow(datetime(2026, 11, 23, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC))),
        ("지난달 회의", TimeWindow(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))),
        ("3 days ago", _day(2026, 12, 3)),
        ("trips in 2023", TimeWindow(datetime(2023, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC))),
    ],
)
def test_a_named_time_resolves_to_its_window(text: str, expected: TimeWindow) -> None:
    assert query_time_windows(text, NOW) == [expected]


@pytest.mark.parametrize(
    "text",
    [
        "May I ask which CI we use?",
        "what database did we pick for Atlas?",
        "we march on",
        "3개월 전 이야기",
        "the 25월",
    ],
)
def test_no_time_is_read_where_none_is_named(text: str) -> None:
    assert query_time_windows(text, NOW) == []


def test_a_month_without_a_year_matches_that_month_of_any_year() -> None:
    windows = query_time_windows("in May", NOW)
    assert in_windows(datetime(2023, 5, 31, 23, 0, tzinfo=UTC), windows)
    assert in_windows(datetime(2026, 5, 1, tzinfo=UTC), windows)
    assert not in_windows(datetime(2026, 6, 1, tzinfo=UTC), windows)
    assert not in_windows(None, windows)


def test_january_last_month_is_december_of_the_year_before() -> None:
    january = datetime(2027, 1, 15, tzinfo=UTC)
    assert query_time_windows("last month", january) == [
        TimeWindow(datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
    ]


def test_an_impossible_date_names_no_time() -> None:
    assert query_time_windows("on 31 April 2026", NOW) == []
