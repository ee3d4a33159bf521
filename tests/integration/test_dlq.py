"""The one retry schedule and `tiermem dlq`, against a real nats-server: every nak delay is honoured
(no consumer backoff shifting them), a handler failing on every delivery ends as exactly one dead
letter, and `tiermem dlq replay` after the fix processes it exactly once, for that consumer only."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter

import pytest
from faststream.nats import NatsBroker
from nats.aio.client import Client as NatsClient
from nats.js import api as js_api

from contracts import SessionCompleted, Subjects
from services.common.runtime.broker import build_broker
from services.common.runtime.dead_letters import DeadLetterWriter
from services.common.runtime.durable_consumer import Delivery, Handler, durable_subscriber
from services.common.runtime.provisioning import provision, retry_window_s
from services.common.runtime.publishing import EventPublisher
from services.common.runtime.settings import NatsSettings, TierMemSettings
from tests.support.events import session_consumer, session_event, stream_messages, wait_for
from tests.support.message_ids import message_id

pytestmark = pytest.mark.integration


async def _subscribe(
    nats_settings: NatsSettings, nats_client: NatsClient, handlers: dict[str, Handler[SessionCompleted]]
) -> tuple[NatsBroker, EventPublisher, Subjects]:
    subjects = Subjects(nats_settings.subject_root)
    specs = [session_consumer(subjects, durable) for durable in handlers]
    await provision(nats_client.jetstream(), nats_settings, specs)
    broker = build_broker(TierMemSettings(nats=nats_settings), "test")
    publisher = EventPublisher(broker)
    for spec in specs:
        durable_subscriber(
            broker, nats_settings, spec, SessionCompleted, handlers[spec.durable], DeadLetterWriter(publisher, subjects)
        )
    await broker.start()
    return broker, publisher, subjects


async def test_every_nak_delay_is_honoured_even_over_an_old_backoff_consumer(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    settings = nats_settings.model_copy(update={"retry_delays_s": [1.0, 2.0, 3.0], "max_deliver": 4})
    subjects = Subjects(settings.subject_root)
    js = nats_client.jetstream()
    await provision(js, settings)
    # The consumer as earlier versions provisioned it: a backoff that shifted every nak after the first.
    await js.add_consumer(
        subjects.session_stream,
        config=js_api.ConsumerConfig(
            durable_name="retrying",
            ack_policy=js_api.AckPolicy.EXPLICIT,
            ack_wait=5,
            max_deliver=4,
            backoff=[5, 10, 15],
            filter_subjects=[subjects.all_session_completed()],
        ),
    )
    delivered_at: dict[int, float] = {}

    async def always_fails(event: SessionCompleted, delivery: Delivery) -> None:
        delivered_at[delivery.deliveries] = time.monotonic()
        raise RuntimeError("graph is down")

    broker, publisher, _ = await _subscribe(settings, nats_client, {"retrying": always_fails})
    try:
        event = session_event()
        await publisher.publish(
            event, subjects.session_completed("acme", "alice"), message_id(event), subjects.session_stream
        )
        await wait_for(lambda: stream_messages(js, subjects.dead_letter_stream), what="the dead letter", timeout_s=30)
        info = await js.consumer_info(subjects.session_stream, "retrying")
    finally:
        await broker.stop()
    assert not info.config.backoff, "provisioning removes the backoff that shifted the nak delays"
    assert sorted(delivered_at) == [1, 2, 3, 4]
    gaps = [delivered_at[n + 1] - delivered_at[n] for n in (1, 2, 3)]
    for gap, delay in zip(gaps, [1.0, 2.0, 3.0], strict=True):
        assert delay - 0.05 <= gap < delay + 1.5, f"redelivery gaps {gaps} do not follow the delays [1, 2, 3]"
    assert retry_window_s(settings) == 6.0


async def _run_cli(settings: NatsSettings, *args: str) -> str:
    assert settings.token is not None
    env = {
        **os.environ,
        "TIERMEM_DATA_DIR": "/nonexistent-tiermem-data-dir",
        "TIERMEM_NATS__URL": settings.url,
        "TIERMEM_NATS__TOKEN": settings.token.get_secret_value(),
        "TIERMEM_NATS__SUBJECT_ROOT": settings.subject_root,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli", "dlq", *args, env=env, stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, stdout.decode()
    return stdout.decode()


async def test_dead_letter_is_replayed_once_after_the_cause_is_fixed(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    broken = True
    processed: Counter[str] = Counter()
    other_consumer: Counter[str] = Counter()

    async def flaky_store(event: SessionCompleted, delivery: Delivery) -> None:
        if broken:
            raise ConnectionError("graph is down")
        processed[str(event.event_id)] += 1

    async def healthy(event: SessionCompleted, delivery: Delivery) -> None:
        other_consumer[str(event.event_id)] += 1

    broker, publisher, subjects = await _subscribe(
        nats_settings, nats_client, {"flaky": flaky_store, "healthy": healthy}
    )
    js = nats_client.jetstream()
    try:
        event = session_event()
        await publisher.publish(
            event, subjects.session_completed("acme", "alice"), message_id(event), subjects.session_stream
        )
        await wait_for(lambda: stream_messages(js, subjects.dead_letter_stream), what="the dead letter")

        async def _settled() -> bool:
            info = await js.consumer_info(subjects.session_stream, "flaky")
            return bool(info.num_ack_pending == 0 and info.num_pending == 0)

        await wait_for(_settled, what="the failing consumer to give up")
        assert len(await stream_messages(js, subjects.dead_letter_stream)) == 1, "exactly one dead letter"
        listed = [json.loads(line) for line in (await _run_cli(nats_settings, "list", "--json")).splitlines()]
        assert [(r["consumer"], r["kind"]) for r in listed] == [("flaky", "exhausted")]
        assert "graph is down" in listed[0]["reason"]

        broken = False
        filtered = await _run_cli(nats_settings, "replay", "--consumer", "healthy")
        assert "replayed 0" in filtered
        replayed = await _run_cli(nats_settings, "replay", "--reason", "GRAPH IS DOWN")
        assert "replayed 1," in replayed

        async def _processed() -> bool:
            return processed[str(event.event_id)] >= 1

        await wait_for(_processed, what="the replayed message to be processed")
        again = await _run_cli(nats_settings, "replay")
        assert "replayed 0, already replayed before 0" in again
        await wait_for(_settled, what="the replayed message to be acked")
        healthy_info = await js.consumer_info(subjects.session_stream, "healthy")
        assert healthy_info.num_ack_pending == 0 and healthy_info.num_pending == 0
    finally:
        await broker.stop()
    assert processed == Counter({str(event.event_id): 1}), "processed once"
    assert other_consumer == Counter({str(event.event_id): 1}), "the other consumer did not process the replay"
    assert await stream_messages(js, subjects.dead_letter_stream) == [], "the replayed letter is removed"
