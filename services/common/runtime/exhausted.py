"""Messages that ran out of deliveries without any handler answering (a worker that crashed or hung on
every delivery): dead-lettered from JetStream's MAX_DELIVERIES advisories, read from a stream so that
none is missed.

Why a stream and not a subscription: the advisory is announced on core NATS, to whoever listens at
that moment. nats-server 2.15 announces it when it next tries to deliver the message after the last
delivery's ack wait, which any pull request still waiting makes it do, even one of a process that was
killed meanwhile: the server drops such a request only after it has taken the next message, advisory
and all (consumer.go `loopAndGatherMsgs`, then the interest check of `nextWaiting`; measured: a pull
request left by a closed connection made 2.15.1 announce it with no process pulling). The server's
current source announces it at the ack wait's expiry instead (`checkPending`). A worker that crashes
on a message usually takes its process down, so either way the advisory often comes while no process
of that consumer listens (a pod restarting, `tiermem serve` started again). A plain subscription
then missed it, and the message was neither processed nor dead-lettered: lost without a trace. The
serve-alone test caught it: the killed worker's pull request (5 s) outlived its delivery's ack wait
(2 s there).

So the advisory stream (`Subjects.advisory_stream`, broker.stream_configs) keeps every advisory about
the services' consumers, and each consumer has a durable consumer of its advisories on that stream
(broker.exhausted_watch_config, created by `provision` before the consumer itself). A process reads
the advisories of exactly the consumers it runs (it knows nothing of the others' payloads), writes the
dead-letter record, then acks. The record's id is the one the handler itself would use
(DeadLetterWriter), so an advisory delivered twice (an ack lost, two replicas) never makes a second
record. An advisory whose message is gone (erased, aged out) or unreadable is logged and acked: there
is nothing left to dead-letter."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from contracts import Subjects
from services.common.runtime.dead_letters import DeadLetterWriter
from services.common.runtime.provisioning import ConsumerSpec, exhausted_watch_durable

log = logging.getLogger(__name__)

FETCH_BATCH = 16


class ExhaustedWatcher:
    """Reads the advisories of `consumers` (module doc) until stopped."""

    def __init__(
        self,
        nc: NatsClient,
        subjects: Subjects,
        consumers: Sequence[ConsumerSpec],
        dead_letters: DeadLetterWriter,
        *,
        fetch_timeout_s: float = 5.0,
        retry_delay_s: float = 5.0,
    ) -> None:
        self._js = nc.jetstream()
        self._subjects = subjects
        self._consumers = list(consumers)
        self._dead_letters = dead_letters
        self._fetch_timeout_s = fetch_timeout_s
        self._retry_delay_s = retry_delay_s
        self._subscriptions: list[JetStreamContext.PullSubscription] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Bind to each consumer's advisories (provisioned already) and read them in the background."""
        for spec in self._consumers:
            subscription = await self._js.pull_subscribe_bind(
                durable=exhausted_watch_durable(spec), stream=self._subjects.advisory_stream
            )
            self._subscriptions.append(subscription)
            self._tasks.append(asyncio.create_task(self._read(subscription), name=f"exhausted-{spec.durable}"))

    async def stop(self) -> None:
        """Stop reading; an advisory being handled is acked or redelivered later, never lost."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    async def _read(self, subscription: JetStreamContext.PullSubscription) -> None:
        while True:
            try:
                messages = await subscription.fetch(FETCH_BATCH, timeout=self._fetch_timeout_s)
            except TimeoutError:  # nats.errors.TimeoutError, or the plain one nats-py's fetch raises at times
                continue
            except Exception as exc:  # disconnected, or the server restarting: the advisories wait in the stream
                log.warning(
                    "cannot read max-deliveries advisories (retry in %ss): %s: %s",
                    self._retry_delay_s,
                    type(exc).__name__,
                    exc,
                )
                await asyncio.sleep(self._retry_delay_s)
                continue
            for message in messages:
                await self._settle(message)

    async def _settle(self, message: Msg) -> None:
        try:
            await self.dead_letter(message.data)
        except Exception as exc:  # the record could not be written (broker or stream down): again later
            log.warning("cannot dead-letter from advisory yet (retry in %ss): %s", self._retry_delay_s, exc)
            with contextlib.suppress(Exception):
                await message.nak(delay=self._retry_delay_s)
            return
        with contextlib.suppress(Exception):  # a lost ack redelivers the advisory: the same record id
            await message.ack()

    async def dead_letter(self, data: bytes) -> None:
        """Write the dead-letter record of one advisory; raises only when it may work later."""
        try:
            advisory = json.loads(data)
            stream = str(advisory["stream"])
            consumer = str(advisory["consumer"])
            sequence = int(advisory["stream_seq"])
            deliveries = int(advisory.get("deliveries", 0))
            stored = await self._js.get_msg(stream, sequence)
        except (KeyError, ValueError, TypeError, NotFoundError) as exc:
            log.error("cannot dead-letter from advisory %r: %s", data[:500], exc)
            return
        await self._dead_letters.write(
            subject=stored.subject or "",
            stream=stream,
            sequence=sequence,
            consumer=consumer,
            deliveries=deliveries,
            reason=f"no acknowledgement after {deliveries} deliveries (worker crashed or timed out)",
            kind="exhausted",
            payload=stored.data or b"",
        )
        log.warning("dead-lettered %s seq=%s consumer=%s: no acknowledgement", stream, sequence, consumer)
