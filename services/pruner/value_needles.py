"""What a fact erasure searches for: the fact's value, its sentence, and the graph's names for the
value with every alias of them.

Why the graph's names: a value is rarely repeated verbatim. The user says "I'm allergic to
Xanthorrhoea nuts" (value "Xanthorrhoea nuts"); the assistant echoes "Noted: Xanthorrhoea allergy", and
a later session spells it "Xanthorhoea", which dedup folds into the same entity as an alias. The
extractor named "Xanthorrhoea" an entity of the same episode, inside the value: that name, and every
alias dedup merged into it, are how the value is referred to elsewhere, so they are forgotten with it.
Generic words are not: only an entity of the user, named by a phrase inside the value and written like
a name (a capital, or a script without case), and observed in one of the fact's own episodes, counts;
an all-lowercase entity ("nuts") never does (forgetting "Xanthorrhoea nuts" must keep "pine nuts"),
nor a name under three characters (an "R" inside "R and Go" would erase every sentence about R)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from services.common.domain.owner import Owner
from services.common.domain.value_text import Needle, make_needle, needles_of
from services.common.stores.facts import StoredFact
from services.common.stores.graph.repository import EntityRecord, GraphRepository, normalise_entity_name
from services.common.stores.value_places import entities_of
from services.pruner.erasure_steps import ErasureProgress, ErasureScope

log = logging.getLogger(__name__)

_MIN_NAME_CHARS = 3


def names_for_value(value: str, entities: Sequence[EntityRecord], episode_ids: frozenset[str]) -> list[str]:
    """Names and aliases of the entities that name the value (or a phrase of it) and were observed in
    one of the fact's episodes; with no episode known (an API save), entities named exactly the value."""
    value_norm = normalise_entity_name(value)
    found: list[str] = []
    for entity in entities:
        names = [entity.name, *entity.aliases]
        observed_with_fact = not episode_ids or bool(episode_ids & set(entity.episode_ids))
        if not observed_with_fact and value_norm not in {normalise_entity_name(name) for name in names}:
            continue
        if any(_names_part_of(name, value) for name in names):
            found.extend(names)
    return found


def _names_part_of(name: str, value: str) -> bool:
    if len(normalise_entity_name(name)) < _MIN_NAME_CHARS or not _is_a_name(name):
        return False
    needle = make_needle(name)
    return needle is not None and needle.found_in(value)


def _is_a_name(name: str) -> bool:
    """Written like a name: a capital letter, or a script without case (Korean). An all-lowercase
    Latin entity ("nuts", "allergy") is a common noun, and forgetting it would forget every fact that
    merely shares the word."""
    return any(char.isupper() or (char.isalpha() and char.lower() == char.upper()) for char in name)


async def value_texts(graph: GraphRepository, owner: Owner, stored: StoredFact, limit: int) -> list[str]:
    fact = stored.fact
    episode_ids = frozenset(p.episode_id for p in fact.provenance if p.source == "extraction")
    names = names_for_value(fact.value, await entities_of(graph, owner, limit), episode_ids)
    return [fact.value, fact.text, *names]


async def fact_needles_of(scope: ErasureScope, fact_id: str, progress: ErasureProgress) -> list[Needle]:
    """What to search for, recorded in the progress with the fact's sessions: the fact point and its
    entities are deleted along the way, and a resumed erasure must still know what it was looking for."""
    stored = await scope.facts.get(scope.owner, [fact_id])
    if stored:
        texts = await value_texts(scope.graph, scope.owner, stored[0], scope.scan_limit)
        progress.needles = sorted({*(progress.needles or []), *(needle.text for needle in needles_of(texts))})
        fact_sessions = [p.session_id for p in stored[0].fact.provenance if p.session_id]
        progress.session_ids = sorted({*progress.session_ids, *fact_sessions})
    elif progress.needles is None:
        # No user id (nor memory text) at WARNING: the fact id joins the request's records.
        log.warning("fact %s of tenant %s not found: nothing to erase", fact_id, scope.owner.tenant_id)
        progress.needles = []
    return needles_of(progress.needles)
