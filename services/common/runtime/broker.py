"""Connecting to NATS and the one broker factory every service uses.

The rest of the broker's work has a module each: streams and consumers (provisioning.py), publishing
(publishing.py), dead letters (dead_letters.py) and the durable consumer with its ack policy
(durable_consumer.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType

import nats
from faststream.nats import NatsBroker
from nats.aio.client import Client as NatsClient
from nats.errors import ConnectionClosedError, ConnectionReconnectingError, NoServersError

from services.common.runtime.settings import NatsSettings, TierMemSettings
from services.common.runtime.telemetry import install_tracing, nats_tracing_middleware

log = logging.getLogger(__name__)


class BrokerUnavailable(ConnectionError):
    """No NATS server answered within the bounded number of connection attempts."""


class BrokerConnectTimeout(BrokerUnavailable, TimeoutError):
    """No NATS server answered within a process's first-connect timeout (still a TimeoutError for
    callers that bound the wait themselves)."""


BOUNDED_CONNECT_ATTEMPTS = 2
"""Connection attempts (each up to `connect_timeout_s`, 2 s apart) of a short-lived client such as a
CLI command: it fails with a clear error instead of waiting forever for a stack that is not there."""

NO_PUBLISH_BUFFER = 0
"""nats-py's `pending_size` for every connection. Its default buffers publishes while it
reconnects and sends them once reconnected: a publish the caller was told had failed (an API 503
"could not publish") was then carried out later anyway. With no buffer, a publish while
disconnected fails at once (OutboundBufferLimitError) and nothing is replayed behind the caller's back."""


async def _quiet_error(exc: Exception) -> None:
    log.debug("nats client error: %s", exc)


async def _one_line_error(exc: Exception) -> None:
    # nats-py's default logs a full traceback per failed reconnect attempt: hundreds per outage.
    log.warning("nats connection: %s: %s", type(exc).__name__, exc)


async def connect_nats(settings: NatsSettings, name: str, *, bounded: bool = False) -> NatsClient:
    """A NATS connection that never buffers publishes while disconnected. Long-lived processes
    reconnect forever (`bounded=False`; their first connect is bounded by the caller); a short-lived
    client (`bounded=True`) gives up after BOUNDED_CONNECT_ATTEMPTS with BrokerUnavailable."""
    token = settings.token.get_secret_value() if settings.token else None
    servers = [url.strip() for url in settings.url.split(",")]
    try:
        return await nats.connect(
            servers=servers,
            token=token,
            name=name,
            connect_timeout=max(1, int(settings.connect_timeout_s)),
            max_reconnect_attempts=BOUNDED_CONNECT_ATTEMPTS if bounded else -1,
            pending_size=NO_PUBLISH_BUFFER,
            error_cb=_quiet_error if bounded else _one_line_error,
        )
    except NoServersError as exc:
        raise BrokerUnavailable(unreachable_message(settings)) from exc


@asynccontextmanager
async def short_lived_nats(settings: NatsSettings, name: str) -> AsyncIterator[NatsClient]:
    """A bounded connection (`connect_nats(bounded=True)`) for one CLI command or check, closed on the
    way out by `close_nats`."""
    client = await connect_nats(settings, name, bounded=True)
    try:
        yield client
    finally:
        await close_nats(client)


async def close_nats(client: NatsClient) -> None:
    """Close a connection whose server may be gone. nats-py's close then cancels its own reconnect
    task, which may be waiting on the socket's close waiter; asyncio shares that future and does not
    shield it, so the close's own wait on it raises CancelledError although nothing cancelled this
    task. Escaping a caller's `finally`, that error would replace the broker loss being reported with a
    traceback, so it goes no further; a cancellation of this task is still raised."""
    try:
        await client.close()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        log.debug("nats close: CancelledError while closing, not this task's cancellation: ignored")


def unreachable_message(settings: NatsSettings) -> str:
    return (
        f"cannot reach NATS at {settings.url} after {BOUNDED_CONNECT_ATTEMPTS + 1} attempts: "
        "is the stack running (`tiermem up`), or are TIERMEM_NATS__URL / --data-dir right?"
    )


async def connect_broker(broker: NatsBroker, settings: NatsSettings) -> None:
    """Connect a broker built with `bounded=True`, turning "no server answered" into BrokerUnavailable."""
    try:
        await broker.connect()
    except NoServersError as exc:
        raise BrokerUnavailable(unreachable_message(settings)) from exc


class TierMemBroker(NatsBroker):
    """FastStream's NatsBroker, whose stop also works while NATS is away. Its stop drains the
    connection, and nats-py refuses to drain one that is reconnecting (or closed): a SIGTERM during a
    broker outage made the stop raise, and what runs after it (the root's release, closing the stores)
    never ran; the process exited 1 with a traceback. Such a connection is closed instead: nothing is
    lost, since what was fetched and not acked is redelivered by JetStream."""

    async def stop(
        self,
        exc_type: type[BaseException] | None = None,
        exc_val: BaseException | None = None,
        exc_tb: TracebackType | None = None,
    ) -> None:
        try:
            await super().stop(exc_type, exc_val, exc_tb)
        except (ConnectionReconnectingError, ConnectionClosedError) as exc:
            log.warning("nats connection not drained at stop (%s): closed instead", type(exc).__name__)
            connection, self._connection = self._connection, None
            if connection is not None and not connection.is_closed:
                await close_nats(connection)
            self.config.disconnect()


def build_broker(settings: TierMemSettings, service_name: str, *, bounded: bool = False) -> TierMemBroker:
    """The one broker factory: explicit acks are set per subscriber (see `durable_subscriber`),
    trace context travels in message headers, and shutdown drains in-flight handlers. Publishes are
    never buffered while disconnected (NO_PUBLISH_BUFFER); `bounded` as in `connect_nats`."""
    nats_settings = settings.nats
    tracer_provider = install_tracing(settings.telemetry, service_name)
    return TierMemBroker(
        servers=[url.strip() for url in nats_settings.url.split(",")],
        token=nats_settings.token.get_secret_value() if nats_settings.token else None,
        name=f"tiermem-{service_name}",
        connect_timeout=int(nats_settings.connect_timeout_s),
        middlewares=[nats_tracing_middleware(settings.telemetry, tracer_provider)],
        graceful_timeout=30.0,
        max_reconnect_attempts=BOUNDED_CONNECT_ATTEMPTS if bounded else -1,
        pending_size=NO_PUBLISH_BUFFER,
        error_cb=_quiet_error if bounded else _one_line_error,
        # Per-message access logs at DEBUG: at INFO they flood the console of `tiermem up`.
        log_level=logging.DEBUG,
        # Through tiermem's logging (level, text or JSON, the content filter), not FastStream's own
        # stdout handler, which printed a line per subscriber task at every shutdown in its own format.
        logger=logging.getLogger(f"{__name__}.faststream"),  # not under "faststream": it has its own handler
    )
