"""The extraction output schema (the LLM path fills it; the heuristic path produces the same shape),
its item-by-item validation, and its mapping onto write-policy candidates.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from contracts.events import Scope
from services.common.domain.facts import FactCandidate, FactProvenance, Volatility, normalise_attribute
from services.common.domain.importance import coerce_importance
from services.semantic_extractor.korean_morphology import HANGUL, strip_korean_particles

EntityType = Literal["person", "pet", "project", "technology", "organisation", "place", "other"]
ENTITY_TYPES: tuple[EntityType, ...] = ("person", "pet", "project", "technology", "organisation", "place", "other")

_ENTITY_TYPE_ALIASES: dict[str, EntityType] = {
    "organization": "organisation",
    "org": "organisation",
    "company": "organisation",
    "institution": "organisation",
    "team": "organisation",
    "location": "place",
    "city": "place",
    "country": "place",
    "region": "place",
    "tool": "technology",
    "tech": "technology",
    "software": "technology",
    "language": "technology",
    "programming_language": "technology",
    "framework": "technology",
    "library": "technology",
    "product": "technology",
    "animal": "pet",
    "dog": "pet",
    "cat": "pet",
    "people": "person",
    "human": "person",
    "individual": "person",
    "product_project": "project",
}

_SCOPE_WIDTH: dict[str, int] = {"personal": 0, "team": 1, "org": 2}
_ItemT = TypeVar("_ItemT", bound=BaseModel)


def normalise_entity_type(value: object) -> EntityType:
    """Map the LLM's spelling of a type onto ENTITY_TYPES; anything unknown is "other"."""
    key = re.sub(r"[^a-z]+", "_", str(value).casefold()).strip("_")
    if key in ENTITY_TYPES:
        return key
    return _ENTITY_TYPE_ALIASES.get(key, "other")


def _snake(value: str) -> str:
    key = re.sub(r"[^\w]+", "_", unicodedata.normalize("NFKC", value).casefold()).strip("_")
    return re.sub(r"_+", "_", key)


# --------------------------------------------------------------------------------------------------
# Output schema (the LLM path fills it; the heuristic path produces the same shape)


class ExtractedEntity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str = Field(min_length=1, description="The entity's name as written in the conversation.")
    type: EntityType = Field(
        default="other", description="person, pet, project, technology, organisation, place, other."
    )

    @field_validator("name")
    @classmethod
    def _strip_name(cls, value: str) -> str:
        stripped = value.strip()
        if not stripped:
            raise ValueError("entity name is empty")
        return stripped

    @field_validator("type", mode="before")
    @classmethod
    def _known_type(cls, value: object) -> EntityType:
        return normalise_entity_type(value)


class ExtractedRelation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    source: str = Field(min_length=1, description="Name of the source entity.")
    type: str = Field(default="related_to", description="snake_case relation, e.g. works_on, uses, related_to.")
    target: str = Field(min_length=1, description="Name of the target entity.")

    @field_validator("source", "target")
    @classmethod
    def _strip_names(cls, value: str) -> str:
        stripped = value.strip()
        if not stripped:
            raise ValueError("relation end is empty")
        return stripped

    @field_validator("type")
    @classmethod
    def _snake_type(cls, value: str) -> str:
        return _snake(value) or "related_to"


