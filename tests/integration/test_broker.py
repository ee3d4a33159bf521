"""The broker plumbing against a real nats-server: redelivery with backoff, dead letters,
de-duplication, poison payloads, idempotent provisioning."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from faststream.nats import NatsBroker
from nats.aio.client import Client as NatsClient

from contracts import SessionCompleted, Subjects
from services.common.runtime.broker import build_broker
from services.common.runtime.dead_letters import DeadLetterWriter
from services.common.runtime.durable_consumer import Delivery, Handler, PoisonMessage, durable_subscriber
from services.common.runtime.provisioning import ConsumerSpec, provision
from services.common.runtime.publishing import EventPublisher
from services.common.runtime.settings import NatsSettings, TierMemSettings
from tests.support.events import decoded, session_event, stream_messages, wait_for
from tests.support.message_ids import message_id

pytestmark = pytest.mark.integration


def _spec(subjects: Subjects) -> ConsumerSpec:
    return ConsumerSpec(
        durable="test-consumer",
        stream=subjects.session_stream,
        filter_subjects=(subjects.all_session_completed(),),
        description="test consumer",
    )


async def _start(
    nats_settings: NatsSettings, nats_client: NatsClient, handler: Handler[SessionCompleted]
) -> tuple[NatsBroker, EventPublisher, Subjects]:
    subjects = Subjects(nats_settings.subject_root)
    spec = _spec(subjects)
    await provision(nats_client.jetstream(), nats_settings, [spec])
    broker = build_broker(TierMemSettings(nats=nats_settings), "test")
    publisher = EventPublisher(broker)
    durable_subscriber(
        broker,
        nats_settings,
        spec,
        SessionCompleted,
        handler,
        DeadLetterWriter(publisher, subjects),
    )
    await broker.start()
    return broker, publisher, subjects


async def test_failing_handler_is_redelivered_then_dead_lettered_once(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    attempts: Counter[int] = Counter()

    async def always_fails(event: SessionCompleted, delivery: Delivery) -> None:
        attempts[delivery.deliveries] += 1
        raise RuntimeError("store is down")

    broker, publisher, subjects = await _start(nats_settings, nats_client, always_fails)
    try:
        event = session_event()
        await publisher.publish(
            event, subjects.session_completed("acme", "alice"), message_id(event), subjects.session_stream
        )
        js = nats_client.jetstream()
        dead = await wait_for(
            lambda: stream_messages(js, subjects.dead_letter_stream), what="a dead-letter record", timeout_s=20
        )
        # Give a wrongly configured consumer the chance to deliver again before asserting "exactly".
        await asyncio.sleep(0.5)
        dead = await stream_messages(js, subjects.dead_letter_stream)
    finally:
        await broker.stop()
    assert sorted(attempts) == [1, 2, 3], "delivered once per attempt up to max_deliver"
    assert len(dead) == 1
    record = decoded(dead)[0]
    assert record["kind"] == "exhausted"
    assert "store is down" in record["reason"]
    assert record["original_subject"] == subjects.session_completed("acme", "alice")
    assert record["consumer"] == "test-consumer"
    assert record["stream_sequence"] == 1
    assert (record["tenant_id"], record["user_id"]) == ("acme", "alice")
    assert json.loads(record["payload"])["event_id"] == str(event.event_id)


async def test_transient_failure_recovers_without_dead_letter(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    handled: list[int] = []

    async def fails_once(event: SessionCompleted, delivery: Delivery) -> None:
        if delivery.deliveries == 1:
            raise ConnectionError("transient")
        handled.append(delivery.deliveries)

    broker, publisher, subjects = await _start(nats_settings, nats_client, fails_once)
    try:
        event = session_event()
        await publisher.publish(
            event, subjects.session_completed("acme", "alice"), message_id(event), subjects.session_stream
        )

        async def _handled() -> bool:
            return bool(handled)

        await wait_for(_handled, what="the second delivery to succeed")
        consumer = await nats_client.jetstream().consumer_info(subjects.session_stream, "test-consumer")
        dead = await stream_messages(nats_client.jetstream(), subjects.dead_letter_stream)
    finally:
        await broker.stop()
    assert handled == [2]
    assert dead == []
    assert consumer.num_ack_pending == 0


async def test_poison_payload_is_dead_lettered_without_retry(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    calls: list[object] = []

    async def handler(event: SessionCompleted, delivery: Delivery) -> None:
        calls.append(event)

    broker, _publisher, subjects = await _start(nats_settings, nats_client, handler)
    js = nats_client.jetstream()
    try:
        subject = subjects.session_completed("acme", "mallory")
        await js.publish(subject, b"\xff\xfe not json", headers={"Nats-Msg-Id": "poison-1"})
        await js.publish(subject, b'{"event_type": "session.completed"}', headers={"Nats-Msg-Id": "poison-2"})
        dead = await wait_for(
            lambda: _at_least(js, subjects.dead_letter_stream, 2), what="two dead-letter records", timeout_s=20
        )
    finally:
        await broker.stop()
    assert calls == []
    records = decoded(dead)
    assert {r["kind"] for r in records} == {"poison"}
    assert {r["deliveries"] for r in records} == {1}
    assert any("event_id" in r["reason"] and "Field required" in r["reason"] for r in records)
    assert all(r["user_id"] == "mallory" for r in records)


async def test_handler_poison_error_dead_letters_immediately(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    async def rejects(event: SessionCompleted, delivery: Delivery) -> None:
        raise PoisonMessage("session is over the size limit")

    broker, publisher, subjects = await _start(nats_settings, nats_client, rejects)
    try:
        event = session_event()
        await publisher.publish(
            event, subjects.session_completed("acme", "alice"), message_id(event), subjects.session_stream
        )
        dead = await wait_for(
            lambda: stream_messages(nats_client.jetstream(), subjects.dead_letter_stream), what="dead letter"
        )
    finally:
        await broker.stop()
    record = decoded(dead)[0]
    assert (record["kind"], record["deliveries"], record["reason"]) == ("poison", 1, "session is over the size limit")


async def test_same_event_published_twice_is_stored_once(nats_settings: NatsSettings, nats_client: NatsClient) -> None:
    subjects = Subjects(nats_settings.subject_root)
    js = nats_client.jetstream()
    await provision(js, nats_settings)
    broker = build_broker(TierMemSettings(nats=nats_settings), "test")
    await broker.connect()
    try:
        publisher = EventPublisher(broker)
        event = session_event()
        subject = subjects.session_completed("acme", "alice")
        first = await publisher.publish(event, subject, message_id(event), subjects.session_stream)
        second = await publisher.publish(event, subject, message_id(event), subjects.session_stream)
    finally:
        await broker.stop()
    assert (first.duplicate, second.duplicate) == (False, True)
    (stored,) = await stream_messages(js, subjects.session_stream)
    headers = stored.headers or {}
    assert headers.get("Nats-Msg-Id") == message_id(event) == f"session:acme:alice:{event.event_id}"
    assert "traceparent" in headers, "OpenTelemetry trace context travels in the message headers"


async def test_provisioning_is_idempotent(nats_settings: NatsSettings, nats_client: NatsClient) -> None:
    subjects = Subjects(nats_settings.subject_root)
    js = nats_client.jetstream()
    spec = _spec(subjects)
    await provision(js, nats_settings, [spec])
    await provision(js, nats_settings, [spec])
    changed = nats_settings.model_copy(update={"max_deliver": 4})
    await provision(js, changed, [spec])
    info = await js.consumer_info(subjects.session_stream, "test-consumer")
    stream = await js.stream_info(subjects.session_stream)
    assert info.config.max_deliver == 4
    assert str(getattr(info.config.ack_policy, "value", info.config.ack_policy)) == "explicit"
    assert str(getattr(stream.config.storage, "value", stream.config.storage)) == "file"
    assert stream.config.duplicate_window == pytest.approx(120)


async def _at_least(js: object, stream: str, n: int) -> list[object] | None:
    found = await stream_messages(js, stream)  # type: ignore[arg-type]
    return found if len(found) >= n else None
