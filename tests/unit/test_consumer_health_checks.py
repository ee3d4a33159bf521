"""The consumer health checks' own rules (the HTTP port against real servers is proven in
tests/integration/test_consumer_health.py): a broker that never connected is not live, a hung
dependency is reported within the timeout and is never attempted twice at once, failures are named."""

from __future__ import annotations

import asyncio

from services.common.runtime.broker import build_broker
from services.common.runtime.health import ConsumerHealth
from services.common.runtime.resources import Resources
from services.common.runtime.settings import TierMemSettings


async def test_hung_and_failing_dependencies_are_reported_without_piling_up_attempts() -> None:
    settings = TierMemSettings()
    health = ConsumerHealth(build_broker(settings, "health-test"), Resources(settings), {}, timeout_s=0.2)
    assert health.live() == "the broker has no connection"
    starts = 0
    release = asyncio.Event()

    async def hung() -> None:
        nonlocal starts
        starts += 1
        await release.wait()

    async def failing() -> None:
        raise ConnectionRefusedError("graph down")

    health._checks = {"hung": hung, "failing": failing}
    for _ in range(3):
        results = await health.readiness()
        assert results == {"hung": "no answer within 0.2s", "failing": "ConnectionRefusedError: graph down"}
    assert starts == 1, "a probe waits on the attempt already running"
    release.set()
    await asyncio.sleep(0)
    assert (await health.readiness())["hung"] == "ok"
    await health.close()
