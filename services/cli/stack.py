"""The embedded stack: nats-server and FalkorDB as child processes on loopback, every service and
the recall HTTP API in this one process, data in one directory. Services are wired by the one
composition root (services/common/runtime/root.py); this module knows which services exist."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.cli.datadir import DataDirLock, make_private, stop_leftover_servers
from services.cli.servers.falkordb_server import FalkorDBServer
from services.cli.servers.nats_server import NatsServer
from services.cli.servers.net import PRIVATE_UMASK, claim_port, free_port
from services.cli.servers.supervisor import ServerSupervisor
from services.common.runtime.resources import Resources
from services.common.runtime.root import HttpApi, ServiceRoot, bootstrap
from services.common.runtime.service import ServiceDefinition
from services.common.runtime.settings import TierMemSettings, load_settings, stack_file

log = logging.getLogger(__name__)

SECRETS_FILE = "secrets.json"
API_KEY_FILE = "dev-api-key"


def all_services() -> list[ServiceDefinition[Any]]:
    """Every consumer service, in pipeline order. The composition root is the only place that
    knows them all."""
    from services.dedup.handlers import DEFINITION as DEDUP
    from services.episodic_summarizer.handlers import DEFINITION as EPISODIC
    from services.pruner.handlers import DEFINITION as PRUNER
    from services.semantic_extractor.handlers import DEFINITION as SEMANTIC

    return [EPISODIC, SEMANTIC, DEDUP, PRUNER]


def _load_or_create_secrets(data_dir: Path) -> dict[str, str]:
    """Credentials of the embedded servers and the local API key; kept across restarts so the
    same data dir keeps working."""
    path = data_dir / SECRETS_FILE
    if path.exists():
        values: dict[str, str] = json.loads(path.read_text(encoding="utf-8"))
    else:
        values = {}
    changed = False
    for key in ("nats_token", "graph_password", "api_key"):
        if not values.get(key):
            values[key] = ("tm_" if key == "api_key" else "") + secrets.token_urlsafe(24)
            changed = True
    if changed:
        path.write_text(json.dumps(values, indent=2), encoding="utf-8")
        os.chmod(path, 0o600)
    return values


RunningServices = ServiceRoot
"""The consumer services running on one broker, sharing one set of stores (the composition root;
this name stays for the eval and bench code)."""


async def start_services(
    settings: TierMemSettings,
    definitions: Sequence[ServiceDefinition[Any]] | None = None,
    resources: Resources | None = None,
) -> RunningServices:
    """Every service (or `definitions`) on one broker, started through the composition root."""
    return await bootstrap(
        settings, list(definitions if definitions is not None else all_services()), resources=resources
    )


def recall_http_api(host: str, port: int, log_level: str = "info", sock: socket.socket | None = None) -> HttpApi:
    """The recall HTTP API (with its MCP endpoint), served by the root on the root's resources (on
    `sock` when the port is claimed already: `HttpApi.sock`)."""

    def _build(resources: Resources) -> Any:
        from services.recall_api.app import create_app as create_recall_app

        return create_recall_app(resources=resources)

    return HttpApi(build=_build, host=host, port=port, log_level=log_level, sock=sock)


async def serve_recall_api(settings: TierMemSettings) -> None:
    """`tiermem serve recall-api`: the recall API alone (how Kubernetes runs it), until a signal."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        root = await bootstrap(settings, [], http_api=recall_http_api(settings.http_host, settings.http_port))
        try:
            await root.wait(stop)
        finally:
            await root.stop()
    finally:
        # Only now: uvicorn re-raises the signal it caught once it has stopped, which must not
        # find the default handler (that would end the process before the resources close).
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


@dataclass
class EmbeddedServers:
    nats: NatsServer
    graph: FalkorDBServer
    supervisor: ServerSupervisor | None = None
    http_socket: socket.socket | None = None  # the recall API's port, claimed before the servers start

    def stop(self) -> None:
        # Servers go last and in reverse order of need; each stop reaps its process group.
        self.graph.stop()
        self.nats.stop()


