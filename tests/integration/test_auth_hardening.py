"""Authentication and exposure of the recall API served by a real uvicorn (real nats-server, FalkorDB
and Qdrant Edge behind it), as `tiermem serve recall-api` runs it: malformed memory-browser cookies
send the browser to the login form; wrong keys are throttled per client (429 with Retry-After); a
cookie replayed after logout is refused; /metrics and the API docs can be put behind the key; a body
that stalls is answered 408; a single session may leave `tenant_id` to the key."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.routing import APIRoute

from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.settings import NatsSettings
from services.recall_api.ui.actions import actions_router
from services.recall_api.ui.pages import pages_router
from tests.fixtures.falkordb import FalkorDBGraph
from tests.integration.test_recall_api import ACME_KEY, GLOBEX_KEY, RecallStack, build_stack
from tests.integration.test_recall_api import embedder as embedder
from tests.integration.test_recall_api import keywords as keywords
from tests.support.events import session_event

pytestmark = pytest.mark.integration

BURST = 3
BODY_TIMEOUT_S = 2.0
HARDENED: dict[str, Any] = {
    "auth_failure_burst": BURST,
    "auth_failures_per_minute": 1.0,
    "metrics_require_key": True,
    "docs_require_key": True,
    "body_read_timeout_s": BODY_TIMEOUT_S,
}
DOC_PATHS = ("/openapi.json", "/docs", "/redoc")
SENT_30_BYTES = b'{"user_id": "alice", "message"'


@pytest.fixture
async def hardened(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> AsyncIterator[RecallStack]:
    async with build_stack(
        tmp_path, nats_settings, falkordb_graph, embedder, keywords, over_http=True, **HARDENED
    ) as s:
        yield s


@pytest.fixture
async def default(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> AsyncIterator[RecallStack]:
    async with build_stack(tmp_path, nats_settings, falkordb_graph, embedder, keywords, over_http=True) as s:
        yield s


async def _raw(base_url: str, head: bytes, body: bytes = b"", timeout_s: float = 30) -> tuple[int, bytes, bytes]:
    """One request written as bytes on a socket (cookies as curl sends them: UTF-8, unescaped); the
    status, the head and the body of the answer."""
    parts = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(head.replace(b"{host}", parts.netloc.encode()) + body)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=timeout_s)
    finally:
        writer.close()
    answer_head, _, answer_body = answer.partition(b"\r\n\r\n")
    return int(answer.split(b" ", 2)[1]), answer_head, answer_body


def _ui_paths() -> list[tuple[str, str]]:
    """Every memory-browser route (method, path), its path parameters filled with valid-looking ids."""
    filled = {"user_id": "alice", "fact_id": str(uuid.uuid4()), "memory_id": str(uuid.uuid4())}
    filled |= {"event_id": str(uuid.uuid4()), "episode_id": str(uuid.uuid4())}
    found: list[tuple[str, str]] = []
    for route in [*pages_router.routes, *actions_router.routes]:
        assert isinstance(route, APIRoute)
        path = re.sub(r"\{(\w+)(:\w+)?\}", lambda m: filled.get(m.group(1), "x"), route.path)
        found += [(method, path) for method in sorted(route.methods or ()) if method in ("GET", "POST")]
    assert len(found) > 10, found
    return found


MALFORMED_COOKIES = [
    "v1.é.é.1.é".encode(),
    b"v1.\xff\xfe.\x80.1.\xc3",
    b"v1." + "é".encode() * 32 + b"." + b"0" * 32 + b".1." + b"0" * 64,
    b"v1.x.y.z.w",
    b"v1....",
    b"v1.0.0.99999999999999999999999.0",
    b'"quoted"',
    b"a" * 4000,
    b"=;=;=",
]


async def test_malformed_cookies_send_every_ui_page_to_the_login_form(hardened: RecallStack) -> None:
    assert hardened.base_url is not None
    for method, path in _ui_paths():
        for cookie in MALFORMED_COOKIES:
            head = f"{method} {path} HTTP/1.1\r\nHost: {{host}}\r\nConnection: close\r\n".encode()
            head += b"Cookie: tiermem_ui=" + cookie + b"\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            status, answer_head, _ = await _raw(hardened.base_url, head + b"Content-Length: 0\r\n\r\n")
            assert status < 500, (method, path, cookie[:40], status)
            if method == "GET" and path != "/ui/login" and not path.endswith(".json"):
                assert status == 303 and b"location: /ui/login" in answer_head.lower(), (path, cookie[:40], status)


async def test_wrong_bearer_keys_are_throttled_per_client_and_right_keys_never(hardened: RecallStack) -> None:
    async with hardened.client() as right, hardened.client("wrong-key-0123456789abcdefghij") as wrong:
        for _ in range(30):
            assert (await right.get("/v1/prompt/memory-instructions")).status_code == 200
        for _ in range(BURST):
            assert (await wrong.get("/v1/prompt/memory-instructions")).status_code == 401
        throttled = await wrong.get("/v1/prompt/memory-instructions")
        assert throttled.status_code == 429, throttled.text
        assert int(throttled.headers["retry-after"]) >= 1
        assert throttled.json()["code"] == "too_many_requests"
        assert (await wrong.post("/mcp", json={})).status_code == 429, "MCP shares the guard"
        # The key that has been working from this client still works: successful clients are not throttled.
        assert (await right.get("/v1/prompt/memory-instructions")).status_code == 200
    async with hardened.client(GLOBEX_KEY) as new_here:
        # A right key never used from this client is not even checked: a guess that hit would be told so.
        assert (await new_here.get("/v1/prompt/memory-instructions")).status_code == 429
    # Another client address has its own budget (the same app, reached from 10.1.2.3).
    transport = httpx.ASGITransport(app=hardened.app, client=("10.1.2.3", 4321))
    headers = {"Authorization": f"Bearer {GLOBEX_KEY}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://recall.test", headers=headers) as other:
        assert (await other.get("/v1/prompt/memory-instructions")).status_code == 200


async def test_wrong_login_keys_are_throttled_and_share_the_budget(hardened: RecallStack) -> None:
    assert hardened.base_url is not None
    async with httpx.AsyncClient(base_url=hardened.base_url, timeout=30) as browser:
        assert (await browser.post("/ui/login", data={"api_key": ACME_KEY})).status_code == 303
        for _ in range(BURST):
            refused = await browser.post("/ui/login", data={"api_key": "wrong-key-0123456789abcdefghij"})
            assert refused.status_code == 401
        throttled = await browser.post("/ui/login", data={"api_key": GLOBEX_KEY})
        assert throttled.status_code == 429 and int(throttled.headers["retry-after"]) >= 1
        again = await browser.post("/ui/login", data={"api_key": ACME_KEY})
        assert again.status_code == 303, "a key that logged in from here before is not throttled"
        bearer = await browser.get("/v1/prompt/memory-instructions", headers={"Authorization": "Bearer nope-nope"})
        assert bearer.status_code == 429, "the login form's failures count for the Bearer guard too"


async def _login(base_url: str) -> tuple[str, str]:
    """Log in through the form: the cookie and the page's CSRF token."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as browser:
        logged_in = await browser.post("/ui/login", data={"api_key": ACME_KEY})
        assert logged_in.status_code == 303, logged_in.text
        cookie = logged_in.cookies["tiermem_ui"]
        page = await browser.get("/ui", cookies={"tiermem_ui": cookie})
        assert page.status_code == 200, page.text[:300]
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert csrf is not None
        return cookie, csrf.group(1)


