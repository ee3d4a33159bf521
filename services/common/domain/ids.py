"""Deterministic ids: the basis of idempotency (a replayed event produces the same ids)."""

from __future__ import annotations

import uuid

_NAMESPACE = uuid.UUID("6f1c2f0e-6d5b-4c9a-9a53-0c1e5c3b7d11")


def deterministic_uuid(*parts: str) -> uuid.UUID:
    """uuid5 over the parts; the basis of every derived event and point id."""
    return uuid.uuid5(_NAMESPACE, "\x1f".join(parts))


def is_uuid(value: str) -> bool:
    """Whether `value` is a UUID string (point ids are; anything else cannot name a point)."""
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
