"""The attribute registry of the fact write policy: which attributes hold one value at a time
(a new value supersedes the old) and how volatile each is (the recall decay half-life)."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

Volatility = Literal["high", "medium", "low"]


@dataclass(frozen=True, slots=True)
class AttributeSpec:
    """How the write policy treats one attribute."""

    name: str
    single_valued: bool
    volatility: Volatility


def _spec(name: str, single_valued: bool, volatility: Volatility) -> AttributeSpec:
    return AttributeSpec(name=name, single_valued=single_valued, volatility=volatility)


ATTRIBUTE_REGISTRY: dict[str, AttributeSpec] = {
    spec.name: spec
    for spec in (
        # Single-valued: a new value contradicts (and supersedes) the old one.
        _spec("lives_in", True, "medium"),
        _spec("employer", True, "medium"),
        _spec("job_title", True, "medium"),
        _spec("current_project", True, "high"),
        _spec("primary_language", True, "medium"),
        _spec("current_framework", True, "high"),
        _spec("diet", True, "medium"),
        _spec("relationship_status", True, "medium"),
        _spec("name", True, "low"),
        _spec("age", True, "medium"),
        _spec("birthplace", True, "low"),
        _spec("birthday", True, "low"),
        _spec("nationality", True, "low"),
        _spec("gender", True, "low"),
        _spec("pronouns", True, "low"),
        _spec("timezone", True, "medium"),
        _spec("school", True, "medium"),
        # Multi-valued: values accumulate.
        _spec("uses_tool", False, "high"),
        _spec("uses_language", False, "high"),
        _spec("works_on", False, "high"),
        _spec("prefers", False, "medium"),
        _spec("likes", False, "medium"),
        _spec("dislikes", False, "medium"),
        _spec("hobby", False, "medium"),
        _spec("goal", False, "medium"),
        _spec("allergy", False, "low"),
        _spec("speaks_language", False, "low"),
        _spec("has_pet", False, "low"),
        _spec("family_member", False, "low"),
        _spec("knows", False, "low"),
        _spec("skill", False, "medium"),
    )
}

# Synonyms the LLM (or API callers) tend to produce, mapped onto the registry's names.
ATTRIBUTE_ALIASES: dict[str, str] = {
    "location": "lives_in",
    "lives": "lives_in",
    "residence": "lives_in",
    "city": "lives_in",
    "home": "lives_in",
    "home_city": "lives_in",
    "current_city": "lives_in",
    "works_at": "employer",
    "works_for": "employer",
    "company": "employer",
    "workplace": "employer",
    "job": "job_title",
    "occupation": "job_title",
    "role": "job_title",
    "profession": "job_title",
    "title": "job_title",
    "project": "works_on",
    "works_on_project": "works_on",
    "uses": "uses_tool",
    "tool": "uses_tool",
    "uses_technology": "uses_tool",
    "programming_language": "uses_language",
    "uses_programming_language": "uses_language",
    "framework": "current_framework",
    "preference": "prefers",
    "prefer": "prefers",
    "like": "likes",
    "loves": "likes",
    "enjoys": "likes",
    "dislike": "dislikes",
    "hates": "dislikes",
    "hobbies": "hobby",
    "allergic_to": "allergy",
    "allergies": "allergy",
    "speaks": "speaks_language",
    "language_spoken": "speaks_language",
    "dietary_preference": "diet",
    "diet_type": "diet",
    "full_name": "name",
    "given_name": "name",
    "born_in": "birthplace",
    "place_of_birth": "birthplace",
    "pet": "has_pet",
}

_UNKNOWN_ATTRIBUTE_VOLATILITY: Volatility = "medium"
# Procedural memory: a working rule is a fact `procedure_<topic>`; one rule per topic is current, so
# a new rule on the same topic supersedes the old one (versioned like any single-valued attribute).
PROCEDURE_ATTRIBUTE_PREFIX = "procedure_"


def is_procedure_attribute(attribute: str) -> bool:
    """Whether a fact is a working rule (procedural memory) rather than something about the user."""
    return attribute.startswith(PROCEDURE_ATTRIBUTE_PREFIX)


def normalise_attribute(attribute: str) -> str:
    """snake_case, ASCII-folded where possible, synonyms mapped onto the registry's names.
    "Lives in" → "lives_in", "worksAt" → "employer", "Location" → "lives_in"."""
    text = unicodedata.normalize("NFKC", attribute).strip()
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text)  # camelCase → camel_Case
    text = text.casefold()
    text = re.sub(r"[^\w]+", "_", text).strip("_")
    text = re.sub(r"_+", "_", text)
    return ATTRIBUTE_ALIASES.get(text, text)


def attribute_spec(attribute: str) -> AttributeSpec:
    """The registry entry; unknown attributes are multi-valued with medium volatility (accumulating
    is the safe default: a wrong supersession would hide a true fact)."""
    name = normalise_attribute(attribute)
    spec = ATTRIBUTE_REGISTRY.get(name)
    if spec is not None:
        return spec
    if name.startswith(PROCEDURE_ATTRIBUTE_PREFIX):
        return AttributeSpec(name=name, single_valued=True, volatility="low")
    return AttributeSpec(name=name, single_valued=False, volatility=_UNKNOWN_ATTRIBUTE_VOLATILITY)
