"""A canonical dump of what one user has in every store, for comparing the final state of two runs
(a faulted run against a fault-free one). Only what the pipeline derives from the sessions is
kept: run-dependent values (stream names, wall-clock times, costs) are left out, lists are sorted.

(A small stand-in until an operator `tiermem dump` exists; the fault tests compare with it.)"""

from __future__ import annotations

from typing import Any

from contracts.events import Scope
from services.common.domain.owner import Owner
from services.common.runtime.resources import Resources

_LIMIT = 10_000
_SCOPES: tuple[Scope, ...] = ("personal", "team", "org")


async def user_dump(resources: Resources, owner: Owner) -> dict[str, Any]:
    """Episodes, passages, facts and graph entities the owner has, canonically ordered."""
    episodes = await resources.episodes()
    facts = await resources.facts()
    graph = await resources.graph()
    episode_rows = sorted(
        (e.episode_id, e.session_id, e.channel, e.scope, e.summary, tuple(sorted(e.entity_names)))
        for e in await episodes.scroll(owner, None, _LIMIT)
    )
    passage_rows = sorted((p.episode_id, p.index, p.text) for p in await episodes.scroll_passages(owner, None, _LIMIT))
    fact_rows = sorted(
        (
            s.fact.fact_id,
            s.fact.subject,
            s.fact.attribute,
            s.fact.value,
            s.fact.text,
            s.fact.status,
            s.fact.evidence_count,
            tuple(sorted(p.episode_id for p in s.fact.provenance)),
            tuple(sorted(s.channels)),
        )
        for s in await facts.scroll(owner, None, _LIMIT)
    )
    entities = [e for scope in _SCOPES for e in await graph.list_entities(owner, scope)]
    entity_rows = sorted(
        (
            e.key,
            e.scope,
            e.name,
            e.entity_type,
            tuple(sorted(e.aliases)),
            tuple(sorted(e.group_norms)),
            tuple(sorted(e.user_ids)),
            tuple(sorted(e.episode_ids)),
            tuple(sorted(e.merged_keys)),
        )
        for e in entities
    )
    return {
        "episodes": episode_rows,
        "passages": passage_rows,
        "facts": fact_rows,
        "entities": entity_rows,
        "graph_counts": await graph.count(owner),
    }
