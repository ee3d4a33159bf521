"""What Qdrant Edge stores for a record, and how many of its points the keyword IDF counts."""

from __future__ import annotations

from typing import Any

import numpy as np
import qdrant_edge as qe

from services.common.domain.owner import Owner
from services.common.stores.vector import edge_window, port
from services.common.stores.vector.adapter_support import (
    DENSE_VECTOR,
    SPARSE_VECTOR,
    WORDLESS_FIELD,
    owned_payload,
    point_id,
    stamp_wordless,
)
from services.common.stores.vector.edge_filters import match_value


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


def worded_points(shard: qe.EdgeShard, points: int) -> int:
    """The points with keywords (the engine's IDF corpus): all but those stamped wordless (indexed)."""
    wordless = qe.Filter(must=[qe.FieldCondition(WORDLESS_FIELD, match=match_value(True))])
    return points - shard.count(qe.CountRequest(exact=True, filter=wordless))
