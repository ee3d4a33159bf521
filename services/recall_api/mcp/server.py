"""MCP server (official `mcp` SDK): the agent-facing tools `memory_search`, `memory_expand`,
`knowledge_graph_search`, `memory_save`, `memory_recall` and `memory_context` (L0), over the same
`RecallService` as HTTP.

Two transports:
- streamable HTTP, mounted on the recall API's FastAPI app (`/mcp`), with the same Bearer API key →
  tenant. A host may pin the user and the channel for the whole connection with the headers
  `X-TierMem-User-Id` and `X-TierMem-Channel`: then the model cannot choose another user, and a
  group conversation cannot be widened to private memories, whatever the tool arguments say;
- stdio (`tiermem mcp`): `run_stdio(settings)`, acting with `settings.mcp_api_key`'s tenant.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import Field, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from services.common.runtime.resources import Resources
from services.common.runtime.telemetry import install_tracing
from services.recall_api.auth import Principal, bearer_token, check_api_keys, tenant_for_key, valid_id
from services.recall_api.errors import FactRejected
from services.recall_api.http.guard import error_body
from services.recall_api.instructions import memory_instructions
from services.recall_api.mcp.add_tool import add_memory_tool
from services.recall_api.mcp.arguments import SentenceErrorServer, argument_errors
from services.recall_api.mcp.context_tool import add_context_tool
from services.recall_api.mcp.procedure_tool import add_procedure_tool
from services.recall_api.mcp.write_tools import READ_ONLY, WRITES, MetadataArg, add_write_tools
from services.recall_api.schemas import (
    ExpandedMemory,
    FactsResponse,
    GraphSearchRequest,
    GraphSearchResponse,
    SaveFactRequest,
    SaveFactResponse,
    SearchRequest,
    SearchResponse,
)
from services.recall_api.service import RecallService
from services.recall_api.settings import RecallApiSettings

log = logging.getLogger(__name__)

PRINCIPAL_STATE_KEY = "tiermem_principal"
USER_HEADER = "x-tiermem-user-id"
CHANNEL_HEADER = "x-tiermem-channel"
NOT_FOUND = "memory not found"

ChannelArg = Literal["private", "group"]
ChannelField = Annotated[
    ChannelArg, Field(description="'group' only sees memories from group conversations (a pinned group stays group).")
]
OptionalUser = Annotated[
    str | None,
    Field(max_length=128, description="End user whose memory is used; required unless the connection pins a user."),
]


def _principal(ctx: Context[Any, Any], fixed: Principal | None) -> Principal:
    if fixed is not None:
        return fixed
    request = ctx.request_context.request
    state = getattr(request, "state", None)
    principal = getattr(state, PRINCIPAL_STATE_KEY, None) if state is not None else None
    if not isinstance(principal, Principal):
        # Unreachable through the mounted endpoint (the auth wrapper refuses first); never guess a tenant.
        raise ToolError("not authenticated")
    return principal


def _user(principal: Principal, user_id: str | None) -> str:
    if principal.user_id is not None:
        if user_id is not None and user_id != principal.user_id:
            raise ToolError("user_id does not match the user this connection is pinned to")
        return principal.user_id
    if user_id is None:
        raise ToolError("user_id is required")
    if not valid_id(user_id):
        raise ToolError("user_id must be 1-128 characters of [A-Za-z0-9_-]")
    return user_id


def _channel(principal: Principal, channel: ChannelArg) -> ChannelArg:
    # A connection pinned to a group conversation stays group; a tool argument can only narrow.
    return "group" if principal.channel == "group" or channel == "group" else "private"


def _errors(exc: ValidationError) -> str:
    return argument_errors(exc.errors())


def build_mcp_server(service: RecallService, *, fixed: Principal | None = None) -> MCPServer[Any]:
    """The MCP server over `service`. `fixed` pins the principal (stdio); without it each request's
    principal comes from the HTTP auth wrapper."""
    server: MCPServer[Any] = SentenceErrorServer(
        "tiermem",
        title="tiermem memory",
        version=_server_version(),
        instructions=memory_instructions("en"),
        log_level="WARNING",
        warn_on_duplicate_tools=True,
    )
    _add_search_tools(server, service, fixed)
    _add_graph_tool(server, service, fixed)
    _add_fact_tools(server, service, fixed)
    add_write_tools(server, service, lambda ctx: _principal(ctx, fixed), _user)
    add_procedure_tool(server, service, lambda ctx: _principal(ctx, fixed), _user)
    add_memory_tool(server, service, lambda ctx: _principal(ctx, fixed), _user)
    add_context_tool(server, service, lambda ctx: _principal(ctx, fixed), _user, _channel)
    return server


def _server_version() -> str:
    try:
        return importlib.metadata.version("tiermem")
    except importlib.metadata.PackageNotFoundError:
        return "0.1.0"


def _add_search_tools(server: MCPServer[Any], service: RecallService, fixed: Principal | None) -> None:
    """L1: memory_search and memory_expand."""

    @server.tool(
        annotations=READ_ONLY,
        description=(
            "Search long-term memory of earlier conversations (episodes) and known facts about the user. "
            "Returns ids with one-line abstracts and their session metadata, best first; an empty list means "
            "nothing relevant is known."
        ),
    )
    async def memory_search(
        query: Annotated[str, Field(min_length=1, max_length=4000, description="What to look for, in any language.")],
        ctx: Context[Any, Any],
        user_id: OptionalUser = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Most results.")] = 10,
        kinds: Annotated[
            list[Literal["episode", "fact"]] | None, Field(description="episode and/or fact; both when omitted.")
        ] = None,
        channel: ChannelField = "private",
        metadata: MetadataArg = None,
    ) -> SearchResponse:
        principal = _principal(ctx, fixed)
        try:
            request = SearchRequest(
                user_id=_user(principal, user_id),
                query=query,
                limit=limit,
                kinds=kinds,
                channel=_channel(principal, channel),
                metadata=metadata or {},
            )
        except ValidationError as exc:
            raise ToolError(_errors(exc)) from exc
        return await service.search(principal.tenant_id, request)

    @server.tool(
        annotations=READ_ONLY,
        description=(
            "Open one memory by id (from memory_search): the full episode summary with its date, session and "
            "original messages, or the full fact with its history."
        ),
    )
    async def memory_expand(
        id: Annotated[str, Field(max_length=128, description="Episode or fact id from memory_search.")],
        ctx: Context[Any, Any],
        user_id: OptionalUser = None,
        channel: ChannelField = "private",
    ) -> ExpandedMemory:
        principal = _principal(ctx, fixed)
        user = _user(principal, user_id)
        expanded = await service.expand(principal.tenant_id, user, id, channel=_channel(principal, channel))
        if expanded is None:
            raise ToolError(NOT_FOUND)
        return expanded


def _add_graph_tool(server: MCPServer[Any], service: RecallService, fixed: Principal | None) -> None:
    """L2: knowledge_graph_search."""

    @server.tool(
        annotations=READ_ONLY,
        description=(
            "Look up how people, projects, technologies and organisations are connected, starting from an entity "
            "name (or free text naming one), up to 3 hops. Each entity and relation carries its provenance."
        ),
    )
    async def knowledge_graph_search(
        ctx: Context[Any, Any],
        query: Annotated[str | None, Field(max_length=1000, description="Free text naming an entity.")] = None,
        entity: Annotated[str | None, Field(max_length=400, description="An entity key or exact name.")] = None,
        hops: Annotated[int, Field(ge=1, le=3, description="How far to follow relations.")] = 1,
        limit: Annotated[int | None, Field(ge=1, le=200, description="Most entities.")] = None,
        user_id: OptionalUser = None,
        channel: ChannelField = "private",
    ) -> GraphSearchResponse:
        principal = _principal(ctx, fixed)
        if not query and not entity:
            raise ToolError("give query or entity")
        try:
            request = GraphSearchRequest(
                user_id=_user(principal, user_id),
                query=query,
                entity=entity,
                hops=hops,
                limit=limit,
                channel=_channel(principal, channel),
            )
        except ValidationError as exc:
            raise ToolError(_errors(exc)) from exc
        return await service.graph_search(principal.tenant_id, request)


def _add_fact_tools(server: MCPServer[Any], service: RecallService, fixed: Principal | None) -> None:
    """Facts: memory_save and memory_recall."""

    @server.tool(
        annotations=WRITES,
        description=(
            "Save one durable fact about the user (one sentence that stays true, e.g. 'The user is vegetarian.'). "
            "It is stored as tentative and confirmed when it comes up again; a contradicting newer fact "
            "supersedes an older one without deleting it."
        ),
    )
    async def memory_save(
        text: Annotated[str, Field(min_length=1, max_length=1000, description="The fact as one sentence.")],
        ctx: Context[Any, Any],
        user_id: OptionalUser = None,
        subject: Annotated[str | None, Field(max_length=200, description="Who it is about; default 'user'.")] = None,
        attribute: Annotated[str | None, Field(max_length=100, description="e.g. lives_in; default 'note'.")] = None,
        value: Annotated[str | None, Field(max_length=400, description="The value; default: the text.")] = None,
        scope: Annotated[Literal["personal", "team", "org"], Field(description="Who may see it.")] = "personal",
        volatility: Annotated[
            Literal["high", "medium", "low"] | None, Field(description="How fast it goes stale.")
        ] = None,
        channel: ChannelField = "private",
    ) -> SaveFactResponse:
        principal = _principal(ctx, fixed)
        try:
            request = SaveFactRequest(
                user_id=_user(principal, user_id),
                text=text,
                subject=subject,
                attribute=attribute,
                value=value,
                scope=scope,
                volatility=volatility,
                channel=_channel(principal, channel),
            )
        except ValidationError as exc:
            raise ToolError(_errors(exc)) from exc
        try:
            return await service.save_fact(principal.tenant_id, request)
        except FactRejected as exc:
            raise ToolError(f"not saved: {exc}") from exc

    @server.tool(
        annotations=READ_ONLY,
        description=(
            "Recall the facts known about the user (confirmed first, then tentative; replaced facts left out), "
            "as a short dated list within a token budget."
        ),
    )
    async def memory_recall(
        ctx: Context[Any, Any],
        user_id: OptionalUser = None,
        token_budget: Annotated[int | None, Field(ge=1, le=8000, description="Most tokens of the list.")] = None,
        subject: Annotated[str | None, Field(max_length=200, description="Only facts about this subject.")] = None,
        channel: ChannelField = "private",
    ) -> FactsResponse:
        principal = _principal(ctx, fixed)
        user = _user(principal, user_id)
        if token_budget is not None and not 1 <= token_budget <= 8000:
            raise ToolError("token_budget must be between 1 and 8000")
        return await service.recall_facts(
            principal.tenant_id,
            user,
            token_budget=token_budget,
            channel=_channel(principal, channel),
            subject=subject,
        )


def streamable_http_endpoint(server: MCPServer[Any], settings: RecallApiSettings) -> ASGIApp:
    """The MCP endpoint as an ASGI app (stateless JSON responses, so any replica can answer any
    request). The caller must run `server.session_manager.run()` in its lifespan."""
    security = (
        TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(settings.mcp_allowed_hosts),
            allowed_origins=[f"http://{host}" for host in settings.mcp_allowed_hosts]
            + [f"https://{host}" for host in settings.mcp_allowed_hosts],
        )
        if settings.mcp_allowed_hosts
        else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    server.streamable_http_app(stateless_http=True, json_response=True, transport_security=security)
    return McpAuth(StreamableHTTPASGIApp(server.session_manager), settings)


class McpAuth:
    """Bearer API key → tenant for the MCP endpoint (the same keys as the HTTP API), plus the
    optional pinned user and channel headers. Refuses with 401 before the MCP layer sees anything."""

    def __init__(self, app: ASGIApp, settings: RecallApiSettings) -> None:
        self._app = app
        self._settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        tenant = tenant_for_key(self._settings.api_keys, bearer_token(headers.get("authorization")))
        if tenant is None:
            await _refuse(send, 401, "missing or invalid API key", {"www-authenticate": "Bearer"})
            return
        user = headers.get(USER_HEADER) or None
        if user is not None and not valid_id(user):
            await _refuse(send, 400, f"{USER_HEADER} must be 1-128 characters of [A-Za-z0-9_-]")
            return
        channel = (headers.get(CHANNEL_HEADER) or "").strip().lower() or None
        if channel not in (None, "private", "group"):
            await _refuse(send, 400, f"{CHANNEL_HEADER} must be 'private' or 'group'")
            return
        if scope.get("method") != "POST":
            # Stateless JSON mode has no server-to-client stream: a GET would otherwise hold a
            # connection open with nothing ever sent on it.
            await _refuse(
                send, 405, "the MCP endpoint accepts POST only (stateless streamable HTTP)", {"allow": "POST"}
            )
            return
        scope.setdefault("state", {})[PRINCIPAL_STATE_KEY] = Principal(tenant_id=tenant, user_id=user, channel=channel)
        await self._app(scope, receive, send)


async def _refuse(send: Send, status_code: int, detail: str, extra: dict[str, str] | None = None) -> None:
    body = error_body(status_code, detail)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def stdio_principal(settings: RecallApiSettings, api_key: str | None = None, user_id: str | None = None) -> Principal:
    """The principal of a stdio server: the tenant of the given (or configured) API key."""
    check_api_keys(settings.api_keys)
    key = api_key or (settings.mcp_api_key.get_secret_value() if settings.mcp_api_key else None)
    if not key:
        raise ValueError("the stdio MCP server needs an API key (argument, or TIERMEM_MCP_API_KEY)")
    tenant = tenant_for_key(settings.api_keys, key)
    if tenant is None:
        raise ValueError("the API key for the stdio MCP server is not one of the configured api_keys")
    user = user_id or settings.mcp_user_id
    if user is not None and not valid_id(user):
        raise ValueError("the pinned MCP user id must be 1-128 characters of [A-Za-z0-9_-]")
    return Principal(tenant_id=tenant, user_id=user)


async def serve_stdio(
    settings: RecallApiSettings,
    *,
    api_key: str | None = None,
    user_id: str | None = None,
    resources: Resources | None = None,
) -> None:
    """Serve the MCP tools over stdin/stdout until the client closes the stream. Each tool call is
    a span (the SDK's middleware) on the process's tracer provider, parent of its store calls."""
    install_tracing(settings.telemetry, "mcp")  # idempotent; a composition root may have done it already
    principal = stdio_principal(settings, api_key, user_id)
    owned = resources is None
    shared = resources or Resources(settings)
    service = RecallService(settings, shared)
    await service.start()
    try:
        await build_mcp_server(service, fixed=principal).run_stdio_async()
    finally:
        await service.stop()
        if owned:
            await shared.close()


def run_stdio(settings: RecallApiSettings, *, api_key: str | None = None, user_id: str | None = None) -> None:
    """Blocking entry point for `tiermem mcp`."""
    asyncio.run(serve_stdio(settings, api_key=api_key, user_id=user_id))
