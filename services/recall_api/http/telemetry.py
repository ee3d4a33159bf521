"""Server spans and request metrics of the recall API (and its MCP endpoint), as plain ASGI
middleware: `opentelemetry-instrumentation-fastapi` is not a dependency, and this is all of it
that is needed here.

Each HTTP request gets a SERVER span (its parent from a `traceparent` header, when the caller sent
one) named by method and route template, never the raw path (it carries ids), and is counted in
`tiermem_http_requests` / `tiermem_http_request_seconds` by method, route and status. No tenant,
user, query or body in a label or attribute."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HTTP_REQUESTS = Counter(
    "tiermem_http_requests", "HTTP requests by method, route and status.", ["method", "route", "status"]
)
HTTP_SECONDS = Histogram(
    "tiermem_http_request_seconds",
    "HTTP request duration in seconds, by method and route.",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
_tracer = trace.get_tracer(__name__)
# The global propagator (OTEL_PROPAGATORS, or `propagate.set_global_textmap`) may change after import:
# its header names are looked up per request, and re-derived only when the propagator object changes.
_propagation_names: tuple[object, frozenset[bytes]] = (None, frozenset())


def _propagation_header_names() -> frozenset[bytes]:
    global _propagation_names
    textmap = propagate.get_global_textmap()
    if _propagation_names[0] is not textmap:
        _propagation_names = (textmap, frozenset(name.lower().encode("latin-1") for name in textmap.fields))
    return _propagation_names[1]


def parent_context(raw_headers: Iterable[tuple[bytes, bytes]]) -> Context:
    """The caller's trace context from the propagation headers (`traceparent`, `tracestate`, baggage);
    a new root without them. Only those headers are decoded, not every header of every request."""
    names = _propagation_header_names()
    carrier = {name.decode("latin-1"): value.decode("latin-1") for name, value in raw_headers if name.lower() in names}
    # Without a propagation header, extraction would return an empty context: skip it.
    return propagate.extract(carrier) if carrier else Context()


def route_of(scope: Scope) -> str:
    """The matched route's template ("/v1/memories/{memory_id}"), or "unmatched" (a 404 must not
    create one series per probed path)."""
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"


class HttpTelemetry:
    """ASGI middleware: one server span and the request metrics per HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = str(scope.get("method", "GET"))
        status_code = 500  # what the client sees when the app raises before starting a response
        started = time.monotonic()

        async def send_with_status(message: Message) -> None:
            nonlocal status_code
            if message["type"] == "http.response.start":
                status_code = int(message["status"])
            await send(message)

        with _tracer.start_as_current_span(
            method, context=parent_context(scope.get("headers", ())), kind=SpanKind.SERVER, record_exception=False
        ) as span:
            try:
                await self.app(scope, receive, send_with_status)
            finally:
                route = route_of(scope)
                span.update_name(f"{method} {route}")
                span.set_attributes(
                    {"http.request.method": method, "http.route": route, "http.response.status_code": status_code}
                )
                if status_code >= 500:
                    span.set_status(Status(StatusCode.ERROR))
                HTTP_REQUESTS.labels(method=method, route=route, status=str(status_code)).inc()
                HTTP_SECONDS.labels(method=method, route=route).observe(time.monotonic() - started)
