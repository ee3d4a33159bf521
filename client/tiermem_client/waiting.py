"""`wait(event_id, user_id=...)`: follow an accepted event until nothing more will happen to it.

The sync and async clients share this bookkeeping and differ only in how they sleep. The status is
read with `GET /v1/events/{event_id}?user_id=...`, the owner-scoped form every server version answers,
whether or not its `status_url` already names the user.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tiermem_client import calls
from tiermem_client.calls import Call
from tiermem_client.errors import DeadLettered, WaitTimeout
from tiermem_client.models import EventStatus

FIRST_PAUSE_S = 0.2
MAX_PAUSE_S = 2.0


@dataclass
class Watch:
    """One `wait`: what to ask, when to give up, and how long to pause between looks."""

    event_id: str
    user_id: str
    timeout: float
    deadline: float = field(init=False)
    pause: float = field(init=False, default=FIRST_PAUSE_S)

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive seconds, not {self.timeout!r}")
        self.deadline = time.monotonic() + self.timeout

    @property
    def call(self) -> Call[EventStatus]:
        return calls.event_status(self.user_id, self.event_id)

    def finished(self, status: EventStatus) -> bool:
        """True when the event is done; raises `DeadLettered` when it failed for good."""
        if status.state == "dead_lettered":
            raise DeadLettered(status)
        return status.finished

    def next_pause(self, status: EventStatus) -> float:
        """Seconds to sleep before the next look (growing, capped); `WaitTimeout` once time is up."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(status, self.timeout)
        pause, self.pause = min(self.pause, left), min(self.pause * 1.5, MAX_PAUSE_S)
        return pause
