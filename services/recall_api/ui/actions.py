"""The memory browser's forms (POST): log in and out, search (L1), preview L0, the entity graph,
correct a fact, forget a memory, erase a user. Memory text only travels in these bodies; every form
of a logged-in page carries the session's CSRF token."""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import Response
from pydantic import ValidationError

from contracts.events import Channel, Scope
from services.recall_api.auth import tenant_for_key
from services.recall_api.errors import FactRejected
from services.recall_api.http.throttle import client_address
from services.recall_api.schemas import (
    AutoRecallRequest,
    ChatTurn,
    GraphSearchRequest,
    MemoryItem,
    SearchRequest,
)
from services.recall_api.ui.graph_layout import graph_view
from services.recall_api.ui.l0_explain import explain_auto
from services.recall_api.ui.rendering import (
    Service,
    Session,
    UiError,
    checked_user,
    error_page,
    redirect,
    render,
    require_csrf,
    service_of,
    signer_of,
    throttle_of,
)
from services.recall_api.ui.session import COOKIE_NAME
from services.recall_api.write_schemas import CorrectionRequest

log = logging.getLogger(__name__)
actions_router = APIRouter(prefix="/ui", include_in_schema=False)

Csrf = Annotated[str | None, Form(max_length=200)]
KindChoice = Literal["all", "episode", "fact"]


def _invalid(request: Request, exc: ValidationError, session: Any) -> Response:
    """A form that does not make a valid request: the fields and reasons, never the input."""
    problems = exc.errors()[:3]
    reasons = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'form'}: {e['msg']}" for e in problems)
    return error_page(request, status.HTTP_422_UNPROCESSABLE_CONTENT, f"Invalid input: {reasons}", session)


