"""A service runs alone against external servers named by settings (how Kubernetes runs it):
`tiermem serve episodic-summarizer` as its own process, configured only by environment variables."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
from nats.aio.client import Client as NatsClient

from contracts import Subjects
from services.common.runtime.settings import NatsSettings, TierMemSettings
from tests.integration.test_pipeline import publish
from tests.support.events import decoded, session_event, stream_messages, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_episodic_summarizer_alone_consumes_and_publishes(
    nats_settings: NatsSettings, nats_client: NatsClient, tmp_path: Path
) -> None:
    assert nats_settings.token is not None
    env = {
        **os.environ,
        "TIERMEM_DATA_DIR": str(tmp_path / "no-stack-here"),
        "TIERMEM_NATS__URL": nats_settings.url,
        "TIERMEM_NATS__TOKEN": nats_settings.token.get_secret_value(),
        "TIERMEM_NATS__SUBJECT_ROOT": nats_settings.subject_root,
        "TIERMEM_VECTOR__PATH": str(tmp_path / "edge"),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli",
        "serve",
        "episodic-summarizer",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    subjects = Subjects(nats_settings.subject_root)
    js = nats_client.jetstream()
    try:
        # The service provisions its own streams and durable consumer on start-up.
        async def _consumer_ready() -> bool:
            try:
                await js.consumer_info(subjects.session_stream, "episodic-summarizer")
            except Exception:
                return False
            return True

        await wait_for(_consumer_ready, timeout_s=90, what="the service to provision its consumer")
        event = session_event()
        await publish(TierMemSettings(nats=nats_settings), event)
        created = await wait_for(
            lambda: stream_messages(js, subjects.derived_stream), timeout_s=90, what="EpisodeCreated"
        )
    finally:
        process.send_signal(signal.SIGTERM)
        raw_output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
        output = raw_output.decode(errors="replace")
    (episode,) = decoded(created)
    assert episode["event_type"] == "episode.created"
    assert episode["source_event_id"] == str(event.event_id)
    assert process.returncode in (0, -signal.SIGTERM), output
