"""Recent-window-first dense search for power users on Qdrant Edge.

Without HNSW (the default: no index build ever stalls a turn, edge.py) a dense search scans the
owner's points through the payload index: ~0.1 ms for a normal user, ~7-40 ms (p99 ~90 ms under
load, more in a large collection) for one owner with 50k points. The keyword branch is an inverted
index; for such an owner it walks the query terms' postings of the whole collection, checking the
owner on each (2.2 ms at 150k points, 4.5 ms at 350k, measured), so it grows with the collection, not
with the owner: not windowed. So for an owner with more than `size` points in a collection, the dense
branch searches only their most recent ~`size` points (by `occurred_at_ts`, stored on episodes,
passages and facts), while the keyword branch still searches everything: an old memory is still
found by its names and words, and ranking discounts old episodes anyway. Owners with at most `size`
points (every normal user) are searched exactly as before.

Why a key of its own: Edge's planner iterates the points of the ONE condition it estimates smallest
and checks the others on each. A bare `occurred_at_ts >= cutoff` also matches every other user's
recent points (at 1M points / 100k users, more than the owner's 50k), so the planner kept the owner
as the primary condition and checked the range on all 50k. Each point therefore carries
`WINDOW_KEY_FIELD`: one number that orders points by owner first, then by minute of `occurred_at_ts`
(`window_key`). The window's range over it matches the owner's recent points only (plus, rarely, an
owner whose hash slot collides: still filtered out by the owner condition), so Edge's estimate for it
is ~`size` whatever the collection holds and the planner iterates only those. Measured in-process,
dense branch p50 of one owner with 50k points among 10k users (150k points) / 30k users (350k points):
exhaustive 6.9 / 8.1 ms, the bare time range 9.2 / 15.3 ms (it iterates 15k / 35k points), this key
3.9 / 5.2 ms; a day-bucket keyword key with MatchAny was 6.3 ms at 150k (checking MatchAny on each
point costs ~0.45 µs).

The window starts at a whole minute (the key's resolution), so the key's range and the bare time
range used before a backfill (below) select the same points. The key's range alone is the window: also
checking the exact time range on each point cost ~1.5 ms more at 350k points (5.1 vs 3.5 ms, measured).

Points written before the key existed have none. When an owner's window is (re)computed, its range
is checked for points without the key; if there are any, the window searches with the bare time
range (the old, correct but slower query) and asks for a backfill, which edge.py runs in the
background (`backfill`), after which the key is used.

Even narrowed, Edge scores the window's points one by one (~4.8 ms for 5,000): the window's vectors
are therefore also kept in memory for the most recently searched power users, which shortlists the
nearest in numpy for Edge to filter and score (edge_window_vectors.py: ~1.1 ms, the same hits).

The window's lower time bound is found once per owner and collection (an ordered scroll, ~20 ms at
50k points) and kept until the owner's point count moves by more than half a window, so the window
holds between ~0.5 and ~1.5 × `size` points. The owner's point count is Edge's cardinality estimate
from the payload index (~0.02 ms, exact for an owner-only filter as measured). When most of an
owner's points share one minute (a bulk import), the window holds them all: the search is as
exhaustive as without a window, never wrong.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import qdrant_edge as qe

from services.common.domain.owner import Owner
from services.common.stores.vector.edge_window_vectors import DEFAULT_MAX_OWNERS, Matrix, Shortlist, WindowVectors

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
# Backfill writes per event-loop turn: ~60 µs each (measured), so a turn waits ~4 ms at most.
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
    stripped = dict(payload or {})
    stripped.pop(WINDOW_KEY_FIELD, None)
    return stripped


def _key_range(owner: Owner, cutoff: float) -> qe.FieldCondition:
    last = float((_owner_slot(owner) << _MINUTE_BITS) | _LAST_MINUTE)
    return qe.FieldCondition(WINDOW_KEY_FIELD, range=qe.RangeFloat(gte=window_key(owner, cutoff), lte=last))


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
    with more than `size` points, and the window's dense vectors in memory for the `vector_owners`
    most recently searched (`vectors`, edge_window_vectors.py). `size` None: never windowed
    (exhaustive dense search)."""

    def __init__(self, size: int | None = DEFAULT_WINDOW_POINTS, *, vector_owners: int = DEFAULT_MAX_OWNERS) -> None:
        if size is not None and size < 1:
            raise ValueError("the dense window must be >= 1 point or None")
        self.size = size
        self.vectors = WindowVectors(vector_owners)
        self._windows: dict[tuple[str, Owner], _Window] = {}
        self._backfills_due: set[tuple[str, Owner]] = set()
        self._backfill_tasks: set[asyncio.Task[None]] = set()

    def conditions(
        self, shard: qe.EdgeShard, collection: str, owner: Owner, owner_filter: qe.Filter, *, owner_points: int
    ) -> list[qe.FieldCondition]:
        """The extra conditions for the owner's dense branch (`owner_points`: their points in the shard,
        Edge's estimate); empty: search all their points."""
        key = (collection, owner)
        if self.size is None:
            return []
        points = owner_points
        if points <= self.size:
            self.forget(collection, owner)
            return []
        window = self._windows.get(key)
        if window is None or abs(points - window.owner_points) > self.size // 2:
            self.forget(collection, owner)
            window = self._find(shard, owner_filter, points)
            if window is None:
                return []
            self._windows[key] = window
            if not window.keyed:
                self._backfills_due.add(key)
        return [_key_range(owner, window.cutoff) if window.keyed else _since(window.cutoff)]

    def forget(self, collection: str, owner: Owner) -> None:
        """Drop the owner's window and its rows (found again by their next search)."""
        self._windows.pop((collection, owner), None)
        self.vectors.forget((collection, owner))

    def shortlist(
        self,
        shard: qe.EdgeShard,
        collection: str,
        owner_filter: qe.Filter,
        window: list[qe.FieldCondition],
        query: Sequence[float] | Matrix,
        *,
        owner: Owner,
        vector_name: str,
        count: int,
    ) -> Shortlist | None:
        """The `count` window points nearest `query`, from the rows in memory; None: search
        the window in Edge (no window, or its rows are not worth it)."""
        if not window or self.size is None:
            return None
        window_filter = qe.Filter(must=[owner_filter, *window])
        return self.vectors.shortlist(
            shard,
            (collection, owner),
            window_filter,
            query,
            vector_name=vector_name,
            count=count,
            load_limit=2 * self.size,
        )

    def note_upsert(
        self, collection: str, owner: Owner, points: Iterable[tuple[str, Mapping[str, Any], Sequence[float]]]
    ) -> None:
        """Written points (id, payload, dense vector): those in the owner's window go into its rows,
        the others leave them (a rewrite may have moved a point out of the window)."""
        window = self._windows.get((collection, owner))
        if window is None:
            return
        in_window: list[tuple[str, Sequence[float]]] = []
        outside: list[str] = []
        for point_id, payload, dense in points:
            occurred = _time(payload.get(WINDOW_TIME_FIELD))
            if occurred is not None and occurred >= window.cutoff:
                in_window.append((point_id, dense))
            else:
                outside.append(point_id)
        self.vectors.put((collection, owner), in_window, outside)

    def keyed(self, collection: str, owner: Owner) -> bool:
        """Whether the owner's dense branch is narrowed by the window key (tests, benchmarks)."""
        window = self._windows.get((collection, owner))
        return window is not None and window.keyed

    def take_backfill(self, collection: str, owner: Owner) -> bool:
        """Whether the owner's window waits for a key backfill that nobody runs yet (asked once)."""
        key = (collection, owner)
        if key in self._backfills_due:
            self._backfills_due.discard(key)
            return True
        return False

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

    def start_backfill(
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
        assert self.size is not None
        newest_first = qe.OrderBy(WINDOW_TIME_FIELD, direction=qe.Direction.Desc)
        records, _ = shard.scroll(
            qe.ScrollRequest(limit=self.size, filter=owner_filter, with_payload=False, order_by=newest_first)
        )
        if len(records) < self.size or records[-1].order_value is None:
            return None  # most points carry no time: search them all rather than a wrong window
        cutoff = math.floor(float(records[-1].order_value) / 60) * 60.0  # a whole minute: see the module doc
        unkeyed = shard.count(qe.CountRequest(exact=True, filter=_unkeyed_since(owner_filter, cutoff)))
        return _Window(cutoff=cutoff, owner_points=points, keyed=unkeyed == 0)
