"""Vector index port: one interface, an adapter per backend (Qdrant Edge, Qdrant server).

Every data call takes an `Owner`; adapters stamp `tenant_id` / `user_id` into payloads on write and
AND them into every filter on read, so isolation holds by construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from services.common.domain.owner import Owner
from services.common.domain.sparse import SparseVector as SparseVector

EPISODES = "episodes"
PASSAGES = "passages"
FACTS = "facts"


@dataclass(frozen=True, slots=True)
class VectorRecord:
    """A point to upsert. `id` is a UUID string (deterministic, chosen by the caller)."""

    id: str
    dense: Sequence[float]
    sparse: SparseVector
    payload: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class StoredRecord:
    id: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ScoredRecord:
    id: str
    payload: dict[str, Any]
    score: float  # fused score in [0, 1]
    dense_score: float | None = None
    keyword_score: float | None = None


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """Optional narrowing on top of the mandatory owner filter.

    `match` holds exact matches on payload keys (a list value means "any of"); `exclude` leaves out the
    points whose payload key holds that value (a point without the key is kept).
    Times compare against the payload field named by `time_field` (stored as epoch seconds).
    """

    agent_id: str | None = None
    scopes: Sequence[str] | None = None
    channels: Sequence[str] | None = None
    after: datetime | None = None
    before: datetime | None = None
    time_field: str = "occurred_at_ts"
    match: Mapping[str, str | int | bool | Sequence[str]] = field(default_factory=dict)
    exclude: Mapping[str, str | int | bool] = field(default_factory=dict)
    ids: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class HybridWeights:
    keyword: float
    dense: float


@dataclass(frozen=True, slots=True)
class PreparedHybrid:
    """The first step of a two-step hybrid search (`VectorIndex.prepare_hybrid`): the request, and what
    the adapter could read without the query vector (`keyword_hits`: id → keyword score, best first;
    `payloads`: id → payload), valid while the adapter's write stamp is still `stamp`.

    Exact means: `finish_hybrid` answers what the one-step `hybrid_query` answers on the index as it is
    when `finish_hybrid` runs. A write to the collection between the steps changes the stamp, and
    finish then reads everything again rather than mix two states of the index."""

    collection: str
    owner: Owner
    sparse: SparseVector
    weights: HybridWeights
    limit: int
    search_filter: SearchFilter | None = None
    stamp: int | None = None  # None: nothing was read ahead
    keyword_hits: tuple[tuple[str, float], ...] | None = None
    payloads: Mapping[str, dict[str, Any]] = field(default_factory=dict)


class VectorIndex(Protocol):
    """Port implemented by the Qdrant Edge and Qdrant server adapters."""

    async def ensure_collection(self, collection: str, dense_dim: int) -> None: ...

    async def upsert(self, collection: str, owner: Owner, records: Sequence[VectorRecord]) -> None: ...

    async def hybrid_query(
        self,
        collection: str,
        owner: Owner,
        *,
        dense: Sequence[float] | None,
        sparse: SparseVector,
        weights: HybridWeights,
        limit: int,
        search_filter: SearchFilter | None = None,
    ) -> list[ScoredRecord]:
        """Hybrid search under the owner's filters, fused scores best first. `dense` None: keywords
        only, as with a dense weight of 0 (the recall layer's query vector missed its deadline)."""
        ...

    async def prepare_hybrid(
        self,
        collection: str,
        owner: Owner,
        *,
        sparse: SparseVector,
        weights: HybridWeights,
        limit: int,
        search_filter: SearchFilter | None = None,
    ) -> PreparedHybrid:
        """The part of a hybrid search that needs no query vector, run now (for L0: while the query
        embeds). An adapter may read nothing ahead and do all the work in `finish_hybrid`."""
        ...

    async def finish_hybrid(self, prepared: PreparedHybrid, dense: Sequence[float] | None) -> list[ScoredRecord]:
        """The search `prepared` began, with the query vector (None: keywords only): the answer of
        `hybrid_query` with the same arguments on the index as it is now (`PreparedHybrid`)."""
        ...

    async def get(self, collection: str, owner: Owner, ids: Sequence[str]) -> list[StoredRecord]: ...

    async def scroll(
        self,
        collection: str,
        owner: Owner,
        search_filter: SearchFilter | None = None,
        limit: int = 1000,
        *,
        start_id: str | None = None,
    ) -> list[StoredRecord]:
        """The owner's points in point-id order, from `start_id` (inclusive) when given: a stable
        order to page through with a cursor."""
        ...

    async def set_payload(
        self, collection: str, owner: Owner, ids: Sequence[str], payload: Mapping[str, Any]
    ) -> None: ...

    async def delete(self, collection: str, owner: Owner, search_filter: SearchFilter | None = None) -> int:
        """Delete the owner's points matching the filter (all of the owner's points when None);
        returns how many were deleted."""
        ...

    async def count(self, collection: str, owner: Owner, search_filter: SearchFilter | None = None) -> int: ...

    async def list_owners(self, collection: str) -> list[Owner]:
        """Every (tenant, user) with points in the collection. For the pruner's sweep, which then
        works owner by owner through the scoped calls."""
        ...

    async def close(self) -> None: ...
