"""Passages and turn points, pure: the chunks of a session's raw text that recall searches, their
deterministic ids, and how a turn point's hit counts for its passage (`fold_turn_hits`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from contracts.events import Channel, Scope
from services.common.domain.ids import deterministic_uuid
from services.common.stores.vector.fusion import weighted_score
from services.common.stores.vector.port import HybridWeights


def passage_id_for(episode_id: str, index: int) -> str:
    """The id of the episode's `index`-th passage."""
    return str(deterministic_uuid("passage", episode_id, str(index)))


def turn_point_id_for(episode_id: str, index: int) -> str:
    """The id of the episode's `index`-th turn point (`Passage.within`)."""
    return str(deterministic_uuid("passage-turn", episode_id, str(index)))


# The payload kind of a turn point, which only L1 searches (`WITHOUT_TURN_POINTS`).
TURN_KIND = "turn"
WITHOUT_TURN_POINTS: Mapping[str, str] = {"kind": TURN_KIND}


@dataclass(frozen=True, slots=True)
class Passage:
    """A chunk of the raw session (turns `first_turn`..`last_turn`), searchable on its own.

    With `within` set it is a turn point instead: one turn of the passage of that index, stored
    with its own meaning vector and no keywords, so that a passage of many short messages is as
    close to a question as its closest turn (`fold_turn_hits`). Only L1 searches
    turn points; they are deleted, expired and scanned for forgotten values with the passages."""

    episode_id: str
    index: int
    text: str
    first_turn: int
    last_turn: int
    session_id: str
    agent_id: str
    occurred_at: datetime
    scope: Scope = "personal"
    channel: Channel = "private"
    expires_at: datetime | None = None
    language: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)  # the episode's (filters apply to both)
    within: int | None = None

    @property
    def passage_id(self) -> str:
        if self.within is not None:
            return turn_point_id_for(self.episode_id, self.index)
        return passage_id_for(self.episode_id, self.index)

    @property
    def parent_index(self) -> int:
        """The index of the passage this point stands for: its own, or the one a turn point is in."""
        return self.index if self.within is None else self.within


@dataclass(frozen=True, slots=True)
class PassageHit:
    passage: Passage
    score: float  # fused score in [0, 1]
    dense_score: float | None = None  # the fused score's parts, for recall's agreement gate
    keyword_score: float | None = None


def fold_turn_hits(hits: Sequence[PassageHit], weights: HybridWeights | None) -> list[PassageHit]:
    """Each passage once, best first: its meaning part is the best of its own and its turn points'
    (a question about one short message of a long passage is as close as that message), its keyword
    part its own (turn points carry none). The hit names the passage when the search reached it, else
    the turn that did. `weights` are the search's (None: it ran on keywords alone, so turn points
    add nothing). Hits without turn points come back as they are."""
    if not any(hit.passage.within is not None for hit in hits):
        return list(hits)
    groups: dict[tuple[str, int], list[PassageHit]] = {}
    for hit in hits:
        groups.setdefault((hit.passage.episode_id, hit.passage.parent_index), []).append(hit)
    folded: list[PassageHit] = []
    for group in groups.values():
        own = next((hit for hit in group if hit.passage.within is None), None)
        if weights is None:
            folded.extend([own] if own is not None else [])
            continue
        dense = max((hit.dense_score or 0.0) for hit in group)
        keyword = own.keyword_score if own is not None else None
        named = own if own is not None else max(group, key=lambda hit: hit.dense_score or 0.0)
        folded.append(PassageHit(named.passage, weighted_score(dense, keyword, weights), dense, keyword))
    folded.sort(key=lambda hit: (-hit.score, hit.passage.passage_id))
    return folded
