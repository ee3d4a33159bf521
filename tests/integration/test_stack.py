"""`tiermem up` as a newcomer runs it: a real process tree, real servers, the real CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from contracts import Subjects
from services.cli.servers.net import free_port
from services.common.runtime.broker import connect_nats
from services.common.runtime.settings import load_settings
from tests.support.events import decoded, session_event, stream_messages

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "scripts" / "examples"
TIERMEM = [sys.executable, "-m", "services.cli"]


def _children(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid:
            found.append(int(proc.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Stack:
    def __init__(self, data_dir: Path, http_port: int) -> None:
        self.data_dir = data_dir
        self.http_port = http_port
        self.process: subprocess.Popen[bytes] | None = None
        self.child_pids: list[int] = []

    def start(self, timeout_s: float = 120.0) -> None:
        env = {**os.environ, "TIERMEM_DATA_DIR": str(self.data_dir)}
        self.process = subprocess.Popen(
            [*TIERMEM, "up", "--http-port", str(self.http_port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self.process.stdout.read().decode() if self.process.stdout else ""
                raise AssertionError(f"tiermem up exited with {self.process.returncode}:\n{output}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.http_port}/readyz", timeout=1).status_code == 200:
                    self.child_pids = _children(self.process.pid)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError("tiermem up did not become ready")

    def interrupt(self, timeout_s: float = 60.0) -> str:
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        out, _ = self.process.communicate(timeout=timeout_s)
        return out.decode(errors="replace")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid in self.child_pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    running = Stack(tmp_path / "data", free_port())
    try:
        yield running
    finally:
        running.kill()


def _ingest(data_dir: Path, *paths: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIERMEM_DATA_DIR": str(data_dir)}
    return subprocess.run([*TIERMEM, "ingest", *map(str, paths)], env=env, capture_output=True, text=True, timeout=120)


async def _derived(data_dir: Path) -> list[dict[str, object]]:
    settings = load_settings(data_dir)
    client = await connect_nats(settings.nats, "test")
    try:
        subjects = Subjects(settings.nats.subject_root)
        return decoded(await stream_messages(client.jetstream(), subjects.derived_stream))
    finally:
        await client.close()


async def _wait_for_types(data_dir: Path, wanted: set[str], timeout_s: float = 90.0) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout_s
    events: list[dict[str, object]] = []
    while time.monotonic() < deadline:
        events = await _derived(data_dir)
        if wanted <= {str(e["event_type"]) for e in events}:
            return events
        await asyncio.sleep(0.2)
    raise AssertionError(f"no {wanted} within {timeout_s}s; saw {[e['event_type'] for e in events]}")


EPISODES_OF_SESSIONS_EN = 2
"""sessions-en.json holds three sessions; the trivial 'ok / thanks' one makes no episode."""


async def _all_episodes(data_dir: Path, timeout_s: float = 120.0) -> list[dict[str, object]]:
    """The episode events once every session of sessions-en.json has its episode: recording them as
    soon as the first one appears would race the pipeline (under load the second can come after a
    restart, and a comparison across the restart then fails although nothing was lost)."""
    await _wait_for_types(data_dir, {"episode.created", "entity.upserted"})
    deadline = time.monotonic() + timeout_s
    while True:
        events = await _derived(data_dir)
        episodes = [e for e in events if e["event_type"] == "episode.created"]
        if len(episodes) >= EPISODES_OF_SESSIONS_EN or time.monotonic() > deadline:
            assert len(episodes) == EPISODES_OF_SESSIONS_EN, "the trivial 'ok / thanks' session makes no episode"
            return episodes
        await asyncio.sleep(0.2)


async def test_up_ingest_restart_and_clean_shutdown(stack: Stack, tmp_path: Path) -> None:
    stack.start()
    assert len(stack.child_pids) >= 2, "nats-server and redis-server run as children"
    key = (stack.data_dir / "dev-api-key").read_text().strip()
    assert key

    result = _ingest(stack.data_dir, EXAMPLES / "sessions-en.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "published 3, duplicate 0, rejected 0" in result.stdout
    episodes_before = await _all_episodes(stack.data_dir)

    again = _ingest(stack.data_dir, EXAMPLES / "sessions-en.json")
    assert "published 0, duplicate 3, rejected 0" in again.stdout

    output = stack.interrupt()
    assert stack.process is not None and stack.process.returncode == 0, output
    assert [pid for pid in stack.child_pids if _alive(pid)] == [], "no nats-server or redis-server survives Ctrl-C"

    stack.start()
    events_after = await _derived(stack.data_dir)
    assert [e for e in events_after if e["event_type"] == "episode.created"] == episodes_before
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"http://127.0.0.1:{stack.http_port}/v1/memories/search",
            headers={"Authorization": f"Bearer {key}"},
            json={"user_id": "minji", "query": "DGIA billing service in Go"},
        )
    assert response.status_code == 200, response.text
    assert response.json()["items"], "the episodes survived the restart"
    env = {**os.environ, "TIERMEM_DATA_DIR": str(stack.data_dir)}
    cli = await asyncio.to_thread(
        subprocess.run,
        [*TIERMEM, "recall", "search", "DGIA billing service", "--user", "minji"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    found = json.loads(cli.stdout)
    assert found["items"], "the CLI is a thin client of the same HTTP API"
    assert found["items"][0]["id"] == response.json()["items"][0]["id"]
    stack.interrupt()


def test_taken_http_port_gives_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {**os.environ, "TIERMEM_DATA_DIR": str(tmp_path / "d")}
        result = subprocess.run(
            [*TIERMEM, "up", "--http-port", str(port)], env=env, capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 2
    assert f"127.0.0.1:{port}" in result.stderr and "already in use" in result.stderr


def test_ingest_rejects_bad_records_with_file_line_and_reason(tmp_path: Path) -> None:
    good = json.loads(session_event().model_dump_json())
    bad_id = {**good, "event_id": "8d0c1d8e-0000-4000-8000-000000000001", "user_id": "a.b"}
    naive = {**good, "event_id": "8d0c1d8e-0000-4000-8000-000000000002", "started_at": "2026-05-02T10:00:00"}
    missing = {k: v for k, v in good.items() if k != "messages"}
    oversized = {
        **good,
        "event_id": "8d0c1d8e-0000-4000-8000-000000000003",
        "messages": [{"role": "user", "content": "x" * 40_000}],
    }
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\n".join(json.dumps(r) for r in (bad_id, naive, missing, oversized)) + "\n{not json\n", encoding="utf-8"
    )
    broken = tmp_path / "broken.json"
    broken.write_bytes(b'{"content": "caf\xe9"}')
    env = {**os.environ, "TIERMEM_DATA_DIR": str(tmp_path / "nothing-running")}
    result = subprocess.run(
        [*TIERMEM, "ingest", str(path), str(broken)], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    err = result.stderr
    assert f"{path}:1:" in err and "user_id" in err
    assert f"{path}:2:" in err and "timezone" in err
    assert f"{path}:3:" in err and "messages" in err
    assert f"{path}:4:" in err and "too large" in err
    assert f"{path}:5:" in err and "invalid JSON" in err
    assert f"{broken}:1:" in err and "invalid UTF-8" in err
    assert "published 0, duplicate 0, rejected 6" in result.stdout
