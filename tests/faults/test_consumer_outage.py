"""A pull consumer while nats-server is away: it waits instead of spinning, and consumes again once
the server is back. Before the fix, FastStream's pull loop failed at once on every fetch while the
client reconnected (no publish buffer) and its task supervisor restarted it at once: ~3,000 new
tasks a second per consumer, starving the event loop that must reconnect (in `tiermem up` also
restart the server and answer /readyz)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Generator
from typing import Any

import pytest
from faststream.nats import JStream, NatsBroker, PullSub

from services.cli.servers.nats_server import NatsServer
from services.common.runtime.broker import NO_PUBLISH_BUFFER
from services.common.runtime.pull_backoff import pause_fetching_while_reconnecting
from tests.support.events import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OUTAGE_S = 3.0
MOST_TASKS_DURING_OUTAGE = 200
"""Generous for a loop that pauses 0.25 s per failed fetch (a dozen tasks); the spin made ~10,000."""


async def test_a_pull_consumer_waits_out_an_outage_and_consumes_again(own_nats: NatsServer) -> None:
    loop = asyncio.get_running_loop()
    created = 0

    def counting_factory(
        loop: asyncio.AbstractEventLoop, coro: Generator[Any, None, Any] | Coroutine[Any, Any, Any], **kwargs: Any
    ) -> asyncio.Task[Any]:
        nonlocal created
        created += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    received: list[bytes] = []
    broker = NatsBroker(
        own_nats.url,
        token=own_nats.token,
        max_reconnect_attempts=-1,
        reconnect_time_wait=1,
        pending_size=NO_PUBLISH_BUFFER,
        log_level=logging.DEBUG,
    )
    subscriber = broker.subscriber(
        "outage.events",
        stream=JStream("OUTAGE", subjects=["outage.>"]),
        durable="outage-consumer",
        pull_sub=PullSub(batch_size=10, timeout=0.2),
    )
    pause_fetching_while_reconnecting(subscriber)

    @subscriber
    async def _handle(body: bytes) -> None:
        received.append(body)

    await broker.start()
    try:
        await broker.publish(b"before", "outage.events", stream="OUTAGE")
        await wait_for(lambda: _async_value(b"before" in received), what="the message sent before the outage")

        own_nats.stop()
        loop.set_task_factory(counting_factory)
        try:
            await asyncio.sleep(OUTAGE_S)  # the outage itself: its length is the point, nothing to wait for
        finally:
            loop.set_task_factory(None)
        assert created < MOST_TASKS_DURING_OUTAGE, f"{created} tasks in a {OUTAGE_S:g} s outage: the consumer spins"

        await own_nats.start_async()
        await wait_for(lambda: _async_value(broker.connection.is_connected), what="the broker to reconnect")
        await broker.publish(b"after", "outage.events", stream="OUTAGE")
        await wait_for(lambda: _async_value(b"after" in received), what="the message sent after the outage")
    finally:
        await broker.stop()


async def _async_value(value: bool) -> bool:
    return value
