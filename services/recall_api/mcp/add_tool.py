"""The MCP tool `memory_add`: remember a conversation from its turns alone, typed so a model never has to
invent ids or timestamps. The rest is completed by `contracts.session_form` exactly as for HTTP, the CLI
and the light client, so the same turns added twice (through any of them) are one event."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field

from contracts.events import ID_PATTERN, METADATA_MAX_KEYS, CleanText, MetadataKey, MetadataValue
from contracts.session_form import SessionForm
from contracts.session_input import SessionRejected
from services.recall_api.auth import Principal
from services.recall_api.mcp.write_tools import WRITES
from services.recall_api.service import RecallService
from services.recall_api.write.sessions_in import WrongTenant
from services.recall_api.write_schemas import SessionAccepted

MAX_TURNS = 2000  # the default size limit; the configured limits are checked after completion


class Turn(BaseModel):
    """One turn of the conversation."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"] = Field(description="Who said it.")
    content: CleanText = Field(min_length=1, description="What was said, verbatim.")


def add_memory_tool(
    server: MCPServer[Any],
    service: RecallService,
    principal_of: Callable[[Context[Any, Any]], Principal],
    user_of: Callable[[Principal, str | None], str],
) -> None:
    """`memory_add`: the short form of `POST /v1/sessions`, for the connection's principal."""

    @server.tool(
        annotations=WRITES,
        description=(
            "Remember a conversation: pass its turns (role 'user' or 'assistant', content) oldest first. Ids and "
            "times are filled in; adding the same turns again reports a duplicate and changes nothing. Returns the "
            "event id; memory_event_status tells when it has been consolidated."
        ),
    )
    async def memory_add(
        messages: Annotated[list[Turn], Field(min_length=1, max_length=MAX_TURNS, description="The turns.")],
        ctx: Context[Any, Any],
        user_id: Annotated[
            str | None,
            Field(
                default=None,
                max_length=128,
                description="End user the memory belongs to; required unless the connection pins a user.",
            ),
        ] = None,
        session_id: Annotated[
            str | None,
            Field(
                default=None,
                pattern=ID_PATTERN,
                description="Your conversation id, when you have one; derived from the turns otherwise.",
            ),
        ] = None,
        metadata: Annotated[
            dict[MetadataKey, MetadataValue] | None,
            Field(
                max_length=METADATA_MAX_KEYS,
                description='String key/values kept with the conversation, e.g. {"project": "atlas"}: its '
                "memories carry them, and memory_search, memory_context and memory_list can filter on them.",
            ),
        ] = None,
    ) -> SessionAccepted:
        principal = principal_of(ctx)
        form = SessionForm.model_validate(
            {
                "user_id": user_of(principal, user_id),
                "messages": [turn.model_dump() for turn in messages],
                "session_id": session_id,
                "metadata": metadata or {},
                # A connection pinned to a group conversation adds group memories, never private ones.
                "channel": "group" if principal.channel == "group" else "private",
            }
        )
        try:
            return await service.add_session(principal.tenant_id, form)
        except (SessionRejected, WrongTenant) as exc:
            raise ToolError(str(exc)) from exc
