"""L0 under load, with and without a concurrent ingest: `tiermem bench load`.

Starts a real `tiermem up` (its own process: the stack the user runs) on a temporary data dir and a
loopback port, seeds it, then runs the same bounded closed-loop load twice: N clients sending L0 calls
(each a question not asked before) for T seconds while the pipeline is idle, then the same while a
batch of sessions is being consolidated. The result is the ratio of the two p99s in one run (these
machines are shared and noisy; absolute numbers mean little). Only 127.0.0.1 is ever addressed, every
loop is bounded in count and time, and the stack is stopped at the end whatever happens."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from contracts import SessionCompleted
from services.cli.servers.net import free_port
from services.common.runtime.root import freeze_startup_heap
from tiermem_lab.benchmarks.synthetic import live_question, synthetic_sessions
from tiermem_lab.evaluation.metrics import percentile

LOCAL_TENANT = "local"  # the tenant of the embedded stack's generated API key


class DistinctQuestions:
    """Every L0 call of a run asks a message no call asked before, so each one embeds its query as a
    live turn does. Cycling through a few fixed questions would let every call after the first few
    take its vector from the query-vector cache, timing L0 without its largest part (the embedding)
    and without that part's contention with the passages being embedded."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._asked: set[str] = set()

    def next(self) -> str:
        for _ in range(100):
            question = live_question(self._rng)
            if question not in self._asked:
                break
        else:  # never met in practice: the templates have far more forms than a run asks
            question = f"{question} ({len(self._asked)})"
        self._asked.add(question)
        return question


@dataclass
class PhaseResult:
    """Client-side latencies of one load phase."""

    name: str
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    pipeline_busy_at_end: bool = False

    def summary(self) -> dict[str, float | int | str | None]:
        return {
            "phase": self.name,
            "calls": len(self.latencies_ms),
            "errors": self.errors,
            "p50_ms": percentile(self.latencies_ms, 0.50),
            "p99_ms": percentile(self.latencies_ms, 0.99),
            "max_ms": max(self.latencies_ms, default=None),
        }


@dataclass
class LoadResult:
    clients: int
    duration_s: float
    idle: PhaseResult
    ingesting: PhaseResult
    ingest_sessions: int

    @property
    def p99_ratio(self) -> float | None:
        idle, busy = percentile(self.idle.latencies_ms, 0.99), percentile(self.ingesting.latencies_ms, 0.99)
        return None if not idle or busy is None else busy / idle

    def as_json(self) -> dict[str, object]:
        return {
            "clients": self.clients,
            "duration_s": self.duration_s,
            "ingest_sessions": self.ingest_sessions,
            "phases": [self.idle.summary(), self.ingesting.summary()],
            "p99_ratio_ingesting_over_idle": self.p99_ratio,
            "ingest_still_running_at_end": self.ingesting.pipeline_busy_at_end,
        }


class EmbeddedStack:
    """`tiermem up` as a child process in its own process group."""

    def __init__(self, data_dir: Path, port: int, extra_env: Mapping[str, str] | None = None) -> None:
        self.data_dir, self.port = data_dir, port
        self.extra_env = dict(extra_env or {})
        self.process: subprocess.Popen[bytes] | None = None

    def launch(self) -> None:
        env = {**os.environ, "TIERMEM_DATA_DIR": str(self.data_dir), **self.extra_env}
        argv = [sys.executable, "-m", "services.cli", "up", "--data-dir", str(self.data_dir)]
        self.process = subprocess.Popen(
            [*argv, "--http-port", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    async def start(self, timeout_s: float = 180.0) -> str:
        await asyncio.to_thread(self.launch)
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}", timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"tiermem up exited with {self.process.returncode} during start-up")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        return (self.data_dir / "dev-api-key").read_text(encoding="utf-8").strip()
                await asyncio.sleep(0.2)
        raise TimeoutError(f"tiermem up was not ready within {timeout_s:.0f} s")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


async def _client_loop(
    http: httpx.AsyncClient, number: int, stop_at: float, result: PhaseResult, questions: DistinctQuestions
) -> None:
    calls = 0
    while time.monotonic() < stop_at and calls < 100_000:
        body = {"user_id": f"u{(number + calls) % 10}", "message": questions.next(), "max_entries": 3}
        started = time.perf_counter()
        try:
            response = await http.post("/v1/recall/auto", json=body)
            ok = response.status_code == 200
        except httpx.HTTPError:
            ok = False
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if ok:
            result.latencies_ms.append(elapsed_ms)
        else:
            result.errors += 1
        calls += 1


async def _run_phase(
    base_url: str, key: str, name: str, clients: int, duration_s: float, questions: DistinctQuestions
) -> PhaseResult:
    result = PhaseResult(name)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30.0, limits=limits) as http:
        stop_at = time.monotonic() + duration_s
        await asyncio.gather(*(_client_loop(http, number, stop_at, result, questions) for number in range(clients)))
    return result


