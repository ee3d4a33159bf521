"""Messages that ran out of deliveries without a handler answering, against a real nats-server: the
MAX_DELIVERIES advisory is kept in the advisory stream, so one announced while no process listened is
dead-lettered once a process of that consumer starts (runtime/exhausted.py)."""

from __future__ import annotations

import json

import nats.errors
import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from contracts import Subjects
from services.common.runtime.broker import build_broker
from services.common.runtime.dead_letters import DeadLetterWriter
from services.common.runtime.exhausted import ExhaustedWatcher
from services.common.runtime.provisioning import ConsumerSpec, provision
from services.common.runtime.publishing import EventPublisher
from services.common.runtime.settings import NatsSettings, TierMemSettings
from tests.support.events import decoded, session_consumer, session_event, stream_messages, wait_for

pytestmark = pytest.mark.integration


async def _exhaust_without_answering(js: JetStreamContext, subjects: Subjects, spec: ConsumerSpec) -> None:
    """What workers that crash on every delivery do: take each delivery and never answer. Then one
    more pull, by a process with no reader of the advisories: nats-server (2.15) announces the
    advisory when it next tries to deliver the message, which a pull after the ack wait makes it do
    (a killed process's pull request still waiting does too). The announcement reaches no one."""
    subscription = await js.pull_subscribe_bind(durable=spec.durable, stream=subjects.session_stream)
    try:
        for delivery in (1, 2):  # max_deliver below; the second comes after the first's ack wait
            (message,) = await subscription.fetch(1, timeout=10)
            assert message.metadata.num_delivered == delivery
        with pytest.raises(nats.errors.TimeoutError):
            await subscription.fetch(1, timeout=3)  # past the second's ack wait: nothing is delivered
    finally:
        await subscription.unsubscribe()


async def test_an_advisory_announced_while_no_process_listened_is_dead_lettered_later(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    settings = nats_settings.model_copy(update={"ack_wait_s": 1.0, "max_deliver": 2})
    subjects = Subjects(settings.subject_root)
    crashing, other = session_consumer(subjects, "crashing"), session_consumer(subjects, "other")
    js = nats_client.jetstream()
    await provision(js, settings, [crashing])
    event = session_event()
    subject = subjects.session_completed(event.tenant_id, event.user_id)
    await js.publish(subject, event.model_dump_json().encode(), stream=subjects.session_stream)
    await _exhaust_without_answering(js, subjects, crashing)
    # The last delivery's ack wait expires with nothing listening: the advisory is kept all the same.
    (kept,) = await wait_for(
        lambda: stream_messages(js, subjects.advisory_stream), timeout_s=20, what="the advisory in its stream"
    )
    assert kept.subject == Subjects.max_deliveries_advisory(subjects.session_stream, "crashing")
    assert await stream_messages(js, subjects.dead_letter_stream) == []

    broker = build_broker(TierMemSettings(nats=settings), "test")
    await broker.connect()
    dead_letters = DeadLetterWriter(EventPublisher(broker), subjects)
    # Two replicas of the crashing consumer's service, and a process that runs another consumer only.
    await provision(js, settings, [other])
    watchers = [
        ExhaustedWatcher(nats_client, subjects, [crashing], dead_letters, fetch_timeout_s=0.5),
        ExhaustedWatcher(nats_client, subjects, [crashing], dead_letters, fetch_timeout_s=0.5),
        ExhaustedWatcher(nats_client, subjects, [other], dead_letters, fetch_timeout_s=0.5),
    ]
    try:
        for watcher in watchers:
            await watcher.start()
        (record,) = decoded(
            await wait_for(
                lambda: stream_messages(js, subjects.dead_letter_stream), timeout_s=20, what="the dead-letter record"
            )
        )
        # The advisory is acked: nothing redelivers it to either replica, nothing writes it twice.
        crashing_watch = await js.consumer_info(subjects.advisory_stream, "crashing-exhausted")
        await wait_for(
            lambda: _all_acked(js, subjects.advisory_stream, "crashing-exhausted"), timeout_s=20, what="the ack"
        )
        assert crashing_watch.config.filter_subject == kept.subject
    finally:
        for watcher in watchers:
            await watcher.stop()
        await broker.stop()
    assert len(await stream_messages(js, subjects.dead_letter_stream)) == 1
    assert record["kind"] == "exhausted"
    assert record["consumer"] == "crashing"
    assert record["deliveries"] == 2
    assert record["original_subject"] == subject
    assert json.loads(record["payload"])["event_id"] == str(event.event_id)
    other_watch = await js.consumer_info(subjects.advisory_stream, "other-exhausted")
    assert other_watch.num_pending == 0 and other_watch.delivered.stream_seq == 0, "another consumer's advisory"


async def _all_acked(js: JetStreamContext, stream: str, durable: str) -> bool:
    info = await js.consumer_info(stream, durable)
    return bool(info.num_ack_pending == 0 and info.num_pending == 0 and info.ack_floor.stream_seq >= 1)


async def test_an_advisory_whose_record_cannot_be_written_is_retried_not_dropped(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    """The dead-letter stream refuses the record at first (here: its subjects do not match yet, as
    when it is being restored): the advisory is nakked and handled on a later delivery."""
    settings = nats_settings.model_copy(update={"ack_wait_s": 1.0, "max_deliver": 2})
    subjects = Subjects(settings.subject_root)
    crashing = session_consumer(subjects, "crashing")
    js = nats_client.jetstream()
    await provision(js, settings, [crashing])
    dlq_info = await js.stream_info(subjects.dead_letter_stream)
    await js.update_stream(config=dlq_info.config.evolve(subjects=[f"{settings.subject_root}.nothing-here"]))
    event = session_event()
    await js.publish(
        subjects.session_completed(event.tenant_id, event.user_id),
        event.model_dump_json().encode(),
        stream=subjects.session_stream,
    )
    await _exhaust_without_answering(js, subjects, crashing)
    await wait_for(lambda: stream_messages(js, subjects.advisory_stream), timeout_s=20, what="the advisory")
    broker = build_broker(TierMemSettings(nats=settings), "test")
    await broker.connect()
    watcher = ExhaustedWatcher(
        nats_client,
        subjects,
        [crashing],
        DeadLetterWriter(EventPublisher(broker), subjects),
        fetch_timeout_s=0.5,
        retry_delay_s=0.2,
    )
    try:
        await watcher.start()
        await wait_for(
            lambda: _delivered_more_than_once(js, subjects.advisory_stream, "crashing-exhausted"),
            timeout_s=20,
            what="the advisory to be delivered again after the failed write",
        )
        assert await stream_messages(js, subjects.dead_letter_stream) == []
        await js.update_stream(config=dlq_info.config)  # the stream takes records again
        (record,) = decoded(
            await wait_for(
                lambda: stream_messages(js, subjects.dead_letter_stream), timeout_s=20, what="the dead-letter record"
            )
        )
    finally:
        await watcher.stop()
        await broker.stop()
    assert record["consumer"] == "crashing"


async def _delivered_more_than_once(js: JetStreamContext, stream: str, durable: str) -> bool:
    info = await js.consumer_info(stream, durable)
    return bool(info.num_redelivered >= 1)
