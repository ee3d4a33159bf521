"""Recent-window-first dense search for power users on Qdrant Edge.

Without HNSW (the default: no index build ever stalls a turn, edge.py) a dense search scans the
owner's points through the payload index: cheap for a normal user, but for one owner with tens of
thousands of points it dominates the turn. So for an owner with more than `size` points in a
collection, the dense branch searches only their most recent ~`size` points (by `occurred_at_ts`,
stored on episodes, passages and facts), while the keyword branch (an inverted index) still searches
everything: an old memory is still found by its names and words, and ranking discounts old episodes
anyway. Owners with at most `size` points (every normal user) are searched exhaustively.

Why a key of its own: Edge's planner iterates the points of the ONE condition it estimates smallest
and checks the others on each. A bare `occurred_at_ts >= cutoff` also matches every other user's
recent points, so the planner kept the owner as the primary condition and checked the range on all
of the owner's points. Each point therefore carries `WINDOW_KEY_FIELD`: one number that orders points
by owner first, then by minute of `occurred_at_ts` (`window_key`). The window's range over it matches
the owner's recent points only (plus, rarely, an owner whose hash slot collides: still filtered out
by the owner condition), so Edge's estimate for it is ~`size` whatever the collection holds and the
planner iterates only those.

The window starts at a whole minute (the key's resolution), so the key's range and the bare time
range used before a backfill (below) select the same points; the key's range alone is the window.

Points written before the key existed have none. When an owner's window is (re)computed, its range
is checked for points without the key; if there are any, the window searches with the bare time
range (correct, slower) and a backfill runs in the background through the adapter's writes, after
which the key is used.

What is kept in memory: per (collection, owner), the window's lower time bound, found with one
ordered scroll and kept until the owner's point count (Edge's cardinality estimate) moves by more
than half a window, so the window holds between ~0.5 and ~1.5 × `size` points. No copy of any point
is kept: every search is Edge's, under the search's current filter, so no write can leave it stale.
When most of an owner's points share one minute (a bulk import), the window holds them all: the
search is as exhaustive as without a window, never wrong.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import qdrant_edge as qe

from services.common.domain.owner import Owner
from services.common.stores.vector.adapter_support import TENANT_FIELD, USER_FIELD, as_written

WINDOW_TIME_FIELD = "occurred_at_ts"
# A float payload index; Edge-internal (edge.py strips it from the payloads it returns).
WINDOW_KEY_FIELD = "_owner_recency"
DEFAULT_WINDOW_POINTS = 5_000

# owner slot (26 bits) << 27 | minute since the epoch (27 bits, until ~2225): 53 bits, so every key is
# an exact float64 integer and ranges over it are exact.
_MINUTE_BITS = 27
_OWNER_BITS = 26
_LAST_MINUTE = (1 << _MINUTE_BITS) - 1
_BACKFILL_SCROLL = 1_000
# Backfill writes per event-loop turn: a turn waits for a few milliseconds at most.
_BACKFILL_CHUNK = 64

log = logging.getLogger(__name__)


def _owner_slot(owner: Owner) -> int:
    # A stable hash (Python's hash() is salted per process): keys are stored.
    digest = hashlib.blake2b(f"{owner.tenant_id}\x00{owner.user_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - _OWNER_BITS)


def window_key(owner: Owner, occurred_at_ts: float) -> float:
    """The point's `WINDOW_KEY_FIELD`: owner slot, then minute; increasing with time within an owner."""
    minute = min(max(math.floor(occurred_at_ts / 60), 0), _LAST_MINUTE)
    return float((_owner_slot(owner) << _MINUTE_BITS) | minute)


