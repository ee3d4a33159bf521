"""What every part of `GraphRepository` stands on: the executor, the clock, the owner's query
parameters, and following merges from a requested key to the live node."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from services.common.domain.owner import Owner
from services.common.stores.graph.model import EpisodeRef
from services.common.stores.graph.port import CypherExecutor
from services.common.stores.graph.read_queries import RESOLVE_DIRECT, RESOLVE_REDIRECT


class GraphRepositoryBase:
    """The executor and clock shared by the writes, reads and erasure of the entity graph. Every query
    gets the owner's tenant and user as parameters, so each can filter on them."""

    def __init__(self, executor: CypherExecutor, *, clock: Callable[[], float] = time.time) -> None:
        self._executor = executor
        self._clock = clock

    @property
    def executor(self) -> CypherExecutor:
        """The executor underneath (bootstrap at start-up, close at shutdown)."""
        return self._executor

    def _params(self, owner: Owner, **extra: Any) -> dict[str, Any]:
        return {"tenant_id": owner.tenant_id, "user_id": owner.user_id, "now": float(self._clock()), **extra}

    @staticmethod
    def _episode_params(episode: EpisodeRef | None) -> dict[str, Any]:
        if episode is None:
            return {"episode_id": None}
        if not episode.episode_id:
            raise ValueError("episode_id must not be empty")
        return {
            "episode_id": episode.episode_id,
            "session_id": episode.session_id,
            "occurred_at_ts": float(episode.occurred_at_ts),
        }

    async def resolve_keys(self, owner: Owner, keys: Sequence[str]) -> dict[str, str]:
        """Requested key → key of the live node visible to the owner, following merges. Keys that
        resolve to nothing are absent from the result."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        resolved: dict[str, str] = {}
        for record in await self._executor.run(RESOLVE_DIRECT, self._params(owner, keys=wanted)):
            resolved[str(record["requested"])] = str(record["key"])
        missing = [key for key in wanted if key not in resolved]
        if missing:
            for record in await self._executor.run(RESOLVE_REDIRECT, self._params(owner, keys=missing)):
                resolved.setdefault(str(record["requested"]), str(record["key"]))
        return resolved
