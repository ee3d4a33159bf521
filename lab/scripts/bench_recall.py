"""Benchmark of L0 auto-inject over HTTP (not a test); the same as `tiermem bench recall`, with the same
options. The implementation is lab/tiermem_lab/benchmarks/recall.py.

    .venv/bin/python lab/scripts/bench_recall.py                      # 100k / 10k users, qdrant-local 20k
    .venv/bin/python lab/scripts/bench_recall.py --episodes 5000 --users 500 --qdrant-episodes 2000 --queries 100
"""

from __future__ import annotations

import asyncio
import os

from tiermem_lab.benchmarks.recall import main, parse_args, prepare_work_dir

if __name__ == "__main__":
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    arguments = parse_args()
    asyncio.run(main(arguments, prepare_work_dir(arguments.data_dir)))
