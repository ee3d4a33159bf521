"""Importance in recall ranking (services/recall_api/retrieval/ranking.py): one weight of relevance, recency and
importance for L0 and L1; an importance weight of 0 is exactly the order (and weights) without it."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from services.common.domain.facts import Fact, FactProvenance, decay, make_fact_id
from services.common.domain.importance import text_importance
from services.common.stores.episodes import Episode
from services.recall_api.retrieval import ranking
from services.recall_api.retrieval.ranking import Candidate
from services.recall_api.settings import RecallApiSettings

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _episode(episode_id: str, relevance: float, days_ago: float, importance: float) -> Candidate:
    episode = Episode(
        episode_id=episode_id,
        session_id=f"s-{episode_id}",
        agent_id="agent",
        occurred_at=NOW - timedelta(days=days_ago),
        summary=episode_id,
        importance=importance,
    )
    return ranking.episode_candidate(episode, relevance)


def _fact(value: str, relevance: float, days_ago: float, importance: float, status: str = "confirmed") -> Candidate:
    when = NOW - timedelta(days=days_ago)
    fact = Fact(
        fact_id=make_fact_id("acme", "alice", "personal", "user", "likes", value),
        tenant_id="acme",
        user_id="alice",
        scope="personal",
        subject="user",
        attribute="likes",
        value=value,
        text=f"The user likes {value}.",
        language="en",
        volatility="medium",
        status=status,  # type: ignore[arg-type]
        evidence_count=1,
        single_valued=False,
        valid_from=when,
        provenance=[FactProvenance(episode_id="ep", occurred_at=when, source="extraction")],
        created_at=when,
        updated_at=when,
        importance=importance,
    )
    return Candidate(id=fact.fact_id, kind="fact", relevance=relevance, fact=fact)


def _legacy_weight(candidate: Candidate, half_life: float, recency_weight: float) -> float:
    """The ranking weight as it was before importance (frozen here on purpose)."""
    if candidate.fact is not None:
        observed = max(p.occurred_at for p in candidate.fact.provenance)
        return candidate.relevance * decay((NOW - observed).total_seconds() / 86400.0, candidate.fact.volatility)
    assert candidate.episode is not None
    age = max((NOW - candidate.episode.occurred_at).total_seconds() / 86400.0, 0.0)
    factor: float = 0.5 ** (age / half_life)
    return candidate.relevance * (1.0 - recency_weight + recency_weight * factor)


def _random_candidates(seed: int, count: int) -> list[Candidate]:
    rng = random.Random(seed)
    candidates = []
    for n in range(count):
        relevance = round(rng.uniform(0.0, 1.0), 2)  # ties on purpose
        days = rng.choice([0, 1, 30, 180, 400])
        importance = rng.random()
        if n % 3:
            candidates.append(_episode(f"ep-{n:03d}", relevance, days, importance))
        else:
            status = rng.choice(["confirmed", "tentative"])
            candidates.append(_fact(f"value {n}", relevance, days, importance, status))
    return candidates


@pytest.mark.parametrize("seed", range(5))
def test_importance_weight_zero_reproduces_the_order_and_weights_without_importance(seed: int) -> None:
    candidates = _random_candidates(seed, 120)
    ranked = ranking.rank_candidates(
        candidates, now=NOW, min_score=0.25, episode_half_life_days=180, episode_recency_weight=0.2, importance_weight=0
    )
    default_call = ranking.rank_candidates(candidates, now=NOW, min_score=0.25, episode_half_life_days=180)
    assert ranked == default_call
    # The order before importance existed: tier, then relevance × recency, then relevance, then id.
    passed = [c for c in candidates if c.relevance >= 0.25]
    expected = sorted(
        passed,
        key=lambda c: (
            0 if c.fact is None or c.fact.status == "confirmed" else 1,
            -_legacy_weight(c, 180, 0.2),
            -c.relevance,
            c.id,
        ),
    )
    assert [r.candidate.id for r in ranked] == [c.id for c in expected]
    assert [r.weight for r in ranked] == [_legacy_weight(c, 180, 0.2) for c in expected]  # to the last bit


def test_importance_orders_similarly_relevant_memories_but_never_passes_the_gate() -> None:
    decision = _episode("decision", 0.50, 10, text_importance("We decided to move the launch to June 1."))
    chit_chat = _episode("chit-chat", 0.52, 10, text_importance("haha how are you?"))
    without = ranking.rank_candidates([decision, chit_chat], now=NOW, min_score=0.3, episode_half_life_days=180)
    assert [r.candidate.id for r in without] == ["chit-chat", "decision"]
    weighted = ranking.rank_candidates(
        [decision, chit_chat], now=NOW, min_score=0.3, episode_half_life_days=180, importance_weight=0.2
    )
    assert [r.candidate.id for r in weighted] == ["decision", "chit-chat"]
    # Bounded: importance cannot lift a clearly less relevant memory over a clearly more relevant one,
    # and an important memory under the gate stays out.
    relevant = _episode("relevant", 0.8, 10, 0.0)
    below_gate = _episode("important-but-irrelevant", 0.29, 10, 1.0)
    kept = ranking.rank_candidates(
        [decision, relevant, below_gate], now=NOW, min_score=0.3, episode_half_life_days=180, importance_weight=0.2
    )
    assert [r.candidate.id for r in kept] == ["relevant", "decision"]


def test_facts_weigh_importance_with_their_volatility_decay() -> None:
    allergy = _fact("peanut allergy", 0.6, 30, importance=0.95)
    trivia = _fact("a funny cat video", 0.62, 30, importance=0.1)
    ranked = ranking.rank_candidates(
        [allergy, trivia], now=NOW, min_score=0.3, episode_half_life_days=180, importance_weight=0.3
    )
    assert [r.candidate.fact.value for r in ranked if r.candidate.fact] == ["peanut allergy", "a funny cat video"]
    expected = 0.6 * decay(30, "medium") * (1 - 0.3 + 0.3 * 0.95)
    assert ranked[0].weight == pytest.approx(expected)


def test_the_weight_is_a_recall_setting_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RecallApiSettings().importance_weight == 0.0  # the better one in the LoCoMo ablation
    monkeypatch.setenv("TIERMEM_IMPORTANCE_WEIGHT", "0.2")
    assert RecallApiSettings().importance_weight == pytest.approx(0.2)
    monkeypatch.setenv("TIERMEM_IMPORTANCE_WEIGHT", "1.5")
    with pytest.raises(ValueError, match="importance_weight"):
        RecallApiSettings()
