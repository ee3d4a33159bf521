"""Offline extraction quality: the heuristic extractor against a hand-labelled set
(`tests/fixtures/extraction/`), scored as fact and entity precision/recall per language.

Matching is lenient on spelling and strict on meaning:
- spelling: case, width, surrounding punctuation, spaces and hyphens ("gluten-free" = "gluten free"),
  leading articles and possessives ("my sister" = "sister", "제 여동생" = "여동생"), Korean particles and
  the honorifics 님/씨 on subjects ("팀장님은" = "팀장"), and attribute synonyms (normalise_attribute);
- meaning: the subject, the attribute and the value must each be one the annotator accepted (a gold
  item lists its acceptable spellings as "a|b"); an entity counts only with the right type.

The fixture files are `{split}_{language}.json` (split "heldout": written before the extractor's
behaviour was looked at; "dev": the rest). Each case is {"id", "text", "facts", "entities"} plus
optional "optional_facts" / "optional_entities" (acceptable but not required: neither a hit nor a
miss) and "user_speaker_names". Facts are [subject, attribute, value] triples, entities [name, type].
`never_entities.json` lists time words and bare generic nouns per language that must never come out
as entities.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from rich import box
from rich.console import Console
from rich.table import Table

from services.common.domain.facts import normalise_attribute, normalise_subject, normalise_text_key
from services.semantic_extractor.heuristic import heuristic_extract
from services.semantic_extractor.korean_morphology import HANGUL, strip_korean_particles
from services.semantic_extractor.schema import ENTITY_TYPES, EntityType, ExtractionOutput

DEFAULT_FIXTURES = Path("tests/fixtures/extraction")
LANGUAGES = ("en", "ko")
SPLITS = ("heldout", "dev", "blind", "fresh")

_LEADING_DETERMINERS = re.compile(
    r"^(?:(?:a|an|the|my|our|his|her|their|your|제|내|저의|나의|우리|저희|우리 집|저희 집)\s+)+", re.IGNORECASE
)
_SPELLING_NOISE = re.compile(r"[\s\-_‐–]+")
_HONORIFIC_SUFFIX = re.compile(r"(?<=[\uac00-\ud7a3])(?:님|씨)$")


# --------------------------------------------------------------------------------------------------
# Keys: what counts as the same spelling


def text_key(text: str) -> str:
    """Comparison key for a value or an entity name: case/width/punctuation-insensitive, articles,
    possessives, Korean particles, spaces and hyphens removed."""
    key = normalise_text_key(text)
    key = _LEADING_DETERMINERS.sub("", key)
    if HANGUL.search(key[-1:]):
        key = strip_korean_particles(key)
    return _SPELLING_NOISE.sub("", normalise_text_key(key))


def subject_key(subject: str) -> str:
    """Comparison key for a subject: "User"/"나"/"me" are the user; honorifics dropped."""
    if normalise_subject(subject) == "user":
        return "user"
    key = text_key(subject)
    key = _HONORIFIC_SUFFIX.sub("", key)
    return "user" if normalise_subject(key) == "user" else key


def attribute_key(attribute: str) -> str:
    return normalise_attribute(attribute)


# --------------------------------------------------------------------------------------------------
# The labelled set


def _alternatives(spec: str) -> frozenset[str]:
    return frozenset(part.strip() for part in spec.split("|") if part.strip())


class GoldFact(BaseModel):
    """One expected fact; each part is the set of spellings the annotator accepts."""

    model_config = ConfigDict(frozen=True)

    subjects: frozenset[str]
    attributes: frozenset[str]
    values: frozenset[str]

    @classmethod
    def parse(cls, triple: Sequence[str]) -> GoldFact:
        if len(triple) != 3:
            raise ValueError(f"a gold fact is [subject, attribute, value], got {list(triple)!r}")
        subject, attribute, value = triple
        return cls(
            subjects=frozenset(subject_key(s) for s in _alternatives(subject)),
            attributes=frozenset(attribute_key(a) for a in _alternatives(attribute)),
            values=frozenset(text_key(v) for v in _alternatives(value)),
        )

    def matches(self, fact: PredictedFact) -> bool:
        return fact.subject in self.subjects and fact.attribute in self.attributes and fact.value in self.values


class GoldEntity(BaseModel):
    model_config = ConfigDict(frozen=True)

    names: frozenset[str]
    type: EntityType

    @classmethod
    def parse(cls, pair: Sequence[str]) -> GoldEntity:
        if len(pair) != 2 or pair[1] not in ENTITY_TYPES:
            raise ValueError(f"a gold entity is [name, one of {ENTITY_TYPES}], got {list(pair)!r}")
        return cls(names=frozenset(text_key(n) for n in _alternatives(pair[0])), type=pair[1])


class ExtractionCase(BaseModel):
    """One labelled sentence or short turn."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    language: str
    split: str
    text: str = Field(min_length=1)
    facts: tuple[GoldFact, ...]
    optional_facts: tuple[GoldFact, ...] = ()
    entities: tuple[GoldEntity, ...]
    optional_entities: frozenset[str] = frozenset()
    user_speaker_names: tuple[str, ...] = ()

    @field_validator("facts", "optional_facts", mode="before")
    @classmethod
    def _facts(cls, value: object) -> object:
        return tuple(GoldFact.parse(item) if isinstance(item, list) else item for item in _as_list(value))

    @field_validator("entities", mode="before")
    @classmethod
    def _entities(cls, value: object) -> object:
        return tuple(GoldEntity.parse(item) if isinstance(item, list) else item for item in _as_list(value))

    @field_validator("optional_entities", mode="before")
    @classmethod
    def _optional_entities(cls, value: object) -> object:
        return frozenset(text_key(str(name)) for name in _as_list(value))


