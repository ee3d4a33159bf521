"""OpenTelemetry tracing, set up once per process.

One global tracer provider: the broker's NATS middleware (FastStream), the LLM and embedding
gateways and the handlers all take their tracer from it, so the spans of one session, on every
consumer, hang in one trace (the trace context travels in the NATS message headers). Spans are
exported over OTLP only when an endpoint is configured; tests attach an in-memory exporter to the
same provider (`tracer_provider().add_span_processor(...)`)."""

from __future__ import annotations

import functools
import inspect
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any, cast

from faststream.nats.opentelemetry.provider import telemetry_attributes_provider_factory
from faststream.nats.response import NatsPublishCommand
from faststream.opentelemetry import TelemetryMiddleware, TelemetrySettingsProvider
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, ParentBased, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from services.common.runtime.settings import TelemetrySettings
from services.common.stores.graph.port import CypherExecutor
from services.common.stores.vector.port import VectorIndex

_lock = threading.Lock()
_exporting_to: set[str] = set()


class SwitchableSampler(Sampler):
    """The SDK's default sampling (a span is sampled when its parent is, roots always) that can be
    switched off for the whole process: spans then are non-recording, which is what the telemetry
    benchmark (`tiermem bench telemetry`) compares recording and exporting against in one run.
    Tracers keep the sampler they were created with, so the switch lives inside it."""

    def __init__(self) -> None:
        self.recording = True
        self._default = ParentBased(ALWAYS_ON)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if not self.recording:
            return SamplingResult(Decision.DROP)
        return self._default.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return f"SwitchableSampler({'on' if self.recording else 'off'})"


SAMPLER = SwitchableSampler()


def install_tracing(settings: TelemetrySettings, process_name: str = "embedded") -> TracerProvider:
    """The process's global SDK tracer provider, created on the first call (OpenTelemetry allows
    setting it once per process); later calls only add an OTLP exporter for an endpoint not yet
    exported to. Idempotent, so every entry point (root, broker factory, CLI) may call it; the first
    caller names the process (`tiermem-dedup` for `tiermem serve dedup`)."""
    with _lock:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider(
                resource=Resource.create({"service.name": f"{settings.service_name}-{process_name}"}), sampler=SAMPLER
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

# ---------------------------------------------------------------------------------------------
# NATS spans without owner ids
# ---------------------------------------------------------------------------------------------
TENANT_PLACEHOLDER = "{tenant}"
USER_PLACEHOLDER = "{user}"
_VERSION_TOKEN = re.compile(r"v[0-9]+")
# The attributes FastStream fills with a subject (besides the span name, which starts with one).
_SUBJECT_ATTRIBUTES = ("messaging.destination.name", "messaging.destination_publish.name")


def subject_template(subject: str) -> str:
    """A per-user subject with its tenant and user tokens replaced by placeholders:
    `memory.session.completed.v1.acme.alice` → `memory.session.completed.v1.{tenant}.{user}`,
    `memory.dlq.v1.dedup.acme.alice` → `memory.dlq.v1.dedup.{tenant}.{user}`. Every per-user subject
    (contracts/subjects.py) ends with the two owner tokens after its version token; a subject
    without them (`memory.prune.completed.v1`, an inbox) is returned as it is."""
    tokens = subject.split(".")
    version = next((i for i, token in enumerate(tokens) if _VERSION_TOKEN.fullmatch(token)), None)
    if version is None or len(tokens) - version - 1 < 2:
        return subject
    tokens[-2:] = [TENANT_PLACEHOLDER, USER_PLACEHOLDER]
    return ".".join(tokens)


class OwnerFreeNatsAttributes:
    """FastStream's NATS span names and attributes with every subject as its template: subjects
    carry the tenant and user ids (for per-user selection and purging), and spans are exported to
    a tracing backend that is no place for them (privacy, and one span name per user would also
    defeat grouping by operation). The message id and correlation id stay (generated ids)."""

    def __init__(self, inner: TelemetrySettingsProvider[Any, Any]) -> None:
        self._inner = inner
        self.messaging_system = inner.messaging_system

    def get_consume_attrs_from_message(self, msg: Any) -> dict[str, Any]:
        return _templated(self._inner.get_consume_attrs_from_message(msg))

    def get_consume_destination_name(self, msg: Any) -> str:
        return subject_template(self._inner.get_consume_destination_name(msg))

    def get_publish_attrs_from_cmd(self, cmd: Any) -> dict[str, Any]:
        return _templated(self._inner.get_publish_attrs_from_cmd(cmd))

    def get_publish_destination_name(self, cmd: Any) -> str:
        return subject_template(self._inner.get_publish_destination_name(cmd))


def _templated(attributes: dict[str, Any]) -> dict[str, Any]:
    for key in _SUBJECT_ATTRIBUTES:
        value = attributes.get(key)
        if isinstance(value, str):
            attributes[key] = subject_template(value)
    return attributes


def _owner_free_attributes(msg: Any) -> OwnerFreeNatsAttributes | None:
    inner = telemetry_attributes_provider_factory(msg)
    return None if inner is None else OwnerFreeNatsAttributes(inner)


def nats_tracing_middleware(
    settings: TelemetrySettings, provider: TracerProvider
) -> TelemetryMiddleware[NatsPublishCommand]:
    """FastStream's NATS tracing middleware (trace context in the message headers, publish and
    process spans) on `provider`; subjects appear as templates unless `record_owner_ids` is on."""
    factory: Any = telemetry_attributes_provider_factory if settings.record_owner_ids else _owner_free_attributes
    return TelemetryMiddleware[NatsPublishCommand](
        settings_provider_factory=factory, tracer_provider=provider, include_messages_counters=True
    )


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
