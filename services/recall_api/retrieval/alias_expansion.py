"""L1's alias expansion: names in a query that are entities of the owner's graph add the entity's
other names (its name and the aliases dedup merged into it) to the keyword query, so a question
that uses a nickname reaches the sessions that use the full name, and the other way round.

One graph read per query (the owner's personal entities whose name or alias is one of the query's
words or short word runs), read while the query embeds. The dense query is left as it is: no
extra embedding. A graph that is slow or down leaves the query as it was (never an error): the
expansion is an improvement, not a dependency."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence

from services.common.domain.owner import Owner
from services.common.gateways.keywords import FALLBACK_MARKS
from services.common.runtime.resources import Resources
from services.common.stores.graph.repository import channel_view, normalise_entity_name
from services.common.stores.vector.port import SparseVector

log = logging.getLogger(__name__)

_WORD = re.compile(r"\w[\w'.-]*\w|\w", re.UNICODE)
_LONGEST_NAME_WORDS = 3  # "Priya Sharma", "New York City"
_MAX_NORMS = 48  # a long query's word runs past this are not looked up
_MAX_EXTRA_NAMES = 8
# After a lookup fails or times out, searches skip the expansion for this long: a graph that is down would
# otherwise add the whole timeout to every search while it stays down.
_PAUSE_AFTER_FAILURE_S = 30.0


def query_name_norms(text: str, terms: Sequence[str]) -> list[str]:
    """Normalised forms the query could name an entity by: its words and runs of up to three words,
    plus its keyword terms (Korean morphemes, so "민지랑" offers "민지")."""
    words = _WORD.findall(text)
    norms: dict[str, None] = {}
    for size in range(1, _LONGEST_NAME_WORDS + 1):
        for start in range(len(words) - size + 1):
            norms.setdefault(normalise_entity_name(" ".join(words[start : start + size])), None)
    for term in terms:
        if not term.startswith(FALLBACK_MARKS):
            norms.setdefault(normalise_entity_name(term), None)
    return [norm for norm in norms if len(norm) >= 2][:_MAX_NORMS]


def other_names(records: Sequence[tuple[str, Sequence[str]]], asked: set[str]) -> list[str]:
    """The names and aliases of the entities found that the query did not use itself."""
    extra: dict[str, None] = {}
    for name, aliases in records:
        for form in (name, *aliases):
            if normalise_entity_name(form) not in asked:
                extra.setdefault(form, None)
    return list(extra)[:_MAX_EXTRA_NAMES]


def widen_sparse(sparse: SparseVector, extra: SparseVector) -> SparseVector:
    """The keyword query with `extra`'s terms added (each term once, weight 1 as the query's own)."""
    if not extra.indices:
        return sparse
    indices = sorted(set(sparse.indices) | set(extra.indices))
    return SparseVector(indices=indices, values=[1.0] * len(indices))


class AliasExpander:
    def __init__(
        self, resources: Resources, timeout_s: float, *, pause_after_failure_s: float = _PAUSE_AFTER_FAILURE_S
    ) -> None:
        self.resources = resources
        self.timeout_s = timeout_s
        self.pause_after_failure_s = pause_after_failure_s
        self._paused_until = 0.0

    async def extra_names(self, owner: Owner, text: str, channel: str) -> list[str]:
        """Other names of the entities `text` names; empty when none, when the graph does not answer
        within the timeout, or for a while after it did not (see `_PAUSE_AFTER_FAILURE_S`)."""
        if time.monotonic() < self._paused_until:
            return []
        try:
            return await asyncio.wait_for(self._lookup(owner, text, channel), timeout=self.timeout_s)
        except Exception as exc:  # the graph is optional here: search goes on without it
            self._paused_until = time.monotonic() + self.pause_after_failure_s
            log.warning(
                "alias expansion paused for %.0f s: %s: %s", self.pause_after_failure_s, type(exc).__name__, exc
            )
            return []

    async def _lookup(self, owner: Owner, text: str, channel: str) -> list[str]:
        terms = await asyncio.to_thread(self.resources.keywords().tokens, text)
        norms = query_name_norms(text, terms)
        if not norms:
            return []
        graph = await self.resources.graph()
        found = await graph.find_entities_by_norm(owner, "personal", norms)
        records = [(view.name, view.aliases) for e in found if (view := channel_view(e, channel)) is not None]
        return other_names(records, set(norms))
