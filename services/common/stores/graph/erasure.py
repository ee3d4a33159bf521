"""Erasure from the entity graph: a user's whole contribution, or one episode's, with the provenance
on nodes and edges telling what goes and what stays. Idempotent, so a crashed run is simply redone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from services.common.domain.owner import Owner
from services.common.stores.graph.erasure_queries import (
    DELETE_EPISODE,
    DELETE_USER_EPISODES,
    REMOVE_FROM_EDGES,
    REMOVE_FROM_NODES,
    USER_EPISODES,
)
from services.common.stores.graph.repository_base import GraphRepositoryBase


def _erasure_counts(
    edges: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]], episodes: Sequence[Mapping[str, Any]]
) -> dict[str, int]:
    """What an erasure did, from the single summary row each of its three queries returns (none when
    the query did not run)."""
    return {
        "relations_deleted": int(edges[0]["deleted"] or 0) if edges else 0,
        "relations_updated": int(edges[0]["updated"] or 0) if edges else 0,
        "entities_deleted": int(nodes[0]["deleted"] or 0) if nodes else 0,
        "entities_updated": int(nodes[0]["updated"] or 0) if nodes else 0,
        "episodes_deleted": int(episodes[0]["deleted"] or 0) if episodes else 0,
    }


class GraphErasure(GraphRepositoryBase):
    """The erasing part of `GraphRepository`."""

    async def delete_user_data(self, owner: Owner) -> dict[str, int]:
        """Erase the user from the tenant's graph: their personal nodes and edges go; shared (team/org)
        nodes and edges lose the user, the user's episodes and the aliases only they contributed, and
        go when no user remains; the user's Episode nodes go. Idempotent."""
        base = self._params(owner)
        episodes = await self._executor.run(USER_EPISODES, base)
        episode_ids = [str(key) for key in episodes[0]["episode_ids"]] if episodes else []
        params = {
            **base,
            "match_user": True,
            "drop_episode_ids": episode_ids,
            "keep_episode_ids": [],
            "source_prefix": f"{owner.user_id}:",
        }
        edges = await self._executor.run(REMOVE_FROM_EDGES, params)
        nodes = await self._executor.run(REMOVE_FROM_NODES, params)
        deleted_episodes = await self._executor.run(DELETE_USER_EPISODES, base)
        return _erasure_counts(edges, nodes, deleted_episodes)

    async def delete_episode(self, owner: Owner, episode_id: str) -> dict[str, int]:
        """Erase what one episode of the owner contributed: its id leaves every node and edge; the
        owner leaves those no other episode of theirs supports; nodes and edges left without users go;
        the Episode node goes last (so a crashed run is redone in full). Other users' episodes are
        untouchable: the episode must belong to the owner."""
        base = self._params(owner)
        episodes = await self._executor.run(USER_EPISODES, base)
        owned = {str(key) for key in episodes[0]["episode_ids"]} if episodes else set()
        if episode_id not in owned:
            return _erasure_counts([], [], [])
        params = {
            **base,
            "match_user": False,
            "drop_episode_ids": [episode_id],
            "keep_episode_ids": sorted(owned - {episode_id}),
            "source_prefix": f"{owner.user_id}:",
        }
        edges = await self._executor.run(REMOVE_FROM_EDGES, params)
        nodes = await self._executor.run(REMOVE_FROM_NODES, params)
        deleted = await self._executor.run(DELETE_EPISODE, {**base, "episode_id": episode_id})
        return _erasure_counts(edges, nodes, deleted)
