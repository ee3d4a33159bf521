"""The kind of value a question asks for, and whether a memory states one, pure.

"How old is Bori?", "how much were the flights?", "which minor version of Postgres 16?", "배포 몇 시에
해?": each is answered by a number or a clock time, and a memory that states none cannot answer it,
however well it matches the topic. Injecting it anyway invites the model to make the value up. So L0
leaves out a memory whose text states no value of the asked kind, other than the values the question
itself names ("16" in "which minor version of Postgres 16" is the topic, not the answer).

The reading is grammar, not vocabulary: the quantity interrogatives (how many / much / old / far, 몇
with a counter, 얼마) and the words that name a quantity (number, version, price, cost, fee, age;
번호, 버전, 가격, 비용, 나이) ask for a number; "what time" and 몇 시 for a clock time; "what day", "which
date", "the exact day", 몇 월, 며칠 and 무슨 요일 for a date. A number is a digit outside a calendar date, a
numeral (English number words; Kiwi's numerals, and the native numeral forms that stand before a
counter: 한 살, 세 시), and for a duration also a calendar unit with an article ("a week"); a date is a
calendar date or a day that deictic time names ("next Tuesday", "어제"). A number no memory states
once is not typed: elapsed time (how long, how many months, 몇 년), frequency (how many times, how
often, 몇 번) and tallies in the present perfect ("how many tournaments has he won"), which are
reckoned from several sessions and their dates. Questions of any other shape
(what, who, where, when, why), and date questions about the past, are not typed: their answer can be
any word, and "when" or "what day did" is answered by the session's own date even where the text
states none.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from services.common.domain.calendar_span import MONTH_NUMBERS
from services.common.domain.relative_time import find_relative_times
from services.common.gateways import kiwi

if TYPE_CHECKING:
    from kiwipiepy import Token

ValueKind = Literal["number", "clock time", "date"]

_HANGUL = re.compile(r"[\uac00-\ud7a3]")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_DIGITS = re.compile(r"\d+(?:[.,:]\d+)*")

_EN_QUANTITY_HOW = frozenset({"many", "much", "old", "far", "big", "tall", "heavy"})
_TIME_UNITS = r"(?:seconds?|minutes?|hours?|days?|weeks?|months?|years?|decades?|times)"
# A number nobody states once: elapsed time ("how long", "how many months passed", reckoned from the
# sessions' dates), a frequency ("how many times", "how often"), or a tally that grows ("how many
# tournaments has Nate won": the present perfect's inverted auxiliary), summed over sessions.
_EN_COUNTED = re.compile(
    rf"\bhow (?:long|often)\b|\bhow (?:many|much) (?:[a-z]+ )?{_TIME_UNITS}\b"
    r"|\bhow many [a-z]+(?: [a-z]+)? (?:has|have)\b(?! to\b)"
)
# "what's my bib number", "which minor version": the quantity noun heads the interrogative's own noun
# phrase, and "number one" is an idiom, not a number asked for.
_EN_ASKS_QUANTITY = re.compile(
    r"\b(?:what|which)(?:'s| is| was| are| were)?(?: [a-z']+){0,3} (?:number|version|price|cost|fee|age)\b"
    r"(?! (?:one|two|three)\b)"
)
_EN_NUMBER_WORDS = frozenset(
    (
        *(
            [
                "zero",
                "one",
                "two",
                "three",
                "four",
                "five",
                "six",
                "seven",
                "eight",
                "nine",
                "ten",
                "eleven",
                "twelve",
                "thirteen",
                "fourteen",
            ]
        ),
        *(
            [
                "fifteen",
                "sixteen",
                "seventeen",
                "eighteen",
                "nineteen",
                "twenty",
                "thirty",
                "forty",
                "fifty",
                "sixty",
                "seventy",
            ]
        ),
        *(["eighty", "ninety", "hundred", "thousand", "million", "billion", "dozen", "half"]),
    )
)
_EN_DURATION = re.compile(
    r"\b(?:a|an|one|few|several|couple of)\s+(?:seconds?|minutes?|hours?|days?|weeks?|months?|years?|decades?)\b"
)
_EN_CLOCK = re.compile(
    r"\b\d{1,2}(?::\d{2})?\s*(?:a\.?m\.?|p\.?m\.?)(?!\w)|\b\d{1,2}:\d{2}\b|\b(?:noon|midnight|o'clock)\b"
)

_MONTH = "|".join(sorted(MONTH_NUMBERS, key=len, reverse=True))
# A calendar date's numbers say when, not how many: "may 8-15", "8th of May, 2026", "2026-05-08".
_EN_DATE = re.compile(
    rf"\b(?:{_MONTH})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:\s*[-–]\s*\d{{1,2}})?(?:,?\s+\d{{4}})?\b"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)?(?:\s*[-–]\s*\d{{1,2}})?\s+(?:of\s+)?(?:{_MONTH})\b(?:,?\s+\d{{4}})?"
    r"|\b\d{4}-\d{2}-\d{2}\b"
    r"|\d{1,2}\s*[월일]"
)

# "what time is / does / of day": the time itself, not a noun it modifies ("what time management").
_EN_ASKS_CLOCK = re.compile(
    r"\b(?:what|which) time(?:'s|$| (?:is|are|was|were|do|does|did|will|would|should|can|could|shall|of day)\b)"
)
# "what day", "which date", "what's the exact release day": the interrogative's own noun phrase
# (at most two words before its head), not any later "day" ("what did you do that day").
# "what type of date" asks for a kind, not a day.
_EN_ASKS_DATE = re.compile(
    r"\b(?:what|which)(?:'s| is| was| are| were)?(?: the)?(?! (?:type|kind|sort)s? of)(?: [a-z]+){0,2} (?:day|date)\b"
)
# A past event's day is often the session's own date, which every episode carries: only a question
# about a present or coming day is typed ("what day is the vet?", not "what day did we go?").
_EN_PAST = frozenset({"did", "was", "were", "had"})
_ORDINAL_DAY = re.compile(r"\b\d{1,2}(?:st|nd|rd|th)\b")
_NUMERIC_DATE = re.compile(r"\b\d{1,2}/\d{1,2}(?:/\d{2,4})?\b")

# Korean: 몇 with a counter asks for a number, 몇 시 for a clock time, 몇 월 / 며칠 / 무슨 요일 for a
# date; 얼마 asks for an amount.
_KO_DATE_COUNTERS = frozenset({"월", "일"})
# 몇 번 (how many times), 몇 년 / 개월 / 달 / 주 / 시간 / 분 (how long): reckoned, not stated.
_KO_COUNTED = frozenset({"번", "년", "개월", "달", "주", "시간", "분"})
_KO_PAST = ("었", "았", "였")  # the past-tense pre-final endings (the honorific 시 is one too)
_KO_CLOCK_COUNTER = "시"
_KO_QUANTITY_NOUNS = frozenset({"번호", "버전", "가격", "비용", "나이"})
# The native numerals' forms before a counter (한 살, 두 잔, 세 시, 네 명, 스무 살); the other numerals
# are Kiwi's NR (다섯, 서른, 십, 만) or digits (SN).
_KO_NUMERAL_DETERMINERS = frozenset({"한", "두", "세", "네", "스무"})
_KO_CLOCK_WORDS = frozenset({"정오", "자정"})


@dataclass(frozen=True, slots=True)
class AskedValue:
    """The kind of value the question asks for, and the values it names itself (not an answer)."""

    kind: ValueKind
    named: frozenset[str]


@functools.lru_cache(maxsize=256)
def _morphemes(text: str) -> tuple[Token, ...]:
    return tuple(kiwi.tokenize(text))


def _korean_kind(query: str) -> ValueKind | None:
    tokens = _morphemes(query)
    past = any(token.tag == "EP" and any(mark in token.form for mark in _KO_PAST) for token in tokens)
    for index, token in enumerate(tokens):
        after = tokens[index + 1].form if index + 1 < len(tokens) else ""
        if token.form == "몇" and token.tag in {"MM", "NR"}:
            if after == _KO_CLOCK_COUNTER:
                return "clock time"
            if after in _KO_COUNTED:
                return None
            if after not in _KO_DATE_COUNTERS and after != "요일":
                return "number"
            return None if past else "date"
        if token.form == "며칠" or (token.form == "무슨" and after == "요일"):
            return None if past else "date"
        if token.form == "얼마" or (token.tag.startswith("NN") and token.form in _KO_QUANTITY_NOUNS):
            return "number"
    return None


def _english_kind(query: str) -> ValueKind | None:
    words = _WORD.findall(query.casefold())
    pairs = list(itertools.pairwise(words))
    if _EN_ASKS_CLOCK.search(" ".join(words)):
        return "clock time"
    if _EN_ASKS_DATE.search(" ".join(words)) and not _EN_PAST.intersection(words):
        return "date"
    joined = " ".join(words)
    if _EN_COUNTED.search(joined):
        return None
    if any(first == "how" and second in _EN_QUANTITY_HOW for first, second in pairs):
        return "number"
    if _EN_ASKS_QUANTITY.search(joined):
        return "number"
    return None


def _korean_values(text: str, kind: ValueKind) -> set[str]:
    tokens = _morphemes(text)
    values: set[str] = set()
    for index, token in enumerate(tokens):
        after = tokens[index + 1] if index + 1 < len(tokens) else None
        if after is not None and after.form in _KO_DATE_COUNTERS and kind == "number":
            continue  # 3월 15일: a date
        numeral = (token.tag in {"SN", "NR"} and token.form != "몇") or (
            token.tag == "MM" and token.form in _KO_NUMERAL_DETERMINERS and after is not None and after.tag == "NNB"
        )
        if kind == "clock time":
            if token.form in _KO_CLOCK_WORDS or (numeral and after is not None and after.form == _KO_CLOCK_COUNTER):
                values.add(token.form)
        elif numeral:
            values.add(token.form)
    return values


def _english_values(text: str, kind: ValueKind) -> set[str]:
    folded = text.casefold()
    if kind == "clock time":
        return {match.group(0).replace(" ", "") for match in _EN_CLOCK.finditer(folded)}
    folded = _EN_DATE.sub(" ", folded)
    values = set(_DIGITS.findall(folded)) | {word for word in _WORD.findall(folded) if word in _EN_NUMBER_WORDS}
    values |= {match.group(0) for match in _EN_DURATION.finditer(folded)}
    return values


def _date_values(text: str) -> set[str]:
    """Calendar dates ("May 16", "the 16th", "5/16", "3월 15일") and the days deictic time names
    ("tomorrow", "next Tuesday", "어제", "금요일"), as written."""
    folded = text.casefold()
    values = {
        match.group(0) for pattern in (_EN_DATE, _ORDINAL_DAY, _NUMERIC_DATE) for match in pattern.finditer(folded)
    }
    values |= {
        folded[phrase.start : phrase.end]
        for phrase in find_relative_times(folded)
        if phrase.unit in {"day", "weekend"} or phrase.weekday is not None
    }
    return values


def stated_values(text: str, kind: ValueKind) -> set[str]:
    """The values of `kind` the text states, as written (digits, numerals, clock times, dates)."""
    if kind == "date":
        return _date_values(text)
    values = _english_values(text, kind)
    if _HANGUL.search(text):
        values |= _korean_values(text, kind)
    return values


def asked_value(query: str) -> AskedValue | None:
    """The kind of value the question asks for (None: any other question), with the values it names."""
    kind = _korean_kind(query) if _HANGUL.search(query) else None
    kind = kind or _english_kind(query)
    if kind is None:
        return None
    return AskedValue(kind, frozenset(stated_values(query, "number")))


def states_no_value(asked: AskedValue, text: str) -> bool:
    """The text states no value of the asked kind besides the ones the question names. Written values
    are read first: Kiwi (~0.25 ms a Korean text) runs only when they do not answer."""
    if asked.kind == "date":
        return not (_date_values(text) - asked.named)
    if _english_values(text, asked.kind) - asked.named:
        return False
    return not (_HANGUL.search(text) and _korean_values(text, asked.kind) - asked.named)
