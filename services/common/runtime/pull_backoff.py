"""A pull consumer that pauses while the NATS client reconnects, instead of spinning.

FastStream's pull loop fetches by publishing a request. While the client reconnects, that publish
fails at once with OutboundBufferLimitError (we never buffer publishes: NO_PUBLISH_BUFFER in
broker.py), the loop's task ends with it, and FastStream's task supervisor starts a new one at once.
Measured with one consumer and a 6 s NATS outage: about 20,000 new tasks, each logging a line, for
the whole outage. Every consumer of a process does this in the one event loop that must also
reconnect, answer /readyz and (in `tiermem up`) restart the dead server: under CPU load the stack
then took far longer to recover. With this, a fetch that meets a reconnecting client waits one short
pause and tries again; nothing else about the loop changes (it still ends when the subscriber stops)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from nats.errors import ConnectionReconnectingError, OutboundBufferLimitError

RECONNECTING_PAUSE_S = 0.25
"""How long a consumer waits before fetching again while the client reconnects: short next to an
outage (reconnect attempts are 2 s apart), long next to the microseconds of a failed fetch."""

_RECONNECTING = (OutboundBufferLimitError, ConnectionReconnectingError)


def pause_fetching_while_reconnecting(subscriber: object, pause_s: float = RECONNECTING_PAUSE_S) -> None:
    """Wrap the pull loop of a FastStream pull subscriber (`_consume_pull`, looked up on the
    instance when the subscription starts). A subscriber without one (push) is left as it is."""
    consume_pull: Callable[..., Coroutine[Any, Any, None]] | None = getattr(subscriber, "_consume_pull", None)
    if consume_pull is None:
        return

    async def consume_pull_pausing(*args: Any, **kwargs: Any) -> None:
        while True:
            try:
                await consume_pull(*args, **kwargs)
                return
            except _RECONNECTING:
                await asyncio.sleep(pause_s)

    subscriber._consume_pull = consume_pull_pausing  # type: ignore[attr-defined]
