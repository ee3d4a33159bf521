"""The MCP tool `memory_procedures`: the working rules for this turn (services/recall_api/facts/procedures.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from contracts.events import ID_PATTERN
from services.recall_api.auth import Principal
from services.recall_api.facts.procedures import MAX_TOKEN_BUDGET, ProceduresResponse
from services.recall_api.mcp.write_tools import READ_ONLY
from services.recall_api.service import RecallService


def add_procedure_tool(
    server: MCPServer[Any],
    service: RecallService,
    principal_of: Callable[[Context[Any, Any]], Principal],
    user_of: Callable[[Principal, str | None], str],
) -> None:
    """`memory_procedures`: the same answer as GET /v1/procedures, for the connection's principal."""

    @server.tool(
        annotations=READ_ONLY,
        description=(
            "The user's working rules (and the tenant's shared ones) to follow in this turn: all of them while "
            "they fit token_budget, else the ones relevant to `query`. Follow them unless the user says otherwise."
        ),
    )
    async def memory_procedures(
        ctx: Context[Any, Any],
        user_id: Annotated[str | None, Field(default=None, pattern=ID_PATTERN, description="End user.")] = None,
        query: Annotated[str | None, Field(default=None, max_length=32_000, description="This turn's message.")] = None,
        token_budget: Annotated[int | None, Field(default=None, ge=1, le=MAX_TOKEN_BUDGET)] = None,
    ) -> ProceduresResponse:
        principal = principal_of(ctx)
        channel = principal.channel or "private"
        return await service.procedures(
            principal.tenant_id,
            user_of(principal, user_id),
            channel=channel,
            query=query,
            token_budget=token_budget,
        )
