"""Offline extraction on chat (issue 50): the heuristic extractor against short labelled chat sessions
(`tests/fixtures/extraction/chat/`), scored as typed-relation precision/recall and entity-typing accuracy.

What is scored
- Typed relations: the extractor's graph relations and its facts, both read as (subject, relation,
  object) triples in one closed vocabulary (`RELATIONS`). A fact's attribute maps onto it (employer →
  works_at, has_pet → owns, ...); anything outside the vocabulary (related_to, job titles, diets) is
  neither a hit nor a false positive, because the labels do not cover it.
- Entity typing: of the labelled entities, the share the extractor produced under an accepted name AND
  with an accepted type; a missed entity counts as wrongly typed. Reported for person/pet/organisation
  (the issue's target) and for every type.

Spelling is matched as in `extraction.py` (case, particles, articles, spaces); a speaker named in the
case's `user_speaker_names` is the user on both sides.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from rich import box
from rich.console import Console
from rich.table import Table

from services.common.domain.facts import normalise_attribute
from services.semantic_extractor.heuristic import heuristic_extract
from services.semantic_extractor.schema import ENTITY_TYPES, ExtractionOutput
from tiermem_lab.evaluation.extraction import FixtureError, Tally, subject_key, text_key

DEFAULT_CHAT_FIXTURES = Path("tests/fixtures/extraction/chat")
CHAT_SPLITS = ("dev", "test")
CHAT_LANGUAGES = ("en", "ko")
RELATIONS = frozenset(
    {
        "chose", "uses", "switching_to", "moved_to", "lives_in", "works_at", "owns", "age", "date", "likes",
        "dislikes", "allergic_to",
    }
)  # fmt: skip
TARGET_TYPES = frozenset({"person", "pet", "organisation"})
# Fact attributes (after normalise_attribute) that say the same as a relation of the vocabulary.
_ATTRIBUTE_RELATIONS = {"employer": "works_at", "uses_tool": "uses", "allergy": "allergic_to", "has_pet": "owns"}


def relation_key(name: str) -> str:
    """One spelling per relation: a fact attribute or a graph relation type, in the vocabulary's terms."""
    normalised = normalise_attribute(name)
    return _ATTRIBUTE_RELATIONS.get(normalised, normalised)


def _alternatives(spec: str) -> list[str]:
    return [part.strip() for part in spec.split("|") if part.strip()]


class ChatTriple(BaseModel):
    """A labelled relation: each part is the set of keys a reader accepts."""

    model_config = ConfigDict(frozen=True)

    subjects: frozenset[str]
    relations: frozenset[str]
    objects: frozenset[str]

    def matches(self, triple: tuple[str, str, str]) -> bool:
        subject, relation, obj = triple
        return subject in self.subjects and relation in self.relations and obj in self.objects


class ChatEntity(BaseModel):
    model_config = ConfigDict(frozen=True)

    names: frozenset[str]
    types: frozenset[str]


class ChatCase(BaseModel):
    """One labelled chat session."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    language: str
    split: str
    lines: tuple[str, ...] = Field(min_length=1)
    relations: tuple[ChatTriple, ...]
    optional_relations: tuple[ChatTriple, ...] = ()
    entities: tuple[ChatEntity, ...]
    optional_entities: frozenset[str] = frozenset()
    user_speaker_names: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def subject(self, name: str) -> str:
        """The comparison key of a subject; the user's own speaker names are the user."""
        key = subject_key(name)
        return "user" if key in {subject_key(n) for n in self.user_speaker_names} else key

    @field_validator("relations", "optional_relations", mode="before")
    @classmethod
    def _relations(cls, value: object) -> object:
        triples = []
        for item in value if isinstance(value, list) else []:
            if not isinstance(item, list) or len(item) != 3:
                raise ValueError(f"a relation is [subject, relation, object], got {item!r}")
            subject, relation, obj = item
            relations = {relation_key(r) for r in _alternatives(relation)}
            if not relations <= RELATIONS:
                raise ValueError(f"relation {relation!r} is outside the vocabulary {sorted(RELATIONS)}")
            triples.append(
                ChatTriple(
                    subjects=frozenset(subject_key(s) for s in _alternatives(subject)),
                    relations=frozenset(relations),
                    objects=frozenset(text_key(o) for o in _alternatives(obj)),
                )
            )
        return tuple(triples)

    @field_validator("entities", mode="before")
    @classmethod
    def _entities(cls, value: object) -> object:
        entities = []
        for item in value if isinstance(value, list) else []:
            types = set(_alternatives(item[1])) if isinstance(item, list) and len(item) == 2 else set()
            if not types or not types <= set(ENTITY_TYPES):
                raise ValueError(f"an entity is [name, type among {ENTITY_TYPES}], got {item!r}")
            entities.append(
                ChatEntity(names=frozenset(text_key(n) for n in _alternatives(item[0])), types=frozenset(types))
            )
        return tuple(entities)

    @field_validator("optional_entities", mode="before")
    @classmethod
    def _optional_entities(cls, value: object) -> object:
        return frozenset(text_key(str(name)) for name in (value if isinstance(value, list) else []))


