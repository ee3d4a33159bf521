"""L1's session-level evidence, pure: an episode is found through its summary, its passages and the
facts its session gave; this module combines those into one relevance per episode.

The episode-summary and passage collections score on different scales (a summary is a short,
reworded text; a passage is raw chat), so the larger of the two scores says more about which
collection a hit came from than about the session. Reciprocal rank fusion compares ranks instead:
an episode ranked high in both lists beats one ranked high in one. A second matching passage of the
same session and a matching fact whose provenance is the session add bounded support of their own.

The fused order is then given the episodes' own best scores, sorted: the k-th episode of the fused
order receives the k-th best hybrid score. So the set of relevances (what the L1 floor and the
response's `score` mean) is the one the hybrid search produced, and facts ranked beside episodes
keep competing on that one scale."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from services.common.stores.episodes import EpisodeHit, PassageHit
from services.common.stores.facts import FactHit
from services.recall_api.retrieval.query_time import TimeWindow, in_windows
from services.recall_api.retrieval.ranking import Candidate, merge_episode_hits

EvidenceMode = Literal["max", "rrf", "support"]


@dataclass(frozen=True, slots=True)
class EvidencePolicy:
    """How an episode's hits are combined. `mode` "max": the best hit's score (L0's view); "rrf":
    rank fusion of the summary ranking, the passage ranking and the fact ranking, with `rrf_k` the
    usual damping constant; "support": the best hit's score plus bounded shares of the session's
    other evidence (its next-best summary or passage hit, its best fact), at most 1. In rank fusion
    `summary` weighs the summary ranking against the passage ranking (1), `second_passage` the rank
    of a session's second-best passage, `fact_vote` the rank of its best fact; in "support" the last
    two weigh the next-best hit's and the best fact's scores (0 turns any of them off)."""

    mode: EvidenceMode = "max"
    rrf_k: float = 60.0
    summary: float = 1.0
    second_passage: float = 0.0
    fact_vote: float = 0.0


@dataclass(frozen=True, slots=True)
class EpisodeEvidence:
    relevance: float
    via_passage: bool
    passage_text: str | None


def _episode_ranks(episode_hits: Iterable[EpisodeHit]) -> dict[str, int]:
    ranks: dict[str, int] = {}
    ordered = sorted(episode_hits, key=lambda h: (-h.score, h.episode.episode_id))
    for hit in ordered:
        ranks.setdefault(hit.episode.episode_id, len(ranks) + 1)
    return ranks


def _passage_ranks(passage_hits: Iterable[PassageHit]) -> dict[str, list[int]]:
    """episode id → the ranks (1-based, over all passages) of its passages, best first."""
    ranks: dict[str, list[int]] = {}
    ordered = sorted(
        (h for h in passage_hits if h.passage.episode_id),
        key=lambda h: (-h.score, h.passage.episode_id, h.passage.index),
    )
    for position, hit in enumerate(ordered, start=1):
        ranks.setdefault(hit.passage.episode_id, []).append(position)
    return ranks


def _fact_ranks(fact_hits: Iterable[FactHit]) -> dict[str, int]:
    """episode id → the rank of the best fact whose provenance names that episode."""
    ranks: dict[str, int] = {}
    ordered = sorted(fact_hits, key=lambda h: (-h.score, h.stored.fact_id))
    for position, hit in enumerate(ordered, start=1):
        for provenance in hit.stored.fact.provenance:
            ranks.setdefault(provenance.episode_id, position)
    return ranks


def fused_support(
    episode_ids: Iterable[str],
    episode_hits: Sequence[EpisodeHit],
    passage_hits: Sequence[PassageHit],
    fact_hits: Sequence[FactHit],
    policy: EvidencePolicy,
) -> dict[str, float]:
    """episode id → its reciprocal-rank-fusion support (larger is better)."""
    summary = _episode_ranks(episode_hits)
    passages = _passage_ranks(passage_hits)
    facts = _fact_ranks(fact_hits) if policy.fact_vote > 0 else {}
    k = policy.rrf_k
    support: dict[str, float] = {}
    for episode_id in episode_ids:
        score = 0.0
        if episode_id in summary:
            score += policy.summary / (k + summary[episode_id])
        own = passages.get(episode_id, [])
        if own:
            score += 1.0 / (k + own[0])
        if len(own) > 1:
            score += policy.second_passage / (k + own[1])
        if episode_id in facts:
            score += policy.fact_vote / (k + facts[episode_id])
        support[episode_id] = score
    return support


def _with_support(
    best: dict[str, tuple[float, bool, str | None]],
    episode_hits: Sequence[EpisodeHit],
    passage_hits: Sequence[PassageHit],
    fact_hits: Sequence[FactHit],
    policy: EvidencePolicy,
) -> dict[str, EpisodeEvidence]:
    """The best hit's score, plus `second_passage` × the session's next-best hit (summary or
    passage) and `fact_vote` × its best fact's score: scores on the one hybrid scale, each share
    bounded, so a session found twice ranks above one found once at the same best score."""
    scores: dict[str, list[float]] = {}
    for hit in episode_hits:
        scores.setdefault(hit.episode.episode_id, []).append(hit.score)
    for passage_hit in passage_hits:
        if passage_hit.passage.episode_id:
            scores.setdefault(passage_hit.passage.episode_id, []).append(passage_hit.score)
    fact_best: dict[str, float] = {}
    for fact_hit in fact_hits if policy.fact_vote > 0 else ():
        for provenance in fact_hit.stored.fact.provenance:
            fact_best[provenance.episode_id] = max(fact_best.get(provenance.episode_id, 0.0), fact_hit.score)
    found: dict[str, EpisodeEvidence] = {}
    for eid, (score, via, text) in best.items():
        ordered = sorted(scores.get(eid, []), reverse=True)
        second = ordered[1] if len(ordered) > 1 else 0.0
        total = score + policy.second_passage * second + policy.fact_vote * fact_best.get(eid, 0.0)
        found[eid] = EpisodeEvidence(min(1.0, total), via, text)
    return found


def aggregate_episode_evidence(
    episode_hits: Sequence[EpisodeHit],
    passage_hits: Sequence[PassageHit],
    fact_hits: Sequence[FactHit],
    policy: EvidencePolicy,
) -> dict[str, EpisodeEvidence]:
    """episode id → its combined relevance and the passage that stands for it (its best passage, as
    before). Only episodes with a summary or passage hit are returned: a fact adds support to its
    session, it does not bring in a session the search did not reach."""
    best = merge_episode_hits(episode_hits, passage_hits)
    if policy.mode == "support":
        return _with_support(best, episode_hits, passage_hits, fact_hits, policy)
    if policy.mode == "max" or not best:
        return {eid: EpisodeEvidence(score, via, text) for eid, (score, via, text) in best.items()}
    support = fused_support(best, episode_hits, passage_hits, fact_hits, policy)
    fused_order = sorted(best, key=lambda eid: (-support[eid], -best[eid][0], eid))
    scores = sorted((score for score, _, _ in best.values()), reverse=True)
    return {
        eid: EpisodeEvidence(score, best[eid][1], best[eid][2]) for eid, score in zip(fused_order, scores, strict=True)
    }


def boost_in_time(candidates: Sequence[Candidate], windows: Sequence[TimeWindow], boost: float) -> list[Candidate]:
    """Episodes whose session time falls in a time the query names gain `boost` relevance (at most
    1): the question says when, and the session's time is evidence of its own. Facts keep theirs."""
    if not windows or boost <= 0:
        return list(candidates)
    return [
        dataclasses.replace(c, relevance=min(1.0, c.relevance + boost))
        if c.kind == "episode" and c.episode is not None and in_windows(c.episode.occurred_at, windows)
        else c
        for c in candidates
    ]
