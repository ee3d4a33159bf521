"""The times a query names, pure: explicit dates ("May 8, 2023", "2023-05-08", "5월 8일"), months
("in May", "May 2023", "5월"), years, weekdays ("last Saturday", "토요일") and relative times
("yesterday", "last week", "지난주", "어제"), resolved against the request time. The relative phrases
are the ones ingest dates in passages (services/common/domain/relative_time.py), read toward the past.

Only closed word classes are read (month and weekday names, the deictic time words of English and
Korean, digits), so this says nothing about a topic; it only says when. A month or a day named
without a year matches that month or day of any year: the year is unknown, and the search boost
this feeds is bounded, so a wrong year costs little while the right one is never missed.
Relative times are resolved in UTC, as session times are stored."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from services.common.domain.calendar_span import MONTH_NUMBERS, CalendarSpan, shift
from services.common.domain.relative_time import RelativeTime, find_relative_times

_MONTH = r"(?P<month>" + "|".join(sorted(MONTH_NUMBERS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"

# Each pattern names what it resolves: (regex, kind). Dates first, so "May 8, 2023" is one date,
# not a month and a year; the relative phrases are read after all of these.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), kind)
    for pattern, kind in (
        (r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]?\d)-(?P<day>[0-3]?\d)\b", "date"),
        (rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?\b", "date"),
        (rf"\b{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?\b(?!\s*:)", "date"),
        (rf"\b{_MONTH},?\s+{_YEAR}\b", "month"),
        # A month alone needs a preposition: "may", "march" and "sat" are words too.
        (rf"\b(?:in|during|since|until|of|early|late|mid|last|this|next|from|by)[\s-]+{_MONTH}\b", "month"),
        (r"(?:(?P<year>(?:19|20)\d\d)\s*년\s*)?(?<!\d)(?P<month>1[0-2]|0?[1-9])\s*월\s*(?P<day>[0-3]?\d)\s*일", "date"),
        (r"(?:(?P<year>(?:19|20)\d\d)\s*년\s*)?(?<!\d)(?P<month>1[0-2]|0?[1-9])\s*월(?!\s*[0-3]?\d\s*일)", "month"),
        (r"(?P<year>(?:19|20)\d\d)\s*년", "year"),
        (rf"\b(?:in|during|of|since)\s+{_YEAR}\b", "year"),
    )
)
_MAX_WINDOWS = 4
# The LoCoMo reader parses session dates with the same month names.
__all__ = ["MONTH_NUMBERS", "TimeWindow", "in_windows", "query_time_windows"]


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """[start, end) in UTC; or, with no start, a `month` (and `day`) of any year."""

    start: datetime | None = None
    end: datetime | None = None
    month: int | None = None
    day: int | None = None

    def contains(self, when: datetime) -> bool:
        when = when.astimezone(UTC)
        if self.start is not None and self.end is not None:
            return self.start <= when < self.end
        if self.month is None or when.month != self.month:
            return False
        return self.day is None or when.day == self.day


def _window(span: CalendarSpan) -> TimeWindow:
    start, end = (datetime(day.year, day.month, day.day, tzinfo=UTC) for day in (span.start, span.end()))
    return TimeWindow(start, end)


def _calendar(year: int | None, month: int, day: int | None) -> TimeWindow | None:
    if not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
        return None
    if year is None:
        return TimeWindow(month=month, day=day)
    if day is None:
        return _window(CalendarSpan("month", date(year, month, 1)))
    try:
        return _window(CalendarSpan("day", date(year, month, day)))
    except ValueError:  # 31 April
        return None


def _month_number(text: str) -> int:
    return int(text) if text.isdigit() else MONTH_NUMBERS[text.casefold().rstrip(".")]


def _resolve(match: re.Match[str], kind: str) -> TimeWindow | None:
    groups = match.groupdict()
    if kind == "year":
        return _window(CalendarSpan("year", date(int(groups["year"]), 1, 1)))
    year = int(groups["year"]) if groups.get("year") else None
    day = int(groups["day"]) if kind == "date" else None
    return _calendar(year, _month_number(groups["month"]), day)


def _past_weekday(today: date, phrase: RelativeTime) -> CalendarSpan | None:
    """A query asks about what has happened: a weekday alone or "last Saturday" is the latest one
    before today, "this Saturday" the latest one on or before it; "next Saturday" names no past."""
    assert phrase.weekday is not None
    if phrase.amount is not None and phrase.amount > 0:
        return None
    back = (today.weekday() - phrase.weekday) % 7 or (0 if phrase.amount == 0 else 7)
    return CalendarSpan("day", today - timedelta(days=back))


def _query_span(today: date, phrase: RelativeTime) -> CalendarSpan | None:
    if phrase.weekday is not None:
        return _past_weekday(today, phrase)
    # "Three months ago" is rarely meant to the calendar month, and boosting the wrong month costs
    # more than boosting none; a week ago is read as that whole week for the same reason.
    if phrase.amount is None or (phrase.ago and phrase.unit in ("month", "year")):
        return None
    return shift(today, phrase.unit, phrase.amount)


def _in_week(week: RelativeTime, weekday: RelativeTime, text: str) -> bool:
    """ "지난주 토요일", "last week Saturday": a weekday named right after a week is that week's."""
    return (
        week.unit == "week"
        and not week.ago
        and week.amount is not None
        and weekday.weekday is not None
        and weekday.amount is None
        and not text[week.end : weekday.start].strip()
    )


def _relative_spans(text: str, today: date) -> Iterator[tuple[tuple[int, int], CalendarSpan | None]]:
    phrases = find_relative_times(text)
    paired: set[int] = set()
    for index, phrase in enumerate(phrases):
        if index in paired:
            continue
        following = phrases[index + 1] if index + 1 < len(phrases) else None
        if following is not None and _in_week(phrase, following, text):
            assert phrase.amount is not None and following.weekday is not None
            week = shift(today, "week", phrase.amount).start
            paired.add(index + 1)
            yield (phrase.start, following.end), CalendarSpan("day", week + timedelta(days=following.weekday))
        else:
            yield (phrase.start, phrase.end), _query_span(today, phrase)


def _readings(text: str, now: datetime) -> Iterator[tuple[tuple[int, int], TimeWindow | None]]:
    """Every time `text` names, with where it stands: the calendar patterns', then the relative
    phrases', read against today (UTC). Session times are never later than now, so a phrase that
    names a later time ("tomorrow", "next week") is read as naming none."""
    for pattern, kind in _PATTERNS:
        for match in pattern.finditer(text):
            yield match.span(), _resolve(match, kind)
    today = now.astimezone(UTC).date()
    for span, named in _relative_spans(text, today):
        yield span, None if named is None or named.start > today else _window(named)


def query_time_windows(text: str, now: datetime) -> list[TimeWindow]:
    """The times `text` names (at most a few), resolved against `now`; empty when it names none.
    A span of text is read once, by the first reading that takes it; how many spaces stand
    between words says nothing of when."""
    text = " ".join(text.split())
    taken: list[tuple[int, int]] = []
    windows: list[TimeWindow] = []
    for span, window in _readings(text, now):
        if span[0] == span[1] or any(span[0] < end and start < span[1] for start, end in taken):
            continue
        taken.append(span)
        if window is not None and window not in windows:
            windows.append(window)
    return windows[:_MAX_WINDOWS]


def in_windows(when: datetime | None, windows: Sequence[TimeWindow]) -> bool:
    return when is not None and any(window.contains(when) for window in windows)