def _as_list(value: object) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list | tuple | frozenset):
        raise ValueError(f"expected a list, got {type(value).__name__}")
    return list(value)


class FixtureError(ValueError):
    """The labelled set is missing or malformed (the message names the file and the case)."""


def load_cases(directory: Path) -> list[ExtractionCase]:
    """Every case of `{split}_{language}.json` under `directory`, in file then case order."""
    cases: list[ExtractionCase] = []
    files = sorted(directory.glob("*_*.json"))
    for path in files:
        split, _, language = path.stem.partition("_")
        if split not in SPLITS or language not in LANGUAGES:
            continue
        try:
            items = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise FixtureError(f"{path}: not JSON: {exc}") from exc
        if not isinstance(items, list):
            raise FixtureError(f"{path}: expected a list of cases")
        for index, item in enumerate(items):
            try:
                cases.append(ExtractionCase.model_validate({**item, "language": language, "split": split}))
            except (ValidationError, TypeError, ValueError) as exc:
                case_id = item.get("id", "?") if isinstance(item, dict) else "?"
                raise FixtureError(f"{path}: case {index} ({case_id}): {exc}") from exc
    if not cases:
        raise FixtureError(f"no labelled cases under {directory} (expected files such as heldout_en.json)")
    return cases


def load_never_entities(directory: Path) -> dict[str, frozenset[str]]:
    """Per language, the keys of time words and bare generic nouns that must never be entities."""
    path = directory / "never_entities.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise FixtureError(f"{path}: {exc}") from exc
    return {language: frozenset(text_key(word) for word in data.get(language, [])) for language in LANGUAGES}


# --------------------------------------------------------------------------------------------------
# Scoring


@dataclass(frozen=True, slots=True)
class PredictedFact:
    subject: str
    attribute: str
    value: str
    shown: str


@dataclass(frozen=True, slots=True)
class PredictedEntity:
    name: str
    type: str
    shown: str


def predicted_facts(output: ExtractionOutput) -> list[PredictedFact]:
    """The extractor's facts as keys, duplicates (same keys) removed."""
    seen: dict[tuple[str, str, str], PredictedFact] = {}
    for fact in output.facts:
        key = (subject_key(fact.subject), attribute_key(fact.attribute), text_key(fact.value))
        seen.setdefault(key, PredictedFact(*key, shown=f"{fact.subject} / {fact.attribute} / {fact.value}"))
    return list(seen.values())


def predicted_entities(output: ExtractionOutput) -> list[PredictedEntity]:
    seen: dict[str, PredictedEntity] = {}
    for entity in output.entities:
        key = text_key(entity.name)
        if key:
            seen.setdefault(key, PredictedEntity(key, entity.type, shown=f"{entity.name} ({entity.type})"))
    return list(seen.values())


