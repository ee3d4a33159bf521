"""The pruner's background task: answer control requests, and run a prune pass at every interval
boundary (see `seconds_until_next_pass`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from nats.aio.client import Client as NatsClient

from services.common.runtime.resources import ServiceContext
from services.pruner.control import serve_control
from services.pruner.logic import Clock, seconds_until_next_pass, utc_now
from services.pruner.prune import prune_once
from services.pruner.settings import PrunerSettings

log = logging.getLogger(__name__)


def make_schedule(clock: Clock = utc_now) -> Callable[[ServiceContext[PrunerSettings]], Coroutine[Any, Any, None]]:
    """The background task on `clock`. A failed pass is logged and the schedule goes on."""

    async def run(ctx: ServiceContext[PrunerSettings]) -> None:
        control: NatsClient | None = None
        if ctx.settings.control_enabled:
            try:
                control = await serve_control(ctx, clock)
            except Exception:
                # The schedule matters more than the CLI shortcut: go on without answering requests.
                log.exception("cannot serve control requests; `tiermem prune --now` / `audit` will open the stores")
        interval_s = ctx.settings.prune_interval_hours * 3600
        earliest = time.time() + ctx.settings.prune_initial_delay_s
        try:
            while True:
                await asyncio.sleep(seconds_until_next_pass(time.time(), interval_s, earliest))
                try:
                    await prune_once(ctx, clock())
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("scheduled prune pass failed; next in %.1f h", ctx.settings.prune_interval_hours)
                    ctx.count("prune_failures")
                earliest = time.time()
        finally:
            if control is not None:
                with contextlib.suppress(Exception):
                    await control.drain()

    return run


run_schedule = make_schedule()
"""The scheduled pruning (and control requests) of a running pruner, on the system clock."""
