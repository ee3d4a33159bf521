"""What Qdrant Edge stores: a collection's shard schema (vectors, payload indexes), a record's point, and
an owner's keyword statistics (owner_terms.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import qdrant_edge as qe

from services.common.domain.owner import Owner
from services.common.stores.vector import edge_window, port
from services.common.stores.vector.adapter_support import (
    DENSE_VECTOR,
    KEYWORD_INDEX_FIELDS,
    SPARSE_VECTOR,
    TENANT_FIELD,
    WORDLESS_FIELD,
    owned_payload,
    owner_conditions,
    point_id,
    stamp_wordless,
    stored_keyword_vectors,
)
from services.common.stores.vector.edge_filters import edge_filter, match_value
from services.common.stores.vector.owner_terms import OwnerTerms, owner_terms


def shard_config(dense_dim: int, indexing_threshold_kb: int | None) -> qe.EdgeConfig:
    """A collection's shard: a cosine dense vector and a keyword vector with the IDF modifier."""
    return qe.EdgeConfig(
        vectors={DENSE_VECTOR: qe.EdgeVectorParams(size=dense_dim, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        optimizers=(
            None if indexing_threshold_kb is None else qe.EdgeOptimizersConfig(indexing_threshold=indexing_threshold_kb)
        ),
    )


def ensure_payload_indexes(shard: qe.EdgeShard, time_fields: Sequence[str]) -> None:
    """Create the payload indexes the shard lacks: owner, keyword filters, times, the window key, wordless."""
    existing = set(shard.info().payload_schema)
    wanted: list[tuple[str, Any]] = [(TENANT_FIELD, qe.KeywordIndexParams(is_tenant=True))]
    wanted += [(name, qe.PayloadSchemaType.Keyword) for name in KEYWORD_INDEX_FIELDS]
    wanted += [(name, qe.PayloadSchemaType.Float) for name in (*time_fields, edge_window.WINDOW_KEY_FIELD)]
    wanted.append((WORDLESS_FIELD, qe.PayloadSchemaType.Bool))
    for name, schema in wanted:
        if name not in existing:
            shard.update(qe.UpdateOperation.create_field_index(name, schema))


def edge_point(owner: Owner, record: port.VectorRecord, dense_dim: int) -> qe.Point:
    """The Edge point of `record`, owner-stamped; ValueError for a record that cannot be stored."""
    if len(record.dense) != dense_dim:
        raise ValueError(f"record {record.id}: dense has {len(record.dense)} dims, expected {dense_dim}")
    if len(record.sparse.indices) != len(record.sparse.values):
        raise ValueError(f"record {record.id}: sparse indices and values differ in length")
    dense = record.dense if isinstance(record.dense, np.ndarray) else list(record.dense)
    vectors: dict[str, Any] = {DENSE_VECTOR: dense}
    if record.sparse.indices:  # a point without keywords has no sparse vector: outside the IDF corpus
        vectors[SPARSE_VECTOR] = qe.SparseVector(list(record.sparse.indices), list(record.sparse.values))
    payload = edge_window.stamp_window_key(owner, stamp_wordless(owned_payload(owner, record.payload), record.sparse))
    return qe.Point(point_id(record.id), vectors, payload)


def read_owner_terms(shard: qe.EdgeShard, owner: Owner, sample: int) -> OwnerTerms:
    """The owner's keyword statistics: their points with keywords (all but those stamped wordless,
    indexed), and the sparse vectors of the first `sample` of them in point-id order."""
    conditions = owner_conditions(owner)
    conditions.excluded.append((WORDLESS_FIELD, True))
    worded = edge_filter(conditions)
    corpus_size = shard.count(qe.CountRequest(exact=True, filter=worded))
    records, _ = shard.scroll(
        qe.ScrollRequest(limit=sample, filter=worded, with_payload=False, with_vector=[SPARSE_VECTOR])
    )
    return owner_terms(corpus_size, stored_keyword_vectors(records, qe.SparseVector).values())


def worded_points(shard: qe.EdgeShard, points: int) -> int:
    """The points with keywords (each has a sparse vector): all but those stamped wordless (indexed)."""
    wordless = qe.Filter(must=[qe.FieldCondition(WORDLESS_FIELD, match=match_value(True))])
    return points - shard.count(qe.CountRequest(exact=True, filter=wordless))
