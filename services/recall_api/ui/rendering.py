"""What every memory-browser page shares: the templates, the browser session of the request, the
security headers, and one way to answer an error (a page, never a stack trace or a 500)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from services.recall_api.auth import valid_id
from services.recall_api.errors import StoreUnavailable
from services.recall_api.http.throttle import FailureThrottle
from services.recall_api.service import RecallService
from services.recall_api.ui.session import COOKIE_NAME, BrowserSession, SessionSigner, csrf_matches

log = logging.getLogger(__name__)

templates = Jinja2Templates(directory=Path(__file__).parent / "templates")


def _when(value: object) -> str:
    """An ISO timestamp as `YYYY-MM-DD HH:MM` (the offset left out), or a dash."""
    return value[:16].replace("T", " ") if isinstance(value, str) and value else "—"


templates.env.filters["when"] = _when

# Scripts and styles come from this server only; framing is refused; no page leaks its address.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


class LoginRequired(Exception):
    """The request has no valid browser session (a page redirects to the login form)."""


class UiError(Exception):
    """A refusal answered with an error page (the status and one line for people)."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


def service_of(request: Request) -> RecallService:
    service: RecallService = request.app.state.recall_service
    return service


def signer_of(request: Request) -> SessionSigner:
    signer: SessionSigner = request.app.state.ui_signer
    return signer


def throttle_of(request: Request) -> FailureThrottle:
    throttle: FailureThrottle = request.app.state.auth_throttle
    return throttle


# The dependencies are `async def` for the reason given in http/routes.py: FastAPI runs a plain `def`
# dependency in a worker thread, a hop on every page.
async def current_session(request: Request) -> BrowserSession:
    session = session_if_any(request)
    if session is None:
        raise LoginRequired
    return session


def session_if_any(request: Request) -> BrowserSession | None:
    """The request's signed-in browser session, None without a valid cookie."""
    return signer_of(request).check(request.cookies.get(COOKIE_NAME), service_of(request).settings.api_keys)


async def _service_dependency(request: Request) -> RecallService:
    return service_of(request)


Session = Annotated[BrowserSession, Depends(current_session)]
Service = Annotated[RecallService, Depends(_service_dependency)]


def checked_user(user_id: str) -> str:
    if not valid_id(user_id):
        raise UiError(status.HTTP_404_NOT_FOUND, "no such user")
    return user_id


def require_csrf(session: BrowserSession, presented: str | None) -> None:
    if not csrf_matches(session, presented):
        raise UiError(status.HTTP_403_FORBIDDEN, "the form is stale or came from another site: reload the page")


def render(
    request: Request, template: str, context: dict[str, Any], *, status_code: int = 200, session: BrowserSession | None
) -> HTMLResponse:
    operator = session is not None and is_operator(request, session)
    return templates.TemplateResponse(
        request,
        template,
        {"session": session, "operator": operator, **context},
        status_code=status_code,
        headers=SECURITY_HEADERS,
    )


def is_operator(request: Request, session: BrowserSession) -> bool:
    """Whether the session's tenant may see whole-stack figures (`operator_tenants`)."""
    service: RecallService | None = getattr(request.app.state, "recall_service", None)
    return service is not None and session.tenant_id in service.settings.operator_tenants


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=status.HTTP_303_SEE_OTHER, headers=SECURITY_HEADERS)


def error_page(request: Request, status_code: int, message: str, session: BrowserSession | None = None) -> Response:
    return render(request, "error.html", {"message": message}, status_code=status_code, session=session)


def outage_page(request: Request, reason: str) -> Response:
    """The page for a store or broker outage under /ui (http/unavailable.py decides it is one), with the
    signed-in session's chrome when there is one."""
    return unavailable_page(request, StoreUnavailable(reason), session_if_any(request))


def unavailable_page(request: Request, exc: StoreUnavailable, session: BrowserSession | None = None) -> Response:
    log.error("memory browser: store unavailable: %s", exc)
    message = "A store cannot be reached now; retry shortly."
    return error_page(request, status.HTTP_503_SERVICE_UNAVAILABLE, message, session)
