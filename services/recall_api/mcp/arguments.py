"""Tool argument errors as sentences a model can act on: "query: must not be empty", one per field,
instead of pydantic's dump (error counts, input values, a pydantic.dev URL per error), which costs a
model tokens to read and echoes the caller's data back.

Two places produce them: the SDK, validating a call's arguments against the tool's signature before
the tool runs (`SentenceErrorServer`), and the tools themselves, building a request body from the
arguments (`argument_errors`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import ValidationError

from services.recall_api.http.unavailable import RecallMcpServer

_MAX_ERRORS = 5

_KIND_WORDS = {
    "string_type": "must be a string",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "string_pattern_mismatch": "has characters that are not allowed",
    "datetime_parsing": "must be an ISO 8601 date and time",
    "datetime_type": "must be an ISO 8601 date and time",
    "uuid_parsing": "must be a UUID",
    "uuid_type": "must be a UUID",
}


def _bounded(kind: str, ctx: Mapping[str, Any]) -> str | None:
    """The sentence for a length or range error, or None when `kind` is not one."""
    if kind == "string_too_short":
        least = ctx.get("min_length", 1)
        return "must not be empty" if least == 1 else f"must be at least {least} characters"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "too_short":
        least = ctx.get("min_length", 1)
        return "must not be empty" if least == 1 else f"must hold at least {least} items"
    if kind == "too_long":
        return f"must hold at most {ctx.get('max_length')} items"
    bounds = {
        "greater_than_equal": ("at least", "ge"),
        "less_than_equal": ("at most", "le"),
        "greater_than": ("more than", "gt"),
        "less_than": ("less than", "lt"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {ctx.get(key)}"
    return None


def sentence(error: Mapping[str, Any]) -> str:
    """One pydantic error as "field: what is wrong", without the input value or a URL."""
    kind = str(error.get("type", ""))
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    what = _bounded(kind, ctx) or _KIND_WORDS.get(kind)
    if what is None and kind == "literal_error":
        what = f"must be one of {ctx.get('expected')}"
    if what is None:
        # A custom validator's own message ("Value error, …") is already a sentence for a person.
        message = str(error.get("msg", "is not valid")).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        what = message[:1].lower() + message[1:]
    field = ".".join(str(part) for part in error.get("loc", ()))
    return f"{field}: {what}" if field else what


def argument_errors(errors: Sequence[Mapping[str, Any]]) -> str:
    """Every problem (the first few) as one line, "; " between them."""
    said = list(dict.fromkeys(sentence(error) for error in errors))
    more = len(said) - _MAX_ERRORS
    return "; ".join(said[:_MAX_ERRORS]) + (f"; and {more} more" if more > 0 else "")


class SentenceErrorServer(RecallMcpServer):
    """The recall MCP server whose argument errors read as sentences (see the module doc)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            invalid = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(invalid, ValidationError):
                raise
            # The SDK's prefix, as on every other tool error; re-raised from the ValidationError, so the
            # SDK still logs the field names only.
            raise ToolError(f"Error executing tool {name}: {argument_errors(invalid.errors())}") from invalid
