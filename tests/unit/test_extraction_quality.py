"""Offline extraction quality on the hand-labelled set (tests/fixtures/extraction/): the scorer's
matching rules, the targets of issue 17 per language and on the splits written without looking at the
extractor, no time word or generic noun as an entity, and the `tiermem eval extraction` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from services.semantic_extractor.heuristic import heuristic_extract
from services.semantic_extractor.schema import ExtractedEntity, ExtractedFact, ExtractionOutput
from tiermem_lab.evaluation.extraction import (
    ExtractionCase,
    GroupScore,
    evaluate,
    load_cases,
    load_never_entities,
    predicted_entities,
    predicted_facts,
    score_entities,
    score_facts,
    subject_key,
    text_key,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "extraction"

FACT_PRECISION, FACT_RECALL, ENTITY_PRECISION = 0.9, 0.7, 0.85


def _case(**fields: object) -> ExtractionCase:
    return ExtractionCase.model_validate({"id": "t1", "language": "en", "split": "dev", "text": "x", **fields})


def _output(facts: list[tuple[str, str, str]] = (), entities: list[tuple[str, str]] = ()) -> ExtractionOutput:  # type: ignore[assignment]
    return ExtractionOutput(
        facts=[ExtractedFact(subject=s, attribute=a, value=v, text=f"{s} {a} {v}") for s, a, v in facts],
        entities=[ExtractedEntity(name=n, type=t) for n, t in entities],  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def scores() -> dict[tuple[str, str], GroupScore]:
    return evaluate(load_cases(FIXTURES), load_never_entities(FIXTURES))


# --------------------------------------------------------------------------------------------------
# The scorer: lenient on spelling, strict on meaning


def test_spelling_differences_still_match() -> None:
    case = _case(
        facts=[["sister", "lives_in", "Busan"], ["user", "diet", "gluten-free"], ["여동생", "allergy", "땅콩"]],
        entities=[["Seoul National University", "organisation"]],
    )
    output = _output(
        facts=[
            ("my sister", "Lives in", "busan."),
            ("User", "diet", "Gluten free"),
            ("제 여동생", "allergic_to", "땅콩이"),
        ],
        entities=[("seoul national university", "organisation")],
    )
    facts = score_facts(case, predicted_facts(output))
    entities = score_entities(case, predicted_entities(output))
    assert (facts.true_positives, facts.false_positives, facts.false_negatives) == (3, 0, 0)
    assert (entities.precision, entities.recall) == (1.0, 1.0)
    assert (
        subject_key("저희 팀장님은") == "팀장"
        and subject_key("나") == "user"
        and text_key("부산으로") == text_key("부산")
    )


def test_a_different_meaning_is_wrong_twice() -> None:
    """Wrong subject, attribute or type: a false positive and a miss, never a hit."""
    case = _case(facts=[["sister", "lives_in", "Busan"]], entities=[["DGIA", "project"]])
    for fact in [("user", "lives_in", "Busan"), ("sister", "birthplace", "Busan"), ("sister", "lives_in", "Seoul")]:
        tally = score_facts(case, predicted_facts(_output(facts=[fact])))
        assert (tally.true_positives, tally.false_positives, tally.false_negatives) == (0, 1, 1), fact
    typed = score_entities(case, predicted_entities(_output(entities=[("DGIA", "other")])))
    assert (typed.true_positives, typed.false_positives, typed.false_negatives) == (0, 1, 1)
    untyped = score_entities(case, predicted_entities(_output(entities=[("DGIA", "other")])), typed=False)
    assert untyped.true_positives == 1


def test_optional_items_are_neither_hits_nor_errors_and_extras_are_errors() -> None:
    case = _case(
        facts=[], entities=[], optional_facts=[["Jenny", "lives_in", "Vancouver"]], optional_entities=["Korean"]
    )
    output = _output(
        facts=[("Jenny", "lives_in", "Vancouver"), ("user", "diet", "vegetarian")],
        entities=[("Korean", "other"), ("KST", "other")],
    )
    facts = score_facts(case, predicted_facts(output))
    entities = score_entities(case, predicted_entities(output))
    assert (facts.true_positives, facts.false_positives, facts.false_negatives) == (0, 1, 0)
    assert (entities.true_positives, entities.false_positives) == (0, 1)


# --------------------------------------------------------------------------------------------------
# The labelled set and the targets


def test_the_labelled_set_is_big_enough_and_keeps_unseen_splits() -> None:
    cases = load_cases(FIXTURES)
    for language in ("en", "ko"):
        mine = [case for case in cases if case.language == language]
        assert len(mine) >= 100, language
        unseen = [case for case in mine if case.split in {"heldout", "blind", "fresh"}]
        assert len(unseen) >= 0.3 * len(mine), language
    assert len({case.id for case in cases}) == len(cases)


@pytest.mark.parametrize("language", ["en", "ko"])
@pytest.mark.parametrize("split", ["all", "heldout", "blind", "fresh"])
def test_extraction_meets_the_targets(scores: dict[tuple[str, str], GroupScore], language: str, split: str) -> None:
    group = scores[(language, split)]
    report = (
        f"{language}/{split}: wrong facts {group.facts.false_positive_items}, "
        f"wrong entities {group.entities.false_positive_items}"
    )
    assert group.facts.precision >= FACT_PRECISION, report
    assert group.facts.recall >= FACT_RECALL, f"{language}/{split}: missed {group.facts.missed_items}"
    assert group.entities.precision >= ENTITY_PRECISION, report


@pytest.mark.parametrize("language", ["en", "ko"])
def test_no_time_word_or_generic_noun_becomes_an_entity(
    scores: dict[tuple[str, str], GroupScore], language: str
) -> None:
    assert scores[(language, "all")].forbidden_entities == []


def test_time_words_and_generic_nouns_are_never_entities_in_any_sentence() -> None:
    """Beyond the fixture sentences: each listed word in sentences of several shapes."""
    never = json.loads((FIXTURES / "never_entities.json").read_text(encoding="utf-8"))
    templates = {
        "en": ["We talked about {w} yesterday.", "{w} was fine, I guess.", "I mentioned {w} to Minji."],
        "ko": ["{w}에 대해 얘기했어요.", "{w}는 괜찮았어요.", "민지한테 {w} 얘기를 했어요."],
    }
    leaked = [
        (text, entity.name)
        for language, words in ((lang, never[lang]) for lang in ("en", "ko"))
        for word in words
        for text in (template.format(w=word) for template in templates[language])
        for entity in heuristic_extract(text, language).entities
        if text_key(entity.name) == text_key(word)
    ]
    assert leaked == []


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("I have a dog allergy.", "en"),
        ("I'm a bit tired.", "en"),
        ("She is the manager of the team.", "en"),
        ("I was born in 1990.", "en"),
        ("My kids go to school nearby.", "en"),
        ("I'm going to Osaka next week.", "en"),
        ("I used to be a teacher.", "en"),
        ("I'm not a teacher.", "en"),
        ("If I were a lawyer, I'd sue them.", "en"),
        ("I'm 5 minutes away.", "en"),
        ("저는 개발자가 아니에요.", "ko"),
        ("저는 개발자였어요.", "ko"),
        ("개발자가 되고 싶어요.", "ko"),
        ("그 사람은 의사예요.", "ko"),
        ("저는 결혼 안 했어요.", "ko"),
        ("결혼하면 서울에 살 거예요.", "ko"),
        ("저는 영어를 못 해요.", "ko"),
        ("영어 할 줄 아세요?", "ko"),
    ],
)
def test_the_new_rules_assert_nothing_where_nothing_is_asserted(text: str, language: str) -> None:
    """Sentences outside the labelled set, shaped like the rules' triggers: negated, past, wished-for,
    hypothetical, about someone unnamed, or a look-alike ("a dog allergy" is no pet)."""
    facts = {(f.subject, f.attribute, f.value) for f in heuristic_extract(text, language).facts}
    assert facts - {("user", "allergy", "dog")} == set()


# --------------------------------------------------------------------------------------------------
# The command


def test_eval_extraction_command_prints_scores_per_language_and_split() -> None:
    result = CliRunner().invoke(app, ["eval", "extraction", "--fixtures", str(FIXTURES), "--json"])
    assert result.exit_code == 0, result.output
    rows = {(row["language"], row["split"]): row for row in json.loads(result.output)}
    assert {("en", "all"), ("ko", "all"), ("en", "heldout"), ("ko", "blind")} <= set(rows)
    assert rows[("ko", "all")]["fact_precision"] >= FACT_PRECISION


def test_eval_extraction_command_rejects_a_missing_or_broken_fixture(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", "extraction", "--fixtures", str(tmp_path)])
    assert result.exit_code == 2 and "no labelled cases" in result.output
    (tmp_path / "dev_en.json").write_text(
        '[{"id": "x", "text": "hi", "facts": [["user", "lives_in"]], "entities": []}]'
    )
    result = CliRunner().invoke(app, ["eval", "extraction", "--fixtures", str(tmp_path)])
    assert result.exit_code == 2 and "dev_en.json" in result.output
