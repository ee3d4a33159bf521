"""Keyword statistics per owner: a candidate's keyword score with IDF taken over its owner's points only.

The engines' IDF modifier counts document frequencies over the whole collection. Left as they are,
other owners' texts would move your keyword scores (a word common in another tenant's memory would
weigh less in yours), and a tenant watching its own scores could tell how common a word is elsewhere.
So both adapters let the engine's keyword branch pick candidates, then score every fused candidate's
keyword part again from its stored sparse vector:

    Σ_{t ∈ q ∩ d} q_t · idf_owner(t) · w_d(t),  idf_owner(t) = ln((N − n_t + 0.5) / (n_t + 0.5) + 1)

with the engine's own formula, N the owner's points with keywords and n_t those holding t; fusion's
calibration (fusion.keyword_part) then takes N as the corpus. A dense candidate holding a query term
gets that keyword score too, where the engine's branch may have cut it.

N and n_t come from reading the owner's sparse vectors: all of them up to `sample` points; past that,
the first `sample` in point-id order (ids are hashes, so a uniform sample), with n_t scaled by
N / sample. They are cached per (collection, owner). The adapter drops an owner's entry on each write
it makes for that owner; writes by another process show after `ttl` seconds.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from services.common.domain.lru import LruCache
from services.common.domain.owner import Owner
from services.common.domain.sparse import SparseVector

DEFAULT_SAMPLE = 4096
DEFAULT_TTL_S = 300.0
DEFAULT_OWNERS_CACHED = 4096


@dataclass(frozen=True, slots=True)
class OwnerTerms:
    """`corpus_size`: the owner's points with keywords; `frequencies`: term id → points holding it among
    the `sampled` points read (all of them when `sampled == corpus_size`)."""

    corpus_size: int
    sampled: int
    frequencies: Mapping[int, int]

    def idf(self, term: int) -> float:
        """The engine's IDF of `term` over the owner's points (n_t scaled up from the sample)."""
        held = self.frequencies.get(term, 0)
        documents = held * self.corpus_size / self.sampled if self.sampled else 0.0
        return math.log((self.corpus_size - documents + 0.5) / (documents + 0.5) + 1.0)


def checked_sample(sample: int) -> int:
    """`sample` as an adapter's `owner_terms_sample`: at least one point must be read."""
    if sample < 1:
        raise ValueError("owner_terms_sample must be >= 1")
    return sample


def owner_terms(corpus_size: int, vectors: Iterable[SparseVector]) -> OwnerTerms:
    """The statistics of an owner with `corpus_size` points with keywords, from the sparse vectors read."""
    frequencies: Counter[int] = Counter()
    sampled = 0
    for vector in vectors:
        sampled += 1
        frequencies.update(set(vector.indices))
    return OwnerTerms(max(corpus_size, sampled), sampled, frequencies)


def keyword_scores(query: SparseVector, stored: Mapping[str, SparseVector], terms: OwnerTerms) -> dict[str, float]:
    """Point id → keyword score with the owner's IDF, for the points of `stored` holding a query term."""
    weights = {term: value * terms.idf(term) for term, value in zip(query.indices, query.values, strict=True)}
    scores: dict[str, float] = {}
    for point, vector in stored.items():
        score = sum(
            weights[term] * value for term, value in zip(vector.indices, vector.values, strict=True) if term in weights
        )
        if score > 0:
            scores[point] = score
    return scores


class OwnerTermsCache:
    """`OwnerTerms` per (collection, owner), each kept `ttl` seconds, the `owners` most recent at most."""

    def __init__(self, *, ttl: float = DEFAULT_TTL_S, owners: int = DEFAULT_OWNERS_CACHED) -> None:
        if ttl <= 0 or owners < 1:
            raise ValueError(f"ttl must be > 0 and owners >= 1, got {ttl}, {owners}")
        self._ttl = ttl
        self._entries: LruCache[tuple[str, Owner], tuple[OwnerTerms, float]] = LruCache(owners)

    def lookup(self, collection: str, owner: Owner) -> OwnerTerms | None:
        entry = self._entries.get((collection, owner))
        if entry is None or time.monotonic() - entry[1] >= self._ttl:
            return None
        return entry[0]

    def keep(self, collection: str, owner: Owner, terms: OwnerTerms) -> OwnerTerms:
        self._entries.put((collection, owner), (terms, time.monotonic()))
        return terms

    def drop(self, collection: str, owner: Owner | None = None) -> None:
        """Forget an owner's entry (after a write for them), or the whole collection's (owner None)."""
        if owner is not None:
            self._entries.pop((collection, owner))
            return
        for key in self._entries.keys_oldest_first():
            if key[0] == collection:
                self._entries.pop(key)
