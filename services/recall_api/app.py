"""App factory of the recall API: `uvicorn services.recall_api.app:create_app --factory`.

All start-up work (model loading, the MCP session manager, the recall-count worker) happens in the
FastAPI lifespan, so building the app is cheap and side-effect free."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.routing import Route

from services.common.runtime.resources import Resources
from services.common.runtime.root import ServiceRoot, compose
from services.common.runtime.settings import load_settings
from services.recall_api.auth import check_api_keys
from services.recall_api.http.body_deadline import BodyReadDeadline
from services.recall_api.http.guard import RequestGuard, install_error_handlers
from services.recall_api.http.procedure_routes import procedures_router
from services.recall_api.http.routes import router
from services.recall_api.http.telemetry import HttpTelemetry
from services.recall_api.http.throttle import FailureThrottle
from services.recall_api.http.turn_routes import turn_router
from services.recall_api.http.unavailable import install_unavailable_handler
from services.recall_api.http.write_routes import write_router
from services.recall_api.mcp.server import build_mcp_server, streamable_http_endpoint
from services.recall_api.service import RecallService
from services.recall_api.settings import RecallApiSettings
from services.recall_api.ui import install_ui
from services.recall_api.ui.rendering import outage_page

log = logging.getLogger(__name__)


def create_app(settings: RecallApiSettings | None = None, resources: Resources | None = None) -> FastAPI:
    """The recall API with its MCP endpoint. `resources` may be shared with other services running
    in the same process (the embedded stack); the app then leaves closing them to their owner.
    Without `settings`, the shared values come from `resources.settings` (else `load_settings()`)
    and the recall-specific ones from the environment (`TIERMEM_L0_MIN_SCORE`, ...)."""
    if settings is None:
        # Shared resources carry the process's settings (the embedded stack); else read them.
        base = resources.settings if resources is not None else load_settings()
        settings = base if isinstance(base, RecallApiSettings) else RecallApiSettings(**base.model_dump())
    check_api_keys(settings.api_keys)
    # Alone, the app owns a composition root without services: its resources are built and
    # closed the same way as in every other shape.
    root: ServiceRoot | None = None
    if resources is None:
        root = compose(settings, [], name="recall-api")
        resources = root.resources
    service = RecallService(settings, resources)
    mcp = build_mcp_server(service)
    mcp_endpoint = streamable_http_endpoint(mcp, settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not settings.api_keys:
            log.warning("recall-api has no API keys configured: every /v1 and MCP request will be refused (401)")
        if root is not None:
            await root.start()
        await service.start()
        service.start_idle_closer()  # here, not in `tiermem mcp`: the served app always runs
        try:
            async with mcp.session_manager.run():
                yield
        finally:
            await service.stop()
            if root is not None:
                await root.stop()

    app = FastAPI(
        title="tiermem recall API",
        version="0.1.0",
        description=(
            "Long-term memory for agents: L0 auto-inject, L1 search and expand, L2 graph, fact saving. "
            "Every /v1 request needs `Authorization: Bearer <api key>`; the key decides the tenant. "
            f"MCP (streamable HTTP) is served at `{settings.mcp_path}` with the same keys."
        ),
        lifespan=lifespan,
        # FastAPI's own OpenTelemetry instrumentation switches itself on once a tracer provider is set
        # (every composition root sets one): a second SERVER span per request beside HttpTelemetry's,
        # three operation spans, ~0.3-0.5 ms a request. HttpTelemetry is the one server span we keep.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.recall_service = service
    # One budget of wrong keys per client, spent by the Bearer guard and the /ui login form alike.
    app.state.auth_throttle = FailureThrottle(
        per_minute=settings.auth_failures_per_minute,
        burst=settings.auth_failure_burst,
        max_clients=settings.auth_throttle_max_clients,
    )
    app.include_router(router)
    app.include_router(write_router)
    app.include_router(turn_router)
    app.include_router(procedures_router)
    # The memory browser under /ui (its own cookie sessions; not behind the Bearer guard).
    install_ui(app, max_sessions=settings.ui_max_sessions)
    install_error_handlers(app)
    install_unavailable_handler(app, ui_page=outage_page)  # any store or broker failure: 503, never a 500
    app.add_middleware(
        RequestGuard,
        api_keys=settings.api_keys,
        max_body_bytes=settings.max_request_bytes,
        protected=protected_paths(settings),
        throttle=app.state.auth_throttle,
    )
    app.add_middleware(BodyReadDeadline, timeout_s=settings.body_read_timeout_s)
    app.add_middleware(HttpTelemetry)  # outermost: refused and failed requests are spans and metrics too
    app.router.routes.append(Route(settings.mcp_path, endpoint=mcp_endpoint, include_in_schema=False))
    return app


def protected_paths(settings: RecallApiSettings) -> list[str]:
    """The path prefixes that need the API key: /v1 and MCP always, /metrics and the API docs when
    the settings say so (both stay open by default: Prometheus scrapes without a key)."""
    paths = ["/v1", settings.mcp_path]
    if settings.metrics_require_key:
        paths.append("/metrics")
    if settings.docs_require_key:
        paths += ["/docs", "/redoc", "/openapi.json"]
    return paths
