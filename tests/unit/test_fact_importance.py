"""A fact's importance through the write policy (domain/facts.py) and the extraction schema: the model's
rating when usable, else the heuristic on the fact's sentence; the highest observation wins, whatever
the order; an explicit API save is never unimportant; old points read the default."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from services.common.domain.facts import Fact, FactCandidate, FactProvenance, FactSource, plan_fact_write
from services.common.domain.importance import API_SAVE_FLOOR, DEFAULT_IMPORTANCE, text_importance
from services.common.stores.facts import read_stored_fact
from services.semantic_extractor.schema import parse_extraction_output, to_fact_candidates

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _candidate(
    day: int, importance: float | None, *, source: FactSource = "extraction", text: str = ""
) -> FactCandidate:
    return FactCandidate(
        tenant_id="t1",
        user_id="u1",
        scope="personal",
        subject="user",
        attribute="likes",
        value="hiking",
        text=text or "The user likes hiking.",
        language="en",
        provenance=FactProvenance(
            episode_id=f"ep-{day}", session_id=f"s-{day}", occurred_at=T0 + timedelta(days=day), source=source
        ),
        importance=importance,
    )


def _write_all(candidates: list[FactCandidate]) -> Fact:
    stored: dict[str, Fact] = {}
    for candidate in candidates:
        for fact in plan_fact_write(candidate, list(stored.values()), now=NOW).upserts:
            stored[fact.fact_id] = fact
    (fact,) = stored.values()
    return fact


def test_the_most_important_observation_wins_in_any_delivery_order() -> None:
    candidates = [_candidate(1, 0.3), _candidate(2, 0.9), _candidate(3, None)]
    results = {_write_all(list(order)).importance for order in itertools.permutations(candidates)}
    assert results == {0.9}


def test_unrated_candidates_are_scored_from_their_sentence_and_api_saves_have_a_floor() -> None:
    assert _write_all([_candidate(1, None)]).importance == pytest.approx(text_importance("The user likes hiking."))
    chit_chat = _candidate(1, None, source="api", text="The user said hello.")
    assert text_importance("The user said hello.") < API_SAVE_FLOOR
    assert _write_all([chit_chat]).importance == API_SAVE_FLOOR


def test_a_replayed_candidate_changes_nothing() -> None:
    fact = _write_all([_candidate(1, 0.4)])
    assert plan_fact_write(_candidate(1, 0.99), [fact], now=NOW).is_noop  # the same observation again


def test_a_fact_point_from_before_importance_reads_the_default() -> None:
    payload = _write_all([_candidate(1, 0.8)]).model_dump(mode="json")
    del payload["importance"]
    stored = read_stored_fact("p1", payload)
    assert stored is not None and stored.fact.importance == DEFAULT_IMPORTANCE


def test_extraction_output_carries_a_usable_rating_and_drops_a_malformed_one() -> None:
    output, problems = parse_extraction_output(
        {
            "facts": [
                {
                    "subject": "user",
                    "attribute": "allergic_to",
                    "value": "peanuts",
                    "text": "The user is allergic to peanuts.",
                    "importance": 9,
                },
                {
                    "subject": "user",
                    "attribute": "likes",
                    "value": "tea",
                    "text": "The user likes tea.",
                    "importance": "a lot",
                },
                {"subject": "user", "attribute": "likes", "value": "jazz", "text": "The user likes jazz."},
            ]
        }
    )
    assert problems == []  # a bad rating never costs the fact
    provenance = FactProvenance(episode_id="ep", occurred_at=T0, source="extraction")
    candidates = to_fact_candidates(
        output, tenant_id="t1", user_id="u1", scope="personal", language="en", provenance=provenance
    )
    assert [c.importance for c in candidates] == [pytest.approx(0.9), None, None]
    assert candidates[1].scored_importance() == text_importance("The user likes tea.")