def _time(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def stamp_window_key(owner: Owner, payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` with the window key set from its `occurred_at_ts` (or cleared when that is not a
    time; left alone when the payload does not set `occurred_at_ts`, as in a partial set_payload)."""
    if WINDOW_TIME_FIELD in payload:
        occurred = _time(payload[WINDOW_TIME_FIELD])
        payload[WINDOW_KEY_FIELD] = None if occurred is None else window_key(owner, occurred)
    else:
        payload.pop(WINDOW_KEY_FIELD, None)
    return payload


def without_window_key(payload: Mapping[str, Any] | None) -> dict[str, Any]:
    """A stored payload as the caller wrote it (plus the owner)."""
    stripped = as_written(payload)
    stripped.pop(WINDOW_KEY_FIELD, None)
    return stripped


def _key_range(owner: Owner, cutoff: float) -> qe.FieldCondition:
    last = float((_owner_slot(owner) << _MINUTE_BITS) | _LAST_MINUTE)
    return qe.FieldCondition(WINDOW_KEY_FIELD, range=qe.RangeFloat(gte=window_key(owner, cutoff), lte=last))


def _owner_filter(owner: Owner) -> qe.Filter:
    owner_fields = ((TENANT_FIELD, owner.tenant_id), (USER_FIELD, owner.user_id))
    return qe.Filter(must=[qe.FieldCondition(key, match=qe.MatchValue(value)) for key, value in owner_fields])


def _since(cutoff: float) -> qe.FieldCondition:
    return qe.FieldCondition(WINDOW_TIME_FIELD, range=qe.RangeFloat(gte=cutoff))


def scroll_field_values(shard: qe.EdgeShard, search_filter: qe.Filter, field: str | None, page: int) -> dict[str, Any]:
    """Point id -> the value of `field` (None without a field) of every point matching the filter,
    read `page` points per scroll."""
    found: dict[str, Any] = {}
    offset: Any = None
    while True:
        records, offset = shard.scroll(
            qe.ScrollRequest(
                offset=offset,
                limit=page,
                filter=search_filter,
                with_payload=[field] if field is not None else False,
                with_vector=False,
            )
        )
        for record in records:
            found[str(record.id)] = (record.payload or {}).get(field) if field is not None else None
        if offset is None:
            return found


def _unkeyed_since(owner_filter: qe.Filter, cutoff: float) -> qe.Filter:
    return qe.Filter(must=[owner_filter, _since(cutoff), qe.IsEmptyCondition(WINDOW_KEY_FIELD)])


class BackfillWrites(NamedTuple):
    """How a backfill writes into its collection (edge.py): like any write."""

    gate: asyncio.Lock  # the collection's write gate
    apply: Callable[[qe.UpdateOperation], None]  # applies (and journals, during a build) one update
    alive: Callable[[], bool]  # False once the collection is closed


@dataclass(frozen=True, slots=True)
class _Window:
    cutoff: float  # the window holds points with WINDOW_TIME_FIELD >= cutoff (a whole minute)
    owner_points: int  # the owner's point count when the cutoff was found
    keyed: bool  # every point of the window carries WINDOW_KEY_FIELD: its range may narrow the search


class RecentWindows:
    """Per (collection, owner): the time bound of the owner's most recent `size` points, for owners
    with more than `size` points. `size` None: never windowed (exhaustive dense search)."""

    def __init__(self, size: int | None = DEFAULT_WINDOW_POINTS) -> None:
        if size is not None and size < 1:
            raise ValueError("the dense window must be >= 1 point or None")
        self._size = size
        self._windows: dict[tuple[str, Owner], _Window] = {}
        self._backfills_due: set[tuple[str, Owner]] = set()
        self._backfill_tasks: set[asyncio.Task[None]] = set()

    def dense_conditions(
        self, shard: qe.EdgeShard, collection: str, owner: Owner, writes: Callable[[], BackfillWrites]
    ) -> list[qe.FieldCondition]:
        """The extra conditions for the owner's dense branch; empty: search all their points. Starts
        the window's key backfill when it needs one (`writes`: how, edge.py)."""
        if self._size is None:
            return []
        owner_filter = _owner_filter(owner)
        points = shard.count(qe.CountRequest(exact=False, filter=owner_filter))
        window = self._current(shard, collection, owner, owner_filter, points)
        if window is None:
            return []
        if (collection, owner) in self._backfills_due:
            self._backfills_due.discard((collection, owner))
            self._start_backfill(shard, collection, owner, owner_filter, writes())
        return [_key_range(owner, window.cutoff) if window.keyed else _since(window.cutoff)]

    def _current(
        self, shard: qe.EdgeShard, collection: str, owner: Owner, owner_filter: qe.Filter, points: int
    ) -> _Window | None:
        """The owner's window (`points`: their points in the shard), found again when the count moved
        by more than half a window; None: no window (at most `size` points, or most carry no time)."""
        assert self._size is not None
        key = (collection, owner)
        if points <= self._size:
            self._windows.pop(key, None)
            return None
        window = self._windows.get(key)
        if window is None or abs(points - window.owner_points) > self._size // 2:
            self._windows.pop(key, None)
            window = self._find(shard, owner_filter, points)
            if window is None:
                return None
            self._windows[key] = window
            if not window.keyed:
                self._backfills_due.add(key)
        return window

    def window_since(self, collection: str, owner: Owner) -> float | None:
        """The lower time bound of the owner's current window; None: not windowed (tests)."""
        window = self._windows.get((collection, owner))
        return None if window is None else window.cutoff

    def keyed(self, collection: str, owner: Owner) -> bool:
        """Whether the owner's dense branch is narrowed by the window key (tests, benchmarks)."""
        window = self._windows.get((collection, owner))
        return window is not None and window.keyed

    def backfill_operations(
        self, shard: qe.EdgeShard, collection: str, owner: Owner, owner_filter: qe.Filter
    ) -> tuple[float, list[qe.UpdateOperation]] | None:
        """The writes that give every point of the owner's window the key: (cutoff, operations), one
        per distinct key. Each only touches points that still have no key, so a point whose time
        changed meanwhile (set_payload stamps a new key) is not overwritten with a stale one."""
        window = self._windows.get((collection, owner))
        if window is None:
            return None
        ids_by_key: dict[float, list[str]] = defaultdict(list)
        unkeyed = _unkeyed_since(owner_filter, window.cutoff)
        for point_id, value in scroll_field_values(shard, unkeyed, WINDOW_TIME_FIELD, _BACKFILL_SCROLL).items():
            occurred = _time(value)
            if occurred is not None:
                ids_by_key[window_key(owner, occurred)].append(point_id)
        operations = [
            qe.UpdateOperation.set_payload_by_filter(
                qe.Filter(must=[owner_filter, qe.HasIdCondition(set(ids)), qe.IsEmptyCondition(WINDOW_KEY_FIELD)]),
                {WINDOW_KEY_FIELD: key},
            )
            for key, ids in ids_by_key.items()
        ]
        return window.cutoff, operations

    def _start_backfill(
        self, shard: qe.EdgeShard, collection: str, owner: Owner, owner_filter: qe.Filter, writes: BackfillWrites
    ) -> None:
        """Run `backfill` in the background (tracked for `wait_for_backfills`)."""
        task = asyncio.create_task(self.backfill(shard, collection, owner, owner_filter, writes))
        self._backfill_tasks.add(task)
        task.add_done_callback(self._backfill_tasks.discard)

    async def wait_for_backfills(self) -> None:
        """Wait until no backfill runs (tests, benchmarks)."""
        while running := [task for task in self._backfill_tasks if not task.done()]:
            await asyncio.gather(*running, return_exceptions=True)

    async def backfill(
        self, shard: qe.EdgeShard, collection: str, owner: Owner, owner_filter: qe.Filter, writes: BackfillWrites
    ) -> None:
        """Give the window's points that predate the key their key, `_BACKFILL_CHUNK` writes per
        event-loop turn, each chunk under the collection's write gate and through `writes.apply`
        (edge.py: the build journal); stops once the collection is closed. Until it is done the window
        searches with the bare time range: correct, only slower."""
        gate, apply, alive = writes
        try:
            plan = self.backfill_operations(shard, collection, owner, owner_filter)
            if plan is None:
                return
            cutoff, operations = plan
            for start in range(0, len(operations), _BACKFILL_CHUNK):
                await asyncio.sleep(0)
                async with gate:
                    if not alive():
                        return
                    for operation in operations[start : start + _BACKFILL_CHUNK]:
                        apply(operation)
            self._backfilled(collection, owner, cutoff)
        except Exception:  # searches stay correct with the bare time range; the next window retries
            log.exception("backfilling the window key of a power user in %s failed", collection)

    def _backfilled(self, collection: str, owner: Owner, cutoff: float) -> None:
        """Points since `cutoff` all carry the key now: a window starting there (or later) may use it."""
        key = (collection, owner)
        window = self._windows.get(key)
        if window is not None and window.cutoff >= cutoff:
            self._windows[key] = _Window(window.cutoff, window.owner_points, keyed=True)

    def _find(self, shard: qe.EdgeShard, owner_filter: qe.Filter, points: int) -> _Window | None:
        assert self._size is not None
        newest_first = qe.OrderBy(WINDOW_TIME_FIELD, direction=qe.Direction.Desc)
        records, _ = shard.scroll(
            qe.ScrollRequest(limit=self._size, filter=owner_filter, with_payload=False, order_by=newest_first)
        )
        if len(records) < self._size or records[-1].order_value is None:
            return None  # most points carry no time: search them all rather than a wrong window
        cutoff = math.floor(float(records[-1].order_value) / 60) * 60.0  # a whole minute: see the module doc
        unkeyed = shard.count(qe.CountRequest(exact=True, filter=_unkeyed_since(owner_filter, cutoff)))
        return _Window(cutoff=cutoff, owner_points=points, keyed=unkeyed == 0)
