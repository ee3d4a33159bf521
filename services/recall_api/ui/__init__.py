"""The memory browser: server-rendered pages under `/ui` to see, search, correct and erase what
the system remembers, served by the recall API itself with the same API keys (see ui/session.py)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from services.recall_api.ui.actions import actions_router
from services.recall_api.ui.add_session import session_router
from services.recall_api.ui.body_limit import UiBodyLimit
from services.recall_api.ui.pages import pages_router
from services.recall_api.ui.pipeline import pipeline_router
from services.recall_api.ui.rendering import LoginRequired, UiError, error_page, redirect
from services.recall_api.ui.session import MAX_LIVE_SESSIONS, SessionSigner

STATIC_DIR = Path(__file__).parent / "static"


async def _login_required(request: Request, exc: Exception) -> Response:
    """A page asks for the login form; a form post or a poll is refused (the session has ended)."""
    if request.method == "GET" and not request.url.path.endswith(".json"):
        return redirect("/ui/login")
    return error_page(request, 401, "Your session has ended: log in again.")


async def _ui_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, UiError)
    return error_page(request, exc.status_code, exc.message)


def install_ui(app: FastAPI, *, max_sessions: int = MAX_LIVE_SESSIONS) -> None:
    """Mount the memory browser on the recall API's app (once, in `create_app`, after
    `app.state.auth_throttle` is set: the login form spends the same budget of wrong keys)."""
    app.state.ui_signer = SessionSigner(max_live_sessions=max_sessions)
    app.include_router(pages_router)
    app.include_router(actions_router)
    app.include_router(session_router)
    app.include_router(pipeline_router)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    app.add_exception_handler(LoginRequired, _login_required)
    app.add_exception_handler(UiError, _ui_error)
    app.add_middleware(UiBodyLimit)
