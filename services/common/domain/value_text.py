"""Finding a forgotten value in text: the one matcher both the erasure's redaction and the value
audit use, so what the audit reports is exactly what the redaction removes.

What "the value" is (issue 48): the fact's value string, matched as a PHRASE, never as loose words —
forgetting "cashew nuts" must not forget "pine nuts", "peanut butter" or the word "allergy". A phrase
is found after normalising both sides the same way:
- NFKC, then case folded: "Xanthorrhoea", "xanthorrhoea" and "XANTHORRHOEA" are one value. One
  exception: a single word of at most three characters written with a capital ("Go", "R", "C#") keeps
  its case, because folded it is an ordinary word ("go") and the redaction would drop every sentence
  with it;
- whitespace and hyphens are interchangeable ("cashew-nut" = "cashew nut"), and curly apostrophes are
  straight ones;
- the last word's regular plural is the same value ("nut" / "nuts", "box" / "boxes"; only a trailing
  -s or -es, not "allergy" / "allergies"), so an echo in the singular is still found;
- Latin-script phrases match on word boundaries ("Go" is not in "Google", "nuts" is not in
  "peanuts"); phrases in other scripts match as substrings, because Korean particles attach to the
  word ("부산에서").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_SEPARATORS = r"[\s\-\u2010-\u2015]+"
_APOSTROPHES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u02bc": "'", "\uff07": "'"})
_CASE_KEPT_MAX_CHARS = 3


def normalise_value_text(text: str) -> str:
    """NFKC with straight apostrophes: the form both needles and searched text are compared in."""
    return unicodedata.normalize("NFKC", text).translate(_APOSTROPHES)


@dataclass(frozen=True, slots=True)
class Needle:
    """One piece of forgotten text and how to find it."""

    text: str
    case_sensitive: bool
    pattern: re.Pattern[str]

    def found_in(self, text: str) -> bool:
        normalised = normalise_value_text(text)
        return self.pattern.search(normalised if self.case_sensitive else normalised.casefold()) is not None


def _is_ascii_word_char(char: str) -> bool:
    return char.isascii() and char.isalnum()


def _plural_free(word: str) -> str:
    """The pattern of a Latin phrase's last word, singular or plural."""
    escaped = re.escape(word)
    if not word.isascii() or not word.isalpha() or len(word) < 3:
        return escaped
    if word.endswith("s") and not word.endswith("ss"):
        return re.escape(word[:-1]) + "s?"
    return escaped + "(?:es|s)?"


def make_needle(text: str) -> Needle | None:
    """A needle for `text`, or None when nothing is left after normalising whitespace."""
    normalised = re.sub(r"\s+", " ", normalise_value_text(text)).strip()
    if not normalised:
        return None
    words = [word for word in re.split(_SEPARATORS, normalised) if word]
    if not words:
        return None
    case_sensitive = (
        len(words) == 1 and len(normalised) <= _CASE_KEPT_MAX_CHARS and any(char.isupper() for char in normalised)
    )
    folded = [word if case_sensitive else word.casefold() for word in words]
    body = _SEPARATORS.join([*(re.escape(word) for word in folded[:-1]), _plural_free(folded[-1])])
    first, last = folded[0][0], folded[-1][-1]
    left = r"(?<![A-Za-z0-9])" if _is_ascii_word_char(first) else ""
    right = r"(?![A-Za-z0-9])" if _is_ascii_word_char(last) else ""
    return Needle(text=normalised, case_sensitive=case_sensitive, pattern=re.compile(left + body + right))


def needles_of(texts: Sequence[str]) -> list[Needle]:
    """One needle per distinct text, in order; blank texts skipped."""
    unique: dict[str, Needle] = {}
    for text in texts:
        needle = make_needle(text)
        if needle is not None:
            unique.setdefault(needle.text, needle)
    return list(unique.values())


def fact_needles(value: str, text: str) -> list[Needle]:
    """The needles of a fact: its value and its sentence."""
    return needles_of([value, text])


def mentions(text: str, needles: Sequence[Needle]) -> bool:
    return any(needle.found_in(text) for needle in needles)


_LABEL_KEYS = frozenset(
    {
        "id", "key", "role", "channel", "channels", "scope", "status", "language", "locale", "source", "kind",
        "event_type", "tier", "volatility", "entity_type", "type", "superseded_by",
    }
)  # fmt: skip
_LABEL_SUFFIXES = ("_id", "_ids", "_ts", "_at", "_key", "_keys", "_sequence")


def is_label_key(key: str) -> bool:
    """Fields that name or time a record (owner and session ids, keys, channels, timestamps) rather
    than say what was remembered. Never searched: a value that happens to equal a user id ("Carol" the
    name, "carol" the id) must not make every record of that user a mention of it."""
    return key in _LABEL_KEYS or key.endswith(_LABEL_SUFFIXES)


def text_mentions(value: Any, needles: Sequence[Needle]) -> bool:
    """True when any remembered text inside `value` (a record as JSON: nested dicts and lists, label
    fields skipped, see `is_label_key`) mentions a needle."""
    if isinstance(value, str):
        return mentions(value, needles)
    if isinstance(value, Mapping):
        return any(
            text_mentions(item, needles)
            for key, item in value.items()
            if not (isinstance(key, str) and is_label_key(key))
        )
    if isinstance(value, list | tuple):
        return any(text_mentions(item, needles) for item in value)
    return False


def value_mentions(value: Any, needles: Sequence[Needle]) -> bool:
    """True when any string inside `value` (nested dicts and lists included) mentions a needle."""
    if isinstance(value, str):
        return mentions(value, needles)
    if isinstance(value, Mapping):
        return any(value_mentions(key, needles) or value_mentions(item, needles) for key, item in value.items())
    if isinstance(value, list | tuple):
        return any(value_mentions(item, needles) for item in value)
    return False
