"""Sync and async clients of the recall API.

Both send the same `Call`s (see `calls.py`) and share one retry policy (`transport.py`): 429, 502, 503
and 504 and connection failures are retried with capped exponential backoff (honouring
`Retry-After`), everything else fails at once with a typed error. Every call is safe to repeat: reads
are reads, sessions are deduplicated by `event_id`, saves by `request_id`, deletes by
`Idempotency-Key`.

Most methods are made from their `calls.py` function, so each signature is written once; `_method`
gives the made method that function's parameters, docstring and result type, so `help()`,
`inspect.signature` and IDEs show the real ones. `search` (two argument orders) and `wait` (a loop)
are written out.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import typing
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar, Unpack, overload

import httpx
from pydantic import BaseModel
from typing_extensions import deprecated  # pydantic's own dependency: always installed with it

from tiermem_client import calls
from tiermem_client.calls import Call, Channel, SearchOptions
from tiermem_client.compat import LEGACY_SEARCH, search_arguments
from tiermem_client.errors import TransportError
from tiermem_client.models import EventStatus, MemoryKind, SearchResponse
from tiermem_client.transport import DEFAULT_URL, RetryPolicy, headers, request, result, retryable, settings
from tiermem_client.waiting import Watch

__all__ = ["DEFAULT_URL", "AsyncTiermemClient", "RetryPolicy", "TiermemClient"]

P = ParamSpec("P")
R = TypeVar("R", bound=BaseModel)
F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_WAIT_S = 120.0


def _signature(build: Callable[..., Call[Any]]) -> inspect.Signature:
    """`build`'s parameters after `self`, returning the call's result type instead of the `Call`."""
    described = inspect.signature(build, eval_str=True)
    (result_type,) = typing.get_args(described.return_annotation)
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return described.replace(parameters=[this, *described.parameters.values()], return_annotation=result_type)


def _method(method: F, build: Callable[..., Call[Any]], owner: str) -> F:
    """`method` (which sends what `build` makes) described as `build`: name, docstring, signature."""
    method.__name__ = build.__name__
    method.__qualname__ = f"{owner}.{build.__name__}"
    method.__doc__ = build.__doc__
    method.__module__ = __name__
    method.__dict__["__signature__"] = _signature(build)
    return method


def _sync(build: Callable[P, Call[R]]) -> Callable[Concatenate[TiermemClient, P], R]:
    """A client method with the arguments of the call it sends (one signature, written in calls.py)."""

    def method(self: TiermemClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.send(build(*args, **kwargs))

    return _method(method, build, "TiermemClient")


def _async(build: Callable[P, Call[R]]) -> Callable[Concatenate[AsyncTiermemClient, P], Awaitable[R]]:
    async def method(self: AsyncTiermemClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.send(build(*args, **kwargs))

    return _method(method, build, "AsyncTiermemClient")


class TiermemClient:
    """Blocking client. Use as a context manager, or call `close()`.

    `base_url` defaults to `TIERMEM_RECALL_URL` (else http://127.0.0.1:8080) and `api_key` to
    `TIERMEM_API_KEY`, the variables the `tiermem` CLI reads."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        url, key = settings(base_url, api_key)
        self.retry = retry or RetryPolicy()
        self._http = httpx.Client(base_url=url, headers=headers(key), timeout=timeout_s, transport=transport)

    def send(self, call: Call[R]) -> R:
        """Send one call, retrying what the server could not take right now."""
        for attempt in range(1, self.retry.attempts + 1):
            try:
                response = self._http.send(request(self._http, call))
            except httpx.TransportError as exc:
                if attempt == self.retry.attempts:
                    raise TransportError(f"{call.method} {call.path}: {exc!r}") from exc
                time.sleep(self.retry.delay(attempt, None))
                continue
            if not retryable(self.retry, response, attempt):
                return result(call, response)
            time.sleep(self.retry.delay(attempt, response.headers.get("Retry-After")))
        raise AssertionError("unreachable: the last attempt always returns or raises")

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def wait(self, event_id: str, *, user_id: str, timeout: float = DEFAULT_WAIT_S) -> EventStatus:
        """Follow an accepted event (from `add`, `add_session`, `forget` or `erase_user`) until nothing
        more will happen to it, and return its final status: `consolidated` (the session is now an
        episode, `episode_id`), `processed` (handled; nothing was worth remembering) or
        `erasure_completed`. Raises `DeadLettered` when the pipeline gave up on it (`.status.reason`
        says why) and `WaitTimeout` (a `TimeoutError`) when it is still pending after `timeout` seconds."""
        watch = Watch(event_id, user_id, timeout)
        while True:
            status = self.send(watch.call)
            if watch.finished(status):
                return status
            time.sleep(watch.next_pause(status))

    @overload
    def search(
        self,
        query: str,
        *,
        user_id: str,
        limit: int = 10,
        kinds: list[MemoryKind] | None = None,
        channel: Channel = "private",
        agent_id: str | None = None,
        include_superseded: bool = False,
        metadata: Mapping[str, str] | None = None,
    ) -> SearchResponse: ...
    @overload
    @deprecated(LEGACY_SEARCH)
    def search(self, user_id: str, query: str, /, **options: Unpack[SearchOptions]) -> SearchResponse: ...
    @overload
    @deprecated(LEGACY_SEARCH)
    def search(self, user_id: str, /, *, query: str, **options: Unpack[SearchOptions]) -> SearchResponse: ...
    def search(
        self, *args: str, query: str | None = None, user_id: str | None = None, **options: Unpack[SearchOptions]
    ) -> SearchResponse:
        """L1: memories of `user_id` matching `query` (hybrid keyword and vector search over episodes and
        facts), best first, as ids and abstracts; `expand` an id for the whole memory. `kinds` narrows to
        episodes or facts; superseded fact versions are left out unless `include_superseded`; `metadata`
        keeps only memories from sessions that carried every one of these key/values.

        The user is a keyword argument, as in mem0: `search("where does she live?", user_id="alice")`.
        The old order `search("alice", "where does she live?")` still works, meaning what it always
        did, with a `DeprecationWarning`; see `tiermem_client.compat`."""
        query, user_id = search_arguments(args, query, user_id)
        return self.send(calls.search(query, user_id=user_id, **options))

    search.__dict__["__signature__"] = _signature(calls.search)

    add = _sync(calls.add)
    add_session = _sync(calls.add_session)
    add_turns = _sync(calls.add_turns)
    end_session = _sync(calls.end_session)
    read_session = _sync(calls.read_session)
    event_status = _sync(calls.event_status)
    auto = _sync(calls.auto)
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
    """Asyncio client. Use with `async with`, or call `await aclose()`.

    `base_url` defaults to `TIERMEM_RECALL_URL` (else http://127.0.0.1:8080) and `api_key` to
    `TIERMEM_API_KEY`, the variables the `tiermem` CLI reads."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url, key = settings(base_url, api_key)
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(base_url=url, headers=headers(key), timeout=timeout_s, transport=transport)

    async def send(self, call: Call[R]) -> R:
        """Send one call, retrying what the server could not take right now."""
        for attempt in range(1, self.retry.attempts + 1):
            try:
                response = await self._http.send(request(self._http, call))
            except httpx.TransportError as exc:
                if attempt == self.retry.attempts:
                    raise TransportError(f"{call.method} {call.path}: {exc!r}") from exc
                await asyncio.sleep(self.retry.delay(attempt, None))
                continue
            if not retryable(self.retry, response, attempt):
                return result(call, response)
            await asyncio.sleep(self.retry.delay(attempt, response.headers.get("Retry-After")))
        raise AssertionError("unreachable: the last attempt always returns or raises")

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # `timeout` as in the blocking client: running out is a WaitTimeout carrying the last status seen.
    async def wait(self, event_id: str, *, user_id: str, timeout: float = DEFAULT_WAIT_S) -> EventStatus:  # noqa: ASYNC109
        """Follow an accepted event (from `add`, `add_session`, `forget` or `erase_user`) until nothing
        more will happen to it, and return its final status: `consolidated` (the session is now an
        episode, `episode_id`), `processed` (handled; nothing was worth remembering) or
        `erasure_completed`. Raises `DeadLettered` when the pipeline gave up on it (`.status.reason`
        says why) and `WaitTimeout` (a `TimeoutError`) when it is still pending after `timeout` seconds."""
        watch = Watch(event_id, user_id, timeout)
        while True:
            status = await self.send(watch.call)
            if watch.finished(status):
                return status
            await asyncio.sleep(watch.next_pause(status))

    @overload
    async def search(
        self,
        query: str,
        *,
        user_id: str,
        limit: int = 10,
        kinds: list[MemoryKind] | None = None,
        channel: Channel = "private",
        agent_id: str | None = None,
        include_superseded: bool = False,
        metadata: Mapping[str, str] | None = None,
    ) -> SearchResponse: ...
    @overload
    @deprecated(LEGACY_SEARCH)
    async def search(self, user_id: str, query: str, /, **options: Unpack[SearchOptions]) -> SearchResponse: ...
    @overload
    @deprecated(LEGACY_SEARCH)
    async def search(self, user_id: str, /, *, query: str, **options: Unpack[SearchOptions]) -> SearchResponse: ...
    async def search(
        self, *args: str, query: str | None = None, user_id: str | None = None, **options: Unpack[SearchOptions]
    ) -> SearchResponse:
        """L1: memories of `user_id` matching `query` (hybrid keyword and vector search over episodes and
        facts), best first, as ids and abstracts; `expand` an id for the whole memory. `kinds` narrows to
        episodes or facts; superseded fact versions are left out unless `include_superseded`; `metadata`
        keeps only memories from sessions that carried every one of these key/values.

        The user is a keyword argument, as in mem0: `search("where does she live?", user_id="alice")`.
        The old order `search("alice", "where does she live?")` still works, meaning what it always
        did, with a `DeprecationWarning`; see `tiermem_client.compat`."""
        query, user_id = search_arguments(args, query, user_id)
        return await self.send(calls.search(query, user_id=user_id, **options))

    search.__dict__["__signature__"] = _signature(calls.search)

    add = _async(calls.add)
    add_session = _async(calls.add_session)
    add_turns = _async(calls.add_turns)
    end_session = _async(calls.end_session)
    read_session = _async(calls.read_session)
    event_status = _async(calls.event_status)
    auto = _async(calls.auto)
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
