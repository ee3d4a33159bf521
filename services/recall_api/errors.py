"""The recall service's own errors; the app answers them with 503 and 422, MCP tools with a tool error."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class StoreUnavailable(RuntimeError):
    """A store or the broker could not be reached; the API answers 503."""


class FactRejected(ValueError):
    """The write policy refused a fact (two sentences, a passing state, ...)."""


async def found_or_raise(lookup: Awaitable[T | None], *, missing: Callable[[], Exception]) -> T:
    """The result of a lookup by id, or `missing()` raised when there is none (HTTP 404, a tool error).
    A store that cannot be reached is not handled here: it reaches the one handler of store and broker
    failures (`http/unavailable.py`), which answers HTTP and MCP alike."""
    found = await lookup
    if found is None:
        raise missing()
    return found
