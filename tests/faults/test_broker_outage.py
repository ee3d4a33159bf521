"""nats-server down under the recall service: /readyz says so (and names no address), and a request
answered "could not publish" is not carried out later when the broker comes back."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from contracts import SessionCompleted, Subjects
from services.cli.servers.nats_server import NatsServer
from services.common.runtime.broker import build_broker, connect_nats
from services.common.runtime.dead_letters import DeadLetterWriter
from services.common.runtime.durable_consumer import Delivery, durable_subscriber
from services.common.runtime.provisioning import ConsumerSpec, provision
from services.common.runtime.publishing import EventPublisher
from services.common.runtime.resources import Resources
from services.common.runtime.settings import NatsSettings, TierMemSettings
from services.common.stores.tombstones import TombstoneStore
from services.recall_api.errors import StoreUnavailable
from services.recall_api.service import RecallService
from services.recall_api.settings import RecallApiSettings
from services.recall_api.write import erasure_requests
from tests.support.events import session_event, stream_messages, wait_for
from tests.support.message_ids import message_id

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _settings(server: NatsServer, tmp_path: Path) -> RecallApiSettings:
    return RecallApiSettings(
        data_dir=tmp_path / "data",
        nats=NatsSettings(url=server.url, token=server.token, subject_root="outage", connect_timeout_s=1),  # type: ignore[arg-type]
        readiness_timeout_s=2.0,
    )


async def test_readyz_tells_the_truth_while_nats_is_down(own_nats: NatsServer, tmp_path: Path) -> None:
    settings = _settings(own_nats, tmp_path)
    resources = Resources(settings)
    service = RecallService(settings, resources)
    try:
        assert (await service.readiness())["broker"] == "ok"
        own_nats.stop()
        checks = await service.readiness()
        assert checks["broker"] in ("unavailable", "timeout"), "flush() alone answered 'ok' while disconnected"

        async def _reported_down() -> dict[str, str] | None:
            checks = await service.readiness()
            return checks if checks["broker"] == "unavailable" else None

        checks = await wait_for(_reported_down, what="the client to notice the outage", timeout_s=30)
        assert not any(str(own_nats.port) in value or "127.0.0.1" in value for value in checks.values()), checks
        own_nats.start()

        async def _ready_again() -> bool:
            return (await service.readiness())["broker"] == "ok"

        await wait_for(_ready_again, what="the broker to be ready again", timeout_s=30, interval_s=0.2)
    finally:
        await resources.close()


async def test_a_request_refused_during_the_outage_is_not_carried_out_later(
    own_nats: NatsServer, tmp_path: Path
) -> None:
    settings = _settings(own_nats, tmp_path)
    subjects = Subjects(settings.nats.subject_root)
    client = await connect_nats(settings.nats, "outage-test")

    async def nats() -> object:
        return client

    async def tombstones() -> TombstoneStore:
        return TombstoneStore(client.jetstream(), subjects)

    try:
        await provision(client.jetstream(), settings.nats)
        own_nats.stop()

        async def _disconnected() -> bool:
            return not client.is_connected

        await wait_for(_disconnected, what="the client to notice the outage", timeout_s=30, interval_s=0.05)
        with pytest.raises(StoreUnavailable) as refused:
            await erasure_requests.request_erasure(
                nats,  # type: ignore[arg-type]
                subjects,
                "acme",
                "alice",
                tombstones=tombstones,
            )
        assert str(own_nats.port) not in str(refused.value), "the 503 body names no internal address"
        own_nats.start()

        async def _reconnected() -> bool:
            return bool(client.is_connected)

        await wait_for(_reconnected, what="the client to reconnect", timeout_s=30, interval_s=0.1)
        await client.flush(timeout=5)
        stored = await stream_messages(client.jetstream(), subjects.derived_stream)
    finally:
        await client.close()
    assert stored == [], "the refused erasure request was buffered and published after the reconnect"


async def test_a_service_stopped_while_nats_is_down_stops_cleanly(own_nats: NatsServer, tmp_path: Path) -> None:
    """SIGTERM to `tiermem serve` while its NATS is gone (a pod stopped during a broker outage). nats-py
    refuses to drain a reconnecting connection, and FastStream's broker stop drains: the stop raised, and
    what FastStream runs after it (the root's release: closing the stores) never ran."""
    from tests.integration.test_serve_alone import serve_env, start_serve

    nats = NatsSettings(url=own_nats.url, token=own_nats.token, subject_root="outage-stop")  # type: ignore[arg-type]
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        process = await start_serve("episodic-summarizer", serve_env(tmp_path, nats), stdout=log, stderr=log)
    try:
        client = await connect_nats(nats, "outage-test", bounded=True)
        js = client.jetstream()

        async def _consumer_ready() -> bool:
            try:
                await js.consumer_info(Subjects(nats.subject_root).session_stream, "episodic-summarizer")
            except Exception:
                return False
            return True

        await wait_for(_consumer_ready, what="the service to provision its consumer", timeout_s=90)
        await client.close()
        own_nats.stop()

        async def _noticed() -> bool:
            return "nats connection:" in log_path.read_text(errors="replace")

        await wait_for(_noticed, what="the service to notice the outage", timeout_s=30)
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), timeout=60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    output = log_path.read_text(errors="replace")
    assert process.returncode in (0, -signal.SIGTERM), output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "not drained at stop (ConnectionReconnectingError): closed instead" in output, output[-3000:]
    assert "shut down gracefully" in output, output[-3000:]  # FastStream logs it after its after_shutdown hooks


