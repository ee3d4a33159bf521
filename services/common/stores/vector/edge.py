"""VectorIndex on Qdrant Edge: the Qdrant engine in-process, one EdgeShard per collection.

Layout: `data_dir/<collection>/` holds one shard (segments + WAL). A shard belongs to one process,
so the embedded stack runs every service in one process; a second process is refused at its first
open by `data_dir/edge.lock` (DirInUse, naming the holder's pid).

Threading: every EdgeShard call holds the GIL for its whole duration, so running them in
`asyncio.to_thread` would free nothing and only add a thread hop: calls run inline. Large upserts are
written in chunks with a yield to the event loop between chunks. A search sees one state of the shard:
what a two-step search read ahead is used only if no write has changed the collection's stamp since.

Search: both branches in one batch under the owner's filter (a power user's dense branch over their
recent window: edge_window.py) — or the keyword branch and its payloads ahead (prepare_hybrid, while
L0's query embeds) and the dense one at finish — then the cosine of each keyword hit the dense branch
did not return, then every candidate's keyword score with the owner's own IDF (owner_terms.py: their
keyword vectors by id, the owner's statistics cached until a write for them), then the payloads of the
fused best not yet read, by id.

Indexing: Edge builds HNSW only in optimize(), which blocks the whole process (GIL) and rebuilds
the merged segment, for seconds to minutes as the shard grows. Until then searches scan, which stays
within the L0 budget for per-owner filters (the payload index narrows to the owner's points first).
So `index_builds`:
- "never" (the default): the request process never builds; nothing ever stalls a turn.
- "background": when the points written since the last build reach max(`optimize_threshold`,
  points indexed by the last build) — geometric growth keeps the total rebuild work within ~2× of
  one final build — the build runs in a child process on a copy of the shard and is swapped in
  (edge_builds.py). The process is blocked only at the swap, by loading the built shard and closing
  the old one (both hold the GIL), not for the build nor for replaying the writes made during it
  (replayed in slices, the loop free in between).
- "inline": the build runs inside upsert() and freezes the process (a benchmark baseline).
Compaction: once the points deleted since the last one reach 20% (edge_builds.compaction_due), the
same child-process path runs; with "never" it only vacuums (drops tombstones, merges segments, no
HNSW), with "background" it builds too, with "inline" it blocks.
Explicit `await index.optimize()` always runs inline and blocks (offline tools and tests).

Durability: the WAL is on, so acknowledged writes survive a crash; close() flushes segments.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import qdrant_edge as qe

from services.common.domain.owner import Owner
from services.common.stores.dir_lock import DirLock
from services.common.stores.vector import edge_builds, edge_window, port
from services.common.stores.vector.adapter_support import (
    DEFAULT_TIME_FIELDS,
    TENANT_FIELD,
    USER_FIELD,
    BranchHit,
    Conditions,
    check_collection_name,
    fuse_branches,
    owner_conditions,
    payload_update,
    point_id,
    point_ids,
    scored_records,
    search_weights,
)
from services.common.stores.vector.edge_filters import edge_filter, retrieve_payloads
from services.common.stores.vector.edge_points import edge_point, ensure_payload_indexes, shard_config, worded_points
from services.common.stores.vector.edge_search import BranchSearch
from services.common.stores.vector.edge_terms import EdgeOwnerTerms
from services.common.stores.vector.edge_window import DEFAULT_WINDOW_POINTS, RecentWindows
from services.common.stores.vector.edge_window_rows import Shortlist, WindowVectors, WindowVectorsConfig
from services.common.stores.vector.fusion import FusionConfig, validate_weights
from services.common.stores.vector.owner_terms import DEFAULT_SAMPLE

_CONFIG_FILE = "edge_config.json"
_LOCK_FILE = "edge.lock"
_ONE_PROCESS_HINT = (
    "Qdrant Edge data belongs to one process: run the services together (`tiermem up`), give this one "
    "its own data dir, or use a Qdrant server (TIERMEM_VECTOR__BACKEND=server)"
)
_FACET_LIMIT = 1_000_000
# Journal operations a swap may leave for its final replay behind the write gate (writes wait for it).
_SWAP_TAIL = 64
_STAMPS = itertools.count()
DEFAULT_WINDOW_VECTORS = WindowVectorsConfig()

log = logging.getLogger(__name__)

IndexBuilds = Literal["never", "background", "inline"]


@dataclass(slots=True)
class _Collection:
    shard: qe.EdgeShard
    config: qe.EdgeConfig
    path: Path  # the directory of the current generation
    dense_dim: int
    points: int  # point count
    indexed_points: int  # points covered by the last HNSW build
    pending_points: int  # points written since the last build
    # While a background build runs: the updates applied since its copy was taken, replayed into the
    # built copy at the swap. None when no build runs.
    journal: list[qe.UpdateOperation] | None = None
    build: asyncio.Task[None] | None = None
    deleted_points: int = 0  # points deleted since the last compaction (counted from this process's start)
    # Writes wait here while a build copies the shard's files (reads go on).
    write_gate: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Changes with every write and swap; unique across collections and reopenings (port.PreparedHybrid).
    stamp: int = field(default_factory=lambda: next(_STAMPS))


class EdgeVectorIndex:
    """`VectorIndex` on Qdrant Edge shards under `data_dir`.

    `optimize_threshold`: points written since the last HNSW build that trigger the next one (None:
    never automatically). `indexing_threshold_kb`: Edge's own threshold below which a segment is not
    worth an HNSW index (None keeps the engine default, ~10 MB); optimize() skips smaller segments.
    `index_builds`: whether automatic builds happen, and where (module doc): "never" (default),
    "background" (a child process, swapped in) or "inline" (blocks the process; a benchmark baseline).
    `dense_window`: an owner with more points than this in a collection has the dense branch of each
    search run over their most recent ~that many points only, the keyword branch over all (edge_window.py;
    None: always exhaustive). `window_vectors`: keep power users' windows as matrices that shortlist
    their dense branch, with the same answers (edge_window_rows.py; None: off). `owner_terms_sample`: an
    owner's points read for their keyword statistics at most (edge_terms.py).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        fusion: FusionConfig | None = None,
        time_fields: Sequence[str] = DEFAULT_TIME_FIELDS,
        optimize_threshold: int | None = 20_000,
        indexing_threshold_kb: int | None = None,
        upsert_chunk_size: int = 256,
        index_builds: IndexBuilds = "never",
        dense_window: int | None = DEFAULT_WINDOW_POINTS,
        window_vectors: WindowVectorsConfig | None = DEFAULT_WINDOW_VECTORS,
        owner_terms_sample: int = DEFAULT_SAMPLE,
    ) -> None:
        if optimize_threshold is not None and optimize_threshold < 1:
            raise ValueError("optimize_threshold must be >= 1 or None")
        if upsert_chunk_size < 1:
            raise ValueError("upsert_chunk_size must be >= 1")
        self._data_dir = Path(data_dir)
        self._fusion = fusion or FusionConfig()
        self._time_fields = tuple(time_fields)
        self._optimize_threshold = optimize_threshold
        self._indexing_threshold_kb = indexing_threshold_kb
        self._chunk_size = upsert_chunk_size
        self._index_builds = index_builds
        self._collections: dict[str, _Collection] = {}
        self._owner_terms = EdgeOwnerTerms(owner_terms_sample)
        # Held from the first open until close(): the WAL would refuse a second process only after
        # it had already cleared "leftover" build generations (edge_builds) that may be this one's.
        self._dir_lock = DirLock(self._data_dir, _LOCK_FILE, holder="another process", hint=_ONE_PROCESS_HINT)
        self._retired: dict[str, Path] = {}  # generation directories replaced by a build, to remove
        self.dense_windows = RecentWindows(dense_window)
        self.window_vectors = WindowVectors(window_vectors)

    # -- lifecycle ---------------------------------------------------------------------------

    def claim(self) -> None:
        """Take this process's lock on the data dir now (the first ensure_collection does otherwise);
        DirInUse, naming the holder's pid, when another process has it. close() releases it."""
        self._dir_lock.acquire()

    async def ensure_collection(self, collection: str, dense_dim: int) -> None:
        """Open (or create) the collection's shard and make sure its payload indexes exist."""
        check_collection_name(collection)
        if dense_dim < 1:
            raise ValueError(f"dense_dim must be >= 1, got {dense_dim}")
        opened = self._collections.get(collection)
        if opened is not None:
            if opened.dense_dim != dense_dim:
                raise ValueError(f"collection {collection!r} has dense_dim {opened.dense_dim}, not {dense_dim}")
            return
        config = shard_config(dense_dim, self._indexing_threshold_kb)
        self.claim()  # before anything on disk is touched
        path = edge_builds.current_dir(self._data_dir, collection)
        edge_builds.remove_leftovers(self._data_dir, collection)
        if (path / _CONFIG_FILE).exists():
            try:
                shard = qe.EdgeShard.load(str(path), config)
            except Exception as error:  # the binding raises bare Exception with a descriptive message
                raise ValueError(f"cannot open collection {collection!r} at {path}: {error}") from error
        else:
            path.mkdir(parents=True, exist_ok=True)
            shard = qe.EdgeShard.create(str(path), config)
        ensure_payload_indexes(shard, self._time_fields)
        info = shard.info()
        worded = worded_points(shard, info.points_count)
        # One dense vector per point and one sparse vector per point with keywords; the sparse index
        # is always built, so dense vectors still waiting for HNSW = points − (indexed − worded).
        indexed = max(0, min(info.points_count, info.indexed_vectors_count - worded))
        self._collections[collection] = _Collection(
            shard=shard,
            config=config,
            path=path,
            dense_dim=dense_dim,
            points=info.points_count,
            indexed_points=indexed,
            pending_points=info.points_count - indexed,
        )

    async def optimize(self, collection: str | None = None) -> bool:
        """Build HNSW indexes now (one collection or all). Blocks the process: see the module doc.
        Returns whether anything was optimized."""
        names = [collection] if collection is not None else list(self._collections)
        changed = False
        for name in names:
            changed = self._optimize(self._collection(name)) or changed
        return changed

    def _optimize(self, opened: _Collection) -> bool:
        changed = opened.shard.optimize()
        opened.shard.flush()
        _recount(opened)
        opened.indexed_points = opened.points
        opened.pending_points = opened.deleted_points = 0
        return changed

    def build_running(self, collection: str) -> bool:
        """Whether a background index build of `collection` is under way."""
        build = self._collection(collection).build
        return build is not None and not build.done()

    async def wait_for_builds(self) -> None:
        """Wait until no background build runs (tests, benchmarks, a clean shutdown)."""
        builds = [opened.build for opened in self._collections.values() if opened.build is not None]
        if builds:
            await asyncio.gather(*builds, return_exceptions=True)

    def _start_build(self, name: str, opened: _Collection) -> None:
        if opened.build is not None and not opened.build.done():
            return  # one at a time; the next threshold crossing starts the next one
        opened.build = asyncio.create_task(self._build(name, opened), name=f"edge-index-build-{name}")

    async def _build(self, name: str, opened: _Collection) -> None:
        """Copy, build in a child process, swap (edge_builds.py). A failure is logged and leaves the
        collection as it was (scanned searches stay correct, only slower for a power user)."""
        target = edge_builds.next_dir(self._data_dir, name)
        vacuum_only = self._index_builds == "never"
        async with opened.write_gate:
            opened.shard.flush()
            copied_points, copied_pending = opened.shard.info().points_count, opened.pending_points
            copied_deleted = opened.deleted_points
            try:
                await edge_builds.copy_shard(opened.path, target)
            except OSError:
                log.exception("vector index build of %s: copying the shard failed", name)
                return
            opened.journal = []
        try:
            await edge_builds.build_in_child(target, vacuum_only=vacuum_only)
            await self._swap(name, opened, target)
        except Exception:
            log.exception("vector index build of %s failed; searches keep scanning until the next one", name)
            opened.journal = None
            opened.indexed_points = max(opened.indexed_points, copied_points)  # do not retry at once
            opened.deleted_points = max(0, opened.deleted_points - copied_deleted)
            await edge_builds.remove_dir(target)
            return
        except asyncio.CancelledError:
            opened.journal = None
            await edge_builds.remove_dir(target)
            raise
        opened.deleted_points = max(0, opened.deleted_points - copied_deleted)
        if not vacuum_only:
            opened.indexed_points = copied_points
            opened.pending_points = max(0, opened.pending_points - copied_pending)
        await edge_builds.remove_dir(self._retired.pop(name))

    async def _swap(self, name: str, opened: _Collection, built: Path) -> None:
        """Load the built copy, catch it up with the journal, switch (edge_builds.py, step 3). The load
        and the old shard's close hold the GIL (unavoidable in-process); the replay runs in slices with
        the loop free between them, its last slices behind the write gate so that no write lands
        between the last replayed operation and the switch (reads go on, on the old shard)."""
        started = time.perf_counter()
        shard = qe.EdgeShard.load(str(built), opened.config)
        loaded = time.perf_counter()
        journal = opened.journal if opened.journal is not None else []
        switched = False
        try:
            replayed = await edge_builds.catch_up(shard, journal, 0, left=_SWAP_TAIL)
            async with opened.write_gate:
                await edge_builds.catch_up(shard, journal, replayed, left=0)
                shard.flush()
                # No await from here to the switch: the pointer and the reference change together.
                edge_builds.point_to(self._data_dir, name, built)
                old_shard, old_path = opened.shard, opened.path
                opened.shard, opened.path, opened.journal = shard, built, None
                opened.stamp = next(_STAMPS)
                switched = True
                _recount(opened)
        finally:
            if not switched:  # failed or cancelled before the switch: the old shard stays current
                with contextlib.suppress(Exception):
                    shard.close()
        self._retired[name] = old_path
        switched_at = time.perf_counter()
        try:
            old_shard.close()
        except Exception:  # the new generation is current and complete; the old one is only garbage now
            log.exception("closing the replaced shard of %s failed", name)
        # The load and the close each stall the process as long as they take (they hold the GIL).
        log.info(
            "swapped %s (%d points): load %.0f ms, journal of %d replayed in %.0f ms, close %.0f ms",
            name,
            opened.points,
            (loaded - started) * 1000,
            len(journal),
            (switched_at - loaded) * 1000,
            (time.perf_counter() - switched_at) * 1000,
        )

    async def close(self) -> None:
        for opened in self._collections.values():
            if opened.build is not None and not opened.build.done():
                opened.build.cancel()
        await self.wait_for_builds()
        collections, self._collections = self._collections, {}
        self.window_vectors.clear()
        for collection in collections:
            self._owner_terms.drop(collection)
        errors: list[Exception] = []
        for opened in collections.values():
            try:
                opened.shard.flush()
                opened.shard.close()
            except Exception as error:  # close the others anyway, then report
                errors.append(error)
        self._dir_lock.release()
        if errors:
            raise RuntimeError(f"closing Qdrant Edge shards failed: {errors}")

    def _collection(self, collection: str) -> _Collection:
        try:
            return self._collections[collection]
        except KeyError:
            raise LookupError(
                f"collection {collection!r} is not open; call ensure_collection({collection!r}, dim) first"
            ) from None

    # -- writes ------------------------------------------------------------------------------

    async def upsert(self, collection: str, owner: Owner, records: Sequence[port.VectorRecord]) -> None:
        opened = self._collection(collection)
        points = [edge_point(owner, record, opened.dense_dim) for record in records]  # validate all before writing
        if not points:
            return
        owner_filter = edge_filter(owner_conditions(owner))
        # Point ids are global to the collection: refuse (loudly) to overwrite another owner's point.
        # The conditional upsert below also keeps a racing writer from doing so.
        foreign = qe.Filter(must=[qe.HasIdCondition({point.id for point in points})], must_not=[owner_filter])
        taken = opened.shard.count(qe.CountRequest(exact=True, filter=foreign))
        if taken:
            raise ValueError(f"{taken} of these point ids belong to another owner in {collection!r}; nothing written")
        async with opened.write_gate:
            for start in range(0, len(points), self._chunk_size):
                if start:
                    await asyncio.sleep(0)  # let the event loop breathe between chunks
                chunk = points[start : start + self._chunk_size]
                _apply(opened, qe.UpdateOperation.upsert_points(chunk, condition=owner_filter))
                self.window_vectors.changed(collection, owner)
            self._owner_terms.drop(collection, owner)
            _recount(opened)
            opened.pending_points += len(points)
        threshold = self._optimize_threshold
        if threshold is None or self._index_builds == "never":
            return
        if opened.pending_points >= max(threshold, opened.indexed_points):
            if self._index_builds == "background":
                self._start_build(collection, opened)
            else:
                self._optimize(opened)

    async def set_payload(self, collection: str, owner: Owner, ids: Sequence[str], payload: Mapping[str, Any]) -> None:
        opened = self._collection(collection)
        update = edge_window.stamp_window_key(owner, payload_update(owner, payload))  # a new time moves the key
        conditions = owner_conditions(owner)
        conditions.ids = point_ids(ids)
        if not update or conditions.matches_nothing:
            return
        async with opened.write_gate:
            _apply(opened, qe.UpdateOperation.set_payload_by_filter(edge_filter(conditions), update))
            if edge_window.WINDOW_TIME_FIELD in update:  # may move a point into or out of the window
                self.window_vectors.changed(collection, owner)

    async def delete(self, collection: str, owner: Owner, search_filter: port.SearchFilter | None = None) -> int:
        opened = self._collection(collection)
        conditions = owner_conditions(owner, search_filter)
        if conditions.matches_nothing:
            return 0
        matching = edge_filter(conditions)
        async with opened.write_gate:
            matched = opened.shard.count(qe.CountRequest(exact=True, filter=matching))
            if matched:
                _apply(opened, qe.UpdateOperation.delete_points_by_filter(matching))
                self._owner_terms.drop(collection, owner)
                _recount(opened)
                opened.deleted_points += matched
        if self._optimize_threshold is not None and edge_builds.compaction_due(opened.points, opened.deleted_points):
            if self._index_builds == "inline":
                self._optimize(opened)
            else:
                self._start_build(collection, opened)
        return matched

    # -- reads -------------------------------------------------------------------------------

    async def hybrid_query(
        self,
        collection: str,
        owner: Owner,
        *,
        dense: Sequence[float] | None,
        sparse: port.SparseVector,
        weights: port.HybridWeights,
        limit: int,
        search_filter: port.SearchFilter | None = None,
    ) -> list[port.ScoredRecord]:
        request = port.PreparedHybrid(collection, owner, sparse, weights, limit, search_filter)
        return await self.finish_hybrid(request, dense)  # nothing read ahead: finish reads it all

    async def prepare_hybrid(
        self,
        collection: str,
        owner: Owner,
        *,
        sparse: port.SparseVector,
        weights: port.HybridWeights,
        limit: int,
        search_filter: port.SearchFilter | None = None,
    ) -> port.PreparedHybrid:
        """The keyword branch, its hits' payloads and the owner's keyword statistics, read ahead under the
        collection's write stamp."""
        request = port.PreparedHybrid(collection, owner, sparse, weights, limit, search_filter)
        opened, conditions = self._search_scope(request)
        if conditions.matches_nothing or weights.keyword <= 0:
            return request
        _, found = BranchSearch(opened.shard, conditions, self._fusion.candidates(limit)).branches(None, sparse)
        hits = tuple((hit.id, hit.score) for hit in found or ())
        if hits:  # the owner's keyword statistics too, read now rather than after the query embeds
            self._owner_terms.terms(collection, opened.shard, owner)
        payloads = retrieve_payloads(opened.shard, owner, [hit_id for hit_id, _ in hits])
        return dataclasses.replace(request, stamp=opened.stamp, keyword_hits=hits, payloads=payloads)

    async def finish_hybrid(
        self, prepared: port.PreparedHybrid, dense: Sequence[float] | None
    ) -> list[port.ScoredRecord]:
        opened, conditions = self._search_scope(prepared)
        ran = search_weights(prepared.weights, dense)
        if conditions.matches_nothing or ran is None:
            return []
        query_vector = np.asarray(dense if ran.dense > 0 and dense is not None else (), dtype=np.float32)
        if ran.dense > 0 and query_vector.shape != (opened.dense_dim,):
            raise ValueError(f"dense query has shape {query_vector.shape}, expected ({opened.dense_dim},)")
        search = BranchSearch(opened.shard, conditions, self._fusion.candidates(prepared.limit))
        window: list[qe.FieldCondition] = []
        shortlist: Shortlist | None = None
        if ran.dense > 0:
            backfill = functools.partial(self._backfill_writes, prepared.collection, opened)
            window = self.dense_windows.dense_conditions(opened.shard, prepared.collection, prepared.owner, backfill)
            cutoff = self.dense_windows.window_since(prepared.collection, prepared.owner)
            key = (prepared.collection, prepared.owner)
            shortlist = self.window_vectors.shortlist(
                opened.shard, key, cutoff, window, query_vector, search.candidates
            )
        # What was read ahead stands only if nothing was written since (port.PreparedHybrid).
        ahead = prepared.stamp == opened.stamp and prepared.keyword_hits is not None
        known = [BranchHit(hit_id, score) for hit_id, score in prepared.keyword_hits or ()] if ahead else None
        dense_hits, keyword_hits = search.branches(
            query_vector if ran.dense > 0 else None,
            prepared.sparse if ran.keyword > 0 else None,
            window,
            known,
            shortlist,
        )
        keyword_hits, corpus_size = self._owner_terms.rescored(
            prepared.collection, opened.shard, prepared.owner, prepared.sparse, dense_hits, keyword_hits
        )
        fused = fuse_branches(
            dense_hits,
            keyword_hits,
            query_vector,
            ran,
            corpus_size=corpus_size,
            limit=prepared.limit,
            config=self._fusion,
        )
        # Every hit passed the search's conditions in its branch, with no write since: read by id.
        payloads = dict(prepared.payloads) if ahead else {}
        unread = [hit.id for hit in fused if hit.id not in payloads]
        payloads.update(retrieve_payloads(opened.shard, prepared.owner, unread))
        return scored_records(fused, payloads)

    def _search_scope(self, request: port.PreparedHybrid) -> tuple[_Collection, Conditions]:
        validate_weights(request.weights)
        if request.limit < 1:
            raise ValueError(f"limit must be >= 1, got {request.limit}")
        return self._collection(request.collection), owner_conditions(request.owner, request.search_filter)

    def _is_open(self, collection: str, opened: _Collection) -> bool:
        """Whether `opened` is still the collection's (not closed, nor reopened meanwhile)."""
        return self._collections.get(collection) is opened

    def _backfill_writes(self, collection: str, opened: _Collection) -> edge_window.BackfillWrites:
        return edge_window.BackfillWrites(
            opened.write_gate,
            lambda operation: _apply(opened, operation),
            functools.partial(self._is_open, collection, opened),
        )

    async def get(self, collection: str, owner: Owner, ids: Sequence[str]) -> list[port.StoredRecord]:
        opened = self._collection(collection)
        wanted_ids = point_ids(ids)
        found = retrieve_payloads(opened.shard, owner, wanted_ids)  # by id, the owner checked on each
        return [port.StoredRecord(wanted, found[wanted]) for wanted in wanted_ids if wanted in found]

    async def scroll(
        self,
        collection: str,
        owner: Owner,
        search_filter: port.SearchFilter | None = None,
        limit: int = 1000,
        *,
        start_id: str | None = None,
    ) -> list[port.StoredRecord]:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        opened = self._collection(collection)
        conditions = owner_conditions(owner, search_filter)
        if conditions.matches_nothing:
            return []
        records, _ = opened.shard.scroll(
            qe.ScrollRequest(
                offset=None if start_id is None else point_id(start_id),
                limit=limit,
                filter=edge_filter(conditions),
                with_payload=True,
            )
        )
        return [port.StoredRecord(str(record.id), edge_window.without_window_key(record.payload)) for record in records]

    async def count(self, collection: str, owner: Owner, search_filter: port.SearchFilter | None = None) -> int:
        opened = self._collection(collection)
        conditions = owner_conditions(owner, search_filter)
        if conditions.matches_nothing:
            return 0
        return opened.shard.count(qe.CountRequest(exact=True, filter=edge_filter(conditions)))

    async def list_owners(self, collection: str) -> list[Owner]:
        shard = self._collection(collection).shard
        owners: list[Owner] = []
        tenants = shard.facet(qe.FacetRequest(TENANT_FIELD, limit=_FACET_LIMIT, exact=True))
        for tenant_hit in tenants.hits:
            tenant = str(tenant_hit.value)
            tenant_filter = qe.Filter(must=[qe.FieldCondition(TENANT_FIELD, match=qe.MatchValue(tenant))])
            users = shard.facet(qe.FacetRequest(USER_FIELD, limit=_FACET_LIMIT, exact=True, filter=tenant_filter))
            owners.extend(Owner(tenant_id=tenant, user_id=str(user_hit.value)) for user_hit in users.hits)
        return sorted(owners, key=lambda owner: (owner.tenant_id, owner.user_id))


def _recount(opened: _Collection) -> None:
    """After points were added or deleted: the collection's point count."""
    opened.points = opened.shard.info().points_count


def _apply(opened: _Collection, operation: qe.UpdateOperation) -> None:
    """Apply an update; while a build runs, also journal it for the replay into the built copy."""
    opened.shard.update(operation)
    opened.stamp = next(_STAMPS)
    if opened.journal is not None:
        opened.journal.append(operation)
