"""Which language a text is in, from its share of Hangul letters or an explicit locale."""

from __future__ import annotations

import re


def is_hangul(ch: str) -> bool:
    cp = ord(ch)
    return (
        0xAC00 <= cp <= 0xD7A3  # syllables
        or 0x1100 <= cp <= 0x11FF  # jamo
        or 0x3130 <= cp <= 0x318F  # compatibility jamo (ㅋ, ㅇ)
        or 0xA960 <= cp <= 0xA97F
        or 0xD7B0 <= cp <= 0xD7FF
    )


def hangul_share(text: str) -> float:
    """Share of Hangul among the letters of `text` (0.0 when there are no letters)."""
    letters = 0
    hangul = 0
    for ch in text:
        if ch.isalpha():
            letters += 1
            if is_hangul(ch):
                hangul += 1
    return hangul / letters if letters else 0.0


def detect_language(text: str, locale: str | None = None) -> str:
    """'ko' or 'en' from the text (Hangul share of letters ≥ 0.25 → 'ko'), unless `locale` is given:
    then its primary subtag wins ('ko-KR' → 'ko', 'en-US' → 'en', 'ja' → 'ja').

    The threshold is low because one Hangul syllable carries what two or three Latin letters do, and
    Korean technical talk is full of English product names.
    """
    if locale:
        primary = re.split(r"[-_]", locale.strip(), maxsplit=1)[0].lower()
        if primary:
            return primary
    return "ko" if hangul_share(text) >= 0.25 else "en"
