"""Edge filters and hits from the adapter's types (edge.py): the owner's conditions as a `qe.Filter`,
a scored point as the `BranchHit` the fusion takes, and payloads and keyword vectors read by id."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, cast

import numpy as np
import qdrant_edge as qe

from services.common.domain.owner import Owner
from services.common.domain.sparse import SparseVector
from services.common.stores.vector import edge_window
from services.common.stores.vector.adapter_support import (
    SPARSE_VECTOR,
    BranchHit,
    Conditions,
    owns,
    stored_keyword_vectors,
)


def branch_hit(point: qe.ScoredPoint) -> BranchHit:
    """A branch's hit as the fusion takes it: id and score (edge.py reads the fused best's payloads)."""
    return BranchHit(id=str(point.id), score=point.score)


def match_value(value: str | int | bool) -> qe.MatchValue:
    # qdrant-edge-py 0.9 turns a Python bool into the integer 1/0 (bool subclasses int), which then
    # never matches a stored boolean; numpy's bool is not an int and arrives as a real boolean.
    return qe.MatchValue(cast(Any, np.bool_(value)) if isinstance(value, bool) else value)


def edge_filter(conditions: Conditions, *extra: qe.FieldCondition, shortlist: Collection[str] = ()) -> qe.Filter:
    """The owner's (and the search's) conditions as an Edge filter, plus `extra` ones; with a
    `shortlist`, only those point ids (first: Edge's planner then iterates just them)."""
    must: list[Any] = [qe.FieldCondition(key, match=match_value(value)) for key, value in conditions.equals]
    must += [qe.FieldCondition(key, match=qe.MatchAny(values)) for key, values in conditions.any_of]
    must += [
        qe.FieldCondition(key, range=qe.RangeFloat(gte=lower, lt=upper)) for key, lower, upper in conditions.ranges
    ]
    if conditions.ids is not None:
        must.append(qe.HasIdCondition(set(conditions.ids)))
    first: list[Any] = [qe.HasIdCondition(set(shortlist))] if shortlist else []
    must_not: list[Any] = [qe.FieldCondition(key, match=match_value(value)) for key, value in conditions.excluded]
    return qe.Filter(must=[*first, *must, *extra], must_not=must_not or None)


def retrieve_payloads(shard: qe.EdgeShard, owner: Owner, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Point id → payload (window key stripped) of those of `ids` that exist and are `owner`'s, read
    by id without a filter: for hits that already passed their search's conditions."""
    if not ids:
        return {}
    records = shard.retrieve(list(ids), with_payload=True, with_vector=False)
    return {
        str(record.id): edge_window.without_window_key(record.payload)
        for record in records
        if record.payload is not None and owns(owner, record.payload)
    }


def retrieve_sparse(shard: qe.EdgeShard, ids: Sequence[str]) -> dict[str, SparseVector]:
    """Point id → keyword vector of those of `ids` that have one, read by id: for hits that already
    passed their search's (owner's) conditions."""
    if not ids:
        return {}
    records = shard.retrieve(list(dict.fromkeys(ids)), with_payload=False, with_vector=[SPARSE_VECTOR])
    return stored_keyword_vectors(records, qe.SparseVector)
