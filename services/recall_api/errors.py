"""The recall service's own errors; routes answer them with 503 and 422, MCP tools with a tool error."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class StoreUnavailable(RuntimeError):
    """A store or the broker could not be reached; the API answers 503."""


class FactRejected(ValueError):
    """The write policy refused a fact (two sentences, a passing state, ...)."""


async def found_or_raise(
    lookup: Awaitable[T | None],
    *,
    unavailable: Callable[[StoreUnavailable], Exception],
    missing: Callable[[], Exception],
) -> T:
    """The result of a lookup by id, with the two failures every surface maps in its own words: a
    store that cannot be reached (HTTP 503, a tool error) and nothing found (404, a tool error). One
    place, so the HTTP routes and the MCP tools can never disagree on which is which."""
    try:
        found = await lookup
    except StoreUnavailable as exc:
        raise unavailable(exc) from exc
    if found is None:
        raise missing()
    return found
