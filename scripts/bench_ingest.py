"""Benchmark of ingestion (not a test): N synthetic sessions (English and Korean) through the real
pipeline on an embedded stack (nats-server, FalkorDB, Qdrant Edge, offline LLM mode); prints
sessions per second and the ratio of the end-to-end time (publish → every consumer idle) to the time
needed only to embed the texts the pipeline embedded (episode summaries, passages, facts) with the
same model in the same run. Target ratio ≤ 1.3. Same as `tiermem bench ingest`; the implementation is
services/cli/benchmarks/ingest.py.

    .venv/bin/python scripts/bench_ingest.py                       # 200 sessions over 20 users
    .venv/bin/python scripts/bench_ingest.py --sessions 50 --users 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from services.cli.benchmarks.ingest import render_ingest, run_ingest_bench
from services.cli.evaluation.harness import quiet_consumer_logs


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200, help="synthetic sessions to ingest")
    parser.add_argument("--users", type=int, default=20, help="users they are spread over")
    parser.add_argument("--turns", type=int, default=8, help="turns per session")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--work-dir", type=Path, default=None, help="keep the stack's data here")
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    quiet_consumer_logs()
    result = asyncio.run(
        run_ingest_bench(args.sessions, users=args.users, turns=args.turns, seed=args.seed, work_dir=args.work_dir)
    )
    render_ingest(result, Console())
    if args.out is not None:
        args.out.write_text(json.dumps(result.as_dict(), indent=2), encoding="utf-8")


if __name__ == "__main__":
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
