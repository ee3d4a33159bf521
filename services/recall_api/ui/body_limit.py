"""The memory browser's forms are small: a POST under /ui declaring a body larger than the limit (or
not declaring its length, which browsers always do for forms) is refused before it is parsed (its
bytes are read and dropped, within bounds, so a client still uploading reads the refusal). The
`/v1` guard does the same for the API; it does not cover /ui, whose requests carry no Bearer key."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from services.recall_api.http.guard import discard_refused_body, error_body

# The largest form (an L0 preview: 32k characters of message and 64k of recent turns, up to three
# UTF-8 bytes each once percent-encoded as up to nine) with room to spare.
UI_MAX_BODY_BYTES = 1_000_000


class UiBodyLimit:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int = UI_MAX_BODY_BYTES) -> None:
        self._app = app
        self._max = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if scope["type"] != "http" or scope.get("method") != "POST" or not path.startswith("/ui/"):
            await self._app(scope, receive, send)
            return
        declared = next((v.decode("latin-1") for k, v in scope["headers"] if k.lower() == b"content-length"), None)
        length = int(declared) if declared is not None and declared.strip().isdigit() else None
        if length is not None and length <= self._max:
            await self._app(scope, receive, send)
            return
        await discard_refused_body(scope, receive)
        if length is None:
            await _refuse(send, 411, "a form post must declare its length")
        else:
            await _refuse(send, 413, f"request body is larger than {self._max} bytes")


async def _refuse(send: Send, status_code: int, detail: str) -> None:
    body = error_body(status_code, detail)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