def start_servers(data_dir: Path, nats_port: int = 0, graph_port: int = 0) -> tuple[EmbeddedServers, dict[str, str]]:
    data_dir.mkdir(parents=True, exist_ok=True)
    creds = _load_or_create_secrets(data_dir)
    nats = NatsServer(data_dir / "nats", nats_port or free_port(), creds["nats_token"])
    graph = FalkorDBServer(data_dir / "falkordb", graph_port or free_port(), creds["graph_password"])
    nats.start()
    try:
        graph.start()
    except BaseException:
        nats.stop()
        raise
    return EmbeddedServers(nats=nats, graph=graph), creds


def write_stack_file(data_dir: Path, servers: EmbeddedServers, creds: dict[str, str], http_port: int) -> None:
    recorded = {
        "nats": {"url": servers.nats.url, "token": creds["nats_token"]},
        "graph": {
            "backend": "falkordb",
            "host": servers.graph.host,
            "port": servers.graph.port,
            "password": creds["graph_password"],
        },
        "vector": {"backend": "edge", "path": str(data_dir / "qdrant-edge")},
        "http_host": "127.0.0.1",
        "http_port": http_port,
        "api_keys": {creds["api_key"]: "local"},
        "operator_tenants": ["local"],
        "pid": os.getpid(),
    }
    path = stack_file(data_dir)
    path.write_text(json.dumps(recorded, indent=2), encoding="utf-8")
    os.chmod(path, 0o600)
    key_path = data_dir / API_KEY_FILE
    key_path.write_text(creds["api_key"] + "\n", encoding="utf-8")
    os.chmod(key_path, 0o600)


@contextlib.asynccontextmanager
async def supervised_servers(data_dir: Path, http_port: int) -> AsyncIterator[tuple[EmbeddedServers, dict[str, str]]]:
    """The data dir locked for this process, made private and cleared of a crashed run's servers;
    nats-server and FalkorDB started (dying with this process) and restarted if they die. On exit:
    the supervisor stops, then the servers, then the stack file goes; the lock is released last.
    Everything this process writes meanwhile (Edge WAL and payloads, stack file) is 0600."""
    previous_umask = os.umask(PRIVATE_UMASK)
    try:
        with DataDirLock(data_dir):
            make_private(data_dir)
            stop_leftover_servers(data_dir)
            # Claimed, not only checked: a port found free here could be taken while the servers start,
            # even by one of this process's own outgoing connections (a CI run saw exactly that).
            http_socket = claim_port(http_port, "the recall HTTP API")
            try:
                servers, creds = start_servers(data_dir)
            except BaseException:
                http_socket.close()
                raise
            servers.http_socket = http_socket
            supervisor = ServerSupervisor([("nats-server", servers.nats), ("FalkorDB", servers.graph)])
            servers.supervisor = supervisor
            watching = asyncio.create_task(supervisor.run())
            try:
                yield servers, creds
            finally:
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watching
                servers.stop()
                http_socket.close()
                with contextlib.suppress(FileNotFoundError):
                    stack_file(data_dir).unlink()
    finally:
        os.umask(previous_umask)


async def run_embedded(
    data_dir: Path,
    http_port: int,
    *,
    demo: bool = False,
    on_ready: Callable[[TierMemSettings], None] | None = None,
    stop_event: asyncio.Event | None = None,
) -> None:
    """`tiermem up`: run until SIGINT/SIGTERM (or `stop_event`), then stop everything. `data_dir`
    should be absolute: the stack file records paths inside it."""
    async with supervised_servers(data_dir, http_port) as (servers, creds):
        await _run_services(data_dir, http_port, servers, creds, demo=demo, on_ready=on_ready, stop_event=stop_event)


async def _run_services(
    data_dir: Path,
    http_port: int,
    servers: EmbeddedServers,
    creds: dict[str, str],
    *,
    demo: bool,
    on_ready: Callable[[TierMemSettings], None] | None,
    stop_event: asyncio.Event | None,
) -> None:
    stop = stop_event or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    running: RunningServices | None = None
    try:
        write_stack_file(data_dir, servers, creds, http_port)
        settings = load_settings(data_dir)
        running = await bootstrap(
            settings,
            all_services(),
            http_api=recall_http_api("127.0.0.1", http_port, log_level="warning", sock=servers.http_socket),
        )
        if on_ready is not None:
            on_ready(settings)
        if demo:
            from services.cli.demo import run_demo

            await run_demo(settings, running)
        await running.wait(stop)
    finally:
        try:
            if running is not None:
                await running.stop()
        finally:
            # After the stop: the signal uvicorn re-raises once stopped must find our handler.
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