async def _lands_on(base_url: str, cookie: str) -> str:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as browser:
        answer = await browser.get("/ui/pick", params={"user_id": "alice"}, cookies={"tiermem_ui": cookie})
        assert answer.status_code == 303
        return answer.headers["location"]


async def test_a_cookie_replayed_after_logout_is_refused(hardened: RecallStack) -> None:
    assert hardened.base_url is not None
    cookie, csrf = await _login(hardened.base_url)
    other_cookie, _ = await _login(hardened.base_url)
    assert await _lands_on(hardened.base_url, cookie) == "/ui/u/alice"
    async with httpx.AsyncClient(base_url=hardened.base_url, timeout=30) as browser:
        out = await browser.post("/ui/logout", data={"csrf": csrf}, cookies={"tiermem_ui": cookie})
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"
    assert await _lands_on(hardened.base_url, cookie) == "/ui/login", "the logged-out cookie still worked"
    assert await _lands_on(hardened.base_url, other_cookie) == "/ui/u/alice", "another login was ended too"


async def test_metrics_and_docs_need_the_key_when_set(hardened: RecallStack) -> None:
    async with hardened.client(None) as anonymous, hardened.client() as keyed:
        for path in ("/metrics", *DOC_PATHS):
            refused = await anonymous.get(path)
            assert refused.status_code == 401 and refused.json()["code"] == "unauthorized", path
            assert (await keyed.get(path)).status_code == 200, path
        assert (await anonymous.get("/healthz")).status_code == 200, "probes stay open"


