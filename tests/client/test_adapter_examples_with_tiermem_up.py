"""The example scripts, run as a user of the checkout runs them: `.venv/bin/python scripts/...` against
a real `tiermem up` process tree (nats-server, FalkorDB, every service, the recall API), each printing
its outcome as JSON.

They run with the dev virtualenv's interpreter and nothing added to the path: `scripts/bootstrap`
installs the client there (the adapters' frameworks are dev dependencies; a fresh virtualenv cannot get
them offline from the machine's local index). The URL comes from `TIERMEM_RECALL_URL`, as for the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.cli.servers.net import free_port
from tests.integration.test_stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiermem_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(tmp_path_factory.mktemp("tiermem-up") / "data", free_port())
    try:
        running.start()
        yield running
    finally:
        running.kill()


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        ("langgraph_memory_example.py", {"fact_recalled", "rule_applied", "rule_replaced"}),
        ("pydantic_ai_agent_example.py", {"rule_loaded", "fact_recalled", "new_rule_in_force"}),
    ],
)
def test_the_example_runs_against_tiermem_up(
    example: str, expected: set[str], tiermem_up: Stack, tmp_path: Path
) -> None:
    done = run_example(example, tiermem_up, tmp_path)
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"ok": True, **dict.fromkeys(expected, True)}, done.stdout


def test_the_chat_loop_runs_from_the_dev_virtualenv_without_the_token_file(tiermem_up: Stack, tmp_path: Path) -> None:
    done = run_example("client_chat_loop.py", tiermem_up, tmp_path)
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["ok"] and outcome["fact_recalled"] and outcome["rule_loaded"]
    assert outcome["compressions"] >= 1 and outcome["prompt_tokens"] <= outcome["window"]
    assert "ApproximateTokensWarning" in done.stderr  # no TIERMEM_O200K_FILE: estimated, and said so


def run_example(example: str, tiermem_up: Stack, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",  # no PYTHONPATH: the client must be installed in the virtualenv
        "TIERMEM_RECALL_URL": f"http://127.0.0.1:{tiermem_up.http_port}",
        "TIERMEM_DATA_DIR": str(tiermem_up.data_dir),
    }
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / example)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done
