"""The one composition root: settings, resources and the services to run → running services.

Every way tiermem runs goes through here, so every shape runs the same pieces in the same order:
`tiermem up` (every service and the recall API in one process), `tiermem serve NAME` and the
`faststream run services.NAME.app:create_app --factory` factories (one consumer per process: how
production runs), `tiermem serve recall-api`, the MCP stdio server and the test fixtures.

The root cannot import the services (import-linter keeps `services.common` below them): callers
pass the service definitions, and the recall API as an ASGI app factory."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import uvicorn
from faststream import FastStream

from contracts import Subjects
from services.common.gateways.llm import import_litellm
from services.common.runtime.broker import build_broker
from services.common.runtime.dead_letters import DeadLetterWriter
from services.common.runtime.exhausted import ExhaustedWatcher
from services.common.runtime.health import ConsumerHealth, HealthServer
from services.common.runtime.logs import configure_logging_leniently
from services.common.runtime.provisioning import ConsumerSpec, provision
from services.common.runtime.publishing import EventPublisher
from services.common.runtime.resources import Resources, ServiceContext
from services.common.runtime.service import ServiceDefinition, build_context
from services.common.runtime.settings import TierMemSettings, load_settings
from services.common.runtime.store_counts import keep_counting
from services.common.runtime.telemetry import install_tracing

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpApi:
    """An ASGI app served next to the services (the recall API). It is built on the root's
    resources, so it shares one set of stores with the services of the same process (a Qdrant Edge
    shard belongs to one process)."""

    build: Callable[[Resources], Any]
    host: str
    port: int
    log_level: str = "info"
    # A socket bound to host:port already, served instead of binding at start (`tiermem up` claims its
    # port before it starts anything, so nothing started meanwhile can take it). None: bind at start.
    sock: socket.socket | None = None


class ServiceRoot:
    """Services registered on one broker, sharing one set of resources, plus what runs beside them:
    the max-deliveries watcher of exactly their consumers, their background tasks and optionally
    an HTTP API.

    Start order: provision streams and consumers → connect the broker → watcher → start the
    broker's subscribers → background tasks → HTTP API. Stop: HTTP API → background tasks →
    watcher → broker → resources. The pieces are separate methods so FastStream's lifespan hooks
    (which start and stop the broker themselves) can call them around the broker."""

    def __init__(
        self,
        settings: TierMemSettings,
        services: Sequence[ServiceDefinition[Any]],
        *,
        resources: Resources | None = None,
        name: str = "embedded",
        http_api: HttpApi | None = None,
    ) -> None:
        self.settings = settings
        self.services = list(services)
        self.subjects = Subjects(settings.nats.subject_root)
        self.resources = resources or Resources(settings)
        install_tracing(settings.telemetry, name)  # process-wide, once: every span below hangs on it
        self.broker = build_broker(settings, name)
        self.contexts: dict[str, ServiceContext[Any]] = {}
        for definition in self.services:
            context = build_context(definition.settings_from(settings), self.broker, self.resources)
            definition.register(self.broker, context)
            self.contexts[definition.name] = context
        self.http_app: Any = http_api.build(self.resources) if http_api is not None else None
        self.background: list[asyncio.Task[None]] = []
        self._http_api = http_api
        self._http_server: uvicorn.Server | None = None
        self._http_task: asyncio.Task[None] | None = None
        self._exhausted: ExhaustedWatcher | None = None
        self._broker_connected = False
        self.health_server: HealthServer | None = None

    def consumers(self) -> list[ConsumerSpec]:
        """The durable consumers of the services this root runs."""
        return [spec for definition in self.services for spec in definition.consumers(self.subjects)]

    # ---------------------------------------------------------------------------------- start
    async def start(self) -> None:
        """Start everything; on failure, stop what already started and re-raise."""
        try:
            await self.prepare()
            if self._broker_connected:
                await self.broker.start()
            await self.start_after_broker()
        except BaseException:
            await self.stop()
            raise

    async def prepare(self) -> None:
        """What must be in place before the subscribers pull: streams and this root's durable
        consumers (idempotent), the broker's connection, and the reader of exactly these consumers'
        max-deliveries advisories (exhausted.py: kept in a stream, so one announced while no process
        ran is dead-lettered now). A root without services (the recall API alone,
        the MCP server) needs none of it. First of all, the claim on local store data (Qdrant Edge's
        belongs to one process): a second process on the same data dir stops here, with the reason."""
        self.resources.claim_local_stores()
        consumers = self.consumers()
        if not consumers:
            return
        await provision(await self.resources.jetstream(), self.settings.nats, consumers)
        await (await self.resources.tombstones()).open()  # erasure tombstones every writer reads (issue 11)
        self._broker_connected = True
        await self.broker.connect()
        dead_letters = DeadLetterWriter(EventPublisher(self.broker), self.subjects)
        self._exhausted = ExhaustedWatcher(await self.resources.nats(), self.subjects, consumers, dead_letters)
        await self._exhausted.start()
        await self._start_health()

    async def _start_health(self) -> None:
        """The health/metrics port Kubernetes probes (consumers only: the recall API has its own)."""
        if self.settings.health_port is None:
            return
        health = ConsumerHealth(
            self.broker, self.resources, self.contexts, self.settings.health_timeout_s, self.consumers()
        )
        self.health_server = HealthServer(health, self.settings.health_host, self.settings.health_port)
        await self.health_server.start()

    async def start_after_broker(self) -> None:
        """What needs the running services: their background tasks, then the HTTP API."""
        for definition in self.services:
            if definition.background is not None:
                self.background.append(asyncio.create_task(definition.background(self.contexts[definition.name])))
        telemetry = self.settings.telemetry
        if self._http_api is not None and telemetry.store_counts_interval_s > 0:  # for `tiermem stats`
            counting = keep_counting(self.resources, telemetry.store_counts_interval_s, telemetry.tenant_counts)
            self.background.append(asyncio.create_task(counting, name="store-counts"))
        await self._start_http()
        if self.settings.llm.model is not None and any(definition.calls_llm for definition in self.services):
            # Now, not at the first session: litellm's ~150k objects should be part of the frozen heap.
            # A root whose services never call the model (the recall API alone, the pruner) skips it.
            await asyncio.to_thread(import_litellm)
        freeze_startup_heap()

    async def _start_http(self) -> None:
        if self._http_api is None:
            return
        config = uvicorn.Config(
            self.http_app,
            host=self._http_api.host,
            port=self._http_api.port,
            log_level=self._http_api.log_level,
            lifespan="on",
            # httptools (a dependency), not uvicorn's pure-Python h11 fallback: parsing every request in
            # Python costs ~0.1 ms of the event loop and the GIL an L0 call shares with the query embedding.
            http="httptools",
            # uvicorn's lines go to the process's handler (JSON with trace ids when configured), not
            # to text handlers of its own; no access log: it quotes raw paths, which carry user ids
            # (every request is a span and a metric instead).
            log_config=None,
            access_log=False,
        )
        server = uvicorn.Server(config)
        self._http_server = server
        address = f"{self._http_api.host}:{self._http_api.port}"
        sockets = None if self._http_api.sock is None else [_no_delay(self._http_api.sock)]
        self._http_task = asyncio.create_task(_serve_http(server, address, sockets))
        while not server.started:
            if self._http_task.done():
                self._http_task.result()
                raise RuntimeError("the HTTP API stopped during start-up")
            await asyncio.sleep(0.02)

    async def wait(self, stop: asyncio.Event) -> None:
        """Until `stop` is set, or the HTTP API ended by itself (e.g. it caught the signal)."""
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(stop.wait())]
        if self._http_task is not None:
            waiters.append(asyncio.shield(self._http_task))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    # ----------------------------------------------------------------------------------- stop
    async def stop(self) -> None:
        """Stop everything that started, in reverse order; safe to call more than once."""
        gc.unfreeze()  # what start froze is collectable again (a test process starts many roots)
        await self.stop_before_broker()
        if self._broker_connected:
            self._broker_connected = False
            await self.broker.stop()
        await self.release()

    async def stop_before_broker(self) -> None:
        """The health port, the HTTP API, the background tasks and the watcher (it publishes through
        the broker)."""
        health_server, self.health_server = self.health_server, None
        if health_server is not None:
            await health_server.stop()
        await self._stop_http()
        background, self.background = self.background, []
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        exhausted, self._exhausted = self._exhausted, None
        if exhausted is not None:
            await exhausted.stop()

    async def _stop_http(self) -> None:
        if self._http_server is not None:
            self._http_server.should_exit = True
        task, self._http_task, self._http_server = self._http_task, None, None
        if task is not None:
            with contextlib.suppress(Exception):
                await task

    async def release(self) -> None:
        """Close the stores, gateways and the admin connection."""
        await self.resources.close()


def freeze_startup_heap() -> None:
    """Move every object alive after start-up (the models, the tokenizers, Kiwi, litellm, the
    routes: ~200-300k objects) out of the garbage collector's reach. Why: CPython's full collection
    walks every tracked object, ~0.6 us each here, so each one paused the whole process for 150-200 ms
    (the recall API's own L0 calls too) several times a minute while sessions were ingested. These
    objects live as long as the process, so scanning them finds nothing; objects made later are still
    collected. Startup garbage is collected first so it is not kept for good."""
    gc.collect()
    gc.freeze()


class HttpApiStartFailed(RuntimeError):
    """The HTTP API did not start (its port is taken, or its app's start-up failed)."""


def _no_delay(sock: socket.socket) -> socket.socket:
    """A listening socket handed to the root, with Nagle off for every connection it accepts (Linux
    copies TCP_NODELAY from the listener). asyncio does that itself only for sockets whose `proto`
    says TCP, and `tiermem up` claims its port with a socket of its own (proto 0). With Nagle on, every
    L0 answer on a keep-alive connection (every agent's HTTP client) waits up to ~40 ms: uvicorn writes
    the headers and the body separately, and Nagle holds the body back until the client's delayed ACK
    of the headers."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


async def _serve_http(server: uvicorn.Server, address: str, sockets: list[socket.socket] | None) -> None:
    """uvicorn's serve(), with its start-up failure as an error of this task: uvicorn calls
    sys.exit() when it cannot bind or its lifespan fails, and a SystemExit in a task escapes the
    event loop, skipping the stop of everything already started (its reason is logged by uvicorn)."""
    try:
        await server.serve(sockets=sockets)
    except SystemExit:
        raise HttpApiStartFailed(f"the HTTP API did not start on {address} (the reason is logged above)") from None


def compose(
    settings: TierMemSettings,
    services: Sequence[ServiceDefinition[Any]],
    *,
    resources: Resources | None = None,
    name: str = "embedded",
    http_api: HttpApi | None = None,
) -> ServiceRoot:
    """The services wired on one broker, not started yet."""
    return ServiceRoot(settings, services, resources=resources, name=name, http_api=http_api)


async def bootstrap(
    settings: TierMemSettings,
    services: Sequence[ServiceDefinition[Any]],
    *,
    resources: Resources | None = None,
    name: str = "embedded",
    http_api: HttpApi | None = None,
) -> ServiceRoot:
    """The services (and the HTTP API) running; `await root.stop()` stops them all."""
    root = compose(settings, services, resources=resources, name=name, http_api=http_api)
    await root.start()
    return root


def create_service_app(definition: ServiceDefinition[Any], base: TierMemSettings | None = None) -> FastStream:
    """One service alone against external servers: how Kubernetes runs it (`tiermem serve NAME`,
    or `faststream run services.NAME.app:create_app --factory`). FastStream starts and stops the
    broker (and handles the signals); its lifespan hooks run the root's pieces around it."""
    settings = base or load_settings()
    # TIERMEM_LOG_LEVEL / TIERMEM_LOG_FORMAT / TIERMEM_LOG_CONTENT
    configure_logging_leniently(settings.log_level, settings.log_format, settings.log_content)
    root = compose(settings, [definition], name=definition.name)
    app = FastStream(root.broker)

    @app.on_startup
    async def _prepare() -> None:
        await root.prepare()

    @app.after_startup
    async def _start_after_broker() -> None:
        await root.start_after_broker()

    @app.on_shutdown
    async def _stop_before_broker() -> None:
        await root.stop_before_broker()

    @app.after_shutdown
    async def _release() -> None:
        await root.release()

    return app
