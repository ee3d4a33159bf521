"""Closing a NATS connection whose server went away: nats-py cancels its own reconnect task while that
task waits on the socket's close waiter, and then waits on the same (now cancelled) future itself. The
CancelledError that comes out is not a cancellation of the caller, so `close_nats` must not let it hide
the broker loss being reported; a real cancellation of the caller must still get through.

The stand-in client reproduces that sequence on a real asyncio socket (the race needs a server dying at a
chosen moment, which a test cannot time)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from services.common.runtime.broker import close_nats


class _ClosesLikeNatsAfterServerLoss:
    """nats-py's `_attempt_reconnect` then `_close`, on a real TCP connection."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._reconnect: asyncio.Task[None] | None = None

    def start_reconnect(self) -> None:
        async def reconnect() -> None:
            self._writer.close()
            await self._writer.wait_closed()

        self._reconnect = asyncio.create_task(reconnect())

    async def close(self) -> None:
        assert self._reconnect is not None
        self._reconnect.cancel()
        await asyncio.sleep(0)
        self._writer.close()
        await self._writer.wait_closed()


class _CloseThatHangs:
    def __init__(self) -> None:
        self.closing = asyncio.Event()

    async def close(self) -> None:
        self.closing.set()
        await asyncio.Event().wait()


async def _connected_writer() -> tuple[asyncio.StreamWriter, asyncio.Server]:
    server = await asyncio.start_server(lambda _reader, _writer: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return writer, server


async def test_the_close_waiter_cancelled_by_the_clients_own_reconnect_task_is_not_raised() -> None:
    writer, server = await _connected_writer()
    try:
        client = _ClosesLikeNatsAfterServerLoss(writer)
        client.start_reconnect()
        await asyncio.sleep(0)  # the reconnect task now waits on the close waiter
        with pytest.raises(asyncio.CancelledError):  # the sequence does raise, outside close_nats
            await client.close()

        writer, _ = await _connected_writer()
        client = _ClosesLikeNatsAfterServerLoss(writer)
        client.start_reconnect()
        await asyncio.sleep(0)
        await close_nats(cast(Any, client))  # returns: nothing cancelled this task
    finally:
        server.close()


async def test_a_cancellation_of_the_closing_task_still_gets_through() -> None:
    client = _CloseThatHangs()
    closing = asyncio.create_task(close_nats(cast(Any, client)))
    await client.closing.wait()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert closing.cancelled()
