"""L0 through an index-maintenance window: `tiermem bench maintenance`.

For each index-build mode (never / background / inline — inline is the old behaviour and the same-run
baseline), a real `tiermem up` (its own process: the stack users run, and a frozen GIL there cannot
freeze this client) is started on a data dir whose episode collection was pre-seeded with `points`
points and whose build threshold is `points`. This client sends L0 calls over HTTP at a steady rate
(open loop: one call every 1/rate s whatever the answers do, so a stall shows as late answers, not as
fewer calls) and probes /readyz, then ingests one session through the pipeline: its episode is the
write that crosses the threshold, as in production. Mode `compaction` (not in the default set) runs
the stack with builds "never" and instead erases a quarter of the seeded users over HTTP (DELETE
/v1/users/{id}); their deleted points start the child-process compaction, whose copy is swapped in,
while the load asks the other users. The window ends when the pipeline is idle and, in background
and compaction mode, the new generation is swapped in; the load goes on for a few seconds more.

The client must not stall itself: a stalled client loop sends no calls and times the ones in flight
as slow, which reads as server latency (measured: the first publish imported the CLI's pipeline
modules on the load's event loop, 1.2-2.4 s of "L0 latency" the server never had). So the window's
control (publish, wait for idle, poll for the swap) runs on its own event loop in a thread, its
modules are imported before the load starts, and the client's own loop lag is measured and printed:
a max L0 only counts if the client lag stayed far below it.

Seeding writes straight into the Edge shard, in batches over many users (not through the pipeline nor
EdgeVectorIndex.upsert), with a fast deterministic embedder (fast_embedder.py);
the timed L0 calls embed their queries with the real model. Only 127.0.0.1 is addressed, every wait
is bounded, and each stack is stopped whatever happens."""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import qdrant_edge as qe

from services.cli.servers.net import free_port
from services.common.domain.owner import Owner
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.root import freeze_startup_heap
from services.common.stores.vector import edge_builds
from services.common.stores.vector.adapter_support import DENSE_VECTOR, SPARSE_VECTOR, owned_payload, point_id
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.edge_window import stamp_window_key
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES, VectorRecord
from tiermem_lab.benchmarks.fast_embedder import FAST_EMBEDDER_NOTE, HashEmbedder
from tiermem_lab.benchmarks.load import LOCAL_TENANT, EmbeddedStack, local_sessions, publish_events, wait_idle
from tiermem_lab.benchmarks.recall import Corpus, base_sentences, episode_records, query_for
from tiermem_lab.evaluation.metrics import percentile

MODES = ("inline", "background", "never")  # the default set
# Not in the default set: it measures a compaction swap, not a build.
ALL_MODES = (*MODES, "compaction")
# Compaction: the window erases this share of the seeded users (DELETE /v1/users/{id}); their points
# deleted reach the 20% at which the child-process compaction starts ("never" mode), and it swaps in.
_ERASED_SHARE = 0.25
_SLOW_MS = 100.0
_CLIENT_STALL_MS = 20.0
_READYZ_TIMEOUT_S = 1.0
_READYZ_EVERY_S = 0.25
_CALL_TIMEOUT_S = 600.0
_WINDOW_LIMIT_S = 3600.0
_SEED_BATCH = 2_000  # points per direct upsert when seeding


