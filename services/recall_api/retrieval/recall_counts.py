"""Recall counts (`recall_count`, `last_recalled_at_ts`), which the pruner uses to find memories
nobody needs, are written off the response path: requests only enqueue; one background task
coalesces them and writes them through the episode and fact stores."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from services.common.domain.owner import Owner
from services.common.runtime.resources import Resources
from services.recall_api.retrieval.ranking import MemoryKind

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Recalled:
    kind: MemoryKind
    owner: Owner
    ids: tuple[str, ...]
    at_ts: float


class RecallCountUpdater:
    """A bounded queue and one worker. When the queue is full an update is dropped with a warning
    and counted (`dropped`): a recall count is a pruning hint, never worth slowing a turn down for."""

    def __init__(
        self, resources: Resources, *, max_pending: int = 10_000, batch: int = 256, gather_s: float = 0.5
    ) -> None:
        self._resources = resources
        self._queue: asyncio.Queue[_Recalled] = asyncio.Queue(maxsize=max_pending)
        self._batch = batch
        # Wait this long after the first update before writing: one coalesced write per interval
        # instead of a store write right behind every turn, competing with the next turn's search.
        self._gather_s = gather_s
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.dropped = 0
        self.failed = 0

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="recall-count-updater")

    def submit(self, kind: MemoryKind, owner: Owner, ids: Sequence[str], at_ts: float) -> None:
        if not ids:
            return
        try:
            self._queue.put_nowait(_Recalled(kind, owner, tuple(ids), at_ts))
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning(
                "recall-count queue full: dropped an update of %d %ss for tenant %s", len(ids), kind, owner.tenant_id
            )

    async def drain(self) -> None:
        """Wait until everything submitted so far is written (tests, shutdown)."""
        await self._queue.join()

    async def stop(self, timeout_s: float = 5.0) -> None:
        if self._task is None:
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout=timeout_s)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            if self._gather_s > 0:
                await asyncio.sleep(self._gather_s)
            items = [first]
            while len(items) < self._batch:
                try:
                    items.append(self._queue.get_nowait())
                except asyncio.QueueEmpty:
                    break
            try:
                await self._write(items)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failed += len(items)
                log.exception("could not write %d recall-count updates", len(items))
            finally:
                for _ in items:
                    self._queue.task_done()

    async def _write(self, items: Sequence[_Recalled]) -> None:
        # Coalesce: per (kind, owner), each id's number of recalls and latest time.
        grouped: dict[tuple[MemoryKind, Owner], dict[str, tuple[int, float]]] = defaultdict(dict)
        for item in items:
            per_id = grouped[(item.kind, item.owner)]
            for point_id in item.ids:
                count, latest = per_id.get(point_id, (0, 0.0))
                per_id[point_id] = (count + 1, max(latest, item.at_ts))
        for (kind, owner), per_id in grouped.items():
            if kind == "episode":
                self.written += await (await self._resources.episodes()).record_recalls(owner, per_id)
            else:
                self.written += await (await self._resources.facts()).record_recalls(owner, per_id)
