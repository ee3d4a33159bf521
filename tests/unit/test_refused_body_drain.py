"""How much of a refused request body is read (and dropped) before the refusal: all of it within
the bounds, nothing when the client waits for `100-continue` or declares more than the bound."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import Message

from services.recall_api.http import guard as http_guard
from services.recall_api.http.guard import REFUSED_BODY_DRAIN_BYTES, discard_refused_body


class Upload:
    """An ASGI `receive` handing out a body in chunks and counting what was asked for."""

    def __init__(self, chunks: int, chunk_bytes: int = 65536) -> None:
        self.left = chunks
        self.chunk = b"x" * chunk_bytes
        self.calls = 0

    async def __call__(self) -> Message:
        self.calls += 1
        self.left -= 1
        return {"type": "http.request", "body": self.chunk, "more_body": self.left > 0}


def scope(**headers: str) -> dict[str, Any]:
    return {"type": "http", "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]}


async def test_a_body_within_the_bound_is_read_to_its_end() -> None:
    upload = Upload(chunks=30)
    await discard_refused_body(scope(content_length=str(30 * 65536)), upload)
    assert upload.calls == 30 and upload.left == 0


async def test_nothing_is_read_when_the_client_waits_for_a_go_ahead_or_declares_too_much() -> None:
    for headers in (
        {"content_length": "2000000", "expect": "100-continue"},
        {"content_length": str(REFUSED_BODY_DRAIN_BYTES + 1)},
        {"content_length": "12abc"},
    ):
        upload = Upload(chunks=30)
        await discard_refused_body(scope(**headers), upload)
        assert upload.calls == 0, headers


async def test_an_endless_body_without_a_length_stops_at_the_bound() -> None:
    upload = Upload(chunks=10**9)
    await discard_refused_body(scope(), upload)
    assert upload.calls == REFUSED_BODY_DRAIN_BYTES // 65536 + 1


async def test_a_stalled_upload_stops_at_the_time_bound(monkeypatch: Any) -> None:
    monkeypatch.setattr(http_guard, "REFUSED_BODY_DRAIN_SECONDS", 0.05)

    async def stalled() -> Message:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    await asyncio.wait_for(discard_refused_body(scope(content_length="100"), stalled), timeout=5)
