"""The one broker factory, stream and consumer provisioning, publishing and the durable-consumer
wrapper (explicit acks, bounded redelivery on one retry schedule, dead letters) used by every service."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Generic, TypeVar

import nats
from faststream import AckPolicy
from faststream.nats import JStream, NatsBroker, NatsMessage, PullSub
from nats.aio.client import Client as NatsClient
from nats.errors import ConnectionClosedError, ConnectionReconnectingError, NoServersError
from nats.errors import Error as NatsError
from opentelemetry import trace
from pydantic import BaseModel, ValidationError

from contracts import DeadLetterRecord, Subjects
from services.common.domain.ids import deterministic_uuid
from services.common.domain.sensitive import sensitive
from services.common.runtime.instruments import DEAD_LETTERS, HANDLER_SECONDS, REDELIVERIES
from services.common.runtime.provisioning import ConsumerSpec, consumer_config
from services.common.runtime.pull_backoff import pause_fetching_while_reconnecting
from services.common.runtime.settings import NatsSettings, TierMemSettings
from services.common.runtime.telemetry import install_tracing, nats_tracing_middleware

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

ModelT = TypeVar("ModelT", bound=BaseModel)


class PoisonMessage(Exception):
    """The message can never be processed (invalid payload, over the limits): dead-letter it now."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """What a handler may know and do about the message it is handling."""

    subject: str
    stream_sequence: int
    deliveries: int
    headers: dict[str, str]
    in_progress: Callable[[], Awaitable[None]]
    # When the message reached the stream (its stored timestamp: the same on every redelivery and
    # replay of the stream; a message published again gets its own).
    stored_at: datetime


Handler = Callable[[ModelT, Delivery], Awaitable[None]]

REPLAY_FOR_HEADER = "Tiermem-Replay-For"
"""Set by `tiermem dlq replay` to the durable consumer a replayed message is meant for: it is
republished on its original subject, and every other consumer of that subject acks it unhandled
(they processed the original already)."""


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


# ---------------------------------------------------------------------------------------------
# Broker and publishing
# ---------------------------------------------------------------------------------------------
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
                await connection.close()
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


@dataclass(frozen=True, slots=True)
class PublishResult:
    stream: str
    sequence: int
    duplicate: bool


class EventPublisher:
    """Publishes events to JetStream, always with `Nats-Msg-Id` so a republish is dropped by the
    stream's duplicate window."""

    def __init__(self, broker: NatsBroker) -> None:
        self._broker = broker

    async def publish(self, event: BaseModel, subject: str, msg_id: str, stream: str) -> PublishResult:
        ack = await self._broker.publish(
            event.model_dump_json().encode("utf-8"),
            subject,
            headers={"Nats-Msg-Id": msg_id, "content-type": "application/json"},
            stream=stream,
            timeout=10.0,
        )
        return PublishResult(stream=ack.stream, sequence=ack.seq, duplicate=bool(ack.duplicate))


class DeadLetterWriter:
    """Writes exactly one DeadLetterRecord per (stream, sequence, consumer)."""

    def __init__(self, publisher: EventPublisher, subjects: Subjects) -> None:
        self._publisher = publisher
        self._subjects = subjects

    async def write(
        self,
        *,
        subject: str,
        stream: str,
        sequence: int,
        consumer: str,
        deliveries: int,
        reason: str,
        kind: str,
        payload: bytes,
    ) -> None:
        tenant_id, user_id = self._subjects.tokens_from(subject)
        DEAD_LETTERS.labels(consumer=consumer, kind=kind).inc()
        record_id = deterministic_uuid("dead-letter", stream, str(sequence), consumer)
        record = DeadLetterRecord(
            event_id=record_id,
            original_subject=subject,
            original_stream=stream,
            stream_sequence=sequence,
            consumer=consumer,
            deliveries=deliveries,
            reason=reason[:4000],
            kind="poison" if kind == "poison" else "exhausted",
            tenant_id=tenant_id,
            user_id=user_id,
            payload=payload.decode("utf-8", errors="replace"),
            failed_at=datetime.now(UTC),
        )
        await self._publisher.publish(
            record,
            self._subjects.dead_letter(consumer, tenant_id, user_id),
            msg_id=f"dlq-{record_id}",
            stream=self._subjects.dead_letter_stream,
        )


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '<root>'}: {error['msg']}" for error in exc.errors()
        )
        return f"invalid payload: {problems}"
    return f"{type(exc).__name__}: {exc}"


