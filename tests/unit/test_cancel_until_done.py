"""Stopping the recall API's idle closer ends it even when one cancellation is swallowed (Python 3.11's
`asyncio.wait_for`, inside nats-py's key-value watch, can lose a cancel that arrives as its inner future
completes)."""

from __future__ import annotations

import asyncio

from services.recall_api.service import cancel_until_done


def test_a_task_that_swallows_one_cancellation_is_still_ended() -> None:
    async def scenario() -> float:
        swallowed = 0

        async def closer() -> None:
            nonlocal swallowed
            while True:
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    if swallowed:
                        raise
                    swallowed += 1  # what a lost cancellation looks like to the loop: it goes on sleeping

        task = asyncio.create_task(closer())
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(cancel_until_done(task), timeout=10)
        assert task.cancelled()
        assert swallowed == 1
        return loop.time() - started

    assert asyncio.run(scenario()) < 5
