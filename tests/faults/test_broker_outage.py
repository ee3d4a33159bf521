"""nats-server down under the recall service: /readyz says so (and names no address), and a request
answered "could not publish" is not carried out later when the broker comes back."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from contracts import Subjects
from services.cli.servers.nats_server import NatsServer
from services.common.runtime.broker import connect_nats, provision
from services.common.runtime.resources import Resources
from services.common.runtime.settings import NatsSettings
from services.recall_api import erasure_requests
from services.recall_api.errors import StoreUnavailable
from services.recall_api.service import RecallService
from services.recall_api.settings import RecallApiSettings
from tests.support.events import stream_messages, wait_for

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

    try:
        await provision(client.jetstream(), settings.nats)
        own_nats.stop()

        async def _disconnected() -> bool:
            return not client.is_connected

        await wait_for(_disconnected, what="the client to notice the outage", timeout_s=30, interval_s=0.05)
        with pytest.raises(StoreUnavailable) as refused:
            await erasure_requests.request_erasure(nats, subjects, "acme", "alice")  # type: ignore[arg-type]
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
