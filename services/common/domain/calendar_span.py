"""Calendar spans, pure: a day, the week that starts on a Monday, a month or a year; the English and
Korean month and weekday names that name them; and the moves deictic time words make from a day
("last week", "next month", "this weekend", "last Tuesday")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

MONTH_NAMES = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH_ABBREVIATIONS: tuple[tuple[str, ...], ...] = (
    ("jan",),
    ("feb",),
    ("mar",),
    ("apr",),
    (),
    ("jun",),
    ("jul",),
    ("aug",),
    ("sept", "sep"),
    ("oct",),
    ("nov",),
    ("dec",),
)
# Month name or abbreviation (casefolded) -> month number; query times and the LoCoMo reader's
# session dates are read with it.
MONTH_NUMBERS = {
    name: number
    for number, (full, short) in enumerate(zip(MONTH_NAMES, _MONTH_ABBREVIATIONS, strict=True), start=1)
    for name in (full, *short)
}
WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
KOREAN_WEEKDAY_NAMES = ("월요일", "화요일", "수요일", "목요일", "금요일", "토요일", "일요일")


@dataclass(frozen=True, slots=True)
class CalendarSpan:
    """A day, a weekend (named by its Saturday), the week starting on a Monday, a month or a year:
    [start, end())."""

    unit: str  # "day" | "weekend" | "week" | "month" | "year"
    start: date

    def end(self) -> date:
        if self.unit == "day":
            return self.start + timedelta(days=1)
        if self.unit == "weekend":
            return self.start + timedelta(days=2)
        if self.unit == "week":
            return self.start + timedelta(weeks=1)
        if self.unit == "month":
            return _month_start(self.start, 1)
        return date(self.start.year + 1, 1, 1)


def monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _month_start(day: date, amount: int) -> date:
    months = day.year * 12 + day.month - 1 + amount
    return date(months // 12, months % 12 + 1, 1)


def shift(anchor: date, unit: str, amount: int) -> CalendarSpan:
    """The `unit` (day, week, month, year, weekend) `amount` units from the anchor's."""
    if unit == "day":
        return CalendarSpan("day", anchor + timedelta(days=amount))
    if unit == "week":
        return CalendarSpan("week", monday(anchor) + timedelta(weeks=amount))
    if unit == "weekend":
        return CalendarSpan("weekend", monday(anchor) + timedelta(weeks=amount, days=5))
    if unit == "month":
        return CalendarSpan("month", _month_start(anchor, amount))
    return CalendarSpan("year", date(anchor.year + amount, 1, 1))


def weekday_near(anchor: date, weekday: int, direction: int) -> CalendarSpan:
    """ "last Tuesday" (direction < 0): the latest one before the anchor; "next Tuesday" (> 0): the
    first one after it; "this Tuesday" (0): the one in the anchor's week."""
    if direction < 0:
        back = (anchor.weekday() - weekday) % 7 or 7
        return CalendarSpan("day", anchor - timedelta(days=back))
    if direction > 0:
        ahead = (weekday - anchor.weekday()) % 7 or 7
        return CalendarSpan("day", anchor + timedelta(days=ahead))
    return CalendarSpan("day", monday(anchor) + timedelta(days=weekday))
