"""L1's session-level evidence (services/recall_api/retrieval/session_evidence.py): rank fusion of an
episode's summary, passage and fact hits instead of the larger of two incomparable scores, with the
hybrid scores kept as the scale; and the bounded boost of a session whose time the query names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.common.domain.facts import Fact, FactProvenance, make_fact_id
from services.common.stores.episodes import Episode, EpisodeHit, PassageHit
from services.common.stores.facts import FactHit, StoredFact
from services.recall_api.retrieval import ranking
from services.recall_api.retrieval.query_time import TimeWindow
from services.recall_api.retrieval.session_evidence import (
    EpisodeEvidence,
    EvidencePolicy,
    aggregate_episode_evidence,
    boost_in_time,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
RRF = EvidencePolicy(mode="rrf")


def _episode(episode_id: str, days_ago: float = 3.0) -> Episode:
    return Episode(
        episode_id=episode_id,
        session_id=f"s-{episode_id}",
        agent_id="agent",
        occurred_at=NOW - timedelta(days=days_ago),
        summary=f"summary of {episode_id}",
    )


def _summary(episode_id: str, score: float) -> EpisodeHit:
    return EpisodeHit(_episode(episode_id), score)


def _passage(episode_id: str, index: int, score: float) -> PassageHit:
    return PassageHit(
        _episode(episode_id).passage(index, f"{episode_id} passage {index}", first_turn=0, last_turn=3), score
    )


def _fact_hit(value: str, episode_id: str, score: float) -> FactHit:
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
        status="confirmed",
        evidence_count=1,
        single_valued=False,
        valid_from=NOW,
        provenance=[FactProvenance(episode_id=episode_id, occurred_at=NOW, source="extraction")],
        created_at=NOW,
        updated_at=NOW,
    )
    return FactHit(StoredFact(fact), score)


def _order(evidence: dict[str, EpisodeEvidence]) -> list[str]:
    return sorted(evidence, key=lambda eid: -evidence[eid].relevance)


def test_an_episode_high_in_both_rankings_beats_one_high_in_a_single_one() -> None:
    # "loud" has the highest score of all, but only in the passage collection; "both" is second in
    # the summary ranking and second in the passage ranking. Max takes "loud"; rank fusion "both".
    summaries = [_summary("quiet", 0.50), _summary("both", 0.45), _summary("other", 0.30)]
    passages = [_passage("loud", 0, 0.80), _passage("both", 0, 0.60), _passage("other", 0, 0.20)]
    by_max = aggregate_episode_evidence(summaries, passages, [], EvidencePolicy(mode="max"))
    assert _order(by_max)[0] == "loud"
    fused = aggregate_episode_evidence(summaries, passages, [], RRF)
    assert _order(fused)[0] == "both"


def test_rank_fusion_keeps_the_hybrid_scores_and_only_reassigns_them() -> None:
    summaries = [_summary("quiet", 0.50), _summary("both", 0.45), _summary("other", 0.30)]
    passages = [_passage("loud", 0, 0.80), _passage("both", 0, 0.60), _passage("other", 0, 0.20)]
    by_max = aggregate_episode_evidence(summaries, passages, [], EvidencePolicy(mode="max"))
    fused = aggregate_episode_evidence(summaries, passages, [], RRF)
    assert sorted(e.relevance for e in fused.values()) == sorted(e.relevance for e in by_max.values())
    assert fused["both"].relevance == 0.80
    # The passage that stands for an episode is still its best passage, found where it was.
    assert fused["loud"].via_passage and fused["loud"].passage_text == "loud passage 0"


def test_a_second_matching_passage_of_a_session_adds_support_only_when_weighed() -> None:
    passages = [_passage("one", 0, 0.70), _passage("two", 0, 0.65), _passage("two", 1, 0.64)]
    assert _order(aggregate_episode_evidence([], passages, [], RRF))[0] == "one"
    second = EvidencePolicy(mode="rrf", second_passage=1.0)
    assert _order(aggregate_episode_evidence([], passages, [], second))[0] == "two"


def test_a_matching_fact_votes_for_the_session_it_came_from() -> None:
    passages = [_passage("one", 0, 0.70), _passage("two", 0, 0.65)]
    facts = [_fact_hit("tea", "two", 0.9)]
    assert _order(aggregate_episode_evidence([], passages, facts, RRF))[0] == "one"
    voting = EvidencePolicy(mode="rrf", fact_vote=1.0)
    fused = aggregate_episode_evidence([], passages, facts, voting)
    assert _order(fused)[0] == "two"
    # A fact supports a session the search reached; it does not bring in another one.
    only_fact = aggregate_episode_evidence([], passages, [_fact_hit("tea", "elsewhere", 0.9)], voting)
    assert set(only_fact) == {"one", "two"}


def test_max_mode_is_the_best_hit_of_each_episode() -> None:
    summaries = [_summary("a", 0.4), _summary("b", 0.7)]
    passages = [_passage("a", 0, 0.6), _passage("b", 0, 0.3)]
    found = aggregate_episode_evidence(summaries, passages, [], EvidencePolicy())
    assert {eid: e.relevance for eid, e in found.items()} == {"a": 0.6, "b": 0.7}
    assert found["a"].via_passage and not found["b"].via_passage


def test_a_session_in_the_time_the_query_names_gains_a_bounded_boost() -> None:
    in_may = ranking.episode_candidate(_episode("may", days_ago=(NOW - datetime(2026, 5, 8, tzinfo=UTC)).days), 0.5)
    in_april = ranking.episode_candidate(_episode("april", days_ago=40), 0.55)
    high = ranking.episode_candidate(_episode("high", days_ago=24), 0.95)
    fact = ranking.fact_candidate(_fact_hit("tea", "may", 0.5).stored, 0.5)
    window = [TimeWindow(month=5)]
    boosted = {c.id: c.relevance for c in boost_in_time([in_may, in_april, high, fact], window, 0.1)}
    assert boosted["may"] == 0.6 and boosted["april"] == 0.55
    assert boosted["high"] == 1.0  # never past 1: the score stays a relevance
    assert boosted[fact.id] == 0.5
    assert boost_in_time([in_may], [], 0.1) == [in_may]
    assert boost_in_time([in_may], window, 0.0) == [in_may]


def test_support_adds_bounded_shares_of_a_sessions_other_evidence() -> None:
    # "twice" is found by its summary and a passage, "once" by one slightly better passage.
    summaries = [_summary("twice", 0.60)]
    passages = [_passage("once", 0, 0.62), _passage("twice", 0, 0.58)]
    assert _order(aggregate_episode_evidence(summaries, passages, [], EvidencePolicy()))[0] == "once"
    support = EvidencePolicy(mode="support", second_passage=0.2)
    found = aggregate_episode_evidence(summaries, passages, [], support)
    assert _order(found)[0] == "twice"
    assert found["twice"].relevance == 0.60 + 0.2 * 0.58 and found["once"].relevance == 0.62
    # A fact of the session adds its share; nothing passes 1.
    voting = EvidencePolicy(mode="support", fact_vote=0.5)
    strong = aggregate_episode_evidence([_summary("a", 0.9)], [], [_fact_hit("tea", "a", 0.8)], voting)
    assert strong["a"].relevance == 1.0
