"""Waiting until the pipeline has consumed everything (for the demo, eval and tests): every
durable consumer has nothing pending and nothing unacknowledged, twice in a row."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import ServiceUnavailableError

from contracts import Subjects
from services.common.runtime.broker import short_lived_nats
from services.common.runtime.service import ServiceDefinition
from services.common.runtime.settings import TierMemSettings


async def backlog(settings: TierMemSettings, definitions: Sequence[ServiceDefinition[Any]]) -> dict[str, int]:
    """Pending plus unacknowledged messages per durable consumer."""
    subjects = Subjects(settings.nats.subject_root)
    async with short_lived_nats(settings.nats, "tiermem-backlog") as client:
        js = client.jetstream()
        result: dict[str, int] = {}
        for definition in definitions:
            for spec in definition.consumers(subjects):
                try:
                    info = await js.consumer_info(spec.stream, spec.durable)
                except (NatsTimeoutError, NoRespondersError, ServiceUnavailableError):
                    # No answer now (e.g. a cluster electing a new leader): not known to be idle.
                    result[spec.durable] = 1
                    continue
                result[spec.durable] = int(info.num_pending or 0) + int(info.num_ack_pending or 0)
        return result


async def wait_until_idle(
    settings: TierMemSettings,
    definitions: Sequence[ServiceDefinition[Any]],
    *,
    timeout_s: float = 300.0,
    interval_s: float = 0.1,
) -> None:
    # A service publishes its output before it acks its input, so two consecutive all-idle passes
    # mean no message is in flight between stages.
    deadline = time.monotonic() + timeout_s
    idle_passes = 0
    last: dict[str, int] = {}
    while time.monotonic() < deadline:
        last = await backlog(settings, definitions)
        idle_passes = idle_passes + 1 if not any(last.values()) else 0
        if idle_passes >= 2:
            return
        await asyncio.sleep(interval_s)
    raise TimeoutError(f"the pipeline did not become idle within {timeout_s} s; backlog: {last}")
