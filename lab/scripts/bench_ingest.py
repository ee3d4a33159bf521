"""Benchmark of ingestion (not a test); the same as `tiermem bench ingest`, with the same options (this
script passes them on). The implementation is lab/tiermem_lab/benchmarks/ingest.py.

    .venv/bin/python lab/scripts/bench_ingest.py                        # 200 synthetic sessions over 20 users
    .venv/bin/python lab/scripts/bench_ingest.py --sessions 30 --users 6 --shape locomo
    .venv/bin/python lab/scripts/bench_ingest.py --locomo ../shared/eval/locomo/locomo-dev.json --form group
"""

from __future__ import annotations

import os
import sys

from services.cli.main import app

if __name__ == "__main__":
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    app(["bench", "ingest", *sys.argv[1:]])
