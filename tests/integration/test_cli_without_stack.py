"""Every CLI command that needs the broker gives up with a clear error and a non-zero exit code when
no stack is running, instead of reconnecting forever."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.cli.servers.net import free_port
from tests.support.events import session_event

pytestmark = pytest.mark.integration

TIERMEM = [sys.executable, "-m", "services.cli"]


@pytest.mark.parametrize(
    ("arguments", "exit_code"),
    [
        (["ingest", "{sessions}"], 2),
        (["audit", "user", "acme", "alice", "--timeout", "2"], 2),
        (["audit", "value", "Busan", "--tenant", "acme", "--timeout", "2"], 2),
        (["prune", "--now", "--timeout", "2"], 1),
        (["dlq", "list"], 2),
        (["dlq", "replay"], 2),
    ],
    ids=["ingest", "audit", "audit-value", "prune", "dlq-list", "dlq-replay"],
)
def test_command_without_a_stack_fails_fast_and_says_why(arguments: list[str], exit_code: int, tmp_path: Path) -> None:
    sessions = tmp_path / "sessions.json"
    sessions.write_text(session_event().model_dump_json(), encoding="utf-8")
    port = free_port()  # nothing listens there
    env = {
        **os.environ,
        "TIERMEM_DATA_DIR": str(tmp_path / "no-stack"),
        "TIERMEM_NATS__URL": f"nats://127.0.0.1:{port}",
        "TIERMEM_NATS__CONNECT_TIMEOUT_S": "1",
    }
    command = [*TIERMEM, *(argument.replace("{sessions}", str(sessions)) for argument in arguments)]
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{arguments[0]} hung without a stack") from exc
    assert result.returncode == exit_code, result.stdout + result.stderr
    assert f"cannot reach NATS at nats://127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
