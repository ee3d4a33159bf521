"""Small deterministic vector records for store tests: a random unit vector per (owner, number)."""

from __future__ import annotations

import uuid

import numpy as np

from services.common.domain.owner import Owner
from services.common.stores.vector.port import HybridWeights, SparseVector, VectorIndex, VectorRecord


def numbered_record(owner: Owner, number: int, dim: int) -> VectorRecord:
    """The same record for the same owner and number: a seeded unit vector, one keyword term, and the
    number in the payload (so a test can tell which records came back)."""
    rng = np.random.default_rng(number)
    vector = rng.normal(size=dim).astype(np.float32)
    return VectorRecord(
        id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{owner.user_id}/{number}")),
        dense=(vector / np.linalg.norm(vector)).tolist(),
        sparse=SparseVector(indices=[number % 97], values=[1.0]),
        payload={"kind": "episode", "n": number},
    )


async def nearest_id(index: VectorIndex, collection: str, owner: Owner, record: VectorRecord) -> str:
    """The id of the owner's point nearest to `record`'s vector (dense only)."""
    hits = await index.hybrid_query(
        collection,
        owner,
        dense=record.dense,
        sparse=SparseVector([], []),
        weights=HybridWeights(keyword=0.0, dense=1.0),
        limit=1,
    )
    return hits[0].id
