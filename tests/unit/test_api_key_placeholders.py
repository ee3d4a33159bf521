"""The recall API refuses to start on an API key copied from an example (the old shipped
`set-me-a-long-random-key` was long enough to pass the length check), and keeps accepting
generated keys."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from services.recall_api.app import create_app
from services.recall_api.auth import check_api_keys, is_placeholder_key
from services.recall_api.settings import RecallApiSettings

PLACEHOLDERS = [
    "set-me-a-long-random-key",
    "CHANGE_ME_CHANGE_ME_CHANGE_ME",
    "changeme-changeme-123",
    "replace-me-with-a-real-key",
    "your-api-key-goes-here-0123",
    "example-key-0123456789abcdef",
    "placeholder-0123456789abcdef",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "abababababababababababababab",
]


@pytest.mark.parametrize("key", PLACEHOLDERS)
def test_placeholder_keys_are_refused(key: str) -> None:
    assert is_placeholder_key(key)
    with pytest.raises(ValueError, match="placeholder"):
        check_api_keys({key: "tenant-a"})
    with pytest.raises(ValueError, match="placeholder"):
        create_app(RecallApiSettings(api_keys={key: "tenant-a"}))


def test_generated_keys_are_accepted() -> None:
    keys = {secrets.token_urlsafe(24): f"tenant-{index}" for index in range(500)}
    keys |= {"tm_" + secrets.token_urlsafe(24): "local", "acme-key-0123456789abcdefghijkl": "acme"}
    check_api_keys(keys)


def test_serve_recall_api_exits_with_one_clear_line_on_a_placeholder_key(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TIERMEM_DATA_DIR": str(tmp_path),
        "TIERMEM_API_KEYS": json.dumps({"set-me-a-long-random-key": "tenant-a"}),
    }
    argv = [sys.executable, "-m", "services.cli", "serve", "recall-api"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "placeholder" in result.stderr and "Traceback" not in result.stderr, result.stderr
