"""`GET /v1/procedures`: the working rules for this turn (services/recall_api/facts/procedures.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from contracts.events import Channel
from services.recall_api.facts.procedures import MAX_TOKEN_BUDGET, ProceduresResponse
from services.recall_api.http.routes import ERROR_RESPONSES, Service, Tenant, UserId

procedures_router = APIRouter(responses=ERROR_RESPONSES)


@procedures_router.get(
    "/v1/procedures", response_model=ProceduresResponse, tags=["facts"], summary="Working rules for this turn"
)
async def procedures_for_turn(
    user_id: UserId,
    tenant: Tenant,
    service: Service,
    channel: Channel = "private",
    query: Annotated[str | None, Query(max_length=32_000, description="The turn's message, to rank by.")] = None,
    token_budget: Annotated[int | None, Query(ge=1, le=MAX_TOKEN_BUDGET, description="Most tokens (400).")] = None,
    include_shared: Annotated[bool, Query(description="Add the tenant's shared rules.")] = True,
) -> ProceduresResponse:
    return await service.procedures(
        tenant,
        user_id,
        channel=channel,
        query=query,
        token_budget=token_budget,
        include_shared=include_shared,
    )
