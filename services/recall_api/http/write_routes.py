"""HTTP routes for getting memory in and managing it: sessions in, event status, listing, fact
history, corrections and forgetting one memory. Thin shells over `RecallService`, like routes.py."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Body, Header, HTTPException, Path, Query, status

from contracts.events import METADATA_MAX_KEYS, Channel, Scope
from services.common.domain.facts import FactStatus
from services.recall_api.errors import FactRejected, found_or_raise
from services.recall_api.http.guard import FieldError, session_refused
from services.recall_api.http.metadata_query import metadata_pairs
from services.recall_api.http.routes import ERROR_RESPONSES, NOT_FOUND_DETAIL, Service, Tenant, UserId
from services.recall_api.service import SessionRejected
from services.recall_api.write.memory_admin import ListFilters, ListingRefused
from services.recall_api.write.sessions_in import WrongTenant
from services.recall_api.write_schemas import (
    _MINIMAL_SESSION_EXAMPLE,
    _SESSION_EXAMPLE,
    CorrectionRequest,
    CorrectionResponse,
    EventStatus,
    FactHistoryResponse,
    ForgetAccepted,
    ListKind,
    MemoryListResponse,
    MemoryRecord,
    SessionAccepted,
    SessionBatchRequest,
    SessionBatchResponse,
    SessionSubmission,
)

MemoryId = Annotated[str, Path(max_length=128, description="Episode or fact id (a UUID).")]
IdempotencyKey = Annotated[
    str | None,
    Header(max_length=200, description="The same key (for the same item) repeats the same request, never a second."),
]

write_router = APIRouter(responses=ERROR_RESPONSES)


def _not_found() -> HTTPException:
    return HTTPException(status_code=status.HTTP_404_NOT_FOUND, detail=NOT_FOUND_DETAIL)


def _event_not_found() -> HTTPException:
    return HTTPException(status_code=status.HTTP_404_NOT_FOUND, detail="event not found")


@write_router.post(
    "/v1/sessions",
    response_model=SessionAccepted,
    status_code=status.HTTP_202_ACCEPTED,
    tags=["sessions"],
    summary="Add a conversation: only user_id and messages are required",
)
async def sessions_add(
    body: Annotated[
        SessionSubmission,
        Body(
            openapi_examples={
                "minimal": {"summary": "Only the user and the turns", "value": _MINIMAL_SESSION_EXAMPLE},
                "session": {"summary": "A whole SessionCompleted", "value": _SESSION_EXAMPLE},
            }
        ),
    ],
    tenant: Tenant,
    service: Service,
) -> SessionAccepted:
    """Validated with the limits of `tiermem ingest`, published with the owner-scoped message id
    `session:<tenant>:<user>:<event_id>` (`services.common.domain.ids`): the same owner posting the
    same event again is answered `duplicate: true` and changes nothing; another tenant or user with
    the same `event_id` is another session. Only `user_id` and `messages`
    are required: the API key decides the tenant (a record naming another tenant is refused, 403);
    `event_id` and `session_id` left out are derived from the owner and the content (the same turns
    are the same event, so a retry is a duplicate); `agent_id` defaults to "default", `channel` to
    "private", and the times to the turns' `ts`, else now. `status_url` can be followed as given."""
    try:
        return await service.add_session(tenant, body)
    except WrongTenant as exc:
        raise FieldError("tenant_id", str(exc), status.HTTP_403_FORBIDDEN) from exc
    except SessionRejected as exc:
        raise session_refused(exc) from exc


@write_router.post(
    "/v1/sessions:batch",
    response_model=SessionBatchResponse,
    status_code=status.HTTP_207_MULTI_STATUS,
    tags=["sessions"],
    summary="Add up to 100 conversations, with a result per item",
)
async def sessions_add_batch(body: SessionBatchRequest, tenant: Tenant, service: Service) -> SessionBatchResponse:
    """Each record is validated on its own, in the form of `POST /v1/sessions` (only `user_id` and
    `messages` are required; the key decides the tenant); one bad record rejects only itself."""
    return await service.add_sessions(tenant, list(body.sessions))


@write_router.get(
    "/v1/events/{event_id}",
    response_model=EventStatus,
    tags=["sessions"],
    summary="Where a session or an erasure is",
)
async def events_status(
    event_id: Annotated[str, Path(pattern=r"^[0-9a-fA-F-]{32,36}$", description="The event id (a UUID).")],
    user_id: UserId,
    tenant: Tenant,
    service: Service,
) -> EventStatus:
    return await found_or_raise(service.event_status(tenant, user_id, event_id.lower()), missing=_event_not_found)