def load_chat_cases(directory: Path) -> list[ChatCase]:
    """Every case of `{split}_{language}.json` under `directory`."""
    cases: list[ChatCase] = []
    for path in sorted(directory.glob("*_*.json")):
        split, _, language = path.stem.partition("_")
        if split not in CHAT_SPLITS or language not in CHAT_LANGUAGES:
            continue
        try:
            items = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise FixtureError(f"{path}: not JSON: {exc}") from exc
        for index, item in enumerate(items if isinstance(items, list) else [None]):
            try:
                cases.append(ChatCase.model_validate({**item, "language": language, "split": split}))
            except (ValidationError, TypeError, ValueError) as exc:
                case_id = item.get("id", "?") if isinstance(item, dict) else "?"
                raise FixtureError(f"{path}: case {index} ({case_id}): {exc}") from exc
    if not cases:
        raise FixtureError(f"no labelled chat sessions under {directory} (expected files such as dev_en.json)")
    return cases


# --------------------------------------------------------------------------------------------------
# Scoring


def predicted_triples(case: ChatCase, output: ExtractionOutput) -> dict[tuple[str, str, str], str]:
    """The extractor's relations and facts as vocabulary triples (key → how it was shown)."""
    triples: dict[tuple[str, str, str], str] = {}
    for relation in output.relations:
        key = (case.subject(relation.source), relation_key(relation.type), text_key(relation.target))
        if key[1] in RELATIONS:
            triples.setdefault(key, f"{relation.source} -{relation.type}-> {relation.target}")
    for fact in output.facts:
        key = (case.subject(fact.subject), relation_key(fact.attribute), text_key(fact.value))
        if key[1] in RELATIONS:
            triples.setdefault(key, f"{fact.subject} / {fact.attribute} / {fact.value}")
    return triples


def score_relations(case: ChatCase, predicted: dict[tuple[str, str, str], str]) -> Tally:
    """A predicted triple is a hit when it matches a labelled relation not already matched; one that
    matches only an optional or an already-matched label is ignored; anything else is wrong."""
    tally = Tally()
    unmatched = list(case.relations)
    for triple, shown in predicted.items():
        gold = next((g for g in unmatched if g.matches(triple)), None)
        if gold is not None:
            unmatched.remove(gold)
            tally.true_positives += 1
        elif not any(g.matches(triple) for g in (*case.optional_relations, *case.relations)):
            tally.false_positives += 1
            tally.false_positive_items.append(f"{case.id}: {shown}")
    tally.false_negatives = len(unmatched)
    tally.missed_items.extend(f"{case.id}: {_show(g)}" for g in unmatched)
    return tally


def _show(gold: ChatTriple) -> str:
    return " / ".join("|".join(sorted(part)) for part in (gold.subjects, gold.relations, gold.objects))


@dataclass(slots=True)
class Typing:
    """Labelled entities found with an accepted type, out of all labelled entities."""

    correct: int = 0
    total: int = 0
    wrong_items: list[str] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 1.0

    def add(self, other: Typing) -> None:
        self.correct += other.correct
        self.total += other.total
        self.wrong_items.extend(other.wrong_items)


def score_typing(case: ChatCase, output: ExtractionOutput, types: Iterable[str] | None = None) -> Typing:
    """Typing accuracy over the labelled entities (restricted to labels of `types` when given)."""
    wanted = frozenset(types) if types is not None else None
    found: dict[str, str] = {}
    for entity in output.entities:
        found.setdefault(text_key(entity.name), entity.type)
    typing = Typing()
    for gold in case.entities:
        if wanted is not None and not gold.types & wanted:
            continue
        typing.total += 1
        got = [found[name] for name in gold.names if name in found]
        if any(entity_type in gold.types for entity_type in got):
            typing.correct += 1
        else:
            shown = "|".join(sorted(gold.names))
            typing.wrong_items.append(f"{case.id}: {shown} ({'|'.join(sorted(gold.types))}) got {got or 'nothing'}")
    return typing


