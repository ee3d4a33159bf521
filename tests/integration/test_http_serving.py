"""What the HTTP layer adds to every recall call is kept small (issue 16, L0 at the embedding floor):
the composition root serves the API with uvicorn's httptools parser, not the pure-Python h11
fallback, and the /v1 dependencies run on the event loop, not in a worker thread each."""

from __future__ import annotations

import asyncio
import gc
import socket
from pathlib import Path

import fastapi.dependencies.utils
import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from services.cli.servers.net import claim_port, free_port
from services.common.gateways import llm as llm_gateway
from services.common.runtime.resources import Resources
from services.common.runtime.root import HttpApi, HttpApiStartFailed, compose
from services.common.runtime.settings import LlmSettings, TelemetrySettings, TierMemSettings
from services.common.stores.vector.edge import EdgeVectorIndex
from services.episodic_summarizer.handlers import DEFINITION as SUMMARIZER
from services.recall_api.app import create_app
from services.recall_api.settings import RecallApiSettings

pytestmark = pytest.mark.integration

API_KEY = "http-serving-key-0123456789abcdef"


async def test_the_composition_root_serves_http_with_httptools(tmp_path: Path) -> None:
    async def hello(_: object) -> PlainTextResponse:
        return PlainTextResponse("hello")

    app = Starlette(routes=[Route("/hello", hello)])
    port = free_port()
    # No store counting: this root has no stores to count, only the HTTP API.
    settings = TierMemSettings(data_dir=tmp_path, telemetry=TelemetrySettings(store_counts_interval_s=0))
    root = compose(settings, [], name="http-test", http_api=HttpApi(lambda _: app, "127.0.0.1", port, "warning"))
    await root.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            assert (await http.get("/hello")).text == "hello"
            # The keep-alive connection is still open: the server's connection object is the parser in use.
            server = root._http_server
            assert server is not None
            connections = list(server.server_state.connections)
            assert connections and all(isinstance(c, HttpToolsProtocol) for c in connections), connections
    finally:
        await root.stop()


def _listening_socket(kind: str) -> socket.socket:
    if kind == "claimed":  # as `tiermem up` claims its port before it starts anything
        return claim_port(free_port(), "the test API")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto 0: asyncio would leave Nagle on
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.mark.parametrize("listener", ["bound at start", "claimed", "proto 0"])
async def test_every_accepted_connection_has_nagle_off(tmp_path: Path, listener: str) -> None:
    """uvicorn writes an answer's headers and body separately: with Nagle on, the body waited for the
    client's delayed ACK (~40 ms on every keep-alive L0 call through `tiermem up`)."""

    async def hello(_: object) -> PlainTextResponse:
        return PlainTextResponse("hello")

    app = Starlette(routes=[Route("/hello", hello)])
    sock = None if listener == "bound at start" else _listening_socket(listener)
    port = free_port() if sock is None else int(sock.getsockname()[1])
    settings = TierMemSettings(data_dir=tmp_path, telemetry=TelemetrySettings(store_counts_interval_s=0))
    api = HttpApi(lambda _: app, "127.0.0.1", port, "warning", sock=sock)
    root = compose(settings, [], name="http-test", http_api=api)
    await root.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for _ in range(2):  # the second call on the same keep-alive connection
                assert (await http.get("/hello")).text == "hello"
            server = root._http_server
            assert server is not None
            connections = list(server.server_state.connections)
            assert connections
            for connection in connections:
                accepted = connection.transport.get_extra_info("socket")
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0, listener
    finally:
        await root.stop()
        if sock is not None:
            sock.close()


