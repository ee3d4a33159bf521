"""A real `tiermem up` run with `TIERMEM_API_KEYS` set tells which keys work (never the dev key,
which those replace), and `tiermem dump --out` afterwards writes a file only its owner can read, as
the data dir it comes from."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from services.cli.dump import write_private
from tests.integration.test_stack import TIERMEM, Stack
from tests.integration.test_stack import stack as stack

pytestmark = pytest.mark.integration

CONFIGURED_KEY = "Hq3wX8rTz5Lm9Kp2Vd7Nc4Bs-ops"


def test_up_with_configured_keys_prints_them_not_the_dev_key_and_dump_is_private(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERMEM_API_KEYS", f'{{"{CONFIGURED_KEY}": "ops"}}')
    stack.start()
    dev_key = (stack.data_dir / "dev-api-key").read_text().strip()
    url = f"http://127.0.0.1:{stack.http_port}/v1/prompt/memory-instructions"
    assert httpx.get(url, headers={"Authorization": f"Bearer {dev_key}"}, timeout=30).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {CONFIGURED_KEY}"}, timeout=30).status_code == 200
    output = stack.interrupt()
    assert stack.process is not None and stack.process.returncode == 0, output
    assert dev_key not in output, "tiermem up printed a key that gets 401"
    assert "TIERMEM_API_KEYS" in output and "not accepted" in output, output

    out = tmp_path / "dump.json"
    out.write_text("an older dump, world-readable\n")
    out.chmod(0o644)
    env = {**os.environ, "TIERMEM_DATA_DIR": str(stack.data_dir)}
    dumped = subprocess.run(
        ["sh", "-c", 'umask 022 && exec "$@"', "sh", *TIERMEM, "dump", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert dumped.returncode == 0, dumped.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert out.read_text().startswith("{")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".dump.json")] == [], "no partial file left"
    assert stat.S_IMODE(stack.data_dir.stat().st_mode) == 0o700


def test_a_private_file_is_0600_from_its_creation_whatever_the_umask(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    previous = os.umask(0)
    try:
        write_private(target, "{}\n")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() == "{}\n"
    with pytest.raises(FileNotFoundError):
        write_private(tmp_path / "missing" / "out.json", "{}")
