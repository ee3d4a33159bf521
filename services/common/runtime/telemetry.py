"""OpenTelemetry tracing: trace context always travels in message headers (FastStream's
middleware); spans are exported over OTLP only when an endpoint is configured."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from services.common.runtime.settings import TelemetrySettings


def build_tracer_provider(settings: TelemetrySettings, service_name: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": f"{settings.service_name}-{service_name}"}))
    if settings.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint)))
    return provider
