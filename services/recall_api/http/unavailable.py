"""Store and broker failures, classified in one place and answered in one way: HTTP 503 in the error
shape (an HTML page under /ui), and the same reason as a tool error over MCP.

A route does not catch them itself. Whatever a store client or the broker raises while its server is
down or restarting (a nats-py error, a redis ConnectionError from FalkorDB, a socket's OSError, a
timeout, a neo4j or qdrant-client transport error, or `StoreUnavailable` from our own wrappers)
reaches the app's exception handler, which asks `unavailable_reason` whether it is such a failure.
Anything else is a bug and stays a 500, so a failure is never hidden behind a retryable status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx
import nats.errors
import neo4j.exceptions
import redis.exceptions
from fastapi import FastAPI, Request
from fastapi.responses import Response
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult
from qdrant_client.http.exceptions import ResponseHandlingException

from services.recall_api.errors import StoreUnavailable
from services.recall_api.http.guard import error_response

log = logging.getLogger(__name__)

BROKER = "the message broker is not reachable; retry later"
GRAPH = "the graph store is not reachable; retry later"
VECTOR = "the vector store is not reachable; retry later"
ANY_STORE = "a store or the broker did not answer; retry later"

# Most specific first: the first class an exception is an instance of decides its reason.
_REASONS: tuple[tuple[type[Exception], str], ...] = (
    (nats.errors.Error, BROKER),
    (redis.exceptions.ConnectionError, GRAPH),
    (redis.exceptions.TimeoutError, GRAPH),
    (neo4j.exceptions.ServiceUnavailable, GRAPH),
    (neo4j.exceptions.SessionExpired, GRAPH),
    (ResponseHandlingException, VECTOR),
    (httpx.TransportError, ANY_STORE),
    (OSError, ANY_STORE),  # ConnectionError, TimeoutError (asyncio's too), a socket's errors
)
FAILURE_TYPES: tuple[type[Exception], ...] = (StoreUnavailable, *(kind for kind, _ in _REASONS))


def unavailable_reason(exc: BaseException) -> str | None:
    """The reason to answer when `exc` is a store or broker failure (for a group: when every one of
    its exceptions is, the first one's reason); None for anything else."""
    if isinstance(exc, BaseExceptionGroup):
        reasons = [unavailable_reason(inner) for inner in exc.exceptions]
        return reasons[0] if reasons and all(reasons) else None
    if isinstance(exc, StoreUnavailable):
        return str(exc) or ANY_STORE
    return next((reason for kind, reason in _REASONS if isinstance(exc, kind)), None)


OutagePage = Callable[[Request, str], Response]
"""The page a browser gets for an outage under /ui, given the reason."""


def install_unavailable_handler(app: FastAPI, *, ui_page: OutagePage | None = None) -> None:
    """Every store or broker failure a route lets through becomes a 503 (with `Retry-After`); under /ui,
    `ui_page` answers it. The memory browser's page is handed in by the app, so this edge never imports
    the browser."""

    async def unavailable(request: Request, exc: Exception) -> Response:
        return _unavailable(request, exc, ui_page)

    for kind in (*FAILURE_TYPES, ExceptionGroup):
        app.add_exception_handler(kind, unavailable)


RETRY_AFTER_S = "5"


def _unavailable(request: Request, exc: Exception, ui_page: OutagePage | None) -> Response:
    reason = unavailable_reason(exc)
    if reason is None:
        raise exc  # not an outage: the server error handler answers it (and logs the traceback)
    log.error("%s %s: %s (%s: %s)", request.method, request.url.path, reason, type(exc).__name__, exc)
    if ui_page is not None and (request.url.path == "/ui" or request.url.path.startswith("/ui/")):
        page = ui_page(request, reason)
        page.headers["Retry-After"] = RETRY_AFTER_S
        return page
    return error_response(503, reason, headers={"Retry-After": RETRY_AFTER_S})


class RecallMcpServer(MCPServer[Any]):
    """The MCP server whose tools answer a store or broker failure as a tool error with the reason
    HTTP gives, instead of the SDK's generic "Error executing tool" for an unexpected exception."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            reason = _cause_reason(exc)
            if reason is None:
                raise
            log.error("tool %s: %s (%s)", name, reason, type(exc.__cause__).__name__)
            raise ToolError(f"Error executing tool {name}: {reason}") from exc.__cause__


def _cause_reason(exc: BaseException) -> str | None:
    # The SDK wraps what the tool raised (a nested call wraps it again): the innermost cause decides.
    cause = exc.__cause__
    while isinstance(cause, UnexpectedToolError) and cause.__cause__ is not None:
        cause = cause.__cause__
    return None if cause is None else unavailable_reason(cause)
