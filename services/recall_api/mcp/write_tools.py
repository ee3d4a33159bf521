"""MCP tools for getting memory in and managing it, the same verbs as the HTTP write endpoints:
memory_add_session, memory_list, memory_get_fact, memory_fact_history, memory_forget,
memory_correct and memory_event_status. Registered by `build_mcp_server`; the principal (tenant,
pinned user) is resolved the same way as for the read tools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from contracts.events import METADATA_MAX_KEYS, MetadataKey, MetadataValue
from contracts.session_input import SessionRejected
from services.recall_api.auth import Principal
from services.recall_api.errors import FactRejected, found_or_raise
from services.recall_api.service import RecallService
from services.recall_api.write.memory_admin import ListFilters, ListingRefused
from services.recall_api.write.sessions_in import WrongTenant
from services.recall_api.write_schemas import (
    CorrectionRequest,
    CorrectionResponse,
    EventStatus,
    FactHistoryResponse,
    ForgetAccepted,
    MemoryListResponse,
    MemoryRecord,
    SessionBatchItem,
    SessionBatchResponse,
)

NOT_FOUND = "memory not found"
UserArg = Annotated[str, Field(description="End user whose memory this is (ignored when the connection pins one).")]
IdArg = Annotated[str, Field(max_length=128, description="Fact or episode id, as returned by memory_list.")]
MetadataArg = Annotated[
    dict[MetadataKey, MetadataValue] | None,
    Field(
        max_length=METADATA_MAX_KEYS,
        description="Only memories from sessions whose metadata has every one of these key/values, e.g. "
        '{"project": "atlas"} (the same filter as the HTTP API).',
    ),
]

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def _not_found() -> ToolError:
    return ToolError(NOT_FOUND)


def _event_not_found() -> ToolError:
    return ToolError("event not found")


PrincipalOf = Callable[[Context[Any, Any]], Principal]
UserOf = Callable[[Principal, str | None], str]


def add_write_tools(server: MCPServer[Any], service: RecallService, principal_of: PrincipalOf, user_of: UserOf) -> None:
    _add_session_tools(server, service, principal_of, user_of)
    _add_listing_tools(server, service, principal_of, user_of)
    _add_change_tools(server, service, principal_of, user_of)


def _add_session_tools(
    server: MCPServer[Any], service: RecallService, principal_of: PrincipalOf, user_of: UserOf
) -> None:
    @server.tool(
        annotations=WRITES,
        description=(
            "Add finished conversations (SessionCompleted records: event_id, user_id, agent_id, session_id, "
            "channel, started_at, ended_at, messages) to long-term memory. The API key decides the tenant. "
            "Returns a result per record; re-sending an event id reports a duplicate and changes nothing. "
            "When every record is rejected, the call is an error that gives each record's reason."
        ),
    )
    async def memory_add_sessions(
        sessions: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=100, description="The records.")],
        ctx: Context[Any, Any],
    ) -> SessionBatchResponse:
        principal = principal_of(ctx)
        if principal.user_id is not None and any(s.get("user_id") != principal.user_id for s in sessions):
            raise ToolError("every session must belong to the user this connection is pinned to")
        added = await service.add_sessions(principal.tenant_id, list(sessions))
        if added.rejected == len(added.items):
            # Nothing was stored: a result the model could read as success would lose the whole batch.
            raise ToolError(all_rejected(added))
        return added

    @server.tool(
        annotations=READ_ONLY,
        description="Where a session or erasure is: accepted, consolidated into an episode, dead-lettered, erased.",
    )
    async def memory_event_status(
        event_id: Annotated[str, Field(max_length=36, description="The event id a write returned.")],
        user_id: UserArg,
        ctx: Context[Any, Any],
    ) -> EventStatus:
        principal = principal_of(ctx)
        user = user_of(principal, user_id)
        return await found_or_raise(
            service.event_status(principal.tenant_id, user, event_id.lower()), missing=_event_not_found
        )


def all_rejected(batch: SessionBatchResponse) -> str:
    """The tool error for a batch of which no record was stored: each record's reason, in order."""
    reasons = [f"sessions[{item.index}]: {_rejection(item)}" for item in batch.items]
    return "no session was added, every one was rejected: " + "; ".join(reasons)


