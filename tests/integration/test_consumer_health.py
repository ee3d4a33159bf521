"""Every consumer, started exactly as its Kubernetes Deployment starts it (the image's ENTRYPOINT
plus the manifest's args), serves its health port: ready once the broker and the stores answer,
not ready while NATS is down (yet still live: it is reconnecting), ready again when NATS is back.

The test runs its own nats-server, so stopping it breaks no other test."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from services.cli.servers.nats_server import NatsServer
from services.cli.servers.net import free_port
from services.cli.stack import all_services
from tests.fixtures.falkordb import FalkorDBGraph
from tests.support.events import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INFRA = Path(__file__).resolve().parents[2] / "infra"


def image_entrypoint() -> list[str]:
    """The ENTRYPOINT of infra/Dockerfile (exec form), with its program resolved in this venv."""
    lines = [line for line in (INFRA / "Dockerfile").read_text().splitlines() if line.startswith("ENTRYPOINT ")]
    entrypoint: list[str] = json.loads(lines[-1].removeprefix("ENTRYPOINT "))
    program = shutil.which(entrypoint[0], path=str(Path(sys.executable).parent))
    assert program is not None, f"{entrypoint[0]} is not installed next to {sys.executable}"
    return [program, *entrypoint[1:]]


def manifest_args(service: str) -> list[str]:
    """The container args of the service's Deployment in the kustomize base."""
    path = INFRA / "k8s" / "base" / f"{service}.yaml"
    for document in yaml.safe_load_all(path.read_text()):
        if document and document["kind"] == "Deployment":
            (container,) = document["spec"]["template"]["spec"]["containers"]
            args: list[str] = container["args"]
            return args
    raise AssertionError(f"no Deployment in {path}")


@dataclass
class ConsumerProcess:
    name: str
    process: asyncio.subprocess.Process
    health_url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


# The image's filesystem: the root read-only, only a fresh /tmp writable, HOME and the data dir on it
# (infra/Dockerfile ENV). A private mount namespace gives a process exactly that, as root, without Docker.
# The checkout (with its .venv) may itself live under /tmp (a CI clone): it is bound aside first and
# bound back, read-only, at the same path inside the fresh /tmp, so the entrypoint still resolves.
_READ_ONLY_ROOT_SCRIPT = """
repo="$1"; shift
mount --bind "$repo" /mnt && mount -o remount,bind,ro /mnt || exit 97
mount -o remount,bind,ro / && mount -t tmpfs -o mode=1777 tmpfs /tmp || exit 98
case "$repo" in /tmp/*) mkdir -p "$repo" && mount --bind /mnt "$repo" || exit 99;; esac
exec "$@"
"""
PROJECT_ROOT = Path(__file__).resolve().parents[2]
READ_ONLY_ROOT = [
    "unshare", "--mount", "--propagation", "private", "sh", "-c", _READ_ONLY_ROOT_SCRIPT, "read-only-root",
    str(PROJECT_ROOT),
]  # fmt: skip
IMAGE_FILESYSTEM_ENV = {"HOME": "/tmp", "TMPDIR": "/tmp", "TIERMEM_DATA_DIR": "/tmp/tiermem"}