class ExtractedFact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    subject: str = Field(min_length=1, description="'user' for the user; otherwise the person the fact is about.")
    attribute: str = Field(min_length=1, description="snake_case attribute, e.g. lives_in, employer, likes.")
    value: str = Field(min_length=1, description="The value, without particles or articles.")
    text: str = Field(min_length=1, description="The fact as one sentence, in the session's language.")
    volatility: Volatility | None = Field(default=None, description="high (tools), medium (preferences), low (names).")
    scope: Scope | None = Field(default=None, description="Suggested scope; never wider than the session's.")
    importance: float | None = Field(
        default=None,
        description="How much the fact matters later, 0 to 1 (health, decisions, commitments, preferences high; "
        "trivia low); left out or unusable: scored offline from `text`.",
    )

    @field_validator("subject", "attribute", "value", "text")
    @classmethod
    def _strip(cls, value: str) -> str:
        stripped = value.strip()
        if not stripped:
            raise ValueError("must not be empty")
        return stripped

    @field_validator("volatility", mode="before")
    @classmethod
    def _volatility(cls, value: object) -> object:
        if isinstance(value, str):
            key = value.strip().casefold()
            return key if key in {"high", "medium", "low"} else None
        return value

    @field_validator("importance", mode="before")
    @classmethod
    def _importance(cls, value: object) -> float | None:
        # A malformed rating must not cost the fact: it reads as None and the heuristic scores instead.
        return coerce_importance(value)

    @field_validator("scope", mode="before")
    @classmethod
    def _scope(cls, value: object) -> object:
        if isinstance(value, str):
            key = value.strip().casefold()
            return key if key in _SCOPE_WIDTH else None
        return value


class ExtractionOutput(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    entities: list[ExtractedEntity] = Field(default_factory=list)
    relations: list[ExtractedRelation] = Field(default_factory=list)
    facts: list[ExtractedFact] = Field(default_factory=list)


def parse_extraction_output(raw: str | Mapping[str, Any]) -> tuple[ExtractionOutput, list[str]]:
    """Validate an LLM answer item by item: one malformed entity must not cost the whole
    extraction. Returns the valid part and one message per dropped item (for the caller to log);
    raises ValueError when the answer is not a JSON object at all."""
    if isinstance(raw, str):
        text = raw.strip()
        fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, flags=re.DOTALL)
        if fenced:
            text = fenced.group(1)
        try:
            data: object = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"extraction answer is not JSON: {exc}") from exc
    else:
        data = raw
    if not isinstance(data, Mapping):
        raise ValueError(f"extraction answer must be a JSON object, got {type(data).__name__}")
    problems: list[str] = []
    entities = _validate_items(data.get("entities"), ExtractedEntity, "entities", problems)
    relations = _validate_items(data.get("relations"), ExtractedRelation, "relations", problems)
    facts = _validate_items(data.get("facts"), ExtractedFact, "facts", problems)
    return ExtractionOutput(entities=entities, relations=relations, facts=facts), problems


def _validate_items(items: object, model: type[_ItemT], label: str, problems: list[str]) -> list[_ItemT]:
    if items is None:
        return []
    if not isinstance(items, list):
        problems.append(f"{label}: expected a list, got {type(items).__name__}")
        return []
    valid: list[_ItemT] = []
    for index, item in enumerate(items):
        try:
            valid.append(model.model_validate(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            location = ".".join(str(part) for part in first["loc"])
            problems.append(f"{label}[{index}] dropped: {location}: {first['msg']}")
    return valid


def to_fact_candidates(
    output: ExtractionOutput,
    *,
    tenant_id: str,
    user_id: str,
    scope: Scope,
    language: str,
    provenance: FactProvenance,
) -> list[FactCandidate]:
    """Write-policy candidates for the extracted facts. The scope is the narrower of the session's
    and the suggested one: extraction may narrow visibility, never widen it. Korean particles left
    on values ("부산으로") are stripped so the same value always maps to the same fact id."""
    candidates: list[FactCandidate] = []
    for fact in output.facts:
        fact_scope: Scope = scope
        if fact.scope is not None and _SCOPE_WIDTH[fact.scope] < _SCOPE_WIDTH[scope]:
            fact_scope = fact.scope
        value = strip_korean_particles(fact.value) if HANGUL.search(fact.value[-1:]) else fact.value
        candidates.append(
            FactCandidate(
                tenant_id=tenant_id,
                user_id=user_id,
                scope=fact_scope,
                subject=fact.subject,
                attribute=normalise_attribute(fact.attribute),
                value=value,
                text=fact.text,
                language=language,
                volatility=fact.volatility,
                provenance=provenance,
                importance=fact.importance,
            )
        )
    return candidates