def _rejection(item: SessionBatchItem) -> str:
    """One record's reason, naming the field it is about (as the HTTP batch's error shape does)."""
    if item.error is None:
        return "rejected"
    named = [f"{error.field}: {error.reason}" for error in item.error.errors if error.field]
    return "; ".join(named) or item.error.detail


def _add_listing_tools(
    server: MCPServer[Any], service: RecallService, principal_of: PrincipalOf, user_of: UserOf
) -> None:
    @server.tool(
        annotations=READ_ONLY,
        description=(
            "List what is remembered about the user, a page at a time (stable order), each item with its "
            "session metadata. Pass next_cursor back as cursor (with the same filters) for the next page."
        ),
    )
    async def memory_list(
        user_id: UserArg,
        ctx: Context[Any, Any],
        kind: Annotated[Literal["episode", "fact", "all"], Field(description="What to list.")] = "all",
        cursor: Annotated[str | None, Field(max_length=200, description="next_cursor of the last page.")] = None,
        limit: Annotated[int, Field(ge=1, le=500, description="Most items in this page.")] = 50,
        status: Annotated[
            Literal["tentative", "confirmed", "superseded"] | None,
            Field(description="Facts with this status only (episodes have none: lists facts alone)."),
        ] = None,
        metadata: MetadataArg = None,
    ) -> MemoryListResponse:
        principal = principal_of(ctx)
        user = user_of(principal, user_id)
        filters = ListFilters(status=status, metadata=metadata or {})
        try:
            return await service.list_memories(
                principal.tenant_id, user, kind, limit=limit, cursor=cursor, filters=filters
            )
        except ListingRefused as exc:
            raise ToolError(str(exc)) from exc

    @server.tool(annotations=READ_ONLY, description="One fact with its status, validity and channels.")
    async def memory_get_fact(fact_id: IdArg, user_id: UserArg, ctx: Context[Any, Any]) -> MemoryRecord:
        principal = principal_of(ctx)
        return await found_or_raise(
            service.fact(principal.tenant_id, user_of(principal, user_id), fact_id), missing=_not_found
        )

    @server.tool(
        annotations=READ_ONLY,
        description="Every version of a fact (oldest first) with valid_from, valid_to, superseded_by and provenance.",
    )
    async def memory_fact_history(fact_id: IdArg, user_id: UserArg, ctx: Context[Any, Any]) -> FactHistoryResponse:
        principal = principal_of(ctx)
        return await found_or_raise(
            service.fact_history(principal.tenant_id, user_of(principal, user_id), fact_id), missing=_not_found
        )


def _add_change_tools(
    server: MCPServer[Any], service: RecallService, principal_of: PrincipalOf, user_of: UserOf
) -> None:
    @server.tool(
        annotations=DESTRUCTIVE,
        description=(
            "Forget one memory (a fact or an episode) everywhere, including the summaries a fact appeared in. "
            "Carried out in the background; memory_event_status tells when it is complete."
        ),
    )
    async def memory_forget(memory_id: IdArg, user_id: UserArg, ctx: Context[Any, Any]) -> ForgetAccepted:
        principal = principal_of(ctx)
        return await found_or_raise(
            service.forget(principal.tenant_id, user_of(principal, user_id), memory_id), missing=_not_found
        )

    @server.tool(
        annotations=WRITES,
        description=(
            "Correct a wrong fact: the corrected value becomes current (marked as stated by the user) and the "
            "old value is kept as superseded history, never overwritten."
        ),
    )
    async def memory_correct(
        fact_id: IdArg,
        user_id: UserArg,
        value: Annotated[str, Field(min_length=1, max_length=400, description="The corrected value.")],
        text: Annotated[str, Field(min_length=1, max_length=1000, description="The corrected fact, one sentence.")],
        ctx: Context[Any, Any],
    ) -> CorrectionResponse:
        principal = principal_of(ctx)
        try:
            request = CorrectionRequest(user_id=user_of(principal, user_id), value=value, text=text)
            corrected = await service.correct_fact(principal.tenant_id, fact_id, request)
        except ValidationError as exc:
            raise ToolError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from exc
        except (FactRejected, SessionRejected, WrongTenant) as exc:
            raise ToolError(f"not corrected: {exc}") from exc
        if corrected is None:
            raise ToolError(NOT_FOUND)
        return corrected