@actions_router.post("/login")
async def login(request: Request, api_key: Annotated[str, Form(max_length=500)] = "") -> Response:
    """A wrong key spends the client's budget of wrong keys (shared with /v1's Bearer keys); over it,
    the form is refused before the key is checked, unless the key has worked from there (http/throttle.py)."""
    service = service_of(request)
    throttle, client = throttle_of(request), client_address(request.scope)
    wait_s = throttle.retry_after(client, api_key.strip())
    if wait_s is not None:
        log.info("memory browser: login throttled")
        refused = error_page(request, status.HTTP_429_TOO_MANY_REQUESTS, "Too many wrong keys: try again later.")
        refused.headers["Retry-After"] = str(wait_s)
        return refused
    if tenant_for_key(service.settings.api_keys, api_key.strip() or None) is None:
        if api_key.strip():
            throttle.failed(client)
        log.info("memory browser: login refused")
        return render(request, "login.html", {"failed": True}, status_code=status.HTTP_401_UNAUTHORIZED, session=None)
    throttle.succeeded(client, api_key.strip())
    response = redirect("/ui")
    response.set_cookie(
        COOKIE_NAME,
        signer_of(request).issue(api_key.strip()),
        max_age=signer_of(request).max_age_s,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@actions_router.post("/logout")
async def logout(request: Request, session: Session, csrf: Csrf = None) -> Response:
    """Ends the session on the server too: a copy of the cookie replayed afterwards is refused."""
    require_csrf(session, csrf)
    signer_of(request).revoke(request.cookies.get(COOKIE_NAME))
    response = redirect("/ui/login")
    response.delete_cookie(COOKIE_NAME, path="/ui", httponly=True, samesite="strict")
    return response


def _day(value: str, field: str) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise UiError(status.HTTP_422_UNPROCESSABLE_CONTENT, f"{field}: give a date as YYYY-MM-DD") from exc


def _within(item: MemoryItem, scope: str, after: date | None, before: date | None) -> bool:
    """The filters L1 itself does not take: scope and the time window (on when it was said)."""
    if scope and item.scope != scope:
        return False
    if after is None and before is None:
        return True
    if item.occurred_at is None:
        return False
    moment = datetime.fromisoformat(item.occurred_at)
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if after is not None and moment < datetime.combine(after, time(), UTC):
        return False
    return before is None or moment < datetime.combine(before, time(), UTC)


@actions_router.post("/u/{user_id}/search")
async def search(
    request: Request,
    user_id: str,
    session: Session,
    service: Service,
    query: Annotated[str, Form(max_length=4000)] = "",
    kind: Annotated[KindChoice, Form()] = "all",
    scope: Annotated[Scope | Literal[""], Form()] = "",
    channel: Annotated[Channel, Form()] = "private",
    after: Annotated[str, Form(max_length=10)] = "",
    before: Annotated[str, Form(max_length=10)] = "",
    include_superseded: Annotated[bool, Form()] = False,
    csrf: Csrf = None,
) -> Response:
    checked_user(user_id)
    require_csrf(session, csrf)
    window = (_day(after, "after"), _day(before, "before"))
    try:
        body = SearchRequest(
            user_id=user_id,
            query=query,
            limit=50,
            kinds=None if kind == "all" else [kind],
            channel=channel,
            include_superseded=include_superseded,
        )
    except ValidationError as exc:
        return _invalid(request, exc, session)
    found = await service.search(session.tenant_id, body)
    items = [item for item in found.items if _within(item, scope, *window)]
    form = {"query": query, "kind": kind, "scope": scope, "channel": channel, "after": after, "before": before}
    context = {"user_id": user_id, "items": items, "top_score": found.top_score, "form": form}
    return render(request, "search.html", context, session=session)


def _recent_turns(recent: str) -> list[ChatTurn]:
    """One earlier turn per line, `user: ...` or `assistant: ...` (a line without a role is the user's)."""
    turns: list[ChatTurn] = []
    for line in recent.splitlines():
        role, sep, text = line.partition(":")
        if sep and role.strip().lower() in {"user", "assistant", "system", "tool"}:
            turns.append(ChatTurn(role=role.strip().lower(), content=text.strip()))  # type: ignore[arg-type]
        elif line.strip():
            turns.append(ChatTurn(role="user", content=line.strip()))
    return turns


@actions_router.post("/u/{user_id}/l0")
async def l0_preview(
    request: Request,
    user_id: str,
    session: Session,
    service: Service,
    message: Annotated[str, Form(max_length=32_000)] = "",
    recent: Annotated[str, Form(max_length=64_000)] = "",
    channel: Annotated[Channel, Form()] = "private",
    csrf: Csrf = None,
) -> Response:
    checked_user(user_id)
    require_csrf(session, csrf)
    try:
        body = AutoRecallRequest(
            user_id=user_id, message=message, channel=channel, recent_messages=_recent_turns(recent)
        )
    except ValidationError as exc:
        return _invalid(request, exc, session)
    explained = await explain_auto(service, session.tenant_id, body)
    form = {"message": message, "recent": recent, "channel": channel}
    return render(request, "l0.html", {"user_id": user_id, "explained": explained, "form": form}, session=session)


@actions_router.post("/u/{user_id}/graph")
async def graph(
    request: Request,
    user_id: str,
    session: Session,
    service: Service,
    entity: Annotated[str, Form(max_length=400)] = "",
    hops: Annotated[int, Form(ge=1, le=2)] = 1,
    csrf: Csrf = None,
) -> Response:
    checked_user(user_id)
    require_csrf(session, csrf)
    try:
        body = GraphSearchRequest(user_id=user_id, query=entity, hops=hops, limit=60)
    except ValidationError as exc:
        return _invalid(request, exc, session)
    found = await service.graph_search(session.tenant_id, body)
    context = {"user_id": user_id, "graph": graph_view(found), "form": {"entity": entity, "hops": hops}}
    return render(request, "graph.html", context, session=session)


@actions_router.post("/u/{user_id}/facts/{fact_id}/correct")
async def correct_fact(
    request: Request,
    user_id: str,
    fact_id: str,
    session: Session,
    service: Service,
    value: Annotated[str, Form(max_length=400)] = "",
    text: Annotated[str, Form(max_length=1000)] = "",
    csrf: Csrf = None,
) -> Response:
    """Through the write policy (a user-stated observation); then the page of the now-current fact."""
    checked_user(user_id)
    require_csrf(session, csrf)
    try:
        body = CorrectionRequest(user_id=user_id, value=value, text=text)
    except ValidationError as exc:
        return _invalid(request, exc, session)
    try:
        corrected = await service.correct_fact(session.tenant_id, fact_id, body, idempotency_key=None)
    except FactRejected as exc:
        return error_page(request, status.HTTP_422_UNPROCESSABLE_CONTENT, f"Correction refused: {exc}", session)
    if corrected is None:
        raise UiError(status.HTTP_404_NOT_FOUND, "memory not found")
    return redirect(f"/ui/u/{user_id}/facts/{corrected.fact_id}")


@actions_router.post("/u/{user_id}/memories/{memory_id}/forget")
async def forget(
    request: Request, user_id: str, memory_id: str, session: Session, service: Service, csrf: Csrf = None
) -> Response:
    checked_user(user_id)
    require_csrf(session, csrf)
    accepted = await service.forget(session.tenant_id, user_id, memory_id)
    if accepted is None:
        raise UiError(status.HTTP_404_NOT_FOUND, "memory not found")
    return redirect(f"/ui/u/{user_id}/events/{accepted.event_id}")


@actions_router.post("/u/{user_id}/erase")
async def erase(
    request: Request,
    user_id: str,
    session: Session,
    service: Service,
    confirm: Annotated[str, Form(max_length=128)] = "",
    csrf: Csrf = None,
) -> Response:
    """Erase everything of the user; the typed-in user id confirms it is meant."""
    checked_user(user_id)
    require_csrf(session, csrf)
    if confirm.strip() != user_id:
        return error_page(
            request, status.HTTP_422_UNPROCESSABLE_CONTENT, "Type the user id to confirm the erasure.", session
        )
    accepted = await service.request_erasure(session.tenant_id, user_id, reason="erased from the memory browser")
    return redirect(f"/ui/u/{user_id}/events/{accepted.event_id}?audit=true")
