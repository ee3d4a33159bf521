"""The memory browser's pages (GET): the user picker, a user's memories, an episode, a fact with its
versions, and the progress of a forget or an erasure. Only ids go into URLs; memory text only ever
travels in POST bodies and page contents."""

from __future__ import annotations

import logging
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import JSONResponse, Response

from contracts.events import Channel, Scope
from services.common.domain.facts import FactStatus
from services.common.domain.owner import Owner
from services.common.stores.erasure import ControlError
from services.common.stores.vector.port import SearchFilter
from services.recall_api.http.unavailable import FAILURE_TYPES
from services.recall_api.ui.audit import audit_owner
from services.recall_api.ui.overview import dated_page, memory_counts
from services.recall_api.ui.rendering import (
    SECURITY_HEADERS,
    Service,
    Session,
    UiError,
    checked_user,
    redirect,
    render,
    service_of,
    signer_of,
)
from services.recall_api.ui.session import COOKIE_NAME
from services.recall_api.write.memory_admin import ListFilters, ListingRefused
from services.recall_api.write_schemas import ListKind

log = logging.getLogger(__name__)

# What the status poll answers with a 503 and its partial body: the pruner's control, or any store or
# broker failure (classified in one place).
_STATUS_FAILURES: tuple[type[Exception], ...] = (ControlError, *FAILURE_TYPES)
_EVENT_ID = re.compile(r"^[0-9a-fA-F-]{32,36}$")

pages_router = APIRouter(prefix="/ui", include_in_schema=False)
MAX_LISTED_USERS = 200


def checked_event(event_id: str) -> None:
    if not _EVENT_ID.fullmatch(event_id):
        raise UiError(status.HTTP_404_NOT_FOUND, "no such event")


@pages_router.get("/login")
async def login_page(request: Request) -> Response:
    service = service_of(request)
    if signer_of(request).check(request.cookies.get(COOKIE_NAME), service.settings.api_keys) is not None:
        return redirect("/ui")
    return render(request, "login.html", {"failed": False}, session=None)


@pages_router.get("")
async def users_page(request: Request, session: Session, service: Service) -> Response:
    """The tenant's users who have memories (from the episode index), and a box for any other id."""
    owners = await (await service.resources.episodes()).owners()
    users = sorted(owner.user_id for owner in owners if owner.tenant_id == session.tenant_id)
    return render(
        request,
        "users.html",
        {"users": users[:MAX_LISTED_USERS], "more": len(users) > MAX_LISTED_USERS},
        session=session,
    )


@pages_router.get("/pick")
async def pick_user(session: Session, user_id: Annotated[str, Query(max_length=128)] = "") -> Response:
    del session
    return redirect(f"/ui/u/{checked_user(user_id.strip())}")


@pages_router.get("/u/{user_id}")
async def user_page(
    request: Request,
    user_id: str,
    session: Session,
    service: Service,
    kind: ListKind = "all",
    scope: Scope | Literal[""] = "",
    channel: Channel | Literal[""] = "",
    fact_status: Annotated[FactStatus | Literal[""], Query(alias="status")] = "",
    page: Annotated[int, Query(ge=1, le=10_000)] = 1,
) -> Response:
    """The counts, then everything remembered, newest first (ui/overview.py)."""
    checked_user(user_id)
    filters = ListFilters(scope=scope or None, channel=channel or None, status=fact_status or None)
    try:
        listed = await dated_page(service, session.tenant_id, user_id, kind, filters, page)
    except ListingRefused as exc:
        raise UiError(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    counts = await memory_counts(service, Owner(session.tenant_id, user_id))
    chosen = {"kind": kind, "scope": scope, "channel": channel, "status": fact_status}
    context = {"user_id": user_id, "listed": listed, "chosen": chosen, "counts": counts}
    return render(request, "user.html", context, session=session)


@pages_router.get("/u/{user_id}/episodes/{episode_id}")
async def episode_page(request: Request, user_id: str, episode_id: str, session: Session, service: Service) -> Response:
    checked_user(user_id)
    owner = Owner(session.tenant_id, user_id)
    # Looking is not recalling: the pruner's never-recalled signal must not count the browser.
    expanded = await service.expand(session.tenant_id, user_id, episode_id, channel="private", count_recall=False)
    if expanded is None or expanded.kind != "episode":
        raise UiError(status.HTTP_404_NOT_FOUND, "memory not found")
    store = await service.resources.episodes()
    stored = await store.scroll(owner, SearchFilter(ids=[episode_id]), limit=1)
    passages = await store.passages(owner, episode_id)
    context: dict[str, Any] = {
        "user_id": user_id,
        "episode": expanded,
        "recall_count": stored[0].recall_count if stored else 0,
        "passages": sorted(passages, key=lambda p: p.index),
    }
    return render(request, "episode.html", context, session=session)


@pages_router.get("/u/{user_id}/facts/{fact_id}")
async def fact_page(request: Request, user_id: str, fact_id: str, session: Session, service: Service) -> Response:
    checked_user(user_id)
    record = await service.fact(session.tenant_id, user_id, fact_id)
    history = await service.fact_history(session.tenant_id, user_id, fact_id)
    if record is None or history is None:
        raise UiError(status.HTTP_404_NOT_FOUND, "memory not found")
    current = next((v for v in history.versions if v.id == fact_id), None)
    context = {"user_id": user_id, "fact": record, "current": current, "versions": history.versions, "error": None}
    return render(request, "fact.html", context, session=session)


@pages_router.get("/u/{user_id}/events/{event_id}")
async def event_page(request: Request, user_id: str, event_id: str, session: Session, audit: bool = False) -> Response:
    """The progress of a forget (or, with `audit`, a whole-user erasure with its audit table); the
    page polls `status.json` until the pruner reports it complete."""
    checked_user(user_id)
    checked_event(event_id)
    context = {"user_id": user_id, "event_id": event_id.lower(), "audit": audit}
    return render(request, "event.html", context, session=session)


@pages_router.get("/u/{user_id}/events/{event_id}/status.json")
async def event_status_json(
    user_id: str, event_id: str, session: Session, service: Service, audit: bool = False
) -> Response:
    checked_user(user_id)
    checked_event(event_id)
    body: dict[str, Any] = {"state": "unknown", "removed": None, "traces": None, "remaining": None}
    try:
        found = await service.event_status(session.tenant_id, user_id, event_id.lower())
        if found is not None:
            body.update(state=found.state, removed=found.removed)
        if audit:
            report = await audit_owner(service, Owner(session.tenant_id, user_id))
            body.update(traces=report.traces(), remaining=report.remaining)
    except _STATUS_FAILURES as exc:
        log.warning("memory browser: event status or audit unavailable: %s", exc)
        body["error"] = "a store or the pruner cannot be reached now; retrying"
        return JSONResponse(body, status_code=status.HTTP_503_SERVICE_UNAVAILABLE, headers=SECURITY_HEADERS)
    return JSONResponse(body, headers=SECURITY_HEADERS)
