"""The offline chat-loop example, run with the client alone (a fresh virtualenv) against a real
`tiermem up` process tree: a fact recalled in the next session, a rule applied, the window compressed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.cli.servers.net import free_port
from services.common.domain.tokens import bundled_encoding_path
from tests.integration.test_stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "scripts" / "client_chat_loop.py"


@pytest.fixture
def tiermem_up(tmp_path: Path) -> Iterator[Stack]:
    running = Stack(tmp_path / "data", free_port())
    try:
        running.start()
        yield running
    finally:
        running.kill()


def test_the_chat_loop_example_recalls_a_fact_applies_a_rule_and_compresses(
    client_venv_with_tokens: Path, tiermem_up: Stack, tmp_path: Path
) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "TIERMEM_RECALL_URL": f"http://127.0.0.1:{tiermem_up.http_port}",
        "TIERMEM_DATA_DIR": str(tiermem_up.data_dir),
        "TIERMEM_O200K_FILE": str(bundled_encoding_path("o200k_base")),
    }
    done = subprocess.run(
        [str(client_venv_with_tokens), str(EXAMPLE)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["ok"] and outcome["fact_recalled"] and outcome["rule_loaded"]
    assert outcome["compressions"] >= 1 and outcome["prompt_tokens"] <= outcome["window"]
