"""Recall ranking, pure: candidates read from the stores, the relevance gate, one weight of relevance,
recency and importance (`memory_weight`, shared by L0 and L1), confirmed before tentative, and
narrowest scope winning conflicts. No I/O here; candidates.py does the store calls."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from services.common.domain.facts import Fact, decay, normalise_attribute, normalise_subject, normalise_text_key
from services.common.stores.episodes import Episode, EpisodeHit, PassageHit
from services.common.stores.facts import StoredFact

log = logging.getLogger(__name__)

MemoryKind = Literal["episode", "fact"]

_SCOPE_RANK: dict[str, int] = {"personal": 0, "team": 1, "org": 2}


@dataclass(frozen=True, slots=True)
class Candidate:
    """A memory that may be returned: an episode (possibly found through one of its passages) or a
    fact, with the channels the fact was stated in."""

    id: str
    kind: MemoryKind
    relevance: float
    episode: Episode | None = None
    fact: Fact | None = None
    fact_channels: tuple[str, ...] = ()
    via_passage: bool = False
    matched_text: str | None = None
    # An episode's passages that the search reached, best first: what the session states near the query.
    reached_passages: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Ranked:
    candidate: Candidate
    weight: float  # relevance × recency × importance (memory_weight): the ranking key within a tier
    tier: int  # 0: episodes and confirmed facts, 1: tentative facts, 2: superseded facts (history only)
    occurred_at: datetime | None
    provenance_date: str | None


def episode_candidate(
    episode: Episode, relevance: float, *, passage_text: str | None = None, reached: Sequence[str] = ()
) -> Candidate:
    """An episode candidate; `passage_text` when it was found through one of its passages, `reached`
    the texts of its passages among the search's hits."""
    return Candidate(
        id=episode.episode_id,
        kind="episode",
        relevance=relevance,
        episode=episode,
        via_passage=passage_text is not None,
        matched_text=passage_text,
        reached_passages=tuple(reached),
    )


def fact_candidate(stored: StoredFact, relevance: float) -> Candidate:
    return Candidate(
        id=stored.fact_id, kind="fact", relevance=relevance, fact=stored.fact, fact_channels=stored.channels
    )


def is_superseded(fact: Fact) -> bool:
    return fact.status == "superseded" or fact.valid_to is not None or fact.superseded_by is not None


def merge_episode_hits(
    episode_hits: Iterable[EpisodeHit], passage_hits: Iterable[PassageHit]
) -> dict[str, tuple[float, bool, str | None]]:
    """episode id → (best relevance, found through a passage, the passage text). A passage stands for
    its episode: the episode stays the unit recall returns, and its best-scoring hit counts."""
    best: dict[str, tuple[float, bool, str | None]] = {}
    for hit in episode_hits:
        episode_id = hit.episode.episode_id
        if hit.score > best.get(episode_id, (-1.0, False, None))[0]:
            best[episode_id] = (hit.score, False, None)
    for passage_hit in passage_hits:
        passage = passage_hit.passage
        if not passage.episode_id:
            log.warning("passage %s has no episode_id; ignored", passage.passage_id)
            continue
        if passage_hit.score > best.get(passage.episode_id, (-1.0, False, None))[0]:
            best[passage.episode_id] = (passage_hit.score, True, passage.text)
    return best


def last_observed(fact: Fact) -> datetime:
    return max(p.occurred_at for p in fact.provenance)


def _age_days(then: datetime | None, now: datetime) -> float:
    if then is None:
        return 0.0
    return (now - then).total_seconds() / 86400.0


def importance_factor(importance: float, importance_weight: float) -> float:
    """Bounded like recency: importance can cost a memory at most `importance_weight` of its relevance
    (importance 1 costs nothing, 0 costs the full weight). A weight of 0 gives exactly 1.0, so ranking
    without importance is today's order to the last bit."""
    return 1.0 - importance_weight + importance_weight * min(max(importance, 0.0), 1.0)


def memory_weight(
    candidate: Candidate,
    *,
    now: datetime,
    episode_half_life_days: float,
    episode_recency_weight: float,
    importance_weight: float,
) -> tuple[float, datetime | None]:
    """The one scoring function of L0 and L1: relevance × recency × importance, and the time recency was
    counted from. Facts decay by their volatility half-life since they were last observed; episodes by
    `episode_half_life_days` since the session, bounded by `episode_recency_weight`; both are then
    weighed by their importance (written with the memory, `importance_factor`)."""
    fact = candidate.fact
    if candidate.kind == "fact" and fact is not None:
        observed = last_observed(fact)
        recency = decay(_age_days(observed, now), fact.volatility)
        return candidate.relevance * recency * importance_factor(fact.importance, importance_weight), observed
    episode = candidate.episode
    occurred = episode.occurred_at if episode is not None else None
    age = max(_age_days(occurred, now), 0.0)
    # Bounded: recency can cost an episode at most `episode_recency_weight` of its relevance.
    # Full multiplicative decay let a months-old but exact episode lose to any recent one
    # (LoCoMo: L1 recall@5 0.844 with full decay vs 0.935 with a bounded factor).
    decay_factor = 0.5 ** (age / episode_half_life_days)
    weight = candidate.relevance * (1.0 - episode_recency_weight + episode_recency_weight * decay_factor)
    if episode is not None:
        weight *= importance_factor(episode.importance, importance_weight)
    return weight, occurred


