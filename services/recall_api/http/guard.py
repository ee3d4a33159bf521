"""What every request meets before a route runs, and the one error shape every error answer has.

`RequestGuard` (ASGI middleware) refuses a /v1 or MCP request without a valid API key before its
body is parsed, and a body larger than `max_request_bytes` too (by Content-Length at once, else while
it streams in). A refused body is read and dropped only within small bounds, so that a client still
uploading reads the refusal (`discard_refused_body`): a 200 MB POST without a key costs nothing. The
error handlers answer every HTTPException and validation error with `ErrorResponse`, never echoing
the input: a field holding a lone surrogate, NaN or 30 MB of text is named, not repeated."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contracts.session_input import SessionRejected
from services.recall_api.auth import bearer_token, tenant_for_key
from services.recall_api.http.throttle import FailureThrottle, client_address
from services.recall_api.write_schemas import ErrorDetail, ErrorResponse

log = logging.getLogger(__name__)

# A refused body is still read (and dropped, never kept) within these bounds before the refusal is
# sent, as nginx's lingering close does: a connection closed while the upload is still arriving makes
# the kernel answer the rest with a reset, and the client, still sending, reads "connection reset by
# peer" instead of the 4xx and its reason. A body declared larger than this is cut off at once.
REFUSED_BODY_DRAIN_BYTES = 16 * 1024 * 1024
REFUSED_BODY_DRAIN_SECONDS = 5.0

_MAX_DETAIL_CHARS = 500
_MAX_ERRORS = 20
_LOCATION_ROOTS = frozenset({"body", "query", "path", "header", "cookie"})
_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "too_many_requests",
    503: "unavailable",
}


def error_body(status_code: int, detail: str, errors: Sequence[ErrorDetail] = (), code: str | None = None) -> bytes:
    body = ErrorResponse(
        detail=_safe_text(detail)[:_MAX_DETAIL_CHARS],
        code=code or _CODES.get(status_code, "error"),
        errors=list(errors),
    )
    return body.model_dump_json().encode("utf-8")


def error_response(
    status_code: int,
    detail: str,
    errors: Sequence[ErrorDetail] = (),
    *,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    content = json.loads(error_body(status_code, detail, errors, code))
    return JSONResponse(content, status_code=status_code, headers=dict(headers or {}))


def _safe_text(text: str) -> str:
    """The text with anything UTF-8 cannot carry (lone surrogates) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


def field_of(location: Sequence[Any]) -> str | None:
    parts = [str(part) for part in location]
    if parts and parts[0] in _LOCATION_ROOTS:
        parts = parts[1:]
    return _safe_text(".".join(parts))[:200] or None


def validation_details(errors: Sequence[Mapping[str, Any]]) -> list[ErrorDetail]:
    """Field and reason of each problem; the offending input and the context are left out."""
    return [
        ErrorDetail(field=field_of(error.get("loc", ())), reason=_safe_text(str(error.get("msg", "invalid")))[:300])
        for error in errors[:_MAX_ERRORS]
    ]


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = validation_details(exc.errors())
    summary = "; ".join(f"{d.field or '<body>'}: {d.reason}" for d in details[:3])
    return error_response(422, f"invalid request: {summary}", details)


class FieldError(StarletteHTTPException):
    """A refusal about one input field, answered with the field and the reason (422 unless given)."""

    def __init__(self, field: str | None, reason: str, status_code: int = 422) -> None:
        super().__init__(status_code, reason)
        self.field = field
        self.reason = reason


def session_refused(exc: SessionRejected) -> FieldError:
    """A session the ingest limits refuse, answered alike whether it came whole or turn by turn:
    413 when it is too large, else 422, naming the field."""
    code = status.HTTP_413_CONTENT_TOO_LARGE if exc.too_large else status.HTTP_422_UNPROCESSABLE_CONTENT
    return FieldError(exc.field or None, exc.reason, code)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else "request refused"
    errors = [ErrorDetail(field=exc.field, reason=_safe_text(exc.reason)[:300])] if isinstance(exc, FieldError) else []
    return error_response(exc.status_code, detail, errors, headers=exc.headers)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)