@dataclass(slots=True)
class ChatScore:
    cases: int = 0
    relations: Tally = field(default_factory=Tally)
    typing_target: Typing = field(default_factory=Typing)
    typing_all: Typing = field(default_factory=Typing)


def run_chat_heuristic(case: ChatCase) -> ExtractionOutput:
    """The offline extractor on one session, as the semantic-extractor service calls it."""
    return heuristic_extract(case.text, case.language, user_speaker_names=case.user_speaker_names)


def evaluate_chat(cases: Sequence[ChatCase], splits: Iterable[str]) -> dict[tuple[str, str], ChatScore]:
    """Scores keyed by (language, split) for the chosen splits, plus ("all", split) over both languages."""
    chosen = frozenset(splits)
    groups: dict[tuple[str, str], ChatScore] = {}
    for case in cases:
        if case.split not in chosen:
            continue
        output = run_chat_heuristic(case)
        relations = score_relations(case, predicted_triples(case, output))
        target = score_typing(case, output, TARGET_TYPES)
        every = score_typing(case, output)
        for key in ((case.language, case.split), ("all", case.split)):
            group = groups.setdefault(key, ChatScore())
            group.cases += 1
            group.relations.add(relations)
            group.typing_target.add(target)
            group.typing_all.add(every)
    return groups


def chat_rows(groups: dict[tuple[str, str], ChatScore]) -> list[dict[str, object]]:
    return [
        {
            "language": language,
            "split": split,
            "cases": group.cases,
            "relation_precision": round(group.relations.precision, 4),
            "relation_recall": round(group.relations.recall, 4),
            "typing_accuracy_person_pet_organisation": round(group.typing_target.accuracy, 4),
            "typing_accuracy_all": round(group.typing_all.accuracy, 4),
        }
        for (language, split), group in sorted(groups.items())
    ]


def chat_errors(groups: dict[tuple[str, str], ChatScore]) -> list[tuple[str, list[str]]]:
    """Per split, the wrong and missed relations and the wrongly typed entities (both languages)."""
    sections: list[tuple[str, list[str]]] = []
    for (language, split), group in sorted(groups.items()):
        if language != "all":
            continue
        sections.append((f"{split} wrong relations", group.relations.false_positive_items))
        sections.append((f"{split} missed relations", group.relations.missed_items))
        sections.append((f"{split} wrongly typed entities", group.typing_all.wrong_items))
    return sections


# --------------------------------------------------------------------------------------------------
# `tiermem eval extraction --set chat`


def chat_command(fixtures: Path | None, split: str, *, errors: bool, as_json: bool) -> None:
    """Print the chat set's scores on `split` ("dev", "test" or "all")."""
    console = Console()
    if split not in (*CHAT_SPLITS, "all"):
        console.print(f"[red]--split must be one of {', '.join((*CHAT_SPLITS, 'all'))}, got {split!r}[/red]")
        raise typer.Exit(2)
    try:
        cases = load_chat_cases(fixtures or DEFAULT_CHAT_FIXTURES)
    except FixtureError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    groups = evaluate_chat(cases, CHAT_SPLITS if split == "all" else (split,))
    rows = chat_rows(groups)
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    table = Table(title="Offline extraction on labelled chat sessions", box=box.SIMPLE_HEAD, pad_edge=False)
    # "type P/P/O": person, pet and organisation labels found with the right type; "type all": every label.
    for column in ("lang", "split", "n", "rel P", "rel R", "type P/P/O", "type all"):
        table.add_column(column, justify="left" if column in {"lang", "split"} else "right")
    for row in rows:
        table.add_row(
            str(row["language"]),
            str(row["split"]),
            str(row["cases"]),
            f"{row['relation_precision']:.3f}",
            f"{row['relation_recall']:.3f}",
            f"{row['typing_accuracy_person_pet_organisation']:.3f}",
            f"{row['typing_accuracy_all']:.3f}",
        )
    console.print(table)
    if errors:
        for title, items in chat_errors(groups):
            console.print(f"[bold]{title}[/bold] ({len(items)})")
            for item in items:
                console.print(f"  {item}", markup=False)
