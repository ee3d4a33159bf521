"""Crashes mid-ingest, judged by the final state: after a SIGKILL of the process running the
consumers, or of nats-server (and a nats-server that stops answering), the canonical dump of every
store equals the dump of a fault-free run of the same sessions, and nothing was dead-lettered."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts import Subjects
from services.cli.consolidation import wait_until_idle
from services.cli.dump import dump_data_dir
from services.cli.servers.net import free_port
from services.cli.stack import all_services
from services.common.runtime.broker import connect_nats
from services.common.runtime.settings import load_settings
from tests.faults.embedded import TIERMEM, UpProcess, alive, wait_until
from tests.faults.sessions import write_sessions
from tests.support.events import stream_messages

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSIONS = 12


def _ingest(data_dir: Path, sessions: Path) -> None:
    env = {**os.environ, "TIERMEM_DATA_DIR": str(data_dir)}
    result = subprocess.run([*TIERMEM, "ingest", str(sessions)], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"published {SESSIONS}," in result.stdout, result.stdout


async def _stream_counts(data_dir: Path) -> tuple[int, int]:
    """(episodes created so far, dead letters)."""
    settings = load_settings(data_dir)
    subjects = Subjects(settings.nats.subject_root)
    client = await connect_nats(settings.nats, "fault-test", bounded=True)
    try:
        js = client.jetstream()
        episodes = await stream_messages(js, subjects.derived_stream, subjects.all_of("episode.created"))
        dead = await stream_messages(js, subjects.dead_letter_stream)
        return len(episodes), len(dead)
    finally:
        await client.close()


def _episodes_created(data_dir: Path) -> int:
    try:
        return asyncio.run(_stream_counts(data_dir))[0]
    except (OSError, TimeoutError):
        return 0


def _finish(stack: UpProcess) -> dict[str, Any]:
    """Wait until every consumer is idle, check nothing was dead-lettered, stop, dump."""
    settings = load_settings(stack.data_dir)
    asyncio.run(wait_until_idle(settings, all_services(), timeout_s=240))
    episodes, dead = asyncio.run(_stream_counts(stack.data_dir))
    assert dead == 0, "nothing that is not poison is dead-lettered"
    assert episodes >= SESSIONS, "every session made an episode"
    assert stack.interrupt() == 0, stack.log()
    return dump_data_dir(stack.data_dir)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sessions(tmp_path_factory.mktemp("sessions") / "sessions.jsonl", SESSIONS)


@pytest.fixture(scope="module")
def fault_free_dump(sessions: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("fault-free")
    stack = UpProcess(work / "data", free_port(), work / "up.log")
    try:
        stack.start()
        _ingest(stack.data_dir, sessions)
        dumped = _finish(stack)
    finally:
        stack.kill()
    assert len(dumped) == 3 and all(owner["episodes"] and owner["facts"] for owner in dumped.values()), dumped.keys()
    return dumped


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[UpProcess]:
    running = UpProcess(tmp_path / "data", free_port(), tmp_path / "up.log")
    try:
        yield running
    finally:
        running.kill()


def test_sigkill_of_the_consumer_process_mid_ingest(
    stack: UpProcess, sessions: Path, fault_free_dump: dict[str, Any]
) -> None:
    stack.start()
    _ingest(stack.data_dir, sessions)
    wait_until(lambda: _episodes_created(stack.data_dir) >= 3, "the first episodes", timeout_s=120)
    servers = stack.server_pids()
    assert stack.process is not None
    stack.process.send_signal(signal.SIGKILL)
    stack.process.wait()
    wait_until(lambda: not any(alive(pid) for pid in servers), "no child to survive the crashed parent")

    stack.start()  # over the leftovers: a stale stack file, unacked messages, the Edge WAL
    assert _finish(stack) == fault_free_dump


def test_nats_server_stopped_then_killed_and_falkordb_killed_mid_ingest(
    stack: UpProcess, sessions: Path, fault_free_dump: dict[str, Any]
) -> None:
    stack.start()
    _ingest(stack.data_dir, sessions)
    wait_until(lambda: _episodes_created(stack.data_dir) >= 3, "the first episodes", timeout_s=120)

    nats_pid = stack.server_pid("nats-server")
    os.kill(nats_pid, signal.SIGSTOP)  # alive but not answering: nothing restarts it
    try:
        readyz = f"http://127.0.0.1:{stack.http_port}/readyz"

        def _reports_broker_down() -> bool:
            response = httpx.get(readyz, timeout=10)
            return response.status_code == 503 and response.json()["checks"]["broker"] != "ok"

        wait_until(_reports_broker_down, "/readyz to report the broker down", timeout_s=60)
        body = httpx.get(readyz, timeout=10).text
        assert "127.0.0.1" not in body and "nats://" not in body, body
    finally:
        os.kill(nats_pid, signal.SIGCONT)
    wait_until(stack.ready, "ready again once nats-server answers", timeout_s=60)

    os.kill(nats_pid, signal.SIGKILL)  # now dead: the supervisor restarts it on the same store
    wait_until(
        lambda: stack.find_server("nats-server") not in (None, nats_pid), "nats-server to be restarted", timeout_s=60
    )
    wait_until(stack.ready, "ready again after the restart", timeout_s=60)

    graph_pid = stack.server_pid("redis-server")  # FalkorDB: writes in flight fail and are retried
    os.kill(graph_pid, signal.SIGKILL)
    wait_until(
        lambda: stack.find_server("redis-server") not in (None, graph_pid), "FalkorDB to be restarted", timeout_s=60
    )
    wait_until(stack.ready, "ready again after the FalkorDB restart", timeout_s=60)
    assert _finish(stack) == fault_free_dump
