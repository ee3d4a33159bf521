"""The client alone (a fresh virtualenv: no server packages, no tiktoken unless asked, nothing
downloaded) against a real `tiermem up` process tree: client/README.md's examples as written (add with
only a user and messages, wait, search; a retry is a duplicate; a turn's context with the approximate
token counter), and the offline chat-loop example (a fact recalled in the next session, a rule applied,
the window compressed)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.cli.servers.net import free_port
from services.common.domain.tokens import bundled_encoding_path
from tests.integration.test_stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "scripts" / "client_chat_loop.py"
README = REPO / "client" / "README.md"


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


def readme_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def run_in_venv(python: Path, code: str, tiermem_up: Stack) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",  # no PYTHONPATH, TIERMEM_O200K_FILE or TIKTOKEN_CACHE_DIR from the test run
        "TIERMEM_RECALL_URL": f"http://127.0.0.1:{tiermem_up.http_port}",
        "TIERMEM_API_KEY": (tiermem_up.data_dir / "dev-api-key").read_text(encoding="utf-8").strip(),
    }
    # Not the repository as the working directory: `-c` puts it on sys.path.
    done = subprocess.run(
        [str(python), "-c", code], env=env, cwd=python.parents[2], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_the_readme_examples_run_as_written_and_a_retried_add_is_a_duplicate(
    client_venv: Path, tiermem_up: Stack
) -> None:
    first, second = readme_blocks()[:2]
    assert "client.add(" in first and not re.search(r"session_id|tenant_id|agent_id|started_at", first)
    done = run_in_venv(client_venv, first, tiermem_up)
    assert "Busan" in done.stdout, done.stdout + done.stderr
    again = run_in_venv(client_venv, first + "    print('duplicate:', accepted.duplicate)\n", tiermem_up)
    assert "duplicate: True" in again.stdout
    context = run_in_venv(client_venv, second, tiermem_up)
    assert "ApproximateTokensWarning" in context.stderr  # no tiktoken here: estimated, and said so
    assert "You help." in context.stdout
