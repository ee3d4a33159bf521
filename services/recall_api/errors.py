"""The recall service's own errors; routes answer them with 503 and 422, MCP tools with a tool error."""

from __future__ import annotations


class StoreUnavailable(RuntimeError):
    """A store or the broker could not be reached; the API answers 503."""


class FactRejected(ValueError):
    """The write policy refused a fact (two sentences, a passing state, ...)."""