async def _raw_body(msg: NatsMessage) -> bytes:
    # Validation is ours (so broken payloads are dead-lettered with a reason), not FastStream's.
    return msg.body


@dataclass(frozen=True)
class _ReceivedMessage:
    """Where one delivery came from: what a dead-letter record and the logs need."""

    msg: NatsMessage
    subject: str
    stream_sequence: int
    deliveries: int
    data: bytes


class _ExplicitAckConsumer(Generic[ModelT]):
    """The ack policy of `durable_subscriber`, one delivery at a time."""

    def __init__(
        self,
        settings: NatsSettings,
        spec: ConsumerSpec,
        model: type[ModelT],
        handler: Handler[ModelT],
        dead_letters: DeadLetterWriter,
    ) -> None:
        self._settings = settings
        self._spec = spec
        self._model = model
        self._handler = handler
        self._dead_letters = dead_letters
        self._retry_delays = list(settings.retry_delays_s) or [1.0]

    async def consume(self, msg: NatsMessage) -> None:
        raw = msg.raw_message
        metadata = raw.metadata
        received = _ReceivedMessage(
            msg=msg,
            subject=raw.subject,
            stream_sequence=int(metadata.sequence.stream),
            deliveries=int(metadata.num_delivered),
            data=raw.data,
        )
        try:
            await self._consume(received)
        except (NatsError, ConnectionError, TimeoutError) as exc:
            # The handler's own failures are settled in `_run_handler`; what gets here is the settling
            # itself (ack, nak, dead letter) failing, mostly because NATS went away: publishes are not
            # buffered (NO_PUBLISH_BUFFER). Nothing is lost: the delivery stays unacknowledged and
            # JetStream redelivers it after ack_wait. One line, not FastStream's traceback of the chain.
            log.warning(
                "%s could not settle %s seq=%s (delivery %s): %s; redelivered after ack_wait %.0fs",
                self._spec.durable,
                self._spec.stream,  # not the subject: it names the tenant and user
                received.stream_sequence,
                received.deliveries,
                describe_error(exc),  # nats-py's errors name no message content
                self._settings.ack_wait_s,
            )

    async def _consume(self, received: _ReceivedMessage) -> None:
        msg, raw = received.msg, received.msg.raw_message
        replay_for = (raw.headers or {}).get(REPLAY_FOR_HEADER)
        if replay_for is not None and replay_for != self._spec.durable:
            await msg.ack()
            return
        try:
            event = self._model.model_validate_json(raw.data)
        except ValidationError as exc:
            await self._dead_letter(received, describe_error(exc), "poison")
            return
        except ValueError as exc:  # broken JSON / UTF-8 surfaces as ValueError subclasses
            await self._dead_letter(received, f"invalid payload: {exc}", "poison")
            return
        delivery = Delivery(
            subject=received.subject,
            stream_sequence=received.stream_sequence,
            deliveries=received.deliveries,
            headers=dict(raw.headers or {}),
            in_progress=msg.in_progress,
            stored_at=raw.metadata.timestamp,
        )
        if received.deliveries > 1:
            REDELIVERIES.labels(consumer=self._spec.durable).inc()
        # FastStream's middleware opened the "process" span (its parent is the publisher's, from the
        # message headers); this one names the consumer and the outcome.
        with _tracer.start_as_current_span(f"handle {self._spec.durable}") as span:
            span.set_attributes(
                {
                    "messaging.consumer.group.name": self._spec.durable,
                    "messaging.message.delivery_count": received.deliveries,
                    "messaging.message.stream_sequence": received.stream_sequence,
                }
            )
            started = time.monotonic()
            outcome = await self._run_handler(received, event, delivery)
            span.set_attribute("tiermem.outcome", outcome)
            elapsed = time.monotonic() - started
            HANDLER_SECONDS.labels(consumer=self._spec.durable, outcome=outcome).observe(elapsed)
            # Inside the span: the line carries the trace id (JSON logs) and joins the session's trace.
            log.info(
                "%s handled stream seq=%s (delivery %s) in %.3fs: %s",
                self._spec.durable,
                received.stream_sequence,
                received.deliveries,
                elapsed,
                outcome,
            )

    async def _run_handler(self, received: _ReceivedMessage, event: ModelT, delivery: Delivery) -> str:
        """Run the handler and settle the message: "ok" (acked), "retry" (nak) or "dead_letter"."""
        try:
            await self._handler(event, delivery)
        except PoisonMessage as exc:
            await self._dead_letter(received, str(exc), "poison")
            return "dead_letter"
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return await self._on_failure(received, exc)
        await received.msg.ack()
        return "ok"

    async def _on_failure(self, received: _ReceivedMessage, exc: Exception) -> str:
        reason = describe_error(exc)
        if getattr(exc, "retryable_later", True) is False:
            # The failure already used its own retry budget (e.g. the LLM gateway's) and would
            # only repeat: retrying here too would multiply the calls and the cost.
            await self._dead_letter(received, reason, "poison")
            return "dead_letter"
        deliveries = received.deliveries
        if deliveries >= self._settings.max_deliver:
            await self._dead_letter(received, f"failed {deliveries} deliveries; last error: {reason}", "exhausted")
            return "dead_letter"
        delay = self._retry_delays[min(deliveries - 1, len(self._retry_delays) - 1)]
        log.warning(
            "handler %s failed on %s seq=%s (delivery %s/%s), retry in %.1fs: %s",
            self._spec.durable,
            self._spec.stream,  # not the subject: it names the tenant and user
            received.stream_sequence,
            deliveries,
            self._settings.max_deliver,
            delay,
            sensitive(reason),  # may quote model output (memory text)
        )
        await received.msg.nack(delay=delay)
        return "retry"

    async def _dead_letter(self, received: _ReceivedMessage, reason: str, kind: str) -> None:
        await self._dead_letters.write(
            subject=received.subject,
            stream=self._spec.stream,
            sequence=received.stream_sequence,
            consumer=self._spec.durable,
            deliveries=received.deliveries,
            reason=reason,
            kind=kind,
            payload=received.data,
        )
        await received.msg.reject()
        log.warning(
            "dead-lettered %s seq=%s consumer=%s (%s): %s",
            self._spec.stream,  # not the subject: it names the tenant and user
            received.stream_sequence,
            self._spec.durable,
            kind,
            sensitive(reason, kept_in="the dead-letter record"),  # may quote model output (memory text)
        )


