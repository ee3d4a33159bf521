"""The chat-style extraction set (tests/fixtures/extraction/chat/) and `tiermem eval extraction --set chat`:
the scorer's matching rules, the set's shape (40+ sessions, both languages, split by session), the
command's output and errors, and the issue-50 targets on the held-out split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from services.semantic_extractor.schema import ExtractedEntity, ExtractedFact, ExtractedRelation, ExtractionOutput
from tiermem_lab.evaluation.extraction import FixtureError
from tiermem_lab.evaluation.extraction_chat import (
    ChatCase,
    evaluate_chat,
    load_chat_cases,
    predicted_triples,
    score_relations,
    score_typing,
)

CHAT = Path(__file__).resolve().parents[1] / "fixtures" / "extraction" / "chat"
RELATION_PRECISION, RELATION_RECALL, TYPING = 0.85, 0.70, 0.90


def _case(**fields: object) -> ChatCase:
    base: dict[str, object] = {
        "id": "c1",
        "language": "en",
        "split": "dev",
        "lines": ["x"],
        "relations": [],
        "entities": [],
    }
    return ChatCase.model_validate({**base, **fields})


def test_relations_match_across_facts_and_edges_and_spellings() -> None:
    case = _case(
        relations=[["bori", "age", "3"], ["user", "owns", "bori|dog"], ["atlas|user", "chose", "postgres 16"]],
        user_speaker_names=["Mina"],
    )
    output = ExtractionOutput(
        relations=[
            ExtractedRelation(source="Mina", type="owns", target="Bori"),
            ExtractedRelation(source="Atlas", type="chose", target="Postgres 16"),
            ExtractedRelation(source="Atlas", type="related_to", target="Mina"),
        ],
        facts=[
            ExtractedFact(subject="Bori", attribute="age", value="3", text="t"),
            ExtractedFact(subject="user", attribute="has_pet", value="dog", text="t"),  # same label: ignored
            ExtractedFact(subject="user", attribute="job_title", value="nurse", text="t"),  # outside the vocabulary
        ],
    )
    tally = score_relations(case, predicted_triples(case, output))
    assert (tally.true_positives, tally.false_positives, tally.false_negatives) == (3, 0, 0)


def test_a_wrong_subject_or_relation_is_a_false_positive_and_a_miss() -> None:
    case = _case(relations=[["yuna", "works_at", "naver"]])
    output = ExtractionOutput(facts=[ExtractedFact(subject="user", attribute="employer", value="Naver", text="t")])
    tally = score_relations(case, predicted_triples(case, output))
    assert (tally.true_positives, tally.false_positives, tally.false_negatives) == (0, 1, 1)


def test_typing_counts_a_missed_entity_as_wrong() -> None:
    case = _case(entities=[["bori", "pet"], ["priya", "person"], ["atlas", "project"]])
    output = ExtractionOutput(entities=[ExtractedEntity(name="Bori", type="pet"), ExtractedEntity(name="Atlas")])
    target = score_typing(case, output, {"person", "pet", "organisation"})
    assert (target.correct, target.total) == (1, 2)
    assert score_typing(case, output).accuracy == pytest.approx(1 / 3)


def test_the_set_has_forty_sessions_in_both_languages_split_by_session() -> None:
    cases = load_chat_cases(CHAT)
    assert len(cases) >= 40
    assert {c.language for c in cases} == {"en", "ko"}
    assert {c.split for c in cases} == {"dev", "test"}
    assert len({c.id for c in cases}) == len(cases), "a session is in one split only"
    assert all(len(c.lines) >= 1 and (c.relations or c.entities) for c in cases)


def test_a_relation_outside_the_vocabulary_is_refused() -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        _case(relations=[["a", "related_to", "b"]])


def test_eval_extraction_chat_prints_relation_and_typing_scores() -> None:
    result = CliRunner().invoke(app, ["eval", "extraction", "--set", "chat", "--split", "dev", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {(r["language"], r["split"]) for r in rows} == {("en", "dev"), ("ko", "dev"), ("all", "dev")}
    assert all(0.0 <= r["relation_precision"] <= 1.0 and r["cases"] > 0 for r in rows)
    table = CliRunner().invoke(app, ["eval", "extraction", "--set", "chat", "--errors"])
    assert table.exit_code == 0 and "rel P" in table.output and "dev missed relations" in table.output


@pytest.mark.parametrize("args", [["--set", "chats"], ["--set", "chat", "--split", "heldout"]])
def test_eval_extraction_chat_refuses_an_unknown_set_or_split(args: list[str]) -> None:
    result = CliRunner().invoke(app, ["eval", "extraction", *args])
    assert result.exit_code == 2


def test_eval_extraction_chat_refuses_a_broken_set(tmp_path: Path) -> None:
    (tmp_path / "dev_en.json").write_text('[{"id": "x", "lines": ["a"], "relations": [["a", "b"]]}]')
    result = CliRunner().invoke(app, ["eval", "extraction", "--set", "chat", "--fixtures", str(tmp_path)])
    assert result.exit_code == 2 and "dev_en.json" in result.output
    with pytest.raises(FixtureError):
        load_chat_cases(tmp_path / "missing")


def test_held_out_split_meets_the_issue_targets() -> None:
    scores = evaluate_chat(load_chat_cases(CHAT), ["test"])[("all", "test")]
    assert scores.relations.precision >= RELATION_PRECISION, scores.relations.false_positive_items
    assert scores.relations.recall >= RELATION_RECALL, scores.relations.missed_items
    assert scores.typing_target.accuracy >= TYPING, scores.typing_target.wrong_items
