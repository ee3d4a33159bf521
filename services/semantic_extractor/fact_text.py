"""Fact text templates: one third-person sentence per fact, in the session's language."""

from __future__ import annotations

import re

from services.common.domain.facts import USER_SUBJECT, normalise_subject
from services.semantic_extractor.gazetteers import EN_RELATION_NOUNS

_EN_TEMPLATES: dict[str, str] = {
    "lives_in": "{s} lives in {v}.",
    "employer": "{s} works at {v}.",
    "job_title": "{s} works as {article} {v}.",
    "works_on": "{s} works on {v}.",
    "uses_tool": "{s} uses {v}.",
    "prefers": "{s} prefers {v}.",
    "likes": "{s} likes {v}.",
    "dislikes": "{s} dislikes {v}.",
    "diet": "{s} is {v}.",
    "allergy": "{s} is allergic to {v}.",
    "name": "{possessive} name is {v}.",
    "speaks_language": "{s} speaks {v}.",
    "uses_language": "{s} programs in {v}.",
    "school": "{s} studies at {v}.",
    "birthplace": "{s} was born in {v}.",
    "age": "{s} is {v} years old.",
    "relationship_status": "{s} is {v}.",
    "has_pet": "{s} has {v}.",
    "chose": "{s} chose {v}.",
    "owns": "{s} owns {v}.",
    "date": "The {s} is on {v}.",
}
_KO_TEMPLATES: dict[str, str] = {
    "lives_in": "{s}{topic} {v}에 살고 있다.",
    "employer": "{s}{topic} {v}에서 일한다.",
    "job_title": "{s}{topic} {v}(으)로 일한다.",
    "works_on": "{s}{topic} {v} 작업을 하고 있다.",
    "uses_tool": "{s}{topic} {v}{object} 사용한다.",
    "prefers": "{s}{topic} {v}{object} 선호한다.",
    "likes": "{s}{topic} {v}{object} 좋아한다.",
    "dislikes": "{s}{topic} {v}{object} 싫어한다.",
    "diet": "{s}{topic} {v}이다.",
    "allergy": "{s}{topic} {v} 알레르기가 있다.",
    "name": "{s}의 이름은 {v}이다.",
    "speaks_language": "{s}{topic} {v}{object} 한다.",
    "uses_language": "{s}{topic} {v}{object} 사용한다.",
    "school": "{s}{topic} {v}에 다닌다.",
    "birthplace": "{s}{topic} {v}에서 태어났다.",
    "age": "{s}{topic} {v}살이다.",
    "relationship_status": "{s}{topic} {v}이다.",
    "has_pet": "{s}{topic} {v}{object} 키운다.",
    "chose": "{s}{topic} {v}{direction} 결정했다.",
    "owns": "{s}{topic} {v}{object} 가지고 있다.",
    "date": "{s}{topic} {v}이다.",
}


def render_fact_text(subject: str, attribute: str, value: str, language: str) -> str:
    """One third-person sentence for a fact, in English or Korean ("The user lives in Busan." /
    "사용자는 부산에 살고 있다."); other languages fall back to English."""
    if primary_language(language) == "ko":
        person = "사용자" if normalise_subject(subject) == USER_SUBJECT else subject
        template = _KO_TEMPLATES.get(attribute, "{s}의 " + attribute + ": {v}.")
        return template.format(
            s=person,
            v=value,
            topic="는" if not _has_final_consonant(person) else "은",
            object=_object_particle(value),
            direction=korean_direction(value)[len(value) :],
        )
    is_user = normalise_subject(subject) == USER_SUBJECT
    is_relation = subject.casefold() in EN_RELATION_NOUNS
    person = "The user" if is_user else (f"The user's {subject}" if is_relation else subject)
    possessive = "The user's" if is_user else (f"The user's {subject}'s" if is_relation else f"{subject}'s")
    template = _EN_TEMPLATES.get(attribute, "{s} — " + attribute.replace("_", " ") + ": {v}.")
    article = "an" if value[:1].casefold() in "aeiou" else "a"
    return template.format(s=person, v=value, possessive=possessive, article=article)


def korean_topic(word: str) -> str:
    """The word with its topic particle: "사용자는", "준서는", "민호는", "지훈은"."""
    return word + ("은" if _has_final_consonant(word) else "는")


def korean_direction(word: str) -> str:
    """The word with its 으로/로 ("포스트그레스로", "깃랩으로", "서울로": a final ㄹ takes 로)."""
    last = word.rstrip()[-1:]
    final_l = bool(last) and 0xAC00 <= ord(last) <= 0xD7A3 and (ord(last) - 0xAC00) % 28 == 8
    return word + ("으로" if _has_final_consonant(word) and not final_l else "로")


def _has_final_consonant(word: str) -> bool:
    """Whether the last syllable ends in a consonant (batchim): picks 은/는, 을/를."""
    last = word.rstrip()[-1:] if word.strip() else ""
    if not last:
        return False
    code = ord(last)
    if 0xAC00 <= code <= 0xD7A3:
        return (code - 0xAC00) % 28 != 0
    # Latin letters and digits, by their Korean reading ("R" 알, "3" 삼, "Vim" ...m).
    return last.casefold() in "lmnr0136789"


def _object_particle(value: str) -> str:
    return "을" if _has_final_consonant(value) else "를"


def primary_language(language: str) -> str:
    """The primary subtag of a language tag ("ko-KR" → "ko"); "en" when none is given."""
    return re.split(r"[-_]", language.strip().casefold(), maxsplit=1)[0] or "en"