async def test_a_started_root_keeps_its_startup_heap_out_of_full_collections(tmp_path: Path) -> None:
    """Every object alive once the root has started (models, routes, imports) is frozen: CPython's full
    collections then walk only what came later, instead of pausing the process ~150-200 ms each time
    for objects that live as long as it does. Stopping the root makes them collectable again."""
    gc.unfreeze()
    app = Starlette(routes=[])
    settings = TierMemSettings(data_dir=tmp_path, telemetry=TelemetrySettings(store_counts_interval_s=0))
    root = compose(settings, [], name="http-test", http_api=HttpApi(lambda _: app, "127.0.0.1", free_port(), "warning"))
    alive_before_start = len(gc.get_objects())
    await root.start()
    try:
        assert gc.get_freeze_count() >= alive_before_start // 2
        # What a full collection walks now (gc.get_objects() leaves frozen objects out) is a small remainder.
        assert len(gc.get_objects()) < gc.get_freeze_count() // 10
    finally:
        await root.stop()
    assert gc.get_freeze_count() == 0


async def test_a_root_whose_services_call_the_llm_imports_litellm_before_it_freezes_the_heap(
    tmp_path: Path, stack_settings: TierMemSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Imported at the first session instead, litellm's objects would be outside the frozen heap and
    every full collection would walk them again. A root whose services never call the model (the
    recall API alone) does not import it at all: seconds of start-up and its memory for nothing."""
    monkeypatch.setattr(llm_gateway, "_litellm_module", None)
    imported_when_frozen: list[bool] = []
    freeze = gc.freeze

    def noting_freeze() -> None:
        imported_when_frozen.append(llm_gateway._litellm_module is not None)
        freeze()

    monkeypatch.setattr(gc, "freeze", noting_freeze)
    app = Starlette(routes=[])
    llm, telemetry = LlmSettings(model="openai/stub-model"), TelemetrySettings(store_counts_interval_s=0)
    alone = TierMemSettings(data_dir=tmp_path, llm=llm, telemetry=telemetry)
    api = HttpApi(lambda _: app, "127.0.0.1", free_port(), "warning")
    root = compose(alone, [], name="http-test", http_api=api)
    await root.start()
    await root.stop()
    assert imported_when_frozen == [False]

    root = compose(stack_settings.model_copy(update={"llm": llm, "telemetry": telemetry}), [SUMMARIZER])
    await root.start()
    await root.stop()
    assert imported_when_frozen == [False, True]


async def test_v1_dependencies_resolve_without_a_worker_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain `def` dependency is run by FastAPI in a worker thread (a thread hop per dependency per
    call); the tenant and service dependencies of every /v1 route are coroutines instead."""
    settings = RecallApiSettings(data_dir=tmp_path, api_keys={API_KEY: "acme"})
    app = create_app(settings, Resources(settings))
    hops: list[object] = []

    async def no_thread(call: object, *args: object, **kwargs: object) -> object:
        hops.append(call)
        raise AssertionError(f"dependency {call!r} ran in a worker thread")

    monkeypatch.setattr(fastapi.dependencies.utils, "run_in_threadpool", no_thread)
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://recall.test") as http:
        answer = await http.get("/v1/prompt/memory-instructions", headers=headers)
        refused = await http.get("/v1/prompt/memory-instructions", headers={"Authorization": "Bearer wrong-key"})
    assert answer.status_code == 200 and answer.json()["lang"] == "en"
    assert refused.status_code == 401
    assert hops == []


async def test_an_http_api_that_cannot_listen_fails_start_and_stops_everything(tmp_path: Path) -> None:
    """uvicorn exits the process when it cannot bind (SystemExit in its task, which would escape the
    event loop and skip every stop); the root turns that into an error of start(), after stopping what
    had started: the store counting task and the claim on the Edge data."""
    app = Starlette(routes=[])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = TierMemSettings(data_dir=tmp_path, telemetry=TelemetrySettings(store_counts_interval_s=60))
        root = compose(settings, [], name="http-test", http_api=HttpApi(lambda _: app, "127.0.0.1", port, "warning"))
        with pytest.raises(HttpApiStartFailed, match=f"127.0.0.1:{port}"):
            await root.start()
    assert not root.background
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    assert not [task for task in others if "store-counts" in task.get_name()], others
    free_again = EdgeVectorIndex(tmp_path / "qdrant-edge")
    free_again.claim()  # released: nobody holds the data any more
    await free_again.close()
