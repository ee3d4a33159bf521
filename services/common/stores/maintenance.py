"""What maintenance (pruning, erasure, recall counts) reads and writes of a point, shared by the
episode and fact stores.

Maintenance must reach every point, also one that no longer reads as a valid record: a malformed
episode must still expire, and an erasure must still find the erased text in it. So these views are
read leniently, field by field, and never skip a point."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.common.domain.owner import Owner
from services.common.stores.vector.port import VectorIndex

# Payload keys of episodes, passages and facts that hold text a search can return.
_SEARCHABLE_KEYS = ("summary", "abstract", "entity_names", "text", "value", "subject")


@dataclass(frozen=True, slots=True)
class PointText:
    """The searchable text of one point (summaries, passage text, fact text, value and subject)."""

    point_id: str
    texts: tuple[str, ...]


def epoch_field(payload: Mapping[str, Any], key: str) -> float | None:
    """An epoch-seconds field; anything but a number (a bool included) reads as absent."""
    value = payload.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def iso_epoch_field(payload: Mapping[str, Any], key: str) -> float | None:
    """An ISO time field as epoch seconds; a naive or unparsable time reads as absent."""
    value = payload.get(key)
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.timestamp() if parsed.tzinfo is not None else None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for key, item in value.items() for s in (*_strings(key), *_strings(item))]
    if isinstance(value, list | tuple):
        return [s for item in value for s in _strings(item)]
    return []


def point_text(point_id: str, payload: Mapping[str, Any]) -> PointText:
    return PointText(point_id, tuple(s for key in _SEARCHABLE_KEYS for s in _strings(payload.get(key))))


async def record_recalls(
    index: VectorIndex, collection: str, owner: Owner, recalls: Mapping[str, tuple[int, float]]
) -> int:
    """Add to the points' recall counts: per id, (times recalled, latest time in epoch seconds).
    Ids the owner does not have are skipped; returns the number of points updated. Yields to the event
    loop after each point: a batch of recall counts (dozens of points every half second under load,
    ~0.15 ms each on Edge) would otherwise hold up the turn that is being answered meanwhile."""
    updated = 0
    for record in await index.get(collection, owner, list(recalls)):
        increment, latest = recalls[record.id]
        current = record.payload.get("recall_count")
        previous = current if isinstance(current, int) and not isinstance(current, bool) else 0
        last = epoch_field(record.payload, "last_recalled_at_ts")
        await index.set_payload(
            collection,
            owner,
            [record.id],
            {
                "recall_count": previous + increment,
                "last_recalled_at_ts": latest if last is None else max(latest, last),
            },
        )
        updated += 1
        await asyncio.sleep(0)
    return updated


async def owners_of(index: VectorIndex, collections: Sequence[str]) -> set[Owner]:
    owners: set[Owner] = set()
    for collection in collections:
        owners.update(await index.list_owners(collection))
    return owners