def read_only_root_available() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run([*READ_ONLY_ROOT, "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


ConsumerLauncher = Callable[[bool], Awaitable[list[ConsumerProcess]]]


@pytest.fixture
async def launch_consumers(
    own_nats: NatsServer, falkordb_graph: FalkorDBGraph, tmp_path: Path
) -> AsyncIterator[ConsumerLauncher]:
    """Starts every consumer with the image's ENTRYPOINT and the manifest's args, optionally on a
    read-only root like the image's; all are killed at the end whatever happened."""
    entrypoint = image_entrypoint()
    started: list[ConsumerProcess] = []

    async def launch(read_only_root: bool) -> list[ConsumerProcess]:
        launched = []
        for definition in all_services():
            port = free_port()
            env = {
                **os.environ,
                "TIERMEM_DATA_DIR": str(tmp_path / "no-stack-here"),
                "TIERMEM_NATS__URL": own_nats.url,
                "TIERMEM_NATS__TOKEN": own_nats.token,
                "TIERMEM_NATS__SUBJECT_ROOT": f"t{secrets.token_hex(4)}",
                "TIERMEM_VECTOR__PATH": str(tmp_path / f"edge-{definition.name}"),
                "TIERMEM_GRAPH__HOST": falkordb_graph.host,
                "TIERMEM_GRAPH__PORT": str(falkordb_graph.port),
                "TIERMEM_GRAPH__PASSWORD": falkordb_graph.password,
                "TIERMEM_GRAPH__GRAPH_NAME": falkordb_graph.graph_name,
                "TIERMEM_HEALTH_PORT": str(port),
                "TIERMEM_HEALTH_TIMEOUT_S": "2",
            }
            argv = [*entrypoint, *manifest_args(definition.name)]
            if read_only_root:
                env |= IMAGE_FILESYSTEM_ENV | {"TIERMEM_VECTOR__PATH": "/tmp/tiermem/qdrant-edge"}
                argv = [*READ_ONLY_ROOT, *argv]
            log_path = tmp_path / f"{definition.name}-{len(started)}.log"
            with log_path.open("wb") as log:
                process = await asyncio.create_subprocess_exec(*argv, env=env, stdout=log, stderr=log)
            consumer = ConsumerProcess(definition.name, process, f"http://127.0.0.1:{port}", log_path)
            started.append(consumer)
            launched.append(consumer)
        return launched

    try:
        yield launch
    finally:
        for consumer in started:
            if consumer.process.returncode is None:
                consumer.process.kill()
                await consumer.process.wait()


async def _stop_all(consumers: list[ConsumerProcess]) -> None:
    """SIGTERM, as the kubelet sends it: each drains and exits cleanly."""
    for consumer in consumers:
        consumer.process.send_signal(signal.SIGTERM)
    for consumer in consumers:
        await asyncio.wait_for(consumer.process.wait(), timeout=60)
        assert consumer.process.returncode in (0, -signal.SIGTERM), consumer.log()


async def _status(client: httpx.AsyncClient, url: str) -> tuple[int, dict[str, Any]]:
    try:
        response = await client.get(url, timeout=10)
    except httpx.TransportError:
        return 0, {}
    return response.status_code, response.json() if response.headers.get("content-type", "").startswith(
        "application/json"
    ) else {}


async def _wait_all(
    client: httpx.AsyncClient, consumers: list[ConsumerProcess], path: str, status: int, timeout_s: float, what: str
) -> dict[str, dict[str, Any]]:
    bodies: dict[str, dict[str, Any]] = {}
    for consumer in consumers:

        async def _reached(consumer: ConsumerProcess = consumer) -> bool:
            assert consumer.process.returncode is None, f"{consumer.name} exited:\n{consumer.log()}"
            code, body = await _status(client, consumer.health_url + path)
            bodies[consumer.name] = body
            return code == status

        try:
            await wait_for(_reached, timeout_s=timeout_s, interval_s=0.2, what=f"{consumer.name}: {what}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{consumer.log()}") from exc
    return bodies


async def test_each_consumer_health_port_follows_the_broker(
    launch_consumers: ConsumerLauncher, own_nats: NatsServer
) -> None:
    consumers = await launch_consumers(False)
    assert [consumer.name for consumer in consumers] == [definition.name for definition in all_services()]
    async with httpx.AsyncClient() as client:
        ready = await _wait_all(client, consumers, "/readyz", 200, 240, "ready")
        for body in ready.values():
            assert body["checks"] == {"broker": "ok", "vector_index": "ok", "graph": "ok"}
        for consumer in consumers:
            metrics = (await client.get(consumer.health_url + "/metrics")).text
            assert 'tiermem_dependency_up{dependency="broker"} 1.0' in metrics
            assert "process_resident_memory_bytes" in metrics

        own_nats.stop()
        not_ready = await _wait_all(client, consumers, "/readyz", 503, 60, "not ready once NATS stopped")
        for name, body in not_ready.items():
            assert body["checks"]["broker"] != "ok", name
            assert body["checks"]["graph"] == "ok", f"{name}: only the broker is down"
        # Reconnecting is alive: a NATS outage must not restart every pod.
        await _wait_all(client, consumers, "/healthz", 200, 10, "still live while reconnecting")

        own_nats.start()
        await _wait_all(client, consumers, "/readyz", 200, 60, "ready again once NATS is back")

    await _stop_all(consumers)


@pytest.mark.skipif(not read_only_root_available(), reason="needs unshare with mount rights (root, as in CI)")
async def test_each_consumer_runs_on_a_read_only_root_with_only_tmp_writable(
    launch_consumers: ConsumerLauncher,
) -> None:
    """What `readOnlyRootFilesystem: true` plus the /tmp emptyDir give a pod: every consumer starts,
    opens its stores (the Qdrant Edge shard under /tmp), answers ready and stops cleanly."""
    consumers = await launch_consumers(True)
    async with httpx.AsyncClient() as client:
        ready = await _wait_all(client, consumers, "/readyz", 200, 240, "ready on a read-only root")
    for body in ready.values():
        assert body["checks"] == {"broker": "ok", "vector_index": "ok", "graph": "ok"}
    await _stop_all(consumers)
    for consumer in consumers:
        assert "Read-only file system" not in consumer.log(), consumer.log()
