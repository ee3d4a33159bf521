"""Relative time, pure: "yesterday", "last week", "next Tuesday", "어제", "다음 주" resolved against the
time the message was sent and written beside the phrase ("yesterday [7 May 2023]"), so a passage
that says "I went yesterday" also carries the date a "when did ..." or "what happened on 7 May"
question matches.

Only the closed class of each language's deictic time words is read (day words, this/last/next
with a calendar unit or a weekday, "N units ago"); vague ones ("recently", "a few days ago") are
left alone. A week is named by its Monday. Korean words are matched with the particles that follow
them ("어제는"), and the date goes after the whole word.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta

_MONTHS = (
    "January February March April May June July August September October November December".split()  # noqa: SIM905
)
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()  # noqa: SIM905
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "couple of": 2,
}


@dataclass(frozen=True, slots=True)
class _Span:
    """A resolved time: a day, the week starting on a Monday, a month or a year."""

    unit: str  # "day" | "week" | "month" | "year"
    start: date


def _english(span: _Span) -> str:
    d = span.start
    if span.unit == "day":
        return f"{d.day} {_MONTHS[d.month - 1]} {d.year}"
    if span.unit == "week":
        return f"week of {d.day} {_MONTHS[d.month - 1]} {d.year}"
    if span.unit == "month":
        return f"{_MONTHS[d.month - 1]} {d.year}"
    return str(d.year)


def _korean(span: _Span) -> str:
    d = span.start
    if span.unit == "day":
        return f"{d.year}년 {d.month}월 {d.day}일"
    if span.unit == "week":
        return f"{d.year}년 {d.month}월 {d.day}일 주간"
    if span.unit == "month":
        return f"{d.year}년 {d.month}월"
    return f"{d.year}년"


def format_day(day: date, language: str) -> str:
    """A day as this module writes it: "7 May 2023" ("2023년 5월 7일" in Korean)."""
    span = _Span("day", day)
    return _korean(span) if language == "ko" else _english(span)


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _shift(anchor: date, unit: str, amount: int) -> _Span:
    """The `unit` (day, week, month, year, weekend) `amount` units from the anchor's."""
    if unit == "day":
        return _Span("day", anchor + timedelta(days=amount))
    if unit == "week":
        return _Span("week", _monday(anchor) + timedelta(weeks=amount))
    if unit == "weekend":
        return _Span("day", _monday(anchor) + timedelta(weeks=amount, days=5))
    if unit == "month":
        months = anchor.year * 12 + anchor.month - 1 + amount
        return _Span("month", date(months // 12, months % 12 + 1, 1))
    return _Span("year", date(anchor.year + amount, 1, 1))


def _weekday(anchor: date, which: str, weekday: int) -> _Span:
    """ "last Tuesday": the latest one before the anchor; "next Tuesday": the first one after it;
    "this Tuesday": the one in the anchor's week."""
    if which == "last":
        back = (anchor.weekday() - weekday) % 7 or 7
        return _Span("day", anchor - timedelta(days=back))
    if which == "next":
        ahead = (weekday - anchor.weekday()) % 7 or 7
        return _Span("day", anchor + timedelta(days=ahead))
    return _Span("day", _monday(anchor) + timedelta(days=weekday))


_DIRECTION = {"last": -1, "past": -1, "previous": -1, "this": 0, "next": 1, "coming": 1}
_UNIT = r"(?P<unit>week|weekend|month|year)"
_DAY_WORDS = {
    "the day before yesterday": -2,
    "the day after tomorrow": 2,
    "yesterday": -1,
    "last night": -1,
    "today": 0,
    "tonight": 0,
    "tomorrow": 1,
}
_ENGLISH = re.compile(
    r"(?<![\w-])(?:"
    rf"(?P<day>{'|'.join(sorted(_DAY_WORDS, key=len, reverse=True))})"
    rf"|(?P<dir>last|past|previous|this|next|coming)\s+(?:(?P<wd>{'|'.join(_WEEKDAYS)})|{_UNIT})"
    rf"|(?P<n>\d{{1,2}}|{'|'.join(sorted(_NUMBERS, key=len, reverse=True))})\s+"
    r"(?P<ago_unit>day|week|month|year)s?\s+ago"
    r")(?P<poss>'s)?(?![\w-])",
    re.IGNORECASE,
)


def _resolve_english(match: re.Match[str], anchor: date) -> _Span | None:
    groups = {k: (v.casefold() if v else None) for k, v in match.groupdict().items()}
    if groups["day"]:
        return _shift(anchor, "day", _DAY_WORDS[" ".join(groups["day"].split())])
    if groups["dir"]:
        direction = _DIRECTION[groups["dir"]]
        if groups["wd"]:
            which = "last" if direction < 0 else "next" if direction > 0 else "this"
            return _weekday(anchor, which, _WEEKDAYS.index(groups["wd"]))
        return _shift(anchor, groups["unit"] or "week", direction)
    count_text = " ".join((groups["n"] or "").split())
    count = int(count_text) if count_text.isdigit() else _NUMBERS.get(count_text)
    unit = groups["ago_unit"]
    if count is None or unit is None:
        return None
    if unit in ("day", "week"):
        return _Span("day", anchor - timedelta(days=count * (7 if unit == "week" else 1)))
    return _shift(anchor, unit, -count)


# Korean deictic time words (with the optional space some writers put in "지난 주").
_KOREAN_WORDS: dict[str, tuple[str, int]] = {
    "그저께": ("day", -2),
    "그제": ("day", -2),
    "어제": ("day", -1),
    "오늘": ("day", 0),
    "내일": ("day", 1),
    "모레": ("day", 2),
    "지난주말": ("weekend", -1),
    "이번주말": ("weekend", 0),
    "다음주말": ("weekend", 1),
    "지난주": ("week", -1),
    "이번주": ("week", 0),
    "다음주": ("week", 1),
    "지난달": ("month", -1),
    "이번달": ("month", 0),
    "다음달": ("month", 1),
    "작년": ("year", -1),
    "올해": ("year", 0),
    "내년": ("year", 1),
}
_KOREAN_PATTERN = "|".join(
    re.escape(word[:2]) + r"\s?" + re.escape(word[2:]) if word[:2] in ("지난", "이번", "다음") else re.escape(word)
    for word in sorted(_KOREAN_WORDS, key=len, reverse=True)
)
_HANGUL = "\uac00-\ud7a3"
# The word, then the particles attached to it; "오늘날" (nowadays) is not a day.
_KOREAN = re.compile(
    rf"(?<![{_HANGUL}])(?:(?P<word>{_KOREAN_PATTERN})|(?P<n>\d{{1,2}})\s?(?P<unit>일|주|달|개월|년)\s?전)"
    rf"(?!날)(?P<rest>[{_HANGUL}]*)"
)
_KOREAN_AGO_UNITS = {"일": "day", "주": "week", "달": "month", "개월": "month", "년": "year"}


def _resolve_korean(match: re.Match[str], anchor: date) -> _Span | None:
    word = match.group("word")
    if word:
        unit, amount = _KOREAN_WORDS["".join(word.split())]
        return _shift(anchor, unit, amount)
    count = int(match.group("n"))
    unit = _KOREAN_AGO_UNITS[match.group("unit")]
    if unit in ("day", "week"):
        return _Span("day", anchor - timedelta(days=count * (7 if unit == "week" else 1)))
    return _shift(anchor, unit, -count)


def _annotate(
    text: str,
    pattern: re.Pattern[str],
    resolve: Callable[[re.Match[str], date], _Span | None],
    render: Callable[[_Span], str],
    anchor: date,
) -> str:
    def replace(match: re.Match[str]) -> str:
        span = resolve(match, anchor)
        return match.group(0) if span is None else f"{match.group(0)} [{render(span)}]"

    return pattern.sub(replace, text)


def annotate_relative_dates(text: str, anchor: date) -> str:
    """The text with every deictic time phrase followed by the date it means from `anchor` (the
    day the message was written), in the phrase's own language; other text unchanged."""
    text = _annotate(text, _ENGLISH, _resolve_english, _english, anchor)
    if any("\uac00" <= ch <= "\ud7a3" for ch in text):
        text = _annotate(text, _KOREAN, _resolve_korean, _korean, anchor)
    return text
