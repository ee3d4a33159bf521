"""A service runs alone against external servers named by settings (how Kubernetes runs it):
`tiermem serve episodic-summarizer` as its own process, configured only by environment variables.
That path also runs the max-deliveries watcher: a message whose worker dies on every delivery is
dead-lettered."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from contracts import Subjects
from services.cli.servers.net import free_port
from services.common.runtime.settings import NatsSettings, TierMemSettings
from tests.fixtures.llm_stub import STUB_API_KEY, STUB_MODEL
from tests.integration.test_pipeline import publish
from tests.support.events import decoded, session_event, stream_messages, wait_for
from tests.support.llm_stub import LlmStubServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def serve_env(tmp_path: Path, nats: NatsSettings | None = None, **settings: str) -> dict[str, str]:
    """The environment of a `tiermem serve` process: no stack file to read, an Edge dir of its own,
    NATS where `nats` says (when given), and the other `TIERMEM_*` settings passed."""
    env = {
        **os.environ,
        "TIERMEM_DATA_DIR": str(tmp_path / "no-stack-here"),
        "TIERMEM_VECTOR__PATH": str(tmp_path / "edge"),
    }
    if nats is not None:
        assert nats.token is not None
        env["TIERMEM_NATS__URL"] = nats.url
        env["TIERMEM_NATS__TOKEN"] = nats.token.get_secret_value()
        env["TIERMEM_NATS__SUBJECT_ROOT"] = nats.subject_root
    return {**env, **settings}


async def start_serve(name: str, env: dict[str, str], *, stdout: Any, stderr: Any) -> asyncio.subprocess.Process:
    """`tiermem serve NAME` (the production entry point) as a child process."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli", "serve", name, env=env, stdout=stdout, stderr=stderr
    )


async def test_episodic_summarizer_alone_consumes_and_publishes(
    nats_settings: NatsSettings, nats_client: NatsClient, tmp_path: Path
) -> None:
    env = serve_env(tmp_path, nats_settings)
    process = await start_serve(
        "episodic-summarizer", env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
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


class ServeProcesses:
    """`tiermem serve NAME` processes started one after another, each logging to its own file."""

    def __init__(self, name: str, env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.env = env
        self.log_dir = log_dir
        self.started: list[asyncio.subprocess.Process] = []

    async def start(self) -> asyncio.subprocess.Process:
        with (self.log_dir / f"serve-{len(self.started) + 1}.log").open("wb") as log:
            process = await start_serve(self.name, self.env, stdout=log, stderr=log)
        self.started.append(process)
        return process

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')}" for path in sorted(self.log_dir.glob("serve-*.log"))
        )

    async def kill_all(self) -> None:
        for process in self.started:
            if process.returncode is None:
                process.kill()
                await process.wait()


@pytest.fixture
async def summarizer_processes(
    nats_settings: NatsSettings, llm_stub: LlmStubServer, tmp_path: Path
) -> AsyncIterator[ServeProcesses]:
    """Settings for episodic-summarizer processes: two deliveries at most, a two-second ack wait
    (and no longer timeout backoff), the LLM at the stub with frequent in-progress acks."""
    env = serve_env(
        tmp_path,
        nats_settings,
        TIERMEM_NATS__MAX_DELIVER="2",
        TIERMEM_NATS__ACK_WAIT_S="2",
        TIERMEM_NATS__TIMEOUT_BACKOFF_S="[]",
        TIERMEM_LLM__MODEL=STUB_MODEL,
        TIERMEM_LLM__API_BASE=llm_stub.api_base,
        TIERMEM_LLM__API_KEY=STUB_API_KEY,
        TIERMEM_LLM__TIMEOUT_S="300",
        TIERMEM_LLM__TOTAL_BUDGET_S="600",
        TIERMEM_LLM__MAX_ATTEMPTS="1",
        TIERMEM_LLM__PROGRESS_INTERVAL_S="0.3",
    )
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    processes = ServeProcesses("episodic-summarizer", env, log_dir)
    try:
        yield processes
    finally:
        await processes.kill_all()


async def test_serve_alone_dead_letters_a_message_whose_worker_dies_on_every_delivery(
    nats_settings: NatsSettings,
    nats_client: NatsClient,
    llm_stub: LlmStubServer,
    summarizer_processes: ServeProcesses,
) -> None:
    """Each delivery reaches the LLM call (the stub holds it; the worker keeps sending in-progress
    acks) and the worker is killed there. Only the reader of the `$JS.EVENT.ADVISORY.CONSUMER.
    MAX_DELIVERIES` advisories (runtime/exhausted.py) can dead-letter such a message: no handler ever
    answers for it."""
    subjects = Subjects(nats_settings.subject_root)
    js = nats_client.jetstream()
    for _ in range(2):  # one held LLM call per delivery; a third call would be unscripted and fail
        llm_stub.push_chat_content("{}", delay_s=600)

    async def _chat_requests(count: int) -> bool:
        return len(llm_stub.requests("chat")) >= count

    async def _consumer_ready() -> bool:
        try:
            await js.consumer_info(subjects.session_stream, "episodic-summarizer")
        except Exception:
            return False
        return True

    first = await summarizer_processes.start()
    await wait_for(_consumer_ready, timeout_s=90, what="the service to provision its consumer")
    event = session_event()
    await publish(TierMemSettings(nats=nats_settings), event)
    worker = first
    for delivery in (1, 2):
        await wait_for(
            functools.partial(_chat_requests, delivery), timeout_s=120, what=f"delivery {delivery} to reach the LLM"
        )
        worker.kill()
        await worker.wait()
        # The next process stays up. After the last delivery's ack wait, a pull (the killed worker's
        # own, still waiting, or this process's) makes JetStream announce that the message ran out of
        # deliveries; the advisory stream keeps it, however early, and this process reads it there.
        worker = await summarizer_processes.start()

    async def _dead_letters() -> list[object]:
        return await stream_messages(js, subjects.dead_letter_stream)

    try:
        await wait_for(_dead_letters, timeout_s=120, what="the dead-letter record of the advisory")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{summarizer_processes.logs()}") from exc
    worker.send_signal(signal.SIGTERM)
    await asyncio.wait_for(worker.wait(), timeout=60)
    # Every process is gone now: whatever they would write is in the stream.
    (record,) = decoded(await _dead_letters())
    assert record["kind"] == "exhausted"
    assert record["consumer"] == "episodic-summarizer"
    assert record["deliveries"] == 2
    assert "no acknowledgement after 2 deliveries" in record["reason"]
    assert record["original_subject"] == subjects.session_completed(event.tenant_id, event.user_id)
    assert json.loads(record["payload"])["event_id"] == str(event.event_id)
    assert len(llm_stub.requests("chat")) == 2, "the message was not delivered a third time"
    assert worker.returncode in (0, -signal.SIGTERM), summarizer_processes.logs()


async def test_serve_alone_without_a_broker_exits_with_one_clear_line(tmp_path: Path) -> None:
    """No NATS server where the settings point: after its connect timeout the process says so in one
    line and exits 2 (a traceback ending in a bare TimeoutError said nothing an operator could act on)."""
    env = serve_env(tmp_path, TIERMEM_NATS__URL=f"nats://127.0.0.1:{free_port()}", TIERMEM_NATS__CONNECT_TIMEOUT_S="1")
    process = await start_serve(
        "episodic-summarizer", env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    output = (stdout + stderr).decode()
    assert process.returncode == 2, output
    assert "error: cannot reach NATS at nats://127.0.0.1:" in output
    assert "Traceback" not in output and "╭" not in output, output
