"""The memory browser's pipeline page: lag per durable consumer, dead letters and LLM cost, from the
collector `tiermem stats` reads (services/common/runtime/stack_stats.py), with this process's own
`/metrics` series as the exposition. The figures are the whole stack's, never one tenant's users."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, status
from fastapi.responses import Response

from services.common.runtime.broker import BrokerUnavailable
from services.common.runtime.stack_stats import collect_stats
from services.recall_api.ui.rendering import Service, Session, error_page, is_operator, render

log = logging.getLogger(__name__)
pipeline_router = APIRouter(prefix="/ui", include_in_schema=False)


@pipeline_router.get("/pipeline")
async def pipeline_page(request: Request, session: Session, service: Service) -> Response:
    if not is_operator(request, session):
        # Whole-stack figures would tell one tenant about every other tenant's traffic and cost.
        message = "The pipeline page is for operators: its figures are every tenant's together."
        return error_page(request, status.HTTP_403_FORBIDDEN, message, session)
    try:
        stats = await collect_stats(service.settings, [], expositions=[service.metrics.prometheus()])
    except (BrokerUnavailable, TimeoutError) as exc:
        log.warning("memory browser: pipeline stats unavailable: %s", exc)
        message = "The broker cannot be reached now; retry shortly."
        return error_page(request, status.HTTP_503_SERVICE_UNAVAILABLE, message, session)
    # Stored counts are left out: they are every tenant's sizes, and a user's page has its own counts.
    return render(request, "pipeline.html", {"stats": stats}, session=session)