@dataclass
class ModeResult:
    """What the client saw in one mode."""

    mode: str
    points: int
    latencies_ms: list[float] = field(default_factory=list)
    # When each answered call started (monotonic s), parallel to latencies_ms: which phase a slow call
    # fell in (before the window, inside it, after it) tells the ingest's share from the machine's.
    started_at: list[float] = field(default_factory=list)
    window_start: float = 0.0
    window_end: float = 0.0
    seeding_s: float = 0.0
    client_lag_max_ms: float = 0.0  # the longest the client's own event loop was late (should be ~0)
    # When the client's loop was late by more than _CLIENT_STALL_MS: (from, to) monotonic s. A call in
    # flight then is timed partly on the client's stall, so the "clean" maximum leaves it out.
    client_stalls: list[tuple[float, float]] = field(default_factory=list)
    errors: int = 0
    readyz_probes: int = 0
    readyz_unanswered: int = 0
    readyz_longest_silence_s: float = 0.0
    window_s: float = 0.0

    def phase_max_ms(self, phase: str) -> float | None:
        """The slowest call that started before, inside or after the maintenance window."""
        inside = [
            latency
            for latency, started in zip(self.latencies_ms, self.started_at, strict=True)
            if _phase(started, self.window_start, self.window_end) == phase
        ]
        return max(inside, default=None)

    def clean_latencies_ms(self) -> list[float]:
        """Latencies of the calls that no client stall overlapped: what the server alone is answerable for."""
        return [
            latency
            for latency, started in zip(self.latencies_ms, self.started_at, strict=True)
            if not any(start < started + latency / 1000.0 and started < end for start, end in self.client_stalls)
        ]

    def slowest(self, count: int) -> list[tuple[float, float]]:
        """The `count` slowest calls as (start relative to the window's start in s, latency ms)."""
        pairs = sorted(zip(self.latencies_ms, self.started_at, strict=True), reverse=True)[:count]
        return [(round(started - self.window_start, 2), round(latency, 1)) for latency, started in pairs]

    def summary(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "points": self.points,
            "calls": len(self.latencies_ms),
            "errors": self.errors,
            "p50_ms": percentile(self.latencies_ms, 0.50),
            "p99_ms": percentile(self.latencies_ms, 0.99),
            "max_ms": max(self.latencies_ms, default=None),
            "max_before_window_ms": self.phase_max_ms("before"),
            "max_in_window_ms": self.phase_max_ms("window"),
            "max_after_window_ms": self.phase_max_ms("after"),
            "slowest_calls_s_ms": self.slowest(5),
            "seeding_s": round(self.seeding_s, 1),
            "client_lag_max_ms": round(self.client_lag_max_ms, 1),
            "client_stalls": len(self.client_stalls),
            "max_clean_ms": max(self.clean_latencies_ms(), default=None),
            "p99_clean_ms": percentile(self.clean_latencies_ms(), 0.99),
            "calls_clean": len(self.clean_latencies_ms()),
            "calls_over_100ms": sum(1 for value in self.latencies_ms if value > _SLOW_MS),
            "readyz_probes": self.readyz_probes,
            "readyz_unanswered": self.readyz_unanswered,
            "readyz_answered_throughout": self.readyz_unanswered == 0,
            "readyz_longest_silence_s": round(self.readyz_longest_silence_s, 2),
            "maintenance_window_s": round(self.window_s, 1),
        }


def _phase(started: float, window_start: float, window_end: float) -> str:
    if started < window_start:
        return "before"
    return "window" if started <= window_end else "after"


def _corpus(count: int, rng: random.Random, keywords: KeywordEncoder) -> Corpus:
    embedder = HashEmbedder()
    bases = base_sentences(count, rng)
    dense = np.asarray([embedder.vector(base.text) for base in bases], dtype=np.float32)
    return Corpus(bases=bases, dense=dense, sparse=[keywords.encode_document(base.text) for base in bases])


async def seed_edge(edge_dir: Path, *, points: int, users: int, seed: int) -> list[tuple[str, str]]:
    """`points` episodes over `users` users of the stack's tenant, unindexed; returns one L0 question
    per user (user id, message) naming one of that user's episodes.

    The collections (and their payload indexes) are created through EdgeVectorIndex; the episodes are
    then written straight into the shard in batches of many users' points. Going through
    `EdgeVectorIndex.upsert` costs one owner-checked call per user (measured 1.25 ms per point, 125 s
    for 100k points over 10k users, ~20 min at 1M), which the seeding does not need: its point ids are
    fresh and every payload is stamped with its owner here, as upsert() stamps it."""
    rng = random.Random(seed)
    keywords = KeywordEncoder()
    corpus = _corpus(min(500, max(1, points)), rng, keywords)
    index = EdgeVectorIndex(edge_dir, optimize_threshold=None)
    try:
        for collection in (EPISODES, PASSAGES, FACTS):
            await index.ensure_collection(collection, corpus.dense.shape[1])
    finally:
        await index.close()
    shard = qe.EdgeShard.load(str(edge_builds.current_dir(edge_dir, EPISODES)))
    try:
        return _write_episodes(shard, corpus, points=points, users=users, seed=seed)
    finally:
        shard.flush()
        shard.close()


