"""The health and metrics port of a consumer process (`tiermem serve NAME`): what Kubernetes probes
and Prometheus scrapes. The recall API has its own `/healthz`, `/readyz` and `/metrics` on its HTTP
port; consumers have no HTTP API, so the composition root serves this small one beside them.

- `/healthz` (liveness): answered by the process's own event loop, so a blocked or dead loop fails
  it, and 503 once the broker connection is closed for good. A connection that is *reconnecting*
  is still live: nats-py reconnects forever, and restarting every pod during a NATS outage would
  only add a crash loop to the outage.
- `/readyz` (readiness): the broker is connected and the stores answer (vector index and graph),
  each check bounded by `health_timeout_s`, every failure reported by name.
- `/metrics`: Prometheus exposition: the services' counters and the last readiness result per
  dependency, plus the process-wide default registry (process metrics, handler latency,
  redeliveries, dead letters, LLM tokens and cost, embedding time).

Served with aiohttp inside the running loop: it installs no signal handlers, so FastStream keeps
its graceful shutdown on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any

from aiohttp import web
from faststream.nats import NatsBroker
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from services.common.domain.owner import Owner
from services.common.runtime.provisioning import ConsumerSpec
from services.common.runtime.resources import Resources, ServiceContext

log = logging.getLogger(__name__)

DependencyCheck = Callable[[], Coroutine[Any, Any, None]]
_PROBE_OWNER = Owner("readyz", "readyz")


class ServiceCounters(Collector):
    """The counters every service keeps on its context (`ctx.count(...)`), as one Prometheus
    counter family labelled by service and event."""

    def __init__(self, contexts: Mapping[str, ServiceContext[Any]]) -> None:
        self._contexts = contexts

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "tiermem_service_events",
            "Events counted by a consumer service since the process started.",
            labels=["service", "event"],
        )
        for service, context in self._contexts.items():
            for event, value in sorted(context.counters.items()):
                family.add_metric([service, event], value)
        yield family


class ConsumerHealth:
    """Liveness, readiness and metrics of the consumer services of one process."""

    def __init__(
        self,
        broker: NatsBroker,
        resources: Resources,
        contexts: Mapping[str, ServiceContext[Any]],
        timeout_s: float,
        consumers: Sequence[ConsumerSpec] = (),
    ) -> None:
        self._broker = broker
        self._resources = resources
        self._consumers = list(consumers)
        self._timeout_s = timeout_s
        # This process's own series; `/metrics` adds the default registry's (process and platform
        # collectors, handler latency, redeliveries, dead letters, LLM and embedding instruments).
        self.registry = CollectorRegistry()
        self.registry.register(ServiceCounters(contexts))
        self._dependency_up = Gauge(
            "tiermem_dependency_up",
            "1 when the dependency answered the last readiness check, else 0.",
            ["dependency"],
            registry=self.registry,
        )
        self._pending = Gauge(
            "tiermem_consumer_pending",
            "Messages of the consumer's stream not yet delivered to it (its lag), at the last scrape.",
            ["consumer"],
            registry=self.registry,
        )
        self._ack_pending = Gauge(
            "tiermem_consumer_ack_pending",
            "Messages delivered to the consumer and not yet acknowledged, at the last scrape.",
            ["consumer"],
            registry=self.registry,
        )
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._checks: dict[str, DependencyCheck] = {
            "broker": self._broker_connected,
            "vector_index": lambda: _vector_index_answers(resources),
            "graph": lambda: _graph_answers(resources),
        }

    def live(self) -> str | None:
        """None when live, else why not."""
        connection = self._connection()
        if connection is None:
            return "the broker has no connection"
        if connection.is_closed:
            return "the broker connection is closed"
        return None

    async def readiness(self) -> dict[str, str]:
        """'ok' or the error, per dependency; all checks run concurrently, each bounded."""
        names = list(self._checks)
        outcomes = await asyncio.gather(*(self._run(name) for name in names))
        results = dict(zip(names, outcomes, strict=True))
        for name, outcome in results.items():
            self._dependency_up.labels(dependency=name).set(1 if outcome == "ok" else 0)
        return results

    async def _run(self, name: str) -> str:
        """One check, answered within the timeout. A check that runs longer is not cancelled (that
        could abandon a half-opened store connection) and not started twice: the next probe waits
        on the same attempt, so a hung dependency never piles up attempts."""
        task = self._inflight.get(name)
        if task is None or task.done():
            task = asyncio.create_task(self._checks[name](), name=f"readyz-{name}")
            self._inflight[name] = task
        done, _ = await asyncio.wait({task}, timeout=self._timeout_s)
        if not done:
            return f"no answer within {self._timeout_s:g}s"
        exc = task.exception()
        if exc is not None:  # readiness reports every failure, whatever its type
            return f"{type(exc).__name__}: {exc}"[:300]
        return "ok"

    async def refresh_lag(self) -> None:
        """Read pending and ack-pending of this process's consumers from JetStream (bounded by the
        health timeout; a consumer that cannot be read keeps its last values)."""
        if not self._consumers:
            return
        try:
            js = await asyncio.wait_for(self._resources.jetstream(), self._timeout_s)
            for spec in self._consumers:
                info = await asyncio.wait_for(js.consumer_info(spec.stream, spec.durable), self._timeout_s)
                self._pending.labels(consumer=spec.durable).set(info.num_pending or 0)
                self._ack_pending.labels(consumer=spec.durable).set(info.num_ack_pending or 0)
        except Exception as exc:  # a scrape must still answer while NATS is away
            log.info("consumer lag unavailable: %s: %s", type(exc).__name__, exc)

    async def close(self) -> None:
        """Cancel the checks still running (the process is stopping; its stores close next)."""
        inflight, self._inflight = self._inflight, {}
        for task in inflight.values():
            task.cancel()
        for task in inflight.values():
            with contextlib.suppress(BaseException):
                await task

    def _connection(self) -> Any:
        try:
            return self._broker.connection
        except Exception:  # FastStream raises IncorrectState before the first connect
            return None

    async def _broker_connected(self) -> None:
        connection = self._connection()
        if connection is None or not connection.is_connected:
            raise ConnectionError("the broker is not connected")
        await connection.flush(timeout=max(1, int(self._timeout_s)))


async def _vector_index_answers(resources: Resources) -> None:
    await (await resources.episodes()).count(_PROBE_OWNER)


async def _graph_answers(resources: Resources) -> None:
    await (await resources.graph()).search_entities(_PROBE_OWNER, "readyz", limit=1)


class HealthServer:
    """`ConsumerHealth` over HTTP on `host:port`, in the running event loop."""

    def __init__(self, health: ConsumerHealth, host: str, port: int) -> None:
        self.health = health
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        log.info("health and metrics on http://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        await self.health.close()

    async def _healthz(self, request: web.Request) -> web.Response:
        problem = self.health.live()
        if problem is None:
            return web.json_response({"status": "ok"})
        return web.json_response({"status": "not live", "reason": problem}, status=503)

    async def _readyz(self, request: web.Request) -> web.Response:
        checks = await self.health.readiness()
        ready = all(result == "ok" for result in checks.values())
        return web.json_response(
            {"status": "ready" if ready else "not ready", "checks": checks}, status=200 if ready else 503
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        await self.health.refresh_lag()
        body = generate_latest(self.health.registry) + generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
