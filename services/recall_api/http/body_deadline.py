"""A bounded time to send a request body. uvicorn waits for a body as long as the client keeps the
connection open: a request declaring 100,000 bytes and sending 30 would hold its connection (and
the handler waiting on it) for as long as the client likes. Every HTTP request here gets
`timeout_s`, counted from when the request arrived, to deliver its whole body; past it the request
is answered 408 in the error shape and the connection is closed (the rest of the body is not read).

The deadline covers the body only: once it is complete, `receive` is what streaming answers (MCP)
use to notice a client going away, and that wait is never cut short."""

from __future__ import annotations

import asyncio

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.recall_api.http.guard import error_body


class BodyReadTimeout(StarletteHTTPException):
    """Raised from `receive` at the deadline. An HTTPException, so FastAPI's body reading lets it
    through to the error handler (a 408) instead of calling it a parse error."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            408, f"the request body did not arrive within {timeout_s:g} s", headers={"connection": "close"}
        )


class BodyReadDeadline:
    def __init__(self, app: ASGIApp, *, timeout_s: float) -> None:
        self._app = app
        self._timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        body_complete = False
        started = False

        async def timed_receive() -> Message:
            nonlocal body_complete
            if body_complete:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyReadTimeout(self._timeout_s) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_complete = True
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self._app(scope, timed_receive, tracking_send)
        except BodyReadTimeout as exc:
            if started:
                raise
            await _send_timeout(send, str(exc.detail))


async def _send_timeout(send: Send, detail: str) -> None:
    body = error_body(408, detail)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 408, "headers": headers})
    await send({"type": "http.response.body", "body": body})