def _write_episodes(
    shard: qe.EdgeShard, corpus: Corpus, *, points: int, users: int, seed: int
) -> list[tuple[str, str]]:
    questions: list[tuple[str, str]] = []
    batch: list[qe.Point] = []
    for user_number in range(users):
        owner = Owner(LOCAL_TENANT, f"seed{user_number}")
        numbers = list(range(user_number, points, users))
        if not numbers:
            continue
        user_rng = random.Random(seed * 1_000_003 + user_number)
        records, used = episode_records(corpus, owner, numbers, user_rng, np.random.default_rng(user_number))
        batch += [_point(owner, record) for record in records]
        questions.append((owner.user_id, query_for(corpus.bases[used[0]], user_rng)))
        if len(batch) >= _SEED_BATCH:
            shard.update(qe.UpdateOperation.upsert_points(batch))
            batch = []
    if batch:
        shard.update(qe.UpdateOperation.upsert_points(batch))
    return questions


def _point(owner: Owner, record: VectorRecord) -> qe.Point:
    """The point EdgeVectorIndex.upsert() would write for this record."""
    vectors: dict[str, Any] = {
        DENSE_VECTOR: list(record.dense),
        SPARSE_VECTOR: qe.SparseVector(list(record.sparse.indices), list(record.sparse.values)),
    }
    return qe.Point(point_id(record.id), vectors, stamp_window_key(owner, owned_payload(owner, record.payload)))


async def _l0_call(http: httpx.AsyncClient, user: str, message: str, result: ModeResult) -> None:
    started, started_at = time.perf_counter(), time.monotonic()
    try:
        response = await http.post("/v1/recall/auto", json={"user_id": user, "message": message})
        ok = response.status_code == 200
    except httpx.HTTPError:
        ok = False
    if ok:
        result.latencies_ms.append((time.perf_counter() - started) * 1000.0)
        result.started_at.append(started_at)
    else:
        result.errors += 1


async def _l0_load(
    http: httpx.AsyncClient, questions: list[tuple[str, str]], rate: float, stop: asyncio.Event, result: ModeResult
) -> None:
    """Open loop: start one call every 1/rate s until `stop`, then wait for the calls in flight."""
    in_flight: set[asyncio.Task[None]] = set()
    period = 1.0 / rate
    next_at = time.monotonic()
    number = 0
    while not stop.is_set():
        user, message = questions[number % len(questions)]
        task = asyncio.create_task(_l0_call(http, user, message, result))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
        number += 1
        next_at += period
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, next_at - time.monotonic()))
    if in_flight:
        await asyncio.wait(in_flight, timeout=_CALL_TIMEOUT_S)


async def _readyz_probe(base_url: str, stop: asyncio.Event, result: ModeResult) -> None:
    """GET /readyz every 0.25 s; unanswered = no HTTP answer (of any status) within 1 s."""
    last_answer = time.monotonic()
    async with httpx.AsyncClient(base_url=base_url, timeout=_READYZ_TIMEOUT_S) as http:
        while not stop.is_set():
            result.readyz_probes += 1
            try:
                await http.get("/readyz")
                now = time.monotonic()
                result.readyz_longest_silence_s = max(result.readyz_longest_silence_s, now - last_answer)
                last_answer = now
            except httpx.HTTPError:
                result.readyz_unanswered += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=_READYZ_EVERY_S)
    result.readyz_longest_silence_s = max(result.readyz_longest_silence_s, time.monotonic() - last_answer)


