"""`tiermem serve recall-api --http-port PORT` listens on that port (over TIERMEM_HTTP_PORT), the way
`tiermem up --http-port` does; the option on a service without an HTTP API is refused in one line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from services.cli.servers.net import free_port
from tests.support.events import wait_for

pytestmark = [pytest.mark.integration]


def _serve(data_dir: Path, *args: str) -> subprocess.Popen[str]:
    # The environment names another port: the option must win over it.
    env = {**os.environ, "TIERMEM_HTTP_PORT": str(free_port()), "TIERMEM_DATA_DIR": str(data_dir)}
    env.pop("TIERMEM_API_KEYS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "services.cli", "serve", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def test_serve_recall_api_listens_on_the_http_port_given(tmp_path: Path) -> None:
    port = free_port()
    served = _serve(tmp_path / "data", "recall-api", "--http-port", str(port))
    try:

        async def _healthy() -> bool:
            try:
                async with httpx.AsyncClient() as client:
                    return (await client.get(f"http://127.0.0.1:{port}/healthz", timeout=2)).status_code == 200
            except httpx.HTTPError:
                return served.poll() is not None  # exited: stop waiting, the assertion below says why

        await wait_for(_healthy, timeout_s=120, what=f"the recall API to answer /healthz on {port}")
        assert served.poll() is None, served.communicate()[0]
    finally:
        served.terminate()
        try:
            output, _ = await asyncio.to_thread(served.communicate, timeout=60)
        finally:
            served.kill()
    assert served.returncode == 0, output


async def test_http_port_on_a_service_without_an_http_api_is_refused(tmp_path: Path) -> None:
    refused = _serve(tmp_path / "data", "pruner", "--http-port", "8099")
    output, _ = await asyncio.to_thread(refused.communicate, timeout=60)
    assert refused.returncode == 2, output
    assert "--http-port applies to recall-api only" in " ".join(output.split()) and "Traceback" not in output
