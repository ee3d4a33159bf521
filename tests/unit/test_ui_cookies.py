"""Whatever a client sends as its Cookie header, the memory browser answers with the login form (a
page) or a refusal (a form post), never a 500: the whole app (middleware, routes, error handlers)
is called as uvicorn calls it, with arbitrary cookie bytes. No store is reached before the session
check, so the app runs here without its servers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.types import Message

from services.recall_api.app import create_app
from services.recall_api.settings import RecallApiSettings

KEY = "Kq7uV2xP9sLm4Tz8RbN3wYc6-local"
PAGES = [("GET", "/ui/pick", b"user_id=alice"), ("GET", "/ui/u/alice", b""), ("GET", "/ui", b"")]
FORMS = [("POST", "/ui/logout", b""), ("POST", "/ui/u/alice/search", b"")]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    data_dir: Path = tmp_path_factory.mktemp("ui-cookies")
    return create_app(RecallApiSettings(data_dir=data_dir, api_keys={KEY: "local"}))


def _call(app: FastAPI, method: str, path: str, query: bytes, cookie: bytes) -> tuple[int, dict[bytes, bytes]]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [
            (b"host", b"recall.test"),
            (b"cookie", cookie),
            (b"content-type", b"application/x-www-form-urlencoded"),
            (b"content-length", b"0"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("recall.test", 80),
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(message for message in sent if message["type"] == "http.response.start")
    return start["status"], dict(start["headers"])


# A token's shape: version, key digest, session id, issue time (digits) and signature, each of anything.
DIGITS = st.from_regex(r"[0-9]{1,12}", fullmatch=True) | st.text(max_size=5)
COOKIE_HEADERS = (
    st.binary(max_size=400)
    | st.text(max_size=200).map(lambda value: b"tiermem_ui=" + value.encode("utf-8", "surrogatepass"))
    | st.tuples(st.text(max_size=40), st.text(max_size=40), DIGITS, st.text(max_size=70)).map(
        lambda parts: b"tiermem_ui=v1." + ".".join(parts).encode("utf-8", "surrogatepass")
    )
)


@settings(max_examples=300, deadline=None)
@given(cookie=COOKIE_HEADERS)
def test_no_cookie_header_makes_a_ui_request_fail(app: FastAPI, cookie: bytes) -> None:
    for method, path, query in PAGES:
        status, headers = _call(app, method, path, query, cookie)
        assert status == 303 and headers[b"location"] == b"/ui/login", (path, cookie[:60], status)
    for method, path, query in FORMS:
        status, _ = _call(app, method, path, query, cookie)
        assert status == 401, (path, cookie[:60], status)


def test_the_reported_cookie_gets_the_login_form(app: FastAPI) -> None:
    status, headers = _call(app, "GET", "/ui/pick", b"user_id=alice", "tiermem_ui=v1.é.é.1.é".encode())
    assert status == 303 and headers[b"location"] == b"/ui/login"
    status, _ = _call(app, "GET", "/ui/login", b"", "tiermem_ui=v1.é.é.1.é".encode())
    assert status == 200