@dataclass(slots=True)
class Tally:
    """Counts for one kind of item; errors keep "case id: item" for the report."""

    true_positives: int = 0
    false_positives: int = 0
    false_negatives: int = 0
    false_positive_items: list[str] = field(default_factory=list)
    missed_items: list[str] = field(default_factory=list)

    @property
    def precision(self) -> float:
        predicted = self.true_positives + self.false_positives
        return self.true_positives / predicted if predicted else 1.0

    @property
    def recall(self) -> float:
        expected = self.true_positives + self.false_negatives
        return self.true_positives / expected if expected else 1.0

    def add(self, other: Tally) -> None:
        self.true_positives += other.true_positives
        self.false_positives += other.false_positives
        self.false_negatives += other.false_negatives
        self.false_positive_items.extend(other.false_positive_items)
        self.missed_items.extend(other.missed_items)


def score_facts(case: ExtractionCase, predicted: Iterable[PredictedFact]) -> Tally:
    """A predicted fact is a hit when it matches a required gold fact not already matched; one that
    matches only an optional gold fact is ignored; anything else is a false positive."""
    tally = Tally()
    unmatched = list(case.facts)
    for fact in predicted:
        gold = next((g for g in unmatched if g.matches(fact)), None)
        if gold is not None:
            unmatched.remove(gold)
            tally.true_positives += 1
        elif any(g.matches(fact) for g in (*case.optional_facts, *case.facts)):
            continue
        else:
            tally.false_positives += 1
            tally.false_positive_items.append(f"{case.id}: {fact.shown}")
    tally.false_negatives = len(unmatched)
    tally.missed_items.extend(f"{case.id}: {_show_gold_fact(g)}" for g in unmatched)
    return tally


def score_entities(case: ExtractionCase, predicted: Iterable[PredictedEntity], *, typed: bool = True) -> Tally:
    """A predicted entity is a hit when its name is a gold entity's (and, when `typed`, so is its
    type); a second spelling of an already-matched entity and optional names are ignored."""
    tally = Tally()
    unmatched = list(case.entities)
    for entity in predicted:
        if entity.name in case.optional_entities:
            continue
        named = next((g for g in case.entities if entity.name in g.names), None)
        if named is None or (typed and named.type != entity.type):
            tally.false_positives += 1
            tally.false_positive_items.append(f"{case.id}: {entity.shown}")
        elif named in unmatched:
            unmatched.remove(named)
            tally.true_positives += 1
    tally.false_negatives = len(unmatched)
    tally.missed_items.extend(f"{case.id}: {'|'.join(sorted(g.names))} ({g.type})" for g in unmatched)
    return tally


def _show_gold_fact(gold: GoldFact) -> str:
    return " / ".join("|".join(sorted(part)) for part in (gold.subjects, gold.attributes, gold.values))


@dataclass(slots=True)
class GroupScore:
    """Scores of one language (and split)."""

    cases: int = 0
    facts: Tally = field(default_factory=Tally)
    entities: Tally = field(default_factory=Tally)
    entity_names: Tally = field(default_factory=Tally)
    forbidden_entities: list[str] = field(default_factory=list)


Extractor = Callable[[ExtractionCase], ExtractionOutput]


def run_heuristic(case: ExtractionCase) -> ExtractionOutput:
    """The offline extractor on one case, as the semantic-extractor service calls it."""
    return heuristic_extract(case.text, case.language, user_speaker_names=case.user_speaker_names)


def evaluate(
    cases: Sequence[ExtractionCase],
    never_entities: dict[str, frozenset[str]],
    extractor: Extractor = run_heuristic,
) -> dict[tuple[str, str], GroupScore]:
    """Scores keyed by (language, split), with split "all" for each language's whole set."""
    groups: dict[tuple[str, str], GroupScore] = {}
    for case in cases:
        output = extractor(case)
        facts = score_facts(case, predicted_facts(output))
        entities = predicted_entities(output)
        typed = score_entities(case, entities)
        names = score_entities(case, entities, typed=False)
        forbidden = [f"{case.id}: {e.shown}" for e in entities if e.name in never_entities.get(case.language, ())]
        for key in ((case.language, case.split), (case.language, "all")):
            group = groups.setdefault(key, GroupScore())
            group.cases += 1
            group.facts.add(facts)
            group.entities.add(typed)
            group.entity_names.add(names)
            group.forbidden_entities.extend(forbidden)
    return groups


