"""What the heuristic extractor accumulates while it reads a conversation (entities, relations and
facts, keyed so repeats merge), who a line's first person is, and the steps the English and Korean
readers share: type guesses, recording a fact with its graph relation, co-occurrence.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from services.common.domain.facts import USER_SUBJECT, normalise_subject, normalise_text_key
from services.semantic_extractor.fact_text import render_fact_text
from services.semantic_extractor.gazetteers import (
    AMBIGUOUS_NAMES,
    EN_RELATION_NOUNS,
    KO_PLACE_NAME,
    ORGANISATION_PREFIXES,
    ORGANISATION_SUFFIXES,
    ORGANISATIONS,
    PERSON_TITLES,
    PLACES,
    PROJECT_WORDS,
    TECH_LOWERCASE_OK,
    TECHNOLOGIES,
    VERSION_SUFFIX,
    is_never_entity,
)
from services.semantic_extractor.korean_morphology import HANGUL
from services.semantic_extractor.schema import (
    EntityType,
    ExtractedEntity,
    ExtractedFact,
    ExtractedRelation,
    ExtractionOutput,
)


@dataclass(frozen=True, slots=True)
class Speaker:
    """Whom a first-person statement in a line is about: "user", a name, or nobody (assistant)."""

    subject: str | None


@dataclass(slots=True)
class ExtractionContext:
    """The extraction so far, keyed by normalised names so repeated mentions merge; entities carry the
    confidence of their type guess (0 none, 1 gazetteer, 2 pattern, 3 known person, 4 an animal its kind
    noun names)."""

    user_keys: frozenset[str]
    people: dict[str, str]  # key → display name of people known to be persons (speakers, relatives' names)
    user_display_name: str | None
    language: str
    entities: dict[str, tuple[ExtractedEntity, int]] = field(default_factory=dict)
    relations: dict[tuple[str, str, str], ExtractedRelation] = field(default_factory=dict)
    facts: dict[tuple[str, str, str], ExtractedFact] = field(default_factory=dict)

    def add_entity(self, name: str, entity_type: EntityType, confidence: int) -> str | None:
        """Record an entity; a more confident type guess replaces a weaker one. Returns its key."""
        display = name.strip().strip(".,'\"")
        key = normalise_text_key(display)
        if not key or (confidence < 3 and is_never_entity(display)):
            return None
        existing = self.entities.get(key)
        if existing is None:
            self.entities[key] = (ExtractedEntity(name=display, type=entity_type), confidence)
        elif confidence > existing[1] and entity_type != existing[0].type:
            self.entities[key] = (ExtractedEntity(name=existing[0].name, type=entity_type), confidence)
        return key

    def add_relation(self, source: str, relation: str, target: str) -> None:
        source_key, target_key = normalise_text_key(source), normalise_text_key(target)
        if not source_key or not target_key or source_key == target_key:
            return
        if relation != "related_to":
            self.relations.pop((source_key, "related_to", target_key), None)
            self.relations.pop((target_key, "related_to", source_key), None)
        elif any(s == source_key and t == target_key for s, _r, t in self.relations) or any(
            s == target_key and t == source_key for s, _r, t in self.relations
        ):
            return
        display_source = self.entities[source_key][0].name if source_key in self.entities else source
        display_target = self.entities[target_key][0].name if target_key in self.entities else target
        self.relations.setdefault(
            (source_key, relation, target_key),
            ExtractedRelation(source=display_source, type=relation, target=display_target),
        )

    def add_fact(self, subject: str, attribute: str, value: str, *, text: str | None = None) -> None:
        """Record a fact; `text` replaces the templated sentence when the rule knows more ("… for Atlas")."""
        value = value.strip()
        if not value:
            return
        key = (normalise_subject(subject), attribute, normalise_text_key(value))
        if key in self.facts:
            return
        text = text or render_fact_text(subject, attribute, value, self.language)
        self.facts[key] = ExtractedFact(subject=subject, attribute=attribute, value=value, text=text)

    def is_user(self, name: str) -> bool:
        return normalise_text_key(name) in self.user_keys

    def output(self) -> ExtractionOutput:
        return ExtractionOutput(
            entities=[entity for entity, _confidence in self.entities.values()],
            relations=list(self.relations.values()),
            facts=list(self.facts.values()),
        )


MULTI_VALUE_ATTRIBUTES = frozenset(
    {"uses_tool", "uses_language", "prefers", "likes", "dislikes", "allergy", "speaks_language", "hobby", "has_pet"}
)
_FACT_RELATIONS: dict[str, tuple[str, EntityType]] = {
    "lives_in": ("lives_in", "place"),
    "birthplace": ("born_in", "place"),
    "school": ("studies_at", "organisation"),
    "employer": ("works_at", "organisation"),
    "works_on": ("works_on", "project"),
    "uses_tool": ("uses", "technology"),
    "owns": ("owns", "other"),
    "likes": ("likes", "other"),
    "dislikes": ("dislikes", "other"),
}
# Relations whose value is a node only when it is already one, or a gazetteer name: "likes jazz", "좋아하는
# 등산", "K-dramas" are kinds of things, not entities; "likes Linear" and "owns a Tesla" name one.
_LINK_ONLY = frozenset({"owns", "likes", "dislikes"})


def is_capitalised(token: str) -> bool:
    """A capital first letter: what marks a Latin word as a name in either language."""
    return bool(token) and token[0].isupper()


def known_name(key: str, context: ExtractionContext) -> bool:
    """A name known without a capital letter to prove it: a person of this conversation or an unambiguous
    gazetteer entry."""
    if key in AMBIGUOUS_NAMES:
        return False
    return key in context.people or key in TECHNOLOGIES or key in PLACES or key in ORGANISATIONS


def guess_type(name: str, context: ExtractionContext) -> tuple[EntityType, int]:
    """The entity type of a name and the confidence of the guess (see `ExtractionContext`)."""
    name = name.rstrip(".,;:!?")
    key = normalise_text_key(name)
    words = name.split()
    if key in context.people:
        return "person", 3
    if key in TECHNOLOGIES or normalise_text_key(VERSION_SUFFIX.sub("", name)) in TECHNOLOGIES:
        return "technology", 1
    if key in PLACES:
        return "place", 1
    if key in ORGANISATIONS or ORGANISATION_SUFFIXES.search(name) or ORGANISATION_PREFIXES.match(name):
        return "organisation", 1
    if len(words) >= 2 and (PROJECT_WORDS.match(words[0]) or PROJECT_WORDS.match(words[-1])):
        return "project", 1
    if words and words[0].casefold().rstrip(".") in PERSON_TITLES:
        return "person", 1
    if KO_PLACE_NAME.fullmatch(name):
        return "place", 1
    return "other", 0


def record_fact(
    subject: str, attribute: str, value: str, context: ExtractionContext, *, text: str | None = None
) -> None:
    """Add the fact and, when its value is a name, the graph relation it implies ("lives in Busan" →
    user lives_in Busan) from a named subject."""
    context.add_fact(subject, attribute, value, text=text)
    relation = _FACT_RELATIONS.get(attribute)
    if relation is None:
        return
    relation_type, value_type = relation
    node = (
        _linked_node(value, value_type, context) if attribute in _LINK_ONLY else _value_node(value, value_type, context)
    )
    if node is None:
        return
    if normalise_subject(subject) == USER_SUBJECT:
        if context.user_display_name is None:
            return  # the user's own node is the caller's business; the fact already says it
        source = context.user_display_name
        context.add_entity(source, "person", 3)
    elif normalise_text_key(subject) in context.entities:
        source = subject
    else:
        return  # "friend", "친구": not a named node
    context.add_relation(source, relation_type, node)


def _value_node(value: str, value_type: EntityType, context: ExtractionContext) -> str | None:
    """The node a name-valued fact points at ("Busan"), typed by the relation when nothing better is known."""
    value_key = normalise_text_key(value)
    looks_named = (
        value[:1].isupper() or bool(HANGUL.match(value)) or value_key in TECHNOLOGIES or value_key in TECH_LOWERCASE_OK
    )
    if not looks_named:
        return None
    words = value.split()
    if len(words) > 1 and all(normalise_text_key(word) in context.entities for word in words):
        return words[-1]  # "서울 강남구": both parts are already nodes; link the most specific one
    guessed, confidence = guess_type(value, context)
    context.add_entity(value, guessed if confidence > 1 else value_type, max(confidence, 2))
    return value


def _linked_node(value: str, value_type: EntityType, context: ExtractionContext) -> str | None:
    """The node of a `_LINK_ONLY` value: one the conversation already has, or a gazetteer name."""
    value_key = normalise_text_key(value)
    if value_key in context.entities:
        return value
    known = value_key in TECHNOLOGIES or value_key in ORGANISATIONS or value_key in PLACES
    if not known or value_key in AMBIGUOUS_NAMES:
        return None  # a name pattern ("Studio Ghibli films") is no proof the whole phrase is one thing
    guessed, confidence = guess_type(value, context)
    context.add_entity(value, guessed if guessed != "other" else value_type, max(confidence, 1))
    return value


def cooccurrence(keys: list[str], context: ExtractionContext) -> None:
    # Every pair in a sentence, or only neighbours when a sentence lists many names.
    pairs = (
        [(a, b) for i, a in enumerate(keys) for b in keys[i + 1 :]]
        if len(keys) <= 6
        else list(itertools.pairwise(keys))
    )
    for source, target in pairs:
        context.add_relation(context.entities[source][0].name, "related_to", context.entities[target][0].name)


# ---- Type cues from the words around an unknown name (English) ---------------------------------------
# The noun a name is introduced with says what it is: "a startup called Lumen", "Atlas, a recommendation
# engine", "the Orion project", "my colleague Priya", "Jenny said", "a trip to Iceland".
_ORGANISATION_NOUNS = frozenset(
    {
        "startup", "company", "firm", "agency", "studio", "shop", "store", "bakery", "cafe", "café", "restaurant",
        "bank", "hospital", "clinic", "school", "university", "college", "lab", "nonprofit", "charity",
        "organisation", "organization", "business", "brand", "employer", "publisher", "band",
    }
)  # fmt: skip
_PROJECT_NOUNS = frozenset(
    {
        "project", "app", "application", "tool", "library", "service", "engine", "platform", "website", "site",
        "bot", "game", "product", "prototype", "pipeline", "initiative", "plugin", "extension", "dashboard",
    }
)  # fmt: skip
_PERSON_NOUNS = frozenset({"guy", "girl", "woman", "man", "person", "kid", "boy", "lady", "dude", *EN_RELATION_NOUNS})
_PROJECT_NOUN_AFTER = re.compile(
    r"^\s+(?:[a-z][\w-]*\s+){0,2}(?:project|service|app|platform|engine|pipeline|initiative|prototype)\b",
    re.IGNORECASE,
)
_CALLED_BEFORE = re.compile(r"\b(?P<noun>[\w-]+)\s+(?:called|named)\s+$", re.IGNORECASE)
_APPOSITION_AFTER = re.compile(
    r"^\s*,\s+(?:an?|the|our|my|his|her|their)\s+(?P<phrase>[\w\s-]{1,50}?)"
    r"(?=\s*(?:[,.;:!?]|$|\s+(?:for|in|that|which|with|at|from|of|to|by|we|i)\b))",
    re.IGNORECASE,
)
_RELATION_BEFORE = re.compile(r"\b(?:" + "|".join(EN_RELATION_NOUNS) + r")\s*,?\s+$", re.IGNORECASE)
SPEECH_AFTER = re.compile(
    r"^\s+(?:said|says|told|tells|asked|asks|mentioned|mentions|thinks|texted|replied|wrote|agreed)\b"
)
# Verbs only a person is the subject of: "Marcus works", "Sora lives", "Ji-ho studies".
_PERSON_VERB_AFTER = re.compile(
    r"^\s+(?:works|worked|lives|lived|studies|studied|is\s+married|got\s+married|was\s+born|grew\s+up)\b"
)
_NOUN_BEFORE = re.compile(
    r"\b(?:our|my|the|their|his|her|a|an)\s+(?:[\w-]+\s+)?(?P<noun>[\w-]+)(?P<comma>,?)\s+$", re.IGNORECASE
)
_PLACE_BEFORE = re.compile(
    r"\b(?:visit|visits|visiting|visited|(?:trip|travel|travelling|traveling|flight|fly|flying|move|moved|moving|"
    r"relocate|relocated|relocating|went|going|go|back)\s+to|(?:live|lives|living|lived|born|based|stay|stays|"
    r"staying|stayed|raised|weather|grew\s+up|growing\s+up)\s+in|(?:originally|moved\s+here)\s+from)\s+$",
    re.IGNORECASE,
)


def _noun_type(noun: str) -> EntityType | None:
    word = noun.casefold()
    if word in _ORGANISATION_NOUNS:
        return "organisation"
    if word in _PROJECT_NOUNS:
        return "project"
    if word in _PERSON_NOUNS:
        return "person"
    return None


def context_type_cue(sentence: str, start: int, end: int, name: str) -> EntityType | None:
    """The type the words around an otherwise unknown name give it, or None."""
    before, after = sentence[:start], sentence[end:]
    called = _CALLED_BEFORE.search(before[-40:])
    if called is not None:
        return _noun_type(called.group("noun"))
    apposition = _APPOSITION_AFTER.match(after)
    if apposition is not None and (typed := _noun_type(apposition.group("phrase").split()[-1])) is not None:
        return typed
    if _PROJECT_NOUN_AFTER.match(after):
        return "project"  # "the Orion project", "the DGIA billing service"
    if _RELATION_BEFORE.search(before[-30:]) or SPEECH_AFTER.match(after) or _PERSON_VERB_AFTER.match(after):
        return "person"
    introduced = _NOUN_BEFORE.search(before[-40:])
    # "my app Pebble", "our startup, Fernweh, makes …"; not a vocative ("… with my business, Jon.").
    closed = introduced is not None and (not introduced.group("comma") or after.lstrip().startswith(","))
    if introduced is not None and closed and (typed := _noun_type(introduced.group("noun"))) is not None:
        return typed  # "our startup, Fernweh", "my app Pebble"
    if _PLACE_BEFORE.search(before[-40:]):
        return "place"
    words = name.rstrip(".,;:!?").split()
    if len(words) == 2 and all(re.fullmatch(r"[A-Z][a-z]+", word) for word in words):
        return "person"  # "Bill Evans": two plain capitalised words that no gazetteer knows are a full name
    return None
