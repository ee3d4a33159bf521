"""HTTP routes of the recall API: thin shells over `RecallService`."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Request, Response, status
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from contracts.events import ID_PATTERN, Channel
from services.recall_api import instructions
from services.recall_api.auth import tenant_for_key
from services.recall_api.errors import FactRejected
from services.recall_api.http.guard import FieldError
from services.recall_api.http.unavailable import unavailable_reason
from services.recall_api.schemas import (
    AutoRecallRequest,
    AutoRecallResponse,
    ErasureAccepted,
    ExpandedMemory,
    FactsResponse,
    GraphSearchRequest,
    GraphSearchResponse,
    Instructions,
    SaveFactRequest,
    SaveFactResponse,
    SearchRequest,
    SearchResponse,
)
from services.recall_api.service import RecallService
from services.recall_api.write_schemas import ErrorResponse

log = logging.getLogger(__name__)

NOT_FOUND_DETAIL = "memory not found"
UserId = Annotated[str, Query(pattern=ID_PATTERN, max_length=128, description="End user whose memory is read.")]


# The dependencies below are `async def` on purpose: FastAPI runs a plain `def` dependency in a worker
# thread, and these two ran on every /v1 call — two thread hops that cost more than the rest of the
# framework together (0.3-0.8 ms an L0 call on 2 busy cores, measured with the service stubbed out).
async def service_of(request: Request) -> RecallService:
    service: RecallService = request.app.state.recall_service
    return service


bearer = HTTPBearer(
    auto_error=False,
    scheme_name="apiKey",
    description="An API key as a Bearer token: `Authorization: Bearer <key>`. The key decides the tenant.",
)

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "Missing or invalid API key."},
    404: {"model": ErrorResponse, "description": "No such item for this tenant and user (the same for every reason)."},
    409: {"model": ErrorResponse, "description": "The request conflicts with the current state."},
    413: {"model": ErrorResponse, "description": "The body (or a session in it) is larger than the limits."},
    422: {"model": ErrorResponse, "description": "Invalid input: `errors` names each field and the reason."},
    503: {"model": ErrorResponse, "description": "A store or the broker cannot be reached; retry later."},
}


async def require_tenant(
    service: Annotated[RecallService, Depends(service_of)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> str:
    """The tenant of the request's Bearer API key; 401 otherwise."""
    tenant = tenant_for_key(service.settings.api_keys, credentials.credentials if credentials else None)
    if tenant is None:
        raise HTTPException(
            status_code=status.HTTP_401_UNAUTHORIZED,
            detail="missing or invalid API key",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return tenant


Tenant = Annotated[str, Depends(require_tenant)]
Service = Annotated[RecallService, Depends(service_of)]


router = APIRouter(responses=ERROR_RESPONSES)


@router.post("/v1/recall/auto", response_model=AutoRecallResponse, tags=["recall"], summary="L0 auto-inject")
async def recall_auto(body: AutoRecallRequest, tenant: Tenant, service: Service) -> AutoRecallResponse:
    try:
        return await service.auto(tenant, body)
    except Exception as exc:
        # Counted here; answered (503 for a store or broker failure) by the app's one handler.
        if unavailable_reason(exc) is not None:
            service.metrics.record_error("auto")
        raise


@router.post("/v1/memories/search", response_model=SearchResponse, tags=["recall"], summary="L1 memory_search")
async def memories_search(body: SearchRequest, tenant: Tenant, service: Service) -> SearchResponse:
    return await service.search(tenant, body)


@router.get(
    "/v1/memories/{memory_id}",
    response_model=ExpandedMemory,
    tags=["recall"],
    summary="L1 memory_expand",
)
async def memories_expand(
    memory_id: Annotated[str, Path(max_length=128)],
    user_id: UserId,
    tenant: Tenant,
    service: Service,
    channel: Channel = "private",
) -> ExpandedMemory:
    expanded = await service.expand(tenant, user_id, memory_id, channel=channel)
    if expanded is None:
        raise HTTPException(status_code=status.HTTP_404_NOT_FOUND, detail=NOT_FOUND_DETAIL)
    return expanded


@router.post("/v1/graph/search", response_model=GraphSearchResponse, tags=["recall"], summary="L2 graph search")
async def graph_search(body: GraphSearchRequest, tenant: Tenant, service: Service) -> GraphSearchResponse:
    if not body.query and not body.entity:
        raise FieldError("query", "give `query` or `entity`")
    return await service.graph_search(tenant, body)


@router.post(
    "/v1/facts",
    response_model=SaveFactResponse,
    tags=["facts"],
    summary="memory_save",
)
async def facts_save(
    body: SaveFactRequest,
    tenant: Tenant,
    service: Service,
    idempotency_key: Annotated[
        str | None, Header(max_length=128, description="Same as `request_id` (the body's wins when both are given).")
    ] = None,
) -> SaveFactResponse:
    if body.request_id is None and idempotency_key is not None:
        body = body.model_copy(update={"request_id": idempotency_key})
    try:
        return await service.save_fact(tenant, body)
    except FactRejected as exc:
        raise FieldError("text", str(exc)) from exc


@router.get("/v1/facts", response_model=FactsResponse, tags=["facts"], summary="memory_recall")
async def facts_recall(
    user_id: UserId,
    tenant: Tenant,
    service: Service,
    token_budget: Annotated[int | None, Query(ge=1, le=8000)] = None,
    channel: Channel = "private",
    subject: Annotated[str | None, Query(max_length=200)] = None,
) -> FactsResponse:
    return await service.recall_facts(tenant, user_id, token_budget=token_budget, channel=channel, subject=subject)


@router.delete(
    "/v1/users/{user_id}",
    response_model=ErasureAccepted,
    status_code=status.HTTP_202_ACCEPTED,
    tags=["erasure"],
    summary="Erase a user's memory (carried out asynchronously)",
)
async def users_erase(
    user_id: Annotated[str, Path(pattern=ID_PATTERN, max_length=128)],
    tenant: Tenant,
    service: Service,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> ErasureAccepted:
    return await service.request_erasure(tenant, user_id, idempotency_key=idempotency_key)


@router.get("/v1/prompt/memory-instructions", response_model=Instructions, tags=["prompt"])
async def memory_instructions(
    tenant: Tenant, lang: Annotated[str, Query(max_length=35, description="'en' or 'ko'")] = "en"
) -> Instructions:
    del tenant  # authenticated like every /v1 call; the text is the same for every tenant
    try:
        return Instructions(lang=lang, text=instructions.memory_instructions(lang))
    except ValueError as exc:
        raise FieldError("lang", str(exc)) from exc


@router.get("/healthz", tags=["health"])
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", tags=["health"])
async def readyz(service: Service) -> Response:
    checks = await service.readiness()
    ready = all(result == "ok" for result in checks.values())
    return JSONResponse(
        {"status": "ready" if ready else "not ready", "checks": checks},
        status_code=status.HTTP_200_OK if ready else status.HTTP_503_SERVICE_UNAVAILABLE,
    )


@router.get("/metrics", tags=["health"], response_class=PlainTextResponse)
async def metrics(service: Service) -> PlainTextResponse:
    return PlainTextResponse(service.metrics.prometheus(), media_type="text/plain; version=0.0.4")