@write_router.get("/v1/memories", response_model=MemoryListResponse, tags=["memories"], summary="List memories")
async def memories_list(
    user_id: UserId,
    tenant: Tenant,
    service: Service,
    kind: ListKind = "all",
    cursor: Annotated[str | None, Query(max_length=200, description="next_cursor of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    scope: Scope | None = None,
    channel: Channel | None = None,
    status_filter: Annotated[
        FactStatus | None, Query(alias="status", description="Facts only: lists facts alone.")
    ] = None,
    after: Annotated[datetime | None, Query(description="Occurred at or after (timezone-aware).")] = None,
    before: Annotated[datetime | None, Query(description="Occurred before (timezone-aware).")] = None,
    metadata: Annotated[
        list[str],
        Query(
            max_length=METADATA_MAX_KEYS,
            description="Session metadata as KEY:VALUE, repeatable: only memories whose session carried every one.",
        ),
    ] = [],  # noqa: B006 (FastAPI copies a query default; it is never mutated)
) -> MemoryListResponse:
    """Stable order (episodes, then facts, each by id): paging while memories are written never
    repeats or skips one that existed throughout. Keep the same filters for every page. `status`
    belongs to facts alone: with it, `kind=all` lists facts only and `kind=episode` is refused (422)."""
    for name, moment in (("after", after), ("before", before)):
        if moment is not None and moment.tzinfo is None:
            raise FieldError(name, f"{name} must carry a timezone (e.g. 2026-05-02T00:00:00Z)")
    filters = ListFilters(
        scope=scope,
        channel=channel,
        status=status_filter,
        after=after,
        before=before,
        metadata=metadata_pairs(metadata),
    )
    try:
        return await service.list_memories(tenant, user_id, kind, limit=limit, cursor=cursor, filters=filters)
    except ListingRefused as exc:
        raise FieldError(exc.field, str(exc)) from exc


@write_router.delete(
    "/v1/memories/{memory_id}",
    response_model=ForgetAccepted,
    status_code=status.HTTP_202_ACCEPTED,
    tags=["memories"],
    summary="Forget one memory (a fact: redacted from every summary it appeared in)",
)
async def memories_forget(
    memory_id: MemoryId, user_id: UserId, tenant: Tenant, service: Service, idempotency_key: IdempotencyKey = None
) -> ForgetAccepted:
    """Carried out by the pruner; `status_url` reports when it is complete and what it removed."""
    return await found_or_raise(
        service.forget(tenant, user_id, memory_id, idempotency_key=idempotency_key), missing=_not_found
    )


@write_router.get("/v1/facts/{fact_id}", response_model=MemoryRecord, tags=["facts"], summary="One fact")
async def facts_get(fact_id: MemoryId, user_id: UserId, tenant: Tenant, service: Service) -> MemoryRecord:
    return await found_or_raise(service.fact(tenant, user_id, fact_id), missing=_not_found)


@write_router.get(
    "/v1/facts/{fact_id}/history",
    response_model=FactHistoryResponse,
    tags=["facts"],
    summary="Every version of a fact, with validity and provenance",
)
async def facts_history(fact_id: MemoryId, user_id: UserId, tenant: Tenant, service: Service) -> FactHistoryResponse:
    return await found_or_raise(service.fact_history(tenant, user_id, fact_id), missing=_not_found)


@write_router.post(
    "/v1/facts/{fact_id}/corrections",
    response_model=CorrectionResponse,
    tags=["facts"],
    summary="Correct a fact (the old value is superseded, never overwritten)",
)
async def facts_correct(
    fact_id: MemoryId,
    body: CorrectionRequest,
    tenant: Tenant,
    service: Service,
    idempotency_key: IdempotencyKey = None,
) -> CorrectionResponse:
    """Through the write policy, as the user's own correction: the corrected value becomes current
    and `confirmed` at once (the user's word needs no second observation), and the old one keeps
    its history with `valid_to` and `superseded_by`."""
    try:
        corrected = await service.correct_fact(tenant, fact_id, body, idempotency_key=idempotency_key)
    except FactRejected as exc:
        raise FieldError("text", str(exc)) from exc
    if corrected is None:
        raise _not_found()
    return corrected