def durable_subscriber(
    broker: NatsBroker,
    settings: NatsSettings,
    spec: ConsumerSpec,
    model: type[ModelT],
    handler: Handler[ModelT],
    dead_letters: DeadLetterWriter,
) -> None:
    """Subscribe `handler` on a durable pull consumer with manual, explicit acknowledgement:
    - a payload that does not validate against `model`, or a handler raising PoisonMessage, is
      dead-lettered at once and terminated (never retried, never dropped);
    - any other exception naks with the configured delay until `max_deliver`, then dead-letters
      with the reason and terminates;
    - success acks."""
    consumer = _ExplicitAckConsumer(settings, spec, model, handler, dead_letters)
    subscriber = broker.subscriber(
        spec.filter_subjects[0],
        stream=JStream(spec.stream, declare=False),
        durable=spec.durable,
        config=consumer_config(spec, settings),
        pull_sub=PullSub(batch_size=settings.fetch_batch, timeout=5.0),
        ack_policy=AckPolicy.MANUAL,
        decoder=_raw_body,
        title=f"{spec.durable}:{spec.filter_subjects[0]}",
        description=spec.description,
    )
    pause_fetching_while_reconnecting(subscriber)

    @subscriber
    async def _consume(body: bytes, msg: NatsMessage) -> None:
        del body  # the same bytes as msg.raw_message.data
        await consumer.consume(msg)
