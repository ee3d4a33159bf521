"""HTTP timing for the scale benchmark (scale.py): the recall API on a real uvicorn, the clients that
time it (httpx in the server's loop, and the client in another process: http_driver.py) and the
query-embedding floor each L0 call is compared with."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from services.cli.servers.net import free_port
from services.common.gateways.embedder import Embedder
from services.common.runtime.resources import Resources
from services.common.runtime.root import freeze_startup_heap
from services.recall_api.app import create_app
from services.recall_api.settings import RecallApiSettings
from tiermem_lab.benchmarks.http_driver import OutOfProcessClient
from tiermem_lab.evaluation.metrics import percentile

API_KEY = "bench-scale-key-0123456789abcdef"
TENANT = "bench"


@dataclass
class Latencies:
    samples_ms: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float | int | None]:
        return {
            "calls": len(self.samples_ms),
            "p50_ms": _round(percentile(self.samples_ms, 0.50)),
            "p99_ms": _round(percentile(self.samples_ms, 0.99)),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


@contextlib.asynccontextmanager
async def serving(resources: Resources, work: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The recall API on a real uvicorn on a free loopback port, and a client with the API key."""
    settings = RecallApiSettings(data_dir=work, api_keys={API_KEY: TENANT})
    app = create_app(settings, resources)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", http="httptools")
    server = uvicorn.Server(config)  # the HTTP parser the production entry points use (root.py)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 120
    while not server.started:
        if task.done():
            task.result()
        if time.monotonic() > deadline:
            raise TimeoutError("the recall API did not start within 120 s")
        await asyncio.sleep(0.05)
    freeze_startup_heap()  # as the composition root does once the API is up (root.py)
    try:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=120) as http:
            yield http
    finally:
        gc.unfreeze()
        server.should_exit = True
        await task


async def time_calls(
    http: httpx.AsyncClient, path: str, bodies: Sequence[dict[str, Any]], *, warmup: int = 3
) -> tuple[Latencies, list[dict[str, Any]]]:
    """Sequential calls; the first `warmup` are not timed. Returns latencies and the answers."""
    latencies = Latencies()
    answers: list[dict[str, Any]] = []
    for number, body in enumerate([*bodies[:warmup], *bodies]):
        started = time.perf_counter()
        response = await http.post(path, json=body)
        elapsed = (time.perf_counter() - started) * 1000
        response.raise_for_status()
        if number >= warmup:
            latencies.samples_ms.append(elapsed)
            answers.append(response.json())
    return latencies, answers


async def embedding_floor(embedder: Embedder, texts: Sequence[str]) -> Latencies:
    """The query embedding alone, for the same texts, sequentially."""
    latencies = Latencies()
    for text in texts:
        started = time.perf_counter()
        await embedder.embed_query(text)
        latencies.samples_ms.append((time.perf_counter() - started) * 1000)
    return latencies


async def healthz_round_trips(http: httpx.AsyncClient, driver: OutOfProcessClient, calls: int = 100) -> dict[str, Any]:
    """A `/healthz` round trip (no auth, no store, no model): the HTTP stack alone, from both clients."""
    in_loop, out_of_process = Latencies(), Latencies()
    for _ in range(calls):
        started = time.perf_counter()
        (await http.get("/healthz")).raise_for_status()
        in_loop.samples_ms.append((time.perf_counter() - started) * 1000)
        status, elapsed, _ = await driver.call("GET", "/healthz")
        if status != 200:
            raise RuntimeError(f"/healthz answered {status}")
        out_of_process.samples_ms.append(elapsed)
    return {"out_of_process": out_of_process.summary(), "in_loop": in_loop.summary()}


async def driven_calls(
    driver: OutOfProcessClient, embedder: Embedder, bodies: Sequence[dict[str, Any]], *, warmup: int = 3
) -> dict[str, Any]:
    """L0 from the client in another process (the agent's shape, as `recall_phase` times `l0`), each
    call right after its own query-embedding floor sample of the same text; p50/p99 of both and their
    ratios (same run, same load)."""
    floor, calls = Latencies(), Latencies()
    for number, body in enumerate([*bodies[:warmup], *bodies]):
        sample = await embedding_floor(embedder, [str(body["message"])])
        status, elapsed, answer = await driver.call("POST", "/v1/recall/auto", body)
        if status != 200:
            raise RuntimeError(f"L0 answered {status}: {answer[:200]}")
        if number >= warmup:
            floor.samples_ms += sample.samples_ms
            calls.samples_ms.append(elapsed)
    result: dict[str, Any] = {**calls.summary(), "query_embedding": floor.summary()}
    for quantile in ("p50_ms", "p99_ms"):
        base, measured = floor.summary()[quantile], calls.summary()[quantile]
        result[f"over_embedding_{quantile[:3]}"] = round(measured / base, 2) if base and measured else None
    return result