async def _client_lag(stop: asyncio.Event, result: ModeResult) -> None:
    """How late this client's event loop wakes from a 10 ms sleep: a stall here is the client's, not
    the server's, and would inflate every call in flight."""
    while not stop.is_set():
        before = time.monotonic()
        await asyncio.sleep(0.01)
        after = time.monotonic()
        lag_ms = (after - before - 0.01) * 1000.0
        result.client_lag_max_ms = max(result.client_lag_max_ms, lag_ms)
        if lag_ms > _CLIENT_STALL_MS:
            result.client_stalls.append((before, after))


def _import_window_modules(data_dir: Path) -> None:
    """Import (and run once) what the window's control uses, before the timed load starts."""
    from services.cli.consolidation import backlog, wait_until_idle  # noqa: F401
    from services.cli.ingest import publish_sessions  # noqa: F401
    from services.cli.stack import all_services
    from services.common.runtime.settings import load_settings

    load_settings(data_dir)
    all_services()


async def _maintenance_window(
    data_dir: Path, mode: str, seed: int, erase: list[str], http_args: dict[str, Any]
) -> None:
    """Ingest one session (its episode crosses the build threshold) or, for compaction, erase `erase`
    users; wait until the pipeline is idle and, in background and compaction mode, the built
    generation has replaced the seeded one."""
    if mode == "compaction":
        async with httpx.AsyncClient(**http_args) as http:
            for user in erase:
                (await http.delete(f"/v1/users/{user}")).raise_for_status()
    else:
        await publish_events(data_dir, local_sessions(1, seed))
    await wait_idle(data_dir, timeout_s=_WINDOW_LIMIT_S)
    if mode not in ("background", "compaction"):
        return
    edge_dir = data_dir / "qdrant-edge"
    deadline = time.monotonic() + _WINDOW_LIMIT_S
    while (edge_dir / EPISODES).exists() or not (edge_dir / f"{EPISODES}.current").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the {mode} swap did not happen within {_WINDOW_LIMIT_S:.0f} s")
        await asyncio.sleep(0.2)


async def run_mode(mode: str, *, points: int, users: int, rate: float, tail_s: float, seed: int) -> ModeResult:
    """One mode, on its own data dir and stack."""
    directory = Path(tempfile.mkdtemp(prefix=f"tiermem-bench-maint-{mode}-"))
    result = ModeResult(mode, points)
    try:
        seeding_started = time.monotonic()
        questions = await seed_edge(directory / "qdrant-edge", points=points, users=users, seed=seed)
        result.seeding_s = time.monotonic() - seeding_started
        port = free_port()
        builds = "never" if mode == "compaction" else mode
        env = {"TIERMEM_VECTOR__INDEX_BUILDS": builds, "TIERMEM_VECTOR__INDEX_BUILD_THRESHOLD": str(max(1, points))}
        stack = EmbeddedStack(directory, port, extra_env=env)
        try:
            key = await stack.start()
            base_url = f"http://127.0.0.1:{port}"
            headers = {"Authorization": f"Bearer {key}"}
            async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=_CALL_TIMEOUT_S) as http:
                for user, message in questions[:5]:  # warm the model and the shard: not timed
                    await http.post("/v1/recall/auto", json={"user_id": user, "message": message})
                await asyncio.to_thread(_import_window_modules, directory)
                freeze_startup_heap()  # this client's own full collections would be timed as the server's
                # Compaction erases the last users; the load asks the others (an erased user answers empty).
                erased_count = int(len(questions) * _ERASED_SHARE) if mode == "compaction" else 0
                erased = [user for user, _ in questions[len(questions) - erased_count :]]
                asked = questions[: len(questions) - erased_count]
                stop = asyncio.Event()
                load = asyncio.gather(
                    _l0_load(http, asked, rate, stop, result),
                    _readyz_probe(base_url, stop, result),
                    _client_lag(stop, result),
                )
                try:
                    await asyncio.sleep(tail_s)
                    result.window_start = time.monotonic()
                    # Its own loop in a thread: its work never delays a call of the load's loop.
                    http_args = {"base_url": base_url, "headers": headers, "timeout": 60.0}
                    window = _maintenance_window(directory, mode, seed, erased, http_args)
                    await asyncio.to_thread(asyncio.run, window)
                    result.window_end = time.monotonic()
                    result.window_s = result.window_end - result.window_start
                    await asyncio.sleep(tail_s)
                finally:
                    stop.set()
                    await load
        finally:
            stack.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return result


