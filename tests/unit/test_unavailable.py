"""The one classification of store and broker failures (services/recall_api/http/unavailable.py): what is
an outage answers 503 in the error shape, everything else stays a 500 (a bug is never disguised as a
retryable outage). The outage probe (tests/faults/test_outage_probe.py) checks the same on the real
stack with real servers killed; this checks the classification itself, exception by exception."""

from __future__ import annotations

import httpx
import nats.errors
import pytest
import redis.exceptions
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response

from services.recall_api.errors import StoreUnavailable
from services.recall_api.http.unavailable import BROKER, GRAPH, install_unavailable_handler, unavailable_reason


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (nats.errors.OutboundBufferLimitError(), BROKER),
        (nats.errors.TimeoutError(), BROKER),
        (redis.exceptions.ConnectionError("Connection closed by server."), GRAPH),
        (redis.exceptions.BusyLoadingError("LOADING"), GRAPH),
        (StoreUnavailable("the graph store is not reachable"), "the graph store is not reachable"),
        (ConnectionRefusedError(111, "refused"), "a store or the broker did not answer; retry later"),
        (TimeoutError(), "a store or the broker did not answer; retry later"),
        (ExceptionGroup("fan-out", [nats.errors.TimeoutError(), ConnectionResetError()]), BROKER),
    ],
)
def test_store_and_broker_failures_are_outages(exc: BaseException, reason: str) -> None:
    assert unavailable_reason(exc) == reason


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("a bug"),
        KeyError("x"),
        redis.exceptions.ResponseError("errMsg: Invalid input"),  # a bad query is a bug, not an outage
        ExceptionGroup("fan-out", [nats.errors.TimeoutError(), ValueError("a bug")]),
    ],
)
def test_anything_else_is_not_an_outage(exc: BaseException) -> None:
    assert unavailable_reason(exc) is None


def _app(exc: Exception) -> FastAPI:
    app = FastAPI()
    install_unavailable_handler(app)

    @app.get("/v1/thing")
    async def thing() -> None:
        raise exc

    return app


async def _get(app: FastAPI) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.get("/v1/thing")


async def test_an_outage_is_a_503_in_the_error_shape() -> None:
    response = await _get(_app(redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379.")))
    assert response.status_code == 503
    assert response.json() == {"detail": GRAPH, "code": "unavailable", "errors": []}
    assert response.headers["retry-after"]
    assert "127.0.0.1" not in response.text, "the store's address stays in the log"


@pytest.mark.parametrize("exc", [ValueError("a bug"), ExceptionGroup("g", [OSError(), ValueError("a bug")])])
async def test_a_bug_stays_a_500(exc: Exception) -> None:
    assert (await _get(_app(exc))).status_code == 500


async def test_under_ui_the_page_handed_in_answers_an_outage() -> None:
    def page(request: Request, reason: str) -> Response:
        return HTMLResponse(f"<html>{request.url.path}: {reason}</html>", status_code=503)

    app = FastAPI()
    install_unavailable_handler(app, ui_page=page)

    @app.get("/ui/thing")
    @app.get("/v1/thing")
    async def thing() -> None:
        raise nats.errors.TimeoutError()

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        ui, api = await client.get("/ui/thing"), await client.get("/v1/thing")
    assert (ui.status_code, ui.text) == (503, f"<html>/ui/thing: {BROKER}</html>")
    assert ui.headers["retry-after"], "the browser's page says when to retry too"
    assert api.json() == {"detail": BROKER, "code": "unavailable", "errors": []}
