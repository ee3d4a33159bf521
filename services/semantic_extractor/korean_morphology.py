"""Korean morphemes for the extractor: the shared Kiwi's tokens, with names Kiwi misreads merged back
into one proper noun, and particle stripping for values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from services.common.gateways import kiwi

# Hangul syllables and jamo: where a text (or a value) needs Korean handling.
HANGUL = re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]")


@dataclass(frozen=True, slots=True)
class Morpheme:
    """One morpheme: its form, its base tag ("VV", not "VV-I") and where it stands in the sentence."""

    form: str
    tag: str
    start: int
    end: int


def korean_morphemes(sentence: str) -> list[Morpheme]:
    """The sentence's morphemes from the shared Kiwi, with misread unknown names merged back."""
    tokens = kiwi.tokenize(sentence)
    # Irregular conjugations carry a suffix ("VV-I"); the base tag is what the patterns need.
    return _merge_unknown_words(
        sentence, [Morpheme(t.form, t.tag.split("-")[0], t.start, t.start + t.len) for t in tokens]
    )


_GENERIC_NOUNS = frozenset({"프로젝트", "사람", "것", "거", "일", "때", "곳", "데", "분", "친구", "팀"})


def _merge_unknown_words(sentence: str, tokens: list[Morpheme]) -> list[Morpheme]:
    """Kiwi reads unknown names such as "온비서" as 오/VV + ᆫ/ETM + 비서/NNG. In Korean an adnominal
    ending is followed by a space, so an ending inside a word that continues with a noun marks a
    misread name: the word becomes one proper noun."""
    merged: list[Morpheme] = []
    index = 0
    while index < len(tokens):
        tok = tokens[index]
        word_start = index == 0 or tokens[index - 1].end < tok.start
        if (
            word_start
            and tok.tag in {"VV", "VA"}
            and index + 2 < len(tokens)
            and tokens[index + 1].tag == "ETM"
            and tokens[index + 2].tag in {"NNG", "NNP"}
            and tokens[index + 2].form not in _GENERIC_NOUNS
            and not sentence[tok.start : tokens[index + 2].start].count(" ")
        ):
            last = index + 2
            while (
                last + 1 < len(tokens)
                and tokens[last + 1].tag in {"NNG", "NNP"}
                and tokens[last + 1].start == tokens[last].end
                and tokens[last + 1].form not in _GENERIC_NOUNS
            ):
                last += 1
            merged.append(Morpheme(sentence[tok.start : tokens[last].end], "NNP", tok.start, tokens[last].end))
            index = last + 1
            continue
        merged.append(tok)
        index += 1
    return merged


def strip_korean_particles(value: str) -> str:
    """ "부산으로" → "부산", "서울에서는" → "서울"; names that merely end like a particle ("인도")
    are kept, because Kiwi analyses them as one noun."""
    stripped = value.strip()
    tokens = korean_morphemes(stripped)
    end = len(tokens)
    while end > 0 and tokens[end - 1].tag.startswith("J"):
        end -= 1
    if end == 0 or end == len(tokens):
        return stripped
    return stripped[: tokens[end - 1].end].strip()
