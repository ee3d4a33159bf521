"""OpenTelemetry tracing, set up once per process.

One global tracer provider: the broker's NATS middleware (FastStream), the LLM and embedding
gateways and the handlers all take their tracer from it, so the spans of one session, on every
consumer, hang in one trace (the trace context travels in the NATS message headers). Spans are
exported over OTLP only when an endpoint is configured; tests attach an in-memory exporter to the
same provider (`tracer_provider().add_span_processor(...)`)."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Mapping
from typing import Any, cast

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

from services.common.runtime.settings import TelemetrySettings
from services.common.stores.graph.port import CypherExecutor
from services.common.stores.vector.port import VectorIndex

_lock = threading.Lock()
_exporting_to: set[str] = set()


def install_tracing(settings: TelemetrySettings, process_name: str = "embedded") -> TracerProvider:
    """The process's global SDK tracer provider, created on the first call (OpenTelemetry allows
    setting it once per process); later calls only add an OTLP exporter for an endpoint not yet
    exported to. Idempotent, so every entry point (root, broker factory, CLI) may call it; the first
    caller names the process (`tiermem-dedup` for `tiermem serve dedup`)."""
    with _lock:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider(
                resource=Resource.create({"service.name": f"{settings.service_name}-{process_name}"})
            )
            trace.set_tracer_provider(provider)
            provider = trace.get_tracer_provider()
            if not isinstance(provider, TracerProvider):  # another library set a non-SDK provider first
                raise RuntimeError(f"the global tracer provider is {type(provider).__name__}, not the SDK's")
        endpoint = settings.otlp_endpoint
        if endpoint and endpoint not in _exporting_to:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
            _exporting_to.add(endpoint)
        return provider


def tracer_provider() -> TracerProvider:
    """The global SDK provider (installed with default settings if nothing installed it yet)."""
    return install_tracing(TelemetrySettings())


_tracer = trace.get_tracer(__name__)


class TracedCypherExecutor:
    """A graph executor whose every query is a CLIENT span (`db.system.name`, the Cypher clause
    that starts it as `db.operation.name`); never the query parameters (they are memory text)."""

    def __init__(self, inner: CypherExecutor, system: str) -> None:
        self.inner = inner
        self._system = system

    async def bootstrap(self) -> None:
        await self.inner.bootstrap()

    async def run(self, query: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        operation = query.lstrip().split(None, 1)[0].upper() if query.strip() else "QUERY"
        with _tracer.start_as_current_span(f"{operation} graph", kind=SpanKind.CLIENT) as span:
            span.set_attributes({"db.system.name": self._system, "db.operation.name": operation})
            rows = await self.inner.run(query, params)
            span.set_attribute("db.response.returned_rows", len(rows))
            return rows

    async def ping(self) -> bool:
        return await self.inner.ping()

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:  # backend-specific extras (e.g. FalkorDB's delete_graph)
        return getattr(self.inner, name)


class _TracedVectorIndex:
    """Every coroutine method of a vector index as a CLIENT span: `db.system.name`, the method as
    `db.operation.name` and the collection; never an owner, a payload or a vector."""

    def __init__(self, inner: object, system: str) -> None:
        self._inner = inner
        self._system = system

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(attribute):
            return attribute

        @functools.wraps(attribute)
        async def traced(*args: Any, **kwargs: Any) -> Any:
            with _tracer.start_as_current_span(f"{name} vector", kind=SpanKind.CLIENT) as span:
                span.set_attributes({"db.system.name": self._system, "db.operation.name": name})
                if args and isinstance(args[0], str):
                    span.set_attribute("db.collection.name", args[0])
                return await attribute(*args, **kwargs)

        return traced


def traced_vector_index(index: VectorIndex, system: str) -> VectorIndex:
    """`index` with a span around every store call (the port is wide; a proxy keeps every method)."""
    return cast("VectorIndex", _TracedVectorIndex(index, system))