async def run_maintenance_bench(
    *, points: int, users: int, rate: float, tail_s: float, modes: tuple[str, ...], seed: int
) -> list[ModeResult]:
    unknown = [mode for mode in modes if mode not in ALL_MODES]
    if unknown or not modes:
        raise ValueError(f"modes must be some of {', '.join(ALL_MODES)}; got {', '.join(modes) or 'none'}")
    if points < 1 or users < 1 or not 0.5 <= rate <= 100 or tail_s < 0:
        raise ValueError("need points >= 1, users >= 1, a rate of 0.5-100 calls/s and tail >= 0 s")
    results: list[ModeResult] = []
    for mode in modes:
        results.append(await run_mode(mode, points=points, users=users, rate=rate, tail_s=tail_s, seed=seed))
    return results


def render_maintenance(results: list[ModeResult], *, rate: float) -> str:
    def ms(value: object) -> str:
        return f"{value:10.1f}" if isinstance(value, float) else f"{'-':>10}"

    lines = [
        f"L0 POST /v1/recall/auto at {rate:g} calls/s through an index-maintenance window (client-side ms)",
        FAST_EMBEDDER_NOTE,
        f"{'mode':<12}{'points':>9}{'calls':>7}{'errors':>7}{'p50':>10}{'p99':>10}{'max':>10}{'>100ms':>8}"
        f"{'readyz ok':>11}{'silence s':>11}{'window s':>10}",
    ]
    for result in results:
        row = result.summary()
        lines.append(
            f"{result.mode:<12}{result.points:>9}{row['calls']:>7}{row['errors']:>7}{ms(row['p50_ms'])}"
            f"{ms(row['p99_ms'])}{ms(row['max_ms'])}{row['calls_over_100ms']:>8}"
            f"{'yes' if row['readyz_answered_throughout'] else 'NO':>11}{row['readyz_longest_silence_s']:>11.2f}"
            f"{row['maintenance_window_s']:>10.1f}"
        )
    baseline = next((r for r in results if r.mode == "inline" and r.latencies_ms), None)
    for result in results:
        if baseline is None or result is baseline or not result.latencies_ms:
            continue
        ratio = max(baseline.latencies_ms) / max(result.latencies_ms)
        lines.append(f"max L0 latency, inline (old) / {result.mode}: {ratio:.1f}x")
    for result in results:
        if result.mode == "inline":
            continue
        worst = max(result.latencies_ms, default=0.0)
        lines.append(
            f"{result.mode}: max L0 ms before / in / after the window: "
            + " / ".join(ms(result.phase_max_ms(phase)).strip() for phase in ("before", "window", "after"))
            + f"; slowest (s from window start, ms): {result.slowest(5)}; client loop lag max"
            f" {result.client_lag_max_ms:.0f} ms; seeding {result.seeding_s:.0f} s"
        )
        clean = result.clean_latencies_ms()
        lines.append(
            f"{result.mode}: without the {len(result.latencies_ms) - len(clean)} calls a client stall"
            f" (> {_CLIENT_STALL_MS:g} ms, {len(result.client_stalls)} of them) overlapped: max"
            f" {ms(max(clean, default=None)).strip()} ms, p99 {ms(percentile(clean, 0.99)).strip()} ms"
        )
        verdict = "met" if worst <= _SLOW_MS and result.readyz_unanswered == 0 and not result.errors else "NOT met"
        lines.append(f"{result.mode}: no L0 over 100 ms and /readyz answered throughout: {verdict}")
    return "\n".join(lines)
