"""The memory browser's add-session form: turns typed one per line (`user: …`, `assistant: …`) become
the short session form of `POST /v1/sessions` and go through the same `RecallService.add_session`
(the tenant from the signed-in key, deterministic ids, so sending the same turns twice is a
duplicate). Then the event's page: its id and where it is in the pipeline."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import Response
from pydantic import ValidationError

from contracts.session_input import describe_validation_error
from services.recall_api.service import SessionRejected
from services.recall_api.ui.pages import checked_event
from services.recall_api.ui.rendering import Service, Session, checked_user, redirect, render, require_csrf
from services.recall_api.write.sessions_in import WrongTenant
from services.recall_api.write_schemas import SessionSubmission

session_router = APIRouter(prefix="/ui", include_in_schema=False)
ROLES = ("user", "assistant", "system", "tool")
# States after which a session's page stops refreshing itself.
FINAL_STATES = frozenset({"consolidated", "processed", "dead_lettered"})


class FormProblem(ValueError):
    """What is wrong with the typed form, in one line for people."""


def parse_turns(text: str) -> list[dict[str, str]]:
    """One turn per line: `role: text` for a known role, else the whole line is the user's. A line
    starting with whitespace continues the turn above (a pasted paragraph keeps its breaks)."""
    turns: list[dict[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        role, sep, rest = line.partition(":")
        if sep and role.strip().lower() in ROLES:
            turns.append({"role": role.strip().lower(), "content": rest.strip()})
        elif line[:1].isspace() and turns:
            turns[-1]["content"] += "\n" + line.strip()
        else:
            turns.append({"role": "user", "content": line.strip()})
    if not turns:
        raise FormProblem("messages: type at least one turn, e.g. `user: I moved to Busan`")
    empty = next((i for i, turn in enumerate(turns, 1) if not turn["content"]), None)
    if empty is not None:
        raise FormProblem(f"messages: turn {empty} has a role but no text")
    return turns


def _form_again(request: Request, user_id: str, messages: str, reason: str, session: Any, code: int) -> Response:
    form = {"messages": messages, "error": reason}
    return render(request, "add_session.html", {"user_id": user_id, "form": form}, status_code=code, session=session)


@session_router.post("/u/{user_id}/sessions")
async def add_session(
    request: Request,
    user_id: str,
    session: Session,
    service: Service,
    messages: Annotated[str, Form(max_length=64_000)] = "",
    csrf: Annotated[str | None, Form(max_length=200)] = None,
) -> Response:
    """Bad input is the form again, with what was typed and the reason (422; 413 when too large)."""
    checked_user(user_id)
    require_csrf(session, csrf)
    unprocessable = status.HTTP_422_UNPROCESSABLE_CONTENT
    try:
        body = SessionSubmission.model_validate({"user_id": user_id, "messages": parse_turns(messages)})
        accepted = await service.add_session(session.tenant_id, body)
    except FormProblem as exc:
        return _form_again(request, user_id, messages, str(exc), session, unprocessable)
    except ValidationError as exc:
        return _form_again(request, user_id, messages, describe_validation_error(exc), session, unprocessable)
    except SessionRejected as exc:
        code = status.HTTP_413_CONTENT_TOO_LARGE if exc.too_large else unprocessable
        return _form_again(request, user_id, messages, str(exc), session, code)
    except WrongTenant as exc:  # the form never names a tenant; kept so a refusal is still a page
        return _form_again(request, user_id, messages, str(exc), session, status.HTTP_403_FORBIDDEN)
    duplicate = "?duplicate=true" if accepted.duplicate else ""
    return redirect(f"/ui/u/{user_id}/sessions/{accepted.event_id}{duplicate}")


@session_router.get("/u/{user_id}/sessions/{event_id}")
async def session_event_page(
    request: Request, user_id: str, event_id: str, session: Session, service: Service, duplicate: bool = False
) -> Response:
    """Where the session is: accepted, consolidated (with a link to its episode), processed or
    dead-lettered; the page reloads itself until the state is final."""
    checked_user(user_id)
    checked_event(event_id)
    found = await service.event_status(session.tenant_id, user_id, event_id.lower())
    context = {
        "user_id": user_id,
        "event_id": event_id.lower(),
        "found": found,
        "duplicate": duplicate,
        "final": found is not None and found.state in FINAL_STATES,
    }
    return render(request, "session_event.html", context, session=session)
