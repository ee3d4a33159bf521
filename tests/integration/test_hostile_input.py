"""Hostile input against the recall API served by a real uvicorn (real nats-server, FalkorDB, Qdrant
Edge behind it): broken unicode, NaN/Infinity, huge fields, wrong types, missing auth, another
tenant in the body and path-traversal-ish ids get a 4xx with a reason in the one error shape, never a
5xx, never a hang, and never their input echoed back."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.settings import NatsSettings
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import RecallStack, build_stack
from tests.integration.test_recall_api import embedder as embedder
from tests.integration.test_recall_api import keywords as keywords
from tests.support.events import session_event

pytestmark = pytest.mark.integration

LIMIT = 256 * 1024
HUGE = "x" * (LIMIT // 2)  # under the body limit, far over every field limit
ERROR_KEYS = {"detail", "code", "errors"}

BODIES: dict[str, dict[str, Any]] = {
    "/v1/recall/auto": {"user_id": "alice", "message": "hello there", "max_entries": 3, "token_budget": 100},
    "/v1/memories/search": {"user_id": "alice", "query": "payment", "limit": 5},
    "/v1/graph/search": {"user_id": "alice", "query": "DGIA", "hops": 1, "limit": 5},
    "/v1/facts": {"user_id": "alice", "text": "The user is vegetarian."},
    "/v1/sessions": session_event().model_dump(mode="json"),
    "/v1/sessions:batch": {"sessions": [session_event().model_dump(mode="json")]},
    f"/v1/facts/{uuid.uuid4()}/corrections": {"user_id": "alice", "value": "Busan", "text": "Lives in Busan."},
}


def mutations(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each field replaced by a lone surrogate, NaN, Infinity, a huge string and a wrong type."""
    found: list[tuple[str, Any]] = []
    for name, value in body.items():
        bad_values: list[Any] = [float("nan"), float("inf"), {"nested": True}]
        if isinstance(value, str):
            bad_values += ["\ud800", "ok\udfff", HUGE]
        else:
            bad_values += ["\ud800", -1, 10**30]
        found += [(f"{name}={bad!r:.20}", {**body, name: bad}) for bad in bad_values]
    found.append(("extra field", {**body, "tenant_id_override": "globex"}))
    found.append(("not an object", [1, 2, 3]))
    return found


@pytest.fixture
async def served(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> AsyncIterator[RecallStack]:
    async with build_stack(
        tmp_path, nats_settings, falkordb_graph, embedder, keywords, over_http=True, max_request_bytes=LIMIT
    ) as stack:
        yield stack


def check_error(response: Any, what: str) -> None:
    assert 400 <= response.status_code < 500, (what, response.status_code, response.text[:300])
    assert len(response.content) < 8192, (what, "the error echoed its input", len(response.content))
    body = response.json()
    assert set(body) == ERROR_KEYS and body["detail"], (what, body)
    if response.status_code == 422:
        assert body["errors"] and all(e["reason"] for e in body["errors"]), (what, body)


async def test_every_endpoint_refuses_hostile_bodies_with_a_4xx_and_a_reason(served: RecallStack) -> None:
    async with served.client() as http:
        for path, body in BODIES.items():
            for what, bad in mutations(body):
                content = json.dumps(bad, allow_nan=True).encode("ascii")  # \\ud800 stays an escape
                response = await http.post(path, content=content, headers={"content-type": "application/json"})
                if response.status_code == 207:  # the batch answers per item
                    assert all(i["status"] == "rejected" for i in response.json()["items"]), (path, what)
                    continue
                check_error(response, f"{path} {what}")
            broken = await http.post(path, content=b'{"user_id": "alice", "text": "\\ud800', headers={})
            check_error(broken, f"{path} truncated JSON")


async def test_queries_and_paths_with_hostile_values_get_4xx(served: RecallStack) -> None:
    async with served.client() as http:
        for path in (
            "/v1/memories/..%2F..%2Fetc%2Fpasswd",
            "/v1/facts/..%2Fsecret",
            f"/v1/facts/{'a' * 300}/history",
            "/v1/events/not-an-event",
            f"/v1/events/{uuid.uuid4()}",
        ):
            check_error(await http.get(path, params={"user_id": "alice"}), path)
        for params in (
            {"user_id": "../bob"},
            {"user_id": "alice", "limit": "NaN"},
            {"user_id": "alice", "limit": "1e309"},
            {"user_id": "alice", "after": "yesterday"},
            {"user_id": "alice", "after": "2026-05-02T00:00:00"},
            {"user_id": "x" * 10_000},
        ):
            check_error(await http.get("/v1/memories", params=params), str(params)[:60])
        for query in (
            "user_id=%ED%A0%80",
            "user_id=%FF%FE",
            "user_id=alice&cursor=%ED%A0%80",
            "user_id=alice&kind=%00",
        ):
            check_error(await http.get(f"/v1/memories?{query}"), query)
        deleted = await http.delete(f"/v1/memories/{uuid.uuid4()}", params={"user_id": "alice"})
        check_error(deleted, "forget a memory that does not exist")
        assert deleted.status_code == 404


async def test_a_body_naming_another_tenant_is_refused(served: RecallStack) -> None:
    async with served.client() as http:
        other = session_event(tenant_id="globex").model_dump(mode="json")
        response = await http.post("/v1/sessions", json=other)
        check_error(response, "another tenant")
        assert response.status_code == 403


async def _raw_request(base_url: str, head: str, body_prefix: bytes = b"") -> tuple[int, bytes]:
    """Send a request head (and the start of a body) on a raw socket; read the status and the body."""
    parts = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(head.encode("latin-1") + b"\r\n" + body_prefix)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(65536), timeout=10)
    finally:
        writer.close()
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[-1]


