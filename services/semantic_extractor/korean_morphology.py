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
    morphemes = _merge_unknown_words(
        sentence, [Morpheme(t.form, t.tag.split("-")[0], t.start, t.start + t.len) for t in tokens]
    )
    return _gazetteer_names(sentence, morphemes)


# Particles Kiwi sometimes leaves glued to a loanword it does not know ("리액트랑", "파이썬도").
_GLUED_PARTICLES: dict[str, str] = {
    "랑": "JC", "이랑": "JC", "와": "JC", "과": "JC", "하고": "JC", "을": "JKO", "를": "JKO", "이": "JKS",
    "가": "JKS", "은": "JX", "는": "JX", "도": "JX", "만": "JX", "에": "JKB", "에서": "JKB", "로": "JKB",
    "으로": "JKB", "의": "JKG",
}  # fmt: skip


def _gazetteer_names(sentence: str, tokens: list[Morpheme]) -> list[Morpheme]:
    """Known names Kiwi splits or glues: "타입/NNG 스크립트/NNG" → one proper noun "타입스크립트";
    "리액트랑/NNG" → "리액트"/NNP + "랑"/JC; a known name read as a common noun ("토스/NNG") is retagged.
    The gazetteers are the extractor's (names of places, organisations and technologies)."""
    from services.semantic_extractor.gazetteers import KNOWN_KOREAN_NAMES

    result: list[Morpheme] = []
    index = 0
    while index < len(tokens):
        tok = tokens[index]
        if not tok.tag.startswith("N") or not HANGUL.match(tok.form):
            result.append(tok)
            index += 1
            continue
        last = index  # the longest run of touching noun tokens that spells a known name
        for probe in range(index, min(index + 4, len(tokens))):
            if probe > index and (
                tokens[probe].start != tokens[probe - 1].end or not tokens[probe].tag.startswith("N")
            ):
                break
            if sentence[tok.start : tokens[probe].end] in KNOWN_KOREAN_NAMES:
                last = probe
        surface = sentence[tok.start : tokens[last].end]
        if surface in KNOWN_KOREAN_NAMES:
            result.append(Morpheme(surface, "NNP", tok.start, tokens[last].end))
            index = last + 1
            continue
        glued = next(
            (
                (surface[: len(surface) - len(particle)], particle, tag)
                for particle, tag in _GLUED_PARTICLES.items()
                if surface.endswith(particle) and surface[: len(surface) - len(particle)] in KNOWN_KOREAN_NAMES
            ),
            None,
        )
        if glued is not None and last == index:
            name, particle, tag = glued
            split = tok.start + len(name)
            result.extend([Morpheme(name, "NNP", tok.start, split), Morpheme(particle, tag, split, tok.end)])
            index += 1
            continue
        result.append(tok)
        index += 1
    return result


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