class _BodyTooLarge(StarletteHTTPException):
    """Raised from `receive` once a streamed body passes the limit. An HTTPException, so FastAPI's
    body reading lets it through (to the error handler: a 413) instead of calling it a parse error."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes")


class RequestGuard:
    """Auth before the body, and the body size limit before parsing, for the protected paths. A
    client over its budget of wrong keys (`throttle`) is refused (429) before its key is checked."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        api_keys: Mapping[str, str],
        max_body_bytes: int,
        protected: Sequence[str],
        throttle: FailureThrottle,
    ):
        self._app = app
        self._api_keys = api_keys
        self._max = max_body_bytes
        self._protected = tuple(protected)
        self._throttle = throttle

    def _is_protected(self, path: str) -> bool:
        return any(path == prefix or path.startswith(prefix.rstrip("/") + "/") for prefix in self._protected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._is_protected(scope.get("path", "")):
            await self._app(scope, receive, send)
            return
        authorization, declared = _auth_and_length(scope["headers"])
        presented = bearer_token(authorization)
        client = client_address(scope)
        wait_s = self._throttle.retry_after(client, presented) if presented is not None else None
        if wait_s is not None:
            await discard_refused_body(scope, receive)
            await _send_error(send, 429, "too many wrong API keys from this client", {"retry-after": str(wait_s)})
            return
        if presented is None or tenant_for_key(self._api_keys, presented) is None:
            if presented is not None:
                self._throttle.failed(client)
            await discard_refused_body(scope, receive)
            await _send_error(send, 401, "missing or invalid API key", {"www-authenticate": "Bearer"})
            return
        self._throttle.succeeded(client, presented)
        if declared is not None and (not declared.strip().isdigit() or int(declared) > self._max):
            await discard_refused_body(scope, receive)
            await _send_error(send, 413, f"request body is larger than {self._max} bytes")
            return
        await self._guarded(scope, receive, send)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self._max:
                    raise _BodyTooLarge(self._max)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self._app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if started:
                raise
            await discard_refused_body(scope, receive)
            await _send_error(send, 413, f"request body is larger than {self._max} bytes")


async def discard_refused_body(scope: Scope, receive: Receive) -> None:
    """Read what is left of a refused request's body and drop it, within the drain bounds, so the
    refusal reaches a client that is still uploading. A client that sent `Expect: 100-continue` is
    waiting for a go-ahead that a refusal never gives: there is nothing to drain."""
    declared: int | None = None
    for name, value in scope["headers"]:
        lowered = name.lower()
        if lowered == b"expect" and value.lower().startswith(b"100-continue"):
            return
        if lowered == b"content-length":
            declared = int(value) if value.strip().isdigit() else REFUSED_BODY_DRAIN_BYTES + 1
    if declared is not None and declared > REFUSED_BODY_DRAIN_BYTES:
        return
    drained = 0
    try:
        async with asyncio.timeout(REFUSED_BODY_DRAIN_SECONDS):
            while drained <= REFUSED_BODY_DRAIN_BYTES:
                message = await receive()
                if message["type"] != "http.request":
                    return
                drained += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return
    except TimeoutError:
        return


def _auth_and_length(raw_headers: Sequence[tuple[bytes, bytes]]) -> tuple[str | None, str | None]:
    """The Authorization and Content-Length values (the last of each, as a dict of all headers would
    give), without decoding the other headers: this runs on every /v1 call."""
    authorization = declared = None
    for name, value in raw_headers:
        lowered = name.lower()
        if lowered == b"authorization":
            authorization = value.decode("latin-1")
        elif lowered == b"content-length":
            declared = value.decode("latin-1")
    return authorization, declared


async def _send_error(send: Send, status_code: int, detail: str, extra: Mapping[str, str] | None = None) -> None:
    body = error_body(status_code, detail)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (extra or {}).items()]
    if status_code == 413:
        headers.append((b"connection", b"close"))  # the rest of the body is not read
    await send({"type": "http.response.start", "status": status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
