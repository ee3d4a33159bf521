"""The MCP tool `memory_context`: L0 for a host that calls tools rather than HTTP, the same answer as
`POST /v1/recall/auto` (services/recall_api/l0/auto_recall.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from services.recall_api.auth import Principal
from services.recall_api.mcp.arguments import argument_errors
from services.recall_api.mcp.write_tools import READ_ONLY, MetadataArg
from services.recall_api.schemas import AutoRecallRequest, AutoRecallResponse, ChatTurn
from services.recall_api.service import RecallService

PrincipalOf = Callable[[Context[Any, Any]], Principal]
UserOf = Callable[[Principal, str | None], str]
ChannelOf = Callable[[Principal, Literal["private", "group"]], Literal["private", "group"]]


def add_context_tool(
    server: MCPServer[Any],
    service: RecallService,
    principal_of: PrincipalOf,
    user_of: UserOf,
    channel_of: ChannelOf,
) -> None:
    """`memory_context` for the connection's principal; a pinned user and a pinned group channel hold
    as for the other read tools."""

    @server.tool(
        annotations=READ_ONLY,
        description=(
            "The '## Memory Context' section to put into the prompt before answering this message: the few "
            "remembered items that matter for it, fenced as data, within a token budget. When nothing is worth "
            "injecting, `section` is empty and `skipped_reason` says why; `cut` lists the candidates left out "
            "and why."
        ),
    )
    async def memory_context(
        message: Annotated[str, Field(min_length=1, max_length=32_000, description="The current user message.")],
        ctx: Context[Any, Any],
        user_id: Annotated[
            str | None,
            Field(max_length=128, description="End user; required unless the connection pins a user."),
        ] = None,
        recent_messages: Annotated[
            list[ChatTurn] | None,
            Field(max_length=100, description="Earlier turns of this conversation, oldest first."),
        ] = None,
        channel: Annotated[
            Literal["private", "group"], Field(description="'group' never sees memories from private sessions.")
        ] = "private",
        max_entries: Annotated[int | None, Field(ge=1, le=20, description="Most entries injected.")] = None,
        token_budget: Annotated[int | None, Field(ge=1, le=8000, description="Most tokens of the section.")] = None,
        metadata: MetadataArg = None,
    ) -> AutoRecallResponse:
        principal = principal_of(ctx)
        user = user_of(principal, user_id)
        try:
            request = AutoRecallRequest(
                user_id=user,
                message=message,
                recent_messages=recent_messages or [],
                channel=channel_of(principal, channel),
                max_entries=max_entries,
                token_budget=token_budget,
                metadata=metadata or {},
            )
        except ValidationError as exc:
            raise ToolError(argument_errors(exc.errors())) from exc
        return await service.auto(principal.tenant_id, request)
