"""The durable-consumer wrapper every service subscribes through, and its ack policy: explicit acks,
bounded redelivery on one retry schedule (runtime/provisioning.py), and a dead letter (never a drop)
for a message that can never be processed or runs out of deliveries."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from faststream import AckPolicy
from faststream.nats import JStream, NatsBroker, NatsMessage, PullSub
from nats.errors import Error as NatsError
from opentelemetry import trace
from pydantic import BaseModel, ValidationError

from services.common.domain.sensitive import sensitive
from services.common.runtime.dead_letters import DeadLetterWriter, describe_error
from services.common.runtime.instruments import HANDLER_SECONDS, REDELIVERIES
from services.common.runtime.provisioning import ConsumerSpec, consumer_config
from services.common.runtime.pull_backoff import pause_fetching_while_reconnecting
from services.common.runtime.settings import NatsSettings

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
