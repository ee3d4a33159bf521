"""The embedded stack: nats-server and FalkorDB as child processes on loopback, every service and
the recall HTTP API in this one process, data in one directory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faststream.nats import NatsBroker

from contracts import Subjects
from services.cli.servers.falkordb_server import FalkorDBServer
from services.cli.servers.nats_server import NatsServer
from services.cli.servers.net import ensure_port_free, free_port
from services.common.runtime.broker import (
    DeadLetterWriter,
    EventPublisher,
    build_broker,
    connect_nats,
    provision,
    watch_max_deliveries,
)
from services.common.runtime.resources import Resources, ServiceContext
from services.common.runtime.service import ServiceDefinition, build_context
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


@dataclass
class RunningServices:
    """The consumer services running on one broker, sharing one set of stores."""

    broker: NatsBroker
    resources: Resources
    contexts: dict[str, ServiceContext[Any]]
    advisory_client: Any = None
    background: list[asyncio.Task[Any]] = field(default_factory=list)

    async def stop(self) -> None:
        for task in self.background:
            task.cancel()
        for task in self.background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.broker.stop()
        if self.advisory_client is not None:
            with contextlib.suppress(Exception):
                await self.advisory_client.drain()
        await self.resources.close()


async def start_services(
    settings: TierMemSettings,
    definitions: Sequence[ServiceDefinition[Any]] | None = None,
    resources: Resources | None = None,
) -> RunningServices:
    """Provision streams and consumers, register every service on one broker and start it."""
    definitions = list(definitions if definitions is not None else all_services())
    subjects = Subjects(settings.nats.subject_root)
    resources = resources or Resources(settings)
    broker = build_broker(settings, "embedded")
    contexts: dict[str, ServiceContext[Any]] = {}
    for definition in definitions:
        context = build_context(definition.settings_from(settings), broker, resources)
        definition.register(broker, context)
        contexts[definition.name] = context
    client = await connect_nats(settings.nats, "tiermem-embedded-admin")
    js = client.jetstream()
    await provision(js, settings.nats, [spec for d in definitions for spec in d.consumers(subjects)])
    await broker.start()
    publisher = EventPublisher(broker)
    await watch_max_deliveries(client, js, subjects, DeadLetterWriter(publisher, subjects))
    running = RunningServices(broker=broker, resources=resources, contexts=contexts, advisory_client=client)
    for definition in definitions:
        if definition.background is not None:
            running.background.append(asyncio.create_task(definition.background(contexts[definition.name])))
    return running


@dataclass
class EmbeddedServers:
    nats: NatsServer
    graph: FalkorDBServer

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
        "pid": os.getpid(),
    }
    path = stack_file(data_dir)
    path.write_text(json.dumps(recorded, indent=2), encoding="utf-8")
    os.chmod(path, 0o600)
    key_path = data_dir / API_KEY_FILE
    key_path.write_text(creds["api_key"] + "\n", encoding="utf-8")
    os.chmod(key_path, 0o600)


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
    import uvicorn

    from services.recall_api.app import create_app as create_recall_app

    ensure_port_free(http_port, "the recall HTTP API")
    servers, creds = start_servers(data_dir)
    stop = stop_event or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    running: RunningServices | None = None
    http_server: uvicorn.Server | None = None
    http_task: asyncio.Task[None] | None = None
    try:
        write_stack_file(data_dir, servers, creds, http_port)
        settings = load_settings(data_dir)
        running = await start_services(settings)
        recall_app = create_recall_app(resources=running.resources)
        http_server = uvicorn.Server(
            uvicorn.Config(recall_app, host="127.0.0.1", port=http_port, log_level="warning", lifespan="on")
        )
        http_task = asyncio.create_task(http_server.serve())
        while not http_server.started:
            if http_task.done():
                http_task.result()
                raise RuntimeError("the recall HTTP API stopped during start-up")
            await asyncio.sleep(0.02)
        if on_ready is not None:
            on_ready(settings)
        if demo:
            from services.cli.demo import run_demo

            await run_demo(settings, running)
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        if http_server is not None:
            http_server.should_exit = True
        if http_task is not None:
            with contextlib.suppress(Exception):
                await http_task
        if running is not None:
            await running.stop()
        servers.stop()
        with contextlib.suppress(FileNotFoundError):
            stack_file(data_dir).unlink()