async def publish_events(data_dir: Path, events: Sequence[SessionCompleted]) -> None:
    from services.cli.ingest import publish_sessions
    from services.common.runtime.settings import load_settings

    await publish_sessions(load_settings(data_dir), list(events))


async def _pipeline_busy(data_dir: Path) -> bool:
    from services.cli.consolidation import backlog
    from services.cli.stack import all_services
    from services.common.runtime.settings import load_settings

    return any((await backlog(load_settings(data_dir), all_services())).values())


async def wait_idle(data_dir: Path, timeout_s: float) -> None:
    from services.cli.consolidation import wait_until_idle
    from services.cli.stack import all_services
    from services.common.runtime.settings import load_settings

    await wait_until_idle(load_settings(data_dir), all_services(), timeout_s=timeout_s)


def local_sessions(count: int, seed: int) -> list[SessionCompleted]:
    return [
        event.model_copy(update={"tenant_id": LOCAL_TENANT})
        for event in synthetic_sessions(count, users=10, seed=seed, tenant_id=LOCAL_TENANT)
    ]


async def run_load_bench(
    *, clients: int = 20, duration_s: float = 30.0, seed_sessions: int = 40, ingest_sessions: int = 200, seed: int = 7
) -> LoadResult:
    """Seed, then the idle phase, then the same load while `ingest_sessions` new sessions are consolidated."""
    if not 1 <= clients <= 200 or not 1.0 <= duration_s <= 600.0:
        raise ValueError("clients must be 1-200 and the duration 1-600 s")
    directory = Path(tempfile.mkdtemp(prefix="tiermem-bench-load-"))
    port = free_port()
    stack = EmbeddedStack(directory, port)
    try:
        key = await stack.start()
        base_url = f"http://127.0.0.1:{port}"
        await publish_events(directory, local_sessions(seed_sessions, seed))
        await wait_idle(directory, timeout_s=1800)
        freeze_startup_heap()  # this client's own full collections (~60-80 ms) would be timed as the server's
        questions = DistinctQuestions(seed)
        await _run_phase(base_url, key, "warm-up", clients, min(5.0, duration_s), questions)
        idle = await _run_phase(base_url, key, "idle", clients, duration_s, questions)
        await publish_events(directory, local_sessions(ingest_sessions, seed + 1))
        ingesting = await _run_phase(base_url, key, "while ingesting", clients, duration_s, questions)
        ingesting.pipeline_busy_at_end = await _pipeline_busy(directory)
    finally:
        stack.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return LoadResult(clients, duration_s, idle, ingesting, ingest_sessions)


def render_load(result: LoadResult) -> str:
    lines = [
        f"L0 POST /v1/recall/auto, {result.clients} clients, {result.duration_s:.0f} s per phase, every message new "
        "(client-side ms)"
    ]
    lines.append(f"{'phase':<18}{'calls':>8}{'errors':>8}{'p50':>9}{'p99':>9}{'max':>9}")
    for phase in (result.idle, result.ingesting):
        row = phase.summary()

        def ms(value: object) -> str:
            return f"{value:9.1f}" if isinstance(value, float) else f"{'-':>9}"

        lines.append(
            f"{phase.name:<18}{row['calls']:>8}{row['errors']:>8}{ms(row['p50_ms'])}{ms(row['p99_ms'])}{ms(row['max_ms'])}"
        )
    ratio = result.p99_ratio
    verdict = "met" if ratio is not None and ratio <= 2.0 and not result.ingesting.errors else "NOT met"
    ratio_text = "-" if ratio is None else f"{ratio:.2f}x"
    lines.append(f"p99 while ingesting / p99 idle: {ratio_text} (target <= 2x, 0 errors): {verdict}")
    if not result.ingesting.pipeline_busy_at_end:
        lines.append("note: the ingest finished before the phase ended; raise --ingest-sessions for a longer overlap")
    return "\n".join(lines)


def run_and_print(
    out: Path | None, *, clients: int, duration_s: float, seed_sessions: int, ingest_sessions: int, seed: int
) -> LoadResult:
    result = asyncio.run(
        run_load_bench(
            clients=clients,
            duration_s=duration_s,
            seed_sessions=seed_sessions,
            ingest_sessions=ingest_sessions,
            seed=seed,
        )
    )
    print(render_load(result))
    if out is not None:
        out.write_text(json.dumps(result.as_json(), indent=2) + "\n", encoding="utf-8")
    return result
