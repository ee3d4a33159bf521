"""The times a query names, pure: explicit dates ("May 8, 2023", "2023-05-08", "5월 8일"), months
("in May", "May 2023", "5월"), years, weekdays ("last Saturday", "토요일") and relative times
("yesterday", "last week", "지난주", "어제"), resolved against the request time.

Only closed word classes are read (month and weekday names, the deictic time words of English and
Korean, digits), so this says nothing about a topic; it only says when. A month or a day named
without a year matches that month or day of any year: the year is unknown, and the search boost
this feeds is bounded, so a wrong year costs little while the right one is never missed.
Relative times are resolved in UTC, as session times are stored."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

# Month name or abbreviation (casefolded) -> month number; the LoCoMo reader parses session dates with it too.
MONTH_NUMBERS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sept", "sep"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_WEEKDAYS = {
    name: number
    for number, names in enumerate(
        (
            ("monday", "월요일"),
            ("tuesday", "화요일"),
            ("wednesday", "수요일"),
            ("thursday", "목요일"),
            ("friday", "금요일"),
            ("saturday", "토요일"),
            ("sunday", "일요일"),
        )
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(MONTH_NUMBERS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_WEEKDAY = r"(?P<weekday>" + "|".join(name for name in _WEEKDAYS if name.isascii()) + r")"
_KO_WEEKDAY = r"(?P<weekday>[월화수목금토일]요일)"

# Each pattern names what it resolves: (regex, kind). Dates first, so "May 8, 2023" is one date,
# not a month and a year.
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
        (rf"\b(?P<last>last|this|past)?\s*{_WEEKDAY}\b", "weekday"),
        (rf"(?P<last>지난\s*주\s*|지난\s*|이번\s*주\s*)?{_KO_WEEKDAY}", "weekday"),
        (r"\b(?P<word>yesterday|today|tonight)\b|(?P<ko>그저께|그제|어제|오늘)", "day"),
        (r"\b(?P<which>last|this|past)\s+(?P<unit>week|month|year)\b", "relative"),
        (r"(?P<ko>지난\s*주|이번\s*주|지난\s*달|이번\s*달|작년|올해)", "relative"),
        (r"\b(?P<count>\d{1,2})\s+(?P<unit>day|week)s?\s+ago\b", "ago"),
    )
)
_KO_DAYS_BACK = {"오늘": 0, "어제": 1, "그제": 2, "그저께": 2}
_KO_RELATIVE = {
    "지난주": ("last", "week"),
    "이번주": ("this", "week"),
    "지난달": ("last", "month"),
    "이번달": ("this", "month"),
    "작년": ("last", "year"),
    "올해": ("this", "year"),
}
_MAX_WINDOWS = 4


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


def _day_window(day: datetime) -> TimeWindow:
    start = day.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return TimeWindow(start, start + timedelta(days=1))


def _month_window(year: int, month: int) -> TimeWindow:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return TimeWindow(start, end)


def _calendar(year: int | None, month: int, day: int | None) -> TimeWindow | None:
    if not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
        return None
    if year is None:
        return TimeWindow(month=month, day=day)
    if day is None:
        return _month_window(year, month)
    try:
        return _day_window(datetime(year, month, day, tzinfo=UTC))
    except ValueError:  # 31 April
        return None


def _month_number(text: str) -> int:
    return int(text) if text.isdigit() else MONTH_NUMBERS[text.casefold().rstrip(".")]


def _relative(which: str, unit: str, now: datetime) -> TimeWindow:
    today = _day_window(now).start
    assert today is not None
    back = 0 if which == "this" else 1
    if unit == "week":
        monday = today - timedelta(days=today.weekday() + 7 * back)
        return TimeWindow(monday, monday + timedelta(days=7))
    if unit == "month":
        year, month = (today.year, today.month - back) if today.month > back else (today.year - 1, 12)
        return _month_window(year, month)
    return TimeWindow(datetime(today.year - back, 1, 1, tzinfo=UTC), datetime(today.year - back + 1, 1, 1, tzinfo=UTC))


def _weekday(match: re.Match[str], now: datetime) -> TimeWindow:
    """The most recent such weekday before today ("last Saturday", "토요일"); in the week before this
    one for "지난주 토요일"."""
    target = _WEEKDAYS[match["weekday"].casefold()]
    last = re.sub(r"\s", "", (match["last"] or "").casefold())
    today = _day_window(now).start
    assert today is not None
    if last == "지난주":
        monday = today - timedelta(days=today.weekday() + 7)
        return _day_window(monday + timedelta(days=target))
    back = (today.weekday() - target) % 7 or (0 if last == "this" else 7)
    return _day_window(today - timedelta(days=back))


def _resolve(match: re.Match[str], kind: str, now: datetime) -> TimeWindow | None:
    groups = match.groupdict()
    if kind in ("date", "month"):
        year = int(groups["year"]) if groups.get("year") else None
        day = int(groups["day"]) if kind == "date" else None
        return _calendar(year, _month_number(groups["month"]), day)
    if kind == "year":
        year = int(groups["year"])
        return TimeWindow(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))
    if kind == "weekday":
        return _weekday(match, now)
    if kind == "day":
        word = (groups.get("word") or "").casefold()
        back = 1 if word == "yesterday" else 0 if word else _KO_DAYS_BACK[groups["ko"]]
        return _day_window(now - timedelta(days=back))
    if kind == "relative":
        if groups.get("ko"):
            which, unit = _KO_RELATIVE[re.sub(r"\s", "", groups["ko"])]
        else:
            which, unit = groups["which"].casefold(), groups["unit"].casefold()
        return _relative("last" if which == "past" else which, unit, now)
    count, unit = int(groups["count"]), groups["unit"].casefold()
    if unit == "day":
        return _day_window(now - timedelta(days=count))
    return _relative("this", "week", now - timedelta(weeks=count))


def query_time_windows(text: str, now: datetime) -> list[TimeWindow]:
    """The times `text` names (at most a few), resolved against `now`; empty when it names none.
    A span of text is read once, by the first pattern that takes it."""
    taken: list[tuple[int, int]] = []
    windows: list[TimeWindow] = []
    for pattern, kind in _PATTERNS:
        for match in pattern.finditer(text):
            span = match.span()
            if span[0] == span[1] or any(span[0] < end and start < span[1] for start, end in taken):
                continue
            taken.append(span)
            window = _resolve(match, kind, now)
            if window is not None and window not in windows:
                windows.append(window)
    return windows[:_MAX_WINDOWS]


def in_windows(when: datetime | None, windows: Sequence[TimeWindow]) -> bool:
    return when is not None and any(window.contains(when) for window in windows)
