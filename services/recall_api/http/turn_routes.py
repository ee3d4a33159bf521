"""HTTP routes of per-turn sessions (a chat system that streams): append turns to an open session,
end it, read it back. Thin shells over `RecallService`; write/turns_in.py holds the behaviour."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, status

from contracts.events import ID_PATTERN
from contracts.session_input import SessionRejected
from services.recall_api.errors import found_or_raise
from services.recall_api.http.guard import FieldError, session_refused
from services.recall_api.http.routes import ERROR_RESPONSES, Service, Tenant
from services.recall_api.write.turn_schemas import OpenSessionView, SessionEnded, TurnsAccepted, TurnsRequest
from services.recall_api.write.turns_in import TurnConflict

UserPath = Annotated[str, Path(pattern=ID_PATTERN, max_length=128, description="End user the session belongs to.")]
SessionPath = Annotated[
    str, Path(pattern=ID_PATTERN, max_length=128, description="The session id, chosen by the chat system.")
]

turn_router = APIRouter(responses=ERROR_RESPONSES)


def _no_session() -> HTTPException:
    return HTTPException(status_code=status.HTTP_404_NOT_FOUND, detail="session not found")


@turn_router.post(
    "/v1/users/{user_id}/sessions/{session_id}/messages",
    response_model=TurnsAccepted,
    status_code=status.HTTP_202_ACCEPTED,
    tags=["sessions"],
    summary="Append turns to an open session (the first append opens it)",
)
async def session_turns_add(
    user_id: UserPath, session_id: SessionPath, body: TurnsRequest, tenant: Tenant, service: Service
) -> TurnsAccepted:
    """The turns are kept durably until the session ends (`.../end`, or no new turn for
    `TIERMEM_OPEN_SESSION_IDLE_S`). A turn whose `turn_id` the session already holds is a duplicate;
    a closed session, or a field the first append set given another value, is 409; past the ingest
    limits (turns, characters, bytes) 413."""
    try:
        return await service.add_turns(tenant, user_id, session_id, body)
    except TurnConflict as exc:
        raise FieldError(exc.field, exc.reason, status.HTTP_409_CONFLICT) from exc
    except SessionRejected as exc:
        raise session_refused(exc) from exc


@turn_router.post(
    "/v1/users/{user_id}/sessions/{session_id}/end",
    response_model=SessionEnded,
    status_code=status.HTTP_202_ACCEPTED,
    tags=["sessions"],
    summary="End an open session: it becomes one SessionCompleted",
)
async def session_end(user_id: UserPath, session_id: SessionPath, tenant: Tenant, service: Service) -> SessionEnded:
    """Published like `POST /v1/sessions`, with an event id derived from the owner and the session:
    ending it again (or after the idle timeout ended it) answers the same event, `duplicate: true`."""
    return await found_or_raise(service.end_session(tenant, user_id, session_id), missing=_no_session)


@turn_router.get(
    "/v1/users/{user_id}/sessions/{session_id}",
    response_model=OpenSessionView,
    tags=["sessions"],
    summary="Read a per-turn session: its turns while open, its event once ended",
)
async def session_read(user_id: UserPath, session_id: SessionPath, tenant: Tenant, service: Service) -> OpenSessionView:
    return await found_or_raise(service.open_session(tenant, user_id, session_id), missing=_no_session)