async def test_a_huge_post_is_refused_before_its_body_is_read(served: RecallStack) -> None:
    assert served.base_url is not None
    key = served.client().headers["Authorization"]
    host = urlsplit(served.base_url).netloc
    huge = 200 * 1024 * 1024
    for path in ("/v1/sessions", "/v1/recall/auto", "/mcp"):
        head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {huge}\r\n"
        status, body = await _raw_request(served.base_url, head, b'{"user_id": ')
        assert status == 401 and json.loads(body)["code"] == "unauthorized", (path, body)
        status, body = await _raw_request(served.base_url, head + f"Authorization: {key}\r\n", b"{")
        assert status == 413 and json.loads(body)["code"] == "too_large", (path, body)
    # Without a length the body is counted as it streams in.
    async with served.client() as http:

        async def chunks() -> AsyncIterator[bytes]:
            yield b'{"user_id": "alice", "message": "'
            for _ in range(LIMIT // 65536 + 2):
                yield b"a" * 65536
            yield b'"}'

        response = await http.post("/v1/recall/auto", content=chunks(), headers={"content-type": "application/json"})
        check_error(response, "chunked body over the limit")
        assert response.status_code == 413


async def test_get_on_the_mcp_endpoint_answers_at_once(served: RecallStack) -> None:
    async with served.client() as http:
        response = await asyncio.wait_for(http.get("/mcp", headers={"accept": "text/event-stream"}), timeout=10)
        assert response.status_code == 405 and response.headers["allow"] == "POST"
        check_error(response, "GET /mcp")


async def test_mcp_tools_refuse_hostile_arguments_without_a_server_error(served: RecallStack) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("memory_search", {"user_id": "alice", "query": "\ud800"}),
        ("memory_search", {"user_id": "alice", "query": "ok", "limit": float("nan")}),
        ("memory_list", {"user_id": "../bob"}),
        ("memory_list", {"user_id": "alice", "limit": 10**9}),
        ("memory_list", {"user_id": "alice", "cursor": "\ud800"}),
        ("memory_get_fact", {"user_id": "alice", "fact_id": "../../x"}),
        ("memory_fact_history", {"user_id": "alice", "fact_id": HUGE}),
        ("memory_forget", {"user_id": "alice", "memory_id": str(uuid.uuid4())}),
        ("memory_correct", {"user_id": "alice", "fact_id": str(uuid.uuid4()), "value": "\ud800", "text": "x"}),
        ("memory_add_sessions", {"sessions": [{"tenant_id": "globex"}]}),
        ("memory_event_status", {"user_id": "alice", "event_id": "\ud800"}),
        ("knowledge_graph_search", {"user_id": "alice", "query": "x", "hops": 99}),
        ("memory_recall", {"user_id": "alice", "token_budget": float("inf")}),
    ]
    async with served.client() as http:
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        for number, (tool, arguments) in enumerate(calls):
            request = {
                "jsonrpc": "2.0",
                "id": number,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            }
            content = json.dumps(request, allow_nan=True).encode("ascii")
            response = await http.post("/mcp", content=content, headers={**headers, "host": "127.0.0.1:1"})
            # MCP answers tool failures in-band (a 200 carrying an error); JSON it cannot decode (a lone
            # surrogate escape) is a 400 JSON-RPC parse error. Never a 5xx.
            assert response.status_code in (200, 400), (tool, response.status_code, response.text[:300])
            assert len(response.content) < 8192, (tool, "echoed its input")
            reply = response.json()
            failed = "error" in reply or reply.get("result", {}).get("isError")
            rejected = (reply.get("result", {}).get("structuredContent") or {}).get("rejected")
            assert failed or rejected, (tool, reply)


async def _upload_in_two_halves(base_url: str, path: str, headers: str, body: bytes) -> tuple[int, bytes]:
    """POST `body` on a raw socket in two halves, giving the server time to answer between them (as a
    slow link does), then read the answer."""
    parts = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        head = f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n{headers}Content-Length: {len(body)}\r\n\r\n"
        writer.write(head.encode("latin-1") + body[: len(body) // 2])
        await writer.drain()
        # An answer sent before the body is in would arrive now: give it the time to (or to not).
        first_byte = asyncio.ensure_future(reader.read(1))
        await asyncio.wait([first_byte], timeout=0.3)
        writer.write(body[len(body) // 2 :])
        await writer.drain()
        data = await asyncio.wait_for(first_byte, timeout=10) + await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()
    return int(data.split(b" ", 2)[1]), data.split(b"\r\n\r\n", 1)[-1]


async def test_a_body_over_the_limit_gets_its_refusal_not_a_connection_reset(served: RecallStack) -> None:
    """A client still uploading when it is refused must read the refusal: were the connection closed
    with the body unread, the kernel would answer the rest of the upload with a reset and the client
    would see "connection reset by peer" instead of the reason (as a loaded CI machine once did)."""
    assert served.base_url is not None
    key = served.client().headers["Authorization"]
    form = "Content-Type: application/x-www-form-urlencoded\r\n"
    api = "Content-Type: application/json\r\n"
    cases = [
        ("/ui/login", form, b"api_key=" + b"x" * 2_000_000, 413),
        ("/v1/recall/auto", api + f"Authorization: {key}\r\n", b'{"message": "' + b"a" * (LIMIT * 3) + b'"}', 413),
        ("/v1/recall/auto", api, b'{"message": "' + b"a" * (LIMIT * 3) + b'"}', 401),
    ]
    for path, headers, body, expected in cases:
        status, answer = await _upload_in_two_halves(served.base_url, path, headers, body)
        assert status == expected, (path, status, answer[:200])
        assert json.loads(answer)["code"] == ("too_large" if expected == 413 else "unauthorized")
