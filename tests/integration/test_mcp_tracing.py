"""MCP tool calls over stdio are spans (issue 15): the code behind `tiermem mcp` (a composition root
without consumers, the MCP server on stdin/stdout; real nats-server, FalkorDB and Qdrant Edge) runs
in this process with its stdio swapped for in-memory pipes, so the process's global tracer provider,
with an in-memory exporter attached, records a `tools/call` span per tool call; the recall's
embedding and vector spans hang under it, and no span names the tenant, the user or the query."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.server import stdio
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from services.cli.recall import _serve_mcp_stdio
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.settings import NatsSettings
from services.common.runtime.telemetry import tracer_provider
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES
from services.recall_api.settings import RecallApiSettings
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import ACME_KEY, ALICE, API_KEYS, ONBISEO, days_ago, embedder, keywords
from tiermem_lab.seeding import seed_episode

pytestmark = pytest.mark.integration
__all__ = ["embedder", "keywords"]  # module-scoped fixtures shared with test_recall_api

QUERY = "온비서 결제 모듈"
_EXPORTER = InMemorySpanExporter()
_ATTACHED: list[bool] = []


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    if not _ATTACHED:
        tracer_provider().add_span_processor(SimpleSpanProcessor(_EXPORTER))
        _ATTACHED.append(True)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


class _Pipe:
    """One direction of a stdio pipe: lines written on one side, read (async) on the other; None closes it."""

    def __init__(self) -> None:
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()

    def __aiter__(self) -> _Pipe:
        return self

    async def __anext__(self) -> str:
        line = await self._lines.get()
        if line is None:
            raise StopAsyncIteration
        return line

    async def write(self, text: str) -> None:
        await self._lines.put(text)

    async def flush(self) -> None:
        return None

    def close(self) -> None:
        self._lines.put_nowait(None)


class _StdioClient:
    """The client's end: JSON-RPC lines to the server's stdin, answers from its stdout."""

    def __init__(self, stdin: _Pipe, stdout: _Pipe) -> None:
        self._stdin, self._stdout, self._next_id = stdin, stdout, 0

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        await self._stdin.write(json.dumps({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}))
        answer: dict[str, Any] = json.loads(await asyncio.wait_for(anext(self._stdout), timeout=120))
        assert answer.get("id") == self._next_id and "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    async def notify(self, method: str) -> None:
        await self._stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}))


@contextlib.asynccontextmanager
async def tiermem_mcp(settings: RecallApiSettings, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[_StdioClient]:
    """`tiermem mcp --api-key ACME_KEY --user alice` in this process, on in-memory pipes."""
    stdin, stdout = _Pipe(), _Pipe()
    real_stdio_server = stdio.stdio_server
    monkeypatch.setattr(
        "mcp.server.mcpserver.server.stdio_server",
        lambda: real_stdio_server(stdin=stdin, stdout=stdout),  # type: ignore[arg-type]
    )
    server = asyncio.create_task(_serve_mcp_stdio(settings, ACME_KEY, ALICE.user_id))
    try:
        client = _StdioClient(stdin, stdout)
        initialized = await client.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
        )
        assert initialized["serverInfo"]["name"] == "tiermem"
        await client.notify("notifications/initialized")
        yield client
    finally:
        stdin.close()  # the client closes stdin: the server stops and closes its root
        await asyncio.wait_for(server, timeout=60)


def _texts(span: ReadableSpan) -> list[str]:
    attributes = dict(span.attributes or {})
    return [span.name, *attributes, *(str(value) for value in attributes.values()), span.status.description or ""]


def _descends_from(span: ReadableSpan, ancestor: ReadableSpan, by_id: dict[int, ReadableSpan]) -> bool:
    parent = span.parent
    while parent is not None:
        if parent.span_id == ancestor.context.span_id:
            return True
        above = by_id.get(parent.span_id)
        parent = above.parent if above is not None else None
    return False


@pytest.mark.slow  # the MCP server's own resources load the embedding and keyword models
async def test_tool_calls_over_stdio_are_spans_on_the_global_provider(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
    spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = EdgeVectorIndex(tmp_path / "qdrant-edge")
    for collection in (EPISODES, PASSAGES, FACTS):
        await index.ensure_collection(collection, embedder.dim)
    episode_id = await seed_episode(
        index, embedder, keywords, ALICE, session_id="s-onbiseo", summary=ONBISEO, occurred_at=days_ago(3)
    )
    await index.close()
    settings = RecallApiSettings(
        data_dir=tmp_path,
        api_keys=API_KEYS,
        nats=nats_settings,
        graph=falkordb_graph.settings(),
    )
    spans.clear()  # the seeding's own spans

    async with tiermem_mcp(settings, monkeypatch) as client:
        found = await client.request("tools/call", {"name": "memory_search", "arguments": {"query": QUERY}})
        assert [item["id"] for item in found["structuredContent"]["items"]] == [episode_id]

    finished = spans.get_finished_spans()
    (call,) = [span for span in finished if span.name == "tools/call memory_search"]
    assert call.kind == SpanKind.SERVER
    assert (call.attributes or {})["gen_ai.tool.name"] == "memory_search"
    by_id = {span.context.span_id: span for span in finished}
    below = [span.name for span in finished if _descends_from(span, call, by_id)]
    assert any(name.startswith("embeddings ") for name in below), f"the query embedding under the tool call: {below}"
    assert any(name.endswith(" vector") for name in below), f"the vector search under the tool call: {below}"
    secrets = [ALICE.tenant_id, ALICE.user_id, QUERY, ONBISEO[:12]]
    leaks = [(span.name, text) for span in finished for text in _texts(span) if any(s in text for s in secrets)]
    assert leaks == [], "no tenant, user, query or memory text in any span"
