"""Backend-neutral pieces of the vector adapters: the collection schema, owner stamping, and the
translation of an owner + `SearchFilter` into plain conditions each adapter turns into its own
filter type. Keeping this in one place keeps the two adapters' semantics identical."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from services.common.domain.owner import Owner
from services.common.stores.vector.fusion import FusedHit, FusionConfig, fuse
from services.common.stores.vector.owner_terms import OwnerTerms, keyword_scores
from services.common.stores.vector.port import HybridWeights, ScoredRecord, SearchFilter, SparseVector

DENSE_VECTOR = "dense"
SPARSE_VECTOR = "keywords"
TENANT_FIELD = "tenant_id"
USER_FIELD = "user_id"
OWNER_FIELDS = (TENANT_FIELD, USER_FIELD)
# Stamped on a point written without keywords (stored with no sparse vector), and indexed: the engines' IDF
# counts only points with keywords, so the keyword calibration's corpus (fusion.keyword_part) leaves
# these out too; a point of meaning alone must not weaken every other point's keyword score.
WORDLESS_FIELD = "_wordless"
# Keyword payload indexes besides tenant_id (which is indexed as the tenant key).
KEYWORD_INDEX_FIELDS = (USER_FIELD, "agent_id", "scope", "channel", "kind")
# Numeric (epoch seconds) payload indexes for time filters and the pruner's sweeps.
DEFAULT_TIME_FIELDS = (
    "occurred_at_ts",
    "created_at_ts",
    "updated_at_ts",
    "last_accessed_ts",
    "expires_at_ts",
    "valid_from_ts",
    "valid_to_ts",
)

_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

MatchValue = str | int | bool


@dataclass(slots=True)
class Conditions:
    """AND of: field == value, field ∈ values, lower <= field < upper, id ∈ ids, and NOT field == value
    for each of `excluded`."""

    equals: list[tuple[str, MatchValue]] = field(default_factory=list)
    excluded: list[tuple[str, MatchValue]] = field(default_factory=list)
    any_of: list[tuple[str, list[str]]] = field(default_factory=list)
    ranges: list[tuple[str, float | None, float | None]] = field(default_factory=list)
    ids: list[str] | None = None

    @property
    def matches_nothing(self) -> bool:
        """An empty any-of list or id list can match no point; adapters answer without a query."""
        return any(not values for _, values in self.any_of) or (self.ids is not None and not self.ids)


def stored_keyword_vectors(points: Iterable[Any], sdk_sparse: type[Any]) -> dict[str, SparseVector]:
    """Point id → keyword vector, as the port types it, of the `points` (records or scored points read
    with their keyword vectors by an SDK whose sparse vector type is `sdk_sparse`) that hold one."""
    found: dict[str, SparseVector] = {}
    for point in points:
        vectors = point.vector
        vector = vectors.get(SPARSE_VECTOR) if isinstance(vectors, dict) else None
        if isinstance(vector, sdk_sparse):
            found[str(point.id)] = SparseVector(list(vector.indices), list(vector.values))
    return found


def check_collection_name(collection: str) -> None:
    if not _COLLECTION_NAME.match(collection):
        raise ValueError(f"collection name must be 1-64 characters of [A-Za-z0-9_-], got {collection!r}")


def point_id(value: str) -> str:
    """Canonical UUID text of a point id; ValueError for anything else."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError) as error:
        raise ValueError(f"point ids must be UUID strings, got {value!r}") from error


def point_ids(values: Iterable[str]) -> list[str]:
    """Canonical, de-duplicated, order kept."""
    return list(dict.fromkeys(point_id(value) for value in values))


def epoch_seconds(moment: datetime) -> float:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"time filters need timezone-aware datetimes, got naive {moment!r}")
    return moment.timestamp()


def _check_owner_keys(owner: Owner, payload: Mapping[str, Any]) -> None:
    for key, expected in ((TENANT_FIELD, owner.tenant_id), (USER_FIELD, owner.user_id)):
        if key in payload and payload[key] != expected:
            raise ValueError(f"payload {key}={payload[key]!r} disagrees with the owner's {expected!r}")


def owns(owner: Owner, payload: Mapping[str, Any]) -> bool:
    """Whether a stored payload is `owner`'s (every stored payload is stamped: `owned_payload`)."""
    return payload.get(TENANT_FIELD) == owner.tenant_id and payload.get(USER_FIELD) == owner.user_id


