"""Relative time, pure: the deictic time phrases of English and Korean ("yesterday", "last week",
"next Tuesday", "two weeks ago", "어제", "다음 주", "3일 전") found in a text, and resolved against a
day. Ingest writes the date beside each phrase, against the day the message was sent ("yesterday
[7 May 2023]"), so a passage that says "I went yesterday" also carries the date a "when did ..." or
"what happened on 7 May" question matches; recall reads a query's phrases against the request time.

Only the closed class of each language's deictic time words is read (day words, this/last/next
with a calendar unit or a weekday, "N units ago", weekday names); vague ones ("recently", "a few
days ago") are left alone. A week is named by its Monday. Korean words are matched with the
particles that follow them ("어제는"), and the date goes after the whole word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

from services.common.domain.calendar_span import (
    KOREAN_WEEKDAY_NAMES,
    MONTH_NAMES,
    WEEKDAY_NAMES,
    CalendarSpan,
    shift,
    weekday_near,
)

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
class RelativeTime:
    """A deictic time phrase at text[start:end]: `amount` `unit`s from the anchor's own unit ("last
    week": week, -1), or, for a weekday phrase, that weekday in `amount`'s direction."""

    start: int
    end: int
    language: str  # "en" | "ko"
    unit: str  # "day" | "week" | "weekend" | "month" | "year"
    amount: int | None  # None: a weekday named with no this/last/next
    weekday: int | None = None  # Monday 0 .. Sunday 6, for a weekday phrase
    ago: bool = False  # "N units ago": counted back from the anchor's day, not from its week

    def resolve(self, anchor: date) -> CalendarSpan | None:
        """The span the phrase names from `anchor`; None for a bare weekday, which may fall on
        either side of it."""
        if self.amount is None:
            return None
        if self.weekday is not None:
            return weekday_near(anchor, self.weekday, self.amount)
        if self.ago and self.unit == "week":
            return CalendarSpan("day", anchor + timedelta(weeks=self.amount))
        return shift(anchor, self.unit, self.amount)


_DIRECTION = {"last": -1, "past": -1, "previous": -1, "this": 0, "next": 1, "coming": 1}
_DAY_WORDS = {
    "the day before yesterday": -2,
    "the day after tomorrow": 2,
    "yesterday": -1,
    "last night": -1,
    "today": 0,
    "tonight": 0,
    "tomorrow": 1,
}
_WEEKDAY_PATTERN = "|".join(WEEKDAY_NAMES)
_ENGLISH = re.compile(
    r"(?<![\w-])(?:"
    rf"(?P<day>{'|'.join(sorted(_DAY_WORDS, key=len, reverse=True))})"
    rf"|(?P<dir>last|past|previous|this|next|coming)\s+(?:(?P<wd>{_WEEKDAY_PATTERN})|(?P<unit>week|weekend|month|year))"
    rf"|(?P<n>\d{{1,2}}|{'|'.join(sorted(_NUMBERS, key=len, reverse=True))})\s+"
    r"(?P<ago_unit>day|week|month|year)s?\s+ago"
    rf"|(?P<bare_wd>{_WEEKDAY_PATTERN})"
    r")(?P<poss>'s)?(?![\w-])",
    re.IGNORECASE,
)


def _english(match: re.Match[str]) -> RelativeTime | None:
    groups = {k: (v.casefold() if v else None) for k, v in match.groupdict().items()}
    start, end = match.span()
    if groups["day"]:
        return RelativeTime(start, end, "en", "day", _DAY_WORDS[" ".join(groups["day"].split())])
    if groups["dir"]:
        direction = _DIRECTION[groups["dir"]]
        if groups["wd"]:
            return RelativeTime(start, end, "en", "day", direction, WEEKDAY_NAMES.index(groups["wd"]))
        return RelativeTime(start, end, "en", groups["unit"] or "week", direction)
    if groups["bare_wd"]:
        return RelativeTime(start, end, "en", "day", None, WEEKDAY_NAMES.index(groups["bare_wd"]))
    count_text = " ".join((groups["n"] or "").split())
    count = int(count_text) if count_text.isdigit() else _NUMBERS.get(count_text)
    unit = groups["ago_unit"]
    if count is None or unit is None:
        return None
    return RelativeTime(start, end, "en", unit, -count, ago=True)


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
# The word, then the particles attached to it; "오늘날" (nowadays) is not a day, while "토요일날" is
# still Saturday.
_KOREAN = re.compile(
    rf"(?<![{_HANGUL}])(?:(?:(?P<word>{_KOREAN_PATTERN})|(?P<n>\d{{1,2}})\s?(?P<unit>일|주|달|개월|년)\s?전)(?!날)"
    rf"|(?P<wd>{'|'.join(KOREAN_WEEKDAY_NAMES)}))(?P<rest>[{_HANGUL}]*)"
)
_KOREAN_AGO_UNITS = {"일": "day", "주": "week", "달": "month", "개월": "month", "년": "year"}


def _korean(match: re.Match[str]) -> RelativeTime:
    start, end = match.span()
    if match.group("wd"):
        return RelativeTime(start, end, "ko", "day", None, KOREAN_WEEKDAY_NAMES.index(match.group("wd")))
    word = match.group("word")
    if word:
        unit, amount = _KOREAN_WORDS["".join(word.split())]
        return RelativeTime(start, end, "ko", unit, amount)
    unit = _KOREAN_AGO_UNITS[match.group("unit")]
    return RelativeTime(start, end, "ko", unit, -int(match.group("n")), ago=True)


def find_relative_times(text: str) -> list[RelativeTime]:
    """The deictic time phrases in `text`, in the order they stand; none overlap."""
    found = [phrase for match in _ENGLISH.finditer(text) if (phrase := _english(match)) is not None]
    found += [_korean(match) for match in _KOREAN.finditer(text)]
    return sorted(found, key=lambda phrase: phrase.start)


# A weekend is written as its Saturday.
_FORMATS = {
    "en": {"day": "{d} {month} {y}", "week": "week of {d} {month} {y}", "month": "{month} {y}", "year": "{y}"},
    "ko": {"day": "{y}년 {m}월 {d}일", "week": "{y}년 {m}월 {d}일 주간", "month": "{y}년 {m}월", "year": "{y}년"},
}


def format_span(span: CalendarSpan, language: str) -> str:
    """A span as ingest writes it: "7 May 2023", "week of 1 May 2023", "May 2023", "2023" (in Korean
    "2023년 5월 7일", "2023년 5월 1일 주간", "2023년 5월", "2023년")."""
    day = span.start
    month = MONTH_NAMES[day.month - 1].capitalize()
    unit = "day" if span.unit == "weekend" else span.unit
    return _FORMATS[language][unit].format(d=day.day, m=day.month, y=day.year, month=month)


def format_day(day: date, language: str) -> str:
    """A day as this module writes it: "7 May 2023" ("2023년 5월 7일" in Korean)."""
    return format_span(CalendarSpan("day", day), "ko" if language == "ko" else "en")


def annotate_relative_dates(text: str, anchor: date) -> str:
    """The text with every deictic time phrase that fixes a time followed by the date it means from
    `anchor` (the day the message was written), in the phrase's own language; other text unchanged."""
    pieces: list[str] = []
    done = 0
    for phrase in find_relative_times(text):
        span = phrase.resolve(anchor)
        if span is not None:
            pieces += [text[done : phrase.end], f" [{format_span(span, phrase.language)}]"]
            done = phrase.end
    pieces.append(text[done:])
    return "".join(pieces)