async def test_metrics_and_docs_are_open_by_default(default: RecallStack) -> None:
    async with default.client(None) as anonymous:
        for path in ("/metrics", *DOC_PATHS):
            assert (await anonymous.get(path)).status_code == 200, path


async def test_a_body_that_stalls_gets_408(hardened: RecallStack) -> None:
    assert hardened.base_url is not None
    head = (
        f"POST /v1/recall/auto HTTP/1.1\r\nHost: {{host}}\r\nAuthorization: Bearer {ACME_KEY}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    ).encode()
    started = time.monotonic()
    status, answer_head, body = await _raw(hardened.base_url, head, SENT_30_BYTES)
    elapsed = time.monotonic() - started
    assert status == 408, (status, body[:200])
    assert b"connection: close" in answer_head.lower()
    assert BODY_TIMEOUT_S - 0.5 <= elapsed < BODY_TIMEOUT_S + 10, elapsed
    assert json.loads(body)["code"] == "request_timeout"


async def test_a_single_session_takes_its_tenant_from_the_key(default: RecallStack) -> None:
    event = session_event().model_dump(mode="json")
    del event["tenant_id"]
    async with default.client() as http:
        accepted = await http.post("/v1/sessions", json=event)
        assert accepted.status_code == 202, accepted.text
        foreign = await http.post("/v1/sessions", json={**event, "event_id": str(uuid.uuid4()), "tenant_id": "globex"})
        assert foreign.status_code == 403
        assert foreign.json()["errors"][0]["field"] == "tenant_id"
        assert "API key" in foreign.json()["errors"][0]["reason"]
        schema = (await http.get("/openapi.json")).json()
    body_ref = schema["paths"]["/v1/sessions"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body_schema = schema["components"]["schemas"][body_ref.rsplit("/", 1)[-1]]
    assert "tenant_id" in body_schema["properties"] and "tenant_id" not in body_schema["required"]


@pytest.fixture
async def operated(
    tmp_path: Path,
    nats_settings: NatsSettings,
    falkordb_graph: FalkorDBGraph,
    embedder: LocalE5Embedder,
    keywords: KeywordEncoder,
) -> AsyncIterator[RecallStack]:
    async with build_stack(
        tmp_path, nats_settings, falkordb_graph, embedder, keywords, over_http=True, operator_tenants=["acme"]
    ) as s:
        yield s


async def test_whole_stack_figures_are_for_operator_tenants_only(operated: RecallStack) -> None:
    """The Pipeline page sums every tenant's lag, dead letters and cost: another tenant gets 403 and no link."""
    assert operated.base_url is not None
    for key, allowed in ((ACME_KEY, True), (GLOBEX_KEY, False)):
        async with httpx.AsyncClient(base_url=operated.base_url, timeout=30) as browser:
            logged_in = await browser.post("/ui/login", data={"api_key": key})
            assert logged_in.status_code == 303, logged_in.text
            cookies = {"tiermem_ui": logged_in.cookies["tiermem_ui"]}
            home = await browser.get("/ui", cookies=cookies)
            pipeline = await browser.get("/ui/pipeline", cookies=cookies)
        assert ('href="/ui/pipeline"' in home.text) is allowed
        assert pipeline.status_code == (200 if allowed else 403), pipeline.text[:300]
        assert ("Consumers" in pipeline.text) is allowed
