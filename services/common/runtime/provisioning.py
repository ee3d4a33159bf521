"""Streams and durable consumers: their JetStream configuration, created or updated idempotently
(`provision`), with one retry schedule for every consumer (`consumer_config`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import BadRequestError

from contracts import Subjects
from services.common.runtime.settings import NatsSettings


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """One durable pull consumer: a service's view of a stream."""

    durable: str
    stream: str
    filter_subjects: tuple[str, ...]
    description: str


def stream_configs(settings: NatsSettings) -> list[js_api.StreamConfig]:
    subjects = Subjects(settings.subject_root)
    day = 24 * 3600.0
    common: dict[str, Any] = {
        "storage": js_api.StorageType.FILE,
        "num_replicas": settings.replicas,
        "duplicate_window": settings.duplicate_window_s,
        "retention": js_api.RetentionPolicy.LIMITS,
        "discard": js_api.DiscardPolicy.OLD,
        "allow_direct": True,
    }
    return [
        js_api.StreamConfig(
            name=subjects.session_stream,
            description="Raw SessionCompleted events: the raw archive of every session.",
            subjects=[subjects.all_session_completed()],
            max_age=settings.session_max_age_days * day,
            **common,
        ),
        js_api.StreamConfig(
            name=subjects.derived_stream,
            description="Events derived by the consolidation services.",
            subjects=subjects.derived_wildcards(),
            max_age=settings.session_max_age_days * day,
            **common,
        ),
        js_api.StreamConfig(
            name=subjects.dead_letter_stream,
            description="Dead-letter records: messages that were poison or ran out of deliveries.",
            subjects=[subjects.all_dead_letters()],
            max_age=settings.session_max_age_days * day,
            **common,
        ),
        js_api.StreamConfig(
            name=subjects.advisory_stream,
            description="JetStream's MAX_DELIVERIES advisories about the services' consumers (runtime/exhausted.py).",
            subjects=subjects.all_max_deliveries_advisories(),
            max_age=settings.session_max_age_days * day,
            **common,
        ),
    ]


def retry_window_s(settings: NatsSettings) -> float:
    """How long a message whose handler keeps raising is retried before it is dead-lettered: the sum
    of the nak delays of its `max_deliver - 1` redeliveries (the last delay repeats). A failure that
    lasts longer (a store outage) ends in the dead-letter stream; `tiermem dlq replay` brings it back."""
    delays = list(settings.retry_delays_s) or [1.0]
    return sum(delays[min(attempt, len(delays) - 1)] for attempt in range(settings.max_deliver - 1))


def consumer_config(spec: ConsumerSpec, settings: NatsSettings) -> js_api.ConsumerConfig:
    """No consumer `backoff`, on purpose. With a backoff, nats-server schedules a delayed nak at
    `now - ack_wait + delay` but checks it against `backoff[deliveries - 1]`, so every nak after the
    first came `backoff[n] - ack_wait` late (1/5/15/60 s delays were observed as 0, 2, 184 s). The
    one schedule is: a handler that raises is redelivered after `retry_delays_s[n]` (its nak delay);
    a worker that crashed or hung is redelivered after `ack_wait_s` (long handlers report progress);
    after `max_deliver` deliveries the message is dead-lettered either way."""
    return js_api.ConsumerConfig(
        durable_name=spec.durable,
        description=spec.description,
        deliver_policy=js_api.DeliverPolicy.ALL,
        ack_policy=js_api.AckPolicy.EXPLICIT,
        ack_wait=settings.ack_wait_s,
        max_deliver=settings.max_deliver,
        filter_subjects=list(spec.filter_subjects),
        max_ack_pending=settings.max_ack_pending,
        replay_policy=js_api.ReplayPolicy.INSTANT,
    )


def exhausted_watch_durable(spec: ConsumerSpec) -> str:
    """The durable consumer, on the advisory stream, through which the processes running `spec` read
    its MAX_DELIVERIES advisories (runtime/exhausted.py); its replicas share it."""
    return f"{spec.durable}-exhausted"


def exhausted_watch_config(spec: ConsumerSpec) -> js_api.ConsumerConfig:
    """Every advisory of `spec`'s consumer, from the first one kept; delivered until acked (writing the
    dead-letter record is idempotent, so a retry never makes a second one)."""
    return js_api.ConsumerConfig(
        durable_name=exhausted_watch_durable(spec),
        description=f"MAX_DELIVERIES advisories of {spec.durable}, dead-lettered by its processes",
        deliver_policy=js_api.DeliverPolicy.ALL,
        ack_policy=js_api.AckPolicy.EXPLICIT,
        ack_wait=30.0,
        max_deliver=-1,
        filter_subject=Subjects.max_deliveries_advisory(spec.stream, spec.durable),
        replay_policy=js_api.ReplayPolicy.INSTANT,
    )


async def provision(js: JetStreamContext, settings: NatsSettings, consumers: Sequence[ConsumerSpec] = ()) -> None:
    """Create or update every stream, the given durable consumers and, for each, the consumer of its
    advisories (`exhausted_watch_config`). Idempotent."""
    subjects = Subjects(settings.subject_root)
    for stream_config in stream_configs(settings):
        try:
            await js.add_stream(config=stream_config)
        except BadRequestError as exc:
            if "already in use" not in (exc.description or ""):
                raise
            await js.update_stream(config=stream_config)
    for spec in consumers:
        # The advisories' consumer first: an advisory of the new consumer is never announced before it.
        await _add_or_update_consumer(js, subjects.advisory_stream, exhausted_watch_config(spec))
        await _add_or_update_consumer(js, spec.stream, consumer_config(spec, settings))


async def _add_or_update_consumer(js: JetStreamContext, stream: str, config: js_api.ConsumerConfig) -> None:
    try:
        await js.add_consumer(stream, config=config)
    except BadRequestError as exc:
        # An existing durable with other settings: update the mutable fields in place.
        if "already exists" not in (exc.description or "") and exc.err_code != 10148:
            raise
        await js.add_consumer(stream, config=config)
