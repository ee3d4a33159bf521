"""MCP tools through a real MCP client session: over streamable HTTP against the recall API served
by a real uvicorn (same Bearer keys), and over stdio against `serve_stdio` in a subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.settings import NatsSettings
from services.common.stores.graph.repository import EntityInput, EpisodeRef, RelationInput
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import (
    ACME_KEY,
    ALICE,
    API_KEYS,
    BOB,
    GLOBEX_KEY,
    ONBISEO,
    RecallStack,
    build_stack,
    days_ago,
    embedder,
    keywords,
    seed_scenario,
)
from tiermem_lab.seeding import seed_episode

pytestmark = pytest.mark.integration
__all__ = ["embedder", "keywords"]  # module-scoped fixtures shared with test_recall_api

REPO_ROOT = str(Path(__file__).resolve().parents[2])
TOOLS = {
    "memory_search",
    "memory_expand",
    "knowledge_graph_search",
    "memory_save",
    "memory_recall",
    # memory management (issue 12)
    "memory_add_sessions",
    "memory_event_status",
    "memory_add",  # typed short form (issue 51)
    "memory_list",
    "memory_get_fact",
    "memory_fact_history",
    "memory_forget",
    "memory_correct",
    # procedural memory (issue 13)
    "memory_procedures",
    # L0 (issue 51)
    "memory_context",
}


@pytest.fixture
async def served(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> AsyncIterator[RecallStack]:
    async with build_stack(tmp_path, nats_settings, falkordb_graph, embedder, keywords, over_http=True) as stack:
        yield stack


@contextlib.asynccontextmanager
async def mcp_session(stack: RecallStack, key: str = ACME_KEY, **headers: str) -> AsyncIterator[Client]:
    assert stack.base_url is not None
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}", **headers}, timeout=httpx2.Timeout(30.0, read=60.0)
    )
    async with http, Client(streamable_http_client(f"{stack.base_url}/mcp", http_client=http)) as client:
        yield client


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    return " ".join(part.text for part in result.content if isinstance(part, TextContent))


async def test_every_tool_through_a_streamable_http_session(served: RecallStack) -> None:
    ids = await seed_scenario(served)
    bob_episode = await served.episode(BOB, "s-bob", "Bob's notes on the 온비서 결제 모듈 review.")
    ref = EpisodeRef(ids["onbiseo"], "s-onbiseo", days_ago(3).timestamp())
    kim, onbiseo = (
        e.key
        for e in await served.graph.upsert_entities(
            ALICE, "personal", [EntityInput("김민수", "person"), EntityInput("온비서", "project")], episode=ref
        )
    )
    await served.graph.upsert_relations(ALICE, "personal", [RelationInput(kim, "works_on", onbiseo)], episode=ref)

    async with mcp_session(served) as client:
        listed = await client.list_tools()
        assert {tool.name for tool in listed.tools} == TOOLS
        for tool in listed.tools:
            assert tool.description

        found = structured(await client.call_tool("memory_search", {"user_id": "alice", "query": "온비서 결제 모듈"}))
        assert found["items"][0]["id"] == ids["onbiseo"]
        assert bob_episode not in [item["id"] for item in found["items"]]

        expanded = structured(await client.call_tool("memory_expand", {"user_id": "alice", "id": ids["onbiseo"]}))
        assert expanded["summary"] == ONBISEO
        assert expanded["provenance"]["session_id"] == "s-onbiseo"
        assert error_text(await client.call_tool("memory_expand", {"user_id": "alice", "id": bob_episode})) == (
            error_text(await client.call_tool("memory_expand", {"user_id": "alice", "id": "not-an-id"}))
        )

        graph = structured(
            await client.call_tool("knowledge_graph_search", {"user_id": "alice", "query": "김민수", "hops": 2})
        )
        assert [(r["source"], r["type"], r["target"]) for r in graph["relations"]] == [("김민수", "works_on", "온비서")]

        saved = structured(
            await client.call_tool(
                "memory_save",
                {
                    "user_id": "alice",
                    "text": "The user is allergic to peanuts.",
                    "attribute": "allergy",
                    "value": "peanuts",
                },
            )
        )
        assert (saved["outcome"], saved["status"]) == ("created", "tentative")
        rejected = await client.call_tool("memory_save", {"user_id": "alice", "text": "I am hungry. Very hungry."})
        assert "not saved: text has 2 sentences" in error_text(rejected)

        recalled = structured(await client.call_tool("memory_recall", {"user_id": "alice"}))
        assert [item["id"] for item in recalled["items"]] == [saved["fact_id"]]
        assert "allergic to peanuts" in recalled["section"]
        assert structured(await client.call_tool("memory_recall", {"user_id": "bob"}))["items"] == []

        missing_user = await client.call_tool("memory_search", {"query": "온비서"})
        assert "user_id is required" in error_text(missing_user)

    # The same data through the HTTP API of the same server.
    response = await served.http.post(
        "/v1/recall/auto", json={"user_id": "alice", "message": "온비서 결제 모듈 어떻게 됐지?"}
    )
    assert response.status_code == 200
    assert response.json()["items"][0]["id"] == ids["onbiseo"]


async def test_mcp_refuses_without_a_valid_key_and_isolates_tenants(served: RecallStack) -> None:
    ids = await seed_scenario(served)
    for key in ("not-a-configured-key-012345678", ""):
        with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 401 in its own exception types
            async with mcp_session(served, key=key) as client:
                await client.list_tools()
    async with served.client(None) as http:
        refused = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert refused.status_code == 401
    async with mcp_session(served, key=GLOBEX_KEY) as globex:
        result = structured(await globex.call_tool("memory_search", {"user_id": "alice", "query": "온비서 결제 모듈"}))
        assert result["items"] == []
        assert "memory not found" in error_text(
            await globex.call_tool("memory_expand", {"user_id": "alice", "id": ids["onbiseo"]})
        )


async def test_pinned_user_and_group_channel_cannot_be_widened_by_tool_arguments(served: RecallStack) -> None:
    ids = await seed_scenario(served)
    async with mcp_session(served, **{"X-TierMem-User-Id": "alice"}) as client:
        found = structured(await client.call_tool("memory_search", {"query": "salary negotiation Globex"}))
        assert ids["salary"] in [item["id"] for item in found["items"]]
        other = await client.call_tool("memory_search", {"query": "salary", "user_id": "bob"})
        assert "pinned" in error_text(other)
    async with mcp_session(served, **{"X-TierMem-User-Id": "alice", "X-TierMem-Channel": "group"}) as client:
        found = structured(
            await client.call_tool("memory_search", {"query": "salary negotiation Globex", "channel": "private"})
        )
        assert ids["salary"] not in [item["id"] for item in found["items"]]
        assert "95k" not in json.dumps(found, ensure_ascii=False)
        assert all(item["channel"] == "group" for item in found["items"])
        assert "memory not found" in error_text(
            await client.call_tool("memory_expand", {"id": ids["salary"], "channel": "private"})
        )
        dashboard = structured(await client.call_tool("memory_search", {"query": "DGIA dashboard launch"}))
        assert [item["id"] for item in dashboard["items"]] == [ids["dashboard"]]


@pytest.mark.slow  # a second process loads the embedding and keyword models
async def test_the_tools_over_stdio(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> None:
    # Seed the Edge data dir, then close it: a shard belongs to one process, and the server is another.
    index = EdgeVectorIndex(tmp_path / "qdrant-edge")
    for collection in (EPISODES, PASSAGES, FACTS):
        await index.ensure_collection(collection, embedder.dim)
    episode_id = await seed_episode(
        index, embedder, keywords, ALICE, session_id="s-onbiseo", summary=ONBISEO, occurred_at=days_ago(3)
    )
    await index.close()

    env = {
        **os.environ,
        "TIERMEM_DATA_DIR": str(tmp_path),
        "TIERMEM_API_KEYS": json.dumps(API_KEYS),
        "TIERMEM_MCP_API_KEY": ACME_KEY,
        "TIERMEM_MCP_USER_ID": "alice",
        "TIERMEM_NATS__URL": nats_settings.url,
        "TIERMEM_NATS__TOKEN": nats_settings.token.get_secret_value() if nats_settings.token else "",
        "TIERMEM_NATS__SUBJECT_ROOT": nats_settings.subject_root,
        "TIERMEM_GRAPH__PORT": str(falkordb_graph.port),
        "TIERMEM_GRAPH__PASSWORD": falkordb_graph.password,
        "TIERMEM_GRAPH__GRAPH_NAME": falkordb_graph.graph_name,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    # The entry point `tiermem mcp` uses, with settings from the environment only.
    script = textwrap.dedent(
        """
        from services.recall_api.mcp.server import run_stdio
        from services.recall_api.settings import RecallApiSettings

        run_stdio(RecallApiSettings())
        """
    )
    params = StdioServerParameters(command=sys.executable, args=["-c", script], env=env, cwd=REPO_ROOT)
    async with Client(params, read_timeout_seconds=120) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        found = structured(await client.call_tool("memory_search", {"query": "온비서 결제 모듈"}))
        assert [item["id"] for item in found["items"]] == [episode_id]
        expanded = structured(await client.call_tool("memory_expand", {"id": episode_id}))
        assert expanded["summary"] == ONBISEO
        assert "pinned" in error_text(await client.call_tool("memory_search", {"query": "x", "user_id": "bob"}))
