"""Retries against a real HTTP server (uvicorn on a loopback port) that answers 503/429 on purpose:
the client waits and repeats what the server could not take, and gives up with a typed error."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from tiermem_client import (
    AsyncTiermemClient,
    InvalidRequestError,
    RetryPolicy,
    TiermemClient,
    TiermemError,
    TransportError,
    UnavailableError,
)

from services.cli.servers.net import free_port
from tests.integration.test_recall_api import serving

FAST = RetryPolicy(attempts=3, initial_backoff_s=0.01, max_backoff_s=0.05)
FACTS = {"section": "", "items": [], "tokens": 0, "omitted": 0}


def flaky_app(seen: Counter[str]) -> FastAPI:
    """/v1/facts fails twice with 503 then answers; every user_id='busy' call is 429; bad input is 422."""
    app = FastAPI()

    @app.get("/v1/facts")
    async def facts(request: Request, user_id: str) -> JSONResponse:
        seen[user_id] += 1
        if user_id == "busy":
            return JSONResponse({"detail": "slow down", "code": "rate_limited"}, 429, {"Retry-After": "0"})
        if user_id == "bad":
            body = {"detail": "invalid request", "code": "invalid_request", "errors": [{"field": "x", "reason": "no"}]}
            return JSONResponse(body, 422)
        if seen[user_id] <= 2:
            return JSONResponse({"detail": "store unavailable", "code": "unavailable"}, 503)
        assert request.headers["authorization"] == "Bearer k"
        return JSONResponse(FACTS)

    return app


@pytest.fixture
async def flaky() -> AsyncIterator[tuple[str, Counter[str]]]:
    seen: Counter[str] = Counter()
    async with serving(flaky_app(seen), over_http=True) as base_url:
        assert base_url is not None
        yield base_url, seen


async def test_the_async_client_retries_503_and_429_then_gives_up(flaky: tuple[str, Counter[str]]) -> None:
    base_url, seen = flaky
    async with AsyncTiermemClient(base_url, "k", retry=FAST) as client:
        assert (await client.facts("alice")).omitted == 0
        assert seen["alice"] == 3  # two 503s, then the answer
        with pytest.raises(UnavailableError) as busy:
            await client.facts("busy")
        assert busy.value.status == 429 and busy.value.code == "rate_limited" and seen["busy"] == FAST.attempts
        with pytest.raises(InvalidRequestError) as bad:
            await client.facts("bad")
        assert seen["bad"] == 1 and bad.value.errors[0].field == "x"  # a 422 is never retried


async def test_the_blocking_client_retries_the_same_way(flaky: tuple[str, Counter[str]]) -> None:
    base_url, seen = flaky

    def blocking() -> None:
        with TiermemClient(base_url, "k", retry=FAST) as client:
            assert client.facts("carol").tokens == 0
            with pytest.raises(UnavailableError):
                client.facts("busy")

    await asyncio.to_thread(blocking)
    assert (seen["carol"], seen["busy"]) == (3, FAST.attempts)


def test_an_unreachable_server_is_a_transport_error_after_the_retries() -> None:
    with TiermemClient(f"http://127.0.0.1:{free_port()}", "k", retry=FAST) as client, pytest.raises(TransportError):
        client.facts("alice")


def test_retry_after_is_honoured_within_the_cap() -> None:
    policy = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=2.0)
    assert policy.delay(1, "1.5") == 1.5
    assert policy.delay(1, "120") == 2.0
    assert 0.05 <= policy.delay(1, None) <= 0.1
    assert 1.0 <= policy.delay(9, "Wed, 21 Oct 2015 07:28:00 GMT") <= 2.0


def test_a_missing_api_key_is_refused_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERMEM_API_KEY", raising=False)
    with pytest.raises(TiermemError, match="TIERMEM_API_KEY"):
        TiermemClient("http://127.0.0.1:1")