async def test_a_delivery_that_cannot_be_settled_during_the_outage_is_redelivered(
    own_nats: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that fails while NATS is gone: its nak cannot be sent (publishes are not buffered).
    That is one warning line, not FastStream's ERROR with the traceback of the whole chain, and the
    delivery is not lost: JetStream redelivers it after ack_wait once NATS is back."""
    nats = NatsSettings(
        url=own_nats.url,
        token=own_nats.token,  # type: ignore[arg-type]
        subject_root="outage-settle",
        ack_wait_s=2,
        retry_delays_s=[0.1],
    )
    subjects = Subjects(nats.subject_root)
    spec = ConsumerSpec(
        durable="settle-test",
        stream=subjects.session_stream,
        filter_subjects=(subjects.all_session_completed(),),
        description="test consumer",
    )
    client = await connect_nats(nats, "outage-test", bounded=True)
    await provision(client.jetstream(), nats, [spec])
    await client.close()
    entered, release = asyncio.Event(), asyncio.Event()
    deliveries: list[int] = []

    async def fails_while_nats_is_gone(event: SessionCompleted, delivery: Delivery) -> None:
        deliveries.append(delivery.deliveries)
        if delivery.deliveries == 1:
            entered.set()
            await release.wait()
            raise ConnectionError("the write needed NATS")

    broker = build_broker(TierMemSettings(nats=nats), "settle-test")
    publisher = EventPublisher(broker)
    durable_subscriber(
        broker, nats, spec, SessionCompleted, fails_while_nats_is_gone, DeadLetterWriter(publisher, subjects)
    )
    caplog.set_level(logging.INFO)
    await broker.start()
    try:
        event = session_event()
        await publisher.publish(
            event, subjects.session_completed("acme", "alice"), message_id(event), subjects.session_stream
        )
        await asyncio.wait_for(entered.wait(), timeout=30)
        own_nats.stop()

        def _logged(text: str) -> Callable[[], Awaitable[bool]]:
            async def probe() -> bool:
                return any(text in record.getMessage() for record in caplog.records)

            return probe

        await wait_for(_logged("nats connection:"), what="the broker to notice the outage")
        release.set()
        await wait_for(_logged("could not settle"), what="the failed nak to be logged")
        own_nats.start()

        async def _redelivered() -> bool:
            return len(deliveries) >= 2

        await wait_for(_redelivered, what="the redelivery after ack_wait", timeout_s=60)
    finally:
        release.set()
        await broker.stop()
    assert deliveries[:2] == [1, 2]
    settle_lines = [r for r in caplog.records if "could not settle" in r.getMessage()]
    assert len(settle_lines) == 1, [r.getMessage() for r in settle_lines]
    assert "settle-test could not settle" in settle_lines[0].getMessage()
    assert "redelivered after ack_wait 2s" in settle_lines[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    # FastStream's own "Connection broken" line carries the disconnect's exception (one line): that is
    # the outage itself, not a failure of ours.
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info and "Connection broken" not in r.getMessage()]
    assert not tracebacks, tracebacks
