"""Sync and async clients of the recall API.

Both send the same `Call`s (see `calls.py`) and share one retry policy: 429, 502, 503 and 504 and
connection failures are retried with capped exponential backoff (honouring `Retry-After`), everything
else fails at once with a typed error. Every call is safe to repeat: reads are reads, sessions are
deduplicated by `event_id`, saves by `request_id`, deletes by `Idempotency-Key`.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Concatenate, ParamSpec, Self, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from tiermem_client import calls
from tiermem_client.calls import Call
from tiermem_client.errors import TiermemError, TransportError, error_for
from tiermem_client.models import ErrorDetail

DEFAULT_URL = "http://127.0.0.1:8080"
P = ParamSpec("P")
R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a call the server could not take right now."""

    attempts: int = 4
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    retry_statuses: frozenset[int] = frozenset({429, 502, 503, 504})

    def delay(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before attempt `attempt + 1` (attempts count from 1)."""
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), self.max_backoff_s)
            except ValueError:
                pass  # an HTTP date: fall back to our own backoff
        ceiling = min(self.initial_backoff_s * 2.0 ** (attempt - 1), self.max_backoff_s)
        return ceiling * (0.5 + random.random() / 2)  # jitter so many clients do not retry in step


def _settings(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    url = base_url or os.environ.get("TIERMEM_URL") or DEFAULT_URL
    key = api_key or os.environ.get("TIERMEM_API_KEY")
    if not key:
        raise TiermemError("no API key: pass api_key= or set TIERMEM_API_KEY")
    return url, key


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json", "Accept": "application/json"}


def _request(http_client: httpx.Client | httpx.AsyncClient, call: Call[R]) -> httpx.Request:
    return http_client.build_request(
        call.method, call.path, params=call.params or None, content=call.body, headers=call.headers or None
    )


def _result(call: Call[R], response: httpx.Response) -> R:
    if response.is_success:
        try:
            return call.result.model_validate_json(response.content)
        except ValidationError as exc:
            raise TiermemError(
                f"{call.method} {call.path}: unexpected response shape ({exc.error_count()} errors)"
            ) from exc
    try:
        payload = response.json()
        detail = str(payload.get("detail", response.reason_phrase))
        code = str(payload.get("code", "http_error"))
        errors = [ErrorDetail.model_validate(item) for item in payload.get("errors") or []]
    except (ValueError, AttributeError, ValidationError):
        detail, code, errors = response.reason_phrase or "error", "http_error", []
    raise error_for(response.status_code, code, detail, errors)


def _retryable(policy: RetryPolicy, response: httpx.Response, attempt: int) -> bool:
    return response.status_code in policy.retry_statuses and attempt < policy.attempts


def _sync(build: Callable[P, Call[R]]) -> Callable[Concatenate[TiermemClient, P], R]:
    """A client method with the arguments of the call it sends (one signature, written in calls.py)."""

    def method(self: TiermemClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.send(build(*args, **kwargs))

    method.__name__, method.__doc__ = build.__name__, build.__doc__
    return method


def _async(build: Callable[P, Call[R]]) -> Callable[Concatenate[AsyncTiermemClient, P], Awaitable[R]]:
    async def method(self: AsyncTiermemClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.send(build(*args, **kwargs))

    method.__name__, method.__doc__ = build.__name__, build.__doc__
    return method


class TiermemClient:
    """Blocking client. Use as a context manager, or call `close()`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        url, key = _settings(base_url, api_key)
        self.retry = retry or RetryPolicy()
        self._http = httpx.Client(base_url=url, headers=_headers(key), timeout=timeout_s, transport=transport)

    def send(self, call: Call[R]) -> R:
        """Send one call, retrying what the server could not take right now."""
        for attempt in range(1, self.retry.attempts + 1):
            try:
                response = self._http.send(_request(self._http, call))
            except httpx.TransportError as exc:
                if attempt == self.retry.attempts:
                    raise TransportError(f"{call.method} {call.path}: {exc!r}") from exc
                time.sleep(self.retry.delay(attempt, None))
                continue
            if not _retryable(self.retry, response, attempt):
                return _result(call, response)
            time.sleep(self.retry.delay(attempt, response.headers.get("Retry-After")))
        raise AssertionError("unreachable: the last attempt always returns or raises")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    add_session = _sync(calls.add_session)
    event_status = _sync(calls.event_status)
    auto = _sync(calls.auto)
    search = _sync(calls.search)
    expand = _sync(calls.expand)
    graph = _sync(calls.graph)
    facts = _sync(calls.facts)
    save_fact = _sync(calls.save_fact)
    fact = _sync(calls.fact)
    fact_history = _sync(calls.fact_history)
    correct_fact = _sync(calls.correct_fact)
    list_memories = _sync(calls.list_memories)
    forget = _sync(calls.forget)
    erase_user = _sync(calls.erase_user)
    save_rule = _sync(calls.save_rule)
    rules = _sync(calls.rules)
    procedures = _sync(calls.procedures)
    memory_instructions = _sync(calls.memory_instructions)


class AsyncTiermemClient:
    """Asyncio client. Use with `async with`, or call `await aclose()`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url, key = _settings(base_url, api_key)
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(base_url=url, headers=_headers(key), timeout=timeout_s, transport=transport)

    async def send(self, call: Call[R]) -> R:
        """Send one call, retrying what the server could not take right now."""
        for attempt in range(1, self.retry.attempts + 1):
            try:
                response = await self._http.send(_request(self._http, call))
            except httpx.TransportError as exc:
                if attempt == self.retry.attempts:
                    raise TransportError(f"{call.method} {call.path}: {exc!r}") from exc
                await asyncio.sleep(self.retry.delay(attempt, None))
                continue
            if not _retryable(self.retry, response, attempt):
                return _result(call, response)
            await asyncio.sleep(self.retry.delay(attempt, response.headers.get("Retry-After")))
        raise AssertionError("unreachable: the last attempt always returns or raises")

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    add_session = _async(calls.add_session)
    event_status = _async(calls.event_status)
    auto = _async(calls.auto)
    search = _async(calls.search)
    expand = _async(calls.expand)
    graph = _async(calls.graph)
    facts = _async(calls.facts)
    save_fact = _async(calls.save_fact)
    fact = _async(calls.fact)
    fact_history = _async(calls.fact_history)
    correct_fact = _async(calls.correct_fact)
    list_memories = _async(calls.list_memories)
    forget = _async(calls.forget)
    erase_user = _async(calls.erase_user)
    save_rule = _async(calls.save_rule)
    rules = _async(calls.rules)
    procedures = _async(calls.procedures)
    memory_instructions = _async(calls.memory_instructions)