def rank_candidates(
    candidates: Iterable[Candidate],
    *,
    now: datetime,
    min_score: float,
    episode_half_life_days: float,
    episode_recency_weight: float = 0.2,
    importance_weight: float = 0.0,
    include_superseded: bool = False,
) -> list[Ranked]:
    """Gate on relevance, then order: tier (episodes and confirmed facts before tentative ones), then
    `memory_weight` (relevance × recency × importance). Superseded facts never pass.

    The gate compares raw relevance (the fused score) with `min_score`, so the threshold means the
    same thing for old and new, important and unimportant memories; recency and importance only order
    what passed (superseded facts, when `include_superseded` lets them through for history questions,
    come last). Episodes also expire at their TTL, which the store filter enforces."""
    ranked: list[Ranked] = []
    for candidate in candidates:
        if not math.isfinite(candidate.relevance) or candidate.relevance < min_score:
            continue
        fact = candidate.fact
        if candidate.kind == "fact" and (fact is None or (is_superseded(fact) and not include_superseded)):
            continue
        weight, when = memory_weight(
            candidate,
            now=now,
            episode_half_life_days=episode_half_life_days,
            episode_recency_weight=episode_recency_weight,
            importance_weight=importance_weight,
        )
        if fact is not None and candidate.kind == "fact":
            tier = 2 if is_superseded(fact) else 0 if fact.status == "confirmed" else 1
            provenance = f"{fact.status} {when.date().isoformat()}" if when else fact.status
            ranked.append(Ranked(candidate, weight, tier, when, provenance))
        else:
            ranked.append(Ranked(candidate, weight, 0, when, when.date().isoformat() if when else None))
    ranked.sort(key=lambda r: (r.tier, -r.weight, -r.candidate.relevance, r.candidate.id))
    return ranked


def conflict_key(fact: Fact) -> tuple[str, str]:
    return (normalise_subject(fact.subject), normalise_attribute(fact.attribute))


def resolve_scope_conflicts(candidates: Sequence[Candidate], context_facts: Iterable[Fact] = ()) -> list[Candidate]:
    """Drop facts that a narrower scope contradicts or repeats (personal > team > org).

    For a single-valued attribute ("lives_in"), a current fact in a narrower scope on the same
    subject and attribute wins over any broader one, whatever its value. For a multi-valued attribute
    only the same value in a broader scope is dropped (the values do not contradict each other).
    `context_facts` are further current facts of the user (e.g. the narrower facts looked up for the
    broader candidates) that can decide a conflict without being returned themselves."""
    current: list[Fact] = [c.fact for c in candidates if c.fact is not None and not is_superseded(c.fact)]
    current.extend(f for f in context_facts if not is_superseded(f))
    narrowest_single: dict[tuple[str, str], int] = {}
    narrowest_value: dict[tuple[str, str, str], int] = {}
    for fact in current:
        rank = _SCOPE_RANK.get(fact.scope, 0)
        key = conflict_key(fact)
        if fact.single_valued:
            narrowest_single[key] = min(narrowest_single.get(key, rank), rank)
        value_key = (*key, normalise_text_key(fact.value))
        narrowest_value[value_key] = min(narrowest_value.get(value_key, rank), rank)
    kept: list[Candidate] = []
    for candidate in candidates:
        candidate_fact = candidate.fact
        if candidate.kind != "fact" or candidate_fact is None:
            kept.append(candidate)
            continue
        rank = _SCOPE_RANK.get(candidate_fact.scope, 0)
        key = conflict_key(candidate_fact)
        if candidate_fact.single_valued and narrowest_single.get(key, rank) < rank:
            continue
        if narrowest_value.get((*key, normalise_text_key(candidate_fact.value)), rank) < rank:
            continue
        kept.append(candidate)
    return kept


def broader_single_valued(candidates: Iterable[Candidate]) -> list[Fact]:
    """Facts whose scope is broader than personal and whose attribute is single-valued: the ones a
    narrower fact that the search did not return could still override (the caller looks those up)."""
    return [
        c.fact
        for c in candidates
        if c.fact is not None and c.fact.single_valued and _SCOPE_RANK.get(c.fact.scope, 0) > 0
    ]


def narrower_scopes(scope: str) -> list[str]:
    rank = _SCOPE_RANK.get(scope, 0)
    return [name for name, value in _SCOPE_RANK.items() if value < rank]