def owned_payload(owner: Owner, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of `payload` stamped with the owner; a disagreeing tenant_id / user_id is a ValueError."""
    _check_owner_keys(owner, payload)
    stamped = dict(payload)
    stamped[TENANT_FIELD] = owner.tenant_id
    stamped[USER_FIELD] = owner.user_id
    return stamped


def as_written(payload: Mapping[str, Any] | None) -> dict[str, Any]:
    """A stored payload as its writer gave it (plus the owner): without the adapters' own stamps."""
    written = dict(payload or {})
    written.pop(WORDLESS_FIELD, None)
    return written


def stamp_wordless(payload: dict[str, Any], sparse: SparseVector) -> dict[str, Any]:
    """`payload` marked as a point without keywords when `sparse` is empty (`WORDLESS_FIELD`)."""
    if not sparse.indices:
        payload[WORDLESS_FIELD] = True
    return payload


def payload_update(owner: Owner, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Payload for set_payload: owner keys may only restate the owner (points never change owner)."""
    _check_owner_keys(owner, payload)
    return {key: value for key, value in payload.items() if key not in OWNER_FIELDS}


def owner_conditions(owner: Owner, search_filter: SearchFilter | None = None) -> Conditions:
    """The owner (always) AND the optional narrowing.

    Time bounds form the half-open window [after, before): `after` is inclusive, `before` exclusive,
    so consecutive windows neither overlap nor leave gaps.
    """
    conditions = Conditions(equals=[(TENANT_FIELD, owner.tenant_id), (USER_FIELD, owner.user_id)])
    if search_filter is None:
        return conditions
    if search_filter.agent_id is not None:
        conditions.equals.append(("agent_id", search_filter.agent_id))
    if search_filter.scopes is not None:
        conditions.any_of.append(("scope", _strings("scopes", search_filter.scopes)))
    if search_filter.channels is not None:
        conditions.any_of.append(("channel", _strings("channels", search_filter.channels)))
    if search_filter.after is not None or search_filter.before is not None:
        lower = None if search_filter.after is None else epoch_seconds(search_filter.after)
        upper = None if search_filter.before is None else epoch_seconds(search_filter.before)
        conditions.ranges.append((search_filter.time_field, lower, upper))
    for key, value in search_filter.match.items():
        if isinstance(value, str | int | bool):
            conditions.equals.append((key, value))
        else:
            conditions.any_of.append((key, _strings(f"match[{key!r}]", value)))
    for key, value in search_filter.exclude.items():
        if not isinstance(value, str | int | bool):
            raise ValueError(f"exclude[{key!r}] must be one string, number or boolean, got {value!r}")
        conditions.excluded.append((key, value))
    if search_filter.ids is not None:
        conditions.ids = point_ids(search_filter.ids)
    return conditions


def _strings(name: str, values: Sequence[str]) -> list[str]:
    if isinstance(values, str) or not all(isinstance(value, str) for value in values):
        raise ValueError(f"{name} must be a sequence of strings, got {values!r}")
    return list(values)


def search_weights(weights: HybridWeights, dense: Sequence[float] | None) -> HybridWeights | None:
    """The weights a search runs with: without a query vector the dense branch does not run; None when
    no branch is left to run (keywords weigh 0 too)."""
    if dense is not None:
        return weights
    return HybridWeights(keyword=weights.keyword, dense=0.0) if weights.keyword > 0 else None


@dataclass(frozen=True, slots=True)
class BranchHit:
    """One candidate from a branch, without its payload. `dense_vector` is the stored
    (engine-normalised) dense vector, fetched for keyword hits so that keyword-only candidates still
    get their cosine."""

    id: str
    score: float
    dense_vector: Sequence[float] | None = None


def fuse_branches(
    dense_hits: Sequence[BranchHit] | None,
    keyword_hits: Sequence[BranchHit] | None,
    query_vector: np.ndarray[Any, np.dtype[np.float32]],
    weights: HybridWeights,
    *,
    corpus_size: int,
    limit: int,
    config: FusionConfig,
) -> list[FusedHit]:
    """Branch results → the best `limit` fused, best first (None = branch did not run)."""
    dense_cosines: dict[str, float] | None = None
    keyword_scores: dict[str, float] | None = None
    if dense_hits is not None:
        dense_cosines = {hit.id: hit.score for hit in dense_hits}
    if keyword_hits is not None:
        keyword_scores = {hit.id: hit.score for hit in keyword_hits}
        missing = [hit for hit in keyword_hits if hit.dense_vector is not None and hit.id not in (dense_cosines or {})]
        norm = float(np.linalg.norm(query_vector))
        if missing and dense_cosines is not None and norm > 0:
            stored = np.asarray([hit.dense_vector for hit in missing], dtype=np.float32)
            for hit, cosine in zip(missing, (stored @ (query_vector / norm)).tolist(), strict=True):
                dense_cosines[hit.id] = cosine
    return fuse(dense_cosines, keyword_scores, weights, corpus_size=corpus_size, limit=limit, config=config)


def owner_keyword_hits(
    query: SparseVector,
    dense_hits: Sequence[BranchHit] | None,
    keyword_hits: Sequence[BranchHit],
    stored: Mapping[str, SparseVector],
    terms: OwnerTerms,
) -> list[BranchHit]:
    """Every candidate of either branch that holds a query term, its keyword score taken with the owner's
    IDF from its `stored` sparse vector (owner_terms.py); a keyword hit keeps its stored dense vector."""
    dense_vectors = {hit.id: hit.dense_vector for hit in keyword_hits}
    candidates = {hit.id: stored[hit.id] for hit in (*(dense_hits or ()), *keyword_hits) if hit.id in stored}
    return [
        BranchHit(point, score, dense_vectors.get(point))
        for point, score in keyword_scores(query, candidates, terms).items()
    ]


def scored_records(fused: Sequence[FusedHit], payloads: Mapping[str, dict[str, Any]]) -> list[ScoredRecord]:
    """The fused hits as records, in order; a hit without a payload (gone meanwhile) is left out."""
    return [
        ScoredRecord(
            id=hit.id,
            payload=payloads[hit.id],
            score=hit.score,
            dense_score=hit.dense_score,
            keyword_score=hit.keyword_score,
        )
        for hit in fused
        if hit.id in payloads
    ]