# --------------------------------------------------------------------------------------------------
# `tiermem eval extraction`

console = Console()


def _table(groups: dict[tuple[str, str], GroupScore]) -> Table:
    table = Table(title="Offline extraction on the labelled set", box=box.SIMPLE_HEAD, pad_edge=False)
    # Short headers: the table must stay readable in an 80-column terminal. "name P/R" ignore the type.
    for column in ("lang", "split", "n", "fact P", "fact R", "ent P", "ent R", "name P", "name R", "forbid"):
        table.add_column(column, justify="left" if column in {"lang", "split"} else "right")
    for (language, split), group in sorted(groups.items()):
        table.add_row(
            language,
            split,
            str(group.cases),
            f"{group.facts.precision:.3f}",
            f"{group.facts.recall:.3f}",
            f"{group.entities.precision:.3f}",
            f"{group.entities.recall:.3f}",
            f"{group.entity_names.precision:.3f}",
            f"{group.entity_names.recall:.3f}",
            str(len(group.forbidden_entities)),
        )
    return table


def _print_errors(groups: dict[tuple[str, str], GroupScore]) -> None:
    for (language, split), group in sorted(groups.items()):
        if split != "all":
            continue
        sections = (
            ("wrong facts", group.facts.false_positive_items),
            ("missed facts", group.facts.missed_items),
            ("wrong entities", group.entities.false_positive_items),
            ("missed entities", group.entities.missed_items),
            ("forbidden entities", group.forbidden_entities),
        )
        for title, items in sections:
            console.print(f"[bold]{language} {title}[/bold] ({len(items)})")
            for item in items:
                console.print(f"  {item}", markup=False)


def _as_json(groups: dict[tuple[str, str], GroupScore]) -> str:
    rows = [
        {
            "language": language,
            "split": split,
            "cases": group.cases,
            "fact_precision": round(group.facts.precision, 4),
            "fact_recall": round(group.facts.recall, 4),
            "entity_precision": round(group.entities.precision, 4),
            "entity_recall": round(group.entities.recall, 4),
            "forbidden_entities": group.forbidden_entities,
        }
        for (language, split), group in sorted(groups.items())
    ]
    return json.dumps(rows, ensure_ascii=False, indent=2)


def extraction_command(
    fixtures: Annotated[
        Path | None,
        typer.Option(
            "--fixtures",
            help="Directory of the labelled set ({split}_{language}.json); default: the chosen set's.",
        ),
    ] = None,
    labelled_set: Annotated[
        str,
        typer.Option(
            "--set",
            help="sentences: single labelled sentences (facts, entities); chat: labelled chat sessions "
            "(typed relations, entity typing).",
        ),
    ] = "sentences",
    split: Annotated[
        str, typer.Option("--split", help="Chat set only: dev, test (held out: score it once) or all.")
    ] = "dev",
    errors: Annotated[bool, typer.Option("--errors", help="List every wrong and missed fact and entity.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON.")] = False,
) -> None:
    """Score the offline (heuristic) extractor on a labelled set. Sentences: fact and entity
    precision/recall per language and split, and any time word or generic noun taken as an entity.
    Chat: typed-relation precision/recall and entity-typing accuracy per language on one split."""
    if labelled_set not in ("sentences", "chat"):
        console.print(f"[red]--set must be sentences or chat, got {labelled_set!r}[/red]")
        raise typer.Exit(2)
    if labelled_set == "chat":
        # Imported here: the chat scorer builds on this module's keys and tallies.
        from tiermem_lab.evaluation.extraction_chat import chat_command

        chat_command(fixtures, split, errors=errors, as_json=as_json)
        return
    fixtures = fixtures or DEFAULT_FIXTURES
    try:
        cases = load_cases(fixtures)
        never = load_never_entities(fixtures)
    except FixtureError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    groups = evaluate(cases, never)
    if as_json:
        typer.echo(_as_json(groups))
        return
    console.print(_table(groups))
    if errors:
        _print_errors(groups)
