"""Supervision of the embedded servers: a nats-server or redis-server that dies is noticed and
restarted on the same port and data, with bounded backoff. A server that keeps dying is left down
(the recall API's /readyz then says so) rather than restarted in a tight loop."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)


class SupervisedServer(Protocol):
    def exit_code(self) -> int | None: ...

    def stop(self, timeout_s: float = 10.0) -> None: ...

    async def start_async(self, timeout_s: float = 20.0) -> None: ...


@dataclass(frozen=True)
class RestartPolicy:
    """Delays before each restart attempt of one outage, and how many restarts a server gets per
    window before it is given up on."""

    delays_s: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0)
    max_restarts: int = 5
    window_s: float = 600.0
    poll_interval_s: float = 0.25


@dataclass
class ServerSupervisor:
    servers: Sequence[tuple[str, SupervisedServer]]
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    restarts: dict[str, int] = field(default_factory=dict)
    given_up: set[str] = field(default_factory=set)
    _recent: dict[str, deque[float]] = field(default_factory=dict)

    async def run(self) -> None:
        """Until cancelled (cancel it before stopping the servers, or it restarts them)."""
        while True:
            for name, server in self.servers:
                if name in self.given_up:
                    continue
                code = server.exit_code()
                if code is not None:
                    await self._recover(name, server, code)
            await asyncio.sleep(self.policy.poll_interval_s)

    async def _recover(self, name: str, server: SupervisedServer, code: int) -> None:
        log.error("%s exited unexpectedly (code %s); restarting it", name, code)
        server.stop()  # reaps the child and its process group
        recent = self._recent.setdefault(name, deque())
        now = time.monotonic()
        while recent and now - recent[0] > self.policy.window_s:
            recent.popleft()
        if len(recent) >= self.policy.max_restarts:
            self._give_up(name, f"it died {len(recent) + 1} times within {self.policy.window_s:g} s")
            return
        for attempt, delay in enumerate(self.policy.delays_s, start=1):
            await asyncio.sleep(delay)
            try:
                await server.start_async()
            except Exception as exc:  # every start failure is one failed attempt, whatever its type
                log.error("restarting %s failed (attempt %s/%s): %s", name, attempt, len(self.policy.delays_s), exc)
                continue
            recent.append(time.monotonic())
            self.restarts[name] = self.restarts.get(name, 0) + 1
            log.warning("%s restarted (restart %s)", name, self.restarts[name])
            return
        self._give_up(name, f"{len(self.policy.delays_s)} restart attempts failed")

    def _give_up(self, name: str, why: str) -> None:
        self.given_up.add(name)
        log.critical("%s is left down: %s; the stack reports not ready until it is restarted", name, why)
