"""Pruning's view of an episode or passage point: the times it decides on and what retention weighs
besides age, read field by field so that a point otherwise unreadable still expires."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.common.domain.importance import DEFAULT_IMPORTANCE, clamp_importance
from services.common.stores.maintenance import epoch_field


@dataclass(frozen=True, slots=True)
class PointTimes:
    """The times pruning decides on, of an episode or a passage. Read field by field from any point,
    also one that is otherwise unreadable (a malformed episode must still expire); a field that is
    not an epoch number reads as None."""

    point_id: str
    occurred_at_ts: float | None = None
    expires_at_ts: float | None = None
    last_recalled_at_ts: float | None = None
    stored_at_ts: float | None = None
    importance: float = DEFAULT_IMPORTANCE
    recall_count: int = 0
    compressed: bool = False


def read_importance(payload: Mapping[str, Any]) -> float:
    """The stored importance; absent or not a number (a point from before importance) reads as the default."""
    return clamp_importance(epoch_field(payload, "importance"))


def read_point_times(point_id: str, payload: Mapping[str, Any]) -> PointTimes:
    """The times of an episode or passage point, whatever else it holds (see `PointTimes`), with what
    retention weighs besides age: importance, recall count, and whether it is a compressed episode."""
    count = epoch_field(payload, "recall_count")
    return PointTimes(
        point_id=point_id,
        occurred_at_ts=epoch_field(payload, "occurred_at_ts"),
        expires_at_ts=epoch_field(payload, "expires_at_ts"),
        last_recalled_at_ts=epoch_field(payload, "last_recalled_at_ts"),
        stored_at_ts=epoch_field(payload, "stored_at_ts"),
        importance=read_importance(payload),
        recall_count=max(int(count), 0) if count is not None else 0,
        compressed=bool(payload.get("source_episode_ids")),
    )
